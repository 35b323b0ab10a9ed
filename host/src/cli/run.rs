//! `rekon run`: its flags (plugin sources, recording, operations) and the
//! glue from them to [`rekon::app::Config`].

use std::path::PathBuf;

use super::clusters::ClusterArgs;
use super::shared::{block_on, default_cache_dir};

/// Plugins come from a directory, from Plugin objects, or both: one of
/// the two is required.
#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("plugin_source")
        .args(["plugins", "plugin_objects"])
        .multiple(true)
        .required(true)
))]
pub struct RunArgs {
    #[command(flatten)]
    clusters: ClusterArgs,
    /// Directory of plugin components (`*.wasm`), watched for changes
    /// (optional with --plugin-objects).
    #[arg(long, env = "REKON_PLUGINS")]
    plugins: Option<PathBuf>,
    /// Log format.
    #[arg(long, env = "REKON_LOG_FORMAT", value_enum, default_value_t = rekon::app::LogFormat::Text)]
    log_format: rekon::app::LogFormat,
    /// Concurrent reconciles per plugin unless its registration says otherwise.
    #[arg(long, env = "REKON_MAX_CONCURRENT_RECONCILES", default_value_t = 4)]
    max_concurrent_reconciles: usize,
    /// Deadline of one plugin call (`reconcile`, `map`), whether the plugin
    /// runs or waits (a sleep, a timer); keep it well below the Pod's
    /// termination grace period.
    #[arg(long, env = "REKON_PLUGIN_CALL_TIMEOUT", default_value = "2s", value_parser = parse_call_timeout)]
    plugin_call_timeout: std::time::Duration,
    /// Linear memory all live instances of one plugin may hold together, in
    /// MiB: with each instance capped at 64 MiB, the default lets a plugin
    /// run 4 calls at once whatever concurrency it declares; the next one
    /// waits (at most its deadline) for one of its own to end.
    #[arg(long, env = "REKON_PLUGIN_MEMORY_BUDGET_MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    plugin_memory_budget: u64,
    /// Linear memory all loaded plugins may hold together, in MiB (each
    /// books its memory cap × the instances it may run); a load beyond is
    /// refused, whatever served keeps serving. Default: the container's
    /// memory limit (cgroup) less --host-memory-headroom; none without a
    /// limit.
    #[arg(long, env = "REKON_HOST_MEMORY_BUDGET_MIB", value_parser = clap::value_parser!(u64).range(1..))]
    host_memory_budget: Option<u64>,
    /// Percent of the container's memory limit kept for the caches and
    /// the host itself when the host-wide budget comes from the limit.
    #[arg(long, env = "REKON_HOST_MEMORY_HEADROOM_PERCENT", default_value_t = rekon::plugin::DEFAULT_HEADROOM_PERCENT, value_parser = clap::value_parser!(u8).range(0..=95))]
    host_memory_headroom: u8,
    /// Containments (deadline, memory, outcome bounds) within a minute
    /// after which a plugin is backed off: its calls are admitted one per
    /// twice the call timeout, the interval doubling with each further
    /// containment up to --plugin-backoff-max; as many calls in a row
    /// within bounds lift it. 0: never back off.
    #[arg(long, env = "REKON_PLUGIN_BACKOFF_AFTER", default_value_t = rekon::plugin::FairShareConfig::default().after)]
    plugin_backoff_after: u32,
    /// Longest interval between two calls of a backed-off plugin.
    #[arg(long, env = "REKON_PLUGIN_BACKOFF_MAX", default_value = "60s", value_parser = parse_duration)]
    plugin_backoff_max: std::time::Duration,
    /// Most actions one outcome may return (more: the call fails, `TooManyActions`).
    #[arg(long, env = "REKON_MAX_OUTCOME_ACTIONS", default_value_t = rekon::plugin::OutcomeBounds::default().max_actions)]
    max_outcome_actions: usize,
    /// Largest object or patch body of an action, in bytes (default: 3 MiB,
    /// the largest request the API server accepts; larger: `ObjectTooLarge`).
    #[arg(long, env = "REKON_MAX_OBJECT_BYTES", default_value_t = rekon::plugin::OutcomeBounds::default().max_object_bytes)]
    max_object_bytes: usize,
    /// Largest total of an outcome's bodies and Event notes, in bytes
    /// (larger: `OutcomeTooLarge`).
    #[arg(long, env = "REKON_MAX_OUTCOME_BYTES", default_value_t = rekon::plugin::OutcomeBounds::default().max_outcome_bytes)]
    max_outcome_bytes: usize,
    /// Deepest nesting of objects and arrays in a body (deeper: `TooDeep`).
    #[arg(long, env = "REKON_MAX_JSON_DEPTH", default_value_t = rekon::plugin::OutcomeBounds::default().max_json_depth)]
    max_json_depth: usize,
    /// Directory for compiled plugins (cached by digest) and pulled modules
    /// (default: `$XDG_CACHE_HOME/rekon`, else `~/.cache/rekon`, when it can
    /// be created; without a cache every start compiles every plugin).
    #[arg(long, env = "REKON_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Server-side apply each plugin's CRDs to the clusters its primaries
    /// live in whenever it loads (off by default; for demos and tests).
    #[arg(long, env = "REKON_INSTALL_CRDS")]
    install_crds: bool,
    /// Load the plugins that Plugin objects (plugins.rekon.dev) in the
    /// primary cluster name, pulled from OCI registries (with or without
    /// --plugins).
    #[arg(long, env = "REKON_PLUGIN_OBJECTS")]
    plugin_objects: bool,
    /// A registry (`host[:port]`) spoken to over plain HTTP although not on
    /// a loopback address (repeatable).
    #[arg(
        long = "insecure-registry",
        value_name = "HOST",
        env = "REKON_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    insecure_registries: Vec<String>,
    /// Every Plugin object must carry `spec.verification` and verify, and
    /// every plugin file a cosign blob signature `NAME.wasm.sig` by a
    /// `--signature-key`; anything else is refused before it is compiled.
    #[arg(long, env = "REKON_REQUIRE_SIGNATURES")]
    require_signatures: bool,
    /// A public key (PEM, as `cosign.pub`) plugin files in `--plugins` must
    /// be signed by (`NAME.wasm.sig` beside `NAME.wasm`, `cosign sign-blob`'s
    /// format); repeatable. Given, every file must verify.
    #[arg(
        long = "signature-key",
        value_name = "FILE",
        env = "REKON_SIGNATURE_KEYS",
        value_delimiter = ','
    )]
    signature_keys: Vec<PathBuf>,
    /// Operator permission policy (YAML/JSON): narrows what each plugin may
    /// do beyond what it declares. A file that does not load refuses to start.
    #[arg(long, env = "REKON_POLICY")]
    policy: Option<PathBuf>,
    /// Compile plugins in a child process whose writable memory is capped
    /// at this many MiB, one at a time: a compile that needs more fails
    /// (the serving version is kept) instead of growing the host past its
    /// memory limit. Unset: compiles run in the host, one at a time.
    #[arg(long, env = "REKON_COMPILE_MEMORY_LIMIT", value_name = "MIB")]
    compile_memory_limit: Option<u64>,
    /// How a plugin instance's memory is made fresh after each call:
    /// `dirty-pages` restores the pages the call wrote (best for compiled
    /// plugins), `whole` copies the whole memory back (no page faults on
    /// the next call: a Python plugin's call takes 30–40 % less CPU, for
    /// more resident memory; a Rust one's 10–40 % more). Either way no call
    /// sees another's memory.
    #[arg(long, env = "REKON_MEMORY_RESET", value_enum, default_value_t = rekon::plugin::MemoryReset::DirtyPages)]
    memory_reset: rekon::plugin::MemoryReset,
    /// Seconds between requeues of every primary even if nothing changed
    /// (repairs drift no watch reported); 0 = never.
    #[arg(long, env = "REKON_RESYNC_PERIOD", default_value_t = 600)]
    resync_period: u64,
    /// Seconds between cluster health probes; a stalled cluster is reported
    /// unreachable (to plugins, metrics, logs) within about two.
    #[arg(long, env = "REKON_PROBE_INTERVAL", default_value_t = 1)]
    probe_interval: u64,
    #[command(flatten)]
    record: RecordArgs,
    #[command(flatten)]
    ops: OpsArgs,
    #[command(flatten)]
    webhooks: WebhookArgs,
}

