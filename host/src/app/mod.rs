//! `rekon run`: configuration → build → run, with shutdown passed in as a
//! future (the mini-redis shape). [`App::build`] wires the floors below;
//! [`ops`] is what runs beside the engine (the HTTP server, leader election
//! or shards, cluster providers, [`reporting`]); [`file_signatures`] is the
//! check plugin files pass before they are compiled.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rekon::app::AppError> {
//! use rekon::app::{App, Config};
//! let config = Config {
//!     kubeconfig: Some("/etc/rekon/kubeconfig".into()),
//!     context: Some("main".into()),
//!     clusters: vec![("edge".into(), "edge-ctx".into())],
//!     ..Config::new("/plugins")
//! };
//! let app = App::build(config).await?;
//! app.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

pub mod file_signatures;
pub mod install_crds;
pub mod ops;
pub mod reporting;
pub mod webhooks;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::cache::{CacheManager, Resolver};
use crate::cluster::{self, ClusterRegistry, Source};
use crate::controller::{ControllerConfig, Manager};
use crate::plugin::{PluginRegistry, PluginRuntime, RuntimeConfig};
use crate::telemetry::metrics::Metrics;
use crate::writer::{Writer, WriterConfig};

/// Errors of building or running the host.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A cluster could not be connected.
    #[error("failed to connect cluster")]
    Cluster(#[from] cluster::Error),
    /// The plugin runtime could not start.
    #[error("failed to start the plugin runtime: {0}")]
    Runtime(String),
    /// The plugin directory could not be read or watched.
    #[error("failed to load plugins from {dir}: {message}")]
    Plugins {
        /// The directory.
        dir: PathBuf,
        /// Why.
        message: String,
    },
    /// Neither a plugin directory nor Plugin objects: nothing to serve.
    #[error(
        "no plugin source: give a plugin directory (--plugins DIR), Plugin objects (--plugin-objects), or both"
    )]
    NoPluginSource,
    /// The process stopped itself (e.g. it lost the leader lease with `--on-lost=exit`).
    #[error("stopped: {0}")]
    Stopped(String),
    /// The operations side (server, leader election, providers) could not be set up.
    #[error("failed to set up operations")]
    Ops(#[from] ops::OpsError),
    /// The operator policy file could not be loaded.
    #[error(transparent)]
    Policy(#[from] crate::plugin::PolicyError),
    /// The case directory of `--record` or of the shadow rollout could not be set up.
    #[error(transparent)]
    Record(#[from] crate::change::record::RecordError),
    /// The admission webhook server could not be set up.
    #[error(transparent)]
    Webhooks(#[from] webhooks::WebhookError),
    /// Tracing could not be initialised.
    #[error("failed to initialise logging: {0}")]
    Logging(String),
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (with the current span's fields).
    Json,
}

/// Install the global tracing subscriber: `filter` in `RUST_LOG` syntax
/// (default `info`), lines to stderr.
///
/// # Errors
/// When the filter does not parse or a subscriber is already installed.
pub fn init_tracing(format: LogFormat, filter: Option<&str>) -> Result<(), AppError> {
    let filter = match filter {
        Some(f) => tracing_subscriber::EnvFilter::try_new(f)
            .map_err(|e| AppError::Logging(e.to_string()))?,
        None => tracing_subscriber::EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    result.map_err(|e| AppError::Logging(e.to_string()))
}

/// Everything `rekon run` is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    /// Kubeconfig file; `None`: `KUBECONFIG` / `~/.kube/config`, or the
    /// in-cluster service account when neither exists.
    pub kubeconfig: Option<PathBuf>,
    /// Context of the primary cluster; `None`: the current context.
    pub context: Option<String>,
    /// Name of the primary cluster in requests and actions; `None`: the
    /// context name, or `main`.
    pub primary_name: Option<String>,
    /// Further clusters: (name, context).
    pub clusters: Vec<(String, String)>,
    /// Directory of plugin components, watched for changes; `None`: the
    /// plugins come from Plugin objects only ([`Config::plugin_objects`]).
    pub plugins_dir: Option<PathBuf>,
    /// Concurrent reconciles per plugin unless its registration says otherwise.
    pub max_concurrent_reconciles: usize,
    /// Deadline of one plugin call (`reconcile`, `map`), running or
    /// waiting in WASI.
    pub plugin_call_timeout: Duration,
    /// What one outcome may ask of the host (`plugin::OutcomeBounds`).
    pub outcome_bounds: crate::plugin::OutcomeBounds,
    /// Linear memory all live instances of one plugin may hold together
    /// (`RuntimeConfig::plugin_memory_budget_bytes`).
    pub plugin_memory_budget_bytes: usize,
    /// When a plugin that keeps hitting its bounds is backed off
    /// (`RuntimeConfig::fair_share`).
    pub fair_share: crate::plugin::FairShareConfig,
    /// What all loaded plugins may hold together
    /// (`RuntimeConfig::host_memory_budget`).
    pub host_memory_budget: Option<crate::plugin::HostMemoryBudget>,
    /// Where compiled plugins are cached (by digest).
    pub cache_dir: Option<PathBuf>,
    /// Writer settings.
    pub writer: WriterConfig,
    /// How long controllers wait for their caches before reconciling.
    pub sync_timeout: Duration,
    /// Period of the cluster health probes (a stalled cluster is reported
    /// unreachable within about two periods).
    pub probe_interval: Duration,
    /// Requeue every primary this often even if nothing changed
    /// (controller-runtime's `SyncPeriod`); `None`: never.
    pub resync_period: Option<Duration>,
    /// Metrics and probe server, leader election, dynamic cluster providers
    /// (default: none of them; this process always leads).
    pub ops: ops::OpsConfig,
    /// Operator permission policy (YAML/JSON) narrowing what each plugin
    /// may do; see [`crate::plugin::Policy`]. A file that does not load
    /// fails [`App::build`].
    pub policy_file: Option<PathBuf>,
    /// Compiles in a bounded child process (`rekon run
    /// --compile-memory-limit`); `None`: in the host.
    pub compile_bound: Option<crate::plugin::CompileBound>,
    /// How a freed instance's memory is made fresh (`rekon run
    /// --memory-reset`).
    pub memory_reset: crate::plugin::MemoryReset,
    /// `User-Agent` of every request (default `rekon/<version>`;
    /// `rekon run` adds the replica's identity, see
    /// [`crate::cluster::user_agent_for`]).
    pub user_agent: String,
    /// Record reconciles as case files (`rekon run --record DIR`).
    pub record: Option<crate::change::record::RecordConfig>,
    /// Run `*.shadow.wasm` versions beside the serving ones (`crate::change::shadow`).
    pub shadow: Option<crate::change::shadow::ShadowConfig>,
    /// Load the plugins `Plugin` objects in the primary cluster name
    /// (`rekon run --plugin-objects`), beside or instead of the plugin
    /// directory.
    pub plugin_objects: Option<PluginObjectsSource>,
    /// What every part of the host reports to and `/metrics` serves
    /// (default: a registry of its own). Handed to the cluster registry,
    /// which the caches, writer, controllers and ops take it from, and to
    /// the plugin runtime, the recorder, the shadows and the Plugin objects'
    /// source; pass the same value to [`PluginObjectsSource::modules`]'s
    /// fetcher.
    pub metrics: Metrics,
    /// Signatures plugin files must carry (`--require-signatures`,
    /// `--signature-key`); none by default.
    pub file_signatures: file_signatures::FileSignatures,
    /// Serve the plugins' admission webhooks (`--webhook-addr`); `None`: no
    /// webhook server.
    pub webhooks: Option<webhooks::WebhookOptions>,
}

/// Where Plugin objects' modules come from, and how they are followed.
#[derive(Clone)]
pub struct PluginObjectsSource {
    /// The module fetcher (the OCI client in `rekon run`).
    pub modules: Arc<dyn crate::source::plugin_objects::ModuleSource>,
    /// Pull-Secret namespace, retries, status period.
    pub config: crate::source::plugin_objects::PluginObjectsConfig,
}

impl std::fmt::Debug for PluginObjectsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginObjectsSource")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Defaults, with plugins from `plugins_dir`.
    #[must_use]
    pub fn new(plugins_dir: impl Into<PathBuf>) -> Self {
        Self {
            plugins_dir: Some(plugins_dir.into()),
            ..Self::default()
        }
    }
}

/// Defaults without a plugin source: set [`Config::plugins_dir`] or
/// [`Config::plugin_objects`] (or both) before [`App::build`], which
/// refuses a config with neither. The one-shot commands that only connect
/// clusters start from here.
impl Default for Config {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            primary_name: None,
            clusters: Vec::new(),
            plugins_dir: None,
            max_concurrent_reconciles: 4,
            plugin_call_timeout: RuntimeConfig::default().call_timeout,
            outcome_bounds: crate::plugin::OutcomeBounds::default(),
            plugin_memory_budget_bytes: RuntimeConfig::default().plugin_memory_budget_bytes,
            fair_share: crate::plugin::FairShareConfig::default(),
            host_memory_budget: None,
            cache_dir: None,
            writer: WriterConfig::default(),
            sync_timeout: Duration::from_secs(30),
            probe_interval: Duration::from_secs(1),
            resync_period: ControllerConfig::default().resync_period,
            ops: ops::OpsConfig::default(),
            policy_file: None,
            compile_bound: None,
            memory_reset: crate::plugin::MemoryReset::default(),
            user_agent: cluster::default_user_agent(),
            record: None,
            shadow: None,
            plugin_objects: None,
            metrics: Metrics::new(),
            file_signatures: file_signatures::FileSignatures::default(),
            webhooks: None,
        }
    }
}

/// A built host, ready to run.
pub struct App {
    config: Config,
    clusters: ClusterRegistry,
    registry: PluginRegistry,
    manager: Manager,
    ops: ops::Ops,
    webhooks: Option<crate::admission::WebhookServer>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("clusters", &self.clusters)
            .field("plugins_dir", &self.config.plugins_dir)
            .finish_non_exhaustive()
    }
}

