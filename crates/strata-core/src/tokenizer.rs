//! Token counting: a trait, an exact BPE implementation of the tiktoken encodings, and a cheap
//! estimator.
//!
//! Budgets are enforced in exact tokens (ADR-0008). Untrusted text is always encoded as
//! ordinary text: special tokens such as `<|endoftext|>` in it are counted as the characters
//! they are, never as control tokens.
//!
//! Why counts are exact and linear in the worst case, which encodings are embedded, what a
//! prefix within a budget means and where the estimator may be used is recorded in ADR-0020.
//! [`Tokenizer`] is what a user implements; the walks an assembler resumes and the bounds it
//! relies on are [`ResumableTokenizer`], which only this crate's exact tokenizer implements
//! (ADR-0040).

use std::any::Any;
use std::fmt;

#[cfg(feature = "tiktoken")]
mod exact;
mod resume;

#[cfg(feature = "tiktoken")]
pub use exact::TiktokenTokenizer;
pub use resume::{CountedSuffix, ResumableTokenizer, ResumePoint, Walked};

/// Bytes before a binary-searched suffix start that [`Tokenizer::suffix`] also tries, since
/// BPE counts are not monotone inside a pre-tokenizer piece.
const SUFFIX_LOOKBACK: usize = 48;

/// A prefix of a text that fits a number of tokens: its length in bytes (always on a character
/// boundary) and its exact token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// Byte length of the prefix.
    pub len: usize,
    /// Tokens in the prefix, counted on its own.
    pub tokens: usize,
}

/// Counts tokens of text for one encoding (ADR-0020): what a user implements to count for a
/// model strata has no exact tokenizer for. Only [`Tokenizer::name`] and [`Tokenizer::count`]
/// are required; the rest have defaults built on them. An assembler uses nothing else of a
/// tokenizer implemented outside this crate: the shortcuts of [`ResumableTokenizer`] are taken
/// only with this crate's exact tokenizer (ADR-0040).
///
/// `Any` is a supertrait so that [`<dyn Tokenizer>::resumable`](trait.Tokenizer.html#method.resumable)
/// can tell this crate's tokenizers from others.
pub trait Tokenizer: Any + Send + Sync + fmt::Debug {
    /// The encoding's name (`o200k_base`, `cl100k_base`, `estimate/4`).
    fn name(&self) -> &str;

    /// Number of tokens in `text`.
    fn count(&self, text: &str) -> usize;

    /// The number of tokens in `text` if it is at most `limit`, otherwise `None`.
    ///
    /// Use it to probe whether text fits: implementations may stop as soon as the limit is
    /// passed, so the cost follows `limit` rather than the length of `text`. The default counts
    /// everything.
    fn count_up_to(&self, text: &str, limit: usize) -> Option<usize> {
        let n = self.count(text);
        (n <= limit).then_some(n)
    }

