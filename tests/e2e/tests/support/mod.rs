//! Shared by the secured end-to-end tests (`in_cluster.rs`,
//! `least_privilege.rs`): two kube-sim clusters with TLS, authentication
//! and RBAC, the rendered `deploy/` base applied by the administrator, and
//! `rekon` run as the Deployment's Pod would run it.
//!
//! # How the Pod's environment is reproduced
//!
//! kube-rs' in-cluster configuration (`kube::Config::incluster`, reached
//! through `Config::infer` when there is no kubeconfig) reads
//! `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` and the files
//! `token`, `ca.crt` and `namespace` from
//! `/var/run/secrets/kubernetes.io/serviceaccount`, a path compiled into
//! kube-client (`config/incluster_config.rs`, constants with no override).
//! So `rekon` runs in a private mount namespace (`unshare --mount`, plus
//! `--map-root-user` when the test is not root) in which a tmpfs over
//! `/var/run` holds exactly those files: the unmodified binary finds them
//! where a Pod has them, nothing on the machine changes, and concurrent
//! tests do not see each other's files. `HOME` points at an empty directory
//! and `KUBECONFIG` is unset, so inference falls through to in-cluster.
//! Rejected: writing the real `/var/run/secrets` (root only, collides,
//! leaves state behind), a flag to redirect the paths (would not test what
//! a Pod does), a container runtime (not on a fresh CI machine).
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_sim::{Credentials, SimCluster, SimConfig};
use rekon_e2e::{Paths, SEED_PLUGINS};
use serde_json::{Value, json};

/// How long one convergence step may take.
pub const WAIT: Duration = Duration::from_secs(40);
/// Where a Pod finds its ServiceAccount.
pub const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The Pod's name (`POD_NAME` from the downward API).
pub const POD_NAME: &str = "rekon-6d9c7b5f4-x2x7q";

/// Compiled plugins shared by the secured tests (keyed by digest, written
/// atomically), so each test does not compile the seed plugins again.
pub fn compiled_cache() -> PathBuf {
    std::env::temp_dir().join("rekon-e2e-secured-compiled")
}

/// Runs kubectl with a kubeconfig; returns stdout or panics with stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.with_extension("cache"))
        .arg("--request-timeout=20s")
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl is installed");
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `rekon` child process, killed on drop.
pub struct Rekon {
    child: Child,
    log: PathBuf,
}

