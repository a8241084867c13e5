//! Working memory (layer 5): the append-only session log of user and assistant messages, tool
//! calls and tool results, and the selection of the newest entries that fit a token budget.
//!
//! Every entry read back from a store is untrusted content (ADR-0006): it is handed to the
//! assembler with its provenance and fenced there, never interpreted here.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use strata_core::{Content, Keep, Role, Tokenizer, Turn};

use crate::error::{MemoryError, Result};
use crate::options::{check_label, StoreOptions};

/// The longest session id, agent id or tool call id accepted, in bytes.
pub const MAX_LABEL_BYTES: usize = 128;

/// The largest `meta` object an entry may carry, in bytes of JSON text (256 KiB).
pub const MAX_META_BYTES: usize = 256 * 1024;

/// An entry to append to a session log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewEntry {
    /// Who spoke.
    pub role: Role,
    /// The text (for tool calls, the call's arguments as the runtime records them).
    pub content: String,
    /// The id linking a tool call and its result; required for those two roles, refused for
    /// the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Metadata the caller keeps with the entry: the text of one JSON object, at most
    /// [`MAX_META_BYTES`]. Stores keep it byte for byte and never interpret it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<String>,
}

impl NewEntry {
    /// A user message.
    pub fn user(content: impl Into<String>) -> NewEntry {
        NewEntry {
            role: Role::User,
            content: content.into(),
            call_id: None,
            meta: None,
        }
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> NewEntry {
        NewEntry {
            role: Role::Assistant,
            content: content.into(),
            call_id: None,
            meta: None,
        }
    }

    /// A tool call with its id.
    pub fn tool_call(call_id: impl Into<String>, content: impl Into<String>) -> NewEntry {
        NewEntry {
            role: Role::ToolCall,
            content: content.into(),
            call_id: Some(call_id.into()),
            meta: None,
        }
    }

    /// The result of the tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> NewEntry {
        NewEntry {
            role: Role::ToolResult,
            content: content.into(),
            call_id: Some(call_id.into()),
            meta: None,
        }
    }

    /// The same entry carrying `meta`, the text of one JSON object (checked when the entry is
    /// applied: [`MemoryError::Invalid`] for anything else, [`MemoryError::EntryTooLarge`]
    /// over [`MAX_META_BYTES`]).
    #[must_use]
    pub fn with_meta(mut self, meta: impl Into<String>) -> NewEntry {
        self.meta = Some(meta.into());
        self
    }
}

/// An entry as stored: the appended entry with its sequence number and time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the store's log. Sequence numbers only grow and are never reused, so within
    /// a session a larger number is a newer entry.
    pub seq: u64,
    /// The session.
    pub session: Arc<str>,
    /// Position within the session: 1, 2, 3... in the order of appending, never reused, not
    /// even after a clear (ADR-0036). A store that reads a session whose numbers have a gap
    /// or a repeat reports damage instead of a shorter history.
    #[serde(default)]
    pub session_seq: u64,
    /// Who spoke.
    pub role: Role,
    /// The tool call id, for tool calls and results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<Arc<str>>,
    /// The text.
    pub content: Content,
    /// When it was appended, Unix milliseconds.
    pub at_ms: i64,
    /// The entry's metadata object, exactly as appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Arc<str>>,
}

impl Entry {
    /// The turn metadata the assembler uses to drop the oldest turns first and keep a tool
    /// call and its result together (ADR-0008), with the failure flag of a tool result.
    pub fn turn(&self) -> Turn {
        let meta = self.meta();
        Turn {
            seq: self.seq,
            role: self.role,
            call_id: self.call_id.clone(),
            name: None,
            is_error: self.role == Role::ToolResult && meta.is_error,
            reasoning: if matches!(self.role, Role::Assistant | Role::ToolCall) {
                meta.reasoning
            } else {
                Vec::new()
            },
        }
    }

    /// Which end of the entry is kept when it is cut: what its `meta` asks for a tool result,
    /// the head otherwise (the newest user message is kept at both ends by the assembler).
    pub fn keep(&self) -> Keep {
        if self.role == Role::ToolResult {
            self.meta().keep
        } else {
            Keep::Head
        }
    }

    /// What the runtime recorded in this entry's `meta` (ADR-0039). A key that is missing or
    /// does not hold the type [`EntryMeta`] gives it reads as its default, so metadata written
    /// by another program never makes an entry unreadable.
    pub fn meta(&self) -> EntryMeta {
        self.meta
            .as_deref()
            .map(EntryMeta::read)
            .unwrap_or_default()
    }
}

/// The properties of an entry that the runtime keeps in its `meta` object and the history
/// contributor reads (ADR-0039). Other keys of the object are kept and ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryMeta {
    /// A tool result from a tool that failed (`"is_error": true`).
    pub is_error: bool,
    /// Which end of a tool result to keep when it is cut (`"keep": "tail"` for a log whose
    /// newest lines matter); the head by default.
    pub keep: Keep,
    /// For the entry that opens a model's reply: the model's reasoning before it, in its
    /// provider's form (`"reasoning": [...]`, ADR-0043).
    pub reasoning: Vec<strata_core::Reasoning>,
}

