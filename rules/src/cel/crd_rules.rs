//! A CRD's `x-kubernetes-validations` rules, compiled once per CRD version
//! and evaluated as apiextensions-apiserver's `schema/cel` validator does:
//! `self` and (for transition rules) `oldSelf`, correlated through maps and
//! `x-kubernetes-list-type: map` lists only; `message`, `messageExpression`,
//! `reason`, `fieldPath`; ratcheting (CRDValidationRatcheting, on by
//! default since 1.30): on an update, a failing rule that does not use
//! `oldSelf` on a value equal to its old value is a warning, not an error.
//! Errors are `field.Error`s as the server words them
//! (`spec.size: Invalid value: "integer": <message>`, `<nil>` for the root).
//!
//! Hand-written walk (kube-cel's `validation::Validator` correlates list
//! items by index, has no ratcheting and words its errors differently);
//! the CEL itself is the `cel` crate with kube-cel's libraries ([`expr`]).
//! Not modelled: the cost budget, and cel-go's type checking when the CRD
//! is written (a rule the server would refuse then fails every write here).

use kube_cel::cel::{Program, Value as Cel};
use serde_json::Value;

use super::expr;

/// `(cause reason, field, message)`, as kube-sim's `ApiError::invalid` takes them.
pub type Cause = (&'static str, String, String);

/// The compiled rules of one schema; `None` from [`Rules::compile`] when the
/// schema has none.
#[derive(Debug)]
pub struct Rules {
    root: Node,
}

#[derive(Debug)]
struct Node {
    /// The schema's `type` (the value of the server's `Invalid value: "object"`).
    ty: String,
    /// The schema of this node, for typing `self`.
    schema: Value,
    /// Custom resource root or embedded resource: `self.metadata` has only
    /// `name` and `generateName`.
    resource_root: bool,
    rules: Vec<Rule>,
    props: Vec<(String, Node)>,
    items: Option<Box<Node>>,
    additional: Option<Box<Node>>,
    /// `x-kubernetes-list-map-keys` of a `x-kubernetes-list-type: map` list.
    map_keys: Option<Vec<String>>,
    /// `x-kubernetes-list-type: set`.
    set: bool,
}

#[derive(Debug)]
struct Rule {
    source: String,
    message: Option<String>,
    message_expression: Option<Result<Program, String>>,
    reason: Option<String>,
    /// `fieldPath` as the server normalizes it (`a.b[key]`).
    field_path: Option<String>,
    optional_old_self: bool,
    program: Result<Program, String>,
    uses_old_self: bool,
}

impl Rule {
    fn compile(raw: &Value, schema: &Value) -> Self {
        let s = |k: &str| raw.get(k).and_then(Value::as_str).map(str::to_string);
        let source = s("rule").unwrap_or_default();
        let program = expr::compile(&source);
        let uses_old_self = program.as_ref().is_ok_and(|p| expr::uses(p, "oldSelf"));
        Self {
            message: s("message").filter(|m| !m.trim().is_empty()),
            message_expression: s("messageExpression")
                .filter(|m| !m.trim().is_empty())
                .map(|m| expr::compile(&m)),
            reason: s("reason"),
            field_path: s("fieldPath").and_then(|p| normalize_field_path(&p, schema)),
            optional_old_self: raw.get("optionalOldSelf").and_then(Value::as_bool) == Some(true),
            program,
            uses_old_self,
            source,
        }
    }

    /// A rule kube-sim cannot evaluate: every write it applies to fails
    /// with `rule compile error: <why>`.
    fn unsupported(why: &str) -> Self {
        Self {
            source: String::new(),
            message: None,
            message_expression: None,
            reason: None,
            field_path: None,
            optional_old_self: false,
            program: Err(why.to_string()),
            uses_old_self: false,
        }
    }

    /// `ruleErrorString`: the message, else the rule.
    fn error_string(&self) -> &str {
        self.message.as_deref().unwrap_or(&self.source).trim()
    }

    /// `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        match &self.message {
            Some(m) => m.trim().to_string(),
            None => format!("failed rule: {}", self.error_string()),
        }
    }
}

