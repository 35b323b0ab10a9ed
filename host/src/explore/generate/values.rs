//! Values from an OpenAPI v3 schema (a CRD's `openAPIV3Schema`): a valid
//! value built from required fields, defaults, enums and bounds, and the
//! changes worth making to each field of an object (Acto's per-type value
//! generators, kept small: a few values per field, bounds first).

use base64::Engine as _;
use serde_json::{Map, Value, json};

/// At most this many changes per field.
const PER_FIELD: usize = 3;
/// Nested objects deeper than this are left as built.
const MAX_DEPTH: usize = 5;
/// The largest integer tried above the minimum. A schema's own maximum is
/// used when it is within this distance; a larger one (or none) is a
/// count the plugin acts on (`replicas: 2147483647` would ask for two
/// billion children) and the exploration must stay small.
const INT_SPAN: i64 = 4;

/// One change to an object: the value at `path` set (or removed: `None`).
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// Field names from the object's root (`["spec", "replicas"]`).
    pub path: Vec<String>,
    /// The new value; `None` removes the field.
    pub value: Option<Value>,
}

impl Change {
    /// `spec.replicas = 4`, `spec.holds -= ...`.
    #[must_use]
    pub fn describe(&self) -> String {
        let path = self.path.join(".");
        match &self.value {
            None => format!("{path} removed"),
            Some(v) => {
                let mut text = v.to_string();
                if text.len() > 40 {
                    text.truncate(37);
                    text.push_str("...");
                }
                format!("{path} = {text}")
            }
        }
    }

    /// `object` with the change made (missing parents become objects).
    #[must_use]
    pub fn applied(&self, object: &Value) -> Value {
        let mut out = object.clone();
        let Some((last, parents)) = self.path.split_last() else {
            return out;
        };
        let mut at = &mut out;
        for p in parents {
            if !at.get(p).is_some_and(Value::is_object)
                && let Some(map) = at.as_object_mut()
            {
                map.insert(p.clone(), json!({}));
            }
            at = &mut at[p.as_str()];
        }
        if let Some(map) = at.as_object_mut() {
            match &self.value {
                Some(v) => {
                    map.insert(last.clone(), v.clone());
                }
                None => {
                    map.remove(last);
                }
            }
        }
        out
    }
}

fn type_of(schema: &Value) -> &str {
    if schema["x-kubernetes-int-or-string"] == true {
        return "integer";
    }
    schema["type"].as_str().unwrap_or_default()
}

fn is_map(schema: &Value) -> bool {
    type_of(schema) == "object"
        && schema["properties"].as_object().is_none_or(Map::is_empty)
        && schema["additionalProperties"].is_object()
}

/// Whether the plugin cannot be given a value the schema does not spell
/// out (a free-form object, an embedded resource).
fn opaque(schema: &Value) -> bool {
    schema["x-kubernetes-embedded-resource"] == true
        || (type_of(schema) == "object"
            && schema["properties"].as_object().is_none_or(Map::is_empty)
            && !schema["additionalProperties"].is_object())
        || type_of(schema).is_empty()
}

/// The `i`-th distinct valid string of `schema`, if the schema lets one be
/// found: enums in order, else candidates of the allowed length that match
/// the pattern (checked with the `regex` crate; a pattern it cannot compile
/// leaves the field unexplored).
fn string(schema: &Value, i: usize) -> Option<String> {
    if let Some(values) = schema["enum"].as_array() {
        let strings: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
        return strings
            .get(i % strings.len().max(1))
            .map(|s| (*s).to_owned());
    }
    match schema["format"].as_str() {
        Some("date-time") => return Some(format!("2026-01-0{}T00:00:00Z", 1 + i % 9)),
        Some("byte") => {
            let raw = format!("value-{}", i + 1);
            return Some(base64::engine::general_purpose::STANDARD.encode(raw));
        }
        _ => {}
    }
    let min = schema["minLength"].as_u64().unwrap_or(0) as usize;
    let max = schema["maxLength"]
        .as_u64()
        .map_or(usize::MAX, |m| m as usize);
    let pattern = match schema["pattern"].as_str() {
        Some(p) => Some(regex::Regex::new(p).ok()?),
        None => None,
    };
    let mut found = 0;
    let letters = "abcdefghijklmnopqrstuvwxyz";
    let candidates = (0..26usize).flat_map(|k| {
        let c = &letters[k..=k];
        [
            format!("value-{}", k + 1),
            c.repeat(min.max(1)),
            format!("{c}{}", k + 1),
            format!("{}", k + 1),
        ]
    });
    for s in candidates {
        let len = s.chars().count();
        let s = if len < min {
            format!("{s}{}", "x".repeat(min - len))
        } else {
            s
        };
        if s.chars().count() > max || pattern.as_ref().is_some_and(|p| !p.is_match(&s)) {
            continue;
        }
        if found == i {
            return Some(s);
        }
        found += 1;
    }
    None
}

