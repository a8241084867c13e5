/**
 * `runToolCall` against a live MCP server: the glossary server of
 * `crates/strata-mcp/tests/servers` (official Python SDK, run by `$STRATA_MCP_PYTHON`), pinned
 * with `strata mcp pin`, signed, and served with `--mcp`. Skipped without that interpreter,
 * unless `STRATA_REQUIRE_MCP=1` (set by `.ci/run`).
 * @module
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";

import { StrataClient } from "@strata/client";
import { DEMO, REPO, Server, TOKEN, strataBin } from "./server.js";

const GLOSSARY = join(REPO, "crates", "strata-mcp", "tests", "servers", "glossary.py");

function mcpPython(): string | undefined {
  const python = process.env["STRATA_MCP_PYTHON"];
  if (!python && process.env["STRATA_REQUIRE_MCP"] === "1") {
    throw new Error("STRATA_REQUIRE_MCP=1 but $STRATA_MCP_PYTHON is not set (.ci/run sets it)");
  }
  return python || undefined;
}

const python = mcpPython();

it(
  "runs a recorded call once through its MCP server",
  { skip: python === undefined ? "$STRATA_MCP_PYTHON is not set (see .ci/run)" : false },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), "strata-ts-mcp-"));
    const strata = (...args: string[]): string => execFileSync(strataBin(), args, { cwd: dir }).toString();
    const entry = strata("keygen", "--out", "k.key", "--trust-entry", "k");
    writeFileSync(join(dir, "trust.toml"), `threshold = 1\n\n${entry}`);
    for (const name of ["agent.toml", "SOUL.md"]) {
      copyFileSync(join(DEMO, name), join(dir, name));
    }
    strata(
      "mcp",
      "pin",
      "--server",
      "glossary",
      "--out",
      "agent.toml",
      "--only",
      "shout",
      "--",
      python!,
      GLOSSARY,
    );
    strata("sign", "agent.toml", "--key", "k.key", "--out", "agent.signed.json");
    const server = await Server.start(undefined, "anthropic", {
      agent: join(dir, "agent.signed.json"),
      trust: join(dir, "trust.toml"),
      extra: ["--mcp", `glossary=${python!} ${GLOSSARY}`],
    });
    try {
      const client = new StrataClient({ baseUrl: server.url, token: TOKEN });
      const turn = await client.prepareTurn("ts-mcp", { message: "Shout hello." });
      const tools = (turn.request as { tools?: { name: string }[] }).tools ?? [];
      assert.ok(
        tools.some((t) => t.name === "shout"),
        JSON.stringify(tools),
      );
      await client.recordReply("ts-mcp", {
        text: "",
        tool_calls: [{ id: "call-1", name: "shout", arguments: { text: "hello" } }],
      });
      const first = await client.runToolCall("ts-mcp", "call-1", { idempotencyKey: "run-1" });
      const again = await client.runToolCall("ts-mcp", "call-1", { idempotencyKey: "run-1" });
      assert.deepEqual(again, first);
      assert.deepEqual(first, { call_id: "call-1", tool: "shout", output: "HELLO", is_error: false });
      const results = (await client.session("ts-mcp")).turns.filter((t) => t.role === "tool_result");
      assert.deepEqual(
        results.map((r) => r.content),
        ["HELLO"],
      );
    } finally {
      await server.stop();
    }
  },
);
