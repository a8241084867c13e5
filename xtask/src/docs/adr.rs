//! Reads decision records (`adr/NNNN-kebab-title.md`) written to the one template of
//! ADR-0001: a `# ADR-NNNN: Title` line, `Status:`, `Date:` and optional `Supersedes:` lines,
//! then the sections `## Context`, `## Decision`, `## Consequences` and
//! `## Alternatives considered`.

use std::collections::BTreeSet;
use std::fmt;

/// The lifecycle state of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Written, not yet agreed.
    Proposed,
    /// In force: code must implement it and tests must verify it.
    Accepted,
    /// Replaced by a later decision.
    SupersededBy(u32),
    /// No longer applies, and nothing replaced it.
    Deprecated,
}

impl Status {
    /// Whether code may still cite the decision.
    pub fn is_live(self) -> bool {
        matches!(self, Status::Proposed | Status::Accepted)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Proposed => f.write_str("Proposed"),
            Status::Accepted => f.write_str("Accepted"),
            Status::SupersededBy(id) => write!(f, "Superseded by {}", adr_id(*id)),
            Status::Deprecated => f.write_str("Deprecated"),
        }
    }
}

/// Formats a record number as its id: four digits after `ADR-`.
pub fn adr_id(n: u32) -> String {
    format!("ADR-{n:04}")
}

/// One parsed decision record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adr {
    /// The number in the id and the file name.
    pub id: u32,
    /// The title from the first line.
    pub title: String,
    /// The `Status:` line.
    pub status: Status,
    /// The `Date:` line, `YYYY-MM-DD`.
    pub date: String,
    /// Decisions this one replaces (`Supersedes:`).
    pub supersedes: Vec<u32>,
    /// File name inside `adr/`.
    pub file: String,
    /// The first paragraph of `## Decision`, as written.
    pub summary: String,
    /// Invariants (1 to 7) the record names anywhere in its text.
    pub invariants: BTreeSet<u8>,
}

/// The sections every record has, in the template's order.
pub const REQUIRED_SECTIONS: [&str; 4] = [
    "Context",
    "Decision",
    "Consequences",
    "Alternatives considered",
];

