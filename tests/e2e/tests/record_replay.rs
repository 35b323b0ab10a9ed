//! Changing a plugin safely, end to end with the real `rekon` binary on two
//! kube-sim clusters: `rekon run --record` writes real reconciles of the
//! seed plugins as cases; `rekon plugin replay` finds them identical with
//! the same build and reports exactly the differing cases of a build that
//! behaves differently (the chaos test plugin's `v2` feature); a
//! `*.shadow.wasm` version runs beside the serving one, counts and keeps
//! its divergences and writes nothing; `rekon plugin promote` makes it serve;
//! `rekon plugin explore --from-recording` explores what was recorded.
//!
//! Needs `cargo build -p rekon-host`, `make plugins` and `make test-plugins`.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use rekon_e2e::{
    Env, EnvOptions, apply_manifests, get, http_get, mark_nodes_ready, output_text as text,
    recorded_cases as cases,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);
const TEST_TIMEOUT: Duration = Duration::from_secs(240);
const ANNOTATION: &str = "chaos.rekon.dev/version";

fn rekon(env: &Env, args: &[&str]) -> Output {
    rekon_e2e::rekon_cli(&env.paths, args)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn configmap(env: &Env, name: &str, mode: &str) {
    env.main()
        .create(
            "v1",
            "configmaps",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "default"},
                   "data": {"mode": mode}}),
        )
        .expect("create ConfigMap");
}

fn mark(env: &Env, name: &str) -> Option<String> {
    get(env.main(), "v1", "configmaps", Some("default"), name)?
        .pointer("/metadata/annotations")?
        .get(ANNOTATION)?
        .as_str()
        .map(str::to_owned)
}

