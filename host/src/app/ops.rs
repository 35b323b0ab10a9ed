//! [`Ops`]: everything that runs beside the engine in `rekon run`,
//! built from one [`OpsConfig`].
//!
//! [`Ops::build`] binds the HTTP server, prepares leader election on the
//! primary cluster and finds the host's own Pod; [`Ops::gate`] is handed to
//! the writer before the engine starts; [`Ops::run`] then serves and
//! campaigns, runs the dynamic-cluster providers, and reports plugin status
//! and cluster membership (logs, metrics, Events) until its shutdown future
//! resolves. The App resolves that future only after the controllers have
//! finished their in-flight reconciles, so the lease is released only when
//! this replica has stopped writing.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, error, warn};

use super::reporting::{report_leadership, report_plugin_status};
use crate::cluster::provider::{DirProvider, SecretProvider};
use crate::cluster::{ClusterRegistry, Health};
use crate::controller::Manager;
use crate::lease::shard::{ShardRunner, ShardingConfig, Shards};
use crate::lease::{self as leader, LeaderElectionConfig, LeaderElector, LeaderGate, RunEnd};
use crate::plugin::PluginRegistry;
use crate::telemetry::events::HostEvents;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::scrape_auth::ScrapeAuth;
use crate::telemetry::server::{self, OpsServer, Readiness, SecureMetrics};
use crate::telemetry::serving_cert::{CertError, ServingCert};

/// Errors of setting up the operations side.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The metrics/probe server could not bind.
    #[error("failed to start the ops server")]
    Server(#[from] server::Error),
    /// The metrics serving certificate could not be loaded or made.
    #[error("failed to set up the metrics serving certificate")]
    Cert(#[from] CertError),
    /// Leader election is misconfigured.
    #[error("failed to set up leader election")]
    Leader(#[from] leader::Error),
    /// The cluster directory is not readable.
    #[error("failed to read cluster directory {path}")]
    ClusterDir {
        /// The directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The primary cluster is not in the registry.
    #[error("primary cluster {0} is not engaged")]
    NoPrimary(String),
    /// Leader election and sharding were both asked for.
    #[error(
        "leader election and sharding exclude each other: with sharding every shard Lease is a leader election of its own"
    )]
    LeaderAndShards,
}

/// Kubeconfig Secrets to engage clusters from.
#[derive(Clone, Debug)]
pub struct SecretSource {
    /// Namespace of the Secrets (in the primary cluster).
    pub namespace: String,
    /// Label selector (default `rekon.dev/kubeconfig=true`).
    pub selector: String,
}

/// Configuration of the operations side. The default enables nothing
/// (no server, no leader election, no providers), so an embedded or test
/// host behaves as a single, always-leading process.
#[derive(Clone, Debug, Default)]
pub struct OpsConfig {
    /// Address of `/metrics`.
    pub metrics_addr: Option<SocketAddr>,
    /// Address of `/healthz` and `/readyz` (same listener when equal to `metrics_addr`).
    pub probe_addr: Option<SocketAddr>,
    /// Serve `/metrics` over TLS to reviewed tokens only (`--metrics-secure`).
    pub metrics_secure: Option<MetricsSecurity>,
    /// Leader election; `None`: this process always leads.
    pub leader_election: Option<LeaderElectionConfig>,
    /// Sharding across replicas (excludes `leader_election`).
    pub sharding: Option<ShardingConfig>,
    /// A directory of kubeconfig files, one cluster each.
    pub cluster_dir: Option<PathBuf>,
    /// Labelled kubeconfig Secrets, one cluster each.
    pub cluster_secrets: Option<SecretSource>,
}

/// Secured metrics (`--metrics-secure`): HTTPS, each scrape's token
/// reviewed against the primary cluster (`telemetry::server`).
#[derive(Clone, Debug, Default)]
pub struct MetricsSecurity {
    /// `tls.crt` and `tls.key` (a mounted TLS Secret), reloaded when they
    /// change; `None`: a self-signed certificate made at start.
    pub cert_dir: Option<PathBuf>,
}

impl MetricsSecurity {
    /// The serving certificate: the directory's, or self-signed for
    /// localhost and the metrics Service's names in `POD_NAMESPACE`.
    ///
    /// # Errors
    /// When the files cannot be loaded or the certificate made.
    pub fn serving_cert(&self) -> Result<ServingCert, CertError> {
        match &self.cert_dir {
            Some(dir) => ServingCert::from_dir(dir),
            None => {
                let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
                if let Ok(ns) = std::env::var("POD_NAMESPACE") {
                    names.push(format!("rekon-metrics.{ns}.svc"));
                    names.push(format!("rekon-metrics.{ns}.svc.cluster.local"));
                }
                ServingCert::self_signed(names)
            }
        }
    }
}

/// The operations side of a running host; see the [module docs](self).
pub struct Ops {
    config: OpsConfig,
    metrics: Metrics,
    gate: LeaderGate,
    elector: Option<LeaderElector>,
    shards: Option<(Shards, ShardRunner)>,
    fatal: watch::Sender<Option<String>>,
    server: Option<OpsServer>,
    host_events: HostEvents,
    primary: kube::Client,
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops")
            .field("config", &self.config)
            .field("host_events", &self.host_events)
            .finish_non_exhaustive()
    }
}

