//! Long-term memory (layer 6): persistent memories with tags, owner agent and timestamps,
//! found again by hybrid search (BM25 and vector similarity merged by reciprocal rank fusion).
//!
//! Everything a search returns is untrusted content with provenance (ADR-0006, ADR-0012): the
//! record id, creation time and fused score travel with it into the section's provenance.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use strata_core::Content;

use crate::embed::Embedder;
use crate::error::{MemoryError, Result};
use crate::options::{check_label, check_name, StoreOptions};
use crate::working::MAX_LABEL_BYTES;

/// The constant `k` of reciprocal rank fusion: a document at rank `r` (from 1) in one ranking
/// adds `1 / (k + r)` to its fused score. 60 is the value from the original RRF study.
pub const RRF_K: u32 = 60;

/// The longest tag accepted, in bytes.
pub const MAX_TAG_BYTES: usize = 64;

/// A memory's id: 1-128 characters of `[A-Za-z0-9._:/-]`, so it can appear in section ids
/// and provenance records without escaping.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MemoryId(Arc<str>);

impl MemoryId {
    /// Validate an id.
    pub fn new(id: impl AsRef<str>) -> Result<MemoryId> {
        let id = id.as_ref();
        check_name("memory id", id, 128)?;
        Ok(MemoryId(Arc::from(id)))
    }

    /// A fresh id: `m-` followed by 12 hex digits of time and 12 of a hash of the time, the
    /// process and a counter, so ids sort roughly by creation and do not collide.
    pub fn generate(now_ms: i64) -> MemoryId {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut h = blake3::Hasher::new();
        h.update(&nanos.to_le_bytes());
        h.update(&std::process::id().to_le_bytes());
        h.update(&n.to_le_bytes());
        let hex = h.finalize().to_hex();
        let time = u64::try_from(now_ms).unwrap_or(0) & 0xffff_ffff_ffff;
        MemoryId(Arc::from(format!("m-{time:012x}{}", &hex[..12])))
    }

    /// The id derived from a memory's owner and text: `c-` and 24 hex digits of a BLAKE3
    /// hash of both. Importing the same memory twice gives the same id, so an import run again
    /// (after an interruption, say) replaces rather than duplicates (ADR-0019).
    pub fn derived(agent_id: &str, content: &str) -> MemoryId {
        let mut h = blake3::Hasher::new();
        h.update(b"strata-memory-id-v1\0");
        h.update(&(agent_id.len() as u64).to_le_bytes());
        h.update(agent_id.as_bytes());
        h.update(content.as_bytes());
        MemoryId(Arc::from(format!("c-{}", &h.finalize().to_hex()[..24])))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for MemoryId {
    type Error = MemoryError;
    fn try_from(s: String) -> Result<Self> {
        MemoryId::new(s)
    }
}

impl From<MemoryId> for String {
    fn from(id: MemoryId) -> String {
        id.0.to_string()
    }
}

/// A memory to store. With an id that exists already, `put` replaces that memory's content,
/// agent and tags and keeps its creation time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMemory {
    /// The id to store under; a fresh one is generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<MemoryId>,
    /// The agent the memory belongs to.
    pub agent_id: String,
    /// The text.
    pub content: String,
    /// Tags: 1-64 characters of `[A-Za-z0-9._:/-]` each; duplicates are removed.
    #[serde(default)]
    pub tags: Vec<String>,
}

impl NewMemory {
    /// A memory of `agent_id` with `content`, no id and no tags.
    pub fn new(agent_id: impl Into<String>, content: impl Into<String>) -> NewMemory {
        NewMemory {
            id: None,
            agent_id: agent_id.into(),
            content: content.into(),
            tags: Vec::new(),
        }
    }

    /// Store under this id.
    #[must_use]
    pub fn with_id(mut self, id: MemoryId) -> NewMemory {
        self.id = Some(id);
        self
    }

    /// Set the tags.
    #[must_use]
    pub fn with_tags<I, S>(mut self, tags: I) -> NewMemory
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryRecord {
    /// Its id.
    pub id: MemoryId,
    /// The agent it belongs to.
    pub agent_id: Arc<str>,
    /// The text.
    pub content: Content,
    /// Tags, sorted, without duplicates.
    pub tags: Vec<Arc<str>>,
    /// When it was first stored, Unix milliseconds.
    pub created_ms: i64,
    /// When it was last replaced, Unix milliseconds.
    pub updated_ms: i64,
}

/// Which memories `list` returns and in what slice. Order is by creation time, then id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListOptions {
    /// Only this agent's memories.
    pub agent_id: Option<String>,
    /// Only memories that carry every one of these tags.
    pub tags: Vec<String>,
    /// At most this many (all when `None`).
    pub limit: Option<usize>,
    /// Skip this many first.
    pub offset: usize,
}

impl ListOptions {
    /// Everything.
    pub fn all() -> ListOptions {
        ListOptions::default()
    }

