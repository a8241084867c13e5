//! The in-memory adapter: all three stores in process memory, for tests, demos and short-lived
//! runtimes. Nothing survives the process.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use strata_core::{Content, Role};

use crate::bm25::Bm25Index;
use crate::embed::{embed_checked, Embedder, HashEmbedder};
use crate::error::Result;
use crate::long_term::{
    check_tags, dot, fuse, prepare_batch, top_by_similarity, ListOptions, LongTermMemory, MemoryId,
    MemoryRecord, NewMemory, SearchHit, SearchMode, SearchOptions,
};
use crate::options::StoreOptions;
use crate::shared::{check_fact_key, Fact, Scope, SharedContext, SharedContextWriter};
use crate::text::{query_terms, MAX_QUERY_TERMS};
use crate::working::{
    check_batch, check_held, check_operation_key, operation_live, Applied, Batch, Entry, Operation,
    WorkingMemory,
};

#[derive(Debug, Default)]
struct Working {
    next_seq: u64,
    sessions: HashMap<Arc<str>, Vec<Entry>>,
    /// The session number each session's next entry gets (ADR-0036), kept across clears.
    next_session_seq: HashMap<Arc<str>, u64>,
    /// Operation records by session, then key (ADR-0031).
    operations: HashMap<Arc<str>, HashMap<String, Operation>>,
}

#[derive(Debug, Default)]
struct LongTerm {
    next_key: u64,
    keys: HashMap<MemoryId, u64>,
    docs: BTreeMap<u64, (MemoryRecord, Vec<f32>)>,
    index: Bm25Index,
}

/// Working memory, long-term memory and shared context held in process memory.
#[derive(Debug)]
pub struct InMemoryStore {
    name: String,
    options: StoreOptions,
    embedder: Arc<dyn Embedder>,
    working: Mutex<Working>,
    long_term: RwLock<LongTerm>,
    shared: RwLock<BTreeMap<(Scope, Arc<str>), Fact>>,
    state: Mutex<BTreeMap<(String, String), crate::state::StateDoc>>,
}

impl Default for InMemoryStore {
    fn default() -> Self {
        InMemoryStore::new()
    }
}

// A panic while a lock was held leaves data that is still consistent (every update below is
// applied in one step after validation), so a poisoned lock is taken over, not propagated.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
fn read<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}
fn write<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl InMemoryStore {
    /// An empty store with the built-in [`HashEmbedder`] and default options.
    pub fn new() -> InMemoryStore {
        InMemoryStore::with(Arc::new(HashEmbedder::default()), StoreOptions::default())
    }

    /// An empty store with this embedder and these options.
    pub fn with(embedder: Arc<dyn Embedder>, options: StoreOptions) -> InMemoryStore {
        InMemoryStore {
            name: options.name_or(|| "memory".to_owned()),
            options,
            embedder,
            working: Mutex::default(),
            long_term: RwLock::default(),
            shared: RwLock::default(),
            state: Mutex::default(),
        }
    }

    fn matches(rec: &MemoryRecord, agent: Option<&str>, tags: &[Arc<str>]) -> bool {
        agent.is_none_or(|a| &*rec.agent_id == a)
            && tags.iter().all(|t| rec.tags.binary_search(t).is_ok())
    }

    fn put_embedded(
        &self,
        lt: &mut LongTerm,
        m: NewMemory,
        tags: Vec<Arc<str>>,
        vector: Vec<f32>,
    ) -> MemoryRecord {
        let now = self.options.now_ms();
        let id = m.id.unwrap_or_else(|| MemoryId::generate(now));
        let (key, created_ms) = match lt.keys.get(&id) {
            Some(&k) => (k, lt.docs.get(&k).map_or(now, |(r, _)| r.created_ms)),
            None => {
                lt.next_key += 1;
                (lt.next_key, now)
            }
        };
        let record = MemoryRecord {
            id: id.clone(),
            agent_id: Arc::from(m.agent_id.as_str()),
            content: Content::from(m.content),
            tags,
            created_ms,
            updated_ms: now,
        };
        lt.index.insert(key, record.content.as_str());
        lt.keys.insert(id, key);
        lt.docs.insert(key, (record.clone(), vector));
        record
    }
}