impl Rekon {
    /// The whole log.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last 60 lines of the log.
    pub fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Polls `probe` until it answers `Some`; fails with the log tail after
    /// [`WAIT`] or when rekon exits.
    pub async fn wait_for<T>(&mut self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(v) = probe() {
                return v;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "rekon exited ({status}) while waiting for {what}; log:\n{}",
                    self.tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; rekon log:\n{}",
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Rekon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The documents of a multi-document YAML stream.
pub fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML parses"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Two secured clusters set up as an operator would: `main` with the
/// rendered base (its RBAC possibly edited), `sub` with the CRDs and a
/// ServiceAccount holding only the (same) ClusterRole, its token in a
/// kubeconfig Secret in `rekon-system`.
pub struct Secured {
    /// Where the binary and plugins are.
    pub paths: Paths,
    /// The primary cluster.
    pub main: SimCluster,
    /// The cluster reached through the Secret.
    pub sub: SimCluster,
    /// Work directory (kubeconfigs, plugins, logs).
    pub work: tempfile::TempDir,
    /// The rendered base as applied.
    pub rendered: Vec<Value>,
    /// The `rekon-system/rekon` ServiceAccount's token (TokenRequest).
    pub token: String,
    /// Where rekon serves its secured `/metrics` (the Deployment's
    /// `--metrics-secure`, on a free loopback port; probes off).
    pub metrics_addr: std::net::SocketAddr,
    /// The certificate it serves there (`--metrics-cert-dir`).
    pub metrics_ca: PathBuf,
    /// A token of `rekon-system/prometheus`, bound to the generated
    /// `rekon-metrics-reader` ClusterRole.
    pub metrics_token: String,
}

impl Secured {
    /// Sets the clusters up; `edit` may change the rendered documents
    /// (the generated RBAC) before they are applied.
    pub async fn start(edit: impl FnOnce(&mut Vec<Value>)) -> Self {
        let paths = Paths::discover().expect("the workspace is built");
        let secure = |name: &str| SimConfig::new(name).tls(true).auth(true);
        let main = SimCluster::start_with(secure("main")).await.unwrap();
        let sub = SimCluster::start_with(secure("sub")).await.unwrap();
        let work = tempfile::Builder::new()
            .prefix("rekon-secured-")
            .tempdir()
            .unwrap();
        let main_admin = work.path().join("main-admin.kubeconfig");
        let sub_admin = work.path().join("sub-admin.kubeconfig");
        fs::write(&main_admin, main.kubeconfig_yaml()).unwrap();
        fs::write(&sub_admin, sub.kubeconfig_yaml()).unwrap();

        // main: the rendered kustomize base, applied by the administrator.
        let deploy = paths.root.join("deploy");
        let rendered_yaml = kubectl(&main_admin, &["kustomize", deploy.to_str().unwrap()]);
        let mut rendered = documents(&rendered_yaml);
        edit(&mut rendered);
        let manifest = work.path().join("rendered.json");
        let list = json!({"apiVersion": "v1", "kind": "List", "items": rendered});
        fs::write(&manifest, list.to_string()).unwrap();
        kubectl(&main_admin, &["apply", "-f", manifest.to_str().unwrap()]);
        // The Pod's token, through TokenRequest.
        let token = kubectl(
            &main_admin,
            &[
                "create",
                "token",
                "rekon",
                "-n",
                "rekon-system",
                "--duration=1h",
            ],
        )
        .trim()
        .to_owned();

        // sub: the CRDs, and an identity holding the generated ClusterRole only.
        kubectl(
            &sub_admin,
            &[
                "apply",
                "-k",
                deploy.join("base").join("crds").to_str().unwrap(),
            ],
        );
        let cluster_role = rendered
            .iter()
            .find(|d| d["kind"] == "ClusterRole")
            .expect("the base renders the generated ClusterRole");
        let remote = json!([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rekon-remote"}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "rekon-remote", "namespace": "rekon-remote"}},
            cluster_role,
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "rekon-remote"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": cluster_role["metadata"]["name"]},
             "subjects": [{"kind": "ServiceAccount", "name": "rekon-remote", "namespace": "rekon-remote"}]}
        ]);
        let remote_file = work.path().join("remote.json");
        let list = json!({"apiVersion": "v1", "kind": "List", "items": remote});
        fs::write(&remote_file, list.to_string()).unwrap();
        kubectl(&sub_admin, &["apply", "-f", remote_file.to_str().unwrap()]);
        let sub_token = kubectl(
            &sub_admin,
            &[
                "create",
                "token",
                "rekon-remote",
                "-n",
                "rekon-remote",
                "--duration=1h",
            ],
        );
        let kubeconfig = sub.kubeconfig_for(Credentials::Token(sub_token.trim().to_owned()));
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "sub", "namespace": "rekon-system",
                         "labels": {"rekon.dev/kubeconfig": "true"},
                         "annotations": {"rekon.dev/cluster-name": "sub"}},
            "stringData": {"kubeconfig": kubeconfig}});
        // The Pod itself, so that the host's Events can name its uid.
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": POD_NAME, "namespace": "rekon-system"},
            "spec": {"serviceAccountName": "rekon",
                     "containers": [{"name": "rekon", "image": "ghcr.io/rekon-dev/rekon:0.1.0"}]}});
        let extra = work.path().join("extra.json");
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [secret, pod]});
        fs::write(&extra, list.to_string()).unwrap();
        kubectl(&main_admin, &["apply", "-f", extra.to_str().unwrap()]);

        // Who scrapes: a ServiceAccount bound to the generated reader role.
        let scraper = json!([
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "prometheus", "namespace": "rekon-system"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "prometheus-rekon-metrics"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "rekon-metrics-reader"},
             "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "rekon-system"}]}
        ]);
        let scraper_file = work.path().join("scraper.json");
        let list = json!({"apiVersion": "v1", "kind": "List", "items": scraper});
        fs::write(&scraper_file, list.to_string()).unwrap();
        kubectl(
            &main_admin,
            &["apply", "-f", scraper_file.to_str().unwrap()],
        );
        let metrics_token = kubectl(
            &main_admin,
            &[
                "create",
                "token",
                "prometheus",
                "-n",
                "rekon-system",
                "--duration=1h",
            ],
        )
        .trim()
        .to_owned();
        let cert_dir = work.path().join("metrics-cert");
        fs::create_dir_all(&cert_dir).unwrap();
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        fs::write(cert_dir.join("tls.crt"), made.cert.pem()).unwrap();
        fs::write(cert_dir.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
        Self {
            paths,
            main,
            sub,
            rendered,
            token,
            metrics_addr: rekon_e2e::free_local_addr().unwrap(),
            metrics_ca: cert_dir.join("tls.crt"),
            metrics_token,
            work,
        }
    }

    /// The container arguments of the rendered Deployment, with the Pod's
    /// volumes replaced by local directories, the webhook server on a free
    /// port, the probes off and the
    /// secured metrics on [`Secured::metrics_addr`] with the test's
    /// certificate; and `--plugins=<plugins>`: the Deployment serves Plugin
    /// objects only, and these tests give it the seeds from a directory
    /// instead of a registry.
    pub fn deployment_args(&self, plugins: &Path, cache: &Path) -> Vec<String> {
        let deploy = self
            .rendered
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("the base renders a Deployment");
        let webhook_cert = self.work.path().join("webhook-cert");
        fs::create_dir_all(&webhook_cert).expect("a certificate directory");
        let mut args: Vec<String> = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .expect("container args")
            .iter()
            .map(|a| {
                let a = a.as_str().expect("string args");
                let a = a.replace("$(POD_NAMESPACE)", "rekon-system");
                match a.split_once('=') {
                    Some(("--cache-dir", _)) => format!("--cache-dir={}", cache.display()),
                    Some(("--metrics-addr", _)) => format!("--metrics-addr={}", self.metrics_addr),
                    Some(("--probe-addr", _)) => "--probe-addr=off".to_owned(),
                    // Any free port, and a writable certificate directory
                    // (the Pod's is a Secret; with none, the host writes a
                    // self-signed pair there).
                    Some(("--webhook-addr", _)) => "--webhook-addr=127.0.0.1:0".to_owned(),
                    Some(("--webhook-cert-dir", _)) => {
                        format!("--webhook-cert-dir={}", webhook_cert.display())
                    }
                    _ if a == "--metrics-secure" => format!(
                        "--metrics-secure --metrics-cert-dir={}",
                        self.metrics_ca
                            .parent()
                            .expect("the certificate's directory")
                            .display()
                    ),
                    _ => a,
                }
            })
            .flat_map(|a| a.split(' ').map(str::to_owned).collect::<Vec<_>>())
            .collect();
        assert!(
            !args.iter().any(|a| a.starts_with("--plugins")),
            "the Deployment has no plugin directory: {args:?}"
        );
        args.push(format!("--plugins={}", plugins.display()));
        args
    }

    /// One scrape of the secured `/metrics` with the reader's token:
    /// (status, body).
    pub fn scrape(&self) -> anyhow::Result<(u16, String)> {
        rekon_e2e::https_get(
            self.metrics_addr,
            "/metrics",
            &self.metrics_ca,
            Some(&self.metrics_token),
        )
    }

    /// Starts `rekon` as a Pod of the Deployment would run it, in a private
    /// mount namespace holding the ServiceAccount files (module docs);
    /// compiled plugins are cached in `cache`.
    pub fn spawn_in_cluster(&self, cache: &Path) -> Rekon {
        self.spawn_in_cluster_with(cache, &[])
    }

    /// [`Secured::spawn_in_cluster`] with arguments added to the
    /// Deployment's.
    pub fn spawn_in_cluster_with(&self, cache: &Path, extra: &[String]) -> Rekon {
        let work = self.work.path();
        let plugins = work.join("plugins");
        fs::create_dir_all(&plugins).unwrap();
        for p in SEED_PLUGINS {
            fs::copy(self.paths.plugins.join(p), plugins.join(p)).unwrap();
        }
        let mut args = self.deployment_args(&plugins, cache);
        args.extend_from_slice(extra);
        assert!(args.iter().any(|a| a == "--leader-elect"), "{args:?}");
        let sa = work.join("serviceaccount");
        fs::create_dir_all(&sa).unwrap();
        fs::write(sa.join("token"), &self.token).unwrap();
        fs::write(sa.join("ca.crt"), self.main.ca_pem().expect("TLS is on")).unwrap();
        fs::write(sa.join("namespace"), "rekon-system").unwrap();
        let home = work.join("home");
        fs::create_dir_all(&home).unwrap();
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let unshare = || {
            let mut cmd = Command::new("unshare");
            if !root {
                cmd.arg("--map-root-user");
            }
            cmd.args(["--mount", "--propagation", "private"]);
            cmd
        };
        let probe = unshare()
            .args(["sh", "-c", "mount -t tmpfs tmpfs /var/run"])
            .output()
            .expect("unshare is installed (util-linux)");
        assert!(
            probe.status.success(),
            "running rekon as a Pod needs a private mount namespace (unshare --mount) where a tmpfs can be mounted: {}",
            String::from_utf8_lossy(&probe.stderr)
        );
        let mut cmd = unshare();
        let log = work.join("rekon.log");
        let log_file = fs::File::create(&log).unwrap();
        cmd.args(["sh", "-c"])
            .arg(format!(
                "mount -t tmpfs tmpfs /var/run && mkdir -p {SA_DIR} && cp \"$0\"/token \"$0\"/ca.crt \"$0\"/namespace {SA_DIR}/ && exec \"$@\""
            ))
            .arg(&sa)
            .arg(&self.paths.rekon)
            .args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("KUBERNETES_SERVICE_HOST", self.main.addr().ip().to_string())
            .env("KUBERNETES_SERVICE_PORT", self.main.addr().port().to_string())
            .env("POD_NAME", POD_NAME)
            .env("POD_NAMESPACE", "rekon-system")
            .env("RUST_LOG", "info,rekon=debug")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file);
        let child = cmd.spawn().expect("unshare is installed (util-linux)");
        Rekon { child, log }
    }
}
