/**
 * The prepared request typed as the parameters of the official `openai` package:
 * `import { chatCompletionsRequest, responsesRequest } from "@strata/client/openai"`. Types only
 * come from `openai` (an optional peer dependency); nothing of it is loaded at run time.
 *
 * ```ts
 * const completion = await new OpenAI().chat.completions.create(chatCompletionsRequest(turn));
 * ```
 * @module
 */

import type { ChatCompletionCreateParamsNonStreaming } from "openai/resources/chat/completions";
import type { ResponseCreateParamsNonStreaming } from "openai/resources/responses/responses";

import { requestFor } from "./provider.js";
import type { PreparedTurn } from "./types.js";

/** The request of a turn prepared for `openai-chat`: the body of `chat.completions.create`. */
export function chatCompletionsRequest(turn: PreparedTurn): ChatCompletionCreateParamsNonStreaming {
  return requestFor(turn, "openai-chat") as unknown as ChatCompletionCreateParamsNonStreaming;
}

/** The request of a turn prepared for `openai-responses`: the body of `responses.create`. */
export function responsesRequest(turn: PreparedTurn): ResponseCreateParamsNonStreaming {
  return requestFor(turn, "openai-responses") as unknown as ResponseCreateParamsNonStreaming;
}
