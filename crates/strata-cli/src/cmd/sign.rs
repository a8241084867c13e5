//! `strata sign`: check an agent definition and sign it into a DSSE envelope (ADR-0010).
//!
//! The definition is checked exactly as the loader will read it (strict TOML, referenced files
//! resolved next to the definition and pinned by SHA-256) before anything is signed, so an
//! invalid definition is never signed. `--append` adds signatures to an existing envelope for
//! k-of-n signing; the envelope's payload must be byte-identical to the definition the co-signer
//! reviewed, and it is never changed.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::Args;
use strata_agentdef::envelope::{MAX_ENVELOPE_BYTES, MAX_PAYLOAD_BYTES, MAX_SIGNATURES};
use strata_agentdef::{check_definition, sign_definition, AgentDefinition, Envelope, KeyPair};

use crate::error::CliError;
use crate::output::Output;

const AFTER_HELP: &str = "\
Examples:
  strata sign ada.toml --key release.key                  # writes ada.signed.json
  strata sign ada.toml --key a.key --key b.key --out -    # two signatures, to stdout
  strata sign ada.toml --key b.key --append ada.signed.json   # co-sign (k of n)

The envelope is written next to the definition by default (DEFINITION's name with
`.signed.json`), because the loader resolves referenced files next to the envelope.
With --append and no --out, the appended envelope is rewritten in place.
Before signing, the definition is checked as the loader reads it, and more: the version is at
least 1, every prefer_over names an allowlisted tool, and every template compiles and uses
only values an input provides (agent_id, agent_name, mode, tier, prompt_mode, date, language,
model, channel, sender).
The definition format, with an example: docs/reference/formats.md and examples/ada/ada.toml.";

/// Arguments of `strata sign`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct SignArgs {
    /// The agent definition (TOML); files it references are resolved next to it.
    #[arg(value_name = "DEFINITION.toml")]
    definition: PathBuf,

    /// A private key file to sign with; repeat for several signatures.
    #[arg(long = "key", value_name = "KEY", required = true)]
    keys: Vec<PathBuf>,

    /// Where to write the envelope (`-` for stdout). Default: next to the definition, or the
    /// appended envelope itself with --append.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,

    /// Add the signatures to this existing envelope instead of starting a new one; its payload
    /// must be byte-identical to DEFINITION.toml with its referenced files embedded.
    #[arg(long, value_name = "ENVELOPE")]
    append: Option<PathBuf>,

    /// Sign a definition whose validity window has already ended (for tests of expiry only).
    #[arg(long)]
    allow_expired: bool,
}

fn read_limited(path: &Path, limit: usize, what: &str) -> Result<Vec<u8>, CliError> {
    super::require_file(path, what)?;
    let f = std::fs::File::open(path).map_err(|e| CliError::io(path, e, "check the path"))?;
    let mut buf = Vec::new();
    f.take(limit as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| CliError::io(path, e, "check that the file is readable"))?;
    if buf.len() > limit {
        return Err(CliError::Other(format!(
            "{what} {} is over the limit of {limit} bytes; strata refuses larger ones",
            path.display()
        )));
    }
    Ok(buf)
}

/// The directory a path's relative references resolve against.
fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The default envelope path: `dir/ada.toml` -> `dir/ada.signed.json`.
fn default_out(definition: &Path) -> PathBuf {
    let stem = definition
        .file_stem()
        .map_or_else(|| "agent".into(), |s| s.to_string_lossy().into_owned());
    definition.with_file_name(format!("{stem}.signed.json"))
}