impl App {
    /// Connect the clusters, start the plugin runtime and load the plugin
    /// directory, if there is one. Must run inside a tokio runtime.
    ///
    /// # Errors
    /// [`AppError::NoPluginSource`] without a plugin directory and without
    /// Plugin objects; when a cluster's configuration cannot be loaded, or
    /// the runtime or the plugin directory cannot be set up. (A plugin file
    /// that fails to load is reported and skipped, not an error.)
    pub async fn build(config: Config) -> Result<Self, AppError> {
        if config.plugins_dir.is_none() && config.plugin_objects.is_none() {
            return Err(AppError::NoPluginSource);
        }
        // The policy first: a broken policy must not start anything.
        let policy = crate::plugin::Policy::load(config.policy_file.as_deref())?;
        if let Some(policy) = &policy {
            info!(policy = %policy.source(), plugins = ?policy.entries().keys().collect::<Vec<_>>(), "operator policy loaded");
        }
        let clusters = connect_clusters(&config).await?;
        info!(primary = %clusters.primary(), clusters = ?clusters.names(), "clusters configured");

        log_memory_budget(&config);
        let runtime = PluginRuntime::new(RuntimeConfig {
            cache_dir: config.cache_dir.clone(),
            call_timeout: config.plugin_call_timeout,
            outcome_bounds: config.outcome_bounds,
            plugin_memory_budget_bytes: config.plugin_memory_budget_bytes,
            fair_share: config.fair_share,
            host_memory_budget: config.host_memory_budget.clone(),
            policy,
            metrics: config.metrics.clone(),
            compile_bound: config.compile_bound.clone(),
            memory_reset: config.memory_reset,
            ..RuntimeConfig::default()
        })
        .map_err(|e| AppError::Runtime(e.to_string()))?;
        let registry = PluginRegistry::new(runtime);
        if let Some(check) = config.file_signatures.check(config.metrics.clone()) {
            registry.set_file_check(check);
        }
        if let Some(dir) = &config.plugins_dir {
            let registry = registry.clone();
            let load = dir.clone();
            tokio::task::spawn_blocking(move || registry.load_dir(&load))
                .await
                .map_err(|e| AppError::Plugins {
                    dir: dir.clone(),
                    message: e.to_string(),
                })?
                .map_err(|e| AppError::Plugins {
                    dir: dir.clone(),
                    message: e.to_string(),
                })?;
        }
        for status in registry.status() {
            if let Some(error) = &status.error {
                warn!(path = %status.path.display(), %error, "plugin file refused");
            }
        }

        let resolver = Resolver::default();
        let caches = CacheManager::new(clusters.clone(), resolver.clone());
        // Leader election gates every write (and, through the writer, every reconcile).
        let mut ops = ops::Ops::build(config.ops.clone(), &clusters).await?;
        let writer = Writer::new(clusters.clone(), resolver, config.writer.clone())
            .with_leader_gate(ops.gate());
        let manager = Manager::new(
            caches,
            writer,
            ControllerConfig {
                max_concurrent_reconciles: config.max_concurrent_reconciles,
                sync_timeout: config.sync_timeout,
                resync_period: config.resync_period,
                shards: ops.shards(),
            },
        );
        let recorder = config
            .record
            .clone()
            .map(|record| {
                crate::change::record::Recorder::start(crate::change::record::RecordConfig {
                    metrics: config.metrics.clone(),
                    ..record
                })
            })
            .transpose()?;
        if let Some(r) = &config.record {
            info!(dir = %r.dir.display(), plugins = ?r.plugins, sample = r.sample, max_bytes = r.max_bytes, keep_secrets = r.keep_secrets, "recording reconciles");
        }
        if let Some(s) = &config.shadow {
            info!(cases = %s.cases_dir.display(), "shadow versions (*.shadow.wasm) run beside the serving ones; divergences are kept here");
        }
        let shadow = config.shadow.clone().map(|c| {
            let c = crate::change::shadow::ShadowConfig {
                metrics: config.metrics.clone(),
                ..c
            };
            (registry.clone(), c)
        });
        let tap = crate::change::shadow::Tap::new(recorder, shadow)?;
        if tap.is_active() {
            manager.set_layer(Arc::new(tap));
        }
        ops.bind(&ops::EngineParts {
            clusters: clusters.clone(),
            plugins: registry.clone(),
            manager: manager.clone(),
        })
        .await?;
        let (webhooks, webhook_target) = match &config.webhooks {
            Some(options) => {
                let (server, target) = webhooks::bind(
                    options,
                    clusters.primary(),
                    registry.clone(),
                    manager.clone(),
                    config.metrics.clone(),
                )
                .await?;
                (Some(server), target)
            }
            None => (None, None),
        };
        let mut config = config;
        if let Some(objects) = &mut config.plugin_objects {
            objects.config.webhooks = webhook_target;
        } else if webhook_target.is_some() {
            warn!(
                "--webhook-service / --webhook-url-base manage the configurations of Plugin objects: without --plugin-objects there are none"
            );
        }
        Ok(Self {
            config,
            clusters,
            registry,
            manager,
            ops,
            webhooks,
        })
    }

