//! A third plugin, written like one from outside the project
//! (`tests/plugins/cm-sync`): it watches its own primary kind (ConfigMap) in
//! every cluster and writes that kind too. The real `rekon` binary, two
//! kube-sim clusters, the plugin dropped into the directory at runtime.
//!
//! Shows: only the primary scope (labelled ConfigMaps of `main`) ever gets
//! the finalizer or is reconciled as a primary — also after a hot reload, a
//! health blip of `sub` and periodic resyncs; unrelated objects delete at
//! once; leaving the selector cleans up and releases; removing the plugin
//! reports the finalizers left behind and `rekon plugin release` lists and
//! removes them.

use std::process::Command;
use std::time::{Duration, Instant};

use kube_sim::SimCluster;
use rekon_e2e::{Env, EnvOptions, get, http_get, with_custom_section};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);
const TEST_TIMEOUT: Duration = Duration::from_secs(240);
const SOURCE_LABEL: &str = "sync.rekon.dev/source";
const FINALIZER: &str = "sync.rekon.dev/cleanup";

fn cm(c: &SimCluster, name: &str) -> Option<Value> {
    get(c, "v1", "configmaps", Some("apps"), name)
}

fn finalizers(c: &SimCluster, name: &str) -> Vec<String> {
    cm(c, name)
        .and_then(|o| o.pointer("/metadata/finalizers").cloned())
        .and_then(|f| serde_json::from_value(f).ok())
        .unwrap_or_default()
}

fn create_cm(c: &SimCluster, name: &str, labels: Value, data: Value) {
    c.create(
        "v1",
        "configmaps",
        Some("apps"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "apps", "labels": labels}, "data": data}),
    )
    .unwrap_or_else(|e| panic!("create configmap {name}: {e}"));
}

