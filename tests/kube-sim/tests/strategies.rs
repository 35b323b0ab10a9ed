//! What the real API server's REST strategies (`PrepareForCreate`,
//! `PrepareForUpdate`, the status strategies) and Go's typed encoding make
//! of a create, an update, a spec change and a status update, per built-in
//! kind, checked over HTTP. The expected values come from
//! `pkg/registry/<group>/<kind>/strategy.go` and the Go struct tags of
//! k8s.io/api (fields without `omitempty` are written when zero), not from
//! kube-sim's own code; the README of this crate lists them.

mod common;

use common::{req, within};
use kube_sim::SimCluster;
use serde_json::{Value, json};

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";

/// One kind's case.
struct Case {
    /// Collection URL path.
    path: &'static str,
    /// The object a client creates, including a `status` it has no say in.
    body: Value,
    /// `status` of the create response, exactly.
    created_status: Value,
    /// `metadata.generation` after the create (`None`: not maintained).
    generation: Option<i64>,
    /// A merge patch changing the spec.
    spec_patch: Value,
    /// A status written through `/status` (a client's partial status).
    status_write: Value,
    /// `status` of the `/status` response, exactly.
    written_status: Value,
}

fn name_of(c: &Case) -> String {
    c.body["metadata"]["name"]
        .as_str()
        .expect("case has a name")
        .to_string()
}

fn generation(v: &Value) -> Option<i64> {
    v["metadata"]["generation"].as_i64()
}

/// Create, read, update (labels and status), spec change, status update.
async fn check(c: Case) {
    let sim = SimCluster::start("strategies").await.unwrap();
    let u = sim.url();
    let name = name_of(&c);
    let item = format!("{}/{name}", c.path);
    let what = c.path.rsplit('/').next().unwrap_or(c.path).to_string();

    // Create: the strategy resets the status (or keeps it, for a Node), Go
    // writes the fields without omitempty, generation starts at 1.
    let (code, created) = req(&u, "POST", c.path, JSON, Some(c.body.clone())).await;
    assert_eq!(code, 201, "{what}: create: {created}");
    assert_eq!(
        created["status"], c.created_status,
        "{what}: create response status"
    );
    assert_eq!(generation(&created), c.generation, "{what}: generation");
    let (code, got) = req(&u, "GET", &item, JSON, None).await;
    assert_eq!(code, 200, "{what}: get: {got}");
    assert_eq!(got, created, "{what}: a get returns what the create did");

    // Update: labels change, a status in the body is ignored, generation
    // stays (metadata is not spec).
    let mut upd = got.clone();
    upd["metadata"]["labels"] = json!({"touched": "yes"});
    upd["status"] = c.status_write.clone();
    let (code, updated) = req(&u, "PUT", &item, JSON, Some(upd)).await;
    assert_eq!(code, 200, "{what}: update: {updated}");
    assert_eq!(
        updated["status"], c.created_status,
        "{what}: an update keeps the status"
    );
    assert_eq!(updated["metadata"]["labels"]["touched"], "yes", "{what}");
    assert_eq!(
        generation(&updated),
        c.generation,
        "{what}: a label change is not a spec change"
    );

    // A spec change bumps the generation where the strategy maintains one.
    let (code, patched) = req(&u, "PATCH", &item, MERGE, Some(c.spec_patch.clone())).await;
    assert_eq!(code, 200, "{what}: spec patch: {patched}");
    assert_eq!(
        generation(&patched),
        c.generation.map(|g| g + 1),
        "{what}: generation after a spec change"
    );
    assert_eq!(patched["status"], c.created_status, "{what}");

    // A status update changes only the status; Go writes its unset
    // fields without omitempty again.
    let mut st = patched.clone();
    st["status"] = c.status_write.clone();
    st["spec"] = json!({});
    let (code, written) = req(&u, "PUT", &format!("{item}/status"), JSON, Some(st)).await;
    assert_eq!(code, 200, "{what}: status update: {written}");
    assert_eq!(
        written["status"], c.written_status,
        "{what}: status update response"
    );
    assert_eq!(
        written["spec"], patched["spec"],
        "{what}: a status update keeps the spec"
    );
    assert_eq!(
        generation(&written),
        generation(&patched),
        "{what}: a status update keeps the generation"
    );
    let (code, deleted) = req(&u, "DELETE", &item, JSON, None).await;
    assert!(code == 200 || code == 202, "{what}: delete: {deleted}");
    sim.shutdown().await;
}

