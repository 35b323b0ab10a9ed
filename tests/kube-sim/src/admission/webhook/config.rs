//! Validation of MutatingWebhookConfiguration and
//! ValidatingWebhookConfiguration writes, as the server's
//! `ValidateMutatingWebhookConfiguration` / `ValidateValidatingWebhookConfiguration`
//! (admissionregistration/validation) for admissionregistration.k8s.io/v1,
//! the checks a configuration copied from a chart or a tutorial trips.

use std::collections::HashSet;

use serde_json::Value;

/// `(reason, field, message)` per error, in the server's order.
pub(crate) fn validate(obj: &Value, mutating: bool) -> Vec<(&'static str, String, String)> {
    let mut errs = Vec::new();
    let Some(hooks) = obj.get("webhooks").and_then(Value::as_array) else {
        return errs;
    };
    let mut names = HashSet::new();
    for (i, h) in hooks.iter().enumerate() {
        let f = |k: &str| format!("webhooks[{i}].{k}");
        let s = |k: &str| h.get(k).and_then(Value::as_str);
        match s("name") {
            None | Some("") => {
                errs.push(("FieldValueRequired", f("name"), "Required value".into()))
            }
            Some(n) => {
                if !names.insert(n.to_string()) {
                    errs.push((
                        "FieldValueDuplicate",
                        f("name"),
                        format!("Duplicate value: \"{n}\""),
                    ));
                }
                if n.split('.').filter(|p| !p.is_empty()).count() < 3 {
                    errs.push((
                        "FieldValueInvalid",
                        f("name"),
                        format!(
                            "Invalid value: \"{n}\": should be a domain with at least three segments separated by dots"
                        ),
                    ));
                }
            }
        }
        let mut enum_check = |k: &str, allowed: &[&str]| {
            if let Some(v) = s(k)
                && !allowed.contains(&v)
            {
                let list = allowed
                    .iter()
                    .map(|a| format!("\"{a}\""))
                    .collect::<Vec<_>>()
                    .join(", ");
                errs.push((
                    "FieldValueNotSupported",
                    f(k),
                    format!("Unsupported value: \"{v}\": supported values: {list}"),
                ));
            }
        };
        enum_check("failurePolicy", &["Fail", "Ignore"]);
        enum_check("matchPolicy", &["Equivalent", "Exact"]);
        if mutating {
            enum_check("reinvocationPolicy", &["IfNeeded", "Never"]);
        }
        match s("sideEffects") {
            None => errs.push((
                "FieldValueRequired",
                f("sideEffects"),
                "Required value: must specify one of None, NoneOnDryRun".into(),
            )),
            Some("None" | "NoneOnDryRun") => {}
            Some(other) => errs.push((
                "FieldValueNotSupported",
                f("sideEffects"),
                format!(
                    "Unsupported value: \"{other}\": supported values: \"None\", \"NoneOnDryRun\""
                ),
            )),
        }
        if let Some(t) = h.get("timeoutSeconds").and_then(Value::as_i64)
            && !(1..=30).contains(&t)
        {
            errs.push((
                "FieldValueInvalid",
                f("timeoutSeconds"),
                format!("Invalid value: {t}: the timeout value must be between 1 and 30 seconds"),
            ));
        }
        let cc = h.get("clientConfig");
        let url = cc.and_then(|c| c.get("url")).and_then(Value::as_str);
        let service = cc.and_then(|c| c.get("service")).filter(|s| s.is_object());
        match (url, service) {
            (Some(_), Some(_)) | (None, None) => errs.push((
                "FieldValueRequired",
                f("clientConfig"),
                "Required value: exactly one of url or service is required".into(),
            )),
            (Some(u), None) if !u.starts_with("https://") => errs.push((
                "FieldValueInvalid",
                f("clientConfig.url"),
                format!(
                    "Invalid value: \"{}\": 'https' is the only allowed URL scheme",
                    u.split_once("://").map_or("", |(scheme, _)| scheme)
                ),
            )),
            _ => {}
        }
        let versions = h
            .get("admissionReviewVersions")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if !versions {
            errs.push((
                "FieldValueRequired",
                f("admissionReviewVersions"),
                "Required value: must specify one of v1, v1beta1".into(),
            ));
        }
    }
    errs
}
