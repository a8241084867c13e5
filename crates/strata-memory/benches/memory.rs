//! Benchmarks of the SQLite memory store (filled in below).
fn main() {}