impl EntryMeta {
    /// The `meta` text for these properties; `None` when all are defaults.
    pub fn to_json(&self) -> Option<String> {
        let mut map = serde_json::Map::new();
        if self.is_error {
            map.insert("is_error".into(), serde_json::Value::Bool(true));
        }
        if self.keep != Keep::Head {
            map.insert("keep".into(), self.keep.name().into());
        }
        if !self.reasoning.is_empty() {
            let blocks = serde_json::to_value(&self.reasoning)
                .expect("reasoning blocks are plain JSON values");
            map.insert("reasoning".into(), blocks);
        }
        (!map.is_empty()).then(|| serde_json::Value::Object(map).to_string())
    }

    /// Read the properties from a `meta` text, leniently.
    pub fn read(meta: &str) -> EntryMeta {
        let Ok(map) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(meta)
        else {
            return EntryMeta::default();
        };
        EntryMeta {
            is_error: map
                .get("is_error")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            keep: map
                .get("keep")
                .and_then(serde_json::Value::as_str)
                .and_then(Keep::from_name)
                .unwrap_or_default(),
            reasoning: map
                .get("reasoning")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default(),
        }
    }
}

/// How long a store keeps the record of an operation (ADR-0031): a day, in milliseconds. A
/// repeat after that is a new operation.
pub const OPERATION_TTL_MS: i64 = 24 * 60 * 60 * 1000;

/// The longest operation key accepted, in bytes (printable ASCII).
pub const MAX_OPERATION_KEY_BYTES: usize = 255;

/// The longest operation fingerprint accepted, in bytes.
pub const MAX_FINGERPRINT_BYTES: usize = 128;

/// What a [`Batch`] expects the session's newest entry to be when it is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tail {
    /// Whatever it is.
    #[default]
    Any,
    /// The entry with this sequence number; `None`: the session has no entry. Otherwise the
    /// batch is refused with [`MemoryError::SessionChanged`].
    At(Option<u64>),
}

/// The record of one retry-safe operation on a session (ADR-0031): the caller's key, a digest of
/// what was asked, and the first answer, kept with the session for [`OPERATION_TTL_MS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// The caller's key (1 to 255 bytes of printable ASCII).
    pub key: String,
    /// A digest of what was asked, to tell a repeat from another operation under the same key.
    pub fingerprint: String,
    /// The first answer, as the caller gives it to a repeat.
    pub answer: String,
    /// When it was recorded, Unix milliseconds (set by the store).
    pub at_ms: i64,
}

impl Operation {
    /// An operation record; the store sets its time.
    pub fn new(
        key: impl Into<String>,
        fingerprint: impl Into<String>,
        answer: impl Into<String>,
    ) -> Operation {
        Operation {
            key: key.into(),
            fingerprint: fingerprint.into(),
            answer: answer.into(),
            at_ms: 0,
        }
    }
}

/// One change of a session log, applied whole or not at all (ADR-0031): optionally clear the
/// session, then append the entries in order, and keep the operation record, in one store
/// transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// What the session's newest entry must be.
    pub tail: Tail,
    /// Remove every entry of the session first (operation records stay).
    pub clear: bool,
    /// Entries to append, in order.
    pub entries: Vec<NewEntry>,
    /// The operation this batch completes.
    pub operation: Option<Operation>,
    /// Session state documents to remove in the same transaction (a reset's files, tools and
    /// compactions), each named as [`crate::state::SessionState`] names them. A store without
    /// session state has none to remove.
    pub remove_state: Vec<String>,
}

/// What applying a [`Batch`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Entries removed by `clear`.
    pub cleared: usize,
    /// The entries appended, as stored.
    pub entries: Vec<Entry>,
}

/// A session log (layer 5). Appends are acknowledged only once stored; entries are never
/// edited, only appended or cleared per session.
pub trait WorkingMemory: Send + Sync {
    /// The store's name, used as the provenance name of sections built from it.
    fn store_name(&self) -> &str;

    /// Apply `batch` to `session` in one transaction: every entry is appended and the operation
    /// recorded, or nothing is changed (ADR-0031).
    ///
    /// Refused, with nothing changed: [`MemoryError::SessionChanged`] when the session's newest
    /// entry is not the batch's `tail`; [`MemoryError::OperationExists`] when the session holds
    /// a live record under the operation's key; [`MemoryError::Invalid`] for an empty or
    /// over-long session id, a bad operation key, a tool call or result without a call id or a
    /// user or assistant entry with one, a second call with the same id in the session (or the
    /// batch), a result whose call is in neither, or a second result for a call;
    /// [`MemoryError::EntryTooLarge`] over the size limit.
    fn apply(&self, session: &str, batch: Batch) -> Result<Applied>;

