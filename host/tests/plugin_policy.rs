//! Operator permission policy against the chaos test plugin (`make
//! test-plugins`): the policy narrows what chaos declared (`get` and `patch`
//! of ConfigMaps in the primary cluster), at every reconcile, across a hot
//! reload, in `plugin inspect` and in the generated RBAC.

mod plugin_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plugin_support::*;
use rekon::action::{Outcome, Phase};
use rekon::commands::inspect::OutputFormat;
use rekon::plugin::{
    CallError, LoadError, LoadedPlugin, PluginRegistry, PluginRuntime, Policy, RegistryEvent,
    RuntimeConfig,
};

const DEADLINE: Duration = Duration::from_secs(60);

const DENY_CONFIGMAP_PATCH: &str = r#"
plugins:
  chaos:
    deny:
      - {group: "", kind: ConfigMap, verbs: [patch]}
"#;

/// Writes `text` as a policy file in `dir` and loads it the way `rekon run
/// --policy` does.
fn policy_file(dir: &Path, text: &str) -> (PathBuf, Arc<Policy>) {
    let path = dir.join("policy.yaml");
    std::fs::write(&path, text).unwrap();
    let policy = Policy::from_file(&path).expect("policy loads");
    (path, Arc::new(policy))
}

fn runtime_with(policy: Option<Arc<Policy>>) -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 32 << 20,
        call_timeout: Duration::from_millis(500),
        max_concurrent_instances: 8,
        policy,
        ..RuntimeConfig::default()
    })
    .expect("runtime starts")
}

async fn reconcile(plugin: &LoadedPlugin, name: &str) -> Result<Outcome, CallError> {
    tokio::time::timeout(
        DEADLINE,
        plugin.reconcile(
            request(name),
            Phase::Live,
            FakeCache::new(),
            SystemTime::now(),
        ),
    )
    .await
    .expect("reconcile did not return: likely deadlocked")
}

