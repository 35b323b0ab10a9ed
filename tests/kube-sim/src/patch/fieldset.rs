//! structured-merge-diff field sets and their FieldsV1 encoding.
//!
//! A [`FieldSet`] is a trie of [`PathElement`]s; a node is a *member* when
//! its own path is in the set (FieldsV1 writes that as `".": {}` when the
//! node also has children, as `{}` when it has none).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// One step of a field path. The derived order (fields, keys, values,
/// indexes) is structured-merge-diff's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum PathElement {
    /// `f:<name>`, printed `.name`.
    Field(String),
    /// `k:{"name":"x"}`, printed `[name="x"]`: an associative-list item by
    /// its key fields (sorted by name; values as compact JSON).
    Key(Vec<(String, String)>),
    /// `v:"x"`, printed `[="x"]`: a set item (compact JSON).
    Value(String),
    /// `i:0`, printed `[0]`.
    Index(usize),
}

impl PathElement {
    fn encode(&self) -> String {
        match self {
            PathElement::Field(f) => format!("f:{f}"),
            PathElement::Key(keys) => {
                let mut s = String::from("k:{");
                for (i, (k, v)) in keys.iter().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    s.push_str(&Value::String(k.clone()).to_string());
                    s.push(':');
                    s.push_str(v);
                }
                s.push('}');
                s
            }
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(s: &str) -> Result<PathElement, String> {
        let (prefix, rest) = s
            .split_once(':')
            .ok_or_else(|| format!("invalid FieldsV1 key {s:?}"))?;
        match prefix {
            "f" => Ok(PathElement::Field(rest.to_string())),
            "k" => {
                let Ok(Value::Object(m)) = serde_json::from_str::<Value>(rest) else {
                    return Err(format!("invalid FieldsV1 key {s:?}"));
                };
                let mut keys: Vec<(String, String)> =
                    m.into_iter().map(|(k, v)| (k, v.to_string())).collect();
                keys.sort();
                Ok(PathElement::Key(keys))
            }
            "v" => serde_json::from_str::<Value>(rest)
                .map(|v| PathElement::Value(v.to_string()))
                .map_err(|_| format!("invalid FieldsV1 key {s:?}")),
            "i" => rest
                .parse()
                .map(PathElement::Index)
                .map_err(|_| format!("invalid FieldsV1 key {s:?}")),
            _ => Err(format!("invalid FieldsV1 key {s:?}")),
        }
    }

    /// A list item's path element: its key fields for an associative list,
    /// its value for a set. `None` if the item does not fit (missing key
    /// field, non-scalar set item).
    pub(crate) fn for_item(item: &Value, keys: Option<&[String]>) -> Option<PathElement> {
        match keys {
            Some(keys) => {
                let obj = item.as_object()?;
                let mut pairs = Vec::with_capacity(keys.len());
                for k in keys {
                    let v = obj.get(k).filter(|v| !v.is_null())?;
                    pairs.push((k.clone(), v.to_string()));
                }
                pairs.sort();
                Some(PathElement::Key(pairs))
            }
            None => {
                if item.is_object() || item.is_array() {
                    None
                } else {
                    Some(PathElement::Value(item.to_string()))
                }
            }
        }
    }
}

/// Prints a path as structured-merge-diff does: `.spec.containers[name="a"].image`.
pub(crate) fn path_string(path: &[PathElement]) -> String {
    let mut s = String::new();
    for pe in path {
        match pe {
            PathElement::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            PathElement::Key(keys) => {
                s.push('[');
                for (i, (k, v)) in keys.iter().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    let _ = write!(s, "{k}={v}");
                }
                s.push(']');
            }
            PathElement::Value(v) => {
                let _ = write!(s, "[={v}]");
            }
            PathElement::Index(i) => {
                let _ = write!(s, "[{i}]");
            }
        }
    }
    s
}

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    member: bool,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    pub(crate) fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    pub(crate) fn is_member(&self) -> bool {
        self.member
    }

    pub(crate) fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    pub(crate) fn children(&self) -> impl Iterator<Item = (&PathElement, &FieldSet)> {
        self.children.iter()
    }

    /// Inserts `path` (the root itself when empty).
    pub(crate) fn insert(&mut self, path: &[PathElement]) {
        let mut node = self;
        for pe in path {
            node = node.children.entry(pe.clone()).or_default();
        }
        node.member = true;
    }

    /// Removes `path` as a member (its descendants stay).
    pub(crate) fn remove_member(&mut self, path: &[PathElement]) {
        fn go(node: &mut FieldSet, path: &[PathElement]) {
            match path.split_first() {
                None => node.member = false,
                Some((pe, rest)) => {
                    if let Some(child) = node.children.get_mut(pe) {
                        go(child, rest);
                        if child.is_empty() {
                            node.children.remove(pe);
                        }
                    }
                }
            }
        }
        go(self, path);
    }

    /// Removes `path` and everything under it.
    pub(crate) fn remove_subtree(&mut self, path: &[PathElement]) {
        let Some((last, parent)) = path.split_last() else {
            *self = FieldSet::default();
            return;
        };
        fn go(node: &mut FieldSet, parent: &[PathElement], last: &PathElement) {
            match parent.split_first() {
                None => {
                    node.children.remove(last);
                }
                Some((pe, rest)) => {
                    if let Some(child) = node.children.get_mut(pe) {
                        go(child, rest, last);
                        if child.is_empty() {
                            node.children.remove(pe);
                        }
                    }
                }
            }
        }
        go(self, parent, last);
    }

    pub(crate) fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (pe, o) in &other.children {
            self.children.entry(pe.clone()).or_default().union_with(o);
        }
    }

    #[must_use]
    pub(crate) fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.union_with(other);
        out
    }

    #[must_use]
    pub(crate) fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (pe, s) in &self.children {
            let d = match other.children.get(pe) {
                Some(o) => s.difference(o),
                None => s.clone(),
            };
            if !d.is_empty() {
                out.children.insert(pe.clone(), d);
            }
        }
        out
    }

    #[must_use]
    pub(crate) fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (pe, s) in &self.children {
            if let Some(o) = other.children.get(pe) {
                let i = s.intersection(o);
                if !i.is_empty() {
                    out.children.insert(pe.clone(), i);
                }
            }
        }
        out
    }

    /// Every member path, in order.
    pub(crate) fn paths(&self) -> Vec<Vec<PathElement>> {
        fn go(node: &FieldSet, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
            if node.member {
                out.push(prefix.clone());
            }
            for (pe, child) in &node.children {
                prefix.push(pe.clone());
                go(child, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        go(self, &mut Vec::new(), &mut out);
        out
    }

    /// The FieldsV1 JSON of this set.
    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (pe, child) in &self.children {
            m.insert(pe.encode(), child.to_fields_v1());
        }
        Value::Object(m)
    }

    /// Decodes FieldsV1 JSON.
    pub(crate) fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        fn go(v: &Value) -> Result<FieldSet, String> {
            let m = v
                .as_object()
                .ok_or_else(|| "FieldsV1 must be an object".to_string())?;
            let mut set = FieldSet {
                member: m.is_empty(),
                children: BTreeMap::new(),
            };
            for (k, child) in m {
                if k == "." {
                    set.member = true;
                } else {
                    set.children.insert(PathElement::decode(k)?, go(child)?);
                }
            }
            Ok(set)
        }
        let mut set = go(v)?;
        // The root object itself is never a member.
        set.member = false;
        Ok(set)
    }
}

