//! The in-process BM25 index the SQLite and PostgreSQL stores rank memories with (ADR-0029).
//!
//! Each store handle keeps it next to the vector codes and refreshes it from the same change
//! records, so a write from another process costs the changed rows only. Scores are exactly
//! SQLite FTS5's `bm25()` (negated, so larger is better): `k1 = 1.2`, `b = 0.75`, idf
//! `ln((N - df + 0.5) / (df + 0.5))` raised to `1e-6` when not positive, document length in
//! words, `N` and the average length over the live memories. A query reads only the posting
//! lists of its own terms, held as flat arrays of document numbers and term counts, so a
//! search over a million memories adds up a few hundred thousand postings in memory instead of
//! calling a ranking function per matching row in SQL.
//!
//! Documents are numbered in insertion order; a removed or replaced memory leaves a dead number
//! behind (its postings are skipped and no longer count in `df`), and the postings are
//! compacted when dead ones reach half of all postings.

use std::collections::HashMap;

use crate::snapshot::{SnapReader, SnapResult, SnapWriter, SnapshotError};
use crate::text::words;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Compaction waits until at least this many postings are dead.
const MIN_DEAD_FOR_COMPACTION: usize = 4_096;

#[derive(Debug, Default)]
struct Postings {
    docs: Vec<u32>,
    /// Term counts, saturated at 255; larger counts live in `LexicalIndex::big_tf`.
    tfs: Vec<u8>,
}

/// An inverted index of memory texts by the stores' row keys.
#[derive(Debug, Default)]
pub(crate) struct LexicalIndex {
    terms: HashMap<Box<str>, u32>,
    postings: Vec<Postings>,
    /// Per document number: the row key, its length in words, its number of distinct terms,
    /// and whether it is live.
    doc_key: Vec<i64>,
    doc_len: Vec<u32>,
    doc_terms: Vec<u32>,
    alive: Vec<bool>,
    by_key: HashMap<i64, u32>,
    /// `(term, document)` counts above 255.
    big_tf: HashMap<(u32, u32), u32>,
    total_len: u64,
    postings_total: usize,
    postings_dead: usize,
}

impl LexicalIndex {
    /// Live documents.
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Index `text` under `key`, replacing what was there.
    pub(crate) fn upsert(&mut self, key: i64, text: &str) {
        self.remove(key);
        let mut counts: HashMap<String, u32> = HashMap::new();
        let mut len = 0u32;
        for w in words(text) {
            len = len.saturating_add(1);
            *counts.entry(w).or_insert(0) += 1;
        }
        let Ok(doc) = u32::try_from(self.doc_key.len()) else {
            // Four billion documents numbered since the last compaction: compact first.
            self.compact();
            return self.upsert(key, text);
        };
        self.doc_key.push(key);
        self.doc_len.push(len);
        self.doc_terms
            .push(u32::try_from(counts.len()).unwrap_or(u32::MAX));
        self.alive.push(true);
        self.by_key.insert(key, doc);
        self.total_len += u64::from(len);
        for (w, tf) in counts {
            let next = u32::try_from(self.postings.len()).unwrap_or(u32::MAX);
            let t = *self.terms.entry(w.into_boxed_str()).or_insert(next);
            if t as usize == self.postings.len() {
                self.postings.push(Postings::default());
            }
            let p = &mut self.postings[t as usize];
            p.docs.push(doc);
            p.tfs.push(u8::try_from(tf).unwrap_or(u8::MAX));
            if tf > u32::from(u8::MAX) {
                self.big_tf.insert((t, doc), tf);
            }
            self.postings_total += 1;
        }
    }

    /// Remove `key` (nothing happens when it is not indexed).
    pub(crate) fn remove(&mut self, key: i64) {
        let Some(doc) = self.by_key.remove(&key) else {
            return;
        };
        let d = doc as usize;
        self.alive[d] = false;
        self.total_len -= u64::from(self.doc_len[d]);
        self.postings_dead += self.doc_terms[d] as usize;
        if self.postings_dead >= MIN_DEAD_FOR_COMPACTION
            && self.postings_dead * 2 >= self.postings_total
        {
            self.compact();
        }
    }

