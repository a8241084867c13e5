//! `strata explain`: the assembly report as a picture.
//!
//! Two renderings of the same report: a self-contained HTML page (no scripts, no network, no
//! external resources; written as well-formed XHTML so any XML parser can check it) showing the
//! six layers as bands with tokens against the budget, every section with its outcome, the
//! fences, the stable prefix and the cache breakpoints; and a compact terminal table with bars.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};
use strata_assembler::report::{Report, SectionStatus};
use strata_assembler::{Block, Conversation, Layer, MessageKind, MessageRole};

use crate::error::CliError;
use crate::output::Output;

/// What `strata assemble --format json` writes and `strata explain` reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Explained {
    /// The assembled text.
    pub text: String,
    /// Tools offered to the model.
    pub tools: Vec<String>,
    /// The report.
    pub report: Report,
    /// The conversation placed into a provider's channels, if the assembly named a provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Conversation>,
}

/// Arguments of `strata explain`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json --format json > out.json
  strata explain out.json                   # a table with bars in the terminal
  strata explain out.json --html out.html   # a page that opens offline in any browser
  strata assemble ... --format json | strata explain -")]
pub struct ExplainArgs {
    /// The JSON written by `strata assemble --format json` (`-` reads standard input).
    pub file: PathBuf,
    /// Write a self-contained HTML page here instead of the terminal table.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Width of the terminal bars, in characters.
    #[arg(long, default_value_t = 40, value_name = "N")]
    pub width: usize,
}

/// Run `strata explain`.
pub fn run(args: &ExplainArgs, out: &Output) -> Result<(), CliError> {
    let mut text = String::new();
    if args.file.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map_err(|e| {
            CliError::io(
                &args.file,
                e,
                "pipe the output of `strata assemble --format json`",
            )
        })?;
    } else {
        text = std::fs::read_to_string(&args.file).map_err(|e| {
            CliError::io(
                &args.file,
                e,
                "write it with `strata assemble --format json > FILE`",
            )
        })?;
    }
    let explained: Explained = serde_json::from_str(&text).map_err(|e| {
        CliError::Other(format!(
            "{} is not the JSON of `strata assemble --format json`: {e}",
            args.file.display()
        ))
    })?;
    match &args.html {
        Some(path) => {
            super::write_atomically(path, html(&explained).as_bytes())?;
            out.status(&format!(
                "wrote {} (self-contained; open it in any browser)",
                path.display()
            ));
            Ok(())
        }
        None => {
            let mut t = terminal(&explained.report, args.width);
            if let Some(c) = &explained.conversation {
                t.push_str(&channels(c));
            }
            out.result(&t)
        }
    }
}

/// One row per channel and message of a provider request: who speaks, why it is there (cache
/// order), what it holds and what it costs (ADR-0014, ADR-0015).
pub fn channel_rows(c: &Conversation) -> Vec<[String; 5]> {
    let mut rows = vec![[
        "system".to_owned(),
        "signed".to_owned(),
        "layers 1-2, the signed text alone".to_owned(),
        format!("{} bytes", c.system.len()),
        c.system_tokens.to_string(),
    ]];
    if !c.tools.is_empty() {
        let names: Vec<String> = c
            .tools
            .iter()
            .map(|t| format!("{} (schema: {})", t.name, t.schema_source))
            .collect();
        rows.push([
            "tools".to_owned(),
            "-".to_owned(),
            "definitions".to_owned(),
            names.join(", "),
            c.tool_tokens.to_string(),
        ]);
    }
    for (i, m) in c.messages.iter().enumerate() {
        let role = match m.role {
            MessageRole::User => "user",
            MessageRole::Assistant => "assistant",
        };
        let kind = match m.kind {
            MessageKind::StableContext => "stable context (fenced data)",
            MessageKind::History => "history",
            MessageKind::DynamicContext => "per-turn context (fenced data)",
            MessageKind::NewestUser => "newest user turn",
        };
        let blocks: Vec<String> = m
            .blocks
            .iter()
            .map(|b| match b {
                Block::Text { text } => format!("text ({} bytes)", text.len()),
                Block::ToolUse { id, name, .. } => format!("tool call {name} [{id}]"),
                Block::ToolResult { id, content } => {
                    format!("tool result [{id}] ({} bytes, fenced)", content.len())
                }
            })
            .collect();
        rows.push([
            format!("message {}", i + 1),
            role.to_owned(),
            kind.to_owned(),
            blocks.join("; "),
            m.tokens.to_string(),
        ]);
    }
    rows
}

