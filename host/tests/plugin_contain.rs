//! One plugin cannot hurt the others (issue 41): a call stops at its
//! deadline also while the guest waits in WASI, and an outcome out of
//! bounds fails its call, named and counted, before anything is written.
//! Against the chaos test plugin (`make test-plugins`).

mod plugin_support;

use std::time::{Duration, SystemTime};

use plugin_support::*;
use rekon::action::{Outcome, Phase, Resource};
use rekon::plugin::{
    CallError, FairShareConfig, HostMemoryBudget, LoadOptions, LoadedPlugin, OutcomeBounds,
    PluginLimits, PluginRuntime, RuntimeConfig,
};
use rekon::telemetry::metrics::Metrics;

/// Far beyond every deadline below: a call still running then is stuck
/// (chaos's `sleep` mode sleeps an hour).
const STUCK: Duration = Duration::from_secs(60);

fn contained_runtime(metrics: &Metrics) -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 32 << 20,
        call_timeout: Duration::from_millis(500),
        max_concurrent_instances: 8,
        metrics: metrics.clone(),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts")
}

async fn reconcile(plugin: &LoadedPlugin, name: &str) -> Result<Outcome, CallError> {
    tokio::time::timeout(
        STUCK,
        plugin.reconcile(
            request(name),
            Phase::Live,
            FakeCache::new(),
            SystemTime::now(),
        ),
    )
    .await
    .expect("the call outlived its deadline by a minute: a wait in WASI was not interrupted")
}

fn counted(metrics: &Metrics, reason: &str) -> u64 {
    let text = metrics.encode();
    let series = format!("rekon_plugin_contained_total{{plugin=\"chaos\",reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0, |v| v.trim().parse().expect("a counter"))
}

/// `std::thread::sleep` in the guest is a monotonic-clock subscription and
/// a blocking poll: no wasm runs for the epoch deadline to stop. The call
/// fails as a timeout all the same, is counted, and the plugin's next call
/// works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_sleeping_in_wasi_is_stopped_at_its_deadline() {
    let metrics = Metrics::new();
    let plugin = contained_runtime(&metrics)
        .load_file(chaos_v1())
        .expect("chaos v1 loads");
    let err = reconcile(&plugin, "sleep").await.unwrap_err();
    match &err {
        CallError::Timeout {
            plugin, timeout, ..
        } => {
            assert_eq!(plugin, "chaos");
            assert_eq!(*timeout, Duration::from_millis(500));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(err.is_retryable());
    assert_eq!(counted(&metrics, "Timeout"), 1);
    let ok = reconcile(&plugin, "ok").await.expect("ok reconciles");
    assert_eq!(ok.actions.len(), 1);
}

/// `map` waits in WASI the same way; several sleepers at once each end at
/// their own deadline and leave the runtime serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sleepers_in_reconcile_and_map_all_end() {
    let metrics = Metrics::new();
    let plugin = contained_runtime(&metrics)
        .load_file(chaos_v1())
        .expect("chaos v1 loads");
    let object = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "sleeper", "namespace": "default"},
        "data": {"mode": "sleep"},
    })
    .to_string();
    let configmaps = Resource {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
        scope: rekon::action::Scope::Namespaced,
    };
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let sleeper = plugin.clone();
        calls.spawn(async move { reconcile(&sleeper, "sleep").await.map(|_| ()) });
        let (plugin, object, configmaps) = (plugin.clone(), object.clone(), configmaps.clone());
        calls.spawn(async move {
            plugin
                .map("main", &configmaps, object, FakeCache::new())
                .await
                .map(|_| ())
        });
    }
    let all = tokio::time::timeout(STUCK, calls.join_all())
        .await
        .expect("a sleeper outlived its deadline by a minute");
    for result in all {
        let err = result.expect_err("a sleeper cannot finish");
        assert!(matches!(err, CallError::Timeout { .. }), "{err:?}");
    }
    assert_eq!(counted(&metrics, "Timeout"), 6);
    reconcile(&plugin, "ok").await.expect("ok reconciles");
}

