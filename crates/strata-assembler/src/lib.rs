//! `strata-assembler`: the Context Assembler, the single enforcement point for priority,
//! immutability and budgets (ADR-0006).
//!
//! Not built yet.
#![forbid(unsafe_code)]