    /// The live record of operation `key` on `session`, if any (older than
    /// [`OPERATION_TTL_MS`] is not live).
    fn operation(&self, session: &str, key: &str) -> Result<Option<Operation>>;

    /// The sequence number of the session's newest entry, `None` for an empty session.
    /// SQLite and PostgreSQL read one index entry (the default reads the session).
    fn last_seq(&self, session: &str) -> Result<Option<u64>> {
        Ok(self.entries(session)?.last().map(|e| e.seq))
    }

    /// Append one entry to `session` and return it as stored: [`WorkingMemory::apply`] with
    /// one entry, refused for the same reasons.
    fn append(&self, session: &str, entry: NewEntry) -> Result<Entry> {
        let applied = self.apply(
            session,
            Batch {
                entries: vec![entry],
                ..Batch::default()
            },
        )?;
        applied.entries.into_iter().next().ok_or_else(|| {
            MemoryError::invalid("working-memory entry", "the store appended nothing")
        })
    }

    /// Every entry of `session`, oldest first.
    fn entries(&self, session: &str) -> Result<Vec<Entry>>;

    /// Whether `session` has any entry. SQLite, PostgreSQL and the in-process stores answer
    /// without reading the session's entries (the default reads them all).
    fn has_session(&self, session: &str) -> Result<bool> {
        Ok(!self.entries(session)?.is_empty())
    }

    /// The exchange in progress: the newest user entry of `session` and every entry after it,
    /// oldest first; empty when the session has no user entry. SQLite and PostgreSQL read only
    /// those entries, finding the user entry by walking the session's index back from its
    /// newest entry (the default reads the whole session).
    fn current_exchange(&self, session: &str) -> Result<Vec<Entry>> {
        let mut all = self.entries(session)?;
        match all.iter().rposition(|e| e.role == Role::User) {
            Some(i) => Ok(all.split_off(i)),
            None => Ok(Vec::new()),
        }
    }

    /// The newest entries of `session` whose content fits in `token_budget` tokens counted by
    /// `tokenizer`, oldest first. See [`select_recent`] for the exact rule.
    fn recent_within(
        &self,
        session: &str,
        token_budget: usize,
        tokenizer: &dyn Tokenizer,
    ) -> Result<Vec<Entry>> {
        let all = self.entries(session)?;
        Ok(select_recent(&all, token_budget, tokenizer))
    }

    /// Remove every entry of `session`; returns how many were removed. Sequence numbers are
    /// not reused afterwards. Operation records stay until they expire.
    fn clear(&self, session: &str) -> Result<usize> {
        Ok(self
            .apply(
                session,
                Batch {
                    clear: true,
                    ..Batch::default()
                },
            )?
            .cleared)
    }
}

/// Choose the newest entries that fit `token_budget` (content tokens by `tokenizer`), keeping
/// every tool call together with its result.
///
/// The result is a contiguous run of the newest entries, oldest first: it starts at the
/// earliest position where (a) the entries from there to the end fit the budget and (b) no
/// tool call/result pair is split (a result whose call is older than the start). A tool result
/// whose call is not in `entries` at all is never returned. A call whose result has not arrived
/// yet is returned on its own (it is still pending). Because the run is contiguous, an entry
/// that alone exceeds the budget hides everything older than it: working memory is a
/// conversation and is never returned with holes.
pub fn select_recent(
    entries: &[Entry],
    token_budget: usize,
    tokenizer: &dyn Tokenizer,
) -> Vec<Entry> {
    select_recent_counting(entries, token_budget, &mut |e| {
        tokenizer.count(e.content.as_str())
    })
}

/// [`select_recent`] with the content tokens of each entry given by `count`.
fn select_recent_counting(
    entries: &[Entry],
    token_budget: usize,
    count: &mut dyn FnMut(&Entry) -> usize,
) -> Vec<Entry> {
    // Orphan results (no call anywhere in the log) cannot be paired: leave them out.
    let calls: std::collections::HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.role == Role::ToolCall)
        .filter_map(|(i, e)| e.call_id.as_deref().map(|c| (c, i)))
        .collect();
    let kept: Vec<&Entry> = entries
        .iter()
        .filter(|e| match (e.role, e.call_id.as_deref()) {
            (Role::ToolResult, Some(c)) => calls.contains_key(c),
            (Role::ToolResult, None) => false,
            _ => true,
        })
        .collect();
    let n = kept.len();
    // A start position s splits a pair when call < s <= result. Mark those positions.
    let index_of_call: std::collections::HashMap<&str, usize> = kept
        .iter()
        .enumerate()
        .filter(|(_, e)| e.role == Role::ToolCall)
        .filter_map(|(i, e)| e.call_id.as_deref().map(|c| (c, i)))
        .collect();
    let mut split = vec![0i64; n + 1];
    for (r, e) in kept.iter().enumerate() {
        if e.role == Role::ToolResult {
            if let Some(&c) = e.call_id.as_deref().and_then(|id| index_of_call.get(id)) {
                if c < r {
                    split[c + 1] += 1;
                    split[r + 1] -= 1;
                }
            }
        }
    }
    let mut invalid = vec![false; n + 1];
    let mut running = 0i64;
    for (s, slot) in invalid.iter_mut().enumerate() {
        running += split[s];
        *slot = running > 0;
    }
    let mut best = n;
    let mut used = 0usize;
    for s in (0..n).rev() {
        used = used.saturating_add(count(kept[s]));
        if used > token_budget {
            break;
        }
        if !invalid[s] {
            best = s;
        }
    }
    kept[best..].iter().map(|e| (*e).clone()).collect()
}

