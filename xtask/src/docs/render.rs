//! Turns the [`Model`] into Markdown pages: plain, sorted and stable, so that the same tree
//! always gives the same bytes and the pages read well on a code host (ADR-0005).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::adr::{adr_id, Adr, Status};
use super::scan::{Citation, Role, Target};
use super::{CrateInfo, Model, MARKER, TOML_MARKER};

/// The invariants: short name and statement, in order from the first to the ninth.
pub const INVARIANTS: [(&str, &str); 9] = [
    (
        "Identity first and intact",
        "For any runtime input in layers 3-6, the assembled output begins with the rendered layers 1-2 of the verified definition, byte for byte, exactly once.",
    ),
    (
        "Never trimmed",
        "Budget pressure never drops or shortens layers 1-2 or sticky sections; when they alone do not fit, assembly fails with a typed error instead of cutting them silently.",
    ),
    (
        "No forged boundaries",
        "No bytes from layers 3-6 can make a parser of the rendered output see a section boundary, a role marker or privileged content: parsing the rendering gives back exactly the sections that went in, with their layers.",
    ),
    (
        "Priority wins, capabilities narrow",
        "On a conflict the higher layer wins, and a lower layer can never remove or replace a higher layer's section; delegated context may narrow the tool set but never widen it past layer 1's allowlist.",
    ),
    (
        "Authenticated identity",
        "Layers 1-2 exist in memory only as the result of verifying a signed definition (trusted key, valid signature, not expired, not rolled back); any single-bit change to a signed file is rejected.",
    ),
    (
        "Deterministic",
        "The same inputs give the same bytes, and the stable prefix (layers 1-2 and stable sections) is byte-identical from turn to turn, so provider prompt caches hit.",
    ),
    (
        "Typestate",
        "The compiler rejects code that mutates layers 1-2 after loading, builds them without verification, or lets a runtime contributor target layer 1 or 2.",
    ),
    (
        "Authority channels",
        "In every provider request the system channel holds exactly the signed text and nothing from layers 3-6; no untrusted byte can create a message, a role, a tool call or a tool result; no data sits above the user's authority; native turns hold no form of the wire format; the words in a tool's definition are signed, or there only under a loud policy.",
    ),
    (
        "Exact budgets",
        "The reported token count equals an independent reference count of what is sent where the provider's tokenizer is public (otherwise it is reported as an estimate), and no output exceeds its budget by that count.",
    ),
];

/// All generated files, by workspace-relative path.
pub fn render(model: &Model) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    files.insert("docs/README.md".to_string(), overview(model));
    files.insert("docs/SUMMARY.md".to_string(), summary(model));
    files.insert("docs/book.toml".to_string(), book_toml());
    files.insert("docs/invariants.md".to_string(), invariants(model));
    files.insert("docs/adr/README.md".to_string(), adr_index(model));
    for record in model.adrs.values() {
        files.insert(
            format!("docs/adr/{}.md", adr_id(record.id)),
            adr_page(model, record),
        );
    }
    if let Some(page) = model
        .architecture
        .as_deref()
        .and_then(super::codemap::splice)
    {
        files.insert(super::codemap::PAGE.to_string(), page);
    }
    files.insert("docs/crates/README.md".to_string(), crate_index(model));
    for krate in &model.crates {
        files.insert(
            format!("docs/crates/{}.md", krate.name),
            crate_page(model, krate),
        );
    }
    files
}

/// A new page: the marker line, a blank line and the title.
fn page(title: &str) -> String {
    format!("{MARKER}\n\n# {title}\n")
}

/// Escapes text for a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The anchor a code host gives a heading.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn invariant_heading(n: u8) -> String {
    format!("I{n}: {}", INVARIANTS[usize::from(n - 1)].0)
}

/// Link to an invariant's section of `invariants.md`, from a page `up` folders below `docs/`.
fn invariant_link(n: u8, up: &str) -> String {
    format!("[I{n}]({up}invariants.md#{})", slug(&invariant_heading(n)))
}

/// Link to an ADR's generated page, from a page `up` folders below `docs/`.
fn adr_link(id: u32, up: &str) -> String {
    format!("[{}]({up}adr/{}.md)", adr_id(id), adr_id(id))
}

