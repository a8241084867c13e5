//! `strata memory`: add, search, import and count long-term memories in the embedded SQLite
//! store (ADR-0012).
//!
//! ```text
//! strata memory add "The staging deploy needs the VPN" --agent ada --tag ops
//! strata memory search "how do I deploy to staging" --agent ada --top 5
//! strata memory import ./notes            # a folder of Markdown notes ([[wikilinks]] kept)
//! strata memory import memories.jsonl     # one {"content": ..., "agent_id": ..., "tags": [...]} per line
//! strata memory stats --json
//! strata memory check                     # exit 0 clean, 4 damaged (ADR-0036)
//! ```
//!
//! The store defaults to `./.strata/memory.db`. Results go to the writer given to
//! [`run_with`] (stdout for [`run`]). `search`, `stats` and `check` open the store read-only:
//! they never create, migrate or write it (ADR-0019).
//!
//! Imports (ADR-0019) stream the JSONL file line by line, so memory use does not grow with
//! the file. A line without an `id` is stored under an id derived from its agent and text
//! ([`MemoryId::derived`]), so running an import again, after an interruption or on a file
//! that grew, skips what is already there instead of duplicating it. Lines that cannot be
//! imported are reported by number and skipped; the import ends with one line saying how many
//! memories were imported, how many were already present and which lines were not imported,
//! and fails when any line was not. Progress goes to stderr: a bar on a terminal, otherwise a
//! plain line every few seconds.

use std::error::Error;
use std::io::{BufRead as _, IsTerminal as _, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_memory::{
    check_tag, Embedder, HashEmbedder, IntegrityFinding, IntegrityReport, LongTermMemory,
    MemoryError, MemoryId, NewMemory, NoteGraph, SearchMode, SearchOptions, SqliteStore,
    StoreOptions,
};

/// The default store path.
pub const DEFAULT_STORE: &str = "./.strata/memory.db";

/// Arguments of `strata memory`.
#[derive(Debug, clap::Args)]
pub struct MemoryArgs {
    /// The SQLite memory store (created by `add` and `import` when missing).
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        default_value = DEFAULT_STORE,
        env = "STRATA_MEMORY_STORE"
    )]
    pub store: PathBuf,

    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// A strata.toml whose `[memory.embedder]` embeds the memories (default: the offline
    /// hashing embedder). A store keeps the embedder it was created with and refuses another.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: MemoryCommand,
}

/// The `strata memory` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum MemoryCommand {
    /// Store one memory (`-` reads the text from stdin).
    #[command(after_help = "\
Examples:
  strata memory add \"The staging deploy needs the VPN\" --agent ada --tag ops
  echo \"Deploys freeze on Fridays\" | strata memory add - --agent ada
  strata memory add \"On call this week: Sam\" --agent ada --id oncall --tag rota")]
    Add(AddArgs),
    /// Hybrid search: BM25 and vector similarity fused by reciprocal rank.
    #[command(after_help = "\
Examples:
  strata memory search \"how do I deploy to staging\" --agent ada --top 5
  strata memory search \"deploy\" --tag ops --mode lexical
  strata memory search \"deploy\" --json")]
    Search(SearchArgs),
    /// Import a folder of Markdown notes, or a JSONL file of memories.
    #[command(after_help = "\
Examples:
  strata memory import ./notes --agent ada
  strata memory import memories.jsonl --agent ada --tag imported

A folder is read for *.md notes (one memory per note, [[wikilinks]] kept). A .jsonl file holds
one memory per line; only content is required, agent_id defaults to --agent:
  {\"content\": \"Deploys freeze on Fridays.\", \"agent_id\": \"ada\", \"tags\": [\"ops\"], \"id\": \"m-17\"}
Running the same import again skips what is already stored. Format: docs/reference/formats.md.")]
    Import(ImportArgs),
    /// Show what the store holds.
    #[command(after_help = "\
Examples:
  strata memory stats
  strata memory stats --store team.db --json")]
    Stats,
    /// Check the whole store for damage: every table, every index, every row checksum.
    #[command(after_help = "\
Examples:
  strata memory check
  strata memory check --store team.db --json

Exit codes: 0 the store is undamaged, 4 damage was found (each finding is listed), 1 the
check could not run (no store, a store of another schema version). The store is opened
read-only, so the full-text index, whose own check needs a writable handle, is listed as
skipped; searches rank without it.")]
    Check,
}

/// The error `strata memory check` ends with when it found damage: the binary maps it to its
/// own exit code (4), apart from the errors that kept a command from running (1).
#[derive(Debug)]
pub struct StoreDamaged {
    /// The store.
    pub store: PathBuf,
    /// How many findings were listed.
    pub findings: usize,
}

impl std::fmt::Display for StoreDamaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the memory store {} is damaged ({} finding{}, listed above); restore it from a backup or move it aside; strata never repairs or recreates a damaged store by itself",
            self.store.display(),
            self.findings,
            if self.findings == 1 { "" } else { "s" }
        )
    }
}

impl Error for StoreDamaged {}

