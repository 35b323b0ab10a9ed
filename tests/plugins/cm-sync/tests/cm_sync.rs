//! cm-sync through the SDK's native test kit: the test kit must scope
//! primaries, the selector, leaving and finalizers exactly like the host.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rekon_sdk::prelude::*;
use rekon_sdk::testkit::World;
use rekon_test_cm_sync::{CmSync, FINALIZER, SOURCE_LABEL};

fn cm(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("apps".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..ConfigMap::default()
    }
}

fn finalizers(world: &World, cluster: &str, name: &str) -> Vec<String> {
    world
        .get::<ConfigMap>(cluster, Some("apps"), name)
        .and_then(|c| c.metadata.finalizers)
        .unwrap_or_default()
}

fn world() -> World {
    let mut world = World::new().primary("main").cluster("edge");
    world.insert(
        "main",
        &cm("source", &[(SOURCE_LABEL, "true")], &[("k", "v")]),
    );
    world.insert("main", &cm("unrelated", &[("app", "x")], &[("a", "b")]));
    // A ConfigMap of the same name in the other cluster, never written by
    // the plugin: not a primary there (edge is not a primary cluster).
    world.insert("edge", &cm("bystander", &[(SOURCE_LABEL, "true")], &[]));
    world
}

#[test]
fn only_selected_objects_of_the_primary_cluster_are_primaries() {
    let mut world = world();
    let rounds = world.converge_all::<CmSync>(10).unwrap();
    assert!(rounds <= 3, "took {rounds} rounds");
    assert_eq!(finalizers(&world, "main", "source"), vec![FINALIZER]);
    let copy = world
        .get::<ConfigMap>("edge", Some("apps"), "source")
        .unwrap();
    assert_eq!(copy.data.unwrap()["k"], "v");
    assert!(
        finalizers(&world, "edge", "source").is_empty(),
        "a copy got the finalizer"
    );
    assert!(
        finalizers(&world, "main", "unrelated").is_empty(),
        "an unrelated object got the finalizer"
    );
    assert!(
        finalizers(&world, "edge", "bystander").is_empty(),
        "an object of another cluster got the finalizer"
    );
    // Reconciling what is not a primary does nothing at all.
    for req in [
        Request::namespaced("main", "apps", "unrelated"),
        Request::namespaced("edge", "apps", "source"),
        Request::namespaced("edge", "apps", "bystander"),
    ] {
        world.assert_no_writes::<CmSync>(&req);
    }
    assert!(finalizers(&world, "main", "unrelated").is_empty());
    // Unrelated objects delete at once.
    let unrelated = ObjectRef::new::<ConfigMap>("main", Some("apps"), "unrelated");
    assert!(world.delete(&unrelated));
    assert!(!world.contains(&unrelated));
}

#[test]
fn leaving_the_selector_cleans_up_then_releases() {
    let mut world = world();
    world.converge_all::<CmSync>(10).unwrap();
    let source = ObjectRef::new::<ConfigMap>("main", Some("apps"), "source");
    assert!(world.modify(&source, |o| {
        o["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(SOURCE_LABEL);
    }));
    let req = Request::namespaced("main", "apps", "source");
    let outcome = world.reconcile::<CmSync>(&req).unwrap();
    assert!(outcome.finalized, "leaving must be a cleanup: {outcome:?}");
    world.apply::<CmSync>(&req, &outcome).unwrap();
    assert!(
        finalizers(&world, "main", "source").is_empty(),
        "finalizer not released"
    );
    assert!(
        world
            .get::<ConfigMap>("edge", Some("apps"), "source")
            .is_none(),
        "copy not cleaned up"
    );
    // Not a primary any more: never reconciled again, never given the finalizer.
    world.assert_no_writes::<CmSync>(&req);
    assert!(finalizers(&world, "main", "source").is_empty());
    // Labelled again: a primary again.
    assert!(world.modify(&source, |o| {
        o["metadata"]["labels"][SOURCE_LABEL] = "true".into();
    }));
    world.converge_all::<CmSync>(10).unwrap();
    assert_eq!(finalizers(&world, "main", "source"), vec![FINALIZER]);
    assert!(
        world
            .get::<ConfigMap>("edge", Some("apps"), "source")
            .is_some()
    );
}

#[test]
fn deletion_cleans_up_every_cluster_before_release() {
    let mut world = world();
    world.converge_all::<CmSync>(10).unwrap();
    let source = ObjectRef::new::<ConfigMap>("main", Some("apps"), "source");
    // A failing write in edge: the finalizer must stay.
    world.delete(&source);
    world.fail_writes("edge");
    let req = Request::namespaced("main", "apps", "source");
    let outcome = world.reconcile::<CmSync>(&req).unwrap();
    assert!(world.apply::<CmSync>(&req, &outcome).is_err());
    assert_eq!(finalizers(&world, "main", "source"), vec![FINALIZER]);
    world.heal("edge");
    world.converge::<CmSync>(&req, 5).unwrap();
    assert!(
        !world.contains(&source),
        "source not released after cleanup"
    );
    assert!(
        world
            .get::<ConfigMap>("edge", Some("apps"), "source")
            .is_none()
    );
}