/// `path:line` linked to the source, from a page `up` folders below the workspace root.
fn source_link(c: &Citation, up: &str, shown: &str) -> String {
    format!("[{shown}:{}]({up}{}#L{})", c.line, c.path, c.line)
}

fn title_of(model: &Model, id: u32) -> String {
    model
        .adrs
        .get(&id)
        .map_or_else(|| "(no such record)".to_string(), |a| a.title.clone())
}

fn status_text(status: Status, up: &str) -> String {
    match status {
        Status::SupersededBy(id) => format!("Superseded by {}", adr_link(id, up)),
        other => other.to_string(),
    }
}

fn role_heading(role: Role) -> &'static str {
    match role {
        Role::Implements => "Implemented by",
        Role::Verifies => "Verified by",
        Role::Measures => "Measured by",
    }
}

/// Rewrites relative links of a record's text so they work from `docs/adr/`.
fn rewrite_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(pos) = rest.find("](") {
        out.push_str(&rest[..pos + 2]);
        rest = &rest[pos + 2..];
        let absolute = rest.starts_with('#')
            || rest.starts_with('/')
            || rest.split(')').next().is_some_and(|t| t.contains("://"))
            || rest.starts_with("mailto:");
        if !absolute {
            out.push_str("../../adr/");
        }
    }
    out.push_str(rest);
    out
}

/// A table of citations, or a sentence when there are none.
fn citation_table(citations: &[&Citation], up: &str, none: &str, strip: Option<&str>) -> String {
    if citations.is_empty() {
        return format!("{none}\n");
    }
    let mut s = String::from("| Where | Item |\n|---|---|\n");
    for c in citations {
        let shown = strip
            .and_then(|p| c.path.strip_prefix(p))
            .unwrap_or(&c.path);
        let _ = writeln!(s, "| {} | `{}` |", source_link(c, up, shown), cell(&c.item));
    }
    s
}

fn overview(model: &Model) -> String {
    let mut s = page("strata documentation");
    s.push_str(
        "\nThese pages are generated from the decision records in [`adr/`](../adr) and from the \
         comments in the code that cite them (ADR-0005). Run `cargo xtask docs` after changing \
         either; `cargo xtask docs --check`, which `cargo xtask ci` and `cargo test` run, fails \
         when the pages are stale, when a citation names a record that does not exist or is no \
         longer in force, and when an accepted decision or an invariant has no code or no test \
         that cites it.\n\n",
    );
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for a in model.adrs.values() {
        let key = match a.status {
            Status::SupersededBy(_) => "superseded".to_string(),
            other => other.to_string().to_lowercase(),
        };
        *counts.entry(key).or_default() += 1;
    }
    let breakdown: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    s.push_str("| Page | What it holds |\n|---|---|\n");
    let _ = writeln!(
        s,
        "| [Decision records](adr/README.md) | {} records{}{} |",
        model.adrs.len(),
        if breakdown.is_empty() { "" } else { ": " },
        breakdown.join(", ")
    );
    s.push_str("| [Invariants](invariants.md) | The seven invariants, the records that name them and the tests that prove them |\n");
    s.push_str(
        "| [Crates](crates/README.md) | Which decisions each crate implements and verifies |\n",
    );
    if model.extra_pages.contains("docs/benchmarks.md") {
        s.push_str(
            "| [Benchmarks](benchmarks.md) | Measured speed (written by hand, not generated) |\n",
        );
    }
    let elsewhere: Vec<String> = ["README.md", "ARCHITECTURE.md", "SECURITY.md"]
        .iter()
        .filter(|p| model.extra_pages.contains(**p))
        .map(|p| format!("[{}](../{p})", p.trim_end_matches(".md")))
        .collect();
    if !elsewhere.is_empty() {
        let _ = writeln!(
            s,
            "\nAt the root of the repository: {}.",
            elsewhere.join(", ")
        );
    }
    s.push_str(
        "\n## Citing a decision or an invariant\n\n\
         Code that implements a decision names its id in a comment, usually the doc comment of \
         the item (`/// Counts tokens exactly (ADR-0003).`) or the module's `//!` comment. A test \
         that verifies a decision or an invariant says so in its doc comment \
         (`/// Verifies I3 (ADR-0009).`). A citation counts as a test when it belongs to a \
         `#[test]` function, `#[cfg(test)]` code, a `proptest!` block, a file under `tests/` or \
         a fuzz target; as a measurement in `benches/`; and as implementing code otherwise.\n\n\
         The pages also form an mdBook: `mdbook build docs` writes it to `target/book`.\n",
    );
    s
}