/// Add `keys`' signatures to the envelope at `path` after checking that it signs `text`.
fn append_to(path: &Path, text: &str, keys: &[KeyPair]) -> Result<Envelope, CliError> {
    let bytes = read_limited(path, MAX_ENVELOPE_BYTES, "envelope")?;
    let mut env = Envelope::parse(&bytes)
        .map_err(|e| CliError::agentdef(format!("reading envelope {}", path.display()), e))?;
    if env.payload_type != strata_agentdef::PAYLOAD_TYPE {
        return Err(CliError::Other(format!(
            "envelope {} has payload type `{}`, not a strata agent definition; append only to \
             envelopes made by `strata sign`",
            path.display(),
            env.payload_type
        )));
    }
    if env.payload.as_ref() != text.as_bytes() {
        return Err(CliError::Other(format!(
            "the payload of {} is not byte-identical to the definition given; a co-signer must \
             sign exactly the definition that was signed first: get that file and sign it again",
            path.display()
        )));
    }
    for key in keys {
        let id = key.key_id();
        if env.signatures.iter().any(|s| s.keyid == id.as_str()) {
            return Err(CliError::Other(format!(
                "{} is already signed by key {id}; a second signature by the same key does not \
                 count towards a threshold: sign with another key",
                path.display()
            )));
        }
        env.sign(key);
    }
    if env.signatures.len() > MAX_SIGNATURES {
        return Err(CliError::Other(format!(
            "the envelope would carry {} signatures, more than the {MAX_SIGNATURES} the loader \
             accepts",
            env.signatures.len()
        )));
    }
    Ok(env)
}

