//! test-fanout's webhooks and CRD rules through the SDK's test kit: a Test
//! is validated (an image reference, known clusters) and defaulted (the
//! image's tag) before it is stored, and a defaulted Test reconciles as the
//! Test it was written as.

use std::str::FromStr;

use k8s_openapi::api::batch::v1::Job;
use kube::CustomResourceExt;
use oci_spec::distribution::Reference;
use rekon_sdk::prelude::*;
use rekon_sdk::testkit::World;
use serde_json::json;
use test_fanout::admission::{DEFAULT_RULE, VALIDATE_RULE};
use test_fanout::{
    CLUSTERS_MESSAGE, CLUSTERS_RULE, IMAGE_MESSAGE, IMAGE_RULE, Test, TestFanout, TestSpec,
};

const NS: &str = "team-a";

fn test(name: &str, image: &str, clusters: Option<&[&str]>) -> Test {
    let mut t = Test::new(
        name,
        TestSpec {
            image: image.into(),
            clusters: clusters.map(|c| c.iter().map(|s| (*s).to_owned()).collect()),
        },
    );
    t.metadata.namespace = Some(NS.into());
    t
}

/// Clusters `main` (primary), `sub` and `edge`.
fn world() -> World {
    World::new().primary("main").cluster("sub").cluster("edge")
}

fn create(t: &Test) -> AdmissionRequest {
    AdmissionRequest::create("main", t)
}

#[test]
fn rules_pass_the_hosts_check_validate_creates_and_default_writes() {
    let rules = World::admission_rules::<TestFanout>().unwrap();
    let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, [VALIDATE_RULE, DEFAULT_RULE]);
    assert!(rules.iter().all(|r| r.resources[0].plural == "tests"));
    assert_eq!(rules[0].operations, vec![Operation::Create]);
    // Updates are defaulted too: a manifest applied again as written
    // (`busybox` over the stored `busybox:latest`) keeps the spec as stored.
    assert_eq!(
        rules[1].operations,
        vec![Operation::Create, Operation::Update]
    );
}

#[test]
fn an_update_setting_the_untagged_image_again_is_defaulted_back() {
    let stored = test("t1", "busybox:latest", None);
    let applied = test("t1", "busybox", None);
    let mutation =
        world().mutate::<TestFanout>(&AdmissionRequest::update("main", &stored, &applied));
    let defaulted: Test = mutation.decode().unwrap().expect("defaulted");
    assert_eq!(defaulted.spec, stored.spec);
}

#[test]
fn an_update_of_a_test_stored_untagged_changes_no_image() {
    // Stored before the webhook: the spec is immutable, so a label or the
    // host's finalizer removal must not change it.
    let stored = test("t1", "busybox", None);
    let mut labelled = stored.clone();
    labelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
    let mutation =
        world().mutate::<TestFanout>(&AdmissionRequest::update("main", &stored, &labelled));
    assert!(mutation.changed_object().is_none(), "{mutation:?}");
}

#[test]
fn a_valid_test_is_admitted() {
    let world = world();
    for image in [
        "busybox",
        "busybox:1.36",
        "registry.example.com:5000/team/app:v1",
        "ghcr.io/org/tool@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ] {
        let verdict = world.validate::<TestFanout>(&create(&test("t1", image, None)));
        assert!(verdict.is_allowed(), "{image}: {verdict:?}");
    }
    let named =
        world.validate::<TestFanout>(&create(&test("t1", "busybox:1.36", Some(&["sub", "main"]))));
    assert!(named.is_allowed(), "{named:?}");
}

#[test]
fn an_image_that_is_not_a_reference_is_invalid_as_the_api_server_words_it() {
    let world = world();
    let verdict = world.validate::<TestFanout>(&create(&test("t1", "Busy Box", None)));
    let denial = verdict.denial().expect("denied");
    assert_eq!(denial.code, 422);
    assert_eq!(
        denial.field_errors,
        vec![(
            "spec.image".to_owned(),
            "Invalid value: \"Busy Box\": invalid reference format".to_owned()
        )]
    );
    assert_eq!(
        denial.message,
        "Test.job.lailin.xyz \"t1\" is invalid: spec.image: Invalid value: \"Busy Box\": invalid reference format"
    );
    // An uppercase repository, a digest of the wrong length.
    for image in ["Busybox:1.36", "busybox@sha256:abc"] {
        let verdict = world.validate::<TestFanout>(&create(&test("t1", image, None)));
        assert_eq!(verdict.denial().map(|d| d.code), Some(422), "{image}");
    }
    let empty = world.validate::<TestFanout>(&create(&test("t1", "", None)));
    assert_eq!(
        empty.denial().expect("denied").field_errors,
        vec![("spec.image".to_owned(), "Required value".to_owned())]
    );
}

