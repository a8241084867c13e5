//! Compact codes of vectors for the first, approximate pass of a vector search (ADR-0019).
//!
//! A ternary code keeps, for each component of a unit vector, only whether it is clearly
//! positive, clearly negative, or near zero (within [`TERNARY_THRESHOLD`] times the mean
//! absolute component). Two codes score `|P∧P'| + |N∧N'| − |P∧N'| − |N∧P'|`, which grows with
//! the dot product of the vectors. Codes of 256-dimensional vectors take 64 bytes instead of
//! 1 KiB, and PostgreSQL scores them with built-in bit functions. The approximate scores only
//! choose a pool of candidates ([`rerank_pool`]); the final ranking always uses the exact
//! vectors, so codes affect which memories are considered, never their order.

/// Components within this share of the mean absolute component count as zero.
pub const TERNARY_THRESHOLD: f32 = 0.5;

/// The two bit strings of a ternary code, as `0`/`1` text (PostgreSQL's `bit varying` input):
/// bit `i` of the first is set when component `i` is clearly positive, of the second when it
/// is clearly negative.
pub(crate) fn ternary_bits(v: &[f32]) -> (String, String) {
    let mean = v.iter().map(|x| x.abs()).sum::<f32>() / v.len().max(1) as f32;
    let t = mean * TERNARY_THRESHOLD;
    let mut pos = String::with_capacity(v.len());
    let mut neg = String::with_capacity(v.len());
    for x in v {
        pos.push(if *x > t { '1' } else { '0' });
        neg.push(if *x < -t { '1' } else { '0' });
    }
    (pos, neg)
}

/// A stored code: the positive bits followed by the negative bits.
pub(crate) fn ternary_code(v: &[f32]) -> String {
    let (pos, neg) = ternary_bits(v);
    pos + &neg
}

/// The two masks a query is scored with: `code & agree` has the bits where both vectors are
/// clearly positive or both clearly negative, `code & disagree` those where they differ in
/// sign, so the score is `bit_count(code & agree) - bit_count(code & disagree)`.
pub(crate) fn ternary_query(v: &[f32]) -> (String, String) {
    let (pos, neg) = ternary_bits(v);
    (pos.clone() + &neg, neg + &pos)
}

/// How many candidates the approximate pass keeps for exact ranking when a ranking needs
/// `n`: twenty times as many, and at least 1,000. Measured recall@10 against exact search is
/// in `docs/benchmarks.md`.
pub(crate) fn rerank_pool(n: usize) -> usize {
    n.saturating_mul(20).max(1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn and(x: &str, y: &str) -> i64 {
        x.bytes()
            .zip(y.bytes())
            .filter(|(p, q)| *p == b'1' && *q == b'1')
            .count() as i64
    }

    fn score(a: &(String, String), b: &(String, String)) -> i64 {
        and(&a.0, &b.0) + and(&a.1, &b.1) - and(&a.0, &b.1) - and(&a.1, &b.0)
    }

    #[test]
    fn stored_code_and_query_masks_give_the_same_score() {
        let a = [0.5f32, -0.4, 0.01, 0.3, -0.6, 0.0];
        let b = [0.45f32, 0.4, -0.2, 0.3, -0.1, -0.7];
        let code = ternary_code(&a);
        let (agree, disagree) = ternary_query(&b);
        assert_eq!(
            and(&code, &agree) - and(&code, &disagree),
            score(&ternary_bits(&a), &ternary_bits(&b))
        );
    }

    #[test]
    fn codes_keep_sign_and_drop_small_components() {
        let (p, n) = ternary_bits(&[0.9, -0.4, 0.01, 0.0, -0.02]);
        assert_eq!(p, "10000");
        assert_eq!(n, "01000");
    }

    #[test]
    fn code_scores_order_like_dot_products() {
        let a = ternary_bits(&[0.5, 0.5, -0.5, -0.5]);
        let same = ternary_bits(&[0.5, 0.5, -0.5, -0.5]);
        let half = ternary_bits(&[0.5, 0.5, 0.5, 0.5]);
        let opposite = ternary_bits(&[-0.5, -0.5, 0.5, 0.5]);
        assert!(score(&a, &same) > score(&a, &half));
        assert!(score(&a, &half) > score(&a, &opposite));
        assert_eq!(score(&a, &same), 4);
        assert_eq!(score(&a, &opposite), -4);
    }
}