/// The admission webhook server.
#[derive(Debug, clap::Args)]
struct WebhookArgs {
    /// Serve the plugins' admission webhooks over HTTPS here
    /// (`/validate/<plugin>`, `/mutate/<plugin>`; conventionally :9443).
    #[arg(long, env = "REKON_WEBHOOK_ADDR", value_parser = parse_addr, default_value = "off")]
    webhook_addr: Addr,
    /// Directory with `tls.crt` and `tls.key` (a mounted TLS Secret),
    /// re-read when they change; when both are absent a self-signed
    /// certificate is made and written there (give its `tls.crt` to
    /// `rekon webhooks --webhook-ca-file`). Default: self-signed in memory.
    #[arg(long, env = "REKON_WEBHOOK_CERT_DIR")]
    webhook_cert_dir: Option<PathBuf>,
    /// A DNS name or IP address of the self-signed certificate (repeat;
    /// default: localhost, 127.0.0.1 and, with POD_NAMESPACE,
    /// rekon-webhooks.<ns>.svc).
    #[arg(
        long = "webhook-cert-name",
        env = "REKON_WEBHOOK_CERT_NAMES",
        value_delimiter = ','
    )]
    webhook_cert_names: Vec<String>,
    /// Manage the webhook configurations of Plugin objects that admit
    /// (`rekon-<plugin>`, labelled, caBundle the served certificate),
    /// pointing at this Service: NAMESPACE/NAME[:PORT] (port 443 unless
    /// given). Needs `--webhook-addr` and `--plugin-objects`, and RBAC on
    /// validating- and mutatingwebhookconfigurations.
    #[arg(
        long,
        env = "REKON_WEBHOOK_SERVICE",
        value_name = "NAMESPACE/NAME[:PORT]",
        value_parser = parse_webhook_service,
        conflicts_with = "webhook_url_base"
    )]
    webhook_service: Option<rekon::commands::webhooks::Client>,
    /// As `--webhook-service`, pointing at this base URL instead
    /// (`https://host:port`; the route is appended).
    #[arg(long, env = "REKON_WEBHOOK_URL_BASE", value_name = "URL")]
    webhook_url_base: Option<String>,
}

