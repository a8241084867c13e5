//! The checked-in OpenAPI document (`docs/openapi.json`, which the clients are generated from
//! and tested against) is the one the code generates. Verifies ADR-0022.
//!
//! To refresh it: `STRATA_WRITE_OPENAPI=1 cargo test -p strata-serve --test openapi`.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use std::path::Path;

#[test]
fn the_checked_in_openapi_document_is_fresh() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let generated = strata_serve::openapi_document();
    if std::env::var_os("STRATA_WRITE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/openapi.json is stale: run `STRATA_WRITE_OPENAPI=1 cargo test -p strata-serve --test openapi` and commit it"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    // Every operation has an id the clients can name, and every protected one declares the
    // bearer scheme.
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            assert!(op["operationId"].is_string(), "{method} {path}");
            let public = ["/healthz", "/readyz", "/openapi.json"].contains(&path.as_str());
            assert_eq!(op["security"].is_array(), !public, "{method} {path}");
        }
    }
}
