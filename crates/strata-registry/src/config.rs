//! `strata.toml`: the runtime's configuration of prompt assembly.
//!
//! ```toml
//! [prompt]
//! default_mode = "full"            # full, compact, minimal, scheduled
//! max_total_chars = 80000
//! protected_priorities = [1950, 1945, 1925, 1900, 1500, 1499, 800]
//!
//! [caching]
//! enabled = true
//! ttl_secs = 30
//!
//! [budget]                         # tokens
//! total = 16384
//! response_reserve = 0
//! shared = 16000                  # layer 3 (older name: system)
//! delegated = 4000                 # layer 4 (older name: skills)
//! working_memory = 10000           # layer 5 (older name: history)
//! long_term_memory = 2000          # layer 6 (older name: memory)
//!
//! [memory]
//! file = "MEMORY.md"
//! max_lines = 200
//! max_chars = 20000
//! sticky_fact_prefixes = ["user."] # shared facts never dropped for budget (none by default)
//! sticky_facts_max_chars = 2000    # ... within this many characters in total
//!
//! [memory.embedder]                # vectors of long-term memory and tool retrieval
//! kind = "hashing"                 # the offline default; dims = 256
//! # kind = "openai"                # any OpenAI-compatible POST /v1/embeddings server:
//! # url = "http://127.0.0.1:8080"
//! # model = "nomic-embed-text"
//! # dimensions = 768
//! # api_key_env = "EMBEDDINGS_API_KEY"   # the NAME of the variable holding the key
//!
//! [workspace]
//! dir = "."                        # bootstrap files: SOUL.md, AGENTS.md, ...
//! custom_instructions = ""
//! fact_scopes = ["workspace:billing"]  # shared facts read between the agent's and global
//!
//! [[prompts]]                      # fixed text of the runtime's own (repeatable)
//! id = "sanity-reality-check"
//! kind = "operational_guidelines"  # a standard section kind of layer 3 or 4
//! when = "sanity_check"            # always (default), sanity_check, or skill:<id>
//! text = "Check each claim against what a tool returned before you state it."
//!
//! [store]                          # working and long-term memory, goals
//! sqlite = ".strata/memory.db"     # the default; or, shared by many runtimes:
//! # postgres = "postgresql://strata@db.internal/strata"
//! ```
//!
//! When a turn gives its model's context window, the window sets the total, the response
//! reserve (at least an eighth of it) and the tier; the per-layer budgets and
//! `max_total_chars` above still apply, as absolute caps (ADR-0044).
//!
//! Every table and key is optional and defaults to the numbers of the seed systems. Unknown
//! keys are errors, and every error names the key and its line and column, so a typo never
//! silently falls back to a default.
//!
//! Priorities are in strata's scale, where a larger number is more important (the seed
//! pipeline's `2000 - priority`, see [`crate::modes`]): the defaults protect the workspace
//! profile, tool catalog and their peers, as the seeds protected 50, 55, 75, 100, 500, 501
//! and 1200.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use strata_core::{Budget, LayerBudgets, PromptMode};

use crate::cache::{Clock, SectionCache};

mod prompts;

pub use prompts::{ConfiguredPrompt, MAX_PROMPT_TEXT};

/// The whole of `strata.toml`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Prompt assembly.
    pub prompt: PromptConfig,
    /// The section cache.
    pub caching: CachingConfig,
    /// Token budgets.
    pub budget: BudgetConfig,
    /// The MEMORY.md index and the embedder of long-term memory.
    pub memory: MemoryConfig,
    /// The workspace folder and custom instructions.
    pub workspace: WorkspaceConfig,
    /// Where memory, conversations and goals are kept.
    pub store: StoreConfig,
    /// `[[mcp]]`: MCP servers whose tools and prompts every turn offers (ADR-0041). `strata
    /// serve` starts them; a Rust runtime starts them with `strata_mcp::LiveServers` and hands
    /// them to `RuntimeBuilder::live` (the registry and the assembler do no networking).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<McpServerConfig>,
    /// `[[prompts]]`: fixed text of the runtime's own, each registered as a prompt of a
    /// standard kind of layer 3 or 4 with source `config`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<ConfiguredPrompt>,
}

