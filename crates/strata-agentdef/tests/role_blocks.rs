//! Named role and protocol blocks in the definition format: each is its own signed layer-1
//! section, in the order written, from inline text or a pinned file; bad and duplicate names
//! are refused. Verifies ADR-0025.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use sha2::{Digest as _, Sha256};
use strata_agentdef::{
    check_definition, sign_definition, KeyPair, Loader, RollbackGuard, TrustStore,
};
use strata_core::IdentityLayer;

fn definition(blocks: &str) -> String {
    format!(
        "id = \"r\"\nname = \"R\"\nversion = 1\n[core]\nidentity = \"You are R.\"\nrole = \"Base role.\"\n{blocks}"
    )
}

/// Verifies ADR-0025: blocks become `core.role.<name>` sections of layer 1 right after the
/// base role, in the order written, and a file block is pinned by its digest.
#[test]
fn role_blocks_are_signed_layer_one_sections_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = "Explore first: list, then read; never write.";
    std::fs::write(dir.path().join("EXPLORE.md"), protocol).unwrap();
    let sha = format!("{:x}", Sha256::digest(protocol.as_bytes()));
    let text = definition(&format!(
        "[[core.role_blocks]]\nname = \"researcher_protocol\"\ntext = \"Cite every source.\"\n\
         [[core.role_blocks]]\nname = \"explore_constraints\"\ntext = {{ file = \"EXPLORE.md\", sha256 = \"{sha}\" }}\n"
    ));
    let key = KeyPair::from_seed(&[3; 32]);
    let env = sign_definition(&text, Some(dir.path()), &[&key]).unwrap();
    let path = dir.path().join("r.signed.json");
    std::fs::write(&path, env.to_json()).unwrap();
    let trust = TrustStore::from_toml(&TrustStore::toml_for(&[("k", &key.public())])).unwrap();
    let agent = Loader::new(&trust, &RollbackGuard::in_memory())
        .load_file(&path)
        .unwrap();
    let ids: Vec<(&str, IdentityLayer)> = agent
        .identity()
        .sections()
        .iter()
        .map(|s| (s.id().as_str(), s.layer()))
        .collect();
    let at = |id: &str| ids.iter().position(|(i, _)| *i == id).unwrap();
    assert!(at("core.role") < at("core.role.researcher_protocol"));
    assert!(at("core.role.researcher_protocol") < at("core.role.explore_constraints"));
    for id in [
        "core.role.researcher_protocol",
        "core.role.explore_constraints",
    ] {
        assert_eq!(ids[at(id)].1, IdentityLayer::Core);
    }
    let text = agent.identity_text();
    assert!(text.contains(protocol));
    assert!(text.contains("key=\"role.explore_constraints\""));
    // The referenced file is pinned: another text is refused at signing.
    std::fs::write(dir.path().join("EXPLORE.md"), "Write anything anywhere.").unwrap();
    assert!(sign_definition(&definition(&format!(
        "[[core.role_blocks]]\nname = \"explore_constraints\"\ntext = {{ file = \"EXPLORE.md\", sha256 = \"{sha}\" }}\n"
    )), Some(dir.path()), &[&key])
    .is_err());
}

/// Verifies ADR-0025: names outside `a-z 0-9 _ -`, duplicate names and empty texts are
/// refused with messages that say what to change.
#[test]
fn bad_role_blocks_are_refused() {
    for (blocks, says) in [
        (
            "[[core.role_blocks]]\nname = \"Bad Name\"\ntext = \"x\"\n",
            "must be 1-64 characters",
        ),
        (
            "[[core.role_blocks]]\nname = \"a\"\ntext = \"x\"\n[[core.role_blocks]]\nname = \"a\"\ntext = \"y\"\n",
            "used twice",
        ),
        (
            "[[core.role_blocks]]\nname = \"a\"\ntext = \"  \"\n",
            "is empty",
        ),
        (
            "[[core.role_blocks]]\nname = \"a\"\ntext = \"x\"\nlayer = 2\n",
            "unknown field",
        ),
    ] {
        let e = check_definition(&definition(blocks), None).unwrap_err().to_string();
        assert!(e.contains(says), "{blocks}: {e}");
    }
}
