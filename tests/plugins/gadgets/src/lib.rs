//! # gadgets — a plugin whose checks are all CEL
//!
//! - **A CRD rule from the Rust type**: [`GadgetSpec`] derives
//!   [`KubeSchema`] and carries `#[x_kube(validation = ...)]`, so the CRD
//!   it registers has `x-kubernetes-validations` on `spec.size` (at most
//!   [`MAX_SIZE`]); the API server (kube-sim) refuses a larger size with
//!   `The Gadget "x" is invalid: spec.size: Invalid value: ...`.
//! - **A policy** ([`Policies`]): a Gadget's `spec.color` is one of
//!   [`COLORS`], a ValidatingAdmissionPolicy `color.gadgets.rekon.dev`
//!   (`rekon policies`) the API server evaluates with no webhook.
//! - **Reconcile**: a Gadget gets a twin (`<name>-twin`, [`TWIN_SUFFIX`])
//!   of twice its size; a twin has none. A Gadget above half of
//!   [`MAX_SIZE`] asks for a twin its own CRD rule refuses: the test kit
//!   refuses that write as the API server would (the bug of a controller
//!   writing what its own validation refuses, found before a cluster).
//! - Features `broken-rule` and `broken-policy` build a CRD rule
//!   ([`BROKEN_RULE`]) or a policy expression ([`BROKEN_EXPRESSION`]) that
//!   does not compile: the host refuses to load either.

use kube::CustomResource;
use rekon_sdk::prelude::*;
use serde::{Deserialize, Serialize};

/// The largest size the CRD rule admits.
pub const MAX_SIZE: i64 = 10;
/// The rule of the build with feature `broken-rule` (does not compile).
pub const BROKEN_RULE: &str = "self <=";
/// The policy expression of the build with feature `broken-policy` (does
/// not compile).
pub const BROKEN_EXPRESSION: &str = "object.spec.color in [";
/// The suffix of a twin's name.
pub const TWIN_SUFFIX: &str = "-twin";
/// The colors the policy admits.
pub const COLORS: [&str; 3] = ["red", "green", "blue"];

/// A gadget of some size and color.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "gadgets.rekon.dev",
    version = "v1",
    kind = "Gadget",
    namespaced
)]
pub struct GadgetSpec {
    /// How big it is (at most [`MAX_SIZE`], a CRD rule).
    #[cfg_attr(
        not(feature = "broken-rule"),
        x_kube(validation = Rule::new("self <= 10").message("must be at most 10"))
    )]
    #[cfg_attr(feature = "broken-rule", x_kube(validation = Rule::new(BROKEN_RULE)))]
    pub size: i64,
    /// Its color (one of [`COLORS`], a policy).
    pub color: String,
}

/// The plugin.
pub struct Gadgets;

impl Plugin for Gadgets {
    type Primary = Gadget;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<Gadget>("gadgets", "0.1.0")
            .crd(Gadget::crd())
            .permission::<Gadget>(
                &[Verb::Get, Verb::List, Verb::Watch, Verb::Patch],
                ClusterSet::Primary,
            ))
    }

    fn reconcile(_: &Context, req: &Request, event: Event<Gadget>) -> Result<Outcome, Error> {
        let Event::Apply(gadget) = event else {
            return Ok(Outcome::done());
        };
        if req.name.ends_with(TWIN_SUFFIX) {
            return Ok(Outcome::done());
        }
        let mut twin = Gadget::new(
            &format!("{}{TWIN_SUFFIX}", req.name),
            GadgetSpec {
                size: gadget.spec.size * 2,
                color: gadget.spec.color.clone(),
            },
        );
        twin.metadata.namespace = req.namespace.clone();
        Ok(Outcome::done().with(Action::apply(&req.cluster, &twin)))
    }
}

impl Policies for Gadgets {
    fn policies() -> Vec<Policy> {
        let expression = if cfg!(feature = "broken-policy") {
            BROKEN_EXPRESSION
        } else {
            "object.spec.color in ['red', 'green', 'blue']"
        };
        vec![
            Policy::new::<Gadget>("color").validation(
                Validation::new(expression)
                    .message_expression(
                        "'color ' + object.spec.color + ' is not one of red, green, blue'",
                    )
                    .reason(PolicyReason::Invalid),
            ),
        ]
    }
}

rekon_sdk::export_plugin!(Gadgets, policies);

#[cfg(test)]
mod tests {
    use super::*;
    use rekon_sdk::testkit::World;

