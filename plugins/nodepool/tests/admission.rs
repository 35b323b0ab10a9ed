//! nodepool's admission through the SDK's native test kit: what the
//! webhooks `/validate/nodepool` and `/mutate/nodepool` answer.

use k8s_openapi::api::core::v1::Taint;
use nodepool::{NodePool, NodePoolPlugin, NodePoolSpec};
use rekon_sdk::admission::AdmissionKind;
use rekon_sdk::prelude::*;
use rekon_sdk::testkit::World;
use serde_json::json;

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: Some(value.into()),
        effect: effect.into(),
        time_added: None,
    }
}

fn pool(name: &str, labels: &[(&str, &str)], taints: &[Taint]) -> NodePool {
    NodePool::new(
        name,
        NodePoolSpec {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            taints: taints.to_vec(),
            handler: None,
        },
    )
}

fn gpu() -> NodePool {
    pool(
        "gpu",
        &[("example.com/gpu", "true")],
        &[taint("example.com/gpu", "true", "NoSchedule")],
    )
}

fn validate(world: &World, pool: &NodePool) -> Verdict {
    world.validate::<NodePoolPlugin>(&AdmissionRequest::create("main", pool))
}

/// The denial's (code, message, field errors).
fn denial(verdict: &Verdict) -> (u16, String, Vec<(String, String)>) {
    let d = verdict
        .denial()
        .unwrap_or_else(|| panic!("denied: {verdict:?}"));
    (d.code, d.message.clone(), d.field_errors.clone())
}

#[test]
fn the_rules_pass_the_hosts_check() {
    let rules = World::admission_rules::<NodePoolPlugin>().unwrap();
    let validate: Vec<_> = rules
        .iter()
        .filter(|r| r.kind == AdmissionKind::Validate)
        .collect();
    assert_eq!(validate.len(), 1);
    let mutate: Vec<_> = rules
        .iter()
        .filter(|r| r.kind == AdmissionKind::Mutate)
        .collect();
    assert_eq!(mutate.len(), 1);
    assert_eq!(mutate[0].name, "handler");
    assert_eq!(mutate[0].operations, [Operation::Create, Operation::Update]);
    assert_eq!(validate[0].name, "spec");
    assert_eq!(validate[0].resources[0].plural, "nodepools");
    assert_eq!(validate[0].failure_policy, FailurePolicy::Fail);
    assert_eq!(
        validate[0].operations,
        [Operation::Create, Operation::Update]
    );
}

#[test]
fn a_valid_pool_is_admitted() {
    let world = World::new().primary("main");
    let verdict = validate(&world, &gpu());
    assert!(verdict.is_allowed(), "{verdict:?}");
    assert!(verdict.warnings().is_empty());
    let bare = pool("bare", &[], &[]);
    assert!(validate(&world, &bare).is_allowed());
}

#[test]
fn a_bad_taint_effect_is_unsupported_as_the_api_server_says() {
    let world = World::new().primary("main");
    let bad = pool("gpu", &[], &[taint("gpu", "true", "Sometimes")]);
    let (code, message, fields) = denial(&validate(&world, &bad));
    assert_eq!(code, 422);
    assert_eq!(
        message,
        r#"NodePool.nodes.lailin.xyz "gpu" is invalid: spec.taints[0].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#
    );
    assert_eq!(
        fields,
        [(
            "spec.taints[0].effect".to_owned(),
            r#"Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#.to_owned()
        )]
    );
    let empty = pool(
        "gpu",
        &[],
        &[taint("ok", "", "NoExecute"), taint("gpu", "", "")],
    );
    let (_, message, fields) = denial(&validate(&world, &empty));
    assert_eq!(fields[0].0, "spec.taints[1].effect");
    assert!(
        message.ends_with("is invalid: spec.taints[1].effect: Required value"),
        "{message}"
    );
}

