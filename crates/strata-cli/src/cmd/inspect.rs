//! `strata inspect`: show what a signed agent definition contains and who signed it.
//!
//! With `--trust`, the definition is loaded through `strata_agentdef::Loader` and everything
//! shown comes from the sealed `VerifiedAgent` (ADR-0004, ADR-0010: verify, then read). Without
//! `--trust`, or when verification refuses the envelope, the payload is parsed for display only
//! and the output says loudly, first, that it is UNVERIFIED; it is never presented as trusted.
//! Per-signature statuses are derived from the loader's verdict and the trust store; this module
//! checks no signature itself.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;
use strata_agentdef::definition::{template_inventory, TemplatesDef, Text, TierTemplates};
use strata_agentdef::envelope::MAX_ENVELOPE_BYTES;
use strata_agentdef::time::format_rfc3339;
use strata_agentdef::{
    AgentDefError, AgentDefinition, Envelope, Loader, RollbackGuard, TrustStore, VerifiedAgent,
    PAYLOAD_TYPE,
};
use strata_core::{Budget, IdentityLayer, OperationalMode, Tier, TiktokenTokenizer, Tokenizer};

use crate::error::CliError;
use crate::output::Output;

const AFTER_HELP: &str = "\
Examples:
  strata inspect ada.signed.json --trust trust.toml
  strata inspect ada.signed.json --json | jq .definition.layers
  strata inspect ada.signed.json            # UNVERIFIED: shows what the envelope claims

Token counts use the o200k_base encoding. With --trust, a refused definition is still shown
(marked UNVERIFIED) and the command exits with code 3.";

/// Arguments of `strata inspect`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct InspectArgs {
    /// The signed definition (DSSE envelope JSON).
    #[arg(value_name = "ENVELOPE")]
    envelope: PathBuf,

    /// Verify against this trust store; without it the content is shown UNVERIFIED.
    #[arg(long, value_name = "TRUST.toml")]
    trust: Option<PathBuf>,

    /// Refuse the trust store unless the SHA-256 of its exact bytes is this (`sha256:<hex>`,
    /// as `strata verify` prints it).
    #[arg(
        long,
        value_name = "SHA256",
        env = "STRATA_TRUST_SHA256",
        requires = "trust"
    )]
    trust_sha256: Option<String>,

    /// Check validity windows at this instant (RFC 3339 with an offset) instead of now.
    #[arg(long, value_name = "RFC3339", value_parser = super::parse_at, requires = "trust")]
    at: Option<i64>,

    /// Print the inspection as JSON.
    #[arg(long)]
    json: bool,
}

/// Whether the content shown was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Trust {
    /// Loaded through the verifying loader.
    Verified,
    /// Parsed for display only.
    Unverified,
}

#[derive(Debug, Serialize)]
struct Refusal {
    cause: &'static str,
    message: String,
}

#[derive(Debug, Serialize)]
struct EnvelopeInfo {
    payload_type: String,
    payload_bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_sha256: Option<String>,
}

#[derive(Debug, Serialize)]
struct SectionInfo {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
}

#[derive(Debug, Serialize)]
struct LayerInfo {
    layer: u8,
    name: &'static str,
    sections: Vec<SectionInfo>,
}

#[derive(Debug, Serialize)]
struct ToolInfo {
    name: String,
    description: String,
    prefer_for: Vec<String>,
    prefer_over: Vec<String>,
}

#[derive(Debug, Serialize)]
struct DefinitionInfo {
    id: String,
    name: String,
    version: u64,
    not_before: Option<String>,
    not_after: Option<String>,
    default_mode: String,
    default_prompt_mode: String,
    budget: Budget,
    #[serde(skip_serializing_if = "Option::is_none")]
    identity_digest: Option<String>,
    layers: Vec<LayerInfo>,
    tools: Vec<ToolInfo>,
    /// Operational mode -> tiers that have a template.
    templates: BTreeMap<&'static str, Vec<u8>>,
}

/// What is known about one signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum SigStatus {
    /// Counted by the loader towards the threshold.
    Verified,
    /// A further signature by a key already counted.
    Duplicate,
    /// No trust store was given.
    NotChecked,
    /// The key is not in the trust store.
    UnknownKey,
    /// The trust store revokes the key.
    Revoked,
    /// The key is outside its validity dates.
    KeyNotValid,
    /// A trusted, valid key whose signature the loader did not count: it does not verify.
    DoesNotVerify,
    /// A trusted key, but the definition was refused, so the signature was not confirmed.
    NotConfirmed,
}