/// Checks only the signer can act on, beyond what the loader checks: a version the rollback
/// guard can grow from, usage hints that name allowlisted tools, and templates that compile.
fn lint(def: &AgentDefinition) -> Result<(), String> {
    if def.version == 0 {
        return Err(
            "version is 0; versions start at 1 and must grow with every signed change (the \
             rollback guard refuses a version it has seen exceeded)"
                .into(),
        );
    }
    let allowed: BTreeSet<&str> = def.core.tools.iter().map(|t| t.name.as_str()).collect();
    for t in &def.core.tools {
        for o in &t.prefer_over {
            if o.as_str() == t.name.as_str() {
                return Err(format!(
                    "tool `{}` says prefer_over = [\"{o}\"], itself; remove it",
                    t.name
                ));
            }
            if !allowed.contains(o.as_str()) {
                return Err(format!(
                    "tool `{}` says prefer_over = [\"{o}\"], but `{o}` is not on the allowlist \
                     ([[core.tools]]), so the model can never use it; add a [[core.tools]] entry \
                     named `{o}` or remove it from prefer_over",
                    t.name
                ));
            }
        }
    }
    let tpl = &def.templates;
    let mut texts: Vec<(String, &str)> = Vec::new();
    if let Some(f) = &tpl.fallback {
        texts.push(("templates.fallback".into(), f));
    }
    for (mode, tiers) in [
        ("assistant", &tpl.assistant),
        ("developer", &tpl.developer),
        ("planning", &tpl.planning),
        ("debugger", &tpl.debugger),
        ("user", &tpl.user),
    ] {
        for (tier, text) in [
            ("tier1", &tiers.tier1),
            ("tier2", &tiers.tier2),
            ("tier3", &tiers.tier3),
            ("tier4", &tiers.tier4),
            ("tier5", &tiers.tier5),
        ] {
            if let Some(t) = text {
                texts.push((format!("templates.{mode}.{tier}"), t));
            }
        }
    }
    for (at, text) in texts {
        strata_registry::templates::check_syntax(text).map_err(|e| {
            format!("{at} is not a valid template: {e}; fix the template syntax (`{{{{ name }}}}`, `{{% if %}}`)")
        })?;
        let unknown = strata_registry::templates::unknown_names(text)
            .map_err(|e| format!("{at} is not a valid template: {e}"))?;
        if let Some(name) = unknown.first() {
            return Err(format!(
                "{at} uses the value `{name}`, which no input provides; a template may use {}",
                strata_registry::templates::VALUE_NAMES
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(())
}

/// Run `strata sign`.
pub fn run(args: &SignArgs, out: &Output) -> Result<(), CliError> {
    let base = dir_of(&args.definition);
    let text = read_definition(&args.definition, &base)?;
    let keys = read_keys(&args.keys)?;

    let checking = || format!("checking definition {}", args.definition.display());
    let def =
        check_definition(&text, Some(&base)).map_err(|e| CliError::agentdef(checking(), e))?;
    lint(&def).map_err(|e| CliError::Other(format!("{}: {e}", checking())))?;
    check_validity(&def, args, out)?;
    let env = match &args.append {
        Some(path) => append_to(path, &text, &keys)?,
        None => {
            let refs: Vec<&KeyPair> = keys.iter().collect();
            sign_definition(&text, Some(&base), &refs)
                .map_err(|e| CliError::agentdef(checking(), e))?
        }
    };

    let target = match (&args.out, &args.append) {
        (Some(o), _) => o.clone(),
        (None, Some(a)) => a.clone(),
        (None, None) => default_out(&args.definition),
    };
    let json = env.to_json();
    let signed_by: Vec<String> = keys.iter().map(|k| k.key_id().to_string()).collect();
    tracing::info!(agent = %def.id, version = def.version, keys = ?signed_by, "definition signed");
    if target.as_os_str() == "-" {
        out.result(&json)?;
        return Ok(());
    }
    super::require_parent_dir(&target, "the envelope")?;
    super::write_atomically(&target, json.as_bytes())?;
    out.status(&format!(
        "signed agent {} version {} -> {} ({} signature(s) in the envelope)",
        def.id,
        def.version,
        target.display(),
        env.signatures.len()
    ));
    Ok(())
}

/// Read the definition at `path` (UTF-8 TOML, within the payload limit) and embed the files
/// it references, resolved in `base`.
fn read_definition(path: &Path, base: &Path) -> Result<String, CliError> {
    let bytes = read_limited(path, MAX_PAYLOAD_BYTES, "definition")?;
    let text = String::from_utf8(bytes).map_err(|_| {
        CliError::Other(format!(
            "definition {} is not UTF-8 text; agent definitions are TOML",
            path.display()
        ))
    })?;
    // The payload embeds every referenced file: the envelope and a trust store are all a
    // runtime needs (ADR-0035).
    strata_agentdef::embed_files(&text, base).map_err(|e| {
        CliError::agentdef(
            format!("embedding the files {} references", path.display()),
            e,
        )
    })
}

/// Read the signing keys, refusing one key given twice.
fn read_keys(paths: &[PathBuf]) -> Result<Vec<KeyPair>, CliError> {
    let mut keys = Vec::with_capacity(paths.len());
    let mut ids = BTreeSet::new();
    for path in paths {
        let key = super::read_key(path)?;
        if !ids.insert(key.key_id()) {
            return Err(CliError::Usage(format!(
                "key {} is given twice (key id {}); each --key must be a different key",
                path.display(),
                key.key_id()
            )));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// Refuse a definition whose validity has ended (unless `--allow-expired`), and warn about one
/// that ends within a day.
fn check_validity(def: &AgentDefinition, args: &SignArgs, out: &Output) -> Result<(), CliError> {
    let Some(end) = def.not_after.as_deref() else {
        return Ok(());
    };
    let end = strata_agentdef::time::parse_rfc3339(end).map_err(|e| {
        CliError::Other(format!(
            "checking definition {}: not_after: {e}",
            args.definition.display()
        ))
    })?;
    let now = strata_agentdef::now_unix();
    if end < now && !args.allow_expired {
        return Err(CliError::Usage(format!(
            "{}: its validity ended at {} (not_after), before now; move not_after forward and sign again (--allow-expired signs it anyway, for tests of expiry)",
            args.definition.display(),
            def.not_after.as_deref().unwrap_or_default()
        )));
    }
    if (now..now + 86_400).contains(&end) {
        out.status(&format!(
            "warning: {} stops being valid in less than a day ({}); runtimes refuse it from then on",
            args.definition.display(),
            def.not_after.as_deref().unwrap_or_default()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_envelope_sits_next_to_the_definition() {
        assert_eq!(
            default_out(Path::new("defs/ada.toml")),
            PathBuf::from("defs/ada.signed.json")
        );
        assert_eq!(
            default_out(Path::new("ada.toml")),
            PathBuf::from("ada.signed.json")
        );
        assert_eq!(dir_of(Path::new("ada.toml")), PathBuf::from("."));
    }
}