/// The request as channels and messages, for the terminal.
pub fn channels(c: &Conversation) -> String {
    let mut out = format!("\nrequest for {} (cache order):\n", c.provider.name());
    for [ch, role, kind, what, tokens] in channel_rows(c) {
        let _ = writeln!(out, "  {ch:<11} {role:<9} {tokens:>6} tok  {kind}: {what}");
    }
    out
}

fn bar(value: u64, of: u64, width: usize) -> String {
    let filled = if of == 0 {
        0
    } else {
        ((value as u128 * width as u128) / of as u128).min(width as u128) as usize
    };
    format!("{}{}", "#".repeat(filled), ".".repeat(width - filled))
}

fn status_word(s: &SectionStatus) -> String {
    match s {
        SectionStatus::Kept => "kept".into(),
        SectionStatus::Cut { full_tokens } => format!("cut (from {full_tokens} tokens)"),
        SectionStatus::Dropped { reason } => format!("dropped: {reason}"),
        SectionStatus::Filtered { reason } => format!("not in this {reason}"),
        SectionStatus::Overridden {
            by_layer,
            by_id,
            on,
        } => {
            format!(
                "overridden on {on} by layer {} `{by_id}`",
                by_layer.number()
            )
        }
    }
}

/// The terminal rendering: budget, one bar per layer, then one line per section.
pub fn terminal(r: &Report, width: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "agent {}  identity {}  tokenizer {}  tier {}",
        r.agent_id,
        short(&r.identity_digest),
        r.tokenizer,
        tier_number(r)
    );
    let _ = writeln!(
        s,
        "budget {} = {} prompt + {} reserved for the response; used {} ({}%)",
        r.total_tokens,
        r.prompt_budget,
        r.response_reserve,
        r.used_tokens,
        percent(r.used_tokens, r.prompt_budget)
    );
    let _ = writeln!(s, "{:<24} {:>7}  of the prompt budget", "layer", "tokens");
    let _ = writeln!(
        s,
        "{:<24} {:>7}  {}",
        "1-2 identity (signed)",
        r.identity_tokens,
        bar(r.identity_tokens, r.prompt_budget, width)
    );
    for l in &r.layers {
        let name = format!("{} {}", l.layer.number(), l.layer.name());
        let extra = if l.cut + l.dropped > 0 {
            format!("  {} kept, {} cut, {} dropped", l.kept, l.cut, l.dropped)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "{:<24} {:>7}  {}{extra}",
            name,
            l.tokens,
            bar(l.tokens, r.prompt_budget, width)
        );
    }
    let _ = writeln!(
        s,
        "stable prefix: {} tokens ({} bytes); cache breakpoints: {}",
        r.stable_prefix.token,
        r.stable_prefix.byte,
        r.breakpoints
            .iter()
            .map(|b| format!("{}@{}", b.after_layer.number(), b.token))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(s, "sections:");
    for sec in &r.sections {
        let _ = writeln!(
            s,
            "  L{} {:<28} {:>6}  {}{}{}",
            sec.layer.number(),
            truncate(&sec.id, 28),
            sec.tokens,
            status_word(&sec.status),
            if sec.sticky { "  [sticky]" } else { "" },
            if sec.stable { "  [stable]" } else { "" }
        );
    }
    for c in &r.conflicts {
        let _ = writeln!(
            s,
            "conflict on {}: layer {} `{}` wins over layer {} `{}`",
            c.on,
            c.winner.0.number(),
            c.winner.1,
            c.loser.0.number(),
            c.loser.1
        );
    }
    if !r.tools.effective.is_empty() || !r.tools.refused.is_empty() {
        let _ = writeln!(
            s,
            "tools offered: {}",
            r.tools
                .effective
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for (t, why) in &r.tools.refused {
            let _ = writeln!(s, "tool refused: {t}: {why}");
        }
    }
    for o in &r.omissions {
        let _ = writeln!(
            s,
            "omitted contributor {} (layer {}): {}",
            o.id,
            o.layer.number(),
            o.reason
        );
    }
    s
}

fn tier_number(r: &Report) -> u8 {
    r.tier.number()
}

fn percent(a: u64, b: u64) -> u64 {
    (a * 100).checked_div(b).unwrap_or(0)
}

fn short(digest: &str) -> String {
    digest.chars().take(7 + 16).collect()
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n - 1).collect::<String>() + "~"
    }
}

