//! Which of a plugin's webhooks the API server calls for a request, as
//! its webhook configuration (`rekon webhooks`) says: `rekon plugin admit`
//! and explore's oracle `own-writes-admitted` ask the same.

use crate::plugin::{AdmissionRule, Operation};

/// Whether the API server sends a request for `plural` (`plural/sub` for
/// a subresource) of `group` with `operation` to the webhook of `rule`:
/// its operations and resources (any version, as `matchPolicy:
/// Equivalent` does); match conditions (CEL) are not evaluated.
#[must_use]
pub fn rule_matches(rule: &AdmissionRule, group: &str, plural: &str, operation: Operation) -> bool {
    rule.operations.contains(&operation)
        && rule
            .resources
            .iter()
            .any(|t| t.group == group && t.plural == plural)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Resource, Scope};
    use crate::plugin::{AdmissionKind, FailurePolicy};

    #[test]
    fn group_plural_and_operation_match_any_version() {
        let rule = AdmissionRule {
            name: "size".into(),
            kind: AdmissionKind::Validate,
            resources: vec![Resource {
                group: "widgets.rekon.dev".into(),
                version: "v1".into(),
                kind: "Widget".into(),
                plural: "widgets".into(),
                scope: Scope::Namespaced,
            }],
            operations: vec![Operation::Create, Operation::Update],
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: None,
            match_conditions: Vec::new(),
        };
        assert!(rule_matches(
            &rule,
            "widgets.rekon.dev",
            "widgets",
            Operation::Create
        ));
        assert!(rule_matches(
            &rule,
            "widgets.rekon.dev",
            "widgets",
            Operation::Update
        ));
        assert!(!rule_matches(
            &rule,
            "widgets.rekon.dev",
            "widgets",
            Operation::Delete
        ));
        assert!(!rule_matches(
            &rule,
            "widgets.rekon.dev",
            "widgets/status",
            Operation::Update
        ));
        assert!(!rule_matches(&rule, "", "widgets", Operation::Create));
        assert!(!rule_matches(
            &rule,
            "widgets.rekon.dev",
            "gadgets",
            Operation::Create
        ));
    }
}
