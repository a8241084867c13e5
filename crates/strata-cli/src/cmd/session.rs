//! `strata session`: run a conversation from the shell on the session API (ADR-0016). Each
//! subcommand opens the runtime on the store, does one step and exits; the conversation lives in
//! the store, so the next call continues it.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use strata_assembler::{
    assemble::{AssemblyPath, OperationalMode, PromptMode, RuntimeInput, Section},
    memory::FileAction,
    session::{ActiveSkill, Inbound, ThinkingLevel, TimeZone},
    AnnouncedTool, Provider, Reply, Runtime, RuntimeBuilder, ToolCall, ToolName, ToolOutput,
    TurnOptions,
};
use strata_core::{CoreError, Keep};
use strata_registry::{ArtifactAction, ArtifactKind, CheckpointStatus, GoalChange, GoalPriority};

use crate::cmd::assemble::load_agent;
use crate::error::CliError;
use crate::output::Output;

/// Arguments of `strata session`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples (a tool-using conversation, one step per call):
  strata session --agent ada.signed.json --trust trust.toml --id s1 \\
      prepare 'What does notes.txt say?' \\
      --format anthropic --model claude-sonnet-4-5
  strata session --agent ada.signed.json --trust trust.toml --id s1 \\
      reply --tool-call 'call_1:file_read:{\"path\":\"notes.txt\"}'
  strata session --agent ada.signed.json --trust trust.toml --id s1 \\
      tool-result call_1 'Deploys freeze on Fridays.'
  strata session --agent ada.signed.json --trust trust.toml --id s1 \\
      prepare --continue --format anthropic --model claude-sonnet-4-5
  strata session --agent ada.signed.json --trust trust.toml --id s1 \\
      reply 'They freeze on Fridays.'
  strata session --agent ada.signed.json --trust trust.toml --id s1 reset")]
pub struct SessionArgs {
    /// The signed agent definition (DSSE envelope).
    #[arg(long, value_name = "FILE")]
    pub agent: PathBuf,
    /// The trust store.
    #[arg(long, value_name = "FILE")]
    pub trust: PathBuf,
    /// Refuse the trust store unless the SHA-256 of its exact bytes is this (`sha256:<hex>`,
    /// as `strata verify` prints it): pinning makes an edited or truncated store detectable.
    #[arg(long, value_name = "SHA256", env = "STRATA_TRUST_SHA256")]
    pub trust_sha256: Option<String>,
    /// Rollback state file; without it, rollback is checked in memory only.
    #[arg(long, value_name = "FILE")]
    pub rollback_state: Option<PathBuf>,
    /// The session id.
    #[arg(long, value_name = "ID")]
    pub id: String,
    /// The SQLite memory file (created if missing). Default: strata.toml's `[store]`, else
    /// `.strata/memory.db`.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// A PostgreSQL connection string instead of the SQLite file.
    #[arg(
        long,
        value_name = "URL",
        env = "STRATA_POSTGRES",
        conflicts_with = "store"
    )]
    pub postgres: Option<String>,
    /// A strata.toml (budgets, default mode, protected priorities, caching, MEMORY.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub step: Step,
}

