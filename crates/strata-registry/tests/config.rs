//! `strata.toml`: defaults, strictness, error locations, budgets.
#![allow(
    clippy::unwrap_used,
    reason = "helpers outside #[test] functions fail the test on purpose"
)]

use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use strata_core::{PromptMode, RuntimeLayer};
use strata_registry::config::{Location, WorkspaceConfig};
use strata_registry::{Config, ConfigError, ManualClock};

#[test]
fn defaults_are_the_seed_numbers() {
    let c = Config::default();
    assert_eq!(c.prompt.default_mode, PromptMode::Full);
    assert_eq!(c.prompt.max_total_chars, 80_000);
    assert!(c.caching.enabled);
    assert_eq!(c.caching.ttl_secs, 30);
    assert_eq!(c.budget.total, 16_384);
    assert_eq!(
        (
            c.budget.shared,
            c.budget.long_term_memory,
            c.budget.delegated,
            c.budget.working_memory
        ),
        (16_000, 2_000, 4_000, 10_000)
    );
    assert_eq!((c.memory.max_lines, c.memory.max_chars), (200, 20_000));
    assert!(c.is_protected(1500));
    assert!(!c.is_protected(1700));
    // An empty file is the defaults.
    assert_eq!(Config::from_toml_str("").unwrap(), c);
    c.validate().unwrap();
}

#[test]
fn a_full_file_parses() {
    let text = r#"
[prompt]
default_mode = "compact"
max_total_chars = 50000
protected_priorities = [1500]

[caching]
enabled = false
ttl_secs = 10

[budget]
total = 32768
response_reserve = 4096
system = 8000
memory = 3000
skills = 2000
history = 12000

[memory]
file = ".strata/MEMORY.md"
max_lines = 100
max_chars = 9000

[workspace]
dir = "/srv/ws"
custom_instructions = "Be brief."
"#;
    let c = Config::from_toml_str(text).unwrap();
    assert_eq!(c.prompt.default_mode, PromptMode::Compact);
    assert_eq!(c.prompt.protected_priorities, [1500]);
    assert!(c.section_cache(Arc::new(ManualClock::new(0))).is_none());
    assert_eq!(
        c.workspace,
        WorkspaceConfig {
            dir: Some(PathBuf::from("/srv/ws")),
            custom_instructions: "Be brief.".into(),
            fact_scopes: Vec::new(),
        }
    );
    let b = c.to_budget();
    b.validate().unwrap();
    assert_eq!(b.total_tokens, 32_768);
    assert_eq!(b.prompt_tokens(), 28_672);
    assert_eq!(b.max_total_chars, Some(50_000));
    assert_eq!(b.layers.get(RuntimeLayer::Shared), Some(8_000));
    assert_eq!(b.layers.get(RuntimeLayer::Delegated), Some(2_000));
    assert_eq!(b.layers.get(RuntimeLayer::WorkingMemory), Some(12_000));
    assert_eq!(b.layers.get(RuntimeLayer::LongTermMemory), Some(3_000));
    assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
}

/// `[budget]` names its per-layer keys after the layers (`shared`, `delegated`,
/// `working_memory`, `long_term_memory`) like everything else; the older names still read the
/// same numbers, and giving a layer under both names is refused.
#[test]
fn budget_keys_are_the_layer_names_and_the_old_names_still_read() {
    let new = Config::from_toml_str(
        "[budget]\nshared = 8000\ndelegated = 2000\nworking_memory = 12000\nlong_term_memory = 3000\n",
    )
    .unwrap();
    let old = Config::from_toml_str(
        "[budget]\nsystem = 8000\nskills = 2000\nhistory = 12000\nmemory = 3000\n",
    )
    .unwrap();
    assert_eq!(new, old);
    let b = new.to_budget();
    assert_eq!(b.layers.get(RuntimeLayer::Shared), Some(8_000));
    assert_eq!(b.layers.get(RuntimeLayer::LongTermMemory), Some(3_000));
    // Written back under the layer names.
    let text = new.to_toml_string();
    assert!(text.contains("working_memory = 12000"), "{text}");
    assert!(!text.contains("history"), "{text}");
    assert!(Config::from_toml_str("[budget]\nshared = 1\nsystem = 2\n").is_err());
}

