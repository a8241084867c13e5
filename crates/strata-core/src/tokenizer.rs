//! Token counting: a trait, an exact BPE implementation over tiktoken-rs, and a cheap estimator.
//!
//! Budgets are enforced in exact tokens (ADR-0008). Untrusted text is always encoded as
//! ordinary text: special tokens such as `<|endoftext|>` in it are counted as the characters
//! they are, never as control tokens.
//!
//! Why counts are exact, which encodings are embedded and where the estimator may be used
//! is recorded in ADR-0003.

use std::fmt;

/// Counts tokens of text for one encoding.
pub trait Tokenizer: Send + Sync + fmt::Debug {
    /// The encoding's name (`o200k_base`, `cl100k_base`, `estimate/4`).
    fn name(&self) -> &str;

    /// Number of tokens in `text`.
    fn count(&self, text: &str) -> usize;

    /// Byte length of the longest prefix of `text` that ends on a character boundary and holds
    /// at most `max_tokens` tokens. The default searches over character boundaries with
    /// [`Tokenizer::count`]; implementations may do better.
    fn prefix_len(&self, text: &str, max_tokens: usize) -> usize {
        if self.count(text) <= max_tokens {
            return text.len();
        }
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .chain([text.len()])
            .collect();
        let (mut lo, mut hi) = (0usize, bounds.len() - 1);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.count(&text[..bounds[mid]]) <= max_tokens {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        bounds[lo]
    }
}

/// A cheap, deterministic estimate: one token per `bytes_per_token` bytes, rounded up.
/// Not exact; use it only where an upper-bound guess is good enough (fuzzing, tests of
/// ordering logic). Budgets for real models use [`TiktokenTokenizer`].
#[derive(Debug, Clone, Copy)]
pub struct EstimateTokenizer {
    bytes_per_token: usize,
    name: &'static str,
}

impl EstimateTokenizer {
    /// Four bytes per token, a common rule of thumb for English.
    pub const fn new() -> EstimateTokenizer {
        EstimateTokenizer {
            bytes_per_token: 4,
            name: "estimate/4",
        }
    }
}

impl Default for EstimateTokenizer {
    fn default() -> Self {
        EstimateTokenizer::new()
    }
}

impl Tokenizer for EstimateTokenizer {
    fn name(&self) -> &str {
        self.name
    }

    fn count(&self, text: &str) -> usize {
        text.len().div_ceil(self.bytes_per_token)
    }

    fn prefix_len(&self, text: &str, max_tokens: usize) -> usize {
        let mut end = text
            .len()
            .min(max_tokens.saturating_mul(self.bytes_per_token));
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        end
    }
}

#[cfg(feature = "tiktoken")]
pub use exact::{TiktokenTokenizer, MAX_UNBROKEN_RUN};

#[cfg(feature = "tiktoken")]
mod exact {
    use super::Tokenizer;
    use std::fmt;
    use tiktoken_rs::CoreBPE;

    /// Exact BPE counts with the encodings OpenAI models use, embedded (no network). The
    /// encoders are process-wide singletons built on first use (building one costs about half
    /// a second in debug builds), so constructing this type is free.
    ///
    /// Implements the exact counting of ADR-0003.
    #[derive(Clone, Copy)]
    pub struct TiktokenTokenizer {
        bpe: &'static CoreBPE,
        name: &'static str,
    }

