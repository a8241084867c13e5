//! Registry: registration, lookups, MCP clearing and change events.
#![allow(
    clippy::unwrap_used,
    reason = "helpers outside #[test] functions fail the test on purpose"
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{arc, Behaviour, TestContributor};
use strata_core::{OperationalMode, RuntimeLayer, SourceKind};
use strata_registry::{Registry, RegistryError, RegistryEvent, SectionCache, TAG_TOOLS};

fn tagged(id: &str, tags: &[&str], source: SourceKind) -> Arc<TestContributor> {
    let tags: Vec<Arc<str>> = tags.iter().map(|t| Arc::from(*t)).collect();
    arc(
        TestContributor::new(id, RuntimeLayer::Shared, Behaviour::Sections(vec!["a"])).with_meta(
            |m| {
                m.tags = tags;
                m.source = source;
            },
        ),
    )
}

/// Verifies ADR-0011: ids are unique and a duplicate is a clear error.
#[test]
fn duplicate_ids_are_refused_with_a_clear_error() {
    let r = Registry::new();
    r.register(tagged("env", &[], SourceKind::Static)).unwrap();
    let e = r
        .register(tagged("env", &[], SourceKind::Config))
        .unwrap_err();
    assert_eq!(e, RegistryError::Duplicate { id: "env".into() });
    assert!(e.to_string().contains("already registered"), "{e}");
    assert!(e.to_string().contains("replace"), "{e}");
    assert_eq!(r.len(), 1);
    assert_eq!(r.get("env").unwrap().meta().source, SourceKind::Static);
}

#[test]
fn invalid_ids_are_refused() {
    let r = Registry::new();
    for bad in ["", "has space", "<x>"] {
        let e = r
            .register(tagged(bad, &[], SourceKind::Static))
            .unwrap_err();
        assert!(matches!(e, RegistryError::InvalidId { .. }), "{bad:?}: {e}");
    }
}

