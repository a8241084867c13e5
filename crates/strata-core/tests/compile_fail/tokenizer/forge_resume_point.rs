// A resume point cannot be made up: its fields are private and only a tokenizer's walk makes
// one, so a count cannot be handed a point for a text it was not walked over (ADR-0040).
use strata_core::{Prefix, ResumePoint};

fn main() {
    let _forged = ResumePoint {
        encoding: "o200k_base",
        at: Prefix { len: 4_096, tokens: 1 },
        walked: "".into(),
    };
}
