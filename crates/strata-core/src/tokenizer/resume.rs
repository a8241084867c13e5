//! Resumable counting: the walks an assembler starts again from where an earlier walk passed,
//! and the bounds of a tokenizer it relies on to read less of a long text (ADR-0040).
//!
//! A shortcut is only as good as what it is handed. A resume point is therefore minted by the
//! walk that passed it and holds what it depends on: the encoding that walked, where the point
//! is and its count, and a copy of the walked text up to a little past it. Its fields are
//! private and nothing outside this module builds one, so a caller cannot make a point up, and a
//! point offered for another text, or to another encoding, is checked against that text before
//! it is used; where it does not hold, the count or walk starts at the start of the text, so the
//! answer is exact either way and only the work differs. The same holds for a counted suffix.
//!
//! [`ResumableTokenizer`] is implemented here, once, for every tokenizer of this crate that
//! implements the crate-private [`Walker`]: the checks of points and, in debug builds, the
//! assertion that every shortcut answers what the plain computation answers, sit in one place.

use std::fmt;

use super::{Prefix, Tokenizer};

/// How many bytes past a resume point two texts must share before a walk over one may resume
/// at it for the other. A piece of the tiktoken patterns is decided by the text up to its end
/// and a few characters after it (one to end a run of a class, up to three for a contraction
/// such as `'ll`, one for the `(?!\S)` look-ahead); 64 bytes is over four times the most that can
/// take in UTF-8.
pub(super) const SHARED_PAST_RESUME: usize = 64;

/// A point of a walk over a text (a piece boundary after a piece that is not whitespace only)
/// where a later walk or count of the same text, or of a text with the same start, may begin
/// instead of at the start (ADR-0040). Only [`ResumableTokenizer::walk`] makes one.
///
/// It holds the walked text from its start to [`SHARED_PAST_RESUME`] bytes past the point (or
/// to the text's end, when that comes first), so it is used only for a text that has those
/// bytes (and, when the walked text ended sooner, no more), and only by the encoding that made
/// it. Anything else is counted from the start.
#[derive(Clone, PartialEq, Eq)]
pub struct ResumePoint {
    /// The encoding of the walk that passed the point.
    encoding: &'static str,
    /// The point: bytes before it, and their tokens.
    at: Prefix,
    /// The walked text up to [`SHARED_PAST_RESUME`] past the point, or to its end.
    walked: Box<str>,
}

impl fmt::Debug for ResumePoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumePoint")
            .field("encoding", &self.encoding)
            .field("at", &self.at)
            .field("walked_bytes", &self.walked.len())
            .finish()
    }
}

impl ResumePoint {
    /// Where the point is, in bytes of the walked text, and the tokens before it.
    pub fn at(&self) -> Prefix {
        self.at
    }

    /// Bytes of the walked text the point holds (what a cache keeping it pays for).
    pub fn held_bytes(&self) -> usize {
        self.walked.len()
    }

    /// Whether a walk or count of `text` by `encoding` may start at the point: the same
    /// encoding, and `text` has the walked bytes up to the look-ahead past the point (exactly
    /// those bytes, when the walked text ended before the look-ahead did).
    fn holds_for(&self, encoding: &str, text: &str) -> bool {
        let held = self.walked.len();
        self.encoding == encoding
            && self.at.len > 0
            && text.len() >= held
            && (held >= self.at.len + SHARED_PAST_RESUME || text.len() == held)
            && text.as_bytes()[..held] == *self.walked.as_bytes()
    }
}

/// The longest suffix within a budget that [`ResumableTokenizer::suffix_counted`] found, with
/// its text and its exact count: what a count of a text ending with the same bytes starts from
/// ([`ResumableTokenizer::count_sharing_end`]). Only that method makes one.
#[derive(Clone, PartialEq, Eq)]
pub struct CountedSuffix {
    encoding: &'static str,
    text: Box<str>,
    tokens: usize,
}

