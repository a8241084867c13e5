//! [`LiveServers`]: one supervisor task per configured server that connects, lists the
//! server's tools and prompts, re-lists when the server says they changed, and reconnects with
//! backoff when the connection is lost. A runtime reads it through the registry's
//! [`LiveSource`] trait, so neither the registry nor the assembler depends on networking.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use strata_core::{AnnouncedTool, Content, ToolName, ToolSchema};
use strata_registry::{
    LiveCallError, LivePrompt, LiveServer, LiveSource, LiveState, LiveToolResult,
};

use crate::client::Client;
use crate::error::McpError;
use crate::spec::{Limits, ServerSpec};

/// How often a connection is checked for a closed transport or an exited process.
const POLL: Duration = Duration::from_millis(200);

struct Slot {
    generation: u64,
    state: LiveState,
    client: Option<Arc<Client>>,
}

struct Shared {
    limits: Limits,
    slots: Mutex<BTreeMap<Arc<str>, Slot>>,
    generation: AtomicU64,
}

impl Shared {
    fn set(&self, server: &Arc<str>, state: LiveState, client: Option<Arc<Client>>) {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.insert(
            server.clone(),
            Slot {
                generation,
                state,
                client,
            },
        );
    }
}

impl Shared {
    /// Set a connected server's offer, keeping its generation when nothing changed.
    fn update(&self, server: &Arc<str>, state: LiveState, client: &Arc<Client>) {
        {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(slot) = slots.get_mut(server) {
                if slot.state == state
                    && slot.client.as_ref().is_some_and(|c| Arc::ptr_eq(c, client))
                {
                    return;
                }
            }
        }
        self.set(server, state, Some(client.clone()));
    }
}

