//! Exact counts of the tiktoken encodings (`o200k_base`, `cl100k_base`) in linear time, through
//! GitHub's `bpe-openai`, and the exact longest prefix within a budget (ADR-0020).
//!
//! `bpe-openai` splits text with the same pre-tokenizer as tiktoken and encodes each piece with
//! a BPE algorithm whose cost is linear in the piece, so no input (a megabyte of one letter, of
//! spaces, of base64) can stall or crash a count, and no input is cut before counting.

use std::collections::HashSet;
use std::fmt;
use std::sync::OnceLock;

use bpe_openai::appendable_encoder::AppendableEncoder;

use super::resume::Walker;
use super::{Prefix, Tokenizer};

/// Extra tokens granted to `bpe-openai`'s count-till-limit before its answer is compared with
/// the real limit. Its backtracking encoder may hold a few more tokens than the final encoding
/// while it searches; with this margin an early stop can only mean the text is over the limit.
const LIMIT_MARGIN: usize = 32;

/// How far above the remaining budget the cheap per-position estimate of a cut may lie and the
/// position still be checked exactly. The estimate differs from the exact count only where a
/// prefix of one pre-tokenizer piece is split differently (a cut inside a contraction such as
/// `'re`, or whitespace that joins the run before it); there it is off by a token or two.
const CUT_MARGIN: usize = 3;

/// How far before the start a suffix search found inside a piece it also tries each start (each
/// try is a count up to the budget, so this bounds a tail cut inside one long piece).
const SUFFIX_LOOKBACK_BYTES: usize = 64;

/// Bytes past the end of a longest prefix that the answer can depend on, runs of whitespace
/// aside: the few characters the pre-tokenizer's patterns read past a piece, with room to
/// spare (see `ResumableTokenizer::prefix_look_ahead`, ADR-0040).
const PREFIX_LOOK_AHEAD: usize = 64;

/// Bytes per token of the budget in the first window a suffix search splits at the end of a
/// long text: about what dense text takes (JSON logs and code 2.5-4 in o200k, CJK 1.5-3), less
/// than prose (about 4.5). A window that does not hold the suffix grows by half, and only the
/// part added is split (up to where its pieces meet the last window's), so the text split is
/// at most about half again what the suffix holds.
const SUFFIX_WINDOW_BYTES_PER_TOKEN: usize = 3;

/// How far below its budget a prefix search keeps the point it offers for resuming: a later
/// search with a budget up to this much smaller starts there instead of at the beginning.
const RESUME_SLACK: usize = 64;

/// Exact BPE counts with the encodings OpenAI models use, embedded (no network), linear in the
/// length of the text for every input. The encoders are process-wide singletons, built when the
/// first tokenizer of their encoding is made (about 60 ms); making more costs nothing.
///
/// Implements the exact counting of ADR-0020: ordinary encoding only, so special-token text is
/// counted as the characters it is; no segmenting; the exact longest prefix within a budget.
#[derive(Clone, Copy)]
pub struct TiktokenTokenizer {
    tok: &'static bpe_openai::Tokenizer,
    name: &'static str,
    longest_token: &'static OnceLock<usize>,
    /// The vocabulary's tokens short enough to be looked up, built on first use.
    lookup: &'static OnceLock<TokenSet>,
}

static O200K_LONGEST: OnceLock<usize> = OnceLock::new();
static CL100K_LONGEST: OnceLock<usize> = OnceLock::new();

/// The longest piece looked up whole. Longer pieces are rarely one token (runs of CJK, long
/// identifiers, base64), so they go to the encoder without a lookup that would miss. A piece
/// this short is its own key in the lookup, with its length (see [`piece_key`]).
const LOOKUP_MAX_PIECE: usize = 15;

/// The key of a piece of at most [`LOOKUP_MAX_PIECE`] bytes: its bytes, then zeros, with its
/// length in the last byte, so that two pieces have the same key only if they are equal. The
/// lookup holds keys rather than references to the vocabulary's bytes: a search reads one slot
/// of the table and compares two integers, instead of following a pointer to compare bytes.
///
/// Read with (possibly overlapping) loads of the piece's first and last bytes rather than
/// copied into a buffer and read back, which would stall the read on the copy;
/// [`piece_key_by_copy`] is that definition, and the tests hold the two equal.
fn piece_key(piece: &[u8]) -> u128 {
    let n = piece.len();
    debug_assert!(n <= LOOKUP_MAX_PIECE);
    let lo = |bytes: &[u8]| -> u64 {
        // The first eight bytes, or fewer: the bytes at their places, zeros after.
        match bytes.len() {
            0 => 0,
            1 => u64::from(bytes[0]),
            2..=3 => {
                let head = u64::from(u16::from_le_bytes([bytes[0], bytes[1]]));
                let t = bytes.len() - 2;
                head | u64::from(u16::from_le_bytes([bytes[t], bytes[t + 1]])) << (8 * t)
            }
            4..=7 => {
                let head = u64::from(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]));
                let t = bytes.len() - 4;
                let tail = [bytes[t], bytes[t + 1], bytes[t + 2], bytes[t + 3]];
                head | u64::from(u32::from_le_bytes(tail)) << (8 * t)
            }
            _ => u64::from_le_bytes(eight(bytes, 0)),
        }
    };
    // Past eight bytes, the last eight, shifted down past the ones the low half holds.
    let high = if n <= 8 {
        0
    } else {
        u64::from_le_bytes(eight(piece, n - 8)) >> (8 * (16 - n))
    };
    u128::from(high | (n as u64) << 56) << 64 | u128::from(lo(piece))
}

