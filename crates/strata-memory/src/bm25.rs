//! A small in-memory BM25 index, the lexical ranking of the in-memory store.
//!
//! Scores follow Okapi BM25 with `k1 = 1.2`, `b = 0.75` and the non-negative idf
//! `ln(1 + (N - df + 0.5) / (df + 0.5))`. SQLite's FTS5 `bm25()`, and the database stores'
//! in-process index that reproduces it (`lexical.rs`, ADR-0029), use
//! `ln((N - df + 0.5) / (df + 0.5))` raised to `1e-6` when not positive instead, so scores here,
//! and sometimes the order, differ from theirs.

use std::collections::HashMap;

use crate::text::words;

const K1: f64 = 1.2;
const B: f64 = 0.75;

#[derive(Debug, Default)]
struct Doc {
    len: u32,
    terms: HashMap<String, u32>,
}

/// An inverted index from words to documents with their term frequencies.
#[derive(Debug, Default)]
pub(crate) struct Bm25Index {
    docs: HashMap<u64, Doc>,
    postings: HashMap<String, HashMap<u64, u32>>,
    total_len: u64,
}

impl Bm25Index {
    /// Index `text` under `key`, replacing what was there.
    pub(crate) fn insert(&mut self, key: u64, text: &str) {
        self.remove(key);
        let mut doc = Doc::default();
        for w in words(text) {
            doc.len += 1;
            *doc.terms.entry(w).or_insert(0) += 1;
        }
        for (t, &tf) in &doc.terms {
            self.postings.entry(t.clone()).or_default().insert(key, tf);
        }
        self.total_len += u64::from(doc.len);
        self.docs.insert(key, doc);
    }

    /// Remove `key`.
    pub(crate) fn remove(&mut self, key: u64) {
        if let Some(doc) = self.docs.remove(&key) {
            self.total_len -= u64::from(doc.len);
            for t in doc.terms.keys() {
                if let Some(p) = self.postings.get_mut(t) {
                    p.remove(&key);
                    if p.is_empty() {
                        self.postings.remove(t);
                    }
                }
            }
        }
    }

    /// Documents that contain at least one of `terms` and pass `keep`, with their BM25 score
    /// (larger is better), unordered.
    pub(crate) fn score(&self, terms: &[String], keep: impl Fn(u64) -> bool) -> Vec<(u64, f64)> {
        let n = self.docs.len() as f64;
        if self.docs.is_empty() {
            return Vec::new();
        }
        let avg = (self.total_len as f64 / n).max(1.0);
        let mut acc: HashMap<u64, f64> = HashMap::new();
        for t in terms {
            let Some(post) = self.postings.get(t) else {
                continue;
            };
            let df = post.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for (&key, &tf) in post {
                if !keep(key) {
                    continue;
                }
                let len = f64::from(self.docs.get(&key).map_or(0, |d| d.len));
                let tf = f64::from(tf);
                let s = idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg));
                *acc.entry(key).or_insert(0.0) += s;
            }
        }
        acc.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rarer_terms_and_shorter_docs_score_higher() {
        let mut ix = Bm25Index::default();
        ix.insert(1, "rust borrow checker");
        ix.insert(
            2,
            "rust rust rust and a lot of other words about many things",
        );
        ix.insert(3, "python garbage collector");
        let terms = vec!["rust".to_string(), "checker".to_string()];
        let mut s = ix.score(&terms, |_| true);
        s.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        assert_eq!(s[0].0, 1);
        assert_eq!(s.len(), 2);
        ix.remove(1);
        let s = ix.score(&terms, |_| true);
        assert_eq!(s.len(), 1);
        assert!(ix.score(&terms, |k| k != 2).is_empty());
    }
}