/// The live MCP servers of a runtime. Dropping it stops every supervisor and child process.
pub struct LiveServers {
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for LiveServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slots = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("LiveServers")
            .field("servers", &slots.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Drop for LiveServers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl LiveServers {
    /// Start a supervisor for each of `specs` on `runtime`. Returns at once; each server is
    /// unavailable until its first listing. Names must be distinct.
    pub fn start(
        specs: Vec<ServerSpec>,
        limits: Limits,
        runtime: tokio::runtime::Handle,
    ) -> Result<LiveServers, McpError> {
        let shared = Arc::new(Shared {
            limits,
            slots: Mutex::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
        });
        let mut names = std::collections::BTreeSet::new();
        for s in &specs {
            if !names.insert(s.name_arc()) {
                return Err(McpError::BadSpec(format!(
                    "MCP server `{}` is configured twice; give each server its own name",
                    s.name()
                )));
            }
            shared.set(
                &s.name_arc(),
                LiveState::Unavailable {
                    reason: "not connected yet".into(),
                },
                None,
            );
        }
        let tasks = specs
            .into_iter()
            .map(|spec| runtime.spawn(supervise(spec, shared.clone())))
            .collect();
        Ok(LiveServers {
            shared,
            runtime,
            tasks,
        })
    }

    /// Block until every server is connected and listed, or `timeout` passes; whether they
    /// all are.
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            let all = self
                .servers()
                .iter()
                .all(|s| matches!(s.state, LiveState::Connected { .. }));
            if all {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl LiveSource for LiveServers {
    fn servers(&self) -> Vec<LiveServer> {
        let slots = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        slots
            .iter()
            .map(|(name, slot)| LiveServer {
                name: name.clone(),
                generation: slot.generation,
                state: slot.state.clone(),
            })
            .collect()
    }

    fn call(&self, tool: &ToolName, arguments: &Value) -> Result<LiveToolResult, LiveCallError> {
        let found = {
            let slots = self
                .shared
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            slots
                .iter()
                .find_map(|(name, slot)| match (&slot.state, &slot.client) {
                    (LiveState::Connected { tools, .. }, Some(client))
                        if tools.iter().any(|t| &t.name == tool) =>
                    {
                        Some((name.clone(), client.clone()))
                    }
                    _ => None,
                })
        };
        let Some((server, client)) = found else {
            return Err(LiveCallError::NotAnnounced {
                tool: tool.to_string(),
            });
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let name = tool.as_str().to_owned();
        let args = arguments.clone();
        let caller = client.clone();
        self.runtime.spawn(async move {
            let _ = tx.send(caller.call_tool(&name, &args).await);
        });
        // The client's own timeout answers first; this one only guards a lost task.
        let wait = self.shared.limits.request_timeout + Duration::from_secs(5);
        let answer = rx.recv_timeout(wait);
        if !matches!(answer, Ok(Ok(_))) {
            // A failed call may mean a lost server: list it again now (a tool's own error is
            // a result, not a failure).
            client.recheck();
        }
        match answer {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(LiveCallError::Failed {
                server: server.to_string(),
                tool: tool.to_string(),
                why: e.to_string(),
            }),
            Err(_) => Err(LiveCallError::Failed {
                server: server.to_string(),
                tool: tool.to_string(),
                why: "no answer".into(),
            }),
        }
    }
}

/// Keep one server connected and listed, for as long as the task runs.
async fn supervise(spec: ServerSpec, shared: Arc<Shared>) {
    let name = spec.name_arc();
    let limits = shared.limits;
    let mut backoff = limits.backoff_initial;
    loop {
        match Client::connect(&spec, limits).await {
            Ok(client) => {
                let client = Arc::new(client);
                backoff = limits.backoff_initial;
                let why = serve_connection(&name, &client, &shared).await;
                tracing::warn!(server = %name, %why, "MCP server unavailable; reconnecting");
                shared.set(&name, LiveState::Unavailable { reason: why }, None);
            }
            Err(e) => {
                tracing::warn!(server = %name, error = %e, "could not connect to an MCP server");
                shared.set(
                    &name,
                    LiveState::Unavailable {
                        reason: e.to_string(),
                    },
                    None,
                );
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(limits.backoff_max);
    }
}

/// List the server and re-list it on every change it announces, until the connection is lost;
/// returns why it ended.
async fn serve_connection(name: &Arc<str>, client: &Arc<Client>, shared: &Shared) -> String {
    loop {
        let seen = client.changes_seen();
        match offer(name, client).await {
            // Unchanged offers keep their generation, so a runtime re-registers nothing.
            Ok(state) => shared.update(name, state, client),
            Err(e) => return e.to_string(),
        }
        let listed = Instant::now();
        loop {
            if client.is_closed() {
                return "the connection closed".into();
            }
            if client.changes_seen() != seen || listed.elapsed() >= shared.limits.relist_every {
                break;
            }
            tokio::select! {
                () = client.changed() => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }
}

/// What the server offers now, as the registry's values; tools and prompts strata cannot name
/// are left out (and logged).
async fn offer(name: &Arc<str>, client: &Client) -> Result<LiveState, McpError> {
    let listed = client.list_tools().await?;
    let mut tools = Vec::with_capacity(listed.len());
    for t in listed {
        let (Ok(tool_name), Ok(schema)) =
            (ToolName::new(&t.name), ToolSchema::from_value(&t.schema))
        else {
            tracing::warn!(server = %name, "an MCP server announced a tool with an unusable name or schema; not offered");
            continue;
        };
        tools.push(AnnouncedTool {
            name: tool_name,
            description: Content::from(t.description),
            parameters: Some(schema),
            server: Some(name.clone()),
        });
    }
    let mut prompts = Vec::new();
    for p in client.list_prompts().await? {
        let Some(text) = p.text else { continue };
        let usable = !p.name.is_empty()
            && p.name.len() <= 64
            && p.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !usable {
            tracing::warn!(server = %name, "an MCP server announced a prompt with an unusable name; not offered");
            continue;
        }
        prompts.push(LivePrompt { name: p.name, text });
    }
    Ok(LiveState::Connected { tools, prompts })
}