/// The first page of a paged history read: about what a turn's history budget holds.
pub(crate) const FIRST_PAGE: usize = 32;

/// [`select_recent`] for a store that can read a session newest first, a page at a time: it
/// reads pages until the entries read exceed the budget (or the session is read to its start),
/// so a long conversation costs what the budget holds, not its length, and the result is
/// exactly `select_recent` over the whole session.
///
/// `older(before, limit)` returns up to `limit` entries with sequence numbers below `before`
/// (both as the stores' SQL integers; `i64::MAX` on the first call)
/// (all when `None`), newest first. `has_call(id)` says whether the session has a tool call
/// with that id, for results whose call is older than the pages read: such a call splits
/// every start position up to its result, as it would in the whole session, and a result
/// whose call the session lacks is left out, as `select_recent` leaves it out.
pub(crate) fn select_recent_paged(
    token_budget: usize,
    tokenizer: &dyn Tokenizer,
    first_page: usize,
    mut older: impl FnMut(i64, i64) -> Result<Vec<Entry>>,
    mut has_call: impl FnMut(&str) -> Result<bool>,
) -> Result<Vec<Entry>> {
    let mut read: Vec<Entry> = Vec::new(); // oldest first
    let mut limit = first_page.max(1);
    let mut counted = 0usize; // tokens of the entries read that select_recent would keep
    let mut checked: std::collections::HashMap<Arc<str>, bool> = std::collections::HashMap::new();
    // Each entry is counted once, here or by the selection (sequence numbers are unique).
    let mut counts: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut count = |e: &Entry| -> usize {
        *counts
            .entry(e.seq)
            .or_insert_with(|| tokenizer.count(e.content.as_str()))
    };
    loop {
        let before = read
            .first()
            .map_or(i64::MAX, |e| i64::try_from(e.seq).unwrap_or(i64::MAX));
        let mut page = older(before, i64::try_from(limit).unwrap_or(i64::MAX))?;
        let complete = page.len() < limit;
        page.reverse();
        let new = page.len();
        page.append(&mut read);
        read = page;
        if complete {
            return Ok(select_recent_counting(&read, token_budget, &mut count));
        }
        // Count the new (older) entries; a result counts when its call exists anywhere.
        let calls_read: std::collections::HashSet<&str> = read
            .iter()
            .filter(|e| e.role == Role::ToolCall)
            .filter_map(|e| e.call_id.as_deref())
            .collect();
        // Newest first, and no further than the budget needs.
        for e in read[..new].iter().rev() {
            let keep = match (e.role, e.call_id.as_deref()) {
                (Role::ToolResult, Some(c)) if calls_read.contains(c) => true,
                (Role::ToolResult, Some(c)) => match checked.get(c) {
                    Some(&known) => known,
                    None => {
                        let found = has_call(c)?;
                        checked.insert(Arc::from(c), found);
                        found
                    }
                },
                (Role::ToolResult, None) => false,
                _ => true,
            };
            if keep {
                counted = counted.saturating_add(count(e));
                if counted > token_budget {
                    break;
                }
            }
        }
        if counted > token_budget {
            return Ok(select_recent_read(
                &read,
                &calls_read,
                &checked,
                token_budget,
                &mut count,
            ));
        }
        limit = limit.saturating_mul(2);
    }
}