/// One step of a session.
#[derive(Debug, Subcommand)]
pub enum Step {
    /// Record the user's message and print the request body for it.
    Prepare(PrepareArgs),
    /// Record the model's reply: its text and its tool calls.
    Reply {
        /// The reply's text.
        text: Option<String>,
        /// A tool call, `ID:NAME:JSON-ARGUMENTS`; repeatable.
        #[arg(long, value_name = "ID:NAME:JSON")]
        tool_call: Vec<String>,
        /// A JSON file holding the reply's reasoning blocks as the provider returned them (an
        /// array of Anthropic `thinking` / `redacted_thinking` blocks or OpenAI Responses
        /// `reasoning` items); they are sent back unchanged while the tool loop lasts.
        #[arg(long, value_name = "FILE")]
        reasoning: Option<PathBuf>,
    },
    /// Record a tool's output.
    ToolResult {
        /// The call id.
        call_id: String,
        /// The output (`-` reads standard input).
        output: String,
        /// The tool failed (sent as Anthropic's `is_error` with the result).
        #[arg(long)]
        error: bool,
        /// Which end of the output to keep when it is cut: head, tail (a log) or both.
        #[arg(long, value_name = "END", default_value = "head", value_parser = parse_keep)]
        keep: Keep,
    },
    /// Run a recorded tool call through the live MCP server that offers its tool (`[[mcp]]`
    /// in `--config`) and record its result; prints the run as JSON. Only a tool the last
    /// prepared turn offered, and that its server still offers as signed, is run.
    RunCall {
        /// The call id, as the model's reply named it.
        call_id: String,
    },
    /// Store a summary of the entries FIRST..=LAST (their `seq`): later turns carry it, as
    /// data, in place of those entries, which stay in the session. The range must end before
    /// the newest user message, keep each tool call with its result and overlap no stored
    /// summary.
    Compact {
        /// The first entry of the range.
        #[arg(long, value_name = "SEQ")]
        first: u64,
        /// The last entry of the range.
        #[arg(long, value_name = "SEQ")]
        last: u64,
        /// The summary (`-` reads standard input).
        #[arg(long, value_name = "TEXT")]
        summary: String,
        /// The model that wrote the summary.
        #[arg(long, value_name = "NAME")]
        model: Option<String>,
    },
    /// Forget the conversation.
    Reset,
    /// Read or change the session's goals with the caller's authority (a model's marker only
    /// proposes a lock; `goals lock` confirms or refuses it).
    Goals {
        /// What to do with them.
        #[command(subcommand)]
        step: GoalStep,
    },
    /// Record that a tool of the session read, modified or deleted a file (the session-files
    /// section lists them).
    File {
        /// The file's path.
        path: String,
        /// read, modified or deleted.
        #[arg(long, value_parser = named_value::<FileAction>("action"))]
        action: FileAction,
    },
}

