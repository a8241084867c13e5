//! `strata explain`: the assembly report as a picture.
//!
//! Two renderings of the same report: a self-contained HTML page (no scripts, no network, no
//! external resources; well-formed XHTML so any XML parser can check it) showing the six layers
//! as bands against the budget with what was left out on the same scale, a legend, every
//! section with its outcome and the reason in words, previews of what was cut or dropped, the
//! idle-budget warning, the fences, the stable prefix and the cache breakpoints; and a compact
//! terminal table with bars, wrapped to the terminal's width (`COLUMNS`, 80 when unset). The
//! page names every band of its bars in a legend under them (a narrow band has no room for its
//! label), shows as text what a tooltip would hold, and stacks its tables into cards on a
//! narrow screen. It is rendered from a minijinja template with HTML auto-escaping, so no text
//! from the report can reach the page unescaped (ADR-0026).

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};
use strata_assembler::assemble::{Block, Conversation, Layer, MessageKind, MessageRole};
use strata_assembler::assemble::{Report, SectionReport, SectionStatus};

use crate::error::CliError;
use crate::output::Output;
use crate::report_view::{self, num, SectionInput};

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
    /// The runtime sections as handed to the assembler: sizes before fitting, previews, roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<SectionInput>,
}

/// Arguments of `strata explain`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json \\
      --format json > out.json
  strata explain out.json
  strata explain out.json --html out.html
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json \\
      --format json | strata explain -

The first form prints a table with bars; --html writes a page that opens offline in any browser.
Reading the report: sections are kept, cut (shortened to fit) or dropped (left out to fit a
budget); \"not in this mode\", \"overridden\", \"reserved id\", \"empty turn\" and \"unpaired tool
turn\" are left out by design. Lower layers yield to higher ones: layer 6 is trimmed first. A
WARNING line means content was dropped while part of the prompt budget stayed unused and a
dropped section may have fit in it, fence included. The table is as wide as COLUMNS (80 when
unset).")]
pub struct ExplainArgs {
    /// The JSON written by `strata assemble --format json` (`-` reads standard input).
    pub file: PathBuf,
    /// Write a self-contained HTML page here instead of the terminal table.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Width of the terminal bars, in characters; narrower when the terminal (`COLUMNS`, 80
    /// when unset) has no room for them. Lines longer than the terminal are wrapped.
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
            super::write_atomically(path, html(&explained)?.as_bytes())?;
            out.status(&format!(
                "wrote {} (self-contained; open it in any browser)",
                path.display()
            ));
            Ok(())
        }
        None => {
            let cols = columns();
            let mut t = terminal_with(
                &explained.report,
                &explained.inputs,
                bar_width(args.width, cols),
            );
            if let Some(c) = &explained.conversation {
                t.push_str(&channels(c));
            }
            out.result(&wrap(&t, cols))
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
                Block::ToolResult { id, content, .. } => {
                    format!("tool result [{id}] ({} bytes, fenced)", content.len())
                }
                Block::Reasoning { block } => {
                    format!("{} (model's reasoning, sent unchanged)", block.type_name())
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

/// The width of the terminal: `COLUMNS` when it holds a number of at least 40, otherwise 80.
pub fn columns() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c >= 40)
        .unwrap_or(80)
}

/// Characters before a layer's bar in the table: its name, its tokens and two spaces.
const BAR_AT: usize = 24 + 1 + 7 + 2;

/// The width of the bars: as asked, but no wider than a terminal `cols` wide leaves after a
/// layer's name and tokens, and at least 10.
pub fn bar_width(asked: usize, cols: usize) -> usize {
    asked.min(cols.saturating_sub(BAR_AT + 2)).max(10)
}