/// An integer's bounds: (lowest, highest) tried.
fn int_bounds(schema: &Value) -> (i64, i64) {
    let exclusive = |k: &str| schema[k] == true;
    let min = schema["minimum"]
        .as_f64()
        .map(|m| m.ceil() as i64 + i64::from(exclusive("exclusiveMinimum")));
    let max = schema["maximum"]
        .as_f64()
        .map(|m| m.floor() as i64 - i64::from(exclusive("exclusiveMaximum")));
    let lo = match (min, max) {
        (Some(lo), _) => lo,
        (None, Some(hi)) if hi < 0 => hi - INT_SPAN,
        _ => 0,
    };
    let hi = max.map_or(lo + INT_SPAN, |m| m.min(lo + INT_SPAN));
    (lo, hi.max(lo))
}

/// A valid value of `schema`, variant `i` (distinct variants for list
/// items and map values): the default, else the first enum value, else an
/// object of its required fields, a list of its minimum length, a string of
/// the allowed length and pattern, a number within bounds. `None` when no
/// valid value can be found.
#[must_use]
pub fn valid(schema: &Value, i: usize) -> Option<Value> {
    valid_at(schema, i, 0)
}

fn valid_at(schema: &Value, i: usize, depth: usize) -> Option<Value> {
    if let Some(d) = schema.get("default") {
        return Some(d.clone());
    }
    if let Some(first) = schema["enum"]
        .as_array()
        .and_then(|e| e.get(i % e.len().max(1)))
    {
        return Some(first.clone());
    }
    match type_of(schema) {
        "object" => {
            let mut out = Map::new();
            if depth > MAX_DEPTH {
                return Some(Value::Object(out));
            }
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(props) = schema["properties"].as_object() {
                for (name, prop) in props {
                    if required.contains(&name.as_str()) {
                        out.insert(name.clone(), valid_at(prop, i, depth + 1)?);
                    } else if let Some(d) = prop.get("default") {
                        out.insert(name.clone(), d.clone());
                    }
                }
            }
            if is_map(schema) {
                let min = schema["minProperties"].as_u64().unwrap_or(0) as usize;
                for k in 0..min {
                    out.insert(
                        format!("key-{}", k + 1),
                        valid_at(&schema["additionalProperties"], k, depth + 1)?,
                    );
                }
            }
            Some(Value::Object(out))
        }
        "array" => {
            let min = schema["minItems"].as_u64().unwrap_or(0) as usize;
            let items = (0..min)
                .map(|k| valid_at(&schema["items"], i + k, depth + 1))
                .collect::<Option<Vec<_>>>()?;
            Some(Value::Array(items))
        }
        "string" => string(schema, i).map(Value::String),
        "integer" => {
            let (lo, hi) = int_bounds(schema);
            Some(json!((lo + 1 + i as i64).clamp(lo, hi)))
        }
        "number" => {
            let (lo, hi) = int_bounds(schema);
            Some(json!(((lo + 1 + i as i64).clamp(lo, hi)) as f64))
        }
        "boolean" => Some(json!(false)),
        _ => None,
    }
}

/// The changes worth making to `object` (whose schema is `schema`) at its
/// top-level fields but `apiVersion`, `kind`, `metadata` and `status`:
/// each field in schema order, nested objects field by field.
#[must_use]
pub fn changes(schema: &Value, object: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    let Some(props) = schema["properties"].as_object() else {
        return out;
    };
    for (name, prop) in props {
        if matches!(name.as_str(), "apiVersion" | "kind" | "metadata" | "status") {
            continue;
        }
        let required = schema["required"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x == name));
        field(
            prop,
            vec![name.clone()],
            object.get(name),
            required,
            0,
            &mut out,
        );
    }
    out
}

