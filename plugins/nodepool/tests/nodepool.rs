//! nodepool through the SDK's native test kit: every behaviour of
//! `docs/design.md` ("nodepool") against a fake cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::api::node::v1::RuntimeClass;
use nodepool::{FINALIZER, NodePool, NodePoolPlugin, NodePoolSpec, applied_annotation};
use rekon_sdk::prelude::*;
use rekon_sdk::testkit::{TestkitError, World};
use serde_json::{Value, json};

const CORDON: &str = "node.kubernetes.io/unschedulable";

fn pool_req(name: &str) -> Request {
    Request::cluster_scoped("main", name)
}

fn pool_ref(name: &str) -> ObjectRef {
    ObjectRef::new::<NodePool>("main", None, name)
}

fn node_ref(name: &str) -> ObjectRef {
    ObjectRef::new::<Node>("main", None, name)
}

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: Some(value.into()),
        effect: effect.into(),
        time_added: None,
    }
}

fn spec(labels: &[(&str, &str)], taints: &[Taint], handler: Option<&str>) -> NodePoolSpec {
    NodePoolSpec {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        taints: taints.to_vec(),
        handler: handler.map(str::to_owned),
    }
}

fn insert_pool(world: &mut World, name: &str, spec: NodePoolSpec) {
    world.insert("main", &NodePool::new(name, spec));
}

fn set_spec(world: &mut World, name: &str, spec: &NodePoolSpec) {
    let spec = serde_json::to_value(spec).unwrap();
    assert!(world.modify(&pool_ref(name), |p| p["spec"] = spec));
}

/// A node with foreign labels (kubernetes.io ones and a team label), the
/// given pool roles, a cordon taint and a foreign taint.
fn insert_node(world: &mut World, name: &str, pools: &[&str], ready: bool) {
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "team": "payments",
    });
    for p in pools {
        labels[format!("node-role.kubernetes.io/{p}")] = json!("");
    }
    world.insert_json(
        "main",
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "labels": labels},
               "spec": {"taints": [
                   {"key": CORDON, "effect": "NoSchedule"},
                   {"key": "other.example.com/maintenance", "value": "soon", "effect": "PreferNoSchedule"}]},
               "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}),
    );
}

fn node(world: &World, name: &str) -> Node {
    world
        .get("main", None, name)
        .unwrap_or_else(|| panic!("node {name}"))
}

fn labels(world: &World, name: &str) -> BTreeMap<String, String> {
    node(world, name).metadata.labels.unwrap_or_default()
}

fn taints(world: &World, name: &str) -> Vec<(String, String, String)> {
    node(world, name)
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value.unwrap_or_default(), t.effect))
        .collect()
}

fn t3(key: &str, value: &str, effect: &str) -> (String, String, String) {
    (key.into(), value.into(), effect.into())
}

/// The foreign labels and taints every test node starts with are all there.
fn assert_foreign_intact(world: &World, name: &str) {
    let l = labels(world, name);
    assert_eq!(
        l.get("kubernetes.io/hostname").map(String::as_str),
        Some(name)
    );
    assert_eq!(l.get("kubernetes.io/os").map(String::as_str), Some("linux"));
    assert_eq!(l.get("team").map(String::as_str), Some("payments"));
    let t = taints(world, name);
    assert!(
        t.contains(&t3(CORDON, "", "NoSchedule")),
        "cordon taint kept on {name}: {t:?}"
    );
    assert!(
        t.contains(&t3(
            "other.example.com/maintenance",
            "soon",
            "PreferNoSchedule"
        )),
        "{t:?}"
    );
}

fn converge(world: &mut World) {
    world
        .converge_all::<NodePoolPlugin>(12)
        .expect("nodepool should converge");
}

fn pool(world: &World, name: &str) -> NodePool {
    world
        .get("main", None, name)
        .unwrap_or_else(|| panic!("pool {name}"))
}

fn ready(world: &World, name: &str) -> (String, String) {
    let status = pool(world, name).status.expect("status written");
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready condition");
    (c.status.clone(), c.reason.clone())
}

