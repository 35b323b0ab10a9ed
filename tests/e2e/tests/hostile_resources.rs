//! A plugin that tries to reach what it never declared (security issue #40),
//! beside the seed NodePool plugin: the real `rekon` binary, kube-sim, and
//! `tests/plugins/hostile` loaded once per trick (`hostile-<trick>.wasm`
//! with its `.settings.json`), each trick an instance of its own.
//!
//! Shows, per trick: nothing it targeted was written (no object anywhere
//! carries its mark), nothing it was not allowed to read reached it, the
//! writer counted no successful write for it, and the host said why (the
//! refusal's reason in the log, naming the field). The neighbour NodePool
//! converges as if the hostile plugins were not there, although one of them
//! declares Node with another plural.

use std::time::{Duration, Instant};

use kube_sim::SimCluster;
use rekon_e2e::{Env, EnvOptions, apply_manifests, get, http_get, mark_nodes_ready};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const TEST_TIMEOUT: Duration = Duration::from_secs(240);
const MARK: &str = "hostile.rekon.dev/reached";
const TRICK_LABEL: &str = "hostile.rekon.dev/trick";
const READ: &str = "hostile.rekon.dev/read";

/// Each trick that loads, and what the host's log must say of it (a
/// line naming the instance and containing this).
const REFUSED: &[(&str, &str)] = &[
    // The exploit: a made-up kind whose plural is `nodes`.
    ("decoy-core", "HostileDecoy"),
    ("decoy-group", "Decoy"),
    ("wrong-plural", "declared plural"),
    ("wrong-scope", "declared scope Namespaced"),
    ("name-smuggle", "may not contain '/'"),
    ("namespace-smuggle", "is not a DNS label"),
    ("unserved-version", "v9"),
];

fn metrics(env: &Env) -> String {
    http_get(env.ops_addr.expect("ops served"), "/metrics").expect("GET /metrics")
}

