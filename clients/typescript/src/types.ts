/**
 * Request and response types of the strata serve API.
 * @module
 */

export interface Status {
  status: string;
}

export interface AgentInfo {
  agent_id: string;
  version: number;
  identity_digest: string;
  signers: string[];
  not_before: string | null;
  not_after: string | null;
  provider: string;
  model: string;
}

export interface AnnouncedTool {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
  server?: string;
}

export interface PrepareTurnRequest {
  message?: string;
  mode?: string;
  path?: string;
  context_window?: number;
  tools?: AnnouncedTool[];
  sections?: Record<string, unknown>[];
}

export interface PreparedTurn {
  session_id: string;
  provider: string;
  request: Record<string, unknown>;
  report: Record<string, unknown>;
  identity_digest: string;
  receipt: Record<string, unknown> | null;
}

export interface ToolCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

export interface RecordReplyRequest {
  text?: string;
  tool_calls?: ToolCall[];
}

export interface RecordedReply {
  goals: Record<string, unknown>;
}

export interface ToolResultRequest {
  call_id: string;
  output: string;
}

export interface ToolResultRecorded {
  recorded: boolean;
}

export interface SessionTurn {
  seq: number;
  role: "user" | "assistant" | "tool_call" | "tool_result";
  content: string;
  call_id: string | null;
}

export interface SessionHistory {
  session_id: string;
  turns: SessionTurn[];
}

export interface Removed {
  removed: number;
}

export interface AddMemoryRequest {
  content: string;
  tags?: string[];
}

export interface MemoryAdded {
  id: string;
}

export interface SearchMemoriesRequest {
  query: string;
  limit?: number;
}

export interface MemoryHit {
  id: string;
  content: string;
  score: number;
  tags: string[];
}

export interface SearchResults {
  results: MemoryHit[];
}
