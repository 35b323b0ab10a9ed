//! Per-call store state: the capability-free WASI context, the memory
//! limiter and the host imports (`rekon:plugin/host`).
//!
//! # Why link wasmtime-wasi at all
//!
//! A plugin built for `wasm32-wasip2` with Rust std imports a fixed set of
//! WASI interfaces (cli environment/exit/stdio, clocks, random, filesystem
//! preopens, io streams) whether or not it uses them, so the component
//! cannot be instantiated without them. Two options: hand-written deny-stubs
//! for each of std's imports, or wasmtime-wasi's maintained implementation
//! with an empty context. We link wasmtime-wasi p2 and grant nothing:
//!
//! - no preopened directories (the filesystem is empty), no environment
//!   variables, no arguments;
//! - TCP, UDP and name lookup disabled and every socket address denied;
//! - wall clock fixed at the request time and monotonic clock fixed at zero
//!   (a plugin has no clock: reconciles are replayable);
//! - random (secure and insecure) replaced by a deterministic sequence;
//! - stdin empty; stdout and stderr captured into one bounded in-memory pipe
//!   so that a guest panic message can be reported; whatever a call wrote
//!   goes to the host's log (debug, with the plugin's name) after it.
//!
//! The context is built on a call's first WASI use: a guest importing no
//! WASI (componentize-js with its features disabled) never pays for one.
//! Which WASI interfaces are linked at all is `contract::SERVED_WASI`; a
//! component importing anything else is refused by name at load.
//!
//! Stubs would be ours to keep in sync with std's import set; the empty
//! context denies the same things with the upstream implementation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{host, types};
use super::convert::Convert;
use super::host_reads::HostReads;

/// Everything one call's store holds.
pub(crate) struct CallState {
    pub(crate) plugin: Arc<str>,
    pub(crate) reads: Arc<dyn HostReads>,
    pub(crate) request_time: types::Timestamp,
    pub(crate) limiter: Limiter,
    pub(crate) output: MemoryOutputPipe,
    /// The instance's settings (JSON), served by `settings()`.
    pub(crate) settings: Option<Arc<str>>,
    /// What `settings-schema` declared during this call (read after
    /// `register`).
    pub(crate) settings_schema: Option<String>,
    /// Wall-clock time the guest sees (the request time).
    since_epoch: Duration,
    /// When the call must be over (`deadline.rs`): bounds the guest's
    /// waits in WASI as the epoch deadline bounds its running.
    pub(crate) deadline: Option<CallDeadline>,
    /// Built on first use (see `WasiView for CallState`).
    wasi: Option<WasiCtx>,
    table: ResourceTable,
}

/// When a call must be over: set on its store before the guest runs
/// (`deadline.rs` bounds the guest's waits in WASI by it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallDeadline {
    /// On tokio's clock, which wasmtime-wasi's timers use too.
    pub(crate) at: tokio::time::Instant,
    /// The call's time limit (for messages).
    pub(crate) timeout: Duration,
}

impl CallDeadline {
    /// `timeout` from now.
    pub(crate) fn after(timeout: Duration) -> Self {
        let now = tokio::time::Instant::now();
        Self {
            // A limit too large to represent is no limit a call can reach.
            at: now
                .checked_add(timeout)
                .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600)),
            timeout,
        }
    }
}

/// Limits of one store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) memory_bytes: usize,
    pub(crate) output_bytes: usize,
}

impl CallState {
    pub(crate) fn new(
        plugin: Arc<str>,
        reads: Arc<dyn HostReads>,
        request_time: crate::action::Timestamp,
        limits: Limits,
        settings: Option<Arc<str>>,
    ) -> Self {
        let since_epoch = request_time.since_epoch();
        let request_time: types::Timestamp = request_time.convert();
        let output = MemoryOutputPipe::new(limits.output_bytes);
        Self {
            plugin,
            reads,
            request_time,
            limiter: Limiter::new(limits.memory_bytes),
            output,
            settings,
            settings_schema: None,
            since_epoch,
            deadline: None,
            wasi: None,
            table: ResourceTable::new(),
        }
    }

    /// The call's resources (WASI's pollables and streams among them).
    pub(crate) fn table_mut(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// What the guest wrote to stdout/stderr (bounded), lossily decoded.
    pub(crate) fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output.contents()).into_owned()
    }
}

