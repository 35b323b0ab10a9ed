//! # `own-write-denied` — a controller writing what its own validation refuses
//!
//! **Class:** the reconcile and the admission of one plugin disagree. The
//! Widget gets a child ConfigMap (`<widget>-child`) whose `data.replicas`
//! follows `spec.replicas`; the same plugin's validating webhook
//! (`child-replicas`, on ConfigMaps) refuses a child with more than
//! [`MAX_REPLICAS`]. **Buggy:** the controller copies `spec.replicas`
//! unclamped. Without the webhook in the request path (a test cluster, an
//! exploration that ignores admission) both variants settle without an
//! error, whatever the replicas, and no fault changes that. **In
//! production:** the webhook refuses the controller's own write, forever;
//! the child never gets the Widget's change.
//!
//! **Found by:** the oracle `own-writes-admitted`: every write the plugin
//! makes of a kind its own rules admit is reviewed by its own `validate`;
//! the denial is a finding naming the object, the rule and the message.
//!
//! **Fix:** the controller clamps to [`MAX_REPLICAS`], as the validation
//! does.

use k8s_openapi::api::core::v1::ConfigMap;
use rekon_sdk::prelude::*;

use crate::{OWNER, Widget, child, child_name};

/// The most replicas a child may carry (the validation's bound).
pub const MAX_REPLICAS: u32 = 5;

/// The admission rule: children validated on create and update.
#[must_use]
pub fn rules() -> Vec<AdmissionRule> {
    vec![
        AdmissionRule::validate::<ConfigMap>("child-replicas")
            .operations(&[Operation::Create, Operation::Update]),
    ]
}

/// A child (a ConfigMap with the owner labels) carries at most
/// [`MAX_REPLICAS`]; other ConfigMaps are not the plugin's business.
///
/// # Errors
/// An object that is no ConfigMap.
pub fn validate(req: &AdmissionRequest) -> Result<Verdict, Error> {
    let Some(cm) = req.object::<ConfigMap>()? else {
        return Ok(Verdict::allow());
    };
    let ours = cm
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(OWNER.2));
    let replicas = cm
        .data
        .as_ref()
        .and_then(|d| d.get("replicas"))
        .and_then(|r| r.parse::<u32>().ok());
    match replicas {
        Some(n) if ours && n > MAX_REPLICAS => Ok(Verdict::deny(format!(
            "a child carries at most {MAX_REPLICAS} replicas, not {n}"
        ))
        .code(422)
        .field("data.replicas", format!("must be at most {MAX_REPLICAS}"))),
        _ => Ok(Verdict::allow()),
    }
}

/// One reconcile of a Widget: its child applied with its replicas.
///
/// # Errors
/// Never.
pub fn reconcile(
    _ctx: &Context,
    req: &Request,
    widget: &Widget,
    fixed: bool,
) -> Result<Outcome, Error> {
    let wanted = widget.spec.replicas.unwrap_or(1);
    let replicas = if fixed {
        wanted.min(MAX_REPLICAS)
    } else {
        wanted
    };
    let object = child(
        req,
        &child_name(req),
        &[("replicas", &replicas.to_string())],
    );
    Ok(Outcome::done().with(Action::apply(&req.cluster, &object)))
}
