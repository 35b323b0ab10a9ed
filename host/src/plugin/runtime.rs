//! The wasmtime engine (pooling allocator, epoch ticker), the on-disk cache
//! of compiled components, and loading: compile → check the contract → link
//! (`InstancePre`) → `register` → validate the registration.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest as _, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings::{AdmissionPluginPre, ConversionPluginPre, Plugin, PluginPre};
use super::compile_bound::{self, base_config};
use super::contract::{self, Mismatch};
use super::error::LoadError;
use super::precompiled::{CodePath, Precompiled};
use super::sandbox::{CallState, Limits};
use crate::files::write_atomically;

/// The wasmtime version compiled artifacts are keyed by (also covered by
/// the engine's compatibility hash; kept explicit in the file name).
const WASMTIME_VERSION: &str = "48.0.8";

pub use super::runtime_config::{CallMode, MemoryReset, RuntimeConfig};

/// Where the time of one load went (for metrics, logs and the benchmark).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadTimings {
    /// sha256 of the file.
    pub digest: Duration,
    /// Compiling, or mapping the cached or precompiled artifact.
    pub code: Duration,
    /// Whether the code came from the on-disk cache.
    pub from_cache: bool,
    /// Where the code came from (compiled, cached, precompiled).
    pub path: CodePath,
    /// Contract check, linking, `InstancePre`.
    pub link: Duration,
    /// The `register` call.
    pub register: Duration,
}

/// A component compiled, checked against the contract and linked: what
/// `register` is called on.
pub(crate) struct Prepared {
    pub(crate) pre: PluginPre<CallState>,
    /// Hex sha256 of the component's bytes.
    pub(crate) digest: String,
    pub(crate) timings: LoadTimings,
    /// Whether the component can read settings (see `contract::Fit`).
    pub(crate) reads_settings: bool,
    /// Its admission export, linked, when it has one.
    pub(crate) admission: Option<AdmissionPluginPre<CallState>>,
    /// Its conversion export, linked, when it has one.
    pub(crate) conversion: Option<ConversionPluginPre<CallState>>,
    /// Its policies export, linked, when it has one.
    pub(crate) policies: Option<super::bindings::PoliciesPluginPre<CallState>>,
}

/// Counters of a runtime, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeStats {
    /// Components compiled by cranelift.
    pub compiles: u64,
    /// Components loaded from the on-disk cache.
    pub cache_hits: u64,
    /// Whether the pooling allocator is in use.
    pub pooling: bool,
}

/// Owns the wasmtime [`Engine`] (with its epoch ticker thread and instance
/// pool), the linker and the compile cache. Cheap to clone.
#[derive(Clone)]
pub struct PluginRuntime {
    pub(crate) inner: Arc<RuntimeInner>,
}

pub(crate) struct RuntimeInner {
    pub(crate) engine: Engine,
    linker: Linker<CallState>,
    pub(crate) config: RuntimeConfig,
    /// Hex digest of engine compatibility hash + wasmtime version.
    pub(super) engine_key: String,
    /// The engine configuration without the pool: what compiles run on
    /// ([`compile_bound::compile`]).
    pub(super) compile_config: Config,
    pooling: bool,
    /// The pool's instances, reserved per plugin (`slots.rs`).
    pub(crate) slots: Arc<super::slots::Slots>,
    /// Where every containment goes (metric, record, fair share).
    pub(crate) containment: super::containment::Containment,
    /// The host-wide memory budget's bookings (`host_budget.rs`).
    pub(crate) host_book: Arc<super::host_budget::HostBook>,
    compiles: AtomicU64,
    cache_hits: AtomicU64,
    _ticker: EpochTicker,
}

