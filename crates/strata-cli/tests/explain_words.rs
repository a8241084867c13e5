//! What `strata explain` says, in the table and in the page: the idle-budget warning counts
//! the fence each dropped section would need, a cut section has one token figure and counts as
//! left out, omission markers are explained, reasons read as sentences, and the table fits the
//! terminal (ADR-0026).
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use std::path::Path;

mod explain_setup;
use explain_setup::{page, strata, strata_with};

/// A number with thousands separators, as the report view writes it.
fn num(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Text with its line breaks and runs of spaces made single spaces, as wrapping leaves it.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The report of `page` with `idle` prompt tokens left unused, and the texts of the dropped
/// long-term memories as large as `sizes` (the others 1,000 tokens): a report as the assembler
/// writes it when small sections were dropped close to the end of the budget.
fn with_idle(dir: &Path, idle: u64, sizes: &[u64], name: &str) {
    let mut e = read_json(&dir.join("out.json"));
    let budget = e["report"]["prompt_budget"].as_u64().unwrap();
    e["report"]["used_tokens"] = (budget - idle).into();
    let mut sizes = sizes.iter();
    for input in e["inputs"].as_array_mut().unwrap() {
        if input["layer"] == "long_term_memory" {
            input["tokens"] = sizes.next().copied().unwrap_or(1_000).into();
        }
    }
    std::fs::write(dir.join(name), e.to_string()).unwrap();
}

/// At 6,965 of 6,976 tokens no dropped section fits in the 11 left, whatever its text, since
/// each needs a fence of about 35 tokens: no warning claims one would, and one token is "1
/// token". With room for a small section and its fence, the warning says it may fit.
#[test]
fn the_idle_warning_counts_the_fence_each_dropped_section_needs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    page(dir);
    with_idle(dir, 11, &[5, 6, 7, 8, 9, 10, 11, 12], "idle11.json");
    let table = words(&strata(dir, &["explain", "idle11.json"]));
    assert!(!table.contains("WARNING"), "{table}");
    assert!(!table.contains("would fit"), "{table}");
    assert!(!table.contains(" 1 tokens"), "{table}");
    assert!(
        table.contains("1 token more than the 11 tokens left unused"),
        "{table}"
    );
    strata(dir, &["explain", "idle11.json", "--html", "idle11.html"]);
    let html = std::fs::read_to_string(dir.join("idle11.html")).unwrap();
    assert!(!html.contains("idle-warning"));
    assert!(!html.contains(" 1 tokens"));

    // 200 tokens left: a section of 5 tokens of text fits with its fence, one of 190 does not.
    with_idle(dir, 200, &[5, 190], "idle200.json");
    let table = strata(dir, &["explain", "idle200.json"]);
    let at = table
        .find("WARNING")
        .unwrap_or_else(|| panic!("no warning:\n{table}"));
    let warning = words(table[at..].split("\nlayer ").next().unwrap());
    assert!(
        warning.contains("1 of them may fit") && warning.contains("fence"),
        "{table}"
    );
}

/// A cut section shows the tokens it had whole once, wherever it is described, and what was
/// cut off it counts as left out in the layer's row, in the table and in the page.
#[test]
fn a_cut_section_has_one_token_figure_and_counts_as_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let html = std::fs::read_to_string(page(dir)).unwrap();
    let e = read_json(&dir.join("out.json"));
    let cut = e["report"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "log.big")
        .unwrap();
    assert_eq!(cut["status"], "cut", "{cut}");
    let (kept, whole) = (
        cut["tokens"].as_u64().unwrap(),
        cut["full_tokens"].as_u64().unwrap(),
    );
    let text = e["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "log.big")
        .unwrap()["tokens"]
        .as_u64()
        .unwrap();
    assert_ne!(text, whole);
    assert!(html.contains(&format!("cut to {} of {} tokens", num(kept), num(whole))));
    assert!(
        !html.contains(&format!("about {} tokens", num(text))),
        "the page gives the cut section a second figure"
    );
    // The layer table counts the tokens cut off as left out.
    let row = html
        .split("<tr")
        .find(|r| r.contains(">5 working_memory</td>"))
        .unwrap();
    assert!(row.contains(&num(whole - kept)), "{row}");

    let table = strata(dir, &["explain", "out.json"]);
    let at = table.find("\n5 working_memory").unwrap();
    let layer = table[at..].split("\n6 long_term_memory").next().unwrap();
    let words = layer.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(&format!("({} tokens left out)", num(whole - kept))),
        "{table}"
    );
}

