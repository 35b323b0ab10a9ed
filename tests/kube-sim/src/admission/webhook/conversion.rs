//! CRD conversion webhooks (`spec.conversion.strategy: Webhook`): objects
//! are stored at the storage version, and every read, write, list and
//! watch at another served version is converted by POSTing a
//! `apiextensions.k8s.io/v1` ConversionReview to the CRD's webhook, as
//! the API server's `webhookConverter` does
//! (`apiextensions-apiserver/pkg/apiserver/conversion/webhook_converter.go`):
//! a batch of objects, a request `uid`, `desiredAPIVersion`; the response
//! must carry the same `uid`, `result.status: Success`, as many objects as
//! were sent, each at the desired apiVersion with the same kind, name,
//! namespace and uid; of the metadata only labels and annotations may
//! change (the rest is put back from the original). The converted object
//! is then pruned with the target version's schema.
//!
//! A write at a converted version runs at that version (schema, defaults,
//! CEL rules, policies and admission webhooks see the request's version)
//! and is converted to the storage version last, just before it is
//! stored. The store's lock is never held across a call: a write stops at
//! a conversion point as it stops for admission webhooks (the parent
//! module's passes), and is run again with the converted object put in:
//!
//! - the **live object** of an update, patch or delete is converted to the
//!   request's version before the write uses it ([`view`]);
//! - the **object to store** is converted to the storage version after the
//!   validating webhooks ([`storage_point`]).
//!
//! Each carried conversion is tied to the resourceVersion of the live
//! object it was made against; if another write came in between, the
//! write starts over.

use std::sync::Arc;

use serde_json::Value;

use super::{Pass, RETRY};
use crate::error::{ApiError, ApiResult};
use crate::resources::{ResourceInfo, prune, split_api_version};
use crate::store::Inner;

/// The sentinel reason of a pass stopped for a conversion.
pub(super) const CONVERT: &str = "kube-sim:conversion-suspend";

/// The ConversionReview call's `?timeout=`: the server's webhook client
/// default (conversion webhooks have no `timeoutSeconds`).
const TIMEOUT_SECS: u64 = 30;

/// Which conversion a suspended write waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    /// The live object, to the request's version.
    Live,
    /// The object to store, to the storage version.
    Store,
}

/// A write stopped at a conversion point.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(super) res: ResourceInfo,
    pub(super) object: Value,
    pub(super) desired: String,
    pub(super) purpose: Purpose,
    /// The resourceVersion of the live object (None: there is none).
    pub(super) live_rv: Option<String>,
}

fn suspend(inner: &Inner, r: Request) -> ApiError {
    *inner.converting.borrow_mut() = Some(r);
    ApiError::new(0, CONVERT, "")
}

/// A write at a converted version that no request drives (an in-process
/// helper): kube-sim cannot call the webhook under the store's lock.
fn not_driven(res: &ResourceInfo) -> ApiError {
    ApiError::internal(format!(
        "kube-sim: {}.{} at {} is converted by a webhook; in-process writes must use the storage version {}",
        res.plural, res.group, res.version, res.storage_version
    ))
}

/// The live object of a write, at the request's version: the stored object
/// itself unless the resource's conversion webhook converts it. The first
/// pass stops here to call the webhook; later passes take the converted
/// object while the live object is unchanged.
pub(crate) fn view(
    inner: &Inner,
    res: &ResourceInfo,
    live: &Arc<Value>,
    pass: &Pass,
) -> ApiResult<Arc<Value>> {
    if !res.webhook_converted() {
        return Ok(live.clone());
    }
    let Pass::Run(c) = pass else {
        return Err(not_driven(res));
    };
    let rv = super::rv(Some(live));
    match &c.live_view {
        Some((seen, v)) if *seen == rv => Ok(Arc::new(v.clone())),
        Some(_) => Err(ApiError::new(0, RETRY, "")),
        None => Err(suspend(
            inner,
            Request {
                res: res.clone(),
                object: (**live).clone(),
                desired: res.api_version(),
                purpose: Purpose::Live,
                live_rv: rv,
            },
        )),
    }
}

/// The storage conversion point, after the validating webhooks: `obj` (at
/// the request's version) becomes the object at the storage version. `live`
/// is the stored object the write replaces, if any.
pub(crate) fn storage_point(
    inner: &Inner,
    res: &ResourceInfo,
    live: Option<&Value>,
    obj: &mut Value,
    pass: &Pass,
) -> ApiResult<()> {
    if !res.webhook_converted() {
        return Ok(());
    }
    let Pass::Run(c) = pass else {
        return Err(not_driven(res));
    };
    let rv = super::rv(live);
    match &c.stored_form {
        Some((seen, v)) if *seen == rv => {
            *obj = v.clone();
            Ok(())
        }
        Some(_) => Err(ApiError::new(0, RETRY, "")),
        None => Err(suspend(
            inner,
            Request {
                res: res.clone(),
                object: obj.clone(),
                desired: res.storage_api_version(),
                purpose: Purpose::Store,
                live_rv: rv,
            },
        )),
    }
}

