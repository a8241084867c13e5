/**
 * The prepared request typed as each official SDK's parameters: for a server writing for each
 * provider, the SDK sends exactly the prepared body (to a loopback recorder) with no cast in
 * between, and asking for another provider's request is refused.
 * @module
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, it } from "node:test";

import Anthropic from "@anthropic-ai/sdk";
import type { Message } from "@anthropic-ai/sdk/resources/messages";
import OpenAI from "openai";
import type { ChatCompletion } from "openai/resources/chat/completions";
import type { Response as OpenAIResponse } from "openai/resources/responses/responses";

import {
  StrataClient,
  requestFor,
  type AnnouncedTool,
  type PreparedTurn,
  type Provider,
} from "@strata/client";
import { messagesRequest } from "@strata/client/anthropic";
import { chatCompletionsRequest, responsesRequest } from "@strata/client/openai";
import { ANTHROPIC_MODEL, MODEL, Server, TOKEN } from "./server.js";

const FILE_READ: AnnouncedTool = {
  name: "file_read",
  description: "Read a file in the workspace.",
  parameters: {
    type: "object",
    properties: { path: { type: "string", description: "Path relative to the workspace." } },
    required: ["path"],
  },
};

/** A loopback server that keeps each request and answers with `canned`. */
async function recorder(canned: unknown): Promise<{
  url: string;
  requests: { path: string; body: unknown }[];
  close: () => Promise<void>;
}> {
  const requests: { path: string; body: unknown }[] = [];
  const http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      requests.push({ path: req.url ?? "", body: JSON.parse(Buffer.concat(chunks).toString()) });
      const reply = JSON.stringify(canned);
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(reply) });
      res.end(reply);
    });
  });
  await new Promise<void>((done) => http.listen(0, "127.0.0.1", done));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise<void>((done) => http.close(() => done())),
  };
}

/** Prepares a turn on a server writing for `provider`, hands it to `send`, stops the server. */
async function withTurn(provider: Provider, send: (turn: PreparedTurn) => Promise<void>): Promise<void> {
  const server = await Server.start(undefined, provider);
  try {
    const client = new StrataClient({ baseUrl: server.url, token: TOKEN });
    const turn = await client.prepareTurn(`ts-${randomUUID()}`, {
      message: "What does notes.txt say?",
      tools: [FILE_READ],
    });
    assert.equal(turn.provider, provider);
    await send(turn);
  } finally {
    assert.equal(await server.stop(), 0, server.stderr());
  }
}

describe("the prepared request, typed for the official SDKs", () => {
  it("is the body of Anthropic messages.create", async () => {
    const canned = {
      id: "msg_canned",
      type: "message",
      role: "assistant",
      model: ANTHROPIC_MODEL,
      content: [{ type: "text", text: "Let me look." }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 3 },
    };
    const rec = await recorder(canned);
    try {
      await withTurn("anthropic", async (turn) => {
        const claude = new Anthropic({ baseURL: rec.url, apiKey: "test", maxRetries: 0 });
        const message: Message = await claude.messages.create(messagesRequest(turn));
        assert.equal(message.id, "msg_canned");
        assert.deepEqual(rec.requests, [{ path: "/v1/messages", body: turn.request }]);
        assert.throws(() => chatCompletionsRequest(turn), /prepared for "anthropic", not "openai-chat"/);
      });
    } finally {
      await rec.close();
    }
  });

  it("is the body of OpenAI chat.completions.create", async () => {
    const canned = {
      id: "chatcmpl-canned",
      object: "chat.completion",
      created: 1_700_000_000,
      model: MODEL,
      choices: [
        {
          index: 0,
          finish_reason: "stop",
          logprobs: null,
          message: { role: "assistant", content: "Let me look.", refusal: null },
        },
      ],
    };
    const rec = await recorder(canned);
    try {
      await withTurn("openai-chat", async (turn) => {
        const openai = new OpenAI({ baseURL: `${rec.url}/v1`, apiKey: "test", maxRetries: 0 });
        const completion: ChatCompletion = await openai.chat.completions.create(chatCompletionsRequest(turn));
        assert.equal(completion.id, "chatcmpl-canned");
        assert.deepEqual(rec.requests, [{ path: "/v1/chat/completions", body: turn.request }]);
        assert.throws(() => responsesRequest(turn), /prepared for "openai-chat", not "openai-responses"/);
      });
    } finally {
      await rec.close();
    }
  });

  it("is the body of OpenAI responses.create", async () => {
    const canned = {
      id: "resp_canned",
      object: "response",
      created_at: 1_700_000_000,
      model: MODEL,
      status: "completed",
      output: [
        {
          type: "message",
          id: "msg_canned",
          status: "completed",
          role: "assistant",
          content: [{ type: "output_text", text: "Let me look.", annotations: [] }],
        },
      ],
    };
    const rec = await recorder(canned);
    try {
      await withTurn("openai-responses", async (turn) => {
        const openai = new OpenAI({ baseURL: `${rec.url}/v1`, apiKey: "test", maxRetries: 0 });
        const response: OpenAIResponse = await openai.responses.create(responsesRequest(turn));
        assert.equal(response.id, "resp_canned");
        assert.equal(response.output_text, "Let me look.");
        assert.deepEqual(rec.requests, [{ path: "/v1/responses", body: turn.request }]);
        assert.throws(() => messagesRequest(turn), /prepared for "openai-responses", not "anthropic"/);
        assert.equal(requestFor(turn, "openai-responses"), turn.request);
      });
    } finally {
      await rec.close();
    }
  });
});