/// Wrap every line of `text` that is wider than `cols` characters at spaces, continuing it
/// indented four columns deeper than it starts; a word wider than the room left is broken.
/// Alignment within the first part of a line is kept.
pub fn wrap(text: &str, cols: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if body.chars().count() <= cols {
            out.push_str(line);
            continue;
        }
        let indent = body.len() - body.trim_start_matches(' ').len();
        let more = " ".repeat((indent + 4).min(cols / 2));
        let mut rest: &str = body;
        let mut first = true;
        while !rest.is_empty() {
            let room = if first { cols } else { cols - more.len() };
            if !first {
                out.push_str(&more);
            }
            if rest.chars().count() <= room {
                out.push_str(rest);
                break;
            }
            // The byte offset of the first character past the room; break at the last space
            // within the room (or just past it), unless only indentation stands before it.
            let limit = rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i);
            let space = if rest[limit..].starts_with(' ') {
                Some(limit)
            } else {
                rest[..limit].rfind(' ')
            };
            let cut = match space {
                Some(at) if !rest[..at].trim().is_empty() => at,
                _ => limit,
            };
            out.push_str(rest[..cut].trim_end());
            out.push('\n');
            rest = rest[cut..].trim_start();
            first = false;
        }
        out.push_str(end);
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

/// The terminal rendering of a report alone (no previews or sizes of what was dropped).
pub fn terminal(r: &Report, width: usize) -> String {
    terminal_with(r, &[], width)
}

/// The terminal rendering: budget, the idle-budget warning, one bar per layer, then one line
/// per section with the reason in words.
pub fn terminal_with(r: &Report, inputs: &[SectionInput], width: usize) -> String {
    let mut s = String::new();
    write_budget_lines(&mut s, r, inputs);
    write_layer_bars(&mut s, r, inputs, width);
    write_stable_prefix(&mut s, r);
    write_section_lines(&mut s, r, inputs);
    write_conflicts_tools_omissions(&mut s, r);
    s
}

/// The head of the table: agent and tier, the budget and its use, and the idle-budget warning.
fn write_budget_lines(s: &mut String, r: &Report, inputs: &[SectionInput]) {
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
        num(r.total_tokens),
        num(r.prompt_budget),
        num(r.response_reserve),
        num(r.used_tokens),
        percent(r.used_tokens, r.prompt_budget)
    );
    if let Some(idle) = report_view::idle_budget(r, inputs) {
        let _ = writeln!(s, "WARNING: idle budget: {}", idle.text(r));
    }
}

/// One bar per layer against the prompt budget (the signed identity first), each followed by
/// what the layer left out.
fn write_layer_bars(s: &mut String, r: &Report, inputs: &[SectionInput], width: usize) {
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
        let left = report_view::left_out_tokens(r, inputs, l.layer);
        // What the layer left out, on a line of its own under its bar.
        let mut extra = String::new();
        if l.cut + l.dropped > 0 {
            let _ = write!(
                extra,
                "\n    {} kept, {} cut, {} dropped",
                l.kept, l.cut, l.dropped
            );
            if left > 0 {
                let _ = write!(
                    extra,
                    " ({}{} left out)",
                    if l.dropped > 0 { "about " } else { "" },
                    report_view::tokens(left)
                );
            }
        }
        if report_view::only_omission_marker(l) {
            let _ = write!(
                extra,
                "; its {} are the omission marker",
                report_view::tokens(l.tokens)
            );
        }
        let _ = writeln!(
            s,
            "{:<24} {:>7}  {}{extra}",
            name,
            l.tokens,
            bar(l.tokens, r.prompt_budget, width)
        );
    }
}

