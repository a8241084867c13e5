/**
 * The assembly report's interfaces hold to what the server sends: for a real report with every
 * kind of section, each object has the keys its interface declares (the required ones always)
 * and no other, and its enumerations take only the values the interfaces name.
 * @module
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, it } from "node:test";

import {
  StrataClient,
  type AssemblyReport,
  type Breakpoint,
  type Conflict,
  type CutSection,
  type DroppedSection,
  type FilteredSection,
  type KeptSection,
  type Layer,
  type LayerReport,
  type Omission,
  type OverriddenSection,
  type Provenance,
  type RequestReport,
  type SectionReport,
  type SectionReportBase,
  type SourceKind,
  type Tier,
  type ToolCall,
  type ToolsReport,
} from "@strata/client";
import { Server, TOKEN } from "./server.js";

/** Each key of `T`, and whether an object of `T` must have it. */
type Keys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? "optional" : "required" };

const BASE = {
  id: "required",
  layer: "required",
  tokens: "required",
  chars: "required",
  bytes: "required",
  filled: "optional",
  role: "optional",
  sticky: "required",
  stable: "required",
  provenance: "required",
} as const satisfies Keys<SectionReportBase>;
const SECTION_KEYS = {
  kept: { ...BASE, status: "required" } satisfies Keys<KeptSection>,
  cut: {
    ...BASE,
    status: "required",
    head_bytes: "required",
    tail_bytes: "required",
    full_tokens: "optional",
  } satisfies Keys<CutSection>,
  dropped: { ...BASE, status: "required", reason: "required" } satisfies Keys<DroppedSection>,
  filtered: { ...BASE, status: "required", reason: "required" } satisfies Keys<FilteredSection>,
  overridden: {
    ...BASE,
    status: "required",
    by_layer: "required",
    by_id: "required",
    on: "required",
  } satisfies Keys<OverriddenSection>,
} as const satisfies Record<SectionReport["status"], Record<string, "required" | "optional">>;

const REPORT_KEYS = {
  agent_id: "required",
  identity_digest: "required",
  tokenizer: "required",
  tier: "required",
  total_tokens: "required",
  response_reserve: "required",
  prompt_budget: "required",
  used_tokens: "required",
  idle_tokens: "required",
  chars: "required",
  max_total_chars: "required",
  identity_tokens: "required",
  stable_prefix: "required",
  breakpoints: "required",
  layers: "required",
  sections: "required",
  conflicts: "required",
  tools: "required",
  request: "optional",
  omissions: "required",
} as const satisfies Keys<AssemblyReport>;
const LAYER_KEYS = {
  layer: "required",
  tokens: "required",
  budget: "required",
  kept: "required",
  cut: "required",
  dropped: "required",
  dropped_bytes: "required",
} as const satisfies Keys<LayerReport>;
const BREAKPOINT_KEYS = {
  byte: "required",
  token: "required",
  after_layer: "required",
} as const satisfies Keys<Breakpoint>;
const CONFLICT_KEYS = {
  on: "required",
  winner: "required",
  loser: "required",
} as const satisfies Keys<Conflict>;
const OMISSION_KEYS = {
  id: "required",
  layer: "required",
  reason: "required",
} as const satisfies Keys<Omission>;
const TOOLS_KEYS = {
  effective: "required",
  refused: "required",
  schema_text_removed: "optional",
} as const satisfies Keys<ToolsReport>;
const REQUEST_KEYS = {
  provider: "required",
  count: "required",
  system_tokens: "required",
  tool_tokens: "required",
  message_tokens: "required",
  margin_pct: "required",
  total_tokens: "required",
  messages: "required",
  stable_prefix_tokens: "required",
  expected_cached_tokens: "required",
  min_cacheable_tokens: "required",
} as const satisfies Keys<RequestReport>;
const PROVENANCE_KEYS = {
  source: "required",
  name: "required",
  content_hash: "required",
  record: "optional",
  created_ms: "optional",
  score: "optional",
} as const satisfies Keys<Provenance>;
const SOURCE_KEYS = { kind: "required", server: "optional" } as const satisfies Keys<SourceKind>;

const LAYERS = new Set<string>([
  "core",
  "characteristics",
  "shared",
  "delegated",
  "working_memory",
  "long_term_memory",
] satisfies Layer[]);
const TIERS = new Set<string>(["T1", "T2", "T3", "T4", "T5"] satisfies Tier[]);

/** Where `value` does not have exactly the keys of `keys`. */
function keyProblems(value: unknown, keys: Record<string, "required" | "optional">, where: string): string[] {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return [`${where}: ${JSON.stringify(value)} is not an object`];
  }
  const found = Object.keys(value)
    .filter((k) => !(k in keys))
    .map((k) => `${where}: unknown key \`${k}\``);
  for (const [k, need] of Object.entries(keys)) {
    if (need === "required" && !(k in value)) {
      found.push(`${where}: \`${k}\` is missing`);
    }
  }
  return found;
}

