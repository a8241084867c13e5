/**
 * The prepared request typed as the parameters of the official `@anthropic-ai/sdk` package:
 * `import { messagesRequest } from "@strata/client/anthropic"`. Types only come from the SDK (an
 * optional peer dependency); nothing of it is loaded at run time.
 *
 * ```ts
 * const message = await new Anthropic().messages.create(messagesRequest(turn));
 * ```
 * @module
 */

import type { MessageCreateParamsNonStreaming } from "@anthropic-ai/sdk/resources/messages";

import { requestFor } from "./provider.js";
import type { PreparedTurn } from "./types.js";

/** The request of a turn prepared for `anthropic`: the body of `messages.create`. */
export function messagesRequest(turn: PreparedTurn): MessageCreateParamsNonStreaming {
  return requestFor(turn, "anthropic") as unknown as MessageCreateParamsNonStreaming;
}