fn parse_webhook_service(text: &str) -> Result<rekon::commands::webhooks::Client, String> {
    super::manifests::parse_service(text).map_err(|e| e.to_string())
}

impl WebhookArgs {
    fn into_options(self) -> anyhow::Result<Option<rekon::app::webhooks::WebhookOptions>> {
        let Some(addr) = self.webhook_addr.0 else {
            if self.webhook_service.is_some() || self.webhook_url_base.is_some() {
                anyhow::bail!(
                    "--webhook-service and --webhook-url-base point the webhook configurations at the host's webhook server: give --webhook-addr too"
                );
            }
            return Ok(None);
        };
        let mut names = self.webhook_cert_names;
        if names.is_empty() {
            names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
            if let Ok(ns) = std::env::var("POD_NAMESPACE") {
                names.push(format!("rekon-webhooks.{ns}.svc"));
                names.push(format!("rekon-webhooks.{ns}.svc.cluster.local"));
            }
        }
        let managed = self.webhook_service.or_else(|| {
            self.webhook_url_base
                .map(rekon::commands::webhooks::Client::Url)
        });
        Ok(Some(rekon::app::webhooks::WebhookOptions {
            addr,
            managed,
            cert_dir: self.webhook_cert_dir,
            cert_names: names,
        }))
    }
}

/// Recording reconciles and shadow versions.
#[derive(Debug, clap::Args)]
struct RecordArgs {
    /// Record reconciles as case files in DIR/<plugin>/ (replay them with
    /// `rekon plugin replay`).
    #[arg(long, env = "REKON_RECORD")]
    record: Option<PathBuf>,
    /// Record only this plugin (repeatable; default: every plugin).
    #[arg(
        long = "record-plugin",
        env = "REKON_RECORD_PLUGINS",
        value_delimiter = ','
    )]
    record_plugins: Vec<String>,
    /// Fraction of reconciles recorded (0.0 to 1.0).
    #[arg(long, env = "REKON_RECORD_SAMPLE", default_value_t = 1.0)]
    record_sample: f64,
    /// Stop recording after this many MiB of cases.
    #[arg(long, env = "REKON_RECORD_MAX_MIB", default_value_t = 1024)]
    record_max_mib: u64,
    /// Keep the values of Secrets the plugins read or write (default: keys only).
    #[arg(long, env = "REKON_RECORD_SECRETS")]
    record_secrets: bool,
    /// Where shadow versions' divergences are written as cases (default:
    /// DIR/shadow with --record, else rekon-shadow-cases in the temp directory).
    #[arg(long, env = "REKON_SHADOW_CASES")]
    shadow_cases: Option<PathBuf>,
    /// Stop keeping shadow divergences after this many MiB of cases.
    #[arg(long, env = "REKON_SHADOW_CASES_MAX_MIB", default_value_t = 32)]
    shadow_cases_max_mib: u64,
    /// Ignore `*.shadow.wasm` files (no shadow rollout).
    #[arg(long, env = "REKON_NO_SHADOW")]
    no_shadow: bool,
}

