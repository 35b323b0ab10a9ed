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
