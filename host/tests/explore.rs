//! `rekon plugin explore` on the bug zoo (tests/zoo): every seeded bug is
//! found with a replayable plan and a reproducer the test kits read, every
//! fixed twin and both seeds stay quiet; the command's exit codes and its
//! messages for a bad scenario.
//!
//! Needs `make test-plugins plugins` (dist/test-plugins/zoo.wasm,
//! dist/plugins/*.wasm); a missing build fails the test with what to run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rekon::change::record::read_case;
use rekon::explore::{ExploreOptions, Report, explore};

mod explore_support;
use explore_support::render_page;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn built(rel: &str) -> PathBuf {
    let path = root().join(rel);
    assert!(
        path.is_file(),
        "{} is missing: run `make plugins test-plugins` first (tests never build plugins)",
        path.display()
    );
    path
}

fn options(
    plugin: &Path,
    scenario: &Path,
    settings: Option<PathBuf>,
    out: &Path,
) -> ExploreOptions {
    ExploreOptions {
        plugin: plugin.to_path_buf(),
        from_recording: None,
        scenario: Some(scenario.to_path_buf()),
        generate: 0,
        settings,
        // Generous: every plan of a zoo scenario runs well inside it; the
        // budget only bounds a machine much slower than expected.
        budget: Duration::from_secs(120),
        max_plans: None,
        seed: 1,
        out: out.to_path_buf(),
        replay: None,
        progress: None,
        memory_reset: rekon::plugin::MemoryReset::default(),
    }
}

fn zoo(bug: &str, variant: &str, out: &Path) -> Report {
    let dir = root().join("tests/zoo").join(bug);
    let opts = options(
        &built("dist/test-plugins/zoo.wasm"),
        &dir.join("scenario.yaml"),
        Some(dir.join(format!("{variant}.json"))),
        out,
    );
    explore(&opts).unwrap_or_else(|e| panic!("explore {bug} {variant}: {e}"))
}

/// The buggy variant is found by `strategy` (or in the reference when
/// `None`), with `oracle`; the finding replays; its cases parse; the fixed
/// twin has no finding.
fn zoo_pair(bug: &str, strategy: Option<&str>, oracle: &str) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let report = zoo(bug, "buggy", &tmp.path().join("buggy"));
    let found = report
        .findings
        .iter()
        .find(|f| f.plan.as_ref().map(|p| p.fault.strategy()) == strategy && f.oracle == oracle)
        .unwrap_or_else(|| {
            panic!(
                "{bug}: no {oracle} finding by {strategy:?}; the report:\n{}",
                report.render()
            )
        });
    let dir = found.dir.as_ref().expect("findings are written");
    assert!(dir.join("finding.txt").is_file());
    let cases: Vec<_> = std::fs::read_dir(dir.join("cases"))
        .expect("a reproducer directory")
        .map(|e| e.expect("entry").path())
        .collect();
    assert!(!cases.is_empty(), "{bug}: the reproducer keeps no case");
    for case in &cases {
        read_case(case).unwrap_or_else(|e| panic!("{}: {e}", case.display()));
    }
    if let Some(plan) = &found.plan {
        // The plan file replays to the same finding.
        let mut opts = options(
            &built("dist/test-plugins/zoo.wasm"),
            &root().join("tests/zoo").join(bug).join("scenario.yaml"),
            Some(root().join("tests/zoo").join(bug).join("buggy.json")),
            &tmp.path().join("replay"),
        );
        opts.replay = Some(dir.join("plan.json"));
        let again = explore(&opts).expect("replay");
        assert_eq!(again.plans_run, 1);
        assert!(
            again
                .findings
                .iter()
                .any(|f| f.plan.as_ref().map(|p| &p.id) == Some(&plan.id) && f.oracle == oracle),
            "{bug}: replaying {} did not find it again:\n{}",
            plan.id,
            again.render()
        );
    }
    let fixed = zoo(bug, "fixed", &tmp.path().join("fixed"));
    assert!(
        fixed.findings.is_empty(),
        "{bug}: the fixed twin has findings:\n{}",
        fixed.render()
    );
    assert!(
        fixed.plans_run > 0 || strategy.is_none(),
        "{bug}: no plan ran"
    );
    assert!(
        !fixed.budget_exhausted,
        "{bug}: the budget ended the fixed twin's run"
    );
}

/// A resize done as delete, expand, recreate; killed right after the
/// delete. Only a crash that stops the controller at once exposes it (a
/// controller that kept running would redo the delete from its cache and
/// expand the volume).
#[test]
fn an_intermediate_state_only_an_immediate_crash_exposes_is_found() {
    zoo_pair("resize-restart", Some("crash"), "end-state");
}

/// main's informer current (the Widget deleting), the copies' informers
/// behind their creates: the buggy cleanup deletes nothing and releases.
#[test]
fn a_cleanup_trusting_a_lagging_member_cache_is_found_by_stale_reads() {
    zoo_pair("cleanup-lag", Some("stale"), "end-state");
}

#[test]
fn a_status_written_before_the_work_is_found_by_a_crash() {
    zoo_pair("intermediate-status", Some("crash"), "end-state");
}