impl RecordArgs {
    fn into_config(
        self,
    ) -> (
        Option<rekon::change::record::RecordConfig>,
        Option<rekon::change::shadow::ShadowConfig>,
    ) {
        let shadow_dir = self.shadow_cases.unwrap_or_else(|| match &self.record {
            Some(dir) => dir.join("shadow"),
            None => std::env::temp_dir().join("rekon-shadow-cases"),
        });
        let record = self.record.map(|dir| rekon::change::record::RecordConfig {
            plugins: self.record_plugins,
            sample: self.record_sample.clamp(0.0, 1.0),
            max_bytes: self.record_max_mib.saturating_mul(1 << 20),
            keep_secrets: self.record_secrets,
            ..rekon::change::record::RecordConfig::new(dir)
        });
        let shadow = (!self.no_shadow).then(|| rekon::change::shadow::ShadowConfig {
            max_bytes: self.shadow_cases_max_mib.saturating_mul(1 << 20),
            ..rekon::change::shadow::ShadowConfig::new(shadow_dir)
        });
        (record, shadow)
    }
}

/// Operations: metrics, probes, leader election, dynamic clusters.
#[derive(Debug, clap::Args)]
struct OpsArgs {
    /// Address of `/metrics` (`off` to disable).
    #[arg(long, env = "REKON_METRICS_ADDR", default_value = "0.0.0.0:8080", value_parser = parse_addr)]
    metrics_addr: Addr,
    /// Address of `/healthz` and `/readyz` (`off` to disable); may equal --metrics-addr.
    #[arg(long, env = "REKON_PROBE_ADDR", default_value = "0.0.0.0:8080", value_parser = parse_addr)]
    probe_addr: Addr,
    /// Serve `/metrics` over HTTPS to authorized scrapers only, as
    /// controller-runtime does: each bearer token is checked with a
    /// TokenReview and a SubjectAccessReview (`get` on `/metrics`) in the
    /// primary cluster (401 without a valid token, 403 without the right).
    /// Needs its own --metrics-addr (conventionally :8443); probes stay plain.
    #[arg(long, env = "REKON_METRICS_SECURE")]
    metrics_secure: bool,
    /// Directory with `tls.crt` and `tls.key` (a mounted TLS Secret) for
    /// --metrics-secure, reloaded when they change (default: a self-signed
    /// certificate).
    #[arg(long, env = "REKON_METRICS_CERT_DIR", requires = "metrics_secure")]
    metrics_cert_dir: Option<PathBuf>,
    /// Elect a leader on a coordination.k8s.io Lease in the primary cluster;
    /// only the leader reconciles and writes.
    #[arg(long, env = "REKON_LEADER_ELECT")]
    leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, env = "REKON_LEASE_NAME", default_value = "rekon")]
    lease_name: String,
    /// Namespace of the Lease (default: POD_NAMESPACE, else `rekon-system`).
    #[arg(long, env = "REKON_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// How long followers wait after the last renewal before taking over.
    #[arg(long, env = "REKON_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    lease_duration: std::time::Duration,
    /// How long the leader keeps trying to renew before it stops writing.
    #[arg(long, env = "REKON_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    renew_deadline: std::time::Duration,
    /// Interval between acquire/renew attempts.
    #[arg(long, env = "REKON_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    retry_period: std::time::Duration,
    /// When the leader loses its lease while running: `exit` (stop, exit
    /// non-zero and let the Pod restart clean; controller-runtime's
    /// default) or `demote` (stay up as a warm follower and campaign again).
    #[arg(long, env = "REKON_ON_LOST", default_value = "exit", value_parser = ["exit", "demote"])]
    on_lost: String,
    /// Split the work across replicas: this many shards, each a Lease
    /// (`<lease-name>-shard-<i>`) in the lease namespace; replicas hold a
    /// fair share and rebalance as they join and leave (membership Leases
    /// `<lease-name>-member-*`). Every replica must use the same value.
    /// Excludes --leader-elect. 0: off.
    #[arg(long, env = "REKON_SHARDS", default_value_t = 0)]
    shards: u32,
    /// What a shard holds: `key` (cluster + namespace + name: even one
    /// cluster is split) or `cluster` (whole clusters: for fleets).
    #[arg(long, env = "REKON_SHARD_BY", default_value = "key", value_parser = ["key", "cluster"])]
    shard_by: String,
    /// Directory of kubeconfig files, one cluster per file, engaged and
    /// disengaged as files appear, change and disappear.
    #[arg(long, env = "REKON_CLUSTER_DIR")]
    cluster_dir: Option<PathBuf>,
    /// Namespace (in the primary cluster) of kubeconfig Secrets, one cluster each.
    #[arg(long, env = "REKON_CLUSTER_SECRETS_NAMESPACE")]
    cluster_secrets_namespace: Option<String>,
    /// Label selector of the kubeconfig Secrets.
    #[arg(long, env = "REKON_CLUSTER_SECRETS_SELECTOR", default_value = rekon::cluster::provider::SecretProvider::DEFAULT_SELECTOR)]
    cluster_secrets_selector: String,
}