    /// The engaged clusters (add and remove at runtime through it).
    #[must_use]
    pub fn clusters(&self) -> &ClusterRegistry {
        &self.clusters
    }

    /// The webhook server's bound address (`--webhook-addr`), if it serves.
    #[must_use]
    pub fn webhook_addr(&self) -> Option<std::net::SocketAddr> {
        self.webhooks
            .as_ref()
            .map(crate::admission::WebhookServer::local_addr)
    }

    /// The plugin registry.
    #[must_use]
    pub fn registry(&self) -> &PluginRegistry {
        &self.registry
    }

    /// The controller manager.
    #[must_use]
    pub fn manager(&self) -> &Manager {
        &self.manager
    }

    /// Run until `shutdown` resolves: follow the plugin directory (if there
    /// is one) and the Plugin objects (if asked), probe the clusters,
    /// reconcile. On shutdown, in-flight reconciles finish.
    ///
    /// # Errors
    /// When the plugin directory cannot be watched.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), AppError> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let mut watch_dir = self.config.plugins_dir.clone().map(|dir| {
            let registry = self.registry.clone();
            let stop = stopped();
            tokio::spawn(async move { registry.watch_dir(dir, stop).await })
        });
        let probes = tokio::spawn(self.clusters.clone().run_probes(
            self.config.probe_interval,
            // A probe may take two periods (the next waits for it): slow
            // but answering clusters are not flagged; stalled ones are,
            // within about two seconds at the default period.
            (self.config.probe_interval * 2).min(Duration::from_secs(5)),
            stopped(),
        ));
        let webhooks = self.webhooks.map(|server| {
            let stop = stopped();
            tokio::spawn(async move {
                if let Err(e) = server.run(stop).await {
                    tracing::error!(error = %e, "webhook server failed");
                }
            })
        });
        let manager = self.manager.clone();
        let registry = Arc::new(self.registry.clone());
        let run = {
            let stop = stopped();
            tokio::spawn(async move { manager.run(&registry, stop).await })
        };
        // Stopped only after the controllers finished: the lease is released
        // once this replica no longer writes.
        let (ops_stop_tx, mut ops_stop_rx) = tokio::sync::watch::channel(false);
        let mut fatal = self.ops.fatal();
        let primary = self.clusters.get(self.clusters.primary());
        let plugin_objects =
            self.config
                .plugin_objects
                .clone()
                .zip(primary)
                .map(|(source, primary)| {
                    let shards = self.ops.shards();
                    // One replica writes the statuses: the leader, or with
                    // shards the holder of shard 0 (its Lease fences it
                    // like the leader's).
                    let gate = shards
                        .as_ref()
                        .map_or_else(|| self.ops.gate(), |s| s.gate(0).clone());
                    let reports = report_board(&self.config.ops, primary.client());
                    let objects = crate::source::plugin_objects::PluginObjects::new(
                        primary.client(),
                        self.registry.clone(),
                        source.modules,
                        Some(gate),
                        source.config,
                        self.config.metrics.clone(),
                    )
                    .with_reports(reports.clone(), shards);
                    let board = tokio::spawn(reports.run(stopped()));
                    tokio::spawn(async move {
                        objects.run(stopped()).await;
                        let _ = board.await;
                    })
                });
        let ops = tokio::spawn(self.ops.run(
            ops::EngineParts {
                clusters: self.clusters.clone(),
                plugins: self.registry.clone(),
                manager: self.manager.clone(),
            },
            async move {
                let _ = ops_stop_rx.wait_for(|s| *s).await;
            },
        ));
        match &self.config.plugins_dir {
            Some(dir) => {
                info!(plugins_dir = %dir.display(), plugin_objects = self.config.plugin_objects.is_some(), "rekon running")
            }
            None => info!(plugin_objects = true, "rekon running (no plugin directory)"),
        }
        // Stop early if the directory watcher fails.
        let mut lost = None;
        let watch_result = tokio::select! {
            () = shutdown => None,
            r = async {
                match &mut watch_dir {
                    Some(watch) => watch.await,
                    None => std::future::pending().await,
                }
            } => Some(r),
            reason = async { fatal.wait_for(Option::is_some).await.ok().and_then(|r| r.clone()) } => {
                lost = Some(reason.unwrap_or_default());
                None
            }
        };
        info!("shutting down: finishing in-flight reconciles");
        let _ = stop_tx.send(true);
        let _ = run.await;
        let _ = probes.await;
        if let Some(webhooks) = webhooks {
            let _ = webhooks.await;
        }
        if let Some(objects) = plugin_objects {
            let _ = objects.await;
        }
        let _ = ops_stop_tx.send(true);
        match ops.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "operations stopped with an error"),
            Err(e) => warn!(error = %e, "operations task failed"),
        }
        if let Some(reason) = lost {
            if let Some(watch) = watch_dir {
                watch.abort();
            }
            return Err(AppError::Stopped(reason));
        }
        let (Some(dir), Some(watch)) = (self.config.plugins_dir, watch_dir) else {
            return Ok(());
        };
        let watch_result = match watch_result {
            Some(r) => r,
            None => watch.await,
        };
        match watch_result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(AppError::Plugins {
                dir,
                message: e.to_string(),
            }),
            Err(e) => Err(AppError::Plugins {
                dir,
                message: e.to_string(),
            }),
        }
    }
}