impl fmt::Debug for CountedSuffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountedSuffix")
            .field("encoding", &self.encoding)
            .field("len", &self.text.len())
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl CountedSuffix {
    /// The suffix as [`Tokenizer::suffix`] answers it: its length in bytes and its tokens.
    pub fn answer(&self) -> Prefix {
        Prefix {
            len: self.text.len(),
            tokens: self.tokens,
        }
    }

    /// The suffix's text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// What a walk for the longest prefix within a budget found ([`ResumableTokenizer::walk`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Walked {
    /// The longest prefix within the budget: the answer of [`Tokenizer::prefix`].
    pub prefix: Prefix,
    /// Where a later walk of this text with a budget at least the point's tokens, or of a text
    /// with the same start, may begin; `None` when the walk passed no such point.
    pub point: Option<ResumePoint>,
    /// Whether this walk began at the point it was offered rather than at the start.
    pub resumed: bool,
}

/// Counting that starts from what an earlier walk or search found, and the bounds an assembler
/// uses to read less of a long text (ADR-0040). Implemented by this crate's exact tokenizer
/// only (sealed); reach it from any tokenizer with
/// [`<dyn Tokenizer>::resumable`](trait.Tokenizer.html#method.resumable), and count in full
/// when there is none.
///
/// Every method answers exactly what the plain computation of [`Tokenizer`] answers, whatever
/// point or suffix it is given: one that does not hold for the text is not used. In debug
/// builds each answer that took a shortcut is asserted equal to the plain one.
pub trait ResumableTokenizer: Tokenizer + sealed::Sealed {
    /// Whether every word counted by [`separate_ascii_words`](super::separate_ascii_words)
    /// takes at least one token of its own, so that function is a lower bound of the count of
    /// any text (ADR-0037). True for the tiktoken encodings, whose pre-tokenizer never puts two
    /// such words into one piece.
    fn splits_ascii_words(&self) -> bool;

    /// The most bytes one token covers: a text of `n` bytes holds at least `n / longest`
    /// tokens, so text far longer than a budget is known not to fit, and a walk for a prefix
    /// within a budget can stop reading, without tokenizing the rest (ADR-0037).
    fn longest_token_bytes(&self) -> usize;

    /// How far past its end a longest prefix ([`Tokenizer::prefix`]) can depend on the text:
    /// the prefix of a text within a budget is also the prefix of any text with the same bytes
    /// up to that far past its end, provided no run of whitespace crosses that point. An
    /// assembler walks a long section's head in windows with it (ADR-0037).
    fn prefix_look_ahead(&self) -> usize;

    /// The longest prefix of `text` within `max_tokens` ([`Tokenizer::prefix`]), and a point
    /// from which a later walk may begin. The walk begins at `from` where that point holds for
    /// `text` (see [`ResumePoint`]) and its tokens are at most `max_tokens`, else at the start.
    fn walk(&self, text: &str, max_tokens: usize, from: Option<&ResumePoint>) -> Walked;

    /// Whether `from` holds for `text`: a walk or count of `text` would begin there.
    fn resumes(&self, text: &str, from: &ResumePoint) -> bool;

    /// The number of tokens in `text`, from `from` where it holds for `text` (the part before it
    /// is not counted again), else in full.
    fn count_resumed(&self, text: &str, from: &ResumePoint) -> usize;

    /// The longest suffix of `text` within `max_tokens` ([`Tokenizer::suffix`]), with its text
    /// and count, for [`ResumableTokenizer::count_sharing_end`].
    fn suffix_counted(&self, text: &str, max_tokens: usize) -> CountedSuffix;

    /// The number of tokens in `text`, which may end with the bytes of `end`: where the two are
    /// split into the same pieces from some point of their common end, the part from there is
    /// not counted again; otherwise `text` is counted in full.
    fn count_sharing_end(&self, text: &str, end: &CountedSuffix) -> usize;
}

pub(super) mod sealed {
    /// Keeps [`super::ResumableTokenizer`] to the tokenizers of this crate.
    pub trait Sealed {}
}

