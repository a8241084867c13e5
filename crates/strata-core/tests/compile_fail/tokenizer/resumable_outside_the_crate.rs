// Resumable walks are sealed: a tokenizer outside strata-core cannot claim them, so an
// assembler takes shortcuts only with the crate's exact tokenizer (ADR-0040).
use strata_core::{CountedSuffix, ResumableTokenizer, ResumePoint, Tokenizer, Walked};

#[derive(Debug)]
struct Mine;

impl Tokenizer for Mine {
    fn name(&self) -> &str {
        "mine"
    }
    fn count(&self, text: &str) -> usize {
        text.len()
    }
}

impl ResumableTokenizer for Mine {
    fn splits_ascii_words(&self) -> bool {
        true
    }
    fn longest_token_bytes(&self) -> usize {
        1
    }
    fn prefix_look_ahead(&self) -> usize {
        0
    }
    fn walk(&self, _: &str, _: usize, _: Option<&ResumePoint>) -> Walked {
        unimplemented!()
    }
    fn resumes(&self, _: &str, _: &ResumePoint) -> bool {
        true
    }
    fn count_resumed(&self, _: &str, _: &ResumePoint) -> usize {
        0
    }
    fn suffix_counted(&self, _: &str, _: usize) -> CountedSuffix {
        unimplemented!()
    }
    fn count_sharing_end(&self, _: &str, _: &CountedSuffix) -> usize {
        0
    }
}

fn main() {}
