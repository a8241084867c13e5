/**
 * `StrataClient`: every operation of the strata serve API over the global `fetch`, with an
 * `Idempotency-Key` on every operation that changes a session and retries of passing failures.
 * @module
 */

import { StrataError, TransportError, errorFromResponse } from "./errors.js";
import type {
  AddMemoryRequest,
  AgentInfo,
  MemoryAdded,
  PrepareTurnRequest,
  ArtifactRequest,
  CheckpointRequest,
  Compaction,
  CompactionRequest,
  Compactions,
  CreateGoalRequest,
  DecisionRequest,
  FileRequest,
  Goal,
  Goals,
  LockRequest,
  PreparedTurn,
  RecordReplyRequest,
  RecordedReply,
  Removed,
  SearchMemoriesRequest,
  SearchResults,
  SessionHistory,
  Status,
  ToolResultRecorded,
  ToolRun,
  ToolResultRequest,
} from "./types.js";

export const VERSION = "0.1.0";

/** Where `strata serve` listens unless told otherwise. */
export const DEFAULT_BASE_URL = "http://127.0.0.1:8177";

/** Milliseconds a request may take, connecting included. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** Retries of a call after its first attempt, unless the client is told otherwise. */
export const DEFAULT_MAX_RETRIES = 4;

/** The header that makes an operation changing a session retry-safe. */
export const IDEMPOTENCY_KEY = "Idempotency-Key";

/** Error codes of passing conditions: a later attempt of the same request may succeed. */
export const RETRYABLE_CODES: ReadonlySet<string> = new Set([
  "overloaded",
  "store_unavailable",
  "timeout",
  "session_conflict",
  "request_timeout",
]);

/**
 * Error codes given before the server acted on the request: even an operation that is not safe
 * to repeat (`addMemory`) is retried on them.
 */
export const UNTOUCHED_CODES: ReadonlySet<string> = new Set(["overloaded", "request_timeout"]);

/**
 * One route of the API as a client method calls it. `keyed` operations change a session and
 * carry an `Idempotency-Key`, so that a repeat is answered from the first attempt.
 * `repeatable` operations may be sent again whatever happened to an earlier attempt: reads, and
 * keyed operations. One that is neither (adding a memory) is retried only when the server
 * certainly did not act on it.
 */
export interface Operation {
  readonly operationId: string;
  readonly method: "GET" | "POST" | "DELETE";
  readonly path: string;
  readonly auth: boolean;
  readonly keyed: boolean;
  readonly repeatable: boolean;
}

function op(
  operationId: string,
  method: Operation["method"],
  path: string,
  { auth = true, keyed = false, repeatable = true } = {},
): Operation {
  return { operationId, method, path, auth, keyed, repeatable };
}

/**
 * For every client method, the route it calls and the `operationId` the OpenAPI document gives
 * that route; the tests compare it with the document the server publishes.
 */