/// Each bound fails the call with its reason before anything could be
/// written; the failure is retryable (the reconcile backs off and tries
/// again) and counted per plugin and reason.
#[tokio::test]
async fn outcomes_out_of_bounds_fail_with_their_reason() {
    let metrics = Metrics::new();
    let plugin = contained_runtime(&metrics)
        .load_file(chaos_v1())
        .expect("chaos v1 loads");
    let bounds = OutcomeBounds::default();
    let cases = [
        (
            format!("flood-{}", bounds.max_actions + 1),
            "TooManyActions",
        ),
        // 4 MiB: over the API server's 3 MiB request limit.
        ("big-4096".to_owned(), "ObjectTooLarge"),
        (format!("deep-{}", bounds.max_json_depth + 1), "TooDeep"),
    ];
    for (mode, reason) in cases {
        let err = reconcile(&plugin, &mode).await.unwrap_err();
        match &err {
            CallError::Contained { plugin, bound } => {
                assert_eq!(plugin, "chaos");
                assert_eq!(bound.reason(), reason, "{mode}: {err}");
            }
            other => panic!("{mode}: expected {reason}, got {other:?}"),
        }
        assert!(err.is_retryable(), "{mode}");
        assert!(err.to_string().contains(reason), "{err}");
        assert_eq!(counted(&metrics, reason), 1, "{mode}");
    }
    // Within bounds, the same modes pass.
    let outcome = reconcile(&plugin, &format!("flood-{}", 100))
        .await
        .expect("100 events pass");
    assert_eq!(outcome.actions.len(), 100);
    reconcile(&plugin, "big-1024").await.expect("1 MiB passes");
    reconcile(&plugin, "deep-50").await.expect("50 deep passes");
}

/// Bounds are the operator's to set.
#[tokio::test]
async fn bounds_follow_the_runtime_configuration() {
    let metrics = Metrics::new();
    let plugin = PluginRuntime::new(RuntimeConfig {
        outcome_bounds: OutcomeBounds {
            max_actions: 5,
            max_outcome_bytes: 1 << 20,
            ..OutcomeBounds::default()
        },
        memory_limit_bytes: 32 << 20,
        max_concurrent_instances: 8,
        metrics: metrics.clone(),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts")
    .load_file(chaos_v1())
    .expect("chaos v1 loads");
    reconcile(&plugin, "flood-5").await.expect("5 events pass");
    let err = reconcile(&plugin, "flood-6").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("6 actions in one outcome (at most 5)"),
        "{err}"
    );
    assert_eq!(counted(&metrics, "TooManyActions"), 1);
    // Beyond what the host copies out of a guest at all (1 MiB of bodies
    // and 5 actions' names): refused while being copied, before the host
    // holds it — a 2 MiB body, and 20,000 actions.
    let max = (OutcomeBounds {
        max_actions: 5,
        max_outcome_bytes: 1 << 20,
        ..OutcomeBounds::default()
    })
    .lift_bytes();
    for mode in ["big-2048", "flood-20000"] {
        let err = reconcile(&plugin, mode).await.unwrap_err();
        match &err {
            CallError::Contained { bound, .. } => {
                assert_eq!(bound.reason(), "OutcomeTooLarge", "{mode}: {err}");
            }
            other => panic!("{mode}: expected OutcomeTooLarge, got {other:?}"),
        }
        assert!(err.is_retryable(), "{mode}");
        assert!(
            err.to_string()
                .contains(&format!("returned more than {max} bytes to copy")),
            "{mode}: {err}"
        );
    }
    assert_eq!(counted(&metrics, "OutcomeTooLarge"), 2);
}

/// A plugin that takes the whole pool (sleeping on as many objects as the
/// pool has instances) leaves its neighbour the slots reserved for it: the
/// neighbour's calls are served at once, none fails for want of an
/// instance ("maximum concurrent limit ... reached" before the slot book).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_holding_the_pool_leaves_its_neighbour_its_reserved_slots() {
    let metrics = Metrics::new();
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 32 << 20,
        // Long enough that no sleeper ends while the neighbour is served,
        // however loaded the machine: the check below is an order, not a
        // timing.
        call_timeout: Duration::from_secs(10),
        max_concurrent_instances: 8,
        pooling: true,
        metrics: metrics.clone(),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let hog = runtime.load_file(chaos_v1()).expect("chaos v1 loads");
    let neighbour = runtime
        .load_file(test_plugin("cm-sync.wasm"))
        .expect("cm-sync loads");
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut sleepers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (hog, ended) = (hog.clone(), ended.clone());
        sleepers.spawn(async move {
            let result = reconcile(&hog, "sleep").await.map(|_| ());
            ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            result
        });
    }
    // The sleepers hold every slot the hog may take.
    tokio::time::sleep(Duration::from_millis(150)).await;
    for _ in 0..2 {
        let outcome = tokio::time::timeout(
            STUCK,
            neighbour.reconcile(
                request("source"),
                Phase::Live,
                FakeCache::new(),
                SystemTime::now(),
            ),
        )
        .await
        .expect("the neighbour's call returns");
        outcome.expect("the neighbour is served beside the hog");
    }
    // Served beside the hog, not after it: none of the hog's calls (each
    // holding its slot until its 10 s deadline) has ended yet.
    let ended_then = ended.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        ended_then, 0,
        "the neighbour was served only after the hog's calls ended"
    );
    let all = tokio::time::timeout(STUCK, sleepers.join_all())
        .await
        .expect("the sleepers end");
    assert!(all.iter().all(Result::is_err), "a sleeper cannot finish");
}