    /// Drop dead documents and their postings, renumbering the live ones in order.
    fn compact(&mut self) {
        let mut renumber = vec![u32::MAX; self.doc_key.len()];
        let mut next = 0u32;
        for (d, live) in self.alive.iter().enumerate() {
            if *live {
                renumber[d] = next;
                next += 1;
            }
        }
        let keep = |v: &[u32]| -> Vec<u32> {
            v.iter()
                .enumerate()
                .filter(|(d, _)| renumber[*d] != u32::MAX)
                .map(|(_, x)| *x)
                .collect()
        };
        self.doc_len = keep(&self.doc_len);
        self.doc_terms = keep(&self.doc_terms);
        self.doc_key = self
            .doc_key
            .iter()
            .enumerate()
            .filter(|(d, _)| renumber[*d] != u32::MAX)
            .map(|(_, k)| *k)
            .collect();
        self.alive = vec![true; next as usize];
        for doc in self.by_key.values_mut() {
            *doc = renumber[*doc as usize];
        }
        let mut total = 0;
        for p in &mut self.postings {
            let mut j = 0;
            for i in 0..p.docs.len() {
                let n = renumber[p.docs[i] as usize];
                if n != u32::MAX {
                    p.docs[j] = n;
                    p.tfs[j] = p.tfs[i];
                    j += 1;
                }
            }
            p.docs.truncate(j);
            p.tfs.truncate(j);
            p.docs.shrink_to_fit();
            p.tfs.shrink_to_fit();
            total += j;
        }
        self.big_tf = self
            .big_tf
            .iter()
            .filter_map(|(&(t, d), &tf)| {
                let n = renumber[d as usize];
                (n != u32::MAX).then_some(((t, n), tf))
            })
            .collect();
        self.postings_total = total;
        self.postings_dead = 0;
    }

    /// The `n` best of [`LexicalIndex::score`], plus any tied with the `n`-th (so that the
    /// caller can break ties by memory id), unordered.
    pub(crate) fn best(
        &self,
        terms: &[String],
        keep: impl Fn(i64) -> bool,
        n: usize,
    ) -> Vec<(i64, f64)> {
        let mut all = self.score(terms, keep);
        if n == 0 {
            return Vec::new();
        }
        if all.len() > n {
            all.select_nth_unstable_by(n - 1, |a, b| b.1.total_cmp(&a.1));
            let cut = all[n - 1].1;
            let (head, tail) = all.split_at_mut(n);
            let mut ties: Vec<(i64, f64)> = tail.iter().copied().filter(|x| x.1 == cut).collect();
            let mut out = head.to_vec();
            out.append(&mut ties);
            return out;
        }
        all
    }

    /// The BM25 scores (larger is better) of the live documents holding at least one of
    /// `terms` whose key passes `keep`, as `(key, score)`, unordered. `terms` should be
    /// distinct; a repeated term counts twice, as it does in an FTS5 query.
    pub(crate) fn score(&self, terms: &[String], keep: impl Fn(i64) -> bool) -> Vec<(i64, f64)> {
        let n = self.by_key.len();
        if n == 0 {
            return Vec::new();
        }
        let n_f = n as f64;
        let avg = self.total_len as f64 / n_f;
        let mut acc: HashMap<u32, f64> = HashMap::new();
        let mut dense: Vec<f64> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        // Past a few thousand matches a flat array indexed by document beats a hash map.
        let use_dense = {
            let matches: usize = terms
                .iter()
                .filter_map(|t| self.terms.get(t.as_str()))
                .map(|t| self.postings[*t as usize].docs.len())
                .sum();
            matches > 4_096
        };
        if use_dense {
            dense = vec![0.0; self.doc_key.len()];
        }
        for t in terms {
            let Some(&tid) = self.terms.get(t.as_str()) else {
                continue;
            };
            let p = &self.postings[tid as usize];
            let df = if self.postings_dead == 0 {
                p.docs.len()
            } else {
                p.docs.iter().filter(|d| self.alive[**d as usize]).count()
            };
            if df == 0 {
                continue;
            }
            let df = df as f64;
            let mut idf = ((n_f - df + 0.5) / (df + 0.5)).ln();
            if idf <= 0.0 {
                idf = 1e-6;
            }
            for (&doc, &tf8) in p.docs.iter().zip(&p.tfs) {
                let d = doc as usize;
                if !self.alive[d] || !keep(self.doc_key[d]) {
                    continue;
                }
                let tf = if tf8 == u8::MAX {
                    f64::from(
                        self.big_tf
                            .get(&(tid, doc))
                            .copied()
                            .unwrap_or(u32::from(u8::MAX)),
                    )
                } else {
                    f64::from(tf8)
                };
                let len = f64::from(self.doc_len[d]);
                let s = idf * (tf * (K1 + 1.0)) / (tf + K1 * (1.0 - B + B * len / avg));
                if use_dense {
                    if dense[d] == 0.0 {
                        touched.push(doc);
                    }
                    dense[d] += s;
                } else {
                    *acc.entry(doc).or_insert(0.0) += s;
                }
            }
        }
        if use_dense {
            touched
                .into_iter()
                .map(|d| (self.doc_key[d as usize], dense[d as usize]))
                .collect()
        } else {
            acc.into_iter()
                .map(|(d, s)| (self.doc_key[d as usize], s))
                .collect()
        }
    }
}

