/**
 * The client against a real `strata serve` (OpenAI Chat Completions requests): a tool-using
 * conversation, memory, reset and delete, refusals, and the OpenAI example sending a prepared
 * request through the official SDK to a loopback recorder.
 * @module
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer, type Server as HttpServer } from "node:http";
import { createServer as createTcpServer } from "node:net";
import type { AddressInfo, Socket } from "node:net";
import { join } from "node:path";
import { writeFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";

import OpenAI from "openai";

import {
  BodyTooLargeError,
  InvalidRequestError,
  StrataClient,
  StrataError,
  TransportError,
  UnauthorizedError,
  UnknownSessionError,
  type AnnouncedTool,
  type PreparedTurn,
  type ToolCall,
} from "@strata/client";
import { readTokenFile } from "@strata/client/node";
import { runTurn } from "../examples/openai_turn.js";
import { DEMO_AGENT, HASHED_TOKEN, MODEL, PACKAGE, Server, TOKEN } from "./server.js";

type Message = {
  role: string;
  content?: unknown;
  tool_calls?: { id: string; type: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
};

const QUESTION = "What does notes.txt say about deploys?";
// The demo agent pins file_read's argument schema in its signed definition.
const FILE_READ: AnnouncedTool = {
  name: "file_read",
  description: "Read a file in the workspace.",
  parameters: {
    type: "object",
    properties: { path: { type: "string", description: "Path relative to the workspace." } },
    required: ["path"],
  },
};
const CALL: ToolCall = { id: "call_01", name: "file_read", arguments: { path: "notes.txt" } };
const RESULT = "Deploys freeze on Fridays at noon.";
const ANSWER = "The notes say deploys freeze on Fridays at noon.";
const FOLLOW_UP = "Thanks. Is Thursday afternoon fine?";

function textOf(content: unknown): string {
  if (typeof content === "string") {
    return content;
  }
  if (Array.isArray(content)) {
    return content.map((part: { text?: string }) => part.text ?? "").join("");
  }
  return "";
}

function messagesOf(turn: PreparedTurn, sessionId: string, digest: string): Message[] {
  assert.equal(turn.session_id, sessionId);
  assert.equal(turn.provider, "openai-chat");
  assert.equal(turn.identity_digest, digest);
  assert.equal(turn.request["model"], MODEL);
  const messages = turn.request["messages"] as Message[];
  assert.ok(["system", "developer"].includes(messages[0]!.role), "the signed text comes first");
  return messages;
}

/** Index of the assistant message with the native tool call; the tool message follows it. */
function toolExchange(messages: Message[]): number {
  const calls = messages.flatMap((m, i) => (m.tool_calls ?? []).map((c) => ({ i, c, m })));
  assert.equal(calls.length, 1, "one native tool call");
  const { i, c, m } = calls[0]!;
  assert.equal(m.role, "assistant");
  assert.equal(c.id, CALL.id);
  assert.equal(c.type, "function");
  assert.equal(c.function.name, CALL.name);
  assert.deepEqual(JSON.parse(c.function.arguments), CALL.arguments);
  const result = messages[i + 1]!;
  assert.equal(result.role, "tool");
  assert.equal(result.tool_call_id, CALL.id);
  assert.ok(textOf(result.content).includes(RESULT));
  return i;
}

let server: Server;
let client: StrataClient;
let digest: string;

before(async () => {
  server = await Server.start();
  client = new StrataClient({ baseUrl: server.url, token: TOKEN });
  digest = (await client.agent()).identity_digest;
});

after(async () => {
  const status = await server.stop();
  assert.equal(status, 0, `strata serve exited with ${status} on SIGTERM:\n${server.stderr()}`);
});

