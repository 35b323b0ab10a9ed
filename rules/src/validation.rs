//! Kubernetes' validation of label keys and values, worded as the API
//! server words it.
//!
//! A port of `k8s.io/apimachinery/pkg/util/validation` (`IsQualifiedName`,
//! `IsValidLabelValue`, `IsDNS1123Subdomain`) and of `field.Error`'s
//! rendering (`spec.labels[x]: Invalid value: "x": ...`). It is written
//! here because no crate in the tree has it: `k8s-openapi` carries the
//! types only, `kube-core` and `kube-cel` no label validation (kube-cel
//! evaluates CEL, where a label rule would have to be a regex without the
//! API server's messages). Each message is the API server's to the
//! character (including its doubled space after each example), so a
//! webhook's denial reads like the API server's own.
//!
//! ```
//! use rekon_rules::validation::{is_qualified_name, is_valid_label_value};
//! assert!(is_qualified_name("example.com/gpu").is_empty());
//! assert_eq!(
//!     is_qualified_name("-bad"),
//!     ["name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]
//! );
//! assert!(is_valid_label_value("").is_empty());
//! assert_eq!(is_valid_label_value(&"a".repeat(64))[0], "must be no more than 63 characters");
//! ```

/// The longest name part of a qualified name (and a label value).
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// The longest DNS-1123 subdomain (a qualified name's prefix).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// apimachinery's `MaxLenError`.
fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// apimachinery's `RegexError`: the message, the examples (each followed
/// by `', '` and joined with `" or "`, hence the doubled space) and the regex.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        examples.join(" or ")
    )
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, non-empty.
fn matches_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    alnum(bytes.first())
        && alnum(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` joined by `.`.
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let bytes = label.as_bytes();
        let lower_alnum =
            |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        lower_alnum(bytes.first())
            && lower_alnum(bytes.last())
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    })
}

/// Why `value` is not a DNS-1123 subdomain (apimachinery's
/// `IsDNS1123Subdomain`); empty when it is.
#[must_use]
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Why `value` is not a qualified name (apimachinery's `IsQualifiedName`:
/// an optional DNS-1123 subdomain prefix of at most 253 and `/`, then a
/// name of 1 to 63 of `[A-Za-z0-9-_.]` starting and ending alphanumeric);
/// empty when it is. Label keys, taint keys, annotation keys and
/// finalizers are qualified names.
#[must_use]
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Why `value` is not a label value (apimachinery's `IsValidLabelValue`:
/// empty, or at most 63 of `[A-Za-z0-9-_.]` starting and ending
/// alphanumeric); empty when it is. Taint values are label values too.
#[must_use]
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(max_len_error(QUALIFIED_NAME_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// One field error as the API server renders it (`field.Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path: `spec.labels[team]`, `spec.taints[0].effect`.
    pub field: String,
    /// What is wrong, without the path: `Invalid value: "x": ...`.
    pub body: String,
}

impl FieldError {
    /// `field.Invalid(path, value, detail)`: `Invalid value: "value": detail`.
    #[must_use]
    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        Self {
            field: field.into(),
            body: format!("Invalid value: {}: {detail}", quote(value)),
        }
    }

    /// `field.NotSupported(path, value, supported)`:
    /// `Unsupported value: "value": supported values: "a", "b"`.
    #[must_use]
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let supported: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        Self {
            field: field.into(),
            body: format!(
                "Unsupported value: {}: supported values: {}",
                quote(value),
                supported.join(", ")
            ),
        }
    }

    /// `field.Required(path, detail)`: `Required value` (`: detail` when given).
    #[must_use]
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            body: if detail.is_empty() {
                "Required value".to_owned()
            } else {
                format!("Required value: {detail}")
            },
        }
    }

    /// `field.Forbidden(path, detail)`: `Forbidden: detail`.
    #[must_use]
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            field: field.into(),
            body: format!("Forbidden: {detail}"),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body)
    }
}

/// Go's `%q` of a string, as far as label keys and values need it: in
/// double quotes, `"` and `\` escaped.
fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// A map key in a field path, as apimachinery's `field.Path.Key` renders it:
/// `spec.labels[team]`.
#[must_use]
pub fn key_path(parent: &str, key: &str) -> String {
    format!("{parent}[{key}]")
}