/// The order of encoded FieldsV1 keys: `f:` < `k:` < `v:` < `i:`, then by
/// the rest (numerically for `i:`), as [`PathElement`] orders.
fn key_order(k: &str) -> (u8, usize, &str) {
    let rank = match k.as_bytes().first() {
        Some(b'f') => 0,
        Some(b'k') => 1,
        Some(b'v') => 2,
        _ => 3,
    };
    let rest = k.get(2..).unwrap_or("");
    let n = if rank == 3 {
        rest.parse().unwrap_or(0)
    } else {
        0
    };
    (rank, n, rest)
}

/// `fields := fields − set`, on encoded FieldsV1 (the root object).
pub(crate) fn remove_from_fields_v1(fields: &mut Map<String, Value>, set: &FieldSet) {
    for (pe, sub) in &set.children {
        let key = pe.encode();
        let Some(Value::Object(child)) = fields.get_mut(&key) else {
            continue;
        };
        let was_leaf = child.is_empty();
        if !was_leaf && !sub.children.is_empty() {
            remove_from_fields_v1(child, sub);
        }
        let member = (was_leaf || child.contains_key(".")) && !sub.member;
        let has_children = child.keys().any(|k| k != ".");
        match (member, has_children) {
            (false, false) => {
                fields.shift_remove(&key);
            }
            (true, false) => child.clear(),
            (false, true) => {
                child.shift_remove(".");
            }
            (true, true) => {}
        }
    }
}

