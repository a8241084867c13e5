//! Compact int8 codes of vectors for the first, approximate pass of a vector search
//! (ADR-0019).
//!
//! Each vector is scaled so that its largest component is 127 and rounded; the scale is kept,
//! so `x ≈ code × scale`. A 256-dimension vector takes 256 bytes instead of 1 KiB, and code dot
//! products are integer sums that vectorise. The codes only choose a pool of candidates; the
//! final ranking always uses the exact vectors, so codes affect which memories are
//! considered, never their order.

use std::collections::{HashMap, HashSet};

use crate::long_term::MemoryId;
use crate::snapshot::{SnapReader, SnapResult, SnapWriter, SnapshotError};

/// Write the int8 code of `v` into `out` and return its scale (0 for a zero vector).
pub(crate) fn quantize(v: &[f32], out: &mut [i8]) -> f32 {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        out.iter_mut().for_each(|c| *c = 0);
        return 0.0;
    }
    let scale = max / 127.0;
    for (c, x) in out.iter_mut().zip(v) {
        *c = (x / scale).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// The int8 code of `v` as bytes (for a database column) and its scale.
#[cfg_attr(
    not(feature = "postgres"),
    allow(dead_code, reason = "used by the PostgreSQL store")
)]
pub(crate) fn code_bytes(v: &[f32]) -> (Vec<u8>, f32) {
    let mut c = vec![0i8; v.len()];
    let scale = quantize(v, &mut c);
    (c.into_iter().map(|x| x.to_le_bytes()[0]).collect(), scale)
}

/// Dot product of int8 codes, in integers: the plain row-by-row score the tests check the
/// blocked scan against.
#[cfg(test)]
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = [0i32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: i32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..16 {
            acc[k] += i32::from(x[k]) * i32::from(y[k]);
        }
    }
    acc.iter().sum::<i32>() + tail
}

/// How many candidates the int8 pass keeps for the exact ranking when a ranking needs `n`.
pub(crate) fn pool_size(n: usize) -> usize {
    n.saturating_mul(4).max(200)
}

/// Memories per block of the code layout: within a block the codes are stored dimension by
/// dimension (`LANES` bytes of dimension 0, then of dimension 1, ...), so a query adds up only
/// the dimensions where its own code is not zero, `LANES` memories at a time (ADR-0029).
const LANES: usize = 1024;

/// The int8 codes of every memory of a store, by the store's row key.
#[derive(Debug, Default)]
pub(crate) struct CodeCache {
    pub(crate) keys: Vec<i64>,
    pub(crate) ids: Vec<MemoryId>,
    /// Blocks of `LANES` memories, each `dims × LANES` bytes, dimension-major.
    codes: Vec<i8>,
    scales: Vec<f32>,
    pos: HashMap<i64, usize>,
}

impl CodeCache {
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The position of `key`, if it has a code.
    pub(crate) fn position(&self, key: i64) -> Option<usize> {
        self.pos.get(&key).copied()
    }

    /// Where byte `d` of the code at position `p` lives.
    fn at(dims: usize, p: usize, d: usize) -> usize {
        (p / LANES) * dims * LANES + d * LANES + p % LANES
    }

    /// Insert or replace a memory's code, computed from its vector.
    pub(crate) fn upsert(&mut self, dims: usize, key: i64, id: &MemoryId, v: &[f32]) {
        let mut c = vec![0i8; dims];
        let scale = quantize(v, &mut c);
        let p = self.slot(dims, key, id);
        for (d, x) in c.into_iter().enumerate() {
            self.codes[Self::at(dims, p, d)] = x;
        }
        self.scales[p] = scale;
    }