/// `[[mcp]]`: one MCP server, started as a command (stdio) or reached at a URL (Streamable
/// HTTP). Its name is the `server` its tools are pinned to and the `mcp:<name>` provenance
/// of its prompts.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The server's name: 1-64 characters of letters, digits, `.`, `_` and `-`.
    pub name: String,
    /// The program and its arguments, for a server started as a child process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The Streamable HTTP endpoint, for a server reached over the network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// `[store]`: a SQLite file (the default, `.strata/memory.db`) or a PostgreSQL database.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// The SQLite file, relative to the working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sqlite: Option<PathBuf>,
    /// A PostgreSQL connection string or URL; many runtimes may share the database.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres: Option<String>,
}

/// `[prompt]`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PromptConfig {
    /// The prompt mode used when a request names none.
    pub default_mode: PromptMode,
    /// Longest rendered prompt, in characters.
    pub max_total_chars: usize,
    /// Runtime sections with one of these priorities are kept under budget pressure like
    /// sticky ones.
    pub protected_priorities: Vec<u32>,
}

impl Default for PromptConfig {
    fn default() -> Self {
        PromptConfig {
            default_mode: PromptMode::Full,
            max_total_chars: 80_000,
            protected_priorities: vec![1950, 1945, 1925, 1900, 1500, 1499, 800],
        }
    }
}

/// `[caching]`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CachingConfig {
    /// Whether contributors' output is cached at all.
    pub enabled: bool,
    /// Time to live of contributors that opt into one, in seconds.
    pub ttl_secs: u64,
}

impl Default for CachingConfig {
    fn default() -> Self {
        CachingConfig {
            enabled: true,
            ttl_secs: 30,
        }
    }
}

/// `[budget]`, in tokens.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// The whole assembled prompt.
    pub total: u32,
    /// Kept free for the model's answer.
    pub response_reserve: u32,
    /// Layer 3 (shared context: environment, tools, workspace files); `system` is read too.
    #[serde(alias = "system")]
    pub shared: u32,
    /// Layer 4 (delegated: skills, goal, task); `skills` is read too.
    #[serde(alias = "skills")]
    pub delegated: u32,
    /// Layer 5 (working memory: conversation history); `history` is read too.
    #[serde(alias = "history")]
    pub working_memory: u32,
    /// Layer 6 (long-term memory); `memory` is read too.
    #[serde(alias = "memory")]
    pub long_term_memory: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            total: Budget::DEFAULT_TOTAL,
            response_reserve: 0,
            shared: 16_000,
            delegated: 4_000,
            working_memory: 10_000,
            long_term_memory: 2_000,
        }
    }
}

/// `[memory]`: the MEMORY.md index (the notes beside it form the wikilink graph the memory
/// search follows) and `[memory.embedder]`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    /// The MEMORY.md index, relative to the workspace.
    pub file: PathBuf,
    /// Most lines read from it.
    pub max_lines: usize,
    /// Most characters injected from it.
    pub max_chars: usize,
    /// `[memory.embedder]`: what turns memories, queries and tool descriptions into vectors.
    pub embedder: EmbedderConfig,
    /// Shared facts whose key starts with one of these prefixes (`user.`) are sticky: never
    /// dropped for budget, within `sticky_facts_max_chars` (none by default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sticky_fact_prefixes: Vec<String>,
    /// Most characters of sticky facts in one turn; facts past it are ordinary sections, so
    /// the store's volume cannot grow a turn's sticky part past this (choose a cap that fits
    /// the budget).
    pub sticky_facts_max_chars: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            file: PathBuf::from("MEMORY.md"),
            max_lines: 200,
            max_chars: 20_000,
            embedder: EmbedderConfig::default(),
            sticky_fact_prefixes: Vec::new(),
            sticky_facts_max_chars: 2_000,
        }
    }
}

/// The largest embedding dimension `[memory.embedder]` accepts (the stores' limit,
/// `strata_memory::MAX_DIMS`).
pub const MAX_EMBEDDING_DIMS: usize = 65_536;