/// The stable prefix and the cache breakpoints.
fn write_stable_prefix(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "stable prefix: {} ({} bytes); cache breakpoints: {}",
        report_view::tokens(r.stable_prefix.token),
        num(r.stable_prefix.byte as u64),
        report_view::cache_points(r)
            .iter()
            .map(|p| format!(
                "after {} at token {}{}",
                p.label,
                num(p.token),
                if p.past_stable {
                    " (past the stable prefix)"
                } else {
                    ""
                }
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

/// One line per section with its outcome, and the reason in words for one not kept whole.
fn write_section_lines(s: &mut String, r: &Report, inputs: &[SectionInput]) {
    let _ = writeln!(s, "sections:");
    for sec in &r.sections {
        let input = report_view::input_of(inputs, sec);
        let turn = match input.and_then(|i| i.role.as_deref().zip(i.seq)) {
            Some((role, seq)) => format!(" [{role} #{seq}]"),
            None => String::new(),
        };
        let (_, word) = report_view::outcome(sec);
        let _ = writeln!(
            s,
            "  L{} {:<28} {:>6}  {word}{turn}{}{}",
            sec.layer.number(),
            truncate(&sec.id, 28),
            sec.tokens,
            if sec.sticky { "  [sticky]" } else { "" },
            if sec.stable { "  [stable]" } else { "" }
        );
        if !matches!(sec.status, SectionStatus::Kept) {
            let _ = writeln!(s, "      why: {}", report_view::reason(sec, r, inputs));
        }
    }
}

/// The tail of the table: conflicts, tools offered and refused, and omitted contributors.
fn write_conflicts_tools_omissions(s: &mut String, r: &Report) {
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
        for t in &r.tools.refused {
            let _ = writeln!(s, "tool refused: {}: {}", t.name, t.reason);
        }
        for removed in &r.tools.schema_text_removed {
            let _ = writeln!(
                s,
                "tool schema text removed: {}: {}",
                removed.tool,
                removed.paths.join(", ")
            );
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

/// The page template (XHTML). Its name ends in `.html`, so minijinja escapes every value
/// inserted into it.
const PAGE: &str = include_str!("explain.html");

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

/// Make text safe for XML 1.0 before it is escaped: characters XML forbids are shown as their
/// code point instead (escaping cannot express them).
fn xml_visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' && c != '\r' => {
                let _ = write!(out, "[U+{:04X}]", c as u32);
            }
            '\u{FFFE}' | '\u{FFFF}' => out.push_str("[nonchar]"),
            c => out.push(c),
        }
    }
    out
}

/// The minijinja environment of the page: HTML auto-escaping for `.html` templates, strict
/// undefined values, and a formatter that makes text XML-safe before escaping it.
fn environment() -> Result<minijinja::Environment<'static>, CliError> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.set_formatter(|out, state, value| {
        if let Some(s) = value.as_str() {
            let safe = minijinja::Value::from(xml_visible(s));
            minijinja::escape_formatter(out, state, &safe)
        } else {
            minijinja::escape_formatter(out, state, value)
        }
    });
    env.add_template("explain.html", PAGE)
        .map_err(|e| CliError::Other(format!("the explain page template is invalid: {e}")))?;
    Ok(env)
}

/// One band of a bar: a share of the scale, with a label, a tooltip and an entry in the bars'
/// legend.
#[derive(Serialize)]
struct Band {
    /// Its name and size (`3 shared: 50,145`), in the band when it is wide enough.
    label: String,
    /// The same in a sentence, in the legend under the bars and as the tooltip.
    title: String,
    /// Its share of its bar, in percent.
    pct: String,
    /// Whether the label fits in the band on a wide screen; a narrow band is named in the
    /// legend only.
    wide: bool,
    class: &'static str,
    colour: &'static str,
}

/// Share of the page's width, in percent, that one character of a band's label takes on a
/// wide screen (1,400 pixels, labels at 12 pixels), with room to spare; bands narrower than
/// their label are named in the legend only.
const LABEL_PCT_PER_CHAR: f64 = 0.75;

impl Band {
    fn new(
        label: String,
        title: String,
        share: f64,
        of_page: f64,
        class: &'static str,
        colour: &'static str,
    ) -> Band {
        let wide =
            share * of_page / 100.0 >= (label.chars().count() + 2) as f64 * LABEL_PCT_PER_CHAR;
        Band {
            label,
            title,
            pct: format!("{share:.2}"),
            wide,
            class,
            colour,
        }
    }
}

/// The id attribute of a section element (`<strata:section layer="6" id="m1" ...>`).
fn element_id(chunk: &str) -> Option<&str> {
    let first = chunk.lines().next()?;
    let start = first.find(" id=\"")? + 5;
    let len = first[start..].find('"')?;
    Some(&first[start..start + len])
}