fn summary(model: &Model) -> String {
    let mut s = format!("{MARKER}\n\n# Summary\n\n[Overview](README.md)\n\n");
    s.push_str("- [Decision records](adr/README.md)\n");
    for a in model.adrs.values() {
        let _ = writeln!(
            s,
            "    - [{}: {}](adr/{}.md)",
            adr_id(a.id),
            a.title.replace(['[', ']'], ""),
            adr_id(a.id)
        );
    }
    s.push_str("- [Invariants](invariants.md)\n- [Crates](crates/README.md)\n");
    for c in &model.crates {
        let _ = writeln!(s, "    - [{}](crates/{}.md)", c.name, c.name);
    }
    if model.extra_pages.contains("docs/benchmarks.md") {
        s.push_str("- [Benchmarks](benchmarks.md)\n");
    }
    s
}

fn book_toml() -> String {
    format!(
        "{TOML_MARKER}\n[book]\ntitle = \"strata\"\nsrc = \".\"\n\n[build]\nbuild-dir = \"../target/book\"\ncreate-missing = false\n"
    )
}

fn adr_index(model: &Model) -> String {
    let mut s = page("Architecture decision records");
    s.push_str(
        "\nEach decision is a file in [`adr/`](../../adr) written to [the template](../../adr/TEMPLATE.md) \
         (ADR-0001). This index and the page of each record are generated; the last two columns \
         count the places in the code that cite the record as implementation and as test.\n\n",
    );
    if model.adrs.is_empty() {
        s.push_str("No records yet.\n");
        return s;
    }
    s.push_str("| ADR | Title | Status | Date | Record | Implemented by | Verified by |\n");
    s.push_str("|---|---|---|---|---|---:|---:|\n");
    for a in model.adrs.values() {
        let t = Target::Adr(a.id);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | [{}](../../adr/{}) | {} | {} |",
            adr_link(a.id, "../"),
            cell(&a.title),
            status_text(a.status, "../"),
            a.date,
            a.file,
            a.file,
            model.cited(t, Role::Implements).count(),
            model.cited(t, Role::Verifies).count()
        );
    }
    s
}

fn adr_page(model: &Model, a: &Adr) -> String {
    let mut s = page(&format!("{}: {}", adr_id(a.id), a.title));
    s.push_str("\n| Status | Date | Record |\n|---|---|---|\n");
    let _ = writeln!(
        s,
        "| {} | {} | [adr/{}](../../adr/{}) |",
        status_text(a.status, "../"),
        a.date,
        a.file,
        a.file
    );
    let mut notes = Vec::new();
    if !a.supersedes.is_empty() {
        let list: Vec<String> = a.supersedes.iter().map(|&i| adr_link(i, "../")).collect();
        notes.push(format!("Supersedes {}.", list.join(", ")));
    }
    let superseded_by: Vec<String> = model
        .adrs
        .values()
        .filter(|o| o.supersedes.contains(&a.id))
        .map(|o| adr_link(o.id, "../"))
        .collect();
    if !superseded_by.is_empty() && !matches!(a.status, Status::SupersededBy(_)) {
        notes.push(format!("Superseded by {}.", superseded_by.join(", ")));
    }
    if !a.invariants.is_empty() {
        let list: Vec<String> = a
            .invariants
            .iter()
            .map(|&n| invariant_link(n, "../"))
            .collect();
        notes.push(format!("Names the invariants {}.", list.join(", ")));
    }
    if !notes.is_empty() {
        let _ = writeln!(s, "\n{}", notes.join(" "));
    }
    let _ = writeln!(
        s,
        "\n## Decision\n\n{}\n\nThe context, the consequences and the alternatives are in [the record](../../adr/{}).",
        rewrite_links(&a.summary),
        a.file
    );
    let t = Target::Adr(a.id);
    let sections = [
        (Role::Implements, "No code cites this decision yet."),
        (Role::Verifies, "No test cites this decision yet."),
        (Role::Measures, ""),
    ];
    for (role, none) in sections {
        let heading = role_heading(role);
        let list: Vec<&Citation> = model.cited(t, role).collect();
        if list.is_empty() && none.is_empty() {
            continue;
        }
        let _ = write!(
            s,
            "\n## {heading}\n\n{}",
            citation_table(&list, "../../", none, None)
        );
    }
    s
}