#[test]
fn the_cache_follows_the_configuration() {
    let c = Config::from_toml_str("[caching]\nttl_secs = 7").unwrap();
    let cache = c.section_cache(Arc::new(ManualClock::new(0))).unwrap();
    assert_eq!(cache.default_ttl(), std::time::Duration::from_secs(7));
    let r = strata_registry::Registry::from_config(&c, Arc::new(ManualClock::new(0)));
    assert_eq!(
        r.cache().unwrap().default_ttl(),
        std::time::Duration::from_secs(7)
    );
    let off = Config::from_toml_str("[caching]\nenabled = false").unwrap();
    assert!(
        strata_registry::Registry::from_config(&off, Arc::new(ManualClock::new(0)))
            .cache()
            .is_none()
    );
}

fn syntax(text: &str) -> (Option<String>, Option<Location>, String) {
    match Config::from_toml_str(text).unwrap_err() {
        e @ ConfigError::Syntax { .. } => (e.key().map(str::to_owned), e.location(), e.to_string()),
        other => panic!("expected a syntax error, got {other}"),
    }
}

#[test]
fn unknown_keys_are_named_with_their_place() {
    let (key, loc, msg) = syntax("[prompt]\ndefault_mode = \"full\"\nmax_chars = 5\n");
    assert_eq!(key.as_deref(), Some("prompt.max_chars"));
    assert_eq!(loc, Some(Location { line: 3, column: 1 }));
    assert!(
        msg.contains("max_chars") && msg.contains("line 3, column 1"),
        "{msg}"
    );

    let (key, loc, msg) = syntax("[thinker]\ndefault_mode = \"full\"\n");
    assert_eq!(key.as_deref(), Some("thinker"));
    assert_eq!(loc.map(|l| l.line), Some(1));
    assert!(msg.contains("thinker"), "{msg}");
}

#[test]
fn wrong_types_and_names_are_named_with_their_place() {
    let (key, loc, msg) = syntax("[budget]\n\ntotal = \"big\"\n");
    assert_eq!(key.as_deref(), Some("budget.total"));
    assert_eq!(loc.map(|l| l.line), Some(3));
    assert!(msg.contains("budget.total"), "{msg}");

    let (key, _, msg) = syntax("[prompt]\ndefault_mode = \"fast\"\n");
    assert_eq!(key.as_deref(), Some("prompt.default_mode"));
    assert!(msg.contains("full compact minimal scheduled"), "{msg}");

    let (_, loc, _) = syntax("[prompt\n");
    assert_eq!(loc.map(|l| l.line), Some(1));
}

#[test]
fn out_of_range_values_are_named_with_their_place() {
    let e = Config::from_toml_str("[budget]\ntotal = 100\nresponse_reserve = 100\n").unwrap_err();
    assert!(matches!(e, ConfigError::Value { .. }), "{e}");
    assert_eq!(e.key(), Some("budget.response_reserve"));
    assert_eq!(e.location(), Some(Location { line: 3, column: 1 }));
    let e = Config::from_toml_str("[caching]\n  ttl_secs = 0\n").unwrap_err();
    assert_eq!(e.key(), Some("caching.ttl_secs"));
    assert_eq!(e.location(), Some(Location { line: 2, column: 3 }));
    assert!(e.to_string().contains("at least 1 second"), "{e}");
    // Disabled caching does not need a TTL.
    Config::from_toml_str("[caching]\nenabled = false\nttl_secs = 0\n").unwrap();
    let e = Config::from_toml_str("[memory]\nmax_lines = 0").unwrap_err();
    assert_eq!(e.key(), Some("memory.max_lines"));
}

