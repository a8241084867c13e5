//! Workspace bootstrap files: `SOUL.md`, `AGENTS.md`, `TOOLS.md`, `COMMANDS.md`, `IDENTITY.md`,
//! and the user's `PREFERENCES.md` (Ivy's preferences contributor).
//!
//! These files are unsigned and anyone with write access to the workspace can change them, so
//! they are layer 3 content, fenced like any other runtime text, and never identity whatever
//! their names say (ADR-0006).
//!
//! They are dynamic (files change), yet cached until invalidated with a validator: a digest of
//! every listed file's bytes, or of its absence (ADR-0011). A gathering reads and hashes the
//! files, which costs a fraction of running the contributor (ADR-0011 has the measurements),
//! and serves the cached sections only while the digest is the same, so an edited, added or
//! removed file reaches the very next turn. The digest is of the contents, not of sizes and modification times: a file rewritten
//! with as many bytes can keep both (two writes within one tick of a coarse file-system clock,
//! or a tool that keeps the old time, such as `cp -p`).
//!
//! Sections come in the order of the file list (SOUL.md, AGENTS.md, TOOLS.md, COMMANDS.md,
//! IDENTITY.md, PREFERENCES.md by default, as DevClaw lists its bootstrap files): the file at
//! position `n` of the list (from 0) has the priority of [`StandardSection::BootstrapFiles`]
//! less `n`, so the assembler, which orders sections of one layer, stability and phase by
//! score, keeps that order and, under budget pressure, drops later files first (ADR-0007). The
//! sixth file is level with the workspace hints and placed before them by id; files past the
//! sixth of a longer list rank below the workspace hints.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use strata_core::{Content, ContentHash, RuntimeLayer, Section, SourceKind};

use crate::contributor::{
    CachePolicy, ContributionContext, Contributor, ContributorError, ContributorMeta,
};
use crate::inputs::Fingerprint;
use crate::modes::StandardSection;

/// Reads bootstrap files from a workspace folder; one section per file present
/// (`bootstrap/<name>`), placed in the order of the file list (each file one priority step
/// below the one before it).
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

    /// Read these file names instead (plain names inside the folder, no paths), in this order.
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

    /// Whether `name` is a plain file name inside the folder.
    fn plain(name: &str) -> bool {
        !name.is_empty() && Path::new(name).components().count() == 1 && !name.contains("..")
    }

    fn read(&self, name: &str) -> Result<Option<String>, ContributorError> {
        if !Self::plain(name) {
            return Err(ContributorError::Source(format!(
                "bootstrap file name `{name}` is not a plain file name: list names inside the workspace folder only"
            )));
        }
        let path = self.dir.join(name);
        // Only regular files are read: a FIFO or a device put in a file's place would block
        // the read or never end. It is left out like a missing file, and logged.
        if std::fs::metadata(&path).is_ok_and(|m| !m.is_file()) {
            tracing::warn!(path = %path.display(), "a bootstrap file is not a regular file; left out");
            return Ok(None);
        }
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
        CachePolicy::UntilInvalidated
    }
    /// The digest of every listed file, in list order: its name and what
    /// [`Fingerprint::add_file`] says of it, up to four bytes per character shown (a FIFO or a
    /// device is never opened, so a planted one cannot block the gathering). A name that is
    /// not a plain file name is not read.
    fn cache_validator(&self, _ctx: &ContributionContext) -> Option<ContentHash> {
        let mut f = Fingerprint::new(Self::ID);
        let max_bytes = u64::try_from(self.max_chars)
            .unwrap_or(u64::MAX)
            .saturating_mul(4);
        for name in &self.files {
            f.add(name);
            if Self::plain(name) {
                f.add_file(&self.dir.join(name), max_bytes);
            } else {
                f.add("not plain");
            }
        }
        Some(f.finish())
    }
    fn contribute(&self, _ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let meta = self.meta();
        let mut out = Vec::new();
        for (step, name) in (0u32..).zip(&self.files) {
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
                .priority(meta.priority.saturating_sub(step))
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