impl WorkingMemory for InMemoryStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn apply(&self, session: &str, batch: Batch) -> Result<Applied> {
        check_batch(&self.options, session, &batch)?;
        let now = self.options.now_ms();
        // One lock for the whole batch: every check is made before anything changes.
        let mut w = lock(&self.working);
        let held = w.sessions.get(session).map_or(&[][..], Vec::as_slice);
        check_held(session, &batch, held, w.operations.get(session), now)?;
        let mut applied = Applied::default();
        // The state lock is taken after the working lock, as nowhere else holds both.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for name in &batch.remove_state {
            state.remove(&(session.to_owned(), name.clone()));
        }
        drop(state);
        if batch.clear {
            applied.cleared = w.sessions.remove(session).map_or(0, |v| v.len());
        }
        let key: Arc<str> = Arc::from(session);
        for entry in batch.entries {
            w.next_seq += 1;
            let next = w.next_session_seq.entry(key.clone()).or_insert(1);
            let session_seq = *next;
            *next += 1;
            let stored = Entry {
                seq: w.next_seq,
                session: key.clone(),
                session_seq,
                role: entry.role,
                call_id: entry.call_id.map(|c| Arc::from(c.as_str())),
                content: Content::from(entry.content),
                at_ms: now,
                meta: entry.meta.map(Arc::from),
            };
            w.sessions
                .entry(key.clone())
                .or_default()
                .push(stored.clone());
            applied.entries.push(stored);
        }
        if let Some(mut op) = batch.operation {
            op.at_ms = now;
            let ops = w.operations.entry(key).or_default();
            ops.retain(|_, o| operation_live(o.at_ms, now));
            ops.insert(op.key.clone(), op);
        }
        Ok(applied)
    }

    fn operation(&self, session: &str, key: &str) -> Result<Option<Operation>> {
        check_operation_key(key)?;
        let now = self.options.now_ms();
        Ok(lock(&self.working)
            .operations
            .get(session)
            .and_then(|ops| ops.get(key))
            .filter(|o| operation_live(o.at_ms, now))
            .cloned())
    }

    fn entries(&self, session: &str) -> Result<Vec<Entry>> {
        Ok(lock(&self.working)
            .sessions
            .get(session)
            .cloned()
            .unwrap_or_default())
    }

    fn has_session(&self, session: &str) -> Result<bool> {
        Ok(lock(&self.working)
            .sessions
            .get(session)
            .is_some_and(|v| !v.is_empty()))
    }

    fn current_exchange(&self, session: &str) -> Result<Vec<Entry>> {
        let held = lock(&self.working);
        let all = held.sessions.get(session).map_or(&[][..], Vec::as_slice);
        Ok(all
            .iter()
            .rposition(|e| e.role == Role::User)
            .map_or_else(Vec::new, |i| all[i..].to_vec()))
    }
}

