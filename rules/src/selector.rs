//! Kubernetes label selector strings (`a=b,c in (d,e),!f`): parsing and
//! matching.
//!
//! Hand-written because kube-core has the selector *model* and matching but
//! no parser for the string syntax, and the SDK (compiled to wasm) should not
//! pull in kube's client stack for it. The host uses this model everywhere
//! (watch selectors, `list`, its label indexes), so host and test kit match
//! labels with the same code.
//!
//! ```
//! use std::collections::BTreeMap;
//! use rekon_rules::LabelSelector;
//! let sel: LabelSelector = "app=web,tier in (a,b),!legacy".parse().unwrap();
//! let labels = BTreeMap::from([("app".to_owned(), "web".to_owned()), ("tier".to_owned(), "a".to_owned())]);
//! assert!(sel.matches(&labels));
//! assert!("a in (b".parse::<LabelSelector>().is_err());
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

/// A selector string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The selector.
    pub selector: String,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "failed to parse label selector {:?}: {}",
            self.selector, self.reason
        )
    }
}

impl std::error::Error for ParseError {}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` or `key==value`.
    Equals(String, String),
    /// `key!=value` (also true when the label is absent).
    NotEquals(String, String),
    /// `key`.
    Exists(String),
    /// `!key`.
    NotExists(String),
    /// `key in (a,b)`.
    In(String, BTreeSet<String>),
    /// `key notin (a,b)` (also true when the label is absent).
    NotIn(String, BTreeSet<String>),
}

impl Requirement {
    /// Whether labels (looked up with `get`) satisfy the requirement.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        match self {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.contains(v)),
        }
    }
}

/// A parsed label selector: every requirement must hold. Empty selects all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// The requirements, in the order written.
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parse a selector in the Kubernetes string syntax.
    ///
    /// # Errors
    /// When the string is not a valid selector.
    pub fn parse(selector: &str) -> Result<Self, ParseError> {
        let err = |reason: &str| ParseError {
            selector: selector.to_owned(),
            reason: reason.to_owned(),
        };
        let mut requirements = Vec::new();
        for term in split_terms(selector).map_err(err)? {
            let term = term.trim();
            if term.is_empty() {
                return Err(err("empty term"));
            }
            requirements.push(parse_term(term).map_err(|r| err(&r))?);
        }
        Ok(Self { requirements })
    }

    /// Whether it selects every object.
    #[must_use]
    pub fn selects_all(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether labels looked up with `get` match.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str> + Copy) -> bool {
        self.requirements.iter().all(|r| r.matches(get))
    }

    /// Whether `labels` match.
    #[must_use]
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// The label keys it requires to be present (`k`, `k=v`, `k in (…)`),
    /// usable with a label-key index.
    #[must_use]
    pub fn required_keys(&self) -> Vec<&str> {
        self.requirements
            .iter()
            .filter_map(|r| match r {
                Requirement::Exists(k) | Requirement::Equals(k, _) | Requirement::In(k, _) => {
                    Some(k.as_str())
                }
                _ => None,
            })
            .collect()
    }

    /// The `key=value` pairs it requires (usable with a label index).
    #[must_use]
    pub fn required_pairs(&self) -> Vec<(&str, &str)> {
        self.requirements
            .iter()
            .filter_map(|r| match r {
                Requirement::Equals(k, v) => Some((k.as_str(), v.as_str())),
                Requirement::In(k, vs) if vs.len() == 1 => {
                    vs.iter().next().map(|v| (k.as_str(), v.as_str()))
                }
                _ => None,
            })
            .collect()
    }
}

impl FromStr for LabelSelector {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Split at commas that are not inside parentheses.
fn split_terms(s: &str) -> Result<Vec<&str>, &'static str> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut terms = Vec::new();
    let mut depth = 0_i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced parentheses");
                }
            }
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses");
    }
    terms.push(&s[start..]);
    Ok(terms)
}

fn parse_term(term: &str) -> Result<Requirement, String> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::NotExists(valid_key(key.trim())?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(
            valid_key(k.trim())?,
            valid_value(v.trim())?,
        ));
    }
    if let Some((k, v)) = term.split_once("==") {
        return Ok(Requirement::Equals(
            valid_key(k.trim())?,
            valid_value(v.trim())?,
        ));
    }
    if let Some((k, v)) = term.split_once('=') {
        return Ok(Requirement::Equals(
            valid_key(k.trim())?,
            valid_value(v.trim())?,
        ));
    }
    // set-based: `key in (a,b)` / `key notin (a,b)`
    let mut parts = term.splitn(2, char::is_whitespace);
    let key = parts.next().unwrap_or_default();
    let rest = parts.next().unwrap_or_default().trim_start();
    if rest.is_empty() {
        return Ok(Requirement::Exists(valid_key(key)?));
    }
    let (op, set) = if let Some(set) = rest.strip_prefix("notin") {
        ("notin", set)
    } else if let Some(set) = rest.strip_prefix("in") {
        ("in", set)
    } else {
        return Err(format!("unknown operator in {term:?}"));
    };
    let set = set.trim();
    let inner = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("expected (values) after {op}"))?;
    let values = inner
        .split(',')
        .map(|v| valid_value(v.trim()))
        .collect::<Result<BTreeSet<_>, _>>()?;
    let key = valid_key(key)?;
    Ok(if op == "in" {
        Requirement::In(key, values)
    } else {
        Requirement::NotIn(key, values)
    })
}

fn valid_key(k: &str) -> Result<String, String> {
    let ok = !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(k.to_owned())
    } else {
        Err(format!("invalid label key {k:?}"))
    }
}

fn valid_value(v: &str) -> Result<String, String> {
    let ok = v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(v.to_owned())
    } else {
        Err(format!("invalid label value {v:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn parse(s: &str) -> Result<LabelSelector, ParseError> {
        LabelSelector::parse(s)
    }

    #[test]
    fn parses_and_matches_all_operators() {
        let sel = parse("app=web, tier in (a,b), !legacy, env!=prod, owner.name").unwrap();
        assert!(sel.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("owner.name", "x")
        ])));
        assert!(!sel.matches(&labels(&[
            ("app", "web"),
            ("tier", "c"),
            ("owner.name", "x")
        ])));
        assert!(!sel.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("owner.name", "x"),
            ("legacy", "1")
        ])));
        assert!(!sel.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("owner.name", "x"),
            ("env", "prod")
        ])));
        let sel = parse("x notin (1,2),y==z").unwrap();
        assert!(sel.matches(&labels(&[("y", "z")])));
        assert!(!sel.matches(&labels(&[("y", "z"), ("x", "1")])));
    }

    #[test]
    fn empty_selects_all_and_garbage_fails() {
        assert!(parse("").unwrap().selects_all());
        assert!(parse("  ").unwrap().matches(&labels(&[("a", "b")])));
        for bad in [
            "a in (b",
            "a,,b",
            "a maybe (b)",
            "a=b c",
            "a)",
            "=b",
            "a=b/c",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.selector, bad);
            assert!(e.to_string().starts_with("failed to parse label selector"));
        }
    }

    #[test]
    fn every_operator_parses_to_its_requirement() {
        let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        assert_eq!(
            parse("a=b, c!=d,e,!f,g in (h,i),j notin (k)")
                .unwrap()
                .requirements,
            [
                Requirement::Equals("a".into(), "b".into()),
                Requirement::NotEquals("c".into(), "d".into()),
                Requirement::Exists("e".into()),
                Requirement::NotExists("f".into()),
                Requirement::In("g".into(), set(&["h", "i"])),
                Requirement::NotIn("j".into(), set(&["k"])),
            ]
        );
        assert_eq!(
            parse("node-role.kubernetes.io/gpu").unwrap().requirements,
            [Requirement::Exists("node-role.kubernetes.io/gpu".into())]
        );
        assert!(parse("a in b").is_err());
        assert!(parse("a=(").is_err());
    }

    #[test]
    fn required_pairs_feed_the_index() {
        let sel = parse("a=1,b in (2),c in (3,4),!d").unwrap();
        assert_eq!(sel.required_pairs(), vec![("a", "1"), ("b", "2")]);
        assert_eq!(sel.required_keys(), vec!["a", "b", "c"]);
    }
}