/// CPU fair share: a plugin stopped at its deadline again and again is
/// backed off as a whole (its calls admitted one per interval, counted and
/// measured), its neighbour never; calls within bounds in a row lift it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_timing_out_again_and_again_is_backed_off_and_lifted_when_it_behaves() {
    let metrics = Metrics::new();
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 32 << 20,
        call_timeout: Duration::from_millis(200),
        max_concurrent_instances: 8,
        metrics: metrics.clone(),
        fair_share: FairShareConfig {
            after: 3,
            window: Duration::from_secs(600),
            interval: Duration::from_secs(300),
            max_interval: Duration::from_secs(600),
        },
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let hog = runtime.load_file(chaos_v1()).expect("chaos v1 loads");
    let neighbour = runtime
        .load_file(test_plugin("cm-sync.wasm"))
        .expect("cm-sync loads");
    for n in 1..=3 {
        assert!(hog.admit().is_ok(), "admitted before containment {n}");
        reconcile(&hog, "loop")
            .await
            .expect_err("spins to its deadline");
    }
    let wait = hog.admit().expect_err("backed off after 3 timeouts");
    assert!(
        wait > Duration::from_secs(200),
        "one call per interval: {wait:?}"
    );
    assert_eq!(runtime.backoff("chaos"), Duration::from_secs(300));
    assert!(neighbour.admit().is_ok(), "the neighbour is not held");
    assert_eq!(runtime.backoff("cm-sync"), Duration::ZERO);
    let text = metrics.encode();
    assert!(
        text.contains("rekon_plugin_backoff_total{plugin=\"chaos\"} 1"),
        "{text}"
    );
    assert!(text.contains("rekon_plugin_backoff_seconds{plugin=\"chaos\"} 300"));
    let record = runtime.contained("chaos").expect("recorded");
    assert_eq!(record.counts.get("Timeout"), Some(&3));
    assert_eq!(record.last_reason, "Timeout");
    assert!(record.last_message.contains("timed out"), "{record:?}");
    // It behaves: three calls in a row within bounds lift the backoff.
    for _ in 0..3 {
        reconcile(&hog, "ok").await.expect("ok reconciles");
    }
    assert!(hog.admit().is_ok(), "lifted");
    assert_eq!(runtime.backoff("chaos"), Duration::ZERO);
    assert!(
        metrics
            .encode()
            .contains("rekon_plugin_backoff_seconds{plugin=\"chaos\"} 0")
    );
}