fn invariants(model: &Model) -> String {
    let mut s = page("Invariants");
    s.push_str(
        "\nThe properties strata keeps for every input. Each one is named by a decision record \
         and proven by tests that cite it in a doc comment (`/// Verifies I3 (ADR-0009).`); \
         `cargo xtask docs --check` fails when an invariant has no test.\n\n\
         | Invariant | Statement | Named by | Tests | Code |\n|---|---|---|---:|---:|\n",
    );
    for n in 1..=9u8 {
        let t = Target::Invariant(n);
        let (name, statement) = INVARIANTS[usize::from(n - 1)];
        let named: Vec<String> = model
            .adrs
            .values()
            .filter(|a| a.invariants.contains(&n))
            .map(|a| adr_link(a.id, ""))
            .collect();
        let _ = writeln!(
            s,
            "| [I{n}](#{}) {} | {} | {} | {} | {} |",
            slug(&invariant_heading(n)),
            name,
            cell(statement),
            if named.is_empty() {
                "none".to_string()
            } else {
                named.join(", ")
            },
            model.cited(t, Role::Verifies).count(),
            model.cited(t, Role::Implements).count()
        );
    }
    for n in 1..=9u8 {
        let t = Target::Invariant(n);
        let _ = writeln!(
            s,
            "\n## {}\n\n{}",
            invariant_heading(n),
            INVARIANTS[usize::from(n - 1)].1
        );
        let tests: Vec<&Citation> = model.cited(t, Role::Verifies).collect();
        let _ = write!(
            s,
            "\n### Tests that prove it\n\n{}",
            citation_table(&tests, "../", "No test cites this invariant yet.", None)
        );
        let code: Vec<&Citation> = model.cited(t, Role::Implements).collect();
        if !code.is_empty() {
            let _ = write!(
                s,
                "\n### Code that enforces it\n\n{}",
                citation_table(&code, "../", "", None)
            );
        }
    }
    s
}

/// Per crate: for each target, the citations of each role.
fn crate_citations<'m>(
    model: &'m Model,
    krate: &CrateInfo,
) -> BTreeMap<Target, BTreeMap<Role, Vec<&'m Citation>>> {
    let mut map: BTreeMap<Target, BTreeMap<Role, Vec<&Citation>>> = BTreeMap::new();
    for c in &model.citations {
        if model.crate_of(&c.path).map(|k| &k.name) == Some(&krate.name) {
            map.entry(c.target)
                .or_default()
                .entry(c.role)
                .or_default()
                .push(c);
        }
    }
    map
}

