//! The explain page as a reader sees it: the example agent is assembled with a budget too small
//! for its input, `strata explain --html` draws the report, and a real headless Chromium loads
//! the page, dumps the DOM it built and takes a screenshot.
//!
//! The DOM must hold the legend, the idle-budget warning, reasons in words, the bar of dropped
//! volume, previews of dropped text in `<details>`, the roles and sequence numbers of turns, the
//! collapsible full text and the visible cut point; the screenshot must be a PNG that is not
//! blank. Chromium comes from Debian's package (`.ci/run` installs it). Without a browser the
//! test says so and passes, unless `STRATA_REQUIRE_BROWSER=1` (set by `.ci/run`), where a
//! missing browser fails it. `STRATA_SCREENSHOT_DIR` keeps the page and the screenshot there.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

mod explain_setup;
use explain_setup::{browser, idle_page, page, strata};

/// Verifies ADR-0026: the page and the table explain the report in words, and the browser shows
/// every element a reader needs, with input text escaped.
#[test]
fn chromium_renders_the_explain_page_with_its_key_elements() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = match std::env::var_os("STRATA_SCREENSHOT_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            std::fs::create_dir_all(&d).unwrap();
            d.canonicalize().unwrap()
        }
        None => tmp.path().to_path_buf(),
    };
    let html = page(&dir);

    // A cut takes the room left by the first unit that does not fit, so the budget stays
    // unused only when what is dropped cannot be cut: here a call with its result, neither of
    // which fits beside the other.
    let idle_html = idle_page(&dir);
    let idle_table = strata(&dir, &["explain", "idle.out.json"]);
    assert!(
        idle_table.contains("WARNING: idle budget:"),
        "the table lacks the idle-budget warning:\n{idle_table}"
    );
    // Each dropped section says how it compares with the budget left unused.
    let idle_words = idle_table.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(idle_words.contains("left unused"), "{idle_table}");

    // The terminal table says the same in words, with or without a browser.
    let table = strata(&dir, &["explain", "out.json"]);
    for needle in [
        "why: layer 6 yields to layers 1-5",
        "[tool_result #3]",
        "cut to ",
        "about ",
    ] {
        assert!(
            table.contains(needle),
            "the table lacks {needle:?}:\n{table}"
        );
    }
    // The page, as written: the source column names the producer once, not `caller:caller`.
    let written = std::fs::read_to_string(&html).unwrap();
    assert!(!written.contains("caller:caller"), "source shown twice");
    assert!(written.contains(">caller</td>"));

    let Some(browser) = browser() else {
        assert!(
            std::env::var_os("STRATA_REQUIRE_BROWSER").is_none_or(|v| v != "1"),
            "STRATA_REQUIRE_BROWSER=1 but no chromium is installed (apt-get install chromium)"
        );
        #[allow(clippy::print_stderr, reason = "tell the developer what was skipped")]
        {
            eprintln!("no chromium on PATH: the browser half of this test was skipped");
        }
        return;
    };
    let url = format!("file://{}", html.display());
    let profile = tempfile::tempdir().unwrap();
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--window-size=1400,2000",
    ];
    let profile_arg = format!("--user-data-dir={}", profile.path().display());

    // The DOM Chromium built from the page.
    let out = Command::new(browser)
        .args(common)
        .arg(&profile_arg)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8(out.stdout).unwrap();
    for needle in [
        // The legend, open by default.
        "<details id=\"legend\" open=\"open\">",
        "<summary>Legend</summary>",
        // Reasons in words.
        "layer 6 yields to layers 1-5 when the prompt budget (6,976 tokens) runs out",
        // Dropped volume, drawn.
        "id=\"dropped-bands\"",
        "6 long_term_memory: ",
        // A preview of dropped text, without JavaScript.
        "<details class=\"preview\"><summary>what it held:",
        "Fact 29: check the dashboards",
        // Roles and sequence numbers of turns.
        "tool_result #3",
        "assistant #4",
        // The full text, collapsible, and the cut point in it.
        "<details id=\"text-details\">",
        "<summary>Show the full text",
        "class=\"cutpoint\"",
        "[cut here: ",
        // By-design outcomes are not shown as losses.
        "class=\"design\"",
    ] {
        assert!(dom.contains(needle), "the DOM lacks {needle:?}");
    }
    // The idle-budget warning, on the page of the dropped call.
    let idle_url = format!("file://{}", idle_html.display());
    let out = Command::new(browser)
        .args(common)
        .arg(&profile_arg)
        .arg("--dump-dom")
        .arg(&idle_url)
        .output()
        .unwrap();
    assert!(out.status.success());
    let idle_dom = String::from_utf8(out.stdout).unwrap();
    for needle in ["id=\"idle-warning\"", "WARNING: idle budget."] {
        assert!(
            idle_dom.contains(needle),
            "the idle page's DOM lacks {needle:?}"
        );
    }
    // Text from the input is escaped, never markup.
    assert!(!dom.contains("<b>bold?</b>"));
    assert!(dom.contains("&lt;b&gt;bold?&lt;/b&gt;"));
    assert!(!dom.contains("<script"));

    // The screenshot: a PNG of the requested size, not one colour.
    let png = dir.join("explain.png");
    let _ = std::fs::remove_file(&png);
    let out = Command::new(browser)
        .args(common)
        .arg(&profile_arg)
        .arg(format!("--screenshot={}", png.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1400, 2000));
    let bytes = &buf[..info.buffer_size()];
    let px = info.color_type.samples();
    let mut colours = std::collections::BTreeSet::new();
    let mut dark = 0usize;
    for p in bytes.chunks(px) {
        colours.insert(p[..3.min(px)].to_vec());
        if p[..3.min(px)].iter().all(|&c| c < 100) {
            dark += 1;
        }
    }
    assert!(
        colours.len() > 50,
        "only {} colours: blank page?",
        colours.len()
    );
    // Text and bars cover a real share of the page (more than 1% of its pixels are dark).
    assert!(dark * 100 > bytes.len() / px, "{dark} dark pixels");
}

