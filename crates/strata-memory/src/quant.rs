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
pub(crate) fn code_bytes(v: &[f32]) -> (Vec<u8>, f32) {
    let mut c = vec![0i8; v.len()];
    let scale = quantize(v, &mut c);
    (c.into_iter().map(|x| x.to_le_bytes()[0]).collect(), scale)
}

/// Dot product of int8 codes, in integers (sixteen independent sums vectorise).
pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
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

/// The int8 codes of every memory of a store, by the store's row key.
#[derive(Debug, Default)]
pub(crate) struct CodeCache {
    pub(crate) keys: Vec<i64>,
    pub(crate) ids: Vec<MemoryId>,
    codes: Vec<i8>,
    scales: Vec<f32>,
    pos: HashMap<i64, usize>,
}

impl CodeCache {
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Insert or replace a memory's code, computed from its vector.
    pub(crate) fn upsert(&mut self, dims: usize, key: i64, id: &MemoryId, v: &[f32]) {
        let p = self.slot(dims, key, id);
        self.scales[p] = quantize(v, &mut self.codes[p * dims..(p + 1) * dims]);
    }

    /// Insert or replace a memory's code as stored (`code` has `dims` bytes).
    pub(crate) fn upsert_code(
        &mut self,
        dims: usize,
        key: i64,
        id: &MemoryId,
        code: &[u8],
        scale: f32,
    ) {
        let p = self.slot(dims, key, id);
        for (c, b) in self.codes[p * dims..(p + 1) * dims].iter_mut().zip(code) {
            *c = i8::from_le_bytes([*b]);
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
                self.codes.resize((p + 1) * dims, 0);
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
            let (head, tail) = self.codes.split_at_mut(last * dims);
            head[p * dims..(p + 1) * dims].copy_from_slice(&tail[..dims]);
            self.pos.insert(moved, p);
        }
        self.keys.pop();
        self.ids.pop();
        self.scales.pop();
        self.codes.truncate(last * dims);
    }

    /// The positions of the `pool` memories (of those `allowed`, when given) whose codes score
    /// best against the query's vector, best first, ties by id.
    pub(crate) fn candidates(
        &self,
        dims: usize,
        query: &[f32],
        allowed: Option<&HashSet<i64>>,
        pool: usize,
    ) -> Vec<usize> {
        let mut qc = vec![0i8; dims];
        quantize(query, &mut qc);
        let scored: Vec<(usize, f32)> = self
            .codes
            .chunks_exact(dims)
            .enumerate()
            .filter(|(i, _)| allowed.is_none_or(|a| a.contains(&self.keys[*i])))
            .map(|(i, c)| (i, dot_i8(&qc, c) as f32 * self.scales[i]))
            .collect();
        top_positions(scored, pool, &self.ids)
    }
}

/// The positions of the best `n` scores, best first, ties by memory id.
pub(crate) fn top_positions(
    mut scored: Vec<(usize, f32)>,
    n: usize,
    ids: &[MemoryId],
) -> Vec<usize> {
    let cmp = |a: &(usize, f32), b: &(usize, f32)| {
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
    scored.into_iter().map(|(i, _)| i).collect()
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
}