/// Arguments of `strata memory add`.
#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The text to remember, or `-` to read it from stdin.
    pub text: String,
    /// The agent the memory belongs to.
    #[arg(long, default_value = "default")]
    pub agent: String,
    /// A tag (repeat for more): letters, digits and . _ : / -
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Store under this id (replacing a memory with the same id).
    #[arg(long)]
    pub id: Option<String>,
}

/// Which rankings a search uses.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ModeArg {
    /// BM25 and vectors, fused.
    Hybrid,
    /// BM25 only.
    Lexical,
    /// Vectors only.
    Vector,
}

/// Arguments of `strata memory search`.
#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// What to look for.
    pub query: String,
    /// Only this agent's memories.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only memories with this tag (repeat: all must match).
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// How many results.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Which rankings to use.
    #[arg(long, value_enum, default_value = "hybrid")]
    pub mode: ModeArg,
}

/// Arguments of `strata memory import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// Seconds between progress lines when stderr is not a terminal.
    #[arg(long, default_value_t = 5, value_name = "SECONDS")]
    pub progress_every: u64,
    /// A folder of `*.md` notes, or a `.jsonl` file.
    pub source: PathBuf,
    /// The agent the memories belong to (JSONL lines may name their own).
    #[arg(long, default_value = "default")]
    pub agent: String,
    /// A tag added to every imported memory (repeat for more).
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Memories stored per transaction.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
}

/// One line of a JSONL import.
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JsonlMemory {
    /// The memory's text (`text` is read too).
    #[serde(alias = "text")]
    content: String,
    /// The agent it belongs to (`agent` is read too); default: the `--agent` of the import.
    #[serde(default, alias = "agent")]
    agent_id: Option<String>,
    /// Tags: letters, digits and `. _ : / -`.
    #[serde(default)]
    tags: Vec<String>,
    /// A stable id; without one, the id is derived from the agent and the text, so importing
    /// the same line again changes nothing.
    #[serde(default)]
    id: Option<String>,
}

/// Run `strata memory`, writing results to stdout.
pub fn run(args: MemoryArgs) -> Result<(), Box<dyn Error>> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run_with(args, &mut out)
}

/// Run `strata memory`, writing results to `out` and progress to stderr.
pub fn run_with(args: MemoryArgs, out: &mut dyn Write) -> Result<(), Box<dyn Error>> {
    let stderr = std::io::stderr();
    let tty = stderr.is_terminal();
    run_with_progress(args, out, &mut stderr.lock(), tty)
}

/// Run `strata memory`, writing results to `out` and import progress to `progress` (a bar
/// when `terminal`, plain lines otherwise).
fn run_with_progress(
    args: MemoryArgs,
    out: &mut dyn Write,
    progress: &mut dyn Write,
    terminal: bool,
) -> Result<(), Box<dyn Error>> {
    check_store_file(&args.store)?;
    let tags = match &args.command {
        MemoryCommand::Add(a) => a.tags.as_slice(),
        MemoryCommand::Import(a) => a.tags.as_slice(),
        MemoryCommand::Search(a) => a.tags.as_slice(),
        MemoryCommand::Stats | MemoryCommand::Check => &[],
    };
    for t in tags {
        check_tag(t).map_err(|e| format!("--tag {t:?}: {e}"))?;
    }
    let embedder = embedder_of(args.config.as_deref())?;
    let (store, e) = (&args.store, &embedder);
    let res = match args.command {
        MemoryCommand::Add(a) => add(store, e, args.json, a, out),
        MemoryCommand::Search(a) => search(store, e, args.json, &a, out),
        MemoryCommand::Import(a) => import(store, e, args.json, &a, out, progress, terminal),
        MemoryCommand::Stats => stats(store, e, args.json, out),
        MemoryCommand::Check => check(store, e, args.json, out),
    };
    out.flush()?;
    res
}

/// The embedder `config`'s `[memory.embedder]` names, else the hashing embedder.
fn embedder_of(config: Option<&Path>) -> Result<Arc<dyn Embedder>, Box<dyn Error>> {
    let Some(path) = config else {
        return Ok(Arc::new(HashEmbedder::default()));
    };
    let config = strata_registry::Config::load(path)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    strata_memory::embedder_from_config(&config.memory.embedder)
        .map_err(|e| format!("{}: {e}", path.display()).into())
}

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Refuse a store path that names something other than a SQLite database: a folder, an empty
/// file or a file of other content would otherwise be turned into a new database (an empty
/// file is a valid empty database to SQLite). A missing path is left to the command.
fn check_store_file(path: &Path) -> Result<(), Box<dyn Error>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(_) => return Ok(()),
    };
    if meta.is_dir() {
        return Err(format!(
            "the memory store {} is a folder; give the path of a store file, e.g. --store {}/memory.db",
            path.display(),
            path.display()
        )
        .into());
    }
    let mut head = [0u8; 16];
    let n = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .map_err(|e| format!("cannot read the memory store {}: {e}", path.display()))?;
    if n < head.len() || &head != SQLITE_MAGIC {
        return Err(format!(
            "{} exists but is not a strata memory store ({}); strata will not overwrite it: \
             give --store a new path or the path of an existing store",
            path.display(),
            if n == 0 {
                "it is empty".to_owned()
            } else {
                "it is not a SQLite database".to_owned()
            }
        )
        .into());
    }
    Ok(())
}

