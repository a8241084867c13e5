//! Conversation compaction (ADR-0047): a summary the runtime hands back for a range of a
//! session's turns stands in for that range on every later turn. The log keeps every entry;
//! the summary is agent-authored data of layer 5, fenced like any runtime content, so it can
//! outrank neither the signed identity nor the user.

use std::collections::BTreeMap;
use std::sync::Arc;

use strata_core::{Role, RuntimeLayer, Section, SourceKind, Stability};
use strata_memory::{Entry, SessionState, WorkingMemoryContributor};
use strata_registry::{
    CachePolicy, ContributionContext, Contributor, ContributorError, ContributorMeta,
};

use super::{OperationId, Outcome, Session, SessionError};

/// The name of the document holding a session's compactions.
pub(crate) const COMPACTIONS_DOC: &str = "compactions";

/// Longest summary, in bytes.
pub const MAX_SUMMARY_BYTES: usize = 64 * 1024;

/// Most operation records the document keeps; the oldest go first.
const MAX_OPERATIONS: usize = 256;

/// A summary the runtime wrote (with a model, usually) of the turns `first_seq..=last_seq` of a
/// session, to stand in for them on later turns.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Compaction {
    /// The first entry of the range (its `seq`, as the session's entries show it).
    pub first_seq: u64,
    /// The last entry of the range.
    pub last_seq: u64,
    /// The summary.
    pub summary: String,
    /// The model that wrote it, if a model did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A stored compaction: the summary and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompactionRecord {
    /// The first entry it stands in for.
    pub first_seq: u64,
    /// The last entry it stands in for.
    pub last_seq: u64,
    /// How many entries of the log the range holds.
    pub entries: usize,
    /// The summary.
    pub summary: String,
    /// The model that wrote it, if a model did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When it was stored, Unix milliseconds.
    pub at_ms: i64,
}

impl CompactionRecord {
    /// Whether the entry `seq` is in its range.
    pub fn covers(&self, seq: u64) -> bool {
        (self.first_seq..=self.last_seq).contains(&seq)
    }
}

/// The first answer of a keyed compaction.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct OperationRecord {
    fingerprint: String,
    answer: String,
    at_ms: i64,
}

/// A session's compactions, oldest first, with the records of keyed compactions.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct CompactionsDoc {
    compactions: Vec<CompactionRecord>,
    #[serde(default)]
    operations: BTreeMap<String, OperationRecord>,
}

/// The compactions document of `session` and its version (`None` before the first).
fn read_doc(
    state: &dyn SessionState,
    session: &str,
) -> Result<(CompactionsDoc, Option<u64>), SessionError> {
    match state.state(session, COMPACTIONS_DOC)? {
        None => Ok((CompactionsDoc::default(), None)),
        Some(doc) => serde_json::from_str(&doc.value)
            .map(|d| (d, Some(doc.version)))
            .map_err(|e| {
                SessionError::Invalid(format!(
                    "the stored compactions of session `{session}` are not valid ({e}); reset the session"
                ))
            }),
    }
}

/// The reason `c` cannot stand in for its range of `entries` given the `existing`
/// compactions, or the number of entries it covers.
fn check(
    c: &Compaction,
    entries: &[Entry],
    existing: &[CompactionRecord],
) -> Result<usize, String> {
    check_words(c)?;
    let (first, last) = (c.first_seq, c.last_seq);
    if first > last {
        return Err(format!(
            "the range {first}-{last} is empty: `first_seq` comes after `last_seq`"
        ));
    }
    for seq in [first, last] {
        if !entries.iter().any(|e| e.seq == seq) {
            return Err(format!(
                "the session holds no entry {seq}; a summary stands in only for entries of its log (read them with the session's turns)"
            ));
        }
    }
    let newest_user = entries.iter().rev().find(|e| e.role == Role::User);
    if newest_user.is_some_and(|u| last >= u.seq) {
        return Err(format!(
            "the range {first}-{last} reaches the exchange in progress (from entry {} on): the newest user message and what follows it are never summarised",
            newest_user.map_or(0, |u| u.seq)
        ));
    }
    let range: Vec<&Entry> = entries
        .iter()
        .filter(|e| (first..=last).contains(&e.seq))
        .collect();
    check_pairs(&range, entries)?;
    if let Some(o) = existing
        .iter()
        .find(|o| o.first_seq <= last && first <= o.last_seq)
    {
        return Err(format!(
            "the range {first}-{last} overlaps the summary of {}-{} already stored; summarise turns no summary covers",
            o.first_seq, o.last_seq
        ));
    }
    Ok(range.len())
}