    /// Insert or replace a memory's code as stored (`code` has `dims` bytes).
    #[cfg_attr(
        not(feature = "postgres"),
        allow(dead_code, reason = "used by the PostgreSQL store")
    )]
    pub(crate) fn upsert_code(
        &mut self,
        dims: usize,
        key: i64,
        id: &MemoryId,
        code: &[u8],
        scale: f32,
    ) {
        let p = self.slot(dims, key, id);
        for (d, b) in code.iter().enumerate().take(dims) {
            self.codes[Self::at(dims, p, d)] = i8::from_le_bytes([*b]);
        }
        self.scales[p] = scale;
    }

    fn slot(&mut self, dims: usize, key: i64, id: &MemoryId) -> usize {
        match self.pos.get(&key) {
            Some(&p) => {
                self.ids[p] = id.clone();
                p
            }
            None => {
                let p = self.keys.len();
                self.pos.insert(key, p);
                self.keys.push(key);
                self.ids.push(id.clone());
                let blocks = p / LANES + 1;
                if self.codes.len() < blocks * dims * LANES {
                    self.codes.resize(blocks * dims * LANES, 0);
                }
                self.scales.push(0.0);
                p
            }
        }
    }

    pub(crate) fn remove(&mut self, dims: usize, key: i64) {
        let Some(p) = self.pos.remove(&key) else {
            return;
        };
        let last = self.keys.len() - 1;
        if p != last {
            let moved = self.keys[last];
            self.keys.swap(p, last);
            self.ids.swap(p, last);
            self.scales.swap(p, last);
            for d in 0..dims {
                self.codes[Self::at(dims, p, d)] = self.codes[Self::at(dims, last, d)];
            }
            self.pos.insert(moved, p);
        }
        for d in 0..dims {
            self.codes[Self::at(dims, last, d)] = 0;
        }
        self.keys.pop();
        self.ids.pop();
        self.scales.pop();
        self.codes
            .truncate(self.keys.len().div_ceil(LANES) * dims * LANES);
    }

    /// The positions of the `pool` memories (of those `allowed`, when given) whose codes score
    /// best against the query's vector, best first, ties by id. Only the dimensions where the
    /// query's code is not zero are read (ADR-0029): a short query's vector from the hashing
    /// embedder has a tenth of them, and a dense vector costs what a row-by-row scan does.
    pub(crate) fn candidates(
        &self,
        dims: usize,
        query: &[f32],
        allowed: Option<&HashSet<i64>>,
        pool: usize,
    ) -> Vec<usize> {
        if pool == 0 || self.keys.is_empty() {
            return Vec::new();
        }
        let mut qc = vec![0i8; dims];
        quantize(query, &mut qc);
        let active: Vec<(usize, i16)> = qc
            .iter()
            .enumerate()
            .filter(|(_, c)| **c != 0)
            .map(|(d, c)| (d, i16::from(*c)))
            .collect();
        let mut kept: Vec<(usize, f32)> = Vec::with_capacity(pool * 2 + LANES);
        let mut floor = f32::NEG_INFINITY;
        let n = self.keys.len();
        for (b, block) in self.codes.chunks_exact(dims * LANES).enumerate() {
            let mut acc = [0i32; LANES];
            // Two dimensions at a time in 16 bits: codes and query codes are within ±127, so
            // `q1 × c1 + q2 × c2` is at most 32,258 and cannot overflow an `i16`; the sum is
            // widened once per pair.
            let mut pairs = active.chunks_exact(2);
            for pair in &mut pairs {
                let ((d1, q1), (d2, q2)) = (pair[0], pair[1]);
                let c1 = &block[d1 * LANES..(d1 + 1) * LANES];
                let c2 = &block[d2 * LANES..(d2 + 1) * LANES];
                for ((a, x), y) in acc.iter_mut().zip(c1).zip(c2) {
                    *a += i32::from(i16::from(*x) * q1 + i16::from(*y) * q2);
                }
            }
            for &(d, q) in pairs.remainder() {
                let col = &block[d * LANES..(d + 1) * LANES];
                for (a, c) in acc.iter_mut().zip(col) {
                    *a += i32::from(i16::from(*c) * q);
                }
            }
            let base = b * LANES;
            for (j, a) in acc.iter().enumerate() {
                let p = base + j;
                if p >= n {
                    break;
                }
                let score = *a as f32 * self.scales[p];
                if score < floor || allowed.is_some_and(|s| !s.contains(&self.keys[p])) {
                    continue;
                }
                kept.push((p, score));
            }
            if kept.len() >= pool * 2 {
                kept = top_scored(kept, pool, &self.ids);
                floor = kept.last().map_or(f32::NEG_INFINITY, |x| x.1);
            }
        }
        top_scored(kept, pool, &self.ids)
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }
}