#[test]
fn a_finalizer_released_while_a_cluster_is_down_is_found() {
    zoo_pair("finalizer-unreachable", Some("cluster-down"), "end-state");
}

#[test]
fn a_generate_name_create_under_cache_lag_is_found_by_stale_reads() {
    zoo_pair("generate-name-lag", Some("stale"), "end-state");
}

#[test]
fn a_create_that_fails_forever_once_its_object_exists_is_found() {
    zoo_pair("already-exists-forever", Some("crash"), "end-state");
}

#[test]
fn a_delete_by_name_after_a_recreate_is_found_by_time_travel() {
    zoo_pair("delete-after-recreate", Some("time-travel"), "end-state");
}

#[test]
fn a_cleanup_triggered_only_by_a_transient_state_is_found_when_unobserved() {
    zoo_pair("transient-cleanup", Some("unobserved"), "end-state");
}

#[test]
fn a_status_write_on_every_reconcile_never_settles() {
    zoo_pair("status-every-reconcile", None, "fixed-point");
}

#[test]
fn a_finalizer_removed_by_list_index_is_found_by_time_travel() {
    zoo_pair("finalizer-by-index", Some("time-travel"), "end-state");
}

#[test]
fn a_full_object_write_over_another_writers_field_is_found() {
    zoo_pair("full-object-write", Some("time-travel"), "end-state");
}

#[test]
fn a_write_refused_on_every_reconcile_is_a_fixed_point_finding() {
    zoo_pair("refused-write", None, "fixed-point");
    // The finding names the writer's reason, the action and the object.
    let tmp = tempfile::tempdir().expect("temp dir");
    let report = zoo("refused-write", "buggy", tmp.path());
    let diff = &report.findings[0].diff;
    assert!(
        diff.contains("not performed") && diff.contains("namespaced kind without a namespace"),
        "{diff}"
    );
}

#[test]
fn a_decision_that_depends_on_list_order_is_found_by_shuffling() {
    zoo_pair("list-order", Some("shuffle"), "end-state");
}

#[test]
fn a_child_orphaned_by_a_crash_is_found() {
    zoo_pair("orphaned-child", Some("crash"), "end-state");
}

#[test]
fn a_write_its_own_validation_denies_is_found_in_the_reference() {
    zoo_pair("own-write-denied", None, "own-writes-admitted");
    // The finding names the object, the webhook and its message, once per
    // denial with every reconcile that made it; the JSON report says the same.
    let tmp = tempfile::tempdir().expect("temp dir");
    let report = zoo("own-write-denied", "buggy", tmp.path());
    assert_eq!(report.findings.len(), 1, "{}", report.render());
    let diff = &report.findings[0].diff;
    assert_eq!(diff.lines().count(), 1, "{diff}");
    assert!(
        diff.starts_with("main ConfigMap default/w-child (UPDATE, reconcile #")
            && diff.contains(
                "denied by child-replicas.zoo.rekon.dev (422): a child carries at most 5 replicas, not 8 [data.replicas: must be at most 5]"
            ),
        "{diff}"
    );
    let json = report.to_json();
    assert_eq!(json["findings"][0]["oracle"], "own-writes-admitted");
    assert_eq!(json["findings"][0]["strategy"], "reference");
    let checked = &json["oracles"]["own-writes-admitted"];
    assert!(checked["checked"].as_u64().unwrap() >= 2, "{checked}");
    assert_eq!(checked["findings"], 1);
    let fixed = zoo("own-write-denied", "fixed", &tmp.path().join("fixed"));
    assert!(
        fixed.oracles["own-writes-admitted"].checked >= 2,
        "the fixed twin's writes were reviewed too:\n{}",
        fixed.render()
    );
}

#[test]
fn the_widgets_own_admission_finds_nothing_in_its_writes() {
    // Widgets admits Widgets and writes only their status (a subresource
    // its rules do not cover): scenario-free, nothing to report.
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut opts = options(
        &built("dist/test-plugins/widgets.wasm"),
        Path::new("unused"),
        None,
        tmp.path(),
    );
    opts.scenario = None;
    opts.max_plans = Some(20);
    let report = explore(&opts).expect("explore widgets");
    assert!(report.findings.is_empty(), "{}", report.render());
    assert_eq!(report.oracles["own-writes-admitted"].findings, 0);
}

/// A correct plugin of `tests/zoo/correct/<name>`: no finding at all.
fn correct(name: &str) -> Report {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = root().join("tests/zoo/correct").join(name);
    let opts = options(
        &built("dist/test-plugins/zoo.wasm"),
        &dir.join("scenario.yaml"),
        Some(dir.join("settings.json")),
        tmp.path(),
    );
    let report = explore(&opts).unwrap_or_else(|e| panic!("explore correct/{name}: {e}"));
    assert!(
        report.findings.is_empty(),
        "correct/{name} is a correct plugin, yet:\n{}",
        report.render()
    );
    assert!(report.plans_run > 0, "correct/{name}: no plan ran");
    assert!(!report.budget_exhausted, "correct/{name}: budget exhausted");
    report
}