/// The host-wide memory budget: each loaded plugin books its memory cap
/// times the instances it may run; a load past the budget is refused with
/// the numbers, and dropping a plugin gives its share back.
#[test]
fn a_load_past_the_host_memory_budget_is_refused_with_its_reason() {
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 32 << 20,
        // Two instances of 32 MiB per plugin; room for one plugin and a half.
        plugin_memory_budget_bytes: 64 << 20,
        host_memory_budget: Some(HostMemoryBudget {
            bytes: 100 << 20,
            source: "a test's budget".into(),
        }),
        max_concurrent_instances: 8,
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let chaos = runtime.load_file(chaos_v1()).expect("chaos v1 fits");
    // Each instance also books what one call may copy out of it.
    let booked = 2 * ((32 << 20) + OutcomeBounds::default().lift_bytes());
    assert!(booked < 100 << 20, "the test's premise");
    assert_eq!(runtime.memory_booked(), booked);
    let refused = runtime
        .load_file(test_plugin("cm-sync.wasm"))
        .expect_err("past the budget");
    assert_eq!(refused.reason(), "HostMemoryBudget");
    let text = refused.to_string();
    assert!(
        text.contains("2 instances of 32 MiB")
            && text.contains("of the host's 100 MiB")
            && text.contains("a test's budget"),
        "{text}"
    );
    // A new version from the same file replaces its booking.
    let again = runtime
        .load_file(chaos_v1())
        .expect("chaos again: same origin");
    assert_eq!(runtime.memory_booked(), booked);
    drop((chaos, again));
    assert_eq!(runtime.memory_booked(), 0, "given back when dropped");
    runtime
        .load_file(test_plugin("cm-sync.wasm"))
        .expect("fits once chaos is gone");
}