/// The engine parts [`Ops::run`] observes.
#[derive(Clone, Debug)]
pub struct EngineParts {
    /// The cluster registry (providers add and remove clusters here).
    pub clusters: ClusterRegistry,
    /// The plugin registry (status reporting).
    pub plugins: PluginRegistry,
    /// The controller manager (readiness: a controller per loaded plugin).
    pub manager: Manager,
}

impl Ops {
    /// Bind the server, prepare leader election on the primary cluster of
    /// `clusters`, and find the host's own Pod (`POD_NAME`, `POD_NAMESPACE`).
    /// Serves and reports to the metrics of `clusters`.
    ///
    /// # Errors
    /// When an address cannot be bound, the leader election timing is
    /// invalid, or the cluster directory cannot be read.
    pub async fn build(config: OpsConfig, clusters: &ClusterRegistry) -> Result<Self, OpsError> {
        let metrics = clusters.metrics().clone();
        let primary = clusters
            .get(clusters.primary())
            .ok_or_else(|| OpsError::NoPrimary(clusters.primary().to_owned()))?;
        if let Some(dir) = &config.cluster_dir {
            std::fs::read_dir(dir).map_err(|source| OpsError::ClusterDir {
                path: dir.clone(),
                source,
            })?;
        }
        let elector = match &config.leader_election {
            Some(le) => Some(
                LeaderElector::new(primary.client(), le.clone())?.with_metrics(metrics.clone()),
            ),
            None => None,
        };
        let gate = elector
            .as_ref()
            .map_or_else(LeaderGate::always_leader, LeaderElector::gate);
        let shards = match &config.sharding {
            Some(_) if config.leader_election.is_some() => return Err(OpsError::LeaderAndShards),
            Some(sc) => Some(ShardRunner::new(
                &primary.client(),
                sc.clone(),
                metrics.clone(),
            )?),
            None => None,
        };
        let host_events = HostEvents::from_env(primary.client()).await;
        Ok(Self {
            config,
            metrics,
            gate,
            elector,
            shards,
            fatal: watch::channel(None).0,
            server: None,
            host_events,
            primary: primary.client(),
        })
    }

    /// The write gate for the writer and the controllers.
    #[must_use]
    pub fn gate(&self) -> LeaderGate {
        self.gate.clone()
    }

    /// The shards handle for the controllers, when sharding.
    #[must_use]
    pub fn shards(&self) -> Option<Shards> {
        self.shards.as_ref().map(|(s, _)| s.clone())
    }

    /// Becomes `Some(reason)` when this process must stop: it lost the
    /// leader lease and `--on-lost=exit` is configured.
    #[must_use]
    pub fn fatal(&self) -> watch::Receiver<Option<String>> {
        self.fatal.subscribe()
    }

    /// The metrics served on `/metrics`.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Bind the HTTP server now (so callers learn the bound addresses, e.g.
    /// with port 0), with readiness checks over `engine`.
    ///
    /// # Errors
    /// When an address cannot be bound.
    pub async fn bind(&mut self, engine: &EngineParts) -> Result<Vec<SocketAddr>, OpsError> {
        if self.server.is_none()
            && (self.config.metrics_addr.is_some() || self.config.probe_addr.is_some())
        {
            let ready = readiness(engine);
            let ready = match self.shards.as_ref().map(|(s, _)| s.clone()) {
                // Informational, like `degraded`: holding no shard
                // (yet, or because of a rollout) is not unready.
                Some(shards) => ready.detail("shards", move || {
                    vec![format!("holding {:?} of {}", shards.held(), shards.count())]
                }),
                None => ready,
            };
            let (metrics_addr, probe_addr) = (self.config.metrics_addr, self.config.probe_addr);
            let server = match &self.config.metrics_secure {
                Some(security) => {
                    let secure = SecureMetrics {
                        cert: std::sync::Arc::new(security.serving_cert()?),
                        auth: ScrapeAuth::new(self.primary.clone()),
                    };
                    OpsServer::bind_secure(
                        metrics_addr,
                        probe_addr,
                        self.metrics.clone(),
                        ready,
                        secure,
                    )
                    .await?
                }
                None => {
                    OpsServer::bind(metrics_addr, probe_addr, self.metrics.clone(), ready).await?
                }
            };
            self.server = Some(server);
        }
        Ok(self
            .server
            .as_ref()
            .map(OpsServer::local_addrs)
            .unwrap_or_default())
    }

