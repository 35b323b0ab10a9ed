//! One AdmissionReview (v1, kube's types) answered by one plugin: the
//! request translated into the plugin's [`Review`], its [`Answer`]
//! translated into the response the API server reads (uid echoed, allowed,
//! status code, message, reason and field causes, a base64 JSON Patch,
//! warnings).

use kube::core::DynamicObject;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as KubeOperation,
};
use kube::core::response::{StatusCause, StatusDetails};
use serde_json::Value;

use crate::action::{Resource, Scope};
use crate::plugin::{Answer, Denial, Mutation, Operation, Review, UserInfo, Verdict};

/// Why a body is not a review this server can answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON of an AdmissionReview.
    #[error("failed to parse the AdmissionReview: {0}")]
    Parse(#[source] serde_json::Error),
    /// An AdmissionReview without a request.
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// The request of an AdmissionReview body.
///
/// # Errors
/// When the body is no AdmissionReview with a request.
pub fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, ReviewError> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(ReviewError::Parse)?;
    review.try_into().map_err(|_| ReviewError::NoRequest)
}

/// What the plugin is given for `request`, coming from `cluster`.
#[must_use]
pub fn to_review(request: &AdmissionRequest<DynamicObject>, cluster: &str) -> Review {
    let text = |o: &Option<DynamicObject>| o.as_ref().and_then(|o| serde_json::to_string(o).ok());
    let namespace = request.namespace.clone().filter(|n| !n.is_empty());
    Review {
        uid: request.uid.clone(),
        cluster: cluster.to_owned(),
        resource: Resource {
            group: request.kind.group.clone(),
            version: request.kind.version.clone(),
            kind: request.kind.kind.clone(),
            plural: request.resource.resource.clone(),
            scope: if namespace.is_some() {
                Scope::Namespaced
            } else {
                Scope::Cluster
            },
        },
        sub_resource: request.sub_resource.clone().filter(|s| !s.is_empty()),
        operation: match request.operation {
            KubeOperation::Create => Operation::Create,
            KubeOperation::Update => Operation::Update,
            KubeOperation::Delete => Operation::Delete,
            KubeOperation::Connect => Operation::Connect,
        },
        namespace,
        name: request.name.clone(),
        object: text(&request.object),
        old_object: text(&request.old_object),
        user: UserInfo {
            username: request.user_info.username.clone().unwrap_or_default(),
            uid: request.user_info.uid.clone().unwrap_or_default(),
            groups: request.user_info.groups.clone().unwrap_or_default(),
        },
        dry_run: request.dry_run,
    }
}

/// The verdict label of an answer (`rekon_admission_verdicts_total`).
#[must_use]
pub fn verdict_label(answer: &Answer) -> &'static str {
    match answer {
        Answer::Validated(v) if v.denied.is_some() => "denied",
        Answer::Mutated(m) if m.denied.is_some() => "denied",
        Answer::Mutated(m) if m.object.is_some() => "patched",
        _ => "allowed",
    }
}

/// Why a mutation cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The plugin's object is not JSON.
    #[error("the mutated object of plugin {plugin} is not JSON: {source}")]
    NotJson {
        /// The plugin.
        plugin: String,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// A delete or connect has no object to mutate.
    #[error("plugin {plugin} mutated a request without an object")]
    NoObject {
        /// The plugin.
        plugin: String,
    },
}

/// The response to `request` for `answer`, as the review JSON to send.
///
/// # Errors
/// A mutated object that is not JSON, or one for a request without object.
pub fn respond(
    request: &AdmissionRequest<DynamicObject>,
    plugin: &str,
    answer: Answer,
) -> Result<Value, PatchError> {
    let base = AdmissionResponse::from(request);
    let (response, patch) = match answer {
        Answer::Validated(Verdict { denied, warnings }) => {
            (finish(request, base, denied, warnings), None)
        }
        Answer::Mutated(Mutation {
            object,
            denied,
            warnings,
        }) => {
            let patch = match (&denied, object) {
                (None, Some(text)) => patch_for(request, plugin, &text)?,
                _ => None,
            };
            (finish(request, base, denied, warnings), patch)
        }
    };
    Ok(into_json(response, patch))
}

/// The JSON Patch from the request's object to `text`; `None` when equal.
fn patch_for(
    request: &AdmissionRequest<DynamicObject>,
    plugin: &str,
    text: &str,
) -> Result<Option<kube_json_patch::Patch>, PatchError> {
    let wanted: Value = serde_json::from_str(text).map_err(|source| PatchError::NotJson {
        plugin: plugin.to_owned(),
        source,
    })?;
    let original = request
        .object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok())
        .ok_or_else(|| PatchError::NoObject {
            plugin: plugin.to_owned(),
        })?;
    let patch = kube_json_patch::diff(&original, &wanted);
    Ok((!patch.0.is_empty()).then_some(patch))
}