impl std::fmt::Debug for PluginRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRuntime")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Why a runtime could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The wasmtime engine could not be created.
    #[error("failed to create the wasmtime engine: {0}")]
    Engine(String),
    /// WASI or host functions could not be linked.
    #[error("failed to link host functions: {0}")]
    Link(String),
    /// The cache directory could not be created.
    #[error("failed to create plugin cache directory {dir}")]
    CacheDir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl PluginRuntime {
    /// Builds the engine (pooling allocator when possible), starts the epoch
    /// ticker and links the WASI and host imports.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        if let Some(dir) = &config.cache_dir {
            std::fs::create_dir_all(dir).map_err(|source| RuntimeError::CacheDir {
                dir: dir.clone(),
                source,
            })?;
        }
        let (engine, pooling) = build_engine(&config)?;

        let linker = host_linker(&engine)?;

        let engine_key = key_of(&engine);
        if let (Some(dir), Some(max_age)) = (&config.cache_dir, config.cache_max_age) {
            prune_cache(dir, &engine_key, max_age, SystemTime::now());
        }
        let ticker = EpochTicker::start(&engine, config.epoch_tick);
        let slots = Arc::new(super::slots::Slots::new(
            usize::try_from(config.max_concurrent_instances).unwrap_or(usize::MAX),
            config.plugin_memory_budget_bytes / config.memory_limit_bytes.max(1),
        ));
        let containment =
            super::containment::Containment::new(config.metrics.clone(), config.fair_share);
        let host_book = Arc::new(super::host_budget::HostBook::new(
            config.host_memory_budget.clone(),
        ));
        Ok(Self {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                config,
                engine_key,
                compile_config: base_config(),
                pooling,
                slots,
                containment,
                host_book,
                compiles: AtomicU64::new(0),
                cache_hits: AtomicU64::new(0),
                _ticker: ticker,
            }),
        })
    }

    /// The runtime's configuration.
    #[must_use]
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// The containments of `plugin` (by name) since this runtime started.
    #[must_use]
    pub fn contained(&self, plugin: &str) -> Option<super::ContainedRecord> {
        self.inner.containment.record(plugin)
    }

    /// The interval between two admitted calls of `plugin` (zero: not
    /// backed off; `fair_share.rs`).
    #[must_use]
    pub fn backoff(&self, plugin: &str) -> Duration {
        self.inner.containment.backoff(plugin)
    }

    /// Bytes of the host-wide memory budget the loaded plugin versions
    /// have booked (`host_budget.rs`).
    #[must_use]
    pub fn memory_booked(&self) -> usize {
        self.inner.host_book.booked()
    }

    /// Bytes the instance pool keeps resident in linear-memory slots no
    /// instance uses now (freed slots kept warm for the next instance of
    /// the same module: see [`build_engine`]); `None` without the pooling
    /// allocator.
    #[must_use]
    pub fn pool_unused_resident_bytes(&self) -> Option<usize> {
        self.inner
            .engine
            .pooling_allocator_metrics()
            .map(|m| m.unused_memory_bytes_resident())
    }

    /// Compile and cache counters.
    #[must_use]
    pub fn stats(&self) -> RuntimeStats {
        RuntimeStats {
            compiles: self.inner.compiles.load(Ordering::Relaxed),
            cache_hits: self.inner.cache_hits.load(Ordering::Relaxed),
            pooling: self.inner.pooling,
        }
    }

    /// Everything of a load up to `register`: digest (unless the caller
    /// took it: `digest`, hex sha256 of `bytes`), contract precheck, compile
    /// (or the cached artifact, or `precompiled`: see
    /// [`super::LoadOptions::precompiled`]), contract check, link.
    pub(crate) fn prepare(
        &self,
        bytes: &[u8],
        digest: Option<String>,
        origin: &str,
        precompiled: Option<&Precompiled>,
    ) -> Result<Prepared, LoadError> {
        let origin = origin.to_string();
        let started = Instant::now();
        let digest = digest.unwrap_or_else(|| hex::encode(Sha256::digest(bytes)));
        let mut timings = LoadTimings {
            digest: started.elapsed(),
            ..LoadTimings::default()
        };
        contract::precheck(bytes).map_err(|e| LoadError::WrongWorld {
            origin: origin.clone(),
            reason: e.to_string(),
        })?;
        let started = Instant::now();
        let (component, path) = self.compile_cached(bytes, &digest, &origin, precompiled)?;
        timings.code = started.elapsed();
        timings.from_cache = path == CodePath::Cached;
        timings.path = path;
        self.inner
            .config
            .metrics
            .plugin_code_loaded(path.as_str(), timings.code);
        let started = Instant::now();
        let fit = contract::check(&self.inner.engine, &component).map_err(|m| match m {
            Mismatch::Version { found, host } => LoadError::IncompatibleContract {
                origin: origin.clone(),
                package: contract::CONTRACT_PACKAGE.to_string(),
                found,
                host,
            },
            Mismatch::World(reason) => LoadError::WrongWorld {
                origin: origin.clone(),
                reason,
            },
        })?;
        let instance_pre =
            self.inner
                .linker
                .instantiate_pre(&component)
                .map_err(|e| LoadError::Link {
                    origin: origin.clone(),
                    message: format!("{e:#}"),
                })?;
        let admission = if fit.exports_admission {
            Some(AdmissionPluginPre::new(instance_pre.clone()).map_err(|e| {
                LoadError::WrongWorld {
                    origin: origin.clone(),
                    reason: format!(
                        "admission exports do not match {}: {e:#}",
                        contract::host_range()
                    ),
                }
            })?)
        } else {
            None
        };
        let conversion = if fit.exports_conversion {
            Some(ConversionPluginPre::new(instance_pre.clone()).map_err(|e| {
                LoadError::WrongWorld {
                    origin: origin.clone(),
                    reason: format!(
                        "conversion exports do not match {}: {e:#}",
                        contract::host_range()
                    ),
                }
            })?)
        } else {
            None
        };
        let policies = super::cel_policies::link(fit.exports_policies, &instance_pre, &origin)?;
        let pre = PluginPre::new(instance_pre).map_err(|e| LoadError::WrongWorld {
            origin: origin.clone(),
            reason: format!("exports do not match {}: {e:#}", contract::host_range()),
        })?;
        timings.link = started.elapsed();
        Ok(Prepared {
            pre,
            digest,
            timings,
            reads_settings: fit.reads_settings,
            admission,
            conversion,
            policies,
        })
    }

    /// Where the compiled artifact of the component with hex sha256
    /// `digest` is cached (`None`: no cache directory).
    pub(super) fn cache_file(&self, digest: &str) -> Option<PathBuf> {
        self.inner
            .config
            .cache_dir
            .as_ref()
            .map(|dir| dir.join(format!("{digest}{}", cache_suffix(&self.inner.engine_key))))
    }

    /// Compiled component for `bytes`, from the cache when present, else
    /// from `precompiled` when it fits, else compiled; and which it was.
    fn compile_cached(
        &self,
        bytes: &[u8],
        digest: &str,
        origin: &str,
        precompiled: Option<&Precompiled>,
    ) -> Result<(Component, CodePath), LoadError> {
        let engine = &self.inner.engine;
        let cached = self.cache_file(digest);
        if let Some(file) = cached.as_ref().filter(|f| f.is_file()) {
            let started = Instant::now();
            // SAFETY: `deserialize_file` maps the file and trusts it to be a
            // wasmtime artifact for this engine. We wrote it ourselves (below:
            // temp file + atomic rename, so it is never seen half-written),
            // in our own cache directory, keyed by the sha256 of the source
            // bytes and by the engine's compatibility hash and version; wasmtime
            // additionally checks its header and engine compatibility and fails
            // (handled: we recompile) rather than running a mismatched artifact.
            #[allow(unsafe_code)]
            let loaded = unsafe { Component::deserialize_file(engine, file) };
            match loaded {
                Ok(component) => {
                    self.inner.cache_hits.fetch_add(1, Ordering::Relaxed);
                    // In use: keep it young for the pruning at start-up.
                    // (Only the timestamp changes; the mapped bytes do not.)
                    let _ = std::fs::File::options()
                        .write(true)
                        .open(file)
                        .and_then(|f| f.set_modified(SystemTime::now()));
                    tracing::debug!(
                        plugin.origin = origin,
                        cache.file = %file.display(),
                        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
                        "loaded compiled plugin from cache"
                    );
                    return Ok((component, CodePath::Cached));
                }
                Err(e) => tracing::warn!(
                    plugin.origin = origin,
                    cache.file = %file.display(),
                    error = %format!("{e:#}"),
                    "failed to load cached compiled plugin; recompiling"
                ),
            }
        }

        if let Some(artifact) = precompiled {
            let started = Instant::now();
            match self.map_precompiled(artifact, digest, cached.as_deref()) {
                Ok(component) => {
                    tracing::info!(
                        plugin.origin = origin,
                        plugin.digest = digest,
                        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
                        "loaded the plugin's precompiled code"
                    );
                    return Ok((component, CodePath::Precompiled));
                }
                Err(refused) => {
                    self.inner
                        .config
                        .metrics
                        .plugin_precompiled_refused(refused.outcome());
                    tracing::warn!(
                        plugin.origin = origin,
                        plugin.digest = digest,
                        reason = %refused,
                        "not using the plugin's precompiled code; compiling it"
                    );
                }
            }
        }
        let started = Instant::now();
        let artifact = compile_bound::compile(
            &self.inner.compile_config,
            self.inner.config.compile_bound.as_ref(),
            bytes,
        )
        .map_err(|message| {
            // Classified by what the bytes are, not by the message: only a
            // component is a plugin ([`contract::precheck`] said so before
            // a load; a caller of this alone may not have asked).
            match contract::precheck(bytes) {
                Err(_) => LoadError::WrongWorld {
                    origin: origin.to_string(),
                    reason: message,
                },
                Ok(()) => LoadError::Compile {
                    origin: origin.to_string(),
                    message,
                },
            }
        })?;
        release_compile_memory();
        self.inner.compiles.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            plugin.origin = origin,
            plugin.digest = digest,
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "compiled plugin"
        );
        // From the cache file when it could be written (the code is then
        // mapped from it, shared with the page cache, as after a restart),
        // else from memory.
        if let Some(file) = cached {
            match write_atomically(&file, &artifact) {
                Ok(()) => {
                    // SAFETY: as above: our own artifact, just written by us
                    // (temp file + atomic rename) for this engine's
                    // configuration; wasmtime checks its header and engine
                    // compatibility.
                    #[allow(unsafe_code)]
                    let loaded = unsafe { Component::deserialize_file(engine, &file) };
                    match loaded {
                        Ok(component) => return Ok((component, CodePath::Compiled)),
                        Err(e) => tracing::warn!(
                            plugin.origin = origin,
                            cache.file = %file.display(),
                            error = %format!("{e:#}"),
                            "failed to map the compiled plugin just cached; loading it from memory"
                        ),
                    }
                }
                Err(e) => tracing::warn!(
                    plugin.origin = origin,
                    cache.file = %file.display(),
                    error = %e,
                    "failed to write compiled plugin cache"
                ),
            }
        }
        // SAFETY: `artifact` was produced a moment ago by
        // `precompile_component` on an engine of this engine's configuration
        // (`compile_config`); wasmtime checks engine compatibility and fails
        // rather than run a mismatched artifact.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(engine, &artifact) }.map_err(|e| {
            LoadError::Compile {
                origin: origin.to_string(),
                message: format!("{e:#}"),
            }
        })?;
        Ok((component, CodePath::Compiled))
    }

    /// A fresh store limit set for one call.
    pub(crate) fn limits(inner: &RuntimeInner) -> Limits {
        Self::limits_of(&inner.config)
    }

    /// The store limits of `config`.
    pub(crate) fn limits_of(config: &RuntimeConfig) -> Limits {
        Limits {
            memory_bytes: config.memory_limit_bytes,
            output_bytes: config.output_capture_bytes,
        }
    }
}

