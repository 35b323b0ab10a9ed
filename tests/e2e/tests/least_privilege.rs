//! Least privilege, rule by rule: for each rule `rekon rbac` generates,
//! the secured setup of `in_cluster.rs` runs with that one rule removed,
//! and rekon must report the apiserver's 403 for the operation that needs
//! it. A rule that could go with nothing failing would be a finding (remove
//! it from `rekon rbac` or justify it there). The table must cover every
//! generated rule: a new rule without a row fails
//! `every_generated_rule_has_a_row`.
//!
//! The rows name what needs the rule; the failing operation is checked by
//! the 403 message rekon logs, which names verb, resource and API group.
//!
//! The other way round: a plugin asking for more than the operator's
//! policy (`rekon run --policy`) allows is refused inside rekon, although
//! RBAC would allow the request: nothing reaches the server.

mod support;

use std::time::{Duration, Instant};

use rekon_e2e::{apply_manifests, mark_nodes_ready};
use serde_json::{Value, json};
use support::{Rekon, Secured, compiled_cache};

/// Bound of one row.
const ROW_TIMEOUT: Duration = Duration::from_secs(120);

/// One rule of the generated RBAC: the role holding it, its API group and
/// resource, and the 403 rekon reports without it.
struct Row {
    role: &'static str,
    group: &'static str,
    resource: &'static str,
    /// `User "…" cannot <verb> resource "<resource>"` as the apiserver words it.
    refused: &'static str,
}

const ROWS: &[Row] = &[
    // test-fanout creates a Test's namespace in sub before its Job.
    Row {
        role: "ClusterRole",
        group: "",
        resource: "namespaces",
        refused: "cannot create resource \"namespaces\"",
    },
    // nodepool watches Nodes and patches their labels and taints.
    Row {
        role: "ClusterRole",
        group: "",
        resource: "nodes",
        refused: "cannot list resource \"nodes\"",
    },
    // test-fanout watches and creates Jobs in every cluster.
    Row {
        role: "ClusterRole",
        group: "batch",
        resource: "jobs",
        refused: "cannot list resource \"jobs\"",
    },
    // Events the plugins and the host record.
    Row {
        role: "ClusterRole",
        group: "events.k8s.io",
        resource: "events",
        refused: "cannot create resource \"events\"",
    },
    // test-fanout's primary resource (watch, finalizer patch).
    Row {
        role: "ClusterRole",
        group: "job.lailin.xyz",
        resource: "tests",
        refused: "cannot list resource \"tests\"",
    },
    // test-fanout's status writes.
    Row {
        role: "ClusterRole",
        group: "job.lailin.xyz",
        resource: "tests/status",
        refused: "cannot patch resource \"tests/status\"",
    },
    // nodepool's RuntimeClasses.
    Row {
        role: "ClusterRole",
        group: "node.k8s.io",
        resource: "runtimeclasses",
        refused: "cannot list resource \"runtimeclasses\"",
    },
    // nodepool's primary resource.
    Row {
        role: "ClusterRole",
        group: "nodes.lailin.xyz",
        resource: "nodepools",
        refused: "cannot list resource \"nodepools\"",
    },
    // nodepool's status writes.
    Row {
        role: "ClusterRole",
        group: "nodes.lailin.xyz",
        resource: "nodepools/status",
        refused: "cannot patch resource \"nodepools/status\"",
    },
    // The host reads its own Pod for the uid its Events regard.
    Row {
        role: "Role",
        group: "",
        resource: "pods",
        refused: "cannot get resource \"pods\"",
    },
    // Kubeconfig Secrets (--cluster-secrets-namespace).
    Row {
        role: "Role",
        group: "",
        resource: "secrets",
        refused: "cannot list resource \"secrets\"",
    },
    // Leader election (--leader-elect).
    Row {
        role: "Role",
        group: "coordination.k8s.io",
        resource: "leases",
        refused: "cannot get resource \"leases\"",
    },
    // --plugin-objects: following Plugin objects, reporting their status.
    Row {
        role: "ClusterRole",
        group: "rekon.dev",
        resource: "plugins",
        refused: "cannot list resource \"plugins\"",
    },
    Row {
        role: "ClusterRole",
        group: "rekon.dev",
        resource: "plugins/status",
        refused: "cannot patch resource \"plugins/status\"",
    },
    // --metrics-secure: each scrape's token is reviewed ...
    Row {
        role: "ClusterRole",
        group: "authentication.k8s.io",
        resource: "tokenreviews",
        refused: "cannot create resource \"tokenreviews\"",
    },
    // ... and so is its right to get /metrics.
    Row {
        role: "ClusterRole",
        group: "authorization.k8s.io",
        resource: "subjectaccessreviews",
        refused: "cannot create resource \"subjectaccessreviews\"",
    },
    // --plugin-objects: signature keys a Plugin's spec.verification names
    // in ConfigMaps of the host's namespace, read by name.
    Row {
        role: "Role",
        group: "",
        resource: "configmaps",
        refused: "cannot get resource \"configmaps\"",
    }, // --webhook-service: the webhook configurations of Plugin objects
    // (read first: an unfetchable Plugin's are looked for to remove what
    // an earlier version left).
    Row {
        role: "ClusterRole",
        group: "admissionregistration.k8s.io",
        resource: "mutatingwebhookconfigurations",
        refused: "cannot list resource \"mutatingwebhookconfigurations\"",
    },
    Row {
        role: "ClusterRole",
        group: "admissionregistration.k8s.io",
        resource: "validatingwebhookconfigurations",
        refused: "cannot list resource \"validatingwebhookconfigurations\"",
    },
    // ... and the conversion of the CRDs they convert (listed by label
    // first: the CRDs pointed at a deleted Plugin object's plugin).
    Row {
        role: "ClusterRole",
        group: "apiextensions.k8s.io",
        resource: "customresourcedefinitions",
        refused: "cannot list resource \"customresourcedefinitions\"",
    },
];