/// Where this replica publishes what it serves of the Plugin objects: the
/// group's report Lease (`<lease-name>-reports`) with leader election or
/// shards, else nowhere (a single replica is the only one).
/// Says what bounds the plugins' memory, and warns when one plugin's
/// budget alone passes the host-wide one (no plugin could load).
fn log_memory_budget(config: &Config) {
    let per_plugin_mib = config.plugin_memory_budget_bytes >> 20;
    match &config.host_memory_budget {
        Some(host) if host.bytes < config.plugin_memory_budget_bytes => warn!(
            host_budget_mib = host.bytes >> 20,
            source = %host.source,
            per_plugin_mib,
            "the host-wide memory budget is below one plugin's budget (--plugin-memory-budget): a plugin running its full budget will be refused; lower --plugin-memory-budget or raise the limit"
        ),
        Some(host) => info!(
            host_budget_mib = host.bytes >> 20,
            source = %host.source,
            per_plugin_mib,
            plugins_at_full_budget = host.bytes / config.plugin_memory_budget_bytes.max(1),
            "plugins' memory bounded host-wide"
        ),
        None => info!(
            per_plugin_mib,
            "no container memory limit found and no --host-memory-budget: plugins' memory bounded per plugin only"
        ),
    }
}

fn report_board(ops: &ops::OpsConfig, client: kube::Client) -> crate::lease::reports::ReportBoard {
    use crate::lease::reports::{ReportBoard, ReportConfig};
    let config = match (&ops.leader_election, &ops.sharding) {
        (Some(le), _) => ReportConfig {
            name: le.lease_name.clone(),
            namespace: le.lease_namespace.clone(),
            identity: le.identity.clone(),
            lease_duration: le.lease_duration,
            retry_period: le.retry_period,
        },
        (None, Some(sc)) => ReportConfig {
            name: sc.name.clone(),
            namespace: sc.namespace.clone(),
            identity: sc.identity.clone(),
            lease_duration: sc.lease_duration,
            retry_period: sc.retry_period,
        },
        (None, None) => return ReportBoard::local(crate::lease::default_identity()),
    };
    ReportBoard::new(client, config)
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => info!("SIGINT received"),
        () = term => info!("SIGTERM received"),
    }
}

