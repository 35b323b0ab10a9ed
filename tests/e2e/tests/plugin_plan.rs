//! `rekon plugin plan`: the dry run reports what a plugin would do and
//! writes nothing. Runs the real binary with `dist/plugins/nodepool.wasm`
//! against a kube-sim cluster.

use std::process::Command;
use std::time::Duration;

use kube_sim::Sim;
use rekon_e2e::{Paths, apply_manifests};
use serde_json::Value;

#[tokio::test]
async fn plan_reports_the_node_patches_and_writes_nothing() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let paths = Paths::discover().expect("built workspace");
        let sim = Sim::start(&["main"]).await.expect("kube-sim starts");
        let main = sim.cluster("main");
        for file in [
            "base/crds/nodepools.nodes.lailin.xyz.yaml",
            "samples/nodes.yaml",
            "samples/nodepools.yaml",
        ] {
            let yaml =
                std::fs::read_to_string(paths.root.join("deploy").join(file)).expect("manifest");
            apply_manifests(main, &yaml).expect("manifests apply");
        }
        let before = main.current_rv();

        let kubeconfig = sim.kubeconfig_path().to_owned();
        let plugin = paths.plugins.join("nodepool.wasm");
        let rekon = paths.rekon.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(rekon)
                .args(["plugin", "plan"])
                .arg(plugin)
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["--context", "main", "--sync-timeout", "20", "-o", "json"])
                .output()
        })
        .await
        .expect("join")
        .expect("rekon runs");
        assert!(
            out.status.success(),
            "rekon plugin plan failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let plan: Value = serde_json::from_slice(&out.stdout).expect("plan is JSON");
        assert_eq!(plan["plugin"], "nodepool");
        let reconciles = plan["reconciles"].as_array().expect("reconciles");
        let pools: Vec<&str> = reconciles
            .iter()
            .map(|r| r["request"]["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(pools, ["batch", "gpu"], "every pool is planned, sorted");
        let text = plan.to_string();
        // The pools would label their nodes and create their RuntimeClasses.
        assert!(text.contains("node-pool.lailin.xyz/gpu"), "{text}");
        assert!(text.contains("node-pool-gpu"), "{text}");
        assert!(
            reconciles.iter().all(|r| r.get("error").is_none()),
            "{text}"
        );

        // A dry run: not a single write reached the cluster.
        assert_eq!(main.current_rv(), before, "plan must not write");
        let node = main
            .get("v1", "nodes", None, "node-a")
            .expect("node-a exists");
        assert!(
            node.pointer("/metadata/labels/node-pool.lailin.xyz~1gpu")
                .is_none(),
            "plan must not label nodes"
        );
        sim.shutdown().await;
    })
    .await
    .expect("plan test timed out (likely deadlocked)");
}
