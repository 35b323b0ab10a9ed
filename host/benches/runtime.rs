//! Plugin runtime benchmark: compile time, cached load time, and the cost of
//! one realistic reconcile (read a ~5 KB Node, relabel it, return an apply)
//! with a fresh instance per call and with a reused instance, against the
//! same logic compiled natively.
//!
//! ```text
//! make test-plugins   # builds dist/test-plugins/bench-node.wasm
//! cargo bench -p rekon-host --bench runtime
//! ```
//!
//! Prints a table; asserts nothing about time. Besides wall-clock median and
//! p90 per call, each call row shows this thread's CPU time per call (user +
//! kernel: page faults and `madvise` of instantiation included), which moves
//! far less than wall-clock time when the machine is busy. For comparisons
//! that must not depend on load, count instructions of one section:
//!
//! ```text
//! REKON_BENCH_ONLY=reused REKON_BENCH_SCALE=20 valgrind --tool=callgrind \
//!     --toggle-collect='*PluginSession*reconcile*' target/release/deps/runtime-<hash>
//! ```
//!
//! A second table (`ports`) splits the per-reconcile time of the seeds and
//! their TypeScript and Python ports (`dist/plugins`, `dist/sdk-plugins`:
//! `make plugins sdk-plugins`) into the fresh instance every call gets and
//! the plugin's own work: each recorded case (`plugins/*/test*/cases`)
//! reconciled with a fresh instance per call (as the host does) and again
//! and again in one instance (the same decision with instantiation and
//! teardown taken out; an interpreter's warmed state helps it too, so this
//! is a floor of the work).
//!
//! `REKON_BENCH_ONLY` takes a comma list of sections (`compile`, `load`,
//! `fresh`, `reused`, `empty-fresh`, `empty-reused`, `async`, `native`,
//! `ports`);
//! `REKON_BENCH_SCALE` divides the iteration counts; `REKON_TEST_PLUGINS`
//! points at another directory holding `bench-node.wasm` (e.g. another
//! build profile).

#[path = "../../tests/plugins/bench-node/src/relabel.rs"]
mod relabel;

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use rekon::action::{Action, ClusterHealth, ClusterInfo, Phase, Request, Resource};
use rekon::plugin::{CallMode, HostReads, LoadedPlugin, PluginRuntime, ReadError, RuntimeConfig};

const NODE_JSON: &str = include_str!("../../tests/plugins/bench-node/node.json");
const NODE_NAME: &str = "worker-eu-west-1a-7f3c2";

/// Serves the one Node.
struct NodeCache;

impl HostReads for NodeCache {
    fn get(
        &self,
        _cluster: &str,
        resource: &Resource,
        _namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        if resource.kind != "Node" {
            return Err(ReadError::NotWatched(resource.kind.clone()));
        }
        Ok((name == NODE_NAME).then(|| NODE_JSON.to_string()))
    }

    fn list(
        &self,
        _cluster: &str,
        resource: &Resource,
        _namespace: Option<&str>,
        _label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        Err(ReadError::NotWatched(resource.kind.clone()))
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        vec![ClusterInfo {
            name: "main".into(),
            primary: true,
            health: ClusterHealth::Ready,
        }]
    }
}

fn plugin_file() -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("REKON_TEST_PLUGINS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/test-plugins"),
        PathBuf::from,
    );
    let path = dir.join("bench-node.wasm");
    if !path.is_file() {
        bail!(
            "{} is missing: run `make test-plugins` first (cargo build -p rekon-bench-node \
             --target wasm32-wasip2 --profile wasm, copied to dist/test-plugins/bench-node.wasm)",
            path.display()
        );
    }
    Ok(path)
}

/// Median and p90 of `samples`.
fn stats(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let median = samples[samples.len() / 2];
    let p90 = samples[samples.len() * 9 / 10];
    (median, p90)
}

/// Whether section `name` runs: `REKON_BENCH_ONLY=calls,native` picks
/// sections (for profiling one of them under callgrind); unset runs all.
fn enabled(name: &str) -> bool {
    std::env::var("REKON_BENCH_ONLY").map_or(true, |only| only.split(',').any(|s| s.trim() == name))
}