/// The end of [`select_recent_paged`] once the entries `read` (oldest first) hold more than
/// the budget: every start `select_recent` may choose lies in them. Calls older than them
/// (the results' calls not among `calls_read` that `checked` found in the session) stand in
/// as empty entries before them, so the pairs they open still split.
fn select_recent_read(
    read: &[Entry],
    calls_read: &std::collections::HashSet<&str>,
    checked: &std::collections::HashMap<Arc<str>, bool>,
    token_budget: usize,
    count: &mut dyn FnMut(&Entry) -> usize,
) -> Vec<Entry> {
    let mut earlier_calls: Vec<Arc<str>> = Vec::new();
    for e in read {
        if let (Role::ToolResult, Some(c)) = (e.role, e.call_id.as_deref()) {
            if !calls_read.contains(c)
                && checked.get(c) == Some(&true)
                && !earlier_calls.iter().any(|k| &**k == c)
            {
                earlier_calls.push(Arc::from(c));
            }
        }
    }
    let stand_ins = earlier_calls.len();
    let mut list: Vec<Entry> = earlier_calls
        .iter()
        .map(|c| Entry {
            seq: 0,
            session: Arc::from(""),
            session_seq: 0,
            role: Role::ToolCall,
            call_id: Some(c.clone()),
            content: Content::from(""),
            at_ms: 0,
            meta: None,
        })
        .collect();
    list.extend(read.iter().cloned());
    // The stand-ins are empty and never counted.
    let chosen = select_recent_counting(&list, token_budget, &mut |e| {
        if e.seq == 0 && e.session.is_empty() {
            0
        } else {
            count(e)
        }
    });
    debug_assert!(chosen.len() <= list.len() - stand_ins);
    chosen
}

/// The checks on an entry that need no store state: session id, call id presence, size.
pub(crate) fn check_new_entry(opts: &StoreOptions, session: &str, entry: &NewEntry) -> Result<()> {
    check_label("session id", session, MAX_LABEL_BYTES)?;
    opts.check_size("working-memory entry", &entry.content)?;
    if let Some(meta) = &entry.meta {
        check_meta(meta)?;
    }
    match (entry.role, entry.call_id.as_deref()) {
        (Role::ToolCall | Role::ToolResult, Some(id)) => {
            check_label("tool call id", id, MAX_LABEL_BYTES)
        }
        (Role::ToolCall | Role::ToolResult, None) => Err(MemoryError::invalid(
            "working-memory entry",
            format!(
                "a {} entry needs the call id that links the call and its result",
                entry.role.name()
            ),
        )),
        (Role::User | Role::Assistant, Some(_)) => Err(MemoryError::invalid(
            "working-memory entry",
            format!(
                "a {} entry has no tool call id; use the tool_call and tool_result roles for tool traffic",
                entry.role.name()
            ),
        )),
        (Role::User | Role::Assistant, None) => Ok(()),
    }
}

/// Check an entry's `meta`: at most [`MAX_META_BYTES`] of JSON text holding one object.
pub(crate) fn check_meta(meta: &str) -> Result<()> {
    if meta.len() > MAX_META_BYTES {
        return Err(MemoryError::EntryTooLarge {
            what: "working-memory entry meta",
            size: meta.len(),
            limit: MAX_META_BYTES,
        });
    }
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(meta)
        .map(drop)
        .map_err(|e| {
            MemoryError::invalid(
                "working-memory entry meta",
                format!("it must be the text of one JSON object ({e})"),
            )
        })
}

/// Check a batch before a store opens its transaction: the session id, every entry on its own,
/// and the operation key and fingerprint.
pub(crate) fn check_batch(opts: &StoreOptions, session: &str, batch: &Batch) -> Result<()> {
    check_label("session id", session, MAX_LABEL_BYTES)?;
    for e in &batch.entries {
        check_new_entry(opts, session, e)?;
    }
    if let Some(op) = &batch.operation {
        check_operation_key(&op.key)?;
        if op.fingerprint.is_empty() || op.fingerprint.len() > MAX_FINGERPRINT_BYTES {
            return Err(MemoryError::invalid(
                "operation fingerprint",
                format!("it must hold 1 to {MAX_FINGERPRINT_BYTES} bytes"),
            ));
        }
        opts.check_size("operation answer", &op.answer)?;
    }
    for name in &batch.remove_state {
        crate::state::check_state_key(session, name)?;
    }
    Ok(())
}

/// Check an operation key: 1 to [`MAX_OPERATION_KEY_BYTES`] bytes of printable ASCII.
pub fn check_operation_key(key: &str) -> Result<()> {
    if key.is_empty()
        || key.len() > MAX_OPERATION_KEY_BYTES
        || !key.bytes().all(|b| (0x20..0x7f).contains(&b))
    {
        return Err(MemoryError::invalid(
            "operation key",
            format!("it must hold 1 to {MAX_OPERATION_KEY_BYTES} bytes of printable ASCII"),
        ));
    }
    Ok(())
}

/// Check the entries of a batch against the session's call ids, in order: `state_of` answers
/// for a call id what the session held before the batch; the batch's own calls and results
/// count for the entries after them.
pub(crate) fn check_batch_links(
    session: &str,
    entries: &[NewEntry],
    mut state_of: impl FnMut(&str) -> Result<CallState>,
) -> Result<()> {
    let mut seen: std::collections::HashMap<&str, CallState> = std::collections::HashMap::new();
    for e in entries {
        let Some(id) = e.call_id.as_deref() else {
            continue;
        };
        let state = match seen.get(id) {
            Some(s) => *s,
            None => state_of(id)?,
        };
        check_call_link(session, e, state)?;
        let mut next = state;
        next.has_call |= e.role == Role::ToolCall;
        next.has_result |= e.role == Role::ToolResult;
        seen.insert(id, next);
    }
    Ok(())
}

