//! Which CEL a plugin ships compiles, checked with kube-cel (the `cel`
//! crate with Kubernetes' libraries) as the API server checks it when the
//! CRD or the policy is written: the host at load (and `rekon plugin
//! inspect`), the SDK's test kit at `register`. A rule or expression that
//! does not parse is refused with where it is, itself and kube-cel's error.
//!
//! [`crd_rules`] evaluates a CRD's rules as the API server does (kube-sim
//! runs it on every write of a custom resource; the SDK's test kit on
//! every write of its world to a CRD the plugin registers) and words the
//! refusal as the server does; [`policy`] evaluates a
//! ValidatingAdmissionPolicy's checks (kube-sim for stored policies, the
//! test kit for the policies a plugin declares); [`expr`] is the CEL
//! environment all of them use.
//!
//! Only parsing is checked: kube-cel has no type checker (cel-go's
//! `compilation failed: ERROR: … undeclared reference` for a field the
//! schema lacks is found when the rule runs, not here).

pub mod crd_rules;
pub mod expr;
pub mod policy;

use kube_cel::cel::Program;
use serde_json::Value;

/// Parses one CEL expression; the error is kube-cel's (the `cel` crate's
/// parser's) text.
///
/// # Errors
/// The parser's message.
pub fn compile(expression: &str) -> Result<Program, String> {
    Program::compile(expression).map_err(|e| e.to_string().trim().to_owned())
}

/// Every `x-kubernetes-validations` rule (`rule` and `messageExpression`)
/// of a CustomResourceDefinition that does not compile, worded with the
/// CRD's name and the field path the API server names
/// (`spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule`).
/// Empty when every rule compiles (or there is none).
#[must_use]
pub fn crd_rule_problems(crd: &Value) -> Vec<String> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    let mut found = Vec::new();
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, version) in versions.iter().enumerate() {
        if let Some(schema) = version.pointer("/schema/openAPIV3Schema") {
            walk(
                schema,
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                &mut |path, problem| {
                    found.push(format!("CRD {name}: {path}: {problem}"));
                },
            );
        }
    }
    found
}

/// The rules of one schema node and of every schema under it.
fn walk(schema: &Value, path: &str, found: &mut dyn FnMut(String, String)) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for (i, rule) in rules.iter().enumerate() {
            let at = format!("{path}.x-kubernetes-validations[{i}]");
            let text = |k: &str| rule.get(k).and_then(Value::as_str);
            match text("rule") {
                None => found(format!("{at}.rule"), "Required value: a rule".to_owned()),
                Some(src) => {
                    if let Err(e) = compile(src) {
                        found(
                            format!("{at}.rule"),
                            format!("rule {src:?} does not compile: {e}"),
                        );
                    }
                }
            }
            if let Some(src) = text("messageExpression").filter(|m| !m.trim().is_empty())
                && let Err(e) = compile(src)
            {
                found(
                    format!("{at}.messageExpression"),
                    format!("messageExpression {src:?} does not compile: {e}"),
                );
            }
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (key, sub) in props {
            walk(sub, &format!("{path}.properties[{key}]"), found);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = schema.get(key).filter(|s| s.is_object()) {
            walk(sub, &format!("{path}.{key}"), found);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(subs) = schema.get(key).and_then(Value::as_array) {
            for (i, sub) in subs.iter().enumerate() {
                walk(sub, &format!("{path}.{key}[{i}]"), found);
            }
        }
    }
}

/// Every expression of one policy that does not compile (validations'
/// `expression` and `messageExpression`, match conditions), worded with
/// the policy, where the expression is, itself and kube-cel's error.
/// `validations`: `(expression, message expression)`; `conditions`:
/// `(name, expression)`.
#[must_use]
pub fn policy_problems(
    policy: &str,
    validations: &[(&str, Option<&str>)],
    conditions: &[(&str, &str)],
) -> Vec<String> {
    let mut found = Vec::new();
    let mut check = |at: String, src: &str| {
        if let Err(e) = compile(src) {
            found.push(format!(
                "policy {policy:?}: {at}: expression {src:?} does not compile: {e}"
            ));
        }
    };
    for (i, (expression, message)) in validations.iter().enumerate() {
        check(format!("validations[{i}].expression"), expression);
        if let Some(m) = message {
            check(format!("validations[{i}].messageExpression"), m);
        }
    }
    for (i, (name, expression)) in conditions.iter().enumerate() {
        check(format!("matchConditions[{i}] ({name})"), expression);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(rules: Value) -> Value {
        json!({"kind": "CustomResourceDefinition", "metadata": {"name": "widgets.rekon.dev"},
            "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"tags": {"type": "array", "items": {"type": "string",
                        "x-kubernetes-validations": [{"rule": "self.size() > 0"}]}}},
                    "x-kubernetes-validations": rules}}}}}]}})
    }

    #[test]
    fn rules_that_parse_pass_and_kubernetes_functions_parse() {
        let ok = crd(json!([
            {"rule": "self.size <= 10 && quantity('1Gi').isLessThan(quantity('2Gi'))",
             "messageExpression": "'size ' + string(self.size)"}
        ]));
        assert_eq!(crd_rule_problems(&ok), Vec::<String>::new());
    }

    #[test]
    fn a_rule_that_does_not_parse_is_named_with_its_path_and_the_error() {
        let bad =
            crd(json!([{"rule": "self.size <="}, {"rule": "true", "messageExpression": "'a' +"}]));
        let problems = crd_rule_problems(&bad);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with(
            "CRD widgets.rekon.dev: spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: rule \"self.size <=\" does not compile: "
        ), "{}", problems[0]);
        assert!(problems[1].contains("x-kubernetes-validations[1].messageExpression: messageExpression \"'a' +\" does not compile: "), "{}", problems[1]);
    }

    #[test]
    fn policy_expressions_are_compiled_each_named() {
        assert!(
            policy_problems(
                "p",
                &[("object.spec.size <= 10", Some("'x'"))],
                &[("c", "true")]
            )
            .is_empty()
        );
        let found = policy_problems("p", &[("object.spec.size <=", None)], &[("c", "(")]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("policy \"p\": validations[0].expression: expression \"object.spec.size <=\" does not compile: "), "{}", found[0]);
        assert!(
            found[1].starts_with(
                "policy \"p\": matchConditions[0] (c): expression \"(\" does not compile: "
            ),
            "{}",
            found[1]
        );
    }

    #[test]
    fn rules_under_items_are_walked() {
        let mut bad = crd(json!([]));
        bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["tags"]["items"]["x-kubernetes-validations"][0]["rule"] = json!("(");
        let problems = crd_rule_problems(&bad);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("properties[tags].items.x-kubernetes-validations[0].rule"),
            "{}",
            problems[0]
        );
    }
}