/// Open the store for writing, creating its folder when needed.
fn open_for_write(
    path: &Path,
    embedder: &Arc<dyn Embedder>,
) -> Result<SqliteStore, Box<dyn Error>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the folder {}: {e}", dir.display()))?;
    }
    Ok(SqliteStore::open_with(
        path,
        embedder.clone(),
        StoreOptions::default(),
    )?)
}

/// Open an existing store read-only; a missing one is an error rather than a new empty store.
fn open_existing(path: &Path, embedder: &Arc<dyn Embedder>) -> Result<SqliteStore, Box<dyn Error>> {
    if !path.exists() {
        return Err(format!(
            "there is no memory store at {}; create one with `strata memory add` or `strata memory import`, or pass --store",
            path.display()
        )
        .into());
    }
    Ok(SqliteStore::open_read_only(
        path,
        embedder.clone(),
        StoreOptions::default(),
    )?)
}

fn add(
    path: &Path,
    embedder: &Arc<dyn Embedder>,
    json: bool,
    a: AddArgs,
    out: &mut dyn Write,
) -> Result<(), Box<dyn Error>> {
    let text = if a.text == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        s
    } else {
        a.text
    };
    if text.trim().is_empty() {
        return Err("the memory text is empty".into());
    }
    let mut m = NewMemory::new(a.agent, text).with_tags(a.tags);
    if let Some(id) = a.id {
        m = m.with_id(MemoryId::new(id)?);
    }
    let store = open_for_write(path, embedder)?;
    let rec = store.put(m)?;
    if json {
        serde_json::to_writer_pretty(&mut *out, &rec)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "added {} (agent {}{})",
            rec.id,
            rec.agent_id,
            tags_suffix(&rec.tags)
        )?;
    }
    Ok(())
}

fn search(
    path: &Path,
    embedder: &Arc<dyn Embedder>,
    json: bool,
    a: &SearchArgs,
    out: &mut dyn Write,
) -> Result<(), Box<dyn Error>> {
    let store = open_existing(path, embedder)?;
    let mut opts = SearchOptions::top(a.top)
        .tags(a.tags.iter().cloned())
        .mode(match a.mode {
            ModeArg::Hybrid => SearchMode::Hybrid,
            ModeArg::Lexical => SearchMode::Lexical,
            ModeArg::Vector => SearchMode::Vector,
        });
    if let Some(agent) = &a.agent {
        opts = opts.agent(agent.clone());
    }
    let hits = store.search(&a.query, &opts)?;
    if json {
        serde_json::to_writer_pretty(&mut *out, &hits)?;
        writeln!(out)?;
        return Ok(());
    }
    if hits.is_empty() {
        writeln!(out, "no memories match")?;
    }
    for (i, h) in hits.iter().enumerate() {
        let r = &h.record;
        let ranks = match (h.lexical_rank, h.vector_rank) {
            (Some(l), Some(v)) => format!("bm25 #{l}, vector #{v}"),
            (Some(l), None) => format!("bm25 #{l}"),
            (None, Some(v)) => format!("vector #{v}"),
            (None, None) => String::new(),
        };
        writeln!(
            out,
            "{}. {}  score {:.4} ({ranks})  agent {}  created {}{}",
            i + 1,
            r.id,
            h.score,
            r.agent_id,
            format_ms(r.created_ms),
            tags_suffix(&r.tags)
        )?;
        writeln!(out, "   {}", preview(r.content.as_str(), 200))?;
    }
    Ok(())
}

/// How many rejected lines the summary names.
const SHOWN_REJECTS: usize = 5;

/// What an import has done so far.
#[derive(Debug, Default)]
struct Tally {
    /// Lines (JSONL) or notes (Markdown) read.
    read: usize,
    /// Memories stored (new, or changed since an earlier import).
    imported: usize,
    /// Memories already in the store exactly as in the source.
    present: usize,
    /// Lines not imported: line number and why.
    rejected: Vec<(usize, String)>,
    /// Bytes of the source read (JSONL).
    bytes: u64,
}

/// Progress reporting: an indicatif bar on a terminal, otherwise a line every `every`.
struct Progress<'a> {
    bar: Option<indicatif::ProgressBar>,
    out: &'a mut dyn Write,
    every: Duration,
    total_bytes: u64,
    started: Instant,
    last: Instant,
}

