//! `strata-agentdef`: signed agent definitions, the only door to layers 1-2 (ADR-0004, ADR-0010).
//!
//! Not built yet: this crate will hold the definition format, the DSSE envelope over ed25519,
//! the trust store, the rollback guard and the loader that produces `VerifiedAgent`.
#![forbid(unsafe_code)]
