//! Fuzz target: operational-mode templates rendered with untrusted values (ADR-0011). The
//! template text comes only from the signed definition; values from layers 3-6 are data: any
//! value, even one holding template syntax, appears in the output literally and is never
//! evaluated.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use strata_agentdef::{sign_definition, KeyPair, Loader, RollbackGuard, TrustStore, VerifiedAgent};
use strata_core::{OperationalMode, Tier};
use strata_registry::templates::{render, SignedTemplate, TemplateValues};

fn agent() -> &'static VerifiedAgent {
    static A: OnceLock<VerifiedAgent> = OnceLock::new();
    A.get_or_init(|| {
        let key = KeyPair::from_seed(&[0x7e; 32]);
        let def = "id = \"fuzz\"\nname = \"Fuzz\"\nversion = 1\n[core]\nidentity = \"You are Fuzz.\"\n[templates.assistant]\ntier3 = \"Task: [{{ task }}] for {{ user }}.\"\n";
        let env = sign_definition(def, None, &[&key]).expect("sign");
        let trust = TrustStore::from_toml(&TrustStore::toml_for(&[("fuzz", &key.public())])).expect("trust");
        Loader::new(&trust, &RollbackGuard::in_memory()).load_bytes(env.to_json().as_bytes(), None).expect("verify")
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut mid = text.len() / 2;
    while !text.is_char_boundary(mid) {
        mid -= 1;
    }
    let (task, user) = text.split_at(mid);
    let template = SignedTemplate::resolve(agent(), OperationalMode::Assistant, Tier::T3).expect("template");
    let Ok(values) = TemplateValues::new().with("task", task).and_then(|v| v.with("user", user)) else { return };
    let out = render(&template, &values).expect("rendering with string values never fails");
    assert_eq!(out, format!("Task: [{task}] for {user}."), "values must appear literally");
});
