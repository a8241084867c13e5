//! The contributor registry: the set of contributors of runtime sections (layers 3-6), looked
//! up by id, tag and source, shared by every session of a runtime (ADR-0011).
//!
//! Ids are unique; registering a second contributor under an id is an error, and replacing one
//! is an explicit [`Registry::replace`]. Everything an MCP server registered goes when it
//! disconnects ([`Registry::clear_mcp_server`]). Every change is logged with `tracing` and sent
//! to subscribers ([`Registry::subscribe`]) so the runtime can rebuild prompts.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use strata_core::{ContentHash, OperationalMode, RuntimeLayer, SectionId, SourceKind, ToolName};

use crate::cache::{Clock, SectionCache, SystemClock};
use crate::contributor::{Contributor, ContributorMeta};
use crate::gather::{AbandonedRuns, RefreshTracker};

/// A change in the registry, sent to every subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryEvent {
    /// A contributor was registered.
    ContributorAdded {
        /// Its id.
        id: Arc<str>,
        /// Its layer.
        layer: RuntimeLayer,
        /// Where it comes from.
        source: SourceKind,
    },
    /// A contributor was unregistered.
    ContributorRemoved {
        /// Its id.
        id: Arc<str>,
    },
    /// A contributor was replaced by a new version under the same id (a prompt changed).
    PromptUpdated {
        /// Its id.
        id: Arc<str>,
    },
    /// The operational mode changed.
    ModeChanged {
        /// The new mode.
        mode: OperationalMode,
    },
    /// The announced tool set changed; contributors tagged `tools` were invalidated.
    ToolsChanged,
    /// The active skills changed; contributors tagged `skills` were invalidated.
    SkillsChanged,
    /// An MCP server disconnected and everything it registered was removed.
    McpServerCleared {
        /// The server's name.
        server: Arc<str>,
        /// The ids removed, sorted.
        removed: Vec<Arc<str>>,
    },
    /// A new verified agent definition is in use; cached output of any other digest was dropped.
    DefinitionChanged {
        /// The new identity digest.
        digest: ContentHash,
    },
    /// A session was reset (the section cache holds no session's data and is kept).
    SessionReset {
        /// The session.
        session: Arc<str>,
    },
    /// The stable prefix a session sends changed (its digest differs from the previous turn's):
    /// the system channel, the tool definitions or the stable context, which holds the goals
    /// and the operational template (ADR-0045).
    SystemPromptUpdated {
        /// The session.
        session: Arc<str>,
        /// The new digest.
        digest: ContentHash,
    },
    /// A session's turn used another operational mode than its previous turn (ADR-0045).
    SessionModeChanged {
        /// The session.
        session: Arc<str>,
        /// The previous turn's mode.
        from: OperationalMode,
        /// This turn's mode.
        to: OperationalMode,
    },
    /// A session's turn activated other skills than its previous turn in this runtime, or is
    /// its first turn there (ADR-0049). Unlike [`RegistryEvent::SkillsChanged`], this says what
    /// one session uses and invalidates nothing.
    SessionSkillsUpdated {
        /// The session.
        session: Arc<str>,
        /// The ids of the skills now active, sorted.
        skills: Vec<Arc<str>>,
    },
    /// A session's turn offers the model other tools than its previous turn in this runtime,
    /// or is its first turn there (ADR-0049). Unlike [`RegistryEvent::ToolsChanged`], this
    /// says what one session offers and invalidates nothing.
    SessionToolsUpdated {
        /// The session.
        session: Arc<str>,
        /// The names of the tools now offered, sorted.
        tools: Vec<ToolName>,
    },
    /// The set of MCP servers with registered contributors changed.
    ActiveMcpUpdated {
        /// The servers now active, sorted.
        servers: Vec<Arc<str>>,
    },
    /// The runtime's active hooks changed.
    ActiveHooksUpdated {
        /// The hooks now active, sorted.
        hooks: Vec<Arc<str>>,
    },
}

/// Why a registry operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A contributor with this id is already registered.
    #[error("a contributor with id `{id}` is already registered: unregister it first, or use `replace` to update it")]
    Duplicate {
        /// The id.
        id: String,
    },
    /// No contributor has this id.
    #[error("no contributor with id `{id}` is registered: check the id, or register it first")]
    NotFound {
        /// The id.
        id: String,
    },
    /// The id is not a valid contributor id.
    #[error(
        "invalid contributor id `{id}`: ids are 1-128 characters of letters, digits and . _ : / -"
    )]
    InvalidId {
        /// The id.
        id: String,
    },
}

