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
//! - **Reconcile**: nothing to write (the e2e is about admission).
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
        Ok(Registration::new::<Gadget>("gadgets", "0.1.0").crd(Gadget::crd()))
    }

    fn reconcile(_: &Context, _: &Request, _: Event<Gadget>) -> Result<Outcome, Error> {
        Ok(Outcome::done())
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
}