async fn until(env: &Env, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}\n--- rekon log ---\n{}",
            env.rekon.log_tail(60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Nothing outside the primary scope carries the finalizer, and nothing was
/// copied that only a reconcile of a non-primary would have copied.
fn assert_scope_held(env: &Env) {
    let (main, sub) = (env.main(), env.sub());
    assert!(
        finalizers(main, "unrelated").is_empty(),
        "unrelated got the finalizer"
    );
    assert!(
        finalizers(sub, "bystander").is_empty(),
        "an object of sub got the finalizer"
    );
    assert!(
        finalizers(sub, "source").is_empty(),
        "the copy got the finalizer"
    );
    assert!(
        cm(sub, "unrelated").is_none(),
        "unrelated was reconciled as a primary"
    );
    assert!(
        cm(main, "bystander").is_none(),
        "an object of sub was reconciled as a primary"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_plugin_touches_only_its_primary_scope() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let opts = EnvOptions {
            plugins: vec![],
            install_crds: false,
            serve_ops: true,
            extra_args: vec![
                "--resync-period".into(),
                "3".into(),
                "--probe-interval".into(),
                "1".into(),
            ],
            ..EnvOptions::default()
        };
        let env = Env::start(opts)
            .await
            .expect("failed to start the e2e environment");
        let plugin = env.paths.test_plugins.join("cm-sync.wasm");
        assert!(
            plugin.is_file(),
            "{} is missing: run `make test-plugins`",
            plugin.display()
        );
        let (main, sub) = (env.main(), env.sub());
        for c in [main, sub] {
            c.create(
                "v1",
                "namespaces",
                None,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}),
            )
            .expect("namespace");
        }
        create_cm(
            main,
            "source",
            json!({SOURCE_LABEL: "true"}),
            json!({"k": "v"}),
        );
        create_cm(main, "unrelated", json!({"app": "x"}), json!({"a": "b"}));
        // Labelled like a source, but in sub: not a primary there.
        create_cm(sub, "bystander", json!({SOURCE_LABEL: "true"}), json!({}));

        let installed = env.plugin_dir.join("cm-sync.wasm");
        std::fs::copy(&plugin, &installed)?;
        until(&env, "the copy in sub", || {
            cm(sub, "source").and_then(|c| c.pointer("/data/k").cloned()) == Some(json!("v"))
        })
        .await;
        assert_eq!(finalizers(main, "source"), vec![FINALIZER]);
        assert_scope_held(&env);

        // Hot reload (a rebuilt file), a health blip of sub, resyncs (every 3 s).
        let tmp = env.plugin_dir.join("cm-sync.wasm.part");
        std::fs::write(
            &tmp,
            with_custom_section(&std::fs::read(&plugin)?, "rekon-e2e-rebuild", b"2"),
        )?;
        std::fs::rename(&tmp, &installed)?;
        until(&env, "the rebuilt plugin swapped in", || {
            std::fs::read_to_string(env.rekon.log_path())
                .is_ok_and(|l| l.contains("replaced plugin"))
        })
        .await;
        sub.stall();
        until(&env, "sub reported unreachable", || {
            std::fs::read_to_string(env.rekon.log_path())
                .is_ok_and(|l| l.contains("cluster unreachable"))
        })
        .await;
        sub.resume();
        main.merge_patch(
            "v1",
            "configmaps",
            Some("apps"),
            "source",
            &json!({"data": {"k": "v2"}}),
            false,
        )?;
        until(&env, "the change reaches sub after the blip", || {
            cm(sub, "source").and_then(|c| c.pointer("/data/k").cloned()) == Some(json!("v2"))
        })
        .await;
        tokio::time::sleep(Duration::from_secs(4)).await; // at least one resync
        assert!(
            std::fs::read_to_string(env.rekon.log_path())?.contains("periodic resync"),
            "no resync happened"
        );
        assert_scope_held(&env);

        // Unrelated objects delete at once (no finalizer of ours holds them).
        main.delete("v1", "configmaps", Some("apps"), "unrelated")?;
        assert!(
            cm(main, "unrelated").is_none(),
            "unrelated did not delete at once"
        );

        // No reconcile ever ran for a key in sub (not a primary cluster).
        let addr = env.ops_addr.expect("ops served");
        let metrics = http_get(addr, "/metrics").expect("GET /metrics");
        assert!(
            metrics.contains("controller=\"cm-sync\""),
            "no cm-sync metrics:\n{metrics}"
        );
        let in_sub: Vec<&str> = metrics
            .lines()
            .filter(|l| {
                l.starts_with("controller_runtime_reconcile_total")
                    && l.contains("controller=\"cm-sync\"")
                    && l.contains("cluster=\"sub\"")
            })
            .collect();
        assert!(
            in_sub.is_empty(),
            "reconciled as primaries in sub: {in_sub:?}"
        );

        // Leaving the selector: cleanup everywhere, then the finalizer goes.
        main.merge_patch(
            "v1",
            "configmaps",
            Some("apps"),
            "source",
            &json!({"metadata": {"labels": {SOURCE_LABEL: null}}}),
            false,
        )?;
        until(&env, "the copy removed and the finalizer released", || {
            cm(sub, "source").is_none() && finalizers(main, "source").is_empty()
        })
        .await;
        tokio::time::sleep(Duration::from_secs(4)).await; // a resync later: still not a primary
        assert!(
            finalizers(main, "source").is_empty(),
            "the finalizer came back"
        );
        assert!(cm(sub, "source").is_none(), "copied again after leaving");

        // Back in scope, then the plugin is removed: the finalizer stays,
        // the host says how many objects hold it, `rekon plugin release` frees them.
        main.merge_patch(
            "v1",
            "configmaps",
            Some("apps"),
            "source",
            &json!({"metadata": {"labels": {SOURCE_LABEL: "true"}}}),
            false,
        )?;
        until(&env, "back in scope", || {
            finalizers(main, "source") == vec![FINALIZER]
        })
        .await;
        std::fs::remove_file(&installed)?;
        until(&env, "the unload reports the finalizers left", || {
            std::fs::read_to_string(env.rekon.log_path())
                .is_ok_and(|l| l.contains("plugin removed while objects still carry its finalizer"))
        })
        .await;
        assert_eq!(
            finalizers(main, "source"),
            vec![FINALIZER],
            "removing the plugin stripped its finalizer"
        );
        let release = |extra: &[&str]| {
            let out = Command::new(&env.paths.rekon)
                .args([
                    "plugin",
                    "release",
                    "cm-sync",
                    "--finalizer",
                    FINALIZER,
                    "--kubeconfig",
                ])
                .arg(&env.kubeconfig)
                .args(["--context", "main", "--cluster", "sub=sub", "-o", "json"])
                .args(extra)
                .output()
                .expect("run rekon plugin release");
            assert!(
                out.status.success(),
                "release failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice::<Value>(&out.stdout).expect("release prints JSON")
        };
        let listed = release(&[]);
        let objects = listed["objects"].as_array().cloned().unwrap_or_default();
        assert_eq!(objects.len(), 1, "{listed}");
        assert_eq!(objects[0]["name"], "source");
        assert_eq!(objects[0]["released"], false);
        assert_eq!(
            finalizers(main, "source"),
            vec![FINALIZER],
            "listing must not release"
        );
        let released = release(&["--remove"]);
        assert_eq!(released["objects"][0]["released"], true, "{released}");
        assert!(finalizers(main, "source").is_empty());
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}
