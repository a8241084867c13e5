//! `strata mcp`: pin the tools of a live MCP server into a definition, and compare a live
//! server with a definition's pins (ADR-0041). The connection, the pins and the comparison are
//! `strata-mcp`'s; this module reads and writes the files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use strata_agentdef::definition::check_definition;
use strata_agentdef::Envelope;
use strata_mcp::{Client, Limits, PinnedTool, Selection, ServerSpec, ServerTool, Transport};

use crate::error::CliError;
use crate::output::Output;

const PIN_HELP: &str = "\
Examples:
  strata mcp pin --server docs -- npx -y @modelcontextprotocol/server-everything
  strata mcp pin --server docs --out agent.toml --except get-env -- node server.js
  strata mcp pin --server web --only lookup --url http://localhost:80/mcp

Review the pins (each tool's description and schema are the server's words), then sign the
definition with `strata sign`. A signed pin is enforced at every turn: the tool is refused
with `definition_changed` when the server announces anything else.";

const DIFF_HELP: &str = "\
Examples:
  strata mcp diff --definition agent.signed.json --server docs -- node server.js
  strata mcp diff --definition a.toml --server web --url http://localhost:80

Exit codes:
  0  the server announces exactly the pinned tools, with their pinned descriptions and schemas
  1  error (the definition could not be read, the server could not be reached)
  2  usage error
  5  drift: a changed description or schema, a pinned tool removed, or a new unpinned tool;
     each change is printed on stdout, one per line";

/// Arguments of `strata mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Connect to a server and write `[[core.tools]]` pins of its tools for review and signing.
    #[command(after_help = PIN_HELP)]
    Pin(PinArgs),
    /// Compare a live server with the pins of a definition; non-zero on any drift.
    #[command(after_help = DIFF_HELP)]
    Diff(DiffArgs),
}

/// How to reach the server: a command after `--`, or `--url`.
#[derive(Debug, Args)]
struct Server {
    /// The server's name, written into each pin (`server = "NAME"`).
    #[arg(long, value_name = "NAME")]
    server: String,
    /// Reach the server over Streamable HTTP at this URL instead of starting a command.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    url: Option<String>,
    /// Seconds to wait for the connection and for each request.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    timeout: u64,
    /// The command that starts the server (stdio), after `--`.
    #[arg(last = true, value_name = "COMMAND", required_unless_present = "url")]
    command: Vec<String>,
}

#[derive(Debug, Args)]
struct PinArgs {
    #[command(flatten)]
    server: Server,
    /// Append the pins to this unsigned definition (TOML) instead of printing them.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Pin only these tools (comma-separated).
    #[arg(long, value_name = "TOOLS", value_delimiter = ',')]
    only: Vec<String>,
    /// Leave these tools out (comma-separated).
    #[arg(long, value_name = "TOOLS", value_delimiter = ',')]
    except: Vec<String>,
}

#[derive(Debug, Args)]
struct DiffArgs {
    #[command(flatten)]
    server: Server,
    /// The definition: a signed envelope (JSON) or its TOML.
    #[arg(long, value_name = "FILE")]
    definition: PathBuf,
}

/// Run `strata mcp`.
pub fn run(args: &McpArgs, out: &Output) -> Result<(), CliError> {
    match &args.command {
        McpCommand::Pin(a) => pin(a, out),
        McpCommand::Diff(a) => diff(a, out),
    }
}

fn spec(s: &Server) -> Result<(ServerSpec, Limits), CliError> {
    let spec = match &s.url {
        Some(url) => ServerSpec::new(&s.server, Transport::Http { url: url.clone() }),
        None => ServerSpec::stdio(&s.server, &s.command),
    }
    .map_err(|e| CliError::Usage(e.to_string()))?;
    let t = Duration::from_secs(s.timeout.max(1));
    let limits = Limits {
        connect_timeout: t,
        request_timeout: t,
        ..Limits::default()
    };
    Ok((spec, limits))
}

/// The server's tools, listed once over a fresh connection.
fn list(s: &Server, out: &Output) -> Result<Vec<ServerTool>, CliError> {
    let (spec, limits) = spec(s)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Other(format!("could not start the async runtime: {e}")))?;
    let tools = rt
        .block_on(async {
            let client = Client::connect(&spec, limits).await?;
            let tools = client.list_tools().await;
            client.close().await;
            tools
        })
        .map_err(|e| CliError::Other(e.to_string()))?;
    out.status(&format!(
        "MCP server `{}` announces {} tool(s)",
        spec.name(),
        tools.len()
    ));
    Ok(tools)
}

