//! One-line renderings of the seed plugins' objects, for the demo's output
//! and for test failure messages. Everything reads through kube-sim's
//! in-process API (never stalled, never faulted).

use std::fmt::Write as _;

use kube_sim::SimCluster;
use serde_json::Value;

fn list(cluster: &SimCluster, api: &str, plural: &str) -> Vec<Value> {
    cluster.list(api, plural, None, "").unwrap_or_default()
}

fn str_of<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// A Job's state as a person would say it.
#[must_use]
pub fn job_state(job: &Value) -> &'static str {
    let conditions = job.pointer("/status/conditions").and_then(Value::as_array);
    let has = |t: &str| {
        conditions.is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    if has("Complete") || job.pointer("/status/completionTime").is_some() {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if job
        .pointer("/status/active")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        > 0
    {
        "Running"
    } else {
        "Pending"
    }
}

/// Jobs of every cluster: `cluster  namespace/name  image  state  owner`.
#[must_use]
pub fn jobs(clusters: &[&SimCluster]) -> Vec<String> {
    let mut out = Vec::new();
    for c in clusters {
        for job in list(c, "batch/v1", "jobs") {
            let owner = job
                .pointer("/metadata/ownerReferences/0/kind")
                .and_then(Value::as_str);
            out.push(format!(
                "{:<5} job {}/{}  image={}  {}  owner={}/{}{}",
                c.name(),
                str_of(&job, "/metadata/namespace"),
                str_of(&job, "/metadata/name"),
                str_of(&job, "/spec/template/spec/containers/0/image"),
                job_state(&job),
                str_of(&job, "/metadata/labels/owner.cluster"),
                str_of(&job, "/metadata/labels/owner.name"),
                owner
                    .map(|k| format!(" (ownerRef {k})"))
                    .unwrap_or_default(),
            ));
        }
    }
    out
}

/// Tests of a cluster: `namespace/name  phase  cluster:state ...`.
#[must_use]
pub fn tests(cluster: &SimCluster) -> Vec<String> {
    list(cluster, "job.lailin.xyz/v1", "tests")
        .iter()
        .map(|t| {
            let mut line = format!(
                "{:<5} test {}/{}  phase={}",
                cluster.name(),
                str_of(t, "/metadata/namespace"),
                str_of(t, "/metadata/name"),
                t.pointer("/status/phase")
                    .and_then(Value::as_str)
                    .unwrap_or("-"),
            );
            if let Some(f) = t.pointer("/status/finishedCluster").and_then(Value::as_str) {
                let _ = write!(line, " (by {f})");
            }
            for l in t
                .pointer("/status/clusters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let _ = write!(line, "  {}:{}", str_of(l, "/cluster"), str_of(l, "/state"));
            }
            if t.pointer("/metadata/deletionTimestamp").is_some() {
                line.push_str("  [deleting]");
            }
            line
        })
        .collect()
}

/// Nodes: `name  roles  pool labels  taints` (labels under kubernetes.io
/// and the pool annotations are left out).
#[must_use]
pub fn nodes(cluster: &SimCluster) -> Vec<String> {
    list(cluster, "v1", "nodes")
        .iter()
        .map(|n| {
            let labels = n.pointer("/metadata/labels").and_then(Value::as_object);
            let roles: Vec<&str> = labels
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
                .collect();
            let other: Vec<String> = labels
                .into_iter()
                .flatten()
                .filter(|(k, _)| !k.contains("kubernetes.io/"))
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            let taints: Vec<String> = n
                .pointer("/spec/taints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|t| {
                    let value = t["value"]
                        .as_str()
                        .map(|v| format!("={v}"))
                        .unwrap_or_default();
                    format!("{}{value}:{}", str_of(t, "/key"), str_of(t, "/effect"))
                })
                .collect();
            format!(
                "node {:<7} roles={:<10} labels=[{}]  taints=[{}]",
                str_of(n, "/metadata/name"),
                roles.join(","),
                other.join(" "),
                taints.join(" ")
            )
        })
        .collect()
}

/// NodePools: `name  nodes  notReady  Ready(reason)`.
#[must_use]
pub fn pools(cluster: &SimCluster) -> Vec<String> {
    list(cluster, "nodes.lailin.xyz/v1", "nodepools")
        .iter()
        .map(|p| {
            let ready = p
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .map(|c| format!("{}({})", str_of(c, "/status"), str_of(c, "/reason")))
                .unwrap_or_else(|| "-".into());
            format!(
                "pool {:<6} nodes={} notReady={} Ready={}{}",
                str_of(p, "/metadata/name"),
                p.pointer("/status/nodeCount")
                    .and_then(Value::as_i64)
                    .unwrap_or(0),
                p.pointer("/status/notReadyNodeCount")
                    .and_then(Value::as_i64)
                    .unwrap_or(0),
                ready,
                if p.pointer("/metadata/deletionTimestamp").is_some() {
                    "  [deleting]"
                } else {
                    ""
                }
            )
        })
        .collect()
}

/// RuntimeClasses: `name  handler  nodeSelector  tolerations`.
#[must_use]
pub fn runtime_classes(cluster: &SimCluster) -> Vec<String> {
    list(cluster, "node.k8s.io/v1", "runtimeclasses")
        .iter()
        .map(|rc| {
            let selector: Vec<String> = rc
                .pointer("/scheduling/nodeSelector")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            let tolerations: Vec<String> = rc
                .pointer("/scheduling/tolerations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|t| {
                    format!(
                        "{}={}:{}",
                        str_of(t, "/key"),
                        str_of(t, "/value"),
                        str_of(t, "/effect")
                    )
                })
                .collect();
            format!(
                "runtimeclass {}  handler={}  nodeSelector=[{}]  tolerations=[{}]",
                str_of(rc, "/metadata/name"),
                str_of(rc, "/handler"),
                selector.join(" "),
                tolerations.join(" ")
            )
        })
        .collect()
}

/// Everything the demo shows, one line per object.
#[must_use]
pub fn snapshot(main: &SimCluster, sub: &SimCluster) -> Vec<String> {
    let mut out = tests(main);
    out.extend(jobs(&[main, sub]));
    out.extend(pools(main));
    out.extend(nodes(main));
    out.extend(runtime_classes(main));
    out
}