fn crate_index(model: &Model) -> String {
    let mut s = page("Crates");
    s.push_str(
        "\nThe crates from the bottom level up, the workspace crates each one depends on, and the \
         decisions each implements and verifies according to the citations in its code. A crate \
         depends only on crates of a lower level (ADR-0002).\n\n\
         | Crate | Level | Directory | Depends on | Implements | Verifies |\n|---|---:|---|---|---|---|\n",
    );
    let mut ordered: Vec<&CrateInfo> = model.crates.iter().collect();
    ordered.sort_by_key(|k| {
        let level = crate::layering::level(&k.name);
        (level.unwrap_or(u8::MAX), k.name.clone())
    });
    for k in ordered {
        let map = crate_citations(model, k);
        let ids = |role: Role| -> String {
            let set: BTreeSet<u32> = map
                .iter()
                .filter(|(_, roles)| roles.contains_key(&role))
                .filter_map(|(t, _)| match t {
                    Target::Adr(id) => Some(*id),
                    Target::Invariant(_) => None,
                })
                .collect();
            if set.is_empty() {
                "-".to_string()
            } else {
                set.iter()
                    .map(|&id| adr_link(id, "../"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let deps = if k.depends_on.is_empty() {
            "-".to_string()
        } else {
            k.depends_on
                .iter()
                .map(|d| format!("[{d}]({d}.md)"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            s,
            "| [{}]({}.md) | {} | [`{}`](../../{}) | {} | {} | {} |",
            k.name,
            k.name,
            crate::layering::level(&k.name).map_or_else(|| "-".to_string(), |l| l.to_string()),
            k.dir,
            k.dir,
            deps,
            ids(Role::Implements),
            ids(Role::Verifies)
        );
    }
    s
}

fn crate_page(model: &Model, k: &CrateInfo) -> String {
    let mut s = page(&k.name);
    if !k.description.is_empty() {
        let _ = writeln!(s, "\n{}", k.description);
    }
    let _ = writeln!(s, "\nSource: [`{}`](../../{}).", k.dir, k.dir);
    let map = crate_citations(model, k);
    let count = |t: &Target, r: Role| map.get(t).and_then(|m| m.get(&r)).map_or(0, Vec::len);
    let adrs: Vec<&Target> = map.keys().filter(|t| matches!(t, Target::Adr(_))).collect();
    let invs: Vec<&Target> = map
        .keys()
        .filter(|t| matches!(t, Target::Invariant(_)))
        .collect();
    s.push_str("\n## Decisions\n\n");
    if adrs.is_empty() {
        s.push_str("No code in this crate cites a decision yet.\n");
    } else {
        s.push_str(
            "| Decision | Status | Implemented here | Verified here |\n|---|---|---:|---:|\n",
        );
        for t in &adrs {
            let Target::Adr(id) = t else { continue };
            let status = model
                .adrs
                .get(id)
                .map_or_else(|| "-".to_string(), |a| status_text(a.status, "../"));
            let _ = writeln!(
                s,
                "| {} {} | {} | {} | {} |",
                adr_link(*id, "../"),
                cell(&title_of(model, *id)),
                status,
                count(t, Role::Implements),
                count(t, Role::Verifies)
            );
        }
    }
    if !invs.is_empty() {
        s.push_str(
            "\n## Invariants\n\n| Invariant | Enforced here | Verified here |\n|---|---:|---:|\n",
        );
        for t in &invs {
            let Target::Invariant(n) = t else { continue };
            let _ = writeln!(
                s,
                "| {} {} | {} | {} |",
                invariant_link(*n, "../"),
                INVARIANTS[usize::from(*n - 1)].0,
                count(t, Role::Implements),
                count(t, Role::Verifies)
            );
        }
    }
    if map.is_empty() {
        return s;
    }
    s.push_str("\n## Citations\n");
    let strip = format!("{}/", k.dir);
    for (t, roles) in &map {
        let heading = match t {
            Target::Adr(id) => format!("{}: {}", adr_id(*id), title_of(model, *id)),
            Target::Invariant(n) => invariant_heading(*n),
        };
        let _ = writeln!(s, "\n### {heading}");
        for (role, list) in roles {
            let _ = write!(
                s,
                "\n{}:\n\n{}",
                role_heading(*role),
                citation_table(list, "../../", "", Some(&strip))
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_match_code_host_anchors() {
        assert_eq!(
            slug("I4: Priority wins, capabilities narrow"),
            "i4-priority-wins-capabilities-narrow"
        );
        assert_eq!(
            slug("I1: Identity first and intact"),
            "i1-identity-first-and-intact"
        );
    }

    #[test]
    fn record_links_are_rewritten_for_the_docs_folder() {
        assert_eq!(
            rewrite_links("see [ADR-0006](0006-six-layers.md), [web](https://x.invalid/a) and [here](#top)"),
            "see [ADR-0006](../../adr/0006-six-layers.md), [web](https://x.invalid/a) and [here](#top)"
        );
    }
}