/// The summary and the model's name: present, within bounds, printable.
fn check_words(c: &Compaction) -> Result<(), String> {
    if c.summary.trim().is_empty() {
        return Err("the summary is empty; give the text that stands in for the turns".into());
    }
    if c.summary.len() > MAX_SUMMARY_BYTES {
        return Err(format!(
            "the summary is {} bytes, over the limit of {MAX_SUMMARY_BYTES}; summarise more tightly",
            c.summary.len()
        ));
    }
    if let Some(m) = &c.model {
        if m.is_empty() || m.chars().count() > 128 || m.chars().any(char::is_control) {
            return Err(
                "`model` names the model that wrote the summary: 1-128 printable characters".into(),
            );
        }
    }
    Ok(())
}

/// A range keeps each tool call with its result: both inside it or both outside.
fn check_pairs(range: &[&Entry], entries: &[Entry]) -> Result<(), String> {
    for e in range {
        let partner = match e.role {
            Role::ToolCall => Role::ToolResult,
            Role::ToolResult => Role::ToolCall,
            _ => continue,
        };
        let Some(id) = e.call_id.as_deref() else {
            continue;
        };
        let inside = range
            .iter()
            .any(|p| p.role == partner && p.call_id.as_deref() == Some(id));
        let anywhere = entries
            .iter()
            .any(|p| p.role == partner && p.call_id.as_deref() == Some(id));
        if anywhere && !inside {
            return Err(format!(
                "the range splits tool call `{id}` from its result; include both or neither"
            ));
        }
    }
    Ok(())
}

/// A key's first answer, if the document holds a live record of it; refused when the key was
/// used for another request.
fn repeat_of(
    doc: &CompactionsDoc,
    op: &OperationId,
    now: i64,
) -> Result<Option<String>, SessionError> {
    match doc.operations.get(&op.key) {
        Some(r) if now.saturating_sub(r.at_ms) >= strata_memory::OPERATION_TTL_MS => Ok(None),
        Some(r) if r.fingerprint == op.fingerprint => Ok(Some(r.answer.clone())),
        Some(_) => Err(SessionError::KeyReused {
            key: op.key.clone(),
        }),
        None => Ok(None),
    }
}

type Keyed<'a> = Option<(
    &'a OperationId,
    &'a dyn Fn(&CompactionRecord) -> Result<String, SessionError>,
)>;

