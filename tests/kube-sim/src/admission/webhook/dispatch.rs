//! Which webhooks a request calls and what their answers do: the mutating
//! dispatcher (in order, patches applied, `reinvocationPolicy: IfNeeded`)
//! and the validating one (all at once, the first denial answers), with
//! the API server's errors (`webhook/{mutating,validating}/dispatcher.go`,
//! `webhook/errors`, `util/webhook/error.go`).

use std::collections::HashSet;

use kube_cel::cel::Value as Cel;
use serde_json::{Value, json};

use super::{Call, Stage};
use super::{client, equivalent};
use crate::admission::expr;
use crate::admission::policy::{self, Attributes};
use crate::error::{ApiError, ApiResult};
use crate::server::ClusterState;

/// The webhooks of one configuration.
pub(super) fn hooks(config: &Value) -> Vec<Value> {
    config
        .get("webhooks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn s<'v>(h: &'v Value, k: &str) -> Option<&'v str> {
    h.get(k).and_then(Value::as_str)
}

/// The webhook's `rules` against the request (operation, group, version,
/// resource and subresource, scope), `matchPolicy` Equivalent by default.
pub(super) fn rules_match(
    h: &Value,
    a: &Attributes<'_>,
    versions: impl FnOnce() -> Vec<String> + Clone,
) -> bool {
    let equivalent = s(h, "matchPolicy") != Some("Exact");
    h.get("rules")
        .and_then(Value::as_array)
        .is_some_and(|rules| {
            rules
                .iter()
                .any(|r| policy::rule_matches_with(r, a, equivalent, versions.clone()))
        })
}

pub(super) fn attrs<'a>(call: &'a Call, object: Option<&'a Value>) -> Attributes<'a> {
    Attributes {
        res: &call.res,
        operation: call.operation,
        name: &call.name,
        namespace: &call.namespace,
        subresource: &call.subresource,
        object,
        old: call.old.as_ref(),
        dry_run: call.dry_run,
        user: &call.user,
    }
}

/// `ShouldCallHook`: rules, namespaceSelector, objectSelector, then the
/// match conditions. `Err` is the request's answer (a condition that
/// failed to evaluate under `failurePolicy: Fail`).
fn should_call(h: &Value, call: &Call, object: Option<&Value>) -> ApiResult<bool> {
    let a = attrs(call, object);
    if !rules_match(h, &a, || call.versions.clone()) {
        return Ok(false);
    }
    let bad = |e: String| ApiError::internal(e);
    if let Some(sel) = policy::selector(h.get("namespaceSelector")).map_err(bad)? {
        let is_namespace = call.res.builtin && call.res.kind == "Namespace";
        let labels_of = if is_namespace {
            object.or(call.old.as_ref()).cloned()
        } else {
            call.namespace_obj.clone()
        };
        let cluster_scoped = call.namespace.is_empty() && !is_namespace;
        if !cluster_scoped && !labels_of.is_some_and(|n| sel.matches(&n)) {
            return Ok(false);
        }
    }
    if let Some(sel) = policy::selector(h.get("objectSelector")).map_err(bad)?
        && !object.is_some_and(|o| sel.matches(o))
        && !call.old.as_ref().is_some_and(|o| sel.matches(o))
    {
        return Ok(false);
    }
    let Some(conds) = h.get("matchConditions").and_then(Value::as_array) else {
        return Ok(true);
    };
    let cel = |v: Option<&Value>| v.map_or(Cel::Null, |v| expr::to_cel(v, None));
    let (obj, old) = (cel(object), cel(call.old.as_ref()));
    let request = expr::to_cel(&policy::request(&a), None);
    let vars = [("object", &obj), ("oldObject", &old), ("request", &request)];
    // matchconditions.Matcher: a false condition skips the webhook whatever
    // errors came before it; errors (aggregated) follow the failure policy.
    let mut errors = Vec::new();
    for c in conds {
        let src = s(c, "expression").unwrap_or_default();
        let result = expr::compile(src)
            .map_err(|e| format!("compilation error: {e}"))
            .and_then(|p| {
                if expr::uses(&p, "authorizer") {
                    return Err(format!(
                        "expression '{src}' resulted in error: {}",
                        expr::NO_AUTHORIZER
                    ));
                }
                expr::run(&p, &vars).map_err(|e| {
                    format!(
                        "expression '{src}' resulted in error: {}",
                        expr::error_text(&e)
                    )
                })
            });
        match result {
            Ok(Cel::Bool(false)) => return Ok(false),
            Ok(Cel::Bool(true)) => {}
            // cel-go would have refused a non-boolean expression when the
            // configuration was written; kube-sim fails closed here.
            Ok(_) => errors.push(format!("expression '{src}' must evaluate to bool")),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        return Ok(true);
    }
    // A condition using `authorizer` (which kube-cel does not provide)
    // fails closed: its error answers whatever the failure policy says.
    let authorizer = conds
        .iter()
        .any(|c| expr::uses_authorizer(s(c, "expression").unwrap_or_default()));
    if s(h, "failurePolicy") == Some("Ignore") && !authorizer {
        return Ok(false);
    }
    // generic/webhook.go: `NewForbidden(resource, name, aggregate)`.
    let aggregate = if errors.len() == 1 {
        errors.remove(0)
    } else {
        format!("[{}]", errors.join(", "))
    };
    Err(ApiError::forbidden(&call.res, &call.name, &aggregate))
}

/// `ToStatusErr` (Kubernetes 1.27–1.34): the webhook's Status with the
/// code raised to at least 400 and the message prefixed.
fn denial(name: &str, result: Option<&Value>) -> ApiError {
    let r = result.cloned().unwrap_or(Value::Null);
    let code = r
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let by = format!("admission webhook \"{name}\" denied the request");
    let reason = s(&r, "reason").unwrap_or_default();
    let message = match s(&r, "message").filter(|m| !m.is_empty()) {
        Some(m) => format!("{by}: {m}"),
        None if !reason.is_empty() => format!("{by}: {reason}"),
        None => format!("{by} without explanation"),
    };
    let mut e = ApiError::new(code, reason, message);
    e.details = r
        .get("details")
        .filter(|d| d.is_object())
        .cloned()
        .map(Box::new);
    e
}

/// The dry-run check both dispatchers make before calling.
fn dry_run_check(h: &Value, name: &str, call: &Call) -> Result<(), HookError> {
    if !call.dry_run {
        return Ok(());
    }
    match s(h, "sideEffects") {
        None => Err(HookError::Calling(format!(
            "failed calling webhook \"{name}\": Webhook SideEffects is nil"
        ))),
        Some("None" | "NoneOnDryRun") => Ok(()),
        Some(_) => Err(HookError::Status(ApiError::bad_request(format!(
            "admission webhook \"{name}\" does not support dry run"
        )))),
    }
}

/// How one call ended badly.
enum HookError {
    /// `ErrCallingWebhook` (its text): `failurePolicy` decides.
    Calling(String),
    /// The request's answer whatever the failure policy.
    Status(ApiError),
}

/// Calls one webhook with `object` and `old` (at `at`, the version the
/// webhook matched, when not the request's); the answer's `response` on
/// success.
async fn call_hook(
    cs: &ClusterState,
    h: &Value,
    call: &Call,
    object: Option<&Value>,
    old: Option<&Value>,
    at: Option<&crate::resources::ResourceInfo>,
) -> Result<Value, HookError> {
    let name = s(h, "name").unwrap_or_default();
    dry_run_check(h, name, call)?;
    let uid = uuid::Uuid::new_v4().to_string();
    let a = attrs(call, object);
    let mut request = policy::request(&a);
    if let Some(r) = request.as_object_mut() {
        r.insert("uid".into(), json!(uid));
        for k in ["subResource", "requestSubResource", "name", "namespace"] {
            if r.get(k).and_then(Value::as_str) == Some("") {
                r.remove(k);
            }
        }
        r.insert("object".into(), object.cloned().unwrap_or(Value::Null));
        r.insert("oldObject".into(), old.cloned().unwrap_or(Value::Null));
    }
    if let Some(to) = at {
        equivalent::retarget(&mut request, to);
    }
    if let Some(k) = &call.kind {
        request["kind"] = k.clone();
        request["requestKind"] = k.clone();
    }
    let review =
        json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request});
    let timeout = h
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(10);
    let mutating = call.stage == Stage::Mutating;
    let calling = |e: String| {
        HookError::Calling(if mutating {
            format!("failed calling webhook \"{name}\": failed to call webhook: {e}")
        } else {
            format!("failed calling webhook \"{name}\": {e}")
        })
    };
    let answer = client::post(
        cs,
        h.get("clientConfig").unwrap_or(&Value::Null),
        &review,
        timeout,
    )
    .await
    .map_err(calling)?;
    // webhookrequest.VerifyAdmissionResponse.
    let invalid = |m: String| {
        HookError::Calling(if mutating {
            format!("failed calling webhook \"{name}\": received invalid webhook response: {m}")
        } else {
            format!("failed calling webhook \"{name}\": {m}")
        })
    };
    let gvk = (s(&answer, "apiVersion"), s(&answer, "kind"));
    if gvk != (Some("admission.k8s.io/v1"), Some("AdmissionReview")) {
        return Err(invalid(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            gvk.0.unwrap_or_default(),
            gvk.1.unwrap_or_default()
        )));
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err(invalid("webhook response was absent".into()));
    };
    let got = s(response, "uid").unwrap_or_default();
    if got != uid {
        return Err(invalid(format!(
            "expected response.uid=\"{uid}\", got \"{got}\""
        )));
    }
    Ok(response.clone())
}

