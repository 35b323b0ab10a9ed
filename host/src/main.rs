//! The `rekon` command line: parses arguments and calls the library.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use rekon::commands::inspect::OutputFormat;

/// rekon: a Kubernetes reconciliation engine whose decisions live in
/// WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "rekon", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the engine: connect the clusters, load and follow the plugins
    /// (a directory, Plugin objects, or both), reconcile until
    /// SIGINT/SIGTERM.
    Run(Box<RunArgs>),
    /// Work with plugin files.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Print the least-privilege RBAC (ClusterRole, Role, bindings) the
    /// plugins in DIR and the host need in one cluster.
    Rbac(RbacArgs),
    /// Print the host's own CRD (the Plugin resource) and the CRDs every
    /// plugin in DIR declares (or write one file per CRD plus a
    /// kustomization.yaml with --out-dir).
    Crds {
        /// Directory of plugin components (`*.wasm`); without it, only the
        /// host's own CRD.
        dir: Option<PathBuf>,
        /// Write `<crd>.yaml` files and `kustomization.yaml` here instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

/// Plugins come from a directory, from Plugin objects, or both: one of
/// the two is required.
#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("plugin_source")
        .args(["plugins", "plugin_objects"])
        .multiple(true)
        .required(true)
))]
struct RunArgs {
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
    /// Operator permission policy (YAML/JSON): narrows what each plugin may
    /// do beyond what it declares. A file that does not load refuses to start.
    #[arg(long, env = "REKON_POLICY")]
    policy: Option<PathBuf>,
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

/// `KEY=VALUE` of `--annotation`.
fn parse_annotation(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

/// `registry/repository@digest` for a pushed `reference` (tag dropped).
fn pin(reference: &str, digest: &str) -> String {
    let name = reference.split('@').next().unwrap_or(reference);
    let repo = match name.rsplit_once(':') {
        // A colon after the last slash is a tag; before it, a port.
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => name,
    };
    format!("{repo}@{digest}")
}

fn parse_addr(s: &str) -> Result<Addr, String> {
    if s == "off" || s.is_empty() {
        return Ok(Addr(None));
    }
    s.parse()
        .map(|a| Addr(Some(a)))
        .map_err(|e| format!("{s:?}: {e}"))
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
    /// The ops config of a replica called `identity`.
    fn into_config(self, identity: &str) -> rekon::app::ops::OpsConfig {
        let namespace = self
            .lease_namespace
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| "rekon-system".to_owned());
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

/// Which clusters to connect: the flags `run`, `plugin plan` and `plugin
/// release` share.
#[derive(Debug, clap::Args)]
struct ClusterArgs {
    /// Kubeconfig file (default: KUBECONFIG, ~/.kube/config, else in-cluster).
    #[arg(long, env = "REKON_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Context of the primary cluster (default: the current context).
    #[arg(long, env = "REKON_CONTEXT")]
    context: Option<String>,
    /// Name of the primary cluster in requests (default: the context name, or `main`).
    #[arg(long, env = "REKON_PRIMARY_NAME")]
    primary_name: Option<String>,
    /// Another cluster, NAME=CONTEXT (repeatable; env: comma-separated).
    #[arg(long = "cluster", env = "REKON_CLUSTERS", value_delimiter = ',', value_parser = parse_cluster)]
    clusters: Vec<(String, String)>,
}

impl ClusterArgs {
    /// The cluster fields of an app config (the rest defaulted, no plugin
    /// source).
    fn config(self) -> rekon::app::Config {
        rekon::app::Config {
            kubeconfig: self.kubeconfig,
            context: self.context,
            primary_name: self.primary_name,
            clusters: self.clusters,
            ..rekon::app::Config::default()
        }
    }
}

fn parse_cluster(s: &str) -> Result<(String, String), String> {
    rekon::cluster::parse_cluster_spec(s).map_err(|e| e.to_string())
}

#[derive(Debug, clap::Args)]
struct RbacArgs {
    /// Directory of plugin components (`*.wasm`).
    dir: PathBuf,
    /// Name of the ClusterRole, Role and bindings.
    #[arg(long, default_value = "rekon")]
    name: String,
    /// Namespace of the host (Role, RoleBinding, ServiceAccount).
    #[arg(long, default_value = "rekon-system")]
    namespace: String,
    /// The host's ServiceAccount.
    #[arg(long, default_value = "rekon")]
    service_account: String,
    /// Name of the cluster the RBAC is for (matched against plugins' named cluster sets).
    #[arg(long, default_value = "main")]
    cluster: String,
    /// The cluster is not the primary one: no host Role, no `primary` permissions.
    #[arg(long)]
    remote: bool,
    /// Leave out read access to kubeconfig Secrets (no Secret cluster provider).
    #[arg(long)]
    no_secret_provider: bool,
    /// Leave out access to Plugin objects and their pull Secrets (no
    /// `rekon run --plugin-objects`).
    #[arg(long)]
    no_plugin_objects: bool,
    /// Leave out the token and access reviews of secured metrics and the
    /// metrics-reader ClusterRole (no `rekon run --metrics-secure`).
    #[arg(long)]
    no_metrics_auth: bool,
    /// Operator permission policy: the RBAC covers only the effective
    /// (declared and allowed) permissions.
    #[arg(long)]
    policy: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Create a plugin crate that builds outside this repository with plain
    /// cargo: `NAME/` with Cargo.toml, src/lib.rs, a test-kit test and a
    /// README (test, build, inspect).
    New(NewArgs),
    /// Load a plugin file, or a plugin from an OCI registry
    /// (`registry/repository:tag` or `@sha256:…`), and print its
    /// registration: name, version, primary resource, watches, permissions
    /// and CRDs.
    Inspect {
        /// The plugin component (`*.wasm`), or an OCI reference naming one
        /// (anything that is not an existing path and starts with a
        /// registry host: `ghcr.io/…`, `localhost:5000/…`).
        file: String,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = OutputFormat::Yaml)]
        output: OutputFormat,
        /// Operator permission policy: print the effective permissions.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Settings to register the plugin with, as JSON text or `@FILE`
        /// (JSON or YAML): the plugin validates them as it would in a
        /// cluster, and refuses invalid ones with its own message.
        #[arg(long, value_parser = parse_settings)]
        settings: Option<serde_json::Value>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Compile plugin components into the compiled-plugin cache `rekon run`
    /// reads, so that a host started later maps them instead of compiling
    /// (seconds to a minute per JavaScript or Python plugin). Each file is
    /// loaded as `rekon run` loads it: one the host would refuse is refused.
    Compile {
        /// Plugin components (`*.wasm`).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The cache directory, as `rekon run --cache-dir` (default:
        /// `$XDG_CACHE_HOME/rekon`, else `~/.cache/rekon`).
        #[arg(long, env = "REKON_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
    },
    /// Publish a plugin component to an OCI registry in the CNCF wasm
    /// artifact layout (config `application/vnd.wasm.config.v0+json`, one
    /// `application/wasm` layer) and print the manifest digest. The plugin
    /// is loaded first: a file the host would refuse is not pushed.
    Push {
        /// The plugin component (`*.wasm`).
        file: PathBuf,
        /// Where to push: `registry/repository:tag`.
        reference: String,
        /// Sign the pushed manifest with this key (as `rekon plugin sign`).
        #[arg(long, value_name = "KEY")]
        sign: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Write a new signing key pair: `<out>.key` (unencrypted PKCS#8 PEM,
    /// mode 0600) and `<out>.pub` (the public key, as cosign's `cosign.pub`).
    Keygen {
        /// Path prefix of the two files.
        #[arg(long, default_value = "cosign")]
        out: PathBuf,
        /// `ecdsa-p256` (cosign's default) or `ed25519`.
        #[arg(long, default_value = "ecdsa-p256")]
        algorithm: String,
    },
    /// Sign the module REF names (its manifest digest) with KEY, in
    /// cosign's format (a `sha256-<digest>.sig` tag beside it): `cosign
    /// verify --key` and Plugin objects' `verification` read it. KEY is an
    /// unencrypted PKCS#8 PEM key, ECDSA P-256 or Ed25519.
    Sign {
        /// `registry/repository:tag` or `@sha256:…`.
        reference: String,
        /// The signing key (PKCS#8 PEM).
        #[arg(long)]
        key: PathBuf,
        /// `KEY=VALUE` carried in the signed payload (repeatable).
        #[arg(long = "annotation", value_name = "KEY=VALUE", value_parser = parse_annotation)]
        annotations: Vec<(String, String)>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Verify the signatures of the module REF names against public keys
    /// (PEM, cosign's `cosign.pub`); exits non-zero saying why when they do
    /// not satisfy the keys, the minimum and the annotations.
    Verify {
        /// `registry/repository:tag` or `@sha256:…`.
        reference: String,
        /// A trusted public key (repeatable).
        #[arg(long, required = true)]
        key: Vec<PathBuf>,
        /// How many distinct keys must have signed.
        #[arg(long, default_value_t = 1)]
        minimum_matches: usize,
        /// `KEY=VALUE` the signed payload must carry (repeatable).
        #[arg(long = "annotation", value_name = "KEY=VALUE", value_parser = parse_annotation)]
        annotations: Vec<(String, String)>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Print a Plugin object (plugins.rekon.dev) that serves FILE from the
    /// OCI reference --module, granting exactly what FILE declares (review
    /// the grant before applying).
    Manifest {
        /// The plugin component (`*.wasm`).
        file: PathBuf,
        /// OCI reference the component is published under.
        #[arg(long)]
        module: String,
        /// Pin the manifest digest (`sha256:…`, as `rekon plugin push` printed).
        #[arg(long)]
        digest: Option<String>,
        /// `spec.settings`, as JSON text or `@FILE` (JSON or YAML); the
        /// component must accept them.
        #[arg(long, value_parser = parse_settings)]
        settings: Option<serde_json::Value>,
        /// The Plugin object's name: another instance of the module
        /// (default: the name it registers).
        #[arg(long)]
        name: Option<String>,
    },
    /// Dry run: connect the clusters, fill the plugin's caches, reconcile
    /// every primary once and print the actions it would take. Writes nothing.
    Plan(Box<PlanArgs>),
    /// List the objects that still carry a plugin's finalizer (after the
    /// plugin was removed, they cannot finish deleting) and, with
    /// `--remove`, remove that finalizer from them without cleanup.
    Release(Box<ReleaseArgs>),
    /// Run a plugin build against recorded cases (`rekon run --record`),
    /// host reads served from the recording; print per case whether its
    /// decision is identical, else a YAML diff per action. Exits non-zero
    /// on any difference unless --allow-diff.
    /// Run a plugin through the faults that break controllers (crashes
    /// between writes, stale reads, unobserved states, failing writes,
    /// clusters down, reordered deliveries) on in-process clusters and a
    /// virtual clock; report what differs from a fault-free run. Exit 0: no
    /// finding, 1: findings, 2: the inputs do not load.
    Explore(Box<rekon::commands::explore::ExploreArgs>),
    Replay {
        /// The plugin component (`*.wasm`).
        file: PathBuf,
        /// Case files, or directories searched for `*.json`.
        #[arg(required = true)]
        cases: Vec<PathBuf>,
        /// Exit 0 even when cases differ.
        #[arg(long)]
        allow_diff: bool,
    },
    /// Make the shadow version of plugin NAME the serving one: in the
    /// plugin directory (`*.shadow.wasm` renamed over the serving file), or
    /// with --object in its Plugin object (spec.shadow becomes spec.module;
    /// roll back with the same edit back). A running host swaps it in.
    Promote {
        /// The plugin's name.
        name: String,
        /// Directory of plugin components.
        #[arg(long, env = "REKON_PLUGINS", required_unless_present = "object")]
        plugins: Option<PathBuf>,
        /// Promote in the Plugin object NAME of the primary cluster.
        #[arg(long)]
        object: bool,
        #[command(flatten)]
        clusters: ClusterArgs,
    },
}

/// How `plugin push` and `plugin inspect REF` reach a registry.
#[derive(Debug, clap::Args)]
struct RegistryArgs {
    /// A registry (`host[:port]`) spoken to over plain HTTP although it is
    /// not on a loopback address (loopback registries always are).
    #[arg(long = "insecure-registry", value_name = "HOST")]
    insecure_registries: Vec<String>,
    /// Registry user name (with --password); else the credentials file.
    #[arg(long, env = "REKON_REGISTRY_USERNAME", requires = "password")]
    username: Option<String>,
    /// Registry password or token.
    #[arg(
        long,
        env = "REKON_REGISTRY_PASSWORD",
        requires = "username",
        hide_env_values = true
    )]
    password: Option<String>,
    /// Docker config JSON with registry credentials (default: the first
    /// of $REGISTRY_AUTH_FILE, $DOCKER_CONFIG/config.json,
    /// ~/.docker/config.json that exists).
    #[arg(long)]
    auth_file: Option<PathBuf>,
    /// Seconds one registry attempt may take.
    #[arg(long, default_value_t = 30)]
    registry_timeout: u64,
}

impl RegistryArgs {
    fn options(self) -> rekon::commands::push::RegistryOptions {
        rekon::commands::push::RegistryOptions {
            insecure_registries: self.insecure_registries,
            username: self.username,
            password: self.password,
            auth_file: self.auth_file,
            timeout: Some(std::time::Duration::from_secs(self.registry_timeout)),
        }
    }
}

#[derive(Debug, clap::Args)]
struct NewArgs {
    /// The plugin's name (a DNS label); also the crate and directory name.
    name: String,
    /// The primary resource, GROUP/VERSION/KIND (VERSION/KIND for the core
    /// group). A kind the scaffold does not know as built in becomes a
    /// custom resource the plugin defines.
    #[arg(long, default_value = "v1/ConfigMap")]
    primary: String,
    /// Where to create the crate directory.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// The plugin's language: rust (a crate), typescript (an npm package)
    /// or python (a pyproject).
    #[arg(long, value_enum, default_value_t = NewLang::Rust)]
    lang: NewLang,
    /// Depend on the SDK at this path (a checkout's `guest-sdk`,
    /// `sdk/typescript` or `sdk/python`). Default: the SDK of the checkout
    /// this binary was built from, when it is still there.
    #[arg(long, conflicts_with = "sdk_git")]
    sdk_path: Option<PathBuf>,
    /// Depend on the Rust SDK from this git repository (rust only).
    #[arg(long)]
    sdk_git: Option<String>,
}

/// `rekon plugin new --lang`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum NewLang {
    Rust,
    Typescript,
    Python,
}

#[derive(Debug, clap::Args)]
struct ReleaseArgs {
    /// The plugin's name.
    name: String,
    /// The plugin file: its finalizer and primary kind say what to search.
    #[arg(long)]
    from: Option<PathBuf>,
    /// The finalizer to look for (without `--from`: searched in every
    /// listable resource type).
    #[arg(long)]
    finalizer: Option<String>,
    /// Remove the finalizer from every object found (its cleanup is skipped).
    #[arg(long)]
    remove: bool,
    #[command(flatten)]
    clusters: ClusterArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Yaml)]
    output: OutputFormat,
}

#[derive(Debug, clap::Args)]
struct PlanArgs {
    /// The plugin component (`*.wasm`).
    file: PathBuf,
    #[command(flatten)]
    clusters: ClusterArgs,
    /// Only this primary: `name` or `namespace/name`.
    #[arg(long)]
    only: Option<String>,
    /// Operator policy narrowing the plugin's permissions, as for `rekon run`.
    #[arg(long, env = "REKON_POLICY")]
    policy: Option<PathBuf>,
    /// Seconds to wait for the caches' initial lists.
    #[arg(long, default_value_t = 30)]
    sync_timeout: u64,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Yaml)]
    output: OutputFormat,
}