#[test]
fn a_test_naming_an_unknown_cluster_is_invalid_with_the_known_ones_listed() {
    let world = world();
    let verdict =
        world.validate::<TestFanout>(&create(&test("t1", "busybox:1.36", Some(&["sub", "nope"]))));
    let denial = verdict.denial().expect("denied");
    assert_eq!(denial.code, 422);
    assert_eq!(
        denial.field_errors,
        vec![(
            "spec.clusters[1]".to_owned(),
            "Unsupported value: \"nope\": supported values: \"edge\", \"main\", \"sub\"".to_owned()
        )]
    );
    // Two wrong fields: both, in brackets, as the API server lists them.
    let both = world.validate::<TestFanout>(&create(&test("t2", "a b", Some(&["gone"]))));
    let denial = both.denial().expect("denied");
    assert_eq!(denial.field_errors.len(), 2);
    assert!(
        denial
            .message
            .starts_with("Test.job.lailin.xyz \"t2\" is invalid: [spec.image: "),
        "{}",
        denial.message
    );
}

#[test]
fn the_known_clusters_are_those_the_settings_fan_out_to_and_the_host_engages() {
    // The settings restrict the fan-out to main and sub: edge is engaged
    // but no Job would go there.
    let world = world().with_settings(json!({"clusters": ["main", "sub", "later"]}));
    let edge = world.validate::<TestFanout>(&create(&test("t1", "busybox", Some(&["edge"]))));
    assert_eq!(
        edge.denial().expect("denied").field_errors[0].1,
        "Unsupported value: \"edge\": supported values: \"main\", \"sub\""
    );
    // Named in the settings, but not a cluster the host engages (yet).
    let later = world.validate::<TestFanout>(&create(&test("t1", "busybox", Some(&["later"]))));
    assert!(!later.is_allowed(), "{later:?}");
    let sub = world.validate::<TestFanout>(&create(&test("t1", "busybox", Some(&["sub"]))));
    assert!(sub.is_allowed(), "{sub:?}");
}

#[test]
fn an_image_without_tag_or_digest_is_defaulted_to_latest() {
    let world = world();
    for (image, want) in [
        ("busybox", Some("busybox:latest")),
        ("localhost:5000/app", Some("localhost:5000/app:latest")),
        ("busybox:1.36", None),
        ("localhost:5000/app:v2", None),
        (
            "busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            None,
        ),
        // Not a reference: validation refuses it, defaulting leaves it.
        ("Busy Box", None),
    ] {
        let mutation = world.mutate::<TestFanout>(&create(&test("t1", image, None)));
        let got: Option<Test> = mutation.decode().unwrap();
        assert_eq!(
            got.map(|t| t.spec.image).as_deref(),
            want,
            "{image}: {mutation:?}"
        );
    }
}

#[test]
fn a_defaulted_test_reconciles_as_the_test_it_was_written_as() {
    let written = test("t1", "busybox", None);
    let mutation = world().mutate::<TestFanout>(&create(&written));
    let defaulted: Test = mutation.decode().unwrap().expect("defaulted");
    assert_eq!(defaulted.spec.image, "busybox:latest");
    // Both pull the same image: the runtime reads the same reference.
    assert_eq!(
        Reference::from_str(&written.spec.image),
        Reference::from_str(&defaulted.spec.image)
    );
    let jobs = |t: &Test| {
        let mut w = world();
        w.insert_json(
            "main",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        );
        w.insert("main", t);
        let req = Request::namespaced("main", NS, "t1");
        w.converge::<TestFanout>(&req, 10).expect("converges");
        let status = w
            .get::<Test>("main", Some(NS), "t1")
            .and_then(|t| t.status)
            .expect("status");
        let jobs: Vec<_> = ["edge", "main", "sub"]
            .iter()
            .map(|c| {
                let mut job = w.get::<Job>(c, Some(NS), "t1").expect("a job");
                // The only difference allowed: the image's spelling.
                let containers = &mut job
                    .spec
                    .as_mut()
                    .unwrap()
                    .template
                    .spec
                    .as_mut()
                    .unwrap()
                    .containers;
                let image = containers[0].image.take().unwrap();
                (job, Reference::from_str(&image).unwrap())
            })
            .collect();
        (status, jobs)
    };
    assert_eq!(jobs(&written), jobs(&defaulted));
}

