//! What the benchmark binaries share: process CPU and memory figures, and
//! the kube-sim child process (the same binary in role `sim`) with its
//! line protocol: it prints `ready <kubeconfig>`, takes commands on stdin
//! (`start`, ...) and answers `converged <seconds>`; it exits when stdin
//! closes.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use anyhow::Context as _;

/// User+system CPU seconds of this process (USER_HZ = 100 on Linux).
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_default()
    };
    // utime and stime are fields 14 and 15 of the full line: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident set (VmHWM) of this process, MiB.
pub fn peak_rss_mib() -> f64 {
    status_mib("VmHWM:")
}

/// Resident set now (VmRSS) of this process, MiB.
pub fn rss_mib() -> f64 {
    status_mib("VmRSS:")
}

/// Resident memory of this process by kind of mapping (MiB), from
/// `/proc/self/smaps`: `anon` (anonymous: malloc's arenas, thread stacks,
/// wasmtime's instance pool slots with the pages calls dirtied), `plugins`
/// (compiled plugins mapped from the cache, `*.cwasm`) and `files` (the
/// other file-backed mappings: the binary and shared libraries).
pub fn rss_by_mapping() -> serde_json::Value {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let (mut anon, mut plugins, mut files) = (0_u64, 0_u64, 0_u64);
    let mut kind = 0;
    for line in smaps.lines() {
        let mut parts = line.split_whitespace();
        let first = parts.next().unwrap_or_default();
        let is_header = first.split_once('-').is_some_and(|(a, b)| {
            !a.is_empty() && a.chars().chain(b.chars()).all(|c| c.is_ascii_hexdigit())
        });
        if is_header {
            let path = parts.nth(4).unwrap_or_default();
            kind = if path.ends_with(".cwasm") {
                1
            } else if path.starts_with('/') {
                2
            } else {
                0
            };
        } else if first == "Rss:" {
            let kib: u64 = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            match kind {
                1 => plugins += kib,
                2 => files += kib,
                _ => anon += kib,
            }
        }
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    serde_json::json!({"anon": mib(anon), "plugins": mib(plugins), "files": mib(files)})
}

fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// How long a scenario idles after convergence before its steady RSS is
/// read (queues drained, transient buffers freed).
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// The kube-sim child process of a benchmark scenario.
pub struct SimProcess {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    /// The kubeconfig of its clusters.
    pub kubeconfig: std::path::PathBuf,
}

impl SimProcess {
    pub fn spawn(envs: &[(&str, String)]) -> anyhow::Result<Self> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.env("REKON_BENCH_ROLE", "sim")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let mut lines = BufReader::new(child.stdout.take().context("sim stdout")?).lines();
        let kubeconfig = loop {
            let line = lines.next().context("sim exited before it was ready")??;
            if let Some(path) = line.strip_prefix("ready ") {
                break std::path::PathBuf::from(path);
            }
        };
        Ok(Self {
            child,
            lines,
            kubeconfig,
        })
    }

    pub fn send(&mut self, command: &str) -> anyhow::Result<()> {
        let stdin = self.child.stdin.as_mut().context("sim stdin")?;
        writeln!(stdin, "{command}")?;
        stdin.flush()?;
        Ok(())
    }

    pub fn converged(&mut self) -> anyhow::Result<f64> {
        loop {
            let line = self
                .lines
                .next()
                .context("sim exited before convergence")??;
            if let Some(s) = line.strip_prefix("converged ") {
                return Ok(s.parse()?);
            }
        }
    }

    pub fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// What one bench process's engine reports to (its clusters, caches,
/// writer, controllers, plugin calls, recorder and shadows): one engine
/// runs per process, and the notes and write counts are read from here.
pub fn metrics() -> &'static rekon::telemetry::metrics::Metrics {
    static METRICS: std::sync::OnceLock<rekon::telemetry::metrics::Metrics> =
        std::sync::OnceLock::new();
    METRICS.get_or_init(rekon::telemetry::metrics::Metrics::new)
}