/// Arguments of `strata session prepare`.
#[derive(Debug, Args)]
pub struct PrepareArgs {
    /// The user's message (`-` reads standard input).
    pub message: Option<String>,
    /// Prepare without a new user message (after tool results).
    #[arg(long = "continue", conflicts_with = "message")]
    pub continue_turn: bool,
    /// Provider: openai-chat, openai-responses or anthropic.
    #[arg(long, default_value = "anthropic")]
    pub format: Provider,
    /// Model name written into the body.
    #[arg(long)]
    pub model: String,
    /// Maximum output tokens (required by Anthropic).
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: u32,
    /// The model's context window (sets budget and tier).
    #[arg(long)]
    pub context_window: Option<u32>,
    /// Runtime input JSON with tools and extra sections for this turn (see `strata assemble
    /// --help`); its turns are not used, the session has its own.
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Prompt mode: full, compact, minimal or scheduled (default: strata.toml's, else the
    /// signed definition's).
    #[arg(long, value_parser = named::<PromptMode>)]
    pub mode: Option<PromptMode>,
    /// Assembly path: soul, hydration, context, basic or cached.
    #[arg(long, value_parser = named::<AssemblyPath>)]
    pub path: Option<AssemblyPath>,
    /// Operational mode: assistant, developer, planning, debugger or user.
    #[arg(long, value_parser = named::<OperationalMode>)]
    pub operational_mode: Option<OperationalMode>,
    /// Runtime input JSON whose sections are the resolved context the `context` path
    /// assembles (required on that path, used on no other).
    #[arg(long, value_name = "FILE")]
    pub resolved_context: Option<PathBuf>,
    /// Runtime input JSON whose tools are the ones retrieved for this turn on the
    /// `hydration` path (used on no other).
    #[arg(long, value_name = "FILE")]
    pub retrieved_tools: Option<PathBuf>,
    /// Skills, time zone, thinking level and the other per-turn inputs.
    #[command(flatten)]
    pub inputs: Box<TurnInputArgs>,
}

/// One change of a session's goals, or their reading.
#[derive(Debug, Subcommand)]
pub enum GoalStep {
    /// Print the goals and the locks waiting for an answer, as JSON.
    Show,
    /// Create a goal and make it the active one.
    Create {
        /// What it is.
        description: String,
        /// high, medium or low.
        #[arg(long, default_value = "medium", value_parser = named_value::<GoalPriority>("priority"))]
        priority: GoalPriority,
    },
    /// Add a checkpoint to a goal.
    Checkpoint {
        /// What the step is.
        description: String,
        /// pending, in_progress or completed.
        #[arg(long, default_value = "pending", value_parser = named_value::<CheckpointStatus>("status"))]
        status: CheckpointStatus,
        /// The goal (default: the active one).
        #[arg(long)]
        goal: Option<String>,
    },
    /// Record an unlocked decision with its rationale.
    Decision {
        /// What was decided (text before a `:` is its subject).
        description: String,
        /// Why.
        #[arg(long, default_value = "")]
        rationale: String,
        /// The goal (default: the active one).
        #[arg(long)]
        goal: Option<String>,
    },
    /// Record an artifact with its kind.
    Artifact {
        /// Its path.
        path: String,
        /// created, modified or deleted.
        #[arg(long, value_parser = named_value::<ArtifactAction>("action"))]
        action: ArtifactAction,
        /// file, test or documentation.
        #[arg(long, default_value = "file", value_parser = named_value::<ArtifactKind>("kind"))]
        kind: ArtifactKind,
        /// The goal (default: the active one).
        #[arg(long)]
        goal: Option<String>,
    },
    /// Confirm or refuse the lock the model proposed for a decision.
    Lock {
        /// The decision's number.
        #[arg(long)]
        decision: u32,
        /// Lock it for good.
        #[arg(long, conflicts_with = "refuse", required_unless_present = "refuse")]
        confirm: bool,
        /// Refuse the lock; the decision stays unlocked.
        #[arg(long)]
        refuse: bool,
        /// The goal (default: the active one).
        #[arg(long)]
        goal: Option<String>,
    },
}

/// A value parser reading one of the lower-case names of `T`, with the words the service uses.
fn named_value<T: serde::de::DeserializeOwned + Clone + Send + Sync + 'static>(
    what: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone {
    move |s| strata_registry::parse_name(what, s).map_err(|e| e.to_string())
}

impl GoalStep {
    /// The change this step makes, or `None` for `show`.
    fn change(&self) -> Option<GoalChange> {
        Some(match self {
            GoalStep::Show => return None,
            GoalStep::Create {
                description,
                priority,
            } => GoalChange::CreateGoal {
                description: description.clone(),
                priority: *priority,
            },
            GoalStep::Checkpoint {
                description,
                status,
                goal,
            } => GoalChange::AddCheckpoint {
                goal: goal.clone(),
                description: description.clone(),
                status: *status,
            },
            GoalStep::Decision {
                description,
                rationale,
                goal,
            } => GoalChange::RecordDecision {
                goal: goal.clone(),
                description: description.clone(),
                rationale: rationale.clone(),
            },
            GoalStep::Artifact {
                path,
                action,
                kind,
                goal,
            } => GoalChange::RecordArtifact {
                goal: goal.clone(),
                kind: *kind,
                path: path.clone(),
                action: *action,
            },
            GoalStep::Lock {
                decision,
                confirm,
                goal,
                ..
            } => {
                let (goal, decision) = (goal.clone(), *decision);
                if *confirm {
                    GoalChange::ConfirmLock { goal, decision }
                } else {
                    GoalChange::RefuseLock { goal, decision }
                }
            }
        })
    }
}

/// The per-turn inputs of `strata session prepare` that built-in contributors and signed
/// templates read (`--model`, the request's model, is the `model` input too).
#[derive(Debug, Args)]
pub struct TurnInputArgs {
    /// A skill activated for this turn, `ID=FILE` (the file holds its instructions); repeatable.
    #[arg(long = "skill", value_name = "ID=FILE")]
    pub skills: Vec<String>,
    /// How much explicit reasoning to ask for: off, low, medium or high.
    #[arg(long, value_name = "LEVEL", value_parser = thinking)]
    pub thinking: Option<ThinkingLevel>,
    /// Who sent the message.
    #[arg(long, value_name = "NAME")]
    pub sender: Option<String>,
    /// The channel the message came through (cli, slack, email...).
    #[arg(long, value_name = "NAME")]
    pub channel: Option<String>,
    /// Further metadata of the inbound message, `KEY=VALUE`; repeatable.
    #[arg(long = "inbound-meta", value_name = "KEY=VALUE")]
    pub inbound_meta: Vec<String>,
    /// The answer will be spoken rather than read.
    #[arg(long)]
    pub voice: bool,
    /// The language to answer in (a name or a BCP 47 tag).
    #[arg(long, value_name = "LANGUAGE")]
    pub language: Option<String>,
    /// The caller's time zone: UTC, an offset such as +01:00, or a name and an offset such as
    /// 'Europe/Paris +01:00' (default: UTC).
    #[arg(long, value_name = "ZONE", value_parser = time_zone)]
    pub time_zone: Option<TimeZone>,
    /// One thing the agent did recently (a command run, a file touched, its outcome), shown
    /// in the recent footprint; repeatable, oldest first.
    #[arg(long = "footprint", value_name = "LINE")]
    pub footprint: Vec<String>,
    /// A file holding the business or project context the platform keeps for this session.
    #[arg(long, value_name = "FILE")]
    pub business_context: Option<PathBuf>,
    /// Leave out the registered sanity-check prompts this turn.
    #[arg(long)]
    pub no_sanity_checks: bool,
}

fn thinking(s: &str) -> Result<ThinkingLevel, String> {
    s.parse::<ThinkingLevel>().map_err(|e| e.to_string())
}

fn time_zone(s: &str) -> Result<TimeZone, String> {
    s.parse::<TimeZone>().map_err(|e| e.to_string())
}

impl TurnInputArgs {
    /// Put these inputs into `opts`.
    fn apply(&self, opts: &mut TurnOptions) -> Result<(), CliError> {
        for spec in &self.skills {
            let (id, file) = spec.split_once('=').ok_or_else(|| {
                CliError::Usage(format!(
                    "--skill `{spec}`: expected ID=FILE, e.g. review=skills/review.md"
                ))
            })?;
            let text = std::fs::read_to_string(file).map_err(|e| {
                CliError::io(
                    Path::new(file),
                    e,
                    "give a file holding the skill's instructions",
                )
            })?;
            opts.skills.push(
                ActiveSkill::new(id, text.as_str()).map_err(|e| CliError::Usage(e.to_string()))?,
            );
        }
        opts.thinking = self.thinking;
        let mut metadata = std::collections::BTreeMap::new();
        for kv in &self.inbound_meta {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                CliError::Usage(format!(
                    "--inbound-meta `{kv}`: expected KEY=VALUE, e.g. thread=release-42"
                ))
            })?;
            metadata.insert(k.to_owned(), v.to_owned());
        }
        if self.sender.is_some() || self.channel.is_some() || !metadata.is_empty() {
            opts.inbound = Some(Inbound {
                sender: self.sender.as_deref().map(Into::into),
                channel: self.channel.as_deref().map(Into::into),
                metadata,
            });
        }
        opts.voice = self.voice;
        opts.language = self.language.clone();
        opts.time_zone = self.time_zone.clone();
        opts.recent_footprint = self.footprint.clone();
        if let Some(file) = &self.business_context {
            opts.business_context =
                Some(std::fs::read_to_string(file).map_err(|e| {
                    CliError::io(file, e, "give a file holding the business context")
                })?);
        }
        if self.no_sanity_checks {
            opts.sanity_checks = Some(false);
        }
        Ok(())
    }
}

