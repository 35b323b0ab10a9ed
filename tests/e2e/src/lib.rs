//! # rekon-e2e — the seed plugins end to end
//!
//! Runs the real `rekon` binary with the built seed plugins
//! (`dist/plugins/*.wasm`) against in-process [`kube_sim`] clusters `main`
//! and `sub`. Used by the end-to-end tests (`tests/*.rs`) and by the demo
//! binary `rekon-demo` (`make demo`). Nothing here builds anything: the
//! Makefile builds the workspace and the plugins first, and [`Paths`] says
//! clearly what is missing.
//!
//! # Layout
//!
//! | item | what |
//! |---|---|
//! | [`Paths`] | where the `rekon` binary, the plugins and the samples are |
//! | [`Env`] | two kube-sim clusters, a plugin directory and a running `rekon run` |
//! | [`RekonProcess`] | the child process, killed on drop, its log in a file |
//! | [`Env::wait_for`] | polling with a deadline that reports what it waited for |
//! | [`apply_manifests`] | create-or-merge YAML documents into a cluster (in process) |
//! | [`view`] | one-line renderings of Jobs, Tests, Nodes, NodePools for people |
//! | [`prometheus`] | a real Prometheus scraping the host, `promtool`, the metric names a query reads |

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube_sim::{Sim, SimCluster};
use serde_json::{Value, json};

pub mod cosign_side;
pub mod plugin_objects;
pub mod prometheus;
pub mod registry;
pub mod view;
pub mod webhook_env;
pub mod widgets;

/// `rekon ARGS...` (the binary under test), run to completion.
///
/// # Panics
/// When the binary cannot be started.
#[must_use]
pub fn rekon_cli(paths: &Paths, args: &[&str]) -> std::process::Output {
    Command::new(&paths.rekon)
        .args(args)
        .output()
        .expect("run rekon")
}

/// The registration `rekon plugin inspect -o json` reads from `wasm`,
/// without the file's digest: what two builds of one plugin (a seed and its
/// port, the three languages' widgets) must declare alike.
///
/// # Panics
/// When inspect fails or prints no JSON.
#[must_use]
pub fn inspect_json(paths: &Paths, wasm: &Path) -> Value {
    let out = rekon_cli(
        paths,
        &[
            "plugin",
            "inspect",
            "-o",
            "json",
            &wasm.display().to_string(),
        ],
    );
    assert!(
        out.status.success(),
        "inspect {}: {}",
        wasm.display(),
        output_text(&out)
    );
    let mut v: Value = serde_json::from_slice(&out.stdout).expect("inspect prints JSON");
    v.as_object_mut().map(|o| o.remove("digest"));
    v
}

/// `path`, a component `make <target>` builds.
///
/// # Panics
/// When it is missing, naming the make target: a test without its plugin
/// fails, never skips.
#[must_use]
pub fn built(path: PathBuf, target: &str) -> PathBuf {
    assert!(
        path.is_file(),
        "{} is missing: run `make {target}` first",
        path.display()
    );
    path
}

/// A finished command's stdout then stderr, lossily decoded.
#[must_use]
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The recorded cases under `dir` (`rekon_rules::cases`: what `rekon
/// plugin replay` reads); none when `dir` does not exist (yet).
#[must_use]
pub fn recorded_cases(dir: &Path) -> Vec<PathBuf> {
    rekon_rules::cases::case_files_in(dir).unwrap_or_default()
}

/// The seed plugin files `make plugins` produces.
pub const SEED_PLUGINS: &[&str] = &["test_fanout.wasm", "nodepool.wasm"];

/// Where the pieces of a built workspace are.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The workspace root.
    pub root: PathBuf,
    /// The `rekon` binary (`target/debug/rekon`, or `$REKON_BIN`).
    pub rekon: PathBuf,
    /// The built plugins (`dist/plugins`, or `$REKON_PLUGINS`).
    pub plugins: PathBuf,
    /// `deploy/samples`.
    pub samples: PathBuf,
    /// The test plugins `make test-plugins` builds (`dist/test-plugins`).
    pub test_plugins: PathBuf,
}