#[test]
fn deletion_decided_from_the_deletion_timestamp_is_not_reported() {
    // Stale plans ran: none served the primary without the
    // deletionTimestamp its deleting phase was decided from.
    let report = correct("deletion-timestamp");
    assert!(report.strategies["stale"].run > 0, "{}", report.render());
    assert!(
        report.strategies["time-travel"].run > 0,
        "{}",
        report.render()
    );
}

#[test]
fn a_delete_and_re_apply_with_a_finalizer_held_is_not_reported() {
    // Transient faults on the plugin's writes never hit the host's
    // finalizer patch of the recreated Widget; the unobserved plan that
    // would merge the delete and the re-apply is stopped as unreachable.
    let report = correct("recreate");
    assert!(
        report.strategies["transient"].run > 0,
        "{}",
        report.render()
    );
    assert!(
        report.strategies["unobserved"].unreachable > 0,
        "{}",
        report.render()
    );
}

#[test]
fn pods_with_the_default_token_mount_are_not_reported() {
    let report = correct("pod-token");
    assert!(report.plans_run > 5, "{}", report.render());
}

#[test]
fn the_seeds_and_cm_sync_have_no_finding() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for (file, dir) in [
        ("dist/plugins/test_fanout.wasm", "plugins/test-fanout"),
        ("dist/plugins/nodepool.wasm", "plugins/nodepool"),
        // A plugin written like one from outside the project: a finalizer
        // held across a delete and a re-apply of the same name, a cluster
        // down while its cleanup waits.
        ("dist/test-plugins/cm-sync.wasm", "tests/plugins/cm-sync"),
    ] {
        let opts = options(
            &built(file),
            &root().join(dir).join("explore/scenario.yaml"),
            None,
            &tmp.path().join(dir.replace('/', "-")),
        );
        let report = explore(&opts).unwrap_or_else(|e| panic!("explore {file}: {e}"));
        assert!(
            report.plans_run > 10,
            "{file}: only {} plans",
            report.plans_run
        );
        assert!(
            report.findings.is_empty(),
            "{file} has findings:\n{}",
            report.render()
        );
    }
}

fn rekon(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rekon"))
        .args(args)
        .output()
        .expect("run rekon")
}

#[test]
fn the_command_exits_0_1_or_2_and_names_the_bad_step_and_field() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let zoo = built("dist/test-plugins/zoo.wasm");
    let dir = root().join("tests/zoo/orphaned-child");
    let scenario = dir.join("scenario.yaml");
    let out = tmp.path().join("out");
    let run = |variant: &str, extra: &[&str]| {
        let settings = dir.join(format!("{variant}.json"));
        let mut args = vec![
            "plugin",
            "explore",
            zoo.to_str().expect("utf-8"),
            "--scenario",
            scenario.to_str().expect("utf-8"),
            "--settings",
            settings.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        rekon(&args)
    };
    let fixed = run("fixed", &[]);
    assert_eq!(
        fixed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&fixed.stderr)
    );
    assert!(String::from_utf8_lossy(&fixed.stdout).contains("no finding"));
    let buggy = run("buggy", &["--json"]);
    assert_eq!(buggy.status.code(), Some(1));
    let report: serde_json::Value =
        serde_json::from_slice(&buggy.stdout).expect("--json prints one JSON document");
    assert!(report["findings"].as_array().is_some_and(|f| !f.is_empty()));
    assert!(report["strategies"]["crash"]["run"].as_u64() > Some(0));
    assert!(report["timeToFirstFindingMs"].as_u64().is_some());
    let plan = report["findings"][0]["planFile"]
        .as_str()
        .expect("a plan file");
    let replayed = run("buggy", &["--replay", plan]);
    assert_eq!(
        replayed.status.code(),
        Some(1),
        "the replayed plan finds it again"
    );

    // A bad scenario: exit 2, the step and the field named.
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "clusters: [main]\nsteps:\n- settle: {}\n- delete: {cluster: main, kind: ConfigMap, name: x}\n",
    )
    .expect("write");
    let out = rekon(&[
        "plugin",
        "explore",
        zoo.to_str().expect("utf-8"),
        "--scenario",
        bad.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("step 2: `delete`: missing field `apiVersion`"),
        "{err}"
    );
}

// The explorer's HTML report, read the way a person reads it: rendered by
// a real headless browser (Debian's chromium, installed by
// `scripts/setup.sh`; a missing browser fails the test), it shows the same
// findings, strategies and counts as `--json`, marks the faulted reconcile,
// and every link it has points at a file written beside it.

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
    let json: serde_json::Value =
        serde_json::from_slice(&run.stdout).expect("--json prints one document");
    let page = out.join("report.html");
    assert_eq!(json["html"].as_str(), Some(page.to_str().unwrap()));
    let screenshot = tmp.path().join("report.png");
    let dom = render_page(&page, &screenshot);
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
    let links = explore_support::assert_page_says_what_the_json_says(&dom, &json, &out);
    assert!(links >= 2 * findings.len(), "{links} links");
}