/// Layer 6 keeps nothing but takes tokens: its omission marker, which the legend, the layer
/// table and the terminal table name.
#[test]
fn a_layer_that_keeps_nothing_names_its_omission_marker() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let html = std::fs::read_to_string(page(dir)).unwrap();
    let legend = &html[html.find("id=\"legend\"").unwrap()..];
    let legend = &legend[..legend.find("</details>").unwrap()];
    assert!(
        legend.to_lowercase().contains("omission marker"),
        "{legend}"
    );
    let row = html
        .split("<tr")
        .find(|r| r.contains(">6 long_term_memory</td>"))
        .unwrap();
    assert!(row.contains("omission marker"), "{row}");
    let table = strata(dir, &["explain", "out.json"]);
    let at = table.find("6 long_term_memory").unwrap();
    let layer = table[at..].split("\nstable prefix").next().unwrap();
    assert!(words(layer).contains("omission marker"), "{table}");
}

/// Sections left out by design say why in a sentence of their own: a reserved id, an unpaired
/// tool call; never a reason pasted into the sentence of a mode.
#[test]
fn sections_left_out_by_design_read_as_sentences() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    page(dir);
    let demo = strata(dir, &["demo"]);
    for bad in ["not in this reserved", "current reserved"] {
        assert!(!demo.contains(bad), "{bad}:\n{demo}");
    }
    assert!(demo.contains("reserved for the tool catalog"), "{demo}");

    let mut input = read_json(&explain_setup::repo_root().join("examples/ada/turn.json"));
    // A call whose result never came, before the newest turns: a provider request cannot
    // carry it.
    input["turns"].as_array_mut().unwrap().insert(
        1,
        serde_json::json!(
            {"role": "tool_call", "call_id": "call_9", "name": "file_read", "arguments": {"path": "x"}}
        ),
    );
    std::fs::write(dir.join("unpaired.json"), input.to_string()).unwrap();
    let json = strata(
        dir,
        &[
            "assemble",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--input",
            "unpaired.json",
            "--drop-unpaired",
            "--format",
            "json",
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
            "--max-tokens",
            "100",
        ],
    );
    std::fs::write(dir.join("unpaired.out.json"), json).unwrap();
    let table = words(&strata(dir, &["explain", "unpaired.out.json"]));
    assert!(table.contains("unpaired tool turn"), "{table}");
    assert!(!table.contains("current unpaired"), "{table}");
    assert!(table.contains("--drop-unpaired"), "{table}");
}

/// The table is wrapped to the terminal: `COLUMNS`, 80 when it is not set.
#[test]
fn the_table_fits_the_terminal_width() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    page(dir);
    for (env, width) in [(None, 80), (Some("80"), 80), (Some("60"), 60)] {
        let env: Vec<(&str, &str)> = env.map(|c| ("COLUMNS", c)).into_iter().collect();
        let table = strata_with(dir, &["explain", "out.json"], &env);
        let wide: Vec<&str> = table
            .lines()
            .filter(|l| l.chars().count() > width)
            .collect();
        assert!(
            wide.is_empty(),
            "{} lines over {width}: {wide:#?}",
            wide.len()
        );
        // Wrapping keeps every word.
        let words = table.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains("layer 6 yields to layers 1-5 when the prompt budget"),
            "{table}"
        );
    }
}