/// The eight bytes of `bytes` from `at`.
fn eight(bytes: &[u8], at: usize) -> [u8; 8] {
    let mut out = [0u8; 8];
    out.copy_from_slice(&bytes[at..at + 8]);
    out
}

/// [`piece_key`] by its definition: the piece copied into sixteen zero bytes, its length in
/// the last.
#[cfg(test)]
fn piece_key_by_copy(piece: &[u8]) -> u128 {
    let mut key = [0u8; 16];
    key[..piece.len()].copy_from_slice(piece);
    key[15] = piece.len() as u8;
    u128::from_le_bytes(key)
}

/// The keys ([`piece_key`]) of the tokens of at most [`LOOKUP_MAX_PIECE`] bytes of an encoding.
///
/// tiktoken looks a pre-tokenizer piece up whole before merging anything, and takes it as one
/// token when it is in the vocabulary. Most words of prose, code and JSON are, so with this
/// lookup their count is one hash lookup rather than a run of the BPE encoder, which allocates
/// its state and searches its automaton for every piece (ADR-0020). It is built with the first
/// count of its encoding and used for every count after that, so a count takes the same path
/// whatever the process counted before (ADR-0040).
type TokenSet = HashSet<u128, foldhash::fast::RandomState>;

/// The [`TokenSet`] of `tok`'s vocabulary.
fn token_set(tok: &bpe_openai::Tokenizer) -> TokenSet {
    let bpe = &tok.bpe;
    let mut tokens =
        HashSet::with_capacity_and_hasher(bpe.num_tokens(), foldhash::fast::RandomState::default());
    tokens.extend(
        (0..bpe.num_tokens())
            .filter_map(|id| u32::try_from(id).ok())
            .map(|id| bpe.token_bytes(id))
            .filter(|t| t.len() <= LOOKUP_MAX_PIECE)
            .map(piece_key),
    );
    tokens
}

static O200K_LOOKUP: OnceLock<TokenSet> = OnceLock::new();
static CL100K_LOOKUP: OnceLock<TokenSet> = OnceLock::new();

impl fmt::Debug for TiktokenTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TiktokenTokenizer")
            .field("name", &self.name)
            .finish()
    }
}

impl TiktokenTokenizer {
    /// `o200k_base` (GPT-4o and later).
    pub fn o200k() -> TiktokenTokenizer {
        TiktokenTokenizer {
            tok: bpe_openai::o200k_base(),
            name: "o200k_base",
            longest_token: &O200K_LONGEST,
            lookup: &O200K_LOOKUP,
        }
    }

    /// `cl100k_base` (GPT-4, GPT-3.5).
    pub fn cl100k() -> TiktokenTokenizer {
        TiktokenTokenizer {
            tok: bpe_openai::cl100k_base(),
            name: "cl100k_base",
            longest_token: &CL100K_LONGEST,
            lookup: &CL100K_LOOKUP,
        }
    }

    /// By encoding name.
    pub fn by_name(name: &str) -> Option<TiktokenTokenizer> {
        match name {
            "o200k_base" | "o200k" => Some(Self::o200k()),
            "cl100k_base" | "cl100k" => Some(Self::cl100k()),
            _ => None,
        }
    }

