//! Names that strata writes into SQL text itself (PostgreSQL schema names), where a parameter
//! cannot stand: one rule, checked before any statement is built from the name.

/// What [`is_plain_identifier`] accepts, in words, for error messages.
pub const PLAIN_IDENTIFIER_RULE: &str =
    "1-63 characters of a-z, 0-9 and _, not starting with a digit";

/// True when `name` can be written into SQL unquoted and means exactly itself: 1-63 bytes of
/// lower-case ASCII letters, digits and `_`, not starting with a digit. Such a name needs no
/// quoting, is never a keyword-folding surprise and cannot close a statement.
pub fn is_plain_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::is_plain_identifier;

    #[test]
    fn only_plain_lower_case_names_pass() {
        for ok in ["strata", "_x", "a1_b2", &"a".repeat(63)] {
            assert!(is_plain_identifier(ok), "{ok}");
        }
        for bad in [
            "",
            "1abc",
            "Strata",
            "a-b",
            "a b",
            "a;drop",
            "a\"b",
            "é",
            &"a".repeat(64),
        ] {
            assert!(!is_plain_identifier(bad), "{bad}");
        }
    }
}