/// A page that shows `{page}` in a frame `{width}` pixels wide (Chromium's headless window is
/// at least 500 pixels wide, so a phone's width is a frame's) and, once it is laid out,
/// measures it: the page's width against the frame's, each bar band's label and whether it is
/// clipped, the entries of the bars' legend, and where the `why` column of the sections table
/// ends. The measures are written into this page as JSON, for `--dump-dom` to print.
const PROBE: &str = r#"<!DOCTYPE html>
<html><body style="margin:0">
<iframe id="f" src="{page}" style="width:{width}px;height:1900px;border:0"></iframe>
<script>
var f = document.getElementById('f');
f.addEventListener('load', function () {
  var doc = f.contentDocument, win = f.contentWindow, m = {};
  if (doc === null) {
    m.error = 'the frame cannot be read';
  } else {
    m.inner = win.innerWidth;
    m.scroll = doc.documentElement.scrollWidth;
    m.bands = [];
    doc.querySelectorAll('#bands .band, #dropped-bands .band').forEach(function (b) {
      var label = b.querySelector('.lbl');
      var visible = label !== null && label.offsetParent !== null && label.textContent.trim() !== '';
      m.bands.push({
        text: visible ? label.textContent.trim() : '',
        clipped: visible && (label.scrollWidth > label.clientWidth + 1 ||
          label.getBoundingClientRect().right > b.getBoundingClientRect().right + 1)
      });
    });
    m.legend = [];
    doc.querySelectorAll('#band-legend li').forEach(function (li) { m.legend.push(li.textContent.trim()); });
    m.why_right = 0;
    doc.querySelectorAll('#sections td.why').forEach(function (td) {
      m.why_right = Math.max(m.why_right, td.getBoundingClientRect().right);
    });
  }
  var out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify(m);
  document.body.appendChild(out);
});
</script>
</body></html>
"#;