/// A webhook's `auditAnnotations`, keyed `<webhook name>/<key>` as the
/// dispatchers add them to the request's audit event.
fn audit_of(name: &str, response: &Value, out: &mut Vec<(String, String)>) {
    for (k, v) in response
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Some(v) = v.as_str() {
            out.push((format!("{name}/{k}"), v.to_string()));
        }
    }
}

fn warnings_of(response: &Value, out: &mut Vec<String>) {
    for w in response
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        out.push(w.to_string());
    }
}

/// One webhook and its configuration, in call order.
fn ordered(call: &Call) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for c in &call.configs {
        let cname = c
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        for h in hooks(c) {
            // The invocation's identity: configuration and webhook name.
            let uid = format!("{cname}/{}", s(&h, "name").unwrap_or_default());
            out.push((uid, h));
        }
    }
    out
}

/// Runs the webhooks a suspended write waits for; returns the object as
/// the mutating webhooks left it (`None` for DELETE). The webhooks'
/// warnings go to `warnings` and their audit annotations to `audit`, also
/// when the request fails.
pub(super) async fn run(
    cs: &ClusterState,
    call: &Call,
    warnings: &mut Vec<String>,
    audit: &mut Vec<(String, String)>,
) -> ApiResult<Option<Value>> {
    match call.stage {
        Stage::Mutating => mutate(cs, call, warnings, audit).await,
        Stage::Validating => validate(cs, call, warnings, audit).await.map(|()| None),
    }
}

