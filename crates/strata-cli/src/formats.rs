//! The file-format reference, `docs/reference/formats.md`, generated from the JSON Schema of
//! the serde types that read each format (the agent definition, the trust store, the runtime
//! input of `strata assemble`, `strata.toml` and a line of a JSONL memory import), with the
//! example files of `examples/ada` shown verbatim (ADR-0026).
//!
//! Only tests compile this module. `cargo test -p strata-cli` fails when the page on disk
//! differs from what the types say, naming the command that rewrites it
//! (`STRATA_UPDATE_DOCS=1 cargo test -p strata-cli formats`, which `cargo xtask docs` runs).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Where the page is written, relative to the repository.
pub const PAGE: &str = "docs/reference/formats.md";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Resolve a `$ref` into the root schema's `$defs`.
fn resolve<'a>(root: &'a Value, s: &'a Value) -> &'a Value {
    match s.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix("#/$defs/")
            .and_then(|name| root.get("$defs").and_then(|d| d.get(name)))
            .map_or(s, |t| resolve(root, t)),
        None => s,
    }
}

/// A short type description of a schema: `string`, `integer`, `array of string`, one of the
/// names of an enum, or the alternatives of a `oneOf`/`anyOf`.
fn type_of(root: &Value, s: &Value) -> String {
    let s = resolve(root, s);
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(|v| {
                format!(
                    "`{}`",
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
    }
    if let Some(c) = s.get("const") {
        return format!(
            "`{}`",
            c.as_str().map_or_else(|| c.to_string(), str::to_owned)
        );
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            let parts: Vec<String> = alts
                .iter()
                .map(|a| type_of(root, a))
                .filter(|t| t != "null" && t != "any")
                .collect();
            let mut unique: Vec<String> = Vec::new();
            for p in parts {
                if !unique.contains(&p) {
                    unique.push(p);
                }
            }
            return unique.join(" or ");
        }
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let types: Vec<&str> = types.into_iter().filter(|t| *t != "null").collect();
    match types.as_slice() {
        ["array"] => match s.get("items") {
            Some(items) => format!("array of {}", type_of(root, items)),
            None => "array".into(),
        },
        ["object"] if s.get("properties").is_some() => "table".into(),
        ["object"] => "object".into(),
        [t] => (*t).to_owned(),
        [] => "any".into(),
        many => many.join(" or "),
    }
}

/// The object schema to descend into for nested fields, if `s` is (an array of) an object with
/// properties, or an `anyOf` whose object alternative has them.
fn nested<'a>(root: &'a Value, s: &'a Value) -> Option<(&'a Value, bool)> {
    let s = resolve(root, s);
    if s.get("properties").is_some() {
        return Some((s, false));
    }
    if let Some(items) = s.get("items") {
        let items = resolve(root, items);
        if items.get("properties").is_some() {
            return Some((items, true));
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            for a in alts {
                let a = resolve(root, a);
                if a.get("properties").is_some() {
                    return Some((a, false));
                }
            }
        }
    }
    None
}

fn one_line(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// One table row per field, nested tables and arrays of tables by dotted path.
fn rows(root: &Value, obj: &Value, prefix: &str, out: &mut String, depth: usize) {
    let empty = Map::new();
    let props = obj
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, schema) in props {
        let path = format!("{prefix}{name}");
        let resolved = resolve(root, schema);
        let desc = schema
            .get("description")
            .or_else(|| resolved.get("description"))
            .and_then(Value::as_str)
            .unwrap_or("");
        // Defaults of whole tables are the defaults of their fields, listed below them.
        let default = schema
            .get("default")
            .filter(|d| !d.is_object())
            .map(|d| format!("`{d}`"))
            .unwrap_or_default();
        let req = if required.contains(&name.as_str()) {
            "yes"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "| `{path}` | {} | {req} | {} | {} |",
            one_line(&type_of(root, schema)),
            one_line(&default),
            one_line(desc)
        );
        if depth < 4 {
            if let Some((inner, array)) = nested(root, schema) {
                let p = if array {
                    format!("{path}[].")
                } else {
                    format!("{path}.")
                };
                rows(root, inner, &p, out, depth + 1);
            }
        }
    }
}

fn table(schema: &Value) -> String {
    let mut out =
        String::from("| field | type | required | default | meaning |\n|---|---|---|---|---|\n");
    rows(schema, schema, "", &mut out, 0);
    out
}

fn example(path: &str, lang: &str) -> String {
    let text = std::fs::read_to_string(root().join(path)).unwrap_or_default();
    format!("```{lang}\n{}\n```\n", text.trim_end())
}

fn section(
    out: &mut String,
    title: &str,
    intro: &str,
    schema: &schemars::Schema,
    example_block: &str,
) {
    let value = schema.as_value();
    let _ = write!(
        out,
        "## {title}\n\n{intro}\n\n{example_block}\n{}\n<details><summary>JSON Schema</summary>\n\n```json\n{}\n```\n\n</details>\n\n",
        table(value),
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// The page.
pub fn render() -> String {
    let mut out = String::from(
        "<!-- Generated by `cargo xtask docs` from the serde types; do not edit. -->\n\n\
         # File formats\n\n\
         Every file strata reads, generated from the JSON Schema of the types that read it, so \
         it cannot drift from the code. Unknown fields are errors in every format, so a typo \
         never silently falls back to a default. The example agent in \
         [`examples/ada`](../../examples/ada/) uses the first three formats; the README's \
         getting-started section signs, verifies and assembles it.\n\n\
         - [Agent definition](#agent-definition-toml) (`strata sign`)\n\
         - [Trust store](#trust-store-toml) (`strata verify`, `strata assemble`, `strata keygen --trust-entry`)\n\
         - [Runtime input](#runtime-input-json) (`strata assemble --input`)\n\
         - [strata.toml](#stratatoml) (`strata assemble --config`)\n\
         - [Memory import line](#memory-import-line-jsonl) (`strata memory import FILE.jsonl`)\n\n",
    );
    section(
        &mut out,
        "Agent definition (TOML)",
        "Layers 1 (core) and 2 (characteristics) of an agent, signed with `strata sign` into a \
         DSSE envelope. Files are referenced by a path relative to the definition (no `..`) and \
         pinned by SHA-256: `identity = { file = \"SOUL.md\", sha256 = \"<hex>\" }` (any text \
         field may be such a reference). `strata sign` also checks that `version` is at least \
         1, that every `prefer_over` names an allowlisted tool and that every template \
         compiles. The example, `examples/ada/ada.toml`:",
        &schemars::schema_for!(strata_agentdef::AgentDefinition),
        &example("examples/ada/ada.toml", "toml"),
    );
    let trust_example = "```toml\nthreshold = 1\n\n[[keys]]\nid = \"<hex sha256 of the public key>\"\nname = \"release-2026\"\npublic_key = \"ed25519:<base64>\"\nnot_before = \"2026-01-01T00:00:00Z\"\nnot_after = \"2027-01-01T00:00:00Z\"\n\n[[revoked]]\nid = \"<key id of a listed key>\"\nreason = \"laptop lost\"\n```\n";
    section(
        &mut out,
        "Trust store (TOML)",
        "The public keys whose signatures a runtime accepts. `strata keygen --out KEY \
         --trust-entry NAME >> trust.toml` appends a `[[keys]]` entry; the example agent's \
         `examples/ada/trust.toml` starts with no keys. `strata verify` prints the store's \
         SHA-256 (`trust=`), which `--trust-sha256` pins. For example:",
        &strata_agentdef::trust_store_schema(),
        trust_example,
    );
    section(
        &mut out,
        "Runtime input (JSON)",
        "Layers 3-6 of one assembly, given to `strata assemble --input` (repeatable; `-` reads \
         standard input). Everything in it is untrusted: it is fenced as data and can only \
         narrow the signed tool allowlist. Turns become layer-5 sections `turn.1`, `turn.2`, \
         ... in the order given; a `tool_call` and its `tool_result` share a `call_id`. The \
         example, `examples/ada/turn.json`:",
        &schemars::schema_for!(strata_assembler::assemble::RuntimeInput),
        &example("examples/ada/turn.json", "json"),
    );
    let config_example = format!(
        "```toml\n{}```\n",
        strata_registry::Config::default().to_toml_string()
    );
    section(
        &mut out,
        "strata.toml",
        "The runtime's configuration of prompt assembly, given to `strata assemble --config`. \
         Every table and key is optional; `[budget]` names its per-layer soft budgets after \
         the layers (the older names `system`, `skills`, `history` and `memory` are still \
         read). The defaults:",
        &schemars::schema_for!(strata_registry::Config),
        &config_example,
    );
    section(
        &mut out,
        "Memory import line (JSONL)",
        "One memory per line of a file given to `strata memory import FILE.jsonl`; blank lines \
         are skipped, and a line that is refused is reported by number while the others are \
         stored. For example:",
        &schemars::schema_for!(crate::memory_cmd::JsonlMemory),
        "```json\n{\"content\": \"Deploys freeze on Fridays.\", \"agent_id\": \"ada\", \"tags\": [\"ops\"], \"id\": \"m-17\"}\n```\n",
    );
    out.trim_end().to_owned() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verifies ADR-0026: the committed page is what the types say; `STRATA_UPDATE_DOCS=1`
    /// rewrites it.
    #[test]
    fn the_format_reference_is_fresh() {
        let path = root().join(PAGE);
        let want = render();
        if std::env::var_os("STRATA_UPDATE_DOCS").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{PAGE} is stale: run `cargo xtask docs` (or `STRATA_UPDATE_DOCS=1 cargo test -p strata-cli formats`)"
        );
    }

    /// The reference describes every field a reader needs to write the example files, and the
    /// examples it shows are read by the very types it documents.
    #[test]
    fn the_reference_covers_the_fields_of_the_examples() {
        let page = render();
        for field in [
            "`core.identity`",
            "`core.tools[].prefer_over`",
            "`templates.assistant.tier1`",
            "`keys[].public_key`",
            "`threshold`",
            "`turns[].call_id`",
            "`sections[].layer`",
            "`budget.working_memory`",
            "`content`",
        ] {
            assert!(page.contains(field), "the reference lacks {field}");
        }
        let turn = std::fs::read_to_string(root().join("examples/ada/turn.json")).unwrap();
        strata_assembler::assemble::RuntimeInput::from_json(&turn).unwrap();
    }
}