fn resource_version(env: &Env, name: &str) -> String {
    get(env.main(), "v1", "configmaps", Some("default"), name)
        .and_then(|o| o.pointer("/metadata/resourceVersion").cloned())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn copy_atomically(from: &Path, to: &Path) {
    let part = to.with_extension("part");
    std::fs::copy(from, &part).expect("copy plugin");
    std::fs::rename(&part, to).expect("rename plugin");
}

/// The paths of the chaos plugin's v1 and v2 builds.
fn chaos_builds(env: &Env) -> (String, String) {
    let path = |f: &str| env.paths.test_plugins.join(f).display().to_string();
    (path("chaos-v1.wasm"), path("chaos-v2.wasm"))
}

/// Starts rekon with the chaos plugin (v1) only, and `extra_args`.
async fn start_chaos(extra_args: Vec<String>, serve_ops: bool) -> Env {
    let env = Env::start(EnvOptions {
        plugins: Vec::new(),
        install_crds: false,
        serve_ops,
        extra_args,
        ..EnvOptions::default()
    })
    .await
    .expect("failed to start the e2e environment");
    copy_atomically(
        &env.paths.test_plugins.join("chaos-v1.wasm"),
        &env.plugin_dir.join("chaos.wasm"),
    );
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_seed_reconciles_replay_identically_with_the_same_build() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let recorded = tempfile::tempdir().unwrap();
        let mut env = Env::start(EnvOptions {
            extra_args: vec!["--record".into(), recorded.path().display().to_string()],
            ..EnvOptions::default()
        })
        .await
        .expect("failed to start the e2e environment");
        env.wait_for_crds(WAIT).await.expect("seed CRDs installed");
        apply_manifests(
            env.main(),
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: e2e\n",
        )
        .unwrap();
        rekon_e2e::apply_object(
            env.main(),
            json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                   "metadata": {"name": "t1", "namespace": "e2e"}, "spec": {"image": "busybox:1.36"}}),
        )
        .unwrap();
        let samples = env.paths.samples.clone();
        apply_manifests(env.main(), &std::fs::read_to_string(samples.join("nodes.yaml")).unwrap()).unwrap();
        mark_nodes_ready(env.main()).unwrap();
        apply_manifests(env.main(), &std::fs::read_to_string(samples.join("nodepools.yaml")).unwrap()).unwrap();
        env.wait_for("the fan-out Jobs and a Ready gpu pool", WAIT, |env| {
            let jobs = get(env.main(), "batch/v1", "jobs", Some("e2e"), "t1").is_some()
                && get(env.sub(), "batch/v1", "jobs", Some("e2e"), "t1").is_some();
            let pool = get(env.main(), "nodes.lailin.xyz/v1", "nodepools", None, "gpu")?;
            let ready = pool.pointer("/status/conditions")?.as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
            (jobs && ready).then_some(())
        })
        .await
        .unwrap();
        env.wait_for("cases of both seed plugins", WAIT, |_| {
            (cases(&recorded.path().join("test-fanout")).len() >= 2
                && cases(&recorded.path().join("nodepool")).len() >= 2)
                .then_some(())
        })
        .await
        .unwrap();

        // A case is self-contained: build, request, time, reads, outcome.
        let fanout = cases(&recorded.path().join("test-fanout"));
        let case = read_json(&fanout[fanout.len() - 1]);
        assert_eq!(case["format"], "rekon.dev/case/v1");
        assert_eq!(case["plugin"]["name"], "test-fanout");
        assert_eq!(case["plugin"]["digest"].as_str().map(str::len), Some(64));
        assert_eq!(case["request"]["name"], "t1");
        assert!(case["requestTime"]["seconds"].as_i64() > Some(0), "{case}");
        assert!(!case["reads"].as_array().unwrap().is_empty(), "{case}");
        assert!(case["outcome"]["ok"]["actions"].is_array(), "{case}");

        // Stopped first: the cases replayed are all the cases there are.
        env.rekon.stop();
        for (file, name) in [("test_fanout.wasm", "test-fanout"), ("nodepool.wasm", "nodepool")] {
            let plugin = env.paths.plugins.join(file).display().to_string();
            let dir = recorded.path().join(name).display().to_string();
            let out = rekon(&env, &["plugin", "replay", &plugin, &dir]);
            let report = text(&out);
            assert!(out.status.success(), "{report}");
            let n = cases(&recorded.path().join(name)).len();
            assert_eq!(report.matches("identical  ").count(), n, "{report}");
            assert!(!report.contains("DIFFERS") && !report.contains("INVALID"), "{report}");
        }

        // What ran in production, explored: the recording becomes the
        // scenario (written beside the findings, runnable again), and the
        // seed plugin, correct, has no finding under its faults.
        for (file, name, input) in [
            ("nodepool.wasm", "nodepool", "kind: NodePool"),
            ("test_fanout.wasm", "test-fanout", "kind: Test"),
        ] {
            let plugin = env.paths.plugins.join(file).display().to_string();
            let dir = recorded.path().join(name).display().to_string();
            let out_dir = recorded.path().join(format!("explore-{name}"));
            let out = rekon(
                &env,
                &[
                    "plugin", "explore", &plugin, "--from-recording", &dir, "--budget", "20",
                    "--json", "--out", &out_dir.display().to_string(),
                ],
            );
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert_eq!(out.status.code(), Some(0), "{name}: {stdout}\n{}", text(&out));
            let report: Value = serde_json::from_str(&stdout).expect("--json prints JSON");
            assert!(report["plansRun"].as_u64() > Some(0), "{name}: {report}");
            let scenario = std::fs::read_to_string(out_dir.join("scenario.yaml"))
                .expect("the recording's scenario is written");
            assert!(scenario.contains(input), "{name}: {scenario}");
            assert!(scenario.contains("settle"), "{name}: {scenario}");
            let again = rekon(
                &env,
                &[
                    "plugin", "explore", &plugin, "--scenario",
                    &out_dir.join("scenario.yaml").display().to_string(), "--budget", "5",
                    "--out", &recorded.path().join(format!("again-{name}")).display().to_string(),
                ],
            );
            assert_eq!(again.status.code(), Some(0), "{name}: {}", text(&again));
        }
    })
    .await
    .expect("test timed out: likely deadlocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_against_a_differing_build_reports_only_the_differing_cases() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let recorded = tempfile::tempdir().unwrap();
        let mut env = start_chaos(
            vec!["--record".into(), recorded.path().display().to_string()],
            false,
        )
        .await;
        // `ok` writes a version mark (v1 or v2 by build); `calm` does nothing
        // in either build.
        configmap(&env, "ok-a", "ok");
        configmap(&env, "ok-b", "ok");
        configmap(&env, "calm-a", "calm");
        let dir = recorded.path().join("chaos");
        env.wait_for("v1 marks and cases of every ConfigMap", WAIT, |env| {
            let names: Vec<String> = cases(&dir)
                .iter()
                .filter_map(|p| read_json(p)["request"]["name"].as_str().map(str::to_owned))
                .collect();
            (mark(env, "ok-a").as_deref() == Some("v1")
                && mark(env, "ok-b").as_deref() == Some("v1")
                && ["ok-a", "ok-b", "calm-a"]
                    .iter()
                    .all(|n| names.iter().any(|m| m == n)))
            .then_some(())
        })
        .await
        .unwrap();
        env.rekon.stop();

        let dir_arg = dir.display().to_string();
        let (v1, v2) = chaos_builds(&env);
        let same = rekon(&env, &["plugin", "replay", &v1, &dir_arg]);
        assert!(same.status.success(), "{}", text(&same));
        assert!(!text(&same).contains("DIFFERS"), "{}", text(&same));

        let other = rekon(&env, &["plugin", "replay", &v2, &dir_arg]);
        let report = text(&other);
        assert!(
            !other.status.success(),
            "a difference fails the replay: {report}"
        );
        let mut differing = 0;
        let mut identical = 0;
        for case in cases(&dir) {
            let body = read_json(&case);
            let name = body["request"]["name"].as_str().unwrap().to_owned();
            let wrote_mark = body["outcome"]["ok"]["actions"]
                .as_array()
                .is_some_and(|a| !a.is_empty());
            let line = report
                .lines()
                .find(|l| {
                    l.ends_with(&case.display().to_string())
                        || l.contains(&format!("{} (", case.display()))
                })
                .unwrap_or_else(|| panic!("no line for {}: {report}", case.display()));
            if name.starts_with("ok-") && wrote_mark {
                assert!(
                    line.starts_with("DIFFERS") && line.contains("(actions)"),
                    "{line}\n{report}"
                );
                differing += 1;
            } else {
                assert!(line.starts_with("identical"), "{line}\n{report}");
                identical += 1;
            }
        }
        assert!(differing >= 2 && identical >= 1, "{report}");
        // The diff is per action, in YAML: the recorded v1 against v2.
        assert!(report.contains("action #1:"), "{report}");
        let changed = |sign: &str, line: &str| {
            report
                .lines()
                .any(|l| l.trim_start().starts_with(sign) && l.trim_end().ends_with(line))
        };
        assert!(changed("- ", "chaos.rekon.dev/version: v1"), "{report}");
        assert!(changed("+ ", "chaos.rekon.dev/version: v2"), "{report}");
        assert!(
            report.contains("name: ok-a"),
            "the action's target is shown: {report}"
        );
        assert!(report.contains(&format!("{differing} differ")), "{report}");

        let allowed = rekon(&env, &["plugin", "replay", "--allow-diff", &v2, &dir_arg]);
        assert!(allowed.status.success(), "{}", text(&allowed));
    })
    .await
    .expect("test timed out: likely deadlocked");
}