fn field(
    schema: &Value,
    path: Vec<String>,
    current: Option<&Value>,
    required: bool,
    depth: usize,
    out: &mut Vec<Change>,
) {
    if depth > MAX_DEPTH || opaque(schema) {
        return;
    }
    let set = |value: Value| Change {
        path: path.clone(),
        value: Some(value),
    };
    let mut mine: Vec<Change> = Vec::new();
    match type_of(schema) {
        "object" if is_map(schema) => {
            let values = &schema["additionalProperties"];
            let mut map = current
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let max = schema["maxProperties"]
                .as_u64()
                .map_or(usize::MAX, |m| m as usize);
            let min = schema["minProperties"].as_u64().unwrap_or(0) as usize;
            let fresh = |k: usize| {
                (k..k + 8)
                    .map(|n| format!("key-{}", n + 1))
                    .find(|key| !map_has(current, key))
            };
            // Add a key, add another, remove the first added.
            for k in 0..2 {
                if map.len() >= max {
                    break;
                }
                let (Some(key), Some(v)) = (fresh(k), valid(values, k)) else {
                    break;
                };
                map.insert(key, v);
                mine.push(set(Value::Object(map.clone())));
            }
            if map.len() > min
                && let Some(first) = map.keys().next().cloned()
            {
                map.remove(&first);
                mine.push(set(Value::Object(map)));
            }
        }
        "object" => {
            // An absent optional object is added (as built) first; then its
            // fields, one by one.
            let built;
            let current = match current {
                Some(c) => c,
                None => {
                    let Some(v) = valid(schema, 0) else { return };
                    out.push(set(v));
                    built = out.last().and_then(|c| c.value.clone()).unwrap_or_default();
                    &built
                }
            };
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(props) = schema["properties"].as_object() {
                for (name, prop) in props {
                    let mut p = path.clone();
                    p.push(name.clone());
                    field(
                        prop,
                        p,
                        current.get(name),
                        required.contains(&name.as_str()),
                        depth + 1,
                        out,
                    );
                }
            }
            return;
        }
        "array" => {
            let items = &schema["items"];
            if opaque(items) && type_of(items) != "object" {
                return;
            }
            let mut list = current
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let max = schema["maxItems"]
                .as_u64()
                .map_or(usize::MAX, |m| m as usize);
            let min = schema["minItems"].as_u64().unwrap_or(0) as usize;
            // Add an item, add another, remove the first.
            let from = list.len();
            for k in from..from + 2 {
                if list.len() >= max {
                    break;
                }
                let Some(v) = (k..k + 8)
                    .filter_map(|n| valid(items, n))
                    .find(|v| !list.contains(v))
                else {
                    break;
                };
                list.push(v);
                mine.push(set(Value::Array(list.clone())));
            }
            if list.len() > min {
                list.remove(0);
                mine.push(set(Value::Array(list)));
            }
        }
        "string" => {
            for i in 0..PER_FIELD {
                if let Some(s) = string(schema, i + 1).map(Value::String)
                    && Some(&s) != current
                    && !mine.iter().any(|c| c.value.as_ref() == Some(&s))
                {
                    mine.push(set(s));
                }
            }
        }
        "integer" | "number" => {
            // The lower bound, the upper bound, then one above the lower:
            // a step down by more than one.
            let (lo, hi) = int_bounds(schema);
            let float = type_of(schema) == "number";
            for n in [lo, hi, lo + 1] {
                let v = if float { json!(n as f64) } else { json!(n) };
                if n <= hi
                    && Some(&v) != current
                    && !mine.last().is_some_and(|c| c.value.as_ref() == Some(&v))
                {
                    mine.push(set(v));
                }
            }
        }
        "boolean" => {
            let now = current.and_then(Value::as_bool).unwrap_or(false);
            mine.push(set(json!(!now)));
        }
        _ => return,
    }
    mine.truncate(PER_FIELD);
    if !required && current.is_some() && !mine.is_empty() {
        mine.push(Change {
            path: path.clone(),
            value: None,
        });
    }
    out.extend(mine);
}

fn map_has(current: Option<&Value>, key: &str) -> bool {
    current.is_some_and(|c| c.get(key).is_some())
}

