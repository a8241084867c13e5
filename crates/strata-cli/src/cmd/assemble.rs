//! `strata assemble`: verify a signed definition, read runtime input (layers 3-6) from files,
//! flags or standard input, assemble, and write text, JSON, OpenAI messages or Anthropic
//! system blocks.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use strata_assembler::{
    agent::Expiry,
    assemble::{
        AssembledContext, Assembler, AssemblyPath, AssemblyRequest, BudgetSpec, PairPolicy,
        PromptMode, ProviderOptions, RequestParams, RuntimeInput, RuntimeLayer, Section,
        SourceKind, SystemRole, TiktokenTokenizer, Tokenizer, ToolDescriptions,
    },
    Loader, Provider, RollbackGuard, Runtime, VerifiedAgent,
};

use crate::cmd::explain::{terminal_with, Explained};
use crate::error::CliError;
use crate::output::Output;
use crate::report_view::{describe_inputs, SectionInput};

/// Output formats of `strata assemble`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One string: the signed identity, then fenced layers 3-6.
    Text,
    /// The assembly and its full report as JSON (what `strata explain` reads); with
    /// `--provider`, placed into that provider's channels.
    Json,
    /// The request body of OpenAI Chat Completions.
    #[value(name = "openai-chat", alias = "openai")]
    OpenaiChat,
    /// The request body of OpenAI Responses.
    #[value(name = "openai-responses")]
    OpenaiResponses,
    /// The request body of Anthropic Messages.
    Anthropic,
}

impl Format {
    fn provider(self) -> Option<Provider> {
        match self {
            Format::Text | Format::Json => None,
            Format::OpenaiChat => Some(Provider::OpenAiChat),
            Format::OpenaiResponses => Some(Provider::OpenAiResponses),
            Format::Anthropic => Some(Provider::Anthropic),
        }
    }
}

/// Who carries the signed text in OpenAI Chat requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SystemRoleArg {
    /// `system`.
    System,
    /// `developer`.
    Developer,
}

/// Tool descriptions in requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ToolDescriptionsArg {
    /// The signed description (default); announced schemas without their free text.
    Signed,
    /// No description; announced schemas without their free text.
    Withheld,
    /// The announced, untrusted description and schema, words included. Only for servers you
    /// control.
    #[value(name = "announced-dangerously")]
    AnnouncedDangerously,
}

/// Arguments of `strata assemble`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json \\
      --format anthropic --model claude-sonnet-4-5 --max-tokens 1024
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json \\
      --format openai-chat --model gpt-4o --report
  cat turn.json | strata assemble --agent ada.signed.json --trust trust.toml \\
      --input - --format json