/// A mode or path by its name, refused with the same words as the service's.
fn named<T: std::str::FromStr<Err = CoreError>>(s: &str) -> Result<T, String> {
    s.parse::<T>().map_err(|e| e.to_string())
}

/// The tools and sections of a runtime input file.
fn runtime_input(file: &Path) -> Result<(Vec<AnnouncedTool>, Vec<Section>), CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::io(file, e, "give a runtime input JSON file"))?;
    let input = RuntimeInput::from_json(&text).map_err(|e| {
        CliError::Other(format!("{}: not valid runtime input: {e}", file.display()))
    })?;
    let sections = input
        .sections
        .into_iter()
        .map(|s| {
            s.into_section()
                .map_err(|e| CliError::Other(format!("{}: {e}", file.display())))
        })
        .collect::<Result<_, _>>()?;
    Ok((input.tools, sections))
}

fn read_reasoning(file: &Path) -> Result<Vec<strata_core::Reasoning>, CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::io(file, e, "give a JSON file of reasoning blocks"))?;
    serde_json::from_str(&text).map_err(|e| {
        CliError::Usage(format!(
            "--reasoning {}: not an array of a provider's reasoning blocks as returned: {e}",
            file.display()
        ))
    })
}

fn parse_keep(s: &str) -> Result<Keep, String> {
    Keep::from_name(s).ok_or_else(|| format!("`{s}` is not head, tail or both"))
}

