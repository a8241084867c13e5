//! The last whole assembly, kept so that a request that repeats the one before it costs a
//! comparison instead of the stages, and is answered with the kept result itself (a shared
//! handle: no text or report entry is copied, however many sections; ADR-0037).
//!
//! One entry per assembler. It is found only by an exact comparison of everything that goes
//! into an assembly: the agent's signed payload (its SHA-256, which fixes identity, tools and
//! budget) and every field of the request except the time of the call, which only decides
//! whether the agent is still valid and is checked on every call before the entry is looked
//! at. Sections are compared with [`strata_core::Section::same_as`], which compares every field
//! but recognises a text shared with the kept clone by its address, so an unchanged section
//! costs no visit to its text.
//!
//! A fingerprint of the sections' inline fields (lengths, content hashes, layers, priorities)
//! is taken on every call but an assembler's first, and once three calls in a row were neither
//! served nor kept, on two consecutive calls in sixteen only. The sections are compared with the kept
//! ones only when it matches the kept entry's, so a request that changed costs one pass over
//! its own sections; an entry is stored only when a call has the same fingerprint as the call
//! before it, so a conversation whose every turn changes something never pays for copying the
//! request. The fingerprint only decides what is worth comparing and keeping:
//! it is never taken as proof that two requests are equal.

use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use strata_agentdef::VerifiedAgent;

use crate::output::AssembledContext;
use crate::request::AssemblyRequest;

/// One kept assembly: what went in and what came out.
struct Entry {
    fingerprint: u64,
    payload_sha256: String,
    req: AssemblyRequest,
    out: AssembledContext,
}

#[derive(Default)]
struct State {
    /// Whether any call was made; the first is not fingerprinted (an assembler made for one
    /// call never pays for it).
    called: bool,
    /// The fingerprint of the last request fingerprinted.
    last: Option<u64>,
    /// Calls in a row neither served from the entry nor kept.
    misses: u64,
    entry: Option<Arc<Entry>>,
}

/// The last whole assembly of one assembler, and the fingerprint of its last request.
#[derive(Default)]
pub(super) struct Whole {
    state: Mutex<State>,
    hasher: foldhash::fast::RandomState,
}

/// After a run of calls neither served nor kept, two calls in this many are fingerprinted.
const SKIP: u64 = 16;

/// Bytes counted for each section of a kept request and of its report, besides the output
/// text: the section's and its report entry's own fields (their texts are shared, not copied).
pub(super) const PER_SECTION: usize = 640;

impl Whole {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another assembly panicked; the entry is still exact.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept result, if `req` for `agent` is exactly the request it was assembled from
    /// (`Ok`); otherwise the fingerprint of the request's sections (`Err`, none on the
    /// assembler's first call). The sections are compared with the kept ones only when their
    /// fingerprints agree, so a request that changed costs one pass over its own sections.
    pub(super) fn get(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
    ) -> Result<AssembledContext, Option<u64>> {
        let entry = {
            let mut st = self.lock();
            let first = !std::mem::replace(&mut st.called, true);
            // After three calls in a row that were neither served nor kept, only two calls in
            // sixteen, one after the other, are fingerprinted: requests that change every call
            // pay for two passes in sixteen, and a request that starts repeating is kept and
            // served within eighteen calls.
            if first || (st.misses >= 3 && st.misses % SKIP > 1) {
                st.misses += 1;
                return Err(None);
            }
            st.misses += 1;
            st.entry.clone()
        };
        let fingerprint = self.fingerprint(req);
        match entry {
            Some(e)
                if e.fingerprint == fingerprint
                    && e.payload_sha256 == agent.payload_sha256()
                    && e.req.sections.len() == req.sections.len()
                    && same_settings(&e.req, req)
                    && req
                        .sections
                        .iter()
                        .zip(&e.req.sections)
                        .all(|(a, b)| a.same_as(b)) =>
            {
                self.lock().misses = 0;
                Ok(e.out.clone())
            }
            _ => Err(Some(fingerprint)),
        }
    }

    /// A fingerprint of the request's sections from their inline fields only: the lengths of
    /// their ids and contents, their content hashes, layers and priorities (values, not
    /// addresses, so a request rebuilt with equal sections has the same one). Reads each
    /// section once, in order, and no text.
    fn fingerprint(&self, req: &AssemblyRequest) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write_usize(req.sections.len());
        for s in &req.sections {
            h.write_usize(s.id().as_str().len());
            h.write_usize(s.content().as_str().len());
            h.write(&s.content_hash().as_bytes()[..8]);
            h.write_u32(s.priority());
            h.write_usize(s.layer().index());
        }
        h.finish()
    }

    /// Note the call's fingerprint, and keep its result when the call before it had the same
    /// one and the entry fits in `limit` bytes.
    pub(super) fn note(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
        fingerprint: Option<u64>,
        out: &AssembledContext,
        limit: usize,
    ) {
        let repeated = {
            let mut st = self.lock();
            let repeated = fingerprint.is_some() && st.last == fingerprint;
            if fingerprint.is_some() {
                st.last = fingerprint;
            }
            repeated
        };
        let size = out.text().len() + PER_SECTION * (req.sections.len() + 1);
        if !repeated || size > limit {
            return;
        }
        let Some(fingerprint) = fingerprint else {
            return;
        };
        let entry = Arc::new(Entry {
            fingerprint,
            payload_sha256: agent.payload_sha256().to_owned(),
            req: req.clone(),
            out: out.clone(),
        });
        let mut st = self.lock();
        st.entry = Some(entry);
        st.misses = 0;
    }

    /// Forget the kept assembly (with the element cache, when it is emptied).
    pub(super) fn clear(&self) {
        let mut st = self.lock();
        st.entry = None;
    }
}

/// Whether two requests give the same assembly for the same agent, sections aside (compared
/// with [`strata_core::Section::same_as`]): every other field equal but the time of the call
/// (checked on its own, before the kept entry is consulted). Written out field by field, so a
/// field added to the request must be considered here to compile.
fn same_settings(a: &AssemblyRequest, b: &AssemblyRequest) -> bool {
    let AssemblyRequest {
        sections: _,
        tools,
        tool_policy,
        mode,
        path,
        budget,
        protected_priorities,
        render,
        omissions,
        provider,
        provider_options,
        count_cut_sections,
        now_ms: _,
    } = a;
    *tools == b.tools
        && *tool_policy == b.tool_policy
        && *mode == b.mode
        && *path == b.path
        && *budget == b.budget
        && *protected_priorities == b.protected_priorities
        && *render == b.render
        && *omissions == b.omissions
        && *provider == b.provider
        && *provider_options == b.provider_options
        && *count_cut_sections == b.count_cut_sections
}
