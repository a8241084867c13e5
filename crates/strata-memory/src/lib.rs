//! `strata-memory`: working memory (layer 5), long-term memory (layer 6) and shared context
//! (layer 3) stores: in-memory, durable file log, SQLite (the embedded default), PostgreSQL.
//!
//! Not built yet.
#![forbid(unsafe_code)]