    /// Serve, campaign, provide clusters and report until `shutdown`
    /// resolves; then release the lease (if held) and stop.
    ///
    /// # Errors
    /// When the server cannot be bound.
    pub async fn run(
        mut self,
        engine: EngineParts,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), OpsError> {
        self.bind(&engine).await?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let mut tasks = JoinSet::new();
        if let Some(server) = self.server.take() {
            let stop = stopped();
            tasks.spawn(async move {
                if let Err(e) = server.run(stop).await {
                    error!(error = %e, source = ?std::error::Error::source(&e).map(ToString::to_string), "ops server failed");
                }
            });
        }
        if let Some(elector) = self.elector.take() {
            tasks.spawn(report_leadership(
                self.gate.clone(),
                self.host_events.clone(),
                stopped(),
            ));
            let fatal = self.fatal.clone();
            let lease = self
                .config
                .leader_election
                .as_ref()
                .map(LeaderElectionConfig::lease_key)
                .unwrap_or_default();
            let run = elector.run(stopped());
            tasks.spawn(async move {
                if run.await == RunEnd::Lost {
                    fatal.send_replace(Some(format!("lost the leader lease {lease}")));
                }
            });
        }
        if let Some((_, runner)) = self.shards.take() {
            tasks.spawn(runner.run(stopped()));
        }
        // Subscribe before reporting what is loaded already, so nothing in
        // between is missed (a load in that window is reported twice at worst).
        let plugin_events = engine.plugins.subscribe();
        super::reporting::report_initial_plugins(&engine.plugins, &self.metrics, &self.host_events)
            .await;
        tasks.spawn(report_plugin_status(
            plugin_events,
            self.metrics.clone(),
            self.host_events.clone(),
            stopped(),
        ));
        tasks.spawn(report_degraded(
            engine.manager.degraded_changes(),
            self.host_events.clone(),
            stopped(),
        ));
        if let Some(dir) = self.config.cluster_dir.clone() {
            let clusters = engine.clusters.clone();
            let stop = stopped();
            tasks.spawn(async move {
                if let Err(e) = DirProvider::new(&dir).run(clusters, stop).await {
                    error!(dir = %dir.display(), error = %e, "cluster directory provider stopped");
                }
            });
        }
        if let Some(source) = self.config.cluster_secrets.clone()
            && let Some(primary) = engine.clusters.get(engine.clusters.primary())
        {
            let provider =
                SecretProvider::new(primary.client(), &source.namespace).selector(&source.selector);
            let clusters = engine.clusters.clone();
            let stop = stopped();
            tasks.spawn(async move {
                if let Err(e) = provider.run(clusters, stop).await {
                    error!(namespace = %source.namespace, error = %e, "kubeconfig secret provider stopped");
                }
            });
        }
        shutdown.await;
        debug!("ops stopping");
        let _ = stop_tx.send(true);
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done {
                warn!(error = %e, "ops task ended abnormally");
            }
        }
        Ok(())
    }
}

/// `/readyz`: the primary cluster's caches have listed, and every loaded
/// plugin has a running controller (whose caches count toward the first).
fn readiness(engine: &EngineParts) -> Readiness {
    let clusters = engine.clusters.clone();
    let plugins = engine.plugins.clone();
    let manager = engine.manager.clone();
    Readiness::new()
        .check("primary-caches", move || {
            let primary = clusters.primary().to_owned();
            match clusters.get(&primary).map(|c| c.health()) {
                Some(Health::Ready) => Ok(()),
                Some(Health::Syncing) => {
                    Err(format!("caches of primary cluster {primary} not synced"))
                }
                Some(Health::Unreachable) => Err(format!("primary cluster {primary} unreachable")),
                None => Err(format!("primary cluster {primary} not engaged")),
            }
        })
        .detail("degraded", {
            let manager = engine.manager.clone();
            move || manager.degraded().iter().map(ToString::to_string).collect()
        })
        .check("plugins", move || {
            let running = manager.plugins();
            let missing: Vec<String> = plugins
                .plugins()
                .iter()
                .map(|p| p.name().to_owned())
                .filter(|n| !running.contains(n))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "controllers not started for plugins {}",
                    missing.join(", ")
                ))
            }
        })
}

/// An Event on the host Pod for each plugin a failing watch degrades (the
/// manager logs it and announces one change per plugin and failure).
async fn report_degraded(
    mut changes: tokio::sync::broadcast::Receiver<crate::controller::Degraded>,
    host_events: HostEvents,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let change = tokio::select! {
            () = &mut shutdown => return,
            c = changes.recv() => c,
        };
        match change {
            Ok(d) => {
                host_events
                    .publish_or_log(
                        kube::runtime::events::EventType::Warning,
                        "PluginDegraded",
                        "Watch",
                        d.to_string(),
                    )
                    .await;
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                warn!(missed = n, "degraded-plugin reporter lagged");
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}