impl CodeCache {
    /// Write the cache into a snapshot (ADR-0029).
    pub(crate) fn save(&self, w: &mut SnapWriter) -> SnapResult<()> {
        w.i64s(&self.keys)?;
        w.f32s(&self.scales)?;
        let lens: Vec<u32> = self
            .ids
            .iter()
            .map(|i| u32::try_from(i.as_str().len()).unwrap_or(u32::MAX))
            .collect();
        w.u32s(&lens)?;
        let text: Vec<u8> = self.ids.iter().flat_map(|i| i.as_str().bytes()).collect();
        w.blob(&text)?;
        let codes: Vec<u8> = self.codes.iter().map(|c| c.to_le_bytes()[0]).collect();
        w.blob(&codes)
    }

    /// Read a cache written by [`CodeCache::save`] for `dims` dimensions.
    pub(crate) fn load(dims: usize, r: &mut SnapReader) -> SnapResult<CodeCache> {
        let keys = r.i64s()?;
        let scales = r.f32s()?;
        let lens = r.u32s()?;
        let text = r.blob()?;
        let codes: Vec<i8> = r
            .blob()?
            .into_iter()
            .map(|b| i8::from_le_bytes([b]))
            .collect();
        let n = keys.len();
        if scales.len() != n || lens.len() != n || codes.len() != n.div_ceil(LANES) * dims * LANES {
            return Err(SnapshotError::Invalid("code arrays of different lengths"));
        }
        let mut ids = Vec::with_capacity(n);
        let mut at = 0usize;
        for len in lens {
            let end = at
                .checked_add(len as usize)
                .filter(|e| *e <= text.len())
                .ok_or(SnapshotError::Invalid("memory ids run past their bytes"))?;
            let id = std::str::from_utf8(&text[at..end])
                .ok()
                .and_then(|s| MemoryId::new(s).ok())
                .ok_or(SnapshotError::Invalid("a memory id is not valid"))?;
            ids.push(id);
            at = end;
        }
        let pos: HashMap<i64, usize> = keys.iter().enumerate().map(|(p, k)| (*k, p)).collect();
        if pos.len() != n {
            return Err(SnapshotError::Invalid("a key appears twice"));
        }
        Ok(CodeCache {
            keys,
            ids,
            codes,
            scales,
            pos,
        })
    }
}

/// The best `n` of `scored`, best first, ties by memory id.
fn top_scored<S: PartialOrd + Copy>(
    mut scored: Vec<(usize, S)>,
    n: usize,
    ids: &[MemoryId],
) -> Vec<(usize, S)> {
    let cmp = |a: &(usize, S), b: &(usize, S)| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| ids[a.0].cmp(&ids[b.0]))
    };
    if n == 0 {
        return Vec::new();
    }
    if scored.len() > n {
        scored.select_nth_unstable_by(n - 1, cmp);
        scored.truncate(n);
    }
    scored.sort_by(cmp);
    scored
}