/// The scale both bars of the page are drawn to: the prompt budget, or what was asked for if
/// that is more.
struct Scale {
    /// The prompt budget, at least 1.
    budget: u64,
    /// The whole scale, in tokens.
    scale: f64,
    /// The prompt budget's share of the scale, in percent: the width of the upper bar.
    budget_share: f64,
}

impl Scale {
    /// The scale of a report: its prompt budget, or the tokens used plus those left out if
    /// that is more.
    fn of(r: &Report, inputs: &[SectionInput]) -> Scale {
        let budget = r.prompt_budget.max(1);
        let left_total: u64 = r
            .layers
            .iter()
            .map(|l| report_view::left_out_tokens(r, inputs, l.layer))
            .sum();
        let scale = budget.max(r.used_tokens + left_total) as f64;
        Scale {
            budget,
            scale,
            budget_share: budget as f64 * 100.0 / scale,
        }
    }

    /// A band of the upper bar: `t` tokens as a share of the prompt budget, in percent.
    fn share(&self, t: u64) -> f64 {
        t as f64 * 100.0 / self.budget as f64
    }

    /// A band of the lower bar: `t` tokens as a share of the whole scale, in percent.
    fn lost_share(&self, t: u64) -> f64 {
        t as f64 * 100.0 / self.scale
    }
}

/// The self-contained HTML page.
pub fn html(e: &Explained) -> Result<String, CliError> {
    let r = &e.report;
    let inputs = &e.inputs;
    let scale = Scale::of(r, inputs);
    let (chunks, cut_count) = text_chunks(&e.text, r);
    let idle = report_view::idle_budget(r, inputs).map(|i| serde_json::json!({"text": i.text(r)}));
    let channels = e
        .conversation
        .as_ref()
        .map(|c| serde_json::json!({"provider": c.provider.name(), "rows": channel_rows(c)}));
    let ctx = serde_json::json!({
        "r": r,
        "n": {
            "total": num(r.total_tokens),
            "prompt": num(r.prompt_budget),
            "reserve": num(r.response_reserve),
            "used": num(r.used_tokens),
            "identity": num(r.identity_tokens),
            "chars": num(r.chars),
            "prefix_token": num(r.stable_prefix.token),
            "prefix_byte": num(r.stable_prefix.byte as u64),
        },
        "cache": r.request.as_ref().map(|q| serde_json::json!({
            "provider": q.provider,
            "anthropic": q.provider == "anthropic",
            "stable": num(q.stable_prefix_tokens),
            "min": num(q.min_cacheable_tokens),
            "expected": num(q.expected_cached_tokens),
        })),
        "tier": tier_number(r),
        "used_pct": percent(r.used_tokens, r.prompt_budget),
        "idle": idle,
        "channels": channels,
        "bands": budget_bands(r, &scale),
        "budget_pct": format!("{:.2}", scale.budget_share),
        "lost_bands": lost_bands(r, inputs, &scale),
        "layers": layer_rows(r, inputs),
        "sections": section_rows(r, inputs),
        "conflicts": r.conflicts.iter().map(|c| serde_json::json!({
            "on": c.on, "winner_layer": c.winner.0.number(), "winner": c.winner.1,
            "loser_layer": c.loser.0.number(), "loser": c.loser.1,
        })).collect::<Vec<_>>(),
        "tools_offered": e.tools.join(", "),
        "tools_refused": r.tools.refused,
        "omissions": r.omissions.iter().map(|o| serde_json::json!({
            "id": o.id, "layer": o.layer.number(), "reason": o.reason,
        })).collect::<Vec<_>>(),
        "breakpoints": report_view::cache_points(r),
        "chunks": chunks,
        "cut_count": cut_count,
    });
    let env = environment()?;
    let tmpl = env
        .get_template("explain.html")
        .map_err(|e| CliError::Other(format!("the explain page template is missing: {e}")))?;
    tmpl.render(minijinja::Value::from_serialize(&ctx))
        .map_err(|e| CliError::Other(format!("cannot render the explain page: {e}")))
}