fn gpu_spec() -> NodePoolSpec {
    spec(
        &[("node-pool.lailin.xyz/gpu", "8"), ("accelerator", "a100")],
        &[taint("node-pool.lailin.xyz", "gpu", "NoSchedule")],
        None,
    )
}

fn assert_quiet(world: &mut World, pools: &[&str]) {
    for p in pools {
        world.assert_no_writes::<NodePoolPlugin>(&pool_req(p));
    }
}

#[test]
fn registration_declares_crd_watches_and_finalizer() {
    let reg = World::register::<NodePoolPlugin>().unwrap();
    assert_eq!(reg.name, "nodepool");
    assert_eq!(reg.finalizer.as_deref(), Some(FINALIZER));
    let nodes = reg
        .watches
        .iter()
        .find(|w| w.resource.kind == "Node")
        .unwrap();
    // Selective: a node wakes the pools its role and marker labels name.
    assert_eq!(
        nodes.mapping,
        Mapping::label_key_prefixes(&["node-role.kubernetes.io/", "applied.nodes.lailin.xyz/"])
    );
    let rcs = reg
        .watches
        .iter()
        .find(|w| w.resource.kind == "RuntimeClass")
        .unwrap();
    assert_eq!(rcs.mapping, Mapping::OwnerReference);

    let crd = &reg.crds[0];
    assert_eq!(crd["metadata"]["name"], "nodepools.nodes.lailin.xyz");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    let v1 = &crd["spec"]["versions"][0];
    assert_eq!(v1["name"], "v1");
    assert!(v1["subresources"]["status"].is_object());
    let spec = &v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(spec["labels"]["type"], "object");
    assert_eq!(spec["handler"]["type"], "string");
    let taint = &spec["taints"]["items"]["properties"];
    assert_eq!(
        taint["effect"]["enum"],
        serde_json::json!(["NoSchedule", "PreferNoSchedule", "NoExecute"])
    );
    // The Python port registers the same CRD (its copy, crd.json).
    let port: serde_json::Value = serde_json::from_str(include_str!("../../nodepool-py/crd.json"))
        .expect("plugins/nodepool-py/crd.json");
    assert_eq!(
        port, *crd,
        "plugins/nodepool-py/crd.json is not the seed's CRD: refresh it"
    );
    for field in ["key", "value", "effect"] {
        assert_eq!(
            taint[field]["type"], "string",
            "taint schema has {field}: {}",
            spec["taints"]
        );
    }
}

#[test]
fn nodes_get_labels_and_taints_and_a_runtime_class_is_owned() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_node(&mut world, "n1", &["gpu"], true);
    insert_node(&mut world, "n2", &[], true);
    converge(&mut world);

    let l = labels(&world, "n1");
    assert_eq!(l["node-pool.lailin.xyz/gpu"], "8");
    assert_eq!(l["accelerator"], "a100");
    assert!(taints(&world, "n1").contains(&t3("node-pool.lailin.xyz", "gpu", "NoSchedule")));
    assert_foreign_intact(&world, "n1");
    // A node outside the pool is untouched.
    assert!(!labels(&world, "n2").contains_key("accelerator"));
    assert_eq!(taints(&world, "n2").len(), 2);

    let rc: RuntimeClass = world
        .get("main", None, "node-pool-gpu")
        .expect("runtime class");
    assert_eq!(rc.handler, "runc");
    let scheduling = rc.scheduling.unwrap();
    assert_eq!(scheduling.node_selector.unwrap(), gpu_spec().labels);
    let tolerations = scheduling.tolerations.unwrap();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(tolerations[0].key.as_deref(), Some("node-pool.lailin.xyz"));
    assert_eq!(tolerations[0].operator.as_deref(), Some("Equal"));
    assert_eq!(tolerations[0].value.as_deref(), Some("gpu"));
    assert_eq!(tolerations[0].effect.as_deref(), Some("NoSchedule"));
    let owner = &rc.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("NodePool", "gpu")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(Some(&owner.uid), pool(&world, "gpu").metadata.uid.as_ref());

    let status = pool(&world, "gpu").status.unwrap();
    assert_eq!((status.node_count, status.not_ready_node_count), (1, 0));
    assert_eq!(status.nodes, ["n1"]);
    assert_eq!(ready(&world, "gpu"), ("True".into(), "Converged".into()));
    let reasons: Vec<String> = world.events().into_iter().map(|e| e.reason).collect();
    assert!(
        reasons.contains(&"NodesUpdated".to_owned())
            && reasons.contains(&"RuntimeClassUpdated".to_owned())
    );
    let finalizers = pool(&world, "gpu").metadata.finalizers.unwrap_or_default();
    assert!(finalizers.contains(&FINALIZER.to_owned()));
}