    impl fmt::Debug for TiktokenTokenizer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("TiktokenTokenizer")
                .field("name", &self.name)
                .finish()
        }
    }

    impl TiktokenTokenizer {
        /// `o200k_base` (GPT-4o and later).
        pub fn o200k() -> TiktokenTokenizer {
            TiktokenTokenizer {
                bpe: tiktoken_rs::o200k_base_singleton(),
                name: "o200k_base",
            }
        }

        /// `cl100k_base` (GPT-4, GPT-3.5).
        pub fn cl100k() -> TiktokenTokenizer {
            TiktokenTokenizer {
                bpe: tiktoken_rs::cl100k_base_singleton(),
                name: "cl100k_base",
            }
        }

        /// By encoding name.
        pub fn by_name(name: &str) -> Option<TiktokenTokenizer> {
            match name {
                "o200k_base" | "o200k" => Some(Self::o200k()),
                "cl100k_base" | "cl100k" => Some(Self::cl100k()),
                _ => None,
            }
        }
    }

    /// Longest stretch without a whitespace boundary handed to the encoder in one piece.
    /// tiktoken-rs's BPE merge is quadratic in the length of one pre-token (200 KB of letters,
    /// punctuation, CJK or spaces take about 15 s in a release build) and its pre-tokenizer
    /// overflows its stack, panicking, on whitespace runs past about 512 KiB. Untrusted text must
    /// be able neither to crash nor to stall an assembly, so such stretches are cut.
    pub const MAX_UNBROKEN_RUN: usize = 256;

    /// Split `text` so that no piece holds a stretch of more than [`MAX_UNBROKEN_RUN`] bytes
    /// without a change between whitespace and non-whitespace. Ordinary text (words and spaces
    /// alternate far more often) is a single piece, so its count is exact; only pathological
    /// stretches are cut, and their count becomes the sum over the pieces, which in practice is
    /// at or above the exact count (a cut prevents merges across it).
    pub fn segments(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let (mut start, mut since, mut prev_ws) = (0usize, 0usize, None::<bool>);
        for (i, c) in text.char_indices() {
            let ws = c.is_whitespace();
            if prev_ws != Some(ws) {
                since = i;
                prev_ws = Some(ws);
            } else if i + c.len_utf8() - since > MAX_UNBROKEN_RUN {
                out.push(&text[start..i]);
                start = i;
                since = i;
            }
        }
        out.push(&text[start..]);
        out
    }

    impl Tokenizer for TiktokenTokenizer {
        fn name(&self) -> &str {
            self.name
        }

        fn count(&self, text: &str) -> usize {
            // ADR-0003: ordinary encoding, so special-token text counts as plain text.
            segments(text)
                .into_iter()
                .map(|seg| self.bpe.encode_ordinary(seg).len())
                .sum()
        }

        fn prefix_len(&self, text: &str, max_tokens: usize) -> usize {
            let segs = segments(text);
            if segs.len() > 1 {
                // Whole segments while they fit, then a prefix of the first that does not.
                let (mut used, mut offset) = (0usize, 0usize);
                for seg in segs {
                    let n = self.bpe.encode_ordinary(seg).len();
                    if used + n > max_tokens {
                        return offset + self.prefix_len(seg, max_tokens - used);
                    }
                    used += n;
                    offset += seg.len();
                }
                return text.len();
            }
            let tokens = self.bpe.encode_ordinary(text);
            if tokens.len() <= max_tokens {
                return text.len();
            }
            let bytes: usize = self
                .bpe
                ._decode_native_and_split(tokens[..max_tokens].to_vec())
                .map(|t| t.len())
                .sum();
            let mut end = bytes.min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            // BPE is not prefix-stable: re-tokenizing the prefix may merge differently, so
            // back off one character at a time until the prefix really fits.
            while end > 0 && self.count(&text[..end]) > max_tokens {
                end -= 1;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
            }
            end
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimator_prefix_fits() {
        let t = EstimateTokenizer::new();
        let s = "héllo wörld, ünïcode";
        for max in 0..10 {
            let n = t.prefix_len(s, max);
            assert!(s.is_char_boundary(n));
            assert!(t.count(&s[..n]) <= max);
        }
    }

    /// Verifies ADR-0003: exact counts, special-token text counted as text, and
    /// prefixes that fit their budget.
    #[cfg(feature = "tiktoken")]
    #[test]
    fn tiktoken_counts_are_exact_and_special_tokens_are_text() {
        let t = TiktokenTokenizer::o200k();
        assert_eq!(t.count(""), 0);
        assert_eq!(t.count("hello world"), 2);
        // A special token inside untrusted text is ordinary text: several tokens, not one.
        assert!(t.count("<|endoftext|>") > 1);
        let s = "The quick brown fox jumps over the lazy dog. Ünïcödé → 漢字 🦀";
        for max in [0, 1, 3, 7, 12] {
            let n = t.prefix_len(s, max);
            assert!(s.is_char_boundary(n));
            assert!(t.count(&s[..n]) <= max, "max {max}");
        }
        assert_eq!(t.prefix_len(s, 10_000), s.len());
        // Pathological stretches (a whitespace run that would overflow the regex's stack, long
        // runs of one letter, of punctuation, of CJK) are counted in segments, quickly.
        for long in [
            "x".repeat(300_000),
            "!".repeat(300_000),
            "漢".repeat(100_000),
        ] {
            let n = t.count(&long);
            assert!(n > 1_000 && n <= long.len(), "{n}");
            assert_eq!(super::exact::segments(&long).concat(), long);
        }
        let spaces = format!("a{}b", " ".repeat(1_100_000));
        let n = t.count(&spaces);
        assert!(n > 1_000, "{n}");
        let p = t.prefix_len(&spaces, n / 2);
        assert!(p > 0 && p < spaces.len() && t.count(&spaces[..p]) <= n / 2);
        assert_eq!(super::exact::segments("no long runs here").len(), 1);
        let c = TiktokenTokenizer::cl100k();
        assert_eq!(c.name(), "cl100k_base");
        assert!(TiktokenTokenizer::by_name("nope").is_none());
    }
}