/// Whether a file name in `adr/` is meant to be a record (`NNNN-...md`).
pub fn is_record_file(name: &str) -> bool {
    let b = name.as_bytes();
    name.ends_with(".md") && b.len() > 5 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

/// Parses one record. Errors are complete sentences saying what to fix; a record with any
/// error is not used.
pub fn parse(file: &str, text: &str) -> Result<Adr, Vec<String>> {
    let mut errors = Vec::new();
    let file_id: Option<u32> = file.get(..4).and_then(|d| d.parse().ok());
    let slug = file
        .get(5..file.len().saturating_sub(3))
        .unwrap_or_default();
    if !is_record_file(file)
        || slug.is_empty()
        || !slug
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        errors.push(format!(
            "adr/{file}: the file name must be `NNNN-kebab-title.md` (lower case, digits and hyphens)."
        ));
    }
    let mut lines = text.lines().enumerate().peekable();
    let (id, title) = match lines.next().map(|(_, l)| parse_title(l)) {
        Some(Some((id, title))) => (Some(id), title),
        _ => {
            errors.push(format!(
                "adr/{file}:1: the first line must be `# ADR-NNNN: Title`."
            ));
            (None, String::new())
        }
    };
    if let (Some(id), Some(fid)) = (id, file_id) {
        if id != fid {
            errors.push(format!(
                "adr/{file}:1: the title says {} but the file name says {}; make them agree.",
                adr_id(id),
                adr_id(fid)
            ));
        }
    }

    // Header lines up to the first section.
    let mut status = None;
    let mut date = None;
    let mut supersedes = Vec::new();
    while let Some((n, raw)) = lines.peek().copied() {
        if raw.starts_with("## ") {
            break;
        }
        lines.next();
        let line = header_line(raw);
        if line.is_empty() {
            continue;
        }
        let at = format!("adr/{file}:{}", n + 1);
        if let Some(v) = line.strip_prefix("Status:") {
            match parse_status(v.trim()) {
                Some(s) => status = Some(s),
                None => errors.push(format!(
                    "{at}: unknown status `{}`; use Proposed, Accepted, Deprecated or `Superseded by ADR-NNNN`.",
                    v.trim()
                )),
            }
        } else if let Some(v) = line.strip_prefix("Date:") {
            if valid_date(v.trim()) {
                date = Some(v.trim().to_string());
            } else {
                errors.push(format!(
                    "{at}: the date `{}` is not `YYYY-MM-DD`.",
                    v.trim()
                ));
            }
        } else if let Some(v) = line.strip_prefix("Supersedes:") {
            for part in v.split(',') {
                match parse_id(part.trim()) {
                    Some(s) => supersedes.push(s),
                    None => errors.push(format!(
                        "{at}: `Supersedes:` takes ADR ids separated by commas, not `{}`.",
                        part.trim()
                    )),
                }
            }
        }
    }
    if status.is_none() && !errors.iter().any(|e| e.contains("unknown status")) {
        errors.push(format!(
            "adr/{file}: a `Status: Proposed|Accepted|Deprecated|Superseded by ADR-NNNN` line is missing below the title."
        ));
    }
    if date.is_none() && !errors.iter().any(|e| e.contains("is not `YYYY-MM-DD`")) {
        errors.push(format!(
            "adr/{file}: a `Date: YYYY-MM-DD` line is missing below the title."
        ));
    }

    // Sections.
    let mut sections: Vec<(String, Vec<&str>)> = Vec::new();
    for (_, line) in lines {
        if let Some(h) = line.strip_prefix("## ") {
            sections.push((h.trim().to_string(), Vec::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push(line);
        }
    }
    for name in REQUIRED_SECTIONS {
        if !sections.iter().any(|(h, _)| h.eq_ignore_ascii_case(name)) {
            errors.push(format!("adr/{file}: the section `## {name}` is missing."));
        }
    }
    let summary = sections
        .iter()
        .find(|(h, _)| h.eq_ignore_ascii_case("Decision"))
        .map(|(_, body)| first_paragraph(body))
        .unwrap_or_default();
    if summary.is_empty() && sections.iter().any(|(h, _)| h == "Decision") {
        errors.push(format!(
            "adr/{file}: the `## Decision` section is empty; its first paragraph is the summary."
        ));
    }

    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Adr {
        id: id.unwrap_or_default(),
        title,
        status: status.unwrap_or(Status::Proposed),
        date: date.unwrap_or_default(),
        supersedes,
        file: file.to_string(),
        summary,
        invariants: named_invariants(text),
    })
}

/// `# ADR-NNNN: Title` -> `(NNNN, "Title")`.
fn parse_title(line: &str) -> Option<(u32, String)> {
    let rest = line.strip_prefix("# ")?.trim();
    let (id, title) = rest.split_once(':')?;
    let title = title.trim();
    if title.is_empty() {
        return None;
    }
    Some((parse_id(id.trim())?, title.to_string()))
}

/// `ADR-NNNN` with four digits -> the number; anything else -> `None`.
pub fn parse_id(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("ADR-")?;
    if digits.len() == 4 && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()
    } else {
        None
    }
}

/// Strips what Markdown needs around a header line: a list marker, bold key, trailing
/// hard-break spaces or backslash.
fn header_line(raw: &str) -> String {
    let mut line = raw.trim();
    line = line.strip_prefix("- ").unwrap_or(line);
    line = line.trim_end_matches('\\').trim_end();
    let line = line.replacen("**", "", 2);
    // `**Status:** Accepted` becomes `Status: Accepted`.
    line.trim().to_string()
}

fn parse_status(v: &str) -> Option<Status> {
    match v {
        "Proposed" => Some(Status::Proposed),
        "Accepted" => Some(Status::Accepted),
        "Deprecated" => Some(Status::Deprecated),
        _ => v
            .strip_prefix("Superseded by ")
            .and_then(|rest| parse_id(rest.trim().trim_end_matches('.')))
            .map(Status::SupersededBy),
    }
}

