//! One plugin cannot hold the host (issue 41), with the real `rekon`
//! binary: a plugin sleeping in WASI (chaos's `sleep` mode:
//! `std::thread::sleep`, an hour) is stopped at its call deadline, named
//! in the log, and SIGTERM drains and exits well within the Deployment's
//! grace period (`terminationGracePeriodSeconds: 30` in deploy/base).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rekon_e2e::{Env, EnvOptions};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
const TEST_TIMEOUT: Duration = Duration::from_secs(180);
/// The grace period of deploy/base/deployment.yaml, halved: a host that
/// needs more than this to drain a 2 s call is not draining it.
const DRAIN_BOUND: Duration = Duration::from_secs(15);

fn copy_atomically(from: &Path, to: &Path) {
    let part = to.with_extension("part");
    std::fs::copy(from, &part).expect("copy plugin");
    std::fs::rename(&part, to).expect("rename plugin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_exits_with_a_plugin_sleeping_in_wasi() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut env = Env::start(EnvOptions {
            plugins: vec!["nodepool.wasm".into()],
            ..EnvOptions::default()
        })
        .await
        .expect("failed to start the e2e environment");
        copy_atomically(
            &env.paths.test_plugins.join("chaos-v1.wasm"),
            &env.plugin_dir.join("chaos.wasm"),
        );
        env.wait_for("chaos loaded", WAIT, |env| {
            let log = std::fs::read_to_string(env.rekon.log_path()).unwrap_or_default();
            log.lines()
                .any(|l| l.contains("plugin loaded") && l.contains("chaos"))
                .then_some(())
        })
        .await
        .expect("chaos loads");
        for i in 0..3 {
            env.main()
                .create(
                    "v1",
                    "configmaps",
                    Some("default"),
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("sleeper-{i}"), "namespace": "default"},
                        "data": {"mode": "sleep"}}),
                )
                .expect("create a sleeper");
        }
        // Each sleeper's call is stopped at the 2 s deadline and retried
        // with backoff: sleepers are in their calls from now on.
        env.wait_for("a sleeper stopped at its deadline", WAIT, |env| {
            let log = std::fs::read_to_string(env.rekon.log_path()).unwrap_or_default();
            log.lines()
                .any(|l| l.contains("plugin chaos timed out in reconcile"))
                .then_some(())
        })
        .await
        .expect("the deadline holds in WASI");
        tokio::time::sleep(Duration::from_millis(300)).await;

        let term = Instant::now();
        let sent = Command::new("kill")
            .args(["-TERM", &env.rekon.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        while env.rekon.is_running() && term.elapsed() < DRAIN_BOUND {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let took = term.elapsed();
        assert!(
            !env.rekon.is_running(),
            "rekon still runs {took:?} after SIGTERM with a sleeping plugin; log:\n{}",
            env.rekon.log_tail(40)
        );
        assert_eq!(
            env.rekon.exit_code(),
            Some(0),
            "log:\n{}",
            env.rekon.log_tail(40)
        );
        let log = std::fs::read_to_string(env.rekon.log_path()).unwrap_or_default();
        assert!(log.contains("shutting down: finishing in-flight reconciles"));
        eprintln!("rekon exited {took:?} after SIGTERM with three plugins sleeping in WASI");
    })
    .await
    .expect("the test timed out: likely deadlocked");
}