impl<'a> Progress<'a> {
    /// An indicatif bar over `total_bytes` when `terminal`, otherwise a line on `out` every
    /// `every_secs` seconds.
    fn new(out: &'a mut dyn Write, terminal: bool, every_secs: u64, total_bytes: u64) -> Self {
        let bar = terminal.then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(total_bytes),
                indicatif::ProgressDrawTarget::stderr_with_hz(4),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} ({eta})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        Progress {
            bar,
            out,
            every: Duration::from_secs(every_secs),
            total_bytes,
            started: Instant::now(),
            last: Instant::now(),
        }
    }

    fn update(&mut self, t: &Tally) {
        if let Some(bar) = &self.bar {
            bar.set_position(t.bytes);
            return;
        }
        if self.last.elapsed() < self.every {
            return;
        }
        self.last = Instant::now();
        let pct = (t.bytes * 100)
            .checked_div(self.total_bytes)
            .map_or_else(String::new, |p| format!(" ({p}%)"));
        let rate = t.read as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        // Progress is best effort: a closed stderr must not stop the import.
        let _ = writeln!(
            self.out,
            "import: {} read{pct}, {} imported, {} already present, {} not imported, {rate:.0}/s",
            t.read,
            t.imported,
            t.present,
            t.rejected.len()
        );
    }

    fn finish(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Store one batch: skip memories already present unchanged, store the rest in one
/// transaction; when the batch is refused for one bad memory, store them one by one and
/// reject only the bad ones. Errors that are not about a memory (a damaged store, a full
/// disk) stop the import.
fn store_batch(
    store: &SqliteStore,
    batch: Vec<(usize, NewMemory)>,
    t: &mut Tally,
) -> Result<(), MemoryError> {
    let mut todo = Vec::with_capacity(batch.len());
    for (line, m) in batch {
        let id =
            m.id.clone()
                .unwrap_or_else(|| MemoryId::derived(&m.agent_id, &m.content));
        if let Some(old) = store.get(&id)? {
            let mut tags: Vec<&str> = m.tags.iter().map(String::as_str).collect();
            tags.sort_unstable();
            tags.dedup();
            let old_tags: Vec<&str> = old.tags.iter().map(|t| &**t).collect();
            if old.content.as_str() == m.content && *old.agent_id == *m.agent_id && old_tags == tags
            {
                t.present += 1;
                continue;
            }
        }
        todo.push((line, m.with_id(id)));
    }
    if todo.is_empty() {
        return Ok(());
    }
    let n = todo.len();
    match store.put_many(todo.iter().map(|(_, m)| m.clone()).collect()) {
        Ok(_) => {
            t.imported += n;
            Ok(())
        }
        Err(e) if is_about_the_memory(&e) => {
            for (line, m) in todo {
                match store.put(m) {
                    Ok(_) => t.imported += 1,
                    Err(e) if is_about_the_memory(&e) => t.rejected.push((line, e.to_string())),
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// True for errors caused by one memory's content (skip it), false for errors of the store.
fn is_about_the_memory(e: &MemoryError) -> bool {
    matches!(
        e,
        MemoryError::Invalid { .. } | MemoryError::EntryTooLarge { .. }
    )
}

/// Run `strata memory import`: read the notes of a Markdown folder or the lines of a JSONL
/// file into the store at `path` in batches, then print what was done.
fn import(
    path: &Path,
    embedder: &Arc<dyn Embedder>,
    json: bool,
    a: &ImportArgs,
    out: &mut dyn Write,
    progress: &mut dyn Write,
    terminal: bool,
) -> Result<(), Box<dyn Error>> {
    let markdown = a.source.is_dir();
    let mut places = Places {
        source: &a.source,
        markdown,
        note_paths: Vec::new(),
    };
    let notes = if markdown {
        let graph = NoteGraph::load(&a.source)?;
        places.note_paths = graph.paths().into_iter().map(str::to_owned).collect();
        Some(graph.to_memories(&a.agent))
    } else {
        None
    };
    let file = if markdown {
        None
    } else {
        Some(
            std::fs::File::open(&a.source)
                .map_err(|e| format!("cannot open {}: {e}", a.source.display()))?,
        )
    };
    let total_bytes = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len());
    let store = open_for_write(path, embedder)?;
    let mut prog = Progress::new(progress, terminal, a.progress_every, total_bytes);
    let mut b = Batcher {
        store: &store,
        size: a.batch.max(1),
        batch: Vec::with_capacity(a.batch.max(1)),
        t: Tally::default(),
    };
    let mut stopped = if let Some(notes) = notes {
        import_notes(notes, &a.tags, &mut b, &mut prog)
    } else if let Some(file) = file {
        import_jsonl(file, a, &mut b, &mut prog)
    } else {
        None
    };
    if stopped.is_none() && !b.batch.is_empty() {
        if let Err(e) = b.flush() {
            stopped = Some((b.t.read, e));
        }
    }
    prog.finish();
    let t = b.t;
    if t.imported > 0 {
        index_for_search(&store);
    }
    write_import_summary(out, json, a, path, &t, stopped.as_ref(), &places)?;
    let what = places.what();
    if let Some((l, e)) = stopped {
        return Err(format!("the import stopped at {}: {e}", places.of(l)).into());
    }
    if !t.rejected.is_empty() {
        return Err(format!(
            "{} {what}s of {} were not imported (see the summary above); fix them and run the same import again: what is already stored is skipped",
            t.rejected.len(),
            a.source.display()
        )
        .into());
    }
    Ok(())
}

/// Names where a memory of an import came from: the note's file, or the JSONL line.
struct Places<'a> {
    /// The folder or file imported.
    source: &'a Path,
    /// Whether the source is a folder of Markdown notes.
    markdown: bool,
    /// The notes' paths, in the order they are imported (Markdown only).
    note_paths: Vec<String>,
}

impl Places<'_> {
    /// Where note or line `n` (from 1) is.
    fn of(&self, n: usize) -> String {
        match self.note_paths.get(n.wrapping_sub(1)) {
            Some(p) if self.markdown => {
                format!("note {p} (file {})", self.source.join(p).display())
            }
            _ => format!("line {n}"),
        }
    }

    /// The kind of source, as the JSON summary names it.
    fn kind(&self) -> &'static str {
        if self.markdown {
            "markdown"
        } else {
            "jsonl"
        }
    }

    /// What one item of the source is called.
    fn what(&self) -> &'static str {
        if self.markdown {
            "note"
        } else {
            "line"
        }
    }
}

/// Memories waiting to be stored in one batch, and what the import has done so far.
struct Batcher<'s> {
    store: &'s SqliteStore,
    /// How many memories a batch holds.
    size: usize,
    batch: Vec<(usize, NewMemory)>,
    t: Tally,
}