#[test]
fn a_converged_world_writes_nothing() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_pool(
        &mut world,
        "ssd",
        spec(&[("disk", "ssd")], &[], Some("kata")),
    );
    insert_node(&mut world, "n1", &["gpu", "ssd"], true);
    insert_node(&mut world, "n2", &["ssd"], false);
    converge(&mut world);
    assert_quiet(&mut world, &["gpu", "ssd"]);
    let outcome = world.reconcile::<NodePoolPlugin>(&pool_req("gpu")).unwrap();
    assert!(outcome.actions.is_empty(), "no events either: {outcome:?}");
}

#[test]
fn foreign_labels_and_a_cordon_taint_survive_every_pool_change() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_node(&mut world, "n1", &["gpu"], true);
    converge(&mut world);
    assert_foreign_intact(&world, "n1");

    // Change a value, drop a label, add a label.
    set_spec(
        &mut world,
        "gpu",
        &spec(
            &[("node-pool.lailin.xyz/gpu", "10"), ("zone", "b")],
            &[taint("node-pool.lailin.xyz", "gpu", "NoSchedule")],
            None,
        ),
    );
    converge(&mut world);
    let l = labels(&world, "n1");
    assert_eq!(l["node-pool.lailin.xyz/gpu"], "10");
    assert_eq!(l["zone"], "b");
    assert!(!l.contains_key("accelerator"), "dropped label removed");
    assert_foreign_intact(&world, "n1");
    let rc: RuntimeClass = world.get("main", None, "node-pool-gpu").unwrap();
    assert_eq!(
        rc.scheduling.unwrap().node_selector.unwrap().len(),
        2,
        "runtime class follows the pool"
    );

    // Change a taint's value, add one with another effect.
    set_spec(
        &mut world,
        "gpu",
        &spec(
            &[("node-pool.lailin.xyz/gpu", "10")],
            &[
                taint("node-pool.lailin.xyz", "gpu2", "NoSchedule"),
                taint("gpu", "true", "NoExecute"),
            ],
            None,
        ),
    );
    converge(&mut world);
    let t = taints(&world, "n1");
    assert!(
        t.contains(&t3("node-pool.lailin.xyz", "gpu2", "NoSchedule")),
        "{t:?}"
    );
    assert!(
        !t.contains(&t3("node-pool.lailin.xyz", "gpu", "NoSchedule")),
        "{t:?}"
    );
    assert!(t.contains(&t3("gpu", "true", "NoExecute")));
    assert_foreign_intact(&world, "n1");
    assert_eq!(t.len(), 4);

    // Drop every taint and label.
    set_spec(&mut world, "gpu", &spec(&[], &[], None));
    converge(&mut world);
    assert_foreign_intact(&world, "n1");
    assert_eq!(taints(&world, "n1").len(), 2);
    assert!(!labels(&world, "n1").contains_key("node-pool.lailin.xyz/gpu"));
    assert!(!labels(&world, "n1").contains_key("zone"));
    assert!(
        !node(&world, "n1")
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(&applied_annotation("gpu")),
        "nothing applied, no record"
    );
    let scheduling = world
        .get::<RuntimeClass>("main", None, "node-pool-gpu")
        .unwrap()
        .scheduling
        .unwrap_or_default();
    assert!(
        scheduling.node_selector.unwrap_or_default().is_empty()
            && scheduling.tolerations.unwrap_or_default().is_empty()
    );

    // Cordon the node while the pool is converged, then change the pool.
    set_spec(&mut world, "gpu", &gpu_spec());
    converge(&mut world);
    assert!(world.modify(&node_ref("n1"), |n| {
        n["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .retain(|t| t["key"] != CORDON);
    }));
    converge(&mut world);
    assert!(
        !taints(&world, "n1").iter().any(|t| t.0 == CORDON),
        "uncordon is not undone"
    );
    assert!(taints(&world, "n1").contains(&t3("node-pool.lailin.xyz", "gpu", "NoSchedule")));

    // Deleting the pool leaves only what was not the pool's.
    world.delete(&pool_ref("gpu"));
    converge(&mut world);
    assert!(!world.contains(&pool_ref("gpu")));
    let l = labels(&world, "n1");
    assert!(!l.contains_key("node-pool.lailin.xyz/gpu") && !l.contains_key("accelerator"));
    assert_eq!(l["team"], "payments");
    assert_eq!(
        taints(&world, "n1"),
        [t3(
            "other.example.com/maintenance",
            "soon",
            "PreferNoSchedule"
        )]
    );
}

