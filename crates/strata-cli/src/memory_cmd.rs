//! `strata memory`: add, search, import and count long-term memories in the embedded SQLite
//! store (ADR-0012).
//!
//! ```text
//! strata memory add "The staging deploy needs the VPN" --agent ada --tag ops
//! strata memory search "how do I deploy to staging" --agent ada --top 5
//! strata memory import ./notes            # a folder of Markdown notes ([[wikilinks]] kept)
//! strata memory import memories.jsonl     # one {"content": ..., "agent_id": ..., "tags": [...]} per line
//! strata memory stats --json
//! ```
//!
//! The store defaults to `./.strata/memory.db`. Results go to the writer given to
//! [`run_with`] (stdout for [`run`]); a progress bar is drawn on stderr during imports, and only
//! when stderr is a terminal.

use std::error::Error;
use std::io::{BufRead as _, IsTerminal as _, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use strata_memory::{
    LongTermMemory, MemoryId, NewMemory, NoteGraph, SearchMode, SearchOptions, SqliteStore,
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

    /// What to do.
    #[command(subcommand)]
    pub command: MemoryCommand,
}

/// The `strata memory` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum MemoryCommand {
    /// Store one memory (`-` reads the text from stdin).
    Add(AddArgs),
    /// Hybrid search: BM25 and vector similarity fused by reciprocal rank.
    Search(SearchArgs),
    /// Import a folder of Markdown notes, or a JSONL file of memories.
    Import(ImportArgs),
    /// Show what the store holds.
    Stats,
}

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
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonlMemory {
    #[serde(alias = "text")]
    content: String,
    #[serde(default, alias = "agent")]
    agent_id: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    id: Option<String>,
}

/// Run `strata memory`, writing results to stdout.
pub fn run(args: MemoryArgs) -> Result<(), Box<dyn Error>> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run_with(args, &mut out)
}

/// Run `strata memory`, writing results to `out`.
pub fn run_with(args: MemoryArgs, out: &mut dyn Write) -> Result<(), Box<dyn Error>> {
    match args.command {
        MemoryCommand::Add(a) => add(&args.store, args.json, a, out),
        MemoryCommand::Search(a) => search(&args.store, args.json, &a, out),
        MemoryCommand::Import(a) => import(&args.store, args.json, &a, out),
        MemoryCommand::Stats => stats(&args.store, args.json, out),
    }?;
    out.flush()?;
    Ok(())
}

/// Open the store for writing, creating its folder when needed.
fn open_for_write(path: &Path) -> Result<SqliteStore, Box<dyn Error>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the folder {}: {e}", dir.display()))?;
    }
    Ok(SqliteStore::open(path)?)
}

/// Open an existing store; a missing one is an error rather than a new empty store.
fn open_existing(path: &Path) -> Result<SqliteStore, Box<dyn Error>> {
    if !path.exists() {
        return Err(format!(
            "there is no memory store at {}; create one with `strata memory add` or `strata memory import`, or pass --store",
            path.display()
        )
        .into());
    }
    Ok(SqliteStore::open(path)?)
}

fn add(path: &Path, json: bool, a: AddArgs, out: &mut dyn Write) -> Result<(), Box<dyn Error>> {
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
    let store = open_for_write(path)?;
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
    json: bool,
    a: &SearchArgs,
    out: &mut dyn Write,
) -> Result<(), Box<dyn Error>> {
    let store = open_existing(path)?;
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

fn import(
    path: &Path,
    json: bool,
    a: &ImportArgs,
    out: &mut dyn Write,
) -> Result<(), Box<dyn Error>> {
    let (kind, mut items) = if a.source.is_dir() {
        let graph = NoteGraph::load(&a.source)?;
        ("markdown", graph.to_memories(&a.agent))
    } else {
        ("jsonl", read_jsonl(&a.source, &a.agent)?)
    };
    for m in &mut items {
        m.tags.extend(a.tags.iter().cloned());
    }
    let store = open_for_write(path)?;
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(items.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} memories ({per_sec}, {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let total = items.len();
    let batch = a.batch.max(1);
    let mut done = 0usize;
    while !items.is_empty() {
        let rest = items.split_off(batch.min(items.len()));
        let chunk = std::mem::replace(&mut items, rest);
        let n = chunk.len();
        store.put_many(chunk)?;
        done += n;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    if json {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({
                "imported": done,
                "kind": kind,
                "source": a.source,
                "store": path,
            }),
        )?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "imported {done} of {total} memories ({kind}) from {} into {}",
            a.source.display(),
            path.display()
        )?;
    }
    Ok(())
}

fn read_jsonl(path: &Path, agent: &str) -> Result<Vec<NewMemory>, Box<dyn Error>> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let item: JsonlMemory = serde_json::from_str(&line).map_err(|e| {
            format!(
                "{} line {}: {e}; expected {{\"content\": ..., \"agent_id\": ..., \"tags\": [...], \"id\": ...}}",
                path.display(),
                i + 1
            )
        })?;
        let mut m = NewMemory::new(
            item.agent_id.unwrap_or_else(|| agent.to_owned()),
            item.content,
        )
        .with_tags(item.tags);
        if let Some(id) = item.id {
            m = m.with_id(
                MemoryId::new(&id)
                    .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?,
            );
        }
        out.push(m);
    }
    Ok(out)
}

fn stats(path: &Path, json: bool, out: &mut dyn Write) -> Result<(), Box<dyn Error>> {
    let store = open_existing(path)?;
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
        assert!(o.starts_with("imported 2 of 2 memories (markdown)"), "{o}");

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
        let e = exec(&["memory", "--store", db, "import", bad.to_str().unwrap()]).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_ms(1_700_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(format_ms(951_782_400_000), "2000-02-29T00:00:00Z");
    }
}