/// `REKON_BENCH_SCALE` divides the iteration counts (e.g. 20 under callgrind).
fn scaled(iterations: usize) -> usize {
    let scale = std::env::var("REKON_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    (iterations / scale).max(100)
}

/// CPU time this thread has run (user + kernel, so page faults and the
/// `madvise`/`mmap` of instantiation count), from `/proc/thread-self/schedstat`;
/// far less sensitive to other load on the machine than wall-clock time.
/// `None` where the file is missing (not Linux).
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = text.split_whitespace().next()?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(ns))
}

/// One row's numbers: wall-clock median and p90 per call (over batches), and
/// this thread's CPU time per call over the whole timed loop.
struct PerCall {
    median: Duration,
    p90: Duration,
    cpu: Option<Duration>,
}

/// Times `iterations` calls of `f` in batches (after a warm-up batch).
fn per_call(iterations: usize, mut f: impl FnMut()) -> PerCall {
    const BATCH: usize = 50;
    let iterations = scaled(iterations);
    for _ in 0..BATCH {
        f(); // warm-up
    }
    let cpu_before = thread_cpu();
    let batches = iterations / BATCH;
    let samples = (0..batches)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..BATCH {
                f();
            }
            started.elapsed() / BATCH as u32
        })
        .collect();
    let cpu = thread_cpu()
        .zip(cpu_before)
        .map(|(after, before)| (after - before) / (batches * BATCH) as u32);
    let (median, p90) = stats(samples);
    PerCall { median, p90, cpu }
}

/// One line of the table.
struct Row {
    name: &'static str,
    median: String,
    p90: String,
    cpu: String,
    baseline: &'static str,
}

impl Row {
    fn timed(name: &'static str, timed: &PerCall, baseline: &'static str) -> Self {
        Self {
            name,
            median: fmt(timed.median),
            p90: fmt(timed.p90),
            cpu: timed.cpu.map_or_else(|| "n/a".to_string(), fmt),
            baseline,
        }
    }

    fn untimed(
        name: &'static str,
        median: Duration,
        p90: Duration,
        baseline: &'static str,
    ) -> Self {
        Self {
            name,
            median: fmt(median),
            p90: fmt(p90),
            cpu: String::new(),
            baseline,
        }
    }
}

fn check_outcome(outcome: &rekon::action::Outcome) {
    let [Action::Apply(apply)] = outcome.actions.as_slice() else {
        panic!("bench-node returned {outcome:?}");
    };
    assert!(apply.object.contains("nodes.lailin.xyz/pool"));
}

fn fmt(d: Duration) -> String {
    if d >= Duration::from_millis(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    }
}