#[test]
fn a_test_naming_clusters_fans_out_to_those_only() {
    let mut w = world();
    w.insert_json(
        "main",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    );
    w.insert("main", &test("t1", "busybox:1.36", Some(&["sub"])));
    let req = Request::namespaced("main", NS, "t1");
    w.converge::<TestFanout>(&req, 10).expect("converges");
    assert!(w.get::<Job>("sub", Some(NS), "t1").is_some());
    for other in ["main", "edge"] {
        assert!(w.get::<Job>(other, Some(NS), "t1").is_none(), "{other}");
    }
    let status = w
        .get::<Test>("main", Some(NS), "t1")
        .unwrap()
        .status
        .unwrap();
    let lines: Vec<&str> = status.clusters.iter().map(|l| l.cluster.as_str()).collect();
    assert_eq!(lines, ["sub"]);
}

#[test]
fn the_crd_says_in_cel_what_needs_no_webhook() {
    let crd = serde_json::to_value(Test::crd()).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(
        spec["properties"]["image"]["x-kubernetes-validations"],
        json!([{"rule": IMAGE_RULE, "message": IMAGE_MESSAGE}])
    );
    let clusters = &spec["properties"]["clusters"];
    assert_eq!(
        clusters["x-kubernetes-validations"],
        json!([{"rule": CLUSTERS_RULE, "message": CLUSTERS_MESSAGE}])
    );
    // Bounded, so the API server's CEL cost estimate admits the rule.
    assert_eq!(
        (
            &clusters["minItems"],
            &clusters["maxItems"],
            &clusters["items"]["maxLength"]
        ),
        (&json!(1), &json!(64), &json!(253))
    );
}

/// The CRD's rules as kube-rs evaluates them (its `kube-cel` libraries, the
/// ones kube-sim enforces CRDs with).
#[test]
fn the_crd_rules_refuse_an_empty_image_and_a_cluster_named_twice() {
    let check = |image: &str, clusters: Option<&[&str]>| match kube::core::cel::validate_cel(&test(
        "t1", image, clusters,
    )) {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    };
    assert_eq!(check("busybox", Some(&["a", "b"])), "");
    let empty = check("", None);
    assert!(empty.contains(IMAGE_MESSAGE), "{empty}");
    let twice = check("busybox", Some(&["a", "b", "a"]));
    assert!(twice.contains(CLUSTERS_MESSAGE), "{twice}");
}

/// The messages of the image check, input by input: the TypeScript port's
/// parser (plugins/test-fanout-ts/src/admission.ts) is asserted to give the
/// same ones (its test "the reference parser answers as oci-spec's").
#[test]
fn the_image_check_words_each_refusal_as_oci_spec() {
    use test_fanout::admission::image_error;
    let message = |image: &str| image_error(image).map(|(_, m)| m);
    assert_eq!(message("lowercase:Uppercase"), None);
    assert_eq!(message("index.docker.io/foo"), None);
    for (image, why) in [
        ("Uppercase:tag", "invalid reference format"),
        ("busybox@sha256:abc", "invalid reference format"),
        (
            &format!("busybox@sha256:{}", "a".repeat(63)),
            "invalid checksum digest length",
        ),
        (
            &format!("busybox@md5:{}", "a".repeat(32)),
            "unsupported digest algorithm",
        ),
        (
            &format!("a/{}", "b".repeat(254)),
            "repository name must not be more than 255 characters",
        ),
    ] {
        assert_eq!(
            message(image),
            Some(format!("Invalid value: {image:?}: {why}")),
            "{image}"
        );
    }
}