    /// The token ids of `text`, encoded as ordinary text. Counting never needs them; they are
    /// exposed so that tests can compare encodings, not only counts, with a reference.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.tok.encode(text)
    }

    /// Builds the encoder and its vocabulary's lookup now rather than when first needed
    /// (about 60 ms and 10 ms in a release build), for processes that want that cost outside
    /// their first assemblies.
    pub fn warm_up(&self) {
        self.count("");
        self.longest_token();
        self.tokens();
    }

    /// Whether what [`TiktokenTokenizer::warm_up`] builds is built: the encoder, the longest
    /// token's length and the vocabulary's lookup.
    pub fn is_warm(&self) -> bool {
        self.longest_token.get().is_some() && self.lookup.get().is_some()
    }

    /// The vocabulary's lookup, built now if it is not yet.
    fn tokens(&self) -> &'static TokenSet {
        self.lookup.get_or_init(|| token_set(self.tok))
    }

    /// Bytes in the longest token of the vocabulary: no token covers more, so a text of `n`
    /// bytes has at least `n / longest` tokens.
    fn longest_token(&self) -> usize {
        *self.longest_token.get_or_init(|| {
            let bpe = &self.tok.bpe;
            (0..bpe.num_tokens())
                .filter_map(|id| u32::try_from(id).ok())
                .map(|id| bpe.token_len(id))
                .max()
                .unwrap_or(1)
                .max(1)
        })
    }

    /// Whether `piece` is, whole, one token of the vocabulary; false for pieces too long to be
    /// looked up, which the encoder counts.
    fn is_token(&self, piece: &str) -> bool {
        piece.len() <= LOOKUP_MAX_PIECE && self.tokens().contains(&piece_key(piece.as_bytes()))
    }

    /// The count of one pre-tokenizer piece: one if the piece is a token of the vocabulary,
    /// as tiktoken takes it, else what the BPE encoder makes of it.
    fn piece_count(&self, piece: &str) -> usize {
        if self.is_token(piece) {
            1
        } else {
            self.tok.bpe.count(piece.as_bytes())
        }
    }

    /// The count of `text`: its pieces, each looked up whole and otherwise encoded.
    fn count_pieces(&self, text: &str) -> usize {
        self.tok.split(text).map(|p| self.piece_count(p)).sum()
    }

    /// The count of `text[p..]` if it is at most `limit`: its own pieces up to where one ends
    /// on a boundary in `starts` (a walk over a window ending with the text), then the count
    /// from that boundary, `from_here` (see [`Tokenizer::suffix`]).
    fn count_from(
        &self,
        text: &str,
        p: usize,
        starts: &[usize],
        from_here: &[usize],
        limit: usize,
    ) -> Option<usize> {
        let rest = &text[p..];
        let mut used = 0usize;
        for piece in self.tok.split(rest) {
            used += self.piece_up_to(piece, limit.checked_sub(used)?)?;
            let end = p + (piece.as_ptr() as usize - rest.as_ptr() as usize) + piece.len();
            if let Ok(j) = starts.binary_search(&end) {
                let total = used + from_here[j];
                return (total <= limit).then_some(total);
            }
        }
        Some(used)
    }

    /// The count of one pre-tokenizer piece if it is at most `room`.
    fn piece_up_to(&self, piece: &str, room: usize) -> Option<usize> {
        if self.is_token(piece) {
            return (room >= 1).then_some(1);
        }
        self.tok
            .bpe
            .count_till_limit(piece.as_bytes(), room.saturating_add(LIMIT_MARGIN))
            .filter(|&n| n <= room)
    }

    /// The longest fitting prefix of `text` that ends inside `text[start..end]`, given that
    /// `text[..start]` holds `before` tokens and that every longer prefix is over the budget.
    ///
    /// A cheap estimate of the count of every prefix of the region comes from appending its
    /// bytes, piece by piece, to an incremental BPE encoder (amortised constant time a byte).
    /// Positions are then tried from the longest down; each one whose estimate is within
    /// [`CUT_MARGIN`] of the budget is counted exactly, and the first that fits is the answer.
    fn prefix_in_region(
        &self,
        text: &str,
        start: usize,
        end: usize,
        before: usize,
        max: usize,
    ) -> Prefix {
        let room = max - before;
        let region = &text[start..end];
        // A prefix of more than (room + margin) * longest bytes cannot fit: skip estimating it.
        let window = region
            .len()
            .min((room + CUT_MARGIN + 1).saturating_mul(self.longest_token()));
        let mut estimate: Vec<usize> = Vec::with_capacity(window + 1);
        estimate.push(0);
        // The pieces of the region as (end, whether a cut inside may split it differently).
        let mut pieces: Vec<(usize, Split)> = Vec::new();
        let mut base = 0usize;
        for piece in self.tok.split(region) {
            let mut enc = AppendableEncoder::new(&self.tok.bpe);
            for &b in piece.as_bytes() {
                if estimate.len() > window {
                    break;
                }
                enc.push(b);
                estimate.push(base + enc.token_count());
            }
            pieces.push((estimate.len() - 1, may_split(piece)));
            if estimate.len() > window {
                break;
            }
            base += enc.token_count();
        }
        // Exact checks cost the length of the prefix they count; past this much work (a last
        // resort that no known input reaches since whitespace with breaks is counted at every
        // cut at once, `blank_cut`), the rest is a bisection.
        let mut work_left = 8 * estimate.len() + 4_096;
        while let Some((piece_end, mut split)) = pieces.pop() {
            let piece_start = pieces.last().map_or(0, |&(end, _)| end);
            if split == Split::BlankWithBreaks {
                match self.blank_cut(region, &estimate, piece_start, piece_end, room) {
                    BlankCut::Fits(i, n) => {
                        return Prefix {
                            len: start + i,
                            tokens: before + n,
                        }
                    }
                    BlankCut::NoneFits => continue,
                    // Not as the pre-tokenizer was expected to split it: check every cut.
                    BlankCut::Unexpected => split = Split::Anywhere,
                }
            }
            for i in (piece_start + 1..=piece_end).rev() {
                // An estimate over the budget is exact, unless a cut here can split the piece
                // or join its first character to whitespace before it.
                let risky = match split {
                    Split::Anywhere => true,
                    // Only a cut within a contraction's few bytes after its apostrophe.
                    Split::AfterApostrophe => region.as_bytes()
                        [(i.saturating_sub(APOSTROPHE_REACH)).max(piece_start)..i]
                        .contains(&b'\''),
                    Split::Never => false,
                    Split::BlankWithBreaks => true,
                } || i - piece_start <= 4;
                let over = estimate[i] > room;
                if (over && (!risky || estimate[i] > room + CUT_MARGIN))
                    || !region.is_char_boundary(i)
                {
                    continue;
                }
                if work_left < i {
                    return self.bisect(region, i, start, before, room);
                }
                work_left -= i;
                if let Some(n) = self.count_up_to(&region[..i], room) {
                    return Prefix {
                        len: start + i,
                        tokens: before + n,
                    };
                }
            }
        }
        Prefix {
            len: start,
            tokens: before,
        }
    }
}