    /// Only this agent's memories.
    #[must_use]
    pub fn agent(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// Only memories with all of these tags.
    #[must_use]
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// A page.
    #[must_use]
    pub fn page(mut self, offset: usize, limit: usize) -> Self {
        self.offset = offset;
        self.limit = Some(limit);
        self
    }
}

/// Which rankings a search uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// BM25 and vector similarity, fused by reciprocal rank (the default).
    #[default]
    Hybrid,
    /// BM25 only.
    Lexical,
    /// Vector similarity only.
    Vector,
}

/// What to search for and how many results to return.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SearchOptions {
    /// How many results to return (default 10).
    pub top_k: usize,
    /// Only this agent's memories.
    pub agent_id: Option<String>,
    /// Only memories that carry every one of these tags.
    pub tags: Vec<String>,
    /// Which rankings to use.
    pub mode: SearchMode,
    /// How many candidates each ranking contributes before fusion (default: the larger of
    /// 50 and 4 x `top_k`).
    pub candidates: Option<usize>,
    /// The RRF constant (default [`RRF_K`]).
    pub rrf_k: u32,
    /// Leave out of the vector ranking memories whose cosine similarity to the query is not
    /// above this (default: none left out).
    pub min_similarity: Option<f32>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            top_k: 10,
            agent_id: None,
            tags: Vec::new(),
            mode: SearchMode::Hybrid,
            candidates: None,
            rrf_k: RRF_K,
            min_similarity: None,
        }
    }
}

impl SearchOptions {
    /// The default options with `top_k` results.
    pub fn top(top_k: usize) -> SearchOptions {
        SearchOptions {
            top_k,
            ..SearchOptions::default()
        }
    }

    /// Only this agent's memories.
    #[must_use]
    pub fn agent(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// Only memories with all of these tags.
    #[must_use]
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Use these rankings.
    #[must_use]
    pub fn mode(mut self, mode: SearchMode) -> Self {
        self.mode = mode;
        self
    }

    /// Candidates per ranking before fusion.
    #[must_use]
    pub fn candidates(mut self, n: usize) -> Self {
        self.candidates = Some(n);
        self
    }

    /// Leave out of the vector ranking memories not more similar than `threshold`.
    #[must_use]
    pub fn min_similarity(mut self, threshold: f32) -> Self {
        self.min_similarity = Some(threshold);
        self
    }

    /// True when the vector ranking keeps a memory of this similarity.
    pub(crate) fn keeps_similarity(&self, similarity: f32) -> bool {
        self.min_similarity.is_none_or(|t| similarity > t)
    }

    /// The number of candidates each ranking contributes.
    pub fn candidate_count(&self) -> usize {
        self.candidates
            .unwrap_or_else(|| self.top_k.saturating_mul(4).max(50))
            .max(self.top_k)
    }
}

/// The largest `top_k` a search accepts.
pub const MAX_TOP_K: usize = 10_000;
/// The largest number of candidates per ranking a search accepts.
pub const MAX_CANDIDATES: usize = 100_000;

impl SearchOptions {
    /// Refuse options no store can honour: `top_k` above [`MAX_TOP_K`], candidates above
    /// [`MAX_CANDIDATES`], an agent filter with control characters (NUL among them), a
    /// similarity threshold that is not a number. Every adapter calls this first, so all
    /// answer [`MemoryError::Invalid`] rather than a database error (ADR-0019).
    pub(crate) fn check(&self) -> Result<()> {
        if self.top_k > MAX_TOP_K {
            return Err(MemoryError::invalid(
                "top_k",
                format!("{} is above the limit of {MAX_TOP_K}", self.top_k),
            ));
        }
        if let Some(c) = self.candidates.filter(|c| *c > MAX_CANDIDATES) {
            return Err(MemoryError::invalid(
                "candidates",
                format!("{c} is above the limit of {MAX_CANDIDATES}"),
            ));
        }
        if let Some(a) = &self.agent_id {
            check_label("agent id", a, MAX_LABEL_BYTES)?;
        }
        if self.min_similarity.is_some_and(f32::is_nan) {
            return Err(MemoryError::invalid(
                "min_similarity",
                "NaN is not a threshold; pass a number from -1 to 1",
            ));
        }
        Ok(())
    }
}

impl ListOptions {
    /// Refuse a limit or offset beyond what a database can page through, and an agent filter
    /// with control characters (ADR-0019).
    pub(crate) fn check(&self) -> Result<()> {
        let max = i64::MAX as u64;
        if self.limit.is_some_and(|l| l as u64 > max) {
            return Err(MemoryError::invalid(
                "limit",
                format!("must be at most {max}"),
            ));
        }
        if self.offset as u64 > max {
            return Err(MemoryError::invalid(
                "offset",
                format!("must be at most {max}"),
            ));
        }
        if let Some(a) = &self.agent_id {
            check_label("agent id", a, MAX_LABEL_BYTES)?;
        }
        Ok(())
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    /// The memory.
    pub record: MemoryRecord,
    /// The fused score (sum of `1 / (k + rank)` over the rankings that found it).
    pub score: f64,
    /// Its rank (from 1) in the BM25 ranking, if that ranking found it.
    pub lexical_rank: Option<u32>,
    /// Its rank (from 1) in the vector ranking, if that ranking found it.
    pub vector_rank: Option<u32>,
}

/// A store of long-term memories (layer 6).
pub trait LongTermMemory: Send + Sync {
    /// The store's name, used as the provenance name of sections built from it.
    fn store_name(&self) -> &str;

