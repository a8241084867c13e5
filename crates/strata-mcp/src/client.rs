//! One connection to an MCP server, and the untrusted values read from it.
//!
//! Every request runs under [`Limits::request_timeout`]; listings follow `nextCursor` up to
//! [`Limits::max_pages`] pages and [`Limits::max_entries`] entries, and a cursor that repeats
//! ends the listing with an error instead of a loop. A `notifications/tools/list_changed`
//! (or prompts) from the server is counted, and the owner re-lists on it.

use std::collections::BTreeSet;
use std::future::Future;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, PaginatedRequestParams};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient};
use serde_json::Value;
use tokio::sync::Notify;

use crate::error::McpError;
use crate::spec::{Limits, ServerSpec, Transport};

/// A tool as a server announced it. Untrusted: the description and schema are the server's
/// words, checked against the signed pins before anything reaches a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTool {
    /// The name, as announced (not yet checked as a strata tool name).
    pub name: String,
    /// The description (empty when none was given).
    pub description: String,
    /// The input schema, a JSON object.
    pub schema: Value,
}

/// A prompt as a server announced it, with its text when it takes no required arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPrompt {
    /// The name, as announced.
    pub name: String,
    /// The text of its messages, joined; `None` when it needs arguments.
    pub text: Option<String>,
}

/// What the server changed since it was last listed, as told by its notifications.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Count of `notifications/tools/list_changed` and `notifications/prompts/list_changed`.
    pub(crate) count: AtomicU64,
    /// Woken on each.
    pub(crate) notify: Notify,
}

/// The handler the SDK calls for what the server sends unasked.
#[derive(Debug, Clone)]
struct Handler {
    changes: Arc<Changes>,
}

impl Handler {
    fn changed(&self) {
        self.changes.count.fetch_add(1, Ordering::SeqCst);
        self.changes.notify.notify_waiters();
    }
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        tracing::debug!("an MCP server's tool list changed");
        self.changed();
        std::future::ready(())
    }

    fn on_prompt_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        tracing::debug!("an MCP server's prompt list changed");
        self.changed();
        std::future::ready(())
    }
}