fn main() -> anyhow::Result<()> {
    let file = plugin_file()?;
    let bytes = std::fs::read(&file).context("reading bench-node.wasm")?;
    let cache = tempfile::tempdir()?;
    let config = RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let runtime = PluginRuntime::new(config.clone())?;
    let mut rows: Vec<Row> = Vec::new();

    if enabled("compile") {
        // 1. Compile (no cache): 5 loads of the same bytes without a cache dir.
        let uncached = PluginRuntime::new(RuntimeConfig {
            cache_dir: None,
            ..config.clone()
        })?;
        let mut compile = Vec::new();
        for _ in 0..5 {
            let plugin = uncached.load_bytes(&bytes, "bench-node.wasm")?;
            compile.push(plugin.load_timings().code);
        }
        let (median, p90) = stats(compile);
        rows.push(Row::untimed(
            "compile (cranelift, no cache)",
            median,
            p90,
            "~300 ms",
        ));
    }

    if enabled("load") {
        // 2. Cached load: prime the cache, then load from it in fresh runtimes
        //    (a restart), timing the mmap deserialize and the whole load.
        runtime.load_file(&file)?;
        let mut mapped = Vec::new();
        let mut whole = Vec::new();
        for _ in 0..20 {
            let restarted = PluginRuntime::new(config.clone())?;
            let started = Instant::now();
            let plugin = restarted.load_file(&file)?;
            whole.push(started.elapsed());
            let timings = plugin.load_timings();
            assert!(timings.from_cache, "expected a cache hit");
            mapped.push(timings.code);
        }
        let (median, p90) = stats(mapped);
        rows.push(Row::untimed(
            "cached load (mmap deserialize)",
            median,
            p90,
            "0.1–0.2 ms",
        ));
        let (median, p90) = stats(whole);
        rows.push(Row::untimed(
            "cached load, whole (sha256+map+link+register)",
            median,
            p90,
            "",
        ));
    }

    // 3. Calls.
    let plugin: LoadedPlugin = runtime.load_file(&file)?;
    let reads: Arc<dyn HostReads> = Arc::new(NodeCache);
    let req = Request {
        cluster: "main".into(),
        namespace: None,
        name: NODE_NAME.into(),
    };
    let now = SystemTime::now();
    check_outcome(&plugin.reconcile_blocking(&req, Phase::Live, reads.clone(), now)?);

    if enabled("fresh") {
        let timed = per_call(2000, || {
            let outcome = plugin
                .reconcile_blocking(&req, Phase::Live, reads.clone(), now)
                .expect("reconcile");
            black_box(outcome);
        });
        rows.push(Row::timed(
            "reconcile, fresh instance per call",
            &timed,
            "~60 µs",
        ));
    }

    let mut session = plugin.session(reads.clone(), now)?;
    check_outcome(&session.reconcile(&req)?);
    if enabled("reused") {
        let timed = per_call(2000, || {
            black_box(session.reconcile(&req).expect("reconcile"));
        });
        rows.push(Row::timed("reconcile, reused instance", &timed, "~20 µs"));
    }

    // The floor: a call that reads nothing back (the Node is absent) and
    // returns no action.
    let absent = Request {
        name: "absent".into(),
        ..req.clone()
    };
    if enabled("empty-fresh") {
        let timed = per_call(2000, || {
            black_box(
                plugin
                    .reconcile_blocking(&absent, Phase::Live, reads.clone(), now)
                    .expect("reconcile"),
            );
        });
        rows.push(Row::timed(
            "empty reconcile, fresh instance per call",
            &timed,
            "",
        ));
    }

    if enabled("empty-reused") {
        let timed = per_call(2000, || {
            black_box(session.reconcile(&absent).expect("reconcile"));
        });
        rows.push(Row::timed("empty reconcile, reused instance", &timed, ""));
    }

    if enabled("async") {
        // Inside a multi-threaded runtime, as the controller calls it: one
        // task awaiting calls one after another (the end-to-end latency of
        // a call, hand-offs included), for both places the wasm code can
        // run.
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let in_place = PluginRuntime::new(RuntimeConfig {
            call_mode: CallMode::InPlace,
            ..RuntimeConfig::default()
        })?
        .load_file(&file)?;
        for (name, p) in [
            ("reconcile, fresh instance, async (in place)", &in_place),
            ("reconcile, fresh instance, async (spawn_blocking)", &plugin),
        ] {
            let p = p.clone();
            let (req, reads) = (req.clone(), reads.clone());
            let iterations = scaled(2000);
            let samples: Vec<Duration> = tokio.block_on(tokio.spawn(async move {
                for _ in 0..50 {
                    let _ = p
                        .reconcile(req.clone(), Phase::Live, reads.clone(), now)
                        .await;
                }
                let mut samples = Vec::new();
                for _ in 0..iterations / 50 {
                    let started = Instant::now();
                    for _ in 0..50 {
                        let outcome = p
                            .reconcile(req.clone(), Phase::Live, reads.clone(), now)
                            .await
                            .expect("reconcile");
                        black_box(outcome);
                    }
                    samples.push(started.elapsed() / 50);
                }
                samples
            }))?;
            let mut sorted = samples;
            sorted.sort();
            let timed = PerCall {
                median: sorted[sorted.len() / 2],
                p90: sorted[sorted.len() * 9 / 10],
                // The call may run on another thread: this thread's CPU
                // time says nothing about it.
                cpu: None,
            };
            rows.push(Row::timed(name, &timed, ""));
        }
    }

    if enabled("native") {
        assert!(relabel::relabel_json(NODE_JSON)?.contains("nodes.lailin.xyz/pool"));
        let timed = per_call(20_000, || {
            let node = NODE_JSON.to_string(); // the plugin also gets a copy
            black_box(relabel::relabel_json(black_box(&node)).expect("relabel"));
        });
        rows.push(Row::timed("same logic, native", &timed, "~14 µs"));
    }

    println!();
    println!(
        "plugin runtime — bench-node ({} KB component, {} B Node), pooling allocator: {}",
        bytes.len() / 1024,
        NODE_JSON.len(),
        runtime.stats().pooling
    );
    println!();
    println!(
        "| {:<50} | {:>10} | {:>10} | {:>12} | {:>12} |",
        "measurement", "median", "p90", "CPU / call", "baseline"
    );
    println!(
        "|{:-<52}|{:->12}|{:->12}|{:->14}|{:->14}|",
        "", "", "", "", ""
    );
    for row in rows {
        println!(
            "| {:<50} | {:>10} | {:>10} | {:>12} | {:>12} |",
            row.name, row.median, row.p90, row.cpu, row.baseline
        );
    }
    println!();
    if enabled("ports") {
        ports()?;
    }
    Ok(())
}