fn template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}})
}

fn labels_selector(app: &str) -> Value {
    json!({"matchLabels": {"app": app}})
}

macro_rules! strategy_test {
    ($name:ident, $case:expr) => {
        #[tokio::test]
        async fn $name() {
            within(30, stringify!($name), check($case)).await;
        }
    };
}

// PrepareForCreate: `Status = ReplicationControllerStatus{}`, `Generation = 1`;
// `replicas` has no omitempty.
strategy_test!(
    replication_controller,
    Case {
        path: "/api/v1/namespaces/default/replicationcontrollers",
        body: json!({"metadata": {"name": "rc"}, "spec": {"replicas": 2,
            "selector": {"app": "rc"}, "template": template("rc")},
            "status": {"replicas": 7, "readyReplicas": 3}}),
        created_status: json!({"replicas": 0}),
        generation: Some(1),
        spec_patch: json!({"spec": {"replicas": 3}}),
        status_write: json!({"readyReplicas": 1}),
        written_status: json!({"replicas": 0, "readyReplicas": 1}),
    }
);

strategy_test!(
    replica_set,
    Case {
        path: "/apis/apps/v1/namespaces/default/replicasets",
        body: json!({"metadata": {"name": "rs"}, "spec": {"selector": labels_selector("rs"),
            "template": template("rs")}, "status": {"replicas": 4}}),
        created_status: json!({"replicas": 0}),
        generation: Some(1),
        spec_patch: json!({"spec": {"replicas": 5}}),
        status_write: json!({"replicas": 5, "readyReplicas": 5}),
        written_status: json!({"replicas": 5, "readyReplicas": 5}),
    }
);

// DeploymentStatus: every field has omitempty.
strategy_test!(
    deployment,
    Case {
        path: "/apis/apps/v1/namespaces/default/deployments",
        body: json!({"metadata": {"name": "deploy"}, "spec": {"selector": labels_selector("d"),
            "template": template("d")}, "status": {"replicas": 4}}),
        created_status: json!({}),
        generation: Some(1),
        spec_patch: json!({"spec": {"replicas": 2}}),
        status_write: json!({"availableReplicas": 2}),
        written_status: json!({"availableReplicas": 2}),
    }
);

// StatefulSetStatus: `replicas` and `availableReplicas` have no omitempty.
strategy_test!(
    stateful_set,
    Case {
        path: "/apis/apps/v1/namespaces/default/statefulsets",
        body: json!({"metadata": {"name": "sts"}, "spec": {"serviceName": "sts",
            "selector": labels_selector("s"), "template": template("s")},
            "status": {"replicas": 4, "currentRevision": "x"}}),
        created_status: json!({"replicas": 0, "availableReplicas": 0}),
        generation: Some(1),
        spec_patch: json!({"spec": {"replicas": 2}}),
        status_write: json!({"readyReplicas": 1}),
        written_status: json!({"replicas": 0, "availableReplicas": 0, "readyReplicas": 1}),
    }
);

// DaemonSetStatus: four counters without omitempty.
strategy_test!(
    daemon_set,
    Case {
        path: "/apis/apps/v1/namespaces/default/daemonsets",
        body: json!({"metadata": {"name": "ds"}, "spec": {"selector": labels_selector("ds"),
            "template": template("ds")}, "status": {"numberReady": 9}}),
        created_status: json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
            "desiredNumberScheduled": 0, "numberReady": 0}),
        generation: Some(1),
        spec_patch: json!({"spec": {"minReadySeconds": 5}}),
        status_write: json!({"numberAvailable": 1}),
        written_status: json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
            "desiredNumberScheduled": 0, "numberReady": 0, "numberAvailable": 1}),
    }
);

strategy_test!(
    job,
    Case {
        path: "/apis/batch/v1/namespaces/default/jobs",
        body: json!({"metadata": {"name": "job"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"succeeded": 1}}),
        created_status: json!({}),
        generation: Some(1),
        spec_patch: json!({"spec": {"suspend": true}}),
        status_write: json!({"active": 1}),
        written_status: json!({"active": 1}),
    }
);