impl Rules {
    /// Compiles every rule of a custom resource schema (its root is a
    /// resource root).
    pub fn compile(schema: &Value) -> Option<Self> {
        Node::compile(schema, true).map(|root| Self { root })
    }

    /// Evaluates the rules on `obj` (and `old`, on an update). Returns the
    /// errors and the warnings of ratcheted failures.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> (Vec<Cause>, Vec<String>) {
        let mut out = Out::default();
        let corr = Corr {
            old,
            ratchet: old.is_some_and(|o| o == obj),
        };
        self.root.validate("", obj, old, corr, &mut out);
        (out.errors, out.warnings)
    }
}

/// The server's ratcheting correlation: the old value this node correlates
/// with (if any) and whether its errors are ratcheted (the node, or its
/// nearest correlated ancestor, equals its old value).
#[derive(Clone, Copy)]
struct Corr<'a> {
    old: Option<&'a Value>,
    ratchet: bool,
}

impl<'a> Corr<'a> {
    fn child(self, new: Option<&Value>, old: Option<&'a Value>) -> Corr<'a> {
        match (self.old, new, old) {
            (Some(_), Some(n), Some(o)) => Corr {
                old: Some(o),
                ratchet: n == o,
            },
            _ => Corr {
                old: None,
                ratchet: self.ratchet,
            },
        }
    }
}

#[derive(Default)]
struct Out {
    errors: Vec<Cause>,
    warnings: Vec<String>,
}

fn child_path(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

/// `field.Path.String()`: `<nil>` for the root.
fn shown(path: &str) -> String {
    if path.is_empty() {
        "<nil>".into()
    } else {
        path.to_string()
    }
}

fn invalid(path: &str, ty: &str, detail: &str) -> Cause {
    (
        "FieldValueInvalid",
        shown(path),
        format!("Invalid value: {ty:?}: {detail}"),
    )
}

impl Node {
    fn compile(schema: &Value, resource_root: bool) -> Option<Self> {
        let mut rules: Vec<Rule> = schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|r| Rule::compile(r, schema)).collect())
            .unwrap_or_default();
        // Rules inside `allOf` are not evaluated here: fail closed rather
        // than admit what the server may refuse.
        if schema
            .get("allOf")
            .is_some_and(|a| a.to_string().contains("x-kubernetes-validations"))
        {
            rules.push(Rule::unsupported(
                "kube-sim does not evaluate x-kubernetes-validations under allOf",
            ));
        }
        let embedded = |s: &Value| {
            s.get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true)
        };
        let props: Vec<(String, Node)> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .filter_map(|(k, s)| Node::compile(s, embedded(s)).map(|n| (k.clone(), n)))
                    .collect()
            })
            .unwrap_or_default();
        let items = schema
            .get("items")
            .and_then(|s| Node::compile(s, embedded(s)))
            .map(Box::new);
        let additional = schema
            .get("additionalProperties")
            .filter(|a| a.is_object())
            .and_then(|s| Node::compile(s, embedded(s)))
            .map(Box::new);
        if rules.is_empty() && props.is_empty() && items.is_none() && additional.is_none() {
            return None;
        }
        let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
        Some(Self {
            ty: schema
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            schema: schema.clone(),
            resource_root,
            rules,
            props,
            items,
            additional,
            map_keys: (list_type == Some("map"))
                .then(|| strings(schema.get("x-kubernetes-list-map-keys"))),
            set: list_type == Some("set"),
        })
    }

    /// The old item a new list item correlates with: same map keys.
    fn map_item<'a>(&self, item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
        let keys = self.map_keys.as_ref()?;
        old?.as_array()?
            .iter()
            .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
    }

    fn validate(&self, path: &str, v: &Value, old: Option<&Value>, corr: Corr<'_>, out: &mut Out) {
        if v.is_null() {
            return;
        }
        let old = old.filter(|o| !o.is_null());
        if !self.rules.is_empty() {
            self.evaluate(path, v, old, corr, out);
        }
        match v {
            Value::Object(map) => {
                for (k, x) in map {
                    let node = self
                        .props
                        .iter()
                        .find(|(n, _)| n == k)
                        .map(|(_, n)| n)
                        .or(self.additional.as_deref());
                    let Some(node) = node else { continue };
                    let old_x = old.and_then(|o| o.get(k));
                    let c = if self.resource_root && (k == "apiVersion" || k == "kind") {
                        Corr {
                            old: None,
                            ratchet: false,
                        }
                    } else {
                        corr.child(Some(x), corr.old.and_then(|o| o.get(k)))
                    };
                    let p = if self.props.iter().any(|(n, _)| n == k) {
                        child_path(path, k)
                    } else {
                        format!("{path}[{k}]")
                    };
                    node.validate(&p, x, old_x, c, out);
                }
            }
            Value::Array(items) => {
                let Some(node) = &self.items else { return };
                for (i, x) in items.iter().enumerate() {
                    let old_x = node_map_item(self, x, old);
                    let corr_old = if self.set {
                        corr.old
                            .and_then(Value::as_array)
                            .and_then(|a| a.iter().find(|o| *o == x))
                    } else {
                        node_map_item(self, x, corr.old)
                    };
                    let c = corr.child(Some(x), corr_old);
                    node.validate(&format!("{path}[{i}]"), x, old_x, c, out);
                }
            }
            _ => {}
        }
    }

    /// `self` (and `oldSelf`) as CEL values.
    fn cel_value(&self, v: &Value) -> Cel {
        if self.resource_root
            && let Some(m) = v.get("metadata").and_then(Value::as_object)
        {
            let mut copy = v.clone();
            let meta: serde_json::Map<String, Value> = m
                .iter()
                .filter(|(k, _)| *k == "name" || *k == "generateName")
                .map(|(k, x)| (k.clone(), x.clone()))
                .collect();
            copy["metadata"] = Value::Object(meta);
            return expr::to_cel(&copy, Some(&self.schema));
        }
        expr::to_cel(v, Some(&self.schema))
    }

    fn evaluate(&self, path: &str, v: &Value, old: Option<&Value>, corr: Corr<'_>, out: &mut Out) {
        let this = self.cel_value(v);
        let old_cel = old.map(|o| self.cel_value(o));
        for rule in &self.rules {
            let program = match &rule.program {
                Ok(p) => p,
                Err(e) => {
                    out.errors
                        .push(invalid(path, &self.ty, &format!("rule compile error: {e}")));
                    continue;
                }
            };
            if rule.uses_old_self && old_cel.is_none() && !rule.optional_old_self {
                continue;
            }
            let null = Cel::Null;
            let mut vars: Vec<(&str, &Cel)> = vec![("self", &this)];
            match &old_cel {
                Some(o) => vars.push(("oldSelf", o)),
                // cel-go binds `optional.none()`; kube-cel has no optionals (null here).
                None if rule.optional_old_self => vars.push(("oldSelf", &null)),
                None => {}
            }
            match expr::run(program, &vars) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => {
                    let detail = rule
                        .message_expression
                        .as_ref()
                        .and_then(|m| m.as_ref().ok())
                        .and_then(|m| match expr::run(m, &vars) {
                            Ok(Cel::String(s)) => Some(s.trim().to_string()),
                            _ => None,
                        })
                        .filter(|s| !s.is_empty() && !s.contains('\n') && s.len() <= 5 * 1024)
                        .unwrap_or_else(|| rule.message_or_default());
                    let at = match &rule.field_path {
                        Some(fp) => child_path(path, fp),
                        None => path.to_string(),
                    };
                    let e = by_reason(rule.reason.as_deref(), &at, &self.ty, &detail);
                    if !rule.uses_old_self && corr.ratchet {
                        out.warnings.push(format!("{}: {}", e.1, e.2));
                    } else {
                        out.errors.push(e);
                    }
                }
                Ok(_) => out.errors.push(invalid(
                    path,
                    &self.ty,
                    &format!(
                        "rule compile error: rule does not evaluate to a bool: {}",
                        rule.source.trim()
                    ),
                )),
                Err(e) => {
                    let text = expr::error_text(&e);
                    let detail = if text.starts_with("no such overload") {
                        format!(
                            "'{text}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                            rule.error_string()
                        )
                    } else {
                        format!("{text} evaluating rule: {}", rule.error_string())
                    };
                    out.errors.push(invalid(path, &self.ty, &detail));
                }
            }
        }
    }
}

