/**
 * `StrataClient`: every operation of the strata serve API over the global `fetch`.
 * @module
 */

import { TransportError, errorFromResponse } from "./errors.js";
import type {
  AddMemoryRequest,
  AgentInfo,
  MemoryAdded,
  PrepareTurnRequest,
  PreparedTurn,
  RecordReplyRequest,
  RecordedReply,
  Removed,
  SearchMemoriesRequest,
  SearchResults,
  SessionHistory,
  Status,
  ToolResultRecorded,
  ToolResultRequest,
} from "./types.js";

export const VERSION = "0.1.0";

/** Where `strata serve` listens unless told otherwise. */
export const DEFAULT_BASE_URL = "http://127.0.0.1:8177";

/** Milliseconds a request may take, connecting included. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** One route of the API as a client method calls it. */
export interface Operation {
  readonly operationId: string;
  readonly method: "GET" | "POST" | "DELETE";
  readonly path: string;
  readonly auth: boolean;
}

function op(operationId: string, method: Operation["method"], path: string, auth = true): Operation {
  return { operationId, method, path, auth };
}

/**
 * For every client method, the route it calls and the `operationId` the OpenAPI document gives
 * that route; the tests compare it with the document the server publishes.
 */
export const OPERATIONS = {
  healthz: op("healthz", "GET", "/healthz", false),
  readyz: op("readyz", "GET", "/readyz", false),
  openapi: op("openapi", "GET", "/openapi.json", false),
  metrics: op("metrics", "GET", "/metrics"),
  agent: op("agent", "GET", "/v1/agent"),
  prepareTurn: op("prepare_turn", "POST", "/v1/sessions/{session_id}/turns"),
  recordReply: op("record_reply", "POST", "/v1/sessions/{session_id}/replies"),
  recordToolResult: op("record_tool_result", "POST", "/v1/sessions/{session_id}/tool-results"),
  session: op("get_session", "GET", "/v1/sessions/{session_id}"),
  resetSession: op("reset_session", "POST", "/v1/sessions/{session_id}/reset"),
  deleteSession: op("delete_session", "DELETE", "/v1/sessions/{session_id}"),
  addMemory: op("add_memory", "POST", "/v1/memories"),
  searchMemories: op("search_memories", "POST", "/v1/memories/search"),
} as const satisfies Record<string, Operation>;

/** The name of a client method that calls the API. */
export type OperationName = keyof typeof OPERATIONS;

/** How to reach the server. */
export interface ClientOptions {
  /** Default `http://127.0.0.1:8177`. */
  baseUrl?: string;
  /** The bearer token (one line of the server's token file). */
  token?: string;
  /** Per request, connecting included; default 30 000. */
  timeoutMs?: number;
  /**
   * The `fetch` to use; default the global one. Pass another to go through a proxy or, on
   * Node, over the server's Unix socket (`unixSocketFetch` of `@strata/client/node`).
   */
  fetch?: typeof globalThis.fetch;
}

/**
 * A client of `strata serve`. Every method returns the server's JSON answer, typed, and
 * rejects with a `StrataError` subclass when the server refuses the request.
 */
export class StrataClient {
  readonly baseUrl: string;
  readonly #token: string | undefined;
  readonly #timeoutMs: number;
  readonly #fetch: typeof globalThis.fetch;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, "");
    this.#token = options.token;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  async #send(name: OperationName, sessionId?: string, body?: unknown): Promise<Response> {
    const operation: Operation = OPERATIONS[name];
    let path = operation.path;
    if (path.includes("{session_id}")) {
      if (!sessionId) {
        throw new TypeError("sessionId must be a non-empty string");
      }
      path = path.replace("{session_id}", encodeURIComponent(sessionId));
    }
    const headers: Record<string, string> = { accept: "application/json" };
    if (operation.auth && this.#token !== undefined) {
      headers["authorization"] = `Bearer ${this.#token}`;
    }
    const init: RequestInit = {
      method: operation.method,
      headers,
      signal: AbortSignal.timeout(this.#timeoutMs),
    };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const url = this.baseUrl + path;
    let response: Response;
    try {
      response = await this.#fetch(url, init);
    } catch (err) {
      throw new TransportError(
        null,
        "connection",
        `${operation.method} ${url} failed before a response arrived (${String(err)}); ` +
          "check that `strata serve` is running at that address and that the timeout is long enough",
      );
    }
    if (!response.ok) {
      throw errorFromResponse(response.status, response.headers, await response.text());
    }
    return response;
  }

  async #json<T>(name: OperationName, sessionId?: string, body?: unknown): Promise<T> {
    const response = await this.#send(name, sessionId, body);
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
  prepareTurn(sessionId: string, body: PrepareTurnRequest = {}): Promise<PreparedTurn> {
    return this.#json("prepareTurn", sessionId, body);
  }

  /** Records the model's reply: its text and its tool calls. */
  recordReply(sessionId: string, body: RecordReplyRequest): Promise<RecordedReply> {
    return this.#json("recordReply", sessionId, body);
  }

  /** Records a tool's output for the call `call_id`. */
  recordToolResult(sessionId: string, body: ToolResultRequest): Promise<ToolResultRecorded> {
    return this.#json("recordToolResult", sessionId, body);
  }

  /** The session's recorded turns, oldest first. */
  session(sessionId: string): Promise<SessionHistory> {
    return this.#json("session", sessionId);
  }

  /** Forgets the session's turns; `removed` says how many. */
  resetSession(sessionId: string): Promise<Removed> {
    return this.#json("resetSession", sessionId);
  }

  /** Deletes the session; `removed` says how many turns went. */
  deleteSession(sessionId: string): Promise<Removed> {
    return this.#json("deleteSession", sessionId);
  }

  /** Stores a long-term memory; answers its id. */
  addMemory(body: AddMemoryRequest): Promise<MemoryAdded> {
    return this.#json("addMemory", undefined, body);
  }

  /** Searches long-term memory; best hits first. */
  searchMemories(body: SearchMemoriesRequest): Promise<SearchResults> {
    return this.#json("searchMemories", undefined, body);
  }
}