impl Session<'_> {
    /// Store `c`, a summary of a range of this session's turns: later turns carry the summary
    /// instead of the range (the log keeps every entry). Refused, with nothing stored, when the
    /// range is not in the log, reaches the exchange in progress (the newest user message on),
    /// splits a tool call from its result or overlaps a stored summary.
    pub fn compact(&self, c: &Compaction) -> Result<CompactionRecord, SessionError> {
        match self.compact_with(c, None)? {
            Outcome::Done(r) => Ok(r),
            Outcome::Repeated(_) => Err(SessionError::Invalid(
                "a compaction without an operation key was reported as a repeat".into(),
            )),
        }
    }

    /// [`Session::compact`] as a retry-safe operation: the record and the first answer are
    /// one write of the session's compactions document.
    pub fn compact_once(
        &self,
        op: &OperationId,
        c: &Compaction,
        answer: &dyn Fn(&CompactionRecord) -> Result<String, SessionError>,
    ) -> Result<Outcome<CompactionRecord>, SessionError> {
        if let Some(done) = self.repeated_answer(op)? {
            return Ok(Outcome::Repeated(done));
        }
        self.compact_with(c, Some((op, answer)))
    }

    /// The session's compactions, oldest first.
    pub fn compactions(&self) -> Result<Vec<CompactionRecord>, SessionError> {
        Ok(read_doc(&*self.rt.store.state(), &self.id)?.0.compactions)
    }

    /// The first answer of a keyed compaction `op` named, if it ran.
    pub(crate) fn compaction_answer(
        &self,
        op: &OperationId,
    ) -> Result<Option<String>, SessionError> {
        let (doc, _) = read_doc(&*self.rt.store.state(), &self.id)?;
        repeat_of(&doc, op, self.rt.now_ms())
    }

    fn compact_with(
        &self,
        c: &Compaction,
        op: Keyed<'_>,
    ) -> Result<Outcome<CompactionRecord>, SessionError> {
        let state = self.rt.store.state();
        let wm = self.rt.store.working();
        for _ in 0..16 {
            let now = self.rt.now_ms();
            let (mut doc, version) = read_doc(&*state, &self.id)?;
            if let Some((op, _)) = op {
                if let Some(done) = repeat_of(&doc, op, now)? {
                    return Ok(Outcome::Repeated(done));
                }
            }
            let entries = wm.entries(&self.id)?;
            if entries.is_empty() {
                return Err(SessionError::Invalid(format!(
                    "session `{}` holds no turns to summarise",
                    self.id
                )));
            }
            let covered = check(c, &entries, &doc.compactions).map_err(SessionError::Invalid)?;
            let record = CompactionRecord {
                first_seq: c.first_seq,
                last_seq: c.last_seq,
                entries: covered,
                summary: c.summary.clone(),
                model: c.model.clone(),
                at_ms: now,
            };
            doc.compactions.push(record.clone());
            doc.compactions.sort_by_key(|r| r.first_seq);
            if let Some((op, answer)) = op {
                keep_operation(&mut doc, op, answer(&record)?, now);
            }
            let json = serde_json::to_string(&doc)
                .map_err(|e| SessionError::Invalid(format!("compactions: {e}")))?;
            if state
                .put_state(&self.id, COMPACTIONS_DOC, &json, version)?
                .is_some()
            {
                tracing::debug!(
                    session = &*self.id,
                    first = c.first_seq,
                    last = c.last_seq,
                    "stored a compaction"
                );
                return Ok(Outcome::Done(record));
            }
        }
        Err(SessionError::Invalid(
            "the session's compactions kept changing while this one was written; retry".into(),
        ))
    }
}

/// Record `op`'s first answer, dropping expired records and, past the bound, the oldest.
fn keep_operation(doc: &mut CompactionsDoc, op: &OperationId, answer: String, now: i64) {
    doc.operations
        .retain(|_, r| now.saturating_sub(r.at_ms) < strata_memory::OPERATION_TTL_MS);
    while doc.operations.len() >= MAX_OPERATIONS {
        let Some(oldest) = doc
            .operations
            .iter()
            .min_by_key(|(_, r)| r.at_ms)
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        doc.operations.remove(&oldest);
    }
    doc.operations.insert(
        op.key.clone(),
        OperationRecord {
            fingerprint: op.fingerprint.clone(),
            answer,
            at_ms: now,
        },
    );
}

/// The conversation history with each stored summary standing in for its range: the turns a
/// summary covers are left out, and the summary is a section of its own (layer 5, data).
pub(crate) struct CompactedHistory {
    pub(crate) inner: Arc<WorkingMemoryContributor>,
    pub(crate) state: Arc<dyn SessionState>,
    pub(crate) store: String,
}

impl Contributor for CompactedHistory {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn layer(&self) -> RuntimeLayer {
        self.inner.layer()
    }
    fn meta(&self) -> ContributorMeta {
        self.inner.meta()
    }
    fn cache_policy(&self) -> CachePolicy {
        CachePolicy::Never
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let turns = self.inner.contribute(ctx)?;
        let (doc, _) = read_doc(&*self.state, &ctx.session_id)
            .map_err(|e| ContributorError::Source(e.to_string()))?;
        if doc.compactions.is_empty() {
            return Ok(turns);
        }
        let mut out = Vec::with_capacity(turns.len() + doc.compactions.len());
        for r in &doc.compactions {
            out.push(self.summary_section(r)?);
        }
        out.extend(turns.into_iter().filter(|s| {
            s.turn()
                .is_none_or(|t| !doc.compactions.iter().any(|r| r.covers(t.seq)))
        }));
        Ok(out)
    }
}

