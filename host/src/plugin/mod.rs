//! The plugin runtime: wasmtime engine, bindings, sandbox limits, capability
//! checks, the plugin registry and hot reload.
//!
//! A plugin is a WebAssembly component of the world `rekon:plugin/plugin`
//! (package `rekon:plugin@0.3.0`, see `wit/`). The runtime compiles it once
//! (cached on disk by digest), validates that it speaks our contract, calls
//! its `register` export, and then runs every `reconcile` / `map` call in a
//! fresh, pre-instantiated store with a memory cap and an epoch deadline.
//!
//! # Layout
//!
//! - `bindings`: the one `bindgen!` over `wit/`; everything generated stays
//!   private, the curated types are re-exported here.
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
//! - `inspect`: what `rekon plugin inspect` prints.
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
mod error;
mod inspect;
mod loaded;
mod policy;
mod registry;
mod runtime;
mod sandbox;
mod validation;

pub(crate) use crate::writer::action_cluster;
pub use bindings::types::{
    Action, ApplyAction, ClusterHealth, ClusterInfo, ClusterSet, CreateAction, DeleteAction,
    EventAction, EventType, LogLevel, Mapping, ObjectRef, Outcome, OwnerLabels, PatchAction,
    PatchType, Permission, Phase, Propagation, ReadError, ReconcileError, Registration, Request,
    Resource, Scope, Timestamp, Watch,
};
pub(crate) use capability::action_label;
pub use capability::{Required, Verb, describe_resource, permits, required_permission};
pub use contract::{CONTRACT_PACKAGE, CONTRACT_VERSION};
pub use error::{CallError, LoadError, RegistryError};
pub use inspect::{
    ClustersView, InspectError, InspectPolicy, InspectReport, MappingView, OutputFormat,
    PermissionView, ResourceView, WatchView, inspect_file, inspect_file_with_policy,
};
pub use loaded::{LoadedPlugin, PluginSession};
pub use policy::{PluginPolicy, Policy, PolicyEntry, PolicyError, PolicyRule};
pub use registry::{PluginRegistry, PluginStatus, RegistryEvent, is_shadow_file};
pub use runtime::{
    CallMode, LoadTimings, PluginRuntime, RuntimeConfig, RuntimeError, RuntimeStats,
};
pub use validation::validate_registration;

/// Read access to the host's caches, given to a plugin for one call.
///
/// Implemented by the engine's caches, scoped per plugin (a plugin only sees
/// the resources it watches, in the clusters it covers). Called from a
/// blocking thread while the guest runs: implementations must not block on
/// the async runtime.
pub trait HostReads: Send + Sync + 'static {
    /// The object `name` (in `namespace` for namespaced resources) of
    /// `resource` in `cluster`, as JSON; `None` if the cache has no such object.
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError>;

    /// Objects of `resource` in `cluster` as JSON, optionally limited to a
    /// namespace and a Kubernetes label selector.
    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError>;

    /// The engaged clusters and their health. Also used to resolve
    /// [`ClusterSet::Primary`] when checking a plugin's actions.
    fn clusters(&self) -> Vec<ClusterInfo>;
}

/// A [`HostReads`] that sees nothing: every read fails with
/// [`ReadError::NotWatched`] and no cluster is engaged. Used for `register`
/// (which runs before any watch exists) and `rekon plugin inspect`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoReads;

impl HostReads for NoReads {
    fn get(
        &self,
        _cluster: &str,
        resource: &Resource,
        _namespace: Option<&str>,
        _name: &str,
    ) -> Result<Option<String>, ReadError> {
        Err(ReadError::NotWatched(format!(
            "no cache is available here (reading {})",
            capability::describe_resource(resource)
        )))
    }

    fn list(
        &self,
        _cluster: &str,
        resource: &Resource,
        _namespace: Option<&str>,
        _label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        Err(ReadError::NotWatched(format!(
            "no cache is available here (listing {})",
            capability::describe_resource(resource)
        )))
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        Vec::new()
    }
}

/// Converts a [`std::time::SystemTime`] into the contract's [`Timestamp`]
/// (times before the Unix epoch clamp to zero).
#[must_use]
pub fn timestamp(time: std::time::SystemTime) -> Timestamp {
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanoseconds: since.subsec_nanos(),
    }
}

impl From<rekon_rules::Phase> for Phase {
    fn from(p: rekon_rules::Phase) -> Self {
        match p {
            rekon_rules::Phase::Live => Self::Live,
            rekon_rules::Phase::Deleting => Self::Deleting,
            rekon_rules::Phase::Leaving => Self::Leaving,
        }
    }
}
