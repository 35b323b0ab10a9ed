//! Admission over HTTP: a CRD's structural defaults and
//! `x-kubernetes-validations` rules on every write path (create, update,
//! merge / JSON patch, server-side apply, the status subresource, dryRun),
//! and ValidatingAdmissionPolicies with their bindings. Messages and
//! `details.causes` are compared with the API server's, character for
//! character.

mod common;

use common::{raw, req, within};
use kube_sim::SimCluster;
use serde_json::{Value, json};

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const JSONPATCH: &str = "application/json-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "default": {},
                        "x-kubernetes-validations": [
                            {"rule": "self.size <= self.max", "message": "size must not exceed max", "fieldPath": ".size"},
                            {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable", "reason": "FieldValueForbidden"}],
                        "properties": {
                            "size": {"type": "integer", "default": 1, "x-kubernetes-validations": [
                                {"rule": "self % 2 == 1", "messageExpression": "'size ' + string(self) + ' must be odd'"}]},
                            "max": {"type": "integer", "default": 9},
                            "mode": {"type": "string", "default": "fast"}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string", "x-kubernetes-validations": [
                            {"rule": "self in ['Pending', 'Ready']", "message": "unknown phase"}]}}}}}}}]}
    })
}

async fn cluster_with_widgets() -> SimCluster {
    let c = SimCluster::start("admission").await.expect("sim starts");
    let (code, v) = req(
        &c.url(),
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        JSON,
        Some(widget_crd()),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    c
}

/// The 422 a rule failure answers, as `NewInvalid` builds it.
fn invalid(name: &str, causes: &[(&str, &str, &str)]) -> Value {
    let shown: Vec<String> = causes.iter().map(|(_, f, m)| format!("{f}: {m}")).collect();
    let joined = if shown.len() == 1 {
        shown[0].clone()
    } else {
        format!("[{}]", shown.join(", "))
    };
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("Widget.example.com \"{name}\" is invalid: {joined}"),
        "reason": "Invalid",
        "details": {"name": name, "group": "example.com", "kind": "Widget",
            "causes": causes.iter().map(|(r, f, m)| json!({"reason": r, "message": m, "field": f})).collect::<Vec<_>>()},
        "code": 422})
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn crd_rules_and_defaults_on_create_and_update() {
    within(30, "crd rules", async {
        let c = cluster_with_widgets().await;
        let u = c.url();
        // Defaults fill the spec; the rules see the defaulted object.
        let (code, v) = req(&u, "POST", WIDGETS, JSON, Some(widget("a", json!(null)))).await;
        assert_eq!(code, 201, "{v}");
        assert_eq!(v["spec"], json!({"size": 1, "max": 9, "mode": "fast"}));
        // Two failures: one list, in the server's words.
        let (code, v) = req(&u, "POST", WIDGETS, JSON, Some(widget("w", json!({"size": 12, "max": 3})))).await;
        assert_eq!(code, 422);
        assert_eq!(
            v,
            invalid("w", &[
                ("FieldValueInvalid", "spec.size", "Invalid value: \"object\": size must not exceed max"),
                ("FieldValueInvalid", "spec.size", "Invalid value: \"integer\": size 12 must be odd"),
            ])
        );
        // dryRun runs the rules too.
        let (code, _) = req(&u, "POST", &format!("{WIDGETS}?dryRun=All"), JSON, Some(widget("w", json!({"size": 2})))).await;
        assert_eq!(code, 422);
        // A transition rule on update (PUT).
        let (_, mut cur) = req(&u, "GET", &format!("{WIDGETS}/a"), JSON, None).await;
        cur["spec"]["mode"] = json!("slow");
        let (code, v) = req(&u, "PUT", &format!("{WIDGETS}/a"), JSON, Some(cur)).await;
        assert_eq!(code, 422);
        assert_eq!(v, invalid("a", &[("FieldValueForbidden", "spec", "Forbidden: mode is immutable")]));
        // Nothing was stored by the failed writes.
        let (_, list) = req(&u, "GET", WIDGETS, JSON, None).await;
        assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
        // A schema error blocks the rules, as the server's hasBlockingErr does.
        let (code, v) = req(&u, "POST", WIDGETS, JSON, Some(widget("t", json!({"size": "big"})))).await;
        assert_eq!(code, 422);
        assert_eq!(
            v["message"],
            "Widget.example.com \"t\" is invalid: [spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\", <nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
        );
    })
    .await;
}