/// The outcome of [`TiktokenTokenizer::blank_cut`].
enum BlankCut {
    /// The longest fitting cut inside the piece (bytes of the region) and its tokens.
    Fits(usize, usize),
    /// No cut inside the piece fits.
    NoneFits,
    /// The count of the longest cut the piece's split predicts was not the exact count.
    Unexpected,
}

impl TiktokenTokenizer {
    /// The longest fitting cut of the region inside one piece of whitespace holding line
    /// breaks, `region[piece_start..piece_end]`, from the count of every cut at once.
    ///
    /// Such a piece ends with a break, and a cut of it is, for the pre-tokenizer, the run up to
    /// its last break (one piece) and the blanks after it (another), while the pieces before it
    /// stay as they are (the one before ends in something other than whitespace, or in breaks
    /// taken by punctuation). So the count of a cut at `i` is the count before the piece, plus
    /// the BPE count of the piece up to its last break before `i` (the estimate there, which is
    /// exact inside one piece), plus the BPE count of the blanks from that break to `i` (an
    /// incremental encoder restarted at each break): linear in the piece, where checking each
    /// cut near the budget by counting it costs its length and once ran out of its work limit.
    /// The cut found is counted exactly before it is returned; should that count differ, the
    /// caller checks the piece cut by cut instead.
    fn blank_cut(
        &self,
        region: &str,
        estimate: &[usize],
        piece_start: usize,
        piece_end: usize,
        room: usize,
    ) -> BlankCut {
        let bytes = region.as_bytes();
        let mut best = None;
        let mut last_break = piece_start;
        let mut blanks = AppendableEncoder::new(&self.tok.bpe);
        for i in piece_start + 1..=piece_end {
            let b = bytes[i - 1];
            let n = if b == b'\n' || b == b'\r' {
                last_break = i;
                blanks = AppendableEncoder::new(&self.tok.bpe);
                estimate[i]
            } else {
                blanks.push(b);
                estimate[last_break] + blanks.token_count()
            };
            if n <= room && region.is_char_boundary(i) {
                best = Some((i, n));
            }
        }
        let Some((i, n)) = best else {
            return BlankCut::NoneFits;
        };
        match self.count_up_to(&region[..i], room) {
            Some(exact) if exact == n => BlankCut::Fits(i, n),
            _ => {
                tracing::debug!(
                    at = i,
                    "a cut inside whitespace with line breaks counted other than predicted"
                );
                BlankCut::Unexpected
            }
        }
    }
}

impl TiktokenTokenizer {
    /// The longest prefix of `region[..hi]` that fits `room` tokens by bisection over character
    /// boundaries, counted exactly: it always fits, and it is the longest wherever counts grow
    /// with the prefix, which holds for all but a few cuts.
    fn bisect(&self, region: &str, hi: usize, start: usize, before: usize, room: usize) -> Prefix {
        let (mut lo, mut lo_tokens, mut hi) = (0usize, 0usize, hi);
        while lo < hi {
            let mut mid = lo + (hi - lo).div_ceil(2);
            while !region.is_char_boundary(mid) {
                mid -= 1;
            }
            if mid <= lo {
                break;
            }
            match self.count_up_to(&region[..mid], room) {
                Some(n) => (lo, lo_tokens) = (mid, n),
                None => hi = mid - 1,
            }
        }
        Prefix {
            len: start + lo,
            tokens: before + lo_tokens,
        }
    }
}