fn stdin_or(text: &str) -> Result<String, CliError> {
    if text != "-" {
        return Ok(text.to_owned());
    }
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| CliError::io(std::path::Path::new("-"), e, "pipe the text"))?;
    Ok(s)
}

fn parse_call(spec: &str) -> Result<ToolCall, CliError> {
    let usage = || {
        CliError::Usage(format!(
            "--tool-call `{spec}`: expected ID:NAME:JSON, e.g. 'call_1:file_read:{{\"path\":\"a.txt\"}}'"
        ))
    };
    let (id, rest) = spec.split_once(':').ok_or_else(usage)?;
    let (name, args) = rest.split_once(':').ok_or_else(usage)?;
    let name = ToolName::new(name).map_err(|e| CliError::Usage(format!("--tool-call: {e}")))?;
    let arguments: serde_json::Value = serde_json::from_str(args)
        .map_err(|e| CliError::Usage(format!("--tool-call `{spec}`: arguments: {e}")))?;
    Ok(ToolCall {
        id: id.to_owned(),
        name,
        arguments,
    })
}

/// Run `strata session`.
pub fn run(args: &SessionArgs, out: &Output) -> Result<(), CliError> {
    let mut builder = runtime_builder(args)?;
    let id = args.id.as_str();
    // The steps that offer or run MCP tools connect to the live servers of `[[mcp]]`; the
    // async runtime they run on is kept until the step is done.
    let _live = match &args.step {
        Step::Prepare(_) | Step::RunCall { .. } => {
            let live = live_servers(args)?;
            if let Some((_, source)) = &live {
                builder = builder.live(source.clone());
            }
            live
        }
        _ => None,
    };
    match &args.step {
        Step::RunCall { call_id } => run_call(builder, id, call_id, out),
        Step::Compact {
            first,
            last,
            summary,
            model,
        } => {
            let c = strata_assembler::session::Compaction {
                first_seq: *first,
                last_seq: *last,
                summary: stdin_or(summary)?,
                model: model.clone(),
            };
            compact(builder, id, &c, out)
        }
        Step::Prepare(p) => prepare(builder, id, p, out),
        Step::Reply {
            text,
            tool_call,
            reasoning,
        } => reply(
            builder,
            id,
            text.as_deref(),
            tool_call,
            reasoning.as_deref(),
            out,
        ),
        Step::ToolResult {
            call_id,
            output,
            error,
            keep,
        } => {
            let rt = builder.build().map_err(session_error)?;
            let mut recorded = ToolOutput::new(call_id, stdin_or(output)?).keeping(*keep);
            recorded.is_error = *error;
            rt.session(id)
                .record_output(&recorded)
                .map_err(session_error)?;
            out.status(&format!("recorded the result of {call_id} in session {id}"));
            Ok(())
        }
        Step::Goals { step } => goals(builder, id, step, out),
        Step::File { path, action } => {
            let rt = builder.build().map_err(session_error)?;
            rt.session(id)
                .record_file(path, *action)
                .map_err(session_error)?;
            out.status(&format!(
                "recorded {} {path} in session {id}",
                action.label()
            ));
            Ok(())
        }
        Step::Reset => {
            let rt = builder.build().map_err(session_error)?;
            let n = rt.session(id).reset().map_err(session_error)?;
            out.status(&format!("session {id}: {n} entries forgotten"));
            Ok(())
        }
    }
}

