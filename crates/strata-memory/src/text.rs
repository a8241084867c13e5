//! Word splitting shared by the lexical index, the query builders and the hashing embedder.
//!
//! Words are maximal runs of alphanumeric characters, lower-cased. SQLite's `unicode61` and
//! PostgreSQL's `simple` configuration split text about the same way, so a query means the same
//! thing on every adapter.

/// The lower-cased words of `text`, in order.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The distinct words of a query, in first-seen order, at most `max`.
pub(crate) fn query_terms(query: &str, max: usize) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    words(query)
        .into_iter()
        .filter(|w| seen.insert(w.clone()))
        .take(max)
        .collect()
}

/// The most distinct words of a query used for lexical ranking.
pub(crate) const MAX_QUERY_TERMS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_non_alphanumerics_and_lowercases() {
        assert_eq!(
            words("Hello, wörld! x-ray 42"),
            vec!["hello", "wörld", "x", "ray", "42"]
        );
        assert_eq!(query_terms("a b A c b", 2), vec!["a", "b"]);
        assert!(words("  ...  ").is_empty());
    }
}