impl LexicalIndex {
    /// Write the index into a snapshot (ADR-0029).
    pub(crate) fn save(&self, w: &mut SnapWriter) -> SnapResult<()> {
        w.i64s(&self.doc_key)?;
        w.u32s(&self.doc_len)?;
        w.u32s(&self.doc_terms)?;
        w.blob(&self.alive.iter().map(|a| u8::from(*a)).collect::<Vec<_>>())?;
        let mut by_id: Vec<(&str, u32)> = self.terms.iter().map(|(t, i)| (&**t, *i)).collect();
        by_id.sort_by_key(|x| x.1);
        w.u64(by_id.len() as u64)?;
        for (t, i) in by_id {
            let p = &self.postings[i as usize];
            w.blob(t.as_bytes())?;
            w.u32s(&p.docs)?;
            w.blob(&p.tfs)?;
        }
        let big: Vec<u32> = self
            .big_tf
            .iter()
            .flat_map(|(&(t, d), &tf)| [t, d, tf])
            .collect();
        w.u32s(&big)
    }

    /// Read an index written by [`LexicalIndex::save`].
    pub(crate) fn load(r: &mut SnapReader) -> SnapResult<LexicalIndex> {
        let doc_key = r.i64s()?;
        let doc_len = r.u32s()?;
        let doc_terms = r.u32s()?;
        let alive: Vec<bool> = r.blob()?.into_iter().map(|b| b != 0).collect();
        let docs = doc_key.len();
        if doc_len.len() != docs || doc_terms.len() != docs || alive.len() != docs {
            return Err(SnapshotError::Invalid(
                "document arrays of different lengths",
            ));
        }
        let n_terms = r.u64()?;
        let mut terms = HashMap::new();
        let mut postings = Vec::new();
        let (mut total, mut dead) = (0usize, 0usize);
        for t in 0..n_terms {
            let name = String::from_utf8(r.blob()?)
                .map_err(|_| SnapshotError::Invalid("a term is not UTF-8"))?;
            let docs_of = r.u32s()?;
            let tfs = r.blob()?;
            if tfs.len() != docs_of.len() || docs_of.iter().any(|d| *d as usize >= docs) {
                return Err(SnapshotError::Invalid("a posting list is damaged"));
            }
            total += docs_of.len();
            dead += docs_of.iter().filter(|d| !alive[**d as usize]).count();
            let id = u32::try_from(t).map_err(|_| SnapshotError::Invalid("too many terms"))?;
            terms.insert(name.into_boxed_str(), id);
            postings.push(Postings { docs: docs_of, tfs });
        }
        let big = r.u32s()?;
        if big.len() % 3 != 0 {
            return Err(SnapshotError::Invalid("term counts are damaged"));
        }
        let big_tf = big.chunks_exact(3).map(|c| ((c[0], c[1]), c[2])).collect();
        let mut by_key = HashMap::new();
        let mut total_len = 0u64;
        for (d, live) in alive.iter().enumerate() {
            if *live {
                let doc =
                    u32::try_from(d).map_err(|_| SnapshotError::Invalid("too many documents"))?;
                if by_key.insert(doc_key[d], doc).is_some() {
                    return Err(SnapshotError::Invalid("a key is live twice"));
                }
                total_len += u64::from(doc_len[d]);
            }
        }
        Ok(LexicalIndex {
            terms,
            postings,
            doc_key,
            doc_len,
            doc_terms,
            alive,
            by_key,
            big_tf,
            total_len,
            postings_total: total,
            postings_dead: dead,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaced_and_removed_documents_stop_counting() {
        let mut ix = LexicalIndex::default();
        ix.upsert(1, "rust borrow checker");
        ix.upsert(2, "rust rust rust and a lot of other words");
        ix.upsert(3, "python garbage collector");
        let terms = vec!["rust".to_string(), "checker".to_string()];
        let mut s = ix.score(&terms, |_| true);
        s.sort_by(|a, b| b.1.total_cmp(&a.1));
        assert_eq!(s.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2]);
        ix.upsert(1, "python only");
        assert_eq!(ix.score(&terms, |_| true).len(), 1);
        ix.remove(2);
        assert!(ix.score(&terms, |_| true).is_empty());
        assert_eq!(ix.len(), 2);
        ix.remove(42);
        assert_eq!(ix.len(), 2);
    }

    #[test]
    fn best_keeps_ties_at_the_cut() {
        let mut ix = LexicalIndex::default();
        ix.upsert(1, "kiwi kiwi");
        for k in 2..6 {
            ix.upsert(k, "kiwi pear");
        }
        ix.upsert(9, "plum");
        let terms = vec!["kiwi".to_string()];
        let mut two: Vec<i64> = ix.best(&terms, |_| true, 2).iter().map(|x| x.0).collect();
        two.sort_unstable();
        assert_eq!(
            two,
            vec![1, 2, 3, 4, 5],
            "the four tied second-best all come back"
        );
        assert_eq!(ix.best(&terms, |_| true, 1)[0].0, 1);
        assert!(ix.best(&terms, |_| true, 0).is_empty());
    }

    #[test]
    fn compaction_keeps_scores() {
        let mut ix = LexicalIndex::default();
        for k in 0..3_000 {
            ix.upsert(k, &format!("alpha beta w{} w{}", k % 7, k % 11));
        }
        let terms = vec!["w3".to_string(), "w5".to_string()];
        for k in 0..2_500 {
            ix.remove(k);
        }
        let mut before = ix.score(&terms, |_| true);
        ix.compact();
        let mut after = ix.score(&terms, |_| true);
        before.sort_by_key(|x| x.0);
        after.sort_by_key(|x| x.0);
        assert_eq!(before, after);
        assert_eq!(ix.postings_dead, 0);
        assert_eq!(ix.doc_key.len(), 500);
    }

    #[test]
    fn term_counts_above_255_are_exact() {
        let mut ix = LexicalIndex::default();
        ix.upsert(1, &"x ".repeat(300));
        ix.upsert(2, &"x ".repeat(256));
        ix.upsert(3, "y");
        let s = ix.score(&["x".to_string()], |_| true);
        let get = |k| s.iter().find(|x| x.0 == k).unwrap().1;
        assert!(get(1) > get(2), "300 occurrences must outscore 256");
    }

    /// The scores against SQLite FTS5's own `bm25()` on a random corpus with replacements and
    /// deletions: the same documents in the same order, scores equal to 1e-9 (ADR-0029).
    #[test]
    fn scores_equal_fts5_bm25() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE VIRTUAL TABLE f USING fts5 (content, tokenize = 'unicode61');")
            .unwrap();
        let vocab: Vec<String> = (0..300).map(|i| format!("w{i}")).collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut ix = LexicalIndex::default();
        let text = |next: &mut dyn FnMut() -> u64| -> String {
            let len = 1 + next() % 40;
            (0..len)
                .map(|_| {
                    // Skewed: low word numbers are much more frequent.
                    let r = next() % 300;
                    vocab[((r * r) / 300) as usize].clone()
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        for k in 1..=2_000i64 {
            let t = text(&mut next);
            conn.execute(
                "INSERT INTO f (rowid, content) VALUES (?1, ?2)",
                rusqlite::params![k, t],
            )
            .unwrap();
            ix.upsert(k, &t);
        }
        for k in (1..=2_000i64).step_by(3) {
            if k % 2 == 0 {
                conn.execute("DELETE FROM f WHERE rowid = ?1", [k]).unwrap();
                ix.remove(k);
            } else {
                let t = text(&mut next);
                conn.execute(
                    "UPDATE f SET content = ?2 WHERE rowid = ?1",
                    rusqlite::params![k, t],
                )
                .unwrap();
                ix.upsert(k, &t);
            }
        }
        for q in 0..60 {
            let terms: Vec<String> = (0..1 + q % 5)
                .map(|_| vocab[(next() % 300) as usize].clone())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let fts_query = terms.join(" OR ");
            let mut stmt = conn
                .prepare("SELECT rowid, -bm25(f) FROM f WHERE f MATCH ?1")
                .unwrap();
            let mut want: Vec<(i64, f64)> = stmt
                .query_map([&fts_query], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let mut got = ix.score(&terms, |_| true);
            want.sort_by_key(|x| x.0);
            got.sort_by_key(|x| x.0);
            assert_eq!(
                want.iter().map(|x| x.0).collect::<Vec<_>>(),
                got.iter().map(|x| x.0).collect::<Vec<_>>(),
                "matching documents of `{fts_query}`"
            );
            for (w, g) in want.iter().zip(&got) {
                assert!(
                    (w.1 - g.1).abs() < 1e-9,
                    "`{fts_query}` doc {}: fts5 {} index {}",
                    w.0,
                    w.1,
                    g.1
                );
            }
        }
    }
}
