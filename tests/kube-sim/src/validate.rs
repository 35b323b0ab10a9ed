//! Field validation against OpenAPI schemas: unknown fields (the
//! `fieldValidation` query parameter decides whether they fail the request,
//! warn or are dropped silently) and, for custom resources, the structural
//! schema's value constraints (type, required, enum, minimum/maximum,
//! length, items, pattern) → 422 Invalid with the apiserver's messages.

use serde_json::{Map, Value};

use crate::openapi::{resolve, resolve_named};

/// `fieldValidation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Unknown fields fail the request (400).
    Strict,
    /// Unknown fields are dropped with a `Warning` header (the default).
    #[default]
    Warn,
    /// Unknown fields are dropped silently.
    Ignore,
}

/// What a walk found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Paths of unknown fields (`spec.replica`, `spec.containers[0].x`).
    pub unknown: Vec<String>,
    /// (reason, field, message) of constraint violations.
    pub invalid: Vec<(&'static str, String, String)>,
}

/// A field path built on the stack while walking; rendered to a string
/// only for a finding (most writes have none, so the walk allocates nothing).
#[derive(Clone, Copy)]
struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
}

/// Renders the path (only where a finding needs it).
impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

#[derive(Clone, Copy)]
enum Seg<'a> {
    Root(&'a str),
    Key(&'a str),
    Index(usize),
}

impl<'a> Path<'a> {
    fn key(&'a self, k: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Key(k),
        }
    }

    fn index(&'a self, i: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Index(i),
        }
    }

    /// `spec.containers[0].image`.
    pub(crate) fn render(&self) -> String {
        let parent = self.parent.map(Path::render).unwrap_or_default();
        match self.seg {
            Seg::Root(r) => r.to_string(),
            Seg::Key(k) if parent.is_empty() => k.to_string(),
            Seg::Key(k) => format!("{parent}.{k}"),
            Seg::Index(i) => format!("{parent}[{i}]"),
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// Walks `v` against `schema`: drops unknown fields (recording their paths)
/// and, with `constraints`, records value constraint violations. With
/// `defs` (a built-in type) it also drops the empty maps and lists that
/// Go's encoder omits (`omitempty`), as a typed decode and encode would.
pub fn walk(
    v: &mut Value,
    schema: &Value,
    defs: Option<&Map<String, Value>>,
    path: &str,
    root: bool,
    constraints: bool,
    out: &mut Findings,
) {
    let path = Path {
        parent: None,
        seg: Seg::Root(path),
    };
    walk_named(v, schema, defs, None, &path, root, constraints, out);
}

#[allow(clippy::too_many_arguments)]
fn walk_named(
    v: &mut Value,
    schema: &Value,
    defs: Option<&Map<String, Value>>,
    name: Option<&str>,
    path: &Path<'_>,
    root: bool,
    constraints: bool,
    out: &mut Findings,
) {
    let (schema, reached) = resolve_named(schema, defs);
    let name = reached.or(name);
    if constraints && !check_value(v, schema, path, out) {
        return;
    }
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    let embedded = schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true);
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            if constraints && let Some(req) = schema.get("required").and_then(Value::as_array) {
                for r in req.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        out.invalid.push((
                            "FieldValueRequired",
                            path.key(r).render(),
                            "Required value".into(),
                        ));
                    }
                }
            }
            // `retain` keeps the order of the remaining keys.
            map.retain(|k, x| {
                let meta_key = k == "apiVersion" || k == "kind" || k == "metadata";
                if (root || embedded) && meta_key && defs.is_none() {
                    return true;
                }
                let here = path.key(k);
                if let Some(sub) = props.and_then(|p| p.get(k)) {
                    walk_named(x, sub, defs, None, &here, false, constraints, out);
                    // Go omits an empty `omitempty` map or list.
                    !(defs.is_some()
                        && is_empty_collection(x, resolve(sub, defs))
                        && !name.is_some_and(|n| crate::protobuf::keeps_empty(n, k)))
                } else if let Some(add) = additional.filter(|a| a.is_object()) {
                    walk_named(x, add, defs, None, &here, false, constraints, out);
                    true
                } else if props.is_some() && !preserve && additional != Some(&Value::Bool(true)) {
                    out.unknown.push(here.render());
                    false
                } else {
                    true
                }
            });
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, x) in items.iter_mut().enumerate() {
                    walk_named(
                        x,
                        item_schema,
                        defs,
                        None,
                        &path.index(i),
                        false,
                        constraints,
                        out,
                    );
                }
            }
        }
        _ => {}
    }
}

