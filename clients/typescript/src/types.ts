/**
 * Request and response types of the strata serve API, by their client names. Each one is a
 * schema of the OpenAPI document, from the generated `openapi.ts`, so the types cannot drift
 * from the server's; the assembly report, an open object in the document, is written out here
 * as the server serialises it (a test holds it to real reports).
 * @module
 */

import type { components } from "./openapi.js";

type Schemas = components["schemas"];

/** `healthz` and `readyz`. */
export type Status = Schemas["Status"];
/** The verified agent the server serves. */
export type AgentInfo = Schemas["AgentInfo"];
/** The outcome of the server's last attempt to reload the agent definition. */
export type ReloadInfo = Schemas["ReloadInfo"];
/** A tool offered for one turn; narrowed by the server to the agent's signed allowlist. */
export type AnnouncedTool = Schemas["ToolSpec"];
/** The body of `prepareTurn`. */
export type PrepareTurnRequest = Schemas["TurnRequest"];
/** A skill activated for one turn: shown as the section `skill/<id>`. */
export type Skill = Schemas["SkillSpec"];
/** Who sent a turn's message, through which channel. */
export type Inbound = Schemas["InboundSpec"];
/** A session's goals and the locks waiting for the caller's answer. */
export type Goals = Schemas["GoalsView"];
/** A goal of a session. */
export type Goal = Schemas["GoalView"];
/** A decision whose lock the model proposed, waiting for `answerLock`. */
export type PendingLock = Schemas["PendingLock"];
/** The body of `createGoal`. */
export type CreateGoalRequest = Schemas["GoalRequest"];
/** The body of `addCheckpoint`. */
export type CheckpointRequest = Schemas["CheckpointRequest"];
/** The body of `recordDecision`. */
export type DecisionRequest = Schemas["DecisionRequest"];
/** The body of `recordArtifact`. */
export type ArtifactRequest = Schemas["ArtifactRequest"];
/** The body of `answerLock`. */
export type LockRequest = Schemas["LockRequest"];
/** The body of `recordFile`. */
export type FileRequest = Schemas["FileRequest"];
/**
 * A prepared turn; `request` is the provider request body, ready for the official SDK (typed as
 * its parameters by `@strata/client/openai` and `@strata/client/anthropic`), and `report` says
 * what the assembly kept, cut and dropped, and why.
 */
export type PreparedTurn = Omit<Schemas["TurnResponse"], "report"> & { report: AssemblyReport };
/** The request formats `strata serve --provider` writes. */
export type Provider = "anthropic" | "openai-chat" | "openai-responses";
/** A tool call in the model's reply, as the provider gave it. */
export type ToolCall = Schemas["ToolCallSpec"];
/** The body of `recordReply`. */
export type RecordReplyRequest = Schemas["ReplyRequest"];
/** What recording a reply did to the session's goals. */
export type RecordedReply = Schemas["ReplyResponse"];
/** The body of `recordToolResult`. */
export type ToolResultRequest = Schemas["ToolResultRequest"];
/** The answer of `recordToolResult`. */
export type ToolResultRecorded = Schemas["Recorded"];
/** The body of `compactSession`: a summary of a range of the session's entries. */
export type CompactionRequest = Schemas["CompactionRequest"];
/** A stored summary and where it came from (the answer of `compactSession`). */
export type Compaction = Schemas["CompactionView"];
/** The answer of `compactions`: a session's summaries, oldest range first. */
export type Compactions = Schemas["CompactionsView"];
/** The answer of `runToolCall`: the MCP server's result, recorded as the call's result. */
export type ToolRun = Schemas["ToolRunView"];
/** One recorded turn of a session (`user`, `assistant`, `tool_call` or `tool_result`). */
export type SessionTurn = Schemas["TurnEntry"];
/** A session's recorded turns, oldest first. */
export type SessionHistory = Schemas["SessionView"];
/** The answer of `resetSession` and `deleteSession`. */
export type Removed = Schemas["Removed"];
/** The body of `addMemory`. */
export type AddMemoryRequest = Schemas["MemoryRequest"];
/** The answer of `addMemory`. */
export type MemoryAdded = Schemas["MemoryCreated"];
/** The body of `searchMemories`. */
export type SearchMemoriesRequest = Schemas["SearchRequest"];
/** A long-term memory found by a search. */
export type MemoryHit = Schemas["MemoryHit"];
/** The answer of `searchMemories`, best first. */
export type SearchResults = Schemas["SearchResponse"];
/** The stable error codes of the API. */
export type ErrorCode = Schemas["ErrorCode"];
/** The body of every error response. */
export type ErrorBody = Schemas["ErrorBody"];

/** The six layers, in authority order: a smaller layer outranks a larger one. */
export type Layer =
  "core" | "characteristics" | "shared" | "delegated" | "working_memory" | "long_term_memory";