impl Batcher<'_> {
    /// Add the memory of line or note `line`; when the batch is full, store it and report
    /// progress. An error that stops the import comes back in words.
    fn push(&mut self, line: usize, m: NewMemory, prog: &mut Progress<'_>) -> Result<(), String> {
        self.batch.push((line, m));
        if self.batch.len() >= self.size {
            self.flush()?;
            prog.update(&self.t);
        }
        Ok(())
    }

    /// Store the batch now (see [`store_batch`]).
    fn flush(&mut self) -> Result<(), String> {
        let first = self.batch.first().map_or(0, |(l, _)| *l);
        store_batch(self.store, std::mem::take(&mut self.batch), &mut self.t)
            .map_err(|e| format!("{e} (in the batch starting at line {first})"))
    }
}

/// Feed the memories of a Markdown folder's notes, with the import's tags, to the batcher;
/// the note and the error that stopped the import, if one did.
fn import_notes(
    notes: Vec<NewMemory>,
    tags: &[String],
    b: &mut Batcher<'_>,
    prog: &mut Progress<'_>,
) -> Option<(usize, String)> {
    for (i, mut m) in notes.into_iter().enumerate() {
        m.tags.extend(tags.iter().cloned());
        b.t.read += 1;
        if let Err(e) = b.push(i + 1, m, prog) {
            return Some((i + 1, e));
        }
    }
    None
}

/// Feed a JSONL file to the batcher line by line: blank lines are skipped, a line that is not
/// a memory is rejected; the line and the error that stopped the import, if one did.
fn import_jsonl(
    file: std::fs::File,
    a: &ImportArgs,
    b: &mut Batcher<'_>,
    prog: &mut Progress<'_>,
) -> Option<(usize, String)> {
    let mut reader = std::io::BufReader::new(file);
    let mut line = String::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let n = match reader.read_line(&mut line) {
            Ok(n) => n,
            Err(e) => return Some((number + 1, format!("cannot read the file: {e}"))),
        };
        if n == 0 {
            return None;
        }
        number += 1;
        b.t.bytes += n as u64;
        if line.trim().is_empty() {
            continue;
        }
        b.t.read += 1;
        match parse_line(&line, &a.agent) {
            Ok(mut m) => {
                m.tags.extend(a.tags.iter().cloned());
                if let Err(e) = b.push(number, m, prog) {
                    return Some((number, e));
                }
            }
            Err(e) => b.t.rejected.push((number, e)),
        }
    }
}

/// Index what the import stored for search, leaving the snapshot that lets the next search
/// start in a fraction of the time (ADR-0029). The memories are stored whatever happens here:
/// a failure only leaves that cost to the first search.
fn index_for_search(store: &SqliteStore) {
    let started = Instant::now();
    match store.prepare_search() {
        Ok(()) => tracing::info!(
            took_ms = started.elapsed().as_millis() as u64,
            "indexed the store for search"
        ),
        Err(e) => {
            tracing::warn!(error = %e, "could not index the store for search; the first search will")
        }
    }
}

/// Print what the import did: as JSON, or as one line naming the first memories not imported
/// and where the import stopped.
fn write_import_summary(
    out: &mut dyn Write,
    json: bool,
    a: &ImportArgs,
    path: &Path,
    t: &Tally,
    stopped: Option<&(usize, String)>,
    places: &Places<'_>,
) -> Result<(), Box<dyn Error>> {
    let what = places.what();
    if json {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({
                "imported": t.imported,
                "already_present": t.present,
                "not_imported": t.rejected.iter().map(|(l, e)| serde_json::json!({what: l, "at": places.of(*l), "error": e})).collect::<Vec<_>>(),
                "stopped": stopped.map(|(l, e)| serde_json::json!({what: l, "at": places.of(*l), "error": e})),
                "kind": places.kind(),
                "source": a.source,
                "store": path,
            }),
        )?;
        writeln!(out)?;
        return Ok(());
    }
    let mut line = format!(
        "imported {} memories ({}) from {} into {}; {} already present; {} {what}s not imported",
        t.imported,
        places.kind(),
        a.source.display(),
        path.display(),
        t.present,
        t.rejected.len()
    );
    if !t.rejected.is_empty() {
        let shown: Vec<String> = t
            .rejected
            .iter()
            .take(SHOWN_REJECTS)
            .map(|(l, e)| format!("{}: {e}", places.of(*l)))
            .collect();
        line.push_str(&format!(" ({}", shown.join("; ")));
        if t.rejected.len() > SHOWN_REJECTS {
            line.push_str(&format!("; and {} more", t.rejected.len() - SHOWN_REJECTS));
        }
        line.push(')');
    }
    if let Some((l, e)) = stopped {
        line.push_str(&format!(
            "; stopped at {}: {e}; everything before it is stored, run the same import again to continue",
            places.of(*l)
        ));
    }
    writeln!(out, "{line}")?;
    Ok(())
}

