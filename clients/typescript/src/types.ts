/**
 * Request and response types of the strata serve API, by their client names. Each one is a
 * schema of the OpenAPI document, from the generated `openapi.ts`, so the types cannot drift
 * from the server's.
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
/** A prepared turn; `request` is the provider request body, ready for the official SDK. */
export type PreparedTurn = Schemas["TurnResponse"];
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
