//! Workspace hints: the structure of the workspace folder, so the model knows where things are
//! without listing directories first (the seeds' workspace contributor).
//!
//! The listing is layer 3 content read from the machine: names of files and folders are
//! untrusted text, fenced like any other runtime section (ADR-0006, ADR-0009). It is bounded in
//! depth and entries, sorted by name, skips hidden entries and well-known build and dependency
//! folders, and opts into a TTL so a gathering does not walk the disk every time (ADR-0011).

use std::path::{Path, PathBuf};

use strata_core::{RuntimeLayer, Section, SourceKind};

use crate::contributor::{
    CachePolicy, ContributionContext, Contributor, ContributorError, ContributorMeta,
};
use crate::modes::StandardSection;

/// Lists a workspace folder's structure as one section (`workspace-hints`).
#[derive(Debug, Clone)]
pub struct WorkspaceHints {
    dir: PathBuf,
    depth: usize,
    max_entries: usize,
}

impl WorkspaceHints {
    /// The contributor id.
    pub const ID: &'static str = "builtin.workspace.hints";
    /// Folders never descended into or listed (build output, dependencies, version control).
    pub const SKIPPED: &'static [&'static str] = &["target", "node_modules", "__pycache__"];

    /// The structure of `dir`, two levels deep, at most 200 entries.
    pub fn new(dir: impl Into<PathBuf>) -> WorkspaceHints {
        WorkspaceHints {
            dir: dir.into(),
            depth: 2,
            max_entries: 200,
        }
    }

    /// List `depth` levels (at least 1).
    #[must_use]
    pub fn with_depth(mut self, depth: usize) -> Self {
        self.depth = depth.max(1);
        self
    }

    /// List at most `n` entries (at least 1); a last line says how many were left out.
    #[must_use]
    pub fn with_max_entries(mut self, n: usize) -> Self {
        self.max_entries = n.max(1);
        self
    }

    /// The listing lines (`src/`, `  lib.rs`...) and how many entries were left out.
    pub fn listing(&self) -> Result<(Vec<String>, usize), ContributorError> {
        let mut lines = Vec::new();
        let mut left_out = 0;
        self.walk(&self.dir, 0, &mut lines, &mut left_out)?;
        Ok((lines, left_out))
    }

    fn walk(
        &self,
        dir: &Path,
        level: usize,
        lines: &mut Vec<String>,
        left_out: &mut usize,
    ) -> Result<(), ContributorError> {
        let read = std::fs::read_dir(dir).map_err(|e| {
            ContributorError::Source(format!(
                "could not list the workspace folder {}: {e}",
                dir.display()
            ))
        })?;
        let mut entries: Vec<(String, bool)> = read
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let is_dir = e.file_type().ok()?.is_dir();
                let hidden = name.starts_with('.');
                let skipped = is_dir && Self::SKIPPED.contains(&name.as_str());
                (!hidden && !skipped).then_some((name, is_dir))
            })
            .collect();
        entries.sort();
        for (name, is_dir) in entries {
            if lines.len() >= self.max_entries {
                *left_out += 1;
                continue;
            }
            let indent = "  ".repeat(level);
            lines.push(format!("{indent}{name}{}", if is_dir { "/" } else { "" }));
            if is_dir && level + 1 < self.depth {
                self.walk(&dir.join(&name), level + 1, lines, left_out)?;
            }
        }
        Ok(())
    }
}

impl Contributor for WorkspaceHints {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            source: SourceKind::Static,
            ..StandardSection::WorkspaceHints.meta()
        }
    }
    fn cache_policy(&self) -> CachePolicy {
        CachePolicy::Ttl(None)
    }
    fn contribute(&self, _ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let (lines, left_out) = self.listing()?;
        if lines.is_empty() {
            return Ok(Vec::new());
        }
        let mut text = String::from("Workspace structure:\n");
        text.push_str(&lines.join("\n"));
        if left_out > 0 {
            text.push_str(&format!("\n[{left_out} more entries not listed]"));
        }
        let name = format!("dir:{}", self.dir.display());
        Ok(vec![self
            .meta()
            .section(Self::ID, RuntimeLayer::Shared, "workspace-hints", text)
            .map_err(|e| ContributorError::Source(e.to_string()))?
            .source(SourceKind::Static, &name)
            .build()])
    }
}