impl LongTermMemory for InMemoryStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.embedder.dims()
    }

    fn put_many(&self, memories: Vec<NewMemory>) -> Result<Vec<MemoryRecord>> {
        let (tags, vectors) = prepare_batch(&self.options, self.embedder.as_ref(), &memories)?;
        let mut lt = write(&self.long_term);
        Ok(memories
            .into_iter()
            .zip(tags)
            .zip(vectors)
            .map(|((m, t), v)| self.put_embedded(&mut lt, m, t, v))
            .collect())
    }

    fn get(&self, id: &MemoryId) -> Result<Option<MemoryRecord>> {
        let lt = read(&self.long_term);
        Ok(lt
            .keys
            .get(id)
            .and_then(|k| lt.docs.get(k))
            .map(|(r, _)| r.clone()))
    }

    fn delete(&self, id: &MemoryId) -> Result<bool> {
        let mut lt = write(&self.long_term);
        let Some(key) = lt.keys.remove(id) else {
            return Ok(false);
        };
        lt.docs.remove(&key);
        lt.index.remove(key);
        Ok(true)
    }

    fn list(&self, options: &ListOptions) -> Result<Vec<MemoryRecord>> {
        options.check()?;
        let tags = check_tags(&options.tags)?;
        let lt = read(&self.long_term);
        let mut all: Vec<&MemoryRecord> = lt
            .docs
            .values()
            .map(|(r, _)| r)
            .filter(|r| Self::matches(r, options.agent_id.as_deref(), &tags))
            .collect();
        all.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        Ok(all
            .into_iter()
            .skip(options.offset)
            .take(options.limit.unwrap_or(usize::MAX))
            .cloned()
            .collect())
    }

    fn count(&self, agent_id: Option<&str>) -> Result<usize> {
        let lt = read(&self.long_term);
        Ok(lt
            .docs
            .values()
            .filter(|(r, _)| agent_id.is_none_or(|a| &*r.agent_id == a))
            .count())
    }

    fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<SearchHit>> {
        options.check()?;
        let tags = check_tags(&options.tags)?;
        let terms = query_terms(query, MAX_QUERY_TERMS);
        if terms.is_empty() || options.top_k == 0 {
            return Ok(Vec::new());
        }
        let n = options.candidate_count();
        let qv = if options.mode == SearchMode::Lexical {
            None
        } else {
            Some(embed_checked(self.embedder.as_ref(), &[query])?.remove(0))
        };
        let lt = read(&self.long_term);
        let agent = options.agent_id.as_deref();
        let keep = |k: u64| {
            lt.docs
                .get(&k)
                .is_some_and(|(r, _)| Self::matches(r, agent, &tags))
        };
        let lexical: Vec<MemoryId> = if options.mode == SearchMode::Vector {
            Vec::new()
        } else {
            let scored: Vec<(MemoryId, f64)> = lt
                .index
                .score(&terms, keep)
                .into_iter()
                .filter_map(|(k, s)| lt.docs.get(&k).map(|(r, _)| (r.id.clone(), s)))
                .collect();
            top_by_similarity(scored, n)
        };
        let vector: Vec<MemoryId> = match &qv {
            None => Vec::new(),
            Some(q) => {
                let scored: Vec<(MemoryId, f32)> = lt
                    .docs
                    .values()
                    .filter(|(r, _)| Self::matches(r, agent, &tags))
                    .map(|(r, v)| (r.id.clone(), dot(q, v)))
                    .filter(|(_, s)| options.keeps_similarity(*s))
                    .collect();
                top_by_similarity(scored, n)
            }
        };
        Ok(fuse(&lexical, &vector, options)
            .into_iter()
            .filter_map(|(id, score, lr, vr)| {
                let rec = lt.keys.get(&id).and_then(|k| lt.docs.get(k))?.0.clone();
                Some(SearchHit {
                    record: rec,
                    score,
                    lexical_rank: lr,
                    vector_rank: vr,
                })
            })
            .collect())
    }
}

impl SharedContext for InMemoryStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn fact(&self, scope: &Scope, key: &str) -> Result<Option<Fact>> {
        Ok(read(&self.shared)
            .get(&(scope.clone(), Arc::from(key)))
            .cloned())
    }

    fn facts(&self, scopes: &[Scope]) -> Result<Vec<Fact>> {
        let map = read(&self.shared);
        let mut out = Vec::new();
        for s in scopes {
            out.extend(
                map.iter()
                    .filter(|((sc, _), _)| sc == s)
                    .map(|(_, f)| f.clone()),
            );
        }
        Ok(out)
    }
}

impl SharedContextWriter for InMemoryStore {
    fn set_fact(&self, scope: &Scope, key: &str, value: &str) -> Result<Fact> {
        check_fact_key(key)?;
        self.options.check_size("shared fact", value)?;
        let fact = Fact {
            scope: scope.clone(),
            key: Arc::from(key),
            value: Content::from(value),
            updated_ms: self.options.now_ms(),
        };
        write(&self.shared).insert((scope.clone(), fact.key.clone()), fact.clone());
        Ok(fact)
    }

    fn remove_fact(&self, scope: &Scope, key: &str) -> Result<bool> {
        Ok(write(&self.shared)
            .remove(&(scope.clone(), Arc::from(key)))
            .is_some())
    }
}

impl crate::state::SessionState for InMemoryStore {
    fn state(&self, session: &str, name: &str) -> Result<Option<crate::state::StateDoc>> {
        crate::state::check_state_key(session, name)?;
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(state.get(&(session.to_owned(), name.to_owned())).cloned())
    }

    fn put_state(
        &self,
        session: &str,
        name: &str,
        value: &str,
        expected: Option<u64>,
    ) -> Result<Option<u64>> {
        crate::state::check_state_key(session, name)?;
        self.options.check_size("session state", value)?;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (session.to_owned(), name.to_owned());
        if state.get(&key).map(|d| d.version) != expected {
            return Ok(None);
        }
        let version = expected.map_or(1, |v| v.saturating_add(1));
        state.insert(
            key,
            crate::state::StateDoc {
                value: value.to_owned(),
                version,
                updated_ms: self.options.now_ms(),
            },
        );
        Ok(Some(version))
    }

    fn remove_state(&self, session: &str, name: &str) -> Result<bool> {
        crate::state::check_state_key(session, name)?;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(state
            .remove(&(session.to_owned(), name.to_owned()))
            .is_some())
    }
}