/// `fields := fields ∪ set`, on encoded FieldsV1 (the root object), keeping
/// keys in structured-merge-diff order.
pub(crate) fn add_to_fields_v1(fields: &mut Map<String, Value>, set: &FieldSet) {
    for (pe, sub) in &set.children {
        let key = pe.encode();
        match fields.get_mut(&key) {
            Some(Value::Object(child)) => {
                let member = child.is_empty() || child.contains_key(".") || sub.member;
                if !sub.children.is_empty() {
                    add_to_fields_v1(child, sub);
                }
                let has_children = child.keys().any(|k| k != ".");
                if member && has_children && !child.contains_key(".") {
                    child.shift_insert(0, ".".into(), Value::Object(Map::new()));
                }
            }
            _ => {
                let at = fields
                    .keys()
                    .position(|k| k != "." && key_order(k) > key_order(&key))
                    .unwrap_or(fields.len());
                fields.shift_insert(at, key, sub.to_fields_v1());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trip_and_order() {
        let v = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {
                "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}
            }, "f:finalizers": {"v:\"a\"": {}}, "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {}}}
        });
        let set = FieldSet::from_fields_v1(&v).unwrap();
        assert_eq!(set.to_fields_v1(), v);
        let paths: Vec<String> = set.paths().iter().map(|p| path_string(p)).collect();
        assert_eq!(
            paths,
            [
                ".metadata.labels",
                ".metadata.labels.app",
                ".spec.containers[name=\"nginx\"]",
                ".spec.containers[name=\"nginx\"].image",
                ".spec.containers[name=\"nginx\"].name",
                ".spec.finalizers[=\"a\"]",
                ".spec.ports[containerPort=80,protocol=\"TCP\"]",
            ]
        );
        // ordering inside the encoding: "." first, then f: before k:
        let s = serde_json::to_string(&set.to_fields_v1()).unwrap();
        assert!(
            s.contains(r#""k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:name":{}}"#),
            "{s}"
        );
    }

    /// The in-place FieldsV1 edits agree with decode → set algebra → encode.
    #[test]
    fn in_place_edits_match_set_algebra() {
        let base = json!({
            "f:data": {".": {}, "f:a": {}, "f:b": {}},
            "f:metadata": {"f:labels": {".": {}, "f:x": {}}},
            "f:spec": {"f:list": {"k:{\"name\":\"b\"}": {".": {}, "f:name": {}}}, "f:z": {}}
        });
        let sets = [
            json!({"f:data": {"f:a": {}}}),
            json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}}),
            json!({"f:data": {}}),
            json!({"f:metadata": {"f:labels": {".": {}}}, "f:spec": {"f:z": {}}}),
            json!({"f:spec": {"f:list": {"k:{\"name\":\"a\"}": {".": {}, "f:name": {}},
                                          "k:{\"name\":\"b\"}": {"f:image": {}}}, "f:a": {}},
                   "f:apiVersion": {}, "f:status": {"f:c": {}}}),
            json!({"f:spec": {"f:z": {"f:deeper": {}}}}),
            json!({"f:spec": {}}),
        ];
        let base_set = FieldSet::from_fields_v1(&base).unwrap();
        for s in &sets {
            let set = FieldSet::from_fields_v1(s).unwrap();
            let mut removed = base.as_object().unwrap().clone();
            remove_from_fields_v1(&mut removed, &set);
            assert_eq!(
                Value::Object(removed),
                base_set.difference(&set).to_fields_v1(),
                "{base} - {s}"
            );
            let mut added = base.as_object().unwrap().clone();
            add_to_fields_v1(&mut added, &set);
            assert_eq!(
                Value::Object(added),
                base_set.union(&set).to_fields_v1(),
                "{base} + {s}"
            );
        }
    }

    #[test]
    fn set_algebra() {
        let f = |s: &str| PathElement::Field(s.into());
        let mut a = FieldSet::default();
        a.insert(&[f("data"), f("a")]);
        a.insert(&[f("data"), f("b")]);
        let mut b = FieldSet::default();
        b.insert(&[f("data"), f("b")]);
        b.insert(&[f("data"), f("c")]);
        assert_eq!(a.intersection(&b).paths(), vec![vec![f("data"), f("b")]]);
        assert_eq!(a.difference(&b).paths(), vec![vec![f("data"), f("a")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
        assert!(a.difference(&a).is_empty());
        a.remove_subtree(&[f("data")]);
        assert!(a.is_empty());
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
    }
}