#[test]
fn get_by_tag_by_source_and_unregister() {
    let r = Registry::new();
    r.register(tagged("b.tools", &[TAG_TOOLS], SourceKind::Static))
        .unwrap();
    r.register(tagged("a.tools", &[TAG_TOOLS, "x"], SourceKind::Config))
        .unwrap();
    r.register(tagged(
        "mcp:gh/flow",
        &["skill"],
        SourceKind::Mcp("gh".into()),
    ))
    .unwrap();
    let ids = |v: Vec<strata_registry::Registered>| {
        v.iter().map(|e| e.id().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(ids(r.by_tag(TAG_TOOLS)), ["a.tools", "b.tools"]);
    assert_eq!(ids(r.by_tag("x")), ["a.tools"]);
    assert_eq!(ids(r.by_source(&SourceKind::Config)), ["a.tools"]);
    assert_eq!(
        ids(r.by_source(&SourceKind::Mcp("gh".into()))),
        ["mcp:gh/flow"]
    );
    assert!(r.by_source(&SourceKind::Mcp("other".into())).is_empty());
    assert_eq!(ids(r.from_mcp()), ["mcp:gh/flow"]);
    assert_eq!(r.get("a.tools").unwrap().layer(), RuntimeLayer::Shared);

    let removed = r.unregister("a.tools").unwrap();
    assert_eq!(removed.id(), "a.tools");
    assert!(!r.contains("a.tools"));
    assert!(matches!(
        r.unregister("a.tools"),
        Err(RegistryError::NotFound { .. })
    ));
}

/// Verifies ADR-0011: a disconnecting MCP server takes exactly its own contributors with it.
#[test]
fn clearing_an_mcp_server_removes_only_its_contributors() {
    let r = Registry::new();
    r.register(tagged("mcp:gh/a", &[], SourceKind::Mcp("gh".into())))
        .unwrap();
    r.register(tagged("mcp:gh/b", &[], SourceKind::Mcp("gh".into())))
        .unwrap();
    r.register(tagged("mcp:jira/a", &[], SourceKind::Mcp("jira".into())))
        .unwrap();
    r.register(tagged("env", &[], SourceKind::Static)).unwrap();
    let events = r.subscribe();
    let removed = r.clear_mcp_server("gh");
    assert_eq!(
        removed.iter().map(|s| &**s).collect::<Vec<_>>(),
        ["mcp:gh/a", "mcp:gh/b"]
    );
    assert_eq!(
        r.ids().iter().map(|s| &**s).collect::<Vec<_>>(),
        ["env", "mcp:jira/a"]
    );
    assert_eq!(
        events.try_recv().unwrap(),
        RegistryEvent::McpServerCleared {
            server: "gh".into(),
            removed
        }
    );
    // The set of active servers changed with it.
    assert_eq!(
        events.try_recv().unwrap(),
        RegistryEvent::ActiveMcpUpdated {
            servers: vec!["jira".into()]
        }
    );
}

/// Verifies ADR-0011: the events the Prompts System names are sent: active MCP servers when a
/// server's first contributor arrives or its last one leaves (and only then), active hooks, and
/// a session's system prompt changing.
#[test]
fn mcp_hooks_and_system_prompt_events() {
    let r = Registry::new();
    let rx = r.subscribe();
    r.register(tagged("mcp:gh/a", &[], SourceKind::Mcp("gh".into())))
        .unwrap();
    r.register(tagged("mcp:gh/b", &[], SourceKind::Mcp("gh".into())))
        .unwrap();
    r.unregister("mcp:gh/a").unwrap();
    r.unregister("mcp:gh/b").unwrap();
    r.hooks_changed(["pre-tool", "audit", "audit"]);
    let digest = strata_core::ContentHash::of("system");
    r.system_prompt_updated("s1", digest);
    let active: Vec<RegistryEvent> = rx
        .try_iter()
        .filter(|e| {
            matches!(
                e,
                RegistryEvent::ActiveMcpUpdated { .. }
                    | RegistryEvent::ActiveHooksUpdated { .. }
                    | RegistryEvent::SystemPromptUpdated { .. }
            )
        })
        .collect();
    assert_eq!(
        active,
        vec![
            RegistryEvent::ActiveMcpUpdated {
                servers: vec!["gh".into()]
            },
            RegistryEvent::ActiveMcpUpdated { servers: vec![] },
            RegistryEvent::ActiveHooksUpdated {
                hooks: vec!["audit".into(), "pre-tool".into()]
            },
            RegistryEvent::SystemPromptUpdated {
                session: "s1".into(),
                digest
            },
        ]
    );
}

#[test]
fn every_change_is_sent_to_subscribers() {
    let r = Registry::with_cache(Arc::new(SectionCache::default()));
    let rx = r.subscribe();
    let dropped = r.subscribe();
    drop(dropped);
    r.register(tagged("env", &[], SourceKind::Static)).unwrap();
    r.replace(tagged("env", &["new"], SourceKind::Static))
        .unwrap();
    assert!(r.get("env").unwrap().has_tag("new"));
    r.mode_changed(OperationalMode::Debugger);
    r.tools_changed();
    r.skills_changed();
    r.session_reset("s1");
    r.unregister("env").unwrap();
    let got: Vec<RegistryEvent> = rx.try_iter().collect();
    assert_eq!(
        got,
        vec![
            RegistryEvent::ContributorAdded {
                id: "env".into(),
                layer: RuntimeLayer::Shared,
                source: SourceKind::Static
            },
            RegistryEvent::PromptUpdated { id: "env".into() },
            RegistryEvent::ModeChanged {
                mode: OperationalMode::Debugger
            },
            RegistryEvent::ToolsChanged,
            RegistryEvent::SkillsChanged,
            RegistryEvent::SessionReset {
                session: "s1".into()
            },
            RegistryEvent::ContributorRemoved { id: "env".into() },
        ]
    );
    assert!(matches!(
        r.replace(tagged("nope", &[], SourceKind::Static)),
        Err(RegistryError::NotFound { .. })
    ));
}

/// The registry is shared across threads: concurrent registrations of distinct ids all land,
/// and concurrent registrations of one id land exactly once.
#[test]
fn concurrent_registration_is_safe() {
    let r = Arc::new(Registry::new());
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut ok = 0;
                for j in 0..25 {
                    r.register(tagged(&format!("c{i}.{j}"), &[], SourceKind::Static))
                        .unwrap();
                    if r.register(tagged("shared", &[], SourceKind::Static))
                        .is_ok()
                    {
                        ok += 1;
                    }
                    if j % 5 == 0 {
                        r.gather(&common::ctx()).unwrap();
                    }
                }
                ok
            })
        })
        .collect();
    let winners: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(winners, 1);
    assert_eq!(r.len(), 8 * 25 + 1);
    assert!(r.wait_for_refreshes(Duration::from_secs(1)));
}
