//! The `strata` command line. Glue over the libraries; no logic of its own.
#![forbid(unsafe_code)]

fn main() {}