impl Paths {
    /// Locates the workspace from this crate's manifest directory and checks
    /// that the binary and the seed plugins exist.
    ///
    /// # Errors
    /// Names what is missing and the make target that builds it.
    pub fn discover() -> anyhow::Result<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .context("failed to find the workspace root above tests/e2e")?
            .to_path_buf();
        let rekon = std::env::var_os("REKON_BIN")
            .map_or_else(|| root.join("target/debug/rekon"), PathBuf::from);
        let plugins = std::env::var_os("REKON_PLUGINS")
            .map_or_else(|| root.join("dist/plugins"), PathBuf::from);
        if !rekon.is_file() {
            bail!(
                "the rekon binary {} is missing: build it first (`cargo build -p rekon-host`, or `make build`)",
                rekon.display()
            );
        }
        for plugin in SEED_PLUGINS {
            if !plugins.join(plugin).is_file() {
                bail!(
                    "plugin {} is missing: run `make plugins` first",
                    plugins.join(plugin).display()
                );
            }
        }
        Ok(Self {
            samples: root.join("deploy/samples"),
            test_plugins: root.join("dist/test-plugins"),
            root,
            rekon,
            plugins,
        })
    }
}

/// A running `rekon run`, killed when dropped. Its stderr (logs) goes to a file.
#[derive(Debug)]
pub struct RekonProcess {
    child: Child,
    log: PathBuf,
}

