//! Rules of the declarative mappings.

/// Why a `label-key-prefixes` mapping is invalid, if it is: it needs at
/// least one prefix, and an empty prefix would make every label key name a
/// primary.
///
/// ```
/// use rekon_rules::mapping::label_key_prefixes_problem;
/// assert_eq!(label_key_prefixes_problem(&["node-role.kubernetes.io/"]), None);
/// assert!(label_key_prefixes_problem(&[""]).is_some());
/// assert!(label_key_prefixes_problem::<&str>(&[]).is_some());
/// ```
#[must_use]
pub fn label_key_prefixes_problem<S: AsRef<str>>(prefixes: &[S]) -> Option<String> {
    if prefixes.is_empty() {
        return Some("a label-key-prefixes mapping needs at least one prefix".to_owned());
    }
    if prefixes.iter().any(|p| p.as_ref().is_empty()) {
        return Some("an empty label key prefix would map every label to a primary".to_owned());
    }
    None
}