/// One JSONL line as a memory of `agent` unless it names its own.
fn parse_line(line: &str, agent: &str) -> Result<NewMemory, String> {
    let item: JsonlMemory = serde_json::from_str(line).map_err(|e| {
        format!(
            "{e}; expected {{\"content\": ..., \"agent_id\": ..., \"tags\": [...], \"id\": ...}}"
        )
    })?;
    let mut m = NewMemory::new(
        item.agent_id.unwrap_or_else(|| agent.to_owned()),
        item.content,
    )
    .with_tags(item.tags);
    if let Some(id) = item.id {
        m = m.with_id(MemoryId::new(&id).map_err(|e| e.to_string())?);
    }
    Ok(m)
}

fn stats(
    path: &Path,
    embedder: &Arc<dyn Embedder>,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Box<dyn Error>> {
    let store = open_existing(path, embedder)?;
    let s = store.stats()?;
    if json {
        serde_json::to_writer_pretty(&mut *out, &s)?;
        writeln!(out)?;
    } else {
        writeln!(out, "store           {}", s.path.display())?;
        writeln!(out, "schema version  {}", s.schema_version)?;
        writeln!(
            out,
            "embedder        {} ({} dimensions)",
            s.embedder, s.dims
        )?;
        writeln!(out, "memories        {}", s.memories)?;
        writeln!(
            out,
            "sessions        {} ({} entries)",
            s.sessions, s.entries
        )?;
        writeln!(out, "shared facts    {}", s.facts)?;
        writeln!(out, "file size       {} bytes", s.file_bytes)?;
    }
    Ok(())
}

/// `strata memory check`: run every check of the store and list what was found.
fn check(
    path: &Path,
    embedder: &Arc<dyn Embedder>,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Box<dyn Error>> {
    let report = match open_existing(path, embedder) {
        Ok(store) => store.integrity_report(),
        Err(e) => match e.downcast::<MemoryError>() {
            // A store that its own open refuses as damaged is a finding, not a failure to run.
            Ok(m) => match *m {
                MemoryError::Corrupt { location, detail } => IntegrityReport {
                    location,
                    checks: vec!["open"],
                    skipped: Vec::new(),
                    findings: vec![IntegrityFinding {
                        check: "open",
                        detail,
                    }],
                },
                other => return Err(other.into()),
            },
            Err(e) => return Err(e),
        },
    };
    if json {
        let v = serde_json::json!({
            "store": path,
            "clean": report.is_clean(),
            "checks": report.checks,
            "skipped": report
                .skipped
                .iter()
                .map(|(c, why)| serde_json::json!({"check": c, "reason": why}))
                .collect::<Vec<_>>(),
            "findings": report.findings,
        });
        serde_json::to_writer_pretty(&mut *out, &v)?;
        writeln!(out)?;
    } else {
        writeln!(out, "store     {}", path.display())?;
        writeln!(
            out,
            "checks    {} run: {}",
            report.checks.len(),
            report.checks.join(", ")
        )?;
        for (c, why) in &report.skipped {
            writeln!(out, "skipped   {c}: {why}")?;
        }
        if report.is_clean() {
            writeln!(out, "result    clean: no damage found")?;
        } else {
            writeln!(
                out,
                "result    DAMAGED: {} finding{}",
                report.findings.len(),
                if report.findings.len() == 1 { "" } else { "s" }
            )?;
            for f in &report.findings {
                writeln!(out, "  {}: {}", f.check, f.detail)?;
            }
        }
    }
    if report.is_clean() {
        Ok(())
    } else {
        out.flush()?;
        Err(Box::new(StoreDamaged {
            store: path.to_path_buf(),
            findings: report.findings.len(),
        }))
    }
}

fn tags_suffix(tags: &[std::sync::Arc<str>]) -> String {
    if tags.is_empty() {
        String::new()
    } else {
        format!(
            "  tags {}",
            tags.iter().map(|t| &**t).collect::<Vec<_>>().join(",")
        )
    }
}

/// The first `max` characters of `text` on one line.
fn preview(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut p: String = flat.chars().take(max).collect();
    if flat.chars().count() > max {
        p.push('…');
    }
    p
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
fn format_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Top,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Top {
        Memory(MemoryArgs),
    }

    fn exec(args: &[&str]) -> Result<String, Box<dyn Error>> {
        let cli = Cli::try_parse_from(std::iter::once("strata").chain(args.iter().copied()))?;
        let Top::Memory(m) = cli.command;
        let mut out = Vec::new();
        run_with(m, &mut out)?;
        Ok(String::from_utf8(out)?)
    }

    #[test]
    fn add_search_import_stats() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("nested/memory.db");
        let db = db.to_str().unwrap();

        let e = exec(&["memory", "--store", db, "search", "x"]).unwrap_err();
        assert!(e.to_string().contains("there is no memory store"), "{e}");

        let o = exec(&[
            "memory",
            "--store",
            db,
            "add",
            "The staging deploy needs the VPN",
            "--agent",
            "ada",
            "--tag",
            "ops",
            "--id",
            "vpn",
        ])
        .unwrap();
        assert_eq!(o, "added vpn (agent ada  tags ops)\n");

        let notes = dir.path().join("notes");
        std::fs::create_dir_all(&notes).unwrap();
        std::fs::write(notes.join("deploy.md"), "Deploy steps: see [[vpn setup]].").unwrap();
        std::fs::write(notes.join("vpn setup.md"), "Install the VPN client first.").unwrap();
        let o = exec(&[
            "memory",
            "import",
            notes.to_str().unwrap(),
            "--store",
            db,
            "--agent",
            "ada",
        ])
        .unwrap();
        assert!(o.starts_with("imported 2 memories (markdown)"), "{o}");

        let jsonl = dir.path().join("m.jsonl");
        std::fs::write(
            &jsonl,
            "{\"content\": \"Coffee is on the third floor\", \"tags\": [\"office\"]}\n\n{\"text\": \"Bob likes tea\", \"agent_id\": \"bob\"}\n",
        )
        .unwrap();
        let o = exec(&[
            "memory",
            "--store",
            db,
            "--json",
            "import",
            jsonl.to_str().unwrap(),
            "--tag",
            "imported",
        ])
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&o).unwrap();
        assert_eq!(v["imported"], 2);

        let o = exec(&[
            "memory",
            "--store",
            db,
            "search",
            "how to deploy to staging",
            "--agent",
            "ada",
            "--top",
            "2",
        ])
        .unwrap();
        assert!(o.starts_with("1. vpn  score"), "{o}");
        assert!(o.contains("   The staging deploy needs the VPN"), "{o}");

        let o = exec(&[
            "memory", "--store", db, "search", "tea", "--json", "--mode", "lexical",
        ])
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&o).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 1);
        assert_eq!(v[0]["record"]["agent_id"], "bob");
        assert_eq!(v[0]["record"]["tags"], serde_json::json!(["imported"]));

        let o = exec(&["memory", "--store", db, "stats"]).unwrap();
        assert!(o.contains("memories        5\n"), "{o}");
        let o = exec(&["memory", "--store", db, "stats", "--json"]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&o).unwrap();
        assert_eq!(v["memories"], 5);

        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{\"content\": \"ok\"}\n{\"contnet\": \"typo\"}\n").unwrap();
        let (o, _, r) = exec_all(&["memory", "--store", db, "import", bad.to_str().unwrap()]);
        assert!(r.unwrap_err().to_string().contains("1 lines"));
        assert!(o.contains("line 2: unknown field `contnet`"), "{o}");
    }

    /// Run a command, returning its output, its progress lines and its result.
    fn exec_all(args: &[&str]) -> (String, String, Result<(), Box<dyn Error>>) {
        let cli =
            Cli::try_parse_from(std::iter::once("strata").chain(args.iter().copied())).unwrap();
        let Top::Memory(m) = cli.command;
        let (mut out, mut progress) = (Vec::new(), Vec::new());
        let r = run_with_progress(m, &mut out, &mut progress, false);
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(progress).unwrap(),
            r,
        )
    }

    fn jsonl(lines: impl Iterator<Item = String>) -> String {
        lines.map(|l| l + "\n").collect()
    }

    fn line(i: usize) -> String {
        serde_json::json!({"content": format!("memory number {i} about the build"), "tags": ["t"]})
            .to_string()
    }

    /// Verifies ADR-0019: an import interrupted after some batches and run again stores
    /// each memory once: ids come from the content, and what is already stored is skipped.
    #[test]
    fn import_run_again_does_not_duplicate() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("m.db");
        let db = db.to_str().unwrap();
        let full = dir.path().join("full.jsonl");
        let part = dir.path().join("part.jsonl");
        std::fs::write(&full, jsonl((0..1000).map(line))).unwrap();
        // What an interrupted run had committed: the first 600 lines.
        std::fs::write(&part, jsonl((0..600).map(line))).unwrap();
        let (o, _, r) = exec_all(&["memory", "--store", db, "import", part.to_str().unwrap()]);
        r.unwrap();
        assert!(o.starts_with("imported 600 memories"), "{o}");
        let (o, _, r) = exec_all(&["memory", "--store", db, "import", full.to_str().unwrap()]);
        r.unwrap();
        assert!(o.starts_with("imported 400 memories"), "{o}");
        assert!(
            o.contains("; 600 already present; 0 lines not imported"),
            "{o}"
        );
        let o = exec(&["memory", "--store", db, "stats", "--json"]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&o).unwrap();
        assert_eq!(v["memories"], 1000);
        // A third run stores nothing.
        let (o, _, r) = exec_all(&["memory", "--store", db, "import", full.to_str().unwrap()]);
        r.unwrap();
        assert!(o.starts_with("imported 0 memories"), "{o}");
    }

    /// Verifies ADR-0029: an import leaves the index snapshot of everything it stored, so a new
    /// handle's first search starts from it and loads no row, and finds an imported memory.
    #[test]
    fn import_leaves_the_search_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("m.db");
        let src = dir.path().join("src.jsonl");
        std::fs::write(&src, jsonl((0..300).map(line))).unwrap();
        let (_, _, r) = exec_all(&[
            "memory",
            "--store",
            db.to_str().unwrap(),
            "import",
            src.to_str().unwrap(),
        ]);
        r.unwrap();
        let mut snapshot = db.as_os_str().to_owned();
        snapshot.push("-index");
        assert!(std::path::Path::new(&snapshot).is_file(), "no snapshot");
        let store = SqliteStore::open(&db).unwrap();
        let found = strata_memory::LongTermMemory::search(
            &store,
            "memory number 123 about the build",
            &strata_memory::SearchOptions::default(),
        )
        .unwrap();
        assert!(!found.is_empty());
        let st = store.vector_cache_stats();
        assert_eq!((st.snapshot_loads, st.full_loads), (1, 0), "{st:?}");
    }

    /// Verifies ADR-0019: a bad line at the end does not hide what was imported: the summary
    /// says how many were stored and names the line that was not, and the command fails.
    #[test]
    fn bad_last_line_is_named_in_the_summary() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("m.db");
        let db = db.to_str().unwrap();
        let src = dir.path().join("src.jsonl");
        let mut text = jsonl((0..120).map(line));
        text.push_str("{\"content\": 12}\n");
        std::fs::write(&src, text).unwrap();
        let (o, _, r) = exec_all(&[
            "memory",
            "--store",
            db,
            "import",
            src.to_str().unwrap(),
            "--batch",
            "50",
        ]);
        assert!(r.is_err());
        assert!(o.starts_with("imported 120 memories"), "{o}");
        assert!(
            o.contains("1 lines not imported (line 121: invalid type"),
            "{o}"
        );
        let o = exec(&["memory", "--store", db, "stats", "--json"]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&o).unwrap();
        assert_eq!(v["memories"], 120);
    }

    /// Verifies ADR-0019: when stderr is not a terminal, progress comes as plain lines.
    #[test]
    fn progress_lines_without_a_terminal() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("m.db");
        let src = dir.path().join("src.jsonl");
        std::fs::write(&src, jsonl((0..100).map(line))).unwrap();
        let (_, progress, r) = exec_all(&[
            "memory",
            "--store",
            db.to_str().unwrap(),
            "import",
            src.to_str().unwrap(),
            "--batch",
            "10",
            "--progress-every",
            "0",
        ]);
        r.unwrap();
        let lines: Vec<&str> = progress.lines().collect();
        assert_eq!(lines.len(), 10, "{progress}");
        assert!(
            lines[9].starts_with("import: 100 read (100%), 100 imported"),
            "{progress}"
        );
    }

    /// Verifies ADR-0019: `stats` and `search` never write: a 0-byte file is refused and
    /// stays 0 bytes, and an existing store's files are unchanged byte for byte.
    #[test]
    fn read_commands_never_write() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        for cmd in [&["stats"][..], &["search", "x"][..]] {
            let mut args = vec!["memory", "--store", empty.to_str().unwrap()];
            args.extend_from_slice(cmd);
            let e = exec(&args).unwrap_err();
            assert!(e.to_string().contains("empty"), "{e}");
            assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
        }
        let db = dir.path().join("m.db");
        let db_s = db.to_str().unwrap();
        exec(&["memory", "--store", db_s, "add", "a fact to keep"]).unwrap();
        let snapshot = |p: &std::path::Path| -> Vec<(String, Vec<u8>)> {
            let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| !p.ends_with("empty.db"))
                .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
                .collect();
            files.sort();
            files
        };
        let before = snapshot(dir.path());
        exec(&["memory", "--store", db_s, "stats"]).unwrap();
        exec(&["memory", "--store", db_s, "search", "fact"]).unwrap();
        // SQLite's readers of a WAL-mode file set up the shared-memory index (`-shm`) and
        // an empty `-wal`; neither holds data. The store and its commit counter are unchanged.
        let after: Vec<(String, Vec<u8>)> = snapshot(dir.path())
            .into_iter()
            .filter(|(n, b)| !(n.ends_with("-shm") || n.ends_with("-wal") && b.is_empty()))
            .collect();
        assert_eq!(after.len(), 2);
        assert!(after == before, "the store's files changed");
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_ms(1_700_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(format_ms(951_782_400_000), "2000-02-29T00:00:00Z");
    }
}