/// Runs a suspended conversion: the webhook call, then the carry the next
/// pass reads.
pub(super) async fn run(
    cs: &crate::server::ClusterState,
    r: Request,
    carry: &mut super::Carry,
) -> ApiResult<()> {
    let mut out = convert(cs, &r.res, &[Arc::new(r.object)], &r.desired).await?;
    let v = Arc::unwrap_or_clone(out.pop().unwrap_or_default());
    match r.purpose {
        Purpose::Live => carry.live_view = Some((r.live_rv, v)),
        Purpose::Store => carry.stored_form = Some((r.live_rv, v)),
    }
    Ok(())
}

/// Objects read from the store (storage version), as a response at `res`
/// shows them: converted by the webhook when `res` is a webhook-converted
/// version, else as they are. The objects of a list (or of the watch
/// events one flush sends) go in one review; the server converts each
/// object as it decodes it, so errors are worded for one object.
pub(crate) async fn served(
    cs: &crate::server::ClusterState,
    res: &ResourceInfo,
    items: Vec<Arc<Value>>,
) -> ApiResult<Vec<Arc<Value>>> {
    if !res.webhook_converted() || items.is_empty() {
        return Ok(items);
    }
    convert(cs, res, &items, &res.api_version()).await
}

/// One object read from the store, as [`served`] shows it.
pub(crate) async fn served_one(
    cs: &crate::server::ClusterState,
    res: &ResourceInfo,
    obj: Arc<Value>,
) -> ApiResult<Arc<Value>> {
    if !res.webhook_converted() {
        return Ok(obj);
    }
    let mut out = served(cs, res, vec![obj]).await?;
    out.pop()
        .ok_or_else(|| ApiError::internal("conversion returned no object"))
}

/// `group/version, Kind=Kind`, as Go prints a GroupVersionKind.
fn gvk(api_version: &str, kind: &str) -> String {
    let (g, v) = split_api_version(api_version);
    if g.is_empty() {
        format!("/{v}, Kind={kind}")
    } else {
        format!("{g}/{v}, Kind={kind}")
    }
}

fn str_at<'a>(o: &'a Value, ptr: &str) -> &'a str {
    o.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// The webhook's failure as the server reports it: a 500 with the error's
/// text and no reason (an error that is not a `StatusError`).
fn failed(message: String) -> ApiError {
    ApiError::new(500, "", message)
}

/// Converts `objects` to `desired` through the webhook of `res`'s CRD.
/// Objects already at `desired` are not sent (`getObjectsToConvert`).
/// Errors are worded as the server words them for one object.
pub(crate) async fn convert(
    cs: &crate::server::ClusterState,
    res: &ResourceInfo,
    objects: &[Arc<Value>],
    desired: &str,
) -> ApiResult<Vec<Arc<Value>>> {
    let Some(hook) = res.conversion_webhook.clone() else {
        return Ok(objects.to_vec());
    };
    let todo: Vec<usize> = (0..objects.len())
        .filter(|&i| str_at(&objects[i], "/apiVersion") != desired)
        .collect();
    if todo.is_empty() {
        return Ok(objects.to_vec());
    }
    let from = str_at(&objects[todo[0]], "/apiVersion").to_string();
    let what = gvk(&from, &res.kind);
    let uid = uuid::Uuid::new_v4().to_string();
    // Serialized from the stored objects themselves, not from a copy.
    let review = Review {
        kind: "ConversionReview",
        api_version: "apiextensions.k8s.io/v1",
        request: ReviewRequest {
            uid: &uid,
            desired,
            objects: todo.iter().map(|&i| &*objects[i]).collect(),
        },
    };
    let cc = hook.get("clientConfig").cloned().unwrap_or(Value::Null);
    let answer = super::client::post(cs, &cc, &review, TIMEOUT_SECS)
        .await
        .map_err(|e| failed(format!("conversion webhook for {what} failed: {e}")))?;
    let converted = response_objects(&uid, answer)
        .map_err(|e| failed(format!("conversion webhook for {what} failed: {e}")))?;
    if converted.len() != todo.len() {
        return Err(failed(format!(
            "conversion webhook for {what} returned {} objects, expected {}",
            converted.len(),
            todo.len()
        )));
    }
    let target = cs.store.read(|i| {
        let (g, v) = split_api_version(desired);
        i.registry.get(g, v, &res.plural)
    });
    let mut out = objects.to_vec();
    for (&i, mut c) in todo.iter().zip(converted) {
        let original = &objects[i];
        let at = "returned invalid object at index 0";
        let got_av = str_at(&c, "/apiVersion");
        if got_av != desired {
            let (g, v) = split_api_version(got_av);
            return Err(failed(format!(
                "conversion webhook for {what} {at}: invalid groupVersion (expected {desired}, received {})",
                if g.is_empty() {
                    v.to_string()
                } else {
                    format!("{g}/{v}")
                }
            )));
        }
        let (ek, gk) = (str_at(original, "/kind"), str_at(&c, "/kind"));
        if ek != gk {
            return Err(failed(format!(
                "conversion webhook for {what} {at}: invalid kind (expected {ek}, received {gk})"
            )));
        }
        let invalid = "returned invalid object";
        for (field, ptr) in [
            ("name", "/metadata/name"),
            ("namespace", "/metadata/namespace"),
            ("UID", "/metadata/uid"),
        ] {
            let (e, a) = (str_at(original, ptr), str_at(&c, ptr));
            if e != a {
                return Err(failed(format!(
                    "conversion webhook for {what} {invalid}: must have the same {field}: {e} != {a}"
                )));
            }
        }
        restore_meta(original, &mut c).map_err(|e| {
            failed(format!(
                "conversion webhook for {what} returned invalid metadata: {e}"
            ))
        })?;
        if let Some(schema) = target.as_ref().and_then(|t| t.schema.as_ref()) {
            prune(&mut c, schema);
        }
        out[i] = Arc::new(c);
    }
    Ok(out)
}