Runtime input (--input) is JSON:
  {\"turns\": [{\"role\": \"user\", \"content\": \"Read notes.txt\"},
             {\"role\": \"tool_call\", \"call_id\": \"c1\", \"name\": \"file_read\",
              \"arguments\": {\"path\": \"notes.txt\"}},
             {\"role\": \"tool_result\", \"call_id\": \"c1\", \"content\": \"...\"},
             {\"role\": \"assistant\", \"content\": \"The notes say ...\"},
             {\"role\": \"user\", \"content\": \"Thanks. Summarise them.\"}],
   \"sections\": [{\"layer\": \"long_term_memory\", \"id\": \"m1\", \"content\": \"...\"}],
   \"tools\": [{\"name\": \"file_read\", \"description\": \"Read a file.\",
              \"parameters\": {\"type\": \"object\", \"properties\": {}}}],
   \"allowed_tools\": [\"file_read\"]}
Turns (layer 5, in the order given; ids turn.1, turn.2, ... unless `id` is set):
  role       user, assistant, tool_call or tool_result
  content    the words of a user or assistant turn, or a tool's result
  call_id    links a tool_call to its tool_result (both must be present, or use --drop-unpaired)
  name       the tool a tool_call names (it must be on the signed allowlist)
  arguments  a tool_call's arguments, a JSON object
  id, sticky an explicit section id; true to never trim the turn
Sections (layers 3-6; layers 1-2 come only from the signed definition):
  layer      3-6 or shared, delegated, working_memory, long_term_memory
  id         unique within its layer; content: the text (untrusted, fenced as data)
  key        conflict key: the higher layer's section with the same key wins
  priority   within a layer, lower priority is trimmed first (default 0)
  phase      constraint, task, memory, tools, history or user (orders the output)
  stability  stable (in the cacheable prefix) or dynamic (default)
  sticky     true: never dropped for budget; weight: share when cutting, in hundredths
  modes, paths  prompt modes and assembly paths it takes part in (default all)
  turn       {\"seq\": N, \"role\": ...} for a working-memory turn; source: producer name
tools: tools announced at run time (narrowed to the signed allowlist); allowed_tools: a
further narrowing. The full reference, with strata.toml (--config): docs/reference/formats.md.")]
pub struct AssembleArgs {
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
    /// Rollback state file; it must exist (create it once with `strata verify
    /// --init-rollback-state`). Without it, rollback is checked in memory only.
    #[arg(long, value_name = "FILE")]
    pub rollback_state: Option<PathBuf>,
    /// Accept an expired or not-yet-valid definition. For audits only.
    #[arg(long)]
    pub ignore_expiry_dangerously: bool,
    /// A strata.toml with budgets, default mode, protected priorities and max_total_chars; its
    /// `[store]` table names the memory store read for this assembly.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Read memory from this SQLite store (overrides strata.toml's `[store]`): long-term
    /// memory searched with the newest user message, shared facts, episodes, the session's
    /// goals and files, with the built-in contributors.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Read memory from this PostgreSQL database instead (a connection string or URL).
    #[arg(long, value_name = "URL", conflicts_with = "store")]
    pub postgres: Option<String>,
    /// The session whose goals and files are read from the store.
    #[arg(long, value_name = "ID", default_value = "cli")]
    pub session: String,
    /// Runtime input as JSON (`-` for standard input); repeatable.
    #[arg(long, value_name = "FILE")]
    pub input: Vec<PathBuf>,
    /// One runtime section, `LAYER:ID=TEXT` (layer 3-6 by number or name); repeatable.
    #[arg(long, value_name = "LAYER:ID=TEXT")]
    pub section: Vec<String>,
    /// Prompt mode (default: the configuration's, else the definition's).
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<PromptMode>,
    /// Assembly path.
    #[arg(long, value_parser = parse_path, default_value = "soul")]
    pub path: AssemblyPath,
    /// Total token budget (overrides configuration and definition).
    #[arg(long, value_name = "TOKENS", conflicts_with = "context_window")]
    pub budget: Option<u32>,
    /// The model's context window; budget, response reserve and tier follow from it.
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also print the report (a table with bars) on standard error.
    #[arg(long)]
    pub report: bool,
    /// With `--format json`: place the assembly for this provider (openai-chat,
    /// openai-responses, anthropic).
    #[arg(long, value_name = "PROVIDER")]
    pub provider: Option<Provider>,
    /// Model name written into provider request bodies.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Maximum output tokens written into provider request bodies (required by Anthropic).
    #[arg(long, value_name = "TOKENS")]
    pub max_tokens: Option<u32>,
    /// OpenAI Chat: the role that carries the signed text.
    #[arg(long, value_enum, default_value_t = SystemRoleArg::System)]
    pub system_role: SystemRoleArg,
    /// Tool descriptions in requests.
    #[arg(long, value_enum, default_value_t = ToolDescriptionsArg::Signed)]
    pub tool_descriptions: ToolDescriptionsArg,
    /// Accept tool calls without results and results without calls instead of failing (in every
    /// format); provider requests leave them out and report them.
    #[arg(long)]
    pub drop_unpaired: bool,
}

fn parse_mode(s: &str) -> Result<PromptMode, String> {
    s.parse().map_err(|e: strata_core::CoreError| e.to_string())
}

fn parse_path(s: &str) -> Result<AssemblyPath, String> {
    s.parse().map_err(|e: strata_core::CoreError| e.to_string())
}

/// Parse `LAYER:ID=TEXT` into a caller-provided section.
pub fn parse_section_flag(flag: &str) -> Result<Section, CliError> {
    let usage = || {
        CliError::Usage(format!(
            "--section `{flag}`: expected LAYER:ID=TEXT, e.g. long_term_memory:m1='a fact'"
        ))
    };
    let (head, text) = flag.split_once('=').ok_or_else(usage)?;
    let (layer, id) = head.split_once(':').ok_or_else(usage)?;
    let layer: RuntimeLayer = layer
        .parse()
        .map_err(|e: strata_core::CoreError| CliError::Usage(format!("--section `{flag}`: {e}")))?;
    Section::builder(layer, id, text)
        .map(|b| b.source(SourceKind::Caller, "command line").build())
        .map_err(|e| CliError::Usage(format!("--section `{flag}`: {e}")))
}

/// Load and verify the agent; a refusal maps to exit code 3.
pub fn load_agent(
    agent: &Path,
    trust: &Path,
    trust_pin: Option<&str>,
    rollback: Option<&Path>,
    ignore_expiry: bool,
) -> Result<VerifiedAgent, CliError> {
    super::require_file(agent, "signed agent definition")?;
    let trust = super::read_trust(trust, trust_pin)?;
    let guard = match rollback {
        Some(p) => RollbackGuard::open(p).map_err(|e| super::rollback_error(p, e))?,
        None => {
            tracing::debug!("no --rollback-state: rollback is checked in memory only");
            RollbackGuard::in_memory()
        }
    };
    let expiry = if ignore_expiry {
        Expiry::IgnoreDangerously
    } else {
        Expiry::Enforce
    };
    Loader::new(&trust, &guard)
        .expiry(expiry)
        .load_file(agent)
        .map_err(super::load_error)
}

/// Build the request from configuration, input files and flags.
pub fn build_request(
    args: &AssembleArgs,
    agent: &VerifiedAgent,
) -> Result<AssemblyRequest, CliError> {
    let mut req = AssemblyRequest {
        path: args.path,
        mode: agent.default_prompt_mode(),
        ..Default::default()
    };
    if let Some(path) = &args.config {
        apply_config(&mut req, path)?;
    }
    if let Some(m) = args.mode {
        req.mode = m;
    }
    apply_budget_flags(&mut req, args, agent)?;
    apply_runtime_input(&mut req, args)?;
    check_unique_section_ids(&req)?;
    // An unpaired tool call is refused whatever the output format, as a provider request
    // refuses it, so that `--format` does not decide whether an input is accepted.
    if !args.drop_unpaired {
        req.check_tool_pairs()
            .map_err(|e| CliError::Other(e.to_string()))?;
    }
    req.provider = args.format.provider().or(args.provider);
    // The reports people read (`--report`, and `--format json`, which `strata explain` draws)
    // say how many tokens a cut section had in full; that costs counting it whole.
    req.count_cut_sections = args.report || matches!(args.format, Format::Json);
    req.provider_options = provider_options(args);
    Ok(req)
}

/// Take the prompt mode, protected priorities and budget of the strata.toml at `path`.
fn apply_config(req: &mut AssemblyRequest, path: &Path) -> Result<(), CliError> {
    let cfg = strata_registry::Config::load(path).map_err(|e| CliError::Other(format!("{e}")))?;
    req.mode = cfg.prompt.default_mode;
    req.protected_priorities = cfg.prompt.protected_priorities.iter().copied().collect();
    req.budget = Some(BudgetSpec::Explicit(cfg.to_budget()));
    Ok(())
}

/// Apply `--budget` and `--context-window`, refusing one that leaves no room for the prompt
/// after the response reserve.
fn apply_budget_flags(
    req: &mut AssemblyRequest,
    args: &AssembleArgs,
    agent: &VerifiedAgent,
) -> Result<(), CliError> {
    if let Some(b) = args.budget {
        let mut budget = match &req.budget {
            Some(BudgetSpec::Explicit(b)) => b.clone(),
            _ => agent.budget().clone(),
        };
        budget.total_tokens = b;
        if budget.response_reserve >= b {
            let from = if args.config.is_some() {
                "the configuration's [budget] response_reserve"
            } else {
                "the signed definition's [budget] response_reserve"
            };
            return Err(CliError::Usage(format!(
                "--budget {b} leaves no room for the prompt: {} tokens are reserved for the \
                 response ({from}); give a --budget larger than {}",
                budget.response_reserve, budget.response_reserve
            )));
        }
        req.budget = Some(BudgetSpec::Explicit(budget));
    }
    if let Some(w) = args.context_window {
        // A window's response reserve is the definition's, or an eighth of the window if that
        // is more (the assembler's rule).
        let reserve = agent.budget().response_reserve.max(w / 8);
        if reserve >= w {
            return Err(CliError::Usage(format!(
                "--context-window {w} leaves no room for the prompt: {reserve} tokens are \
                 reserved for the response (the signed definition's [budget] \
                 response_reserve); give the model's context window, larger than {reserve}"
            )));
        }
        req.budget = Some(BudgetSpec::ContextWindow(w));
    }
    Ok(())
}

/// Apply the `--input` files in order, then the `--section` flags.
fn apply_runtime_input(req: &mut AssemblyRequest, args: &AssembleArgs) -> Result<(), CliError> {
    for path in &args.input {
        let text = read_input(path)?;
        let input = RuntimeInput::from_json(&text).map_err(|e| {
            CliError::Other(format!(
                "{}: not valid runtime input: {e} (see `strata assemble --help` for the format)",
                path.display()
            ))
        })?;
        input
            .apply(req)
            .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
    }
    for flag in &args.section {
        req.sections.push(parse_section_flag(flag)?);
    }
    Ok(())
}

/// Refuse two sections with one id in one layer: a mistake in the input (only one could be
/// shown). Ids shared across layers are conflicts the higher layer wins, and are reported.
fn check_unique_section_ids(req: &AssemblyRequest) -> Result<(), CliError> {
    let mut seen = std::collections::BTreeSet::new();
    for s in &req.sections {
        if !seen.insert((s.layer(), s.id().to_string())) {
            return Err(CliError::Other(format!(
                "section id `{}` is given twice in layer {} ({}); ids must be unique within a \
                 layer (turns take the ids turn.1, turn.2, ...): rename one of them",
                s.id(),
                s.layer().number(),
                s.layer().name()
            )));
        }
    }
    Ok(())
}

/// The provider options the flags ask for: system role, tool descriptions, pair policy, model.
fn provider_options(args: &AssembleArgs) -> ProviderOptions {
    ProviderOptions {
        system_role: match args.system_role {
            SystemRoleArg::System => SystemRole::System,
            SystemRoleArg::Developer => SystemRole::Developer,
        },
        tool_descriptions: match args.tool_descriptions {
            ToolDescriptionsArg::Signed => ToolDescriptions::Signed,
            ToolDescriptionsArg::Withheld => ToolDescriptions::Withheld,
            ToolDescriptionsArg::AnnouncedDangerously => {
                tracing::warn!(
                    "tool descriptions and schemas announced at run time are passed to the model unchecked"
                );
                ToolDescriptions::AnnouncedDangerously
            }
        },
        pairs: if args.drop_unpaired {
            PairPolicy::DropUnpaired
        } else {
            PairPolicy::Error
        },
        model: args.model.clone(),
        ..ProviderOptions::default()
    }
}

fn read_input(path: &Path) -> Result<String, CliError> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| CliError::io(path, e, "pipe JSON runtime input"))?;
        Ok(s)
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| CliError::io(path, e, "give a JSON runtime input file or - for stdin"))
    }
}

/// Render an assembled context in a format.
pub fn render(
    ctx: &AssembledContext,
    format: Format,
    args: &AssembleArgs,
    inputs: &[SectionInput],
) -> Result<String, CliError> {
    let json = |v: &serde_json::Value| {
        serde_json::to_string_pretty(v).map_err(|e| CliError::Other(e.to_string()))
    };
    Ok(match format {
        Format::Text => ctx.text().to_owned(),
        Format::Json => {
            let e = Explained {
                text: ctx.text().to_owned(),
                tools: ctx.tools().iter().map(|t| t.to_string()).collect(),
                report: ctx.report().clone(),
                conversation: ctx.conversation().cloned(),
                inputs: inputs.to_vec(),
            };
            serde_json::to_string_pretty(&e).map_err(|e| CliError::Other(e.to_string()))? + "\n"
        }
        Format::OpenaiChat | Format::OpenaiResponses | Format::Anthropic => {
            let provider = format.provider().unwrap_or(Provider::OpenAiChat);
            let model = args.model.clone().ok_or_else(|| {
                CliError::Usage(format!(
                    "--format {}: give --model NAME (written into the request body)",
                    provider.name()
                ))
            })?;
            let params = RequestParams {
                model,
                max_tokens: args.max_tokens,
                ..RequestParams::default()
            };
            let body = ctx
                .request_body(provider, &params)
                .map_err(|e| CliError::Usage(e.to_string()))?;
            json(&body)? + "\n"
        }
    })
}

/// Run `strata assemble`.
pub fn run(args: &AssembleArgs, out: &Output) -> Result<(), CliError> {
    if let (Some(p), None) = (args.format.provider(), &args.model) {
        return Err(CliError::Usage(format!(
            "--format {}: give --model NAME (written into the request body)",
            p.name()
        )));
    }
    let agent = load_agent(
        &args.agent,
        &args.trust,
        args.trust_sha256.as_deref(),
        args.rollback_state.as_deref(),
        args.ignore_expiry_dangerously,
    )?;
    let req = build_request(args, &agent)?;
    let tokenizer: Arc<dyn Tokenizer> = Arc::new(TiktokenTokenizer::o200k());
    // Sizes, previews and roles of the sections handed over, for `strata explain` (sections
    // a configured store adds while assembling are not among them).
    let inputs = if args.report || matches!(args.format, Format::Json) {
        describe_inputs(&req.sections, tokenizer.as_ref())
    } else {
        Vec::new()
    };
    let ctx = match runtime_for(args, &agent)? {
        // A store is configured: the runtime gathers from it and assembles (ADR-0016).
        Some(rt) => {
            let query = newest_user_message(&req);
            rt.assemble_request(&args.session, query.as_deref(), req)
                .map_err(|e| CliError::Other(e.to_string()))?
        }
        None => Assembler::new(tokenizer)
            .assemble(&agent, &req)
            .map_err(|e| CliError::Other(e.to_string()))?,
    };
    if args.report {
        out.status(&terminal_with(ctx.report(), &inputs, 40));
    }
    out.result(&render(&ctx, args.format, args, &inputs)?)
}

/// The session runtime when a store is configured (`--store`, `--postgres`, or strata.toml's
/// `[store]`); `None` assembles only the given input.
fn runtime_for(args: &AssembleArgs, agent: &VerifiedAgent) -> Result<Option<Runtime>, CliError> {
    let config = match &args.config {
        Some(path) => {
            Some(strata_registry::Config::load(path).map_err(|e| CliError::Other(format!("{e}")))?)
        }
        None => None,
    };
    let configured = config
        .as_ref()
        .is_some_and(|c| c.store.sqlite.is_some() || c.store.postgres.is_some());
    if !configured && args.store.is_none() && args.postgres.is_none() {
        return Ok(None);
    }
    let mut b = Runtime::builder(agent.clone()).config(config.unwrap_or_default());
    if let Some(path) = &args.store {
        super::require_file(path, "memory store")?;
        b = b.sqlite(path);
    }
    if let Some(url) = &args.postgres {
        b = b.postgres(url);
    }
    b.build()
        .map(Some)
        .map_err(|e| CliError::Other(format!("opening the memory store: {e}")))
}

/// The text of the newest user turn of the input, which memory search looks for.
fn newest_user_message(req: &AssemblyRequest) -> Option<String> {
    req.sections
        .iter()
        .filter(|s| {
            s.layer() == RuntimeLayer::WorkingMemory
                && s.turn()
                    .is_some_and(|t| t.role == strata_assembler::assemble::Role::User)
        })
        .max_by_key(|s| s.turn().map(|t| t.seq))
        .map(|s| s.content().as_str().to_owned())
}