/** The context tier chosen from the model's context window. */
export type Tier = "T1" | "T2" | "T3" | "T4" | "T5";

/** The kind of source a section came from; `server` names an MCP server. */
export interface SourceKind {
  kind: "static" | "config" | "mcp" | "store" | "caller";
  server?: string;
}

/**
 * Where a section came from: its producer, content hash, and, when known, the record id in its
 * source, when it was recorded (Unix ms) and its retrieval score.
 */
export interface Provenance {
  source: SourceKind;
  name: string;
  content_hash: string;
  record?: string;
  created_ms?: number;
  score?: number;
}

/** What every kind of section report holds. */
export interface SectionReportBase {
  id: string;
  layer: Layer;
  /** Tokens in the output (0 unless kept or cut). */
  tokens: number;
  chars: number;
  /** Bytes of its content as offered, whatever happened to it. */
  bytes: number;
  /** Kept in budget left over after a more important unit was dropped. */
  filled?: boolean;
  /** The role of a working-memory turn. */
  role?: "user" | "assistant" | "tool_call" | "tool_result";
  sticky: boolean;
  stable: boolean;
  provenance: Provenance;
}

/** A section rendered whole. */
export interface KeptSection extends SectionReportBase {
  status: "kept";
}

/**
 * A section cut to fit: `head_bytes` from its start and `tail_bytes` from its end were kept of
 * its `bytes`; `full_tokens` are its tokens whole, when they were counted.
 */
export interface CutSection extends SectionReportBase {
  status: "cut";
  head_bytes: number;
  tail_bytes: number;
  full_tokens?: number;
}

/** A section left out to fit the budget; `reason` says which limit. */
export interface DroppedSection extends SectionReportBase {
  status: "dropped";
  reason: string;
}

/** A section not taking part in this mode or path; `reason` says why. */
export interface FilteredSection extends SectionReportBase {
  status: "filtered";
  reason: string;
}

/** A section that lost the conflict `on` a key to `by_id` of the higher `by_layer`. */
export interface OverriddenSection extends SectionReportBase {
  status: "overridden";
  by_layer: Layer;
  by_id: string;
  on: string;
}

/** What happened to one runtime section; `status` tells the kinds apart. */
export type SectionReport = KeptSection | CutSection | DroppedSection | FilteredSection | OverriddenSection;

/** Totals of one runtime layer. */
export interface LayerReport {
  layer: Layer;
  tokens: number;
  budget: number | null;
  kept: number;
  cut: number;
  dropped: number;
  dropped_bytes: number;
}

/** Where a cacheable prefix ends: a byte and token offset, after a layer. */
export interface Breakpoint {
  byte: number;
  token: number;
  after_layer: Layer;
}

/** A conflict resolved for the higher layer: `[layer, id]` of the winner and the loser. */
export interface Conflict {
  on: string;
  winner: [Layer, string];
  loser: [Layer, string];
}

/** A section that never reached the assembler (a failed or slow contributor). */
export interface Omission {
  id: string;
  layer: Layer;
  reason: string;
}

/** The free text removed from one unpinned tool's announced schema (JSON pointers). */
export interface SchemaTextRemoved {
  tool: string;
  paths: string[];
}

/**
 * The tools after narrowing: those offered, those refused (name, reason in words, cause as a
 * code), and the free text removed from announced schemas (absent when nothing was removed).
 */
export interface ToolsReport {
  effective: string[];
  refused: { name: string; reason: string; cause: string }[];
  schema_text_removed?: SchemaTextRemoved[];
}

/** The provider request's token count (`exact` or `estimate`) and caching. */
export interface RequestReport {
  provider: string;
  count: "exact" | "estimate";
  system_tokens: number;
  tool_tokens: number;
  message_tokens: number;
  margin_pct: number;
  total_tokens: number;
  messages: number;
  stable_prefix_tokens: number;
  expected_cached_tokens: number;
  min_cacheable_tokens: number;
}

/**
 * The report of one assembly: the budget and what was used of it, per layer and per section
 * what was kept, cut, dropped and why, conflicts, tools, and the provider request's count
 * (`request`, absent for plain text).
 */
export interface AssemblyReport {
  agent_id: string;
  identity_digest: string;
  tokenizer: string;
  tier: Tier;
  total_tokens: number;
  response_reserve: number;
  prompt_budget: number;
  used_tokens: number;
  idle_tokens: number;
  chars: number;
  max_total_chars: number | null;
  identity_tokens: number;
  stable_prefix: Breakpoint;
  breakpoints: Breakpoint[];
  layers: LayerReport[];
  sections: SectionReport[];
  conflicts: Conflict[];
  tools: ToolsReport;
  request?: RequestReport;
  omissions: Omission[];
}