/// A ConversionReview v1 request as it is sent.
#[derive(serde::Serialize)]
struct Review<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    request: ReviewRequest<'a>,
}

#[derive(serde::Serialize)]
struct ReviewRequest<'a> {
    uid: &'a str,
    #[serde(rename = "desiredAPIVersion")]
    desired: &'a str,
    objects: Vec<&'a Value>,
}

/// `getConvertedObjectsFromResponse` for ConversionReview v1 (the
/// objects taken out of the answer, not copied).
fn response_objects(uid: &str, mut answer: Value) -> Result<Vec<Value>, String> {
    let (av, kind) = (str_at(&answer, "/apiVersion"), str_at(&answer, "/kind"));
    if av != "apiextensions.k8s.io/v1" || kind != "ConversionReview" {
        return Err(format!(
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {}",
            gvk(av, kind)
        ));
    }
    let Some(resp) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("no response provided".into());
    };
    let got = str_at(resp, "/uid");
    if got != uid {
        return Err(format!("expected response.uid={uid:?}, got {got:?}"));
    }
    let status = str_at(resp, "/result/status");
    if status != "Success" {
        let message = str_at(resp, "/result/message");
        if !message.is_empty() {
            return Err(message.to_string());
        }
        return Err(format!(
            "response.result.status was '{status}', not 'Success'"
        ));
    }
    Ok(
        match answer
            .pointer_mut("/response/convertedObjects")
            .map(Value::take)
        {
            Some(Value::Array(objects)) => objects,
            _ => Vec::new(),
        },
    )
}

/// `restoreObjectMeta`: the original's metadata, with the labels and
/// annotations the webhook returned (string values only).
fn restore_meta(original: &Value, converted: &mut Value) -> Result<(), String> {
    let mut response_meta = match converted.get_mut("metadata").map(Value::take) {
        None => return Err("missing metadata in converted object".into()),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                go_type(&other)
            ));
        }
    };
    let mut meta = original
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        match response_meta.remove(field) {
            None | Some(Value::Null) => {
                meta.remove(field);
            }
            Some(Value::Object(m)) => {
                for (k, v) in &m {
                    if !v.is_string() {
                        return Err(format!(
                            "metadata.{field}[{k}] must be a string, but is {} in converted object",
                            go_type(v)
                        ));
                    }
                }
                meta.insert(field.into(), Value::Object(m));
            }
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    go_type(&other)
                ));
            }
        }
    }
    if let Some(o) = converted.as_object_mut() {
        o.insert("metadata".into(), Value::Object(meta));
    }
    Ok(())
}