/// A listen address, or `off`.
#[derive(Clone, Copy, Debug)]
struct Addr(Option<std::net::SocketAddr>);

fn parse_addr(s: &str) -> Result<Addr, String> {
    if s == "off" || s.is_empty() {
        return Ok(Addr(None));
    }
    s.parse()
        .map(|a| Addr(Some(a)))
        .map_err(|e| format!("{s:?}: {e}"))
}

/// A call deadline: a duration above zero (at zero every call would fail).
fn parse_call_timeout(s: &str) -> Result<std::time::Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: a call needs time; give more than zero")),
        d => Ok(d),
    }
}

/// `15s`, `500ms`, `2m` or plain seconds.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = num.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("{s:?}: unit must be ms, s or m")),
    };
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

impl OpsArgs {
    /// Where the Leases and Plugin objects' pull Secrets are:
    /// `--lease-namespace`, else `POD_NAMESPACE` (the downward API), else
    /// `rekon-system`.
    fn namespace(&self) -> String {
        self.lease_namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| "rekon-system".to_owned())
    }

    /// The ops config of a replica called `identity`.
    fn into_config(self, identity: &str) -> rekon::app::ops::OpsConfig {
        let namespace = self.namespace();
        let leader_election = self
            .leader_elect
            .then(|| rekon::lease::LeaderElectionConfig {
                identity: identity.to_owned(),
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
                on_lost: if self.on_lost == "demote" {
                    rekon::lease::OnLost::Demote
                } else {
                    rekon::lease::OnLost::Exit
                },
                ..rekon::lease::LeaderElectionConfig::new(&self.lease_name, &namespace)
            });
        let sharding = (self.shards > 0).then(|| rekon::lease::shard::ShardingConfig {
            identity: identity.to_owned(),
            by: if self.shard_by == "cluster" {
                rekon::lease::shard::ShardBy::Cluster
            } else {
                rekon::lease::shard::ShardBy::Key
            },
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            ..rekon::lease::shard::ShardingConfig::new(self.shards, &self.lease_name, &namespace)
        });
        rekon::app::ops::OpsConfig {
            metrics_addr: self.metrics_addr.0,
            probe_addr: self.probe_addr.0,
            metrics_secure: self
                .metrics_secure
                .then_some(rekon::app::ops::MetricsSecurity {
                    cert_dir: self.metrics_cert_dir,
                }),
            leader_election,
            sharding,
            cluster_dir: self.cluster_dir,
            cluster_secrets: self.cluster_secrets_namespace.map(|namespace| {
                rekon::app::ops::SecretSource {
                    namespace,
                    selector: self.cluster_secrets_selector,
                }
            }),
        }
    }
}