impl RekonProcess {
    /// The log file.
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log.
    #[must_use]
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The exit code once the process has exited (`None` while it runs or
    /// when a signal ended it).
    pub fn exit_code(&mut self) -> Option<i32> {
        self.child.try_wait().ok().flatten().and_then(|s| s.code())
    }

    /// Stops the process (SIGKILL) and waits for it.
    pub fn stop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for RekonProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How to start an [`Env`].
#[derive(Debug, Clone)]
pub struct EnvOptions {
    /// Plugin files (from [`Paths::plugins`]) copied into the plugin directory.
    pub plugins: Vec<String>,
    /// Pass `--plugins` with the plugin directory; `false`: no plugin
    /// directory at all (with `--plugin-objects` in [`EnvOptions::extra_args`],
    /// a host served by Plugin objects only).
    pub plugin_dir: bool,
    /// Pass `--install-crds`.
    pub install_crds: bool,
    /// `RUST_LOG` for the host.
    pub log_filter: String,
    /// Serve `/metrics`, `/healthz` and `/readyz` on a free local port
    /// (`off` otherwise, so parallel tests do not compete for a port).
    pub serve_ops: bool,
    /// Further clusters started but not engaged; `rekon` follows a cluster
    /// directory (`--cluster-dir`) and [`Env::engage`] adds them at runtime.
    pub standby_clusters: Vec<String>,
    /// Further arguments of `rekon run` (`--resync-period 3`, ...).
    pub extra_args: Vec<String>,
    /// Replica name (`POD_NAME`, so the identity in Leases and the
    /// User-Agent start with it); `None`: the host name.
    pub replica: Option<String>,
    /// With `serve_ops`: `main` with authentication and RBAC, and
    /// `/metrics` secured (`--metrics-secure`, a certificate for
    /// `localhost` in the work directory: [`Env::metrics_ca`]) on
    /// [`Env::ops_addr`], the probes plain on [`Env::probe_addr`].
    pub secure_metrics: bool,
}

impl Default for EnvOptions {
    fn default() -> Self {
        Self {
            plugins: SEED_PLUGINS.iter().map(|p| (*p).to_owned()).collect(),
            plugin_dir: true,
            install_crds: true,
            log_filter: "info,rekon=debug".to_owned(),
            serve_ops: false,
            standby_clusters: Vec::new(),
            extra_args: Vec::new(),
            replica: None,
            secure_metrics: false,
        }
    }
}

/// Two kube-sim clusters (`main` primary, `sub`), a plugin directory with the
/// seed plugins and `rekon run` on them.
#[derive(Debug)]
pub struct Env {
    /// Where things are.
    pub paths: Paths,
    /// The clusters.
    pub sim: Sim,
    /// The host process.
    pub rekon: RekonProcess,
    /// The plugin directory `rekon` watches.
    pub plugin_dir: PathBuf,
    /// A kubeconfig kept for the life of the env (the sim's own is in a temp dir too).
    pub kubeconfig: PathBuf,
    /// Where `/metrics`, `/healthz` and `/readyz` are served, if they are
    /// (secured: `/metrics` only).
    pub ops_addr: Option<std::net::SocketAddr>,
    /// Where the probes are served when `/metrics` is secured.
    pub probe_addr: Option<std::net::SocketAddr>,
    /// The certificate `/metrics` serves when secured (PEM file; trust it
    /// for `localhost`).
    pub metrics_ca: Option<PathBuf>,
    work: tempfile::TempDir,
}

impl Env {
    /// Starts the clusters and `rekon run`.
    ///
    /// # Errors
    /// When the workspace is not built or a process cannot start.
    pub async fn start(opts: EnvOptions) -> anyhow::Result<Self> {
        let paths = Paths::discover()?;
        let mut names = vec!["main", "sub"];
        names.extend(opts.standby_clusters.iter().map(String::as_str));
        let configs = names
            .iter()
            .map(|n| kube_sim::SimConfig::new(*n).auth(opts.secure_metrics && *n == "main"))
            .collect();
        let sim = Sim::start_with(configs)
            .await
            .context("failed to start kube-sim clusters")?;
        let work = tempfile::Builder::new().prefix("rekon-e2e-").tempdir()?;
        Self::start_in(paths, sim, work, opts)
    }

    /// Like [`Env::start`] with a given work directory (the demo keeps it).
    ///
    /// # Errors
    /// When a file cannot be written or `rekon` cannot be spawned.
    pub fn start_in(
        paths: Paths,
        sim: Sim,
        work: tempfile::TempDir,
        opts: EnvOptions,
    ) -> anyhow::Result<Self> {
        let plugin_dir = work.path().join("plugins");
        fs::create_dir_all(&plugin_dir)?;
        for plugin in &opts.plugins {
            fs::copy(paths.plugins.join(plugin), plugin_dir.join(plugin))
                .with_context(|| format!("failed to copy plugin {plugin}"))?;
        }
        let kubeconfig = work.path().join("kubeconfig");
        fs::write(&kubeconfig, sim.kubeconfig_yaml())?;
        let ops_addr = if opts.serve_ops {
            Some(free_local_addr()?)
        } else {
            None
        };
        let (probe_addr, metrics_ca) = if opts.serve_ops && opts.secure_metrics {
            let dir = work.path().join("metrics-cert");
            fs::create_dir_all(&dir)?;
            let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
            fs::write(dir.join("tls.crt"), made.cert.pem())?;
            fs::write(dir.join("tls.key"), made.signing_key.serialize_pem())?;
            (Some(free_local_addr()?), Some(dir.join("tls.crt")))
        } else {
            (None, None)
        };
        let rekon = spawn_rekon(
            &paths,
            &kubeconfig,
            &plugin_dir,
            work.path(),
            (ops_addr, probe_addr),
            &opts,
        )?;
        Ok(Self {
            paths,
            sim,
            rekon,
            plugin_dir,
            kubeconfig,
            ops_addr,
            probe_addr,
            metrics_ca,
            work,
        })
    }

    /// Starts another `rekon run` on the same clusters and plugin
    /// directory (a second replica), with `opts`' arguments, log filter and
    /// replica name (its log: `rekon-<replica>.log` in the work directory).
    ///
    /// # Errors
    /// When the process cannot be spawned.
    pub fn spawn_replica(&self, opts: &EnvOptions) -> anyhow::Result<RekonProcess> {
        spawn_rekon(
            &self.paths,
            &self.kubeconfig,
            &self.plugin_dir,
            self.work.path(),
            (None, None),
            opts,
        )
    }

    /// The work directory (kubeconfig, plugins, logs, kubectl cache).
    #[must_use]
    pub fn work_dir(&self) -> &Path {
        self.work.path()
    }

    /// Leaves the work directory (kubeconfig, plugins, `rekon.log`) on disk
    /// when the env is dropped.
    pub fn keep_work_dir(&mut self) {
        self.work.disable_cleanup(true);
    }

    /// Engages a standby cluster at runtime: writes its kubeconfig into the
    /// cluster directory `rekon` follows.
    ///
    /// # Errors
    /// When the env has no cluster directory or the file cannot be written.
    pub fn engage(&self, name: &str) -> anyhow::Result<()> {
        let dir = self.work.path().join("clusters");
        anyhow::ensure!(
            dir.is_dir(),
            "no cluster directory: start the env with standby clusters"
        );
        let cluster = self
            .sim
            .try_cluster(name)
            .with_context(|| format!("no cluster {name}"))?;
        // Written aside and renamed, so the host never reads half a file.
        let tmp = dir.join(format!(".{name}.tmp"));
        fs::write(&tmp, cluster.kubeconfig_yaml())?;
        fs::rename(&tmp, dir.join(format!("{name}.yaml")))?;
        Ok(())
    }

    /// The primary cluster.
    #[must_use]
    pub fn main(&self) -> &SimCluster {
        self.sim.cluster("main")
    }

    /// The second cluster.
    #[must_use]
    pub fn sub(&self) -> &SimCluster {
        self.sim.cluster("sub")
    }

    /// Runs `kubectl --kubeconfig K --context CONTEXT ARGS..` and returns stdout.
    ///
    /// # Errors
    /// When kubectl fails (its stderr is in the message).
    pub fn kubectl(&self, context: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--context")
            .arg(context)
            .arg("--cache-dir")
            .arg(self.work.path().join("kubectl-cache"))
            .args(args)
            .output()
            .context("failed to run kubectl")?;
        if !out.status.success() {
            bail!(
                "kubectl --context {context} {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -f -` of `yaml` in `context`: whether it succeeded,
    /// and what kubectl printed (stdout, then stderr), for tests that check
    /// a refusal's wording.
    #[must_use]
    pub fn kubectl_apply(&self, context: &str, yaml: &str) -> (bool, String) {
        use std::io::Write as _;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--context", context, "--cache-dir"])
            .arg(self.work.path().join("kubectl-cache"))
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(yaml.as_bytes())
            .expect("yaml written");
        let out = child.wait_with_output().expect("kubectl ends");
        (out.status.success(), output_text(&out))
    }

    /// Polls `probe` every 100 ms until it returns `Some`, or fails after
    /// `timeout` naming `what` and showing the end of rekon's log.
    ///
    /// # Errors
    /// On timeout, or when `rekon` exited.
    pub async fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut(&Self) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = probe(self) {
                return Ok(v);
            }
            if !self.rekon.is_running() {
                bail!(
                    "rekon exited while waiting for {what}; log:\n{}",
                    self.rekon.log_tail(60)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "timed out after {timeout:?} waiting for {what}; rekon log:\n{}",
                    self.rekon.log_tail(60)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until both seed CRDs are served by `main` (installed by
    /// `rekon run --install-crds`).
    ///
    /// # Errors
    /// On timeout.
    pub async fn wait_for_crds(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_for("the seed CRDs to be installed in main", timeout, |env| {
            let served = |api: &str, plural: &str| env.main().list(api, plural, None, "").is_ok();
            (served("job.lailin.xyz/v1", "tests") && served("nodes.lailin.xyz/v1", "nodepools"))
                .then_some(())
        })
        .await
    }
}

/// A free port on 127.0.0.1 (bound, then released for the child to take).
///
/// # Errors
/// When no port can be bound.
pub fn free_local_addr() -> anyhow::Result<std::net::SocketAddr> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("failed to find a free local port")?;
    Ok(listener.local_addr()?)
}

fn spawn_rekon(
    paths: &Paths,
    kubeconfig: &Path,
    plugin_dir: &Path,
    work: &Path,
    (ops_addr, probe_addr): (Option<std::net::SocketAddr>, Option<std::net::SocketAddr>),
    opts: &EnvOptions,
) -> anyhow::Result<RekonProcess> {
    let log = match &opts.replica {
        Some(name) => work.join(format!("rekon-{name}.log")),
        None => work.join("rekon.log"),
    };
    let log_file = fs::File::create(&log)?;
    let mut cmd = Command::new(&paths.rekon);
    cmd.arg("run").arg("--kubeconfig").arg(kubeconfig).args([
        "--context",
        "main",
        "--cluster",
        "sub=sub",
    ]);
    if opts.plugin_dir {
        cmd.arg("--plugins").arg(plugin_dir);
    }
    if opts.install_crds {
        cmd.arg("--install-crds");
    }
    if !opts.standby_clusters.is_empty() {
        let dir = work.join("clusters");
        fs::create_dir_all(&dir)?;
        cmd.arg("--cluster-dir").arg(dir);
    }
    let ops = ops_addr.map_or_else(|| "off".to_owned(), |a| a.to_string());
    match probe_addr {
        // Secured metrics: their own port, the probes plain on theirs.
        Some(probe) => {
            cmd.args(["--metrics-secure", "--metrics-addr", &ops])
                .arg("--probe-addr")
                .arg(probe.to_string())
                .arg("--metrics-cert-dir")
                .arg(work.join("metrics-cert"));
        }
        None => {
            cmd.args(["--metrics-addr", &ops, "--probe-addr", &ops]);
        }
    }
    cmd.args(&opts.extra_args);
    if let Some(extra) = std::env::var_os("REKON_E2E_ARGS") {
        cmd.args(extra.to_string_lossy().split_whitespace());
    }
    if let Some(name) = &opts.replica {
        cmd.env("POD_NAME", name);
    }
    cmd.env("RUST_LOG", &opts.log_filter)
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file);
    let child = cmd
        .spawn()
        .with_context(|| format!("failed to start {}", paths.rekon.display()))?;
    Ok(RekonProcess { child, log })
}

/// The plural of the kinds the samples and tests use.
///
/// # Errors
/// For a kind this harness does not know.
pub fn plural(kind: &str) -> anyhow::Result<&'static str> {
    Ok(match kind {
        "Test" => "tests",
        "NodePool" => "nodepools",
        "Node" => "nodes",
        "Job" => "jobs",
        "Namespace" => "namespaces",
        "RuntimeClass" => "runtimeclasses",
        "Event" => "events",
        "CustomResourceDefinition" => "customresourcedefinitions",
        "ConfigMap" => "configmaps",
        "Secret" => "secrets",
        "Plugin" => "plugins",
        "MutatingWebhookConfiguration" => "mutatingwebhookconfigurations",
        "ValidatingWebhookConfiguration" => "validatingwebhookconfigurations",
        other => bail!("no plural known for kind {other}"),
    })
}

/// Creates each YAML document in `cluster`, or merge-patches it when it
/// exists (in process, through kube-sim's store; `rekon` sees it through its
/// watches like any other change).
///
/// # Errors
/// On YAML or API errors.
pub fn apply_manifests(cluster: &SimCluster, yaml: &str) -> anyhow::Result<Vec<String>> {
    let mut applied = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value: Value =
            serde::Deserialize::deserialize(doc).context("failed to parse a YAML document")?;
        if value.is_null() {
            continue;
        }
        applied.push(apply_object(cluster, value)?);
    }
    Ok(applied)
}

/// Creates a seed `Test` (busybox) `ns/name` in `cluster`, and its
/// namespace when missing.
///
/// # Errors
/// On API errors.
pub fn create_test(cluster: &SimCluster, ns: &str, name: &str) -> anyhow::Result<()> {
    if get(cluster, "v1", "namespaces", None, ns).is_none() {
        apply_manifests(
            cluster,
            &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
        )?;
    }
    let test = json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                      "metadata": {"name": name, "namespace": ns}, "spec": {"image": "busybox:1.36"}});
    apply_object(cluster, test)?;
    Ok(())
}

/// `component` with a custom section `name` holding `payload` appended:
/// the same code, other bytes (another digest) — what a rebuild looks like
/// to the host. Custom sections may appear anywhere in a component.
#[must_use]
pub fn with_custom_section(component: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    use wasm_encoder::ComponentSection as _;
    let mut out = component.to_vec();
    wasm_encoder::CustomSection {
        name: name.into(),
        data: payload.into(),
    }
    .append_to_component(&mut out);
    out
}

/// Creates or merge-patches one object; returns `kind/name`.
///
/// # Errors
/// On API errors.
pub fn apply_object(cluster: &SimCluster, obj: Value) -> anyhow::Result<String> {
    let api_version = obj["apiVersion"]
        .as_str()
        .context("object without apiVersion")?
        .to_owned();
    let kind = obj["kind"]
        .as_str()
        .context("object without kind")?
        .to_owned();
    let name = obj["metadata"]["name"]
        .as_str()
        .context("object without name")?
        .to_owned();
    let ns = obj["metadata"]["namespace"].as_str().map(str::to_owned);
    let plural = plural(&kind)?;
    if cluster
        .get(&api_version, plural, ns.as_deref(), &name)
        .is_ok()
    {
        cluster
            .merge_patch(&api_version, plural, ns.as_deref(), &name, &obj, false)
            .map_err(|e| anyhow::anyhow!("failed to patch {kind} {name}: {e:?}"))?;
    } else {
        cluster
            .create(&api_version, plural, ns.as_deref(), obj)
            .map_err(|e| anyhow::anyhow!("failed to create {kind} {name}: {e:?}"))?;
    }
    Ok(format!("{kind}/{name}"))
}

/// Marks a Job complete through its status subresource (kube-sim runs no
/// job controller).
///
/// # Errors
/// When the Job does not exist.
pub fn complete_job(cluster: &SimCluster, namespace: &str, name: &str) -> anyhow::Result<()> {
    let patch = json!({"status": {
        "succeeded": 1,
        "startTime": "2025-01-01T00:00:00Z",
        "completionTime": "2025-01-01T00:00:10Z",
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True"},
            {"type": "Complete", "status": "True"}
        ]
    }});
    cluster
        .merge_patch("batch/v1", "jobs", Some(namespace), name, &patch, true)
        .map_err(|e| {
            anyhow::anyhow!(
                "failed to complete job {namespace}/{name} in {}: {e:?}",
                cluster.name()
            )
        })?;
    Ok(())
}

/// Marks every Node of `cluster` Ready (kube-sim runs no kubelet).
///
/// # Errors
/// On API errors.
pub fn mark_nodes_ready(cluster: &SimCluster) -> anyhow::Result<()> {
    for node in cluster
        .list("v1", "nodes", None, "")
        .map_err(|e| anyhow::anyhow!("{e:?}"))?
    {
        let name = node["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
        cluster
            .merge_patch("v1", "nodes", None, &name, &patch, true)
            .map_err(|e| anyhow::anyhow!("failed to mark node {name} ready: {e:?}"))?;
    }
    Ok(())
}

/// Reads an object, `None` if absent.
#[must_use]
pub fn get(
    cluster: &SimCluster,
    api_version: &str,
    plural: &str,
    ns: Option<&str>,
    name: &str,
) -> Option<Value> {
    cluster.get(api_version, plural, ns, name).ok()
}

/// A plain HTTP GET of `path` on `addr` (the host's `/metrics`, `/readyz`):
/// the whole response, status line and headers included.
///
/// # Errors
/// When the server cannot be reached or read.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut out = String::new();
    stream.read_to_string(&mut out)?;
    Ok(out)
}

/// A GET over HTTPS trusting only the certificate in `ca` (PEM) for
/// `localhost`, with `token` as bearer: (status, body).
///
/// # Errors
/// When the connection or the TLS handshake fails, or the answer is not HTTP.
pub fn https_get(
    addr: std::net::SocketAddr,
    path: &str,
    ca: &Path,
    token: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    use rustls::pki_types::pem::PemObject as _;
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)? {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost")?;
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)?;
    let tcp = std::net::TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    // The server may close without close_notify once the answer is sent.
    if let Err(e) = tls.read_to_end(&mut raw)
        && raw.is_empty()
    {
        return Err(e.into());
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("no HTTP answer: {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .context("no status")?
        .parse()?;
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    /// Section id 0, the section's size, the name's length, the name, the
    /// payload (the binary format's custom section).
    #[test]
    fn a_custom_section_is_appended_in_the_binary_format() {
        let out = super::with_custom_section(b"\0asm", "shadow", &[1]);
        assert_eq!(out, b"\0asm\x00\x08\x06shadow\x01");
        let long = super::with_custom_section(&[], "n", &[7; 200]);
        // 1 + 1 + 200 = 202 bytes: a two-byte LEB128 size.
        assert_eq!(&long[..4], &[0x00, 0xca, 0x01, 0x01]);
    }
}