function reportProblems(report: AssemblyReport): string[] {
  const found = keyProblems(report, REPORT_KEYS, "report");
  const layer = (value: string, where: string) => (LAYERS.has(value) ? [] : [`${where}: layer ${value}`]);
  if (!TIERS.has(report.tier)) {
    found.push(`report.tier: ${report.tier}`);
  }
  for (const [i, b] of [report.stable_prefix, ...report.breakpoints].entries()) {
    found.push(
      ...keyProblems(b, BREAKPOINT_KEYS, `breakpoint ${i}`),
      ...layer(b.after_layer, `breakpoint ${i}`),
    );
  }
  for (const [i, l] of report.layers.entries()) {
    found.push(...keyProblems(l, LAYER_KEYS, `layers[${i}]`), ...layer(l.layer, `layers[${i}]`));
  }
  for (const [i, s] of report.sections.entries()) {
    const where = `sections[${i}] (${s.id})`;
    const keys = SECTION_KEYS[s.status] as Record<string, "required" | "optional"> | undefined;
    if (keys === undefined) {
      found.push(`${where}: status ${String(s.status)}`);
      continue;
    }
    found.push(...keyProblems(s, keys, where), ...layer(s.layer, where));
    found.push(...keyProblems(s.provenance, PROVENANCE_KEYS, `${where}.provenance`));
    found.push(...keyProblems(s.provenance.source, SOURCE_KEYS, `${where}.provenance.source`));
  }
  for (const [i, c] of report.conflicts.entries()) {
    found.push(...keyProblems(c, CONFLICT_KEYS, `conflicts[${i}]`), ...layer(c.winner[0], `conflicts[${i}]`));
  }
  for (const [i, o] of report.omissions.entries()) {
    found.push(...keyProblems(o, OMISSION_KEYS, `omissions[${i}]`));
  }
  found.push(...keyProblems(report.tools, TOOLS_KEYS, "tools"));
  if (report.request !== undefined) {
    found.push(...keyProblems(report.request, REQUEST_KEYS, "request"));
  }
  return found;
}

const WORDS = Array.from({ length: 3000 }, (_, i) => `word${i}`).join(" ");
const SECTIONS = [
  // Two sections contesting one key: the higher layer wins, the other is overridden.
  { layer: "shared", id: "winner", content: "Deploys freeze on Fridays.", key: "freeze" },
  { layer: "delegated", id: "loser", content: "Deploys never freeze.", key: "freeze" },
  // More than the budget holds: one is cut to fit, the other dropped.
  { layer: "delegated", id: "long-brief", content: WORDS, priority: 1 },
  { layer: "long_term_memory", id: "long-memory", content: WORDS },
  // Not taking part in this prompt mode.
  { layer: "shared", id: "minimal-only", content: "Be brief.", modes: ["minimal"] },
];
const CALL: ToolCall = { id: "call_01", name: "file_read", arguments: { path: "notes.txt" } };

let server: Server;
let client: StrataClient;

before(async () => {
  server = await Server.start();
  client = new StrataClient({ baseUrl: server.url, token: TOKEN });
});

after(async () => {
  assert.equal(await server.stop(), 0, server.stderr());
});

it("the report's interfaces are what the server sends, every kind of section included", async () => {
  const id = `ts-${randomUUID()}`;
  const first = await client.prepareTurn(id, { message: "What does notes.txt say?", sections: SECTIONS });
  await client.recordReply(id, { tool_calls: [CALL] });
  await client.recordToolResult(id, { call_id: CALL.id, output: "Deploys freeze on Fridays." });
  const second = await client.prepareTurn(id, { context_window: 8192, sections: SECTIONS });
  for (const turn of [first, second]) {
    assert.deepEqual(reportProblems(turn.report), []);
  }

  const report = second.report;
  assert.deepEqual(new Set(report.sections.map((s) => s.status)), new Set(Object.keys(SECTION_KEYS)));
  const byId = new Map(report.sections.map((s) => [s.id, s]));
  const loser = byId.get("loser");
  assert.ok(loser?.status === "overridden");
  assert.deepEqual([loser.by_id, loser.by_layer, loser.on], ["winner", "shared", "freeze"]);
  assert.deepEqual(report.conflicts, [
    { on: "freeze", winner: ["shared", "winner"], loser: ["delegated", "loser"] },
  ]);
  const cut = byId.get("long-brief");
  assert.ok(cut?.status === "cut");
  assert.ok(cut.head_bytes > 0 && cut.head_bytes < cut.bytes);
  assert.equal(byId.get("long-memory")?.status, "dropped");
  assert.equal(byId.get("minimal-only")?.status, "filtered");
  assert.deepEqual(
    report.sections.filter((s) => s.layer === "working_memory").map((s) => s.role),
    ["user", "tool_call", "tool_result"],
  );
  assert.equal(report.request?.provider, "openai-chat");
});

it("the key check refuses what the interfaces do not declare", () => {
  const section = {
    id: "s",
    layer: "shared",
    tokens: 1,
    chars: 1,
    bytes: 1,
    sticky: false,
    stable: true,
    status: "dropped",
    provenance: { source: { kind: "static" }, name: "n", content_hash: "h" },
  };
  assert.notDeepEqual(keyProblems(section, SECTION_KEYS.dropped, "s"), [], "a dropped section has a reason");
  assert.deepEqual(keyProblems({ ...section, reason: "budget" }, SECTION_KEYS.dropped, "s"), []);
  assert.notDeepEqual(keyProblems({ ...section, reason: "budget", extra: 1 }, SECTION_KEYS.dropped, "s"), []);
});
