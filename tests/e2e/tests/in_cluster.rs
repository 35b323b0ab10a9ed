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
//! How the Pod's environment is reproduced (a private mount namespace with
//! the ServiceAccount files at the standard path) is described in
//! `support/mod.rs`.

mod support;

use std::fs;
use std::process::Command;
use std::time::Duration;

use kube_sim::Credentials;
use rekon_e2e::{apply_manifests, complete_job, get, mark_nodes_ready};
use serde_json::{Value, json};
use support::{POD_NAME, Secured, kubectl};

/// Bound of the whole test.
const TEST_TIMEOUT: Duration = Duration::from_secs(240);

fn label<'a>(n: &'a Value, key: &str) -> Option<&'a str> {
    n.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rekon_in_cluster_converges_both_seed_plugins_on_the_generated_rbac_only() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let env = Secured::start(|_| {}).await;
        let (main, sub) = (&env.main, &env.sub);
        // What the ServiceAccount may do is what the generated RBAC says.
        let sa_kubeconfig = env.work.path().join("sa.kubeconfig");
        fs::write(&sa_kubeconfig, main.kubeconfig_for(Credentials::Token(env.token.clone()))).unwrap();
        assert_eq!(kubectl(&sa_kubeconfig, &["auth", "can-i", "watch", "tests.job.lailin.xyz"]).trim(), "yes");
        let denied = Command::new("kubectl")
            .arg("--kubeconfig").arg(&sa_kubeconfig)
            .args(["auth", "can-i", "list", "secrets", "-n", "default"])
            .output().unwrap();
        assert_eq!(String::from_utf8_lossy(&denied.stdout).trim(), "no");

        // rekon, as the Deployment's Pod runs it.
        let mut rekon = env.spawn_in_cluster(&support::compiled_cache());

        // Leader election through the Role in rekon-system.
        rekon
            .wait_for("the leader Lease held by the Pod", || {
                let lease = get(main, "coordination.k8s.io/v1", "leases", Some("rekon-system"), "rekon")?;
                (lease["spec"]["holderIdentity"].as_str()?.starts_with(POD_NAME)).then_some(())
            })
            .await;
        // Its report of what it serves of the Plugin objects, in the
        // group's report Lease (get, create, update: the Role's Lease rule).
        rekon
            .wait_for("the Pod's report in the Lease rekon-reports", || {
                let lease = get(main, "coordination.k8s.io/v1", "leases", Some("rekon-system"), "rekon-reports")?;
                lease["metadata"]["annotations"]
                    .as_object()?
                    .values()
                    .any(|v| v.as_str().is_some_and(|v| v.contains(POD_NAME)))
                    .then_some(())
            })
            .await;

        // test-fanout: a Test in main fans out to main and to sub (reached
        // through the Secret's credentials).
        apply_manifests(main, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: e2e\n").unwrap();
        let test = json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                          "metadata": {"name": "t1", "namespace": "e2e"}, "spec": {"image": "busybox:1.36"}});
        rekon_e2e::apply_object(main, test).unwrap();
        rekon
            .wait_for("the Test's Jobs in main and sub", || {
                (get(main, "batch/v1", "jobs", Some("e2e"), "t1").is_some()
                    && get(sub, "batch/v1", "jobs", Some("e2e"), "t1").is_some())
                .then_some(())
            })
            .await;
        rekon
            .wait_for("the Test running on both clusters", || {
                let t = get(main, "job.lailin.xyz/v1", "tests", Some("e2e"), "t1")?;
                (t["status"]["phase"] == "running" && t.pointer("/status/clusters")?.as_array()?.len() == 2)
                    .then_some(())
            })
            .await;
        complete_job(sub, "e2e", "t1").unwrap();
        rekon
            .wait_for("the Test finished by sub", || {
                let t = get(main, "job.lailin.xyz/v1", "tests", Some("e2e"), "t1")?;
                (t["status"]["phase"] == "finished" && t["status"]["finishedCluster"] == "sub").then_some(())
            })
            .await;

        // nodepool: labels, taints, RuntimeClasses and status in main.
        let samples = &env.paths.samples;
        apply_manifests(main, &fs::read_to_string(samples.join("nodes.yaml")).unwrap()).unwrap();
        mark_nodes_ready(main).unwrap();
        apply_manifests(main, &fs::read_to_string(samples.join("nodepools.yaml")).unwrap()).unwrap();
        rekon
            .wait_for("both node pools converged", || {
                let a = get(main, "v1", "nodes", None, "node-a")?;
                let ready = |pool: &str| {
                    get(main, "nodes.lailin.xyz/v1", "nodepools", None, pool)
                        .and_then(|p| p.pointer("/status/conditions").cloned())
                        .and_then(|c| c.as_array().cloned())
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
                };
                (label(&a, "accelerator") == Some("nvidia")
                    && get(main, "node.k8s.io/v1", "runtimeclasses", None, "node-pool-gpu").is_some()
                    && ready("gpu")
                    && ready("batch"))
                .then_some(())
            })
            .await;

        // The host's Events regard its Pod, read with the Role's `get pods`.
        let pod_uid = get(main, "v1", "pods", Some("rekon-system"), POD_NAME).unwrap()["metadata"]["uid"].clone();
        rekon
            .wait_for("a host Event regarding the Pod by uid", || {
                main.list("events.k8s.io/v1", "events", Some("rekon-system"), "")
                    .ok()?
                    .iter()
                    .any(|e| e["regarding"]["name"] == POD_NAME && e["regarding"]["uid"] == pod_uid)
                    .then_some(())
            })
            .await;

        // Secured metrics on the generated RBAC: the reader's scrape is
        // reviewed (TokenReview, SubjectAccessReview) and answered.
        let scraped = rekon
            .wait_for("a scrape of the secured /metrics", || {
                env.scrape().ok().filter(|(status, _)| *status == 200)
            })
            .await;
        assert!(scraped.1.contains("controller_runtime_reconcile_total"), "{}", scraped.1);

        // Deletions: the finalizers clean up in both clusters.
        main.delete("job.lailin.xyz/v1", "tests", Some("e2e"), "t1").unwrap();
        main.delete("nodes.lailin.xyz/v1", "nodepools", None, "gpu").unwrap();
        rekon
            .wait_for("the Test, its Jobs, the gpu pool and its RuntimeClass gone", || {
                (get(main, "job.lailin.xyz/v1", "tests", Some("e2e"), "t1").is_none()
                    && get(main, "batch/v1", "jobs", Some("e2e"), "t1").is_none()
                    && get(sub, "batch/v1", "jobs", Some("e2e"), "t1").is_none()
                    && get(main, "nodes.lailin.xyz/v1", "nodepools", None, "gpu").is_none()
                    && get(main, "node.k8s.io/v1", "runtimeclasses", None, "node-pool-gpu").is_none())
                .then_some(())
            })
            .await;

        // Nothing was refused along the way: every request the two
        // ServiceAccounts made was allowed, and rekon logged no refusal.
        let accounts = [
            "system:serviceaccount:rekon-system:rekon",
            "system:serviceaccount:rekon-remote:rekon-remote",
        ];
        let mut used = std::collections::BTreeSet::new();
        for (cluster, c, account) in [("main", main, accounts[0]), ("sub", sub, accounts[1])] {
            // rekon reached each cluster as that cluster's ServiceAccount
            // (the Pod's token in main, the Secret's in sub) and nothing else.
            let audit = c.audit_log();
            let users: std::collections::BTreeSet<&str> = audit
                .iter()
                .map(|r| r.user.as_str())
                .filter(|u| u.starts_with("system:serviceaccount:"))
                .collect();
            assert_eq!(users, [account].into(), "{cluster}: the accounts that made requests");
            for r in audit.iter().filter(|r| accounts.contains(&r.user.as_str())) {
                let a = &r.attributes;
                assert!(r.allowed, "{cluster}: {} was refused {a:?}", r.user);
                if a.resource_request {
                    let resource = if a.subresource.is_empty() {
                        a.resource.clone()
                    } else {
                        format!("{}/{}", a.resource, a.subresource)
                    };
                    used.insert((a.group.clone(), resource, a.verb.clone()));
                }
            }
        }
        let log = rekon.log();
        for refused in ["HTTP 403", "HTTP 401", "is forbidden: User", "Unauthorized"] {
            assert!(!log.contains(refused), "rekon's log mentions {refused:?}:\n{}", rekon.tail());
        }
        // For the record (the least-privilege tests hold the rules to
        // account): granted verbs this scenario did not use.
        let mut unused = Vec::new();
        for doc in env.rendered.iter().filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role") {
            for rule in doc["rules"].as_array().into_iter().flatten() {
                for (g, r, v) in rule["apiGroups"].as_array().into_iter().flatten().flat_map(|g| {
                    rule["resources"].as_array().into_iter().flatten().flat_map(move |r| {
                        rule["verbs"].as_array().into_iter().flatten().map(move |v| (g, r, v))
                    })
                }) {
                    let key = (g.as_str().unwrap_or_default().to_owned(), r.as_str().unwrap_or_default().to_owned(), v.as_str().unwrap_or_default().to_owned());
                    if !used.contains(&key) {
                        unused.push(format!("{} {}/{}", key.2, key.0, key.1));
                    }
                }
            }
        }
        eprintln!("granted but not used by this scenario: {unused:?}");
        drop(rekon);
    })
    .await
    .expect("test timed out: likely deadlocked");
}
