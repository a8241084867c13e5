//! The memoisation engine: every piece of state an [`Assembler`](super::Assembler) carries from
//! one call to the next, behind one type whose whole contract is that it changes nothing but
//! speed. For the same agent and request, an assembly through the engine gives the same
//! output bytes, the same provider request body and the same report as the plain kernel
//! ([`super::kernel`]) called alone (ADR-0037).
//!
//! What it holds: the kept whole assembly ([`whole`]); the element cache (rendered elements
//! and their counts, probes found over a limit, cuts, the walks a later cut may resume from,
//! counts of short texts, element floors), bounded in bytes and emptied whole when an insertion
//! would pass the bound; and the hints of the last call (where the next call's sorts start, the
//! ids it found pairwise distinct, its output, whose report entries may be written over). The
//! kernel asks it through the small methods below, each a lookup or a store; none of them
//! decides anything about a section.
//!
//! The property test `engine_equals_kernel` and the fuzz target `engine_diff` check the
//! contract on random requests and random sequences of changed requests.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use strata_core::format::Encoding;
use strata_core::{ContentHash, ResumePoint, RuntimeLayer, SectionId};

use super::element::{walk_size, Cutting, ElementKey, Rendered, ENTRY_OVERHEAD};
use super::kernel::SelectHint;
use super::FastMap;
use strata_agentdef::VerifiedAgent;

use crate::output::AssembledContext;
use crate::report::SectionReport;
use crate::request::AssemblyRequest;

pub(super) mod whole;

/// Counters of the element cache (ADR-0008: unchanged sections are never re-tokenized).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Elements served from the cache.
    pub hits: u64,
    /// Elements rendered and tokenized in full.
    pub misses: u64,
    /// Elements found larger than the room left by counting only up to that room (their full
    /// count is never taken; ADR-0037).
    pub probed_over: u64,
    /// Cut results served from the cache.
    pub cut_hits: u64,
    /// Bytes handed to the tokenizer for full counts (probes stop early and are not included;
    /// a cut element counted from a point of an earlier walk is included whole).
    pub tokenized_bytes: u64,
    /// Entries now held.
    pub entries: usize,
    /// Bytes now held (texts and keys, with a fixed overhead per entry).
    pub bytes: usize,
    /// Times the cache was emptied to stay within its byte limit.
    pub evictions: u64,
    /// Whole assemblies served from the last one kept, the request being exactly the same
    /// but for the time of the call (ADR-0037).
    pub assembly_hits: u64,
    /// Cuts whose walk resumed where the last cut of the same section's walk passed, its
    /// element having the same bytes up to there (ADR-0037).
    pub resumed_cuts: u64,
    /// Head cuts whose first window of a long content was too small for the prefix, so that a
    /// window four times larger was walked (ADR-0037).
    pub walk_regrowths: u64,
    /// Probes that found an element over the room left from a walk of a window of it, without
    /// writing the rest of a long content (ADR-0037).
    pub walked_probes: u64,
    /// Selections that found the ids of the sections taking part equal, in order, to the last
    /// call's, which were pairwise distinct, and so resolved conflicts on keys alone (ADR-0037,
    /// amended).
    pub known_ids: u64,
    /// Report entries left in place from the last output, which its caller had let go of, each
    /// equal to the entry the call would have written (ADR-0037).
    pub reused_entries: u64,
}

#[derive(Default)]
struct Cache {
    elements: FastMap<ElementKey, Arc<Rendered>>,
    /// Elements known to take more than the stored number of tokens (a probe stopped there).
    over: FastMap<ElementKey, u64>,
    /// Cut results by the whole section's key and the tokens allowed.
    cuts: FastMap<(ElementKey, u64), Cutting>,
    /// The last head cut of each section id: a point of its walk (holding the walked bytes up
    /// to a little past it), where the next cut of the same id may resume if its element starts
    /// with the same bytes (ADR-0040).
    walks: FastMap<SectionId, ResumePoint>,
    texts: FastMap<ContentHash, (u64, u64)>,
    /// Lower bounds of one element's tokens, by layer, encoding and frame.
    floors: FastMap<(RuntimeLayer, Encoding, bool), u64>,
    stats: CacheStats,
    /// Bytes held: rendered texts, ids and sources, plus a fixed overhead per entry.
    bytes: usize,
}

