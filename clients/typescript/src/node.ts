/**
 * Node-only helpers (they read files): `import { readTokenFile } from "@strata/client/node"`.
 * @module
 */

import { readFile } from "node:fs/promises";

/**
 * The first usable token of a token file: blank lines, `#` comments and `sha256:` lines
 * (hashes the server accepts, but no client can send) are skipped.
 */
export async function readTokenFile(path: string): Promise<string> {
  const text = await readFile(path, "utf8");
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line && !line.startsWith("#") && !line.startsWith("sha256:")) {
      return line;
    }
  }
  throw new Error(
    `the token file ${JSON.stringify(path)} holds no usable token (only blank lines, comments ` +
      "or sha256: hashes); put the plain token on a line of its own",
  );
}
