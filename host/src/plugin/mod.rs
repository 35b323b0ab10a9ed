//! The plugin runtime: wasmtime engine, bindings, sandbox limits, capability
//! checks, the plugin registry and hot reload.
//!
//! A plugin is a WebAssembly component of the world `rekon:plugin/plugin`
//! (package `rekon:plugin@0.3.1`, see `wit/`). The runtime compiles it once
//! (cached on disk by digest), validates that it speaks our contract, calls
//! its `register` export, and then runs every `reconcile` / `map` call in a
//! fresh, pre-instantiated store with a memory cap and an epoch deadline.
//!
//! # Layout
//!
//! - `bindings`: the one `bindgen!` over `wit/`; everything generated stays
//!   private; `convert` translates its values to and from
//!   [`crate::action`], the vocabulary everything above speaks.
//! - `host_reads`: [`HostReads`], what a call may read (the engine's caches
//!   implement it).
//! - `runtime`: [`PluginRuntime`] ([`RuntimeConfig`] → engine with pooling
//!   allocator and epoch ticker), compile cache, loading and validation.
//! - `contract`: checks a component's imports/exports against the contract
//!   version this host speaks.
//! - `sandbox`: per-call store state: the capability-free WASI context, the
//!   memory limiter, the host imports served from [`HostReads`].
//! - `loaded`: [`LoadedPlugin`] (calls, error classification) and
//!   [`PluginSession`] (a reused instance, for benchmarks and dry runs).
//! - `capability`: checks every returned action against the plugin's
//!   declared permissions and the operator policy.
//! - `policy`: [`Policy`], the operator's narrowing of what each plugin may
//!   do (`rekon run --policy`), resolved per plugin at load.
//! - `registry`: [`PluginRegistry`]: the set of loaded plugins, keyed by
//!   name, fed by a directory scan and a notify watcher (hot reload).
//!
//! # Floor
//! Imports [`crate::action`] and [`crate::telemetry`]; never the writer,
//! the controller or anything above. `mod.rs` only declares and re-exports:
//! no file here imports it back.
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

mod bindings;
mod capability;
mod contract;
mod convert;
mod error;
mod host_reads;
mod loaded;
mod policy;
mod registry;
mod runtime;
mod sandbox;
mod validation;

pub use bindings::types::{LogLevel, ReadError, ReconcileError};
pub use contract::{CONTRACT_PACKAGE, CONTRACT_VERSION, host_range};
pub use error::{CallError, LoadError, RegistryError};
pub use host_reads::{HostReads, NoReads};
pub use loaded::{LoadOneError, LoadOptions, LoadedPlugin, PluginSession};
pub use policy::{PluginPolicy, Policy, PolicyEntry, PolicyError, PolicyRule};
pub use registry::{
    PluginRegistry, PluginStatus, Refusal, RegistryEvent, is_shadow_file, settings_file,
};
pub use runtime::{
    CallMode, LoadTimings, PluginRuntime, RuntimeConfig, RuntimeError, RuntimeStats,
};
pub use validation::{InvalidRegistration, validate_registration};