async fn mutate(
    cs: &ClusterState,
    call: &Call,
    warnings: &mut Vec<String>,
    audit: &mut Vec<(String, String)>,
) -> ApiResult<Option<Value>> {
    let hooks = ordered(call);
    let mut object = call.object.clone();
    // webhookReinvokeContext: the reinvocable webhooks called so far, and
    // those to call again because a later one changed the object.
    let mut previously: Vec<String> = Vec::new();
    let mut reinvoke: HashSet<String> = HashSet::new();
    let mut any_change = false;
    for round in 0..2 {
        if round == 1 && !any_change {
            break;
        }
        for (uid, h) in &hooks {
            if !should_call(h, call, object.as_ref())? {
                continue;
            }
            if round == 1 && !reinvoke.contains(uid) {
                continue;
            }
            let name = s(h, "name").unwrap_or_default();
            let ignore = s(h, "failurePolicy") == Some("Ignore");
            // matchPolicy Equivalent: the object at the webhook's version.
            let at = match equivalent::version_for(h, call) {
                Some(v) => Some(equivalent::resource_at(cs, call, &v)?),
                None => None,
            };
            let (mut sent, sent_old) = match &at {
                Some(to) => (
                    match &object {
                        Some(o) => Some(equivalent::convert(cs, &call.res, to, o).await?),
                        None => None,
                    },
                    match &call.old {
                        Some(o) => Some(equivalent::convert(cs, &call.res, to, o).await?),
                        None => None,
                    },
                ),
                None => (object.clone(), call.old.clone()),
            };
            let answer =
                call_hook(cs, h, call, sent.as_ref(), sent_old.as_ref(), at.as_deref()).await;
            let changed = match answer {
                Ok(response) => {
                    warnings_of(&response, warnings);
                    audit_of(name, &response, audit);
                    if response.get("allowed").and_then(Value::as_bool) != Some(true) {
                        return Err(denial(name, response.get("status")));
                    }
                    match patch(name, &response, sent.as_mut()) {
                        Ok(c) => c,
                        Err(HookError::Calling(e)) if ignore => {
                            tracing::warn!("Failed calling webhook, failing open {name}: {e}");
                            false
                        }
                        Err(HookError::Calling(e)) => return Err(ApiError::internal(e)),
                        Err(HookError::Status(e)) => return Err(e),
                    }
                }
                Err(HookError::Calling(e)) if ignore => {
                    tracing::warn!("Failed calling webhook, failing open {name}: {e}");
                    false
                }
                Err(HookError::Calling(e)) => return Err(ApiError::internal(e)),
                Err(HookError::Status(e)) => return Err(e),
            };
            if changed {
                // Back at the request's version for the next webhook.
                object = match (&at, sent) {
                    (Some(to), Some(o)) => Some(equivalent::convert(cs, to, &call.res, &o).await?),
                    (_, sent) => sent,
                };
                any_change = true;
                reinvoke.extend(previously.iter().cloned());
            }
            if s(h, "reinvocationPolicy") == Some("IfNeeded") && !previously.contains(uid) {
                previously.push(uid.clone());
            }
            if round == 1 {
                reinvoke.remove(uid);
            }
        }
    }
    Ok(object)
}