fn node_map_item<'a>(list: &Node, item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    list.map_item(item, old)
}

/// `fieldErrorForReason`.
fn by_reason(reason: Option<&str>, path: &str, ty: &str, detail: &str) -> Cause {
    match reason {
        Some("FieldValueForbidden") => (
            "FieldValueForbidden",
            shown(path),
            format!("Forbidden: {detail}"),
        ),
        Some("FieldValueRequired") => (
            "FieldValueRequired",
            shown(path),
            format!("Required value: {detail}"),
        ),
        Some("FieldValueDuplicate") => (
            "FieldValueDuplicate",
            shown(path),
            format!("Duplicate value: {ty:?}"),
        ),
        _ => invalid(path, ty, detail),
    }
}

/// A rule's `fieldPath` (`.spec.x`, `.m['a.b']`) as the server normalizes
/// it (`ValidFieldPath(...).String()`): `spec.x`, `m[a.b]`; `None` when it
/// names nothing in the schema (the server refuses such a CRD).
fn normalize_field_path(fp: &str, schema: &Value) -> Option<String> {
    let mut out = String::new();
    let mut cur = schema;
    let mut rest = fp;
    while !rest.is_empty() {
        let (name, tail) = if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']")?;
            (
                r[..end].replace("\\'", "'").replace("\\\\", "\\"),
                &r[end + 2..],
            )
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (r[..end].to_string(), &r[end..])
        } else {
            return None;
        };
        if let Some(p) = cur.get("properties").and_then(|p| p.get(&name)) {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&name);
            cur = p;
        } else if let Some(a) = cur.get("additionalProperties").filter(|a| a.is_object()) {
            out.push_str(&format!("[{name}]"));
            cur = a;
        } else {
            return None;
        }
        rest = tail;
    }
    (!out.is_empty()).then_some(out)
}

