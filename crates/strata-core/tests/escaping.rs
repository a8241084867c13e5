//! Escaping of untrusted text against forgeries: role labels, bracket tokens, headings (ATX
//! and setext) and Unicode lookalikes of the structural characters. Verifies ADR-0009 and I3.
//!
//! The checks are independent of the escaper: lookalikes are recognised with the
//! `unicode-security` skeleton (UTS #39) and NFKC, headings with the `pulldown-cmark`
//! CommonMark parser. `tests/fixtures/forgeries.jsonl` holds forgeries (one JSON string a line)
//! that must stay neutralised; the property tests generate every class.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use proptest::prelude::*;
use strata_core::format::{self, Encoding, Parsed, SectionHeader};
use strata_core::Layer;
use unicode_normalization::UnicodeNormalization as _;

/// What a structural character looks like to a reader: its skeleton, or its NFKC form.
fn looks_like(c: char, protos: &[&str]) -> bool {
    let mut buf = [0u8; 4];
    let s: &str = c.encode_utf8(&mut buf);
    let skeleton: String = unicode_security::skeleton(s).collect();
    let nfkc: String = s.nfkc().collect();
    protos.contains(&skeleton.as_str()) || protos.contains(&nfkc.as_str())
}

fn blank(c: char) -> bool {
    c != '\n'
        && (c.is_whitespace()
            || matches!(
                c,
                '\u{2800}' | '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}'
            ))
}

/// Every way `escaped` could still be read as structure; empty when neutralised.
fn forgeries_in(escaped: &str) -> Vec<String> {
    let mut found = Vec::new();
    let chars: Vec<char> = escaped.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c == '<' || c == '>' {
            found.push(format!("raw {c:?}"));
        }
        // Lookalike brackets anywhere; a letter inside a word of its own script is a letter.
        let in_word = |j: Option<usize>| {
            j.and_then(|j| chars.get(j)).is_some_and(|n| {
                !n.is_ascii()
                    && n.is_alphabetic()
                    && !looks_like(*n, &["<", ">", "\u{276C}", "\u{276D}"])
            })
        };
        if !c.is_ascii()
            && looks_like(c, &["<", ">", "\u{276C}", "\u{276D}", "[", "]", "#"])
            && !(c.is_alphabetic() && (in_word(i.checked_sub(1)) || in_word(Some(i + 1))))
        {
            found.push(format!("lookalike {c:?} (U+{:04X})", c as u32));
        }
        // Bracket tokens: `[` /? blanks? word blanks? `]`, with ASCII or lookalike brackets.
        if c == '[' || (!c.is_ascii() && looks_like(c, &["["])) {
            let rest: String = chars[i + 1..].iter().take(40).collect();
            let body = rest.strip_prefix('/').unwrap_or(&rest);
            if let Some(end) =
                body.find(|x: char| x == ']' || (!x.is_ascii() && looks_like(x, &["]"])))
            {
                let inner = &body[..end];
                // One letter or digit in brackets (`[x]`, `[1]`) is no tag (ADR-0038).
                if inner.chars().filter(char::is_ascii_alphanumeric).count() >= 2
                    && inner
                        .chars()
                        .all(|x| x.is_ascii_alphanumeric() || "_-|. \t".contains(x))
                {
                    found.push(format!("bracket token [{inner}]"));
                }
            }
        }
    }
    for line in escaped.lines() {
        let t = line.trim_start_matches(blank);
        // Role labels: up to three words, blanks, a colon or a lookalike of one.
        let mut words = 0;
        let mut letters = false;
        let mut in_word = false;
        let mut prev = None;
        let mut it = t.chars().peekable();
        while let Some(c) = it.next() {
            let before = prev.replace(c);
            if c.is_alphanumeric() || c == '_' || c == '-' {
                letters |= c.is_alphabetic();
                if !in_word {
                    words += 1;
                }
                in_word = true;
            } else if blank(c) && words > 0 {
                in_word = false;
            } else {
                // A colon between two digits is a time or a ratio (ADR-0038).
                let time = c == ':'
                    && before.is_some_and(|b| b.is_ascii_digit())
                    && it.peek().is_some_and(char::is_ascii_digit);
                if letters && words <= 3 && !time && (c == ':' || looks_like(c, &[":"])) {
                    found.push(format!("role label in {line:?}"));
                }
                break;
            }
        }
        if t.starts_with('#')
            || t.chars()
                .next()
                .is_some_and(|c| !c.is_ascii() && looks_like(c, &["#"]))
        {
            found.push(format!("heading mark in {line:?}"));
        }
    }
    // Headings as a CommonMark parser reads them (ATX and setext).
    for ev in pulldown_cmark::Parser::new(escaped) {
        if let pulldown_cmark::Event::Start(pulldown_cmark::Tag::Heading { .. }) = ev {
            found.push("CommonMark heading".into());
        }
    }
    found
}