/// Where a cut inside a pre-tokenizer piece may split the prefix into more than one piece, so
/// that the count of the prefix is not the BPE count of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Split {
    /// At no cut (but one within the piece's first few bytes, checked anyway): among others,
    /// whitespace without a line break, which stays one piece however it is cut.
    Never,
    /// At a cut within [`APOSTROPHE_REACH`] bytes after an apostrophe: inside a contraction
    /// that ends a run of letters (`they'r` is `they`, `'r`). Anywhere else a prefix of such a
    /// piece is one piece: letters of one shape (capitals then small letters, with or without
    /// a leading character) stay one run when cut, as do runs of punctuation, which may hold
    /// apostrophes.
    AfterApostrophe,
    /// At any cut, in a known way: whitespace that holds a line break (` \n ` is ` \n` and
    /// ` `) splits into the run up to its last break and the blanks after it
    /// ([`TiktokenTokenizer::blank_cut`]).
    BlankWithBreaks,
    /// At any cut: letters that mix capitals with letters of
    /// no case or marks (o200k_base takes `我们用AI的GPT模型` whole, but cut after `GPT` it is
    /// `我们用AI的` and `GPT`); and short pieces, checked anyway since that costs little. A
    /// piece that is not whitespace holds line breaks only at its end (punctuation followed
    /// by breaks), and any start of it is one piece.
    Anywhere,
}

/// Bytes after an apostrophe within which a cut may fall inside a contraction (`'re`, `'ve`,
/// `'ll` are the longest, 3 bytes), with a byte to spare.
const APOSTROPHE_REACH: usize = 4;

/// How a cut inside `piece` may split it (see [`Split`]). With the tiktoken patterns a piece
/// splits differently when cut only inside a contraction, and inside whitespace with a break.
fn may_split(piece: &str) -> Split {
    if is_blank(piece) {
        if piece.contains(['\n', '\r']) {
            Split::BlankWithBreaks
        } else {
            Split::Never
        }
    } else if piece.len() <= 32 || mixes_capitals_and_caseless(piece) {
        Split::Anywhere
    } else if piece.contains('\'') {
        Split::AfterApostrophe
    } else {
        Split::Never
    }
}

/// Whether `piece` holds a capital and a character outside ASCII that is neither capital nor
/// small (a letter without case, a modifier letter, a mark, or anything else: a superset of
/// what the o200k_base pattern lets stand on both sides of its capitals). Its letter pattern
/// prefers a match that ends before a run of capitals, so a cut can split such a run.
fn mixes_capitals_and_caseless(piece: &str) -> bool {
    piece.chars().any(char::is_uppercase)
        && piece
            .chars()
            .any(|c| !c.is_ascii() && !c.is_uppercase() && !c.is_lowercase())
}

/// Whether a pre-tokenizer piece is whitespace only (the regex's `\s`, Unicode White_Space).
fn is_blank(piece: &str) -> bool {
    piece.chars().all(char::is_whitespace)
}

impl Tokenizer for TiktokenTokenizer {
    fn name(&self) -> &str {
        self.name
    }

    fn count(&self, text: &str) -> usize {
        // ADR-0020: ordinary encoding, so special-token text counts as plain text.
        self.count_pieces(text)
    }

    fn warm_up(&self) {
        TiktokenTokenizer::warm_up(self);
    }

    fn count_up_to(&self, text: &str, limit: usize) -> Option<usize> {
        let mut used = 0usize;
        for piece in self.tok.split(text) {
            used += self.piece_up_to(piece, limit - used)?;
        }
        Some(used)
    }

    /// [`Tokenizer::suffix`] from the end of the text, in time that follows the budget rather
    /// than the text (ADR-0037).
    ///
    /// The pre-tokenizer decides each piece from its start onwards and looks nowhere behind,
    /// so a walk over a window at the end of the text gives, for each of its piece boundaries,
    /// the exact count of the suffix that starts there: the text from there is split into the
    /// same pieces. Pieces are counted from the last one backwards, each only up to one past
    /// the budget, and no further than where the suffix is over it (every suffix from further
    /// back is over too). The window starts at [`SUFFIX_WINDOW_BYTES_PER_TOKEN`] bytes per
    /// token of budget (at least 256) and grows by half until the suffix from its start is
    /// over the budget, or it holds the whole text, which then fits; each growth splits only
    /// the bytes added, up to where its pieces end on a boundary of the window before (from
    /// there the two are the same text split from the same point), and counts only its new
    /// pieces. The answer starts at the first boundary whose suffix fits, or
    /// before it, since counts are not monotone inside a piece: a binary search over starts in
    /// the piece in front of it, then each start up to [`SUFFIX_LOOKBACK_BYTES`] further back,
    /// each counted exactly (its own pieces up to where one ends on a boundary of the window,
    /// then the count from there). A text no longer than the first window is first counted
    /// whole, from its start; a longer one is never read from its start.
    fn suffix(&self, text: &str, max_tokens: usize) -> Prefix {
        let over = max_tokens.saturating_add(1);
        let mut window = over.saturating_mul(SUFFIX_WINDOW_BYTES_PER_TOKEN).max(256);
        // A text no longer than the first window may fit whole; a longer one is not counted
        // from its start, which the suffix does not keep: its windows say whether it fits.
        if text.len() <= window {
            if let Some(tokens) = self.count_up_to(text, max_tokens) {
                return Prefix {
                    len: text.len(),
                    tokens,
                };
            }
        }
        // Piece starts (in `text`) of the window's split, then the end of the text; and for
        // each, the count of the suffix from there, up to `over`.
        let mut starts: Vec<usize> = vec![text.len()];
        let mut from_here: Vec<usize> = vec![0];
        let mut w0 = text.len();
        loop {
            let mut w1 = text.len().saturating_sub(window);
            while !text.is_char_boundary(w1) {
                w1 -= 1;
            }
            (starts, from_here) =
                self.suffix_window_grown(text, w1, w0, &starts, &from_here, max_tokens);
            w0 = w1;
            if from_here[0] > max_tokens {
                return self.suffix_in_window(text, &starts, &from_here, max_tokens);
            }
            if w0 == 0 {
                // The window is the whole text, split as the whole text is: its count is
                // the sum of its pieces', all within the budget.
                return Prefix {
                    len: text.len(),
                    tokens: from_here[0],
                };
            }
            window = window.saturating_add(window / 2);
        }
    }