/// The schema errors after which the server does not run the rules
/// (`hasBlockingErr`), and the error it adds instead.
pub fn blocking(schema_errors: &[Cause]) -> Option<Cause> {
    schema_errors
        .iter()
        .any(|(r, _, _)| {
            matches!(
                *r,
                "FieldValueNotSupported"
                    | "FieldValueRequired"
                    | "FieldValueTooLong"
                    | "FieldValueTooMany"
                    | "FieldValueTypeInvalid"
            )
        })
        .then(|| {
            invalid(
                "",
                "null",
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            )
        })
}

/// The strings of a JSON array (none for anything else).
fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The message the API server answers a write with when `causes` (of
/// [`Rules::validate`], or of the schema checks) refuse it: `<Kind>.<group>
/// "<name>" is invalid: <field>: <message>` (several causes in brackets,
/// joined with `, `), which kubectl prints as `The <Kind> "<name>" is
/// invalid: ...`.
#[must_use]
pub fn invalid_message(
    kind: &str,
    group: &str,
    name: &str,
    causes: &[(&str, String, String)],
) -> String {
    let parts: Vec<String> = causes
        .iter()
        .map(|(_, field, msg)| {
            if field.is_empty() {
                msg.clone()
            } else {
                format!("{field}: {msg}")
            }
        })
        .collect();
    let joined = if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    };
    // GroupKind.String(): `Deployment.apps`, `ConfigMap` for core.
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    format!("{qualified} \"{name}\" is invalid: {joined}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.min <= self.max", "message": "min must not exceed max", "fieldPath": ".min"},
                    {"rule": "self.size == oldSelf.size", "message": "size is immutable", "reason": "FieldValueForbidden"}],
                "properties": {
                    "size": {"type": "integer", "x-kubernetes-validations": [
                        {"rule": "self % 2 == 0", "messageExpression": "'size ' + string(self) + ' is odd'"}]},
                    "min": {"type": "integer"}, "max": {"type": "integer"},
                    "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.startsWith('w')"}]},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                            "x-kubernetes-validations": [{"rule": "self.port >= oldSelf.port", "message": "port may only grow"}]}},
                    "tags": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [
                        {"rule": "self.size() < 4"}]}}}}},
            "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('w')"}]})
    }

    fn obj(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"a": "b"}}, "spec": spec})
    }

    #[test]
    fn errors_are_worded_as_the_server_words_them() {
        let rules = Rules::compile(&schema()).unwrap();
        let (errs, warns) = rules.validate(
            &obj(json!({"size": 3, "min": 5, "max": 1, "name": "x", "tags": ["long-tag"]})),
            None,
        );
        let shown: Vec<String> = errs.iter().map(|(_, f, m)| format!("{f}: {m}")).collect();
        assert_eq!(
            shown,
            vec![
                "spec.min: Invalid value: \"object\": min must not exceed max",
                "spec.size: Invalid value: \"integer\": size 3 is odd",
                "spec.name: Invalid value: \"string\": failed rule: self.startsWith('w')",
                "spec.tags[0]: Invalid value: \"string\": failed rule: self.size() < 4",
            ]
        );
        assert!(warns.is_empty());
        let mut o = obj(json!({"size": 2, "min": 1, "max": 2}));
        o["metadata"]["name"] = json!("x");
        let (errs, _) = rules.validate(&o, None);
        assert_eq!(
            errs,
            vec![(
                "FieldValueInvalid",
                "<nil>".to_string(),
                "Invalid value: \"object\": failed rule: self.metadata.name.startsWith('w')"
                    .to_string()
            )]
        );
    }

    #[test]
    fn transition_rules_correlate_maps_and_map_lists_and_errors_ratchet() {
        let rules = Rules::compile(&schema()).unwrap();
        let old = obj(json!({"size": 2, "min": 1, "max": 2,
            "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 90}]}));
        let new = obj(json!({"size": 4, "min": 1, "max": 2,
            "ports": [{"name": "b", "port": 91}, {"name": "a", "port": 70}, {"name": "c", "port": 1}]}));
        let (errs, _) = rules.validate(&new, Some(&old));
        let shown: Vec<String> = errs.iter().map(|(_, f, m)| format!("{f}: {m}")).collect();
        assert_eq!(
            shown,
            vec![
                "spec: Forbidden: size is immutable",
                "spec.ports[1]: Invalid value: \"object\": port may only grow",
            ]
        );
        // An invalid value left unchanged is a warning (ratcheting); changed, an error.
        let old = obj(json!({"size": 2, "min": 1, "max": 2, "name": "bad"}));
        let new = obj(json!({"size": 2, "min": 1, "max": 2, "name": "bad"}));
        let mut new2 = new.clone();
        new2["metadata"]["labels"] = json!({"c": "d"});
        let (errs, warns) = rules.validate(&new2, Some(&old));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            warns,
            vec!["spec.name: Invalid value: \"string\": failed rule: self.startsWith('w')"]
        );
        let mut new3 = new;
        new3["spec"]["name"] = json!("bad2");
        assert_eq!(rules.validate(&new3, Some(&old)).0.len(), 1);
    }

    #[test]
    fn evaluation_errors_and_field_paths() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.a > 1", "message": "a must exceed 1"}],
            "properties": {"a": {"type": "integer"},
                "m": {"type": "object", "additionalProperties": {"type": "string"}}}}}});
        let rules = Rules::compile(&s).unwrap();
        let (errs, _) = rules.validate(&json!({"spec": {"m": {}}}), None);
        assert_eq!(
            errs[0].2,
            "Invalid value: \"object\": no such key: a evaluating rule: a must exceed 1"
        );
        assert_eq!(
            normalize_field_path(".spec.m['x.y']", &s).as_deref(),
            Some("spec.m[x.y]")
        );
        assert_eq!(normalize_field_path(".spec.nope", &s), None);
        assert!(
            blocking(&[(
                "FieldValueRequired",
                "spec.a".into(),
                "Required value".into()
            )])
            .is_some()
        );
        // What kube-sim cannot evaluate fails closed.
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "allOf": [{"x-kubernetes-validations": [{"rule": "self.a > 1"}]}]}}});
        let (errs, _) = Rules::compile(&s)
            .unwrap()
            .validate(&json!({"spec": {}}), None);
        assert_eq!(
            errs[0].2,
            "Invalid value: \"object\": rule compile error: kube-sim does not evaluate x-kubernetes-validations under allOf"
        );
    }
}