strategy_test!(
    cron_job,
    Case {
        path: "/apis/batch/v1/namespaces/default/cronjobs",
        body: json!({"metadata": {"name": "cj"}, "spec": {"schedule": "*/5 * * * *",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}}},
            "status": {"lastScheduleTime": "2025-01-01T00:00:00Z"}}),
        created_status: json!({}),
        generation: Some(1),
        spec_patch: json!({"spec": {"suspend": true}}),
        status_write: json!({"lastScheduleTime": "2025-01-01T00:00:00Z"}),
        written_status: json!({"lastScheduleTime": "2025-01-01T00:00:00Z"}),
    }
);

// autoscaling/v2: `desiredReplicas` and `currentMetrics` (a nil slice,
// `null`) have no omitempty; no generation (HPAGeneration is off).
strategy_test!(
    horizontal_pod_autoscaler,
    Case {
        path: "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers",
        body: json!({"metadata": {"name": "hpa"}, "spec": {"maxReplicas": 3,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}},
            "status": {"desiredReplicas": 5}}),
        created_status: json!({"desiredReplicas": 0, "currentMetrics": null}),
        generation: None,
        spec_patch: json!({"spec": {"maxReplicas": 4}}),
        status_write: json!({"currentReplicas": 2}),
        written_status: json!({"currentReplicas": 2, "desiredReplicas": 0, "currentMetrics": null}),
    }
);

// autoscaling/v1 from v2 storage: `currentReplicas` has no omitempty in v1.
strategy_test!(
    horizontal_pod_autoscaler_v1,
    Case {
        path: "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers",
        body: json!({"metadata": {"name": "hpa1"}, "spec": {"maxReplicas": 3,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}},
            "status": {"currentReplicas": 5, "desiredReplicas": 5}}),
        created_status: json!({"currentReplicas": 0, "desiredReplicas": 0}),
        generation: None,
        spec_patch: json!({"spec": {"maxReplicas": 4}}),
        status_write: json!({"currentReplicas": 2, "desiredReplicas": 2}),
        written_status: json!({"currentReplicas": 2, "desiredReplicas": 2}),
    }
);