describe("a tool-using conversation", () => {
  it("keeps the newest lines of a failed tool's log", async () => {
    const id = `ts-${randomUUID()}`;
    const tools = [FILE_READ];
    await client.prepareTurn(id, { message: "Why did the build fail?", tools });
    await client.recordReply(id, { tool_calls: [CALL] });
    // About 60 KB: under the 64 KiB entry limit, over the turn's budget.
    let log = "";
    for (let n = 0; n < 1300; n++) {
      const k = String(n).padStart(4, "0");
      log += `step ${k}: compiled module ${k} without warnings\n`;
    }
    log += "FATAL the last step failed\n";
    assert.deepEqual(
      await client.recordToolResult(id, {
        call_id: CALL.id,
        output: log,
        is_error: true,
        keep: "tail",
      }),
      { recorded: true },
    );
    const turn = await client.prepareTurn(id, { tools });
    const messages = messagesOf(turn, id, digest);
    const result = textOf(messages.find((m) => m.role === "tool")!.content);
    assert.ok(result.includes("FATAL the last step failed"));
    assert.ok(!result.includes("step 0000:"));
    assert.ok(result.indexOf("<strata:elided") < result.indexOf("FATAL"));
    assert.ok(JSON.stringify(turn.request).includes("Why did the build fail?"));
  });

  it("carries native tool calls and results and keeps the history", async () => {
    const id = `ts-${randomUUID()}`;
    const tools = [FILE_READ];

    const first = await client.prepareTurn(id, { message: QUESTION, tools });
    const m1 = messagesOf(first, id, digest);
    assert.equal(m1.at(-1)!.role, "user");
    assert.ok(textOf(m1.at(-1)!.content).includes(QUESTION));
    const offered = first.request["tools"] as {
      type: string;
      function: { name: string; parameters: unknown };
    }[];
    assert.deepEqual(
      offered.map((t) => [t.type, t.function.name]),
      [["function", "file_read"]],
    );
    assert.deepEqual(offered[0]!.function.parameters, FILE_READ.parameters);

    await client.recordReply(id, { tool_calls: [CALL] });
    assert.deepEqual(await client.recordToolResult(id, { call_id: CALL.id, output: RESULT }), {
      recorded: true,
    });

    const second = await client.prepareTurn(id, { tools });
    const m2 = messagesOf(second, id, digest);
    // After the tool result only per-turn context may follow, fenced as data in user position.
    for (const m of m2.slice(toolExchange(m2) + 2)) {
      assert.equal(m.role, "user");
      assert.match(textOf(m.content), /^<strata:section [^>]*authority="data"/);
    }

    await client.recordReply(id, { text: ANSWER });
    const third = await client.prepareTurn(id, { message: FOLLOW_UP, tools });
    const m3 = messagesOf(third, id, digest);
    const i = toolExchange(m3);
    assert.deepEqual(
      m3
        .slice(i + 2)
        .filter((m) => m.role === "assistant")
        .map((m) => textOf(m.content)),
      [ANSWER],
    );
    assert.equal(m3.at(-1)!.role, "user");
    assert.ok(textOf(m3.at(-1)!.content).includes(FOLLOW_UP));

    const history = await client.session(id);
    assert.equal(history.session_id, id);
    assert.deepEqual(
      history.turns.map((t) => [t.role, t.call_id]),
      [
        ["user", null],
        ["tool_call", CALL.id],
        ["tool_result", CALL.id],
        ["assistant", null],
        ["user", null],
      ],
    );
    assert.deepEqual(JSON.parse(history.turns[1]!.content), { name: CALL.name, arguments: CALL.arguments });
    assert.deepEqual(
      [0, 2, 3, 4].map((n) => history.turns[n]!.content),
      [QUESTION, RESULT, ANSWER, FOLLOW_UP],
    );
    const seqs = history.turns.map((t) => t.seq);
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
    );
    assert.equal(new Set(seqs).size, seqs.length);
  });

  it("encodes a session id as one path segment", async () => {
    const odd = `team:a.b_c-${randomUUID().slice(0, 8)}`;
    assert.equal((await client.prepareTurn(odd, { message: "hello" })).session_id, odd);
    assert.deepEqual(
      (await client.session(odd)).turns.map((t) => t.content),
      ["hello"],
    );
    // A slash or a query stays inside the segment: the server refuses the id, not the route.
    // (Asked with a GET: the server answers a refused POST without reading its body and then
    // drops the kept-alive connection, which the next request on it may find closed.)
    for (const bad of ["team/a", "a?x=1", "a#b", "a b"]) {
      await refusal(client.session(bad), InvalidRequestError, 400, "invalid_request");
    }
  });

  it("resets and deletes sessions", async () => {
    const id = `ts-${randomUUID()}`;
    await client.prepareTurn(id, { message: "first question" });
    await client.recordReply(id, { text: "first answer" });
    assert.deepEqual(await client.resetSession(id), { removed: 2 });
    await assert.rejects(client.session(id), UnknownSessionError);
    await client.prepareTurn(id, { message: "second question" });
    assert.deepEqual(await client.deleteSession(id), { removed: 1 });
    await assert.rejects(client.session(id), UnknownSessionError);
  });
});

describe("memory", () => {
  it("adds, finds and uses a memory", async () => {
    const word = `zebrafish${randomUUID().slice(0, 8)}`;
    const content = `Release trains named ${word} leave on Tuesdays at nine.`;
    const { id } = await client.addMemory({ content, tags: ["ops", "release"] });
    assert.ok(id);
    const { results } = await client.searchMemories({
      query: `when does the ${word} release train leave`,
      limit: 3,
    });
    assert.ok(results.length >= 1 && results.length <= 3);
    assert.equal(results[0]!.id, id);
    assert.equal(results[0]!.content, content);
    assert.deepEqual([...results[0]!.tags].sort(), ["ops", "release"]);
    assert.equal(typeof results[0]!.score, "number");

    const turn = await client.prepareTurn(`ts-${randomUUID()}`, {
      message: `When does the ${word} release train leave?`,
    });
    assert.ok(JSON.stringify(turn.request).includes(content), "the memory reaches the prompt");
  });
});