#[test]
fn a_node_in_two_pools_keeps_each_pools_labels_and_taints() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    // ssd shares one label and one taint with gpu (same values).
    insert_pool(
        &mut world,
        "ssd",
        spec(
            &[("disk", "ssd"), ("accelerator", "a100")],
            &[
                taint("disk", "ssd", "NoSchedule"),
                taint("node-pool.lailin.xyz", "gpu", "NoSchedule"),
            ],
            None,
        ),
    );
    insert_node(&mut world, "n1", &["gpu", "ssd"], true);
    converge(&mut world);
    let l = labels(&world, "n1");
    assert_eq!(
        (
            l["node-pool.lailin.xyz/gpu"].as_str(),
            l["disk"].as_str(),
            l["accelerator"].as_str()
        ),
        ("8", "ssd", "a100")
    );
    let t = taints(&world, "n1");
    assert!(t.contains(&t3("disk", "ssd", "NoSchedule")));
    assert_eq!(
        t.iter().filter(|t| t.0 == "node-pool.lailin.xyz").count(),
        1,
        "a shared taint once: {t:?}"
    );
    assert_eq!(pool(&world, "gpu").status.unwrap().node_count, 1);
    assert_eq!(pool(&world, "ssd").status.unwrap().node_count, 1);

    // gpu drops the shared label and taint: ssd still declares them.
    set_spec(
        &mut world,
        "gpu",
        &spec(&[("node-pool.lailin.xyz/gpu", "8")], &[], None),
    );
    // Not even for a moment: gpu alone (before ssd runs again) keeps them.
    world
        .converge::<NodePoolPlugin>(&pool_req("gpu"), 5)
        .unwrap();
    assert_eq!(labels(&world, "n1")["accelerator"], "a100");
    assert!(taints(&world, "n1").contains(&t3("node-pool.lailin.xyz", "gpu", "NoSchedule")));
    converge(&mut world);
    assert_eq!(labels(&world, "n1")["accelerator"], "a100");
    assert!(taints(&world, "n1").contains(&t3("node-pool.lailin.xyz", "gpu", "NoSchedule")));

    // Deleting ssd removes ssd's labels and taints only.
    world.delete(&pool_ref("ssd"));
    converge(&mut world);
    let l = labels(&world, "n1");
    assert!(
        !l.contains_key("disk") && !l.contains_key("accelerator"),
        "{l:?}"
    );
    assert_eq!(l["node-pool.lailin.xyz/gpu"], "8");
    assert_eq!(taints(&world, "n1").len(), 2);
    assert_foreign_intact(&world, "n1");
    assert_quiet(&mut world, &["gpu"]);
}

