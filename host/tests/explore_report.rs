//! The explorer's HTML report, read the way a person reads it: rendered by
//! a real headless browser (Debian's chromium, installed by
//! `scripts/setup.sh`; a missing browser fails the test), it shows the
//! same findings, strategies and counts as `--json`, marks the faulted
//! reconcile, and every link it has points at a file written beside it.
//!
//! Needs `make test-plugins` (dist/test-plugins/zoo.wasm).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn built(rel: &str) -> PathBuf {
    let path = root().join(rel);
    assert!(
        path.is_file(),
        "{} is missing: run `make test-plugins` first (tests never build plugins)",
        path.display()
    );
    path
}

/// The page as the browser's DOM after rendering, and a screenshot of it.
fn render(page: &Path, screenshot: &Path) -> String {
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

#[test]
fn the_html_report_renders_and_says_what_the_json_says() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("out");
    let dir = root().join("tests/zoo/orphaned-child");
    let run = Command::new(env!("CARGO_BIN_EXE_rekon"))
        .args(["plugin", "explore"])
        .arg(built("dist/test-plugins/zoo.wasm"))
        .arg("--scenario")
        .arg(dir.join("scenario.yaml"))
        .arg("--settings")
        .arg(dir.join("buggy.json"))
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .output()
        .expect("run rekon");
    assert_eq!(
        run.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json: Value = serde_json::from_slice(&run.stdout).expect("--json prints one document");
    let page = out.join("report.html");
    assert_eq!(json["html"].as_str(), Some(page.to_str().unwrap()));
    let screenshot = tmp.path().join("report.png");
    let dom = render(&page, &screenshot);
    let png = std::fs::read(&screenshot).expect("a screenshot was taken");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "the page rendered to an image"
    );

    // The same findings as --json, each with its plan and oracle.
    let findings = json["findings"].as_array().expect("findings");
    assert!(!findings.is_empty());
    assert!(
        dom.contains(&format!("{} finding(s)", findings.len())),
        "verdict"
    );
    for f in findings {
        let plan = f["plan"].as_str().expect("a plan");
        let oracle = f["oracle"].as_str().expect("an oracle");
        assert!(
            dom.contains(&format!("data-plan=\"{plan}\" data-oracle=\"{oracle}\"")),
            "finding {plan} ({oracle}) is not on the page"
        );
    }
    // The faulted reconcile is marked in a timeline.
    assert!(
        dom.contains("class=\"fault\""),
        "no faulted reconcile marked"
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
    // Every link leads to a file or folder written beside the page.
    let mut links = 0;
    for part in dom.split("href=\"").skip(1) {
        let href = part.split('"').next().unwrap();
        let target = out.join(href.trim_end_matches('/'));
        assert!(target.exists(), "link {href} leads nowhere");
        links += 1;
    }
    assert!(links >= 2 * findings.len(), "{links} links");
}
