//! Running rekon in a cluster: leader election, metrics, probes, Events
//! about the host itself, and the manifests (`rekon rbac`, `rekon crds`)
//! derived from the plugins.
//!
//! # Layout
//! - [`leader`]: Lease-based leader election and the [`leader::LeaderGate`]
//!   the controller and writer check before writing.
//! - [`shard`]: sharding across replicas (shard and membership Leases,
//!   key → shard, assignment) and the [`shard::Shards`] handle controllers
//!   and the writer use.
//! - [`metrics`]: the Prometheus series ([`metrics::Metrics`], cheap handles).
//! - [`server`]: `/metrics`, `/healthz` and `/readyz` over HTTP.
//! - [`events`]: Kubernetes Events on the host's own Pod and the plugin
//!   status reporter (logs, metrics and Events for plugin loads and failures).
//! - [`manifests`]: least-privilege RBAC and CRD YAML derived from plugin
//!   registrations.
//! - [`service`]: [`Ops`], all of the above configured from one
//!   [`OpsConfig`] and run beside the engine by `App`.
//!
//! Each piece is a self-contained component with a small API; [`Ops`] wires
//! them to the engine's registries (see `crate::app`).

pub mod events;
pub mod leader;
pub mod manifests;
pub mod metrics;
pub mod server;
pub mod service;
pub mod shard;

pub use service::{EngineParts, Ops, OpsConfig, OpsError, SecretSource};