/// The raw walks of a tokenizer of this crate, each trusting what it is given. Only
/// [`ResumableTokenizer`]'s implementation below calls them, after checking it.
pub(crate) trait Walker {
    /// The encoding's name, which every point and suffix it makes carries.
    fn encoding(&self) -> &'static str;
    /// [`ResumableTokenizer::splits_ascii_words`].
    fn words_split(&self) -> bool;
    /// [`ResumableTokenizer::longest_token_bytes`].
    fn longest_token(&self) -> usize;
    /// [`ResumableTokenizer::prefix_look_ahead`].
    fn look_ahead(&self) -> usize;
    /// The longest prefix within `max_tokens`, walking from `from`, which must be the start or a
    /// point a walk of `text` itself would pass with its count; and the last point passed well
    /// below the budget (the start when none).
    fn walk_from(&self, text: &str, max_tokens: usize, from: Prefix) -> (Prefix, Prefix);
    /// The count of `text` given that `from` is such a point of it.
    fn count_after(&self, text: &str, from: Prefix) -> usize;
    /// The count of `text` given `known`, a text of exactly `known_tokens` tokens.
    fn count_ending(&self, text: &str, known: &str, known_tokens: usize) -> usize;
}

impl<T: Tokenizer + Walker> sealed::Sealed for T {}

impl<T: Tokenizer + Walker> ResumableTokenizer for T {
    fn splits_ascii_words(&self) -> bool {
        self.words_split()
    }

    fn longest_token_bytes(&self) -> usize {
        self.longest_token()
    }

    fn prefix_look_ahead(&self) -> usize {
        self.look_ahead()
    }

    fn walk(&self, text: &str, max_tokens: usize, from: Option<&ResumePoint>) -> Walked {
        let start = Prefix { len: 0, tokens: 0 };
        let (origin, resumed) = match from {
            Some(p) if p.at.tokens <= max_tokens && p.holds_for(self.encoding(), text) => {
                (p.at, true)
            }
            _ => (start, false),
        };
        let (prefix, point) = self.walk_from(text, max_tokens, origin);
        if resumed {
            debug_assert_eq!(
                prefix,
                self.walk_from(text, max_tokens, start).0,
                "{}: a walk resumed at {origin:?} found another prefix than from the start",
                self.encoding()
            );
        }
        let point = (point.len > 0).then(|| {
            debug_assert_eq!(
                point.tokens,
                self.count(&text[..point.len]),
                "{}: a resume point's count is not the count of the text before it",
                self.encoding()
            );
            let mut held = (point.len + SHARED_PAST_RESUME).min(text.len());
            while !text.is_char_boundary(held) {
                held += 1;
            }
            ResumePoint {
                encoding: self.encoding(),
                at: point,
                walked: text[..held].into(),
            }
        });
        Walked {
            prefix,
            point,
            resumed,
        }
    }

    fn resumes(&self, text: &str, from: &ResumePoint) -> bool {
        from.holds_for(self.encoding(), text)
    }

    fn count_resumed(&self, text: &str, from: &ResumePoint) -> usize {
        if !from.holds_for(self.encoding(), text) {
            return self.count(text);
        }
        let n = self.count_after(text, from.at);
        debug_assert_eq!(
            n,
            self.count(text),
            "{}: a count resumed at {:?} differs from the full count",
            self.encoding(),
            from.at
        );
        n
    }

    fn suffix_counted(&self, text: &str, max_tokens: usize) -> CountedSuffix {
        let p = self.suffix(text, max_tokens);
        let tail = &text[text.len() - p.len..];
        debug_assert_eq!(
            p.tokens,
            self.count(tail),
            "{}: a suffix's count is not the count of its text",
            self.encoding()
        );
        CountedSuffix {
            encoding: self.encoding(),
            text: tail.into(),
            tokens: p.tokens,
        }
    }

    fn count_sharing_end(&self, text: &str, end: &CountedSuffix) -> usize {
        if end.encoding != self.encoding() {
            return self.count(text);
        }
        let n = self.count_ending(text, &end.text, end.tokens);
        debug_assert_eq!(
            n,
            self.count(text),
            "{}: a count sharing the end of a suffix differs from the full count",
            self.encoding()
        );
        n
    }
}
