// dist/cjs holds the CommonJS build: its own package.json tells Node (and TypeScript) so, inside
// a package that is ESM ("type": "module") everywhere else.
import { writeFileSync } from "node:fs";

writeFileSync(
  new URL("../dist/cjs/package.json", import.meta.url),
  `${JSON.stringify({ type: "commonjs" })}\n`,
);
