/**
 * Per-turn inputs and a session's goals through the client against a real `strata serve`:
 * skills and the other inputs reach the request, a model's marker only proposes a lock and
 * `answerLock` confirms or refuses it, and every change is retry-safe and atomic.
 * @module
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";

import { IdempotencyKeyReusedError, InvalidRequestError, NotFoundError, StrataClient } from "@strata/client";
import { MODEL, Server, TOKEN } from "./server.js";

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

describe("per-turn inputs", () => {
  it("reach the request, and a bad one is refused", async () => {
    const id = `ts-${randomUUID()}`;
    const plain = await client.prepareTurn(id, { message: "Hello" });
    assert.ok(JSON.stringify(plain.request).includes(`Model&#58; ${MODEL}`));
    const turn = await client.prepareTurn(`${id}-b`, {
      message: "Review the notes.",
      skills: [{ id: "review/notes", instructions: "Check every date twice." }],
      thinking: "high",
      inbound: { sender: "maria-from-ops", channel: "slack" },
      voice: true,
      model: "other-model",
      time_zone: "Asia/Kolkata +05:30",
      recent_footprint: ["ran the linter: clean"],
      business_context: "Customer Acme, plan Enterprise.",
      sanity_checks: false,
    });
    const text = JSON.stringify(turn.request);
    for (const want of [
      "Check every date twice.",
      "maria-from-ops",
      "Asia/Kolkata",
      "ran the linter",
      "plan Enterprise",
    ]) {
      assert.ok(text.includes(want), want);
    }
    assert.equal(turn.request["model"], "other-model");
    assert.ok(JSON.stringify(turn.report).includes("skill/review/notes"));
    await assert.rejects(
      client.prepareTurn(`${id}-c`, { message: "Hi", time_zone: "Mars" }),
      (err: unknown) => err instanceof InvalidRequestError && err.message.includes("time zone `Mars`"),
    );
  });
});

describe("goals", () => {
  it("lock only when the client confirms", async () => {
    const id = `ts-${randomUUID()}`;
    await client.prepareTurn(id, { message: "Plan the login work." });
    await client.recordReply(id, { text: "[GOAL] Ship login\n[DECISION] Tokens: use JWT - LOCKED" });
    const goals = await client.goals(id);
    assert.equal(goals.goals[0]!.decisions[0]!.locked, false);
    assert.equal(goals.goals[0]!.decisions[0]!.lock_proposed, true);
    assert.deepEqual(goals.pending_locks, [{ goal: "goal-1", decision: 1, description: "Tokens: use JWT" }]);
    await assert.rejects(client.answerLock(id, { decision: 9, confirm: true }), NotFoundError);
    assert.deepEqual(await client.goals(id), goals);
    const refused = await client.answerLock(id, { decision: 1, confirm: false });
    assert.equal(refused.decisions[0]!.locked, false);
    assert.equal(refused.decisions[0]!.lock_proposed, false);
  });

  it("change once per idempotency key, and refusals change nothing", async () => {
    const id = `ts-${randomUUID()}`;
    const goal = await client.createGoal(
      id,
      { description: "Ship v2", priority: "high" },
      { idempotencyKey: "g1" },
    );
    assert.deepEqual(
      await client.createGoal(id, { description: "Ship v2", priority: "high" }, { idempotencyKey: "g1" }),
      goal,
    );
    await assert.rejects(
      client.createGoal(id, { description: "Ship v3" }, { idempotencyKey: "g1" }),
      IdempotencyKeyReusedError,
    );
    await client.addCheckpoint(id, { description: "Write tests" }, { idempotencyKey: "c1" });
    await client.addCheckpoint(id, { description: "Write tests" }, { idempotencyKey: "c1" });
    await client.recordDecision(id, { description: "Database: PostgreSQL", rationale: "shared" });
    await client.recordArtifact(id, { path: "tests/v2.ts", action: "created", kind: "test" });
    assert.deepEqual(await client.recordFile(id, { path: "src/v2.ts", action: "modified" }), {
      recorded: true,
    });
    const before = await client.goals(id);
    const g = before.goals[0]!;
    assert.equal(g.checkpoints.length, 1);
    assert.equal(g.decisions[0]!.rationale, "shared");
    assert.deepEqual(g.artifacts, [{ kind: "test", path: "tests/v2.ts", action: "created" }]);
    await assert.rejects(
      client.recordArtifact(id, { path: "a.ts", action: "created", kind: "movie" }),
      InvalidRequestError,
    );
    await assert.rejects(client.addCheckpoint(id, { description: "x", goal: "goal-9" }), NotFoundError);
    assert.deepEqual(await client.goals(id), before);
  });
});