/// The API server's message for an invalid object
/// (`apierrors.NewInvalid`): `Kind.group "name" is invalid: <error>`, or
/// `... is invalid: [<error>, <error>]` for several.
#[must_use]
pub fn invalid_message(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> String {
    let qualified = if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    };
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let body = match rendered.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", rendered.join(", ")),
    };
    format!("{qualified} {name:?} is invalid: {body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_as_apimachinery_tests_them() {
        // apimachinery's TestIsQualifiedName cases.
        for good in [
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "1234",
            "simple/simple",
            "now-with-dashes/simple",
            "now-with-dashes/now-with-dashes",
            "now.with.dots/now-with-dashes",
            "now-with.dashes-and.dots/now_with.dashes-and.dots",
            "1-num.2-num/3-num",
            "1234/5678",
            "1.2.3.4/5678",
            "Uppercase_Is_OK_123",
            "example.com/Uppercase_Is_OK_123",
            "requests.storage-foo",
            &"a".repeat(63),
            &format!("{}/b", "a".repeat(253)),
        ] {
            assert!(is_qualified_name(good).is_empty(), "{good}");
        }
        for bad in [
            "nospecialchars%^=@",
            "cantendwithadash-",
            "-cantstartwithadash-",
            "only/one/slash",
            "Example.com/abc",
            "example_com/abc",
            "example.com/",
            "/simple",
            &"a".repeat(64),
            &format!("{}/b", "a".repeat(254)),
        ] {
            assert!(!is_qualified_name(bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn the_messages_are_the_api_servers() {
        assert_eq!(is_qualified_name("/x"), ["prefix part must be non-empty"]);
        assert_eq!(
            is_qualified_name("Example.com/x"),
            [
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert_eq!(
            is_qualified_name("a/b/c")[0],
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        );
        let long = is_qualified_name(&"a".repeat(64));
        assert_eq!(long, ["name part must be no more than 63 characters"]);
        assert_eq!(
            is_qualified_name("x/"),
            [
                "name part must be non-empty",
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
        assert_eq!(
            is_valid_label_value("-x"),
            [
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ]
        );
        for good in [
            "",
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "end-with-num-1",
            "1234",
            &"a".repeat(63),
        ] {
            assert!(is_valid_label_value(good).is_empty(), "{good}");
        }
        for bad in [
            "nospecialchars%^=@",
            "Tama-nui-te-rā.is.Māori.sun",
            "\\backslashes",
            "-starts-with-dash",
            "ends-with-dash-",
            ".starts.with.dot",
            "ends.with.dot.",
        ] {
            assert!(!is_valid_label_value(bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn field_errors_render_as_field_error_does() {
        let effect = FieldError::not_supported(
            "spec.taints[0].effect",
            "Sometimes",
            &["NoSchedule", "PreferNoSchedule", "NoExecute"],
        );
        assert_eq!(
            effect.to_string(),
            r#"spec.taints[0].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#
        );
        let key = FieldError::invalid(key_path("spec.labels", "a b"), "a b", "bad");
        assert_eq!(
            key.to_string(),
            r#"spec.labels[a b]: Invalid value: "a b": bad"#
        );
        assert_eq!(
            invalid_message(
                "NodePool",
                "nodes.lailin.xyz",
                "gpu",
                std::slice::from_ref(&effect)
            ),
            r#"NodePool.nodes.lailin.xyz "gpu" is invalid: spec.taints[0].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#
        );
        let both = invalid_message("NodePool", "nodes.lailin.xyz", "gpu", &[effect, key]);
        assert!(
            both.starts_with(
                r#"NodePool.nodes.lailin.xyz "gpu" is invalid: [spec.taints[0].effect: "#
            ),
            "{both}"
        );
        assert!(both.ends_with(r#"Invalid value: "a b": bad]"#), "{both}");
        assert_eq!(
            FieldError::required("spec.taints[0].effect", "").body,
            "Required value"
        );
    }
}