/// Applies a mutating webhook's JSONPatch; whether it changed the object.
fn patch(name: &str, response: &Value, object: Option<&mut Value>) -> Result<bool, HookError> {
    let Some(p) = s(response, "patch") else {
        return Ok(false);
    };
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(p)
        .map_err(|e| {
            HookError::Calling(format!(
                "failed calling webhook \"{name}\": received invalid webhook response: {e}"
            ))
        })?;
    let ops: json_patch::Patch = serde_json::from_slice(&bytes).map_err(|e| {
        HookError::Calling(format!(
            "failed calling webhook \"{name}\": received undecodable patch in webhook response: {e}"
        ))
    })?;
    if ops.0.is_empty() {
        return Ok(false);
    }
    match s(response, "patchType") {
        Some("JSONPatch") => {}
        None => {
            return Err(HookError::Calling(format!(
                "failed calling webhook \"{name}\": received invalid webhook response: webhook returned response.patch but not response.patchType"
            )));
        }
        Some(t) => {
            return Err(HookError::Calling(format!(
                "failed calling webhook \"{name}\": unsupported patch type \"{t}\""
            )));
        }
    }
    let Some(object) = object else {
        return Err(HookError::Status(ApiError::internal(format!(
            "admission webhook \"{name}\" attempted to modify the object, which is not supported for this operation"
        ))));
    };
    let before = object.clone();
    json_patch::patch(object, &ops)
        .map_err(|e| HookError::Status(ApiError::internal(e.to_string())))?;
    Ok(*object != before)
}

