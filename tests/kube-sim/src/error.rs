//! Kubernetes API errors (`metav1.Status`) with the reasons, codes and
//! messages the real apiserver uses (contract section 8).

use serde_json::{Map, Value, json};

use crate::resources::ResourceInfo;

/// An error answered as a `metav1.Status` body.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message} ({reason}, {code})")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason`, e.g. `NotFound`.
    pub reason: String,
    /// Human readable message.
    pub message: String,
    /// `details`, when the reason carries them.
    pub details: Option<Box<Value>>,
    /// `Retry-After` header in seconds (429, 503).
    pub retry_after: Option<u64>,
    /// `Warning` headers sent with the error (admission webhooks' and the
    /// write's own, as the server's warning recorder sends them).
    pub warnings: Vec<String>,
}

/// Result alias for API operations.
pub type ApiResult<T> = Result<T, ApiError>;

fn gr_details(res: &ResourceInfo, name: &str) -> Value {
    let mut d = Map::new();
    d.insert("name".into(), Value::String(name.to_string()));
    if !res.group.is_empty() {
        d.insert("group".into(), Value::String(res.group.clone()));
    }
    d.insert("kind".into(), Value::String(res.plural.clone()));
    Value::Object(d)
}

/// `plural` or `plural.group` as the apiserver prints a group resource.
pub(crate) fn qualified(res: &ResourceInfo) -> String {
    if res.group.is_empty() {
        res.plural.clone()
    } else {
        format!("{}.{}", res.plural, res.group)
    }
}

impl ApiError {
    /// Builds an error from its parts.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
            retry_after: None,
            warnings: Vec::new(),
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// 404 `configmaps "b" not found`.
    pub fn not_found(res: &ResourceInfo, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(res)),
        )
        .with_details(gr_details(res, name))
    }

    /// 404 for a missing namespace.
    pub fn namespace_not_found(ns: &str) -> Self {
        Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    /// 404 for a path that names nothing.
    pub fn unknown_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 `configmaps "a" already exists`.
    pub fn already_exists(res: &ResourceInfo, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(res)),
        )
        .with_details(gr_details(res, name))
    }

    /// 409 optimistic-concurrency conflict.
    pub fn conflict(res: &ResourceInfo, name: &str) -> Self {
        Self::conflict_msg(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 conflict with a custom tail message.
    pub fn conflict_msg(res: &ResourceInfo, name: &str, msg: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {msg}",
                qualified(res)
            ),
        )
        .with_details(gr_details(res, name))
    }

    /// 409 conflict with fully custom message and details (server-side apply).
    pub fn conflict_raw(message: String, details: Value) -> Self {
        Self::new(409, "Conflict", message).with_details(details)
    }

    /// 422 Invalid with one `FieldValueInvalid`-style cause per entry
    /// `(cause_reason, field, message)`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: &[(&str, String, String)]) -> Self {
        // The wording is shared with the SDK's test kit.
        let message = rekon_rules::cel::crd_rules::invalid_message(kind, group, name, causes);
        let causes: Vec<Value> = causes
            .iter()
            .map(|(reason, field, msg)| json!({"reason": reason, "message": msg, "field": field}))
            .collect();
        let mut d = Map::new();
        d.insert("name".into(), Value::String(name.to_string()));
        d.insert("group".into(), Value::String(group.to_string()));
        d.insert("kind".into(), Value::String(kind.to_string()));
        d.insert("causes".into(), Value::Array(causes));
        Self::new(422, "Invalid", message).with_details(Value::Object(d))
    }

    /// 422 Invalid for a single field of a resource's object.
    pub fn invalid_field(res: &ResourceInfo, name: &str, field: &str, msg: String) -> Self {
        Self::invalid(
            &res.kind,
            &res.group,
            name,
            &[("FieldValueInvalid", field.to_string(), msg)],
        )
    }

    /// 422 with reason Invalid and a free-form message (patch failures).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 403 Forbidden.
    pub fn forbidden(res: &ResourceInfo, name: &str, msg: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {msg}", qualified(res)),
        )
        .with_details(gr_details(res, name))
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml (requested {accept})"
            ),
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {ct})"
            ),
        )
    }

    /// 410 Expired.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    /// An error with an arbitrary HTTP code and the reason the apiserver
    /// uses for it (fault injection).
    pub fn for_code(code: u16, message: Option<String>, retry_after: Option<u64>) -> Self {
        let (reason, default_msg) = match code {
            400 => ("BadRequest", "bad request (injected)"),
            401 => ("Unauthorized", "Unauthorized"),
            403 => ("Forbidden", "forbidden (injected)"),
            404 => (
                "NotFound",
                "the server could not find the requested resource",
            ),
            405 => ("MethodNotAllowed", "method not allowed"),
            409 => (
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
            ),
            410 => ("Expired", "expired (injected)"),
            422 => ("Invalid", "invalid (injected)"),
            429 => (
                "TooManyRequests",
                "Too many requests, please try again later.",
            ),
            500 => ("InternalError", "Internal error occurred: injected fault"),
            503 => (
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => (
                "Timeout",
                "the server was unable to return a response in the time allotted",
            ),
            _ => ("InternalError", "injected fault"),
        };
        let mut e = Self::new(
            code,
            reason,
            message.unwrap_or_else(|| default_msg.to_string()),
        );
        if let Some(secs) = retry_after {
            e.details = Some(Box::new(json!({"retryAfterSeconds": secs})));
            e.retry_after = Some(secs);
        }
        e
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), "Status".into());
        m.insert("apiVersion".into(), "v1".into());
        m.insert("metadata".into(), json!({}));
        m.insert("status".into(), "Failure".into());
        m.insert("message".into(), Value::String(self.message.clone()));
        // Go omits an empty reason (an error that is not a StatusError).
        if !self.reason.is_empty() {
            m.insert("reason".into(), Value::String(self.reason.clone()));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), (**d).clone());
        }
        m.insert("code".into(), Value::from(self.code));
        Value::Object(m)
    }
}