// PrepareForCreate resets the status; SetDefaults_PersistentVolumeClaim
// then sets the phase (defaulting runs when the stored object is read).
strategy_test!(
    persistent_volume_claim,
    Case {
        path: "/api/v1/namespaces/default/persistentvolumeclaims",
        body: json!({"metadata": {"name": "pvc"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}),
        created_status: json!({"phase": "Pending"}),
        generation: None,
        spec_patch: json!({"spec": {"volumeName": "pv1"}}),
        status_write: json!({"phase": "Bound"}),
        written_status: json!({"phase": "Bound"}),
    }
);

// PrepareForCreate: `Status = ResourceQuotaStatus{}` (`hard` and `used` are
// omitempty); the status strategy keeps the spec.
strategy_test!(
    resource_quota,
    Case {
        path: "/api/v1/namespaces/default/resourcequotas",
        body: json!({"metadata": {"name": "quota"}, "spec": {"hard": {"pods": "10"}},
            "status": {"hard": {"pods": "10"}, "used": {"pods": "3"}}}),
        created_status: json!({}),
        generation: None,
        spec_patch: json!({"spec": {"hard": {"pods": "20"}}}),
        status_write: json!({"hard": {"pods": "20"}, "used": {"pods": "1"}}),
        written_status: json!({"hard": {"pods": "20"}, "used": {"pods": "1"}}),
    }
);

// PrepareForCreate: `Status = ServiceStatus{}`; `loadBalancer` is a struct.
strategy_test!(
    service,
    Case {
        path: "/api/v1/namespaces/default/services",
        body: json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
        created_status: json!({"loadBalancer": {}}),
        generation: None,
        spec_patch: json!({"spec": {"sessionAffinity": "ClientIP"}}),
        status_write: json!({"conditions": [{"type": "Ready", "status": "True",
            "lastTransitionTime": "2025-01-01T00:00:00Z", "reason": "R", "message": ""}]}),
        written_status: json!({"loadBalancer": {}, "conditions": [{"type": "Ready",
            "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z", "reason": "R",
            "message": ""}]}),
    }
);

// PrepareForCreate: `Status{Phase: Active}`.
strategy_test!(
    namespace,
    Case {
        path: "/api/v1/namespaces",
        body: json!({"metadata": {"name": "team"}, "spec": {"finalizers": ["example.com/x"]},
            "status": {"phase": "Terminating"}}),
        created_status: json!({"phase": "Active"}),
        generation: None,
        spec_patch: json!({"spec": {"finalizers": []}}),
        status_write: json!({"conditions": [{"type": "NamespaceDeletionDiscoveryFailure",
            "status": "False"}]}),
        // SetDefaults_NamespaceStatus runs on the written status too.
        written_status: json!({"phase": "Active", "conditions": [
            {"type": "NamespaceDeletionDiscoveryFailure", "status": "False"}]}),
    }
);

// "Nodes allow *all* fields, including status, to be set on create";
// SetDefaults_NodeStatus copies capacity to allocatable; `nodeInfo` and
// `daemonEndpoints` are structs with fields without omitempty.
strategy_test!(
    node,
    Case {
        path: "/api/v1/nodes",
        body: json!({"metadata": {"name": "n1"}, "spec": {},
            "status": {"capacity": {"cpu": "4"}}}),
        created_status: json!({"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                "kubeProxyVersion": "", "operatingSystem": "", "architecture": ""}}),
        generation: None,
        spec_patch: json!({"spec": {"unschedulable": true}}),
        status_write: json!({"capacity": {"cpu": "8"}, "nodeInfo": {"kubeletVersion": "v1.34.0"}}),
        written_status: json!({"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "v1.34.0",
                "kubeProxyVersion": "", "operatingSystem": "", "architecture": ""}}),
    }
);

// PrepareForCreate: `Status{Phase: Pending, QOSClass: GetPodQOS(pod)}`,
// `Generation = 1`; updatePodGeneration bumps it on a spec change.
strategy_test!(
    pod,
    Case {
        path: "/api/v1/namespaces/default/pods",
        body: json!({"metadata": {"name": "pod"}, "spec": {"containers": [
            {"name": "c", "image": "nginx:1.27"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}}),
        created_status: json!({"phase": "Pending", "qosClass": "BestEffort"}),
        generation: Some(1),
        spec_patch: json!({"spec": {"activeDeadlineSeconds": 60}}),
        status_write: json!({"phase": "Running", "qosClass": "BestEffort",
            "containerStatuses": [{"name": "c", "ready": true}]}),
        written_status: json!({"phase": "Running", "qosClass": "BestEffort",
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0,
                "image": "", "imageID": "", "state": {}, "lastState": {}}]}),
    }
);

/// Deployment: an annotation change bumps the generation too ("annotations
/// are copied from deployments to their replica sets"); a label change
/// does not.
#[tokio::test]
async fn deployment_annotations_bump_the_generation() {
    within(30, "deployment annotations", async {
        let sim = SimCluster::start("strategies").await.unwrap();
        let u = sim.url();
        let path = "/apis/apps/v1/namespaces/default/deployments";
        let body = json!({"metadata": {"name": "d"}, "spec": {"selector": labels_selector("d"),
            "template": template("d")}});
        let (code, d) = req(&u, "POST", path, JSON, Some(body)).await;
        assert_eq!(code, 201, "{d}");
        let item = format!("{path}/d");
        let (_, d) = req(
            &u,
            "PATCH",
            &item,
            MERGE,
            Some(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await;
        assert_eq!(generation(&d), Some(1), "{d}");
        let (_, d) = req(
            &u,
            "PATCH",
            &item,
            MERGE,
            Some(json!({"metadata": {"annotations": {"a": "b"}}})),
        )
        .await;
        assert_eq!(generation(&d), Some(2), "{d}");
        sim.shutdown().await;
    })
    .await;
}

/// DaemonSet: apps/v1 carries the internal `spec.templateGeneration` as the
/// `deprecated.daemonset.template.generation` annotation: 1 on create,
/// kept whatever a client writes, bumped by a pod template change only.
#[tokio::test]
async fn daemon_set_template_generation_annotation() {
    within(30, "daemonset template generation", async {
        let sim = SimCluster::start("strategies").await.unwrap();
        let u = sim.url();
        let path = "/apis/apps/v1/namespaces/default/daemonsets";
        let key = "deprecated.daemonset.template.generation";
        let body = json!({"metadata": {"name": "ds"}, "spec": {"selector": labels_selector("ds"),
            "template": template("ds")}});
        let (code, ds) = req(&u, "POST", path, JSON, Some(body)).await;
        assert_eq!(code, 201, "{ds}");
        assert_eq!(ds["metadata"]["annotations"][key], "1", "{ds}");
        let item = format!("{path}/ds");
        let patch = |p: Value| req(&u, "PATCH", &item, MERGE, Some(p));
        let (_, ds) = patch(json!({"metadata": {"annotations": {key: "9"}}})).await;
        assert_eq!(
            ds["metadata"]["annotations"][key], "1",
            "clients cannot set it"
        );
        let (_, ds) = patch(json!({"spec": {"minReadySeconds": 3}})).await;
        assert_eq!(
            (ds["metadata"]["annotations"][key].as_str(), generation(&ds)),
            (Some("1"), Some(2)),
            "a spec change outside the template: {ds}"
        );
        let (_, ds) =
            patch(json!({"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}})).await;
        assert_eq!(
            (ds["metadata"]["annotations"][key].as_str(), generation(&ds)),
            (Some("2"), Some(3)),
            "a template change: {ds}"
        );
        sim.shutdown().await;
    })
    .await;
}

/// Namespace: PrepareForCreate appends the `kubernetes` finalizer to the
/// client's; SetDefaults_Namespace labels it with its name.
#[tokio::test]
async fn namespace_finalizers_and_name_label() {
    within(30, "namespace create", async {
        let sim = SimCluster::start("strategies").await.unwrap();
        let u = sim.url();
        let body = json!({"metadata": {"name": "team", "labels": {"a": "b"}},
            "spec": {"finalizers": ["example.com/x"]}});
        let (code, ns) = req(&u, "POST", "/api/v1/namespaces", JSON, Some(body)).await;
        assert_eq!(code, 201, "{ns}");
        assert_eq!(
            ns["spec"]["finalizers"],
            json!(["example.com/x", "kubernetes"])
        );
        assert_eq!(
            ns["metadata"]["labels"],
            json!({"a": "b", "kubernetes.io/metadata.name": "team"})
        );
        sim.shutdown().await;
    })
    .await;
}

// PrepareForCreate: `Status = IngressStatus{}`, `Generation = 1`;
// `loadBalancer` is a struct.
strategy_test!(
    ingress,
    Case {
        path: "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
        body: json!({"metadata": {"name": "ing"}, "spec": {"defaultBackend": {
            "service": {"name": "s", "port": {"number": 80}}}},
            "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
        created_status: json!({"loadBalancer": {}}),
        generation: Some(1),
        spec_patch: json!({"spec": {"ingressClassName": "nginx"}}),
        status_write: json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}),
        written_status: json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}),
    }
);

// PrepareForCreate: `Status = PodDisruptionBudgetStatus{}`, `Generation = 1`;
// four counters without omitempty.
strategy_test!(
    pod_disruption_budget,
    Case {
        path: "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        body: json!({"metadata": {"name": "pdb"}, "spec": {"minAvailable": 1,
            "selector": labels_selector("p")}, "status": {"currentHealthy": 3}}),
        created_status: json!({"disruptionsAllowed": 0, "currentHealthy": 0,
            "desiredHealthy": 0, "expectedPods": 0}),
        generation: Some(1),
        spec_patch: json!({"spec": {"minAvailable": 2}}),
        status_write: json!({"expectedPods": 2}),
        written_status: json!({"disruptionsAllowed": 0, "currentHealthy": 0,
            "desiredHealthy": 0, "expectedPods": 2}),
    }
);

/// DELETE answers with the deleted object where the registry says so
/// (`ReturnDeletedObject`, the spec's delete response: Pod, Service,
/// ServiceAccount, PVC, PV, PodTemplate, ResourceQuota, StorageClass),
/// else with a `Status`.
#[tokio::test]
async fn delete_answers_with_the_object_or_a_status() {
    within(30, "delete responses", async {
        let sim = SimCluster::start("strategies").await.unwrap();
        let u = sim.url();
        for (path, body, kind) in [
            (
                "/api/v1/namespaces/default/pods",
                json!({"metadata": {"name": "p"}, "spec": template("p")["spec"]}),
                "Pod",
            ),
            (
                "/api/v1/namespaces/default/serviceaccounts",
                json!({"metadata": {"name": "p"}}),
                "ServiceAccount",
            ),
            (
                "/api/v1/namespaces/default/services",
                json!({"metadata": {"name": "p"}, "spec": {"ports": [{"port": 80}]}}),
                "Service",
            ),
            (
                "/api/v1/namespaces/default/persistentvolumeclaims",
                json!({"metadata": {"name": "p"}, "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}),
                "PersistentVolumeClaim",
            ),
            (
                "/api/v1/persistentvolumes",
                json!({"metadata": {"name": "p"}, "spec": {"capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/p"}}}),
                "PersistentVolume",
            ),
            (
                "/api/v1/namespaces/default/podtemplates",
                json!({"metadata": {"name": "p"}, "template": template("p")}),
                "PodTemplate",
            ),
            (
                "/api/v1/namespaces/default/resourcequotas",
                json!({"metadata": {"name": "p"}, "spec": {"hard": {"pods": "1"}}}),
                "ResourceQuota",
            ),
            (
                "/apis/storage.k8s.io/v1/storageclasses",
                json!({"metadata": {"name": "p"}, "provisioner": "example.com/p"}),
                "StorageClass",
            ),
            (
                "/api/v1/namespaces/default/configmaps",
                json!({"metadata": {"name": "p"}}),
                "Status",
            ),
            (
                "/apis/apps/v1/namespaces/default/deployments",
                json!({"metadata": {"name": "p"}, "spec": {"selector": labels_selector("p"),
                    "template": template("p")}}),
                "Status",
            ),
        ] {
            let (code, created) = req(&u, "POST", path, JSON, Some(body)).await;
            assert_eq!(code, 201, "{created}");
            let (code, deleted) = req(&u, "DELETE", &format!("{path}/p"), JSON, None).await;
            assert_eq!(
                (code, deleted["kind"].as_str()),
                (200, Some(kind)),
                "{deleted}"
            );
            if kind != "Status" {
                assert_eq!(deleted["metadata"]["uid"], created["metadata"]["uid"]);
            }
        }
        sim.shutdown().await;
    })
    .await;
}

/// PersistentVolume: PrepareForCreate resets the status, then (the
/// PersistentVolumeLastPhaseTransitionTime gate, GA in 1.31) sets
/// `phase: Pending` and `lastPhaseTransitionTime` to now; an update keeps
/// the status; `/status` writes it.
#[tokio::test]
async fn persistent_volume_status_starts_pending_now() {
    within(30, "persistent_volume", async {
        let sim = SimCluster::start("strategies").await.unwrap();
        let u = sim.url();
        let path = "/api/v1/persistentvolumes";
        let body = json!({"metadata": {"name": "pv1"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "hostPath": {"path": "/tmp/pv1"}},
            "status": {"phase": "Bound", "message": "set by a client"}});
        let before = chrono::Utc::now() - chrono::Duration::seconds(1);
        let (code, created) = req(&u, "POST", path, JSON, Some(body)).await;
        assert_eq!(code, 201, "create: {created}");
        let status = created["status"].as_object().expect("a status");
        assert_eq!(
            status
                .keys()
                .map(String::as_str)
                .collect::<std::collections::BTreeSet<_>>(),
            ["lastPhaseTransitionTime", "phase"].into_iter().collect(),
            "{created}"
        );
        assert_eq!(status["phase"], "Pending");
        let at = chrono::DateTime::parse_from_rfc3339(
            status["lastPhaseTransitionTime"].as_str().expect("a time"),
        )
        .expect("RFC 3339");
        assert!(at >= before, "{at} is not the create's time");
        assert_eq!(generation(&created), None);

        let item = format!("{path}/pv1");
        let mut upd = created.clone();
        upd["status"] = json!({"phase": "Available"});
        upd["metadata"]["labels"] = json!({"touched": "yes"});
        let (code, updated) = req(&u, "PUT", &item, JSON, Some(upd)).await;
        assert_eq!(code, 200, "update: {updated}");
        assert_eq!(
            updated["status"], created["status"],
            "an update keeps the status"
        );

        let mut st = updated.clone();
        st["status"] =
            json!({"phase": "Available", "lastPhaseTransitionTime": "2025-01-01T00:00:00Z"});
        let (code, written) = req(&u, "PUT", &format!("{item}/status"), JSON, Some(st)).await;
        assert_eq!(code, 200, "status update: {written}");
        assert_eq!(written["status"]["phase"], "Available");
        sim.shutdown().await;
    })
    .await;
}
