/**
 * One turn of a conversation through `strata serve` and the official `openai` package.
 *
 * strata prepares the request (the signed identity in the system channel, tools narrowed to the
 * agent's allowlist, history and memory within budget); the SDK sends it unchanged; the reply,
 * text and tool calls, is recorded back into the session so the next turn sees it. The server
 * must run with `--provider openai-chat`.
 *
 *     strata serve --agent agent.signed.json --trust trust.toml --provider openai-chat --model gpt-4o-mini &
 *     npm run pretest && OPENAI_API_KEY=... node build/examples/openai_turn.js s1 "What does notes.txt say?"
 *
 * `STRATA_URL`, `STRATA_TOKEN_FILE` and `OPENAI_BASE_URL` override the defaults.
 * @module
 */

import { fileURLToPath } from "node:url";

import OpenAI from "openai";
import type { ChatCompletion } from "openai/resources/chat/completions";

import { DEFAULT_BASE_URL, StrataClient, type ToolCall } from "@strata/client";
import { readTokenFile } from "@strata/client/node";
import { chatCompletionsRequest } from "@strata/client/openai";

/** Prepares the turn, sends it with the SDK, records the reply; returns the SDK's completion. */
export async function runTurn(
  strata: StrataClient,
  openai: OpenAI,
  sessionId: string,
  question: string,
): Promise<ChatCompletion> {
  const turn = await strata.prepareTurn(sessionId, { message: question });
  // The prepared body is exactly the parameters of chat.completions.create, typed as such.
  const completion = await openai.chat.completions.create(chatCompletionsRequest(turn));
  const message = completion.choices[0]?.message;
  if (message === undefined) {
    throw new Error(`the completion ${completion.id} has no choice`);
  }
  const toolCalls: ToolCall[] = [];
  for (const call of message.tool_calls ?? []) {
    if (call.type === "function") {
      const args = JSON.parse(call.function.arguments) as Record<string, unknown>;
      toolCalls.push({ id: call.id, name: call.function.name, arguments: args });
    }
  }
  await strata.recordReply(sessionId, { text: message.content ?? "", tool_calls: toolCalls });
  return completion;
}

async function main(argv: string[]): Promise<void> {
  const [sessionId, question] = argv;
  if (sessionId === undefined || question === undefined) {
    throw new Error("usage: node openai_turn.js SESSION_ID QUESTION");
  }
  const token = await readTokenFile(process.env["STRATA_TOKEN_FILE"] ?? ".strata/serve.token");
  const strata = new StrataClient({ baseUrl: process.env["STRATA_URL"] ?? DEFAULT_BASE_URL, token });
  const openai = new OpenAI(); // OPENAI_API_KEY and OPENAI_BASE_URL from the environment
  const completion = await runTurn(strata, openai, sessionId, question);
  const message = completion.choices[0]?.message;
  if (message?.content) {
    console.log(message.content);
  }
  for (const call of message?.tool_calls ?? []) {
    if (call.type === "function") {
      console.log(`[tool call ${call.id}: ${call.function.name}(${call.function.arguments})]`);
    }
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    console.error(String(err));
    process.exit(1);
  });
}