/// An empty list, or an empty map (a schema with `additionalProperties`;
/// an empty struct such as `resources: {}` is kept, as Go encodes it).
fn is_empty_collection(v: &Value, schema: &Value) -> bool {
    match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty() && schema.get("additionalProperties").is_some(),
        _ => false,
    }
}

/// Checks type, enum, bounds and pattern; `false` stops the walk below.
fn check_value(v: &Value, schema: &Value, path: &Path<'_>, out: &mut Findings) -> bool {
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
    if v.is_null() && nullable {
        return false;
    }
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(v);
        let ok = match t {
            "number" => matches!(actual, "number" | "integer"),
            other => other == actual,
        } || (int_or_string && matches!(actual, "integer" | "string"));
        if !ok {
            out.invalid.push((
                "FieldValueTypeInvalid",
                path.to_string(),
                format!(
                    "Invalid value: \"{actual}\": {path} in body must be of type {t}: \"{actual}\""
                ),
            ));
            return false;
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        let allowed: Vec<String> = e.iter().map(go_value).collect();
        out.invalid.push((
            "FieldValueNotSupported",
            path.to_string(),
            format!(
                "Unsupported value: {}: supported values: {}",
                go_value(v),
                allowed.join(", ")
            ),
        ));
    }
    if let Some(n) = v.as_f64() {
        let excl_min = schema.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true);
        let excl_max = schema.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true);
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && (n < min || (excl_min && n == min))
        {
            let op = if excl_min {
                "greater than"
            } else {
                "greater than or equal to"
            };
            out.invalid.push((
                "FieldValueInvalid",
                path.to_string(),
                format!(
                    "Invalid value: {v}: {path} in body should be {op} {}",
                    schema["minimum"]
                ),
            ));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && (n > max || (excl_max && n == max))
        {
            let op = if excl_max {
                "less than"
            } else {
                "less than or equal to"
            };
            out.invalid.push((
                "FieldValueInvalid",
                path.to_string(),
                format!(
                    "Invalid value: {v}: {path} in body should be {op} {}",
                    schema["maximum"]
                ),
            ));
        }
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            out.invalid.push((
                "FieldValueTooLong",
                path.to_string(),
                format!("Too long: may not be more than {max} bytes"),
            ));
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            out.invalid.push((
                "FieldValueInvalid",
                path.to_string(),
                format!("Invalid value: {s:?}: {path} in body should be at least {min} chars long"),
            ));
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str)
            && let Ok(re) = regex::Regex::new(p)
            && !re.is_match(s)
        {
            out.invalid.push((
                "FieldValueInvalid",
                path.to_string(),
                format!("Invalid value: {s:?}: {path} in body should match '{p}'"),
            ));
        }
    }
    if let Some(a) = v.as_array() {
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && a.len() as u64 > max
        {
            out.invalid.push((
                "FieldValueTooMany",
                path.to_string(),
                format!("Too many: {}: must have at most {max} items", a.len()),
            ));
        }
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (a.len() as u64) < min
        {
            out.invalid.push((
                "FieldValueInvalid",
                path.to_string(),
                format!(
                    "Invalid value: {}: {path} in body should have at least {min} items",
                    a.len()
                ),
            ));
        }
    }
    true
}

/// Structural schema defaulting (apiextensions-apiserver's
/// `structuraldefaulting.Default`): a property with a `default` that is
/// absent, or null where the schema is not nullable, gets a copy of the
/// default; then each value is defaulted by its own schema, so defaults
/// inside a default apply too. Items and `additionalProperties` likewise.
pub fn apply_defaults(v: &mut Value, schema: &Value) {
    let non_nullable_null = |x: &Value, s: &Value| {
        x.is_null() && s.get("nullable").and_then(Value::as_bool) != Some(true)
    };
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            if let Some(props) = props {
                for (k, p) in props {
                    if let Some(d) = p.get("default")
                        && map.get(k).is_none_or(|x| non_nullable_null(x, p))
                    {
                        map.insert(k.clone(), d.clone());
                    }
                }
            }
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, x) in map.iter_mut() {
                if let Some(p) = props.and_then(|p| p.get(k)) {
                    apply_defaults(x, p);
                } else if let Some(a) = additional {
                    match a.get("default") {
                        Some(d) if non_nullable_null(x, a) => *x = d.clone(),
                        _ => apply_defaults(x, a),
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for x in items {
                    match s.get("default") {
                        Some(d) if non_nullable_null(x, s) => *x = d.clone(),
                        _ => apply_defaults(x, s),
                    }
                }
            }
        }
        _ => {}
    }
}