#[tokio::test]
async fn crd_rules_on_every_patch_kind_apply_and_status() {
    within(30, "crd rules on patches", async {
        let c = cluster_with_widgets().await;
        let u = c.url();
        let (code, _) = req(&u, "POST", WIDGETS, JSON, Some(widget("p", json!({"size": 3})))).await;
        assert_eq!(code, 201);
        let item = format!("{WIDGETS}/p");
        let size_odd = |n: i64| {
            invalid("p", &[(
                "FieldValueInvalid",
                "spec.size",
                &format!("Invalid value: \"integer\": size {n} must be odd"),
            )])
        };
        let (code, v) = req(&u, "PATCH", &item, MERGE, Some(json!({"spec": {"size": 4}}))).await;
        assert_eq!((code, v), (422, size_odd(4)));
        let (code, v) = req(&u, "PATCH", &item, JSONPATCH,
            Some(json!([{"op": "replace", "path": "/spec/size", "value": 6}]))).await;
        assert_eq!((code, v), (422, size_odd(6)));
        let apply = "{\"apiVersion\":\"example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"name\":\"p\"},\"spec\":{\"size\":8}}";
        let r = raw(&u, "PATCH", &format!("{item}?fieldManager=t&force=true"), &[("Content-Type", APPLY)], Some(apply)).await;
        assert_eq!((r.status, r.json()), (422, size_odd(8)));
        // Server-side apply that creates runs them too.
        let create = apply.replace("\"p\"", "\"q\"");
        let r = raw(&u, "PATCH", &format!("{WIDGETS}/q?fieldManager=t"), &[("Content-Type", APPLY)], Some(&create)).await;
        assert_eq!(r.status, 422, "{}", r.text());
        // The status subresource: rules under status apply.
        let (code, v) = req(&u, "PATCH", &format!("{item}/status"), MERGE, Some(json!({"status": {"phase": "Gone"}}))).await;
        assert_eq!(code, 422);
        assert_eq!(
            v,
            invalid("p", &[("FieldValueInvalid", "status.phase", "Invalid value: \"string\": unknown phase")])
        );
        let (code, v) = req(&u, "PATCH", &format!("{item}/status"), MERGE, Some(json!({"status": {"phase": "Ready"}}))).await;
        assert_eq!(code, 200, "{v}");
        let (code, v) = req(&u, "PATCH", &item, MERGE, Some(json!({"spec": {"size": 5}}))).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["spec"]["size"], 5);
    })
    .await;
}

#[tokio::test]
async fn an_unchanged_invalid_value_ratchets_to_a_warning() {
    within(30, "ratcheting", async {
        let c = cluster_with_widgets().await;
        let u = c.url();
        let (code, _) = req(
            &u,
            "POST",
            WIDGETS,
            JSON,
            Some(widget("r", json!({"size": 3}))),
        )
        .await;
        assert_eq!(code, 201);
        // A rule added to the CRD later: the stored object breaks it.
        let mut crd = widget_crd();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["mode"]["x-kubernetes-validations"] =
            json!([{"rule": "self != 'fast'", "message": "fast is retired"}]);
        let (_, cur) = req(
            &u,
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
            JSON,
            None,
        )
        .await;
        crd["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"].clone();
        let (code, v) = req(
            &u,
            "PUT",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
            JSON,
            Some(crd),
        )
        .await;
        assert_eq!(code, 200, "{v}");
        // Untouched, the invalid mode only warns.
        let r = raw(
            &u,
            "PATCH",
            &format!("{WIDGETS}/r"),
            &[("Content-Type", MERGE)],
            Some("{\"metadata\":{\"labels\":{\"x\":\"y\"}}}"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            r.header("Warning"),
            Some("299 - \"spec.mode: Invalid value: \\\"string\\\": fast is retired\"")
        );
    })
    .await;
}

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

async fn post(u: &str, path: &str, body: Value) {
    let (code, v) = req(u, "POST", path, JSON, Some(body)).await;
    assert_eq!(code, 201, "{path}: {v}");
}

/// The policy of the Kubernetes documentation's example, and a binding.
async fn demo_policy(u: &str, actions: &[&str]) {
    post(
        u,
        POLICIES,
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "demo-policy.example.com"},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 5"}]}}),
    )
    .await;
    post(u, BINDINGS, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "demo-binding-test.example.com"},
        "spec": {"policyName": "demo-policy.example.com", "validationActions": actions,
            "matchResources": {"namespaceSelector": {"matchLabels": {"environment": "test"}}}}})).await;
}