fn metric(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_version_diverges_without_writing_and_promote_makes_it_serve() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let shadow_cases = tempfile::tempdir().unwrap();
        let mut env = start_chaos(
            vec![
                "--shadow-cases".into(),
                shadow_cases.path().display().to_string(),
                // Every primary is reconciled (and shadowed) every second.
                "--resync-period".into(),
                "1".into(),
            ],
            true,
        )
        .await;
        configmap(&env, "ok-a", "ok");
        configmap(&env, "calm-a", "calm");
        env.wait_for("v1 serves", WAIT, |env| {
            (mark(env, "ok-a").as_deref() == Some("v1")).then_some(())
        })
        .await
        .unwrap();
        let rv = resource_version(&env, "ok-a");

        copy_atomically(
            &env.paths.test_plugins.join("chaos-v2.wasm"),
            &env.plugin_dir.join("chaos.shadow.wasm"),
        );
        let addr = env.ops_addr.unwrap();
        let prefix = r#"rekon_shadow_reconciles_total{plugin="chaos",kind="actions"}"#;
        let dir = shadow_cases.path().join("chaos");
        // calm-a decides the same in both versions, ok-a does not.
        let identical = r#"rekon_shadow_reconciles_total{plugin="chaos",kind="identical"}"#;
        env.wait_for(
            "a counted and recorded divergence, and an identical run",
            WAIT,
            |_| {
                let body = http_get(addr, "/metrics").ok()?;
                (metric(&body, prefix) >= 1.0
                    && metric(&body, identical) >= 1.0
                    && !cases(&dir).is_empty())
                .then_some(())
            },
        )
        .await
        .unwrap();
        // Every divergence is ok-a's, kept with both decisions.
        for case in cases(&dir) {
            let body = read_json(&case);
            assert_eq!(body["request"]["name"], "ok-a", "{body}");
            assert_eq!(body["plugin"]["version"], "1.0.0");
            assert_eq!(body["shadow"]["plugin"]["version"], "2.0.0");
            assert_eq!(body["shadow"]["divergence"], "actions");
        }
        // The shadow wrote nothing: ok-a still carries v1, unchanged.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(mark(&env, "ok-a").as_deref(), Some("v1"));
        assert_eq!(
            resource_version(&env, "ok-a"),
            rv,
            "the shadow never writes"
        );
        // A kept divergence replays: identical with the serving build,
        // differing with the shadow build.
        let case = cases(&dir)[0].display().to_string();
        let (v1, v2) = chaos_builds(&env);
        assert!(
            rekon(&env, &["plugin", "replay", &v1, &case])
                .status
                .success()
        );
        assert!(
            !rekon(&env, &["plugin", "replay", &v2, &case])
                .status
                .success()
        );

        let dir_arg = env.plugin_dir.display().to_string();
        let out = rekon(&env, &["plugin", "promote", "chaos", "--plugins", &dir_arg]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(!env.plugin_dir.join("chaos.shadow.wasm").exists());
        env.wait_for("v2 serves after promote", WAIT, |env| {
            (mark(env, "ok-a").as_deref() == Some("v2")).then_some(())
        })
        .await
        .unwrap();
        env.wait_for("the shadow stopped", WAIT, |env| {
            std::fs::read_to_string(env.rekon.log_path())
                .ok()?
                .contains("shadow version removed")
                .then_some(())
        })
        .await
        .unwrap();
        env.rekon.stop();
    })
    .await
    .expect("test timed out: likely deadlocked");
}