#[test]
fn unqualified_keys_and_bad_values_are_invalid_with_the_api_servers_words() {
    let world = World::new().primary("main");
    let bad = pool(
        "gpu",
        &[("-team", "a"), ("ok", "not ok")],
        &[taint("a/b/c", "true", "NoSchedule")],
    );
    let (code, message, fields) = denial(&validate(&world, &bad));
    assert_eq!(code, 422);
    let paths: Vec<&str> = fields.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.labels[-team]",
            "spec.labels[ok]",
            "spec.taints[0].key"
        ]
    );
    assert_eq!(
        fields[0].1,
        r#"Invalid value: "-team": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#
    );
    assert!(
        fields[1]
            .1
            .starts_with(r#"Invalid value: "not ok": a valid label must be an empty string"#),
        "{}",
        fields[1].1
    );
    assert!(
        fields[2]
            .1
            .starts_with(r#"Invalid value: "a/b/c": a qualified name must consist"#),
        "{}",
        fields[2].1
    );
    // Several errors: in brackets, as the API server aggregates them.
    assert!(
        message.starts_with(r#"NodePool.nodes.lailin.xyz "gpu" is invalid: [spec.labels[-team]: Invalid value: "-team": "#),
        "{message}"
    );
    assert!(
        message.ends_with(
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')]"
        ),
        "{message}"
    );
    // A prefix that is not a DNS subdomain, and a name part too long.
    let long = "a".repeat(64);
    let bad = pool("gpu", &[("Example.com/x", "1"), (long.as_str(), "1")], &[]);
    let (_, _, fields) = denial(&validate(&world, &bad));
    assert!(
        fields[0]
            .1
            .contains("prefix part a lowercase RFC 1123 subdomain"),
        "{fields:?}"
    );
    assert!(
        fields[1]
            .1
            .ends_with("name part must be no more than 63 characters"),
        "{fields:?}"
    );
}

#[test]
fn a_pool_may_not_claim_another_pools_role_label_nor_set_its_own() {
    let world = World::new().primary("main");
    let claims = pool("gpu", &[("node-role.kubernetes.io/batch", "")], &[]);
    let (code, message, fields) = denial(&validate(&world, &claims));
    assert_eq!(code, 422);
    assert_eq!(
        message,
        r#"NodePool.nodes.lailin.xyz "gpu" is invalid: spec.labels[node-role.kubernetes.io/batch]: Forbidden: may not claim pool "batch"'s role label: the pool's nodes would join pool "batch""#
    );
    assert_eq!(fields.len(), 1);
    let own = pool("gpu", &[("node-role.kubernetes.io/gpu", "")], &[]);
    let (_, _, fields) = denial(&validate(&world, &own));
    assert_eq!(fields[0].0, "spec.labels[node-role.kubernetes.io/gpu]");
    assert!(
        fields[0]
            .1
            .starts_with("Forbidden: the pool's own role label"),
        "{fields:?}"
    );
}

#[test]
fn keys_outside_the_operators_prefixes_are_forbidden() {
    let world = World::new()
        .primary("main")
        .with_settings(json!({"allowedKeyPrefixes": ["example.com/"]}));
    assert!(validate(&world, &gpu()).is_allowed());
    let outside = pool("gpu", &[("team", "a")], &[taint("gpu", "", "NoSchedule")]);
    let (_, _, fields) = denial(&validate(&world, &outside));
    assert_eq!(
        fields,
        [
            (
                "spec.labels[team]".to_owned(),
                "Forbidden: outside the allowed key prefixes (example.com/)".to_owned()
            ),
            (
                "spec.taints[0].key".to_owned(),
                "Forbidden: outside the allowed key prefixes (example.com/)".to_owned()
            ),
        ]
    );
}

#[test]
fn no_other_pool_may_already_select_these_nodes_as_the_cache_shows() {
    let mut world = World::new().primary("main");
    world.insert("main", &gpu());
    // The same labels under another name: both RuntimeClasses would
    // select the same nodes.
    let twin = pool("gpu-2", &[("example.com/gpu", "true")], &[]);
    let (code, message, fields) = denial(&validate(&world, &twin));
    assert_eq!(code, 422);
    assert_eq!(
        message,
        r#"NodePool.nodes.lailin.xyz "gpu-2" is invalid: spec.labels: Forbidden: pool "gpu" already selects these nodes (its labels are the same, so both RuntimeClasses would schedule onto the same nodes)"#
    );
    assert_eq!(fields[0].0, "spec.labels");
    // Labels that nest or differ are allowed, and so are pools without labels.
    let nested = pool("gpu-a", &[("example.com/gpu", "true"), ("zone", "a")], &[]);
    assert!(validate(&world, &nested).is_allowed());
    world.insert("main", &pool("bare", &[], &[]));
    assert!(validate(&world, &pool("bare-2", &[], &[])).is_allowed());
    // The pool itself (an update of its labels to what it has) is not another.
    let mut changed = gpu();
    changed.spec.taints.clear();
    let update =
        world.validate::<NodePoolPlugin>(&AdmissionRequest::update("main", &gpu(), &changed));
    assert!(update.is_allowed(), "{update:?}");
    // A pool being deleted selects nothing any more.
    assert!(world.modify(
        &ObjectRef::new::<NodePool>("main", None, "gpu"),
        |p| p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
    ));
    assert!(validate(&world, &twin).is_allowed());
}

#[test]
fn an_update_that_keeps_the_spec_is_admitted_so_an_old_pool_can_always_go() {
    let world = World::new().primary("main");
    let old = pool("gpu", &[("-bad", "x")], &[]);
    let mut new = old.clone();
    new.metadata.finalizers = Some(vec!["nodes.lailin.xyz/cleanup".into()]);
    let verdict = world.validate::<NodePoolPlugin>(&AdmissionRequest::update("main", &old, &new));
    assert!(verdict.is_allowed(), "{verdict:?}");
    // A change of the spec is checked in full.
    let mut worse = new.clone();
    worse.spec.taints.push(taint("gpu", "", "Never"));
    let verdict = world.validate::<NodePoolPlugin>(&AdmissionRequest::update("main", &old, &worse));
    assert_eq!(denial(&verdict).2.len(), 2);
    // A delete has no object and is admitted.
    let delete = world.validate::<NodePoolPlugin>(&AdmissionRequest::delete("main", &old));
    assert!(delete.is_allowed());
}

// --- mutate: the RuntimeClass handler ---------------------------------------

fn runtime_class_after_converging(world: &mut World, pool: &NodePool) -> serde_json::Value {
    world.insert("main", pool);
    let name = pool.metadata.name.clone().unwrap();
    world
        .converge::<NodePoolPlugin>(&Request::cluster_scoped("main", &name), 10)
        .unwrap();
    let rc: k8s_openapi::api::node::v1::RuntimeClass = world
        .get("main", None, &format!("node-pool-{name}"))
        .expect("the pool's RuntimeClass");
    json!({"handler": rc.handler, "scheduling": rc.scheduling})
}

#[test]
fn a_pool_without_handler_is_defaulted_and_reconciles_as_before() {
    for settings in [json!({}), json!({"defaultHandler": "kata"})] {
        let handler = settings["defaultHandler"]
            .as_str()
            .unwrap_or("runc")
            .to_owned();
        let world = World::new().primary("main").with_settings(settings.clone());
        let mutation = world.mutate::<NodePoolPlugin>(&AdmissionRequest::create("main", &gpu()));
        let defaulted: NodePool = mutation.decode().unwrap().expect("changed");
        assert_eq!(defaulted.spec.handler.as_deref(), Some(handler.as_str()));
        let mut expected = gpu();
        expected.spec.handler = Some(handler.clone());
        assert_eq!(
            serde_json::to_value(&defaulted).unwrap(),
            serde_json::to_value(&expected).unwrap(),
            "only the handler changes"
        );
        assert!(mutation.verdict().is_allowed());

        // The defaulted pool reconciles to the RuntimeClass the pool
        // without handler reconciles to.
        let mut before = World::new().primary("main").with_settings(settings.clone());
        let mut after = World::new().primary("main").with_settings(settings);
        let rc_before = runtime_class_after_converging(&mut before, &gpu());
        let rc_after = runtime_class_after_converging(&mut after, &defaulted);
        assert_eq!(rc_before, rc_after);
        assert_eq!(rc_after["handler"], handler.as_str());
    }
}

#[test]
fn a_given_handler_is_kept_and_an_empty_one_defaulted() {
    let world = World::new().primary("main");
    let mut own = gpu();
    own.spec.handler = Some("gvisor".into());
    let mutation = world.mutate::<NodePoolPlugin>(&AdmissionRequest::create("main", &own));
    assert!(mutation.changed_object().is_none());
    own.spec.handler = Some(String::new());
    let mutation = world.mutate::<NodePoolPlugin>(&AdmissionRequest::update("main", &gpu(), &own));
    let defaulted: NodePool = mutation.decode().unwrap().expect("changed");
    assert_eq!(defaulted.spec.handler.as_deref(), Some("runc"));
    // A pool being deleted is left alone.
    let mut going = gpu();
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap(),
    ));
    let mutation =
        world.mutate::<NodePoolPlugin>(&AdmissionRequest::update("main", &going, &going));
    assert!(mutation.changed_object().is_none());
}

