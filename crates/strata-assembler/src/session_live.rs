//! Live MCP servers in a runtime (ADR-0041): before each turn the registry is brought in step
//! with what the servers offer now, their tools join the turn's announced tools, and running a
//! recorded call of one of their tools records its result.
//!
//! The servers are reached through `strata_registry::LiveSource`; this crate does no
//! networking. Everything a server sends stays data: its tools are held to the signed pins by
//! the assembler, its prompts are layer-3 sections, its results are tool results.

use std::sync::Arc;

use strata_core::{AnnouncedTool, Layer, RuntimeLayer, SourceKind};
use strata_registry::builtins::Prompt;
use strata_registry::{LiveState, StandardSection};

use serde_json::Value;
use strata_core::Role;
use strata_core::{ToolName, ToolPolicy};

use super::{OperationId, Outcome, Runtime, Session, SessionError, ToolOutput};
use crate::report::{Omission, RefusalCause, Report};

/// The result of a tool call run through a live MCP server, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolRun {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The server's result text: untrusted data, recorded as the tool's result.
    pub output: String,
    /// Whether the server marked it as an error.
    pub is_error: bool,
}

impl Session<'_> {
    /// Run the recorded call `call_id` of a live MCP server's tool with exactly its recorded
    /// arguments, and record the server's answer as the call's result (ADR-0041). Only a
    /// tool that a turn would offer now is run: allowlisted, announced by a connected server
    /// and matching its signed pin. With `op`, a repeat gets the first answer and runs
    /// nothing. A call that already has a result, or whose server fails, records nothing.
    pub fn run_tool_call_once(
        &self,
        call_id: &str,
        op: Option<&OperationId>,
    ) -> Result<Outcome<ToolRun>, SessionError> {
        if let Some(answer) = self.repeated(op)? {
            return Ok(Outcome::Repeated(answer));
        }
        let rt = self.rt;
        rt.check_refused()?;
        let Some(live) = &rt.live else {
            return Err(SessionError::Invalid(
                "this runtime has no MCP servers; start it with some (`[[mcp]]` in strata.toml, or `strata serve --mcp`)".into(),
            ));
        };
        let held = rt.store.working().entries(&self.id)?;
        let call = held
            .iter()
            .find(|e| e.role == Role::ToolCall && e.call_id.as_deref() == Some(call_id))
            .ok_or_else(|| {
                SessionError::Invalid(format!(
                    "session `{}` has no recorded tool call `{call_id}`; record the model's reply first",
                    self.id
                ))
            })?;
        if held
            .iter()
            .any(|e| e.role == Role::ToolResult && e.call_id.as_deref() == Some(call_id))
        {
            return Err(SessionError::Invalid(format!(
                "tool call `{call_id}` already has a result; nothing was run"
            )));
        }
        let stored: Value = serde_json::from_str(call.content.as_str()).map_err(|e| {
            SessionError::Invalid(format!(
                "stored tool call `{call_id}` is not valid JSON: {e}"
            ))
        })?;
        let name = stored["name"]
            .as_str()
            .and_then(|n| ToolName::new(n).ok())
            .ok_or_else(|| {
                SessionError::Invalid(format!("stored tool call `{call_id}` has no tool name"))
            })?;
        let arguments = stored["arguments"].clone();
        let refuse = |why: &str| SessionError::ToolNotOffered {
            name: name.to_string(),
            call: call_id.to_owned(),
            why: why.to_owned(),
        };
        // Only a tool the session's last prepared turn offered (after the caller's narrowing,
        // the path's choice and the pins)...
        let last_turn = self.last_turn_tools()?;
        if !last_turn.contains(&name) {
            return Err(refuse(
                "the session's last prepared turn did not offer; prepare a turn that offers it",
            ));
        }
        // ...and that a connected server still offers as signed: the live tools narrowed to
        // the signed allowlist and held to their pins.
        let (live_tools, _) = rt.sync_live();
        let offered =
            crate::assemble::narrowed_tools(&rt.agent, &live_tools, &ToolPolicy::default());
        if !offered.iter().any(|t| t.name == name && t.server.is_some()) {
            return Err(refuse(
                "no connected MCP server offers as the signed definition pins it now (not announced, or its definition changed)",
            ));
        }
        let result = live
            .call(&name, &arguments)
            .map_err(|e| SessionError::ToolCallFailed(e.to_string()))?;
        let run = ToolRun {
            call_id: call_id.to_owned(),
            tool: name.to_string(),
            output: result.text,
            is_error: result.is_error,
        };
        let mut output = ToolOutput::new(call_id, run.output.clone());
        if run.is_error {
            output = output.failed();
        }
        let answer = serde_json::to_string(&run)
            .map_err(|e| SessionError::Invalid(format!("tool run: {e}")))?;
        Ok(
            match self.record_output_with(&output, op.map(|o| (o, answer.as_str())))? {
                Outcome::Done(()) => Outcome::Done(run),
                Outcome::Repeated(a) => Outcome::Repeated(a),
            },
        )
    }
}

impl Runtime {
    /// Bring the registry in step with the live servers and return the tools the connected
    /// ones announce, and an omission for each unavailable one. A server whose offer changed
    /// since the last turn has its prompts cleared and registered anew (only cleared while it
    /// is unavailable), so a disconnect takes them out and a reconnect brings them back.
    pub(super) fn sync_live(&self) -> (Vec<AnnouncedTool>, Vec<Omission>) {
        let Some(live) = &self.live else {
            return (Vec::new(), Vec::new());
        };
        let mut seen = self
            .live_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut tools = Vec::new();
        let mut omissions = Vec::new();
        for server in live.servers() {
            if seen.get(&server.name) != Some(&server.generation) {
                self.registry.clear_mcp_server(&server.name);
                if let LiveState::Connected { prompts, .. } = &server.state {
                    for p in prompts {
                        let prompt = Prompt::new(
                            format!("mcp:{}/{}", server.name, p.name),
                            RuntimeLayer::Shared,
                            StandardSection::RuntimeCapabilities,
                            p.text.as_str(),
                        )
                        .with_source(SourceKind::Mcp(server.name.clone()));
                        if let Err(e) = self.registry.register(Arc::new(prompt)) {
                            tracing::warn!(server = %server.name, error = %e, "an MCP prompt was not registered");
                        }
                    }
                }
                seen.insert(server.name.clone(), server.generation);
            }
            match server.state {
                LiveState::Connected { tools: t, .. } => tools.extend(t),
                LiveState::Unavailable { reason } => omissions.push(Omission {
                    id: format!("mcp:{}", server.name),
                    layer: Layer::Shared,
                    reason: format!(
                        "MCP server `{}` is unavailable ({reason}); its tools and prompts are left out until it reconnects",
                        server.name
                    ),
                }),
            }
        }
        (tools, omissions)
    }
}

/// Log an event for every tool of `report` refused because its announced definition differs
/// from the signed pin: the operator's signal that a server changed (ADR-0041).
pub(super) fn log_changed_definitions(session: &str, report: &Report) {
    for t in report.tools.refused_tools() {
        if t.cause == RefusalCause::DefinitionChanged {
            tracing::warn!(
                session,
                tool = %t.name,
                cause = t.cause.as_str(),
                "refused a tool whose announced definition differs from the signed pin"
            );
        }
    }
}
