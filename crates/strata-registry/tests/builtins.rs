//! Built-in contributors: what each produces, in which layer, mode and path.
#![allow(
    clippy::unwrap_used,
    reason = "helpers outside #[test] functions fail the test on purpose"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use strata_core::{
    AnnouncedTool, AssemblyPath, ContentHash, PromptMode, RuntimeLayer, Section, SourceKind,
    Stability, ToolName, ToolUsageHint,
};
use strata_registry::builtins::{
    BootstrapFiles, Environment, Prompt, RuntimeCapabilities, TemporalContext, ToolGuidance,
};
use strata_registry::{
    ActiveSkill, Builtins, ContributionContext, Contributor, Inbound, ManualClock, Registry,
    RequestInputs, RunOutcome, SectionCache, StandardSection, ThinkingLevel, TimeZone,
};

/// 2026-11-21 13:20 UTC, a Saturday.
const NOW: i64 = 1_795_267_200_000;

fn tool(name: &str, description: &str, server: Option<&str>) -> AnnouncedTool {
    AnnouncedTool {
        parameters: None,
        name: ToolName::new(name).unwrap(),
        description: description.into(),
        server: server.map(Arc::from),
    }
}

fn inputs() -> RequestInputs {
    let mut hints = BTreeMap::new();
    hints.insert(
        ToolName::new("file_read").unwrap(),
        ToolUsageHint {
            prefer_for: vec!["reading files".into()],
            prefer_over: vec![ToolName::new("shell").unwrap()],
        },
    );
    hints.insert(
        ToolName::new("web_fetch").unwrap(),
        ToolUsageHint {
            prefer_for: vec!["downloading pages".into()],
            prefer_over: vec![],
        },
    );
    RequestInputs {
        tools: vec![
            tool("shell", "Run a command.", None),
            tool("file_read", "Read a file.", None),
            tool("gh_issue", "Open an issue.", Some("github")),
        ],
        tool_hints: hints,
        active_skills: vec![ActiveSkill {
            id: "review".into(),
            instructions: "Review the diff line by line.".into(),
        }],
        inbound: Some(Inbound {
            sender: Some("ada".into()),
            channel: Some("slack".into()),
            metadata: BTreeMap::from([("thread".to_owned(), "42".to_owned())]),
        }),
        voice: true,
        language: Some("French".into()),
        thinking: Some(ThinkingLevel::High),
        model: Some("model-x".into()),
        time_zone: None,
        recent_footprint: Vec::new(),
        business_context: None,
        skip_sanity_checks: false,
    }
}

fn ctx(mode: PromptMode, path: AssemblyPath) -> ContributionContext {
    let mut c = ContributionContext::new("helper", ContentHash::of("def"), "s1", NOW);
    c.mode = mode;
    c.path = path;
    c.inputs = Arc::new(inputs());
    c
}

fn registry(workspace: Option<&Path>) -> Registry {
    let r = Registry::new();
    Builtins {
        working_dir: "/srv/work".into(),
        workspace: workspace.map(Path::to_path_buf),
        custom_instructions: "Answer briefly.".into(),
        time_zone: TimeZone::utc(),
        host: "box-1".into(),
        max_file_chars: 20_000,
    }
    .register(&r)
    .unwrap();
    r
}

fn ids(sections: &[Section]) -> Vec<&str> {
    sections.iter().map(|s| s.id().as_str()).collect()
}

fn find<'a>(sections: &'a [Section], id: &str) -> &'a Section {
    sections
        .iter()
        .find(|s| s.id().as_str() == id)
        .unwrap_or_else(|| panic!("no section {id} in {:?}", ids(sections)))
}