/// Asserts `err` is the operator policy refusing chaos's `ok` merge patch.
fn assert_policy_refused(err: &CallError, policy_path: &Path, why: &str) {
    match err {
        CallError::Forbidden {
            plugin,
            action,
            resource,
            cluster,
            reason,
        } => {
            assert_eq!(
                (plugin.as_str(), action.as_str(), resource.as_str()),
                ("chaos", "patch", "ConfigMap")
            );
            assert_eq!(cluster, "main");
            assert!(
                reason.contains(&format!(
                    "refused by operator policy {}",
                    policy_path.display()
                )) && reason.contains(why),
                "{reason}"
            );
        }
        other => panic!("expected the operator policy to refuse, got {other:?}"),
    }
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn policy_denying_configmap_patch_refuses_the_ok_patch() {
    let dir = tempfile::tempdir().unwrap();
    let (path, policy) = policy_file(dir.path(), DENY_CONFIGMAP_PATCH);

    // Without the policy the merge patch on itself is allowed.
    let free = runtime_with(None)
        .load_file(chaos_v1())
        .expect("chaos loads");
    assert!(free.policy().is_none());
    let outcome = reconcile(&free, "ok").await.expect("ok reconciles");
    assert_eq!(outcome.actions.len(), 1);

    let narrowed = runtime_with(Some(policy))
        .load_file(chaos_v1())
        .expect("chaos loads under the policy");
    // Declared stays as declared; the effective permissions lost `patch`.
    assert_eq!(
        narrowed.registration().permissions[0].verbs,
        vec!["get", "patch"]
    );
    assert_eq!(
        narrowed.effective_registration().permissions[0].verbs,
        vec!["get"]
    );
    let err = reconcile(&narrowed, "ok").await.unwrap_err();
    assert_policy_refused(&err, &path, "deny[0] denies patch on ConfigMap");
    let text = err.to_string();
    assert!(
        text.contains(
            "plugin chaos returned a forbidden action: patch of ConfigMap in cluster main"
        ) && text.contains("operator policy"),
        "{text}"
    );
    // Outcomes without writes are untouched by the policy.
    let events = reconcile(&narrowed, "flood-2").await.expect("events pass");
    assert_eq!(events.actions.len(), 2);
}

#[tokio::test]
async fn policy_cluster_list_and_defaults_apply() {
    let dir = tempfile::tempdir().unwrap();
    // Chaos may write only in `sub`: its patch in `main` is refused even
    // though it declared the primary cluster. The "*" entry applies too.
    let (path, policy) = policy_file(
        dir.path(),
        r#"
plugins:
  chaos:
    clusters: [sub]
  "*":
    deny:
      - {group: "", kind: Secret, verbs: ["*"]}
"#,
    );
    let plugin = runtime_with(Some(policy.clone()))
        .load_file(chaos_v1())
        .expect("chaos loads");
    let err = reconcile(&plugin, "ok").await.unwrap_err();
    assert_policy_refused(&err, &path, "may write only in clusters [sub]");

    // A "*" default that forbids all of ConfigMap (chaos's primary) refuses
    // the plugin at load: the host would read ConfigMaps for it.
    let (_, strict) = policy_file(
        dir.path(),
        r#"{"plugins": {"*": {"deny": [{"group": "", "kind": "ConfigMap", "verbs": ["*"]}]}}}"#,
    );
    let err = runtime_with(Some(strict))
        .load_file(chaos_v1())
        .expect_err("chaos is refused");
    assert!(
        matches!(&err, LoadError::Policy { reason, .. }
            if reason.contains("denies list on ConfigMap")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_hot_reloaded_plugin_gets_the_same_policy() {
    let plugins = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, policy) = policy_file(dir.path(), DENY_CONFIGMAP_PATCH);
    let file = plugins.path().join("chaos.wasm");
    std::fs::copy(chaos_v1(), &file).unwrap();

    let registry =
        PluginRegistry::with_debounce(runtime_with(Some(policy)), Duration::from_millis(200));
    let mut events = registry.subscribe();
    let scan = registry.clone();
    let scan_dir = plugins.path().to_path_buf();
    tokio::task::spawn_blocking(move || scan.load_dir(&scan_dir))
        .await
        .unwrap()
        .expect("directory scans");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watch = registry.clone();
    let watch_dir = plugins.path().to_path_buf();
    let watcher = tokio::spawn(async move {
        watch
            .watch_dir(watch_dir, async move {
                let _ = stopped.await;
            })
            .await
            .expect("watcher runs");
    });

    let old = registry.get("chaos").expect("chaos loaded");
    let err = reconcile(&old, "ok").await.unwrap_err();
    assert_policy_refused(&err, &path, "denies patch on ConfigMap");

    // Replace v1 by v2 the way deploy tools do (temp file + rename).
    let tmp = file.with_extension("wasm.part");
    std::fs::write(&tmp, std::fs::read(chaos_v2()).unwrap()).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    let new = loop {
        let event = tokio::time::timeout(DEADLINE, events.recv())
            .await
            .expect("no registry event: likely deadlocked")
            .expect("event channel open");
        match event {
            RegistryEvent::Replaced { new, .. } => break new,
            RegistryEvent::Loaded(_) => continue,
            other => panic!("expected Replaced, got {other:?}"),
        }
    };
    assert_eq!(new.version(), "2.0.0");
    assert!(
        new.policy().is_some(),
        "the reloaded version has the policy"
    );
    let err = reconcile(&new, "ok").await.unwrap_err();
    assert_policy_refused(&err, &path, "denies patch on ConfigMap");

    let _ = stop.send(());
    tokio::time::timeout(DEADLINE, watcher)
        .await
        .expect("watcher did not stop: likely deadlocked")
        .expect("watcher task joins");
}

#[test]
fn inspect_and_rbac_show_the_effective_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let (path, policy) = policy_file(dir.path(), DENY_CONFIGMAP_PATCH);

    let text = rekon::commands::inspect::inspect_file_with_policy(
        &chaos_v1(),
        OutputFormat::Json,
        Some(policy.clone()),
        None,
    )
    .expect("inspect succeeds");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        report["permissions"][0]["verbs"],
        serde_json::json!(["get"])
    );
    assert_eq!(
        report["declaredPermissions"][0]["verbs"],
        serde_json::json!(["get", "patch"])
    );
    assert_eq!(
        report["policy"]["source"],
        serde_json::json!(path.display().to_string())
    );
    let plain = rekon::commands::inspect::inspect_file(&chaos_v1(), OutputFormat::Json).unwrap();
    let plain: serde_json::Value = serde_json::from_str(&plain).unwrap();
    assert!(plain.get("declaredPermissions").is_none());
    assert_eq!(
        plain["permissions"][0]["verbs"],
        serde_json::json!(["get", "patch"])
    );

    // RBAC: configmaps patch is granted only without the policy.
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(chaos_v1(), plugins.path().join("chaos.wasm")).unwrap();
    let opts = rekon::commands::manifests::RbacOptions::default();
    let configmap_verbs = |policy: Option<Arc<Policy>>| -> Vec<String> {
        let regs = rekon::commands::manifests::load_registrations_with_policy(
            plugins.path(),
            policy,
            Some(&opts.cluster),
        )
        .expect("plugins load");
        let objects = rekon::commands::manifests::rbac_objects(&regs, &opts).expect("rbac");
        let rules = objects[0]["rules"].as_array().unwrap().clone();
        rules
            .iter()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == "configmaps")
            })
            .flat_map(|r| r["verbs"].as_array().unwrap().clone())
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let free = configmap_verbs(None);
    assert!(free.contains(&"patch".to_string()), "{free:?}");
    let narrowed = configmap_verbs(Some(policy));
    assert!(!narrowed.contains(&"patch".to_string()), "{narrowed:?}");
    assert!(narrowed.contains(&"watch".to_string()), "{narrowed:?}");
}
