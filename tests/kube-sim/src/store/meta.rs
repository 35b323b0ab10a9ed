//! Metadata checks and small helpers of the store: names, generated
//! suffixes, change detection, continue tokens.

use super::*;

/// Type checks of `metadata` the apiserver's decoder and validation do:
/// wrong JSON types → 400, invalid labels or owner references → 422.
pub(super) fn validate_meta(res: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let Some(m) = obj.get("metadata") else {
        return Ok(());
    };
    let bad = |field: &str, want: &str| {
        ApiError::bad_request(format!(
            "json: cannot unmarshal into Go struct field ObjectMeta.metadata.{field} of type {want}"
        ))
    };
    let Some(m) = m.as_object() else {
        return Err(bad("", "v1.ObjectMeta"));
    };
    let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
    for f in [
        "name",
        "generateName",
        "namespace",
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
    ] {
        if let Some(v) = m.get(f)
            && !v.is_string()
            && !v.is_null()
        {
            return Err(bad(f, "string"));
        }
    }
    for f in ["generation", "deletionGracePeriodSeconds"] {
        if let Some(v) = m.get(f)
            && !v.is_i64()
            && !v.is_null()
        {
            return Err(bad(f, "int64"));
        }
    }
    for f in ["labels", "annotations"] {
        match m.get(f) {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                if map.values().any(|v| !v.is_string()) {
                    return Err(bad(f, "string"));
                }
                for (k, v) in map {
                    let v = v.as_str().unwrap_or_default();
                    let key_ok = crate::selectors::valid_key(k);
                    let value_ok = f == "annotations" || crate::selectors::valid_value(v);
                    if !key_ok || !value_ok {
                        let msg = if key_ok {
                            format!(
                                "Invalid value: \"{v}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                            )
                        } else {
                            format!(
                                "Invalid value: \"{k}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                            )
                        };
                        return Err(ApiError::invalid_field(
                            res,
                            name,
                            &format!("metadata.{f}"),
                            msg,
                        ));
                    }
                }
            }
            Some(_) => return Err(bad(f, "map[string]string")),
        }
    }
    match m.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(_) => return Err(bad("finalizers", "[]string")),
    }
    match m.get("ownerReferences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(refs)) => {
            for (i, r) in refs.iter().enumerate() {
                let Some(r) = r.as_object() else {
                    return Err(bad("ownerReferences", "v1.OwnerReference"));
                };
                for f in ["apiVersion", "kind", "name", "uid"] {
                    match r.get(f) {
                        Some(Value::String(s)) if !s.is_empty() => {}
                        Some(Value::String(_)) | None | Some(Value::Null) => {
                            return Err(ApiError::invalid_field(
                                res,
                                name,
                                &format!("metadata.ownerReferences[{i}].{f}"),
                                "Invalid value: \"\": must not be empty".into(),
                            ));
                        }
                        Some(_) => return Err(bad("ownerReferences", "string")),
                    }
                }
                for f in ["controller", "blockOwnerDeletion"] {
                    if let Some(v) = r.get(f)
                        && !v.is_boolean()
                        && !v.is_null()
                    {
                        return Err(bad("ownerReferences", "bool"));
                    }
                }
            }
        }
        Some(_) => return Err(bad("ownerReferences", "[]v1.OwnerReference")),
    }
    Ok(())
}

/// DNS-1123 subdomain.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// DNS-1123 label.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

pub(super) const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
pub(super) const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

pub(super) fn validate_name(res: &ResourceInfo, name: &str) -> ApiResult<()> {
    let (ok, msg) = if res.kind == "Namespace" {
        (is_dns_label(name), LABEL_MSG)
    } else if res.group == "rbac.authorization.k8s.io" {
        (
            !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%']),
            "may not contain '/' or '%'",
        )
    } else {
        (is_dns_subdomain(name), SUBDOMAIN_MSG)
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            res,
            name,
            "metadata.name",
            format!("Invalid value: \"{name}\": {msg}"),
        ))
    }
}

/// Five characters of the apiserver's `generateName` alphabet.
pub(crate) fn random_suffix() -> String {
    generate_suffix()
}

pub(super) fn generate_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Whether anything outside metadata (and status, if `skip_status`) differs.
pub(super) fn spec_changed(old: &Value, new: &Value, skip_status: bool) -> bool {
    let (Some(a), Some(b)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let skip = |k: &str| {
        k == "metadata" || k == "apiVersion" || k == "kind" || (skip_status && k == "status")
    };
    let ak = a.keys().filter(|k| !skip(k));
    let bk = b.keys().filter(|k| !skip(k));
    if ak.clone().count() != bk.count() {
        return true;
    }
    ak.into_iter().any(|k| a.get(k) != b.get(k))
}

/// Whether two managedFields lists differ only in their `time` fields.
pub(super) fn same_but_times(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a.and_then(Value::as_array), b.and_then(Value::as_array)) {
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(e, f)| match (e.as_object(), f.as_object()) {
                        (Some(e), Some(f)) => {
                            e.iter().filter(|(k, _)| *k != "time").count()
                                == f.iter().filter(|(k, _)| *k != "time").count()
                                && e.iter().all(|(k, v)| k == "time" || f.get(k) == Some(v))
                        }
                        _ => e == f,
                    })
        }
        _ => a == b,
    }
}

/// Continue tokens: hex of `rv\nnamespace\nname`.
pub(super) fn encode_continue(rv: u64, key: &ObjKey) -> String {
    let raw = format!("{rv}\n{}\n{}", key.0, key.1);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn decode_continue(tok: &str) -> Option<(u64, ObjKey)> {
    if !tok.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..tok.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(tok.get(i..i + 2)?, 16).ok())
        .collect();
    let s = String::from_utf8(bytes?).ok()?;
    let mut parts = s.splitn(3, '\n');
    let rv = parts.next()?.parse().ok()?;
    let ns = parts.next()?.to_string();
    let name = parts.next()?.to_string();
    Some((rv, (ns, name)))
}
