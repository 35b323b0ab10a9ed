//! Both seed plugins under faults, measured: 200 Nodes in 10 NodePools and
//! 50 Tests over `main` and `sub` while watches are dropped, `main`'s
//! history is compacted, 500/429/503 answers are injected and `sub` stalls.
//! Nothing is lost, every Test's status shows the stall while it lasts, the
//! world converges after, and the writes per converged object are printed
//! (rekon's own `rekon_writer_actions_total`, Events excluded).

use std::time::{Duration, Instant};

use kube_sim::{FaultRule, SimCluster};
use rekon_e2e::{Env, EnvOptions, apply_object, get, http_get};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
const TEST_TIMEOUT: Duration = Duration::from_secs(240);
const NODES: usize = 200;
const POOLS: usize = 10;
const TESTS: usize = 50;

/// Writes rekon performed (successful or not), Events excluded.
fn writes(addr: std::net::SocketAddr) -> u64 {
    http_get(addr, "/metrics")
        .expect("GET /metrics")
        .lines()
        .filter(|l| l.starts_with("rekon_writer_actions_total{") && !l.contains("action=\"event\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

fn test_states(c: &SimCluster, i: usize) -> Vec<(String, String)> {
    get(
        c,
        "job.lailin.xyz/v1",
        "tests",
        Some("load"),
        &format!("t{i}"),
    )
    .and_then(|t| t.pointer("/status/clusters").cloned())
    .and_then(|v| v.as_array().cloned())
    .unwrap_or_default()
    .iter()
    .map(|l| {
        (
            l["cluster"].as_str().unwrap_or_default().to_owned(),
            l["state"].as_str().unwrap_or_default().to_owned(),
        )
    })
    .collect()
}

fn node_converged(c: &SimCluster, i: usize) -> bool {
    let pool = i % POOLS;
    get(c, "v1", "nodes", None, &format!("n{i}")).and_then(|n| {
        n.pointer(&format!("/metadata/labels/load.rekon.dev~1pool-{pool}"))
            .cloned()
    }) == Some(json!("true"))
}

async fn until(env: &Env, what: &str, check: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < WAIT,
            "timed out waiting for: {what}\n--- rekon log ---\n{}",
            env.rekon.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_converge_through_faults_and_report_a_stalled_cluster() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let opts = EnvOptions {
            serve_ops: true,
            log_filter: "info".into(),
            extra_args: vec!["--probe-interval".into(), "1".into()],
            ..EnvOptions::default()
        };
        let mut env = Env::start(opts).await.expect("failed to start the e2e environment");
        env.wait_for_crds(WAIT).await.expect("CRDs installed");
        let (main, sub) = (env.main(), env.sub());
        let addr = env.ops_addr.expect("ops served");
        let started = Instant::now();
        for p in 0..POOLS {
            apply_object(main, json!({"apiVersion": "nodes.lailin.xyz/v1", "kind": "NodePool",
                "metadata": {"name": format!("pool-{p}")},
                "spec": {"labels": {format!("load.rekon.dev/pool-{p}"): "true"}, "handler": "runc"}}))?;
        }
        for i in 0..NODES {
            main.create("v1", "nodes", None, json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("n{i}"), "labels": {format!("node-role.kubernetes.io/pool-{}", i % POOLS): ""}}}))
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        apply_object(main, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "load"}}))?;
        for i in 0..TESTS {
            apply_object(main, json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                "metadata": {"name": format!("t{i}"), "namespace": "load"}, "spec": {"image": "busybox:1.36"}}))?;
        }
        // Faults while it converges.
        main.close_watches();
        sub.close_watches();
        main.compact();
        main.fail_next(FaultRule::new(500, 20).verb("patch"));
        main.fail_next(FaultRule::new(429, 20).verb("patch").retry_after(1));
        sub.fail_next(FaultRule::new(503, 20).verb("create"));
        until(&env, "every node labelled and every Test fanned out", || {
            (0..NODES).all(|i| node_converged(main, i))
                && (0..TESTS).all(|i| {
                    let name = format!("t{i}");
                    get(main, "batch/v1", "jobs", Some("load"), &name).is_some()
                        && get(sub, "batch/v1", "jobs", Some("load"), &name).is_some()
                })
        })
        .await;
        let converged = started.elapsed();

        // sub stalls: every Test must say so, promptly.
        sub.stall();
        let stalled = Instant::now();
        let shown = until(&env, "every Test's status shows sub unreachable", || {
            (0..TESTS).all(|i| {
                test_states(main, i)
                    .iter()
                    .any(|(c, s)| c == "sub" && s == "Unreachable")
            })
        })
        .await;
        // main keeps converging meanwhile.
        main.merge_patch("nodes.lailin.xyz/v1", "nodepools", None, "pool-0",
            &json!({"spec": {"labels": {"load.rekon.dev/pool-0": "true", "load.rekon.dev/extra": "yes"}}}), false)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let during = until(&env, "pool-0's change reaches its nodes while sub is stalled", || {
            (0..NODES).step_by(POOLS).all(|i| {
                get(main, "v1", "nodes", None, &format!("n{i}"))
                    .and_then(|n| n.pointer("/metadata/labels/load.rekon.dev~1extra").cloned())
                    == Some(json!("yes"))
            })
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3).saturating_sub(stalled.elapsed())).await;
        sub.resume();
        let recovered = until(&env, "every Test's status shows sub back", || {
            (0..TESTS).all(|i| {
                !test_states(main, i)
                    .iter()
                    .any(|(c, s)| c == "sub" && s == "Unreachable")
            })
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let total = writes(addr);
        // Nodes + pools + RuntimeClasses + Tests + Jobs (main and sub).
        let objects = NODES + POOLS + POOLS + TESTS + 2 * TESTS;
        println!(
            "fault workload: converged in {converged:?} through dropped watches, compaction and 60 injected 5xx/429; \
             sub stall shown in every Test's status after {shown:?}; main kept converging ({during:?}); \
             statuses back {recovered:?} after resume; {total} writes for {objects} objects = {:.2} per converged object",
            total as f64 / objects as f64
        );
        env.rekon.stop();
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}