export const OPERATIONS = {
  healthz: op("healthz", "GET", "/healthz", { auth: false }),
  readyz: op("readyz", "GET", "/readyz", { auth: false }),
  openapi: op("openapi", "GET", "/openapi.json", { auth: false }),
  metrics: op("metrics", "GET", "/metrics"),
  agent: op("agent", "GET", "/v1/agent"),
  prepareTurn: op("prepare_turn", "POST", "/v1/sessions/{session_id}/turns", { keyed: true }),
  recordReply: op("record_reply", "POST", "/v1/sessions/{session_id}/replies", { keyed: true }),
  recordToolResult: op("record_tool_result", "POST", "/v1/sessions/{session_id}/tool-results", {
    keyed: true,
  }),
  runToolCall: op("run_tool_call", "POST", "/v1/sessions/{session_id}/tool-calls/{call_id}/run", {
    keyed: true,
  }),
  session: op("get_session", "GET", "/v1/sessions/{session_id}"),
  resetSession: op("reset_session", "POST", "/v1/sessions/{session_id}/reset", { keyed: true }),
  deleteSession: op("delete_session", "DELETE", "/v1/sessions/{session_id}", { keyed: true }),
  goals: op("get_goals", "GET", "/v1/sessions/{session_id}/goals"),
  createGoal: op("create_goal", "POST", "/v1/sessions/{session_id}/goals", { keyed: true }),
  addCheckpoint: op("add_checkpoint", "POST", "/v1/sessions/{session_id}/goals/checkpoints", {
    keyed: true,
  }),
  recordDecision: op("record_decision", "POST", "/v1/sessions/{session_id}/goals/decisions", {
    keyed: true,
  }),
  recordArtifact: op("record_artifact", "POST", "/v1/sessions/{session_id}/goals/artifacts", {
    keyed: true,
  }),
  answerLock: op("answer_lock", "POST", "/v1/sessions/{session_id}/goals/locks", { keyed: true }),
  recordFile: op("record_file", "POST", "/v1/sessions/{session_id}/files", { keyed: true }),
  compactSession: op("compact_session", "POST", "/v1/sessions/{session_id}/compactions", {
    keyed: true,
  }),
  compactions: op("list_compactions", "GET", "/v1/sessions/{session_id}/compactions"),
  addMemory: op("add_memory", "POST", "/v1/memories", { repeatable: false }),
  searchMemories: op("search_memories", "POST", "/v1/memories/search"),
} as const satisfies Record<string, Operation>;

/** The name of a client method that calls the API. */
export type OperationName = keyof typeof OPERATIONS;

/** How to reach the server, and how often to try. */
export interface ClientOptions {
  /** Default `http://127.0.0.1:8177`. */
  baseUrl?: string;
  /** The bearer token (one line of the server's token file). */
  token?: string;
  /** Per attempt, connecting included; default 30 000. */
  timeoutMs?: number;
  /**
   * The `fetch` to use; default the global one. Pass another to go through a proxy or, on
   * Node, over the server's Unix socket (`unixSocketFetch` of `@strata/client/node`).
   */
  fetch?: typeof globalThis.fetch;
  /** Retries of a call after its first attempt; default 4, and 0 turns retries off. */
  maxRetries?: number;
  /** The first retry waits between half and all of this; each next one twice as long. Default 200. */
  retryBaseDelayMs?: number;
  /** The longest wait between attempts; a longer `Retry-After` ends the retries. Default 5 000. */
  retryMaxDelayMs?: number;
}

/** Options of one call that changes a session. */
export interface CallOptions {
  /**
   * The call's `Idempotency-Key` (1-255 printable ASCII characters); default a new random UUID.
   * A repeat under the same key and request gets the first answer and changes nothing.
   */
  idempotencyKey?: string;
}

/** When and how long to wait before sending a call again. */
export class RetryPolicy {
  readonly maxRetries: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;

  constructor(maxRetries = DEFAULT_MAX_RETRIES, baseDelayMs = 200, maxDelayMs = 5_000) {
    for (const [name, value] of Object.entries({ maxRetries, baseDelayMs, maxDelayMs })) {
      if (!(value >= 0)) {
        throw new RangeError(`${name} must be a number of at least 0, not ${value}`);
      }
    }
    this.maxRetries = maxRetries;
    this.baseDelayMs = baseDelayMs;
    this.maxDelayMs = maxDelayMs;
  }