impl SigStatus {
    fn describe(self) -> &'static str {
        match self {
            SigStatus::Verified => "verified",
            SigStatus::Duplicate => "duplicate of a counted signature (counted once)",
            SigStatus::NotChecked => "NOT CHECKED (no trust store)",
            SigStatus::UnknownKey => "unknown key (not in the trust store)",
            SigStatus::Revoked => "REVOKED in the trust store",
            SigStatus::KeyNotValid => "key outside its validity dates",
            SigStatus::DoesNotVerify => "DOES NOT VERIFY",
            SigStatus::NotConfirmed => "trusted key, not confirmed (the definition was refused)",
        }
    }
}

#[derive(Debug, Serialize)]
struct SignatureInfo {
    key_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_name: Option<String>,
    status: SigStatus,
}

#[derive(Debug, Serialize)]
struct Report {
    trust: Trust,
    notice: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<Refusal>,
    envelope: EnvelopeInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    definition: Option<DefinitionInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    definition_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    threshold: Option<usize>,
    signatures: Vec<SignatureInfo>,
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn layer_name(layer: IdentityLayer) -> (u8, &'static str) {
    match layer {
        IdentityLayer::Core => (1, "core"),
        IdentityLayer::Characteristics => (2, "characteristics"),
    }
}

/// Signature statuses from the trust store and, when verification succeeded, the loader's
/// list of counted signers.
fn signature_infos(
    env: &Envelope,
    trust: Option<&TrustStore>,
    signers: Option<&BTreeSet<String>>,
    now: i64,
) -> Vec<SignatureInfo> {
    let mut counted = BTreeSet::new();
    env.signatures
        .iter()
        .map(|s| {
            let id = s.keyid.clone();
            let Some(trust) = trust else {
                return SignatureInfo {
                    key_id: id,
                    key_name: None,
                    status: SigStatus::NotChecked,
                };
            };
            let key = trust.key(&id);
            let status = if trust.revoked(&id).is_some() {
                SigStatus::Revoked
            } else if let Some(key) = key {
                match signers {
                    Some(sig) if sig.contains(&id) => {
                        if counted.insert(id.clone()) {
                            SigStatus::Verified
                        } else {
                            SigStatus::Duplicate
                        }
                    }
                    _ if !key.valid_at(now) => SigStatus::KeyNotValid,
                    Some(_) => SigStatus::DoesNotVerify,
                    None => SigStatus::NotConfirmed,
                }
            } else {
                SigStatus::UnknownKey
            };
            SignatureInfo {
                key_name: key.map(|k| k.name.clone()),
                key_id: id,
                status,
            }
        })
        .collect()
}

fn tools_of(agent: &VerifiedAgent) -> Vec<ToolInfo> {
    agent
        .identity()
        .tools()
        .iter()
        .map(|t| ToolInfo {
            name: t.name.to_string(),
            description: t.description.clone(),
            prefer_for: t.usage.prefer_for.clone(),
            prefer_over: t
                .usage
                .prefer_over
                .iter()
                .map(ToString::to_string)
                .collect(),
        })
        .collect()
}

/// What a verified agent contains, from the sealed value only.
fn verified_definition(agent: &VerifiedAgent, tok: &dyn Tokenizer) -> DefinitionInfo {
    let mut layers = Vec::new();
    for layer in [IdentityLayer::Core, IdentityLayer::Characteristics] {
        let (number, name) = layer_name(layer);
        let sections = agent
            .identity()
            .layer(layer)
            .map(|s| SectionInfo {
                id: s.id().as_str().to_owned(),
                key: s.key().map(|k| k.as_str().to_owned()),
                bytes: Some(s.content().as_str().len()),
                tokens: Some(tok.count(s.content().as_str())),
                file: None,
            })
            .collect();
        layers.push(LayerInfo {
            layer: number,
            name,
            sections,
        });
    }
    let (nb, na) = agent.validity();
    DefinitionInfo {
        id: agent.agent_id().to_owned(),
        name: agent.name().to_owned(),
        version: agent.version(),
        not_before: nb.map(format_rfc3339),
        not_after: na.map(format_rfc3339),
        default_mode: agent.default_mode().to_string(),
        default_prompt_mode: agent.default_prompt_mode().to_string(),
        budget: agent.budget().clone(),
        identity_digest: Some(agent.identity_digest().to_string()),
        layers,
        tools: tools_of(agent),
        templates: template_inventory(agent.templates()),
    }
}

fn text_section(id: &str, text: &Text, tok: &dyn Tokenizer) -> SectionInfo {
    match text {
        Text::Inline(s) => plain_section(id, s, tok),
        Text::File(f) => SectionInfo {
            id: id.to_owned(),
            key: None,
            bytes: None,
            tokens: None,
            file: Some(format!("{} (pinned sha256:{})", f.file, f.sha256)),
        },
    }
}

fn plain_section(id: &str, s: &str, tok: &dyn Tokenizer) -> SectionInfo {
    SectionInfo {
        id: id.to_owned(),
        key: None,
        bytes: Some(s.len()),
        tokens: Some(tok.count(s)),
        file: None,
    }
}

fn tiers_of(t: &TierTemplates) -> [Option<&String>; 5] {
    [
        t.tier1.as_ref(),
        t.tier2.as_ref(),
        t.tier3.as_ref(),
        t.tier4.as_ref(),
        t.tier5.as_ref(),
    ]
}

fn unverified_templates(t: &TemplatesDef) -> BTreeMap<&'static str, Vec<u8>> {
    let mut out = BTreeMap::new();
    for mode in OperationalMode::ALL {
        let tiers = match mode {
            OperationalMode::Assistant => &t.assistant,
            OperationalMode::Developer => &t.developer,
            OperationalMode::Planning => &t.planning,
            OperationalMode::Debugger => &t.debugger,
            OperationalMode::User => &t.user,
        };
        let present = Tier::ALL
            .iter()
            .zip(tiers_of(tiers))
            .filter(|(_, x)| x.is_some())
            .map(|(tier, _)| tier.number())
            .collect();
        out.insert(mode.name(), present);
    }
    out
}