    /// The exact longest prefix within `max_tokens` (ADR-0020).
    ///
    /// Walks the pre-tokenizer pieces of the whole text, counting each up to what is left of
    /// the budget, to the first piece that does not fit. The answer ends inside a small region
    /// around that piece: a prefix that ends after a piece which is not whitespace only is split
    /// into the same pieces as the whole text up to there, so everything before the region fits
    /// and every prefix past it is over. The region reaches back over whitespace-only pieces
    /// (a cut can join them into one run) and, when the piece that does not fit is whitespace,
    /// forward to the next piece that is not. Inside it, [`TiktokenTokenizer::prefix_in_region`]
    /// finds the longest fitting cut, which need not be where a growing prefix first stops
    /// fitting, since BPE counts are not monotone.
    fn prefix(&self, text: &str, max_tokens: usize) -> Prefix {
        self.walk_pieces(text, max_tokens, Prefix { len: 0, tokens: 0 })
            .0
    }
}

impl TiktokenTokenizer {
    /// One growth of the window of [`Tokenizer::suffix`], to start at `w1`: the piece starts of
    /// its split (then the end of the text) and, for each, the count of the suffix from there
    /// up to one past `max_tokens`, given those of the last window, which started at `w0`.
    fn suffix_window_grown(
        &self,
        text: &str,
        w1: usize,
        w0: usize,
        starts: &[usize],
        from_here: &[usize],
        max_tokens: usize,
    ) -> (Vec<usize>, Vec<usize>) {
        let over = max_tokens.saturating_add(1);
        // The new window is split from its start only up to where a piece ends on a
        // boundary of the last window's split: from there on, both are the same text
        // split from the same point, so they have the same pieces and the same counts.
        // The end of the text is such a boundary, so the split stops there at the latest.
        let region = &text[w1..];
        let mut new_starts = Vec::new();
        let mut pieces = Vec::new();
        let mut joined = starts.len() - 1;
        for piece in self.tok.split(region) {
            let start = w1 + (piece.as_ptr() as usize - region.as_ptr() as usize);
            new_starts.push(start);
            pieces.push(piece);
            let end = start + piece.len();
            if end >= w0 {
                if let Ok(j) = starts.binary_search(&end) {
                    joined = j;
                    break;
                }
            }
        }
        // Counted from the end, and only until the suffix is over the budget: every
        // suffix from further back is over too (counts at piece boundaries only grow).
        let mut counts = vec![over; pieces.len()];
        let mut next = from_here[joined];
        for (i, piece) in pieces.iter().enumerate().rev() {
            if next >= over {
                break;
            }
            let n = self.piece_up_to(piece, max_tokens).unwrap_or(over);
            next = (next + n).min(over);
            counts[i] = next;
        }
        new_starts.extend_from_slice(&starts[joined..]);
        counts.extend_from_slice(&from_here[joined..]);
        (new_starts, counts)
    }

    /// The end of [`Tokenizer::suffix`] for a text whose suffix from the start of the last
    /// window is over the budget, given that window's piece starts and the count from each:
    /// a binary search over the starts in the piece in front of the first boundary that fits,
    /// then the look back.
    fn suffix_in_window(
        &self,
        text: &str,
        starts: &[usize],
        from_here: &[usize],
        max_tokens: usize,
    ) -> Prefix {
        // The whole text is over the budget, so the first boundary is, and the end is not.
        let i = (1..starts.len())
            .find(|&i| from_here[i] <= max_tokens)
            .unwrap_or(starts.len() - 1);
        let count = |p: usize| self.count_from(text, p, starts, from_here, max_tokens);
        // `lo` is a start that does not fit, `hi` one that does.
        let (mut lo, mut hi, mut hi_tokens) = (starts[i - 1], starts[i], from_here[i]);
        loop {
            let mut mid = lo + (hi - lo) / 2;
            while mid > lo && !text.is_char_boundary(mid) {
                mid -= 1;
            }
            if mid <= lo {
                break;
            }
            match count(mid) {
                Some(n) => (hi, hi_tokens) = (mid, n),
                None => lo = mid,
            }
        }
        // Longest first, so the first start that fits is kept. The look back does not stop at
        // piece boundaries: a start inside an earlier piece can be split otherwise from there
        // (`!!a` is `!!`, `a`; from its second byte, `!a`), and the window's first piece may
        // be the end of a longer one.
        // A start found there is looked back from again, so that none within the look-back of
        // the start returned fits (a run of `#` fits 8 tokens from 528 bytes before its end but
        // not from 480 to 527 of them).
        'looking: loop {
            let mut p = hi.saturating_sub(SUFFIX_LOOKBACK_BYTES);
            while p < hi {
                if text.is_char_boundary(p) {
                    if let Some(n) = count(p) {
                        (hi, hi_tokens) = (p, n);
                        continue 'looking;
                    }
                }
                p += 1;
            }
            break;
        }
        Prefix {
            len: text.len() - hi,
            tokens: hi_tokens,
        }
    }
}