/// What every plugin is linked against: the host imports of the contract
/// and wasmtime-wasi's WASI 0.2 (`contract::SERVED_WASI`), backed per call
/// by a context that grants nothing (`sandbox`). An instance pre-links only
/// the imports its component declares.
fn host_linker(engine: &Engine) -> Result<Linker<CallState>, RuntimeError> {
    let mut linker = Linker::<CallState>::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
        .map_err(|e| RuntimeError::Link(format!("{e:#}")))?;
    Plugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)
        .map_err(|e| RuntimeError::Link(format!("{e:#}")))?;
    super::deadline::bound_wasi_waits(&mut linker)
        .map_err(|e| RuntimeError::Link(format!("{e:#}")))?;
    Ok(linker)
}

/// Hands the compiler's freed memory back to the OS. Cranelift allocates
/// hundreds of MiB compiling an interpreter component (the TypeScript and
/// Python ports), spread over the malloc arenas of the compile threads, and
/// glibc keeps freed arena memory mapped (the figures: ARCHITECTURE.md,
/// "Measurements behind the code"). No allocator-independent way exists,
/// so this is glibc's own `malloc_trim` (every arena, free pages inside
/// chunks too); elsewhere nothing is done.
fn release_compile_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases free heap memory; it takes and
    // returns no pointer and is thread-safe (it locks each arena).
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How the name of a compiled artifact of this engine ends: the sha256 of
/// the component comes before it.
fn cache_suffix(engine_key: &str) -> String {
    format!("-{engine_key}-{WASMTIME_VERSION}.cwasm")
}