/// One live connection. Dropping it closes the connection and stops a child process.
pub struct Client {
    spec: ServerSpec,
    limits: Limits,
    service: RunningService<RoleClient, Handler>,
    /// The child process of a stdio server, killed when the client is dropped.
    child: std::sync::Mutex<Option<tokio::process::Child>>,
    changes: Arc<Changes>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.spec.name())
            .field("transport", &self.spec.transport)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Start or reach the server and initialise the protocol, within
    /// [`Limits::connect_timeout`]. Must run inside a Tokio runtime.
    pub async fn connect(spec: &ServerSpec, limits: Limits) -> Result<Client, McpError> {
        let changes = Arc::new(Changes::default());
        let handler = Handler {
            changes: changes.clone(),
        };
        let name = spec.name().to_owned();
        let connect_error = |why: String| McpError::Connect {
            server: name.clone(),
            why,
        };
        let (service, child) = match &spec.transport {
            Transport::Stdio { command, args } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    // The server's log is its own business, and untrusted text besides.
                    .stderr(Stdio::null())
                    .kill_on_drop(true);
                let mut child = cmd.spawn().map_err(|e| McpError::Spawn {
                    server: name.clone(),
                    command: command.clone(),
                    why: e.to_string(),
                })?;
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err(connect_error("the child's pipes were not opened".into()));
                };
                let transport = AsyncRwTransport::new_client(stdout, stdin)
                    .with_max_line_length(limits.max_message_bytes);
                let started = tokio::time::timeout(
                    limits.connect_timeout,
                    rmcp::serve_client(handler, transport),
                )
                .await;
                match started {
                    Ok(Ok(service)) => (service, Some(child)),
                    Ok(Err(e)) => return Err(connect_error(e.to_string())),
                    Err(_) => {
                        return Err(connect_error(format!(
                            "no initialisation within {} s",
                            limits.connect_timeout.as_secs()
                        )))
                    }
                }
            }
            Transport::Http { url } => {
                install_crypto_provider();
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .max_sse_event_size(limits.max_message_bytes)
                    .max_json_response_size(limits.max_message_bytes)
                    .control_request_timeout(limits.request_timeout);
                let transport = StreamableHttpClientTransport::from_config(config);
                let started = tokio::time::timeout(
                    limits.connect_timeout,
                    rmcp::serve_client(handler, transport),
                )
                .await;
                match started {
                    Ok(Ok(service)) => (service, None),
                    Ok(Err(e)) => return Err(connect_error(e.to_string())),
                    Err(_) => {
                        return Err(connect_error(format!(
                            "no initialisation within {} s",
                            limits.connect_timeout.as_secs()
                        )))
                    }
                }
            }
        };
        tracing::info!(server = %spec.name(), transport = ?spec.transport, "connected to an MCP server");
        Ok(Client {
            spec: spec.clone(),
            limits,
            service,
            child: std::sync::Mutex::new(child),
            changes,
        })
    }

    /// The server's spec.
    pub fn spec(&self) -> &ServerSpec {
        &self.spec
    }

    /// Whether the connection has closed (the process exited, the transport failed).
    pub fn is_closed(&self) -> bool {
        if self.service.is_closed() || self.service.peer().is_transport_closed() {
            return true;
        }
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match child.as_mut().map(tokio::process::Child::try_wait) {
            Some(Ok(Some(_))) | Some(Err(_)) => true,
            Some(Ok(None)) | None => false,
        }
    }

    /// How many list-changed notifications the server has sent so far.
    pub fn changes_seen(&self) -> u64 {
        self.changes.count.load(Ordering::SeqCst)
    }

    /// Ask for the server to be listed again now, as a list-changed notification does: after
    /// a failed call, so that a server that went away (a Streamable HTTP server has no
    /// connection to lose) is found out at once rather than at the next periodic listing.
    pub fn recheck(&self) {
        self.changes.count.fetch_add(1, Ordering::SeqCst);
        self.changes.notify.notify_waiters();
    }

    /// Wait until the server sends a list-changed notification.
    pub async fn changed(&self) {
        self.changes.notify.notified().await;
    }

    /// Run one request under the request timeout.
    async fn within<T, E: std::fmt::Display>(
        &self,
        method: &'static str,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, McpError> {
        match tokio::time::timeout(self.limits.request_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(McpError::Request {
                server: self.spec.name().to_owned(),
                method,
                why: e.to_string(),
            }),
            Err(_) => Err(McpError::Timeout {
                server: self.spec.name().to_owned(),
                method,
                seconds: self.limits.request_timeout.as_secs(),
            }),
        }
    }

    fn invalid(&self, method: &'static str, why: String) -> McpError {
        McpError::Invalid {
            server: self.spec.name().to_owned(),
            method,
            why,
        }
    }

    /// Follow a listing's cursors within the limits.
    async fn paged<T, F, Fut>(&self, method: &'static str, mut page: F) -> Result<Vec<T>, McpError>
    where
        F: FnMut(Option<PaginatedRequestParams>) -> Fut,
        Fut: Future<Output = Result<(Vec<T>, Option<String>), rmcp::ServiceError>>,
    {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = BTreeSet::new();
        for _ in 0..self.limits.max_pages {
            let params = cursor
                .clone()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let (items, next) = self.within(method, page(params)).await?;
            out.extend(items);
            if out.len() > self.limits.max_entries {
                return Err(self.invalid(
                    method,
                    format!("more than {} entries", self.limits.max_entries),
                ));
            }
            match next {
                None => return Ok(out),
                Some(c) if !seen.insert(c.clone()) => {
                    return Err(self.invalid(method, "a page cursor repeated".into()))
                }
                Some(c) => cursor = Some(c),
            }
        }
        Err(self.invalid(method, format!("more than {} pages", self.limits.max_pages)))
    }

    /// Every tool the server announces now, in the server's order. None from a server without
    /// the tools capability.
    pub async fn list_tools(&self) -> Result<Vec<ServerTool>, McpError> {
        if !self.offers("tools") {
            return Ok(Vec::new());
        }
        let peer = self.service.peer().clone();
        let raw = self
            .paged("tools/list", |params| {
                let peer = peer.clone();
                async move {
                    let r = peer.list_tools(params).await?;
                    Ok((r.tools, r.next_cursor))
                }
            })
            .await?;
        Ok(raw
            .into_iter()
            .map(|t| ServerTool {
                name: t.name.into_owned(),
                description: t.description.map(|d| d.into_owned()).unwrap_or_default(),
                schema: Value::Object((*t.input_schema).clone()),
            })
            .collect())
    }

    /// Whether the server said at initialisation that it has `capability` (`tools`, `prompts`).
    fn offers(&self, capability: &str) -> bool {
        let Some(info) = self.service.peer().peer_info() else {
            return false;
        };
        serde_json::to_value(&info.capabilities)
            .ok()
            .and_then(|v| v.get(capability).cloned())
            .is_some_and(|v| !v.is_null())
    }

    /// Every prompt the server announces now; the text of each that needs no argument. None
    /// from a server without the prompts capability.
    pub async fn list_prompts(&self) -> Result<Vec<ServerPrompt>, McpError> {
        if !self.offers("prompts") {
            return Ok(Vec::new());
        }
        let peer = self.service.peer().clone();
        let raw = self
            .paged("prompts/list", |params| {
                let peer = peer.clone();
                async move {
                    let r = peer.list_prompts(params).await?;
                    Ok((r.prompts, r.next_cursor))
                }
            })
            .await?;
        let mut out = Vec::with_capacity(raw.len());
        for p in raw {
            let needs_arguments = p
                .arguments
                .as_ref()
                .is_some_and(|args| args.iter().any(|a| a.required == Some(true)));
            let text = if needs_arguments {
                None
            } else {
                Some(self.prompt_text(&p.name).await?)
            };
            out.push(ServerPrompt { name: p.name, text });
        }
        Ok(out)
    }

    /// The text of prompt `name` (its text messages joined; other content named only).
    async fn prompt_text(&self, name: &str) -> Result<String, McpError> {
        let peer = self.service.peer().clone();
        let r = self
            .within(
                "prompts/get",
                peer.get_prompt(GetPromptRequestParams::new(name)),
            )
            .await?;
        let mut parts = Vec::new();
        for m in r.messages {
            match serde_json::to_value(&m.content) {
                Ok(v) => parts.push(content_text(&v)),
                Err(_) => parts.push("[content that could not be read]".to_owned()),
            }
        }
        Ok(cut(parts.join("\n\n"), self.limits.max_text_bytes))
    }

    /// Call `tool` with `arguments` (a JSON object). The result is the server's data.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: &Value,
    ) -> Result<strata_registry::LiveToolResult, McpError> {
        let Value::Object(args) = arguments else {
            return Err(self.invalid(
                "tools/call",
                "a tool's arguments must be a JSON object".into(),
            ));
        };
        let peer = self.service.peer().clone();
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args.clone());
        let r = self.within("tools/call", peer.call_tool(params)).await?;
        let v = serde_json::to_value(&r).map_err(|e| self.invalid("tools/call", e.to_string()))?;
        let is_error = v.get("isError").and_then(Value::as_bool).unwrap_or(false);
        let text = match v.get("content").and_then(Value::as_array) {
            Some(items) => items
                .iter()
                .map(content_text)
                .collect::<Vec<_>>()
                .join("\n"),
            None => String::new(),
        };
        Ok(strata_registry::LiveToolResult {
            text: cut(text, self.limits.max_text_bytes),
            is_error,
        })
    }

    /// Close the connection and stop the child process.
    pub async fn close(mut self) {
        let _ = self.service.close().await;
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut child) = child {
            let _ = child.kill().await;
        }
    }
}

/// The text of one content block; other kinds are named, not embedded.
fn content_text(v: &Value) -> String {
    match v.get("type").and_then(Value::as_str) {
        Some("text") => v
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        Some(kind) => format!(
            "[{} content not shown]",
            kind.chars().take(32).collect::<String>()
        ),
        None => "[content without a type]".to_owned(),
    }
}

/// `text` within `max` bytes, cut at a character boundary with a note saying so.
fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("\n[cut: the server sent more than the limit]");
    text
}

/// The HTTP transport's TLS needs a process-wide crypto provider: the ring one the service uses.
fn install_crypto_provider() {
    // Already installed (by the service, or an earlier call) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