  /**
   * Milliseconds to wait before retry `retry` (from 0), or `null` when there is none to make:
   * between half and all of `min(maxDelayMs, baseDelayMs * 2 ** retry)`, never shorter than the
   * server's `Retry-After` (seconds); a `Retry-After` beyond `maxDelayMs` ends the retries,
   * leaving the wait to the caller (the error's `retryAfter`).
   */
  wait(retry: number, retryAfter: number | null): number | null {
    if (retry >= this.maxRetries) {
      return null;
    }
    const floor = retryAfter === null ? 0 : retryAfter * 1000;
    if (floor > this.maxDelayMs) {
      return null;
    }
    const backoff = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** retry);
    return Math.max(backoff * (0.5 + Math.random() / 2), floor);
  }

  /**
   * The wait before retrying `operation` after the refusal `error`, or `null`. Passing
   * conditions are retried: a retryable code, or a 503 without the API's error body (as a proxy
   * in front may give); an operation that is not safe to send again only when the server did
   * not act on it at all.
   */
  afterRefusal(operation: Operation, retry: number, error: StrataError): number | null {
    const passing =
      UNTOUCHED_CODES.has(error.code) ||
      (operation.repeatable &&
        (RETRYABLE_CODES.has(error.code) || (error.status === 503 && error.code === "unexpected_response")));
    return passing ? this.wait(retry, error.retryAfter) : null;
  }

  /**
   * The wait before retrying `operation` after it got no response, or `null`. A refused
   * connection (nothing was sent) is retried; a connection that broke before the answer came,
   * when the operation is safe to send again. The client's own timeout, and an abort, are final.
   */
  afterFailure(operation: Operation, retry: number, err: unknown): number | null {
    const kind = failureKind(err);
    return kind === "unsent" || (kind === "lost" && operation.repeatable) ? this.wait(retry, null) : null;
  }
}

/** Error codes of a connection that was never made: the request was not sent. */
const UNSENT = new Set(["ECONNREFUSED", "ENOENT", "EADDRNOTAVAIL"]);
/** Error codes of a connection that broke: the request may have reached the server. */
const LOST = new Set(["ECONNRESET", "EPIPE", "ECONNABORTED", "UND_ERR_SOCKET", "UND_ERR_CLOSED"]);

/** What a rejected `fetch` says of the request: not sent, lost on the way, or neither. */
function failureKind(err: unknown): "unsent" | "lost" | null {
  const seen = new Set<unknown>();
  const pending: unknown[] = [err];
  while (pending.length > 0) {
    const e = pending.pop();
    if (typeof e !== "object" || e === null || seen.has(e)) {
      continue;
    }
    seen.add(e);
    const { name, code, cause, errors } = e as {
      name?: unknown;
      code?: unknown;
      cause?: unknown;
      errors?: unknown;
    };
    if (name === "TimeoutError" || name === "AbortError") {
      return null;
    }
    if (typeof code === "string" && UNSENT.has(code)) {
      return "unsent";
    }
    if (typeof code === "string" && LOST.has(code)) {
      return "lost";
    }
    pending.push(cause, ...(Array.isArray(errors) ? errors : []));
  }
  return null;
}

function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/**
 * A client of `strata serve`. Every method returns the server's JSON answer, typed, and
 * rejects with a `StrataError` subclass when the server refuses the request.
 *
 * Every method that changes a session sends an `Idempotency-Key` (`idempotencyKey`, else a new
 * random UUID per call) and the same key on each retry, so a repeat is answered from the first
 * attempt and changes nothing. A call is retried up to `maxRetries` times on a passing refusal
 * (503 `overloaded`, `store_unavailable` or `timeout`, 409 `session_conflict`, 408
 * `request_timeout`) and on a refused or broken connection, after an exponential, jittered wait
 * that honours the server's `Retry-After`. The client's own timeout is not retried.
 */