// --- the CRD's CEL rules ------------------------------------------------------

#[test]
fn the_crd_carries_the_role_label_rules_at_its_root() {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(NodePool::crd()).unwrap();
    let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let rules: Vec<&str> = root["x-kubernetes-validations"]
        .as_array()
        .expect("root rules")
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, [nodepool::RULE_OTHER_ROLE, nodepool::RULE_OWN_ROLE]);
    assert_eq!(
        root["x-kubernetes-validations"][0]["fieldPath"],
        ".spec.labels"
    );
    assert_eq!(
        root["properties"]["spec"]["properties"]["labels"]["maxProperties"],
        nodepool::MAX_LABELS
    );
}

#[test]
fn the_cel_rules_refuse_what_the_webhook_refuses_of_role_labels() {
    let world = World::new().primary("main");
    let cases = [
        (pool("gpu", &[("example.com/gpu", "true")], &[]), true),
        (pool("gpu", &[], &[]), true),
        (
            pool("gpu", &[("node-role.kubernetes.io/batch", "")], &[]),
            false,
        ),
        (
            pool("gpu", &[("node-role.kubernetes.io/gpu", "")], &[]),
            false,
        ),
    ];
    for (p, admitted) in cases {
        let cel = kube::core::cel::validate_cel(&p);
        assert_eq!(cel.is_ok(), admitted, "CEL on {:?}: {cel:?}", p.spec.labels);
        assert_eq!(
            validate(&world, &p).is_allowed(),
            admitted,
            "webhook on {:?}",
            p.spec.labels
        );
    }
    let err =
        kube::core::cel::validate_cel(&pool("gpu", &[("node-role.kubernetes.io/batch", "")], &[]))
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("a pool may not claim another pool's role label"),
        "{err}"
    );
}

