//! Built-in contributors about the machine and the moment: environment, runtime capabilities,
//! temporal context and runtime info (layer 3).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_core::{ContentHash, RuntimeLayer, Section};

use super::calendar::{format_local, offset_text, CivilTime};
use super::section;
use crate::contributor::{ContributionContext, Contributor, ContributorError, ContributorMeta};
use crate::inputs::{Fingerprint, TimeZone};
use crate::modes::StandardSection;

fn zone<'a>(ctx: &'a ContributionContext, default: &'a TimeZone) -> &'a TimeZone {
    ctx.inputs.time_zone.as_ref().unwrap_or(default)
}

/// Operating system, date and working directory (stable; its cache key includes the date, so
/// it changes once a day).
#[derive(Debug, Clone)]
pub struct Environment {
    working_dir: PathBuf,
    default_zone: TimeZone,
}

impl Environment {
    /// The contributor id.
    pub const ID: &'static str = "builtin.environment";

    /// An environment section showing `working_dir`, dates in UTC unless a request names a zone.
    pub fn new(working_dir: impl Into<PathBuf>) -> Environment {
        Environment {
            working_dir: working_dir.into(),
            default_zone: TimeZone::utc(),
        }
    }

    fn date(&self, ctx: &ContributionContext) -> (String, &'static str) {
        let z = zone(ctx, &self.default_zone);
        let t = CivilTime::at(ctx.now_ms, z.offset_minutes);
        (t.date(), t.weekday_name())
    }
}

impl Contributor for Environment {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    /// Sticky, as Ivy's runtime environment: a few lines every turn needs, never trimmed.
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            sticky: true,
            ..StandardSection::Environment.meta()
        }
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        Some(Fingerprint::new(Self::ID).add(&self.date(ctx).0).finish())
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let (date, weekday) = self.date(ctx);
        let text = format!(
            "Operating system: {} ({})\nDate: {date} ({weekday})\nWorking directory: {}",
            std::env::consts::OS,
            std::env::consts::ARCH,
            self.working_dir.display()
        );
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Shared,
            "environment",
            text,
        )?])
    }
}

/// Current time, time zone and day of week, from `ctx.now_ms` (dynamic, sticky: it is small and
/// scheduled jobs rely on it).
#[derive(Debug, Clone)]
pub struct TemporalContext {
    default_zone: TimeZone,
}

impl TemporalContext {
    /// The contributor id.
    pub const ID: &'static str = "builtin.temporal";

    /// Times shown in `zone` unless a request names its own.
    pub fn new(zone: TimeZone) -> TemporalContext {
        TemporalContext { default_zone: zone }
    }
}

impl Contributor for TemporalContext {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            sticky: true,
            ..StandardSection::TemporalContext.meta()
        }
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let z = zone(ctx, &self.default_zone);
        let t = CivilTime::at(ctx.now_ms, z.offset_minutes);
        let text = format!(
            "Current time: {}\nTime zone: {} (UTC{})\nDay of week: {}",
            format_local(ctx.now_ms, z),
            z.name,
            offset_text(z.offset_minutes),
            t.weekday_name()
        );
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Shared,
            "time",
            text,
        )?])
    }
}

/// Agent, model, host and platform (stable; keyed by agent and model).
#[derive(Debug, Clone)]
pub struct RuntimeInfo {
    host: Arc<str>,
}

impl RuntimeInfo {
    /// The contributor id.
    pub const ID: &'static str = "builtin.runtime";

    /// Runtime info naming `host`.
    pub fn new(host: impl Into<Arc<str>>) -> RuntimeInfo {
        RuntimeInfo { host: host.into() }
    }

    /// Runtime info with the host name detected from this machine.
    pub fn detect() -> RuntimeInfo {
        RuntimeInfo::new(detect_host())
    }
}

/// The host name: `/etc/hostname`, else `$HOSTNAME`, else `unknown`.
pub(crate) fn detect_host() -> Arc<str> {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned())
        .into()
}

