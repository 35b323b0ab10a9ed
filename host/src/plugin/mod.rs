//! The plugin runtime. A plugin is a WebAssembly component of the world
//! `rekon:plugin/plugin` (package `rekon:plugin@0.3.1`, see `wit/`); the
//! [`PluginRuntime`] compiles it once (cached on disk by digest), validates
//! that it speaks our contract, calls its `register` export, and then runs
//! every `reconcile` / `map` call of the [`LoadedPlugin`] in a fresh,
//! pre-instantiated store with a memory cap and an epoch deadline, checking
//! every returned action against its permissions and the operator
//! [`Policy`]. The [`PluginRegistry`] holds the loaded plugins by name and
//! reloads them when their files change.
//!
//! # Example
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use rekon::plugin::{PluginRegistry, PluginRuntime, RuntimeConfig};
//! let runtime = PluginRuntime::new(RuntimeConfig {
//!     cache_dir: Some("/var/cache/rekon".into()),
//!     ..RuntimeConfig::default()
//! })?;
//! let registry = PluginRegistry::new(runtime);
//! registry.load_dir("/plugins".as_ref())?;
//! let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let watch = registry.clone();
//! tokio::spawn(async move {
//!     watch.watch_dir("/plugins".into(), async move { let _ = stopped.await; }).await
//! });
//! for plugin in registry.plugins() {
//!     println!("{} {}", plugin.name(), plugin.version());
//! }
//! # Ok(()) }
//! ```

mod admission;
mod artifacts;
mod bindings;
mod bounds;
mod call;
mod capability;
mod cel_policies;
mod compile_bound;
mod containment;
mod contract;
mod conversion;
mod convert;
mod deadline;
mod error;
mod fair_share;
mod file_check;
mod file_limits;
mod file_precompiled;
mod host_budget;
mod host_reads;
mod limits;
mod loaded;
mod policy;
mod precompiled;
mod registry;
mod runtime;
mod runtime_config;
mod sandbox;
mod slots;
mod validation;

pub use admission::{
    AdmissionKind, AdmissionRule, AdmitError, Answer, Denial, FailurePolicy, FieldError,
    MatchCondition, Mutation, Operation, Review, UserInfo, Verdict,
};
pub use artifacts::host_engine_key;
pub use bindings::types::{LogLevel, ReadError, ReconcileError};
pub use bounds::{API_SERVER_MAX_REQUEST_BYTES, Contained, OutcomeBounds};
pub use cel_policies::{CelCondition, CelPolicy, CelValidation};
pub use compile_bound::{CompileBound, compile_stdio};
pub use containment::ContainedRecord;
pub use contract::{CONTRACT_PACKAGE, CONTRACT_VERSION, host_range};
pub use conversion::{CONVERSION_TIMEOUT, ConversionRule};
pub use error::{CallError, LoadError, RegistryError};
pub use fair_share::FairShareConfig;
pub use file_check::{FileCheck, signature_file};
pub use file_limits::limits_file;
pub use file_precompiled::precompiled_file;
pub use host_budget::{
    CGROUP_ROOT, DEFAULT_HEADROOM_PERCENT, HostMemoryBudget, cgroup_memory_limit,
};
pub use host_reads::{HostReads, NoReads};
pub use limits::PluginLimits;
pub use loaded::{LoadOneError, LoadOptions, LoadedPlugin, PluginSession};
pub use policy::{PluginPolicy, Policy, PolicyEntry, PolicyError, PolicyRule};
pub use precompiled::{Code, CodePath, Precompiled, PrecompiledRefused};
pub use registry::{
    PluginRegistry, PluginStatus, Refusal, RegistryEvent, is_shadow_file, settings_file,
};
pub use runtime::{
    CallMode, LoadTimings, MemoryReset, PluginRuntime, RuntimeConfig, RuntimeError, RuntimeStats,
};
pub use validation::{InvalidRegistration, validate_registration};
