/**
 * Errors of the strata serve API: one class per stable error code, all extending `StrataError`.
 * @module
 */

import type { ErrorCode } from "./types.js";

/**
 * A request the server refused or could not answer. `status` is the HTTP status (`null` when no
 * response arrived), `code` the server's stable error code (or `connection` /
 * `unexpected_response` from the client), `message` what went wrong and what to do, and
 * `retryAfter` the server's `Retry-After` in seconds when it sent one.
 */
export class StrataError extends Error {
  readonly status: number | null;
  readonly code: string;
  readonly retryAfter: number | null;

  constructor(status: number | null, code: string, message: string, retryAfter: number | null = null) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }

  override toString(): string {
    const where = this.status === null ? "no response" : `HTTP ${this.status}`;
    return `${this.name}: ${this.code} (${where}): ${this.message}`;
  }
}

/** `unauthorized`: the bearer token is missing or wrong. */
export class UnauthorizedError extends StrataError {}
/** `invalid_request`: bad JSON, an unknown field or a bad value. */
export class InvalidRequestError extends StrataError {}
/** `unknown_session`: the session has no turns (or never existed). */
export class UnknownSessionError extends StrataError {}
/** `not_found`: no such route. */
export class NotFoundError extends StrataError {}
/** `method_not_allowed`: the route exists, but not with this HTTP method. */
export class MethodNotAllowedError extends StrataError {}
/** `body_too_large`: the request body is over the server's limit. */
export class BodyTooLargeError extends StrataError {}
/** `budget`: the identity and sticky sections do not fit the token budget. */
export class BudgetError extends StrataError {}
/** `message_too_large`: the user's message cannot fit even cut to its head and tail; nothing was recorded. */
export class MessageTooLargeError extends StrataError {}
/** `idempotency_key_reused`: the `Idempotency-Key` was used before for another request on this session. */
export class IdempotencyKeyReusedError extends StrataError {}
/** `tool_not_allowed`: a reply calls a tool that is not on the agent's signed allowlist; nothing was recorded. */
export class ToolNotAllowedError extends StrataError {}
/** `tool_not_offered`: a recorded tool call cannot be run: the session's last prepared turn did not offer its tool, or no connected MCP server offers it as signed now; nothing was run or recorded. */
export class ToolNotOfferedError extends StrataError {}
/** `session_conflict`: the session kept changing while the request was prepared; retry after `retryAfter`. */
export class SessionConflictError extends StrataError {}
/** `store_unavailable`: the server cannot reach its memory store; retry after `retryAfter` seconds. */
export class StoreUnavailableError extends StrataError {}
/** `request_timeout`: the request body did not reach the server within its read timeout. */
export class RequestTimeoutError extends StrataError {}
/** `overloaded`: the server is at its concurrency limit; retry after `retryAfter` seconds. */
export class OverloadedError extends StrataError {}
/** `timeout`: the server gave up on the request after its per-request timeout. */
export class ServerTimeoutError extends StrataError {}
/** `agent_unavailable`: the loaded agent definition has expired or is not yet valid. */
export class AgentUnavailableError extends StrataError {}
/** `tool_call_failed`: the MCP server of a recorded tool call did not complete it (502); nothing was recorded. Not retried: the server may have run the tool before the connection failed, so the caller decides whether to run it again. */
export class ToolCallFailedError extends StrataError {}
/** `internal`: the server failed; its log says why. */
export class InternalServerError extends StrataError {}
/** No usable response: the connection failed or timed out, or the reply was not the API's. */
export class TransportError extends StrataError {}

/** The class of each error code. */
export const ERROR_CLASSES: Readonly<Record<ErrorCode, typeof StrataError>> = {
  unauthorized: UnauthorizedError,
  invalid_request: InvalidRequestError,
  unknown_session: UnknownSessionError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  body_too_large: BodyTooLargeError,
  budget: BudgetError,
  message_too_large: MessageTooLargeError,
  idempotency_key_reused: IdempotencyKeyReusedError,
  tool_not_allowed: ToolNotAllowedError,
  tool_not_offered: ToolNotOfferedError,
  session_conflict: SessionConflictError,
  store_unavailable: StoreUnavailableError,
  request_timeout: RequestTimeoutError,
  overloaded: OverloadedError,
  timeout: ServerTimeoutError,
  agent_unavailable: AgentUnavailableError,
  tool_call_failed: ToolCallFailedError,
  internal: InternalServerError,
};

function isErrorCode(code: string): code is ErrorCode {
  return Object.prototype.hasOwnProperty.call(ERROR_CLASSES, code);
}

/** The error a non-2xx response stands for, from its `{"error": {...}}` body. */
export function errorFromResponse(status: number, headers: Headers, body: string): StrataError {
  const header = headers.get("retry-after");
  const seconds = header === null ? NaN : Number(header);
  const retryAfter = Number.isFinite(seconds) ? seconds : null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    parsed = undefined;
  }
  const error = (parsed as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  if (typeof error?.code !== "string" || typeof error.message !== "string") {
    return new TransportError(
      status,
      "unexpected_response",
      `the server answered HTTP ${status} without a strata error body (${JSON.stringify(body.slice(0, 200))}); ` +
        "check that the base URL points at `strata serve`",
      retryAfter,
    );
  }
  const Class = isErrorCode(error.code) ? ERROR_CLASSES[error.code] : StrataError;
  return new Class(status, error.code, error.message, retryAfter);
}
