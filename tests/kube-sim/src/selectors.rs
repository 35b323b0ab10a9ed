//! Label and field selectors (apimachinery `labels.Parse`, `fields.Parse`).
//!
//! Hand-written: the grammar is small and no maintained Rust crate parses
//! Kubernetes selector strings.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<(String, Op)>,
}

fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

pub(crate) fn valid_key(k: &str) -> bool {
    if k.is_empty() || k.len() > 317 {
        return false;
    }
    let name = match k.rsplit_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty()
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            {
                return false;
            }
            name
        }
        None => k,
    };
    valid_value(name) && !name.is_empty()
}

pub(crate) fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && v.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && v.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
}

fn parse_err(s: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {why}: found '{s}'"))
}

impl LabelSelector {
    /// Parses `labelSelector`.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in split_top_level(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(parse_err(s, "found ',', expected: identifier"));
            }
            let req = if let Some(k) = p.strip_prefix('!') {
                let k = k.trim();
                (k.to_string(), Op::DoesNotExist)
            } else if let Some((k, v)) = p.split_once("!=") {
                (k.trim().to_string(), Op::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once("==") {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once('=') {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once('>') {
                let n = v.trim().parse().map_err(|_| {
                    parse_err(p, "for 'Gt', 'Lt' operators, the value must be an integer")
                })?;
                (k.trim().to_string(), Op::Gt(n))
            } else if let Some((k, v)) = p.split_once('<') {
                let n = v.trim().parse().map_err(|_| {
                    parse_err(p, "for 'Gt', 'Lt' operators, the value must be an integer")
                })?;
                (k.trim().to_string(), Op::Lt(n))
            } else if let Some(idx) = p.find('(') {
                let head = p[..idx].trim();
                let body = p[idx + 1..]
                    .strip_suffix(')')
                    .ok_or_else(|| parse_err(p, "found end of string, expected: ')'"))?;
                let values: Vec<String> = body
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                let mut words = head.split_whitespace();
                let (Some(key), Some(op), None) = (words.next(), words.next(), words.next()) else {
                    return Err(parse_err(p, "expected: in, notin"));
                };
                for v in &values {
                    if !valid_value(v) {
                        return Err(parse_err(p, "invalid label value"));
                    }
                }
                match op {
                    "in" => (key.to_string(), Op::In(values)),
                    "notin" => (key.to_string(), Op::NotIn(values)),
                    _ => return Err(parse_err(p, "expected: in, notin")),
                }
            } else {
                if p.contains(char::is_whitespace) {
                    return Err(parse_err(p, "expected: in, notin, =, ==, !=, gt, lt"));
                }
                (p.to_string(), Op::Exists)
            };
            if !valid_key(&req.0) {
                return Err(parse_err(p, "invalid label key"));
            }
            if let Op::Eq(v) | Op::NotEq(v) = &req.1
                && !valid_value(v)
            {
                return Err(parse_err(p, "invalid label value"));
            }
            reqs.push(req);
        }
        Ok(Self { reqs })
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether an object's labels match.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|(k, op)| {
            let v = get(k);
            match op {
                Op::Eq(want) => v == Some(want.as_str()),
                Op::NotEq(want) => v != Some(want.as_str()),
                Op::In(set) => v.is_some_and(|v| set.iter().any(|s| s == v)),
                Op::NotIn(set) => v.is_none_or(|v| !set.iter().any(|s| s == v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                Op::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

/// A parsed field selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

/// Fields a kind may be selected on besides metadata.name/namespace.
fn kind_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "regarding.kind",
            "regarding.name",
            "regarding.namespace",
            "regarding.uid",
        ],
        "Secret" => &["type"],
        "Node" => &["spec.unschedulable"],
        "Namespace" => &["status.phase"],
        "ReplicaSet" | "Job" => &["status.replicas", "status.successful"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses `fieldSelector` for objects of `kind`; unsupported fields → 400.
    pub fn parse(s: &str, kind: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in s.split(',') {
            let p = part.trim();
            let (field, eq, value) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{p}'"
                )));
            };
            let field = field.trim();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !kind_fields(kind).contains(&field)
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(Self { reqs })
    }

    /// A selector on `metadata.name` only.
    pub fn name(name: &str) -> Self {
        Self {
            reqs: vec![("metadata.name".into(), true, name.into())],
        }
    }

    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The name it pins, if it has `metadata.name=X`.
    pub fn pinned_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Whether an object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(field, eq, want)| {
            let mut cur = obj;
            let mut found = true;
            for seg in field.split('.') {
                match cur.get(seg) {
                    Some(v) => cur = v,
                    None => {
                        found = false;
                        break;
                    }
                }
            }
            let actual = if !found {
                String::new()
            } else {
                match cur {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                }
            };
            (actual == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "front", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("missing!=x"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web,db)"));
        assert!(m("missing notin (web)"));
        assert!(m("app,tier"));
        assert!(!m("!app"));
        assert!(m("!missing"));
        assert!(m("app=web,tier in (front)"));
        assert!(!m("app=web,tier in (back)"));
        assert!(m("n>4"));
        assert!(!m("n<4"));
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        let f =
            FieldSelector::parse("metadata.name=a,metadata.namespace!=other", "ConfigMap").unwrap();
        assert!(f.matches(&o));
        assert!(
            !FieldSelector::parse("metadata.name==b", "ConfigMap")
                .unwrap()
                .matches(&o)
        );
        let err = FieldSelector::parse("spec.foo=1", "ConfigMap").unwrap_err();
        assert_eq!(err.code, 400);
        assert!(FieldSelector::parse("status.phase=Running", "Pod").is_ok());
    }
}