/// `[memory.embedder]`: the embedder of long-term memory search and of the hydration path's
/// tool retrieval (ADR-0046). A store remembers the embedder it was created with and refuses
/// another one, so changing this table means a new store.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", deny_unknown_fields)]
pub enum EmbedderConfig {
    /// `kind = "hashing"`: the built-in hashing embedder, deterministic and offline; it
    /// matches shared words and word pieces, not meaning.
    #[serde(rename = "hashing")]
    Hashing {
        /// Its dimension (default 256).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dims: Option<usize>,
    },
    /// `kind = "openai"`: a server speaking the OpenAI embeddings protocol
    /// (`POST /v1/embeddings`): OpenAI, or a local llama.cpp, vLLM, Ollama or
    /// text-embeddings-inference server.
    #[serde(rename = "openai")]
    OpenAi {
        /// The server's base URL (`https://api.openai.com`, `http://127.0.0.1:8080`, or
        /// either ending in `/v1`).
        url: String,
        /// The model name sent in every request.
        model: String,
        /// The length of the model's vectors.
        dimensions: usize,
        /// The NAME of the environment variable that holds the API key, sent as a bearer
        /// token; the key itself never goes in this file. Leave it out for a server that
        /// takes no key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_env: Option<String>,
        /// Send `dimensions` in each request, for models that shorten their vectors on
        /// request (default false: other models refuse the field).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        request_dimensions: bool,
    },
}

impl Default for EmbedderConfig {
    fn default() -> Self {
        EmbedderConfig::Hashing { dims: None }
    }
}

impl EmbedderConfig {
    /// Check the values: a dimension of 1 to [`MAX_EMBEDDING_DIMS`], an `http(s)` URL, a
    /// model name, and an environment variable name made of letters, digits and `_`. The
    /// error names the `strata.toml` key and what is wrong with its value.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let dims_ok = |d: usize| (1..=MAX_EMBEDDING_DIMS).contains(&d);
        match self {
            EmbedderConfig::Hashing { dims: Some(d) } if !dims_ok(*d) => Err((
                "memory.embedder.dims",
                format!(
                    "{d} is not a dimension of 1 to {MAX_EMBEDDING_DIMS}; leave it out for 256"
                ),
            )),
            EmbedderConfig::Hashing { .. } => Ok(()),
            EmbedderConfig::OpenAi {
                url,
                model,
                dimensions,
                api_key_env,
                ..
            } => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err((
                        "memory.embedder.url",
                        format!(
                            "`{url}` is not an http:// or https:// URL of an embeddings server"
                        ),
                    ));
                }
                if model.trim().is_empty() {
                    return Err((
                        "memory.embedder.model",
                        "must name the embedding model the server serves".into(),
                    ));
                }
                if !dims_ok(*dimensions) {
                    return Err((
                        "memory.embedder.dimensions",
                        format!("{dimensions} is not a dimension of 1 to {MAX_EMBEDDING_DIMS}; give the length of the model's vectors"),
                    ));
                }
                match api_key_env {
                    Some(name) if !is_env_name(name) => Err((
                        "memory.embedder.api_key_env",
                        format!("`{}` is not the name of an environment variable (letters, digits and `_`, not starting with a digit); give the variable's name, never the key itself", name.chars().take(40).collect::<String>()),
                    )),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Whether `name` can be an environment variable's name: `[A-Za-z_][A-Za-z0-9_]*`, at most
/// 128 characters.
fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 128
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `[workspace]`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkspaceConfig {
    /// The folder holding bootstrap files; none means no bootstrap files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Custom instructions (layer 3).
    pub custom_instructions: String,
    /// Further scopes of shared facts to read, most specific first, between the agent's own
    /// scope and the global one (for example `workspace:billing`, a project's facts).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fact_scopes: Vec<String>,
}

/// Where in the file an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

fn at(location: &Option<Location>) -> String {
    location.map(|l| format!(" ({l})")).unwrap_or_default()
}

fn key_text(key: &Option<String>) -> String {
    key.as_ref()
        .map(|k| format!(" at key `{k}`"))
        .unwrap_or_default()
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("could not read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The text is not valid TOML, or does not fit the schema (unknown key, wrong type...).
    #[error("invalid strata.toml{}{}: {message}", key_text(.key), at(.location))]
    Syntax {
        /// The dotted key the error is at, when it could be told.
        key: Option<String>,
        /// Where.
        location: Option<Location>,
        /// What is wrong, from the TOML reader.
        message: String,
    },
    /// A value is out of range.
    #[error("invalid strata.toml at key `{key}`{}: {reason}", at(.location))]
    Value {
        /// The dotted key.
        key: &'static str,
        /// Where, when the key is written in the file.
        location: Option<Location>,
        /// What is wrong and what to do.
        reason: String,
    },
}

impl ConfigError {
    /// The dotted key the error is about, when known.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Syntax { key, .. } => key.as_deref(),
            ConfigError::Value { key, .. } => Some(key),
            ConfigError::Io { .. } => None,
        }
    }

    /// Where the error is, when known.
    pub fn location(&self) -> Option<Location> {
        match self {
            ConfigError::Syntax { location, .. } | ConfigError::Value { location, .. } => *location,
            ConfigError::Io { .. } => None,
        }
    }
}

/// Line and column (from 1) of a byte offset.
fn location_of(text: &str, offset: usize) -> Location {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = text
        .get(line_start..offset)
        .map_or(1, |s| s.chars().count() + 1);
    Location { line, column }
}

/// The table header a line is under, and the line's own text.
fn table_and_line(text: &str, line_no: usize) -> (Option<String>, &str) {
    let mut table = None;
    let mut current = "";
    for (i, line) in text.lines().enumerate() {
        if let Some(name) = header(line) {
            table = Some(name);
        }
        if i + 1 == line_no {
            current = line;
            break;
        }
    }
    (table, current)
}

fn header(line: &str) -> Option<String> {
    let t = line.trim();
    let inner = t.strip_prefix('[')?.split(']').next()?;
    Some(inner.trim_matches(['[', ' ']).trim().to_owned())
}

/// The dotted key at a byte offset: the table header above it, then the key on its line.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let loc = location_of(text, offset);
    let (table, line) = table_and_line(text, loc.line);
    if let Some(h) = header(line) {
        return Some(h);
    }
    let key = line
        .split('=')
        .next()
        .map(|k| k.trim().trim_matches('"'))
        .filter(|k| !k.is_empty() && !k.starts_with('#'))?;
    Some(match table {
        Some(t) => format!("{t}.{key}"),
        None => key.to_owned(),
    })
}

