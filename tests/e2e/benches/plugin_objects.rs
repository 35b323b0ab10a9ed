//! Plugins as cluster objects, measured (a bench: it prints tables and
//! asserts nothing about time).
//!
//! 1. Pull + verify + compile of the seed modules from a real registry
//!    (Debian's docker-registry on loopback), cold and from the caches.
//! 2. Edit of a Plugin object → the new version serving (its status
//!    reporting the new digest), with the module cached and with a pull,
//!    and ConfigMaps created during each swap that were never reconciled
//!    (events lost).
//! 3. Resident memory of one extra (shadow) version.
//! 4. Two replicas (`--leader-elect`, client-go timings: 2 s retry period):
//!    edit → the leader serving, and edit → `Consistent=True` (both
//!    replicas' reports show the new digest), side by side.
//!
//! `cargo bench -p rekon-e2e --bench plugin_objects` (after `make plugins
//! test-plugins`); `REKON_BENCH_SWAPS` sets the swaps per row (default 6);
//! `REKON_BENCH_SECTIONS` (e.g. `replicas`) runs only the sections named
//! (`modules`, `swaps`, `replicas`; default all).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rekon::plugin::{PluginRuntime, RuntimeConfig};
use rekon::source::oci::{Fetcher, OciConfig, PullPolicy, RegistryAuth};
use rekon_e2e::registry::Registry;
use rekon_e2e::{Env, EnvOptions, Paths, apply_object, get, with_custom_section};
use serde_json::{Value, json};