async fn validate(
    cs: &ClusterState,
    call: &Call,
    warnings: &mut Vec<String>,
    audit: &mut Vec<(String, String)>,
) -> ApiResult<()> {
    let mut selected = Vec::new();
    for (_, h) in ordered(call) {
        if should_call(&h, call, call.object.as_ref())? {
            // matchPolicy Equivalent: the objects at the webhook's version.
            let (at, object, old) = match equivalent::version_for(&h, call) {
                Some(v) => {
                    let to = equivalent::resource_at(cs, call, &v)?;
                    let object = match &call.object {
                        Some(o) => Some(equivalent::convert(cs, &call.res, &to, o).await?),
                        None => None,
                    };
                    let old = match &call.old {
                        Some(o) => Some(equivalent::convert(cs, &call.res, &to, o).await?),
                        None => None,
                    };
                    (Some(to), object, old)
                }
                None => (None, call.object.clone(), call.old.clone()),
            };
            selected.push((h, at, object, old));
        }
    }
    // All at once, as the validating dispatcher's goroutines.
    let answers = futures::future::join_all(selected.iter().map(|(h, at, object, old)| {
        call_hook(cs, h, call, object.as_ref(), old.as_ref(), at.as_deref())
    }))
    .await;
    let mut first: Option<ApiError> = None;
    for ((h, ..), answer) in selected.iter().zip(answers) {
        let name = s(h, "name").unwrap_or_default();
        let err = match answer {
            Ok(response) => {
                warnings_of(&response, warnings);
                audit_of(name, &response, audit);
                if response.get("allowed").and_then(Value::as_bool) == Some(true) {
                    continue;
                }
                denial(name, response.get("status"))
            }
            Err(HookError::Calling(e)) if s(h, "failurePolicy") == Some("Ignore") => {
                tracing::warn!("Failed calling webhook, failing open {name}: {e}");
                continue;
            }
            Err(HookError::Calling(e)) => ApiError::internal(e),
            Err(HookError::Status(e)) => e,
        };
        first.get_or_insert(err);
    }
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_as_to_status_err_builds_them() {
        let e = denial("w.example.com", Some(&json!({"message": "no"})));
        assert_eq!((e.code, e.reason.as_str()), (400, ""));
        assert_eq!(
            e.message,
            "admission webhook \"w.example.com\" denied the request: no"
        );
        let e = denial(
            "w.example.com",
            Some(&json!({"code": 200, "reason": "Nope"})),
        );
        assert_eq!((e.code, e.reason.as_str()), (400, "Nope"));
        assert_eq!(
            e.message,
            "admission webhook \"w.example.com\" denied the request: Nope"
        );
        let e = denial("w.example.com", None);
        assert_eq!(
            e.message,
            "admission webhook \"w.example.com\" denied the request without explanation"
        );
        let e = denial(
            "w.example.com",
            Some(
                &json!({"code": 422, "reason": "Invalid", "message": "m", "details": {"causes": []}}),
            ),
        );
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
        assert_eq!(e.details.as_deref(), Some(&json!({"causes": []})));
    }

    fn b64(v: &Value) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(v.to_string())
    }

    #[test]
    fn patches_are_json_patches_of_an_object() {
        let ops = json!([{"op": "add", "path": "/x", "value": 1}]);
        let mut obj = json!({});
        let r = json!({"patchType": "JSONPatch", "patch": b64(&ops)});
        assert!(matches!(patch("w", &r, Some(&mut obj)), Ok(true)));
        assert_eq!(obj, json!({"x": 1}));
        // The same patch again changes nothing.
        let same = json!({"patchType": "JSONPatch", "patch": b64(&json!([{"op": "replace", "path": "/x", "value": 1}]))});
        assert!(matches!(patch("w", &same, Some(&mut obj)), Ok(false)));
        let untyped = json!({"patch": b64(&ops)});
        assert!(
            matches!(patch("w", &untyped, Some(&mut obj)), Err(HookError::Calling(m)) if m.ends_with("webhook returned response.patch but not response.patchType"))
        );
        let other = json!({"patchType": "MergePatch", "patch": b64(&ops)});
        assert!(
            matches!(patch("w", &other, Some(&mut obj)), Err(HookError::Calling(m)) if m == "failed calling webhook \"w\": unsupported patch type \"MergePatch\"")
        );
        // DELETE has no object to patch: the server's internal error.
        assert!(
            matches!(patch("w", &r, None), Err(HookError::Status(e)) if e.code == 500
            && e.message == "Internal error occurred: admission webhook \"w\" attempted to modify the object, which is not supported for this operation")
        );
        // A patch that does not apply is an internal error.
        let bad = json!({"patchType": "JSONPatch", "patch": b64(&json!([{"op": "remove", "path": "/nope"}]))});
        assert!(
            matches!(patch("w", &bad, Some(&mut obj)), Err(HookError::Status(e)) if e.code == 500)
        );
    }

    #[test]
    fn configurations_are_validated_in_the_servers_order() {
        let errs = super::super::validate_configuration(
            &json!({"webhooks": [
                {"name": "a.b", "clientConfig": {"url": "http://x"}, "timeoutSeconds": 40},
                {"name": "a.b", "clientConfig": {}, "sideEffects": "Some", "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Maybe"}]}),
            false,
        );
        let shown: Vec<String> = errs.iter().map(|(_, f, m)| format!("{f}: {m}")).collect();
        assert_eq!(
            shown,
            [
                "webhooks[0].name: Invalid value: \"a.b\": should be a domain with at least three segments separated by dots",
                "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
                "webhooks[0].timeoutSeconds: Invalid value: 40: the timeout value must be between 1 and 30 seconds",
                "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme",
                "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
                "webhooks[1].name: Duplicate value: \"a.b\"",
                "webhooks[1].name: Invalid value: \"a.b\": should be a domain with at least three segments separated by dots",
                "webhooks[1].failurePolicy: Unsupported value: \"Maybe\": supported values: \"Fail\", \"Ignore\"",
                "webhooks[1].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
                "webhooks[1].clientConfig: Required value: exactly one of url or service is required",
            ]
        );
    }
}
