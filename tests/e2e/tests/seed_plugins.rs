//! The seed plugins end to end: the real `rekon` binary with
//! `dist/plugins/*.wasm` against two kube-sim clusters (`main`, `sub`).
//!
//! Needs `cargo build -p rekon-host` and `make plugins` first (the Makefile's
//! test target does both); a missing piece fails with a clear message.

use std::time::Duration;

use kube_sim::SimCluster;
use rekon_e2e::{Env, EnvOptions, apply_manifests, complete_job, get, mark_nodes_ready, view};
use serde_json::{Value, json};

/// How long one convergence step may take.
const WAIT: Duration = Duration::from_secs(40);
/// Bound of a whole test.
const TEST_TIMEOUT: Duration = Duration::from_secs(240);
/// The demo also pushes, signs and manifests both ports (each compiles its
/// component), which under `make test`'s parallel load took up to 237 s.
const DEMO_TIMEOUT: Duration = Duration::from_secs(600);

async fn start() -> Env {
    let mut env = Env::start(EnvOptions::default())
        .await
        .expect("failed to start the e2e environment");
    env.wait_for_crds(WAIT)
        .await
        .expect("rekon run --install-crds installs the seed CRDs");
    env
}

fn job(c: &SimCluster, ns: &str, name: &str) -> Option<Value> {
    get(c, "batch/v1", "jobs", Some(ns), name)
}

fn test_obj(c: &SimCluster, ns: &str, name: &str) -> Option<Value> {
    get(c, "job.lailin.xyz/v1", "tests", Some(ns), name)
}

fn node(c: &SimCluster, name: &str) -> Value {
    get(c, "v1", "nodes", None, name).unwrap_or_else(|| panic!("node {name} exists"))
}

fn label<'a>(n: &'a Value, key: &str) -> Option<&'a str> {
    n.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

fn has_taint(n: &Value, key: &str, value: Option<&str>, effect: &str) -> bool {
    n.pointer("/spec/taints")
        .and_then(Value::as_array)
        .is_some_and(|ts| {
            ts.iter().any(|t| {
                t["key"] == key
                    && t["effect"] == effect
                    && t.get("value").and_then(Value::as_str) == value
            })
        })
}

fn pool_ready(c: &SimCluster, pool: &str) -> Option<(i64, String)> {
    let p = get(c, "nodes.lailin.xyz/v1", "nodepools", None, pool)?;
    let ready = p
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Ready")?["status"]
        .as_str()?
        .to_owned();
    Some((
        p.pointer("/status/nodeCount").and_then(Value::as_i64)?,
        ready,
    ))
}