/// What the payload claims, parsed for display only: fields as written, in layer order.
fn unverified_definition(def: &AgentDefinition, tok: &dyn Tokenizer) -> DefinitionInfo {
    let c = &def.core;
    let mut core = vec![text_section("core.identity", &c.identity, tok)];
    if let Some(r) = &c.role {
        core.push(text_section("core.role", r, tok));
    }
    if !c.safety_rules.is_empty() {
        core.push(plain_section(
            "core.safety_rules",
            &c.safety_rules.join("\n"),
            tok,
        ));
    }
    if !c.hard_constraints.is_empty() {
        let text = c.hard_constraints.join("\n");
        core.push(plain_section("core.hard_constraints", &text, tok));
    }
    if let Some(r) = &c.response_format {
        core.push(text_section("core.response_format", r, tok));
    }
    if let Some(l) = &c.language {
        core.push(plain_section("core.language", l, tok));
    }
    let ch = &def.characteristics;
    let mut chars = Vec::new();
    for (id, t) in [
        ("characteristics.personality", &ch.personality),
        ("characteristics.style", &ch.style),
    ] {
        if let Some(t) = t {
            chars.push(text_section(id, t, tok));
        }
    }
    if !ch.guidelines.is_empty() {
        let text = ch.guidelines.join("\n");
        chars.push(plain_section("characteristics.guidelines", &text, tok));
    }
    if let Some(t) = &ch.citation_rules {
        chars.push(text_section("characteristics.citation_rules", t, tok));
    }
    let mut tools: Vec<ToolInfo> = c
        .tools
        .iter()
        .map(|t| ToolInfo {
            name: t.name.to_string(),
            description: t.description.clone(),
            prefer_for: t.prefer_for.clone(),
            prefer_over: t.prefer_over.iter().map(ToString::to_string).collect(),
        })
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    DefinitionInfo {
        id: def.id.clone(),
        name: def.name.clone(),
        version: def.version,
        not_before: def.not_before.clone(),
        not_after: def.not_after.clone(),
        default_mode: def.default_mode.to_string(),
        default_prompt_mode: def.default_prompt_mode.to_string(),
        budget: def.budget.clone(),
        identity_digest: None,
        layers: vec![
            LayerInfo {
                layer: 1,
                name: "core",
                sections: core,
            },
            LayerInfo {
                layer: 2,
                name: "characteristics",
                sections: chars,
            },
        ],
        tools,
        templates: unverified_templates(&def.templates),
    }
}

/// Parse the payload for display only. Never used to make a trust decision.
fn parse_for_display(env: &Envelope) -> Result<AgentDefinition, String> {
    if env.payload_type != PAYLOAD_TYPE {
        return Err(format!(
            "payload type `{}` is not a strata agent definition; content not shown",
            env.payload_type
        ));
    }
    let text = std::str::from_utf8(&env.payload)
        .map_err(|_| "the payload is not UTF-8 text; content not shown".to_owned())?;
    toml::from_str(text).map_err(|e| format!("the payload is not a valid agent definition: {e}"))
}

fn envelope_info(env: &Envelope, sha: Option<String>) -> EnvelopeInfo {
    EnvelopeInfo {
        payload_type: env.payload_type.clone(),
        payload_bytes: env.payload.len(),
        payload_sha256: sha,
    }
}