/// Where the dotted key `table.key` is written, if it is.
fn find_key(text: &str, dotted: &str) -> Option<Location> {
    let (table, key) = dotted.rsplit_once('.')?;
    let mut in_table = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(h) = header(line) {
            in_table = h == table;
        } else if in_table
            && line
                .split('=')
                .next()
                .is_some_and(|k| k.trim().trim_matches('"') == key)
            && line.contains('=')
        {
            let col = line.len() - line.trim_start().len();
            return Some(location_of(text, offset + col));
        }
        offset += line.len();
    }
    None
}

impl Config {
    /// The file name looked for by default.
    pub const FILE_NAME: &'static str = "strata.toml";

    /// Read and check `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml_str(&text)
    }

    /// Parse and check a configuration text.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let span = e.span();
            ConfigError::Syntax {
                key: span.as_ref().and_then(|s| key_at(text, s.start)),
                location: span.map(|s| location_of(text, s.start)),
                message: e.message().trim().to_owned(),
            }
        })?;
        config.validate_in(Some(text))?;
        Ok(config)
    }

    /// Check that values are in range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_in(None)
    }

    fn validate_in(&self, text: Option<&str>) -> Result<(), ConfigError> {
        let fail = |key: &'static str, reason: String| ConfigError::Value {
            key,
            location: text.and_then(|t| find_key(t, key)),
            reason,
        };
        if self.prompt.max_total_chars == 0 {
            return Err(fail(
                "prompt.max_total_chars",
                "must be a positive number of characters (default 80000)".into(),
            ));
        }
        if self.caching.enabled && self.caching.ttl_secs == 0 {
            return Err(fail(
                "caching.ttl_secs",
                "must be at least 1 second while caching is enabled (default 30)".into(),
            ));
        }
        if self.budget.total == 0 {
            return Err(fail(
                "budget.total",
                "must be a positive number of tokens (default 16384)".into(),
            ));
        }
        if self.budget.response_reserve >= self.budget.total {
            return Err(fail(
                "budget.response_reserve",
                format!(
                    "{} leaves nothing of budget.total ({}) for the prompt; make it smaller",
                    self.budget.response_reserve, self.budget.total
                ),
            ));
        }
        for (key, v) in [
            ("budget.shared", self.budget.shared),
            ("budget.delegated", self.budget.delegated),
            ("budget.working_memory", self.budget.working_memory),
            ("budget.long_term_memory", self.budget.long_term_memory),
        ] {
            if v == 0 {
                return Err(fail(
                    key,
                    "must be a positive number of tokens; leave it out for the default".into(),
                ));
            }
        }
        if self.memory.max_lines == 0 {
            return Err(fail(
                "memory.max_lines",
                "must be at least 1 (default 200)".into(),
            ));
        }
        if self.memory.max_chars == 0 {
            return Err(fail(
                "memory.max_chars",
                "must be at least 1 (default 20000)".into(),
            ));
        }
        if let Err((key, reason)) = self.check_parts() {
            return Err(fail(key, reason));
        }
        Ok(())
    }

    /// The checks of the embedder, the prompts and the store: the key and the reason.
    fn check_parts(&self) -> Result<(), (&'static str, String)> {
        self.memory.embedder.check()?;
        if self
            .memory
            .sticky_fact_prefixes
            .iter()
            .any(|p| p.trim().is_empty())
        {
            return Err((
                "memory.sticky_fact_prefixes",
                "a prefix is empty (it would make every fact sticky); name one such as \"user.\""
                    .into(),
            ));
        }
        if !self.memory.sticky_fact_prefixes.is_empty() && self.memory.sticky_facts_max_chars == 0 {
            return Err((
                "memory.sticky_facts_max_chars",
                "must be at least 1 while sticky_fact_prefixes names any (default 2000)".into(),
            ));
        }
        prompts::check_all(&self.prompts)?;
        if self.store.sqlite.is_some() && self.store.postgres.is_some() {
            return Err((
                "store.postgres",
                "give either store.sqlite or store.postgres, not both".into(),
            ));
        }
        if self
            .store
            .postgres
            .as_deref()
            .is_some_and(|p| p.trim().is_empty())
        {
            return Err((
                "store.postgres",
                "must be a connection string such as postgresql://user@host/db".into(),
            ));
        }
        Ok(())
    }

    /// The configuration as TOML text.
    pub fn to_toml_string(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# could not write: {e}\n"))
    }

    /// The token budget: total, reserve, the character cap, and per-layer soft budgets
    /// (`shared`, `delegated`, `working_memory` and `long_term_memory` for layers 3-6).
    pub fn to_budget(&self) -> Budget {
        Budget {
            total_tokens: self.budget.total,
            response_reserve: self.budget.response_reserve,
            layers: LayerBudgets {
                shared: Some(self.budget.shared),
                delegated: Some(self.budget.delegated),
                working_memory: Some(self.budget.working_memory),
                long_term_memory: Some(self.budget.long_term_memory),
            },
            section_cap: None,
            max_total_chars: Some(self.prompt.max_total_chars),
        }
    }

    /// Whether runtime sections of `priority` are protected from trimming.
    pub fn is_protected(&self, priority: u32) -> bool {
        self.prompt.protected_priorities.contains(&priority)
    }

    /// The section cache this configuration asks for, on `clock`; `None` when caching is
    /// disabled.
    pub fn section_cache(&self, clock: Arc<dyn Clock>) -> Option<Arc<SectionCache>> {
        self.caching.enabled.then(|| {
            Arc::new(
                SectionCache::new(clock)
                    .with_default_ttl(Duration::from_secs(self.caching.ttl_secs)),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_and_keys() {
        let text = "[prompt]\nmax_total_chars = 5\n\n[budget]\n total = 1\n";
        assert_eq!(location_of(text, 9), Location { line: 2, column: 1 });
        assert_eq!(key_at(text, 9).as_deref(), Some("prompt.max_total_chars"));
        assert_eq!(key_at(text, 30).as_deref(), Some("budget"));
        assert_eq!(
            find_key(text, "budget.total"),
            Some(Location { line: 5, column: 2 })
        );
        assert_eq!(find_key(text, "budget.memory"), None);
        assert_eq!(location_of("é\nx", 99), Location { line: 2, column: 2 });
    }
}
