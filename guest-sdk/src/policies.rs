//! CEL admission policies a plugin declares (`wit/policies.wit`): checks
//! the API server evaluates itself, with no webhook in the request path.
//! `rekon policies DIR` writes each as a ValidatingAdmissionPolicy and its
//! binding (admissionregistration.k8s.io/v1); the host compiles every
//! expression with kube-cel at load and refuses a plugin whose CEL does
//! not compile.
//!
//! Use a policy where one object (and its old version, the request, its
//! namespace) says whether it may be stored; a CRD rule
//! (`#[x_kube(validation = ...)]`, see the crate docs) where the rule is
//! about one field of the plugin's own type; a webhook
//! ([`Admission`](crate::admission::Admission)) where the answer needs the
//! cache or code.
//!
//! ```
//! use rekon_sdk::prelude::*;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # struct Guard;
//! # impl Plugin for Guard {
//! #     type Primary = ConfigMap;
//! #     fn register() -> Result<Registration, Error> { Ok(Registration::new::<ConfigMap>("guard", "0.1.0")) }
//! #     fn reconcile(_: &Context, _: &Request, _: Event<ConfigMap>) -> Result<Outcome, Error> { Ok(Outcome::done()) }
//! # }
//! impl Policies for Guard {
//!     fn policies() -> Vec<Policy> {
//!         vec![Policy::new::<ConfigMap>("no-passwords").validation(
//!             Validation::new("!has(object.data) || !('password' in object.data)")
//!                 .message("passwords belong in Secrets")
//!                 .reason(PolicyReason::Invalid),
//!         )]
//!     }
//! }
//! // rekon_sdk::export_plugin!(Guard, policies);
//! # assert_eq!(rekon_sdk::policies::check_policies(&Guard::policies()), Ok(()));
//! ```

use crate::admission::{FailurePolicy, Operation};
use crate::plugin::Plugin;
use crate::resource::{Kind, ResourceType};

/// Why a validation refuses (`validations[].reason`; the HTTP code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyReason {
    /// 401.
    Unauthorized,
    /// 403 (the server's default).
    Forbidden,
    /// 422.
    Invalid,
    /// 413.
    RequestEntityTooLarge,
}

/// One check of a [`Policy`]: the request is refused when `expression`
/// (CEL over `object`, `oldObject`, `request`, `namespaceObject`) is false.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// The CEL expression that must be true.
    pub expression: String,
    /// The refusal's message (else the server's `failed expression: …`).
    pub message: Option<String>,
    /// A CEL expression giving the message.
    pub message_expression: Option<String>,
    /// The refusal's reason (`Forbidden` when none).
    pub reason: Option<PolicyReason>,
}

impl Validation {
    /// A check that `expression` is true.
    #[must_use]
    pub fn new(expression: &str) -> Self {
        Self {
            expression: expression.to_owned(),
            message: None,
            message_expression: None,
            reason: None,
        }
    }

    /// The refusal's message.
    #[must_use]
    pub fn message(mut self, message: &str) -> Self {
        self.message = Some(message.to_owned());
        self
    }

    /// A CEL expression giving the refusal's message.
    #[must_use]
    pub fn message_expression(mut self, expression: &str) -> Self {
        self.message_expression = Some(expression.to_owned());
        self
    }

    /// The refusal's reason.
    #[must_use]
    pub fn reason(mut self, reason: PolicyReason) -> Self {
        self.reason = Some(reason);
        self
    }
}

/// One policy: which requests, and the checks they must pass. Becomes the
/// ValidatingAdmissionPolicy and binding `<name>.<plugin>.rekon.dev`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// A DNS label, unique among the plugin's policies.
    pub name: String,
    /// The resources it applies to.
    pub resources: Vec<ResourceType>,
    /// The operations it applies to.
    pub operations: Vec<Operation>,
    /// What the server does when an expression errors.
    pub failure_policy: FailurePolicy,
    /// CEL conditions `(name, expression)` narrowing the requests.
    pub match_conditions: Vec<(String, String)>,
    /// The checks.
    pub validations: Vec<Validation>,
}

impl Policy {
    /// A policy named `name` on creates and updates of `K`, failure
    /// policy `Fail`, with no check yet.
    #[must_use]
    pub fn new<K: Kind>(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            resources: vec![K::resource_type()],
            operations: vec![Operation::Create, Operation::Update],
            failure_policy: FailurePolicy::Fail,
            match_conditions: Vec::new(),
            validations: Vec::new(),
        }
    }

    /// Adds a check.
    #[must_use]
    pub fn validation(mut self, validation: Validation) -> Self {
        self.validations.push(validation);
        self
    }

    /// Applies to these operations instead of create and update.
    #[must_use]
    pub fn operations(mut self, operations: &[Operation]) -> Self {
        self.operations = operations.to_vec();
        self
    }

    /// Also applies to `K`.
    #[must_use]
    pub fn resource<K: Kind>(mut self) -> Self {
        self.resources.push(K::resource_type());
        self
    }

    /// What the server does when an expression errors.
    #[must_use]
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure_policy = policy;
        self
    }

    /// Applies only to requests for which the CEL `expression` is true.
    #[must_use]
    pub fn match_condition(mut self, name: &str, expression: &str) -> Self {
        self.match_conditions
            .push((name.to_owned(), expression.to_owned()));
        self
    }
}

/// A plugin's CEL admission policies. Exported with
/// `export_plugin!(P, policies)` (or with `admission`/`conversion` before
/// it); the test kit checks them as the host does at load
/// (`World::policies::<P>()`: the rules, every expression compiled with
/// kube-cel) and evaluates them against a request as the API server does
/// (`World::evaluate_policies::<P>(&request)`).
pub trait Policies: Plugin {
    /// The policies. Called once per load, after `register`.
    fn policies() -> Vec<Policy>;
}

/// The host's check of declared policies: the rules
/// (`rekon_rules::policies::check_policies`) and, natively, that every
/// expression compiles with kube-cel (`rekon_rules::cel::policy_problems`).
///
/// # Errors
/// Every problem the host would refuse the load for, joined with `; `.
pub fn check_policies(policies: &[Policy]) -> Result<(), String> {
    let plurals: Vec<Vec<&str>> = policies
        .iter()
        .map(|p| p.resources.iter().map(|t| t.plural.as_str()).collect())
        .collect();
    let conditions: Vec<Vec<&str>> = policies
        .iter()
        .map(|p| p.match_conditions.iter().map(|(n, _)| n.as_str()).collect())
        .collect();
    let shapes: Vec<_> = policies
        .iter()
        .zip(plurals.iter().zip(&conditions))
        .map(
            |(p, (plurals, conditions))| rekon_rules::policies::PolicyShape {
                name: &p.name,
                plurals,
                operations: p.operations.len(),
                condition_names: conditions,
                validations: p.validations.len(),
            },
        )
        .collect();
    #[allow(unused_mut)]
    let mut found: Vec<String> = rekon_rules::policies::check_policies(&shapes)
        .err()
        .into_iter()
        .collect();
    #[cfg(not(target_arch = "wasm32"))]
    for p in policies {
        let validations: Vec<_> = p
            .validations
            .iter()
            .map(|v| (v.expression.as_str(), v.message_expression.as_deref()))
            .collect();
        let conditions: Vec<_> = p
            .match_conditions
            .iter()
            .map(|(n, e)| (n.as_str(), e.as_str()))
            .collect();
        found.extend(rekon_rules::cel::policy_problems(
            &p.name,
            &validations,
            &conditions,
        ));
    }
    if found.is_empty() {
        Ok(())
    } else {
        Err(found.join("; "))
    }
}