/// `rekon_writer_actions_total` of `plugin` by result, Events excluded.
fn writes(text: &str, plugin: &str, result: &str) -> u64 {
    let who = format!("plugin=\"{plugin}\"");
    let how = format!("result=\"{result}\"");
    text.lines()
        .filter(|l| l.starts_with("rekon_writer_actions_total{"))
        .filter(|l| l.contains(&who) && l.contains(&how) && !l.contains("action=\"event\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Every object of `plural` (in every namespace) that carries the mark.
fn marked(c: &SimCluster, api_version: &str, plural: &str) -> Vec<String> {
    c.list(api_version, plural, None, "")
        .unwrap_or_default()
        .into_iter()
        .filter(|o| {
            o.pointer(&format!("/metadata/labels/{}", MARK.replace('/', "~1")))
                .is_some()
        })
        .map(|o| format!("{plural} {}", o["metadata"]["name"]))
        .collect()
}

fn log_line_with(env: &Env, needles: &[&str]) -> bool {
    std::fs::read_to_string(env.rekon.log_path())
        .unwrap_or_default()
        .lines()
        .any(|l| needles.iter().all(|n| l.contains(n)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reaches_nothing_it_did_not_declare_and_its_neighbour_is_unaffected() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut env = Env::start(EnvOptions {
            serve_ops: true,
            ..EnvOptions::default()
        })
        .await
        .expect("start env");
        env.wait_for_crds(WAIT).await.expect("CRDs installed");
        let samples = env.paths.samples.clone();
        apply_manifests(env.main(), &std::fs::read_to_string(samples.join("nodes.yaml")).unwrap())
            .unwrap();
        mark_nodes_ready(env.main()).unwrap();
        // What the tricks aim at, besides the Nodes.
        env.main().create(
            "v1",
            "secrets",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "default"},
                   "stringData": {"password": "hunter2"}}),
        )
        .unwrap();
        env.main().create(
            "apps/v1",
            "deployments",
            Some("default"),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "namespace": "default"},
                   "spec": {"selector": {"matchLabels": {"app": "web"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
        )
        .unwrap();
        env.main().create(
            "v1",
            "configmaps",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "default"}}),
        )
        .unwrap();

        // One instance per trick: its settings, then its module.
        let hostile = env.paths.test_plugins.join("hostile.wasm");
        assert!(hostile.is_file(), "{} is missing: run `make test-plugins`", hostile.display());
        let tricks: Vec<&str> = REFUSED
            .iter()
            .map(|(t, _)| *t)
            .chain(["subresource-plural", "decoy-read", "many-watches"])
            .collect();
        for trick in &tricks {
            let base = env.plugin_dir.join(format!("hostile-{trick}"));
            std::fs::write(base.with_extension("settings.json"), json!({"trick": trick}).to_string())
                .unwrap();
        }
        for trick in &tricks {
            std::fs::copy(&hostile, env.plugin_dir.join(format!("hostile-{trick}.wasm"))).unwrap();
            env.main().create(
                "v1",
                "configmaps",
                Some("default"),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("go-{trick}"), "namespace": "default",
                                    "labels": {TRICK_LABEL: trick}}}),
            )
            .unwrap();
        }
        apply_manifests(env.main(), &std::fs::read_to_string(samples.join("nodepools.yaml")).unwrap())
            .unwrap();

        // The neighbour converges.
        env.wait_for("NodePool gpu applied to node-a", WAIT, |env| {
            let a = get(env.main(), "v1", "nodes", None, "node-a")?;
            (a.pointer("/metadata/labels/accelerator") == Some(&json!("nvidia"))).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", env.rekon.log_tail(80)));

        // Every trick was tried and refused, with its reason in the log.
        let deadline = Instant::now() + WAIT;
        loop {
            let pending: Vec<&str> = REFUSED
                .iter()
                .filter(|(trick, why)| !log_line_with(&env, &[&format!("hostile-{trick}"), why]))
                .map(|(t, _)| *t)
                .collect();
            let read_done = get(env.main(), "v1", "configmaps", Some("default"), "go-decoy-read")
                .and_then(|o| o.pointer(&format!("/metadata/annotations/{}", READ.replace('/', "~1"))).cloned());
            let load_refused = log_line_with(&env, &["hostile-subresource-plural", "nodes/status", "not a resource name"])
                && log_line_with(&env, &["hostile-many-watches", "declares 1000 watches, at most 32"]);
            if pending.is_empty() && read_done.is_some() && load_refused {
                // Nothing was read through the decoy: the Secret in the
                // same namespace stayed out of its reach.
                assert_eq!(read_done, Some(Value::String(String::new())), "decoy-read read something");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "not refused with their reason: {pending:?}; decoy-read done: {read_done:?}; \
                 subresource-plural and many-watches refused at load: {load_refused}\n{}",
                env.rekon.log_tail(120)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // Nothing anywhere carries a trick's mark, and no hostile write succeeded.
        let text = metrics(&env);
        let mut reached = Vec::new();
        reached.extend(marked(env.main(), "v1", "nodes"));
        reached.extend(marked(env.main(), "v1", "secrets"));
        reached.extend(marked(env.main(), "v1", "configmaps"));
        reached.extend(marked(env.main(), "apps/v1", "deployments"));
        assert!(reached.is_empty(), "hostile writes reached: {reached:?}");
        for trick in REFUSED.iter().map(|(t, _)| *t) {
            assert_eq!(
                writes(&text, &format!("hostile-{trick}"), "success"),
                0,
                "a write of hostile-{trick} succeeded"
            );
        }
        let secret = get(env.main(), "v1", "secrets", Some("default"), "db").unwrap();
        assert!(secret.pointer("/metadata/labels").is_none(), "{secret}");

        // The neighbour is unaffected: both pools converge fully.
        env.wait_for("both pools ready", WAIT, |env| {
            let ready = |p: &str| {
                get(env.main(), "nodes.lailin.xyz/v1", "nodepools", None, p)
                    .and_then(|o| o.pointer("/status/nodeCount").cloned())
                    == Some(json!(2))
            };
            (ready("gpu") && ready("batch")).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", env.rekon.log_tail(80)));
        let failed: Vec<String> = std::fs::read_to_string(env.rekon.log_path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("plugin=nodepool") && (l.contains("WARN") || l.contains("ERROR")))
            // The seed's own optimistic concurrency: node-c is in both
            // pools, and a patch whose resourceVersion precondition lost
            // the race is retried (it happens without hostile plugins too).
            .filter(|l| !l.contains("testing value /metadata/resourceVersion failed"))
            .map(str::to_owned)
            .collect();
        assert!(failed.is_empty(), "the neighbour failed: {failed:#?}");
        env.rekon.stop();
    })
    .await
    .expect("test timed out");
}