/// A session's refusal as the command's error.
fn session_error(e: strata_assembler::SessionError) -> CliError {
    CliError::Other(e.to_string())
}

/// Verify the agent and set up its runtime on the store: the flags win over strata.toml's
/// `[store]`, which wins over the default file.
/// The live MCP servers of `--config`'s `[[mcp]]` with the async runtime they run on, if it
/// names any.
type Live = (
    tokio::runtime::Runtime,
    std::sync::Arc<dyn strata_registry::LiveSource>,
);

fn live_servers(args: &SessionArgs) -> Result<Option<Live>, CliError> {
    let Some(path) = &args.config else {
        return Ok(None);
    };
    let specs = crate::cmd::mcp::config_servers(path)?;
    if specs.is_empty() {
        return Ok(None);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| CliError::Other(format!("starting the async runtime: {e}")))?;
    let source = crate::cmd::mcp::start_live(specs, std::time::Duration::from_secs(30), &rt)?;
    Ok(source.map(|s| (rt, s)))
}

/// `compact`: store the summary `c` of a range of the session's entries.
fn compact(
    builder: RuntimeBuilder,
    id: &str,
    c: &strata_assembler::session::Compaction,
    out: &Output,
) -> Result<(), CliError> {
    let rt = builder.build().map_err(session_error)?;
    let r = rt.session(id).compact(c).map_err(session_error)?;
    out.status(&format!(
        "stored a summary of entries {}-{} ({} entries) in session {id}",
        r.first_seq, r.last_seq, r.entries
    ));
    Ok(())
}

/// `run-call`: run the recorded call `call_id` through its live MCP server, record the result
/// and print the run.
fn run_call(
    builder: RuntimeBuilder,
    id: &str,
    call_id: &str,
    out: &Output,
) -> Result<(), CliError> {
    let rt = builder.build().map_err(session_error)?;
    let run = match rt
        .session(id)
        .run_tool_call_once(call_id, None)
        .map_err(session_error)?
    {
        strata_assembler::session::Outcome::Done(run) => run,
        strata_assembler::session::Outcome::Repeated(_) => {
            return Err(CliError::Other(
                "a run without an operation key was reported as a repeat".into(),
            ))
        }
    };
    let text = serde_json::to_string_pretty(&run)
        .map_err(|e| CliError::Other(format!("tool run: {e}")))?;
    out.result(&(text + "\n"))
}

fn runtime_builder(args: &SessionArgs) -> Result<RuntimeBuilder, CliError> {
    let agent = load_agent(
        &args.agent,
        &args.trust,
        args.trust_sha256.as_deref(),
        args.rollback_state.as_deref(),
        false,
    )?;
    let mut builder = Runtime::builder(agent);
    if let Some(c) = &args.config {
        builder = builder
            .config_file(c)
            .map_err(|e| CliError::Other(e.to_string()))?;
    }
    if let Some(url) = &args.postgres {
        builder = builder.postgres(url);
    } else if let Some(path) = &args.store {
        builder = builder.sqlite(path);
    }
    Ok(builder)
}