/// The bands of the upper bar: the signed identity, each layer that holds tokens, and what is
/// free of the prompt budget.
fn budget_bands(r: &Report, scale: &Scale) -> Vec<Band> {
    let mut bands = vec![Band::new(
        format!("1-2 identity: {}", num(r.identity_tokens)),
        format!(
            "layers 1-2, signed: {}",
            report_view::tokens(r.identity_tokens)
        ),
        scale.share(r.identity_tokens),
        scale.budget_share,
        "",
        layer_colour(Layer::Core),
    )];
    for l in &r.layers {
        let name = format!("{} {}", l.layer.number(), l.layer.name());
        let marker = report_view::only_omission_marker(l);
        if l.tokens > 0 {
            bands.push(Band::new(
                format!("{name}: {}", num(l.tokens)),
                format!(
                    "{name}: {}{}",
                    report_view::tokens(l.tokens),
                    if marker { ", its omission marker" } else { "" }
                ),
                scale.share(l.tokens),
                scale.budget_share,
                "",
                layer_colour(l.layer),
            ));
        }
    }
    let free = r.prompt_budget.saturating_sub(r.used_tokens);
    bands.push(Band::new(
        format!("free: {}", num(free)),
        format!("free: {} unused", report_view::tokens(free)),
        scale.share(free),
        scale.budget_share,
        "free",
        "",
    ));
    bands
}

/// The bands of the lower bar: per layer, the tokens cut off shortened sections, then those of
/// the dropped sections.
fn lost_bands(r: &Report, inputs: &[SectionInput], scale: &Scale) -> Vec<Band> {
    let mut lost_bands = Vec::new();
    for l in &r.layers {
        let name = format!("{} {}", l.layer.number(), l.layer.name());
        let lost = report_view::dropped_tokens(r, inputs, l.layer);
        let cut = report_view::cut_tokens(r, inputs, l.layer);
        if cut > 0 {
            lost_bands.push(Band::new(
                format!("{name}: {} cut off", num(cut)),
                format!(
                    "{name}: {} cut off shortened sections",
                    report_view::tokens(cut)
                ),
                scale.lost_share(cut),
                100.0,
                "lostcut",
                "",
            ));
        }
        if lost > 0 {
            lost_bands.push(Band::new(
                format!("{name}: {} dropped", num(lost)),
                format!(
                    "{name}: {}, about {} of text, dropped",
                    report_view::sections(l.dropped),
                    report_view::tokens(lost)
                ),
                scale.lost_share(lost),
                100.0,
                "lost",
                "",
            ));
        }
    }
    lost_bands
}

/// One row of the layer table per layer: tokens, budget, sections kept, cut and dropped, and
/// the tokens left out.
fn layer_rows(r: &Report, inputs: &[SectionInput]) -> Vec<serde_json::Value> {
    let mut layers = Vec::new();
    for l in &r.layers {
        let name = format!("{} {}", l.layer.number(), l.layer.name());
        let marker = report_view::only_omission_marker(l);
        let lost = report_view::dropped_tokens(r, inputs, l.layer);
        let cut = report_view::cut_tokens(r, inputs, l.layer);
        let left = lost + cut;
        layers.push(serde_json::json!({
            "name": name,
            "tokens": num(l.tokens),
            "marker": marker,
            "budget": l.budget.map_or("-".to_owned(), num),
            "kept": l.kept,
            "cut": l.cut,
            "dropped": l.dropped,
            "left_out": if left > 0 {
                format!("{}{}", if l.dropped > 0 { "about " } else { "" }, num(left))
            } else if l.dropped > 0 {
                "?".to_owned()
            } else {
                "0".to_owned()
            },
        }));
    }
    layers
}

