//! What every floor reports through: Prometheus [`metrics`], Kubernetes
//! [`events`] on the host's own Pod, and the HTTP [`server`] for `/metrics`,
//! `/healthz` and `/readyz` (its readiness checks are closures or watch
//! channels, so it knows nothing of the engine), with [`serving_cert`] and
//! [`scrape_auth`] securing `/metrics` under `--metrics-secure`.

pub mod events;
pub mod metrics;
pub mod scrape_auth;
pub mod server;
pub mod serving_cert;
