//! Per-plugin controllers and the [`Manager`] that starts, swaps and stops
//! them. A controller turns its plugin's registration into watches and a
//! primary scope ([`scope`]), maps cache events to request keys
//! ([`mapping`]) in its work queue ([`crate::queue::WorkQueue`]), and its
//! [`runner`] hands keys to reconcile tasks that take the finalizer step
//! ([`finalizer`]), call the plugin and give the outcome's actions to the
//! [`crate::writer::Writer`]; ARCHITECTURE.md walks through it step by step.
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