    /// The number of dimensions of the store's vectors.
    fn dims(&self) -> usize;

    /// Store a memory (insert, or replace when its id exists) and return it as stored.
    fn put(&self, memory: NewMemory) -> Result<MemoryRecord> {
        let mut stored = self.put_many(vec![memory])?;
        stored.pop().ok_or_else(|| MemoryError::Invalid {
            what: "put",
            reason: "the store returned no record for the memory".into(),
        })
    }

    /// Store several memories, all or none; adapters do it in one transaction.
    fn put_many(&self, memories: Vec<NewMemory>) -> Result<Vec<MemoryRecord>>;

    /// The memory with this id.
    fn get(&self, id: &MemoryId) -> Result<Option<MemoryRecord>>;

    /// Remove a memory; true if it existed.
    fn delete(&self, id: &MemoryId) -> Result<bool>;

    /// Memories by creation time, then id, filtered and sliced by `options`.
    fn list(&self, options: &ListOptions) -> Result<Vec<MemoryRecord>>;

    /// How many memories there are (of one agent, when given).
    fn count(&self, agent_id: Option<&str>) -> Result<usize>;

    /// Hybrid search: up to `options.candidate_count()` memories from BM25 over the text and
    /// as many from cosine similarity of vectors, fused by reciprocal rank
    /// (`k = options.rrf_k`, 60 by default), best first, at most `options.top_k`. Ties are
    /// broken by id, so the order is deterministic.
    fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<SearchHit>>;
}

/// Validated, normalised fields of a [`NewMemory`]: sorted unique tags.
/// Each memory's checked tags, and each memory's vector.
pub(crate) type PreparedBatch = (Vec<Vec<Arc<str>>>, Vec<Vec<f32>>);

/// Validate a batch of new memories and embed their texts: the common first step of every
/// adapter's `put_many`. Returns each memory's checked tags and its vector.
pub(crate) fn prepare_batch(
    opts: &StoreOptions,
    embedder: &dyn Embedder,
    memories: &[NewMemory],
) -> Result<PreparedBatch> {
    let tags = memories
        .iter()
        .map(|m| check_new_memory(opts, m))
        .collect::<Result<Vec<_>>>()?;
    let texts: Vec<&str> = memories.iter().map(|m| m.content.as_str()).collect();
    let vectors = crate::embed::embed_checked(embedder, &texts)?;
    Ok((tags, vectors))
}

pub(crate) fn check_new_memory(opts: &StoreOptions, m: &NewMemory) -> Result<Vec<Arc<str>>> {
    check_label("agent id", &m.agent_id, MAX_LABEL_BYTES)?;
    opts.check_size("memory", &m.content)?;
    check_tags(&m.tags)
}

/// Check one tag as a store would (letters, digits and `. _ : / -`, bounded length), so that a
/// command can refuse a bad tag before it starts an import instead of on every memory.
pub fn check_tag(tag: &str) -> Result<()> {
    check_name("tag", tag, MAX_TAG_BYTES)
}

/// Validate tags and return them sorted and deduplicated.
pub(crate) fn check_tags(tags: &[String]) -> Result<Vec<Arc<str>>> {
    let mut out: Vec<Arc<str>> = Vec::with_capacity(tags.len());
    for t in tags {
        check_name("tag", t, MAX_TAG_BYTES)?;
        out.push(Arc::from(t.as_str()));
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Fuse rankings by reciprocal rank. Each ranking lists keys best first. Returns
/// `(key, score, rank in each ranking)` best first; ties by key.
pub fn reciprocal_rank_fusion<K: Clone + Eq + std::hash::Hash + Ord>(
    rankings: &[&[K]],
    k: u32,
) -> Vec<(K, f64, Vec<Option<u32>>)> {
    let mut acc: HashMap<K, (f64, Vec<Option<u32>>)> = HashMap::new();
    for (which, ranking) in rankings.iter().enumerate() {
        for (i, key) in ranking.iter().enumerate() {
            let rank = u32::try_from(i + 1).unwrap_or(u32::MAX);
            let slot = acc
                .entry(key.clone())
                .or_insert_with(|| (0.0, vec![None; rankings.len()]));
            if slot.1[which].is_none() {
                slot.0 += 1.0 / (f64::from(k) + f64::from(rank));
                slot.1[which] = Some(rank);
            }
        }
    }
    let mut out: Vec<(K, f64, Vec<Option<u32>>)> =
        acc.into_iter().map(|(key, (s, r))| (key, s, r)).collect();
    out.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    });
    out
}

/// Fuse a lexical and a vector ranking of memory keys into hits for `options`.
pub(crate) fn fuse<K: Clone + Eq + std::hash::Hash + Ord>(
    lexical: &[K],
    vector: &[K],
    options: &SearchOptions,
) -> Vec<(K, f64, Option<u32>, Option<u32>)> {
    let fused = reciprocal_rank_fusion(&[lexical, vector], options.rrf_k);
    fused
        .into_iter()
        .take(options.top_k)
        .map(|(k, s, r)| (k, s, r[0], r[1]))
        .collect()
}

/// Cosine similarity of two vectors that are already L2-normalised (a dot product).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent sums let the compiler use vector instructions (a single running sum
    // must be added in order and cannot be).
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Scale a vector to unit length (a zero vector stays zero).
///
/// Finite components of any size are handled: the norm is taken in `f64`, where squares of
/// `f32` values cannot overflow, so a vector with components near `f32::MAX` is scaled to unit
/// length rather than left unnormalised (ADR-0019).
pub(crate) fn normalise(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    // Vectors already at unit length (up to rounding) are left as they are, so normalising
    // twice changes nothing.
    if norm > 0.0 && norm.is_finite() && (norm - 1.0).abs() > 1e-6 {
        for x in v.iter_mut() {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
}

/// The top `n` of `(key, score)` pairs (larger is better), best first, ties by key.
pub(crate) fn top_by_similarity<K: Ord + Clone, S: PartialOrd + Copy>(
    mut scored: Vec<(K, S)>,
    n: usize,
) -> Vec<K> {
    let cmp = |a: &(K, S), b: &(K, S)| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    };
    if scored.len() > n && n > 0 {
        scored.select_nth_unstable_by(n - 1, cmp);
        scored.truncate(n);
    } else if n == 0 {
        scored.clear();
    }
    scored.sort_by(cmp);
    scored.into_iter().map(|(k, _)| k).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_adds_reciprocal_ranks() {
        let a = ["x", "y", "z"];
        let b = ["z", "x"];
        let f = reciprocal_rank_fusion(&[&a[..], &b[..]], 60);
        assert_eq!(f[0].0, "x");
        assert!((f[0].1 - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-12);
        assert_eq!(f[0].2, vec![Some(1), Some(2)]);
        assert_eq!(f[1].0, "z");
        assert!((f[1].1 - (1.0 / 63.0 + 1.0 / 61.0)).abs() < 1e-12);
        assert_eq!(f[2].0, "y");
        assert_eq!(f[2].2, vec![Some(2), None]);
    }

    #[test]
    fn top_by_similarity_is_deterministic() {
        let v = vec![("b", 0.5), ("a", 0.5), ("c", 0.9), ("d", 0.1)];
        assert_eq!(top_by_similarity(v.clone(), 3), vec!["c", "a", "b"]);
        assert_eq!(top_by_similarity(v, 0), Vec::<&str>::new());
    }

    #[test]
    fn derived_ids_depend_on_owner_and_text_only() {
        let a = MemoryId::derived("ada", "the VPN is needed");
        assert_eq!(a, MemoryId::derived("ada", "the VPN is needed"));
        assert_ne!(a, MemoryId::derived("bob", "the VPN is needed"));
        assert_ne!(a, MemoryId::derived("ada", "the VPN is needed!"));
        // The owner's length is hashed, so moving a boundary changes the id.
        assert_ne!(MemoryId::derived("ab", "c"), MemoryId::derived("a", "bc"));
        assert!(MemoryId::new(a.as_str()).is_ok());
        assert_eq!(a.as_str().len(), 26);
    }

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let a = MemoryId::generate(1_700_000_000_000);
        let b = MemoryId::generate(1_700_000_000_000);
        assert_ne!(a, b);
        assert!(MemoryId::new(a.as_str()).is_ok());
        assert!(MemoryId::new("has space").is_err());
    }
}