fn push(paths: &Paths, file: &std::path::Path, reference: &str) -> anyhow::Result<String> {
    let out = Command::new(&paths.rekon)
        .args(["plugin", "push"])
        .arg(file)
        .arg(reference)
        .output()?;
    if !out.status.success() {
        bail!("push failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8(out.stdout)?
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .map(str::to_owned)
        .context("no digest printed")
}

fn millis(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Pull + verify, then compile (no cache), then both again from the caches.
async fn module_costs(paths: &Paths, registry: &Registry) -> anyhow::Result<()> {
    println!(
        "\n## Pull + verify + compile of the seed modules (the runtime in this process, release build; loopback registry)\n"
    );
    println!(
        "| module | size | pull + verify | compile + link + register | from caches: fetch | from caches: load |"
    );
    println!("|---|---|---|---|---|---|");
    for (file, name) in [
        ("nodepool.wasm", "nodepool"),
        ("test_fanout.wasm", "test-fanout"),
    ] {
        let reference = format!("{}/bench/{name}:1", registry.host());
        let digest = push(paths, &paths.plugins.join(file), &reference)?;
        let cache = tempfile::tempdir()?;
        let fetcher = Fetcher::new(OciConfig {
            cache_dir: Some(cache.path().join("oci")),
            ..OciConfig::default()
        });
        let started = Instant::now();
        let fetched = fetcher
            .fetch(
                &reference,
                None,
                PullPolicy::IfNotPresent,
                &RegistryAuth::Anonymous,
            )
            .await?;
        let pull = started.elapsed();
        let runtime = |cache_dir| {
            PluginRuntime::new(RuntimeConfig {
                cache_dir,
                ..RuntimeConfig::default()
            })
        };
        let bytes = Arc::clone(&fetched.bytes);
        let rt = runtime(Some(cache.path().join("code")))?;
        let started = Instant::now();
        let plugin = tokio::task::spawn_blocking(move || rt.load_bytes(&bytes, "bench")).await??;
        let compile = started.elapsed();
        assert!(!plugin.load_timings().from_cache);
        // A restart: a new fetcher and runtime on the same caches, the
        // reference pinned by digest.
        let fetcher = Fetcher::new(OciConfig {
            cache_dir: Some(cache.path().join("oci")),
            ..OciConfig::default()
        });
        let started = Instant::now();
        let again = fetcher
            .fetch(
                &reference,
                Some(&digest),
                PullPolicy::IfNotPresent,
                &RegistryAuth::Anonymous,
            )
            .await?;
        let cached_fetch = started.elapsed();
        assert!(again.from_cache, "the second fetch pulled");
        let rt = runtime(Some(cache.path().join("code")))?;
        let bytes = Arc::clone(&again.bytes);
        let started = Instant::now();
        let plugin = tokio::task::spawn_blocking(move || rt.load_bytes(&bytes, "bench")).await??;
        let cached_load = started.elapsed();
        assert!(plugin.load_timings().from_cache, "compiled again");
        println!(
            "| {name} | {:.0} KiB | {} | {} | {} | {} |",
            fetched.bytes.len() as f64 / 1024.0,
            millis(pull),
            millis(compile),
            millis(cached_fetch),
            millis(cached_load)
        );
    }
    Ok(())
}

fn plugin_status(env: &Env) -> Option<Value> {
    get(env.main(), "rekon.dev/v1alpha1", "plugins", None, "chaos")
}

fn annotated(env: &Env, name: &str, mark: &str) -> bool {
    get(env.main(), "v1", "configmaps", Some("default"), name).is_some_and(|o| {
        o["metadata"]["annotations"]["chaos.rekon.dev/version"].as_str() == Some(mark)
    })
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

/// Edits the Plugin to `module` and times it until the status reports
/// `digest`, then until every ConfigMap created during the swap carries
/// `mark`. Returns (edit → serving, edit → all reconciled, lost).
async fn swap(
    env: &mut Env,
    module: &str,
    digest: &str,
    mark: &str,
    round: usize,
) -> anyhow::Result<(Duration, Duration, usize)> {
    let started = Instant::now();
    apply_object(
        env.main(),
        json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
               "metadata": {"name": "chaos"}, "spec": {"module": module}}),
    )?;
    let during: Vec<String> = (0..10).map(|i| format!("r{round}-{i}")).collect();
    for name in &during {
        apply_object(
            env.main(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "default"}, "data": {"mode": "ok"}}),
        )?;
    }
    let serving = loop {
        if plugin_status(env).is_some_and(|o| o["status"]["digest"] == digest) {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("{module} never served; log:\n{}", env.rekon.log_tail(40));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let reconciled = loop {
        if during.iter().all(|n| annotated(env, n, mark)) {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            break started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let lost = during.iter().filter(|n| !annotated(env, n, mark)).count();
    Ok((serving, reconciled, lost))
}

async fn swaps_and_memory(paths: &Paths, registry: &Registry) -> anyhow::Result<()> {
    let rounds: usize = std::env::var("REKON_BENCH_SWAPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let v1 = format!("{}/bench/chaos:1", registry.host());
    let d1 = push(paths, &paths.test_plugins.join("chaos-v1.wasm"), &v1)?;
    let cache = tempfile::tempdir()?;
    let mut env = Env::start(EnvOptions {
        plugins: Vec::new(),
        log_filter: "info".to_owned(),
        extra_args: vec![
            "--plugin-objects".to_owned(),
            "--cache-dir".to_owned(),
            cache.path().display().to_string(),
        ],
        ..EnvOptions::default()
    })
    .await?;
    apply_chaos(&mut env, &v1).await?;
    env.wait_for("chaos v1 serving", Duration::from_secs(60), |env| {
        plugin_status(env).filter(|o| o["status"]["digest"] == d1.as_str())
    })
    .await?;
    let mut rows: BTreeMap<&str, (Vec<Duration>, Vec<Duration>, usize)> = BTreeMap::new();
    let work = tempfile::tempdir()?;
    let mut serving = (v1.clone(), d1.clone(), "v1");
    for round in 0..rounds {
        // A new version: distinct bytes (a custom section naming the
        // round), so both the pull and the compile are real.
        let (base, mark) = if serving.2 == "v1" {
            ("chaos-v2.wasm", "v2")
        } else {
            ("chaos-v1.wasm", "v1")
        };
        let file = work.path().join(format!("round-{round}.wasm"));
        std::fs::write(
            &file,
            with_custom_section(
                &std::fs::read(paths.test_plugins.join(base))?,
                "rekon-bench",
                round.to_string().as_bytes(),
            ),
        )?;
        let fresh = format!("{}/bench/chaos:round-{round}", registry.host());
        let digest = push(paths, &file, &fresh)?;
        let previous = serving.clone();
        let (s, r, l) = swap(&mut env, &fresh, &digest, mark, round * 2).await?;
        let row = rows
            .entry("new module: pull + verify + compile")
            .or_default();
        row.0.push(s);
        row.1.push(r);
        row.2 += l;
        // Roll back: the previous module, cached on disk and compiled.
        let (s, r, l) = swap(
            &mut env,
            &previous.0,
            &previous.1,
            previous.2,
            round * 2 + 1,
        )
        .await?;
        let row = rows.entry("rollback: module cached").or_default();
        row.0.push(s);
        row.1.push(r);
        row.2 += l;
        serving = previous;
    }
    println!(
        "\n## Plugin edit → new version serving ({rounds} rounds; 10 ConfigMaps created during each swap)\n"
    );
    println!(
        "| swap | edits | edit → status says serving (median) | edit → every new object reconciled by it (median) | objects never reconciled |"
    );
    println!("|---|---|---|---|---|");
    for (kind, (serving, reconciled, lost)) in rows {
        println!(
            "| {kind} | {} | {} | {} | {lost} |",
            serving.len(),
            millis(median(serving)),
            millis(median(reconciled))
        );
    }

    // Memory of one extra version: the shadow.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = rss_kib(env.rekon.pid())?;
    let v2 = format!("{}/bench/chaos:2", registry.host());
    push(paths, &paths.test_plugins.join("chaos-v2.wasm"), &v2)?;
    apply_object(
        env.main(),
        json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
               "metadata": {"name": "chaos"}, "spec": {"module": v1, "shadow": {"module": v2}}}),
    )?;
    env.wait_for("the shadow", Duration::from_secs(60), |env| {
        plugin_status(env).filter(|o| o["status"]["shadow"]["digest"].is_string())
    })
    .await?;
    for i in 0..50 {
        apply_object(
            env.main(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("shadowed-{i}"), "namespace": "default"}, "data": {"mode": "ok"}}),
        )?;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = rss_kib(env.rekon.pid())?;
    println!("\n## Memory of one extra (shadow) version of chaos (504 KiB component)\n");
    println!(
        "| host RSS, serving only | with a shadow (after 50 shadowed reconciles) | difference |"
    );
    println!("|---|---|---|");
    println!(
        "| {:.1} MiB | {:.1} MiB | {:+.1} MiB |",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        (after as f64 - before as f64) / 1024.0
    );
    Ok(())
}

fn consistent_at(env: &Env, digest: &str, replicas: usize) -> bool {
    plugin_status(env).is_some_and(|o| {
        o["status"]["digest"] == digest
            && o["status"]["replicas"]
                .as_array()
                .is_some_and(|r| r.len() == replicas && r.iter().all(|r| r["digest"] == digest))
            && o["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Consistent" && c["status"] == "True")
            })
    })
}