#[tokio::test]
async fn a_policy_denies_with_the_servers_error() {
    within(30, "vap deny", async {
        let c = SimCluster::start("vap").await.expect("sim starts");
        let u = c.url();
        demo_policy(&u, &["Deny"]).await;
        // The server's defaults (SetDefaults_MatchResources, _Rule).
        let (_, p) = req(&u, "GET", &format!("{POLICIES}/demo-policy.example.com"), JSON, None).await;
        let mc = &p["spec"]["matchConstraints"];
        assert_eq!((&mc["matchPolicy"], &mc["namespaceSelector"], &mc["objectSelector"], &mc["resourceRules"][0]["scope"]),
            (&json!("Equivalent"), &json!({}), &json!({}), &json!("*")), "{p}");
        assert_eq!(p["metadata"]["generation"], 1);
        let (_, b) = req(&u, "GET", &format!("{BINDINGS}/demo-binding-test.example.com"), JSON, None).await;
        assert_eq!(b["spec"]["matchResources"]["matchPolicy"], "Equivalent", "{b}");
        // The binding selects namespaces labelled environment=test only.
        post(&u, DEPLOYS, deployment("free", 7)).await;
        let (code, _) = req(&u, "PATCH", "/api/v1/namespaces/default", MERGE,
            Some(json!({"metadata": {"labels": {"environment": "test"}}}))).await;
        assert_eq!(code, 200);
        let (code, v) = req(&u, "POST", DEPLOYS, JSON, Some(deployment("nginx", 7))).await;
        let message = "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5";
        assert_eq!(code, 422);
        assert_eq!(
            v,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("deployments.apps \"nginx\" is forbidden: {message}"),
                "reason": "Invalid",
                "details": {"name": "nginx", "group": "apps", "kind": "deployments", "causes": [{"message": message}]},
                "code": 422})
        );
        // Updates of every kind are checked; a passing one goes through.
        let (code, _) = req(&u, "PATCH", &format!("{DEPLOYS}/free"), MERGE, Some(json!({"spec": {"replicas": 6}}))).await;
        assert_eq!(code, 422);
        let (code, v) = req(&u, "PATCH", &format!("{DEPLOYS}/free"), MERGE, Some(json!({"spec": {"replicas": 3}}))).await;
        assert_eq!(code, 200, "{v}");
        // dryRun is admitted the same way and stores nothing.
        let (code, _) = req(&u, "POST", &format!("{DEPLOYS}?dryRun=All"), JSON, Some(deployment("dry", 9))).await;
        assert_eq!(code, 422);
        // Deleting the binding lifts the policy.
        let (code, _) = req(&u, "DELETE", &format!("{BINDINGS}/demo-binding-test.example.com"), JSON, None).await;
        assert_eq!(code, 200);
        post(&u, DEPLOYS, deployment("nginx", 7)).await;
    })
    .await;
}

#[tokio::test]
async fn warn_and_audit_actions_admit_the_write() {
    within(30, "vap warn audit", async {
        let c = SimCluster::start("vap-warn").await.expect("sim starts");
        let u = c.url();
        let (code, _) = req(&u, "PATCH", "/api/v1/namespaces/default", MERGE,
            Some(json!({"metadata": {"labels": {"environment": "test"}}}))).await;
        assert_eq!(code, 200);
        demo_policy(&u, &["Warn", "Audit"]).await;
        let body = deployment("big", 8).to_string();
        let r = raw(&u, "POST", DEPLOYS, &[("Content-Type", JSON)], Some(&body)).await;
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(
            r.header("Warning"),
            Some("299 - \"Validation failed for ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com': failed expression: object.spec.replicas <= 5\"")
        );
        let audit = c.admission_audit();
        assert_eq!(audit.len(), 1);
        assert_eq!(audit[0].name, "big");
        assert_eq!(
            audit[0].annotations,
            vec![("validation.policy.admission.k8s.io/validation_failure".to_string(),
                "[{\"message\":\"failed expression: object.spec.replicas <= 5\",\"policy\":\"demo-policy.example.com\",\"binding\":\"demo-binding-test.example.com\",\"expressionIndex\":0,\"validationActions\":[\"Warn\",\"Audit\"]}]".to_string())]
        );
        let (_, v) = req(&u, "GET", "/_sim/admission-audit", JSON, None).await;
        assert_eq!(v["items"][0]["name"], "big");
    })
    .await;
}

