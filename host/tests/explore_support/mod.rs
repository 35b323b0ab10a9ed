//! Shared by the explore tests: the HTML report read the way a person
//! reads it, rendered by a real headless browser (Debian's chromium,
//! installed by `scripts/setup.sh`; a missing browser fails the test), and
//! checked against what `--json` says.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// The page as the browser's DOM after rendering, and a screenshot of it.
pub fn render_page(page: &Path, screenshot: &Path) -> String {
    let chromium = ["chromium", "/usr/bin/chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("Debian's chromium is installed (scripts/setup.sh installs it)");
    let profile = tempfile::tempdir().expect("temp dir");
    let common = |cmd: &mut Command| {
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()));
    };
    let url = format!("file://{}", page.display());
    let mut dump = Command::new(chromium);
    common(&mut dump);
    let dom = dump
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        dom.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let mut shot = Command::new(chromium);
    common(&mut shot);
    let out = shot
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg("--window-size=1280,2000")
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium --screenshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(dom.stdout).expect("utf-8 DOM")
}

/// Asserts that the rendered page `dom` (of a report written under `out`)
/// says what `json` (`--json`) says: the verdict and its finding count,
/// every strategy count, the plans run; and that every link leads to a
/// file or folder written beside the page. Returns how many links it has.
pub fn assert_page_says_what_the_json_says(
    dom: &str,
    json: &serde_json::Value,
    out: &Path,
) -> usize {
    let findings = json["findings"].as_array().expect("findings").len();
    let verdict = if findings == 0 {
        "id=\"verdict\">no finding<".to_owned()
    } else {
        format!("id=\"verdict\">{findings} finding(s)<")
    };
    assert!(
        dom.contains(&verdict),
        "verdict: {verdict} is not on the page"
    );
    // Every strategy count of --json is in the table.
    for (strategy, counts) in json["strategies"].as_object().expect("strategies") {
        for (count, value) in counts.as_object().expect("counts") {
            let cell = format!(
                "data-strategy=\"{strategy}\" data-count=\"{count}\">{}<",
                value.as_u64().expect("a number")
            );
            assert!(dom.contains(&cell), "missing {cell}");
        }
    }
    assert!(dom.contains(&format!(
        "<td id=\"plans-run\">{}</td>",
        json["plansRun"].as_u64().unwrap()
    )));
    // The fault-free oracles' rows: the findings each failed first, and
    // the checkpoints each checked.
    for (oracle, counts) in json["oracles"].as_object().expect("oracles") {
        let first = json["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter(|f| f["oracle"] == oracle.as_str())
            .count();
        let row =
            format!("<tr data-oracle=\"{oracle}\"><td>{oracle}</td><td class=\"n\">{first}</td>");
        assert!(dom.contains(&row), "missing {row}");
        let checked = format!(
            "<td class=\"n\">{}</td></tr>",
            counts["checked"].as_u64().expect("checked")
        );
        let at = dom.find(&row).unwrap_or_default();
        let line = dom[at..].split("</tr>").next().unwrap_or_default();
        assert!(
            format!("{line}</tr>").ends_with(&checked),
            "{oracle}: {line} does not end with {checked}"
        );
    }
    // Every link leads to a file or folder written beside the page.
    let mut links = 0;
    for part in dom.split("href=\"").skip(1) {
        let href = part.split('"').next().unwrap();
        let target = out.join(href.trim_end_matches('/'));
        assert!(target.exists(), "link {href} leads nowhere");
        links += 1;
    }
    links
}