/// `(role kind, group, resource)` of every rule in the rendered base.
fn generated_rules(rendered: &[Value]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for doc in rendered {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if !matches!(kind, "ClusterRole" | "Role") {
            continue;
        }
        for rule in doc["rules"].as_array().into_iter().flatten() {
            for g in rule["apiGroups"].as_array().into_iter().flatten() {
                for r in rule["resources"].as_array().into_iter().flatten() {
                    out.push((
                        kind.to_owned(),
                        g.as_str().unwrap_or_default().to_owned(),
                        r.as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
        }
    }
    out
}

/// Removes the rule for `group`/`resource` from the role of kind `role`.
fn without(rendered: &mut [Value], role: &str, group: &str, resource: &str) {
    let doc = rendered
        .iter_mut()
        .find(|d| d["kind"] == role)
        .unwrap_or_else(|| panic!("the base renders a {role}"));
    let rules = doc["rules"].as_array_mut().expect("rules");
    let mut holding = 0;
    for rule in rules.iter_mut() {
        if rule["apiGroups"] != json!([group]) {
            continue;
        }
        let Some(resources) = rule["resources"].as_array_mut() else {
            continue;
        };
        let before = resources.len();
        resources.retain(|r| r != resource);
        holding += before - resources.len();
    }
    // A rule whose resources were all removed goes.
    rules.retain(|r| r["resources"].as_array().is_none_or(|l| !l.is_empty()));
    assert_eq!(holding, 1, "exactly one {role} rule for {group}/{resource}");
}

/// Drives both seed plugins through everything they do.
fn drive(env: &Secured) {
    let main = &env.main;
    apply_manifests(
        main,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: e2e\n",
    )
    .unwrap();
    let test = json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                      "metadata": {"name": "t1", "namespace": "e2e"}, "spec": {"image": "busybox:1.36"}});
    rekon_e2e::apply_object(main, test).unwrap();
    let samples = &env.paths.samples;
    apply_manifests(
        main,
        &std::fs::read_to_string(samples.join("nodes.yaml")).unwrap(),
    )
    .unwrap();
    mark_nodes_ready(main).unwrap();
    apply_manifests(
        main,
        &std::fs::read_to_string(samples.join("nodepools.yaml")).unwrap(),
    )
    .unwrap();
    // A Plugin object whose module cannot be fetched: the host reports so in
    // its status.
    rekon_e2e::apply_object(
        main,
        json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
               "metadata": {"name": "unfetchable"},
               "spec": {"module": "not a reference",
                        "verification": {"keys": [{"configMapRef": {"name": "keys"}}]}}}),
    )
    .unwrap();
}