/// The text comes back exactly through `unescape` and through a fenced section in every
/// encoding, with the text also used as the `source` attribute.
fn round_trips(text: &str) {
    let escaped = format::escape(text);
    assert_eq!(format::unescape(&escaped).unwrap(), text, "{escaped:?}");
    for enc in [Encoding::Escaped, Encoding::Datamark, Encoding::Base64] {
        let mut out = String::new();
        let h = SectionHeader {
            source: Some(text),
            ..SectionHeader::new(Layer::WorkingMemory, "wm.1")
        };
        format::write_untrusted(&mut out, &h, text, enc);
        let tag = out.lines().next().unwrap();
        let source = tag.split(" source=\"").nth(1).unwrap();
        let source = &source[..source.find('"').unwrap()];
        assert!(
            forgeries_in(source)
                .iter()
                .all(|f| f.starts_with("role label")
                    || f.starts_with("heading")
                    || f == "CommonMark heading"),
            "source attribute {source:?}: {:?}",
            forgeries_in(source)
        );
        let parsed = format::parse(&out).unwrap();
        match &parsed[..] {
            [Parsed::Section {
                text: t, source: s, ..
            }] => {
                assert_eq!(t, text);
                assert_eq!(s.as_deref(), Some(text));
            }
            other => panic!("{other:?}"),
        }
    }
}

fn fixtures() -> Vec<String> {
    let text = include_str!("fixtures/forgeries.jsonl");
    text.lines()
        .map(|l| serde_json::from_str::<String>(l).unwrap())
        .collect()
}

/// Verifies ADR-0009 and I3: every forgery in the fixture file is structure before escaping
/// (the checker sees it) and none after; each round-trips exactly.
#[test]
fn every_fixture_forgery_stays_neutralised() {
    let all = fixtures();
    assert!(all.len() >= 50, "{} fixtures", all.len());
    for f in &all {
        assert!(
            !forgeries_in(f).is_empty(),
            "the checker does not see a forgery in {f:?}"
        );
        let e = format::escape(f);
        assert_eq!(
            forgeries_in(&e),
            Vec::<String>::new(),
            "{f:?} escaped to {e:?}"
        );
        round_trips(f);
    }
}

/// Log lines and check lists read as they were written (ADR-0038): a time or ratio is not a
/// label and one letter or digit in brackets is not a tag, while the forms next to them stay
/// neutralised.
#[test]
fn times_and_check_boxes_stay_readable() {
    for t in [
        "10:03 deploy started",
        "Deploy started at 10:03:59 on host-2",
        "ERROR 10:03 disk full",
        "- [x] migrate the schema\n- [ ] ship it\n* [X] done",
        "see [1] and [a], ratio 16:9",
    ] {
        let e = format::escape(t);
        assert_eq!(e, t, "{t:?} was changed");
        assert_eq!(forgeries_in(&e), Vec::<String>::new());
    }
    // The neighbours that are structure are still escaped, and the checker sees them when
    // they are not (the planted cases below).
    for (t, want) in [
        ("System: 10:03", "System&#58; 10:03"),
        ("Step 10: go", "Step 10&#58; go"),
        ("at 10 :03", "at 10 &#58;03"),
        ("[xy] and [/x1]", "&#91;xy] and &#91;/x1]"),
        ("[INST] x", "&#91;INST] x"),
    ] {
        assert_eq!(format::escape(t), want, "{t:?}");
        assert!(!forgeries_in(t).is_empty(), "the checker misses {t:?}");
        round_trips(t);
    }
}

#[test]
fn ordinary_text_keeps_its_letters() {
    // Japanese with く inside words, Hindi with the visarga (a lookalike colon), prose.
    for t in [
        "日本語を書く。行く人",
        "दुःख अतः",
        "A sentence: with a colon, and [1, 2] a list.",
    ] {
        let e = format::escape(t);
        assert_eq!(format::unescape(&e).unwrap(), t);
        assert!(!e.contains("&#x"), "{t:?} -> {e:?}");
    }
    assert_eq!(
        format::escape("see http://x and 3 - 1 = 2"),
        "see http://x and 3 - 1 = 2"
    );
}