export class StrataClient {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  readonly #token: string | undefined;
  readonly #timeoutMs: number;
  readonly #fetch: typeof globalThis.fetch;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, "");
    this.retry = new RetryPolicy(options.maxRetries, options.retryBaseDelayMs, options.retryMaxDelayMs);
    this.#token = options.token;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** The successful response of the call, after any retries it needed. */
  async #send(
    name: OperationName,
    sessionId?: string,
    body?: unknown,
    call?: CallOptions,
    callId?: string,
  ): Promise<Response> {
    const operation: Operation = OPERATIONS[name];
    let path = operation.path;
    if (path.includes("{session_id}")) {
      if (!sessionId) {
        throw new TypeError("sessionId must be a non-empty string");
      }
      path = path.replace("{session_id}", encodeURIComponent(sessionId));
    }
    if (path.includes("{call_id}")) {
      if (!callId) {
        throw new TypeError("callId must be a non-empty string");
      }
      path = path.replace("{call_id}", encodeURIComponent(callId));
    }
    const headers: Record<string, string> = { accept: "application/json" };
    if (operation.auth && this.#token !== undefined) {
      headers["authorization"] = `Bearer ${this.#token}`;
    }
    if (call?.idempotencyKey !== undefined && !operation.keyed) {
      throw new TypeError(`${name} takes no idempotency key`);
    }
    if (operation.keyed) {
      headers[IDEMPOTENCY_KEY.toLowerCase()] = call?.idempotencyKey ?? crypto.randomUUID();
    }
    let text: string | undefined;
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      text = JSON.stringify(body);
    }
    const url = this.baseUrl + path;
    for (let retry = 0; ; retry++) {
      // The same body and headers on every attempt; a fresh timeout for each.
      const init: RequestInit = {
        method: operation.method,
        headers,
        signal: AbortSignal.timeout(this.#timeoutMs),
      };
      if (text !== undefined) {
        init.body = text;
      }
      let wait: number | null;
      let failure: StrataError;
      try {
        const response = await this.#fetch(url, init);
        if (response.ok) {
          return response;
        }
        failure = errorFromResponse(response.status, response.headers, await response.text());
        wait = this.retry.afterRefusal(operation, retry, failure);
      } catch (err) {
        const tries = retry > 0 ? ` (attempt ${retry + 1})` : "";
        failure = new TransportError(
          null,
          "connection",
          `${operation.method} ${url} failed before a response arrived${tries} (${describe(err)}); ` +
            "check that `strata serve` is running at that address and that the timeout is long enough",
        );
        wait = this.retry.afterFailure(operation, retry, err);
      }
      if (wait === null) {
        throw failure;
      }
      await sleep(wait);
    }
  }

  async #json<T>(
    name: OperationName,
    sessionId?: string,
    body?: unknown,
    call?: CallOptions,
    callId?: string,
  ): Promise<T> {
    const response = await this.#send(name, sessionId, body, call, callId);
    const text = await response.text();
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw new TransportError(
        response.status,
        "unexpected_response",
        `the server answered ${OPERATIONS[name].path} with a body that is not JSON (${String(err)}); ` +
          "check that the base URL points at `strata serve`",
      );
    }
  }

  /** Whether the process is up (no token needed). */
  healthz(): Promise<Status> {
    return this.#json("healthz");
  }

  /** Whether the agent is valid now (no token needed); `AgentUnavailableError` when not. */
  readyz(): Promise<Status> {
    return this.#json("readyz");
  }

  /** The server's OpenAPI 3.1 document (no token needed). */
  openapi(): Promise<Record<string, unknown>> {
    return this.#json("openapi");
  }

  /** The server's metrics in the Prometheus text format. */
  async metrics(): Promise<string> {
    return (await this.#send("metrics")).text();
  }

  /** The verified agent the server serves: id, version, identity digest, signers, validity. */
  agent(): Promise<AgentInfo> {
    return this.#json("agent");
  }

  /**
   * With `message`, records the user's message and prepares the provider request for it;
   * without, prepares the next request after tool results (`UnknownSessionError` if the
   * session has no turns). `request` of the answer is the body for the provider's official SDK.
   */
  prepareTurn(sessionId: string, body: PrepareTurnRequest = {}, call?: CallOptions): Promise<PreparedTurn> {
    return this.#json("prepareTurn", sessionId, body, call);
  }

  /** Records the model's reply: its text and its tool calls. */
  recordReply(sessionId: string, body: RecordReplyRequest, call?: CallOptions): Promise<RecordedReply> {
    return this.#json("recordReply", sessionId, body, call);
  }

  /** Records a tool's output for the call `call_id`. */
  recordToolResult(
    sessionId: string,
    body: ToolResultRequest,
    call?: CallOptions,
  ): Promise<ToolResultRecorded> {
    return this.#json("recordToolResult", sessionId, body, call);
  }

  /**
   * Runs the recorded tool call `callId` through the live MCP server that announces its tool,
   * with exactly the recorded arguments, and records the server's answer as the call's result.
   * A retry with the same `idempotencyKey` gets the first answer and runs nothing. The output
   * is the server's data, never an instruction.
   */
  runToolCall(sessionId: string, callId: string, call?: CallOptions): Promise<ToolRun> {
    return this.#json("runToolCall", sessionId, undefined, call, callId);
  }

  /** The session's recorded turns, oldest first. */
  session(sessionId: string): Promise<SessionHistory> {
    return this.#json("session", sessionId);
  }

  /** Forgets the session's turns; `removed` says how many. */
  resetSession(sessionId: string, call?: CallOptions): Promise<Removed> {
    return this.#json("resetSession", sessionId, undefined, call);
  }

  /** Deletes the session; `removed` says how many turns went. */
  deleteSession(sessionId: string, call?: CallOptions): Promise<Removed> {
    return this.#json("deleteSession", sessionId, undefined, call);
  }

  /** The session's goals, oldest first, and the locks the model proposed that wait for `answerLock`. */
  goals(sessionId: string): Promise<Goals> {
    return this.#json("goals", sessionId);
  }

  /** Creates a goal and makes it the active one (an active goal is paused). */
  createGoal(sessionId: string, body: CreateGoalRequest, call?: CallOptions): Promise<Goal> {
    return this.#json("createGoal", sessionId, body, call);
  }

  /** Adds a checkpoint to `goal` (default: the active goal); answers the goal. */
  addCheckpoint(sessionId: string, body: CheckpointRequest, call?: CallOptions): Promise<Goal> {
    return this.#json("addCheckpoint", sessionId, body, call);
  }

  /** Records an unlocked decision with its `rationale`; answers the goal. */
  recordDecision(sessionId: string, body: DecisionRequest, call?: CallOptions): Promise<Goal> {
    return this.#json("recordDecision", sessionId, body, call);
  }

  /** Records an artifact with its `kind` (file, test or documentation); answers the goal. */
  recordArtifact(sessionId: string, body: ArtifactRequest, call?: CallOptions): Promise<Goal> {
    return this.#json("recordArtifact", sessionId, body, call);
  }

  /**
   * Confirms (`confirm: true`) or refuses the lock the model proposed for a decision. Only this
   * call locks: a marker in a reply only proposes.
   */
  answerLock(sessionId: string, body: LockRequest, call?: CallOptions): Promise<Goal> {
    return this.#json("answerLock", sessionId, body, call);
  }

  /** Records that a tool of the session read, modified or deleted a file. */
  recordFile(sessionId: string, body: FileRequest, call?: CallOptions): Promise<ToolResultRecorded> {
    return this.#json("recordFile", sessionId, body, call);
  }

  /**
   * Stores a summary of the session's entries `first_seq..=last_seq` (their `seq`): later turns
   * carry it, as data, in place of them; the entries stay. The range must end before the newest
   * user message, keep each tool call with its result and overlap no stored summary; otherwise
   * nothing is stored (`InvalidRequestError`).
   */
  compactSession(sessionId: string, body: CompactionRequest, call?: CallOptions): Promise<Compaction> {
    return this.#json("compactSession", sessionId, body, call);
  }

  /** The session's stored summaries, oldest range first. */
  compactions(sessionId: string): Promise<Compactions> {
    return this.#json("compactions", sessionId);
  }

  /**
   * Stores a long-term memory; answers its id. The server does not deduplicate memories, so
   * this is retried only when the server did not act on the request.
   */
  addMemory(body: AddMemoryRequest): Promise<MemoryAdded> {
    return this.#json("addMemory", undefined, body);
  }

  /** Searches long-term memory; best hits first. */
  searchMemories(body: SearchMemoriesRequest): Promise<SearchResults> {
    return this.#json("searchMemories", undefined, body);
  }
}

/** A rejected `fetch`'s error with its causes, which hold what went wrong on the socket. */
function describe(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err; e !== undefined && parts.length < 4; e = (e as { cause?: unknown }).cause) {
    const code = (e as { code?: unknown }).code;
    parts.push(typeof code === "string" && !String(e).includes(code) ? `${String(e)} [${code}]` : String(e));
    if (typeof e !== "object" || e === null) {
      break;
    }
  }
  return parts.join(": ");
}
