//! Label selectors in kube-core's model, for the cache's label index.
//!
//! The string syntax is parsed by [`rekon_rules::selector`], the one parser
//! the host and the SDK's test kit share; this module converts the result to
//! [`kube::core::Selector`] (matching, `selects_all`) and extracts the pairs
//! an index can answer.

use kube::core::{Expression, Selector};
use rekon_rules::selector::{LabelSelector, Requirement};

pub use rekon_rules::ParseError;

/// Parse a label selector in the Kubernetes string syntax.
///
/// # Errors
/// When the string is not a valid selector.
pub fn parse(selector: &str) -> Result<Selector, ParseError> {
    LabelSelector::parse(selector).map(|s| to_kube(&s))
}

/// The same selector in kube-core's model.
#[must_use]
pub fn to_kube(selector: &LabelSelector) -> Selector {
    let mut sel = Selector::default();
    sel.extend(selector.requirements.iter().map(|r| match r.clone() {
        Requirement::Equals(k, v) => Expression::Equal(k, v),
        Requirement::NotEquals(k, v) => Expression::NotEqual(k, v),
        Requirement::Exists(k) => Expression::Exists(k),
        Requirement::NotExists(k) => Expression::DoesNotExist(k),
        Requirement::In(k, vs) => Expression::In(k, vs),
        Requirement::NotIn(k, vs) => Expression::NotIn(k, vs),
    }));
    sel
}

/// The label keys a selector requires to be present (`k`, `k=v`, `k in (…)`),
/// usable with a label-key index.
#[must_use]
pub fn required_keys(sel: &Selector) -> Vec<String> {
    sel.clone()
        .into_iter()
        .filter_map(|e| match e {
            Expression::Exists(k) | Expression::Equal(k, _) | Expression::In(k, _) => Some(k),
            _ => None,
        })
        .collect()
}

/// The `key=value` pairs a selector requires (usable with a label index).
#[must_use]
pub fn required_pairs(sel: &Selector) -> Vec<(String, String)> {
    sel.clone()
        .into_iter()
        .filter_map(|e| match e {
            Expression::Equal(k, v) => Some((k, v)),
            Expression::In(k, vs) if vs.len() == 1 => vs.into_iter().next().map(|v| (k, v)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::SelectorExt;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn kube_model_matches_like_the_shared_rule() {
        let text = "app=web, tier in (a,b), !legacy, env!=prod, owner.name, x notin (1)";
        let shared = LabelSelector::parse(text).unwrap();
        let kube = parse(text).unwrap();
        for l in [
            labels(&[("app", "web"), ("tier", "a"), ("owner.name", "x")]),
            labels(&[("app", "web"), ("tier", "c"), ("owner.name", "x")]),
            labels(&[
                ("app", "web"),
                ("tier", "a"),
                ("owner.name", "x"),
                ("legacy", "1"),
            ]),
            labels(&[
                ("app", "web"),
                ("tier", "b"),
                ("owner.name", "x"),
                ("env", "prod"),
            ]),
            labels(&[
                ("app", "web"),
                ("tier", "b"),
                ("owner.name", "x"),
                ("x", "1"),
            ]),
        ] {
            assert_eq!(kube.matches(&l), shared.matches(&l), "{l:?}");
        }
        assert!(parse("").unwrap().selects_all());
        assert!(parse("a,,b").is_err());
    }

    #[test]
    fn required_pairs_feed_the_index() {
        let sel = parse("a=1,b in (2),c in (3,4),!d").unwrap();
        assert_eq!(
            required_pairs(&sel),
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );
    }
}