/// What the last call leaves for the next one (ADR-0037). Its orders are where the next call's
/// sorts start, only a starting point: every sort breaks ties down to the input position, so its
/// result is the same from any start, and a hint of another length is ignored. What it learnt of
/// its ids is a fact about those ids, used only when the next call's are equal to them, text for
/// text. Its output is kept so that its report's entries can be written over in place once the
/// caller has let go of it; an entry is kept only where it equals, field for field and with the
/// same provenance, the one the next call would build. Memory: one index per section of the last
/// request, per order, its ids, and one output within the cache limit.
#[derive(Default)]
struct Hints {
    /// The canonical order of selection, as positions in the sections that take part, and
    /// what the last call learnt of their ids.
    select: SelectHint,
    /// The keep order of the units that are not sticky.
    keep: Vec<usize>,
    /// The last output of the stages, if it fitted in the cache limit.
    last: Option<AssembledContext>,
}

/// All the state an assembler keeps between calls.
pub(super) struct Engine {
    cache: Mutex<Cache>,
    hints: Mutex<Hints>,
    whole: whole::Whole,
    /// Bytes the element cache and the kept outputs may hold.
    pub(super) cache_limit: usize,
}

impl Engine {
    /// An empty engine whose caches hold at most `cache_limit` bytes.
    pub(super) fn new(cache_limit: usize) -> Engine {
        Engine {
            cache: Mutex::new(Cache::default()),
            hints: Mutex::new(Hints::default()),
            whole: whole::Whole::default(),
            cache_limit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        // A poisoned cache only means another assembly panicked; its entries are still valid.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn hints(&self) -> MutexGuard<'_, Hints> {
        // Hints are only where sorts start: a poisoned value is still a valid start.
        self.hints.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept answer to exactly this request (ADR-0037), or the request's fingerprint for
    /// [`Engine::remember`].
    pub(super) fn recall(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
    ) -> Result<AssembledContext, Option<u64>> {
        let out = self.whole.get(agent, req)?;
        self.count(|s| s.assembly_hits += 1);
        Ok(out)
    }

    /// Keep `out` as the answer to `req` if it is worth keeping (see [`whole`]).
    pub(super) fn remember(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
        fingerprint: Option<u64>,
        out: &AssembledContext,
    ) {
        self.whole
            .note(agent, req, fingerprint, out, self.cache_limit);
    }

    /// Cache counters.
    pub(super) fn stats(&self) -> CacheStats {
        let c = self.lock();
        CacheStats {
            entries: c.elements.len() + c.texts.len() + c.over.len() + c.cuts.len(),
            bytes: c.bytes,
            ..c.stats
        }
    }

    /// Add to a counter.
    pub(super) fn count(&self, f: impl FnOnce(&mut CacheStats)) {
        f(&mut self.lock().stats);
    }

    /// Empty the cache if adding `size` bytes would pass the limit.
    fn make_room(&self, c: &mut Cache, size: usize) {
        if c.bytes + size > self.cache_limit {
            tracing::debug!(
                bytes = c.bytes,
                limit = self.cache_limit,
                "element cache emptied"
            );
            *c = Cache {
                stats: c.stats,
                ..Cache::default()
            };
            c.stats.evictions += 1;
            self.whole.clear();
        }
    }

    /// The kept count of a text by its hash.
    pub(super) fn text_cost(&self, h: ContentHash) -> Option<(u64, u64)> {
        self.lock().texts.get(&h).copied()
    }

    /// Keep the count of a text of `len` bytes.
    pub(super) fn keep_text_cost(&self, h: ContentHash, cost: (u64, u64), len: usize) {
        let mut c = self.lock();
        c.stats.tokenized_bytes += len as u64;
        self.make_room(&mut c, ENTRY_OVERHEAD);
        c.bytes += ENTRY_OVERHEAD;
        c.texts.insert(h, cost);
    }

    /// The kept element of `key`.
    pub(super) fn element(&self, key: &ElementKey) -> Option<Arc<Rendered>> {
        let mut c = self.lock();
        let r = c.elements.get(key).cloned();
        if r.is_some() {
            c.stats.hits += 1;
        }
        r
    }

    /// Whether the element of `key` is known to take more than `limit` tokens.
    pub(super) fn known_over(&self, key: &ElementKey, limit: u64) -> bool {
        let mut c = self.lock();
        let over = c.over.get(key).is_some_and(|over| *over >= limit);
        if over {
            c.stats.hits += 1;
        }
        over
    }

    /// Keep a rendered and counted element.
    pub(super) fn keep_element(&self, key: ElementKey, r: &Arc<Rendered>) {
        let mut c = self.lock();
        c.stats.misses += 1;
        c.stats.tokenized_bytes += r.text.len() as u64;
        let size = r.text.len() + key.id.as_str().len() + ENTRY_OVERHEAD;
        self.make_room(&mut c, size);
        c.bytes += size;
        c.over.remove(&key);
        c.elements.insert(key, r.clone());
    }

    /// Remember that the element of `key` takes more than `limit` tokens.
    pub(super) fn note_over(&self, key: ElementKey, limit: u64) {
        let mut c = self.lock();
        c.stats.probed_over += 1;
        let size = key.id.as_str().len() + ENTRY_OVERHEAD;
        self.make_room(&mut c, size);
        c.bytes += size;
        let over = c.over.entry(key).or_insert(0);
        *over = (*over).max(limit);
    }

    /// The kept floor of a layer, encoding and frame.
    pub(super) fn floor(&self, at: (RuntimeLayer, Encoding, bool)) -> Option<u64> {
        self.lock().floors.get(&at).copied()
    }

    /// Keep a floor.
    pub(super) fn keep_floor(&self, at: (RuntimeLayer, Encoding, bool), f: u64) {
        self.lock().floors.insert(at, f);
    }

    /// The kept cut of a whole element's key to a number of tokens.
    pub(super) fn cut(&self, key: &(ElementKey, u64)) -> Option<Cutting> {
        let mut c = self.lock();
        let hit = c.cuts.get(key).cloned();
        if hit.is_some() {
            c.stats.cut_hits += 1;
        }
        hit
    }

    /// Keep a cut.
    pub(super) fn keep_cut(&self, key: (ElementKey, u64), done: &Cutting) {
        let mut c = self.lock();
        let size = ENTRY_OVERHEAD + key.0.id.as_str().len();
        self.make_room(&mut c, size);
        c.bytes += size;
        c.cuts.insert(key, done.clone());
    }

    /// Take the walk kept from the last head cut of section `id`.
    pub(super) fn take_walk(&self, id: &SectionId) -> Option<ResumePoint> {
        let mut c = self.lock();
        let prior = c.walks.remove(id);
        if let Some(p) = &prior {
            c.bytes = c.bytes.saturating_sub(walk_size(id, p));
        }
        prior
    }

    /// Keep the walk of a head cut of section `id`, if it is small enough.
    pub(super) fn keep_walk(&self, id: &SectionId, resume: ResumePoint) {
        let size = walk_size(id, &resume);
        if size > self.cache_limit / 8 {
            return;
        }
        let mut c = self.lock();
        self.make_room(&mut c, size);
        c.bytes += size;
        if let Some(old) = c.walks.insert(id.clone(), resume) {
            // Another thread cut the same id meanwhile: its entry is replaced.
            c.bytes = c.bytes.saturating_sub(walk_size(id, &old));
        }
    }

    /// Where the next selection's sort starts, and the ids the last one found distinct.
    pub(super) fn take_select_hint(&self) -> SelectHint {
        std::mem::take(&mut self.hints().select)
    }

    /// Keep selection's hint for the next call.
    pub(super) fn keep_select_hint(&self, hint: SelectHint) {
        self.hints().select = hint;
    }

    /// Where the next keep order's sort starts.
    pub(super) fn take_keep_hint(&self) -> Vec<usize> {
        std::mem::take(&mut self.hints().keep)
    }

    /// Keep the keep order for the next call.
    pub(super) fn keep_keep_hint(&self, order: &[usize]) {
        let mut h = self.hints();
        h.keep.clear();
        h.keep.extend_from_slice(order);
    }

    /// Keep `out` for the next call, whose report may be written over this one's once the
    /// caller has let go of it, if it fits in the cache limit (counted as the kept whole
    /// assembly is).
    pub(super) fn keep_last(&self, out: &AssembledContext, sections: usize) {
        let size = out.text().len() + whole::PER_SECTION * (sections + 1);
        self.hints().last = (size <= self.cache_limit).then(|| out.clone());
    }

    /// The entries of the last output's report, if its caller has let go of it (empty
    /// otherwise): the rest of that output is released here.
    pub(super) fn last_entries(&self) -> Vec<SectionReport> {
        let last = self.hints().last.take();
        match last {
            Some(mut out) => Arc::get_mut(&mut out.inner)
                .map(|c| std::mem::take(&mut c.report.sections))
                .unwrap_or_default(),
            None => Vec::new(),
        }
    }
}