/// Removes what can no longer be used from the compiled cache: artifacts of
/// another engine configuration or wasmtime version, artifacts unused for
/// `max_age`, and temporary files a crashed writer left (older than an hour).
/// Unlinking a file another process has mapped is safe: the mapping keeps
/// the inode alive. Failures are logged, never fatal: the cache is an
/// optimisation.
fn prune_cache(dir: &Path, engine_key: &str, max_age: Duration, now: SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let ours = cache_suffix(engine_key);
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let age = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .unwrap_or_default();
        let stale = if name.starts_with('.') && name.ends_with(".tmp") {
            age > Duration::from_secs(3600)
        } else if name.ends_with(".cwasm") {
            !name.ends_with(&ours) || age > max_age
        } else {
            false
        };
        if stale {
            match std::fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(cache.file = %path.display(), error = %e, "failed to prune compiled plugin cache")
                }
            }
        }
    }
    if removed > 0 {
        tracing::info!(cache.dir = %dir.display(), removed, "pruned compiled plugin cache");
    }
    removed
}

/// Upper bound of a freed table kept resident (only its dirtied pages, and
/// never more than the table's size: see [`build_engine`]) for the next
/// instance in its pool slot. A Rust component's tables are a few KiB; the
/// interpreters' (componentize-py's libpython, StarlingMonkey) hundreds.
const TABLE_KEEP_RESIDENT_BYTES: usize = 1 << 20;

