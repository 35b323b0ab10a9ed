//! `matchPolicy: Equivalent` for admission webhooks: a webhook whose rules
//! name another served version of the request's resource (not the
//! request's own) is called with the object converted to that version,
//! and its AdmissionReview's `kind` and `resource` name that version while
//! `requestKind` and `requestResource` keep the request's, as the server's
//! dispatchers do (`ConvertVersionedAttributes`). A mutating webhook's
//! patch applies to the converted object, which is converted back before
//! the next webhook. The conversion is the resource's own: a CRD's
//! conversion webhook, the built-in conversions (autoscaling/v1 ↔ v2
//! HorizontalPodAutoscalers), else the apiVersion alone.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Call;
use super::dispatch::rules_match;
use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceInfo;
use crate::server::ClusterState;

/// The version a webhook is called at when it matched only through
/// equivalence: the first served version its rules name (None when its
/// rules name the request's own version, or do not match).
pub(super) fn version_for(h: &Value, call: &Call) -> Option<String> {
    if call.kind.is_some() {
        // A `/scale` write: the Scale has one version.
        return None;
    }
    let own = super::dispatch::attrs(call, call.object.as_ref());
    if rules_match_exact(h, &own) {
        return None;
    }
    call.versions
        .iter()
        .filter(|v| **v != call.res.version)
        .find(|v| {
            let mut res = call.res.clone();
            res.version = (*v).clone();
            let a = crate::admission::policy::Attributes { res: &res, ..own };
            rules_match_exact(h, &a)
        })
        .cloned()
}

fn rules_match_exact(h: &Value, a: &crate::admission::policy::Attributes<'_>) -> bool {
    let mut exact = h.clone();
    exact["matchPolicy"] = json!("Exact");
    rules_match(&exact, a, Vec::new)
}

/// The served resource of `call` at `version`.
pub(super) fn resource_at(
    cs: &ClusterState,
    call: &Call,
    version: &str,
) -> ApiResult<Arc<ResourceInfo>> {
    cs.store
        .read(|i| i.registry.get(&call.res.group, version, &call.res.plural))
        .ok_or_else(|| {
            ApiError::internal(format!(
                "{}.{} is not served at {version}",
                call.res.plural, call.res.group
            ))
        })
}

/// `obj` (at `from`) converted to `to`; the error is the server's
/// InternalError around the converter's.
pub(super) async fn convert(
    cs: &ClusterState,
    from: &ResourceInfo,
    to: &ResourceInfo,
    obj: &Value,
) -> ApiResult<Value> {
    if from.conversion_webhook.is_some() {
        let out = super::conversion::convert(cs, from, &[Arc::new(obj.clone())], &to.api_version())
            .await
            .map_err(|e| ApiError::internal(e.message))?;
        return Ok(out.first().map(|o| (**o).clone()).unwrap_or_default());
    }
    let mut o = obj.clone();
    crate::resources::to_storage(from, &mut o);
    Ok(crate::resources::to_served(to, &o))
}

/// The AdmissionReview request's `kind` and `resource` at `to`.
pub(super) fn retarget(request: &mut Value, to: &ResourceInfo) {
    request["kind"] = json!({"group": to.group, "version": to.version, "kind": to.kind});
    request["resource"] = json!({"group": to.group, "version": to.version, "resource": to.plural});
}