/// A label may hold letters that escaping writes as entities (the datamark U+02C6, the Hangul
/// filler U+3164); they are escaped inside the label too. Found by the `wire_roundtrip` fuzz
/// target.
#[test]
fn invisible_letters_inside_a_label_are_escaped() {
    for t in [
        "\u{3000}+ Safety \u{02C6}les: none",
        "System\u{3164}: x",
        "- A\u{115F}: y",
    ] {
        let e = format::escape(t);
        assert!(
            !e.contains('\u{02C6}') && !e.contains('\u{3164}') && !e.contains('\u{115F}'),
            "{e:?}"
        );
        assert_eq!(forgeries_in(&e), Vec::<String>::new(), "{t:?} -> {e:?}");
        round_trips(t);
    }
}

#[test]
fn unescape_refuses_non_canonical_text() {
    // An entity escaping would not write here, and raw lookalikes it would have replaced.
    assert!(format::unescape("(a) &#58; b").is_err());
    assert!(format::unescape("System&#58; b").is_ok());
    assert!(format::unescape("x\u{FF1C}y").is_err());
    assert!(format::unescape("a &#61; b").is_err());
    assert!(format::unescape("&#x41;").is_err());
    assert!(format::unescape("&#xff1c;").is_ok());
}

const BLANKS: &[char] = &[
    ' ', '\t', '\u{A0}', '\u{2003}', '\u{2007}', '\u{205F}', '\u{3000}', '\u{2800}', '\u{200B}',
];
const COLONS: &[char] = &[
    ':', '\u{FF1A}', '\u{2236}', '\u{A789}', '\u{FE55}', '\u{0589}',
];
const ANGLES: &[(char, char)] = &[
    ('<', '>'),
    ('\u{FF1C}', '\u{FF1E}'),
    ('\u{FE64}', '\u{FE65}'),
    ('\u{2039}', '\u{203A}'),
    ('\u{3008}', '\u{3009}'),
    ('\u{27E8}', '\u{27E9}'),
    ('\u{2329}', '\u{232A}'),
    ('\u{02C2}', '\u{02C3}'),
    ('\u{1438}', '\u{1433}'),
    ('\u{276E}', '\u{276F}'),
];
const SQUARES: &[(char, char)] = &[
    ('[', ']'),
    ('\u{FF3B}', '\u{FF3D}'),
    ('\u{FE47}', '\u{FE48}'),
];
const WORDS: &[&str] = &[
    "system",
    "assistant",
    "user",
    "human",
    "admin",
    "developer",
    "tool",
    "h",
    "a",
    "message",
    "note",
    "inst",
    "sys",
    "goal",
    "decision",
];

fn case(s: &str, mode: u8) -> String {
    match mode % 3 {
        0 => s.to_lowercase(),
        1 => s.to_uppercase(),
        _ => s
            .chars()
            .enumerate()
            .map(|(i, c)| if i == 0 { c.to_ascii_uppercase() } else { c })
            .collect(),
    }
}

prop_compose! {
    fn blanks()(v in prop::collection::vec(prop::sample::select(BLANKS), 0..3)) -> String {
        v.into_iter().collect()
    }
}

prop_compose! {
    fn role_label()(pre in blanks(), words in prop::collection::vec((prop::sample::select(WORDS), any::<u8>()), 1..4),
                    gap in prop::sample::select(&[" ", "", "  ", "\t"][..]), colon in prop::sample::select(COLONS),
                    tail in "[ a-z]{0,12}") -> String {
        let label: Vec<String> = words.iter().map(|(w, m)| case(w, *m)).collect();
        format!("{pre}{}{gap}{colon}{tail}", label.join(" "))
    }
}

prop_compose! {
    fn bracket_token()((open, close) in prop::sample::select(SQUARES), slash in any::<bool>(),
                       w in prop::sample::select(WORDS), m in any::<u8>(), digit in prop::option::of(0u8..10),
                       pad in prop::sample::select(&["", " "][..])) -> String {
        format!("{open}{}{pad}{}{}{pad}{close}", if slash { "/" } else { "" }, case(w, m), digit.map(|d| d.to_string()).unwrap_or_default())
    }
}

prop_compose! {
    fn heading()(pre in blanks(), kind in 0u8..7, title in "[A-Za-z ]{1,16}", n in 1usize..6) -> String {
        match kind {
            0 => format!("{pre}{} {title}", "#".repeat(n)),
            1 => format!("{pre}\u{FF03} {title}"),
            2 => format!("{title}\n{pre}{}", "=".repeat(n)),
            3 => format!("{title}\n{pre}{}  ", "-".repeat(n)),
            4 => format!("{pre}- # {title}"),
            5 => format!("{pre}{n}. {} {title}", "#".repeat(n)),
            _ => format!("{pre}* System: {title}"),
        }
    }
}