#[test]
fn conflicting_pools_do_not_fight_and_the_loser_says_so() {
    let mut world = World::new().primary("main");
    insert_pool(
        &mut world,
        "alpha",
        spec(
            &[("tier", "gold")],
            &[taint("dedicated", "alpha", "NoSchedule")],
            None,
        ),
    );
    insert_pool(
        &mut world,
        "beta",
        spec(
            &[("tier", "silver")],
            &[taint("dedicated", "beta", "NoSchedule")],
            None,
        ),
    );
    insert_node(&mut world, "n1", &["alpha", "beta"], true);
    converge(&mut world);
    assert_eq!(
        labels(&world, "n1")["tier"],
        "gold",
        "the pool that sorts first wins"
    );
    assert!(taints(&world, "n1").contains(&t3("dedicated", "alpha", "NoSchedule")));
    assert_eq!(ready(&world, "alpha"), ("True".into(), "Converged".into()));
    assert_eq!(ready(&world, "beta"), ("False".into(), "Conflict".into()));
    assert!(
        world
            .events()
            .iter()
            .any(|e| e.reason == "Conflict" && e.regarding.name == "beta")
    );
    assert_quiet(&mut world, &["alpha", "beta"]);

    // The winner leaves: the other pool's value takes over.
    world.delete(&pool_ref("alpha"));
    converge(&mut world);
    assert_eq!(labels(&world, "n1")["tier"], "silver");
    assert!(taints(&world, "n1").contains(&t3("dedicated", "beta", "NoSchedule")));
    assert!(!taints(&world, "n1").contains(&t3("dedicated", "alpha", "NoSchedule")));
    assert_eq!(ready(&world, "beta"), ("True".into(), "Converged".into()));
}

#[test]
fn a_node_leaving_the_pool_loses_its_labels_and_taints() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_node(&mut world, "n1", &["gpu"], true);
    insert_node(&mut world, "n2", &["gpu"], true);
    converge(&mut world);
    assert_eq!(pool(&world, "gpu").status.unwrap().node_count, 2);
    // Members carry the pool's marker label: a former member is found (and
    // mapped) by it after it lost its role label.
    assert_eq!(labels(&world, "n1")["applied.nodes.lailin.xyz/gpu"], "true");

    assert!(world.modify(&node_ref("n1"), |n| {
        n["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("node-role.kubernetes.io/gpu");
    }));
    converge(&mut world);
    let l = labels(&world, "n1");
    assert!(
        !l.contains_key("node-pool.lailin.xyz/gpu") && !l.contains_key("accelerator"),
        "{l:?}"
    );
    assert_eq!(taints(&world, "n1").len(), 2);
    assert_foreign_intact(&world, "n1");
    assert!(
        !node(&world, "n1")
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(&applied_annotation("gpu"))
    );
    assert!(
        !labels(&world, "n1").contains_key("applied.nodes.lailin.xyz/gpu"),
        "the marker goes with the record"
    );
    assert_eq!(
        labels(&world, "n2")["accelerator"],
        "a100",
        "the other node keeps them"
    );
    let status = pool(&world, "gpu").status.unwrap();
    assert_eq!(
        (status.node_count, status.nodes.clone()),
        (1, vec!["n2".to_owned()])
    );
}

#[test]
fn a_value_someone_changed_is_no_longer_the_pools_to_remove() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_node(&mut world, "n1", &["gpu"], true);
    converge(&mut world);
    // Another actor takes over `accelerator`, then the pool drops it.
    assert!(world.modify(
        &node_ref("n1"),
        |n| n["metadata"]["labels"]["accelerator"] = json!("h100")
    ));
    set_spec(
        &mut world,
        "gpu",
        &spec(
            &[("node-pool.lailin.xyz/gpu", "8")],
            &gpu_spec().taints,
            None,
        ),
    );
    converge(&mut world);
    assert_eq!(labels(&world, "n1")["accelerator"], "h100");
}