/// Go's `%T` of a decoded JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// `spec.conversion` of a CRD as the server validates it: strategy `None`
/// (the default) or `Webhook` with a `webhook` holding exactly one of
/// `clientConfig.url` and `clientConfig.service`, and
/// `conversionReviewVersions` naming `v1` (the only version kube-sim
/// speaks; the server also speaks `v1beta1`).
pub(crate) fn crd_webhook(spec: &Value) -> Result<Option<Arc<Value>>, String> {
    let Some(conv) = spec.get("conversion").filter(|c| !c.is_null()) else {
        return Ok(None);
    };
    match conv.get("strategy").and_then(Value::as_str) {
        None | Some("None") => {
            if conv.get("webhook").is_some_and(|w| !w.is_null()) {
                return Err("spec.conversion.webhook: Forbidden: should not be set when strategy is not set to Webhook".into());
            }
            Ok(None)
        }
        Some("Webhook") => {
            let Some(hook) = conv.get("webhook").filter(|w| w.is_object()) else {
                return Err(
                    "spec.conversion.webhook: Required value: required when strategy is set to Webhook"
                        .into(),
                );
            };
            let cc = hook.get("clientConfig").filter(|c| c.is_object()).ok_or(
                "spec.conversion.webhook.clientConfig: Required value: required when strategy is set to Webhook",
            )?;
            match (cc.get("url").is_some(), cc.get("service").is_some()) {
                (true, true) | (false, false) => {
                    return Err("spec.conversion.webhook.clientConfig: Required value: exactly one of url or service is required".into());
                }
                _ => {}
            }
            let versions = crate::store::strings(hook.get("conversionReviewVersions"));
            if versions.is_empty() {
                return Err("spec.conversion.webhook.conversionReviewVersions: Required value: must specify one of v1, v1beta1".into());
            }
            if !versions.iter().any(|v| v == "v1") {
                return Err(format!(
                    "spec.conversion.webhook.conversionReviewVersions: Unsupported value: {versions:?}: kube-sim speaks ConversionReview v1 only"
                ));
            }
            Ok(Some(Arc::new(hook.clone())))
        }
        Some(other) => Err(format!(
            "spec.conversion.strategy: Unsupported value: \"{other}\": supported values: \"None\", \"Webhook\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_comes_back_from_the_original_but_labels_and_annotations() {
        let original = json!({"metadata": {"name": "w", "uid": "u", "labels": {"a": "1"}, "resourceVersion": "7"}});
        let mut c = json!({"metadata": {"name": "w", "uid": "u", "labels": {"b": "2"}, "resourceVersion": "99", "generation": 5}});
        restore_meta(&original, &mut c).unwrap();
        assert_eq!(
            c,
            json!({"metadata": {"name": "w", "uid": "u", "labels": {"b": "2"}, "resourceVersion": "7"}})
        );
        let mut bad = json!({"metadata": {"labels": {"n": 1}}});
        assert_eq!(
            restore_meta(&original, &mut bad).unwrap_err(),
            "metadata.labels[n] must be a string, but is int64 in converted object"
        );
    }

    #[test]
    fn crd_conversion_is_validated_as_the_server_validates_it() {
        let hook = json!({"clientConfig": {"url": "https://127.0.0.1:1/"}, "conversionReviewVersions": ["v1"]});
        assert!(crd_webhook(&json!({})).unwrap().is_none());
        assert!(
            crd_webhook(&json!({"conversion": {"strategy": "None"}}))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            *crd_webhook(&json!({"conversion": {"strategy": "Webhook", "webhook": hook}}))
                .unwrap()
                .unwrap(),
            hook
        );
        assert_eq!(
            crd_webhook(&json!({"conversion": {"strategy": "Webhook"}})).unwrap_err(),
            "spec.conversion.webhook: Required value: required when strategy is set to Webhook"
        );
        assert!(
            crd_webhook(&json!({"conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": "https://x/"}, "conversionReviewVersions": ["v1beta1"]}}}))
            .unwrap_err()
            .contains("kube-sim speaks ConversionReview v1 only")
        );
        assert!(
            crd_webhook(&json!({"conversion": {"strategy": "Sometimes"}}))
                .unwrap_err()
                .starts_with("spec.conversion.strategy: Unsupported value: \"Sometimes\"")
        );
    }

    #[test]
    fn responses_are_checked_as_the_server_checks_them() {
        let ok = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": "x", "result": {"status": "Success"}, "convertedObjects": [{"a": 1}]}});
        assert_eq!(
            response_objects("x", ok.clone()).unwrap(),
            vec![json!({"a": 1})]
        );
        assert_eq!(
            response_objects("y", ok.clone()).unwrap_err(),
            r#"expected response.uid="y", got "x""#
        );
        let failed = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": "x", "result": {"status": "Failure", "message": "cannot convert"}}});
        assert_eq!(response_objects("x", failed).unwrap_err(), "cannot convert");
        let v1beta1 =
            json!({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "ConversionReview"});
        assert_eq!(
            response_objects("x", v1beta1).unwrap_err(),
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got apiextensions.k8s.io/v1beta1, Kind=ConversionReview"
        );
    }
}