/// Check that `new` entries may follow `held`, the entries a session holds: the pairing rules
/// of [`WorkingMemory::apply`], for a caller that must know before it writes anything else.
pub fn check_links(session: &str, held: &[Entry], new: &[NewEntry]) -> Result<()> {
    check_batch_links(session, new, |id| {
        let mut state = CallState::default();
        for e in held.iter().filter(|e| e.call_id.as_deref() == Some(id)) {
            state.has_call |= e.role == Role::ToolCall;
            state.has_result |= e.role == Role::ToolResult;
        }
        Ok(state)
    })
}

/// Every check of `batch` against a session held in process memory (the in-process store and
/// the file log): its entries `held` and its operation records `ops`, as they are before the
/// batch, at `now`. The databases make the same checks with queries inside their transaction.
pub(crate) fn check_held(
    session: &str,
    batch: &Batch,
    held: &[Entry],
    ops: Option<&std::collections::HashMap<String, Operation>>,
    now: i64,
) -> Result<()> {
    check_tail(session, batch.tail, held.last().map(|e| e.seq))?;
    if let Some(op) = &batch.operation {
        if ops
            .and_then(|o| o.get(&op.key))
            .is_some_and(|o| operation_live(o.at_ms, now))
        {
            return Err(MemoryError::OperationExists {
                session: session.to_owned(),
                key: op.key.clone(),
            });
        }
    }
    let after_clear = if batch.clear { &[][..] } else { held };
    check_links(session, after_clear, &batch.entries)
}

/// Refuse a batch whose tail is not the session's.
pub(crate) fn check_tail(session: &str, tail: Tail, last: Option<u64>) -> Result<()> {
    match tail {
        Tail::At(expected) if expected != last => Err(MemoryError::SessionChanged {
            session: session.to_owned(),
            expected,
            found: last,
        }),
        _ => Ok(()),
    }
}

/// The numbering of one session's entries as a database keeps it beside them (ADR-0036): the
/// session number of its oldest live entry and the number the next entry gets. The session
/// holds `next - first` entries, numbered `first..next`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SessionSpan {
    /// The session number of the oldest live entry (equal to `next` when there is none).
    pub first: u64,
    /// The session number the next entry gets.
    pub next: u64,
}

impl SessionSpan {
    /// The span of a session that never held an entry.
    pub(crate) const NEW: SessionSpan = SessionSpan { first: 1, next: 1 };

    /// How many entries the session holds.
    pub(crate) fn len(self) -> u64 {
        self.next.saturating_sub(self.first)
    }

    /// The span a database row of `session` at `location` holds: damage unless
    /// `1 <= first <= next`.
    pub(crate) fn stored(
        location: &str,
        session: &str,
        first: i64,
        next: i64,
    ) -> Result<SessionSpan> {
        match (u64::try_from(first), u64::try_from(next)) {
            (Ok(first), Ok(next)) if first >= 1 && first <= next => Ok(SessionSpan { first, next }),
            _ => Err(MemoryError::Corrupt {
                location: location.to_owned(),
                detail: format!("wm_sessions row `{session}` holds the span {first}..{next}"),
            }),
        }
    }
}

/// Which part of a session a read returned, for [`check_span`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanPart {
    /// Every entry.
    Whole,
    /// The newest entries, down to some entry (at least one when the session has any).
    Newest,
}

/// Check entries read from a database (oldest first) against the session's span: numbered
/// without a gap or a repeat, ending at the newest entry and, for a whole read, starting at
/// the oldest. Anything else is damage ([`MemoryError::Corrupt`] at `location`): an index or a
/// page lost entries, or a number was changed, and a shorter history must not be served as
/// if it were the whole one.
pub(crate) fn check_span(
    location: &str,
    session: &str,
    span: SessionSpan,
    entries: &[Entry],
    part: SpanPart,
) -> Result<()> {
    let (first, last) = (span.first, span.next.saturating_sub(1));
    let damaged = |what: String| MemoryError::Corrupt {
        location: location.to_owned(),
        detail: format!(
            "session `{session}` should hold entries {first} to {last}, but {what}; \
             entries were lost or changed on disk"
        ),
    };
    if span.first > span.next {
        return Err(damaged(
            "its record says the first is after the next".into(),
        ));
    }
    let Some(newest) = entries.last() else {
        return if span.len() > 0 {
            Err(damaged("none was found".into()))
        } else {
            Ok(())
        };
    };
    if newest.session_seq + 1 != span.next {
        return Err(damaged(format!(
            "the newest found is number {}",
            newest.session_seq
        )));
    }
    for w in entries.windows(2) {
        if w[0].session_seq + 1 != w[1].session_seq {
            return Err(damaged(format!(
                "number {} is followed by number {}",
                w[0].session_seq, w[1].session_seq
            )));
        }
    }
    let oldest = entries[0].session_seq;
    if oldest < span.first || (part == SpanPart::Whole && oldest != span.first) {
        return Err(damaged(format!("the oldest found is number {oldest}")));
    }
    Ok(())
}