// --- conversion: v1alpha1 (spec.runtimeHandler) <-> v1 (spec.handler) --------

fn old_pool() -> nodepool::v1alpha1::NodePool {
    use nodepool::v1alpha1;
    let mut p = v1alpha1::NodePool::new(
        "gpu",
        v1alpha1::NodePoolSpec {
            labels: [("example.com/gpu".to_owned(), "true".to_owned())].into(),
            taints: vec![taint("example.com/gpu", "true", "NoSchedule")],
            runtime_handler: Some("kata".into()),
        },
    );
    p.metadata.uid = Some("u-1".into());
    p.metadata.finalizers = Some(vec!["nodes.lailin.xyz/cleanup".into()]);
    p.metadata.labels = Some([("tier".to_owned(), "gpu".to_owned())].into());
    p.status = serde_json::from_value(json!({
        "nodeCount": 2, "notReadyNodeCount": 1, "nodes": ["n1", "n2"],
        "conditions": [{"type": "Ready", "status": "True", "reason": "Converged",
                        "message": "2 node(s) carry the pool's labels and taints",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    }))
    .unwrap();
    p
}

#[test]
fn the_crd_serves_v1alpha1_beside_v1_which_stays_storage() {
    let conversions = World::conversions::<NodePoolPlugin>().unwrap();
    assert_eq!(conversions[0].versions, ["v1alpha1", "v1"]);
    let crd = &NodePoolPlugin::register().unwrap().crds[0];
    let versions: Vec<(&str, bool, bool)> = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap(),
                v["served"] == true,
                v["storage"] == true,
            )
        })
        .collect();
    assert_eq!(versions, [("v1", true, true), ("v1alpha1", true, false)]);
    for v in crd["spec"]["versions"].as_array().unwrap() {
        let root = &v["schema"]["openAPIV3Schema"];
        assert_eq!(
            root["x-kubernetes-validations"].as_array().unwrap().len(),
            2,
            "{}",
            v["name"]
        );
        let spec = &root["properties"]["spec"]["properties"];
        let handler = if v["name"] == "v1" {
            "handler"
        } else {
            "runtimeHandler"
        };
        assert_eq!(spec[handler]["type"], "string", "{}", v["name"]);
        assert_eq!(
            spec["taints"]["items"]["properties"]["effect"]["enum"],
            json!(["NoSchedule", "PreferNoSchedule", "NoExecute"])
        );
    }
}