describe("the server", () => {
  it("answers health, agent, metrics and its OpenAPI document", async () => {
    assert.deepEqual(await client.healthz(), { status: "ok" });
    assert.deepEqual(await client.readyz(), { status: "ready" });
    const agent = await client.agent();
    assert.deepEqual([agent.agent_id, agent.version], [DEMO_AGENT.id, DEMO_AGENT.version]);
    assert.equal(agent.provider, "openai-chat");
    assert.equal(agent.model, MODEL);
    assert.ok(agent.signers.length >= 1);
    const metrics = await client.metrics();
    assert.match(metrics, /^# TYPE /m);
    const doc = await client.openapi();
    assert.match(String(doc["openapi"]), /^3\.1/);
  });
});

async function refusal(promise: Promise<unknown>, Class: typeof StrataError, status: number, code: string) {
  const err = await promise.then(
    () => assert.fail(`expected ${code}`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof Class, `${String(err)} is a ${Class.name}`);
  assert.ok(err instanceof StrataError);
  assert.equal(err.status, status);
  assert.equal(err.code, code);
  assert.ok(err.message.length > 0, "a refusal says what to do");
}

describe("refusals", () => {
  it("needs a token beyond health", async () => {
    const anonymous = new StrataClient({ baseUrl: server.url });
    assert.deepEqual(await anonymous.healthz(), { status: "ok" });
    await refusal(anonymous.agent(), UnauthorizedError, 401, "unauthorized");
  });

  it("refuses a wrong token and accepts a hashed one", async () => {
    const wrong = new StrataClient({ baseUrl: server.url, token: `${TOKEN}x` });
    assert.deepEqual(await wrong.healthz(), { status: "ok" }, "the token goes only where it is needed");
    await refusal(wrong.prepareTurn("any", { message: "hi" }), UnauthorizedError, 401, "unauthorized");
    const hashed = new StrataClient({ baseUrl: server.url, token: HASHED_TOKEN });
    assert.equal((await hashed.agent()).agent_id, DEMO_AGENT.id);
  });

  it("reads the first plain token of a token file", async () => {
    const path = join(server.workdir, "client-token");
    writeFileSync(path, `# mine\nsha256:${"0".repeat(64)}\n\n${TOKEN}\n`);
    assert.equal(await readTokenFile(path), TOKEN);
  });

  it("says when a session is unknown", async () => {
    const id = `never-${randomUUID()}`;
    const code = "unknown_session";
    await refusal(client.session(id), UnknownSessionError, 404, code);
    await refusal(client.prepareTurn(id), UnknownSessionError, 404, code);
    await refusal(client.recordReply(id, { text: "hi" }), UnknownSessionError, 404, code);
    await refusal(client.recordToolResult(id, { call_id: "c", output: "o" }), UnknownSessionError, 404, code);
    await refusal(client.resetSession(id), UnknownSessionError, 404, code);
    await refusal(client.deleteSession(id), UnknownSessionError, 404, code);
  });

  it("says when a request is invalid", async () => {
    await refusal(
      client.prepareTurn(`ts-${randomUUID()}`, { message: "hi", mode: "no-such-mode" }),
      InvalidRequestError,
      400,
      "invalid_request",
    );
  });

  it("refuses a body over the size limit", async () => {
    // The server's default limit is 1 MiB per request body.
    await refusal(
      client.prepareTurn(`ts-${randomUUID()}`, { message: "x".repeat(2 << 20) }),
      BodyTooLargeError,
      413,
      "body_too_large",
    );
  });

  it("reports a connection failure as a TransportError", async () => {
    const port = await new Promise<number>((done) => {
      const probe = createTcpServer().listen(0, "127.0.0.1", () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => done(port));
      });
    });
    const nobody = new StrataClient({ baseUrl: `http://127.0.0.1:${port}`, timeoutMs: 5000, maxRetries: 0 });
    const err = await nobody.healthz().then(
      () => assert.fail("expected a failure"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof TransportError);
    assert.equal(err.status, null);
    assert.equal(err.code, "connection");
  });
});

describe("client timeouts", () => {
  it("give up on a server that never answers", async () => {
    // A socket that accepts connections and never writes a byte.
    const sockets: Socket[] = [];
    const silent = createTcpServer((socket) => sockets.push(socket));
    await new Promise<void>((done) => silent.listen(0, "127.0.0.1", done));
    const { port } = silent.address() as AddressInfo;
    try {
      const started = performance.now();
      const client = new StrataClient({ baseUrl: `http://127.0.0.1:${port}`, timeoutMs: 500 });
      const err = await client.healthz().then(
        () => assert.fail("expected a timeout"),
        (e: unknown) => e,
      );
      const elapsed = performance.now() - started;
      assert.ok(err instanceof TransportError);
      assert.equal(err.code, "connection");
      assert.match(err.message, /TimeoutError|timeout/i);
      assert.ok(elapsed > 400 && elapsed < 5000, `${elapsed} ms`);
    } finally {
      sockets.forEach((socket) => socket.destroy());
      silent.close();
    }
  });
});

/** A loopback HTTP server that records each request and answers with a canned completion. */
const CANNED = {
  id: "chatcmpl-canned",
  object: "chat.completion",
  created: 1_700_000_000,
  model: MODEL,
  choices: [
    {
      index: 0,
      finish_reason: "tool_calls",
      logprobs: null,
      message: {
        role: "assistant",
        content: "Let me read the notes.",
        refusal: null,
        tool_calls: [
          {
            id: "call_canned",
            type: "function",
            function: { name: "file_read", arguments: '{"path":"notes.txt"}' },
          },
        ],
      },
    },
  ],
  usage: { prompt_tokens: 120, completion_tokens: 30, total_tokens: 150 },
};

async function recorder(): Promise<{
  url: string;
  requests: { method: string; path: string; body: unknown }[];
  http: HttpServer;
}> {
  const requests: { method: string; path: string; body: unknown }[] = [];
  const http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      requests.push({
        method: req.method ?? "",
        path: req.url ?? "",
        body: JSON.parse(Buffer.concat(chunks).toString()),
      });
      const reply = JSON.stringify(CANNED);
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(reply) });
      res.end(reply);
    });
  });
  await new Promise<void>((done) => http.listen(0, "127.0.0.1", done));
  const { port } = http.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/v1`, requests, http };
}

describe("examples/openai_turn", () => {
  it("sends exactly the prepared body through the official SDK and records the reply", async () => {
    const rec = await recorder();
    try {
      const id = `ts-example-${randomUUID()}`;
      const sent: Record<string, unknown>[] = [];
      const watching = new (class extends StrataClient {
        override async prepareTurn(...args: Parameters<StrataClient["prepareTurn"]>) {
          const turn = await super.prepareTurn(...args);
          sent.push(turn.request);
          return turn;
        }
      })({ baseUrl: server.url, token: TOKEN });
      const openai = new OpenAI({ baseURL: rec.url, apiKey: "test", maxRetries: 0 });
      const completion = await runTurn(watching, openai, id, "What does notes.txt say?");

      assert.equal(rec.requests.length, 1);
      assert.equal(rec.requests[0]!.method, "POST");
      assert.equal(rec.requests[0]!.path, "/v1/chat/completions");
      assert.deepEqual(rec.requests[0]!.body, sent[0], "the SDK sent exactly the prepared body");
      assert.equal(completion.id, "chatcmpl-canned");

      const turns = (await client.session(id)).turns;
      assert.deepEqual(
        turns.map((t) => [t.role, t.call_id]),
        [
          ["user", null],
          ["assistant", null],
          ["tool_call", "call_canned"],
        ],
      );
      assert.equal(turns[1]!.content, "Let me read the notes.");
      assert.deepEqual(JSON.parse(turns[2]!.content), {
        name: "file_read",
        arguments: { path: "notes.txt" },
      });
    } finally {
      rec.http.close();
    }
  });

  it("runs as a script", async () => {
    const rec = await recorder();
    try {
      const tokenFile = join(server.workdir, "example-token");
      writeFileSync(tokenFile, `${TOKEN}\n`);
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [
          join(PACKAGE, "build", "examples", "openai_turn.js"),
          "ts-example-script",
          "What does notes.txt say?",
        ],
        {
          env: {
            ...process.env,
            STRATA_URL: server.url,
            STRATA_TOKEN_FILE: tokenFile,
            OPENAI_BASE_URL: rec.url,
            OPENAI_API_KEY: "test",
          },
        },
      );
      assert.deepEqual(stdout.trim().split("\n"), [
        "Let me read the notes.",
        '[tool call call_canned: file_read({"path":"notes.txt"})]',
      ]);
      assert.equal(rec.requests.length, 1);
      assert.deepEqual(
        (await client.session("ts-example-script")).turns.map((t) => t.role),
        ["user", "assistant", "tool_call"],
      );
    } finally {
      rec.http.close();
    }
  });
});
