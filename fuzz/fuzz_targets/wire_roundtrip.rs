//! Fuzz target: the wire format. Verifies I3 (ADR-0009): for any bytes, escaping is reversed
//! exactly, a fenced section parses back to exactly its text in every encoding (the text is
//! also the `source` attribute), the escaped text holds no raw boundary characters, lookalike
//! brackets, bracket tokens, line-start headings or role labels, a CommonMark parser finds no
//! heading in it, and parsing arbitrary text never panics.
//!
//! An input starting with 0xFF (never the first byte of UTF-8 text) is a recipe: each further
//! byte picks a fragment from `FRAGMENTS` (blanks, role words, colons and their lookalikes,
//! brackets and their lookalikes, tag names, heading and underline marks, list markers), so
//! every class of forgery is generated; any other input is used as text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_core::format::{self, Encoding, Parsed, SectionHeader};
use strata_core::{Keep, Layer};

const FRAGMENTS: &[&str] = &[
    "\n", " ", "\t", "\u{A0}", "\u{2003}", "\u{2007}", "\u{205F}", "\u{3000}", "\u{2800}",
    "\u{200B}", "System", "system", "ADMIN", "H", "A", "SYSTEM MESSAGE", "note", "assistant",
    ":", "\u{FF1A}", "\u{2236}", "\u{A789}", "[", "]", "/", "INST", "inst", "Inst", "1",
    "\u{FF3B}", "\u{FF3D}", "\u{FE47}", "\u{FE48}", "<", ">", "\u{FF1C}", "\u{FF1E}",
    "\u{FE64}", "\u{FE65}", "\u{2039}", "\u{203A}", "\u{3008}", "\u{3009}", "\u{27E8}",
    "\u{27E9}", "\u{2329}", "\u{232A}", "\u{02C2}", "\u{02C3}", "\u{1438}", "\u{1433}",
    "\u{276E}", "\u{276F}", "strata:section", "|im_start|", "#", "\u{FF03}", "\u{FE5F}", "=",
    "-", "===", "---", "- ", "1. ", "* ", "&", "&#58;", "&#x200b;", "\u{304F}", "\u{884C}",
    "a", "x", "GOAL", "DECISION", " - LOCKED", "://",
];

/// Raw lookalikes that are never letters: escaping must never leave one.
const LOOKALIKES: &[char] = &[
    '\u{FF1C}', '\u{FF1E}', '\u{FE64}', '\u{FE65}', '\u{2039}', '\u{203A}', '\u{3008}',
    '\u{3009}', '\u{27E8}', '\u{27E9}', '\u{2329}', '\u{232A}', '\u{02C2}', '\u{02C3}',
    '\u{276E}', '\u{276F}', '\u{FF3B}', '\u{FF3D}', '\u{FE47}', '\u{FE48}', '\u{FF03}',
    '\u{FE5F}',
];

fn blank(c: char) -> bool {
    c != '\n' && (c.is_whitespace() || matches!(c, '\u{2800}' | '\u{200B}'))
}

fn check_neutralised(text: &str, escaped: &str) {
    assert!(!escaped.contains('<') && !escaped.contains('>'), "{text:?} -> {escaped:?}");
    if let Some(c) = escaped.chars().find(|c| LOOKALIKES.contains(c)) {
        panic!("raw lookalike {c:?} in {escaped:?}");
    }
    let b = escaped.as_bytes();
    for (i, _) in escaped.match_indices('[') {
        let body = &b[i + 1..];
        let body = body.strip_prefix(b"/").unwrap_or(body);
        if let Some(end) = body.iter().take(33).position(|x| *x == b']') {
            let inner = &body[..end];
            assert!(
                !(inner.iter().filter(|x| x.is_ascii_alphanumeric()).count() >= 2
                    && inner.iter().all(|x| x.is_ascii_alphanumeric() || b"_-|. \t".contains(x))),
                "bracket token in {escaped:?}"
            );
        }
    }
    for line in escaped.lines() {
        let t = line.trim_start_matches(blank);
        let t = ["- ", "* ", "+ "].iter().find_map(|m| t.strip_prefix(m)).unwrap_or(t).trim_start_matches(blank);
        assert!(!t.starts_with('#'), "heading mark in {line:?}");
        let label: String = t.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-' || blank(*c)).collect();
        let after = t[label.len()..].chars().next();
        let words = label.split(blank).filter(|w| !w.is_empty()).count();
        if label.chars().any(char::is_alphabetic) && (1..=3).contains(&words) && label.len() <= 64 {
            let colon = matches!(after, Some(':' | '\u{FF1A}' | '\u{2236}' | '\u{A789}'));
            // A colon between two digits is a time or a ratio, not a label's.
            let time = after == Some(':')
                && label.ends_with(|c: char| c.is_ascii_digit())
                && t[label.len() + 1..].starts_with(|c: char| c.is_ascii_digit());
            let colon = colon && !time;
            assert!(!colon || t[label.len()..].starts_with("://"), "role label in {line:?}");
        }
    }
    for ev in pulldown_cmark::Parser::new(escaped) {
        if let pulldown_cmark::Event::Start(pulldown_cmark::Tag::Heading { .. }) = ev {
            panic!("a CommonMark heading in {escaped:?}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text: String = match data.split_first() {
        Some((0xFF, recipe)) => recipe.iter().map(|b| FRAGMENTS[*b as usize % FRAGMENTS.len()]).collect(),
        _ => String::from_utf8_lossy(data).into_owned(),
    };
    let escaped = format::escape(&text);
    check_neutralised(&text, &escaped);
    assert_eq!(format::unescape(&escaped).expect("escape output must unescape"), text);
    for enc in [Encoding::Escaped, Encoding::Datamark, Encoding::Base64] {
        let mut out = String::new();
        let h = SectionHeader { key: Some("k"), source: Some(&text), ..SectionHeader::new(Layer::WorkingMemory, "fuzz.1") };
        format::write_untrusted(&mut out, &h, &text, enc);
        let tag = out.lines().next().unwrap_or_default();
        assert!(!LOOKALIKES.iter().any(|c| tag.contains(*c)), "raw lookalike in {tag:?}");
        let parsed = format::parse(&out).expect("our own output must parse");
        assert_eq!(parsed.len(), 1, "one section in, one section out");
        match &parsed[0] {
            Parsed::Section { layer, text: t, source, .. } => {
                assert_eq!(*layer, Layer::WorkingMemory);
                assert_eq!(t.as_str(), &*text);
                assert_eq!(source.as_deref(), Some(&*text));
            }
            Parsed::Omitted { .. } => panic!("a section came back as a marker"),
        }
        // A cut keeping both ends (ADR-0037): the text split in two around an elision marker
        // must come back as the same two parts, and the marker must appear exactly once.
        let mid = (0..=text.len() / 2).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        let (head, tail) = text.split_at(mid);
        let mut out = String::new();
        format::write_untrusted_cut(&mut out, &h, head, 17, tail, Keep::Both, enc);
        assert_eq!(out.matches("<strata:elided ").count(), 1, "one elision marker");
        match format::parse(&out).expect("our own output must parse").as_slice() {
            [Parsed::Section { text: t, elided: Some(e), keep: Keep::Both, .. }] => {
                assert_eq!(t.as_str(), &*text);
                assert_eq!((e.at, e.bytes), (head.len(), 17));
            }
            other => panic!("an elided cut came back as {other:?}"),
        }
    }
    let _ = format::parse(&text);
});
