//! rekon in-cluster, on nothing but its generated RBAC.
//!
//! Two kube-sim clusters with TLS, authentication and RBAC on. The
//! administrator applies the rendered `deploy/` kustomize base to `main`,
//! obtains the `rekon-system/rekon` ServiceAccount's token through
//! TokenRequest (`kubectl create token`), and gives `sub` its own limited
//! identity: a ServiceAccount there bound to the generated ClusterRole only,
//! whose token travels in a kubeconfig Secret in `rekon-system` (as the
//! Deployment's `--cluster-secrets-namespace` expects). Then the real
//! `rekon` binary runs with the Deployment's own arguments and the
//! environment a Pod gets, and both seed plugins must converge across both
//! clusters with no request refused.
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

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_sim::{Credentials, SimCluster, SimConfig};
use rekon_e2e::{Paths, SEED_PLUGINS, apply_manifests, complete_job, get, mark_nodes_ready};
use serde_json::{Value, json};

/// How long one convergence step may take.
const WAIT: Duration = Duration::from_secs(40);
/// Bound of the whole test.
const TEST_TIMEOUT: Duration = Duration::from_secs(240);
/// Where a Pod finds its ServiceAccount.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Runs kubectl with a kubeconfig; returns stdout or panics with stderr.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
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
struct Rekon {
    child: Child,
    log: PathBuf,
}

impl Rekon {
    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Polls `probe` until it answers `Some`; fails with the log tail.
    async fn wait_for<T>(&mut self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
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
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML parses"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The container arguments of the rendered Deployment, with the Pod's
/// volumes replaced by local directories and the ops endpoints off.
fn deployment_args(rendered: &[Value], plugins: &Path, cache: &Path) -> Vec<String> {
    let deploy = rendered
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the base renders a Deployment");
    deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("container args")
        .iter()
        .map(|a| {
            let a = a.as_str().expect("string args");
            let a = a.replace("$(POD_NAMESPACE)", "rekon-system");
            match a.split_once('=') {
                Some(("--plugins", _)) => format!("--plugins={}", plugins.display()),
                Some(("--cache-dir", _)) => format!("--cache-dir={}", cache.display()),
                Some(("--metrics-addr" | "--probe-addr", _)) => {
                    format!("{}=off", a.split_once('=').map_or("", |(k, _)| k))
                }
                _ => a,
            }
        })
        .collect()
}

/// Starts `rekon` as a Pod of the Deployment would run it, in a private
/// mount namespace holding the ServiceAccount files (see the module docs).
fn spawn_in_cluster(
    paths: &Paths,
    work: &Path,
    main: &SimCluster,
    token: &str,
    args: &[String],
) -> Rekon {
    let sa = work.join("serviceaccount");
    fs::create_dir_all(&sa).unwrap();
    fs::write(sa.join("token"), token).unwrap();
    fs::write(sa.join("ca.crt"), main.ca_pem().expect("TLS is on")).unwrap();
    fs::write(sa.join("namespace"), "rekon-system").unwrap();
    let home = work.join("home");
    fs::create_dir_all(&home).unwrap();
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let mut cmd = Command::new("unshare");
    if !root {
        cmd.arg("--map-root-user");
    }
    let log = work.join("rekon.log");
    let log_file = fs::File::create(&log).unwrap();
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs tmpfs /var/run && mkdir -p {SA_DIR} && cp \"$0\"/token \"$0\"/ca.crt \"$0\"/namespace {SA_DIR}/ && exec \"$@\""
        ))
        .arg(&sa)
        .arg(&paths.rekon)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("KUBERNETES_SERVICE_HOST", main.addr().ip().to_string())
        .env("KUBERNETES_SERVICE_PORT", main.addr().port().to_string())
        .env("POD_NAME", "rekon-6d9c7b5f4-x2x7q")
        .env("POD_NAMESPACE", "rekon-system")
        .env("RUST_LOG", "info,rekon=debug")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file);
    let child = cmd.spawn().expect("unshare is installed (util-linux)");
    Rekon { child, log }
}