impl CompactedHistory {
    /// The section of one summary: data of layer 5, named by its range, its provenance the
    /// range and the model that wrote it. Stable: it leads the conversation it summarises
    /// (before the turns that followed the range), and a new summary is a new stable prefix.
    fn summary_section(&self, r: &CompactionRecord) -> Result<Section, ContributorError> {
        let by = r
            .model
            .as_deref()
            .map_or_else(String::new, |m| format!(", written by {m}"));
        let text = format!(
            "Summary of the conversation's entries {}-{} ({} entries{by}):\n{}",
            r.first_seq, r.last_seq, r.entries, r.summary
        );
        let record = format!("{}-{}", r.first_seq, r.last_seq);
        Ok(self
            .inner
            .meta()
            .section(
                self.inner.id(),
                RuntimeLayer::WorkingMemory,
                format!("summary/{record}"),
                text,
            )
            .map_err(|e| ContributorError::Source(e.to_string()))?
            .stability(Stability::Stable)
            .source(SourceKind::Store, &self.store)
            .record(Some(&record), Some(r.at_ms), None)
            .build())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, role: Role, call: Option<&str>) -> Entry {
        Entry {
            seq,
            session: Arc::from("s"),
            role,
            call_id: call.map(Into::into),
            content: "x".into(),
            at_ms: 0,
            meta: None,
            session_seq: seq,
        }
    }

    fn log() -> Vec<Entry> {
        vec![
            entry(1, Role::User, None),
            entry(2, Role::ToolCall, Some("c1")),
            entry(3, Role::ToolResult, Some("c1")),
            entry(4, Role::Assistant, None),
            entry(5, Role::User, None),
            entry(6, Role::Assistant, None),
            entry(7, Role::User, None),
        ]
    }

    fn summary(first: u64, last: u64) -> Compaction {
        Compaction {
            first_seq: first,
            last_seq: last,
            summary: "They checked the deploy calendar.".into(),
            model: Some("claude-haiku-4-5".into()),
        }
    }

    /// Every refusal names its reason; a range that keeps pairs and stops before the exchange
    /// in progress is accepted.
    #[test]
    fn ranges_are_checked() {
        let log = log();
        assert_eq!(check(&summary(1, 4), &log, &[]), Ok(4));
        assert_eq!(check(&summary(1, 6), &log, &[]), Ok(6));
        let refused = |c: Compaction, existing: &[CompactionRecord], says: &str| {
            let why = check(&c, &log, existing).unwrap_err();
            assert!(why.contains(says), "{why}");
        };
        refused(summary(4, 2), &[], "comes after");
        refused(summary(1, 9), &[], "no entry 9");
        refused(summary(0, 3), &[], "no entry 0");
        refused(summary(1, 7), &[], "exchange in progress");
        refused(summary(1, 2), &[], "splits tool call `c1`");
        refused(summary(3, 4), &[], "splits tool call `c1`");
        let stored = CompactionRecord {
            first_seq: 1,
            last_seq: 4,
            entries: 4,
            summary: "s".into(),
            model: None,
            at_ms: 0,
        };
        refused(
            summary(4, 6),
            std::slice::from_ref(&stored),
            "overlaps the summary of 1-4",
        );
        assert_eq!(check(&summary(5, 6), &log, &[stored]), Ok(2));
        let mut empty = summary(1, 4);
        empty.summary = " \n".into();
        refused(empty, &[], "summary is empty");
        let mut huge = summary(1, 4);
        huge.summary = "a".repeat(MAX_SUMMARY_BYTES + 1);
        refused(huge, &[], "over the limit");
        let mut bad_model = summary(1, 4);
        bad_model.model = Some("a\nb".into());
        refused(bad_model, &[], "printable");
    }
}