/// `prepare`: record the user's message (or continue after tool results) and print the
/// request body, warning on standard error about each tool not offered.
fn prepare(
    builder: RuntimeBuilder,
    id: &str,
    p: &PrepareArgs,
    out: &Output,
) -> Result<(), CliError> {
    let opts = turn_options(p)?;
    let rt = builder
        .provider(p.format, p.model.clone())
        .max_tokens(p.max_tokens)
        .build()
        .map_err(session_error)?;
    let session = rt.session(id);
    let turn = match (&p.message, p.continue_turn) {
        (Some(m), false) => session.prepare(&stdin_or(m)?, &opts),
        (None, true) => session.continue_turn(&opts),
        _ => {
            return Err(CliError::Usage(
                "prepare: give the user's message, or --continue after tool results".into(),
            ))
        }
    }
    .map_err(session_error)?;
    for t in turn.refused_tools() {
        out.status(&format!(
            "warning: tool `{}` is not offered: {}",
            t.name, t.reason
        ));
    }
    let body =
        serde_json::to_string_pretty(&turn.body).map_err(|e| CliError::Other(e.to_string()))?;
    out.result(&(body + "\n"))
}

/// The options of a turn from `prepare`'s flags and the runtime input files they name.
fn turn_options(p: &PrepareArgs) -> Result<TurnOptions, CliError> {
    let mut opts = TurnOptions {
        context_window: p.context_window,
        mode: p.mode,
        path: p.path,
        operational_mode: p.operational_mode,
        ..TurnOptions::default()
    };
    p.inputs.apply(&mut opts)?;
    if let Some(file) = &p.input {
        let (tools, sections) = runtime_input(file)?;
        // Tools in the input are this turn's and, from now on, the session's.
        if !tools.is_empty() {
            opts.tools = Some(tools);
        }
        opts.sections = sections;
    }
    if let Some(file) = &p.resolved_context {
        opts.resolved_context = runtime_input(file)?.1;
    }
    if let Some(file) = &p.retrieved_tools {
        opts.retrieved_tools = Some(runtime_input(file)?.0);
    }
    Ok(opts)
}

/// `reply`: record the model's reply (its text, tool calls and reasoning blocks).
fn reply(
    builder: RuntimeBuilder,
    id: &str,
    text: Option<&str>,
    tool_call: &[String],
    reasoning: Option<&Path>,
    out: &Output,
) -> Result<(), CliError> {
    let rt = builder.build().map_err(session_error)?;
    let reply = Reply {
        text: text.map(stdin_or).transpose()?.unwrap_or_default(),
        tool_calls: tool_call
            .iter()
            .map(|c| parse_call(c))
            .collect::<Result<_, _>>()?,
        reasoning: match reasoning {
            Some(file) => read_reasoning(file)?,
            None => Vec::new(),
        },
    };
    if reply.text.trim().is_empty() && reply.tool_calls.is_empty() {
        return Err(CliError::Usage(
            "reply: give the reply's text, or at least one --tool-call".into(),
        ));
    }
    rt.session(id).record_reply(&reply).map_err(session_error)?;
    out.status(&format!(
        "recorded the reply in session {id} ({} tool call(s))",
        reply.tool_calls.len()
    ));
    Ok(())
}

/// `goals`: apply a change to the session's goals and print the result, or print the goals
/// and the locks waiting for an answer, as JSON.
fn goals(builder: RuntimeBuilder, id: &str, step: &GoalStep, out: &Output) -> Result<(), CliError> {
    let rt = builder.build().map_err(session_error)?;
    let session = rt.session(id);
    let json = match step.change() {
        Some(change) => serde_json::to_value(session.change_goals(&change).map_err(session_error)?),
        None => {
            let goals = session.goals().map_err(session_error)?;
            let pending: Vec<serde_json::Value> = goals
                .pending_locks()
                .into_iter()
                .map(|(goal, d)| {
                    serde_json::json!({"goal": goal, "decision": d.id, "description": d.description})
                })
                .collect();
            Ok(serde_json::json!({"goals": goals.history(), "pending_locks": pending}))
        }
    }
    .map_err(|e| CliError::Other(e.to_string()))?;
    let text = serde_json::to_string_pretty(&json).map_err(|e| CliError::Other(e.to_string()))?;
    out.result(&(text + "\n"))
}