/// Splits a path of [`Findings::unknown`] (`spec.containers[0].x`) into segments.
pub fn segments(path: &str) -> Vec<crate::patch::PathSegment> {
    use crate::patch::PathSegment;
    let mut out = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            out.push(PathSegment::Field(rest[..i].to_string()));
            rest = &rest[i..];
            while let Some(r) = rest.strip_prefix('[') {
                let end = r.find(']').unwrap_or(r.len());
                if let Ok(n) = r[..end].parse() {
                    out.push(PathSegment::Index(n));
                }
                rest = r.get(end + 1..).unwrap_or_default();
            }
        } else {
            out.push(PathSegment::Field(rest.to_string()));
        }
    }
    out
}

/// The message of a strict decoding error.
pub fn strict_message(kind: &str, version: &str, unknown: &[String]) -> String {
    let fields: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        fields.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_and_constraints_of_a_structural_schema() {
        let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 10},
            "color": {"type": "string", "enum": ["red", "blue"]},
            "name": {"type": "string", "pattern": "^[a-z]+$"},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }}}});
        let mut obj = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
            "spec": {"size": "big", "color": "pink", "name": "X1", "extra": 1,
                "tags": [{"k": "a", "v": "b"}], "free": {"anything": 1}}});
        let mut f = Findings::default();
        walk(&mut obj, &schema, None, "", true, true, &mut f);
        assert_eq!(f.unknown, vec!["spec.extra", "spec.tags[0].v"]);
        let msgs: Vec<String> = f
            .invalid
            .iter()
            .map(|(_, p, m)| format!("{p}: {m}"))
            .collect();
        assert_eq!(
            msgs,
            vec![
                "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"",
                "spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\"",
                "spec.name: Invalid value: \"X1\": spec.name in body should match '^[a-z]+$'",
            ]
        );
        assert!(obj["spec"].get("extra").is_none() && obj["spec"]["free"]["anything"] == 1);
        let mut obj = json!({"spec": {"size": 11}});
        let mut f = Findings::default();
        walk(&mut obj, &schema, None, "", true, true, &mut f);
        assert_eq!(
            f.invalid[0].2,
            "Invalid value: 11: spec.size in body should be less than or equal to 10"
        );
        let mut obj = json!({"spec": {}});
        let mut f = Findings::default();
        walk(&mut obj, &schema, None, "", true, true, &mut f);
        assert_eq!(
            (f.invalid[0].1.as_str(), f.invalid[0].2.as_str()),
            ("spec.size", "Required value")
        );
    }

    #[test]
    fn structural_defaults_fill_absent_and_non_nullable_null_fields() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "default": {}, "properties": {
                "size": {"type": "integer", "default": 3},
                "mode": {"type": "string", "default": "fast"},
                "note": {"type": "string", "nullable": true, "default": "n"},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "protocol": {"type": "string", "default": "TCP"}}}}}}}});
        let mut o = json!({"metadata": {"name": "w"}});
        apply_defaults(&mut o, &schema);
        assert_eq!(o["spec"], json!({"size": 3, "mode": "fast", "note": "n"}));
        let mut o = json!({"spec": {"size": 5, "mode": null, "note": null, "ports": [{}, {"protocol": "UDP"}]}});
        apply_defaults(&mut o, &schema);
        assert_eq!(
            o["spec"],
            json!({"size": 5, "mode": "fast", "note": null, "ports": [{"protocol": "TCP"}, {"protocol": "UDP"}]})
        );
    }

    #[test]
    fn built_ins_lose_empty_omitempty_maps_and_lists_only() {
        let b = crate::openapi::builtins();
        let root = |g: &str, k: &str| &b.refs[&(g.to_string(), "v1".to_string(), k.to_string())];
        let mut role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "r", "labels": {}, "annotations": {}}, "rules": []});
        let mut f = Findings::default();
        walk(
            &mut role,
            root("rbac.authorization.k8s.io", "Role"),
            Some(&b.defs),
            "",
            true,
            false,
            &mut f,
        );
        assert_eq!(
            role,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "r"}, "rules": []}),
            "rules has no omitempty"
        );
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {}}, "template": {"metadata": {}, "spec": {
                "nodeSelector": {}, "containers": [{"name": "c", "env": [], "resources": {}}]}}},
            "status": {}});
        let mut f = Findings::default();
        walk(
            &mut d,
            root("apps", "Deployment"),
            Some(&b.defs),
            "",
            true,
            false,
            &mut f,
        );
        assert!(f.unknown.is_empty(), "{:?}", f.unknown);
        assert_eq!(
            d["spec"],
            json!({"selector": {}, "template": {"metadata": {}, "spec": {
            "containers": [{"name": "c", "resources": {}}]}}})
        );
        assert_eq!(d["status"], json!({}), "structs stay, even empty");
    }
}