/// `rekon run`: logging from `RUST_LOG` (default `info`) in the chosen format.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let filter = std::env::var("RUST_LOG").ok();
    rekon::app::init_tracing(args.log_format, filter.as_deref())?;
    let install_crds = args.install_crds;
    // One identity per process: in the Leases it holds and in the
    // User-Agent of every request (audit logs tell replicas apart).
    let identity = rekon::lease::default_identity();
    let (record, shadow) = args.record.into_config();
    let cache_dir = args.cache_dir.clone().or_else(default_cache_dir);
    // What the whole host reports to and serves on `/metrics`: the OCI
    // fetcher here, everything else through the app's config.
    let metrics = rekon::telemetry::metrics::Metrics::new();
    let plugin_objects = args.plugin_objects.then(|| {
        let namespace = args.ops.namespace();
        let fetcher = rekon::source::oci::Fetcher::new(rekon::source::oci::OciConfig {
            // Pulled modules beside the compiled ones: a restart neither
            // pulls nor compiles.
            cache_dir: cache_dir.as_ref().map(|d| d.join("oci")),
            insecure_registries: args.insecure_registries.clone(),
            // A module's precompiled layer for this host's engine is
            // downloaded (and used once its signatures verified).
            precompiled_engine: rekon::plugin::host_engine_key().ok(),
            ..rekon::source::oci::OciConfig::default()
        })
        .with_metrics(metrics.clone());
        rekon::app::PluginObjectsSource {
            modules: std::sync::Arc::new(fetcher),
            config: rekon::source::plugin_objects::PluginObjectsConfig {
                require_signatures: args.require_signatures,
                ..rekon::source::plugin_objects::PluginObjectsConfig::new(namespace)
            },
        }
    });
    let file_signatures = rekon::app::file_signatures::FileSignatures::from_key_files(
        &args.signature_keys,
        args.require_signatures,
    )?;
    let config = rekon::app::Config {
        plugin_objects,
        file_signatures,
        metrics,
        record,
        shadow,
        max_concurrent_reconciles: args.max_concurrent_reconciles,
        plugin_call_timeout: args.plugin_call_timeout,
        plugin_memory_budget_bytes: usize::try_from(args.plugin_memory_budget << 20)
            .unwrap_or(usize::MAX),
        host_memory_budget: rekon::plugin::HostMemoryBudget::decide(
            args.host_memory_budget,
            args.host_memory_headroom,
            std::path::Path::new(rekon::plugin::CGROUP_ROOT),
        ),
        fair_share: rekon::plugin::FairShareConfig {
            after: args.plugin_backoff_after,
            interval: args.plugin_call_timeout.saturating_mul(2),
            max_interval: args.plugin_backoff_max,
            ..rekon::plugin::FairShareConfig::default()
        },
        outcome_bounds: rekon::plugin::OutcomeBounds {
            max_actions: args.max_outcome_actions,
            max_object_bytes: args.max_object_bytes,
            max_outcome_bytes: args.max_outcome_bytes,
            max_json_depth: args.max_json_depth,
        },
        cache_dir,
        ops: args.ops.into_config(&identity),
        user_agent: rekon::cluster::user_agent_for(&identity),
        policy_file: args.policy,
        memory_reset: args.memory_reset,
        compile_bound: match args.compile_memory_limit {
            None => None,
            Some(mib) => Some(rekon::plugin::CompileBound {
                program: std::env::current_exe()?,
                memory_limit_bytes: mib << 20,
            }),
        },
        resync_period: (args.resync_period > 0)
            .then(|| std::time::Duration::from_secs(args.resync_period)),
        probe_interval: std::time::Duration::from_secs(args.probe_interval.max(1)),
        plugins_dir: args.plugins,
        webhooks: args.webhooks.into_options()?,
        ..args.clusters.config()
    };
    block_on(async {
        let app = rekon::app::App::build(config).await?;
        if install_crds {
            // Ends with the runtime when `run` returns.
            let (clusters, plugins) = (app.clusters().clone(), app.registry().clone());
            let forever = std::future::pending();
            tokio::spawn(rekon::app::install_crds::run(clusters, plugins, forever));
        }
        app.run(rekon::app::shutdown_signal()).await?;
        anyhow::Ok(())
    })
}