/// Most linear-memory slots in the pool: one below the size from which
/// wasmtime 48 shards a pool per CPU (`ShardLayout::new`: 128 slots). A
/// thread allocates in its own shard, and takes a cold slot there rather
/// than the warm one its module used in another shard; with the freed
/// slots' dirtied pages kept resident (below), a plugin filling its memory
/// left one such slot per shard and instance, outside every budget (the
/// hostile suite's `oom`: three 62 MiB slots for a plugin of two 64 MiB
/// instances). In one shard a plugin's next instance reuses a slot its
/// module freed, so what freed slots keep stays within the instances the
/// plugin was allowed (`a_plugins_freed_instances_keep_no_more_resident_
/// than_its_budget`, which fails if a wasmtime update shards again). 127
/// slots are about two memories per instance of the 64-instance pool; a
/// component with more memories (an interpreter and its adapter) is
/// refused an instance only when the pool is that full.
const UNSHARDED_MEMORIES: u32 = 127;

/// Builds the engine; with `pooling`, tries the pooling allocator first and
/// degrades to on-demand allocation if the pool cannot be reserved.
fn build_engine(config: &RuntimeConfig) -> Result<(Engine, bool), RuntimeError> {
    let base = base_config();
    if config.pooling {
        let mut pool = PoolingAllocationConfig::default();
        let instances = config.max_concurrent_instances.max(1);
        // A Rust wasm32-wasip2 component is one main module plus a few
        // adapter/shim modules: a handful of core instances, one or two
        // memories and tables each.
        pool.total_component_instances(instances)
            .total_core_instances(instances * 8)
            .max_core_instances_per_component(16)
            .total_memories((instances * 2).min(UNSHARDED_MEMORIES))
            .max_memories_per_component(4)
            .total_tables(instances * 4)
            .max_tables_per_component(8)
            .max_memory_size(config.memory_limit_bytes)
            // No slot is kept warm for its own sake: an instance takes
            // its module's freed slot, else any freed slot (the least
            // recently used), and a never-used one only when none is free.
            // A freed slot keeps its dirtied pages (below), and wasmtime
            // releases none of them when the module goes (it frees a
            // dropped module's slots as holding 0 bytes, the pages past the
            // image still resident): with a budget of warm slots, every
            // version of a plugin that filled its memory took fresh slots
            // and left its old ones resident (≈60 MiB per version swapped,
            // `a_replaced_version_leaves_nothing_resident_behind`). So the
            // slots ever dirtied are those the most instances live at once
            // needed, which the slot book and the memory budgets bound.
            .max_unused_warm_slots(0);
        // Every call instantiates afresh, so what a freed slot costs to
        // reuse is per-call cost. By default wasmtime `madvise`s a freed
        // memory back to zero, and the next instance page-faults every page
        // it touches again (≈18 faults per bench-node call, ~20 µs of the
        // ~34 µs CPU of an instantiate + empty call on the 2-core dev VM).
        // Where the kernel has the PAGEMAP_SCAN ioctl (Linux ≥ 6.7) wasmtime
        // finds the pages the instance dirtied and resets just those with
        // `memset` (to zero or the initial image: nothing leaks between
        // calls), keeping them resident: 2–3 faults per call, ~12–18 µs.
        // Without the ioctl, keep-resident would `memset` the low bytes
        // blindly (measured slower than madvise for a 1–4 MiB heap), so it
        // is only enabled with it. With the scan the bound costs nothing
        // unless pages are dirtied, so it is the whole memory: an
        // interpreter guest (componentize-js, componentize-py) dirties
        // megabytes per call, and a bound below that madvised the rest and
        // faulted it back in from the image on the next call (Python port,
        // 16 MiB → whole memory and tables 64 KiB → 1 MiB: 13.0 → 11.7 ms per
        // reconcile, busy RSS unchanged; `tests/bench/ports.py`).
        //
        // `MemoryReset::Whole` turns the scan off and keeps the whole memory
        // resident: wasmtime then restores all of it (the image copied back,
        // the rest zeroed) on every free, which costs a copy but never leaves
        // pages to fault in again; see `MemoryReset` for when that pays.
        match config.memory_reset {
            MemoryReset::Whole => {
                pool.pagemap_scan(wasmtime::Enabled::No)
                    .linear_memory_keep_resident(config.memory_limit_bytes)
                    .table_keep_resident(TABLE_KEEP_RESIDENT_BYTES);
            }
            MemoryReset::DirtyPages if PoolingAllocationConfig::is_pagemap_scan_available() => {
                pool.pagemap_scan(wasmtime::Enabled::Yes)
                    .linear_memory_keep_resident(config.memory_limit_bytes)
                    .table_keep_resident(TABLE_KEEP_RESIDENT_BYTES);
            }
            MemoryReset::DirtyPages => {}
        }
        let mut pooled = base.clone();
        pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        match Engine::new(&pooled) {
            Ok(engine) => return Ok((engine, true)),
            Err(e) => tracing::warn!(
                error = %format!("{e:#}"),
                "failed to reserve the plugin instance pool; using on-demand allocation"
            ),
        }
    }
    Engine::new(&base)
        .map(|e| (e, false))
        .map_err(|e| RuntimeError::Engine(format!("{e:#}")))
}