impl TiktokenTokenizer {
    /// [`Tokenizer::prefix`], walking from `from`: the start, or a piece boundary that follows
    /// a piece that is not whitespace only, where the walk of any budget of at least
    /// `from.tokens` passes with that count, since counts at piece boundaries only grow. The
    /// point offered back is the last such boundary the walk passed at least
    /// [`RESUME_SLACK`] tokens below the budget, so a search a few tokens smaller (a cut
    /// retried after its marker took more than estimated) can start there (ADR-0037). `from` is
    /// trusted: [`super::ResumableTokenizer::walk`] checks the points it is offered before it
    /// passes one here (ADR-0040).
    fn walk_pieces(&self, text: &str, max_tokens: usize, from: Prefix) -> (Prefix, Prefix) {
        let from = if from.tokens <= max_tokens && text.is_char_boundary(from.len) {
            from
        } else {
            Prefix { len: 0, tokens: 0 }
        };
        let (mut used, mut offset) = (from.tokens, from.len);
        // Where the run of whitespace-only pieces just before `offset` starts, and the count
        // before it.
        let mut blank_run: Option<(usize, usize)> = None;
        let mut resume = from;
        let mut pieces = self.tok.split(&text[from.len..]);
        while let Some(piece) = pieces.next() {
            let blank = is_blank(piece);
            let Some(n) = self.piece_up_to(piece, max_tokens - used) else {
                let (start, before) = blank_run.unwrap_or((offset, used));
                let mut end = offset + piece.len();
                if blank {
                    for next in pieces.by_ref() {
                        end += next.len();
                        if !is_blank(next) {
                            break;
                        }
                    }
                }
                return (
                    self.prefix_in_region(text, start, end, before, max_tokens),
                    resume,
                );
            };
            if blank {
                blank_run.get_or_insert((offset, used));
            } else {
                blank_run = None;
            }
            used += n;
            offset += piece.len();
            if !blank && used + RESUME_SLACK <= max_tokens {
                resume = Prefix {
                    len: offset,
                    tokens: used,
                };
            }
        }
        (
            Prefix {
                len: text.len(),
                tokens: used,
            },
            resume,
        )
    }
}

