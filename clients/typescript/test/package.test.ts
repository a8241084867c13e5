/**
 * The package as a project gets it: `npm pack`ed, installed from the tarball into an empty
 * project (offline: it has no dependencies), then loaded with `require` from CommonJS and with
 * `import` from an ES module, each driving a real `strata serve`, and type-checked from `.cts`
 * and `.mts` files, each resolving the declarations of its own build.
 * @module
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { promisify } from "node:util";

import { PACKAGE, Server, TOKEN } from "./server.js";

const run = promisify(execFile);

/** What each consumer does with the package; it prints one JSON line. */
const BODY = `
  const client = new StrataClient({ baseUrl: process.env.STRATA_URL, token: process.env.STRATA_TOKEN });
  const turn = await client.prepareTurn(process.env.SESSION_ID, { message: "hello" });
  const request = chatCompletionsRequest(turn);
  let refused = null;
  try {
    await new StrataClient({ baseUrl: process.env.STRATA_URL }).agent();
  } catch (err) {
    refused = [err instanceof UnauthorizedError, err instanceof StrataError, err.code];
  }
  console.log(JSON.stringify({
    provider: turn.provider,
    model: request.model,
    refused,
    readTokenFile: typeof readTokenFile,
    messagesRequest: typeof messagesRequest,
  }));
`;

const CJS = `const { StrataClient, StrataError, UnauthorizedError } = require("@strata/client");
const { readTokenFile } = require("@strata/client/node");
const { chatCompletionsRequest } = require("@strata/client/openai");
const { messagesRequest } = require("@strata/client/anthropic");
(async () => {${BODY}})().catch((err) => { console.error(err); process.exit(1); });
`;

const ESM = `import { StrataClient, StrataError, UnauthorizedError } from "@strata/client";
import { readTokenFile } from "@strata/client/node";
import { chatCompletionsRequest } from "@strata/client/openai";
import { messagesRequest } from "@strata/client/anthropic";
${BODY}`;

/** Type-checked only: the main entry's declarations, as each kind of module resolves them. */
const TYPED = `import { StrataClient, OverloadedError, type PreparedTurn, type AssemblyReport } from "@strata/client";
export function tokens(turn: PreparedTurn): number {
  const report: AssemblyReport = turn.report;
  return report.used_tokens;
}
export const client: StrataClient = new StrataClient({ maxRetries: 0 });
export const overloaded: boolean = new OverloadedError(503, "overloaded", "busy") instanceof Error;
`;

let server: Server;
let project: string;

before(async () => {
  server = await Server.start();
  project = mkdtempSync(join(tmpdir(), "strata-ts-consumer-"));
  await run("npm", ["pack", "--ignore-scripts", "--silent", "--pack-destination", project], { cwd: PACKAGE });
  const tarball = readdirSync(project).find((f) => f.endsWith(".tgz"));
  assert.ok(tarball, "npm pack made a tarball");
  writeFileSync(join(project, "package.json"), `${JSON.stringify({ name: "consumer", private: true })}\n`);
  await run(
    "npm",
    ["install", "--offline", "--ignore-scripts", "--no-audit", "--no-fund", "--silent", `./${tarball}`],
    { cwd: project },
  );
});

after(async () => {
  rmSync(project, { recursive: true, force: true });
  assert.equal(await server.stop(), 0, server.stderr());
});

for (const [kind, file, source] of [
  ["CommonJS (require)", "consumer.cjs", CJS],
  ["an ES module (import)", "consumer.mjs", ESM],
] as const) {
  it(`works from ${kind}`, async () => {
    writeFileSync(join(project, file), source);
    const env = { ...process.env, STRATA_URL: server.url, STRATA_TOKEN: TOKEN, SESSION_ID: `ts-${file}` };
    const { stdout } = await run(process.execPath, [file], { cwd: project, env });
    assert.deepEqual(JSON.parse(stdout), {
      provider: "openai-chat",
      model: "gpt-4o-mini",
      refused: [true, true, "unauthorized"],
      readTokenFile: "function",
      messagesRequest: "function",
    });
  });
}

it("type-checks from .cts and .mts, each with the declarations of its build", async () => {
  writeFileSync(join(project, "typed.cts"), TYPED);
  writeFileSync(join(project, "typed.mts"), TYPED);
  const config = {
    compilerOptions: {
      module: "nodenext",
      moduleResolution: "nodenext",
      target: "es2022",
      lib: ["es2022", "dom"],
      types: [],
      strict: true,
      noEmit: true,
    },
    files: ["typed.cts", "typed.mts"],
  };
  writeFileSync(join(project, "tsconfig.json"), JSON.stringify(config));
  const tsc = join(PACKAGE, "node_modules", "typescript", "bin", "tsc");
  const { stdout } = await run(process.execPath, [tsc, "-p", project, "--explainFiles"], { cwd: project });
  const installed = "node_modules/@strata/client/dist/";
  // Each entry file is followed by the imports that brought it in.
  const entries = stdout
    .split("\n")
    .filter((line) => line.includes(installed) && line.endsWith("index.d.ts"));
  assert.deepEqual(entries.map((line) => line.slice(line.indexOf(installed) + installed.length)).sort(), [
    "cjs/index.d.ts",
    "index.d.ts",
  ]);
  assert.match(stdout, /dist\/cjs\/index\.d\.ts\n\s+Imported via "@strata\/client" from file 'typed\.cts'/);
  assert.match(stdout, /dist\/index\.d\.ts\n\s+Imported via "@strata\/client" from file 'typed\.mts'/);
});
