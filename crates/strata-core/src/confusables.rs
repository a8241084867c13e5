//! Unicode lookalikes of the wire format's structural characters (ADR-0009).
//!
//! A reader (a model or a person) takes `＜/strata:section＞` or `〈/strata:section〉` for a
//! closing tag, `［INST］` for a chat-template token and `＃` at the start of a line for a
//! heading, although no parser does. Escaping writes these characters as numeric entities, as
//! it does for `<` and `>`, so they never appear raw in untrusted text.
//!
//! The tables are not written by hand: they are every code point whose UTS #39 confusable
//! skeleton (the `unicode-security` crate's data), or whose NFKC form, is a structural
//! character. The test `tables_match_the_unicode_confusables_data` recomputes them over all of
//! Unicode and fails when the crate's data and these tables differ. The prototypes are ours:
//! `<`, `>`, and the angle-bracket ornaments U+276C/U+276D (whose skeleton class holds the CJK
//! and mathematical angle brackets U+3008/9, U+27E8/9 and U+2329/A); `[` and `]`; `#`; `:`.
//! The pipe is left out on purpose: its skeleton class is that of `l`, `1` and `I`.

use unicode_security::mixed_script::AugmentedScriptSet;

/// Lookalikes of `<`, `>` and the angle brackets. Escaped everywhere (see [`needs_entity`]).
pub(crate) const ANGLE: &[char] = &[
    '\u{02C2}',
    '\u{02C3}',
    '\u{1433}',
    '\u{1438}',
    '\u{16B2}',
    '\u{2039}',
    '\u{203A}',
    '\u{2329}',
    '\u{232A}',
    '\u{276C}',
    '\u{276D}',
    '\u{276E}',
    '\u{276F}',
    '\u{27E8}',
    '\u{27E9}',
    '\u{2D66}',
    '\u{3008}',
    '\u{3009}',
    '\u{304F}',
    '\u{3111}',
    '\u{31DB}',
    '\u{FE64}',
    '\u{FE65}',
    '\u{FF1C}',
    '\u{FF1E}',
    '\u{1032D}',
    '\u{16AEC}',
    '\u{16F3F}',
    '\u{1D236}',
    '\u{1D237}',
    '\u{21FE8}',
];

/// Lookalikes of `[` and `]`. Escaped everywhere.
pub(crate) const SQUARE: &[char] = &['\u{FE47}', '\u{FE48}', '\u{FF3B}', '\u{FF3D}'];

/// Lookalikes of `#`. Escaped everywhere.
pub(crate) const HASH: &[char] = &['\u{FE5F}', '\u{FF03}'];

/// Lookalikes of `:`. Escaped only where a colon is structural: after a label at the start of
/// a line (several are letters of living scripts, e.g. the Devanagari visarga U+0903).
pub(crate) const COLON: &[char] = &[
    '\u{02D0}',
    '\u{02F8}',
    '\u{0589}',
    '\u{05C3}',
    '\u{0703}',
    '\u{0704}',
    '\u{0831}',
    '\u{0903}',
    '\u{0A83}',
    '\u{1361}',
    '\u{1393}',
    '\u{16EC}',
    '\u{1803}',
    '\u{1809}',
    '\u{205A}',
    '\u{2236}',
    '\u{A4FD}',
    '\u{A789}',
    '\u{FE13}',
    '\u{FE30}',
    '\u{FE55}',
    '\u{FF1A}',
    '\u{1015B}',
    '\u{10AF5}',
    '\u{11002}',
    '\u{11082}',
    '\u{11182}',
    '\u{1123A}',
    '\u{115BE}',
    '\u{116AC}',
    '\u{11838}',
    '\u{11DD9}',
    '\u{1D108}',
];

fn in_table(table: &[char], c: char) -> bool {
    table.binary_search(&c).is_ok()
}

/// True for `:` and its lookalikes.
pub(crate) fn is_colon_like(c: char) -> bool {
    c == ':' || (!c.is_ascii() && in_table(COLON, c))
}

/// True for a character of the angle, square or hash tables (not the ASCII originals).
pub(crate) fn is_structural_lookalike(c: char) -> bool {
    !c.is_ascii() && (in_table(ANGLE, c) || in_table(SQUARE, c) || in_table(HASH, c))
}

/// True for `<`, `>` and their lookalikes (either direction: the table does not tell them
/// apart).
pub(crate) fn is_angle_like(c: char) -> bool {
    c == '<' || c == '>' || (!c.is_ascii() && in_table(ANGLE, c))
}

