//! Per-plugin controllers and the manager that starts, swaps and stops them.
//!
//! One controller per loaded plugin:
//!
//! 1. its registration is resolved against the engaged clusters into a set of
//!    watches ([`scope`]: one [`WatchKey`] per resource and cluster, each
//!    with the mappings that apply) and a [`PrimaryScope`] (its primaries:
//!    the primary kind, in the primary clusters, matching the primary
//!    selector); the caches are shared with other plugins
//!    ([`crate::cache::CacheManager`]);
//! 2. cache events arrive in the controller's inbox (coalesced per object)
//!    and are mapped ([`mapping`]) to request keys that always name their
//!    cluster, and queued ([`crate::queue::WorkQueue`]); `custom` mappings are
//!    called off the event pump;
//! 3. the runner ([`runner`]) hands keys to up to
//!    `max-concurrent-reconciles` reconcile tasks once the watches have
//!    settled; each reads the primary from the cache, takes the step the
//!    shared scope rule gives ([`finalizer`]: add the finalizer, reconcile
//!    live / deleting / leaving, release the finalizer), calls the plugin,
//!    and gives the outcome's actions to the [`crate::writer::Writer`];
//!    errors back off, `requeue-after` sets a timer.
//!
//! The [`Manager`] follows the plugin registry (load, replace, remove) and the
//! cluster registry (engage, disengage, health changes): each of these
//! requeues the primaries of the plugins whose `clusters` cover the cluster
//! (health changes coalesced per cluster over [`HEALTH_DEBOUNCE`], see
//! [`health`]). It also names the plugins a failing watch degrades.
//!
//! ```no_run
//! # async fn demo(main: kube::Client, edge: kube::Client, plugins: rekon::plugin::PluginRegistry) -> anyhow::Result<()> {
//! use rekon::cache::{CacheManager, Resolver};
//! use rekon::cluster::ClusterRegistry;
//! use rekon::controller::{ControllerConfig, Manager};
//! use rekon::writer::{Writer, WriterConfig};
//!
//! let clusters = ClusterRegistry::new("main", main);
//! clusters.add("edge", edge)?;
//! let resolver = Resolver::default();
//! let caches = CacheManager::new(clusters.clone(), resolver.clone());
//! let writer = Writer::new(clusters.clone(), resolver, WriterConfig::default());
//! let manager = Manager::new(caches, writer, ControllerConfig::default());
//! // Follows plugin loads, swaps and removals until the future resolves,
//! // then lets in-flight reconciles finish.
//! manager.run(&plugins, async { let _ = tokio::signal::ctrl_c().await; }).await;
//! # Ok(()) }
//! ```

//! # Layout
//! - [`reconciler`]: the [`Reconciler`] trait (a loaded plugin, or native
//!   code in tests and benches) and the [`Layer`] wrapped around each.
//! - [`config`]: the settings, [`ControllerConfig`].
//! - [`scope`]: watches wanted and the primary scope of a registration.
//! - [`mapping`]: one cache event → request keys.
//! - [`reads`]: [`reads::PluginReads`], a plugin's view of the caches.
//! - [`finalizer`]: the finalizer patches.
//! - [`runner`]: a controller's shared state, its runner loop, one reconcile.
//! - [`routing`]: the event pump and the `custom`-map workers.
//! - [`health`]: the cluster-health debounce.
//! - [`manager`]: the [`Manager`].
//!
//! Imports inside the folder point one way, in the order above (each file
//! only imports files listed before it); `mod.rs` only re-exports.
//!
//! # Floor
//! Stands on the plugin runtime, the writer, caches, clusters, leases and
//! telemetry. The app and the safe-change machinery stand on it; nothing
//! here imports them.

pub mod config;
pub mod finalizer;
pub mod health;
pub mod manager;
pub mod mapping;
pub mod reads;
pub mod reconciler;
pub mod routing;
pub mod runner;
pub mod scope;

pub use config::{ControllerConfig, QueueStats};
pub use health::HEALTH_DEBOUNCE;
pub use manager::{Degraded, Manager};
pub use reconciler::{Layer, Reconciler};
pub use scope::{PrimaryScope, WatchKey, covers};