/// Rekon's own log records (JSON lines, target `rekon…`) as their
/// message and fields joined, unescaped.
fn rekon_records(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["target"].as_str().is_some_and(|t| t.starts_with("rekon")))
        .map(|r| {
            let fields = r["fields"].as_object().cloned().unwrap_or_default();
            fields
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Waits for a record of rekon's holding the apiserver's 403 with `refused`.
async fn refused_record(rekon: &Rekon, refused: &str) -> Option<String> {
    let deadline = Instant::now() + support::WAIT;
    while Instant::now() < deadline {
        if let Some(r) = rekon_records(&rekon.log())
            .into_iter()
            .find(|r| r.contains("is forbidden: User") && r.contains(refused))
        {
            return Some(r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

async fn check(row: &Row) {
    tokio::time::timeout(ROW_TIMEOUT, async {
        let env = Secured::start(|docs| without(docs, row.role, row.group, row.resource)).await;
        let rekon = env.spawn_in_cluster(&compiled_cache());
        drive(&env);
        // A scraper at work, so the reviews of secured metrics happen.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let scraping = {
            let (addr, ca, token) = (env.metrics_addr, env.metrics_ca.clone(), env.metrics_token.clone());
            let stop = stop.clone();
            tokio::task::spawn_blocking(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = rekon_e2e::https_get(addr, "/metrics", &ca, Some(&token));
                    std::thread::sleep(Duration::from_millis(300));
                }
            })
        };
        let record = refused_record(&rekon, row.refused).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = scraping.await;
        let record = record.unwrap_or_else(|| {
            let forbidden: Vec<String> = rekon_records(&rekon.log())
                .into_iter()
                .filter(|r| r.contains("forbidden"))
                .collect();
            panic!(
                "without the {} rule for {:?}/{}, rekon reported no 403 with {:?}; 403s it did report:\n{}\nlog tail:\n{}",
                row.role,
                row.group,
                row.resource,
                row.refused,
                forbidden.join("\n"),
                rekon.tail()
            )
        });
        assert!(
            record.contains("User \"system:serviceaccount:rekon-system:rekon\"")
                || record.contains("User \"system:serviceaccount:rekon-remote:rekon-remote\""),
            "the 403 names the ServiceAccount: {record}"
        );
    })
    .await
    .expect("row timed out: likely deadlocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_generated_rule_has_a_row() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let env = Secured::start(|_| {}).await;
        let mut generated = generated_rules(&env.rendered);
        generated.sort();
        let mut rows: Vec<(String, String, String)> = ROWS
            .iter()
            .map(|r| (r.role.to_owned(), r.group.to_owned(), r.resource.to_owned()))
            .collect();
        rows.sort();
        assert_eq!(
            generated, rows,
            "generated rules vs. the least-privilege table"
        );
    })
    .await
    .expect("timed out: likely deadlocked");
}

macro_rules! rows {
    ($($name:ident => $index:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            check(&ROWS[$index]).await;
        }
    )*};
}

rows! {
    without_namespaces => 0;
    without_nodes => 1;
    without_jobs => 2;
    without_events => 3;
    without_tests => 4;
    without_tests_status => 5;
    without_runtimeclasses => 6;
    without_nodepools => 7;
    without_nodepools_status => 8;
    without_pods => 9;
    without_secrets => 10;
    without_leases => 11;
    without_plugins => 12;
    without_plugins_status => 13;
    without_tokenreviews => 14;
    without_subjectaccessreviews => 15;
    without_configmaps => 16;
    without_mutatingwebhookconfigurations => 17;
    without_validatingwebhookconfigurations => 18;
    without_customresourcedefinitions => 19;
}

/// nodepool patches Nodes; the operator's policy denies it. RBAC would
/// allow the patch, so only rekon can stop it: a tripwire on the server
/// fails any Node patch with a message that would show in rekon's log.
/// rekon refuses the whole outcome holding the denied action (not retried).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_beyond_the_operator_policy_is_refused_before_any_request_leaves() {
    tokio::time::timeout(ROW_TIMEOUT, async {
        let env = Secured::start(|_| {}).await;
        let policy = env.work.path().join("policy.yaml");
        std::fs::write(
            &policy,
            "plugins:\n  nodepool:\n    deny:\n      - {group: \"\", kind: Node, verbs: [patch]}\n",
        )
        .unwrap();
        let mut tripwire = kube_sim::FaultRule::new(500, 10_000)
            .verb("patch")
            .path("/api/v1/nodes/");
        tripwire.message = Some("tripwire: a Node patch reached the server".into());
        env.main.fail_next(tripwire);
        let rekon = env.spawn_in_cluster_with(
            &compiled_cache(),
            &[format!("--policy={}", policy.display())],
        );
        drive(&env);
        let deadline = Instant::now() + support::WAIT;
        let refusal = loop {
            if let Some(r) = rekon_records(&rekon.log())
                .into_iter()
                .find(|r| r.contains("refused by operator policy") && r.contains("patch of Node"))
            {
                break r;
            }
            assert!(
                Instant::now() < deadline,
                "rekon did not report the policy refusal; log tail:\n{}",
                rekon.tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(refusal.contains("plugin nodepool"), "{refusal}");
        // RBAC would have allowed the patch: only rekon stopped it.
        let sa = env.work.path().join("sa.kubeconfig");
        std::fs::write(
            &sa,
            env.main
                .kubeconfig_for(kube_sim::Credentials::Token(env.token.clone())),
        )
        .unwrap();
        assert_eq!(
            support::kubectl(&sa, &["auth", "can-i", "patch", "nodes"]).trim(),
            "yes"
        );
        // Refused outcomes are not retried; give a stray request time to land.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !rekon.log().contains("tripwire"),
            "a Node patch left rekon:\n{}",
            rekon.tail()
        );
        let node = rekon_e2e::get(&env.main, "v1", "nodes", None, "node-a").unwrap();
        assert!(
            node.pointer("/metadata/labels/accelerator").is_none(),
            "node-a was patched: {node}"
        );
        // The tripwire is live: a Node patch that does reach the server trips it.
        let admin = env.work.path().join("main-admin.kubeconfig");
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&admin)
            .args([
                "patch",
                "node",
                "node-b",
                "--type=merge",
                "-p",
                r#"{"metadata":{"labels":{"x":"y"}}}"#,
            ])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("tripwire"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    })
    .await
    .expect("timed out: likely deadlocked");
}