/// The WASI context of one call: nothing granted (see the module docs);
/// output into the call's bounded capture.
fn capability_free_wasi(output: &MemoryOutputPipe, since_epoch: Duration) -> WasiCtx {
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(output.clone())
        .stderr(output.clone())
        .wall_clock(FixedWallClock(since_epoch))
        .monotonic_clock(FixedMonotonicClock)
        .secure_random(deterministic_random())
        .insecure_random(deterministic_random())
        .insecure_random_seed(0)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    builder.build()
}

/// A fixed, deterministic byte sequence: plugins get no entropy (HashMap
/// seeds and the like still work, and runs are reproducible).
fn deterministic_random() -> wasmtime_wasi::Deterministic {
    wasmtime_wasi::Deterministic::new((0u8..=255).map(|b| b.wrapping_mul(151) ^ 0x5a).collect())
}

/// Wall clock frozen at the request time.
struct FixedWallClock(Duration);

impl wasmtime_wasi::HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        self.0
    }
}

/// Monotonic clock frozen at zero.
struct FixedMonotonicClock;

impl wasmtime_wasi::HostMonotonicClock for FixedMonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        0
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        // Built on the guest's first WASI call: most calls of a guest that
        // imports WASI never use it, and a guest importing none
        // (componentize-js with its WASI features disabled) never can.
        let (output, since_epoch) = (&self.output, self.since_epoch);
        let ctx = self
            .wasi
            .get_or_insert_with(|| capability_free_wasi(output, since_epoch));
        WasiCtxView {
            ctx,
            table: &mut self.table,
        }
    }
}

/// wasmtime's [`StoreLimits`] (memory cap, trap on grow failure) plus a
/// record of whether the cap was hit, so a trap can be reported as out of
/// memory rather than as whatever the guest did next.
pub(crate) struct Limiter {
    inner: StoreLimits,
    hit: AtomicBool,
    pub(crate) memory_bytes: usize,
}

impl Limiter {
    fn new(memory_bytes: usize) -> Self {
        Self {
            inner: StoreLimitsBuilder::new()
                .memory_size(memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            hit: AtomicBool::new(false),
            memory_bytes,
        }
    }

    /// Whether the guest tried to grow beyond the cap.
    pub(crate) fn hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed)
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let result = self.inner.memory_growing(current, desired, maximum);
        if !matches!(result, Ok(true)) {
            self.hit.store(true, Ordering::Relaxed);
        }
        result
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.hit.store(true, Ordering::Relaxed);
        self.inner.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

impl types::Host for CallState {}

impl host::Host for CallState {
    fn get(
        &mut self,
        cluster: String,
        resource: types::Resource,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<String>, types::ReadError> {
        self.reads
            .get(&cluster, &resource.convert(), namespace.as_deref(), &name)
    }

    fn list(
        &mut self,
        cluster: String,
        resource: types::Resource,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<String>, types::ReadError> {
        self.reads.list(
            &cluster,
            &resource.convert(),
            namespace.as_deref(),
            label_selector.as_deref(),
        )
    }

    fn clusters(&mut self) -> Vec<types::ClusterInfo> {
        self.reads.clusters().convert()
    }

    fn log(&mut self, level: types::LogLevel, message: String, fields: Vec<(String, String)>) {
        // The request (cluster, namespace, name) comes from the reconcile's
        // span, which the call runs in. Field names are plugin-chosen and
        // tracing's are static, so the plugin's fields travel as one JSON
        // object (`plugin_fields={"pool":"gpu"}`): structured for a JSON log
        // pipeline, not a flattened `k=v` string.
        let fields = JsonFields(&fields);
        let plugin = &*self.plugin;
        match level {
            types::LogLevel::Debug => {
                tracing::debug!(plugin, plugin_fields = %fields, "{message}");
            }
            types::LogLevel::Info => tracing::info!(plugin, plugin_fields = %fields, "{message}"),
            types::LogLevel::Warn => tracing::warn!(plugin, plugin_fields = %fields, "{message}"),
            types::LogLevel::Error => {
                tracing::error!(plugin, plugin_fields = %fields, "{message}");
            }
        }
    }

    fn request_time(&mut self) -> types::Timestamp {
        self.request_time
    }

    fn settings(&mut self) -> Option<String> {
        self.settings.as_deref().map(str::to_owned)
    }

    fn settings_schema(&mut self, schema: String) {
        self.settings_schema = Some(schema);
    }
}

/// The plugin's fields as a JSON object (later keys win on duplicates).
struct JsonFields<'a>(&'a [(String, String)]);

impl std::fmt::Display for JsonFields<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map: serde_json::Map<String, serde_json::Value> = self
            .0
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        write!(f, "{}", serde_json::Value::Object(map))
    }
}