fn pin(a: &PinArgs, out: &Output) -> Result<(), CliError> {
    if let Some(path) = &a.out {
        super::require_file(path, "definition")?;
    }
    let tools = list(&a.server, out)?;
    let selection = Selection {
        only: (!a.only.is_empty()).then(|| a.only.iter().cloned().collect::<BTreeSet<_>>()),
        except: a.except.iter().cloned().collect(),
    };
    let pins = strata_mcp::pins_toml(&a.server.server, &tools, &selection)
        .map_err(|e| CliError::Other(e.to_string()))?;
    let Some(path) = &a.out else {
        return out.result(&pins);
    };
    let before =
        std::fs::read_to_string(path).map_err(|e| CliError::io(path, e, "check the path"))?;
    let mut after = before.clone();
    if !after.ends_with('\n') {
        after.push('\n');
    }
    after.push('\n');
    after.push_str(&pins);
    // The file changes only if the result is still a valid definition (a tool pinned twice,
    // for one, is not).
    checked(&after, path).map_err(|e| {
        CliError::agentdef(
            format!(
                "the pins would make {} invalid, so it was left unchanged",
                path.display()
            ),
            e,
        )
    })?;
    super::write_atomically(path, after.as_bytes())?;
    out.status(&format!(
        "appended the pins to {}; review them, then sign it with `strata sign`",
        path.display()
    ));
    Ok(())
}

/// The definition `text` of the file at `path` checked as `strata sign` checks it, with the
/// files it references read beside it.
fn checked(
    text: &str,
    path: &Path,
) -> Result<strata_agentdef::AgentDefinition, strata_agentdef::AgentDefError> {
    let base = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let embedded = strata_agentdef::embed_files(text, &base)?;
    check_definition(&embedded, Some(&base))
}

/// The pinned tools of a definition file: a signed envelope's payload (read for comparison
/// only: pins are compared, never trusted, here) or TOML.
fn pinned(path: &Path) -> Result<Vec<PinnedTool>, CliError> {
    let bytes = std::fs::read(path).map_err(|e| CliError::io(path, e, "check the path"))?;
    let is_envelope = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let text = if is_envelope {
        let env = Envelope::parse(&bytes)
            .map_err(|e| CliError::agentdef(format!("reading envelope {}", path.display()), e))?;
        String::from_utf8(env.payload.to_vec()).map_err(|_| {
            CliError::Other(format!(
                "the payload of {} is not UTF-8 text",
                path.display()
            ))
        })?
    } else {
        String::from_utf8(bytes)
            .map_err(|_| CliError::Other(format!("{} is not UTF-8 text", path.display())))?
    };
    let def = checked(&text, path)
        .map_err(|e| CliError::agentdef(format!("reading definition {}", path.display()), e))?;
    Ok(def.core.tools.iter().map(PinnedTool::from).collect())
}

fn diff(a: &DiffArgs, out: &Output) -> Result<(), CliError> {
    let pins = pinned(&a.definition)?;
    let tools = list(&a.server, out)?;
    let drift = strata_mcp::diff(&a.server.server, &pins, &tools);
    if drift.is_empty() {
        out.status(&format!(
            "MCP server `{}` matches its pins in {}",
            a.server.server,
            a.definition.display()
        ));
        return Ok(());
    }
    for change in &drift.changes {
        out.line(&change.to_string())?;
    }
    Err(CliError::Drift(format!(
        "MCP server `{}` drifted from its pins in {}: {} change(s); review them, then pin and sign again",
        a.server.server,
        a.definition.display(),
        drift.changes.len()
    )))
}

/// The MCP servers of `[[mcp]]` in the strata.toml at `path`, each a command (stdio) or a URL
/// (Streamable HTTP).
pub(crate) fn config_servers(path: &Path) -> Result<Vec<ServerSpec>, CliError> {
    let config = strata_registry::Config::load(path)
        .map_err(|e| CliError::Other(format!("reading {}: {e}", path.display())))?;
    let mut specs = Vec::new();
    for m in &config.mcp {
        let spec = match (&m.url, m.command.is_empty()) {
            (Some(url), true) => ServerSpec::new(&m.name, Transport::Http { url: url.clone() }),
            (None, false) => ServerSpec::stdio(&m.name, &m.command),
            _ => {
                return Err(CliError::Other(format!(
                    "{}: [[mcp]] `{}` needs exactly one of `command` and `url`",
                    path.display(),
                    m.name
                )))
            }
        };
        specs.push(spec.map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?);
    }
    Ok(specs)
}

/// Start `specs` as live servers on `rt`, listed again every `relist` (none without any), and
/// wait up to 20 s for them to connect. A server still connecting is retried in the
/// background; its tools join the turns from its first listing on, and until then turns
/// report it as omitted.
pub(crate) fn start_live(
    specs: Vec<ServerSpec>,
    relist: Duration,
    rt: &tokio::runtime::Runtime,
) -> Result<Option<std::sync::Arc<dyn strata_registry::LiveSource>>, CliError> {
    if specs.is_empty() {
        return Ok(None);
    }
    let live = strata_mcp::LiveServers::start(
        specs,
        Limits {
            relist_every: relist,
            ..Limits::default()
        },
        rt.handle().clone(),
    )
    .map_err(|e| CliError::Usage(e.to_string()))?;
    if !live.wait_connected(Duration::from_secs(20)) {
        tracing::warn!(
            "not every MCP server is connected yet; turns report them as omitted until they are"
        );
    }
    Ok(Some(std::sync::Arc::new(live)))
}
