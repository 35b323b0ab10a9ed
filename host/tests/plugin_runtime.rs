//! Plugin runtime: loading, contract checks, sandbox failures, capability
//! checks and the compiled-code cache, against the chaos test plugin
//! (`make plugins`) and hand-written WAT components.

mod plugin_support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plugin_support::*;
use rekon::action::{Action, Outcome, PatchType, Phase};
use rekon::plugin::{CallError, LoadError, LoadedPlugin};

const DEADLINE: Duration = Duration::from_secs(60);

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

/// The annotation value of chaos's `ok` merge patch.
fn ok_mark(outcome: &Outcome) -> String {
    let [Action::Patch(patch)] = outcome.actions.as_slice() else {
        panic!("expected one patch, got {outcome:?}");
    };
    assert_eq!(patch.patch_type, PatchType::Merge);
    assert_eq!(patch.target.cluster, "main");
    assert_eq!(patch.target.name, "ok");
    let body: serde_json::Value = serde_json::from_str(&patch.patch).expect("patch is JSON");
    body["metadata"]["annotations"][ANNOTATION]
        .as_str()
        .expect("annotation set")
        .to_string()
}

#[tokio::test]
async fn loads_chaos_and_reports_its_registration() {
    let plugin = runtime(None).load_file(chaos_v1()).expect("chaos v1 loads");
    assert_eq!(plugin.name(), "chaos");
    assert_eq!(plugin.version(), "1.0.0");
    assert_eq!(plugin.registration().primary.kind, "ConfigMap");
    assert_eq!(plugin.digest().len(), 64);
    assert_eq!(plugin.path(), Some(chaos_v1().as_path()));
    let outcome = reconcile(&plugin, "ok").await.expect("ok reconciles");
    assert_eq!(ok_mark(&outcome), "v1");
}

#[tokio::test]
async fn host_reads_reach_the_plugin() {
    // The request names "anything" but the cached ConfigMap says mode=ok:
    // the plugin can only know that through the host's `get`.
    let plugin = runtime(None).load_file(chaos_v1()).expect("chaos v1 loads");
    let cache = FakeCache::with_config_map("main", "default", "anything", "panic");
    let result = tokio::time::timeout(
        DEADLINE,
        plugin.reconcile(request("anything"), Phase::Live, cache, SystemTime::now()),
    )
    .await
    .expect("likely deadlocked");
    assert!(matches!(result, Err(CallError::Panic { .. })), "{result:?}");
}