#[test]
fn concurrent_node_changes_are_not_lost() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_node(&mut world, "n1", &["gpu"], true);
    world.assert_no_writes::<NodePoolPlugin>(&pool_req("nobody")); // unknown pool: nothing
    let outcome = world.reconcile::<NodePoolPlugin>(&pool_req("gpu")).unwrap();
    // Someone adds a taint between the read and the write.
    assert!(world.modify(&node_ref("n1"), |n| {
        n["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "late", "value": "1", "effect": "NoSchedule"}));
    }));
    let err = world
        .apply::<NodePoolPlugin>(&pool_req("gpu"), &outcome)
        .unwrap_err();
    assert!(
        matches!(err, TestkitError::Conflict { .. }),
        "guarded by resourceVersion: {err}"
    );
    converge(&mut world);
    let t = taints(&world, "n1");
    assert!(
        t.contains(&t3("late", "1", "NoSchedule"))
            && t.contains(&t3("node-pool.lailin.xyz", "gpu", "NoSchedule"))
    );
    assert_foreign_intact(&world, "n1");
}

#[test]
fn status_counts_not_ready_nodes_and_reports_pending_updates() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_node(&mut world, "n1", &["gpu"], true);
    insert_node(&mut world, "n2", &["gpu"], false);
    let outcome = world.reconcile::<NodePoolPlugin>(&pool_req("gpu")).unwrap();
    // The status goes out first and names the nodes being updated.
    let Some(Action::Patch(status)) = outcome.actions.first() else {
        panic!("status first: {outcome:?}")
    };
    assert!(status.status);
    assert_eq!(
        status.patch["status"]["conditions"][0]["reason"],
        "UpdatingNodes"
    );
    assert_eq!(
        status.patch["status"]["conditions"][0]["message"],
        "updating n1, n2"
    );
    converge(&mut world);
    let s = pool(&world, "gpu").status.unwrap();
    assert_eq!((s.node_count, s.not_ready_node_count), (2, 1));
    assert_eq!(ready(&world, "gpu"), ("True".into(), "Converged".into()));

    assert!(world.modify(
        &node_ref("n2"),
        |n| n["status"]["conditions"][0]["status"] = json!("True")
    ));
    converge(&mut world);
    assert_eq!(pool(&world, "gpu").status.unwrap().not_ready_node_count, 0);
}

#[test]
fn ready_condition_has_a_reason_when_some_node_could_not_be_updated() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_node(&mut world, "n1", &["gpu"], true);
    insert_node(&mut world, "n2", &["gpu"], true);
    world.fail_writes_to(&node_ref("n2"));
    // The host retries a failed outcome: each round n1 and the status go
    // out, n2's patch fails.
    for round in 0..3 {
        let outcome = world.reconcile::<NodePoolPlugin>(&pool_req("gpu")).unwrap();
        let err = world
            .apply::<NodePoolPlugin>(&pool_req("gpu"), &outcome)
            .unwrap_err();
        assert!(err.to_string().contains("n2"), "round {round}: {err}");
    }
    assert!(labels(&world, "n1").contains_key("accelerator"));
    assert!(!labels(&world, "n2").contains_key("accelerator"));
    assert_eq!(
        ready(&world, "gpu"),
        ("False".into(), "UpdatingNodes".into())
    );
    let status = pool(&world, "gpu").status.unwrap();
    assert_eq!(status.conditions[0].message, "updating n2");
    // The status says so once: retrying does not rewrite it.
    let outcome = world.reconcile::<NodePoolPlugin>(&pool_req("gpu")).unwrap();
    assert!(
        !outcome.actions.iter().any(Action::is_status),
        "status unchanged while n2 keeps failing: {outcome:?}"
    );

    world.heal("main");
    converge(&mut world);
    assert!(labels(&world, "n2").contains_key("accelerator"));
    assert_eq!(ready(&world, "gpu"), ("True".into(), "Converged".into()));
    assert_quiet(&mut world, &["gpu"]);
}

