//! One ConversionReview (`apiextensions.k8s.io/v1`, kube's types) answered
//! by one plugin: every object converted by the plugin's `convert` in its
//! own fresh sandbox, each result checked as the API server checks it
//! (the desired apiVersion; the same kind, name, namespace and uid), and
//! the review answered `Success` with the objects in order, or `Failure`
//! with a message the API server shows after `conversion webhook for
//! <gvk> failed: `.

use std::sync::Arc;

use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::Value;

use crate::plugin::{HostReads, LoadedPlugin};

/// Why a body is not a review this server can answer.
#[derive(Debug, thiserror::Error)]
pub enum ConversionReviewError {
    /// Not JSON of a ConversionReview.
    #[error("failed to parse the ConversionReview: {0}")]
    Parse(#[source] serde_json::Error),
    /// A ConversionReview without a request.
    #[error("the ConversionReview has no request")]
    NoRequest,
}

/// The request of a ConversionReview body.
///
/// # Errors
/// When the body is no ConversionReview with a request.
pub fn parse(body: &[u8]) -> Result<ConversionRequest, ConversionReviewError> {
    let review: ConversionReview =
        serde_json::from_slice(body).map_err(ConversionReviewError::Parse)?;
    ConversionRequest::try_from(review).map_err(|_| ConversionReviewError::NoRequest)
}

/// How a review ended (`rekon_admission_verdicts_total{kind="convert"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every object converted.
    Converted,
    /// The plugin refused an object (its `convert` returned an error), or
    /// returned one the API server would refuse.
    Refused,
    /// The call failed (trap, timeout, memory, backed off) or the plugin
    /// converts nothing of the review.
    Failed,
}

impl Outcome {
    /// The metric label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Converted => "converted",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
        }
    }
}

/// `namespace/name` (or `name`) of an object, for messages.
fn object_name(object: &Value) -> String {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
    match text("/metadata/namespace") {
        "" => text("/metadata/name").to_owned(),
        ns => format!("{ns}/{}", text("/metadata/name")),
    }
}

fn identity(object: &Value) -> rekon_rules::conversion::Identity<'_> {
    rekon_rules::conversion::Identity::read(|p| object.pointer(p).and_then(Value::as_str))
}

/// One object converted by `plugin`, or why not (and how it ended).
async fn convert_one(
    plugin: &LoadedPlugin,
    object: Value,
    desired: &str,
    reads: Arc<dyn HostReads>,
) -> Result<Value, (Outcome, String)> {
    let name = plugin.name();
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let rules = plugin.conversion_rules();
    if rules.is_empty() {
        return Err((Outcome::Failed, format!("plugin {name} converts no CRD")));
    }
    if !rules
        .iter()
        .any(|r| r.covers(api_version, kind) && r.covers(desired, kind))
    {
        return Err((
            Outcome::Failed,
            format!("plugin {name} does not convert {kind} from {api_version} to {desired}"),
        ));
    }
    if api_version == desired {
        return Ok(object);
    }
    let what = object_name(&object);
    let text = match plugin
        .convert(object.to_string(), desired.to_owned(), reads)
        .await
    {
        Ok(Ok(text)) => text,
        Ok(Err(message)) => {
            return Err((
                Outcome::Refused,
                format!("plugin {name} refused to convert {kind} {what} to {desired}: {message}"),
            ));
        }
        Err(e) => {
            return Err((
                Outcome::Failed,
                format!("conversion by plugin {name} failed: {e}"),
            ));
        }
    };
    let converted: Value = serde_json::from_str(&text).map_err(|e| {
        (
            Outcome::Refused,
            format!("plugin {name} converted {kind} {what} to text that is not JSON: {e}"),
        )
    })?;
    rekon_rules::conversion::check_converted(&identity(&object), &identity(&converted), desired)
        .map_err(|reason| {
            (
                Outcome::Refused,
                format!(
                    "plugin {name} converted {kind} {what} to an object the API server refuses: {reason}"
                ),
            )
        })?;
    Ok(converted)
}

/// The answer to `request` by the plugin `name` (`None`: none of that name
/// is loaded, a failure saying so), as the review JSON to send, and how it
/// ended.
pub async fn answer(
    request: ConversionRequest,
    name: &str,
    plugin: Option<&LoadedPlugin>,
    reads: impl Fn(&LoadedPlugin) -> Arc<dyn HostReads>,
) -> (Value, Outcome) {
    let desired = request.desired_api_version.clone();
    let objects = request.objects.clone();
    let response = ConversionResponse::for_request(request);
    let failure = |response: ConversionResponse, message: String| {
        response.failure(Status::failure(&message, ""))
    };
    let (response, outcome) = match plugin {
        None => (
            failure(response, format!("no plugin {name} is loaded")),
            Outcome::Failed,
        ),
        Some(plugin) => {
            let mut converted = Vec::with_capacity(objects.len());
            let mut error = None;
            for object in objects {
                match convert_one(plugin, object, &desired, reads(plugin)).await {
                    Ok(o) => converted.push(o),
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            match error {
                None => (response.success(converted), Outcome::Converted),
                Some((outcome, message)) => (failure(response, message), outcome),
            }
        }
    };
    let json = serde_json::to_value(response.into_review())
        .expect("a ConversionReview serializes to JSON");
    (json, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_review_is_read_with_kubes_types() {
        let body = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u-1", "desiredAPIVersion": "widgets.rekon.dev/v1",
                        "objects": [{"apiVersion": "widgets.rekon.dev/v1alpha1", "kind": "Widget",
                                     "metadata": {"name": "w", "namespace": "default"}}]}
        });
        let request = parse(body.to_string().as_bytes()).unwrap();
        assert_eq!(request.uid, "u-1");
        assert_eq!(request.desired_api_version, "widgets.rekon.dev/v1");
        assert_eq!(object_name(&request.objects[0]), "default/w");
        assert!(matches!(
            parse(br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}"#),
            Err(ConversionReviewError::NoRequest)
        ));
        assert!(matches!(parse(b"{"), Err(ConversionReviewError::Parse(_))));
    }

    #[tokio::test]
    async fn no_plugin_is_a_failure_with_the_servers_uid_and_types() {
        let request = parse(
            json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": "u-2", "desiredAPIVersion": "widgets.rekon.dev/v1", "objects": []}
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let (out, outcome) = answer(request, "widgets", None, |_| {
            Arc::new(crate::plugin::NoReads)
        })
        .await;
        assert_eq!(outcome, Outcome::Failed);
        assert_eq!(out["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(out["kind"], "ConversionReview");
        assert_eq!(out["response"]["uid"], "u-2");
        assert_eq!(out["response"]["result"]["status"], "Failure");
        assert_eq!(
            out["response"]["result"]["message"],
            "no plugin widgets is loaded"
        );
    }
}