impl Contributor for RuntimeInfo {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        StandardSection::RuntimeInfo.meta()
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        Some(
            Fingerprint::new(Self::ID)
                .add(&ctx.agent_id)
                .add_opt(ctx.inputs.model.as_deref())
                .finish(),
        )
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let mut text = format!("Agent: {}\n", ctx.agent_id);
        if let Some(model) = &ctx.inputs.model {
            text.push_str(&format!("Model: {model}\n"));
        }
        text.push_str(&format!(
            "Host: {}\nPlatform: {}/{}",
            self.host,
            std::env::consts::OS,
            std::env::consts::ARCH
        ));
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Shared,
            "runtime",
            text,
        )?])
    }
}

/// Interpreters and tools found on the search path (stable). Which ones exist is detected
/// when the section is produced, never assumed: the candidate list only says what to look for.
#[derive(Debug, Clone)]
pub struct RuntimeCapabilities {
    search_path: Vec<PathBuf>,
    candidates: Vec<(String, String)>,
}

impl RuntimeCapabilities {
    /// The contributor id.
    pub const ID: &'static str = "builtin.capabilities";

    /// The programs looked for by default, with the name shown for each.
    pub const DEFAULT_CANDIDATES: &'static [(&'static str, &'static str)] = &[
        ("python3", "Python 3"),
        ("python", "Python"),
        ("node", "Node.js"),
        ("npm", "npm"),
        ("deno", "Deno"),
        ("bun", "Bun"),
        ("git", "Git"),
        ("ffmpeg", "FFmpeg"),
        ("ffprobe", "FFprobe"),
        ("convert", "ImageMagick"),
        ("pandoc", "Pandoc"),
        ("curl", "curl"),
        ("wget", "Wget"),
        ("jq", "jq"),
        ("rg", "ripgrep"),
        ("sqlite3", "SQLite"),
        ("psql", "PostgreSQL client"),
        ("docker", "Docker"),
        ("cargo", "Cargo"),
        ("rustc", "Rust"),
        ("go", "Go"),
        ("java", "Java"),
        ("gcc", "GCC"),
        ("make", "Make"),
    ];

    /// Look for the default candidates on `$PATH`.
    pub fn from_env() -> RuntimeCapabilities {
        let search_path = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        RuntimeCapabilities::new(
            search_path,
            Self::DEFAULT_CANDIDATES
                .iter()
                .map(|(p, l)| ((*p).to_owned(), (*l).to_owned())),
        )
    }

    /// Look for `candidates` (program, shown name) in `search_path`.
    pub fn new(
        search_path: Vec<PathBuf>,
        candidates: impl IntoIterator<Item = (String, String)>,
    ) -> RuntimeCapabilities {
        RuntimeCapabilities {
            search_path,
            candidates: candidates.into_iter().collect(),
        }
    }

    /// The candidates found, by program name, with where each was found (the first match on
    /// the search path).
    pub fn detect(&self) -> BTreeMap<String, (String, PathBuf)> {
        let mut found = BTreeMap::new();
        for (program, label) in &self.candidates {
            if let Some(path) = self
                .search_path
                .iter()
                .map(|dir| dir.join(program))
                .find(|p| is_executable(p))
            {
                found.insert(program.clone(), (label.clone(), path));
            }
        }
        found
    }
}

#[cfg(unix)]
fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(not(unix))]
fn is_executable(p: &Path) -> bool {
    p.is_file() || p.with_extension("exe").is_file()
}

impl Contributor for RuntimeCapabilities {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        StandardSection::RuntimeCapabilities.meta()
    }
    fn contribute(&self, _ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let found = self.detect();
        let mut text = String::from("Available on this machine:");
        if found.is_empty() {
            text.push_str(" none of the programs looked for.");
        }
        // Names only: where the host keeps its programs (home folders, version managers) is
        // none of the model's business and would leak the machine's layout into every prompt.
        for (program, (label, _)) in &found {
            text.push_str(&format!("\n- {label}: `{program}`"));
        }
        let missing: Vec<&str> = self
            .candidates
            .iter()
            .filter(|(p, _)| !found.contains_key(p))
            .map(|(p, _)| p.as_str())
            .collect();
        if !missing.is_empty() {
            text.push_str(&format!("\nNot found: {}", missing.join(", ")));
        }
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Shared,
            "capabilities",
            text,
        )?])
    }
}