#[tokio::test]
async fn params_variables_match_conditions_and_reasons() {
    within(30, "vap params", async {
        let c = SimCluster::start("vap-params").await.expect("sim starts");
        let u = c.url();
        post(&u, POLICIES, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "limits"},
            "spec": {
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["deployments"]}]},
                "matchConditions": [{"name": "not-exempt", "expression": "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"}],
                "variables": [{"name": "max", "expression": "int(params.data.maxReplicas)"},
                              {"name": "over", "expression": "object.spec.replicas - variables.max"}],
                "validations": [
                    {"expression": "variables.over <= 0", "reason": "Forbidden",
                     "messageExpression": "'replicas exceed ' + string(variables.max) + ' by ' + string(variables.over)"},
                    {"expression": "request.userInfo.username == 'kubernetes-admin'", "message": "admins only"}]}})).await;
        post(&u, BINDINGS, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "limits-default"},
            "spec": {"policyName": "limits", "validationActions": ["Deny"],
                "paramRef": {"name": "limits", "namespace": "default", "parameterNotFoundAction": "Deny"}}})).await;
        // No params yet: parameterNotFoundAction Deny.
        let (code, v) = req(&u, "POST", DEPLOYS, JSON, Some(deployment("a", 1))).await;
        assert_eq!(code, 422);
        assert_eq!(v["message"], "deployments.apps \"a\" is forbidden: ValidatingAdmissionPolicy 'limits' with binding 'limits-default' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction");
        post(&u, "/api/v1/namespaces/default/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "limits"}, "data": {"maxReplicas": "3"}})).await;
        post(&u, DEPLOYS, deployment("a", 2)).await;
        // A Forbidden reason answers 403.
        let (code, v) = req(&u, "POST", DEPLOYS, JSON, Some(deployment("b", 5))).await;
        assert_eq!(code, 403);
        assert_eq!(v["reason"], "Forbidden");
        assert_eq!(v["message"], "deployments.apps \"b\" is forbidden: ValidatingAdmissionPolicy 'limits' with binding 'limits-default' denied request: replicas exceed 3 by 2");
        // A false match condition skips the policy.
        let mut exempt = deployment("c", 9);
        exempt["metadata"]["labels"]["exempt"] = json!("yes");
        post(&u, DEPLOYS, exempt).await;
        // DELETE: object is null; the policy still runs (and the
        // expression errors, which failurePolicy Fail turns into a denial).
        let (code, v) = req(&u, "DELETE", &format!("{DEPLOYS}/a"), JSON, None).await;
        assert_eq!(code, 422, "{v}");
        // (The error's own text is the `cel` crate's, not cel-go's.)
        let msg = v["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with("deployments.apps \"a\" is forbidden: ValidatingAdmissionPolicy 'limits' with binding 'limits-default' denied request: composited variable \"over\" fails to evaluate: expression 'object.spec.replicas - variables.max' resulted in error: "),
            "{v}"
        );
    })
    .await;
}

/// kube-cel has no `authorizer` library: a policy using it fails closed
/// (refused even under `failurePolicy: Ignore`), where the server would
/// have evaluated it; a policy without it under Ignore still admits.
#[tokio::test]
async fn a_policy_using_the_authorizer_fails_closed() {
    within(30, "vap authorizer", async {
        let c = SimCluster::start("vap-authz").await.expect("sim starts");
        let u = c.url();
        let policy = |name: &str, expression: &str| {
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {"failurePolicy": "Ignore",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["deployments"]}]},
                "validations": [{"expression": expression}]}})
        };
        let binding = |name: &str| {
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}})
        };
        // Ignore admits a failing expression that does not use it.
        post(&u, POLICIES, policy("broken", "object.spec.nope.deeper == 1")).await;
        post(&u, BINDINGS, binding("broken")).await;
        post(&u, DEPLOYS, deployment("first", 1)).await;
        post(&u, POLICIES, policy("authz", "authorizer.group('apps').resource('deployments').check('create').allowed()")).await;
        post(&u, BINDINGS, binding("authz")).await;
        let (code, v) = req(&u, "POST", DEPLOYS, JSON, Some(deployment("second", 1))).await;
        assert_ne!(code, 201, "{v}");
        let message = v["message"].as_str().unwrap_or_default();
        assert_eq!(
            message,
            "deployments.apps \"second\" is forbidden: ValidatingAdmissionPolicy 'authz' with binding 'authz' denied request: expression 'authorizer.group('apps').resource('deployments').check('create').allowed()' resulted in error: kube-sim does not evaluate the authorizer variable (kube-cel has no authorization library)"
        );
    })
    .await;
}