/// Each misbehaviour fails its own call only; the next call on the same
/// plugin works.
#[tokio::test]
async fn misbehaving_calls_fail_alone() {
    let plugin = runtime(None).load_file(chaos_v1()).expect("chaos v1 loads");

    let err = reconcile(&plugin, "loop").await.unwrap_err();
    assert!(matches!(err, CallError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("plugin chaos timed out"), "{err}");
    assert_eq!(ok_mark(&reconcile(&plugin, "ok").await.unwrap()), "v1");

    let err = reconcile(&plugin, "oom").await.unwrap_err();
    assert!(
        matches!(err, CallError::OutOfMemory { limit_bytes, .. } if limit_bytes == 32 << 20),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("plugin chaos ran out of memory"),
        "{err}"
    );
    assert_eq!(ok_mark(&reconcile(&plugin, "ok").await.unwrap()), "v1");

    let err = reconcile(&plugin, "panic").await.unwrap_err();
    match &err {
        CallError::Panic {
            message, plugin, ..
        } => {
            assert_eq!(plugin, "chaos");
            assert!(message.contains(PANIC_MESSAGE), "{message}");
        }
        other => panic!("expected a panic, got {other:?}"),
    }
    assert_eq!(ok_mark(&reconcile(&plugin, "ok").await.unwrap()), "v1");

    let err = reconcile(&plugin, "recurse").await.unwrap_err();
    match &err {
        // Rust's shadow stack lives in linear memory: overflowing it is an
        // out-of-bounds access (or a wasm stack overflow for deep frames).
        CallError::Trap {
            message, plugin, ..
        } => {
            assert_eq!(plugin, "chaos");
            assert!(
                message.contains("stack") || message.contains("out of bounds"),
                "{message}"
            );
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_eq!(ok_mark(&reconcile(&plugin, "ok").await.unwrap()), "v1");
}

#[tokio::test]
async fn a_stuck_call_does_not_block_other_calls() {
    let plugin = runtime(None).load_file(chaos_v1()).expect("chaos v1 loads");
    let stuck = {
        let plugin = plugin.clone();
        tokio::spawn(async move { reconcile(&plugin, "loop").await })
    };
    // While the loop spins on its blocking thread, ok calls complete.
    for _ in 0..3 {
        assert_eq!(ok_mark(&reconcile(&plugin, "ok").await.unwrap()), "v1");
    }
    let err = tokio::time::timeout(DEADLINE, stuck)
        .await
        .expect("likely deadlocked")
        .expect("task joins")
        .unwrap_err();
    assert!(matches!(err, CallError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn plugin_errors_keep_their_retry_flag() {
    let plugin = runtime(None).load_file(chaos_v1()).expect("chaos v1 loads");
    let err = reconcile(&plugin, "error").await.unwrap_err();
    assert!(
        matches!(
            err,
            CallError::Plugin {
                retryable: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let err = reconcile(&plugin, "terminal").await.unwrap_err();
    assert!(
        matches!(
            err,
            CallError::Plugin {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn disallowed_actions_are_refused() {
    let plugin = runtime(None).load_file(chaos_v1()).expect("chaos v1 loads");
    let err = reconcile(&plugin, "overreach").await.unwrap_err();
    match &err {
        CallError::Forbidden {
            plugin,
            action,
            resource,
            cluster,
            ..
        } => {
            assert_eq!(plugin, "chaos");
            assert_eq!(action, "apply");
            assert_eq!(resource, "Secret");
            assert_eq!(cluster, "main");
        }
        other => panic!("expected forbidden, got {other:?}"),
    }
    assert!(!err.is_retryable());
    let text = err.to_string();
    assert!(
        text.contains("plugin chaos") && text.contains("Secret"),
        "{text}"
    );

    let err = reconcile(&plugin, "malformed").await.unwrap_err();
    assert!(matches!(err, CallError::Forbidden { .. }), "{err:?}");
}

#[test]
fn wrong_contract_version_is_refused_with_the_version() {
    let rt = runtime(None);
    let err = rt
        .load_bytes(&component_exporting_guest("2.0.0"), "v2-contract.wasm")
        .unwrap_err();
    assert!(
        matches!(err, LoadError::IncompatibleContract { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "refused plugin v2-contract.wasm: plugin built for rekon:plugin@2.0.0; \
         this host speaks rekon:plugin@0.3.x"
    );
    let err = rt
        .load_bytes(&component_exporting_guest("0.1.0"), "minor.wasm")
        .unwrap_err();
    assert!(
        err.to_string().contains("built for rekon:plugin@0.1.0"),
        "{err}"
    );
}

#[test]
fn wrong_world_is_refused_with_the_reason() {
    let rt = runtime(None);
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "garbage.wasm",
            b"this is not wasm at all".to_vec(),
            "not a WebAssembly file",
        ),
        (
            "core.wasm",
            core_module(),
            "core WebAssembly module, not a component",
        ),
        (
            "empty.wasm",
            wat::parse_str("(component)").unwrap(),
            "it exports nothing",
        ),
        ("other.wasm", component_of_other_world(), "it exports run"),
        // Right interface name, nothing in it.
        (
            "hollow.wasm",
            component_exporting_guest("0.3.0"),
            "exports do not match",
        ),
    ];
    for (origin, bytes, reason) in cases {
        let err = rt.load_bytes(&bytes, origin).unwrap_err();
        assert!(
            matches!(err, LoadError::WrongWorld { .. }),
            "{origin}: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains(origin) && text.contains(reason),
            "{origin}: {text}"
        );
    }
    // Truncated component: compile error naming the file.
    let mut bytes = std::fs::read(chaos_v1()).unwrap();
    bytes.truncate(bytes.len() / 2);
    let err = rt.load_bytes(&bytes, "truncated.wasm").unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err:?}");
    assert!(err.to_string().contains("truncated.wasm"), "{err}");
}

#[test]
fn failing_register_refuses_the_plugin() {
    let err = runtime(None)
        .load_file(chaos_broken_register())
        .unwrap_err();
    assert!(matches!(err, LoadError::Refused { .. }), "{err:?}");
    assert!(err.to_string().contains(REGISTER_FAILURE), "{err}");
}

#[tokio::test]
async fn restart_loads_from_the_compile_cache() {
    let cache = tempfile::tempdir().unwrap();
    let first = runtime(Some(cache.path().to_path_buf()));
    first.load_file(chaos_v1()).expect("loads");
    assert_eq!(first.stats().compiles, 1);
    assert_eq!(first.stats().cache_hits, 0);
    drop(first);

    // A "restarted" host: a new engine, same cache directory.
    let second = runtime(Some(cache.path().to_path_buf()));
    let plugin = second.load_file(chaos_v1()).expect("loads from cache");
    assert_eq!(second.stats().compiles, 0, "restart recompiled");
    assert_eq!(second.stats().cache_hits, 1);
    assert_eq!(ok_mark(&reconcile(&plugin, "ok").await.unwrap()), "v1");

    // Another file is another key.
    second.load_file(chaos_v2()).expect("v2 loads");
    assert_eq!(second.stats().compiles, 1);

    // A corrupted artifact is not trusted: recompiled and rewritten. (It is
    // replaced by rename, as the runtime itself writes: the old runtime's
    // mapping of the previous file stays valid.)
    drop(plugin);
    drop(second);
    for entry in std::fs::read_dir(cache.path()).unwrap() {
        let path = entry.unwrap().path();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, b"corrupt").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    let third = runtime(Some(cache.path().to_path_buf()));
    let plugin = third.load_file(chaos_v1()).expect("recompiles");
    assert_eq!(third.stats().compiles, 1);
    assert_eq!(ok_mark(&reconcile(&plugin, "ok").await.unwrap()), "v1");
    let fourth = runtime(Some(cache.path().to_path_buf()));
    fourth.load_file(chaos_v1()).expect("loads");
    assert_eq!(fourth.stats().compiles, 0);
}

#[tokio::test]
async fn a_reused_session_answers_like_fresh_instances() {
    let plugin = runtime(None).load_file(chaos_v1()).expect("loads");
    let reads: Arc<FakeCache> = FakeCache::new();
    let mut session = plugin
        .session(reads, SystemTime::now())
        .expect("instantiates");
    for _ in 0..3 {
        assert_eq!(ok_mark(&session.reconcile(&request("ok")).unwrap()), "v1");
    }
    assert!(matches!(
        session.reconcile(&request("overreach")),
        Err(CallError::Forbidden { .. })
    ));
}

#[test]
fn pooling_allocator_is_used_or_degrades() {
    let rt = rekon::plugin::PluginRuntime::new(rekon::plugin::RuntimeConfig::default())
        .expect("runtime starts");
    // On this machine the pool can be reserved; on a constrained one the
    // runtime falls back instead of failing.
    let plugin = rt.load_file(chaos_v1()).expect("loads");
    assert_eq!(plugin.name(), "chaos");
    assert!(rt.stats().pooling);
}

/// The public futures can be spawned on a multi-threaded runtime
/// (compile-time check; never called).
#[allow(dead_code)]
fn public_futures_are_send(
    plugin: &LoadedPlugin,
    registry: &rekon::plugin::PluginRegistry,
    resource: &rekon::action::Resource,
) {
    fn assert_send<T: Send>(_: &T) {}
    assert_send(&plugin.reconcile(
        request("x"),
        Phase::Live,
        FakeCache::new(),
        SystemTime::now(),
    ));
    assert_send(&plugin.map("main", resource, String::new(), FakeCache::new()));
    assert_send(&registry.watch_dir("/".into(), std::future::pending()));
}

#[test]
fn inspect_prints_the_registration() {
    use rekon::commands::inspect::{OutputFormat, inspect_file};
    let json = inspect_file(&chaos_v1(), OutputFormat::Json).expect("inspects");
    let value: serde_json::Value = serde_json::from_str(&json).expect("JSON output");
    assert_eq!(value["name"], "chaos");
    assert_eq!(value["version"], "1.0.0");
    assert_eq!(value["primary"]["kind"], "ConfigMap");
    assert_eq!(value["permissions"][0]["resource"]["kind"], "ConfigMap");
    assert_eq!(value["contract"], "rekon:plugin@0.3.x");
    let yaml = inspect_file(&chaos_v1(), OutputFormat::Yaml).expect("inspects");
    let value: serde_yaml::Value = serde_yaml::from_str(&yaml).expect("YAML output");
    assert_eq!(value["name"].as_str(), Some("chaos"));
    let err = inspect_file(&chaos_broken_register(), OutputFormat::Yaml).unwrap_err();
    assert!(err.to_string().contains(REGISTER_FAILURE), "{err}");
}

/// `rekon plugin compile` fills the cache with what a host started later
/// (`rekon run`: the default runtime configuration with that cache) maps
/// instead of compiling; a file the host would refuse is refused, named.
#[test]
fn rekon_plugin_compile_fills_the_cache_rekon_run_reads() {
    use rekon::commands::compile::compile_files;
    use rekon::plugin::{PluginRuntime, RuntimeConfig};
    let cache = tempfile::tempdir().unwrap();
    let files = [chaos_v1(), chaos_v2()];
    let first = compile_files(&files, cache.path(), false).expect("compiles");
    assert_eq!(
        first
            .iter()
            .map(|c| (c.name.as_str(), c.version.as_str(), c.from_cache))
            .collect::<Vec<_>>(),
        [("chaos", "1.0.0", false), ("chaos", "2.0.0", false)]
    );
    let again = compile_files(&files, cache.path(), false).expect("loads");
    assert!(again.iter().all(|c| c.from_cache), "{again:?}");

    let host = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    host.load_file(chaos_v1()).expect("loads");
    host.load_file(chaos_v2()).expect("loads");
    assert_eq!(host.stats().compiles, 0, "the host compiled again");
    assert_eq!(host.stats().cache_hits, 2);

    let err = compile_files(&[chaos_broken_register()], cache.path(), false).unwrap_err();
    let message = format!("{err:#}");
    assert!(message.contains("chaos-broken-register.wasm"), "{message}");
    assert!(message.contains(REGISTER_FAILURE), "{message}");
}