/// A plugin's own limits (a Plugin object's `spec.limits`, a file's
/// `NAME.limits.json`) narrow the host's and never widen them: a shorter
/// deadline stops its calls sooner, a longer one is the host's; a smaller
/// memory budget books fewer instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_own_limits_narrow_the_hosts_and_never_widen_them() {
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 32 << 20,
        call_timeout: Duration::from_millis(800),
        plugin_memory_budget_bytes: 128 << 20,
        max_concurrent_instances: 8,
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let bytes = std::fs::read(chaos_v1()).expect("chaos v1");
    let with = |limits: PluginLimits, instance: &str| {
        let options = LoadOptions::default()
            .with_instance(Some(instance))
            .with_limits(limits);
        runtime
            .load_bytes_with(&bytes, instance, &options)
            .expect("chaos loads")
    };
    let narrow = with(
        PluginLimits {
            call_timeout: Some(Duration::from_millis(100)),
            memory_budget_bytes: Some(32 << 20),
        },
        "narrow",
    );
    // An instance books its 32 MiB and what a call may copy out of it.
    let instance = (32 << 20) + OutcomeBounds::default().lift_bytes();
    assert_eq!(runtime.memory_booked(), instance, "one instance of 32 MiB");
    match reconcile(&narrow, "loop").await {
        Err(CallError::Timeout { timeout, .. }) => {
            assert_eq!(timeout, Duration::from_millis(100));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let wide = with(
        PluginLimits {
            call_timeout: Some(Duration::from_secs(600)),
            memory_budget_bytes: Some(1 << 40),
        },
        "wide",
    );
    assert_eq!(
        runtime.memory_booked(),
        5 * instance,
        "and the host's budget: 4 instances of 32 MiB"
    );
    match reconcile(&wide, "loop").await {
        Err(CallError::Timeout { timeout, .. }) => {
            assert_eq!(timeout, Duration::from_millis(800), "the host's deadline");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

/// What a plugin's freed instances leave resident stays within its own
/// budget: a plugin that fills its memory on every call, called from many
/// threads at once, leaves at most its instances' worth of dirtied pages in
/// the pool's warm slots (each freed slot is reused by the plugin's next
/// instance, not a fresh one dirtied beside it). Under the host's own pool
/// size (64 instances) on a machine with several CPUs, where wasmtime would
/// shard a pool of 128 memories per CPU and a thread would pick a cold slot
/// in its own shard rather than the plugin's warm one in another.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugins_freed_instances_keep_no_more_resident_than_its_budget() {
    let cap = 32usize << 20;
    let instances = 2;
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: cap,
        plugin_memory_budget_bytes: instances * cap,
        pooling: true,
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let Some(before) = runtime.pool_unused_resident_bytes() else {
        panic!("this test needs the pooling allocator");
    };
    let hog = runtime.load_file(chaos_v1()).expect("chaos v1 loads");
    for round in 0..4 {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..12 {
            let hog = hog.clone();
            calls.spawn(async move { reconcile(&hog, "oom").await });
        }
        for result in calls.join_all().await {
            assert!(
                matches!(result, Err(CallError::OutOfMemory { .. })),
                "round {round}: expected OutOfMemory, got {result:?}"
            );
        }
    }
    let resident = runtime.pool_unused_resident_bytes().expect("pooling");
    eprintln!(
        "resident in freed slots: {} MiB (before: {} MiB; bound {} MiB)",
        resident >> 20,
        before >> 20,
        (instances * cap) >> 20
    );
    // The load's `register` instance is the same module's, so its slot is
    // one of the plugin's too.
    assert!(
        resident <= instances * cap,
        "freed slots keep {} MiB resident, more than the plugin's {} instances of {} MiB",
        resident >> 20,
        instances,
        cap >> 20
    );
}

/// This process's resident memory, MiB (`VmRSS`; nextest runs each test in
/// a process of its own).
fn rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib >> 10
}

/// A version replaced leaves nothing resident behind: wasmtime frees the
/// pool slots of a dropped module without releasing the pages its
/// instances dirtied past the initial image (and counts them as 0 bytes),
/// so each swap of a plugin that filled its memory left its instances'
/// worth resident until a cold slot ran out (≈60 MiB more per version
/// here, 396 MiB after six). With `max_unused_warm_slots(0)` the next
/// instance without a slot of its own reuses a freed one before a cold
/// one, so the pool's dirtied slots stay those the most instances live at
/// once needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replaced_version_leaves_nothing_resident_behind() {
    let cap = 32usize << 20;
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: cap,
        plugin_memory_budget_bytes: 2 * cap,
        pooling: true,
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let bytes = std::fs::read(chaos_v1()).expect("chaos v1");
    let mut after = Vec::new();
    for version in 0..6 {
        let instance = format!("v{version}");
        let options = LoadOptions::default().with_instance(Some(&instance));
        let hog = runtime
            .load_bytes_with(&bytes, &instance, &options)
            .expect("chaos loads");
        for _ in 0..3 {
            let mut calls = tokio::task::JoinSet::new();
            for _ in 0..6 {
                let hog = hog.clone();
                calls.spawn(async move { reconcile(&hog, "oom").await });
            }
            for result in calls.join_all().await {
                assert!(
                    matches!(result, Err(CallError::OutOfMemory { .. })),
                    "version {version}: expected OutOfMemory, got {result:?}"
                );
            }
        }
        drop(hog);
        after.push(rss_mib());
    }
    eprintln!("resident after each version, MiB: {after:?}");
    let grown = after[after.len() - 1].saturating_sub(after[0]);
    assert!(
        grown < (cap >> 20) as u64,
        "five replaced versions left {grown} MiB more resident ({after:?})"
    );
}