fn finish(
    request: &AdmissionRequest<DynamicObject>,
    mut response: AdmissionResponse,
    denied: Option<Denial>,
    warnings: Vec<String>,
) -> AdmissionResponse {
    if let Some(denial) = denied {
        response = response.deny(&denial.message);
        let code = if (400..=599).contains(&denial.code) {
            denial.code
        } else {
            403
        };
        response.result.code = code;
        response.result.reason = reason_of(code).to_owned();
        if !denial.field_errors.is_empty() {
            response.result.details = Some(StatusDetails {
                causes: denial
                    .field_errors
                    .into_iter()
                    .map(|f| StatusCause {
                        reason: "FieldValueInvalid".to_owned(),
                        message: f.message,
                        field: f.path,
                    })
                    .collect(),
                name: request.name.clone(),
                group: request.kind.group.clone(),
                kind: request.kind.kind.clone(),
                uid: String::new(),
                retry_after_seconds: 0,
            });
        }
    }
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// The `metav1.StatusReason` of an HTTP code, as the API server pairs them.
fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// The review JSON. The patch is set here, base64-encoded as the API server
/// reads a `[]byte` field: kube's `AdmissionResponse` serializes its
/// `Vec<u8>` patch as an array of numbers, which the API server refuses
/// (kube-rs/kube#1781, open).
fn into_json(response: AdmissionResponse, patch: Option<kube_json_patch::Patch>) -> Value {
    use base64::Engine as _;
    let mut review = serde_json::to_value(response.into_review())
        .expect("an AdmissionReview serializes to JSON");
    if let Some(patch) = patch
        && let Some(out) = review.get_mut("response").and_then(Value::as_object_mut)
    {
        let bytes = serde_json::to_vec(&patch).expect("a JSON Patch serializes");
        out.insert(
            "patch".to_owned(),
            base64::engine::general_purpose::STANDARD
                .encode(bytes)
                .into(),
        );
        out.insert("patchType".to_owned(), "JSONPatch".into());
    }
    review
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::FieldError;
    use serde_json::json;

    fn request(object: Value) -> AdmissionRequest<DynamicObject> {
        parse(
            json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {
                    "uid": "u-1",
                    "kind": {"group": "widgets.rekon.dev", "version": "v1", "kind": "Widget"},
                    "resource": {"group": "widgets.rekon.dev", "version": "v1", "resource": "widgets"},
                    "name": "w", "namespace": "default", "operation": "CREATE",
                    "userInfo": {"username": "alice", "groups": ["dev"]},
                    "object": object, "dryRun": false
                }
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap()
    }

    fn widget(labels: Value) -> Value {
        json!({"apiVersion": "widgets.rekon.dev/v1", "kind": "Widget",
               "metadata": {"name": "w", "namespace": "default", "labels": labels},
               "spec": {"size": 1}})
    }

    #[test]
    fn the_plugin_sees_the_request_as_the_server_sent_it() {
        let review = to_review(&request(widget(json!({}))), "main");
        assert_eq!(review.uid, "u-1");
        assert_eq!(review.resource.plural, "widgets");
        assert_eq!(review.resource.scope, Scope::Namespaced);
        assert_eq!(review.operation, Operation::Create);
        assert_eq!(review.user.username, "alice");
        assert_eq!(review.user.groups, ["dev"]);
        let object: Value = serde_json::from_str(review.object.as_deref().unwrap()).unwrap();
        assert_eq!(object["spec"]["size"], 1);
        assert_eq!(review.old_object, None);
    }

    #[test]
    fn a_denial_carries_code_reason_and_field_causes() {
        let answer = Answer::Validated(Verdict {
            denied: Some(Denial {
                message: "too big".into(),
                code: 422,
                field_errors: vec![FieldError {
                    path: "spec.size".into(),
                    message: "must be at most 10".into(),
                }],
            }),
            warnings: vec!["careful".into()],
        });
        let out = respond(&request(widget(json!({}))), "widgets", answer).unwrap();
        let response = &out["response"];
        assert_eq!(out["kind"], "AdmissionReview");
        assert_eq!(response["uid"], "u-1");
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 422);
        assert_eq!(response["status"]["reason"], "Invalid");
        assert_eq!(response["status"]["message"], "too big");
        assert_eq!(
            response["status"]["details"]["causes"][0],
            json!({"reason": "FieldValueInvalid", "message": "must be at most 10", "field": "spec.size"})
        );
        assert_eq!(response["warnings"], json!(["careful"]));
    }

    #[test]
    fn a_mutation_is_a_base64_json_patch_of_the_difference() {
        use base64::Engine as _;
        let req = request(widget(json!({"a": "1"})));
        let wanted = widget(json!({"a": "1", "tier": "standard"}));
        let answer = Answer::Mutated(Mutation {
            object: Some(wanted.to_string()),
            denied: None,
            warnings: vec![],
        });
        let out = respond(&req, "widgets", answer).unwrap();
        let response = &out["response"];
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(response["patch"].as_str().unwrap())
            .unwrap();
        let patch: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/metadata/labels/tier", "value": "standard"}])
        );
        let same = Answer::Mutated(Mutation {
            object: Some(widget(json!({"a": "1"})).to_string()),
            denied: None,
            warnings: vec![],
        });
        let out = respond(&req, "widgets", same).unwrap();
        assert!(out["response"].get("patch").is_none());
    }
}