#[test]
fn the_runtime_class_follows_the_handler() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    converge(&mut world);
    let before: RuntimeClass = world.get("main", None, "node-pool-gpu").unwrap();
    assert_eq!(before.handler, "runc");
    let mut s = gpu_spec();
    s.handler = Some("nvidia".into());
    set_spec(&mut world, "gpu", &s);
    converge(&mut world);
    let after: RuntimeClass = world.get("main", None, "node-pool-gpu").unwrap();
    assert_eq!(after.handler, "nvidia");
    assert_ne!(
        after.metadata.uid, before.metadata.uid,
        "handler is immutable: replaced"
    );
    assert_quiet(&mut world, &["gpu"]);
    // Someone edits the RuntimeClass: it is put back.
    assert!(world.modify(
        &ObjectRef::new::<RuntimeClass>("main", None, "node-pool-gpu"),
        |rc| rc["scheduling"] = Value::Null
    ));
    converge(&mut world);
    let fixed: RuntimeClass = world.get("main", None, "node-pool-gpu").unwrap();
    assert_eq!(
        fixed.scheduling.unwrap().node_selector.unwrap(),
        gpu_spec().labels
    );
}

#[test]
fn deleting_the_pool_cleans_its_nodes_then_lets_it_go() {
    let mut world = World::new().primary("main");
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_node(&mut world, "n1", &["gpu"], true);
    insert_node(&mut world, "n2", &["gpu"], true);
    converge(&mut world);
    world.delete(&pool_ref("gpu"));
    assert!(world.contains(&pool_ref("gpu")), "held by the finalizer");
    let outcome = world.reconcile::<NodePoolPlugin>(&pool_req("gpu")).unwrap();
    assert!(outcome.finalized);
    assert_eq!(
        outcome.writes().count(),
        2,
        "one patch per node: {outcome:?}"
    );
    world
        .apply::<NodePoolPlugin>(&pool_req("gpu"), &outcome)
        .unwrap();
    assert!(!world.contains(&pool_ref("gpu")));
    assert!(
        !world.contains(&ObjectRef::new::<RuntimeClass>(
            "main",
            None,
            "node-pool-gpu"
        )),
        "runtime class garbage-collected"
    );
    for n in ["n1", "n2"] {
        let l = labels(&world, n);
        assert!(!l.contains_key("accelerator") && !l.contains_key("node-pool.lailin.xyz/gpu"));
        assert!(
            l.contains_key("node-role.kubernetes.io/gpu"),
            "the role label is the user's"
        );
        assert_foreign_intact(&world, n);
        assert_eq!(taints(&world, n).len(), 2);
    }
}

#[test]
fn an_invalid_spec_is_reported_and_touches_no_node() {
    let mut world = World::new().primary("main");
    insert_pool(
        &mut world,
        "gpu",
        spec(&[("a", "b")], &[taint("x", "y", "Sometimes")], None),
    );
    insert_node(&mut world, "n1", &["gpu"], true);
    converge(&mut world);
    assert_eq!(ready(&world, "gpu"), ("False".into(), "InvalidSpec".into()));
    assert!(!labels(&world, "n1").contains_key("a"));
}

// --- settings --------------------------------------------------------------

#[test]
fn without_settings_the_defaults_apply_and_a_schema_is_declared() {
    let world = World::new().primary("main");
    let reg = world
        .register_plugin::<NodePoolPlugin>()
        .expect("registers");
    assert_eq!(reg.primary_selector, None);
    let schema = world.settings_schema().expect("a schema is declared");
    let props = &schema["properties"];
    for field in ["defaultHandler", "allowedKeyPrefixes", "poolSelector"] {
        assert!(props.get(field).is_some(), "{field} in {schema}");
    }
    assert_eq!(schema["additionalProperties"], json!(false));
}