/// Edits the Plugin to `module`: (edit → the leader's status says
/// `digest` serves, edit → `Consistent=True` with both replicas on it).
async fn time_consistent(
    env: &Env,
    module: &str,
    digest: &str,
) -> anyhow::Result<(Duration, Duration)> {
    let started = Instant::now();
    apply_object(
        env.main(),
        json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
               "metadata": {"name": "chaos"}, "spec": {"module": module}}),
    )?;
    let mut leader = None;
    loop {
        if leader.is_none() && plugin_status(env).is_some_and(|o| o["status"]["digest"] == digest) {
            leader = Some(started.elapsed());
        }
        if consistent_at(env, digest, 2) {
            let all = started.elapsed();
            return Ok((leader.unwrap_or(all), all));
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!(
                "{module} never consistent; status: {:?}",
                plugin_status(env)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two replicas: edit → the leader's status says the new digest serves,
/// and edit → `Consistent=True` with both replicas on it.
async fn replicas(paths: &Paths, registry: &Registry) -> anyhow::Result<()> {
    let rounds: usize = std::env::var("REKON_BENCH_SWAPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let v1 = format!("{}/bench/chaos:1", registry.host());
    let d1 = push(paths, &paths.test_plugins.join("chaos-v1.wasm"), &v1)?;
    let (cache_a, cache_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let opts = |name: &str, cache: &std::path::Path| EnvOptions {
        plugins: Vec::new(),
        log_filter: "info".to_owned(),
        extra_args: vec![
            "--plugin-objects".to_owned(),
            "--cache-dir".to_owned(),
            cache.display().to_string(),
            "--leader-elect".to_owned(),
            "--lease-namespace".to_owned(),
            "default".to_owned(),
        ],
        replica: Some(name.to_owned()),
        ..EnvOptions::default()
    };
    let mut env = Env::start(opts("replica-a", cache_a.path())).await?;
    wait_plugin_crd(&mut env).await?;
    let _b = env.spawn_replica(&opts("replica-b", cache_b.path()))?;
    apply_chaos_object(&env, &v1)?;
    env.wait_for("both replicas on v1", Duration::from_secs(120), |env| {
        consistent_at(env, &d1, 2).then_some(())
    })
    .await?;
    let work = tempfile::tempdir()?;
    let mut rows: BTreeMap<&str, (Vec<Duration>, Vec<Duration>)> = BTreeMap::new();
    let mut serving = (v1.clone(), d1.clone());
    for round in 0..rounds {
        let base = if round % 2 == 0 {
            "chaos-v2.wasm"
        } else {
            "chaos-v1.wasm"
        };
        let file = work.path().join(format!("replicas-{round}.wasm"));
        std::fs::write(
            &file,
            with_custom_section(
                &std::fs::read(paths.test_plugins.join(base))?,
                "rekon-bench",
                (1000 + round).to_string().as_bytes(),
            ),
        )?;
        let fresh = format!("{}/bench/chaos:replicas-{round}", registry.host());
        let digest = push(paths, &file, &fresh)?;
        let previous = serving.clone();
        let (l, a) = time_consistent(&env, &fresh, &digest).await?;
        let row = rows
            .entry("new module: pull + verify + compile on each replica")
            .or_default();
        row.0.push(l);
        row.1.push(a);
        let (l, a) = time_consistent(&env, &previous.0, &previous.1).await?;
        let row = rows
            .entry("rollback: module cached on each replica")
            .or_default();
        row.0.push(l);
        row.1.push(a);
        serving = previous;
    }
    println!(
        "\n## Two replicas (--leader-elect, retry period 2 s): Plugin edit → leader serving vs. every replica serving ({rounds} rounds)\n"
    );
    println!(
        "| swap | edits | edit → leader's status says serving (median) | edit → Consistent=True, both replicas on it (median) | max of the latter |"
    );
    println!("|---|---|---|---|---|");
    for (kind, (leader, all)) in rows {
        let max = all.iter().max().copied().unwrap_or_default();
        println!(
            "| {kind} | {} | {} | {} | {} |",
            leader.len(),
            millis(median(leader)),
            millis(median(all)),
            millis(max)
        );
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        // `cargo test --benches` lists benches: nothing to list here.
        return Ok(());
    }
    let paths = Paths::discover()?;
    let registry = Registry::start()?;
    let sections = std::env::var("REKON_BENCH_SECTIONS").unwrap_or_default();
    let wanted = |s: &str| sections.is_empty() || sections.split(',').any(|w| w.trim() == s);
    if wanted("modules") {
        module_costs(&paths, &registry).await?;
    }
    if wanted("swaps") {
        swaps_and_memory(&paths, &registry).await?;
    }
    if wanted("replicas") {
        replicas(&paths, &registry).await?;
    }
    Ok(())
}

/// Waits until the Plugin CRD is served.
async fn wait_plugin_crd(env: &mut Env) -> anyhow::Result<()> {
    env.wait_for("the Plugin CRD", Duration::from_secs(60), |env| {
        env.main()
            .list("rekon.dev/v1alpha1", "plugins", None, "")
            .is_ok()
            .then_some(())
    })
    .await
}

/// Applies the Plugin `chaos` serving `module`, granting what chaos needs.
fn apply_chaos_object(env: &Env, module: &str) -> anyhow::Result<()> {
    let grant = json!([{
        "resource": {"apiVersion": "v1", "kind": "ConfigMap", "plural": "configmaps", "scope": "Namespaced"},
        "verbs": ["get", "patch"], "clusters": "Primary"}]);
    apply_object(
        env.main(),
        json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
               "metadata": {"name": "chaos"}, "spec": {"module": module, "permissions": grant}}),
    )?;
    Ok(())
}

/// Once the Plugin CRD is served, applies the Plugin `chaos` at `module`.
async fn apply_chaos(env: &mut Env, module: &str) -> anyhow::Result<()> {
    wait_plugin_crd(env).await?;
    apply_chaos_object(env, module)
}