/// A registered contributor with the meta it declared when it was registered.
#[derive(Clone)]
pub struct Registered {
    pub(crate) id: Arc<str>,
    pub(crate) layer: RuntimeLayer,
    pub(crate) meta: ContributorMeta,
    pub(crate) contributor: Arc<dyn Contributor>,
    pub(crate) registered_ms: i64,
    /// How many abandoned (timed-out) runs of this contributor are still going; while any
    /// is, it is not started again, so a hung contributor does not pile up threads.
    pub(crate) abandoned: AbandonedRuns,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("id", &self.id)
            .field("layer", &self.layer)
            .field("source", &self.meta.source)
            .field("tags", &self.meta.tags)
            .finish_non_exhaustive()
    }
}

impl Registered {
    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The layer it writes to.
    pub fn layer(&self) -> RuntimeLayer {
        self.layer
    }
    /// The meta it declared when it was registered.
    pub fn meta(&self) -> &ContributorMeta {
        &self.meta
    }
    /// The contributor.
    pub fn contributor(&self) -> &Arc<dyn Contributor> {
        &self.contributor
    }
    /// When it was registered (Unix milliseconds by the registry's clock).
    pub fn registered_ms(&self) -> i64 {
        self.registered_ms
    }
    /// Whether it carries `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.meta.tags.iter().any(|t| &**t == tag)
    }
}