    #[cfg(not(any(feature = "broken-rule", feature = "broken-policy")))]
    #[test]
    fn the_crd_carries_the_rule_of_the_type() {
        let crd = serde_json::to_value(Gadget::crd()).unwrap();
        let size = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["size"];
        assert_eq!(
            size["x-kubernetes-validations"],
            serde_json::json!([{"rule": "self <= 10", "message": "must be at most 10"}])
        );
        assert!(Gadgets::register().unwrap().validate().is_ok());
    }

    #[cfg(not(any(feature = "broken-rule", feature = "broken-policy")))]
    #[test]
    fn the_policy_is_checked_as_the_host_checks_it() {
        let policies = World::policies::<Gadgets>().unwrap();
        assert_eq!(policies.len(), 1);
        assert_eq!(policies[0].resources[0].plural, "gadgets");
        for color in COLORS {
            assert!(policies[0].validations[0].expression.contains(color));
        }
    }

    #[cfg(feature = "broken-rule")]
    #[test]
    fn the_test_kit_refuses_a_rule_that_does_not_compile_as_the_host_does() {
        let e = Gadgets::register().unwrap().validate().unwrap_err();
        assert!(
            e.message()
                .contains("x-kubernetes-validations[0].rule: rule \"self <=\" does not compile: "),
            "{e}"
        );
    }

    #[cfg(feature = "broken-policy")]
    #[test]
    fn the_test_kit_refuses_a_policy_that_does_not_compile_as_the_host_does() {
        let e = World::policies::<Gadgets>().unwrap_err();
        assert!(e.starts_with("policy \"color\": validations[0].expression: expression \"object.spec.color in [\" does not compile: "), "{e}");
    }

    #[cfg(not(any(feature = "broken-rule", feature = "broken-policy")))]
    #[test]
    fn the_test_kit_refuses_a_write_the_plugins_own_crd_rule_refuses() {
        use rekon_sdk::testkit::TestkitError;
        let mut world = World::new().primary("main");
        let gadget = |name: &str, size| {
            let mut g = Gadget::new(
                name,
                GadgetSpec {
                    size,
                    color: "red".into(),
                },
            );
            g.metadata.namespace = Some("default".into());
            g
        };
        world.insert("main", &gadget("small", 3));
        world.insert("main", &gadget("big", 6));
        let small = Request::namespaced("main", "default", "small");
        world.converge::<Gadgets>(&small, 5).unwrap();
        let twin = world
            .get::<Gadget>("main", Some("default"), "small-twin")
            .unwrap();
        assert_eq!(twin.spec.size, 6);

        // Twice 6 breaks `self <= 10`: refused in the API server's words,
        // and the world is as it was.
        let big = Request::namespaced("main", "default", "big");
        let e = world.converge::<Gadgets>(&big, 5).unwrap_err();
        assert!(
            matches!(&e, TestkitError::Invalid { message, .. } if message == "Gadget.gadgets.rekon.dev \"big-twin\" is invalid: spec.size: Invalid value: \"integer\": must be at most 10"),
            "{e}"
        );
        assert!(
            world
                .get::<Gadget>("main", Some("default"), "big-twin")
                .is_none()
        );
    }

    #[cfg(not(any(feature = "broken-rule", feature = "broken-policy")))]
    #[test]
    fn the_test_kit_evaluates_the_policy_as_the_api_server_does() {
        use rekon_sdk::AdmissionRequest;
        let world = World::new().primary("main");
        let gadget = |color: &str| {
            let mut g = Gadget::new(
                "g",
                GadgetSpec {
                    size: 1,
                    color: color.into(),
                },
            );
            g.metadata.namespace = Some("default".into());
            g
        };
        assert!(
            world
                .evaluate_policies::<Gadgets>(&AdmissionRequest::create("main", &gadget("red")))
                .is_allowed()
        );
        let verdict =
            world.evaluate_policies::<Gadgets>(&AdmissionRequest::create("main", &gadget("pink")));
        let denial = verdict.denial().expect("denied");
        // The words kube-sim answers kubectl with (tests/e2e/tests/cel_policies.rs).
        assert_eq!(
            denial.message,
            "ValidatingAdmissionPolicy 'color.gadgets.rekon.dev' with binding 'color.gadgets.rekon.dev' denied request: color pink is not one of red, green, blue"
        );
        assert_eq!(denial.code, 422);
        // An update to a bad color is refused too; a delete is not matched.
        let update = AdmissionRequest::update("main", &gadget("red"), &gadget("grey"));
        assert!(!world.evaluate_policies::<Gadgets>(&update).is_allowed());
        let delete = AdmissionRequest::delete("main", &gadget("pink"));
        assert!(world.evaluate_policies::<Gadgets>(&delete).is_allowed());
    }
}
