//! What makes a plugin's CEL admission policies (`wit/policies.wit`) valid,
//! and the names the host and `rekon policies` derive from them (the SDK's
//! test kit checks the same). Whether their CEL compiles is
//! `cel::policy_problems` (feature `cel`).

/// What the policy check looks at, whatever the caller's types.
#[derive(Debug, Clone, Copy)]
pub struct PolicyShape<'a> {
    /// The policy's name.
    pub name: &'a str,
    /// The plurals of its resources.
    pub plurals: &'a [&'a str],
    /// How many operations it applies to.
    pub operations: usize,
    /// The names of its match conditions.
    pub condition_names: &'a [&'a str],
    /// How many validations it has.
    pub validations: usize,
}

/// The problem of the first policy that breaks one: a name that is no DNS
/// label or is used twice, no resource, an empty plural, no operation, no
/// validation, an empty or repeated condition name.
///
/// # Errors
/// What is wrong, naming the policy.
pub fn check_policies(policies: &[PolicyShape<'_>]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for policy in policies {
        let name = policy.name;
        if !crate::registration::is_dns1035_label(name) {
            return Err(format!(
                "policy {name:?}: the name is not a DNS label (lowercase letters, digits and '-', at most 63)"
            ));
        }
        if !seen.insert(name) {
            return Err(format!("policy {name:?}: the name is used twice"));
        }
        if policy.plurals.is_empty() {
            return Err(format!("policy {name:?}: applies to no resource"));
        }
        if policy.plurals.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "policy {name:?}: a resource has no plural (policy rules name resources by plural)"
            ));
        }
        if policy.operations == 0 {
            return Err(format!("policy {name:?}: applies to no operation"));
        }
        if policy.validations == 0 {
            return Err(format!("policy {name:?}: has no validation"));
        }
        let mut conditions = std::collections::BTreeSet::new();
        for c in policy.condition_names {
            if c.is_empty() {
                return Err(format!("policy {name:?}: a match condition has no name"));
            }
            if !conditions.insert(*c) {
                return Err(format!(
                    "policy {name:?}: the match condition name {c:?} is used twice"
                ));
            }
        }
    }
    Ok(())
}

/// The name of a policy's ValidatingAdmissionPolicy and of its binding:
/// `<policy>.<plugin>.rekon.dev`.
#[must_use]
pub fn policy_object_name(policy: &str, plugin: &str) -> String {
    format!("{policy}.{plugin}.rekon.dev")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape<'a>(name: &'a str, conditions: &'a [&'a str]) -> PolicyShape<'a> {
        PolicyShape {
            name,
            plurals: &["widgets"],
            operations: 1,
            condition_names: conditions,
            validations: 1,
        }
    }

    #[test]
    fn good_policies_pass_and_each_rule_is_named() {
        assert_eq!(
            check_policies(&[shape("size", &["a"]), shape("name", &[])]),
            Ok(())
        );
        assert!(
            check_policies(&[shape("Size", &[])])
                .unwrap_err()
                .contains("not a DNS label")
        );
        assert!(
            check_policies(&[shape("a", &[]), shape("a", &[])])
                .unwrap_err()
                .contains("used twice")
        );
        assert!(
            check_policies(&[shape("a", &["x", "x"])])
                .unwrap_err()
                .contains("\"x\" is used twice")
        );
        let mut none = shape("a", &[]);
        none.validations = 0;
        assert!(
            check_policies(&[none])
                .unwrap_err()
                .contains("no validation")
        );
        none = shape("a", &[]);
        none.plurals = &[""];
        assert!(check_policies(&[none]).unwrap_err().contains("no plural"));
        none = shape("a", &[]);
        none.operations = 0;
        assert!(
            check_policies(&[none])
                .unwrap_err()
                .contains("no operation")
        );
        assert_eq!(
            policy_object_name("size", "widgets"),
            "size.widgets.rekon.dev"
        );
    }
}