#[test]
fn a_pool_converts_to_v1_and_back_without_loss() {
    let world = World::new().primary("main");
    let old = old_pool();
    let at_v1 = world
        .convert::<NodePoolPlugin>(&ConversionRequest::to("nodes.lailin.xyz/v1", &old))
        .unwrap();
    let new: NodePool = serde_json::from_value(at_v1.clone()).unwrap();
    assert_eq!(new.spec.handler.as_deref(), Some("kata"));
    assert!(at_v1["spec"].get("runtimeHandler").is_none(), "{at_v1}");
    assert_eq!(new.spec.labels, old.spec.labels);
    assert_eq!(new.spec.taints, old.spec.taints);
    assert_eq!(new.metadata, old.metadata);
    assert_eq!(new.status, old.status);
    let back = world
        .round_trip::<NodePoolPlugin>(&old, "nodes.lailin.xyz/v1")
        .unwrap();
    assert_eq!(back, serde_json::to_value(&old).unwrap());
    // From v1, and a pool without handler (nothing invented on the way).
    let mut v1 = gpu();
    v1.metadata.uid = Some("u-2".into());
    let back = world
        .round_trip::<NodePoolPlugin>(&v1, "nodes.lailin.xyz/v1alpha1")
        .unwrap();
    assert_eq!(back, serde_json::to_value(&v1).unwrap());
    v1.spec.handler = Some("gvisor".into());
    let at_alpha = world
        .convert::<NodePoolPlugin>(&ConversionRequest::to("nodes.lailin.xyz/v1alpha1", &v1))
        .unwrap();
    assert_eq!(at_alpha["spec"]["runtimeHandler"], "gvisor");
    assert!(at_alpha["spec"].get("handler").is_none(), "{at_alpha}");
}

#[test]
fn an_unknown_version_is_refused_with_a_message() {
    let world = World::new().primary("main");
    let err = world
        .convert::<NodePoolPlugin>(&ConversionRequest::to("nodes.lailin.xyz/v2", &old_pool()))
        .unwrap_err();
    assert_eq!(
        err,
        "nodepool converts between v1alpha1 and v1, not from v1alpha1 to v2"
    );
}
