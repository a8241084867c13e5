/**
 * Retry-safe calls against a real `strata serve`: every call that changes a session carries an
 * Idempotency-Key, a repeat under the key changes nothing, and the client retries passing
 * refusals and broken connections with the same key, through a proxy that misbehaves on purpose.
 * @module
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";

import {
  ERROR_CLASSES,
  IdempotencyKeyReusedError,
  OverloadedError,
  RetryPolicy,
  ServerTimeoutError,
  StrataClient,
  StrataError,
  TransportError,
  type AnnouncedTool,
  type ClientOptions,
  type ErrorCode,
  type ToolCall,
} from "@strata/client";
import { FlakyProxy, freePort, type Fault } from "./flaky_proxy.js";
import { Server, TOKEN } from "./server.js";

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
const UUID4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

let server: Server;
let direct: StrataClient;

before(async () => {
  server = await Server.start();
  direct = new StrataClient({ baseUrl: server.url, token: TOKEN });
});

after(async () => {
  const status = await server.stop();
  assert.equal(status, 0, `strata serve exited with ${status} on SIGTERM:\n${server.stderr()}`);
});

/** A client whose retries wait milliseconds, not seconds. */
function fast(baseUrl: string, options: ClientOptions = {}): StrataClient {
  return new StrataClient({ baseUrl, token: TOKEN, retryBaseDelayMs: 10, retryMaxDelayMs: 50, ...options });
}

async function through<T>(faults: Fault[], run: (proxy: FlakyProxy) => Promise<T>): Promise<T> {
  const proxy = await FlakyProxy.start(server.url, faults);
  try {
    return await run(proxy);
  } finally {
    await proxy.close();
  }
}

async function contents(id: string): Promise<string[]> {
  return (await direct.session(id)).turns.map((t) => t.content);
}