#[test]
fn the_default_handler_comes_from_the_settings_and_a_new_value_swaps_it() {
    let mut world = World::new()
        .primary("main")
        .with_settings(json!({"defaultHandler": "kata"}));
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_pool(
        &mut world,
        "own",
        spec(&[("team", "a")], &[], Some("gvisor")),
    );
    insert_node(&mut world, "n1", &["gpu"], true);
    converge(&mut world);
    let rc: RuntimeClass = world.get("main", None, "node-pool-gpu").unwrap();
    assert_eq!(rc.handler, "kata");
    // A pool naming its handler keeps it.
    let rc: RuntimeClass = world.get("main", None, "node-pool-own").unwrap();
    assert_eq!(rc.handler, "gvisor");

    // The operator edits the settings: the next pass follows them.
    world.set_settings(Some(json!({"defaultHandler": "runsc"})));
    converge(&mut world);
    let rc: RuntimeClass = world.get("main", None, "node-pool-gpu").unwrap();
    assert_eq!(rc.handler, "runsc");
}

#[test]
fn keys_outside_the_allowed_prefixes_make_a_pool_invalid() {
    let mut world = World::new()
        .primary("main")
        .with_settings(json!({"allowedKeyPrefixes": ["node-pool.lailin.xyz/"]}));
    // gpu_spec has the label `accelerator`, outside the prefix.
    insert_pool(&mut world, "gpu", gpu_spec());
    insert_pool(
        &mut world,
        "ok",
        spec(&[("node-pool.lailin.xyz/ok", "1")], &[], None),
    );
    insert_node(&mut world, "n1", &["gpu"], true);
    insert_node(&mut world, "n2", &["ok"], true);
    converge(&mut world);
    assert!(!labels(&world, "n1").contains_key("accelerator"));
    let (status, reason) = ready(&world, "gpu");
    assert_eq!(status, "False");
    let message = pool(&world, "gpu")
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message;
    assert!(
        message.contains("\"accelerator\" is outside the allowed prefixes"),
        "{reason}: {message}"
    );
    assert_eq!(labels(&world, "n2")["node-pool.lailin.xyz/ok"], "1");
}

#[test]
fn invalid_settings_refuse_the_load_with_the_plugins_reason() {
    for (settings, reason) in [
        (
            json!({"defaultHandler": "Not A Label"}),
            "is not a DNS label",
        ),
        (json!({"allowedKeyPrefixes": [""]}), "would allow keys"),
        (
            json!({"defaultHandlr": "kata"}),
            "unknown field `defaultHandlr`",
        ),
        (json!({"defaultHandler": 7}), "invalid type"),
    ] {
        let world = World::new().primary("main").with_settings(settings.clone());
        let err = world
            .register_plugin::<NodePoolPlugin>()
            .expect_err("refused");
        let TestkitError::Register(e) = &err else {
            panic!("{err}");
        };
        assert!(
            e.message().starts_with("invalid settings: ") && e.message().contains(reason),
            "{settings}: {}",
            e.message()
        );
    }
}

#[test]
fn a_pool_selector_narrows_the_primaries_so_instances_can_share_a_cluster() {
    let world = World::new()
        .primary("main")
        .with_settings(json!({"poolSelector": "tier=gpu"}));
    let reg = world.register_plugin::<NodePoolPlugin>().unwrap();
    assert_eq!(reg.primary_selector.as_deref(), Some("tier=gpu"));

    let mut world = world;
    let mut gpu = NodePool::new("gpu", gpu_spec());
    gpu.metadata.labels = Some(BTreeMap::from([("tier".into(), "gpu".into())]));
    world.insert("main", &gpu);
    insert_pool(&mut world, "cpu", spec(&[("cpu", "yes")], &[], None));
    insert_node(&mut world, "n1", &["gpu"], true);
    insert_node(&mut world, "n2", &["cpu"], true);
    converge(&mut world);
    assert_eq!(labels(&world, "n1")["accelerator"], "a100");
    // The unselected pool is another instance's: untouched.
    assert!(!labels(&world, "n2").contains_key("cpu"));
    assert!(pool(&world, "cpu").status.is_none());
    assert!(
        world
            .get::<RuntimeClass>("main", None, "node-pool-cpu")
            .is_none()
    );
}
