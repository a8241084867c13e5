/**
 * The client follows the OpenAPI document the server publishes: every operation has a client
 * method on the same route, and the checked-in generated types are what the pinned generator
 * makes of the document today.
 * @module
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import { OPERATIONS, StrataClient, type Operation } from "@strata/client";
import { OPENAPI, PACKAGE } from "./server.js";

const METHODS = new Set(["get", "put", "post", "delete", "patch", "head", "options", "trace"]);

type DocOperation = {
  operationId?: string;
  security?: unknown[];
  parameters?: { name: string; in: string }[];
};
type Doc = { paths: Record<string, Record<string, DocOperation>> };

/** `METHOD /path/{}`: a route with its path parameters' names left out. */
function route(method: string, path: string): string {
  return `${method.toUpperCase()} ${path.replace(/\{[^}]*\}/g, "{}")}`;
}

describe("the OpenAPI document", () => {
  it("has a client method for every operation, and no method for a route it lacks", () => {
    const doc = JSON.parse(readFileSync(OPENAPI, "utf8")) as Doc;
    const documented = new Map<string, DocOperation>();
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (METHODS.has(method)) {
          documented.set(route(method, path), op);
        }
      }
    }
    const ours = new Map<string, [string, Operation]>(
      Object.entries(OPERATIONS).map(([name, op]) => [route(op.method, op.path), [name, op]]),
    );
    const missing = [...documented.keys()].filter((r) => !ours.has(r));
    assert.deepEqual(missing, [], "operations without a client method");
    const stale = [...ours.keys()].filter((r) => !documented.has(r));
    assert.deepEqual(stale, [], "client methods calling routes the API does not have");
    for (const [r, [name, op]] of ours) {
      assert.equal(documented.get(r)?.operationId, op.operationId, r);
      assert.equal((documented.get(r)?.security ?? []).length > 0, op.auth, `${r}: bearer token`);
      const headers = (documented.get(r)?.parameters ?? [])
        .filter((p) => p.in === "header")
        .map((p) => p.name);
      assert.deepEqual(headers, op.keyed ? ["Idempotency-Key"] : [], `${r}: header parameters`);
      assert.ok(op.repeatable || !op.keyed, `${r}: a keyed operation can be repeated`);
      assert.equal(
        typeof (StrataClient.prototype as unknown as Record<string, unknown>)[name],
        "function",
        name,
      );
    }
  });

  it("is what the checked-in types were generated from", () => {
    const generator = join(PACKAGE, "node_modules", ".bin", "openapi-typescript");
    const fresh = execFileSync(generator, [OPENAPI, "--empty-objects-unknown"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    const checkedIn = readFileSync(join(PACKAGE, "src", "openapi.ts"), "utf8");
    assert.ok(
      fresh === checkedIn,
      "src/openapi.ts is stale: run `npm run generate` in clients/typescript and commit the result",
    );
  });
});