/// A database read of a session whose parts disagree: damage to an index or a page.
pub(crate) fn inconsistent(location: &str, session: &str, what: &str) -> MemoryError {
    MemoryError::Corrupt {
        location: location.to_owned(),
        detail: format!(
            "session `{session}`: {what}; an index or a page of its entries was damaged on disk"
        ),
    }
}

/// Check the exchange in progress a database read (`found`, oldest first) against the
/// session's span: it ends at the newest entry without a gap, holds no user entry after its
/// first, and when it is empty although the session is not, `whole` (the session read whole
/// and checked) must hold no user entry either.
pub(crate) fn check_exchange(
    location: &str,
    session: &str,
    span: SessionSpan,
    found: &[Entry],
    whole: impl FnOnce() -> Result<Vec<Entry>>,
) -> Result<()> {
    if !found.is_empty() {
        check_span(location, session, span, found, SpanPart::Newest)?;
    }
    if found.iter().skip(1).any(|e| e.role == Role::User) {
        return Err(inconsistent(
            location,
            session,
            "the exchange read holds a newer user entry",
        ));
    }
    if found.is_empty() && span.len() > 0 && whole()?.iter().any(|e| e.role == Role::User) {
        return Err(inconsistent(
            location,
            session,
            "the exchange read missed a user entry",
        ));
    }
    Ok(())
}

/// For a paged read, a tool call its index did not find: `all`, the whole session read and
/// checked, must not hold it either (a result always follows its call), and then the result
/// is an orphan (`false`).
pub(crate) fn confirm_no_call(
    location: &str,
    session: &str,
    call: &str,
    all: &[Entry],
) -> Result<bool> {
    if all
        .iter()
        .any(|e| e.role == Role::ToolCall && e.call_id.as_deref() == Some(call))
    {
        return Err(inconsistent(
            location,
            session,
            &format!("the call index misses tool call `{call}`"),
        ));
    }
    Ok(false)
}

/// Check one page of a paged read, newest first, against the session's span: it must start at
/// number `expect` (the one below the oldest entry read so far; `span.next - 1` at first),
/// count down by one, and, when it is the last page (`complete`), end at the oldest entry.
/// Returns the number the next page must start at.
pub(crate) fn check_page(
    location: &str,
    session: &str,
    span: SessionSpan,
    expect: u64,
    page: &[Entry],
    complete: bool,
) -> Result<u64> {
    let mut want = expect;
    for e in page {
        if e.session_seq != want || want < span.first {
            return Err(MemoryError::Corrupt {
                location: location.to_owned(),
                detail: format!(
                    "session `{session}` should hold entries {} to {}, and number {want} was expected next (newest first), but number {} was found; entries were lost or changed on disk",
                    span.first,
                    span.next.saturating_sub(1),
                    e.session_seq
                ),
            });
        }
        want = want.saturating_sub(1);
    }
    if complete && want.saturating_add(1) != span.first {
        return Err(MemoryError::Corrupt {
            location: location.to_owned(),
            detail: format!(
                "session `{session}` should hold entries {} to {}, but its oldest found is number {}; entries were lost on disk",
                span.first,
                span.next.saturating_sub(1),
                want.saturating_add(1)
            ),
        });
    }
    Ok(want)
}

/// Whether an operation recorded at `at_ms` is still live at `now_ms`.
pub(crate) fn operation_live(at_ms: i64, now_ms: i64) -> bool {
    at_ms > now_ms.saturating_sub(OPERATION_TTL_MS)
}

/// What a session already holds for one call id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CallState {
    /// A tool call with this id exists.
    pub has_call: bool,
    /// A tool result with this id exists.
    pub has_result: bool,
}