/// Escape text for XHTML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Characters XML 1.0 forbids are shown as their code point.
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' && c != '\r' => {
                let _ = write!(out, "[U+{:04X}]", c as u32);
            }
            '\u{FFFE}' | '\u{FFFF}' => out.push_str("[nonchar]"),
            c => out.push(c),
        }
    }
    out
}

fn layer_colour(l: Layer) -> &'static str {
    match l.number() {
        1 => "#1f4e79",
        2 => "#2e75b6",
        3 => "#548235",
        4 => "#bf8f00",
        5 => "#c55a11",
        _ => "#7030a0",
    }
}

/// The self-contained HTML page.
pub fn html(e: &Explained) -> String {
    let r = &e.report;
    let budget = r.prompt_budget.max(1);
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    let _ = writeln!(h, "<title>strata explain: {}</title>", esc(&r.agent_id));
    h.push_str("<style>\nbody{font-family:system-ui,sans-serif;margin:2em;color:#222}\ntable{border-collapse:collapse;margin:1em 0}\ntd,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;font-size:.9em}\n.bands{display:flex;height:2.5em;border:1px solid #444;width:100%}\n.band{color:#fff;font-size:.75em;overflow:hidden;white-space:nowrap;padding:.2em}\n.free{background:repeating-linear-gradient(45deg,#eee,#eee 6px,#fff 6px,#fff 12px);color:#444}\n.dropped{color:#a00}.cut{color:#b60}.kept{color:#060}\npre{background:#f7f7f7;padding:1em;overflow-x:auto;white-space:pre-wrap;font-size:.8em}\n.fence{border-left:4px solid #c00;padding-left:.5em}\n.signed{border-left:4px solid #1f4e79;padding-left:.5em}\n.mark{background:#ffeb3b}\n</style>\n</head>\n<body>\n");
    let _ = writeln!(
        h,
        "<h1>Assembled context of <code>{}</code></h1>",
        esc(&r.agent_id)
    );
    let _ = writeln!(
        h,
        "<p>Identity digest <code>{}</code>; tokenizer <code>{}</code>; tier {}. Budget {} tokens: {} for the prompt and {} reserved for the response. <strong>{} used ({}%)</strong>.</p>",
        esc(&r.identity_digest), esc(&r.tokenizer), tier_number(r), r.total_tokens, r.prompt_budget, r.response_reserve, r.used_tokens, percent(r.used_tokens, r.prompt_budget)
    );
    if let Some(c) = &e.conversation {
        let _ = writeln!(
            h,
            "<h2>The {} request, channel by channel</h2>\n<p>In cache order: what never changes first. Only the signed text is in the system channel; tool results and fenced data sit below the user's authority.</p>\n<table id=\"channels\">\n<tr><th>channel</th><th>role</th><th>why here</th><th>holds</th><th>tokens</th></tr>",
            esc(c.provider.name())
        );
        for row in channel_rows(c) {
            h.push_str("<tr>");
            for cell in &row {
                let _ = write!(h, "<td>{}</td>", esc(cell));
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
    }
    h.push_str("<h2>Layers against the budget</h2>\n<div class=\"bands\" id=\"bands\">\n");
    let mut bands: Vec<(String, u64, &str)> = vec![(
        "1-2 identity".into(),
        r.identity_tokens,
        layer_colour(Layer::Core),
    )];
    for l in &r.layers {
        bands.push((
            format!("{} {}", l.layer.number(), l.layer.name()),
            l.tokens,
            layer_colour(l.layer),
        ));
    }
    for (name, tokens, colour) in &bands {
        if *tokens == 0 {
            continue;
        }
        let pct = (*tokens as f64) * 100.0 / budget as f64;
        let _ = writeln!(h, "<div class=\"band\" style=\"width:{pct:.2}%;background:{colour}\" title=\"{} : {tokens} tokens\">{} ({tokens})</div>", esc(name), esc(name));
    }
    let free = r.prompt_budget.saturating_sub(r.used_tokens);
    let _ = writeln!(h, "<div class=\"band free\" style=\"width:{:.2}%\" title=\"unused: {free} tokens\">free ({free})</div>", free as f64 * 100.0 / budget as f64);
    h.push_str("</div>\n<table id=\"layers\">\n<tr><th>layer</th><th>tokens</th><th>soft budget</th><th>kept</th><th>cut</th><th>dropped</th></tr>\n");
    let _ = writeln!(h, "<tr><td>1-2 identity (signed, never trimmed)</td><td>{}</td><td>-</td><td>all</td><td>0</td><td>0</td></tr>", r.identity_tokens);
    for l in &r.layers {
        let _ = writeln!(
            h,
            "<tr><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            l.layer.number(),
            esc(l.layer.name()),
            l.tokens,
            l.budget.map_or("-".into(), |b| b.to_string()),
            l.kept,
            l.cut,
            l.dropped
        );
    }
    h.push_str("</table>\n<h2>Sections</h2>\n<table id=\"sections\">\n<tr><th>layer</th><th>id</th><th>tokens</th><th>outcome</th><th>flags</th><th>source</th></tr>\n");
    for s in &r.sections {
        let class = match s.status {
            SectionStatus::Kept => "kept",
            SectionStatus::Cut { .. } => "cut",
            _ => "dropped",
        };
        let flags = [(s.sticky, "sticky"), (s.stable, "stable")]
            .iter()
            .filter(|(b, _)| *b)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            h,
            "<tr class=\"{class}\"><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s.layer.number(), esc(&s.id), s.tokens, esc(&status_word(&s.status)), flags, esc(&format!("{}:{}", s.provenance.source.label(), s.provenance.name))
        );
    }
    h.push_str("</table>\n");
    if !r.conflicts.is_empty() {
        h.push_str("<h2>Conflicts resolved for the higher layer</h2>\n<ul>\n");
        for c in &r.conflicts {
            let _ = writeln!(h, "<li>on <code>{}</code>: layer {} <code>{}</code> wins over layer {} <code>{}</code></li>", esc(&c.on), c.winner.0.number(), esc(&c.winner.1), c.loser.0.number(), esc(&c.loser.1));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("<h2>Tools</h2>\n<ul>\n");
    let _ = writeln!(h, "<li>offered: {}</li>", esc(&e.tools.join(", ")));
    for (t, why) in &r.tools.refused {
        let _ = writeln!(h, "<li>refused <code>{}</code>: {}</li>", esc(t), esc(why));
    }
    h.push_str("</ul>\n<h2>Stable prefix and cache breakpoints</h2>\n");
    let _ = writeln!(h, "<p>The stable prefix ends at byte {} (token {}); it is byte-identical across requests that change only dynamic content.</p>\n<ul>", r.stable_prefix.byte, r.stable_prefix.token);
    for b in &r.breakpoints {
        let _ = writeln!(
            h,
            "<li>after layer {}: byte {}, token {}</li>",
            b.after_layer.number(),
            b.byte,
            b.token
        );
    }
    h.push_str("</ul>\n<h2>The assembled text, with its fences</h2>\n<pre id=\"text\">");
    // Signed sections and untrusted fences are outlined; the text itself is shown exactly.
    for chunk in split_elements(&e.text) {
        let class =
            if chunk.starts_with("<strata:section") && chunk.contains("authority=\"signed\"") {
                "signed"
            } else if chunk.starts_with("<strata:section") {
                "fence"
            } else {
                "mark"
            };
        let _ = write!(h, "<span class=\"{class}\">{}</span>", esc(chunk));
    }
    h.push_str("</pre>\n</body>\n</html>\n");
    h
}

/// Split the text into its elements (each ends with a blank line).
fn split_elements(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while let Some(i) = text[start..].find(">\n\n") {
        let end = start + i + 3;
        out.push(&text[start..end]);
        start = end;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}
