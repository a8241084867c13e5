/**
 * Starting a real `strata serve` for the tests: the binary, a temporary SQLite store, a token
 * file with known tokens, the demo agent, and the `listening ...` line read from its stdout.
 * @module
 */

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, openSync, readFileSync, writeFileSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The package directory (tests run from `build/test/`). */
export const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const REPO = resolve(PACKAGE, "..", "..");
export const DEMO = join(REPO, "crates", "strata-cli", "demo");
export const OPENAPI = join(REPO, "docs", "openapi.json");

/** Accepted: written to the token file in plain text. */
export const TOKEN = "client-tests-token-0123456789abcdef";
/** Accepted: the token file holds only its SHA-256 (`sha256:<hex>`). */
export const HASHED_TOKEN = "client-tests-hashed-token-fedcba9876543210";
export const MODEL = "gpt-4o-mini";
/** The model of the servers started for `--provider anthropic`. */
export const ANTHROPIC_MODEL = "claude-sonnet-5-5";

/** The demo agent's id and version, read from its signed envelope's payload (TOML). */
export const DEMO_AGENT = (() => {
  const envelope = JSON.parse(readFileSync(join(DEMO, "agent.signed.json"), "utf8")) as { payload: string };
  const toml = Buffer.from(envelope.payload, "base64").toString("utf8");
  const field = (name: string) => new RegExp(`^${name} = (.+)$`, "m").exec(toml)?.[1] ?? "";
  return { id: JSON.parse(field("id")) as string, version: Number(field("version")) };
})();
const START_TIMEOUT_MS = 120_000;

/** `$STRATA_BIN`, else the debug binary `cargo build -p strata-cli` leaves in the target dir. */
export function strataBin(): string {
  const given = process.env["STRATA_BIN"];
  if (given) {
    return given;
  }
  execFileSync("cargo", ["build", "--quiet", "-p", "strata-cli"], { cwd: REPO, stdio: "inherit" });
  const meta = execFileSync("cargo", ["metadata", "--format-version", "1", "--no-deps"], {
    cwd: REPO,
    maxBuffer: 64 << 20,
  });
  const target = (JSON.parse(meta.toString()) as { target_directory: string }).target_directory;
  return join(target, "debug", "strata");
}

export class Server {
  private constructor(
    readonly process: ChildProcess,
    readonly url: string,
    readonly workdir: string,
  ) {}

  /**
   * Starts `strata serve` for OpenAI Chat Completions (or `provider`) on a fresh store in a temp
   * dir, on loopback TCP unless `where` says otherwise (`["--unix", path]`).
   */
  static async start(
    where: string[] = ["--listen", "127.0.0.1:0"],
    provider: "anthropic" | "openai-chat" | "openai-responses" = "openai-chat",
    {
      agent = join(DEMO, "agent.signed.json"),
      trust = join(DEMO, "trust.toml"),
      extra = [] as string[],
    } = {},
  ): Promise<Server> {
    const workdir = mkdtempSync(join(tmpdir(), "strata-ts-"));
    const tokenFile = join(workdir, "tokens");
    const digest = createHash("sha256").update(HASHED_TOKEN).digest("hex");
    writeFileSync(tokenFile, `# tokens of the client tests\n\n${TOKEN}\nsha256:${digest}\n`, {
      mode: 0o600,
    });
    const args = [
      "serve",
      "--agent",
      agent,
      "--trust",
      trust,
      "--store",
      join(workdir, "memory.db"),
      ...where,
      "--token-file",
      tokenFile,
      "--provider",
      provider,
      "--model",
      provider === "anthropic" ? ANTHROPIC_MODEL : MODEL,
      "--max-tokens",
      "1024",
      ...extra,
    ];
    const stderrPath = join(workdir, "stderr.log");
    const stderr = openSync(stderrPath, "w");
    const child = spawn(strataBin(), args, { cwd: workdir, stdio: ["ignore", "pipe", stderr] });
    closeSync(stderr);
    const lines = createInterface({ input: child.stdout! });
    const first = await new Promise<string>((done) => {
      const timer = setTimeout(() => done(""), START_TIMEOUT_MS);
      lines.once("line", (line) => {
        clearTimeout(timer);
        done(line);
      });
      child.once("exit", () => {
        clearTimeout(timer);
        done("");
      });
    });
    if (!first.startsWith("listening ")) {
      child.kill("SIGKILL");
      throw new Error(
        `strata serve did not print \`listening ...\` (got ${JSON.stringify(first)}); its stderr:\n` +
          readFileSync(stderrPath, "utf8"),
      );
    }
    return new Server(child, first.slice("listening ".length).trim(), workdir);
  }

  /** SIGTERM, then the exit code (0 when it drained and exited cleanly). */
  async stop(): Promise<number | null> {
    if (this.process.exitCode !== null) {
      return this.process.exitCode;
    }
    const exited = new Promise<number | null>((done) => this.process.once("exit", (code) => done(code)));
    this.process.kill("SIGTERM");
    return exited;
  }

  stderr(): string {
    return readFileSync(join(this.workdir, "stderr.log"), "utf8");
  }
}