/// The raw walks behind [`super::ResumableTokenizer`], which checks what it hands them
/// (ADR-0040).
impl Walker for TiktokenTokenizer {
    fn encoding(&self) -> &'static str {
        self.name
    }

    fn words_split(&self) -> bool {
        true
    }

    fn longest_token(&self) -> usize {
        TiktokenTokenizer::longest_token(self)
    }

    /// The pre-tokenizer decides where a piece ends from the characters up to a few past it
    /// (contractions, a number's digits, the character after a run of blanks) but for a run
    /// of whitespace, which it reads to its end; the prefix search looks at the pieces around
    /// the first one that does not fit, reaching forward over whitespace only. So the answer
    /// depends on at most [`PREFIX_LOOK_AHEAD`] bytes past its end when no whitespace run
    /// crosses that point (ADR-0037).
    fn look_ahead(&self) -> usize {
        PREFIX_LOOK_AHEAD
    }

    fn walk_from(&self, text: &str, max_tokens: usize, from: Prefix) -> (Prefix, Prefix) {
        self.walk_pieces(text, max_tokens, from)
    }

    /// A resume point follows a piece that is not whitespace only, found by walking a text
    /// from its start; every piece up to it, and where it ends, is decided by the bytes before
    /// it and a few after it. When `text` has the same bytes up to
    /// [`SHARED_PAST_RESUME`](super::resume::SHARED_PAST_RESUME) past
    /// it (checked by the caller), its pre-tokenizer makes the same pieces up to there, and the
    /// pieces after start afresh (the patterns look nowhere behind), so the count is the
    /// walk's count plus a count of the rest. Checked against tiktoken-rs in the tests
    /// (ADR-0037, ADR-0040).
    fn count_after(&self, text: &str, from: Prefix) -> usize {
        from.tokens + self.count_pieces(&text[from.len..])
    }

    /// [`ResumableTokenizer::count_sharing_end`](super::ResumableTokenizer::count_sharing_end). The pieces of both texts are taken from their starts
    /// in step, always from the one whose next boundary lies further from its end, and counted;
    /// once both stand at a boundary the same distance from their ends, within the bytes they
    /// share there, the rest of each is the same text split the same way (the patterns look
    /// nowhere behind a piece's start), so the rest of `text` counts what the rest of `known`
    /// does: `known_tokens` less what was counted of `known`. Cost: the pieces before that
    /// point in each text, and a comparison of the shared end. Checked against tiktoken-rs in
    /// the tests (ADR-0037, ADR-0040).
    fn count_ending(&self, text: &str, known: &str, known_tokens: usize) -> usize {
        let shared = text
            .bytes()
            .rev()
            .zip(known.bytes().rev())
            .take_while(|(a, b)| a == b)
            .count();
        if shared == 0 {
            return self.count_pieces(text);
        }
        let (mut ours, mut theirs) = (self.tok.split(text), self.tok.split(known));
        // Distances from the end of each text to its current boundary, and what was counted.
        let (mut at, mut at_known) = (text.len(), known.len());
        let (mut counted, mut counted_known) = (0usize, 0usize);
        loop {
            if at == at_known && at <= shared {
                return match known_tokens.checked_sub(counted_known) {
                    Some(rest) => counted + rest,
                    // Not the count of `known` after all: count `text` alone.
                    None => self.count_pieces(text),
                };
            }
            if at >= at_known {
                let Some(piece) = ours.next() else {
                    return counted;
                };
                counted += self.piece_count(piece);
                at = text.len() - (piece.as_ptr() as usize - text.as_ptr() as usize + piece.len());
            } else {
                let Some(piece) = theirs.next() else {
                    // `known` ended first: count the rest of `text` as it is.
                    return counted + self.count_pieces(&text[text.len() - at..]);
                };
                counted_known += self.piece_count(piece);
                at_known =
                    known.len() - (piece.as_ptr() as usize - known.as_ptr() as usize + piece.len());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length a key is made for, with bytes that tell each place apart: the loads read
    /// the same key as the copy. Verifies ADR-0020.
    #[test]
    fn a_key_read_with_loads_is_the_key_by_copy_at_every_length() {
        for n in 0..=LOOKUP_MAX_PIECE {
            for fill in [
                |i: usize| i as u8 + 1,
                |_| 0xff,
                |_| 0,
                |i: usize| 0x80 | (i as u8 * 7),
            ] {
                let piece: Vec<u8> = (0..n).map(fill).collect();
                assert_eq!(piece_key(&piece), piece_key_by_copy(&piece), "{piece:?}");
            }
        }
    }

    proptest::proptest! {
        /// Two pieces short enough to be looked up have the same key exactly when their bytes
        /// are equal, whatever bytes they hold (NUL included) and whatever their lengths: the
        /// lookup cannot take a piece for a different token. Verifies ADR-0020.
        #[test]
        fn pieces_have_the_same_key_only_when_equal(
            a in proptest::collection::vec(proptest::prelude::prop_oneof![
                proptest::prelude::Just(0u8), proptest::prelude::Just(b'a'),
                proptest::prelude::any::<u8>()], 0..=LOOKUP_MAX_PIECE),
            b in proptest::collection::vec(proptest::prelude::prop_oneof![
                proptest::prelude::Just(0u8), proptest::prelude::Just(b'a'),
                proptest::prelude::any::<u8>()], 0..=LOOKUP_MAX_PIECE),
        ) {
            proptest::prop_assert_eq!(piece_key(&a), piece_key_by_copy(&a));
            proptest::prop_assert_eq!(piece_key(&a) == piece_key(&b), a == b);
            let mut longer = a.clone();
            if longer.len() < LOOKUP_MAX_PIECE {
                longer.push(0);
                proptest::prop_assert_ne!(piece_key(&a), piece_key(&longer));
            }
        }
    }

    /// Verifies ADR-0040: a count takes the same path whatever the process counted before.
    /// The first count of an encoding builds the vocabulary's lookup and uses it, so a piece
    /// that is one token is looked up, not encoded, from the first count on; the counts equal
    /// the reference's (the reference tests check the lookup against tiktoken-rs on every token
    /// of both vocabularies). Fails if the lookup is again switched on by what was counted.
    #[test]
    fn the_lookup_is_used_from_the_first_count() {
        let t = TiktokenTokenizer::cl100k();
        let r = tiktoken_rs::cl100k_base_singleton();
        let text =
            "The quick brown fox's 12 tests; \u{6f22}\u{5b57} a_long_identifier = 0x5f3759df;\n";
        assert_eq!(t.count(text), r.encode_ordinary(text).len());
        assert!(
            t.lookup.get().is_some(),
            "the first count did not build the lookup"
        );
        assert!(t.is_token(" quick") && !t.is_token(" a_long_identifier_that_is_not_one_token"));
        assert!(
            !t.is_token("0123456789abcdefg"),
            "longer than a key: never looked up"
        );
    }
}
