/**
 * Node-only helpers (they read files and open Unix sockets):
 * `import { readTokenFile, unixSocketFetch } from "@strata/client/node"`.
 * @module
 */

import { readFile } from "node:fs/promises";
import { request, type RequestOptions } from "node:http";

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

/**
 * A `fetch` that sends every request over the Unix socket `path` (`strata serve --unix PATH`),
 * through `node:http`; pass it as the `fetch` option, with any `baseUrl` (its host is only a
 * name in the `Host` header):
 *
 * ```ts
 * const strata = new StrataClient({ baseUrl: "http://strata", token, fetch: unixSocketFetch(path) });
 * ```
 */
export function unixSocketFetch(path: string): typeof globalThis.fetch {
  return (input, init) =>
    new Promise<Response>((resolve, reject) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      const headers = new Headers(init?.headers);
      const body = init?.body;
      if (body !== undefined && body !== null && typeof body !== "string") {
        reject(new TypeError("unixSocketFetch sends string bodies only"));
        return;
      }
      const options: RequestOptions = {
        socketPath: path,
        method: init?.method ?? "GET",
        path: url.pathname + url.search,
        headers: {
          ...Object.fromEntries(headers),
          host: url.host,
          ...(typeof body === "string" ? { "content-length": String(Buffer.byteLength(body)) } : {}),
        },
      };
      if (init?.signal) {
        options.signal = init.signal;
      }
      const req = request(options, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", reject);
        res.on("end", () => {
          const responseHeaders = new Headers();
          for (const [name, value] of Object.entries(res.headers)) {
            for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value]) {
              responseHeaders.append(name, v);
            }
          }
          const status = res.statusCode ?? 500;
          const empty = status === 204 || status === 304;
          resolve(new Response(empty ? null : Buffer.concat(chunks), { status, headers: responseHeaders }));
        });
      });
      req.on("error", reject);
      req.end(body ?? undefined);
    });
}
