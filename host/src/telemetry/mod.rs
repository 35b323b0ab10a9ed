//! What every floor reports through: Prometheus metrics, Kubernetes Events
//! on the host's own Pod, and the HTTP server that serves `/metrics`,
//! `/healthz` and `/readyz`.
//!
//! # Layout
//! - [`metrics`]: the Prometheus series ([`metrics::Metrics`], cheap
//!   handles; controller-runtime's names and rekon's own).
//! - [`events`]: [`events::HostEvents`], Events regarding the host's Pod.
//! - [`server`]: the HTTP server; readiness checks are closures or watch
//!   channels, so it knows nothing of the engine.
//! - [`serving_cert`] and [`scrape_auth`]: secured metrics (TLS with a
//!   certificate reloaded on change; each scrape's token reviewed).
//!
//! # Floor
//! The bottom floor: imports nothing of the crate. Everything else may
//! import it.

pub mod events;
pub mod metrics;
pub mod scrape_auth;
pub mod server;
pub mod serving_cert;