/// The engine key of `engine` (see [`PluginRuntime::engine_key`]).
pub(super) fn key_of(engine: &Engine) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    WASMTIME_VERSION.hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..12])
}

/// Feeds `Hash` output into sha256 (stable across processes, unlike
/// `DefaultHasher`'s unspecified algorithm).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        0 // unused: the digest is taken from the inner state
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Increments the engine epoch every `tick` on a dedicated thread; stopped
/// and joined on drop.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: &Engine, tick: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let weak = engine.weak();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rekon-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::park_timeout(tick);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .ok();
        if thread.is_none() {
            tracing::error!(
                "failed to start the epoch ticker thread; plugin calls cannot time out"
            );
        }
        Self { stop, thread }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// Deadline in epoch ticks for a call of `timeout`.
pub(crate) fn deadline_ticks(inner: &RuntimeInner, timeout: Duration) -> u64 {
    let tick = inner.config.epoch_tick.as_nanos().max(1);
    u64::try_from(timeout.as_nanos().div_ceil(tick))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// When a load happened, for status.
pub(crate) fn now() -> SystemTime {
    SystemTime::now()
}

#[cfg(test)]
mod tests {
    use wasmtime::Store;
    use wasmtime::component::Component;

    use super::*;

    #[test]
    fn pruning_removes_foreign_old_and_abandoned_files_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, age_days: u64| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"x").expect("write");
            let when = SystemTime::now() - Duration::from_secs(age_days * 24 * 3600);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(when))
                .expect("set mtime");
        };
        file("aaa-KEY-48.0.8.cwasm", 1); // ours, recent: kept
        file("bbb-KEY-48.0.8.cwasm", 40); // ours, unused for 40 days: pruned
        file("ccc-OTHER-47.0.0.cwasm", 0); // another engine: pruned
        file(".ddd-KEY-48.0.8.cwasm.123.tmp", 1); // abandoned write: pruned
        file(".eee-KEY-48.0.8.cwasm.124.tmp", 0); // maybe being written: kept
        file("notes.txt", 400); // not ours: kept
        let removed = prune_cache(
            dir.path(),
            "KEY",
            Duration::from_secs(30 * 24 * 3600),
            SystemTime::now(),
        );
        assert_eq!(removed, 3);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".eee-KEY-48.0.8.cwasm.124.tmp",
                "aaa-KEY-48.0.8.cwasm",
                "notes.txt"
            ]
        );
    }

    /// `contract::SERVED_WASI` names only what the linker serves: a
    /// component importing one item of each listed interface finds it in
    /// the linker (its type may differ: the item is imported as a unit
    /// function or a resource, and only a missing implementation counts), a
    /// component importing an item of an unlisted interface does not. An
    /// empty instance would link whether served or not, hence one item each.
    #[test]
    fn every_served_wasi_interface_is_linked() {
        // An item of each interface (functions, or resources where the
        // interface defines no function).
        const ITEMS: &[(&str, &str)] = &[
            ("wasi:cli/environment", "func get-environment"),
            ("wasi:cli/exit", "func exit"),
            ("wasi:cli/stdin", "func get-stdin"),
            ("wasi:cli/stdout", "func get-stdout"),
            ("wasi:cli/stderr", "func get-stderr"),
            ("wasi:cli/terminal-input", "resource terminal-input"),
            ("wasi:cli/terminal-output", "resource terminal-output"),
            ("wasi:cli/terminal-stdin", "func get-terminal-stdin"),
            ("wasi:cli/terminal-stdout", "func get-terminal-stdout"),
            ("wasi:cli/terminal-stderr", "func get-terminal-stderr"),
            ("wasi:clocks/monotonic-clock", "func now"),
            ("wasi:clocks/wall-clock", "func now"),
            ("wasi:filesystem/types", "resource descriptor"),
            ("wasi:filesystem/preopens", "func get-directories"),
            ("wasi:io/error", "resource error"),
            ("wasi:io/poll", "func poll"),
            ("wasi:io/streams", "resource input-stream"),
            ("wasi:random/random", "func get-random-bytes"),
            ("wasi:random/insecure", "func get-insecure-random-bytes"),
            ("wasi:random/insecure-seed", "func insecure-seed"),
            ("wasi:sockets/network", "resource network"),
            ("wasi:sockets/instance-network", "func instance-network"),
            ("wasi:sockets/udp", "resource udp-socket"),
            ("wasi:sockets/udp-create-socket", "func create-udp-socket"),
            ("wasi:sockets/tcp", "resource tcp-socket"),
            ("wasi:sockets/tcp-create-socket", "func create-tcp-socket"),
            ("wasi:sockets/ip-name-lookup", "func resolve-addresses"),
        ];
        let (engine, _) = build_engine(&RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        })
        .expect("engine");
        let linker = host_linker(&engine).expect("linker");
        let served = |name: &str, item: &str| {
            let ty = match item.split_once(' ') {
                Some(("func", f)) => format!(r#"(export "{f}" (func))"#),
                Some(("resource", r)) => format!(r#"(export "{r}" (type (sub resource)))"#),
                _ => unreachable!("{item}"),
            };
            let wat = format!(r#"(component (import "{name}" (instance {ty})))"#);
            let component = Component::new(&engine, wat).expect("compile");
            match linker.instantiate_pre(&component) {
                Ok(_) => true,
                Err(e) => !format!("{e:#}").contains("implementation is missing"),
            }
        };
        let listed: Vec<&str> = ITEMS.iter().map(|(i, _)| *i).collect();
        assert_eq!(listed, super::super::contract::SERVED_WASI);
        for (iface, item) in ITEMS {
            assert!(
                served(&format!("{iface}@0.2.0"), item),
                "{iface}@0.2.0 is not linked"
            );
            assert!(
                served(&format!("{iface}@0.2.6"), item),
                "{iface}@0.2.6 is not linked"
            );
        }
        assert!(!served("wasi:http/outgoing-handler@0.2.0", "func handle"));
        assert!(!served("wasi:keyvalue/store@0.2.0", "func open"));
        assert!(!served("acme:secrets/vault@1.0.0", "func read"));
    }

    /// A guest importing WASI gets a context that grants nothing: an empty
    /// environment, a monotonic clock frozen at zero, and "random" numbers
    /// that are the same in every call (no entropy).
    #[test]
    fn wasi_guests_get_no_environment_clock_or_entropy() {
        const GUEST: &str = r#"
            (component
              (import "wasi:cli/environment@0.2.0" (instance $env
                (export "get-environment" (func (result (list (tuple string string)))))))
              (import "wasi:clocks/monotonic-clock@0.2.0" (instance $clock
                (export "now" (func (result u64)))))
              (import "wasi:random/random@0.2.0" (instance $random
                (export "get-random-u64" (func (result u64)))))
              (core module $mem
                (memory (export "memory") 1)
                (global $next (mut i32) (i32.const 1024))
                (func (export "realloc") (param i32 i32 i32 i32) (result i32) (local $r i32)
                  (local.set $r (global.get $next))
                  (global.set $next (i32.add (local.get $r) (i32.add (local.get 3) (i32.const 8))))
                  (local.get $r)))
              (core instance $m (instantiate $mem))
              (alias core export $m "memory" (core memory $memory))
              (alias core export $m "realloc" (core func $realloc))
              (alias export $env "get-environment" (func $get-env))
              (alias export $clock "now" (func $now))
              (alias export $random "get-random-u64" (func $rand))
              (core func $get-env-lowered (canon lower (func $get-env) (memory $memory) (realloc $realloc)))
              (core func $now-lowered (canon lower (func $now)))
              (core func $rand-lowered (canon lower (func $rand)))
              (core module $main
                (import "m" "memory" (memory 1))
                (import "w" "get-env" (func $ge (param i32)))
                (import "w" "now" (func $now (result i64)))
                (import "w" "rand" (func $rand (result i64)))
                (func (export "env-len") (result i32)
                  (call $ge (i32.const 0))
                  (i32.load (i32.const 4)))
                (func (export "now") (result i64) (call $now))
                (func (export "rand") (result i64) (call $rand)))
              (core instance $main (instantiate $main
                (with "m" (instance $m))
                (with "w" (instance
                  (export "get-env" (func $get-env-lowered))
                  (export "now" (func $now-lowered))
                  (export "rand" (func $rand-lowered))))))
              (func (export "env-len") (result u32) (canon lift (core func $main "env-len")))
              (func (export "now") (result u64) (canon lift (core func $main "now")))
              (func (export "rand") (result u64) (canon lift (core func $main "rand"))))
        "#;
        let config = RuntimeConfig::default();
        let (engine, _) = build_engine(&config).expect("engine");
        let linker = host_linker(&engine).expect("linker");
        let component = Component::new(&engine, GUEST).expect("compile the WASI guest");
        let pre = linker
            .instantiate_pre(&component)
            .expect("link the WASI guest");
        let mut randoms = Vec::new();
        for _ in 0..2 {
            let state = CallState::new(
                Arc::from("wasi-guest"),
                Arc::new(crate::plugin::NoReads),
                crate::action::timestamp(SystemTime::now()),
                PluginRuntime::limits_of(&config),
                None,
            );
            let mut store = Store::new(&engine, state);
            store.set_epoch_deadline(u64::MAX / 2);
            let instance = pre.instantiate(&mut store).expect("instantiate");
            let call = |store: &mut Store<CallState>, name: &str| -> u64 {
                match name {
                    "env-len" => {
                        let f = instance
                            .get_typed_func::<(), (u32,)>(&mut *store, name)
                            .expect("export");
                        u64::from(f.call(&mut *store, ()).expect("call").0)
                    }
                    _ => {
                        let f = instance
                            .get_typed_func::<(), (u64,)>(&mut *store, name)
                            .expect("export");
                        f.call(&mut *store, ()).expect("call").0
                    }
                }
            };
            assert_eq!(
                call(&mut store, "env-len"),
                0,
                "the guest saw environment variables"
            );
            assert_eq!(
                call(&mut store, "now"),
                0,
                "the guest saw a running monotonic clock"
            );
            randoms.push(call(&mut store, "rand"));
        }
        assert_eq!(randoms[0], randoms[1], "the guest got entropy");
    }
}

#[cfg(test)]
mod fresh_memory_tests;