fn unverified_report(
    env: &Envelope,
    notice: String,
    refused: Option<&AgentDefError>,
    trust: Option<&TrustStore>,
    now: i64,
    tok: &dyn Tokenizer,
) -> Report {
    let (definition, definition_error) = match parse_for_display(env) {
        Ok(def) => (Some(unverified_definition(&def, tok)), None),
        Err(e) => (None, Some(e)),
    };
    Report {
        trust: Trust::Unverified,
        notice,
        refused: refused.map(|e| Refusal {
            cause: e.cause(),
            message: e.to_string(),
        }),
        envelope: envelope_info(env, None),
        definition,
        definition_error,
        threshold: trust.map(TrustStore::threshold),
        signatures: signature_infos(env, trust, None, now),
    }
}

fn read_envelope(path: &Path) -> Result<Vec<u8>, CliError> {
    super::require_file(path, "envelope")?;
    let f = std::fs::File::open(path).map_err(|e| CliError::io(path, e, "check the path"))?;
    let mut buf = Vec::new();
    f.take(MAX_ENVELOPE_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| CliError::io(path, e, "check that the file is readable"))?;
    Ok(buf)
}

fn fmt_opt<T: ToString>(v: Option<T>, none: &str) -> String {
    v.map_or_else(|| none.to_owned(), |x| x.to_string())
}

fn render_budget(b: &Budget) -> String {
    let mut s = format!(
        "{} tokens total, {} reserved for the response",
        b.total_tokens, b.response_reserve
    );
    let l = &b.layers;
    let per_layer: Vec<String> = [
        ("shared", l.shared),
        ("delegated", l.delegated),
        ("working_memory", l.working_memory),
        ("long_term_memory", l.long_term_memory),
    ]
    .iter()
    .filter_map(|(n, v)| v.map(|v| format!("{n} {v}")))
    .collect();
    if !per_layer.is_empty() {
        let _ = write!(s, "; per layer: {}", per_layer.join(", "));
    }
    if let Some(c) = b.section_cap {
        let _ = write!(s, "; section cap {c} tokens");
    }
    if let Some(c) = b.max_total_chars {
        let _ = write!(s, "; at most {c} characters");
    }
    s
}

/// The human-readable inspection. UNVERIFIED content is announced first and last.
fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}", r.notice);
    let e = &r.envelope;
    let _ = writeln!(o, "payload type     {}", e.payload_type);
    let _ = writeln!(o, "payload size     {} bytes", e.payload_bytes);
    if let Some(sha) = &e.payload_sha256 {
        let _ = writeln!(o, "payload sha256   {sha}");
    }
    if let Some(err) = &r.definition_error {
        let _ = writeln!(o, "definition       {err}");
    }
    if let Some(d) = &r.definition {
        write_definition_head(&mut o, d);
        write_layers(&mut o, d, r.trust);
        write_tools_and_templates(&mut o, d);
    }
    write_signatures(&mut o, r);
    if r.trust == Trust::Unverified {
        let _ = writeln!(o, "\nUNVERIFIED: nothing above is authenticated.");
    }
    o
}

/// The definition's agent, validity, defaults, budget and identity digest.
fn write_definition_head(o: &mut String, d: &DefinitionInfo) {
    let _ = writeln!(
        o,
        "agent            {} ({}), version {}",
        d.id, d.name, d.version
    );
    let _ = writeln!(
        o,
        "validity         {} to {}",
        fmt_opt(d.not_before.as_ref(), "any time"),
        fmt_opt(d.not_after.as_ref(), "no end")
    );
    let _ = writeln!(
        o,
        "defaults         mode {}, prompt mode {}",
        d.default_mode, d.default_prompt_mode
    );
    let _ = writeln!(o, "budget           {}", render_budget(&d.budget));
    if let Some(dig) = &d.identity_digest {
        let _ = writeln!(o, "identity digest  {dig}");
    }
}

/// The definition's layers, one line per section with its size (and file, if any).
fn write_layers(o: &mut String, d: &DefinitionInfo, trust: Trust) {
    for l in &d.layers {
        let what = match trust {
            Trust::Verified => "section(s) as sealed",
            Trust::Unverified => "field(s) as written",
        };
        let _ = writeln!(
            o,
            "\nlayer {} ({}): {} {what}",
            l.layer,
            l.name,
            l.sections.len()
        );
        for s in &l.sections {
            let size = match (s.bytes, s.tokens) {
                (Some(b), Some(t)) => format!("{b:>6} bytes {t:>6} tokens"),
                _ => String::new(),
            };
            let _ = write!(o, "  {:<32} {size}", s.id);
            if let Some(f) = &s.file {
                let _ = write!(o, "file {f}");
            }
            let _ = writeln!(o);
        }
    }
}