/// The plugin runtime settings of a benchmark: the defaults, with
/// `REKON_BENCH_CALL_MODE=in-place|blocking-pool` to compare where calls run,
/// and a compiled-plugin cache ([`cache_dir`]) as `rekon run` keeps one by
/// default.
pub fn runtime_config() -> rekon::plugin::RuntimeConfig {
    let call_mode = match std::env::var("REKON_BENCH_CALL_MODE").as_deref() {
        Ok("in-place") => rekon::plugin::CallMode::InPlace,
        Ok("blocking-pool") => rekon::plugin::CallMode::BlockingPool,
        _ => rekon::plugin::CallMode::default(),
    };
    rekon::plugin::RuntimeConfig {
        call_mode,
        cache_dir: Some(cache_dir()),
        metrics: metrics().clone(),
        ..rekon::plugin::RuntimeConfig::default()
    }
}

/// The benches' compiled-plugin cache: `REKON_BENCH_CACHE_DIR`, else
/// `rekon-bench-cache` in the temp directory.
pub fn cache_dir() -> std::path::PathBuf {
    std::env::var_os("REKON_BENCH_CACHE_DIR").map_or_else(
        || std::env::temp_dir().join("rekon-bench-cache"),
        std::path::PathBuf::from,
    )
}

/// Compiles the components at `paths` into [`cache_dir`], in the calling
/// (orchestrating) process: the measured processes then start the way a
/// production host restarts, mapping the compiled code from its cache
/// (`rekon run` caches by default). Compiling in the measured process would
/// put cranelift's few hundred MiB into its peak RSS, which is a first
/// start's cost, not a controller's (the `runtime` bench measures it).
/// Missing files are skipped: their suites say so themselves.
///
/// # Errors
/// When a component does not compile or the cache cannot be written.
pub fn warm_cache(paths: &[std::path::PathBuf]) -> anyhow::Result<()> {
    let runtime = rekon::plugin::PluginRuntime::new(runtime_config())?;
    for path in paths.iter().filter(|p| p.is_file()) {
        runtime
            .load_file(path)
            .with_context(|| format!("compiling {} into the bench cache", path.display()))?;
    }
    Ok(())
}

/// A rekon engine (clusters, shared caches, writer, controller manager)
/// over the clusters `names` reached through `clients` (the first is the
/// primary), with `concurrency` reconciles per plugin and no resync.
///
/// # Errors
/// When a cluster cannot be added.
pub fn rekon_manager(
    names: &[String],
    clients: &[kube::Client],
    concurrency: usize,
) -> anyhow::Result<rekon::controller::Manager> {
    rekon_sharded_manager(names, clients, concurrency, None)
}

/// [`rekon_manager`], reconciling only the keys of `shards` when given.
///
/// # Errors
/// When a cluster cannot be added.
pub fn rekon_sharded_manager(
    names: &[String],
    clients: &[kube::Client],
    concurrency: usize,
    shards: Option<rekon::lease::shard::Shards>,
) -> anyhow::Result<rekon::controller::Manager> {
    let registry = rekon::cluster::ClusterRegistry::with_metrics(
        names[0].clone(),
        clients[0].clone(),
        metrics().clone(),
    );
    for (name, client) in names.iter().zip(clients).skip(1) {
        registry.add(name.clone(), client.clone())?;
    }
    let resolver = rekon::cache::Resolver::default();
    let caches = rekon::cache::CacheManager::new(registry.clone(), resolver.clone());
    let writer =
        rekon::writer::Writer::new(registry, resolver, rekon::writer::WriterConfig::default());
    Ok(rekon::controller::Manager::new(
        caches,
        writer,
        rekon::controller::ControllerConfig {
            max_concurrent_reconciles: concurrency,
            resync_period: None,
            shards,
            ..rekon::controller::ControllerConfig::default()
        },
    ))
}

/// Runs `run` (a kube-rs controller, say) on its own task, handing it the
/// receiver of its shutdown signal; the returned future fires the signal
/// and waits for the task.
pub fn stoppable<F, Fut>(run: F) -> futures::future::BoxFuture<'static, ()>
where
    F: FnOnce(tokio::sync::oneshot::Receiver<()>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    use futures::FutureExt;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run(stop_rx));
    async move {
        let _ = stop_tx.send(());
        let _ = task.await;
    }
    .boxed()
}