/// Chromium with the options every run of this file uses, a window `width` pixels wide and a
/// profile of its own.
fn chromium(browser: &str, width: u32, profile: &Path) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--allow-file-access-from-files",
    ])
    .arg(format!("--window-size={},2000", width.max(500) + 40))
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// The probe of `html` at `width` pixels, written next to it; its path.
fn probe(html: &Path, width: u32) -> PathBuf {
    let page = html.file_name().unwrap().to_str().unwrap();
    let probe = html.with_file_name(format!("probe-{width}.html"));
    std::fs::write(
        &probe,
        PROBE
            .replace("{page}", page)
            .replace("{width}", &width.to_string()),
    )
    .unwrap();
    probe
}

/// The page of the dropped memories measured by Chromium at `width` pixels.
fn measure(browser: &str, html: &Path, width: u32) -> serde_json::Value {
    let profile = tempfile::tempdir().unwrap();
    let out = chromium(browser, width, profile.path())
        .arg("--dump-dom")
        .arg(format!("file://{}", probe(html, width).display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8(out.stdout).unwrap();
    let at = dom
        .find("<pre id=\"probe\">")
        .unwrap_or_else(|| panic!("the probe did not run at {width} px"))
        + "<pre id=\"probe\">".len();
    let json = &dom[at..at + dom[at..].find("</pre>").unwrap()];
    let json = json
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let m: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(m.get("error").is_none(), "at {width} px: {m}");
    m
}

/// The page on a wide screen and on a phone (1,400 and 420 pixels): nothing runs off the right
/// edge, the `why` column is on screen, the bars' labels are distinct, never clipped and use
/// thousands separators, and every band, however narrow, is named in the bars' legend.
/// `STRATA_SCREENSHOT_DIR` keeps a screenshot at each width.
#[test]
fn the_explain_page_fits_a_wide_screen_and_a_phone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = match std::env::var_os("STRATA_SCREENSHOT_DIR") {
        Some(d) => {
            let d = PathBuf::from(d).join("widths");
            std::fs::create_dir_all(&d).unwrap();
            d.canonicalize().unwrap()
        }
        None => tmp.path().to_path_buf(),
    };
    let html = page(&dir);
    let Some(browser) = browser() else {
        assert!(
            std::env::var_os("STRATA_REQUIRE_BROWSER").is_none_or(|v| v != "1"),
            "STRATA_REQUIRE_BROWSER=1 but no chromium is installed (apt-get install chromium)"
        );
        #[allow(clippy::print_stderr, reason = "tell the developer what was skipped")]
        {
            eprintln!("no chromium on PATH: the layout test was skipped");
        }
        return;
    };
    for width in [1400u32, 420] {
        let m = measure(browser, &html, width);
        let inner = m["inner"].as_u64().unwrap();
        assert_eq!(inner, u64::from(width), "{m}");
        assert!(
            m["scroll"].as_u64().unwrap() <= inner,
            "at {width} px the page is wider than the window: {m}"
        );
        assert!(
            m["why_right"].as_f64().unwrap() <= inner as f64,
            "at {width} px the why column runs off the screen: {m}"
        );
        let bands = m["bands"].as_array().unwrap();
        let labels: Vec<&str> = bands
            .iter()
            .map(|b| b["text"].as_str().unwrap())
            .filter(|t| !t.is_empty())
            .collect();
        let distinct: std::collections::BTreeSet<&str> = labels.iter().copied().collect();
        assert_eq!(distinct.len(), labels.len(), "at {width} px: {labels:?}");
        for b in bands {
            assert_eq!(b["clipped"], false, "at {width} px a label is clipped: {b}");
        }
        // Every band is named in the legend, with its figure's thousands separators.
        let legend: Vec<&str> = m["legend"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert_eq!(legend.len(), bands.len(), "at {width} px: {legend:?}");
        for needle in ["3 shared: ", "5 working_memory: 6,", "free: "] {
            assert!(
                legend.iter().any(|l| l.contains(needle)),
                "at {width} px the legend lacks {needle:?}: {legend:?}"
            );
        }

        let png = dir.join(format!("explain-{width}.png"));
        let _ = std::fs::remove_file(&png);
        let profile = tempfile::tempdir().unwrap();
        let out = chromium(browser, width, profile.path())
            .arg(format!("--screenshot={}", png.display()))
            .arg(format!("file://{}", probe(&html, width).display()))
            .output()
            .unwrap();
        assert!(
            out.status.success() && png.exists(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
