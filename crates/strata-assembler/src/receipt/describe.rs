//! A receipt in words, for `strata receipt show` and audits.

use std::fmt::Write as _;

use super::statement::{Predicate, SectionRecord, Statement};

/// A receipt in words: what was sent, from which definition, what came from where, and what
/// was cut, dropped, filtered, overridden or refused and why.
pub fn describe(st: &Statement) -> String {
    let mut o = String::new();
    header(&mut o, st);
    sections(&mut o, &st.predicate.sections);
    tools_and_omissions(&mut o, &st.predicate);
    o
}

/// What was sent, from which definition, under which budget.
fn header(o: &mut String, st: &Statement) {
    let p = &st.predicate;
    let _ = writeln!(
        o,
        "Assembly receipt (strata {}), signed by runtime key {}",
        p.strata_version, p.runtime_key_id
    );
    for s in &st.subject {
        let _ = writeln!(
            o,
            "Sent: {} ({}), sha256 {}",
            s.name,
            p.format,
            s.digest.get("sha256").map_or("?", String::as_str)
        );
    }
    let _ = writeln!(
        o,
        "Agent: {} version {}, definition payload sha256 {}, signed by {}",
        p.agent.id,
        p.agent.version,
        p.agent.payload_sha256,
        if p.agent.signers.is_empty() {
            "nobody".to_owned()
        } else {
            p.agent.signers.join(", ")
        }
    );
    let _ = writeln!(
        o,
        "Identity (layers 1-2): {}, {} tokens, first in the output and never trimmed",
        p.agent.identity_digest, p.counts.identity_tokens
    );
    let _ = writeln!(
        o,
        "Budget: {} of {} prompt tokens used ({} total, {} reserved for the reply), tokenizer {}",
        p.counts.used_tokens,
        p.budget.prompt_budget,
        p.budget.total_tokens,
        p.budget.response_reserve,
        p.tokenizer
    );
    if let Some(r) = &p.counts.request {
        let _ = writeln!(
            o,
            "Request: {} messages, {} tokens ({}), {} expected from the provider's cache",
            r.messages, r.total_tokens, r.count, r.expected_cached_tokens
        );
    }
}

/// One line per section: where it came from and what happened to it.
fn sections(o: &mut String, sections: &[SectionRecord]) {
    let _ = writeln!(o, "Sections ({}):", sections.len());
    for s in sections {
        let from = if s.producer == s.source {
            s.source.clone()
        } else {
            format!("{} `{}`", s.source, s.producer)
        };
        let _ = writeln!(
            o,
            "  layer {} `{}` ({} authority) from {from}, {}: {}",
            s.layer.number(),
            s.id,
            s.authority,
            s.content_digest,
            fate(s),
        );
    }
}

/// What happened to a section: kept, cut (to how much, which ends kept), or its status and
/// reason.
fn fate(s: &SectionRecord) -> String {
    match (s.status.as_str(), &s.reason, s.full_tokens) {
        ("kept", _, _) => format!("kept whole, {} tokens", s.tokens),
        ("cut", _, full) => {
            let mut w = match full {
                Some(full) => format!("cut to {} of {full} tokens", s.tokens),
                None => format!("cut to {} tokens", s.tokens),
            };
            match (s.kept_head_bytes, s.kept_tail_bytes) {
                (Some(h), Some(0)) => w.push_str(&format!(", the first {h} bytes kept")),
                (Some(0), Some(t)) => w.push_str(&format!(", the last {t} bytes kept")),
                (Some(h), Some(t)) => {
                    w.push_str(&format!(", the first {h} and the last {t} bytes kept"));
                }
                _ => {}
            }
            w
        }
        (st, Some(r), _) => format!("{st}: {r}"),
        (st, None, _) => st.to_owned(),
    }
}

/// The tools offered and refused, and what never reached the assembler.
fn tools_and_omissions(o: &mut String, p: &Predicate) {
    let offered: Vec<&str> = p.tools.offered.iter().map(|t| t.name.as_str()).collect();
    let _ = writeln!(
        o,
        "Tools offered: {}",
        if offered.is_empty() {
            "none".to_owned()
        } else {
            offered.join(", ")
        }
    );
    for t in &p.tools.refused {
        let _ = writeln!(o, "Tool refused: {}: {}", t.name, t.reason);
    }
    for m in &p.omissions {
        let _ = writeln!(
            o,
            "Never reached the assembler: layer {} `{}`: {}",
            m.layer.number(),
            m.id,
            m.reason
        );
    }
}
