//! The CEL admission policies a plugin declares ([`Policies`]), evaluated
//! natively against a request as the API server evaluates the
//! ValidatingAdmissionPolicy and binding `rekon policies` writes for them:
//! kube-sim's evaluation (`rekon_rules::cel::policy`: match conditions,
//! validations, `message`/`messageExpression`, `reason`, failure policy)
//! on kube-cel, with the server's wording of a denial.

use kube_cel::cel::Value as Cel;
use rekon_rules::cel::expr;
use rekon_rules::cel::policy::{self as shared, Checks, Expr, RequestAttributes, Validation};
use serde_json::{Value, json};

use super::world::World;
use crate::admission::{AdmissionRequest, FailurePolicy, Operation, Verdict};
use crate::policies::{Policies, Policy, PolicyReason};

fn operation(o: Operation) -> &'static str {
    match o {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn reason(r: PolicyReason) -> &'static str {
    match r {
        PolicyReason::Unauthorized => "Unauthorized",
        PolicyReason::Forbidden => "Forbidden",
        PolicyReason::Invalid => "Invalid",
        PolicyReason::RequestEntityTooLarge => "RequestEntityTooLarge",
    }
}

/// Whether `policy`'s `matchConstraints` take `req`: one of its resources
/// (group and plural; the main resource, not a subresource) and one of its
/// operations.
fn matches(policy: &Policy, req: &AdmissionRequest) -> bool {
    req.sub_resource.is_none()
        && policy.operations.contains(&req.operation)
        && policy
            .resources
            .iter()
            .any(|r| r.group == req.resource.group && r.plural == req.resource.plural)
}

fn checks(policy: &Policy) -> Checks {
    Checks {
        fail: policy.failure_policy == FailurePolicy::Fail,
        match_conditions: policy
            .match_conditions
            .iter()
            .map(|(name, e)| (name.clone(), Expr::new(e)))
            .collect(),
        variables: Vec::new(),
        validations: policy
            .validations
            .iter()
            .map(|v| Validation {
                expr: Expr::new(&v.expression),
                message: v.message.clone(),
                message_expression: v.message_expression.as_deref().map(Expr::new),
                reason: v.reason.map(|r| reason(r).to_owned()),
            })
            .collect(),
    }
}

impl World {
    /// Evaluates the policies of `P` (those whose resources and operations
    /// take `req`) as the API server evaluates what `rekon policies`
    /// writes for them: the first failed validation denies, worded
    /// `ValidatingAdmissionPolicy '<policy>.<plugin>.rekon.dev' with
    /// binding '…' denied request: <message>`, with the code of its reason
    /// (422 for `Invalid`, the default). `namespaceObject` is the request's
    /// Namespace in this world, if there is one.
    ///
    /// # Panics
    /// When `P::register()` fails (a test bug).
    pub fn evaluate_policies<P: Policies>(&self, req: &AdmissionRequest) -> Verdict {
        let plugin = P::register().expect("the plugin registers").name;
        let cel = |v: Option<&Value>| v.map_or(Cel::Null, |v| expr::to_cel(v, None));
        let object = cel(req.object.as_ref());
        let old = cel(req.old_object.as_ref());
        let request = expr::to_cel(
            &shared::request(&RequestAttributes {
                uid: &req.uid,
                group: &req.resource.group,
                version: &req.resource.version,
                kind: &req.resource.kind,
                plural: &req.resource.plural,
                subresource: req.sub_resource.as_deref().unwrap_or_default(),
                name: &req.name,
                namespace: req.namespace.as_deref().unwrap_or_default(),
                operation: operation(req.operation),
                user: json!({"username": req.user.username, "uid": req.user.uid,
                    "groups": req.user.groups}),
                dry_run: req.dry_run,
            }),
            None,
        );
        let namespace = req
            .namespace
            .as_deref()
            .and_then(|ns| {
                self.get::<k8s_openapi::api::core::v1::Namespace>(&req.cluster, None, ns)
            })
            .map(|n| crate::action::typed_to_json(&n));
        let namespace = cel(namespace.as_ref());
        let vars = [
            ("object", &object),
            ("oldObject", &old),
            ("request", &request),
            ("params", &Cel::Null),
            ("namespaceObject", &namespace),
        ];
        for policy in P::policies().iter().filter(|p| matches(p, req)) {
            let checked = checks(policy).check(&vars);
            if let Some((_, decision)) = checked.decisions.into_iter().next() {
                let name = rekon_rules::policies::policy_object_name(&policy.name, &plugin);
                let reason = decision.reason.as_deref().unwrap_or("Invalid");
                return Verdict::deny(shared::denial_message(
                    &name,
                    Some(&name),
                    &decision.message,
                ))
                .code(shared::denial_code(reason));
            }
        }
        Verdict::allow()
    }
}