#[test]
fn load_reports_a_missing_file() {
    let e = Config::load("/nonexistent/strata.toml").unwrap_err();
    assert!(matches!(e, ConfigError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/strata.toml"));
}

const TABLES: [(&str, &str); 5] = [
    ("prompt", "max_total_chars = 10"),
    ("caching", "enabled = true"),
    ("budget", "total = 100"),
    ("memory", "max_lines = 3"),
    ("workspace", "custom_instructions = \"x\""),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// An unknown key in any table is refused, and the error names it and its line.
    #[test]
    fn any_unknown_key_is_named(table in 0usize..5, key in "[a-z][a-z_]{0,10}", blank in 0usize..3) {
        let (name, known) = TABLES[table];
        let known_key = known.split(' ').next().unwrap();
        prop_assume!(key != known_key);
        let fields = ["default_mode", "max_total_chars", "protected_priorities", "enabled",
            "ttl_secs", "total", "response_reserve", "system", "memory", "skills", "history",
            "shared", "delegated", "working_memory", "long_term_memory",
            "file", "max_lines", "max_chars", "dir", "custom_instructions"];
        prop_assume!(!fields.contains(&key.as_str()));
        let text = format!("[{name}]\n{known}\n{}{key} = 1\n", "\n".repeat(blank));
        match Config::from_toml_str(&text) {
            Err(e) => {
                let want = format!("{name}.{key}");
                prop_assert_eq!(e.key(), Some(want.as_str()));
                prop_assert_eq!(e.location().map(|l| l.line), Some(3 + blank));
            }
            Ok(_) => prop_assert!(false, "unknown key accepted"),
        }
    }

    /// Any valid configuration survives writing and reading back.
    #[test]
    fn round_trip(total in 1u32..1_000_000, reserve_pct in 0u32..100, chars in 1usize..1_000_000,
                  ttl in 1u64..3600, enabled in any::<bool>(), mode in 0usize..4,
                  prio in proptest::collection::vec(0u32..3000, 0..5), text in "\\PC{0,30}") {
        let mut c = Config::default();
        c.budget.total = total;
        c.budget.response_reserve = total / 100 * reserve_pct / 100;
        c.prompt.max_total_chars = chars;
        c.prompt.default_mode = PromptMode::ALL[mode];
        c.prompt.protected_priorities = prio;
        c.caching = strata_registry::config::CachingConfig { enabled, ttl_secs: ttl };
        c.workspace.custom_instructions = text;
        prop_assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
    }
}

/// Verifies ADR-0046: `[memory.embedder]` names the hashing embedder by default or an
/// OpenAI-compatible server, with the key's environment variable by name.
#[test]
fn the_embedder_table_reads_both_kinds() {
    use strata_registry::EmbedderConfig;
    assert_eq!(
        Config::default().memory.embedder,
        EmbedderConfig::Hashing { dims: None }
    );
    let c = Config::from_toml_str("[memory.embedder]\nkind = \"hashing\"\ndims = 64\n").unwrap();
    assert_eq!(
        c.memory.embedder,
        EmbedderConfig::Hashing { dims: Some(64) }
    );
    let text = "[memory]\nmax_lines = 10\n\n[memory.embedder]\nkind = \"openai\"\nurl = \"http://127.0.0.1:8080\"\nmodel = \"concepts\"\ndimensions = 8\napi_key_env = \"EMBED_KEY\"\n";
    let c = Config::from_toml_str(text).unwrap();
    assert_eq!(
        c.memory.embedder,
        EmbedderConfig::OpenAi {
            url: "http://127.0.0.1:8080".into(),
            model: "concepts".into(),
            dimensions: 8,
            api_key_env: Some("EMBED_KEY".into()),
            request_dimensions: false,
        }
    );
    assert_eq!(c.memory.max_lines, 10);
    // What it writes reads back the same.
    assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
}

/// Verifies ADR-0046: the key itself, unknown keys, an unknown kind and values out of range
/// are refused, each error naming the key.
#[test]
fn the_embedder_table_is_strict() {
    let openai = "[memory.embedder]\nkind = \"openai\"\nurl = \"http://h:1\"\nmodel = \"m\"\ndimensions = 8\n";
    // The key never goes in the file.
    let (key, loc, msg) = syntax(&format!("{openai}api_key = \"sk-123\"\n"));
    assert_eq!(key.as_deref(), Some("memory.embedder"), "{msg}");
    assert!(loc.is_some() && msg.contains("api_key"), "{msg}");
    let (_, _, msg) = syntax("[memory.embedder]\nkind = \"hashing\"\nmodel = \"m\"\n");
    assert!(msg.contains("model"), "{msg}");
    let (_, _, msg) = syntax("[memory.embedder]\nkind = \"word2vec\"\n");
    assert!(msg.contains("word2vec"), "{msg}");
    let (_, _, msg) = syntax("[memory.embedder]\nkind = \"openai\"\nurl = \"http://h:1\"\n");
    assert!(msg.contains("model"), "{msg}");
    for (text, key) in [
        (
            format!("{openai}api_key_env = \"sk-live key\"\n"),
            "memory.embedder.api_key_env",
        ),
        (
            openai.replace("dimensions = 8", "dimensions = 0"),
            "memory.embedder.dimensions",
        ),
        (openai.replace("http://h:1", "h:1"), "memory.embedder.url"),
        (openai.replace("\"m\"", "\" \""), "memory.embedder.model"),
        (
            "[memory.embedder]\nkind = \"hashing\"\ndims = 0\n".to_owned(),
            "memory.embedder.dims",
        ),
    ] {
        let e = Config::from_toml_str(&text).unwrap_err();
        assert!(matches!(e, ConfigError::Value { .. }), "{e}");
        assert_eq!(e.key(), Some(key), "{e}");
        assert!(e.location().is_some(), "{e}");
    }
    // The error quoting a bad variable name does not print more than its head.
    let long = format!("{openai}api_key_env = \"{}\"\n", "k-".repeat(100));
    let e = Config::from_toml_str(&long).unwrap_err();
    assert!(!e.to_string().contains(&"k-".repeat(30)), "{e}");
}

/// Sticky fact prefixes and configured prompts are read, written back the same, and refused
/// with the key named when they would make every fact sticky or claim an identity kind.
#[test]
fn sticky_facts_and_prompts_are_checked() {
    let text = "[memory]\nsticky_fact_prefixes = [\"user.\"]\nsticky_facts_max_chars = 500\n\n\
                [workspace]\nfact_scopes = [\"workspace:billing\"]\n\n\
                [[prompts]]\nid = \"beat\"\nkind = \"heartbeat\"\ntext = \"Answer HEARTBEAT_OK.\"\n";
    let c = Config::from_toml_str(text).unwrap();
    assert_eq!(c.memory.sticky_fact_prefixes, ["user."]);
    assert_eq!(c.memory.sticky_facts_max_chars, 500);
    assert_eq!(c.workspace.fact_scopes, ["workspace:billing"]);
    assert_eq!(c.prompts.len(), 1);
    assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
    for (bad, key) in [
        (
            "[memory]\nsticky_fact_prefixes = [\" \"]\n",
            "memory.sticky_fact_prefixes",
        ),
        (
            "[memory]\nsticky_fact_prefixes = [\"user.\"]\nsticky_facts_max_chars = 0\n",
            "memory.sticky_facts_max_chars",
        ),
        (
            "[[prompts]]\nid = \"x\"\nkind = \"safety\"\ntext = \"Obey.\"\n",
            "prompts.kind",
        ),
        (
            "[[prompts]]\nid = \"x\"\nkind = \"heartbeat\"\ntext = \"a\"\n\n[[prompts]]\nid = \"x\"\nkind = \"heartbeat\"\ntext = \"b\"\n",
            "prompts.id",
        ),
    ] {
        let e = Config::from_toml_str(bad).unwrap_err().to_string();
        assert!(e.contains(key), "{bad:?}: {e}");
    }
}
