/**
 * A loopback HTTP server between a client and `strata serve` that misbehaves on purpose: it
 * refuses requests with an error of its choosing, or forwards one and then loses the answer, and
 * forwards everything else unchanged. It keeps every request it received, so a test can see how
 * often the client tried and with which headers.
 * @module
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/** The request headers passed on to the server. */
const FORWARDED = ["authorization", "content-type", "idempotency-key"];
/** The response headers passed back to the client. */
const ANSWERED = ["content-type", "retry-after", "idempotent-replayed"];

/**
 * What to do with one request: answer with a strata error (`refuse`, with `Retry-After: 0`
 * unless `retryAfter` says otherwise, `null` for none), answer with an HTML page of a status
 * (`page`), forward it and close the connection without answering (`drop`: the server acted,
 * the client never hears of it), or forward it (`null`).
 */
export type Fault =
  { refuse: number; code: string; retryAfter?: string | null } | { page: number } | "drop" | null;

/** A request the proxy received, and what the server said of it when it was forwarded. */
export interface Seen {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  key: string | null;
  replayed: boolean | null;
}

export class FlakyProxy {
  readonly seen: Seen[] = [];
  readonly #sockets = new Set<Socket>();

  private constructor(
    readonly upstream: string,
    public faults: Fault[],
    readonly http: Server,
    readonly url: string,
  ) {}

  /** Listens on `port` of 127.0.0.1 (0: any free one). */
  static async start(upstream: string, faults: Fault[] = [], port = 0): Promise<FlakyProxy> {
    let proxy: FlakyProxy | undefined;
    const http = createServer((req, res) => {
      proxy!.#serve(req, res).catch((err: unknown) => {
        res.destroy(err instanceof Error ? err : new Error(String(err)));
      });
    });
    await new Promise<void>((done, fail) => {
      http.once("error", fail);
      http.listen(port, "127.0.0.1", done);
    });
    const { port: bound } = http.address() as AddressInfo;
    proxy = new FlakyProxy(upstream, [...faults], http, `http://127.0.0.1:${bound}`);
    http.on("connection", (socket: Socket) => {
      proxy!.#sockets.add(socket);
      socket.once("close", () => proxy!.#sockets.delete(socket));
    });
    return proxy;
  }

  /** The `Idempotency-Key` of every request received, in order. */
  keys(): (string | null)[] {
    return this.seen.map((s) => s.key);
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((done) => this.http.close(() => done()));
    this.#sockets.forEach((socket) => socket.destroy());
    await closed;
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) {
      chunks.push(chunk as Buffer);
    }
    const body = Buffer.concat(chunks).toString();
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (typeof value === "string") {
        headers[name] = value;
      }
    }
    const seen: Seen = {
      method: req.method ?? "",
      path: req.url ?? "",
      headers,
      body,
      key: headers["idempotency-key"] ?? null,
      replayed: null,
    };
    this.seen.push(seen);
    const fault = this.faults.shift() ?? null;
    if (fault !== null && fault !== "drop" && "refuse" in fault) {
      const error = { error: { code: fault.code, message: `${fault.code} planted by the test proxy` } };
      const retryAfter = fault.retryAfter === undefined ? "0" : fault.retryAfter;
      const extra: Record<string, string> = retryAfter === null ? {} : { "retry-after": retryAfter };
      this.#answer(res, fault.refuse, JSON.stringify(error), {
        "content-type": "application/json",
        ...extra,
      });
      return;
    }
    if (fault !== null && fault !== "drop" && "page" in fault) {
      this.#answer(res, fault.page, `<html><body>${fault.page} from a proxy</body></html>`, {
        "content-type": "text/html",
      });
      return;
    }
    const forwarded: Record<string, string> = {};
    for (const name of FORWARDED) {
      if (headers[name] !== undefined) {
        forwarded[name] = headers[name];
      }
    }
    const init: RequestInit = { method: seen.method, headers: forwarded };
    if (body) {
      init.body = body;
    }
    const response = await fetch(this.upstream + seen.path, init);
    const answer = await response.text();
    seen.replayed = response.headers.get("idempotent-replayed") === "true";
    if (fault === "drop") {
      req.socket.destroy();
      return;
    }
    const passed: Record<string, string> = {};
    for (const name of ANSWERED) {
      const value = response.headers.get(name);
      if (value !== null) {
        passed[name] = value;
      }
    }
    this.#answer(res, response.status, answer, passed);
  }

  #answer(res: ServerResponse, status: number, body: string, headers: Record<string, string>): void {
    res.writeHead(status, { ...headers, "content-length": Buffer.byteLength(body) });
    res.end(body);
  }
}

/** A loopback port nothing listens on (free when asked; a test may listen on it later). */
export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((done) => probe.listen(0, "127.0.0.1", done));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((done) => probe.close(() => done()));
  return port;
}