    /// The longest prefix of `text` that ends on a character boundary and, counted on its own,
    /// holds at most `max_tokens` tokens, with its count.
    ///
    /// BPE counts are not monotone in the length of a prefix (appending a byte can merge two
    /// tokens into one), so "longest" means the longest of all prefixes that fit, not the first
    /// place where a growing prefix stops fitting. The default is a binary search with
    /// [`Tokenizer::count`], which is exact only for counts that grow with the prefix;
    /// implementations should do better.
    fn prefix(&self, text: &str, max_tokens: usize) -> Prefix {
        if let Some(tokens) = self.count_up_to(text, max_tokens) {
            return Prefix {
                len: text.len(),
                tokens,
            };
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
        Prefix {
            len: bounds[lo],
            tokens: self.count(&text[..bounds[lo]]),
        }
    }

    /// A suffix of `text` that starts on a character boundary and, counted on its own, holds at
    /// most `max_tokens` tokens: `len` is its length in bytes (the suffix is
    /// `text[text.len() - len..]`), `tokens` its exact count. Used to keep the tail of a section
    /// that is cut (ADR-0037).
    ///
    /// The default is a binary search over start positions with [`Tokenizer::count_up_to`], so
    /// each probe costs what the limit allows, not what the text holds, then a look back over
    /// the 48 bytes before the start it found, since BPE counts are not monotone inside a
    /// pre-tokenizer piece. The answer always fits; it is the longest that fits unless a longer
    /// one starts further back than that (rare: checked against tiktoken-rs in the tests).
    fn suffix(&self, text: &str, max_tokens: usize) -> Prefix {
        if let Some(tokens) = self.count_up_to(text, max_tokens) {
            return Prefix {
                len: text.len(),
                tokens,
            };
        }
        // `lo` is a start that does not fit, `hi` one that does (the empty suffix always fits).
        let (mut lo, mut hi, mut hi_tokens) = (0usize, text.len(), 0usize);
        loop {
            let mut mid = lo + (hi - lo) / 2;
            while mid < hi && !text.is_char_boundary(mid) {
                mid += 1;
            }
            if mid >= hi {
                mid = lo + (hi - lo) / 2;
                while mid > lo && !text.is_char_boundary(mid) {
                    mid -= 1;
                }
            }
            if mid <= lo || mid >= hi {
                break;
            }
            match self.count_up_to(&text[mid..], max_tokens) {
                Some(n) => {
                    hi = mid;
                    hi_tokens = n;
                }
                None => lo = mid,
            }
        }
        // Counts are not monotone where the start cuts into a pre-tokenizer piece (a word cut
        // in two can take fewer tokens than a shorter tail of it), so look back a little
        // further, one character at a time, for a longer suffix that still fits.
        let mut i = hi;
        while i > 0 && hi - i < SUFFIX_LOOKBACK {
            i -= 1;
            while i > 0 && !text.is_char_boundary(i) {
                i -= 1;
            }
            if let Some(n) = self.count_up_to(&text[i..], max_tokens) {
                (hi, hi_tokens) = (i, n);
            }
        }
        Prefix {
            len: text.len() - hi,
            tokens: hi_tokens,
        }
    }

    /// Build whatever the tokenizer builds lazily (tables, caches) now, so that a long-running
    /// process pays for it before its first request rather than during it. The default does
    /// nothing; counts are the same before and after.
    fn warm_up(&self) {}
}

impl dyn Tokenizer {
    /// This tokenizer's resumable walks, if it is one of this crate's exact tokenizers; `None`
    /// for any other (the estimator, a user's tokenizer, a wrapper around an exact one), which
    /// callers then count in full (ADR-0040).
    ///
    /// Decided by the tokenizer's type, not by a method it implements, so no implementation
    /// outside this crate can hand an assembler shortcuts that do not match its own counts.
    pub fn resumable(&self) -> Option<&dyn ResumableTokenizer> {
        #[cfg(feature = "tiktoken")]
        {
            let any: &dyn Any = self;
            if let Some(t) = any.downcast_ref::<TiktokenTokenizer>() {
                return Some(t);
            }
        }
        None
    }
}

/// The number of separate ASCII words in `text`: maximal runs of ASCII letters with, on each
/// side, the edge of the text or an ASCII character that is not a letter, and not an apostrophe
/// just before (a contraction such as `'s` joins the word before it).
///
/// With the tiktoken pre-tokenizers (cl100k_base, o200k_base) each such word lies in a piece of
/// its own: a piece holds letters in one contiguous run, plus at most one leading character
/// that is not a letter or digit and a contraction after an apostrophe; numbers, punctuation and
/// whitespace pieces hold no letters. Tokens never span pieces, so this is a lower bound of the
/// token count, found in one pass over the bytes with no tokenizer (ADR-0037). Letters next to
/// non-ASCII characters are not counted, since those can join them into one piece.
///
/// The bytes are read 64 at a time, each block as bit masks (letters, bytes after which no word
/// starts, bytes that are not ASCII) built eight bytes to a word: the words that end in a block
/// are counted from the masks at once, a carry from each run that starts badly marking the byte
/// that ends it; the last bytes, fewer than 64, are read one at a time.
pub fn separate_ascii_words(text: &str) -> usize {
    let mut w = Words {
        words: 0,
        in_word: false,
        run_ok: false,
        prev_ok: true,
    };
    let mut blocks = text.as_bytes().chunks_exact(64);
    for block in &mut blocks {
        w.block(block);
    }
    for &b in blocks.remainder() {
        w.byte(b);
    }
    w.words + usize::from(w.in_word && w.run_ok)
}

/// The state of [`separate_ascii_words`] after the bytes read so far.
struct Words {
    /// Words counted: runs that ended well and started well.
    words: usize,
    /// The last byte is a letter.
    in_word: bool,
    /// The run of letters the last byte is in started well (the text's start, or after an
    /// ASCII byte that is not an apostrophe).
    run_ok: bool,
    /// A run starting at the next byte would start well.
    prev_ok: bool,
}

/// `b` in every byte of a word.
const fn splat(b: u8) -> u64 {
    (b as u64) * 0x0101_0101_0101_0101
}

/// The high bit of each byte of `m`, gathered into the low eight bits (byte `i` to bit `i`).
fn high_bits(m: u64) -> u64 {
    ((m & splat(0x80)) >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
}

impl Words {
    fn byte(&mut self, b: u8) {
        let letter = b.is_ascii_alphabetic();
        if self.in_word && !letter && self.run_ok && b.is_ascii() {
            self.words += 1;
        }
        if letter && !self.in_word {
            self.run_ok = self.prev_ok;
        }
        self.in_word = letter;
        self.prev_ok = b.is_ascii() && b != b'\'';
    }

    /// Sixty-four bytes at once.
    fn block(&mut self, block: &[u8]) {
        let (mut letters, mut no_start_after, mut wide) = (0u64, 0u64, 0u64);
        for (k, c) in block.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            // The high bit of a byte is set where it is not ASCII; `x` holds the low seven
            // bits, so sums below do not carry into the next byte.
            let low = splat(0x7f);
            let z = v ^ splat(b'\'');
            let apostrophe = !(((z & low).wrapping_add(low)) | z) & splat(0x80);
            // Lower case folded in: a letter is a byte from `a` to `z` after folding, ASCII.
            let x = (v | splat(0x20)) & low;
            let letter =
                x.wrapping_add(splat(0x80 - b'a')) & !x.wrapping_add(splat(0x7f - b'z')) & !v;
            letters |= high_bits(letter) << (8 * k);
            wide |= high_bits(v) << (8 * k);
            no_start_after |= high_bits(v | apostrophe) << (8 * k);
        }
        let before = (letters << 1) | u64::from(self.in_word);
        let starts = letters & !before;
        let ends = !letters & before;
        // Runs that start badly: after a byte no word starts after (the last block's last
        // byte for the first), or the run carried over when it started badly.
        let bad_starts = (starts & ((no_start_after << 1) | u64::from(!self.prev_ok)))
            | u64::from(self.in_word && !self.run_ok);
        // Adding a run's bad start carries through its letters into the byte that ends it (or
        // out of the block, for a run still open).
        let (carried, open_bad) = letters.overflowing_add(bad_starts);
        self.words += (ends & !carried & !wide).count_ones() as usize;
        self.in_word = letters >> 63 != 0;
        self.run_ok = !open_bad;
        self.prev_ok = no_start_after >> 63 == 0;
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

    fn prefix(&self, text: &str, max_tokens: usize) -> Prefix {
        let mut len = text
            .len()
            .min(max_tokens.saturating_mul(self.bytes_per_token));
        while !text.is_char_boundary(len) {
            len -= 1;
        }
        Prefix {
            len,
            tokens: self.count(&text[..len]),
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
            let p = t.prefix(s, max);
            assert!(s.is_char_boundary(p.len));
            assert_eq!(p.tokens, t.count(&s[..p.len]));
            assert!(p.tokens <= max);
        }
        assert_eq!(t.count_up_to(s, 100), Some(t.count(s)));
        assert_eq!(t.count_up_to(s, 1), None);
    }

    #[test]
    fn estimator_suffix_is_the_longest_that_fits() {
        // The estimator's count is monotone, so the binary search must find the longest suffix:
        // checked against every character boundary.
        let t = EstimateTokenizer::new();
        let s = "héllo wörld, ünïcode and more text";
        for max in 0..12 {
            let p = t.suffix(s, max);
            let start = s.len() - p.len;
            assert!(s.is_char_boundary(start));
            assert_eq!(p.tokens, t.count(&s[start..]));
            assert!(p.tokens <= max);
            let best = (0..=s.len())
                .filter(|i| s.is_char_boundary(*i) && t.count(&s[*i..]) <= max)
                .min()
                .unwrap_or(s.len());
            assert_eq!(start, best, "max {max}");
        }
    }
}
