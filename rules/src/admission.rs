//! What makes a plugin's admission rules valid, and the names the host and
//! `rekon webhooks` derive from them (the SDK's test kit checks the same).

/// The API server's bounds of a webhook's `timeoutSeconds`.
pub const TIMEOUT_SECONDS: std::ops::RangeInclusive<u32> = 1..=30;

/// The `timeoutSeconds` of a rule that gives none (the API server's default).
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 10;

/// What the rule check looks at, whatever the caller's types.
#[derive(Debug, Clone, Copy)]
pub struct RuleShape<'a> {
    /// The rule's name.
    pub name: &'a str,
    /// `true` for a mutating rule.
    pub mutating: bool,
    /// The plurals of its resources.
    pub plurals: &'a [&'a str],
    /// How many operations it admits.
    pub operations: usize,
    /// Its timeout, if given.
    pub timeout_seconds: Option<u32>,
    /// The names of its match conditions.
    pub condition_names: &'a [&'a str],
}

/// The problem of the first rule that breaks one: a name that is no DNS
/// label or is used twice for one kind, no resource, an empty plural, no
/// operation, a timeout outside 1..=30 s, an empty or repeated condition
/// name.
///
/// # Errors
/// What is wrong, naming the rule.
pub fn check_rules(rules: &[RuleShape<'_>]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for rule in rules {
        let name = rule.name;
        if !crate::registration::is_dns1035_label(name) {
            return Err(format!(
                "admission rule {name:?}: the name is not a DNS label (lowercase letters, digits and '-', at most 63)"
            ));
        }
        if !seen.insert((rule.mutating, name)) {
            return Err(format!("admission rule {name:?}: the name is used twice"));
        }
        if rule.plurals.is_empty() {
            return Err(format!("admission rule {name:?}: admits no resource"));
        }
        if rule.plurals.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "admission rule {name:?}: a resource has no plural (webhook rules name resources by plural)"
            ));
        }
        if rule.operations == 0 {
            return Err(format!("admission rule {name:?}: admits no operation"));
        }
        if let Some(t) = rule.timeout_seconds
            && !TIMEOUT_SECONDS.contains(&t)
        {
            return Err(format!(
                "admission rule {name:?}: timeout of {t} s is outside the API server's 1 to 30 s"
            ));
        }
        let mut conditions = std::collections::BTreeSet::new();
        for c in rule.condition_names {
            if c.is_empty() || !conditions.insert(*c) {
                return Err(format!(
                    "admission rule {name:?}: match condition names must be non-empty and unique ({c:?})"
                ));
            }
        }
    }
    Ok(())
}

/// The webhook's name in its configuration (what `kubectl` quotes in
/// `admission webhook "<name>" denied the request`): `<rule>.<plugin>.rekon.dev`.
#[must_use]
pub fn webhook_name(rule: &str, plugin: &str) -> String {
    format!("{rule}.{plugin}.rekon.dev")
}

/// The path the host serves a plugin's webhooks of one kind on.
#[must_use]
pub fn webhook_path(plugin: &str, mutating: bool) -> String {
    if mutating {
        format!("/mutate/{plugin}")
    } else {
        format!("/validate/{plugin}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule<'a>(name: &'a str, plurals: &'a [&'a str]) -> RuleShape<'a> {
        RuleShape {
            name,
            mutating: false,
            plurals,
            operations: 1,
            timeout_seconds: None,
            condition_names: &[],
        }
    }

    #[test]
    fn rules_are_checked_with_their_name() {
        assert_eq!(check_rules(&[rule("size", &["widgets"])]), Ok(()));
        assert!(
            check_rules(&[rule("Size", &["widgets"])])
                .unwrap_err()
                .contains("DNS label")
        );
        assert!(
            check_rules(&[rule("size", &[])])
                .unwrap_err()
                .contains("no resource")
        );
        assert!(
            check_rules(&[rule("size", &[""])])
                .unwrap_err()
                .contains("no plural")
        );
        let twice = [rule("size", &["widgets"]), rule("size", &["widgets"])];
        assert!(check_rules(&twice).unwrap_err().contains("used twice"));
        let mut mutating = rule("size", &["widgets"]);
        mutating.mutating = true;
        assert_eq!(check_rules(&[rule("size", &["widgets"]), mutating]), Ok(()));
        let mut slow = rule("size", &["widgets"]);
        slow.timeout_seconds = Some(31);
        assert!(check_rules(&[slow]).unwrap_err().contains("outside"));
        let mut none = rule("size", &["widgets"]);
        none.operations = 0;
        assert!(check_rules(&[none]).unwrap_err().contains("no operation"));
        let mut dup = rule("size", &["widgets"]);
        dup.condition_names = &["a", "a"];
        assert!(check_rules(&[dup]).unwrap_err().contains("unique"));
    }

    #[test]
    fn names_and_paths() {
        assert_eq!(webhook_name("size", "widgets"), "size.widgets.rekon.dev");
        assert_eq!(webhook_path("widgets", true), "/mutate/widgets");
        assert_eq!(webhook_path("widgets", false), "/validate/widgets");
    }
}
