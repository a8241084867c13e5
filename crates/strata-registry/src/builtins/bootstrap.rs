//! Workspace bootstrap files: `SOUL.md`, `AGENTS.md`, `TOOLS.md`, `COMMANDS.md`, `IDENTITY.md`,
//! and the user's `PREFERENCES.md` (Ivy's preferences contributor).
//!
//! These files are unsigned and anyone with write access to the workspace can change them, so
//! they are layer 3 content, fenced like any other runtime text, and never identity whatever
//! their names say (ADR-0006). They are dynamic (files change), but opt into a 30 s TTL with
//! stale-while-revalidate so a gathering does not read the disk every time (ADR-0011).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use strata_core::{Content, RuntimeLayer, Section, SourceKind};

use crate::contributor::{
    CachePolicy, ContributionContext, Contributor, ContributorError, ContributorMeta,
};
use crate::modes::StandardSection;

/// Reads bootstrap files from a workspace folder; one section per file present
/// (`bootstrap/<name>`), in the order of the file list.
#[derive(Debug, Clone)]
pub struct BootstrapFiles {
    dir: PathBuf,
    files: Vec<String>,
    max_chars: usize,
}

impl BootstrapFiles {
    /// The contributor id.
    pub const ID: &'static str = "builtin.bootstrap";
    /// The files looked for by default.
    pub const DEFAULT_FILES: &'static [&'static str] = &[
        "SOUL.md",
        "AGENTS.md",
        "TOOLS.md",
        "COMMANDS.md",
        "IDENTITY.md",
        "PREFERENCES.md",
    ];
    /// The longest file kept, in characters; longer files are cut with a marker.
    pub const DEFAULT_MAX_CHARS: usize = 20_000;

    /// Read the default files from `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> BootstrapFiles {
        BootstrapFiles {
            dir: dir.into(),
            files: Self::DEFAULT_FILES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            max_chars: Self::DEFAULT_MAX_CHARS,
        }
    }

    /// Read these file names instead (plain names inside the folder, no paths).
    #[must_use]
    pub fn with_files(mut self, files: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.files = files.into_iter().map(Into::into).collect();
        self
    }

    /// Keep at most `max_chars` characters of each file.
    #[must_use]
    pub fn with_max_chars(mut self, max_chars: usize) -> Self {
        self.max_chars = max_chars;
        self
    }

    fn read(&self, name: &str) -> Result<Option<String>, ContributorError> {
        if name.is_empty() || Path::new(name).components().count() != 1 || name.contains("..") {
            return Err(ContributorError::Source(format!(
                "bootstrap file name `{name}` is not a plain file name: list names inside the workspace folder only"
            )));
        }
        let path = self.dir.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(Content::from_utf8_lossy(&bytes).to_string())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ContributorError::Source(format!(
                "could not read {}: {e}",
                path.display()
            ))),
        }
    }
}

/// Cut `text` to `max` characters, saying how many were left out.
pub(crate) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((at, _)) => {
            let rest = text[at..].chars().count();
            format!("{}\n[... {rest} more characters not shown]", &text[..at])
        }
    }
}

impl Contributor for BootstrapFiles {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            source: SourceKind::Config,
            ..StandardSection::BootstrapFiles.meta()
        }
    }
    fn cache_policy(&self) -> CachePolicy {
        CachePolicy::Ttl(None)
    }
    fn contribute(&self, _ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let meta = self.meta();
        let mut out = Vec::new();
        for name in &self.files {
            let Some(text) = self.read(name)? else {
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            let path = self.dir.join(name);
            let section = meta
                .section(
                    Self::ID,
                    RuntimeLayer::Shared,
                    format!("bootstrap/{name}"),
                    cut(&text, self.max_chars),
                )
                .map_err(|e| ContributorError::Source(e.to_string()))?
                .source(SourceKind::Config, path.to_string_lossy())
                .build();
            out.push(section);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_counts_characters() {
        assert_eq!(cut("héllo", 10), "héllo");
        assert_eq!(cut("héllo", 2), "hé\n[... 3 more characters not shown]");
        assert_eq!(cut("", 0), "");
    }
}