fn label<'a>(n: &'a Value, key: &str) -> Option<&'a str> {
    n.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rekon_in_cluster_converges_both_seed_plugins_on_the_generated_rbac_only() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let paths = Paths::discover().expect("the workspace is built");
        let secure = |name: &str| SimConfig::new(name).tls(true).auth(true);
        let main = SimCluster::start_with(secure("main")).await.unwrap();
        let sub = SimCluster::start_with(secure("sub")).await.unwrap();
        let work = tempfile::Builder::new().prefix("rekon-in-cluster-").tempdir().unwrap();
        let main_admin = work.path().join("main-admin.kubeconfig");
        let sub_admin = work.path().join("sub-admin.kubeconfig");
        fs::write(&main_admin, main.kubeconfig_yaml()).unwrap();
        fs::write(&sub_admin, sub.kubeconfig_yaml()).unwrap();

        // main: the rendered kustomize base, applied by the administrator.
        let deploy = paths.root.join("deploy");
        let rendered_yaml = kubectl(&main_admin, &["kustomize", deploy.to_str().unwrap()]);
        let rendered = documents(&rendered_yaml);
        let manifest = work.path().join("rendered.yaml");
        fs::write(&manifest, &rendered_yaml).unwrap();
        kubectl(&main_admin, &["apply", "-f", manifest.to_str().unwrap()]);
        // The Pod's token, through TokenRequest.
        let token = kubectl(
            &main_admin,
            &["create", "token", "rekon", "-n", "rekon-system", "--duration=1h"],
        );
        let token = token.trim();

        // sub: the CRDs, and an identity holding the generated ClusterRole only.
        kubectl(&sub_admin, &["apply", "-k", deploy.join("crds").to_str().unwrap()]);
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
        fs::write(&remote_file, json!({"apiVersion": "v1", "kind": "List", "items": remote}).to_string()).unwrap();
        kubectl(&sub_admin, &["apply", "-f", remote_file.to_str().unwrap()]);
        let sub_token = kubectl(
            &sub_admin,
            &["create", "token", "rekon-remote", "-n", "rekon-remote", "--duration=1h"],
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "sub", "namespace": "rekon-system",
                         "labels": {"rekon.dev/kubeconfig": "true"},
                         "annotations": {"rekon.dev/cluster-name": "sub"}},
            "stringData": {"kubeconfig": sub.kubeconfig_for(Credentials::Token(sub_token.trim().to_string()))}});
        let secret_file = work.path().join("secret.json");
        fs::write(&secret_file, secret.to_string()).unwrap();
        kubectl(&main_admin, &["apply", "-f", secret_file.to_str().unwrap()]);
        // What the ServiceAccount may do is what the generated RBAC says.
        let sa_kubeconfig = work.path().join("sa.kubeconfig");
        fs::write(&sa_kubeconfig, main.kubeconfig_for(Credentials::Token(token.to_string()))).unwrap();
        assert_eq!(kubectl(&sa_kubeconfig, &["auth", "can-i", "watch", "tests.job.lailin.xyz"]).trim(), "yes");
        let denied = Command::new("kubectl")
            .arg("--kubeconfig").arg(&sa_kubeconfig)
            .args(["auth", "can-i", "list", "secrets", "-n", "default"])
            .output().unwrap();
        assert_eq!(String::from_utf8_lossy(&denied.stdout).trim(), "no");

        // rekon, as the Deployment's Pod runs it.
        let plugins = work.path().join("plugins");
        fs::create_dir_all(&plugins).unwrap();
        for p in SEED_PLUGINS {
            fs::copy(paths.plugins.join(p), plugins.join(p)).unwrap();
        }
        let args = deployment_args(&rendered, &plugins, &work.path().join("cache"));
        assert!(args.iter().any(|a| a == "--leader-elect"), "{args:?}");
        let mut rekon = spawn_in_cluster(&paths, work.path(), &main, token, &args);

        // Leader election through the Role in rekon-system.
        rekon
            .wait_for("the leader Lease held by the Pod", || {
                let lease = get(&main, "coordination.k8s.io/v1", "leases", Some("rekon-system"), "rekon")?;
                (lease["spec"]["holderIdentity"].as_str()?.starts_with("rekon-6d9c7b5f4-x2x7q")).then_some(())
            })
            .await;

        // test-fanout: a Test in main fans out to main and to sub (reached
        // through the Secret's credentials).
        apply_manifests(&main, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: e2e\n").unwrap();
        let test = json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                          "metadata": {"name": "t1", "namespace": "e2e"}, "spec": {"image": "busybox:1.36"}});
        rekon_e2e::apply_object(&main, test).unwrap();
        rekon
            .wait_for("the Test's Jobs in main and sub", || {
                (get(&main, "batch/v1", "jobs", Some("e2e"), "t1").is_some()
                    && get(&sub, "batch/v1", "jobs", Some("e2e"), "t1").is_some())
                .then_some(())
            })
            .await;
        rekon
            .wait_for("the Test running on both clusters", || {
                let t = get(&main, "job.lailin.xyz/v1", "tests", Some("e2e"), "t1")?;
                (t["status"]["phase"] == "running" && t.pointer("/status/clusters")?.as_array()?.len() == 2)
                    .then_some(())
            })
            .await;
        complete_job(&sub, "e2e", "t1").unwrap();
        rekon
            .wait_for("the Test finished by sub", || {
                let t = get(&main, "job.lailin.xyz/v1", "tests", Some("e2e"), "t1")?;
                (t["status"]["phase"] == "finished" && t["status"]["finishedCluster"] == "sub").then_some(())
            })
            .await;

        // nodepool: labels, taints, RuntimeClasses and status in main.
        let samples = &paths.samples;
        apply_manifests(&main, &fs::read_to_string(samples.join("nodes.yaml")).unwrap()).unwrap();
        mark_nodes_ready(&main).unwrap();
        apply_manifests(&main, &fs::read_to_string(samples.join("nodepools.yaml")).unwrap()).unwrap();
        rekon
            .wait_for("both node pools converged", || {
                let a = get(&main, "v1", "nodes", None, "node-a")?;
                let ready = |pool: &str| {
                    get(&main, "nodes.lailin.xyz/v1", "nodepools", None, pool)
                        .and_then(|p| p.pointer("/status/conditions").cloned())
                        .and_then(|c| c.as_array().cloned())
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
                };
                (label(&a, "accelerator") == Some("nvidia")
                    && get(&main, "node.k8s.io/v1", "runtimeclasses", None, "node-pool-gpu").is_some()
                    && ready("gpu")
                    && ready("batch"))
                .then_some(())
            })
            .await;

        // Nothing was refused along the way.
        let log = rekon.log();
        for refused in ["HTTP 403", "HTTP 401", "Forbidden", "forbidden", "Unauthorized"] {
            assert!(!log.contains(refused), "rekon's log mentions {refused:?}:\n{}", rekon.tail());
        }
        drop(rekon);
        main.shutdown().await;
        sub.shutdown().await;
    })
    .await
    .expect("test timed out: likely deadlocked");
}
