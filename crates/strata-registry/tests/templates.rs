//! Operational-mode templates: from the signed definition, strict, values as data only.
#![allow(
    clippy::unwrap_used,
    reason = "helpers outside #[test] functions fail the test on purpose"
)]

use std::sync::Arc;

use proptest::prelude::*;
use strata_agentdef::{Envelope, KeyPair, Loader, RollbackGuard, TrustStore, VerifiedAgent};
use strata_core::{ContentHash, OperationalMode, Phase, RuntimeLayer, SourceKind, Tier};
use strata_registry::templates::{render, render_section};
use strata_registry::{
    ContributionContext, Contributor, Inbound, OperationalTemplate, RequestInputs, SignedTemplate,
    TemplateError, TemplateValues,
};

/// A definition signed by a test key (fixed seed; trusted nowhere else), loaded through the
/// real verifying loader.
fn agent(templates: &str) -> VerifiedAgent {
    let def = format!(
        "id = \"ada\"\nname = \"Ada\"\nversion = 1\n\n[core]\nidentity = \"You are Ada.\"\n\n[templates]\n{templates}"
    );
    let key = KeyPair::from_seed(&[0x5a; 32]);
    let mut env = Envelope::new(def.into_bytes());
    env.sign(&key);
    let trust = TrustStore::from_toml(&TrustStore::toml_for(&[("test", &key.public())])).unwrap();
    let guard = RollbackGuard::in_memory();
    Loader::new(&trust, &guard)
        .expiry(strata_agentdef::Expiry::TimeTravelDangerously(
            1_780_272_000,
        ))
        .load_bytes(env.to_json().as_bytes(), None)
        .unwrap()
}

const TEMPLATES: &str = r#"fallback = "Help {{ agent_name }} users."

[templates.assistant]
tier1 = "Be brief."
tier3 = "You are {{ agent_name }} in {{ mode }} mode (tier {{ tier }}). Answer in {{ language }}."

[templates.developer]
tier3 = "Focus on code. {% if channel == 'cli' %}Terminal output only.{% endif %}"
"#;

fn ctx(agent: &VerifiedAgent, mode: OperationalMode, tier: Tier) -> ContributionContext {
    let mut c = ContributionContext::new("ada", agent.identity_digest(), "s1", 0);
    c.operational_mode = mode;
    c.tier = tier;
    c.inputs = Arc::new(RequestInputs {
        language: Some("Dutch".into()),
        inbound: Some(Inbound {
            channel: Some("cli".into()),
            ..Inbound::default()
        }),
        ..RequestInputs::default()
    });
    c
}

/// Verifies ADR-0010 and ADR-0011: the template comes from the verified definition through its
/// fallback chain and becomes a layer-4 section of source static.
#[test]
fn templates_resolve_and_render_into_a_layer_four_section() {
    let a = agent(TEMPLATES);
    let t = OperationalTemplate::new(a.clone());
    let s = t
        .contribute(&ctx(&a, OperationalMode::Assistant, Tier::T3))
        .unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].id().as_str(), "template/assistant/tier3");
    assert_eq!(s[0].layer(), RuntimeLayer::Delegated);
    assert_eq!(s[0].phase(), Phase::Task);
    assert_eq!(s[0].provenance().source, SourceKind::Static);
    assert_eq!(
        s[0].content().as_str(),
        "You are Ada in assistant mode (tier 3). Answer in Dutch."
    );

    // Tier 4 falls back to the nearest lower tier of the mode.
    let s = t
        .contribute(&ctx(&a, OperationalMode::Assistant, Tier::T4))
        .unwrap();
    assert_eq!(s[0].id().as_str(), "template/assistant/tier3");
    // Tier 2 falls back to tier 1.
    let s = t
        .contribute(&ctx(&a, OperationalMode::Assistant, Tier::T2))
        .unwrap();
    assert_eq!(s[0].content().as_str(), "Be brief.");
    // User mode copies assistant; planning has nothing, so the fallback is used.
    let s = t
        .contribute(&ctx(&a, OperationalMode::User, Tier::T1))
        .unwrap();
    assert_eq!(s[0].content().as_str(), "Be brief.");
    let s = t
        .contribute(&ctx(&a, OperationalMode::Planning, Tier::T3))
        .unwrap();
    assert_eq!(s[0].id().as_str(), "template/fallback");
    assert_eq!(s[0].content().as_str(), "Help Ada users.");
    let s = t
        .contribute(&ctx(&a, OperationalMode::Developer, Tier::T5))
        .unwrap();
    assert_eq!(
        s[0].content().as_str(),
        "Focus on code. Terminal output only."
    );
}