/// Whether `c`, between `prev` and `next`, reads as `<` or `>`: the ASCII characters, or a
/// lookalike that escaping writes as an entity there (see [`needs_entity`]).
pub(crate) fn reads_as_angle(c: char, prev: Option<char>, next: Option<char>) -> bool {
    c == '<' || c == '>' || (in_table(ANGLE, c) && needs_entity(c, prev, next))
}

/// Whether `c`, between `prev` and `next`, reads as a square bracket that may open something:
/// `[`, or a lookalike of either bracket (the table does not tell them apart) that escaping
/// writes as an entity there.
pub(crate) fn reads_as_square(c: char, prev: Option<char>, next: Option<char>) -> bool {
    c == '[' || (in_table(SQUARE, c) && needs_entity(c, prev, next))
}

/// Whether escaping writes `c` (with neighbours `prev` and `next` in the original text) as a
/// numeric entity because it looks like a structural character.
///
/// A few angle lookalikes are letters (Hiragana く U+304F, Bopomofo ㄑ U+3111, Canadian
/// syllabics ᐸ U+1438 ...). Inside a word of their own script they are letters, and escaping
/// them would mangle ordinary Japanese or Chinese text; standing next to anything else (ASCII,
/// a slash, a blank, another script) they are escaped like the rest.
pub(crate) fn needs_entity(c: char, prev: Option<char>, next: Option<char>) -> bool {
    if !is_structural_lookalike(c) {
        return false;
    }
    if !c.is_alphabetic() {
        return true;
    }
    let same_script_letter = |n: Option<char>| {
        n.is_some_and(|n| {
            if n.is_ascii() || !n.is_alphabetic() || is_structural_lookalike(n) {
                return false;
            }
            let mut s = AugmentedScriptSet::for_char(c);
            s.intersect_with(AugmentedScriptSet::for_char(n));
            !s.is_empty() && !s.is_all()
        })
    };
    !(same_script_letter(prev) || same_script_letter(next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicode_normalization::UnicodeNormalization as _;

    fn sorted(t: &[char]) -> bool {
        t.windows(2).all(|w| w[0] < w[1])
    }

    /// Verifies ADR-0009: the tables are exactly the code points whose UTS #39 skeleton or NFKC
    /// form is one of the prototypes, recomputed over all of Unicode from the maintained data.
    #[test]
    fn tables_match_the_unicode_confusables_data() {
        let classes: [(&[char], &[&str], &[&str]); 4] = [
            (ANGLE, &["<", ">", "\u{276C}", "\u{276D}"], &["<", ">"]),
            (SQUARE, &["[", "]"], &["[", "]"]),
            (HASH, &["#"], &["#"]),
            (COLON, &[":"], &[":"]),
        ];
        let mut found: [Vec<char>; 4] = Default::default();
        for cp in 0x80..=0x10_FFFFu32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            let mut buf = [0u8; 4];
            let s: &str = c.encode_utf8(&mut buf);
            let skeleton: String = unicode_security::skeleton(s).collect();
            let nfkc: String = s.nfkc().collect();
            for (i, (_, sks, nfs)) in classes.iter().enumerate() {
                if sks.contains(&skeleton.as_str()) || nfs.contains(&nfkc.as_str()) {
                    found[i].push(c);
                }
            }
        }
        for (i, (table, sks, _)) in classes.iter().enumerate() {
            assert!(sorted(table));
            assert_eq!(
                found[i].as_slice(),
                *table,
                "the lookalikes of {sks:?} changed in the Unicode data; update the table"
            );
        }
    }

    #[test]
    fn letters_inside_their_own_words_stay() {
        // く inside Japanese text is a letter; standing before a slash it is a forgery.
        assert!(!needs_entity('く', Some('行'), Some('。')));
        assert!(needs_entity('く', Some('\n'), Some('/')));
        assert!(needs_entity('ᐳ', Some('n'), Some('\n')));
        assert!(needs_entity('\u{FF1C}', Some('行'), Some('行')));
        assert!(needs_entity('\u{3008}', None, None));
        assert!(!needs_entity('a', None, None));
        assert!(
            !needs_entity('\u{0903}', None, None),
            "colons only in label position"
        );
        assert!(is_colon_like('\u{0903}') && is_colon_like(':'));
    }
}
