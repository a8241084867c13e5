/**
 * The README's quick start is `examples/quick_start.ts`, which `tsc` compiles with the tests.
 * @module
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";

import { PACKAGE } from "./server.js";

it("the README's quick start is the compiled example", () => {
  const readme = readFileSync(join(PACKAGE, "README.md"), "utf8");
  const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(block, "the README has a TypeScript quick start");
  assert.equal(block, readFileSync(join(PACKAGE, "examples", "quick_start.ts"), "utf8"));
  assert.ok(block.split("\n").length <= 13, "a quick start stays short");
});