/// The definition's tools with their preferences, and its templates per operational mode.
fn write_tools_and_templates(o: &mut String, d: &DefinitionInfo) {
    let _ = writeln!(o, "\ntools ({})", d.tools.len());
    for t in &d.tools {
        let _ = writeln!(o, "  {:<20} {}", t.name, t.description);
        if !t.prefer_for.is_empty() {
            let _ = writeln!(o, "      prefer for: {}", t.prefer_for.join("; "));
        }
        if !t.prefer_over.is_empty() {
            let _ = writeln!(o, "      prefer over: {}", t.prefer_over.join(", "));
        }
    }
    let _ = writeln!(o, "\ntemplates (operational mode: tiers)");
    for (mode, tiers) in &d.templates {
        let list = if tiers.is_empty() {
            "none".to_owned()
        } else {
            tiers
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(o, "  {mode:<10} {list}");
    }
}

/// The signatures, with the threshold the trust store requires.
fn write_signatures(o: &mut String, r: &Report) {
    let _ = write!(o, "\nsignatures ({})", r.signatures.len());
    if let Some(t) = r.threshold {
        let _ = write!(o, ", {t} required by the trust store");
    }
    let _ = writeln!(o);
    for s in &r.signatures {
        let name = s.key_name.as_deref().unwrap_or("-");
        let _ = writeln!(o, "  {}  {name}  {}", s.key_id, s.status.describe());
    }
}

/// Run `strata inspect`.
pub fn run(args: &InspectArgs, out: &Output) -> Result<(), CliError> {
    let bytes = read_envelope(&args.envelope)?;
    let tok = TiktokenTokenizer::o200k();
    let now = args.at.unwrap_or_else(now_secs);
    let parse = |bytes: &[u8]| {
        Envelope::parse(bytes).map_err(|e| {
            CliError::agentdef(format!("reading envelope {}", args.envelope.display()), e)
        })
    };
    let (report, refusal) = match &args.trust {
        None => {
            let env = parse(&bytes)?;
            let notice = "UNVERIFIED: no trust store was given (--trust), so no signature was \
                          checked; the content below is only what the envelope claims. Do not \
                          rely on it."
                .to_owned();
            (unverified_report(&env, notice, None, None, now, &tok), None)
        }
        Some(trust_path) => {
            let trust = super::read_trust(trust_path, args.trust_sha256.as_deref())?;
            // A throwaway guard: inspecting must not record anything as accepted.
            let guard = RollbackGuard::in_memory();
            let mut loader = Loader::new(&trust, &guard);
            if let Some(at) = args.at {
                loader = loader.expiry(strata_agentdef::Expiry::TimeTravelDangerously(at));
            }
            let base = match args.envelope.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            };
            match loader.load_bytes(&bytes, Some(&base)) {
                Ok(agent) => {
                    let env = parse(&bytes)?;
                    let signers: BTreeSet<String> =
                        agent.signers().iter().map(ToString::to_string).collect();
                    let report = Report {
                        trust: Trust::Verified,
                        notice: format!(
                            "VERIFIED against trust store {}: {} distinct trusted signature(s), {} \
                             required",
                            trust_path.display(),
                            signers.len(),
                            trust.threshold()
                        ),
                        refused: None,
                        envelope: envelope_info(&env, Some(agent.payload_sha256().to_owned())),
                        definition: Some(verified_definition(&agent, &tok)),
                        definition_error: None,
                        threshold: Some(trust.threshold()),
                        signatures: signature_infos(&env, Some(&trust), Some(&signers), now),
                    };
                    (report, None)
                }
                Err(e) => {
                    // Nothing can be shown from an envelope that does not even parse.
                    let Ok(env) = Envelope::parse(&bytes) else {
                        return Err(CliError::Refused(e));
                    };
                    let notice = format!(
                        "UNVERIFIED: verification REFUSED ({}): {e}. The content below is only \
                         what the envelope claims. Do not rely on it.",
                        e.cause()
                    );
                    let r = unverified_report(&env, notice, Some(&e), Some(&trust), now, &tok);
                    (r, Some(e))
                }
            }
        }
    };
    if args.json {
        let mut json = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::Other(format!("cannot write the inspection as JSON: {e}")))?;
        json.push('\n');
        out.result(&json)?;
    } else {
        out.result(&render_text(&report))?;
    }
    match refusal {
        Some(e) => Err(CliError::Refused(e)),
        None => Ok(()),
    }
}