/// The schema of `kind` in `api_version` served by one of `crds`.
#[must_use]
pub fn crd_schema(crds: &[Value], api_version: &str, kind: &str) -> Option<Value> {
    let (group, version) = api_version.split_once('/')?;
    crds.iter()
        .filter(|c| c["spec"]["group"] == group && c["spec"]["names"]["kind"] == kind)
        .flat_map(|c| {
            c["spec"]["versions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|v| v["name"] == version)
        .map(|v| v["schema"]["openAPIV3Schema"].clone())
}

/// A minimal schema of a built-in kind the plugin may take as its primary
/// (no CRD carries it): ConfigMaps and Secrets hold a map of data;
/// anything else is explored by its metadata alone.
#[must_use]
pub fn builtin_schema(api_version: &str, kind: &str) -> Value {
    match (api_version, kind) {
        ("v1", "ConfigMap") => json!({"type": "object", "properties": {
            "data": {"type": "object", "additionalProperties": {"type": "string"},
                "default": {"key": "value"}}}}),
        ("v1", "Secret") => json!({"type": "object", "properties": {
            "data": {"type": "object", "additionalProperties": {"type": "string", "format": "byte"},
                "default": {"key": "dmFsdWU="}}}}),
        _ => json!({"type": "object"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["mode", "size", "name"], "properties": {
                "mode": {"type": "string", "enum": ["Fast", "Safe", "Off"]},
                "size": {"type": "integer", "minimum": 1, "maximum": 3},
                "name": {"type": "string", "minLength": 3, "maxLength": 8, "pattern": "^[a-z][a-z0-9-]*$"},
                "replicas": {"type": "integer", "format": "int32"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "paused": {"type": "boolean", "default": false},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }})
    }

    #[test]
    fn a_valid_object_has_required_fields_enums_defaults_and_bounds() {
        let v = valid(&schema()["properties"]["spec"], 0).unwrap();
        assert_eq!(v["mode"], "Fast");
        assert_eq!(v["size"], 2);
        let name = v["name"].as_str().unwrap();
        assert!((3..=8).contains(&name.len()), "{name}");
        assert!(name.chars().next().unwrap().is_ascii_lowercase(), "{name}");
        assert_eq!(v["paused"], false);
        assert!(v.get("replicas").is_none() && v.get("tags").is_none());
    }

    #[test]
    fn every_field_is_changed_within_its_schema() {
        let s = schema();
        let object = json!({"spec": valid(&s["properties"]["spec"], 0).unwrap()});
        let all = changes(&s, &object);
        let of = |f: &str| -> Vec<Option<Value>> {
            all.iter()
                .filter(|c| c.path == ["spec", f])
                .map(|c| c.value.clone())
                .collect()
        };
        assert_eq!(of("mode"), [Some(json!("Safe")), Some(json!("Off"))]);
        assert_eq!(of("size"), [Some(json!(1)), Some(json!(3))]);
        assert_eq!(
            of("replicas"),
            [Some(json!(0)), Some(json!(4)), Some(json!(1))]
        );
        assert_eq!(
            of("tags"),
            [
                Some(json!(["value-1"])),
                Some(json!(["value-1", "a"])),
                Some(json!(["a"]))
            ],
            "add, add, remove the first"
        );
        assert_eq!(of("labels").len(), 3);
        assert_eq!(of("paused"), [Some(json!(true)), None], "flipped, removed");
        assert!(of("free").is_empty(), "a free-form object is left alone");
        assert!(all.iter().all(|c| c.path[0] != "status"));
        for c in &all {
            if c.path == ["spec", "name"] {
                let s = c.value.as_ref().unwrap().as_str().unwrap();
                assert!(
                    (3..=8).contains(&s.len()) && !s.starts_with(char::is_numeric),
                    "{s}"
                );
            }
        }
    }

    #[test]
    fn a_change_makes_missing_parents() {
        let c = Change {
            path: vec!["spec".into(), "a".into(), "b".into()],
            value: Some(json!(1)),
        };
        assert_eq!(c.applied(&json!({})), json!({"spec": {"a": {"b": 1}}}));
        let r = Change {
            path: vec!["spec".into(), "a".into()],
            value: None,
        };
        assert_eq!(
            r.applied(&json!({"spec": {"a": 1, "c": 2}})),
            json!({"spec": {"c": 2}})
        );
    }

    #[test]
    fn crd_schemas_are_found_by_group_version_and_kind() {
        let crd = json!({"spec": {"group": "g.io", "names": {"kind": "K"},
            "versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        assert!(crd_schema(std::slice::from_ref(&crd), "g.io/v1", "K").is_some());
        assert!(crd_schema(&[crd], "g.io/v2", "K").is_none());
    }
}