/// The `ports` table: per language, fresh-instance and reused-instance time
/// per reconcile over the recorded cases.
fn ports() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let plugins = [
        (
            "rust test-fanout",
            "dist/plugins/test_fanout.wasm",
            "plugins/test-fanout-ts/test/cases",
        ),
        (
            "ts test-fanout",
            "dist/sdk-plugins/test_fanout_ts.wasm",
            "plugins/test-fanout-ts/test/cases",
        ),
        (
            "rust nodepool",
            "dist/plugins/nodepool.wasm",
            "plugins/nodepool-py/tests/cases",
        ),
        (
            "py nodepool",
            "dist/sdk-plugins/nodepool_py.wasm",
            "plugins/nodepool-py/tests/cases",
        ),
    ];
    let cache = tempfile::tempdir()?;
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    })?;
    println!("per reconcile, over each port's recorded cases (median of the cases' medians)");
    println!();
    println!(
        "| {:<18} | {:>6} | {:>14} | {:>14} | {:>16} | {:>10} |",
        "plugin", "cases", "fresh ms", "reused ms", "instance ms", "× rust"
    );
    println!(
        "|{:-<20}|{:->8}|{:->16}|{:->16}|{:->18}|{:->12}|",
        "", "", "", "", "", ""
    );
    let mut rust_fresh = 0.0_f64;
    // `REKON_BENCH_PORTS=ts` keeps the rows whose label contains a word
    // of the list (for profiling one of them).
    let only = std::env::var("REKON_BENCH_PORTS").ok();
    for (label, wasm, cases) in plugins {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|w| label.contains(w.trim())))
        {
            continue;
        }
        let wasm = root.join(wasm);
        if !wasm.is_file() {
            println!(
                "| {label:<18} | {} missing: make plugins sdk-plugins",
                wasm.display()
            );
            continue;
        }
        let plugin = runtime.load_file(&wasm)?;
        let mut fresh = Vec::new();
        let mut reused = Vec::new();
        for file in rekon::change::record::case_files(&[root.join(cases)])? {
            let case = rekon::change::record::read_case(&file).map_err(anyhow::Error::msg)?;
            if case.phase != Phase::Live {
                continue; // a session reconciles live requests only
            }
            let reads: Arc<dyn HostReads> =
                Arc::new(rekon::change::replay::CaseReads::of_case(&case));
            let time = case.request_time.system_time();
            let timed = per_call(200, || {
                black_box(
                    plugin
                        .reconcile_blocking(&case.request, case.phase, reads.clone(), time)
                        .expect("reconcile"),
                );
            });
            fresh.push(timed.median);
            let mut session = plugin.session(reads.clone(), time)?;
            let timed = per_call(200, || {
                black_box(session.reconcile(&case.request).expect("reconcile"));
            });
            reused.push(timed.median);
        }
        if fresh.is_empty() {
            println!("| {label:<18} | no live case in {cases}");
            continue;
        }
        let count = fresh.len();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (f, _) = stats(fresh);
        let (r, _) = stats(reused);
        if label.starts_with("rust") {
            rust_fresh = ms(f);
        }
        println!(
            "| {:<18} | {:>6} | {:>14.3} | {:>14.3} | {:>16.3} | {:>10} |",
            label,
            count,
            ms(f),
            ms(r),
            ms(f) - ms(r),
            if rust_fresh > 0.0 {
                format!("{:.1}", ms(f) / rust_fresh)
            } else {
                "-".to_owned()
            },
        );
    }
    println!();
    Ok(())
}