/// The registry of contributors. Thread-safe: share it as `Arc<Registry>` across sessions.
pub struct Registry {
    entries: RwLock<BTreeMap<Arc<str>, Registered>>,
    subscribers: Mutex<Vec<Sender<RegistryEvent>>>,
    pub(crate) cache: Option<Arc<SectionCache>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) refreshes: Arc<RefreshTracker>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("contributors", &self.ids())
            .field("cached", &self.cache.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

/// The tag whose contributors are invalidated when the announced tools change.
pub const TAG_TOOLS: &str = "tools";
/// The tag whose contributors are invalidated when the active skills change.
pub const TAG_SKILLS: &str = "skills";

impl Registry {
    /// An empty registry without a section cache, on the system clock.
    pub fn new() -> Registry {
        Registry::build(None, Arc::new(SystemClock::new()))
    }

    /// An empty registry whose gathering uses `cache` (and its clock).
    pub fn with_cache(cache: Arc<SectionCache>) -> Registry {
        let clock = cache.clock();
        Registry::build(Some(cache), clock)
    }

    /// An empty registry as `config` asks: with a section cache of its TTL on `clock`, or
    /// without a cache when caching is disabled.
    pub fn from_config(config: &crate::config::Config, clock: Arc<dyn Clock>) -> Registry {
        match config.section_cache(clock.clone()) {
            Some(cache) => Registry::with_cache(cache),
            None => Registry::build(None, clock),
        }
    }

    fn build(cache: Option<Arc<SectionCache>>, clock: Arc<dyn Clock>) -> Registry {
        Registry {
            entries: RwLock::new(BTreeMap::new()),
            subscribers: Mutex::new(Vec::new()),
            cache,
            clock,
            refreshes: Arc::new(RefreshTracker::default()),
        }
    }

    /// The section cache, when there is one.
    pub fn cache(&self) -> Option<&Arc<SectionCache>> {
        self.cache.as_ref()
    }

    /// Receive every later change. A receiver that is dropped is forgotten at the next event.
    pub fn subscribe(&self) -> Receiver<RegistryEvent> {
        let (tx, rx) = mpsc::channel();
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
        rx
    }

    pub(crate) fn emit(&self, event: RegistryEvent) {
        tracing::info!(target: "strata_registry", event = ?event, "registry changed");
        let mut subs = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        subs.retain(|tx| tx.send(event.clone()).is_ok());
    }

    fn entry_for(&self, contributor: Arc<dyn Contributor>) -> Result<Registered, RegistryError> {
        let id = contributor.id();
        if SectionId::new(id).is_err() {
            return Err(RegistryError::InvalidId {
                id: id.chars().take(140).collect(),
            });
        }
        Ok(Registered {
            id: Arc::from(id),
            layer: contributor.layer(),
            meta: contributor.meta(),
            registered_ms: self.clock.unix_ms(),
            abandoned: AbandonedRuns::default(),
            contributor,
        })
    }

    /// The MCP servers that have contributors registered, sorted.
    pub fn active_mcp_servers(&self) -> Vec<Arc<str>> {
        let set: std::collections::BTreeSet<Arc<str>> = self
            .read()
            .values()
            .filter_map(|e| match &e.meta.source {
                SourceKind::Mcp(server) => Some(server.clone()),
                _ => None,
            })
            .collect();
        set.into_iter().collect()
    }

    /// Emit `ActiveMcpUpdated` if the set of active MCP servers is not `before`.
    fn mcp_changed_since(&self, before: &[Arc<str>]) {
        let now = self.active_mcp_servers();
        if now != before {
            self.emit(RegistryEvent::ActiveMcpUpdated { servers: now });
        }
    }

    /// The runtime's active hooks changed: tell subscribers.
    pub fn hooks_changed(&self, hooks: impl IntoIterator<Item = impl Into<Arc<str>>>) {
        let mut hooks: Vec<Arc<str>> = hooks.into_iter().map(Into::into).collect();
        hooks.sort();
        hooks.dedup();
        self.emit(RegistryEvent::ActiveHooksUpdated { hooks });
    }

    /// A session's system prompt changed (the session API tells the registry when the digest of
    /// what it sends as the system prompt differs from the previous turn's).
    pub fn system_prompt_updated(&self, session: &str, digest: ContentHash) {
        self.emit(RegistryEvent::SystemPromptUpdated {
            session: Arc::from(session),
            digest,
        });
    }

    /// Register a contributor. Its id must be unique and valid (`[A-Za-z0-9._:/-]`, 1-128).
    pub fn register(&self, contributor: Arc<dyn Contributor>) -> Result<(), RegistryError> {
        let mcp_before = self.active_mcp_servers();
        let entry = self.entry_for(contributor)?;
        let event = RegistryEvent::ContributorAdded {
            id: entry.id.clone(),
            layer: entry.layer,
            source: entry.meta.source.clone(),
        };
        {
            let mut entries = self.write();
            if entries.contains_key(&entry.id) {
                return Err(RegistryError::Duplicate {
                    id: entry.id.to_string(),
                });
            }
            entries.insert(entry.id.clone(), entry);
        }
        self.emit(event);
        self.mcp_changed_since(&mcp_before);
        Ok(())
    }

    /// Replace the contributor registered under the same id (for example a prompt whose text
    /// changed). Its cached output is dropped.
    pub fn replace(&self, contributor: Arc<dyn Contributor>) -> Result<(), RegistryError> {
        let entry = self.entry_for(contributor)?;
        let id = entry.id.clone();
        {
            let mut entries = self.write();
            match entries.get_mut(&id) {
                Some(slot) => *slot = entry,
                None => return Err(RegistryError::NotFound { id: id.to_string() }),
            }
        }
        if let Some(cache) = &self.cache {
            cache.invalidate_contributor(&id);
        }
        self.emit(RegistryEvent::PromptUpdated { id });
        Ok(())
    }

    /// Unregister a contributor and drop its cached output.
    pub fn unregister(&self, id: &str) -> Result<Arc<dyn Contributor>, RegistryError> {
        let mcp_before = self.active_mcp_servers();
        let removed = self.write().remove(id);
        match removed {
            Some(entry) => {
                if let Some(cache) = &self.cache {
                    cache.invalidate_contributor(id);
                }
                self.emit(RegistryEvent::ContributorRemoved {
                    id: entry.id.clone(),
                });
                self.mcp_changed_since(&mcp_before);
                Ok(entry.contributor)
            }
            None => Err(RegistryError::NotFound { id: id.to_owned() }),
        }
    }

    /// Remove everything the MCP server `server` registered (it disconnected) and drop its
    /// cached output. Returns the removed ids, sorted.
    pub fn clear_mcp_server(&self, server: &str) -> Vec<Arc<str>> {
        let mcp_before = self.active_mcp_servers();
        let source = SourceKind::Mcp(Arc::from(server));
        let removed: Vec<Arc<str>> = {
            let mut entries = self.write();
            let ids: Vec<Arc<str>> = entries
                .values()
                .filter(|e| e.meta.source == source)
                .map(|e| e.id.clone())
                .collect();
            for id in &ids {
                entries.remove(id);
            }
            ids
        };
        if let Some(cache) = &self.cache {
            cache.invalidate_source(&source);
        }
        self.emit(RegistryEvent::McpServerCleared {
            server: Arc::from(server),
            removed: removed.clone(),
        });
        self.mcp_changed_since(&mcp_before);
        removed
    }

    /// The contributor registered under `id`.
    pub fn get(&self, id: &str) -> Option<Registered> {
        self.read().get(id).cloned()
    }

    /// Whether `id` is registered.
    pub fn contains(&self, id: &str) -> bool {
        self.read().contains_key(id)
    }

    /// Every registered id, sorted.
    pub fn ids(&self) -> Vec<Arc<str>> {
        self.read().keys().cloned().collect()
    }

    /// How many contributors are registered.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Every registered contributor, sorted by id.
    pub fn all(&self) -> Vec<Registered> {
        self.read().values().cloned().collect()
    }

    /// The contributors carrying `tag`, sorted by id.
    pub fn by_tag(&self, tag: &str) -> Vec<Registered> {
        self.read()
            .values()
            .filter(|e| e.has_tag(tag))
            .cloned()
            .collect()
    }

    /// The contributors from exactly `source` (for MCP, from that server), sorted by id.
    pub fn by_source(&self, source: &SourceKind) -> Vec<Registered> {
        self.read()
            .values()
            .filter(|e| &e.meta.source == source)
            .cloned()
            .collect()
    }

    /// The contributors from any MCP server, sorted by id.
    pub fn from_mcp(&self) -> Vec<Registered> {
        self.read()
            .values()
            .filter(|e| matches!(e.meta.source, SourceKind::Mcp(_)))
            .cloned()
            .collect()
    }

    /// The announced tools changed: drop cached output of contributors tagged `tools`.
    pub fn tools_changed(&self) {
        if let Some(cache) = &self.cache {
            cache.invalidate_tag(TAG_TOOLS);
        }
        self.emit(RegistryEvent::ToolsChanged);
    }

    /// The active skills changed: drop cached output of contributors tagged `skills`.
    pub fn skills_changed(&self) {
        if let Some(cache) = &self.cache {
            cache.invalidate_tag(TAG_SKILLS);
        }
        self.emit(RegistryEvent::SkillsChanged);
    }

    /// The operational mode changed (cache keys include it, so nothing is invalidated).
    pub fn mode_changed(&self, mode: OperationalMode) {
        self.emit(RegistryEvent::ModeChanged { mode });
    }

    /// A session's turn used another operational mode than its previous turn.
    pub fn session_mode_changed(&self, session: &str, from: OperationalMode, to: OperationalMode) {
        self.emit(RegistryEvent::SessionModeChanged {
            session: Arc::from(session),
            from,
            to,
        });
    }

    /// A session's active skills changed (the session API tells the registry once the turn
    /// that changed them is stored).
    pub fn session_skills_updated(&self, session: &str, skills: Vec<Arc<str>>) {
        self.emit(RegistryEvent::SessionSkillsUpdated {
            session: Arc::from(session),
            skills,
        });
    }

    /// The tools a session offers its model changed (the session API tells the registry once
    /// the turn that changed them is stored).
    pub fn session_tools_updated(&self, session: &str, tools: Vec<ToolName>) {
        self.emit(RegistryEvent::SessionToolsUpdated {
            session: Arc::from(session),
            tools,
        });
    }

    /// A new verified definition is in use: cached output of any other digest is dropped.
    /// (Keys include the digest, so old entries could never be served; this frees them.)
    pub fn definition_changed(&self, digest: ContentHash) {
        if let Some(cache) = &self.cache {
            cache.retain_digest(digest);
        }
        self.emit(RegistryEvent::DefinitionChanged { digest });
    }

    /// A session was reset. The section cache is left as it is: its keys name no session, so
    /// nothing in it is one session's (a contributor that reads a session's data is dynamic,
    /// never cached, or fingerprints what it read), and the other sessions keep their cached
    /// sections. Aleph clears its whole cache here; it serves one session per pipeline.
    pub fn session_reset(&self, session: &str) {
        self.emit(RegistryEvent::SessionReset {
            session: Arc::from(session),
        });
    }

    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Arc<str>, Registered>> {
        self.entries.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Arc<str>, Registered>> {
        self.entries.write().unwrap_or_else(PoisonError::into_inner)
    }
}