/// The checks that need the session's state for the entry's call id.
pub(crate) fn check_call_link(session: &str, entry: &NewEntry, state: CallState) -> Result<()> {
    let id = entry.call_id.as_deref().unwrap_or_default();
    match entry.role {
        Role::ToolCall if state.has_call => Err(MemoryError::invalid(
            "working-memory entry",
            format!("session `{session}` already has a tool call with id `{id}`; call ids must be unique within a session"),
        )),
        Role::ToolResult if !state.has_call => Err(MemoryError::invalid(
            "working-memory entry",
            format!("session `{session}` has no tool call with id `{id}`; append the call before its result"),
        )),
        Role::ToolResult if state.has_result => Err(MemoryError::invalid(
            "working-memory entry",
            format!("session `{session}` already has a result for tool call `{id}`"),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::EstimateTokenizer;

    fn entry(seq: u64, role: Role, call: Option<&str>, text: &str) -> Entry {
        Entry {
            seq,
            session: Arc::from("s"),
            session_seq: seq,
            role,
            call_id: call.map(Arc::from),
            content: Content::from(text),
            at_ms: 0,
            meta: None,
        }
    }

    #[test]
    fn keeps_pairs_together_and_stays_contiguous() {
        // Each text is 8 bytes = 2 estimated tokens.
        let log = vec![
            entry(1, Role::User, None, "aaaaaaaa"),
            entry(2, Role::ToolCall, Some("a"), "bbbbbbbb"),
            entry(3, Role::ToolCall, Some("b"), "cccccccc"),
            entry(4, Role::ToolResult, Some("a"), "dddddddd"),
            entry(5, Role::Assistant, None, "eeeeeeee"),
            entry(6, Role::ToolResult, Some("b"), "ffffffff"),
        ];
        let t = EstimateTokenizer::new();
        let seqs = |b| -> Vec<u64> {
            select_recent(&log, b, &t)
                .into_iter()
                .map(|e| e.seq)
                .collect()
        };
        assert_eq!(seqs(0), Vec::<u64>::new());
        // Starting at 6 would be fine alone, but 6 is b's result whose call is at 3.
        assert_eq!(seqs(2), Vec::<u64>::new());
        assert_eq!(seqs(8), Vec::<u64>::new());
        assert_eq!(seqs(9), Vec::<u64>::new());
        assert_eq!(seqs(10), vec![2, 3, 4, 5, 6]);
        assert_eq!(seqs(12), vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn orphan_results_are_dropped_and_pending_calls_kept() {
        let log = vec![
            entry(1, Role::ToolResult, Some("zz"), "orphan"),
            entry(2, Role::User, None, "hi"),
            entry(3, Role::ToolCall, Some("c"), "call"),
        ];
        let got = select_recent(&log, 100, &EstimateTokenizer::new());
        assert_eq!(got.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
    }

    /// What a session log can hold, as steps: a user or assistant entry, a new tool call, the
    /// result of a call made earlier (possibly one already answered elsewhere, never twice), or a
    /// result whose call never existed; contents of 0 to 23 bytes (0 to 6 estimated tokens).
    fn session(steps: &[(u8, u8, u8)]) -> Vec<Entry> {
        let mut log = Vec::new();
        let mut calls: Vec<String> = Vec::new();
        let mut answered = std::collections::HashSet::new();
        for (i, &(kind, pick, len)) in steps.iter().enumerate() {
            let seq = i as u64 + 1;
            let text = "x".repeat(usize::from(len % 24));
            let e = match kind % 5 {
                0 => entry(seq, Role::User, None, &text),
                1 => entry(seq, Role::Assistant, None, &text),
                2 => {
                    calls.push(format!("c{seq}"));
                    entry(seq, Role::ToolCall, calls.last().map(String::as_str), &text)
                }
                3 => {
                    let open: Vec<&String> =
                        calls.iter().filter(|c| !answered.contains(*c)).collect();
                    if open.is_empty() {
                        entry(seq, Role::User, None, &text)
                    } else {
                        let c = open[usize::from(pick) % open.len()].clone();
                        answered.insert(c.clone());
                        entry(seq, Role::ToolResult, Some(&c), &text)
                    }
                }
                _ => entry(seq, Role::ToolResult, Some(&format!("gone{pick}")), &text),
            };
            log.push(e);
        }
        log
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// Verifies ADR-0012: reading a session newest first, a page at a time, selects exactly
        /// what `select_recent` selects over the whole session, for every budget, with first
        /// pages of one entry up, pairs that span pages, results whose call is older than every
        /// page read or missing altogether, and entries of no tokens.
        #[test]
        fn paged_selection_equals_the_whole_session_selection(
            steps in proptest::collection::vec((0u8..5, 0u8..=255, 0u8..=255), 0..70),
            first_page in 1usize..6,
        ) {
            let log = session(&steps);
            let t = EstimateTokenizer::new();
            let total: usize = log.iter().map(|e| t.count(e.content.as_str())).sum();
            for budget in 0..=total + 3 {
                let paged = select_recent_paged(
                    budget,
                    &t,
                    first_page,
                    |before, limit| {
                        Ok(log
                            .iter()
                            .filter(|e| i64::try_from(e.seq).is_ok_and(|s| s < before))
                            .rev()
                            .take(usize::try_from(limit).unwrap_or(usize::MAX))
                            .cloned()
                            .collect())
                    },
                    |id| {
                        Ok(log
                            .iter()
                            .any(|e| e.role == Role::ToolCall && e.call_id.as_deref() == Some(id)))
                    },
                )
                .unwrap();
                proptest::prop_assert_eq!(&paged, &select_recent(&log, budget, &t), "budget {}", budget);
            }
        }
    }
}