async function rejection(promise: Promise<unknown>): Promise<StrataError> {
  const err = await promise.then(
    () => assert.fail("expected a rejection"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof StrataError, String(err));
  return err;
}

describe("idempotency keys", () => {
  it("make a repeat under the same key change nothing", async () => {
    const id = `ts-${randomUUID()}`;
    const first = await direct.prepareTurn(id, { message: "hello" }, { idempotencyKey: "turn-1" });
    const again = await direct.prepareTurn(id, { message: "hello" }, { idempotencyKey: "turn-1" });
    assert.deepEqual(again, first, "the repeat gets the first answer");
    for (let i = 0; i < 2; i++) {
      await direct.recordReply(id, { text: "hi there" }, { idempotencyKey: "reply-1" });
    }
    assert.deepEqual(await contents(id), ["hello", "hi there"]);
    // Without a key of its own, each call is new: the same message twice is two turns.
    await direct.prepareTurn(id, { message: "again" });
    await direct.prepareTurn(id, { message: "again" });
    assert.deepEqual((await contents(id)).slice(2), ["again", "again"]);

    assert.deepEqual(await direct.resetSession(id, { idempotencyKey: "reset-1" }), { removed: 4 });
    assert.deepEqual(await direct.resetSession(id, { idempotencyKey: "reset-1" }), { removed: 4 });
    await direct.prepareTurn(id, { message: "after the reset" });
    assert.deepEqual(await direct.deleteSession(id, { idempotencyKey: "delete-1" }), { removed: 1 });
    assert.deepEqual(await direct.deleteSession(id, { idempotencyKey: "delete-1" }), { removed: 1 });
  });

  it("go with every call that changes a session, a fresh one per call", async () => {
    const id = `ts-${randomUUID()}`;
    const proxy = await through([], async (proxy) => {
      const client = fast(proxy.url);
      await client.prepareTurn(id, { message: "read it", tools: [FILE_READ] });
      await client.recordReply(id, { tool_calls: [CALL] });
      await client.recordToolResult(id, { call_id: CALL.id, output: "done" });
      await client.prepareTurn(id, { tools: [FILE_READ] });
      await client.session(id);
      await client.resetSession(id);
      await client.prepareTurn(id, { message: "again" });
      await client.deleteSession(id);
      await client.addMemory({ content: `a fact ${randomUUID()}` });
      await client.searchMemories({ query: "fact" });
      return proxy;
    });
    const keyed = proxy.seen.filter((s) => s.key !== null);
    assert.deepEqual(
      keyed.map((s) => [s.method, s.path.split("/").at(-1)]),
      [
        ["POST", "turns"],
        ["POST", "replies"],
        ["POST", "tool-results"],
        ["POST", "turns"],
        ["POST", "reset"],
        ["POST", "turns"],
        ["DELETE", id],
      ],
    );
    assert.ok(keyed.every((s) => UUID4.test(s.key!)));
    assert.equal(new Set(keyed.map((s) => s.key)).size, keyed.length, "one key per call");
    assert.deepEqual(
      proxy.seen.filter((s) => s.key === null).map((s) => [s.method, s.path]),
      [
        ["GET", `/v1/sessions/${id}`],
        ["POST", "/v1/memories"],
        ["POST", "/v1/memories/search"],
      ],
    );
  });

  it("refuse a key reused for another request, without retrying", async () => {
    const id = `ts-${randomUUID()}`;
    await through([], async (proxy) => {
      const client = fast(proxy.url);
      await client.prepareTurn(id, { message: "first" }, { idempotencyKey: "mine" });
      const err = await rejection(client.prepareTurn(id, { message: "second" }, { idempotencyKey: "mine" }));
      assert.ok(err instanceof IdempotencyKeyReusedError);
      assert.deepEqual([err.status, err.code], [422, "idempotency_key_reused"]);
      assert.deepEqual(proxy.keys(), ["mine", "mine"], "sent once each");
    });
    assert.deepEqual(await contents(id), ["first"]);
  });
});

describe("retries", () => {
  it("ask again under the same key when the answer was lost", async () => {
    // The server prepares the turn and stores the message; its answer never reaches the client.
    const id = `ts-${randomUUID()}`;
    await through(["drop"], async (proxy) => {
      const turn = await fast(proxy.url).prepareTurn(id, { message: "only once, please" });
      assert.equal(turn.session_id, id);
      assert.equal(proxy.seen.length, 2);
      assert.equal(proxy.seen[0]!.key, proxy.seen[1]!.key);
      assert.match(proxy.seen[0]!.key!, UUID4);
      assert.deepEqual(
        proxy.seen.map((s) => s.replayed),
        [false, true],
        "the retry was answered again",
      );
    });
    assert.deepEqual(await contents(id), ["only once, please"]);
  });

  it("retry passing refusals under the same key, with the same body", async () => {
    const id = `ts-${randomUUID()}`;
    const faults: Fault[] = [
      { refuse: 503, code: "overloaded" },
      { refuse: 503, code: "store_unavailable" },
      { refuse: 409, code: "session_conflict" },
      { refuse: 408, code: "request_timeout", retryAfter: null },
    ];
    await through(faults, async (proxy) => {
      await fast(proxy.url).prepareTurn(id, { message: "hello" });
      assert.equal(proxy.seen.length, 5);
      assert.equal(new Set(proxy.keys()).size, 1);
      assert.equal(new Set(proxy.seen.map((s) => s.body)).size, 1);
    });
    assert.deepEqual(await contents(id), ["hello"]);
  });

  it("stop after maxRetries", async () => {
    const id = `ts-${randomUUID()}`;
    const faults: Fault[] = Array.from({ length: 10 }, () => ({ refuse: 503, code: "overloaded" }));
    await through(faults, async (proxy) => {
      const err = await rejection(fast(proxy.url, { maxRetries: 2 }).prepareTurn(id, { message: "hello" }));
      assert.ok(err instanceof OverloadedError);
      assert.deepEqual([err.status, err.code, err.retryAfter], [503, "overloaded", 0]);
      assert.equal(proxy.seen.length, 3);
      assert.equal(new Set(proxy.keys()).size, 1);
      await rejection(fast(proxy.url, { maxRetries: 0 }).prepareTurn(id, { message: "hello" }));
      assert.equal(proxy.seen.length, 4, "maxRetries: 0 sends once");
    });
  });

  const table: [number, ErrorCode, boolean][] = [
    [503, "overloaded", true],
    [503, "store_unavailable", true],
    [503, "timeout", true],
    [409, "session_conflict", true],
    [408, "request_timeout", true],
    [503, "agent_unavailable", false],
    [500, "internal", false],
    [400, "invalid_request", false],
    [401, "unauthorized", false],
    [413, "body_too_large", false],
    [422, "budget", false],
    [422, "message_too_large", false],
    [422, "tool_not_allowed", false],
    [409, "tool_not_offered", false],
    [422, "idempotency_key_reused", false],
  ];
  for (const [status, code, retried] of table) {
    it(`${retried ? "retry" : "do not retry"} ${status} ${code}`, async () => {
      await through([{ refuse: status, code }], async (proxy) => {
        const call = fast(proxy.url).prepareTurn(`ts-${randomUUID()}`, { message: "hello" });
        if (retried) {
          await call;
        } else {
          const err = await rejection(call);
          assert.ok(err instanceof ERROR_CLASSES[code]);
          assert.deepEqual([err.status, err.code], [status, code]);
        }
        assert.equal(proxy.seen.length, retried ? 2 : 1);
      });
    });
  }

  it("retry a 503 from a proxy in front, and not a 502", async () => {
    await through([{ page: 503 }], async (proxy) => {
      const client = fast(proxy.url);
      await client.prepareTurn(`ts-${randomUUID()}`, { message: "hello" });
      assert.equal(proxy.seen.length, 2);
      proxy.faults = [{ page: 502 }];
      const err = await rejection(client.prepareTurn(`ts-${randomUUID()}`, { message: "hello" }));
      assert.ok(err instanceof TransportError);
      assert.deepEqual([err.status, err.code], [502, "unexpected_response"]);
      assert.equal(proxy.seen.length, 3, "only a 503 is retried");
    });
  });

  it("add a memory again only when the server did not act", async () => {
    // The server keeps every memory it is given: a retry after it may have acted could store
    // a second copy.
    const faults: Fault[] = [
      { refuse: 503, code: "overloaded" },
      { refuse: 503, code: "timeout" },
    ];
    await through(faults, async (proxy) => {
      const client = fast(proxy.url);
      const err = await rejection(client.addMemory({ content: "stored at most once" }));
      assert.ok(err instanceof ServerTimeoutError);
      assert.equal(proxy.seen.length, 2, "retried after overloaded, not after timeout");
      proxy.faults = ["drop"];
      const lost = await rejection(client.addMemory({ content: `stored once ${randomUUID()}` }));
      assert.ok(lost instanceof TransportError);
      assert.equal(lost.code, "connection");
      assert.equal(proxy.seen.length, 3, "a lost answer is not asked again");
      assert.equal(proxy.seen[2]!.key, null);
    });
  });

  it("retry a refused connection until the server listens", async () => {
    const id = `ts-${randomUUID()}`;
    const port = await freePort();
    const started = performance.now();
    let proxy: FlakyProxy | undefined;
    const late = new Promise<void>((done) =>
      setTimeout(() => {
        void FlakyProxy.start(server.url, [], port).then((p) => {
          proxy = p;
          done();
        });
      }, 300),
    );
    try {
      const client = new StrataClient({
        baseUrl: `http://127.0.0.1:${port}`,
        token: TOKEN,
        maxRetries: 10,
        retryBaseDelayMs: 20,
        retryMaxDelayMs: 200,
      });
      const turn = await client.prepareTurn(id, { message: "are you there?" });
      assert.ok(performance.now() - started >= 300);
      assert.equal(turn.session_id, id);
      await late;
      assert.equal(proxy!.seen.length, 1, "the refused attempts never reached a server");
    } finally {
      await late;
      await proxy?.close();
    }
    assert.deepEqual(await contents(id), ["are you there?"]);
  });

  it("give up on a connection refused after the retries", async () => {
    const port = await freePort();
    const started = performance.now();
    const client = new StrataClient({
      baseUrl: `http://127.0.0.1:${port}`,
      maxRetries: 3,
      retryBaseDelayMs: 100,
    });
    const err = await rejection(client.healthz());
    // Three waits of at least 50, 100 and 200 ms.
    assert.ok(performance.now() - started >= 350);
    assert.deepEqual([err.status, err.code], [null, "connection"]);
    assert.match(err.message, /ECONNREFUSED/);
    assert.match(err.message, /\(attempt 4\)/);
  });
});

describe("the retry policy", () => {
  it("waits longer each time, at least Retry-After, within its bounds", () => {
    const policy = new RetryPolicy(3, 200, 1000);
    for (const [retry, top] of [
      [0, 200],
      [1, 400],
      [2, 800],
    ] as const) {
      for (let i = 0; i < 50; i++) {
        const wait = policy.wait(retry, null);
        assert.ok(wait !== null && wait >= top / 2 && wait <= top, String(wait));
      }
    }
    assert.equal(policy.wait(3, null), null, "three retries, then no more");
    assert.equal(policy.wait(0, 0.9), 900, "never sooner than Retry-After");
    assert.equal(policy.wait(0, 2), null, "a Retry-After beyond the longest wait is left to the caller");
  });

  it("refuses bad settings", () => {
    for (const options of [{ maxRetries: -1 }, { retryBaseDelayMs: -1 }, { retryMaxDelayMs: Number.NaN }]) {
      assert.throws(() => new StrataClient(options), RangeError);
    }
  });
});
