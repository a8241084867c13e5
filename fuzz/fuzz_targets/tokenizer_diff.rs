//! Fuzz target: the exact tokenizer against tiktoken-rs, an independent implementation of the
//! same encodings (ADR-0020). For any input (raw text, a long run made by repeating it,
//! datamarked or base64 encoded), counts and token ids equal the reference, counting up to a
//! limit agrees with the count, and the prefix within a budget holds exactly the tokens it
//! reports, fits, and is the longest that fits (by brute force on short inputs, over the next
//! characters on long ones); counts and cuts resumed from a point of a walk over another text
//! that shares the input's start equal the reference's (ADR-0037, ADR-0040); the suffix within a budget
//! (found from a window at the end, which small budgets keep shorter than the input) holds the
//! tokens it reports, fits, and no start up to 64 bytes further back fits (ADR-0037); and a
//! count taken from another text with the same end equals the reference's (ADR-0037);
//! and the separate ASCII words of the input never exceed its reference count (ADR-0037).
//! Counts go through the vocabulary's lookup of whole-token pieces, as every count does
//! (ADR-0040); resume points are offered to texts they may not hold for, and are then not used.
//! Inputs stay at a kilobyte, where tiktoken-rs (quadratic in one pre-tokenizer piece) finishes
//! quickly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_core::format::{encode_untrusted, Encoding};
use strata_core::{ResumableTokenizer, TiktokenTokenizer, Tokenizer};
use tiktoken_rs::CoreBPE;

/// Largest input handed to the reference: tiktoken-rs is quadratic in one pre-tokenizer piece,
/// and a run of this size already takes a good part of a second in an instrumented build.
const MAX_BYTES: usize = 1_024;

fn reference(r: &CoreBPE, text: &str) -> usize {
    r.encode_ordinary(text).len()
}

fn floor_boundary(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fuzz_target!(|data: &[u8]| {
    let [mode, budget_seed, rest @ ..] = data else {
        return;
    };
    let body = String::from_utf8_lossy(rest);
    // Any tail for the resumed checks below: the input's own characters, reversed.
    let tail: String = body.chars().rev().take(64).collect();
    let mut text = match mode % 4 {
        0 => body.into_owned(),
        1 if !body.is_empty() => {
            // A long run: the input repeated to between 256 bytes and 1 KiB.
            let want = 256 + usize::from(*mode / 4) * 12;
            body.repeat(want / body.len() + 1)
        }
        1 => String::new(),
        2 => encode_untrusted(&body, Encoding::Datamark),
        _ => encode_untrusted(&body, Encoding::Base64),
    };
    text.truncate(floor_boundary(&text, text.len().min(MAX_BYTES)));

    for (t, r) in [
        (
            TiktokenTokenizer::o200k(),
            tiktoken_rs::o200k_base_singleton(),
        ),
        (
            TiktokenTokenizer::cl100k(),
            tiktoken_rs::cl100k_base_singleton(),
        ),
    ] {
        // Every count goes through the vocabulary's lookup, from the first on (ADR-0040).
        t.warm_up();
        let ids = r.encode_ordinary(&text);
        let n = ids.len();
        assert_eq!(t.count(&text), n, "{}: count", t.name());
        assert_eq!(t.encode(&text), ids, "{}: token ids", t.name());
        assert_eq!(t.count_up_to(&text, n), Some(n));
        // The word bound fitting relies on never exceeds the reference count (ADR-0037).
        assert!(t.splits_ascii_words());
        let words = strata_core::separate_ascii_words(&text);
        assert!(words <= n, "{}: {words} separate words, {n} tokens", t.name());
        if n > 0 {
            assert_eq!(t.count_up_to(&text, n - 1), None);
        }

        let budget = usize::from(*budget_seed) * (n + 1) / 256;
        let p = t.prefix(&text, budget);
        assert!(text.is_char_boundary(p.len));
        assert_eq!(
            p.tokens,
            reference(r, &text[..p.len]),
            "{}: reported count",
            t.name()
        );
        assert!(
            p.tokens <= budget,
            "{}: {} tokens over {budget}",
            t.name(),
            p.tokens
        );
        let longer: Vec<usize> = if text.chars().count() <= 64 {
            text.char_indices()
                .map(|(i, c)| i + c.len_utf8())
                .filter(|&e| e > p.len)
                .collect()
        } else {
            text[p.len..]
                .char_indices()
                .take(8)
                .map(|(i, c)| p.len + i + c.len_utf8())
                .collect()
        };
        for end in longer {
            assert!(
                reference(r, &text[..end]) > budget,
                "{}: the prefix of {end} bytes fits {budget} tokens, longer than the cut at {}",
                t.name(),
                p.len
            );
        }

        // The suffix within a small budget: the window at the end is shorter than the text.
        let small = budget % 40;
        let sfx = t.suffix(&text, small);
        let start = text.len() - sfx.len;
        assert!(text.is_char_boundary(start));
        assert_eq!(sfx.tokens, reference(r, &text[start..]), "{}: suffix count", t.name());
        assert!(sfx.tokens <= small, "{}: suffix over {small}", t.name());
        for i in (start.saturating_sub(64)..start).filter(|i| text.is_char_boundary(*i)) {
            assert!(
                reference(r, &text[i..]) > small,
                "{}: the suffix from {i} fits {small} tokens, longer than from {start}",
                t.name()
            );
        }

        // Resuming from a point of this walk over another text that shares its start (ADR-0037):
        // the text cut somewhere past the point and ended with the input's own bytes reversed
        // (any tail); the count and the cut equal the reference's and a fresh search's.
        // A point is used only where it holds for the other text (ADR-0040).
        if let Some(resume) = t.walk(&text, budget, None).point {
            let at = floor_boundary(&text, (resume.at().len + usize::from(*mode)).min(text.len()));
            let other = [&text[..at], tail.as_str()].concat();
            assert_eq!(
                t.count_resumed(&other, &resume),
                reference(r, &other),
                "{}: count resumed from {resume:?}",
                t.name()
            );
            let q = t.walk(&other, budget, Some(&resume)).prefix;
            assert_eq!(
                q,
                t.prefix(&other, budget),
                "{}: cut resumed from {resume:?}",
                t.name()
            );
            assert_eq!(q.tokens, reference(r, &other[..q.len]));
        }

        // Counting from a text with the same end (ADR-0037): the suffix found above,
        // and the whole input, each behind a few of the input's own characters reversed, given
        // the exact count of the text without them, count what the reference counts.
        let front = &tail[..floor_boundary(&tail, tail.len().min(usize::from(*mode) + 8))];
        let joined = [front, &text[start..]].concat();
        let counted = t.suffix_counted(&text, small);
        assert_eq!(counted.answer(), sfx);
        assert_eq!(
            t.count_sharing_end(&joined, &counted),
            reference(r, &joined),
            "{}: count sharing the end of the suffix",
            t.name()
        );
        let joined = [front, text.as_str()].concat();
        let whole = t.suffix_counted(&text, usize::MAX);
        assert_eq!(whole.answer().tokens, reference(r, &text));
        assert_eq!(
            t.count_sharing_end(&joined, &whole),
            reference(r, &joined),
            "{}: count sharing the end of the input",
            t.name()
        );
    }
});
