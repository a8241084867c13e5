//! Fuzz target: the agent-definition parser (ADR-0010). Never panics on any text; whatever it
//! accepts renders into a parseable identity.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(def) = strata_agentdef::check_definition(text, None) {
        assert!(!def.id.is_empty());
    }
});