fn valid_date(v: &str) -> bool {
    let b = v.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| v.get(r).and_then(|s| s.parse::<u32>().ok());
    matches!(
        (num(0..4), num(5..7), num(8..10)),
        (Some(_), Some(1..=12), Some(1..=31))
    )
}

/// The first block of non-blank lines of a section body, trimmed of surrounding blank lines.
fn first_paragraph(body: &[&str]) -> String {
    body.iter()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Invariant ids (`I` and a digit from 1 to 7) named in a text.
pub fn named_invariants(text: &str) -> BTreeSet<u8> {
    super::scan::find_citations(text)
        .into_iter()
        .filter_map(|f| match f.target {
            Some(super::scan::Target::Invariant(n)) => Some(n),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# ADR-0042: Count tokens exactly\n\nStatus: Superseded by ADR-0050\n\nDate: 2026-11-21\n\nSupersedes: ADR-0007, ADR-0008\n\n## Context\n\nWhy.\n\n## Decision\n\nWe count tokens with a real tokenizer,\nnever an estimate (I2).\n\nMore detail.\n\n## Consequences\n\nSlower.\n\n## Alternatives considered\n\nNone.\n";

    /// Verifies ADR-0001: a record written to the template is read completely.
    #[test]
    fn parses_a_record() {
        let adr = parse("0042-count-tokens-exactly.md", GOOD).expect("valid record");
        assert_eq!(adr.id, 42);
        assert_eq!(adr.title, "Count tokens exactly");
        assert_eq!(adr.status, Status::SupersededBy(50));
        assert_eq!(adr.status.to_string(), "Superseded by ADR-0050");
        assert_eq!(adr.date, "2026-11-21");
        assert_eq!(adr.supersedes, vec![7, 8]);
        assert_eq!(
            adr.summary,
            "We count tokens with a real tokenizer,\nnever an estimate (I2)."
        );
        assert_eq!(adr.invariants, BTreeSet::from([2]));
    }

    #[test]
    fn accepts_bold_and_hard_break_header_lines() {
        let text = GOOD.replace(
            "Status: Superseded by ADR-0050\n\nDate: 2026-11-21\n",
            "**Status:** Accepted  \n**Date:** 2026-11-21\\\n",
        );
        let adr = parse("0042-count-tokens-exactly.md", &text).expect("valid record");
        assert_eq!(adr.status, Status::Accepted);
        assert_eq!(adr.date, "2026-11-21");
    }

    /// Verifies ADR-0001: records that leave the template are rejected with a reason.
    #[test]
    fn rejects_records_that_leave_the_template() {
        let cases = [
            ("0042-Bad_Name.md", GOOD.to_string(), "file name"),
            ("0043-count.md", GOOD.to_string(), "the title says ADR-0042"),
            (
                "0042-count.md",
                GOOD.replace("# ADR-0042: Count tokens exactly", "# Count tokens"),
                "first line",
            ),
            (
                "0042-count.md",
                GOOD.replace("Superseded by ADR-0050", "Done"),
                "unknown status",
            ),
            (
                "0042-count.md",
                GOOD.replace("Status: Superseded by ADR-0050\n", ""),
                "`Status:",
            ),
            (
                "0042-count.md",
                GOOD.replace("2026-11-21", "21.11.2026"),
                "YYYY-MM-DD",
            ),
            (
                "0042-count.md",
                GOOD.replace("## Consequences", "## Results"),
                "`## Consequences` is missing",
            ),
            (
                "0042-count.md",
                GOOD.replace("ADR-0007, ADR-0008", "ADR-7"),
                "Supersedes:",
            ),
        ];
        for (file, text, needle) in cases {
            let errors = parse(file, &text).expect_err(needle);
            assert!(
                errors.iter().any(|e| e.contains(needle)),
                "{needle}: {errors:?}"
            );
        }
    }

    #[test]
    fn record_file_names() {
        assert!(is_record_file("0001-record-architecture-decisions.md"));
        assert!(!is_record_file("TEMPLATE.md"));
        assert!(!is_record_file("README.md"));
        assert!(!is_record_file("0001.md"));
    }
}