/// The positions of the best `n` scores, best first, ties by memory id.
pub(crate) fn top_positions<S: PartialOrd + Copy>(
    scored: Vec<(usize, S)>,
    n: usize,
    ids: &[MemoryId],
) -> Vec<usize> {
    top_scored(scored, n, ids)
        .into_iter()
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_codes_round_to_within_half_a_step() {
        let v = [0.5f32, -0.25, 0.0, 1.0e-3, -0.8];
        let mut c = [0i8; 5];
        let scale = quantize(&v, &mut c);
        assert_eq!(c, [79, -40, 0, 0, -127]);
        for (x, code) in v.iter().zip(c) {
            assert!((f32::from(code) * scale - x).abs() <= scale / 2.0 + 1e-7);
        }
        let mut z = [1i8; 3];
        assert_eq!(quantize(&[0.0; 3], &mut z), 0.0);
        assert_eq!(z, [0; 3]);
    }

    #[test]
    fn integer_dot_matches_a_plain_sum() {
        let a: Vec<i8> = (0..37).map(|i| (i * 7 % 255 - 127) as i8).collect();
        let b: Vec<i8> = (0..37).map(|i| (i * 13 % 255 - 127) as i8).collect();
        let plain: i32 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| i32::from(*x) * i32::from(*y))
            .sum();
        assert_eq!(dot_i8(&a, &b), plain);
    }

    #[test]
    fn cache_upserts_removes_and_ranks() {
        let id = |s: &str| MemoryId::new(s).unwrap();
        let mut c = CodeCache::default();
        c.upsert(2, 1, &id("a"), &[1.0, 0.0]);
        c.upsert(2, 2, &id("b"), &[0.0, 1.0]);
        c.upsert(2, 3, &id("c"), &[0.7, 0.7]);
        assert_eq!(c.candidates(2, &[1.0, 0.1], None, 2), vec![0, 2]);
        c.remove(2, 1);
        assert_eq!(c.len(), 2);
        let best = c.candidates(2, &[1.0, 0.1], None, 1);
        assert_eq!(c.ids[best[0]].as_str(), "c");
        let code = [127u8, 0];
        c.upsert_code(2, 2, &id("b"), &code, 1.0 / 127.0);
        let best = c.candidates(2, &[1.0, 0.0], None, 1);
        assert_eq!(c.ids[best[0]].as_str(), "b");
        let allowed: HashSet<i64> = [3].into_iter().collect();
        let best = c.candidates(2, &[1.0, 0.0], Some(&allowed), 5);
        assert_eq!(best.len(), 1);
    }

    /// The blocked, dimension-skipping scan chooses what a plain row-by-row scan of the same
    /// codes chooses, for sparse and dense queries, after replacements and removals that move
    /// codes between blocks (ADR-0029).
    #[test]
    fn blocked_scan_matches_a_row_by_row_scan() {
        let dims = 40;
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % 2_000) as f32 / 1_000.0 - 1.0
        };
        let id = |k: i64| MemoryId::new(format!("m{k:05}")).unwrap();
        let mut cache = CodeCache::default();
        let mut plain: HashMap<i64, Vec<f32>> = HashMap::new();
        for k in 0..1_000i64 {
            let v: Vec<f32> = (0..dims).map(|_| rnd()).collect();
            cache.upsert(dims, k, &id(k), &v);
            plain.insert(k, v);
        }
        for k in (0..1_000i64).step_by(7) {
            cache.remove(dims, k);
            plain.remove(&k);
        }
        for k in (3..1_000i64).step_by(11) {
            let v: Vec<f32> = (0..dims).map(|_| rnd()).collect();
            cache.upsert(dims, k, &id(k), &v);
            plain.insert(k, v);
        }
        // Extreme codes (every component ±127) against an extreme query: the 16-bit pair sums
        // reach their largest magnitude and must not overflow.
        for (k, sign) in [(5_000i64, 1.0f32), (5_001, -1.0)] {
            let v = vec![sign; dims];
            cache.upsert(dims, k, &id(k), &v);
            plain.insert(k, v);
        }
        assert_eq!(cache.len(), plain.len());
        for q in 0..22 {
            // Even queries are sparse (a few non-zero components), odd ones dense.
            let query: Vec<f32> = match q {
                20 => vec![1.0; dims],
                21 => vec![-1.0; dims],
                _ => (0..dims)
                    .map(|d| {
                        if q % 2 == 1 || d % 9 == q % 9 {
                            rnd()
                        } else {
                            0.0
                        }
                    })
                    .collect(),
            };
            let mut qc = vec![0i8; dims];
            quantize(&query, &mut qc);
            let mut want: Vec<(i64, f32)> = plain
                .iter()
                .map(|(k, v)| {
                    let mut c = vec![0i8; dims];
                    let scale = quantize(v, &mut c);
                    (*k, dot_i8(&qc, &c) as f32 * scale)
                })
                .collect();
            want.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| id(a.0).cmp(&id(b.0))));
            let got: Vec<i64> = cache
                .candidates(dims, &query, None, 25)
                .into_iter()
                .map(|p| cache.keys[p])
                .collect();
            let want: Vec<i64> = want.into_iter().take(25).map(|x| x.0).collect();
            assert_eq!(got, want, "query {q}");
        }
    }
}
