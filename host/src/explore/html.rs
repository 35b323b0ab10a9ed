//! The campaign's report as one self-contained HTML page (`--out
//! DIR/report.html`): a summary table per strategy and per oracle, then per
//! finding the fault, the timeline of the reconciles kept as its
//! reproducer (the faulted one marked) with what each read and wrote per
//! cluster, and the end-state diff, with links to the plan and case files
//! beside it. No script, no external resource: it opens from disk and can
//! be attached to a ticket as it is.
//!
//! Written by hand (a few `format!`s with one escaping function) rather
//! than with a template engine: the page is one table per section and a
//! new dependency would not make it shorter.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::probe::outcome_line;
use super::report::{Finding, Report};
use crate::change::record::{Case, CaseOutcome, Read};

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}\
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}\
th{background:#f3f3f3}td.n{text-align:right}\
tr.fault td{background:#fff1f0;font-weight:600}\
pre{background:#f7f7f7;padding:.8em;overflow-x:auto}\
section.finding{border-top:2px solid #c33;margin-top:2em}\
.ok{color:#26734d}.bad{color:#b3261e}li.generated{color:#35507a}";

/// Escapes text for HTML element content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A path relative to the report's directory, for a link.
fn link(out: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(out).unwrap_or(path);
    rel.components()
        .map(|c| esc(&c.as_os_str().to_string_lossy()))
        .collect::<Vec<_>>()
        .join("/")
}

/// The page for `report`, whose files were written under `out`.
#[must_use]
pub fn render(report: &Report, out: &Path) -> String {
    let json = report.to_json();
    let mut page = String::new();
    let title = format!("rekon plugin explore: {} {}", report.plugin, report.version);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        esc(&title),
        esc(&title)
    );
    let verdict = if report.findings.is_empty() {
        "<p class=\"ok\" id=\"verdict\">no finding</p>".to_owned()
    } else {
        format!(
            "<p class=\"bad\" id=\"verdict\">{} finding(s)</p>",
            report.findings.len()
        )
    };
    page.push_str(&verdict);
    let _ = write!(
        page,
        "\n<table id=\"campaign\"><tr><th>scenario</th><td>{}</td></tr><tr><th>seed</th><td>{}</td></tr>\
<tr><th>reference reconciles</th><td>{}</td></tr><tr><th>plans run</th><td id=\"plans-run\">{}</td></tr>\
<tr><th>plans per second</th><td>{:.1}</td></tr><tr><th>elapsed</th><td>{} ms</td></tr>\
<tr><th>first finding after</th><td>{}</td></tr><tr><th>budget exhausted</th><td>{}</td></tr></table>\n",
        esc(&report.scenario.display().to_string()),
        report.seed,
        report.reference_reconciles,
        report.plans_run,
        report.plans_per_second(),
        report.elapsed.as_millis(),
        report
            .time_to_first_finding
            .map_or("-".to_owned(), |d| format!("{} ms", d.as_millis())),
        report.budget_exhausted
    );
    strategies_table(&mut page, &json);
    oracles_table(&mut page, report);
    steps_list(&mut page, report);
    for e in &report.errors {
        let _ = writeln!(page, "<p class=\"bad\">plan error: {}</p>", esc(e));
    }
    for (i, f) in report.findings.iter().enumerate() {
        finding_section(&mut page, i, f, out);
    }
    page.push_str("</body></html>\n");
    page
}

/// One row per strategy, one column per count the JSON report has (so a
/// count added there shows here too).
fn strategies_table(page: &mut String, json: &Value) {
    let Some(strategies) = json["strategies"].as_object() else {
        return;
    };
    let mut columns: Vec<&str> = Vec::new();
    for counts in strategies.values() {
        for key in counts.as_object().into_iter().flat_map(|o| o.keys()) {
            if !columns.contains(&key.as_str()) {
                columns.push(key);
            }
        }
    }
    page.push_str("<h2>Strategies</h2>\n<table id=\"strategies\"><tr><th>strategy</th>");
    for c in &columns {
        let _ = write!(page, "<th>{}</th>", esc(c));
    }
    page.push_str("</tr>\n");
    for (name, counts) in strategies {
        let _ = write!(page, "<tr><td>{}</td>", esc(name));
        for c in &columns {
            let _ = write!(
                page,
                "<td class=\"n\" data-strategy=\"{}\" data-count=\"{}\">{}</td>",
                esc(name),
                esc(c),
                counts[*c].as_u64().unwrap_or(0)
            );
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table>\n");
}

/// One row per oracle that failed or ran fault-free checks: findings it
/// failed first, findings it failed too, and for the fault-free oracles
/// (consistency, differential) the checkpoints it checked.
fn oracles_table(page: &mut String, report: &Report) {
    let mut by: BTreeMap<&str, (usize, usize, Option<usize>)> = BTreeMap::new();
    for (oracle, counts) in &report.oracles {
        by.entry(oracle).or_default().2 = Some(counts.checked);
    }
    for f in &report.findings {
        by.entry(f.oracle).or_default().0 += 1;
        for o in &f.also {
            by.entry(o).or_default().1 += 1;
        }
    }
    page.push_str(
        "<h2>Oracles</h2>\n<table id=\"oracles\"><tr><th>oracle</th><th>first to fail</th><th>also failed</th><th>fault-free checks</th></tr>\n",
    );
    for (oracle, (first, also, checked)) in &by {
        let _ = writeln!(
            page,
            "<tr data-oracle=\"{}\"><td>{}</td><td class=\"n\">{first}</td><td class=\"n\">{also}</td><td class=\"n\">{}</td></tr>",
            esc(oracle),
            esc(oracle),
            checked.map_or("-".to_owned(), |n| n.to_string())
        );
    }
    page.push_str("</table>\n");
}

/// The scenario's steps, the generated ones marked (a generated scenario
/// is written beside the page as `scenario.yaml`).
fn steps_list(page: &mut String, report: &Report) {
    let from = report.steps.len() - report.generated_steps.min(report.steps.len());
    let _ = write!(
        page,
        "<h2>Scenario</h2>\n<p>{} step(s), {} generated{}</p>\n<ol id=\"steps\">",
        report.steps.len(),
        report.generated_steps,
        if report.generated_steps > 0 {
            " (written to <a href=\"scenario.yaml\">scenario.yaml</a>; replay with <code>--scenario</code>)"
        } else {
            ""
        }
    );
    for (i, label) in report.steps.iter().enumerate() {
        let _ = write!(
            page,
            "<li{}>{}</li>",
            if i >= from {
                " class=\"generated\""
            } else {
                ""
            },
            esc(label)
        );
    }
    page.push_str("</ol>\n");
    if !report.refused_inputs.is_empty() {
        page.push_str(
            "<p>Generated inputs the API server refused, left out of every run:</p>\n<ul id=\"refused\">",
        );
        for r in &report.refused_inputs {
            let _ = write!(page, "<li>{}</li>", esc(r));
        }
        page.push_str("</ul>\n");
    }
}

fn finding_section(page: &mut String, i: usize, f: &Finding, out: &Path) {
    let id = f
        .plan
        .as_ref()
        .map_or_else(|| format!("reference-{}", i + 1), |p| p.id.clone());
    let strategy = f.plan.as_ref().map_or("reference", |p| p.fault.strategy());
    let _ = write!(
        page,
        "<section class=\"finding\" id=\"finding-{}\" data-plan=\"{}\" data-oracle=\"{}\">\n<h2>[{}] {}</h2>\n<table><tr><th>strategy</th><td>{}</td></tr><tr><th>fault</th><td>{}</td></tr>",
        i + 1,
        esc(&id),
        esc(f.oracle),
        esc(f.oracle),
        esc(&id),
        esc(strategy),
        esc(&f.fault)
    );
    if let Some(r) = &f.reconcile {
        let _ = write!(page, "<tr><th>injected at</th><td>{}</td></tr>", esc(r));
    }
    if !f.also.is_empty() {
        let _ = write!(
            page,
            "<tr><th>also failed</th><td>{}</td></tr>",
            esc(&f.also.join(", "))
        );
    }
    if let Some(dir) = &f.dir {
        let mut links = Vec::new();
        if f.plan.is_some() {
            links.push(format!(
                "<a class=\"plan\" href=\"{}\">plan.json</a> (replay with <code>--replay</code>)",
                link(out, &dir.join("plan.json"))
            ));
        }
        links.push(format!(
            "<a href=\"{}\">finding.txt</a>",
            link(out, &dir.join("finding.txt"))
        ));
        links.push(format!(
            "<a href=\"{}/\">cases/</a> (the reproducer, for any test kit)",
            link(out, &dir.join("cases"))
        ));
        let _ = write!(
            page,
            "<tr><th>files</th><td>{}</td></tr>",
            links.join(" · ")
        );
    }
    page.push_str("</table>\n");
    timeline(page, f);
    let _ = write!(
        page,
        "<h3>End state and oracles</h3>\n<pre class=\"diff\">{}</pre>\n</section>\n",
        esc(&f.diff)
    );
}

/// The reproducer's reconciles in order: the key, the phase, what each read
/// and wrote per cluster, the outcome; the faulted one marked.
fn timeline(page: &mut String, f: &Finding) {
    if f.cases.is_empty() {
        return;
    }
    page.push_str(
        "<h3>Timeline</h3>\n<table class=\"timeline\"><tr><th>#</th><th>request</th><th>phase</th><th>reads per cluster</th><th>writes per cluster</th><th>outcome</th></tr>\n",
    );
    let faulted = f.reconcile.as_deref().unwrap_or_default();
    for (n, case) in f.cases.iter().enumerate() {
        let r = &case.request;
        let key = format!(
            "{}/{}/{}",
            r.cluster,
            r.namespace.as_deref().unwrap_or_default(),
            r.name
        );
        // The reproducer starts at the faulted reconcile when there is one.
        let marked = n == 0 && !faulted.is_empty() && faulted.ends_with(&key);
        let _ = writeln!(
            page,
            "<tr{}><td class=\"n\">{}</td><td>{}{}</td><td>{:?}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if marked { " class=\"fault\"" } else { "" },
            n + 1,
            esc(&key),
            if marked { " (fault)" } else { "" },
            case.phase,
            esc(&reads_per_cluster(case)),
            esc(&writes_per_cluster(case)),
            esc(&outcome_line(case))
        );
    }
    page.push_str("</table>\n");
}

fn reads_per_cluster(case: &Case) -> String {
    let mut by: BTreeMap<&str, BTreeMap<String, usize>> = BTreeMap::new();
    for read in &case.reads {
        let (cluster, what) = match read {
            Read::Get {
                cluster, resource, ..
            } => (cluster.as_str(), format!("get {}", resource.kind)),
            Read::List {
                cluster, resource, ..
            } => (cluster.as_str(), format!("list {}", resource.kind)),
            #[allow(unreachable_patterns)]
            _ => continue,
        };
        *by.entry(cluster).or_default().entry(what).or_default() += 1;
    }
    by.iter()
        .map(|(cluster, whats)| {
            let list: Vec<String> = whats
                .iter()
                .map(|(w, n)| {
                    if *n > 1 {
                        format!("{w} ×{n}")
                    } else {
                        w.clone()
                    }
                })
                .collect();
            format!("{cluster}: {}", list.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Each action as `verb Kind ns/name`, grouped by its cluster.
fn writes_per_cluster(case: &Case) -> String {
    let CaseOutcome::Ok { actions, .. } = &case.outcome else {
        return String::new();
    };
    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for action in actions {
        let Some((verb, body)) = action.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        let cluster = body["cluster"]
            .as_str()
            .or_else(|| body["target"]["cluster"].as_str())
            .unwrap_or("?")
            .to_owned();
        let (kind, ns, name) = match body.get("object") {
            Some(obj) => (
                obj["kind"].as_str().unwrap_or("?").to_owned(),
                obj["metadata"]["namespace"].as_str().map(str::to_owned),
                obj["metadata"]["name"]
                    .as_str()
                    .or_else(|| obj["metadata"]["generateName"].as_str())
                    .unwrap_or("?")
                    .to_owned(),
            ),
            None => (
                body["target"]["resource"]["kind"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned(),
                body["target"]["namespace"].as_str().map(str::to_owned),
                body["target"]["name"].as_str().unwrap_or("?").to_owned(),
            ),
        };
        let object = match ns {
            Some(ns) => format!("{ns}/{name}"),
            None => name,
        };
        by.entry(cluster)
            .or_default()
            .push(format!("{verb} {kind} {object}"));
    }
    by.iter()
        .map(|(cluster, list)| format!("{cluster}: {}", list.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }
}
