//! One behaviour, three languages: the seed plugins' ports to TypeScript
//! (`plugins/test-fanout-ts`, `@rekon/sdk`) and Python
//! (`plugins/nodepool-py`, `rekon_sdk`) decide exactly what the Rust
//! seeds decide. The Rust builds run on two kube-sim clusters with `rekon
//! run --record`: a Test fans out, completes in `sub` and is deleted;
//! node pools label and taint nodes, one is deleted. Then `rekon plugin
//! replay` runs each port against every recorded case of its seed:
//! identical, case by case. `rekon plugin inspect` shows the same
//! registration for port and seed.
//!
//! Needs `cargo build -p rekon-host`, `make plugins` and `make sdk-plugins`
//! (the ports' components in `dist/sdk-plugins/`); a missing component fails
//! the test saying which target builds it.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use rekon_e2e::{
    Env, EnvOptions, apply_manifests, complete_job, get, mark_nodes_ready, output_text as text,
    recorded_cases as cases,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const TEST_TIMEOUT: Duration = Duration::from_secs(300);

fn rekon(env: &Env, args: &[&str]) -> Output {
    rekon_e2e::rekon_cli(&env.paths, args)
}

/// The built component of a port (`make sdk-plugins`).
fn port(env: &Env, file: &str) -> PathBuf {
    let path = env.paths.root.join("dist/sdk-plugins").join(file);
    assert!(
        path.is_file(),
        "{} is missing: run `make sdk-plugins` first",
        path.display()
    );
    path
}

/// The registration `rekon plugin inspect` reads from `wasm`, without the
/// file's digest.
fn inspect(env: &Env, wasm: &Path) -> Value {
    let out = rekon(
        env,
        &[
            "plugin",
            "inspect",
            "-o",
            "json",
            &wasm.display().to_string(),
        ],
    );
    assert!(
        out.status.success(),
        "inspect {}: {}",
        wasm.display(),
        text(&out)
    );
    let mut v: Value = serde_json::from_slice(&out.stdout).expect("inspect prints JSON");
    v.as_object_mut().map(|o| o.remove("digest"));
    v
}

/// Replays every case of `dir` against `wasm`; asserts all identical and
/// returns how many there were.
fn replay_identical(env: &Env, wasm: &Path, dir: &Path) -> usize {
    let out = rekon(
        env,
        &[
            "plugin",
            "replay",
            &wasm.display().to_string(),
            &dir.display().to_string(),
        ],
    );
    let report = text(&out);
    let n = cases(dir).len();
    assert!(out.status.success(), "{report}");
    assert_eq!(report.matches("identical  ").count(), n, "{report}");
    assert!(
        !report.contains("DIFFERS") && !report.contains("INVALID"),
        "{report}"
    );
    // `REKON_CASES_OUT=DIR` keeps the cases (to refresh a port's golden
    // cases, `test/cases` / `tests/cases`, which its native tests replay).
    if let Some(out) = std::env::var_os("REKON_CASES_OUT") {
        let out = Path::new(&out).join(dir.file_name().unwrap_or_default());
        std::fs::create_dir_all(&out).expect("create REKON_CASES_OUT");
        for case in cases(dir) {
            std::fs::copy(&case, out.join(case.file_name().unwrap_or_default()))
                .expect("copy case");
        }
    }
    n
}

async fn record_seeds(recorded: &Path) -> Env {
    let mut env = Env::start(EnvOptions {
        extra_args: vec!["--record".into(), recorded.display().to_string()],
        ..EnvOptions::default()
    })
    .await
    .expect("failed to start the e2e environment");
    env.wait_for_crds(WAIT).await.expect("seed CRDs installed");
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_fanout_port_decides_what_the_rust_seed_decides() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let recorded = tempfile::tempdir().unwrap();
        let mut env = record_seeds(recorded.path()).await;
        let wasm = port(&env, "test_fanout_ts.wasm");
        apply_manifests(env.main(), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: e2e\n").unwrap();
        rekon_e2e::apply_object(
            env.main(),
            json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                   "metadata": {"name": "t1", "namespace": "e2e"}, "spec": {"image": "busybox:1.36"}}),
        )
        .unwrap();
        env.wait_for("the fan-out Jobs", WAIT, |env| {
            (get(env.main(), "batch/v1", "jobs", Some("e2e"), "t1").is_some()
                && get(env.sub(), "batch/v1", "jobs", Some("e2e"), "t1").is_some())
            .then_some(())
        })
        .await
        .unwrap();
        complete_job(env.sub(), "e2e", "t1").unwrap();
        env.wait_for("t1 finished", WAIT, |env| {
            let t = get(env.main(), "job.lailin.xyz/v1", "tests", Some("e2e"), "t1")?;
            (t.pointer("/status/phase")? == "finished").then_some(())
        })
        .await
        .unwrap();
        env.main()
            .delete("job.lailin.xyz/v1", "tests", Some("e2e"), "t1")
            .expect("delete t1");
        env.wait_for("t1 gone after cleanup", WAIT, |env| {
            get(env.main(), "job.lailin.xyz/v1", "tests", Some("e2e"), "t1")
                .is_none()
                .then_some(())
        })
        .await
        .unwrap();
        env.rekon.stop();

        let seed = env.paths.plugins.join("test_fanout.wasm");
        assert_eq!(inspect(&env, &wasm), inspect(&env, &seed), "same registration");
        let dir = recorded.path().join("test-fanout");
        let n = replay_identical(&env, &wasm, &dir);
        assert!(n >= 4, "apply, finish and cleanup were recorded: {n} cases");
    })
    .await
    .expect("test timed out: likely deadlocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_nodepool_port_decides_what_the_rust_seed_decides() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let recorded = tempfile::tempdir().unwrap();
        let mut env = record_seeds(recorded.path()).await;
        let wasm = port(&env, "nodepool_py.wasm");
        let samples = env.paths.samples.clone();
        apply_manifests(
            env.main(),
            &std::fs::read_to_string(samples.join("nodes.yaml")).unwrap(),
        )
        .unwrap();
        mark_nodes_ready(env.main()).unwrap();
        apply_manifests(
            env.main(),
            &std::fs::read_to_string(samples.join("nodepools.yaml")).unwrap(),
        )
        .unwrap();
        let ready = |pool: &Value| {
            pool.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        };
        env.wait_for("both pools Ready", WAIT, |env| {
            let gpu = get(env.main(), "nodes.lailin.xyz/v1", "nodepools", None, "gpu")?;
            let batch = get(
                env.main(),
                "nodes.lailin.xyz/v1",
                "nodepools",
                None,
                "batch",
            )?;
            (ready(&gpu) && ready(&batch)).then_some(())
        })
        .await
        .unwrap();
        env.main()
            .delete("nodes.lailin.xyz/v1", "nodepools", None, "batch")
            .expect("delete pool batch");
        env.wait_for("pool batch gone after cleanup", WAIT, |env| {
            get(
                env.main(),
                "nodes.lailin.xyz/v1",
                "nodepools",
                None,
                "batch",
            )
            .is_none()
            .then_some(())
        })
        .await
        .unwrap();
        env.rekon.stop();

        let seed = env.paths.plugins.join("nodepool.wasm");
        assert_eq!(
            inspect(&env, &wasm),
            inspect(&env, &seed),
            "same registration"
        );
        let dir = recorded.path().join("nodepool");
        let n = replay_identical(&env, &wasm, &dir);
        assert!(
            n >= 4,
            "pools converging and a cleanup were recorded: {n} cases"
        );
    })
    .await
    .expect("test timed out: likely deadlocked");
}