fn rv(v: &Value) -> String {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn create_test(env: &Env, ns: &str, name: &str) {
    rekon_e2e::create_test(env.main(), ns, name).expect("create the Test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_fans_out_to_both_clusters_and_finishes_when_the_sub_job_completes() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut env = start().await;
        create_test(&env, "e2e", "t1");

        env.wait_for("the Job in main and sub", WAIT, |env| {
            (job(env.main(), "e2e", "t1").is_some() && job(env.sub(), "e2e", "t1").is_some())
                .then_some(())
        })
        .await
        .unwrap();
        assert!(
            get(env.sub(), "v1", "namespaces", None, "e2e").is_some(),
            "namespace created in sub"
        );
        let test = test_obj(env.main(), "e2e", "t1").unwrap();
        for (cluster, c) in [("main", env.main()), ("sub", env.sub())] {
            let j = job(c, "e2e", "t1").unwrap();
            assert_eq!(
                j["metadata"]["labels"]["owner.cluster"], "main",
                "{cluster}"
            );
            assert_eq!(j["metadata"]["labels"]["owner.namespace"], "e2e");
            assert_eq!(j["metadata"]["labels"]["owner.name"], "t1");
            let pod = &j["spec"]["template"]["spec"];
            assert_eq!(pod["restartPolicy"], "Never");
            assert_eq!(pod["containers"][0]["name"], "t1");
            assert_eq!(pod["containers"][0]["image"], "busybox:1.36");
            let owners = j
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if cluster == "main" {
                assert_eq!(owners.len(), 1, "main's Job is owned by the Test");
                assert_eq!(owners[0]["uid"], test["metadata"]["uid"]);
            } else {
                assert!(owners.is_empty(), "no owner reference across clusters");
            }
        }
        let finalizers = test["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            finalizers
                .iter()
                .any(|f| f == "job.lailin.xyz/fanout-cleanup"),
            "{test}"
        );

        // Both lines settled on `Pending` (a line reads `Creating` until the
        // Job is in the cache, or `Syncing` while that cluster lists): only
        // then is the Test converged.
        env.wait_for("status running with both Jobs pending", WAIT, |env| {
            let t = test_obj(env.main(), "e2e", "t1")?;
            let lines = t.pointer("/status/clusters")?.as_array()?;
            (t["status"]["phase"] == "running"
                && lines.len() == 2
                && lines.iter().all(|l| l["state"] == "Pending"))
            .then_some(())
        })
        .await
        .unwrap();

        // Converged: nothing rewrites the Test or the Jobs.
        let before: Vec<String> = [
            test_obj(env.main(), "e2e", "t1"),
            job(env.main(), "e2e", "t1"),
            job(env.sub(), "e2e", "t1"),
        ]
        .iter()
        .map(|o| rv(o.as_ref().unwrap()))
        .collect();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after: Vec<String> = [
            test_obj(env.main(), "e2e", "t1"),
            job(env.main(), "e2e", "t1"),
            job(env.sub(), "e2e", "t1"),
        ]
        .iter()
        .map(|o| rv(o.as_ref().unwrap()))
        .collect();
        assert_eq!(
            before, after,
            "a converged Test and its Jobs are not rewritten"
        );

        complete_job(env.sub(), "e2e", "t1").unwrap();
        env.wait_for("phase finished by sub", WAIT, |env| {
            let t = test_obj(env.main(), "e2e", "t1")?;
            (t["status"]["phase"] == "finished" && t["status"]["finishedCluster"] == "sub")
                .then_some(())
        })
        .await
        .unwrap();
        assert_eq!(
            view::job_state(&job(env.main(), "e2e", "t1").unwrap()),
            "Pending",
            "main's Job untouched"
        );

        // Events on the Test (events.k8s.io/v1, reported by rekon).
        let events = env
            .main()
            .list("events.k8s.io/v1", "events", Some("e2e"), "")
            .unwrap_or_default();
        let reasons: Vec<&str> = events
            .iter()
            .filter(|e| e.pointer("/regarding/name") == Some(&json!("t1")))
            .filter_map(|e| e["reason"].as_str())
            .collect();
        assert!(
            reasons.contains(&"CreatingJobs") && reasons.contains(&"Finished"),
            "events: {reasons:?}"
        );

        // Finished stays finished, even when a Job goes away.
        env.sub()
            .delete("batch/v1", "jobs", Some("e2e"), "t1")
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let t = test_obj(env.main(), "e2e", "t1").unwrap();
        assert_eq!(t["status"]["phase"], "finished");
        assert!(
            job(env.sub(), "e2e", "t1").is_none(),
            "no Job re-created after the Test finished"
        );
    })
    .await
    .expect("test timed out: likely deadlocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_test_while_sub_is_stalled_completes_once_sub_resumes() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut env = start().await;
        create_test(&env, "default", "t2");
        env.wait_for("the Job in main and sub", WAIT, |env| {
            (job(env.main(), "default", "t2").is_some()
                && job(env.sub(), "default", "t2").is_some())
            .then_some(())
        })
        .await
        .unwrap();

        env.sub().stall();
        env.wait_for(
            "the Test's status to say sub is unreachable",
            Duration::from_secs(60),
            |env| {
                let t = test_obj(env.main(), "default", "t2")?;
                let lines = t.pointer("/status/clusters")?.as_array()?.clone();
                lines
                    .iter()
                    .any(|l| l["cluster"] == "sub" && l["state"] == "Unreachable")
                    .then_some(())
            },
        )
        .await
        .unwrap();
        env.main()
            .delete("job.lailin.xyz/v1", "tests", Some("default"), "t2")
            .expect("delete the Test");
        env.wait_for("main's Job deleted while sub is stalled", WAIT, |env| {
            job(env.main(), "default", "t2").is_none().then_some(())
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let t = test_obj(env.main(), "default", "t2")
            .expect("the Test is held by its finalizer while sub is stalled");
        assert!(t.pointer("/metadata/deletionTimestamp").is_some());
        assert!(
            job(env.sub(), "default", "t2").is_some(),
            "sub could not be reached: its Job is still there"
        );

        env.sub().resume();
        env.wait_for(
            "the Test gone and sub's Job deleted",
            Duration::from_secs(90),
            |env| {
                (test_obj(env.main(), "default", "t2").is_none()
                    && job(env.sub(), "default", "t2").is_none())
                .then_some(())
            },
        )
        .await
        .unwrap();
    })
    .await
    .expect("test timed out: likely deadlocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_pools_manage_labels_taints_and_runtime_classes_without_touching_anything_else() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut env = start().await;
        let samples = env.paths.samples.clone();
        let nodes = std::fs::read_to_string(samples.join("nodes.yaml")).unwrap();
        apply_manifests(env.main(), &nodes).unwrap();
        mark_nodes_ready(env.main()).unwrap();
        // node-c (in both pools) also carries a foreign label and a cordon taint.
        env.main()
            .merge_patch(
                "v1",
                "nodes",
                None,
                "node-c",
                &json!({"metadata": {"labels": {"team": "payments"}},
                        "spec": {"unschedulable": true,
                                 "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}),
                false,
            )
            .unwrap();
        let pools = std::fs::read_to_string(samples.join("nodepools.yaml")).unwrap();
        apply_manifests(env.main(), &pools).unwrap();

        let foreign_intact = |n: &Value| {
            label(n, "team") == Some("payments")
                && label(n, "topology.kubernetes.io/zone").is_some()
                && has_taint(n, "node.kubernetes.io/unschedulable", None, "NoSchedule")
        };
        env.wait_for("both pools converged", WAIT, |env| {
            let (a, c) = (node(env.main(), "node-a"), node(env.main(), "node-c"));
            let ok = label(&a, "accelerator") == Some("nvidia")
                && has_taint(&a, "node-pool.lailin.xyz/gpu", Some("true"), "NoSchedule")
                && label(&c, "node-pool.lailin.xyz/gpu") == Some("true")
                && label(&c, "node-pool.lailin.xyz/batch") == Some("true")
                && has_taint(&c, "node-pool.lailin.xyz/gpu", Some("true"), "NoSchedule")
                && has_taint(&c, "node-pool.lailin.xyz/batch", Some("true"), "PreferNoSchedule")
                && pool_ready(env.main(), "gpu") == Some((2, "True".into()))
                && pool_ready(env.main(), "batch") == Some((2, "True".into()));
            ok.then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", view::snapshot(env.main(), env.sub()).join("\n")));
        assert!(foreign_intact(&node(env.main(), "node-c")), "{}", node(env.main(), "node-c"));
        let b = node(env.main(), "node-b");
        assert!(label(&b, "node-pool.lailin.xyz/gpu").is_none() && label(&b, "accelerator").is_none());

        let rc = get(env.main(), "node.k8s.io/v1", "runtimeclasses", None, "node-pool-gpu").expect("RuntimeClass");
        assert_eq!(rc["handler"], "runc");
        assert_eq!(rc["scheduling"]["nodeSelector"]["accelerator"], "nvidia");
        assert_eq!(rc["scheduling"]["tolerations"][0]["operator"], "Equal");
        assert_eq!(rc["scheduling"]["tolerations"][0]["key"], "node-pool.lailin.xyz/gpu");
        assert_eq!(rc["metadata"]["ownerReferences"][0]["kind"], "NodePool");

        // Converged: nodes and pools are not rewritten.
        let rvs = |env: &Env| -> Vec<String> {
            ["node-a", "node-b", "node-c"]
                .iter()
                .map(|n| rv(&node(env.main(), n)))
                .chain(["gpu", "batch"].iter().map(|p| rv(&get(env.main(), "nodes.lailin.xyz/v1", "nodepools", None, p).unwrap())))
                .collect()
        };
        let before = rvs(&env);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(before, rvs(&env), "a converged pool writes nothing");

        // The gpu pool changes (as a user would, with kubectl): a label
        // dropped, one added, the taint's value and the handler changed.
        let change = json!({"spec": {"labels": {"accelerator": null, "tier": "1"},
                                     "taints": [{"key": "node-pool.lailin.xyz/gpu", "value": "v2", "effect": "NoSchedule"}],
                                     "handler": "nvidia"}});
        env.kubectl("main", &["patch", "nodepool", "gpu", "--type", "merge", "-p", &change.to_string()])
            .expect("kubectl patch nodepool");
        env.wait_for("the gpu change on node-a and node-c", WAIT, |env| {
            let ok = ["node-a", "node-c"].iter().all(|n| {
                let n = node(env.main(), n);
                label(&n, "accelerator").is_none()
                    && label(&n, "tier") == Some("1")
                    && has_taint(&n, "node-pool.lailin.xyz/gpu", Some("v2"), "NoSchedule")
                    && !has_taint(&n, "node-pool.lailin.xyz/gpu", Some("true"), "NoSchedule")
            });
            let rc = get(env.main(), "node.k8s.io/v1", "runtimeclasses", None, "node-pool-gpu")?;
            (ok && rc["handler"] == "nvidia" && rc["scheduling"]["nodeSelector"]["tier"] == "1").then_some(())
        })
        .await
        .unwrap();
        let c = node(env.main(), "node-c");
        assert!(foreign_intact(&c), "{c}");
        assert_eq!(label(&c, "node-pool.lailin.xyz/batch"), Some("true"), "the other pool's label stays");
        assert!(has_taint(&c, "node-pool.lailin.xyz/batch", Some("true"), "PreferNoSchedule"));

        // node-a leaves the gpu pool.
        env.kubectl("main", &["label", "node", "node-a", "node-role.kubernetes.io/gpu-"])
            .expect("kubectl label node");
        env.wait_for("node-a cleaned of gpu", WAIT, |env| {
            let a = node(env.main(), "node-a");
            let clean = label(&a, "tier").is_none()
                && label(&a, "node-pool.lailin.xyz/gpu").is_none()
                && a.pointer("/spec/taints").and_then(Value::as_array).is_none_or(|t| t.is_empty());
            (clean && pool_ready(env.main(), "gpu").is_some_and(|(n, _)| n == 1)).then_some(())
        })
        .await
        .unwrap();
        assert_eq!(label(&node(env.main(), "node-a"), "topology.kubernetes.io/zone"), Some("zone-1"));

        // The batch pool is deleted: its labels and taints go, the pool goes, its RuntimeClass goes.
        env.kubectl("main", &["delete", "nodepool", "batch", "--wait=false"])
            .expect("kubectl delete nodepool");
        env.wait_for("batch cleaned up and gone", WAIT, |env| {
            let gone = get(env.main(), "nodes.lailin.xyz/v1", "nodepools", None, "batch").is_none();
            let clean = ["node-b", "node-c"].iter().all(|n| {
                let n = node(env.main(), n);
                label(&n, "node-pool.lailin.xyz/batch").is_none()
                    && !has_taint(&n, "node-pool.lailin.xyz/batch", Some("true"), "PreferNoSchedule")
            });
            (gone && clean).then_some(())
        })
        .await
        .unwrap();
        let c = node(env.main(), "node-c");
        assert!(foreign_intact(&c), "{c}");
        assert_eq!(label(&c, "tier"), Some("1"), "gpu's labels stay on node-c");
        assert!(has_taint(&c, "node-pool.lailin.xyz/gpu", Some("v2"), "NoSchedule"));
        env.wait_for("RuntimeClass node-pool-batch garbage-collected", WAIT, |env| {
            get(env.main(), "node.k8s.io/v1", "runtimeclasses", None, "node-pool-batch").is_none().then_some(())
        })
        .await
        .unwrap();
    })
    .await
    .expect("test timed out: likely deadlocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_converges_and_exits_when_asked() {
    tokio::time::timeout(DEMO_TIMEOUT, async {
        rekon_e2e::Paths::discover().expect("workspace built");
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_rekon-demo"))
            .arg("--exit-after-converge")
            .kill_on_drop(true)
            .output()
            .await
            .expect("run rekon-demo");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "demo failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        for needle in [
            "Test default/hello finished",
            "phase=finished",
            "both pools Ready",
            // The live swap through a Plugin object (needs docker-registry
            // and the chaos builds; the demo says what is missing and the
            // test fails on it).
            "Plugin chaos swapped live from v1 to v2",
            // The ports from their signed artifacts, mapped, not compiled.
            "Plugin test-fanout-ts: loaded without compiling",
            "Plugin nodepool-py: loaded without compiling",
            "kubectl --kubeconfig",
        ] {
            assert!(
                stdout.contains(needle),
                "{needle:?} missing from the demo output:\n{stdout}"
            );
        }
        // With the Rust seeds serving, the ports' code comes from their
        // precompiled layers; with the ports as the seeds
        // (`make seed-scenarios-ports`, REKON_PLUGINS) the same components
        // were compiled at the host's start, and its cache serves them.
        let path = if std::env::var_os("REKON_PLUGINS").is_some() {
            "cached"
        } else {
            "precompiled"
        };
        for name in ["test-fanout-ts", "nodepool-py"] {
            let line = format!("  {name}: its code was {path} in");
            assert!(stdout.contains(&line), "{line:?} missing:\n{stdout}");
        }
    })
    .await
    .expect("test timed out: likely deadlocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_engaged_later_gets_its_job_unless_the_test_finished() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let opts = EnvOptions {
            standby_clusters: vec!["edge".into(), "late".into()],
            ..EnvOptions::default()
        };
        let mut env = Env::start(opts)
            .await
            .expect("failed to start the e2e environment");
        env.wait_for_crds(WAIT).await.expect("CRDs installed");
        create_test(&env, "default", "t3");
        env.wait_for("the Job in main and sub", WAIT, |env| {
            (job(env.main(), "default", "t3").is_some()
                && job(env.sub(), "default", "t3").is_some())
            .then_some(())
        })
        .await
        .unwrap();
        assert!(
            job(env.sim.cluster("edge"), "default", "t3").is_none(),
            "edge is not engaged yet"
        );

        env.engage("edge").unwrap();
        env.wait_for("the Job in edge, engaged later", WAIT, |env| {
            job(env.sim.cluster("edge"), "default", "t3").map(|_| ())
        })
        .await
        .unwrap();

        complete_job(env.sim.cluster("edge"), "default", "t3").unwrap();
        env.wait_for("the Test finished by edge", WAIT, |env| {
            let t = test_obj(env.main(), "default", "t3")?;
            (t["status"]["phase"] == "finished" && t["status"]["finishedCluster"] == "edge")
                .then_some(())
        })
        .await
        .unwrap();

        env.engage("late").unwrap();
        env.wait_for("late listed as skipped", WAIT, |env| {
            let t = test_obj(env.main(), "default", "t3")?;
            let lines = t.pointer("/status/clusters")?.as_array()?.clone();
            lines
                .iter()
                .any(|l| l["cluster"] == "late" && l["state"] == "Skipped")
                .then_some(())
        })
        .await
        .unwrap();
        assert!(
            job(env.sim.cluster("late"), "default", "t3").is_none(),
            "no Job after the Test finished"
        );
    })
    .await
    .expect("test timed out: likely deadlocked");
}
