//! Parsing of Kubernetes label selector strings (`a=b,c in (d,e),!f`).
//!
//! Hand-written because kube-core has the selector *model*
//! ([`kube::core::Selector`], [`kube::core::Expression`]) and matching, but no
//! parser for the string syntax plugins pass to `list`.

use std::collections::BTreeSet;

use kube::core::{Expression, Selector};

/// A selector string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to parse label selector {selector:?}: {reason}")]
pub struct ParseError {
    /// The selector.
    pub selector: String,
    /// What is wrong.
    pub reason: String,
}

/// Parse a label selector in the Kubernetes string syntax.
///
/// # Errors
/// When the string is not a valid selector.
pub fn parse(selector: &str) -> Result<Selector, ParseError> {
    let err = |reason: &str| ParseError {
        selector: selector.to_owned(),
        reason: reason.to_owned(),
    };
    let mut exprs = Vec::new();
    for term in split_terms(selector).map_err(&err)? {
        let term = term.trim();
        if term.is_empty() {
            return Err(err("empty term"));
        }
        exprs.push(parse_term(term).map_err(|r| err(&r))?);
    }
    let mut sel = Selector::default();
    sel.extend(exprs);
    Ok(sel)
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

fn parse_term(term: &str) -> Result<Expression, String> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(valid_key(key.trim())?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Expression::NotEqual(
            valid_key(k.trim())?,
            valid_value(v.trim())?,
        ));
    }
    if let Some((k, v)) = term.split_once("==") {
        return Ok(Expression::Equal(
            valid_key(k.trim())?,
            valid_value(v.trim())?,
        ));
    }
    if let Some((k, v)) = term.split_once('=') {
        return Ok(Expression::Equal(
            valid_key(k.trim())?,
            valid_value(v.trim())?,
        ));
    }
    // set-based: `key in (a,b)` / `key notin (a,b)`
    let mut parts = term.splitn(2, char::is_whitespace);
    let key = parts.next().unwrap_or_default();
    let rest = parts.next().unwrap_or_default().trim_start();
    if rest.is_empty() {
        return Ok(Expression::Exists(valid_key(key)?));
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
        Expression::In(key, values)
    } else {
        Expression::NotIn(key, values)
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
        assert!(parse("a in (b").is_err());
        assert!(parse("a,,b").is_err());
        assert!(parse("a maybe (b)").is_err());
        assert!(parse("a=b c").is_err());
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
