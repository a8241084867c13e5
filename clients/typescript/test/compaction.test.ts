/**
 * Conversation compaction through the client against a real `strata serve`: a turn names the
 * entries it left out, a summary of a range stands in for it on the next turn, a refused
 * summary stores nothing, and a keyed one is retry-safe.
 * @module
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";

import { IdempotencyKeyReusedError, InvalidRequestError, StrataClient } from "@strata/client";
import { Server, TOKEN } from "./server.js";

let server: Server;
let client: StrataClient;

before(async () => {
  server = await Server.start();
  client = new StrataClient({ baseUrl: server.url, token: TOKEN });
});

after(async () => {
  const status = await server.stop();
  assert.equal(status, 0, `strata serve exited with ${status} on SIGTERM:\n${server.stderr()}`);
});

describe("compaction", () => {
  it("stores a summary that stands in for its range", async () => {
    const id = `ts-${randomUUID()}`;
    for (let i = 1; i <= 4; i++) {
      await client.prepareTurn(id, { message: `Question number ${i}?` });
      await client.recordReply(id, { text: `Answer number ${i}: ${"details ".repeat(300)}` });
    }
    // The store numbers the entries of every session in one sequence.
    const seqs = (await client.session(id)).turns.map((t) => t.seq);
    const seq = (i: number): number => {
      const s = seqs[i];
      assert.ok(s !== undefined, `no entry ${i}`);
      return s;
    };
    const tight = await client.prepareTurn(id, { message: "Question number 5?", context_window: 3000 });
    assert.ok(tight.dropped_turns.length > 0);
    assert.ok(tight.dropped_turns.every((s) => seqs.includes(s)));

    const body = {
      first_seq: seq(0),
      last_seq: seq(3),
      summary: "Fridays are frozen.",
      model: "claude-haiku-4-5",
    };
    const stored = await client.compactSession(id, body, { idempotencyKey: "c-1" });
    assert.equal(stored.entries, 4);
    assert.deepEqual(await client.compactSession(id, body, { idempotencyKey: "c-1" }), stored);
    await assert.rejects(
      client.compactSession(
        id,
        { first_seq: seq(4), last_seq: seq(5), summary: "Other." },
        { idempotencyKey: "c-1" },
      ),
      IdempotencyKeyReusedError,
    );
    await assert.rejects(
      client.compactSession(id, { first_seq: seq(2), last_seq: seq(5), summary: "Overlapping." }),
      (err: unknown) => err instanceof InvalidRequestError && err.message.includes("overlaps"),
    );
    assert.deepEqual((await client.compactions(id)).compactions, [stored]);

    const next = JSON.stringify((await client.prepareTurn(id, {})).request);
    assert.ok(next.includes("Fridays are frozen."));
    assert.ok(!next.includes("Question number 1?") && next.includes("Question number 3?"));
    assert.equal((await client.session(id)).turns.length, 9);
  });
});
