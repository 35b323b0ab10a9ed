//! What a [`super::PluginRuntime`] is built with: [`RuntimeConfig`] and
//! where async calls run ([`CallMode`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::compile_bound::CompileBound;

/// Configuration of a [`super::PluginRuntime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled components are cached (`None`: no cache; every load
    /// compiles). Created if missing.
    pub cache_dir: Option<PathBuf>,
    /// Compiled artifacts not used for this long are removed when a runtime
    /// starts (a cache hit refreshes a file's age); artifacts of another
    /// engine configuration or wasmtime version are removed at once, since
    /// this host can never load them. `None`: keep everything.
    pub cache_max_age: Option<Duration>,
    /// Linear-memory cap of one call (all memories of the instance).
    pub memory_limit_bytes: usize,
    /// Deadline of one `reconcile` or `map` call.
    pub call_timeout: Duration,
    /// Deadline of `register` (runs once per load).
    pub register_timeout: Duration,
    /// Granularity of deadlines: the epoch ticker's period.
    pub epoch_tick: Duration,
    /// Component instances that can be alive at once (concurrent calls
    /// across all plugins); sizes the pooling allocator.
    pub max_concurrent_instances: u32,
    /// Linear memory all live instances of one plugin may hold together:
    /// a plugin runs at most `budget / memory_limit_bytes` instances at
    /// once (at least one), whatever concurrency it declares; a call beyond
    /// waits for one of its own to end (`slots.rs`).
    pub plugin_memory_budget_bytes: usize,
    /// Use the pooling allocator (falls back to on-demand allocation when
    /// the pool cannot be reserved).
    pub pooling: bool,
    /// How much of a call's stdout/stderr is kept (for panic messages).
    pub output_capture_bytes: usize,
    /// What one outcome may ask of the host (actions, sizes, nesting);
    /// an outcome beyond fails its call before anything is written.
    pub outcome_bounds: super::bounds::OutcomeBounds,
    /// The operator policy applied to every plugin this runtime loads
    /// (and reloads); `None`: plugins keep what they declare.
    pub policy: Option<Arc<super::policy::Policy>>,
    /// Where async calls (`reconcile`, `map`) run their wasm code.
    pub call_mode: CallMode,
    /// How a freed instance's linear memory is made fresh for the next
    /// call in its pool slot.
    pub memory_reset: MemoryReset,
    /// Where per-call WASM time and sandbox failures are reported (the
    /// host's metrics in `rekon run`; by default, metrics of its own).
    pub metrics: crate::telemetry::metrics::Metrics,
    /// Compile in a child process under a memory cap (`rekon run
    /// --compile-memory-limit`); `None`: in this process. Either way one
    /// compile at a time.
    pub compile_bound: Option<CompileBound>,
    /// When a plugin that keeps hitting its bounds is backed off
    /// (`fair_share.rs`).
    pub fair_share: super::fair_share::FairShareConfig,
    /// What all loaded plugins may hold together (`host_budget.rs`);
    /// `None`: no host-wide bound.
    pub host_memory_budget: Option<super::host_budget::HostMemoryBudget>,
}

/// Where an async plugin call runs its (synchronous) wasm code. In place, a
/// single call is faster, but under load it occupies one of the runtime's
/// workers while the event pump and the writes wait, so the blocking pool
/// is the default (the figures: ARCHITECTURE.md, "Measurements behind the
/// code").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CallMode {
    /// On the calling task's worker thread (`tokio::task::block_in_place`:
    /// the worker's other tasks move to another thread meanwhile). Falls
    /// back to the blocking pool on a current-thread runtime. Lowest latency
    /// per call; for hosts with cores to spare.
    InPlace,
    /// On tokio's blocking pool (`spawn_blocking`): best throughput here.
    #[default]
    BlockingPool,
}

/// How the pooling allocator makes a freed instance's linear memory fresh
/// for the next instance in its slot (`rekon run --memory-reset`). Both
/// give the next call the module's initial memory and nothing of the last
/// call's; they differ in what that costs (issue 39; figures in
/// docs/plugins/precompiled.md, "What a call costs").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MemoryReset {
    /// Only the pages the call wrote are restored (Linux `PAGEMAP_SCAN`,
    /// ≥ 6.7; elsewhere the memory is decommitted and faulted in again).
    /// Cheapest when a call writes few runs of pages, as a compiled plugin
    /// does. wasmtime 48 stops the scan after 32 runs of written pages and
    /// decommits the rest, so an interpreter whose calls write all over
    /// its heap (componentize-py: ~600 runs) faults that part in again on
    /// every call.
    #[default]
    #[value(help = "Restore the pages the call wrote")]
    DirtyPages,
    /// The whole memory is copied back from its image (and the rest zeroed),
    /// without a scan: a call never faults on a page an earlier call in the
    /// slot touched, for one copy of the memory per call and every slot's
    /// whole memory kept resident. For hosts serving interpreter plugins:
    /// the Python port's CPU per call falls by 30–40 % (host RSS +75 MiB),
    /// while a Rust plugin's call grows by 10–40 %.
    #[value(help = "Copy the whole memory back")]
    Whole,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            cache_max_age: Some(Duration::from_secs(30 * 24 * 3600)),
            memory_limit_bytes: 64 << 20,
            call_timeout: Duration::from_secs(2),
            register_timeout: Duration::from_secs(10),
            epoch_tick: Duration::from_millis(10),
            max_concurrent_instances: 64,
            plugin_memory_budget_bytes: 256 << 20,
            pooling: true,
            output_capture_bytes: 16 << 10,
            outcome_bounds: super::bounds::OutcomeBounds::default(),
            policy: None,
            call_mode: CallMode::default(),
            memory_reset: MemoryReset::default(),
            metrics: crate::telemetry::metrics::Metrics::new(),
            compile_bound: None,
            fair_share: super::fair_share::FairShareConfig::default(),
            host_memory_budget: None,
        }
    }
}
