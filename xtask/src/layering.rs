//! The crate layering of ADR-0002, as data, and the check that the manifests keep it.
//!
//! Each workspace crate sits on a level; a crate may depend only on crates of a lower level,
//! so dependency arrows point down and no cycle can form. `strata-memory` sits above
//! `strata-registry` because its stores reach the assembler through contributors that
//! implement the registry's `Contributor` trait; the registry never knows about stores.
//! `strata-mcp` sits beside it for the same reason: its live servers reach a runtime through
//! the registry's `LiveSource` trait, so the registry and the assembler stay network-free, and
//! only the service and the binary depend on the MCP client.
//! `xtask` depends on no workspace crate. Only normal and build dependencies are checked: a
//! test may use what it needs.

use std::collections::BTreeSet;

/// The workspace crates from the bottom up, with their level; each may depend only on crates
/// of a lower level.
pub const LEVELS: [(&str, u8); 8] = [
    ("strata-core", 0),
    ("strata-agentdef", 1),
    ("strata-registry", 2),
    ("strata-memory", 3),
    ("strata-mcp", 3),
    ("strata-assembler", 4),
    ("strata-serve", 5),
    ("strata-cli", 6),
];

/// The level of a workspace crate, if it is one.
pub fn level(name: &str) -> Option<u8> {
    LEVELS.iter().find(|(c, _)| *c == name).map(|(_, l)| *l)
}

/// Names of the dependencies in the `[dependencies]` and `[build-dependencies]` tables of a
/// manifest (including `[dependencies.name]` tables and target-specific tables).
pub fn normal_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut deps = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            let table = header.rsplit_once('.').map_or(header, |(_, last)| last);
            let is_dep_table = |t: &str| t == "dependencies" || t == "build-dependencies";
            in_deps = is_dep_table(table);
            // `[dependencies.strata-core]` names the dependency in the header.
            if let Some((prefix, name)) = header.rsplit_once('.') {
                let owner = prefix.rsplit('.').next().unwrap_or(prefix);
                if is_dep_table(owner) {
                    deps.insert(name.trim_matches('"').to_string());
                    in_deps = false;
                }
            }
            continue;
        }
        if !in_deps || line.is_empty() {
            continue;
        }
        if let Some((key, _)) = line.split_once('=') {
            let name = key
                .split('.')
                .next()
                .unwrap_or(key)
                .trim()
                .trim_matches('"');
            if !name.is_empty() {
                deps.insert(name.to_string());
            }
        }
    }
    deps
}

/// Every dependency that breaks the order, as a sentence. `crates` pairs each crate's name
/// with its manifest text.
pub fn violations(crates: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, manifest) in crates {
        let rank = level(name);
        if rank.is_none() && name != "xtask" {
            out.push(format!(
                "{name} is not in the layering of ADR-0002; add it to the record and to `layering::LEVELS`."
            ));
            continue;
        }
        for dep in normal_dependencies(manifest) {
            let Some(dep_rank) = level(&dep) else {
                continue;
            };
            if rank.is_none_or(|r| dep_rank >= r) {
                out.push(format!(
                    "{name} depends on {dep}, which is not below it (ADR-0002): move the shared code down or invert the dependency with a trait."
                ));
            }
        }
    }
    out
}

/// Reads the manifests of `crates/*` and `xtask` under `root`.
#[cfg(test)]
fn workspace_manifests(root: &std::path::Path) -> std::io::Result<Vec<(String, String)>> {
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("crates"))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    dirs.push(root.join("xtask"));
    let mut out = Vec::new();
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push((name, std::fs::read_to_string(dir.join("Cargo.toml"))?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verifies ADR-0002: every workspace crate depends only on crates below it.
    #[test]
    fn workspace_keeps_the_layering() {
        let manifests = workspace_manifests(&crate::workspace_root()).unwrap();
        assert!(manifests.len() > LEVELS.len());
        let problems = violations(&manifests);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    /// Verifies ADR-0002: an upward or unknown dependency is caught.
    #[test]
    fn upward_dependencies_are_rejected() {
        let core = "[package]\nname = \"strata-core\"\n\n[dependencies]\nserde.workspace = true\n\n[dependencies.strata-assembler]\nworkspace = true\n";
        let registry = "[dependencies]\nstrata-core = { workspace = true }\n\"strata-memory\".workspace = true\n\n[dev-dependencies]\nstrata-assembler.workspace = true\n";
        let memory = "[dependencies]\nstrata-registry.workspace = true\n\n[target.'cfg(unix)'.build-dependencies]\nstrata-assembler.workspace = true\n";
        let tool = "[dependencies]\nstrata-core.workspace = true\n";
        let got = violations(&[
            ("strata-core".into(), core.into()),
            ("strata-registry".into(), registry.into()),
            ("strata-memory".into(), memory.into()),
            ("xtask".into(), tool.into()),
            ("strata-new".into(), String::new()),
        ]);
        assert_eq!(got.len(), 5, "{got:#?}");
        assert!(got[0].starts_with("strata-core depends on strata-assembler"));
        assert!(got[1].starts_with("strata-registry depends on strata-memory"));
        assert!(got[2].starts_with("strata-memory depends on strata-assembler"));
        assert!(got[3].starts_with("xtask depends on strata-core"));
        assert!(got[4].starts_with("strata-new is not in the layering"));
    }
}

/// The crates under `crates/` whose root (`src/lib.rs`, else `src/main.rs`) does not turn
/// clippy's `too_many_lines` on for its code.
#[cfg(test)]
fn crates_without_the_line_limit(roots: &[(String, String)]) -> Vec<String> {
    const LIMIT: &str = "#![cfg_attr(not(test), warn(clippy::too_many_lines))]";
    roots
        .iter()
        .filter(|(_, text)| !text.lines().any(|l| l.trim() == LIMIT))
        .map(|(name, _)| name.clone())
        .collect()
}

#[cfg(test)]
mod line_limit {
    use super::crates_without_the_line_limit;

    /// Every crate under `crates/` holds its functions to one screen (ARCHITECTURE.md,
    /// "Function size").
    #[test]
    fn every_crate_turns_the_line_limit_on() {
        let root = crate::workspace_root().join("crates");
        let mut roots = Vec::new();
        for entry in std::fs::read_dir(&root).unwrap() {
            let dir = entry.unwrap().path();
            if !dir.join("Cargo.toml").is_file() {
                continue;
            }
            let lib = dir.join("src/lib.rs");
            let file = if lib.is_file() {
                lib
            } else {
                dir.join("src/main.rs")
            };
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            roots.push((name, std::fs::read_to_string(file).unwrap()));
        }
        assert!(roots.len() >= 8, "{} crates found", roots.len());
        let missing = crates_without_the_line_limit(&roots);
        assert!(missing.is_empty(), "without the line limit: {missing:?}");
    }

    /// A crate root without the attribute, or with it only in a comment, is named.
    #[test]
    fn a_crate_without_the_limit_is_named() {
        let on = "#![forbid(unsafe_code)]\n#![cfg_attr(not(test), warn(clippy::too_many_lines))]\n";
        let commented = "// #![cfg_attr(not(test), warn(clippy::too_many_lines))]\n";
        let got = crates_without_the_line_limit(&[
            ("a".into(), on.into()),
            ("b".into(), commented.into()),
            ("c".into(), "#![forbid(unsafe_code)]\n".into()),
        ]);
        assert_eq!(got, ["b", "c"]);
    }
}
