// (cd clients/typescript && npm ci) builds dist/; then in your project: npm install ../clients/typescript openai
// strata serve --agent agent.signed.json --trust trust.toml --provider openai-chat --model gpt-4o-mini
import OpenAI from "openai";
import { StrataClient } from "@strata/client";
import { readTokenFile } from "@strata/client/node";
import { chatCompletionsRequest } from "@strata/client/openai";

const strata = new StrataClient({ token: await readTokenFile(".strata/serve.token") }); // 127.0.0.1:8177
const turn = await strata.prepareTurn("s1", { message: "What does notes.txt say about deploys?" });
const reply = (await new OpenAI().chat.completions.create(chatCompletionsRequest(turn))).choices[0]!.message;
await strata.recordReply("s1", { text: reply.content ?? "" }); // tool calls too: examples/openai_turn.ts