/// One row of the section table per section: its outcome, the reason in words, its source,
/// and a preview of what a section not kept whole held.
fn section_rows(r: &Report, inputs: &[SectionInput]) -> Vec<serde_json::Value> {
    let mut sections = Vec::new();
    for s in &r.sections {
        let input = report_view::input_of(inputs, s);
        let (kind, word) = report_view::outcome(s);
        let flags = [(s.sticky, "sticky"), (s.stable, "stable")]
            .iter()
            .filter(|(b, _)| *b)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join(" ");
        let source = match (s.provenance.source.label(), &*s.provenance.name) {
            (kind, name) if kind == name => kind,
            (kind, name) => format!("{kind}: {name}"),
        };
        let turn = match input.and_then(|i| i.role.clone().zip(i.seq)) {
            Some((role, seq)) => format!("{role} #{seq}"),
            None => String::new(),
        };
        let (preview, preview_title) = match (kind, input) {
            (report_view::Kind::Kept, _) | (_, None) => (String::new(), String::new()),
            (_, Some(i)) => preview(s, i),
        };
        sections.push(serde_json::json!({
            "layer": s.layer.number(),
            "id": s.id,
            "turn": turn,
            "tokens": num(s.tokens),
            "class": kind.class(),
            "outcome": word,
            "why": report_view::reason(s, r, inputs),
            "flags": flags,
            "source": source,
            "preview": preview,
            "preview_title": preview_title,
        }));
    }
    sections
}

/// The preview of a section that was not kept whole, and its title: how many characters and
/// tokens it held, and whether only its beginning is shown.
fn preview(s: &SectionReport, i: &SectionInput) -> (String, String) {
    let more = i.chars > i.preview.chars().count() as u64;
    // A cut section's size is the one its outcome gives: its tokens whole, fence
    // included, when the report counted them.
    let size = match s.status {
        SectionStatus::Cut {
            full_tokens: Some(full),
            ..
        } => format!("{} whole", report_view::tokens(full)),
        _ => format!("about {} of text", report_view::tokens(i.tokens)),
    };
    (
        i.preview.clone() + if more { " [...]" } else { "" },
        format!(
            "what it held: {} characters, {size}{}",
            num(i.chars),
            if more { " (beginning shown)" } else { "" }
        ),
    )
}

/// The text, element by element, with a visible mark where a cut section was shortened; and
/// how many sections were cut.
fn text_chunks(text: &str, r: &Report) -> (Vec<serde_json::Value>, usize) {
    let mut chunks = Vec::new();
    let mut cut_count = 0;
    for chunk in split_elements(text) {
        let class = if chunk.starts_with("<strata:section")
            && chunk
                .lines()
                .next()
                .unwrap_or("")
                .contains("authority=\"signed\"")
        {
            "signed"
        } else if chunk.starts_with("<strata:section") {
            "fence"
        } else {
            "mark"
        };
        let first = chunk.lines().next().unwrap_or("");
        let close = chunk.rfind("</strata:section>");
        match close {
            Some(at) if first.contains(" cut=\"true\"") => {
                cut_count += 1;
                let label = cut_label(r, element_id(chunk).unwrap_or(""));
                chunks
                    .push(serde_json::json!({"class": class, "text": &chunk[..at], "cut": label}));
                chunks.push(serde_json::json!({"class": class, "text": &chunk[at..], "cut": ""}));
            }
            _ => chunks.push(serde_json::json!({"class": class, "text": chunk, "cut": ""})),
        }
    }
    (chunks, cut_count)
}

/// The mark shown where the cut section `id` was shortened: how much of it was kept.
fn cut_label(r: &Report, id: &str) -> String {
    r.sections
        .iter()
        .find(|s| s.id == id)
        .and_then(|s| match s.status {
            SectionStatus::Cut {
                full_tokens: Some(full),
                ..
            } => Some(format!(
                " [cut here: {} of {} tokens kept] ",
                num(s.tokens),
                num(full)
            )),
            SectionStatus::Cut {
                head_bytes,
                tail_bytes,
                ..
            } => Some(format!(
                " [cut here: {} tokens kept, {} of {} bytes] ",
                num(s.tokens),
                num(head_bytes + tail_bytes),
                num(s.bytes)
            )),
            _ => None,
        })
        .unwrap_or_else(|| " [cut here] ".to_owned())
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
