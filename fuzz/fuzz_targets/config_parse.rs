//! Fuzz target: the `strata.toml` parser (ADR-0011). Never panics; an accepted configuration
//! yields a valid budget.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match strata_registry::Config::from_toml_str(text) {
        Ok(cfg) => {
            cfg.to_budget().validate().expect("an accepted configuration gives a valid budget");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