/// Connect the clusters `config` names: the primary (from `--context`, or the
/// kubeconfig's current context, or in-cluster) and every `--cluster NAME=CTX`.
///
/// # Errors
/// When a cluster's configuration cannot be loaded or its client built.
pub async fn connect_clusters(config: &Config) -> Result<ClusterRegistry, AppError> {
    let primary_source = match (&config.kubeconfig, &config.context) {
        (None, None) => Source::Infer,
        (kubeconfig, context) => Source::Context {
            kubeconfig: kubeconfig.clone(),
            context: context.clone(),
        },
    };
    let primary = config
        .primary_name
        .clone()
        .or_else(|| config.context.clone())
        .unwrap_or_else(|| "main".to_owned());
    let clusters = ClusterRegistry::with_metrics(
        primary.clone(),
        cluster::connect(&primary, &primary_source, &config.user_agent).await?,
        config.metrics.clone(),
    );
    clusters.set_user_agent(config.user_agent.clone());
    for (name, context) in &config.clusters {
        let source = Source::Context {
            kubeconfig: config.kubeconfig.clone(),
            context: Some(context.clone()),
        };
        clusters.add(
            name.clone(),
            cluster::connect(name, &source, &config.user_agent).await?,
        )?;
    }
    Ok(clusters)
}
