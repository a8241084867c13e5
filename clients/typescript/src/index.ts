/**
 * Client of `strata serve`, the HTTP API of strata's session runtime: prepare the provider
 * request for each turn of a conversation, record the model's replies and tool results, add and
 * search long-term memory. No runtime dependencies: it uses the global `fetch`.
 *
 * ```ts
 * const strata = new StrataClient({ baseUrl: "http://127.0.0.1:8177", token });
 * const turn = await strata.prepareTurn("s1", { message: "What does notes.txt say?" });
 * const completion = await openai.chat.completions.create(turn.request);
 * ```
 * @module
 */

export {
  DEFAULT_BASE_URL,
  DEFAULT_MAX_RETRIES,
  DEFAULT_TIMEOUT_MS,
  IDEMPOTENCY_KEY,
  OPERATIONS,
  RETRYABLE_CODES,
  RetryPolicy,
  StrataClient,
  UNTOUCHED_CODES,
  VERSION,
  type CallOptions,
  type ClientOptions,
  type Operation,
  type OperationName,
} from "./client.js";
export * from "./errors.js";
export { requestFor } from "./provider.js";
export type * from "./types.js";