/// `--settings`: JSON text, or `@FILE` holding JSON or YAML.
fn parse_settings(arg: &str) -> Result<serde_json::Value, String> {
    match arg.strip_prefix('@') {
        Some(file) => {
            let text =
                std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
            serde_yaml::from_str(&text).map_err(|e| format!("{file} is not JSON or YAML: {e}"))
        }
        None => serde_json::from_str(arg).map_err(|e| format!("not JSON: {e}")),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Run(args) = cli.command {
        return run(*args);
    }
    // The explorer's report is its output; the engine it drives logs
    // every injected fault, which is noise here (RUST_LOG brings it back).
    if let Command::Plugin(PluginCommand::Explore(args)) = cli.command {
        if std::env::var_os("RUST_LOG").is_some() {
            tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .init();
        }
        std::process::exit(rekon::commands::explore::run(*args));
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match cli.command {
        Command::Run(_) => unreachable!("handled above"),
        Command::Plugin(PluginCommand::Compile { files, cache_dir }) => {
            let cache_dir = cache_dir.or_else(default_cache_dir).ok_or_else(|| {
                anyhow::anyhow!("no --cache-dir, and no XDG_CACHE_HOME or HOME to cache in")
            })?;
            for c in rekon::commands::compile::compile_files(&files, &cache_dir)? {
                println!(
                    "{} {} {} (sha256:{}) {} in {:.2} s",
                    c.file.display(),
                    c.name,
                    c.version,
                    c.digest,
                    if c.from_cache {
                        "already cached"
                    } else {
                        "compiled"
                    },
                    c.elapsed.as_secs_f64()
                );
            }
            eprintln!("cache: {}", cache_dir.display());
        }
        Command::Plugin(PluginCommand::Inspect {
            file,
            output,
            policy,
            settings,
            registry,
        }) => {
            let policy = rekon::plugin::Policy::load(policy.as_deref())?;
            let report = if rekon::commands::push::is_reference(&file) {
                let fetched = tokio::runtime::Runtime::new()?
                    .block_on(rekon::commands::push::fetch(&file, &registry.options()))?;
                eprintln!("{} is {}", fetched.reference, fetched.pinned);
                rekon::commands::inspect::inspect_bytes_with_policy(
                    &fetched.bytes,
                    &fetched.pinned,
                    output,
                    policy,
                    settings.as_ref(),
                )?
            } else {
                rekon::commands::inspect::inspect_file_with_policy(
                    std::path::Path::new(&file),
                    output,
                    policy,
                    settings.as_ref(),
                )?
            };
            print!("{report}");
        }
        Command::Plugin(PluginCommand::Push {
            file,
            reference,
            sign,
            registry,
        }) => {
            let options = registry.options();
            let runtime = tokio::runtime::Runtime::new()?;
            let pushed =
                runtime.block_on(rekon::commands::push::push(&file, &reference, &options))?;
            eprintln!("pushed {} {} to {reference}", pushed.name, pushed.version);
            if let Some(key) = sign {
                let pinned = pin(&reference, &pushed.digest);
                let signed = runtime.block_on(rekon::commands::sign::sign(
                    &pinned,
                    &key,
                    &Default::default(),
                    &options,
                ))?;
                eprintln!("signed {} ({})", signed.digest, signed.signature_reference);
            }
            println!("{}", pushed.digest);
        }
        Command::Plugin(PluginCommand::Keygen { out, algorithm }) => {
            let algorithm = algorithm.parse()?;
            let (private, public) = rekon::commands::sign::keygen(&out, algorithm)?;
            eprintln!(
                "wrote {} (keep it secret) and {}",
                private.display(),
                public.display()
            );
        }
        Command::Plugin(PluginCommand::Sign {
            reference,
            key,
            annotations,
            registry,
        }) => {
            let signed = tokio::runtime::Runtime::new()?.block_on(rekon::commands::sign::sign(
                &reference,
                &key,
                &annotations.into_iter().collect(),
                &registry.options(),
            ))?;
            let note = if signed.already_signed {
                " (already signed with this key)"
            } else {
                ""
            };
            eprintln!("signed {reference} {}{note}", signed.digest);
            println!("{}", signed.signature_reference);
        }
        Command::Plugin(PluginCommand::Verify {
            reference,
            key,
            minimum_matches,
            annotations,
            registry,
        }) => {
            let verified =
                tokio::runtime::Runtime::new()?.block_on(rekon::commands::sign::verify(
                    &reference,
                    &key,
                    minimum_matches,
                    annotations.into_iter().collect(),
                    &registry.options(),
                ))?;
            println!(
                "{reference} ({}) verified, signed by {}",
                verified.digest,
                verified.signers.join(", ")
            );
        }
        Command::Plugin(PluginCommand::Manifest {
            file,
            module,
            digest,
            settings,
            name,
        }) => print!(
            "{}",
            rekon::commands::plugin_manifest::plugin_manifest(
                &file,
                &module,
                &rekon::commands::plugin_manifest::ManifestOptions {
                    digest: digest.as_deref(),
                    settings: settings.as_ref(),
                    name: name.as_deref(),
                },
            )?
        ),
        Command::Plugin(PluginCommand::New(args)) => new_plugin(args)?,
        Command::Plugin(PluginCommand::Plan(args)) => plan(*args)?,
        Command::Plugin(PluginCommand::Release(args)) => release(*args)?,
        Command::Plugin(PluginCommand::Explore(_)) => unreachable!("handled above"),
        Command::Plugin(PluginCommand::Replay {
            file,
            cases,
            allow_diff,
        }) => {
            let report = rekon::change::replay::replay(&file, &cases)?;
            print!("{}", report.render());
            if report.differing() > 0 && !allow_diff {
                anyhow::bail!(
                    "{} of {} cases differ",
                    report.differing(),
                    report.cases.len()
                );
            }
        }
        Command::Plugin(PluginCommand::Promote {
            name,
            plugins,
            object,
            clusters,
        }) => {
            if object {
                let config = clusters.config();
                let (from, to) = tokio::runtime::Runtime::new()?.block_on(async {
                    let clusters = rekon::app::connect_clusters(&config).await?;
                    let primary = clusters
                        .get(clusters.primary())
                        .ok_or_else(|| anyhow::anyhow!("the primary cluster is not connected"))?;
                    anyhow::Ok(
                        rekon::change::promote::promote_object(primary.client(), &name).await?,
                    )
                })?;
                eprintln!("promoted Plugin {name}: {from} -> {to}");
            } else {
                let plugins = plugins
                    .ok_or_else(|| anyhow::anyhow!("--plugins is required without --object"))?;
                let (from, to) = rekon::change::promote::promote(&plugins, &name)?;
                eprintln!("promoted {name}: {} -> {}", from.display(), to.display());
            }
        }
        Command::Rbac(args) => {
            let policy = rekon::plugin::Policy::load(args.policy.as_deref())?;
            let primary = (!args.remote).then_some(args.cluster.as_str());
            let registrations = rekon::commands::manifests::load_registrations_with_policy(
                &args.dir, policy, primary,
            )?;
            let opts = rekon::commands::manifests::RbacOptions {
                name: args.name,
                namespace: args.namespace,
                service_account: args.service_account,
                cluster: args.cluster,
                primary: !args.remote,
                secret_provider: !args.no_secret_provider,
                plugin_objects: !args.no_plugin_objects,
                metrics_auth: !args.no_metrics_auth,
            };
            print!(
                "{}",
                rekon::commands::manifests::rbac_yaml(&registrations, &opts)?
            );
        }
        Command::Crds { dir, out_dir } => {
            let registrations = match dir {
                Some(dir) => rekon::commands::manifests::load_registrations(&dir)?,
                None => Vec::new(),
            };
            match out_dir {
                None => print!("{}", rekon::commands::manifests::crds_yaml(&registrations)?),
                Some(out) => rekon::commands::manifests::write_crds(&registrations, &out)?,
            }
        }
    }
    Ok(())
}

/// `rekon run`: logging from `RUST_LOG` (default `info`) in the chosen format.
fn run(args: RunArgs) -> anyhow::Result<()> {
    let filter = std::env::var("RUST_LOG").ok();
    rekon::app::init_tracing(args.log_format, filter.as_deref())?;
    let install_crds = args.install_crds;
    // One identity per process: in the Leases it holds and in the
    // User-Agent of every request (audit logs tell replicas apart).
    let identity = rekon::lease::default_identity();
    let (record, shadow) = args.record.into_config();
    let cache_dir = args.cache_dir.clone().or_else(default_cache_dir);
    let plugin_objects = args.plugin_objects.then(|| {
        let namespace = args
            .ops
            .lease_namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| "rekon-system".to_owned());
        let fetcher = rekon::source::oci::Fetcher::new(rekon::source::oci::OciConfig {
            // Pulled modules beside the compiled ones: a restart neither
            // pulls nor compiles.
            cache_dir: cache_dir.as_ref().map(|d| d.join("oci")),
            insecure_registries: args.insecure_registries.clone(),
            ..rekon::source::oci::OciConfig::default()
        })
        .with_metrics(rekon::telemetry::metrics::Metrics::global().clone());
        rekon::app::PluginObjectsSource {
            modules: std::sync::Arc::new(fetcher),
            config: rekon::source::plugin_objects::PluginObjectsConfig::new(namespace),
        }
    });
    let config = rekon::app::Config {
        plugin_objects,
        record,
        shadow,
        max_concurrent_reconciles: args.max_concurrent_reconciles,
        cache_dir,
        ops: args.ops.into_config(&identity),
        user_agent: rekon::cluster::user_agent_for(&identity),
        policy_file: args.policy,
        resync_period: (args.resync_period > 0)
            .then(|| std::time::Duration::from_secs(args.resync_period)),
        probe_interval: std::time::Duration::from_secs(args.probe_interval.max(1)),
        plugins_dir: args.plugins,
        ..args.clusters.config()
    };
    tokio::runtime::Runtime::new()?.block_on(async {
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

/// Where `run` caches compiled plugins and pulled modules without
/// `--cache-dir`: `$XDG_CACHE_HOME/rekon`, else `$HOME/.cache/rekon`. A
/// restart then maps the compiled code instead of compiling again (seconds
/// to a minute per interpreter plugin on a small machine). `None`, logged,
/// when neither variable is set or the directory cannot be created: the
/// host then compiles every load, as before.
fn default_cache_dir() -> Option<PathBuf> {
    let nonempty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    let Some(base) = nonempty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".cache")))
    else {
        tracing::warn!("no --cache-dir, XDG_CACHE_HOME or HOME: compiled plugins are not cached");
        return None;
    };
    let dir = base.join("rekon");
    match std::fs::create_dir_all(&dir) {
        Ok(()) => {
            tracing::info!(cache.dir = %dir.display(), "caching compiled plugins (default --cache-dir)");
            Some(dir)
        }
        Err(e) => {
            tracing::warn!(cache.dir = %dir.display(), error = %e, "cannot create the default cache directory: compiled plugins are not cached");
            None
        }
    }
}

/// `rekon plugin release`: list (and with `--remove`, release) the objects
/// carrying a plugin's finalizer. Exits non-zero when a removal failed.
fn release(args: ReleaseArgs) -> anyhow::Result<()> {
    let remove = args.remove;
    let config = rekon::commands::release::ReleaseConfig {
        name: args.name,
        from: args.from,
        finalizer: args.finalizer,
        remove,
        clusters: args.clusters.config(),
    };
    let report =
        tokio::runtime::Runtime::new()?.block_on(rekon::commands::release::release(config))?;
    match args.output {
        OutputFormat::Yaml => print!("{}", serde_yaml::to_string(&report)?),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    let failed = report.objects.iter().filter(|o| o.error.is_some()).count();
    let released = report.objects.iter().filter(|o| o.released).count();
    if remove {
        eprintln!(
            "{} objects carried finalizer {}; {released} released, {failed} failed",
            report.objects.len(),
            report.finalizer
        );
    } else {
        eprintln!(
            "{} objects carry finalizer {} (run again with --remove to release them without cleanup)",
            report.objects.len(),
            report.finalizer
        );
    }
    for s in &report.skipped {
        eprintln!("not searched: {s}");
    }
    if failed > 0 {
        anyhow::bail!("failed to release {failed} objects");
    }
    Ok(())
}

/// `rekon plugin new`: scaffold a plugin crate.
fn new_plugin(args: NewArgs) -> anyhow::Result<()> {
    use rekon::commands::scaffold::{Lang, Scaffold, SdkSource};
    let lang = match args.lang {
        NewLang::Rust => Lang::Rust,
        NewLang::Typescript => Lang::TypeScript,
        NewLang::Python => Lang::Python,
    };
    let sdk = match (args.sdk_path, args.sdk_git) {
        (Some(path), _) => SdkSource::Path(std::path::absolute(path)?),
        (None, Some(url)) if lang == Lang::Rust => SdkSource::Git(url),
        (None, Some(_)) => anyhow::bail!("--sdk-git is for --lang rust; pass --sdk-path"),
        (None, None) => {
            // The checkout this binary was built from, if it is still there;
            // a git dependency cannot be assumed to resolve (no git host may
            // be reachable, and the project's URL may not be public).
            let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let sdk = checkout.join(lang.sdk_dir());
            if !sdk.is_dir() {
                anyhow::bail!(
                    "no rekon SDK at {}: pass --sdk-path PATH/TO/REKON/{}{}",
                    sdk.display(),
                    lang.sdk_dir(),
                    if lang == Lang::Rust {
                        " (or --sdk-git URL)"
                    } else {
                        ""
                    }
                );
            }
            SdkSource::Path(std::path::absolute(sdk)?.canonicalize()?)
        }
    };
    let dir = Scaffold::new(&args.name, sdk)
        .lang(lang)
        .primary(&args.primary)?
        .write(&args.dir)?;
    let next = match lang {
        Lang::Rust => "rustup target add wasm32-wasip2 && cargo test",
        Lang::TypeScript => "npm install && npm test && npm run build",
        Lang::Python => "pip install -e . && pytest",
    };
    eprintln!(
        "created {}; next: cd {} && {next} (see its README)",
        dir.display(),
        dir.display()
    );
    Ok(())
}

/// `rekon plugin plan`: print what the plugin would do now.
fn plan(args: PlanArgs) -> anyhow::Result<()> {
    let config = rekon::commands::plan::PlanConfig {
        file: args.file,
        clusters: rekon::app::Config {
            policy_file: args.policy,
            ..args.clusters.config()
        },
        only: args.only,
        sync_timeout: std::time::Duration::from_secs(args.sync_timeout),
    };
    let plan = tokio::runtime::Runtime::new()?.block_on(rekon::commands::plan::plan(config))?;
    match args.output {
        OutputFormat::Yaml => print!("{}", plan.to_yaml_documents()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&plan)?),
    }
    eprintln!(
        "{} primaries, {} actions (dry run: nothing was written)",
        plan.reconciles.len(),
        plan.action_count()
    );
    Ok(())
}
