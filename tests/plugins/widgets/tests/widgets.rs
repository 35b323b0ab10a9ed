//! The plugin's own tests, natively through the SDK's test kit.

use rekon_sdk::prelude::*;
use rekon_sdk::testkit::World;
use rekon_test_widgets::{MAX_SIZE, TIER_LABEL, Widget, WidgetSpec, Widgets};

fn widget(name: &str, size: i64) -> Widget {
    let mut w = Widget::new(name, WidgetSpec { size });
    w.metadata.namespace = Some("default".into());
    w
}

#[test]
fn rules_pass_the_hosts_check() {
    let rules = World::admission_rules::<Widgets>().unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].resources[0].plural, "widgets");
}

#[test]
fn a_widget_too_large_is_denied_with_a_field_error() {
    let world = World::new().primary("main");
    let verdict = world.validate::<Widgets>(&AdmissionRequest::create("main", &widget("w", 11)));
    let denial = verdict.denial().expect("denied");
    assert_eq!(denial.code, 422);
    assert_eq!(denial.message, "a widget's size is at most 10, not 11");
    assert_eq!(
        denial.field_errors,
        vec![(
            "spec.size".to_owned(),
            format!("must be at most {MAX_SIZE}")
        )]
    );
    let negative = world.validate::<Widgets>(&AdmissionRequest::create("main", &widget("w", -1)));
    let denial = negative.denial().expect("denied");
    assert_eq!((denial.code, denial.field_errors.len()), (403, 0));
    let ok = world.validate::<Widgets>(&AdmissionRequest::create("main", &widget("w", 10)));
    assert!(ok.is_allowed());
}

#[test]
fn an_object_that_does_not_decode_is_a_bad_request() {
    let world = World::new().primary("main");
    let mut req = AdmissionRequest::create("main", &widget("w", 1));
    req.object = Some(serde_json::json!({"spec": {"size": "big"}}));
    let verdict = world.validate::<Widgets>(&req);
    assert_eq!(verdict.denial().unwrap().code, 400);
}

#[test]
fn mutate_defaults_the_tier_and_keeps_a_given_one() {
    let world = World::new().primary("main");
    let mutation = world.mutate::<Widgets>(&AdmissionRequest::create("main", &widget("w", 1)));
    let mutated: Widget = mutation.decode().unwrap().expect("changed");
    assert_eq!(mutated.metadata.labels.unwrap()[TIER_LABEL], "standard");
    let mut gold = widget("w", 1);
    gold.metadata.labels = Some([(TIER_LABEL.to_owned(), "gold".to_owned())].into());
    let unchanged = world.mutate::<Widgets>(&AdmissionRequest::create("main", &gold));
    assert!(unchanged.changed_object().is_none());
    let large = world.mutate::<Widgets>(&AdmissionRequest::create("main", &widget("w", 7)));
    assert_eq!(
        large.verdict().warnings(),
        ["a widget above size 5 is large"]
    );
}

#[test]
fn reconcile_reports_the_size() {
    let mut world = World::new().primary("main");
    world.insert("main", &widget("w", 3));
    let req = Request::namespaced("main", "default", "w");
    world.converge::<Widgets>(&req, 5).unwrap();
    let w: Widget = world.get("main", Some("default"), "w").unwrap();
    assert_eq!(w.status.unwrap().observed_size, 3);
}

#[test]
fn a_namespace_holds_at_most_three_widgets_as_the_cache_shows() {
    let mut world = World::new().primary("main");
    for name in ["a", "b"] {
        world.insert("main", &widget(name, 1));
    }
    let third = world.validate::<Widgets>(&AdmissionRequest::create("main", &widget("c", 1)));
    assert!(third.is_allowed(), "{third:?}");
    world.insert("main", &widget("c", 1));
    let fourth = world.validate::<Widgets>(&AdmissionRequest::create("main", &widget("d", 1)));
    assert_eq!(
        fourth.denial().expect("denied").message,
        "namespace default already holds 3 widgets, the most it may hold"
    );
    // An update of one of them is not a new widget.
    let update = world.validate::<Widgets>(&AdmissionRequest::update(
        "main",
        &widget("c", 1),
        &widget("c", 2),
    ));
    assert!(update.is_allowed());
}

fn old_widget(name: &str, amount: i64) -> rekon_test_widgets::v1alpha1::Widget {
    use rekon_test_widgets::v1alpha1;
    let mut w = v1alpha1::Widget::new(name, v1alpha1::WidgetSpec { amount });
    w.metadata.namespace = Some("default".into());
    w.metadata.uid = Some("u-1".into());
    w.metadata.labels = Some([(TIER_LABEL.to_owned(), "gold".to_owned())].into());
    w
}

#[test]
fn the_versioned_build_converts_both_of_its_crds_versions() {
    use rekon_test_widgets::VersionedWidgets;
    let conversions = World::conversions::<VersionedWidgets>().unwrap();
    assert_eq!(conversions[0].versions, ["v1alpha1", "v1"]);
    let crd = &VersionedWidgets::register().unwrap().crds[0];
    let versions: Vec<(&str, bool)> = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["storage"] == true))
        .collect();
    assert_eq!(versions, [("v1", true), ("v1alpha1", false)]);
    // One version only: the host would refuse these conversions.
    let err =
        rekon_sdk::conversion::check_conversions(&conversions, &Widgets::register().unwrap().crds)
            .unwrap_err();
    assert!(err.contains("but the CRD has versions [v1]"), "{err}");
}

#[test]
fn a_widget_converts_to_v1_and_back_without_loss() {
    use rekon_test_widgets::VersionedWidgets;
    let world = World::new().primary("main");
    let mut old = old_widget("w", 4);
    old.status = Some(rekon_test_widgets::WidgetStatus { observed_size: 4 });
    let at_v1 = world
        .convert::<VersionedWidgets>(&ConversionRequest::to("widgets.rekon.dev/v1", &old))
        .unwrap();
    let new: Widget = serde_json::from_value(at_v1.clone()).unwrap();
    assert_eq!(new.spec.size, 4);
    assert_eq!(new.metadata, old.metadata);
    assert_eq!(at_v1["status"]["observedSize"], 4);
    assert!(at_v1["spec"].get("amount").is_none(), "{at_v1}");
    let back = world
        .round_trip::<VersionedWidgets>(&old, "widgets.rekon.dev/v1")
        .unwrap();
    assert_eq!(back, serde_json::to_value(&old).unwrap());
    let mut new = widget("n", 9);
    new.metadata.uid = Some("u-2".into());
    let back = world
        .round_trip::<VersionedWidgets>(&new, "widgets.rekon.dev/v1alpha1")
        .unwrap();
    assert_eq!(back, serde_json::to_value(&new).unwrap());
}

#[test]
fn an_unknown_version_is_refused_with_a_message() {
    use rekon_test_widgets::VersionedWidgets;
    let world = World::new().primary("main");
    let err = world
        .convert::<VersionedWidgets>(&ConversionRequest::to(
            "widgets.rekon.dev/v2",
            &old_widget("w", 1),
        ))
        .unwrap_err();
    assert_eq!(
        err,
        "widgets converts between v1alpha1 and v1, not from v1alpha1 to v2"
    );
}
