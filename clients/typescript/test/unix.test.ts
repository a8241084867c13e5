/**
 * `strata serve --unix PATH` and `unixSocketFetch`: the same operations over a Unix socket.
 * @module
 */

import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";

import { StrataClient, UnauthorizedError, UnknownSessionError } from "@strata/client";
import { unixSocketFetch } from "@strata/client/node";
import { Server, TOKEN } from "./server.js";

it("drives a session over the server's Unix socket", async () => {
  const path = join(mkdtempSync(join(tmpdir(), "strata-sock-")), "strata.sock");
  const server = await Server.start(["--unix", path]);
  try {
    assert.equal(server.url, `unix:${path}`);
    const fetch = unixSocketFetch(path);
    const client = new StrataClient({ baseUrl: "http://strata", token: TOKEN, fetch });
    assert.deepEqual(await client.healthz(), { status: "ok" });
    const turn = await client.prepareTurn("over-a-socket", { message: "hello" });
    assert.equal(turn.session_id, "over-a-socket");
    await client.recordReply("over-a-socket", { text: "hi there" });
    const history = await client.session("over-a-socket");
    assert.deepEqual(
      history.turns.map((t) => [t.role, t.content]),
      [
        ["user", "hello"],
        ["assistant", "hi there"],
      ],
    );
    assert.match(await client.metrics(), /^# TYPE /m);
    await assert.rejects(client.session("never-seen"), UnknownSessionError);
    const anonymous = new StrataClient({ baseUrl: "http://strata", fetch });
    await assert.rejects(anonymous.agent(), UnauthorizedError);
  } finally {
    const status = await server.stop();
    assert.equal(status, 0, server.stderr());
  }
});