/// Verifies ADR-0011: every built-in section lands in its runtime layer, and the modes select
/// what the seeds say.
#[test]
fn modes_select_the_standard_sections() {
    let r = registry(None);
    let full = r
        .gather(&ctx(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    assert!(full.omissions.is_empty(), "{:?}", full.omissions);
    assert_eq!(
        ids(&full.sections),
        [
            "capabilities",
            "environment",
            "instructions.custom",
            "runtime",
            "time",
            "tools.catalog",
            "tools.guidance",
            "inbound",
            "language",
            "skill/review",
            "thinking",
            "voice",
        ]
    );
    for s in &full.sections {
        let want = if matches!(
            s.id().as_str(),
            "inbound" | "language" | "skill/review" | "thinking" | "voice"
        ) {
            RuntimeLayer::Delegated
        } else {
            RuntimeLayer::Shared
        };
        assert_eq!(s.layer(), want, "{}", s.id());
    }

    let compact = r
        .gather(&ctx(PromptMode::Compact, AssemblyPath::Soul))
        .unwrap();
    assert_eq!(
        ids(&compact.sections),
        [
            "tools.catalog",
            "tools.guidance",
            "inbound",
            "language",
            "voice"
        ]
    );
    let minimal = r
        .gather(&ctx(PromptMode::Minimal, AssemblyPath::Soul))
        .unwrap();
    assert_eq!(
        ids(&minimal.sections),
        ["tools.catalog", "tools.guidance", "language"]
    );
    let scheduled = r
        .gather(&ctx(PromptMode::Scheduled, AssemblyPath::Soul))
        .unwrap();
    assert_eq!(ids(&scheduled.sections), ["instructions.custom", "time"]);
}

#[test]
fn paths_select_the_standard_sections() {
    let r = registry(None);
    let basic = r
        .gather(&ctx(PromptMode::Full, AssemblyPath::Basic))
        .unwrap();
    assert_eq!(
        ids(&basic.sections),
        [
            "instructions.custom",
            "tools.catalog",
            "tools.guidance",
            "language"
        ]
    );
    let cached = r
        .gather(&ctx(PromptMode::Full, AssemblyPath::Cached))
        .unwrap();
    assert!(cached
        .sections
        .iter()
        .all(|s| s.stability() == Stability::Stable));
    assert!(!ids(&cached.sections).contains(&"time"));
    assert!(ids(&cached.sections).contains(&"environment"));
}

#[test]
fn contents_are_generated_from_the_inputs() {
    let r = registry(None);
    let g = r
        .gather(&ctx(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    let text = |id| find(&g.sections, id).content().as_str().to_owned();
    assert_eq!(
        text("time"),
        "Current time: 2026-11-21 13:20 (UTC+00:00, UTC)\nTime zone: UTC (UTC+00:00)\nDay of week: Saturday"
    );
    assert!(text("environment").contains("Date: 2026-11-21 (Saturday)"));
    assert!(text("environment").contains("Working directory: /srv/work"));
    assert!(text("runtime").contains("Agent: helper\nModel: model-x\nHost: box-1"));
    assert_eq!(
        text("tools.catalog"),
        "Tools available in this session:\n- `file_read`: Read a file.\n- `gh_issue` (from MCP server `github`): Open an issue.\n- `shell`: Run a command."
    );
    // Guidance only for announced tools: web_fetch is not announced.
    assert_eq!(
        text("tools.guidance"),
        "Tool usage:\n- Use `file_read` for reading files.\n- Prefer `file_read` over `shell`."
    );
    assert_eq!(text("skill/review"), "Review the diff line by line.");
    assert_eq!(text("inbound"), "Sender: ada\nChannel: slack\nthread: 42");
    assert_eq!(text("language"), "Write your answers in French.");
    assert!(text("thinking").starts_with("Thinking level: high."));
    assert!(text("voice").contains("spoken aloud"));
    assert_eq!(text("instructions.custom"), "Answer briefly.");
    assert_eq!(
        find(&g.sections, "instructions.custom").provenance().source,
        SourceKind::Config
    );
    // The time and the runtime environment are sticky (never trimmed, as Ivy's), the rest is
    // not.
    assert!(find(&g.sections, "time").sticky());
    assert!(find(&g.sections, "environment").sticky());
    assert!(!find(&g.sections, "runtime").sticky());
    // Same inputs, same bytes.
    let again = r
        .gather(&ctx(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    assert_eq!(g.sections, again.sections);
}

#[test]
fn a_request_time_zone_wins_over_the_default() {
    let mut c = ctx(PromptMode::Full, AssemblyPath::Soul);
    let mut i = inputs();
    i.time_zone = Some(TimeZone {
        name: "Pacific/Auckland".into(),
        offset_minutes: 13 * 60,
    });
    c.inputs = Arc::new(i);
    let s = TemporalContext::new(TimeZone::utc())
        .contribute(&c)
        .unwrap();
    assert_eq!(
        s[0].content().as_str(),
        "Current time: 2026-11-22 02:20 (UTC+13:00, Pacific/Auckland)\nTime zone: Pacific/Auckland (UTC+13:00)\nDay of week: Sunday"
    );
}

#[test]
fn nothing_is_produced_without_inputs() {
    let r = registry(None);
    let mut c = ctx(PromptMode::Full, AssemblyPath::Soul);
    c.inputs = Arc::new(RequestInputs::default());
    let g = r.gather(&c).unwrap();
    assert_eq!(
        ids(&g.sections),
        [
            "capabilities",
            "environment",
            "instructions.custom",
            "runtime",
            "time"
        ]
    );
}

/// Capabilities are detected on the search path, never assumed.
#[cfg(unix)]
#[test]
fn capabilities_are_detected_on_the_search_path() {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    for (dir, name, mode) in [
        (bin.path(), "python3", 0o755),
        (other.path(), "ffmpeg", 0o755),
        (bin.path(), "node", 0o644),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let caps = RuntimeCapabilities::new(
        vec![bin.path().to_path_buf(), other.path().to_path_buf()],
        [
            ("python3", "Python 3"),
            ("node", "Node.js"),
            ("ffmpeg", "FFmpeg"),
            ("git", "Git"),
        ]
        .map(|(p, l)| (p.to_owned(), l.to_owned())),
    );
    let found = caps.detect();
    assert_eq!(found.keys().collect::<Vec<_>>(), ["ffmpeg", "python3"]);
    let s = caps
        .contribute(&ctx(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    let text = s[0].content().as_str();
    assert!(text.contains("- Python 3: `python3`"), "{text}");
    assert!(text.contains("- FFmpeg: `ffmpeg`"), "{text}");
    assert!(text.ends_with("Not found: node, git"), "{text}");
    // The host's paths stay out of the prompt.
    let dir = bin.path().to_string_lossy().into_owned();
    assert!(!text.contains(&dir) && !text.contains('/'), "{text}");
}

/// Verifies ADR-0006: workspace files named SOUL.md or IDENTITY.md are layer 3 content from
/// configuration, never identity.
#[test]
fn bootstrap_files_are_layer_three_never_identity() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("SOUL.md"), "You are a pirate now.").unwrap();
    std::fs::write(ws.path().join("IDENTITY.md"), "x".repeat(50)).unwrap();
    std::fs::write(ws.path().join("TOOLS.md"), "  \n").unwrap();
    let b = BootstrapFiles::new(ws.path()).with_max_chars(10);
    let s = b
        .contribute(&ctx(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    assert_eq!(ids(&s), ["bootstrap/SOUL.md", "bootstrap/IDENTITY.md"]);
    for sec in &s {
        assert_eq!(sec.layer(), RuntimeLayer::Shared);
        assert_eq!(sec.provenance().source, SourceKind::Config);
        assert_eq!(sec.stability(), Stability::Dynamic);
    }
    assert_eq!(
        s[1].content().as_str(),
        "xxxxxxxxxx\n[... 40 more characters not shown]"
    );
    let bad = BootstrapFiles::new(ws.path()).with_files(["../etc/passwd"]);
    assert!(bad
        .contribute(&ctx(PromptMode::Full, AssemblyPath::Soul))
        .is_err());
}

/// The bootstrap sections a gathering returned, as (file, content), in id order, and how the
/// contributor's output was obtained.
fn bootstrap_gathered(
    r: &Registry,
    c: &ContributionContext,
) -> (Vec<(String, String)>, RunOutcome) {
    let g = r.gather(c).unwrap();
    let files = g
        .sections
        .iter()
        .map(|s| {
            let name = s.id().as_str().strip_prefix("bootstrap/").unwrap();
            (name.to_owned(), s.content().as_str().to_owned())
        })
        .collect();
    (files, g.runs[0].outcome)
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// Verifies ADR-0011: bootstrap files are cached with a validator, not a time to live: an
/// unchanged folder is a cache hit, and an edited, added or removed file reaches the very next
/// gathering, with the clock standing still (no time to live can have run out).
#[test]
fn a_changed_bootstrap_file_reaches_the_next_gathering() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("AGENTS.md"), "v1").unwrap();
    let cache = Arc::new(SectionCache::new(Arc::new(ManualClock::new(0))));
    let r = Registry::with_cache(cache.clone());
    r.register(Arc::new(BootstrapFiles::new(ws.path())))
        .unwrap();
    let c = ctx(PromptMode::Full, AssemblyPath::Soul);
    let got = |r: &Registry| bootstrap_gathered(r, &c);
    assert_eq!(
        got(&r),
        (pairs(&[("AGENTS.md", "v1")]), RunOutcome::Computed)
    );
    assert_eq!(got(&r), (pairs(&[("AGENTS.md", "v1")]), RunOutcome::Cached));
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.changed), (1, 1, 0));

    // The same length, written straight away.
    std::fs::write(ws.path().join("AGENTS.md"), "v2").unwrap();
    assert_eq!(
        got(&r),
        (pairs(&[("AGENTS.md", "v2")]), RunOutcome::Computed)
    );
    assert_eq!(got(&r), (pairs(&[("AGENTS.md", "v2")]), RunOutcome::Cached));
    // A file that appears.
    std::fs::write(ws.path().join("SOUL.md"), "Be kind.").unwrap();
    assert_eq!(
        got(&r),
        (
            pairs(&[("AGENTS.md", "v2"), ("SOUL.md", "Be kind.")]),
            RunOutcome::Computed
        )
    );
    // A file that disappears.
    std::fs::remove_file(ws.path().join("AGENTS.md")).unwrap();
    assert_eq!(
        got(&r),
        (pairs(&[("SOUL.md", "Be kind.")]), RunOutcome::Computed)
    );
    assert_eq!(
        got(&r),
        (pairs(&[("SOUL.md", "Be kind.")]), RunOutcome::Cached)
    );
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.changed, s.entries), (3, 4, 3, 1));
    assert_eq!(s.invalidations, 0, "nothing was invalidated by hand");
}

/// Verifies ADR-0011: a rewrite of the same length that leaves the modification time as it
/// was is noticed. That happens when two writes fall in one tick of a coarse file-system clock
/// (a second on some file systems, 4 ms on this machine's ext4 without a look at the file in
/// between), or when a tool keeps the old time (`cp -p`, `tar`, `rsync -t`); here the test puts
/// the old time back itself. The validator is the files' contents, so size and time do not
/// matter.
#[test]
fn a_same_length_rewrite_with_the_old_modification_time_is_noticed() {
    let ws = tempfile::tempdir().unwrap();
    let file = ws.path().join("SOUL.md");
    std::fs::write(&file, "aaaa").unwrap();
    let r = Registry::with_cache(Arc::new(SectionCache::new(Arc::new(ManualClock::new(0)))));
    r.register(Arc::new(BootstrapFiles::new(ws.path())))
        .unwrap();
    let c = ctx(PromptMode::Full, AssemblyPath::Soul);
    for round in 0..20 {
        let (old, new) = if round % 2 == 0 {
            ("aaaa", "bbbb")
        } else {
            ("bbbb", "aaaa")
        };
        // Cached (or computed) with the old text, then rewritten at once with its old time.
        assert_eq!(bootstrap_gathered(&r, &c).0, pairs(&[("SOUL.md", old)]));
        let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::fs::write(&file, new).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        let after = std::fs::metadata(&file).unwrap();
        assert_eq!((after.len(), after.modified().unwrap()), (4, modified));
        assert_eq!(
            bootstrap_gathered(&r, &c),
            (pairs(&[("SOUL.md", new)]), RunOutcome::Computed),
            "round {round}"
        );
        assert_eq!(
            bootstrap_gathered(&r, &c),
            (pairs(&[("SOUL.md", new)]), RunOutcome::Cached),
            "round {round}"
        );
    }
}

/// Verifies ADR-0007: the bootstrap sections keep the order of the contributor's file list,
/// each file one priority step below the one before it, whatever files are missing.
#[test]
fn bootstrap_files_are_ranked_in_list_order() {
    let ws = tempfile::tempdir().unwrap();
    for name in BootstrapFiles::DEFAULT_FILES {
        std::fs::write(ws.path().join(name), format!("{name} text")).unwrap();
    }
    let s = BootstrapFiles::new(ws.path())
        .contribute(&ctx(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    let base = StandardSection::BootstrapFiles.priority();
    let ranked: Vec<(String, u32)> = s
        .iter()
        .map(|s| (s.id().as_str().to_owned(), s.priority()))
        .collect();
    let expected: Vec<(String, u32)> = [
        "SOUL.md",
        "AGENTS.md",
        "TOOLS.md",
        "COMMANDS.md",
        "IDENTITY.md",
        "PREFERENCES.md",
    ]
    .iter()
    .zip(0..)
    .map(|(name, step)| (format!("bootstrap/{name}"), base - step))
    .collect();
    assert_eq!(ranked, expected);
    // The last default file is still above the workspace hints, or level with them.
    assert!(base - 5 >= StandardSection::WorkspaceHints.priority());
    // A file's rank does not depend on which others exist.
    std::fs::remove_file(ws.path().join("SOUL.md")).unwrap();
    let s = BootstrapFiles::new(ws.path())
        .contribute(&ctx(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    assert_eq!(s[0].id().as_str(), "bootstrap/AGENTS.md");
    assert_eq!(s[0].priority(), base - 1);
}

/// The environment is stable but keyed by the date: the next day recomputes it.
#[test]
fn environment_is_cached_per_day() {
    let r = Registry::with_cache(Arc::new(SectionCache::default()));
    r.register(Arc::new(Environment::new("/w"))).unwrap();
    let mut c = ctx(PromptMode::Full, AssemblyPath::Soul);
    assert_eq!(r.gather(&c).unwrap().runs[0].outcome, RunOutcome::Computed);
    c.now_ms += 3_600_000;
    assert_eq!(r.gather(&c).unwrap().runs[0].outcome, RunOutcome::Cached);
    c.now_ms += 24 * 3_600_000;
    let g = r.gather(&c).unwrap();
    assert_eq!(g.runs[0].outcome, RunOutcome::Computed);
    assert!(g.sections[0]
        .content()
        .as_str()
        .contains("2026-11-22 (Sunday)"));
}

/// Tool guidance is keyed by the tools: a changed tool set is never served old guidance.
#[test]
fn tool_guidance_follows_the_announced_tools() {
    let r = Registry::with_cache(Arc::new(SectionCache::default()));
    r.register(Arc::new(ToolGuidance)).unwrap();
    let c = ctx(PromptMode::Full, AssemblyPath::Soul);
    assert_eq!(r.gather(&c).unwrap().sections.len(), 1);
    let mut fewer = c.clone();
    let mut i = inputs();
    i.tools.retain(|t| t.name.as_str() == "shell");
    fewer.inputs = Arc::new(i);
    let g = r.gather(&fewer).unwrap();
    assert_eq!(g.runs[0].outcome, RunOutcome::Computed);
    assert!(g.sections.is_empty());
}

/// A skill prompt registered by an MCP server takes part only while its skill is active, and
/// goes away when the server disconnects.
#[test]
fn mcp_skill_prompts_follow_activation_and_disconnect() {
    let r = Registry::with_cache(Arc::new(SectionCache::default()));
    r.register(Arc::new(Prompt::mcp_skill(
        "github",
        "review",
        "Use the GitHub review flow.",
    )))
    .unwrap();
    r.register(Arc::new(Prompt::mcp_skill(
        "github",
        "triage",
        "Label issues.",
    )))
    .unwrap();
    r.register(Arc::new(
        Prompt::new(
            "config.sanity",
            RuntimeLayer::Delegated,
            StandardSection::SkillInstructions,
            "Check facts before stating them.",
        )
        .with_source(SourceKind::Config)
        .requiring_tools(["web_fetch"]),
    ))
    .unwrap();
    let c = ctx(PromptMode::Full, AssemblyPath::Soul);
    let g = r.gather(&c).unwrap();
    assert_eq!(ids(&g.sections), ["mcp:github/review"]);
    assert_eq!(
        g.sections[0].provenance().source,
        SourceKind::Mcp("github".into())
    );
    let mut with_tool = c.clone();
    let mut i = inputs();
    i.tools.push(tool("web_fetch", "Fetch a page.", None));
    with_tool.inputs = Arc::new(i);
    assert_eq!(
        ids(&r.gather(&with_tool).unwrap().sections),
        ["config.sanity", "mcp:github/review"]
    );
    assert_eq!(r.clear_mcp_server("github").len(), 2);
    assert!(r.gather(&c).unwrap().sections.is_empty());
}

/// Every built-in declares the modes and paths of its standard section.
#[test]
fn builtins_declare_their_modes_and_paths() {
    let r = registry(Some(Path::new("/nonexistent")));
    for e in r.all() {
        let m = e.meta();
        assert!(!m.modes.is_empty() && !m.paths.is_empty(), "{}", e.id());
        assert!(m.modes.contains(PromptMode::Full), "{}", e.id());
        assert!(m.paths.contains(AssemblyPath::Soul), "{}", e.id());
    }
    assert_eq!(r.len(), 15);
}

/// A FIFO put in place of a bootstrap file (anyone who can write to the workspace can make
/// one) is never opened: the validator and the read leave it out, the other files still reach
/// the gathering, and the gathering does not block (run on a thread and waited for with a
/// bound only as a guard against a hang; nothing here measures speed).
#[cfg(unix)]
#[test]
fn a_fifo_in_place_of_a_bootstrap_file_blocks_nothing() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("SOUL.md"), "Be terse.").unwrap();
    let fifo = ws.path().join("AGENTS.md");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let cache = Arc::new(SectionCache::new(Arc::new(ManualClock::new(0))));
    let r = Arc::new(Registry::with_cache(cache));
    r.register(Arc::new(BootstrapFiles::new(ws.path())))
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let gathering = r.clone();
    std::thread::spawn(move || {
        let c = ctx(PromptMode::Full, AssemblyPath::Soul);
        let _ = tx.send(bootstrap_gathered(&gathering, &c));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the gathering blocked on a FIFO");
    assert_eq!(
        got,
        (pairs(&[("SOUL.md", "Be terse.")]), RunOutcome::Computed)
    );
}