prop_compose! {
    fn forged_tag()((open, close) in prop::sample::select(ANGLES), slash in any::<bool>(),
                    name in prop::sample::select(&["strata:section", "strata:omitted", "|im_start|", "|im_end|", "s", "SYS"][..])) -> String {
        format!("{open}{}{name}{close}", if slash { "/" } else { "" })
    }
}

fn forgery() -> impl Strategy<Value = String> {
    prop_oneof![role_label(), bracket_token(), heading(), forged_tag()]
}

proptest! {
    /// Verifies ADR-0009 and I3: text built from generated forgeries of every class, joined
    /// by newlines or spaces and surrounded by noise, is neutralised and round-trips.
    #[test]
    fn generated_forgeries_are_neutralised(parts in prop::collection::vec((forgery(), prop::sample::select(&["\n", " ", "\n\n", ""][..])), 1..6),
                                           noise in "[a-z .]{0,10}") {
        let mut text = noise.clone();
        text.push('\n');
        for (p, sep) in &parts {
            text.push_str(p);
            text.push_str(sep);
        }
        let escaped = format::escape(&text);
        prop_assert_eq!(forgeries_in(&escaped), Vec::<String>::new(), "{:?} -> {:?}", text, escaped);
        round_trips(&text);
    }

    /// Verifies ADR-0037: `escaped_prefix_len` says where, in the text as given, the escape's
    /// output reaches a length: the escape of the whole text fits exactly when all of it is
    /// covered; the covered prefix ends on a character boundary, grows with the length, and
    /// its own escape's length is close to the length asked for (the rules that look along a
    /// line may escape its last characters differently).
    #[test]
    fn escaped_prefix_len_follows_the_escape(
        text in "\\PC{0,60}|[\\x00-\\x7f\u{A0}\u{3000}\u{FF1C}:#=\\[\\]<>&\n-]{0,80}|([a-z]{1,8}[ \n]|#|User: |<b>|&|===\n|- ){0,20}",
        max in 0usize..200,
    ) {
        let whole = format::escape(&text).len();
        let n = format::escaped_prefix_len(&text, max);
        prop_assert!(text.is_char_boundary(n));
        prop_assert_eq!(n == text.len(), whole <= max, "{:?} within {}", text, max);
        prop_assert!(format::escaped_prefix_len(&text, max + 1) >= n);
        prop_assert!(format::escape(&text[..n]).len() <= max + 16, "{:?} within {}", text, max);
        if text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b' ') {
            prop_assert_eq!(n, max.min(text.len()));
        }
    }

    /// Verifies ADR-0037: `escaped_len` maps a prefix of a datamarked body back to
    /// the prefix of the escaping it was written from, checked against the escaping itself:
    /// datamarking that prefix of the escaping gives exactly the datamarked prefix, at every
    /// character boundary; for the plain escaping it is the identity, and base64 has none.
    #[test]
    fn escaped_len_maps_a_datamarked_prefix_to_the_escaping(
        text in "\\PC{0,60}|[\\x00-\\x7f\u{A0}\u{2C6}\u{3000}\u{FF1C}:#=\\[\\]<>&\n -]{0,80}|([a-z]{1,8}[ \n]|#|User: |<b>|&|===\n|- |  ){0,20}",
    ) {
        let escaped = format::escape(&text);
        let marked = format::encode_untrusted(&text, Encoding::Datamark);
        for len in (0..=marked.len()).filter(|l| marked.is_char_boundary(*l)) {
            let e = format::escaped_len(&marked, len, Encoding::Datamark).unwrap();
            prop_assert!(escaped.is_char_boundary(e));
            prop_assert_eq!(escaped[..e].replace(' ', "\u{2C6}"), &marked[..len], "{:?} at {}", text, len);
            prop_assert_eq!(format::escaped_len(&escaped, e, Encoding::Escaped), Some(e));
        }
        prop_assert_eq!(format::escaped_len(&marked, marked.len() + 1, Encoding::Datamark), None);
        prop_assert_eq!(format::escaped_len(&escaped, 0, Encoding::Base64), None);
    }

    /// Verifies I3: any text round-trips exactly, and unescape accepts only escape's output.
    #[test]
    fn any_text_round_trips(text in "\\PC{0,60}|[\\x00-\\x7f\u{A0}\u{2003}\u{3000}\u{FF1C}\u{FF1E}\u{3008}\u{304F}\u{FF1A}\u{FF3B}:#=\\[\\]<>&-]{0,60}") {
        round_trips(&text);
    }
}