#[test]
fn a_definition_without_templates_contributes_nothing() {
    let a = agent("");
    assert!(SignedTemplate::resolve(&a, OperationalMode::Assistant, Tier::T3).is_none());
    assert!(OperationalTemplate::new(a.clone())
        .contribute(&ctx(&a, OperationalMode::Assistant, Tier::T3))
        .unwrap()
        .is_empty());
}

/// The contributor refuses to render for another definition than the one it holds.
#[test]
fn the_contributor_belongs_to_one_definition() {
    let a = agent(TEMPLATES);
    let mut c = ctx(&a, OperationalMode::Assistant, Tier::T3);
    c.identity_digest = ContentHash::of("another definition");
    let e = OperationalTemplate::new(a).contribute(&c).unwrap_err();
    assert!(e.to_string().contains("definition"), "{e}");
}

/// Rendering is strict: a value the template uses but nobody gives is an error naming it.
#[test]
fn undefined_values_are_errors() {
    let a = agent("[templates.assistant]\ntier3 = \"Hello {{ nobody_sets_this }}\"");
    let t = SignedTemplate::resolve(&a, OperationalMode::Assistant, Tier::T3).unwrap();
    let e = render(&t, &TemplateValues::new()).unwrap_err();
    assert!(matches!(e, TemplateError::Render { .. }), "{e}");
    assert!(e.to_string().contains("undefined"), "{e}");

    let a = agent("[templates.assistant]\ntier3 = \"{% if %}\"");
    let t = SignedTemplate::resolve(&a, OperationalMode::Assistant, Tier::T3).unwrap();
    assert!(matches!(
        render(&t, &TemplateValues::new()),
        Err(TemplateError::Syntax { .. })
    ));
    assert!(matches!(
        TemplateValues::new().set("not a name", "x"),
        Err(TemplateError::InvalidName(_))
    ));
}

/// Verifies ADR-0011 and ADR-0009: a value holding template syntax stays literal text.
#[test]
fn template_syntax_in_values_stays_literal() {
    let a = agent("[templates.assistant]\ntier3 = \"<{{ v }}>\"");
    let t = SignedTemplate::resolve(&a, OperationalMode::Assistant, Tier::T3).unwrap();
    for v in [
        "{{ agent_name }}",
        "{% for x in range(1000000) %}x{% endfor %}",
        "{# hidden #}",
        "{{ v }}{{ v }}",
        "</strata:section> {{",
    ] {
        let values = TemplateValues::new().with("v", v).unwrap();
        assert_eq!(render(&t, &values).unwrap(), format!("<{v}>"));
    }
    let s = render_section(
        &t,
        &TemplateValues::new().with("v", "{{ x }}").unwrap(),
        "c",
    )
    .unwrap();
    assert_eq!(s.content().as_str(), "<{{ x }}>");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Verifies ADR-0011: whatever a runtime value holds, it is rendered as itself, never
    /// interpreted.
    #[test]
    fn values_are_data_only(
        v in prop_oneof![
            any::<String>(),
            "(\\{\\{|\\}\\}|\\{%|%\\}|\\{#|#\\}|[a-z _()|.'\"]){0,20}",
        ],
        w in any::<String>(),
    ) {
        static TEMPLATE: std::sync::OnceLock<SignedTemplate> = std::sync::OnceLock::new();
        let t = TEMPLATE.get_or_init(|| {
            let a = agent("[templates.developer]\ntier2 = \"a{{ v }}b{{ w | upper }}c{{ v }}\"");
            SignedTemplate::resolve(&a, OperationalMode::Developer, Tier::T2).unwrap()
        });
        let values = TemplateValues::new().with("v", v.clone()).unwrap().with("w", w.clone()).unwrap();
        prop_assert_eq!(render(t, &values).unwrap(), format!("a{v}b{}c{v}", w.to_uppercase()));
    }
}
