//! Admission webhooks against a real HTTPS webhook server written here
//! (axum on rustls, certificates from an rcgen CA): mutating patches seen
//! by `kubectl get`, validating denials as the server words them and as
//! kubectl prints them, warnings, failurePolicy with an unreachable
//! webhook, a wrong caBundle, the selectors and match conditions, dryRun
//! with sideEffects, reinvocation, DELETE, the status subresource, and a
//! slow webhook that does not hold the store.

mod common;

use std::process::Stdio;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use base64::Engine as _;
use common::hooks::{ca_b64, certs, kubectl};
use common::{raw, req, within};
use kube_sim::{Sim, SimCluster};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::Notify;

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const CMS: &str = "/api/v1/namespaces/default/configmaps";
const MWC: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
const VWC: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";

/// What the webhook server saw and how its `/slow` path is held.
#[derive(Default)]
struct Seen {
    /// (path, AdmissionReview request) in arrival order.
    calls: Mutex<Vec<(String, Value)>>,
    /// `/slow` answers once this is notified.
    gate: Notify,
    arrived: Notify,
    /// Once set, `/slow` answers at once.
    open: std::sync::atomic::AtomicBool,
}

impl Seen {
    fn on(&self, path: &str) -> Vec<Value> {
        self.calls
            .lock()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }
}

fn patch_b64(ops: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(ops.to_string())
}

/// The webhook: one behaviour per path.
async fn hook(
    State(seen): State<Arc<Seen>>,
    uri: axum::http::Uri,
    body: axum::body::Bytes,
) -> axum::Json<Value> {
    let review: Value = serde_json::from_slice(&body).unwrap();
    let request = review["request"].clone();
    let path = uri.path().to_string();
    seen.calls.lock().push((path.clone(), request.clone()));
    let uid = request["uid"].clone();
    let mut response = json!({"uid": uid, "allowed": true});
    match path.as_str() {
        "/label" => {
            let has_labels = request["object"]["metadata"]["labels"].is_object();
            let ops = if has_labels {
                json!([{"op": "add", "path": "/metadata/labels/webhook", "value": "seen"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"webhook": "seen"}}])
            };
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch_b64(&ops));
        }
        "/deny" => {
            response["allowed"] = json!(false);
            response["status"] = json!({"message": "no widgets today"});
            response["warnings"] = json!(["denied by the test webhook"]);
        }
        "/deny-403" => {
            response["allowed"] = json!(false);
            response["status"] =
                json!({"code": 403, "reason": "Forbidden", "message": "not on fridays"});
        }
        "/scale-four" => {
            let ops = json!([{"op": "replace", "path": "/spec/replicas", "value": 4}]);
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch_b64(&ops));
        }
        "/bad-uid" => {
            response["uid"] = json!("nope");
        }
        "/warn" => {
            response["warnings"] = json!(["this configmap is watched"]);
            response["auditAnnotations"] = json!({"watched": "yes"});
        }
        "/slow" if !seen.open.load(std::sync::atomic::Ordering::SeqCst) => {
            seen.arrived.notify_one();
            seen.gate.notified().await;
        }
        _ => {}
    }
    axum::Json(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

/// Starts the webhook server; returns its address and CA.
async fn webhook_server() -> (String, String, Arc<Seen>) {
    let c = certs();
    let seen = Arc::new(Seen::default());
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap().to_string();
    let listener = kube_sim::tls::TlsListener::new(tcp, c.server).unwrap();
    let app = axum::Router::new()
        .fallback(post(hook))
        .with_state(seen.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, c.ca_pem, seen)
}

/// One webhook of a configuration: `url` (https://addr/path), rules on
/// configmaps CREATE/UPDATE unless `extra` overrides.
fn webhook(name: &str, url: &str, ca: &str, extra: Value) -> Value {
    let mut h = json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca_b64(ca)},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().unwrap() {
        h[k] = v.clone();
    }
    h
}

async fn register(c: &SimCluster, path: &str, kind: &str, name: &str, hooks: Vec<Value>) {
    let (code, v) = req(
        &c.url(),
        "POST",
        path,
        JSON,
        Some(json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "webhooks": hooks})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
}

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"a": "1"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_mutations_denials_and_warnings() {
    within(180, "kubectl webhooks", async {
        let (addr, ca, seen) = webhook_server().await;
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        // The mutating webhook is reached through a Service mapped here.
        c.map_webhook_service("hook.default", &addr);
        let mwc = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {{name: labeler}}\nwebhooks:\n- name: label.example.com\n  clientConfig:\n    service: {{name: hook, namespace: default, path: /label}}\n    caBundle: {}\n  rules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}}]\n  sideEffects: None\n  admissionReviewVersions: [v1]\n",
            ca_b64(&ca)
        );
        let (ok, out, err) = kubectl(&sim, &["apply", "-f", "-"], Some(&mwc)).await;
        assert!(ok, "{out}{err}");
        let (ok, out, err) = kubectl(&sim, &["get", "mutatingwebhookconfiguration", "labeler", "-o", "json"], None).await;
        assert!(ok, "{err}");
        let got: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(got["webhooks"][0]["failurePolicy"], "Fail", "defaulted");
        assert_eq!(got["webhooks"][0]["timeoutSeconds"], 10);
        assert_eq!(got["webhooks"][0]["clientConfig"]["service"]["port"], 443);
        assert_eq!(got["metadata"]["generation"], 1);

        // A configuration the server refuses, in its words.
        let bad = "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: sidecar-injector-webhook-cfg}\nwebhooks:\n- name: sidecar-injector.example.com\n  clientConfig: {url: \"https://127.0.0.1:1/\"}\n";
        let (ok, _, err) = kubectl(&sim, &["create", "--validate=false", "-f", "-"], Some(bad)).await;
        assert!(!ok);
        assert_eq!(
            err.trim_end(),
            "The MutatingWebhookConfiguration \"sidecar-injector-webhook-cfg\" is invalid: \n* webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun\n* webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1"
        );
        let (ok, out, err) = kubectl(&sim, &["create", "configmap", "one", "--from-literal=a=1"], None).await;
        assert!(ok, "{out}{err}");
        let (ok, out, _) = kubectl(&sim, &["get", "configmap", "one", "-o", "jsonpath={.metadata.labels.webhook}"], None).await;
        assert!(ok);
        assert_eq!(out, "seen");
        let calls = seen.on("/label");
        assert_eq!(calls.len(), 1);
        let r = &calls[0];
        assert_eq!(r["operation"], "CREATE");
        assert_eq!(r["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
        assert_eq!(r["resource"], json!({"group": "", "version": "v1", "resource": "configmaps"}));
        assert_eq!(r["requestKind"], r["kind"]);
        assert_eq!(r["namespace"], "default");
        assert_eq!(r["name"], "one");
        assert_eq!(r["userInfo"]["username"], "kubernetes-admin");
        assert_eq!(r["dryRun"], false);
        assert_eq!(r["object"]["data"]["a"], "1");
        assert!(r["oldObject"].is_null());
        assert_eq!(r["options"]["kind"], "CreateOptions");

        // A validating webhook denies: kubectl prints the server's words.
        let vwc = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: guard}}\nwebhooks:\n- name: deny.example.com\n  clientConfig:\n    url: https://{addr}/deny\n    caBundle: {}\n  rules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}]\n  objectSelector: {{matchLabels: {{guarded: \"yes\"}}}}\n  sideEffects: None\n  admissionReviewVersions: [v1]\n- name: warn.example.com\n  clientConfig:\n    url: https://{addr}/warn\n    caBundle: {}\n  rules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [UPDATE], resources: [configmaps]}}]\n  sideEffects: None\n  admissionReviewVersions: [v1]\n",
            ca_b64(&ca),
            ca_b64(&ca)
        );
        let (ok, out, err) = kubectl(&sim, &["apply", "-f", "-"], Some(&vwc)).await;
        assert!(ok, "{out}{err}");
        let guarded = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: two, labels: {guarded: \"yes\"}}\ndata: {a: \"1\"}\n";
        let (ok, _, err) = kubectl(&sim, &["create", "-f", "-"], Some(guarded)).await;
        assert!(!ok);
        // The warnings of a denying webhook are printed too.
        assert_eq!(
            err.trim(),
            "Warning: denied by the test webhook\nError from server: error when creating \"STDIN\": admission webhook \"deny.example.com\" denied the request: no widgets today"
        );
        // The mutating webhook ran first: the validating one saw its label.
        let denied = seen.on("/deny");
        assert_eq!(denied.len(), 1);
        assert_eq!(denied[0]["object"]["metadata"]["labels"]["webhook"], "seen");
        // A warning of a webhook is a Warning header kubectl prints.
        let (ok, out, err) = kubectl(&sim, &["label", "configmap", "one", "x=y"], None).await;
        assert!(ok, "{out}{err}");
        assert_eq!(err.trim(), "Warning: this configmap is watched");
        // Its auditAnnotations are recorded, keyed by the webhook's name.
        let audit: Vec<_> = c
            .admission_audit()
            .into_iter()
            .filter(|r| r.name == "one")
            .collect();
        assert_eq!(audit.len(), 1, "{audit:?}");
        assert_eq!(audit[0].operation, "UPDATE");
        assert_eq!(audit[0].resource, "/v1/configmaps");
        assert_eq!(
            audit[0].annotations,
            vec![("warn.example.com/watched".to_string(), "yes".to_string())]
        );
        let updates = seen.on("/label");
        // one, two (then denied by the validating webhook), the label.
        assert_eq!(updates.len(), 3);
        assert_eq!(updates[2]["operation"], "UPDATE");
        assert_eq!(updates[2]["oldObject"]["metadata"]["labels"]["webhook"], "seen");
        assert_eq!(updates[2]["object"]["metadata"]["labels"]["x"], "y");
        assert_eq!(updates[2]["options"]["kind"], "UpdateOptions");
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denial_codes_failure_policies_and_ca_bundles() {
    within(120, "webhook failures", async {
        let (addr, ca, _seen) = webhook_server().await;
        let c = SimCluster::start("failures").await.unwrap();
        let only = |n: &str| json!({"objectSelector": {"matchLabels": {"case": n}}});
        let with = |n: &str, extra: Value| {
            let mut o = only(n);
            for (k, v) in extra.as_object().unwrap() {
                o[k] = v.clone();
            }
            o
        };
        let other_ca = certs().ca_pem;
        register(&c, VWC, "ValidatingWebhookConfiguration", "cases", vec![
            webhook("deny403.example.com", &format!("https://{addr}/deny-403"), &ca, only("forbidden")),
            webhook("down-ignore.example.com", "https://127.0.0.1:1/", &ca, with("ignore", json!({"failurePolicy": "Ignore"}))),
            webhook("down-fail.example.com", "https://127.0.0.1:1/", &ca, only("fail")),
            webhook("wrong-ca.example.com", &format!("https://{addr}/allow"), &other_ca, only("wrongca")),
            webhook("wrong-ca-ignore.example.com", &format!("https://{addr}/allow"), &other_ca, with("wrongca-ignore", json!({"failurePolicy": "Ignore"}))),
            webhook("timeout.example.com", &format!("https://{addr}/slow"), &ca, with("timeout", json!({"timeoutSeconds": 1}))),
            webhook("bad-uid.example.com", &format!("https://{addr}/bad-uid"), &ca, only("bad-uid")),
        ])
        .await;
        // The webhook's code and reason are kept.
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("a", json!({"case": "forbidden"})))).await;
        assert_eq!(code, 403, "{v}");
        assert_eq!(v["reason"], "Forbidden");
        assert_eq!(v["message"], "admission webhook \"deny403.example.com\" denied the request: not on fridays");
        // Unreachable: Ignore admits, Fail answers 500 in the server's words.
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("b", json!({"case": "ignore"})))).await;
        assert_eq!(code, 201, "{v}");
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("c", json!({"case": "fail"})))).await;
        assert_eq!(code, 500, "{v}");
        assert_eq!(v["reason"], "InternalError");
        assert_eq!(
            v["message"],
            "Internal error occurred: failed calling webhook \"down-fail.example.com\": Post \"https://127.0.0.1:1/?timeout=10s\": dial tcp 127.0.0.1:1: connect: connection refused"
        );
        // A caBundle that did not sign the webhook's certificate fails the call.
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("d", json!({"case": "wrongca"})))).await;
        assert_eq!(code, 500, "{v}");
        assert_eq!(
            v["message"],
            format!("Internal error occurred: failed calling webhook \"wrong-ca.example.com\": Post \"https://{addr}/allow?timeout=10s\": tls: failed to verify certificate: x509: certificate signed by unknown authority")
        );
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("e", json!({"case": "wrongca-ignore"})))).await;
        assert_eq!(code, 201, "{v}");
        // timeoutSeconds bounds the call.
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("g", json!({"case": "timeout"})))).await;
        assert_eq!(code, 500, "{v}");
        assert_eq!(
            v["message"],
            format!("Internal error occurred: failed calling webhook \"timeout.example.com\": Post \"https://{addr}/slow?timeout=1s\": context deadline exceeded")
        );
        // An answer to another request is refused.
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("h", json!({"case": "bad-uid"})))).await;
        assert_eq!(code, 500, "{v}");
        let m = v["message"].as_str().unwrap();
        assert!(
            m.starts_with("Internal error occurred: failed calling webhook \"bad-uid.example.com\": expected response.uid=\"")
                && m.ends_with("\", got \"nope\""),
            "{m}"
        );
        // A mutating webhook's call failure carries `failed to call webhook`.
        register(&c, MWC, "MutatingWebhookConfiguration", "down", vec![
            webhook("down-mutating.example.com", "https://127.0.0.1:1/", &ca, only("mutating-fail")),
        ])
        .await;
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("f", json!({"case": "mutating-fail"})))).await;
        assert_eq!(code, 500, "{v}");
        assert_eq!(
            v["message"],
            "Internal error occurred: failed calling webhook \"down-mutating.example.com\": failed to call webhook: Post \"https://127.0.0.1:1/?timeout=10s\": dial tcp 127.0.0.1:1: connect: connection refused"
        );
        assert_eq!(v["details"]["causes"][0]["message"], "failed calling webhook \"down-mutating.example.com\": failed to call webhook: Post \"https://127.0.0.1:1/?timeout=10s\": dial tcp 127.0.0.1:1: connect: connection refused");
        // Nothing of the failed writes was stored.
        for n in ["a", "c", "d", "f", "g", "h"] {
            let (code, _) = req(&c.url(), "GET", &format!("{CMS}/{n}"), JSON, None).await;
            assert_eq!(code, 404, "{n}");
        }
        c.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_match_conditions_dry_run_and_reinvocation() {
    within(120, "webhook matching", async {
        let (addr, ca, seen) = webhook_server().await;
        let c = SimCluster::start("matching").await.unwrap();
        let (code, v) = req(&c.url(), "POST", "/api/v1/namespaces", JSON,
            Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "watched", "labels": {"hooks": "on"}}}))).await;
        assert_eq!(code, 201, "{v}");
        let url = |p: &str| format!("https://{addr}{p}");
        register(&c, MWC, "MutatingWebhookConfiguration", "a-first", vec![
            // Reinvoked once because the later webhook changes the object.
            webhook("record.example.com", &url("/record"), &ca, json!({"reinvocationPolicy": "IfNeeded",
                "namespaceSelector": {"matchLabels": {"hooks": "on"}}})),
        ]).await;
        register(&c, MWC, "MutatingWebhookConfiguration", "b-second", vec![
            webhook("label.example.com", &url("/label"), &ca, json!({
                "namespaceSelector": {"matchLabels": {"hooks": "on"}},
                "matchConditions": [{"name": "not-skipped", "expression": "object.metadata.name != 'skip-me'"}]})),
        ]).await;
        // sideEffects Unknown/Some cannot be registered through v1.
        let unknown = webhook("unknown-effects.example.com", &url("/allow"), &ca, json!({"sideEffects": "Unknown"}));
        let (code, v) = req(&c.url(), "POST", VWC, JSON, Some(json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "dry-bad"}, "webhooks": [unknown]}))).await;
        assert_eq!(code, 422, "{v}");
        assert_eq!(v["message"], "ValidatingWebhookConfiguration.admissionregistration.k8s.io \"dry-bad\" is invalid: webhooks[0].sideEffects: Unsupported value: \"Unknown\": supported values: \"None\", \"NoneOnDryRun\"");
        register(&c, VWC, "ValidatingWebhookConfiguration", "dry", vec![
            webhook("no-effects.example.com", &url("/none"), &ca, json!({"sideEffects": "NoneOnDryRun",
                "objectSelector": {"matchLabels": {"effects": "none"}}})),
            webhook("cond-fail.example.com", &url("/none"), &ca, json!({
                "objectSelector": {"matchLabels": {"cond": "fail"}},
                "matchConditions": [{"name": "bad", "expression": "object.data.nope == '1'"}]})),
            webhook("cond-ignore.example.com", &url("/none"), &ca, json!({"failurePolicy": "Ignore",
                "objectSelector": {"matchLabels": {"cond": "ignore"}},
                "matchConditions": [{"name": "bad", "expression": "object.data.nope == '1'"}]})),
            // kube-cel has no authorizer: such a condition fails closed,
            // even under Ignore.
            webhook("cond-authz.example.com", &url("/none"), &ca, json!({"failurePolicy": "Ignore",
                "objectSelector": {"matchLabels": {"cond": "authz"}},
                "matchConditions": [{"name": "authz", "expression": "authorizer.requestResource.check('get').allowed()"}]})),
        ]).await;
        let (code, v) = req(&c.url(), "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(cm("authz", json!({"cond": "authz"})))).await;
        assert_eq!(code, 403, "{v}");
        assert_eq!(v["message"], "configmaps \"authz\" is forbidden: expression 'authorizer.requestResource.check('get').allowed()' resulted in error: kube-sim does not evaluate the authorizer variable (kube-cel has no authorization library)");
        // A match condition that fails to evaluate: Fail forbids, Ignore skips.
        let (code, v) = req(&c.url(), "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(cm("boom", json!({"cond": "fail"})))).await;
        assert_eq!(code, 403, "{v}");
        assert_eq!(v["message"], "configmaps \"boom\" is forbidden: expression 'object.data.nope == '1'' resulted in error: no such key: nope");
        let (code, v) = req(&c.url(), "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(cm("quiet", json!({"cond": "ignore"})))).await;
        assert_eq!(code, 201, "{v}");
        assert!(seen.on("/none").is_empty());
        let in_ns = |ns: &str| format!("/api/v1/namespaces/{ns}/configmaps");
        // Selected: both mutating webhooks; the first one twice.
        let (code, v) = req(&c.url(), "POST", &in_ns("watched"), JSON, Some(cm("one", json!({})))).await;
        assert_eq!(code, 201, "{v}");
        assert_eq!(v["metadata"]["labels"]["webhook"], "seen");
        let record = seen.on("/record");
        assert_eq!(record.len(), 2, "IfNeeded reinvokes once");
        assert!(record[0]["object"]["metadata"]["labels"]["webhook"].is_null());
        assert_eq!(record[1]["object"]["metadata"]["labels"]["webhook"], "seen");
        assert_eq!(seen.on("/label").len(), 1);
        // namespaceSelector: the default namespace has no `hooks` label.
        let (code, v) = req(&c.url(), "POST", &in_ns("default"), JSON, Some(cm("two", json!({})))).await;
        assert_eq!(code, 201);
        assert!(v["metadata"]["labels"]["webhook"].is_null(), "{v}");
        // matchConditions: false skips the webhook.
        let (code, v) = req(&c.url(), "POST", &in_ns("watched"), JSON, Some(cm("skip-me", json!({})))).await;
        assert_eq!(code, 201);
        assert!(v["metadata"]["labels"]["webhook"].is_null(), "{v}");
        assert_eq!(seen.on("/label").len(), 1);
        // dryRun: a webhook without side effects on dry runs is called.
        let (code, v) = req(&c.url(), "POST", &format!("{}?dryRun=All", in_ns("default")), JSON,
            Some(cm("dry", json!({"effects": "none"})))).await;
        assert_eq!(code, 201, "{v}");
        let none = seen.on("/none");
        assert_eq!(none.len(), 1);
        assert_eq!(none[0]["dryRun"], true);
        let (code, _) = req(&c.url(), "GET", &format!("{}/dry", in_ns("default")), JSON, None).await;
        assert_eq!(code, 404, "dry run stored nothing");
        c.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_status_and_patches_reach_the_webhooks() {
    within(120, "webhook operations", async {
        let (addr, ca, seen) = webhook_server().await;
        let c = SimCluster::start("operations").await.unwrap();
        let url = |p: &str| format!("https://{addr}{p}");
        register(&c, VWC, "ValidatingWebhookConfiguration", "ops", vec![
            webhook("deletes.example.com", &url("/deny"), &ca, json!({
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["configmaps"]}],
                "objectSelector": {"matchLabels": {"keep": "yes"}}})),
            webhook("status.example.com", &url("/status"), &ca, json!({
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["deployments/status"]}]})),
            webhook("patches.example.com", &url("/patches"), &ca, json!({
                "rules": [{"apiGroups": [""], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["*"]}],
                "objectSelector": {"matchLabels": {"watch": "patches"}}})),
        ]).await;
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("kept", json!({"keep": "yes", "watch": "patches"})))).await;
        assert_eq!(code, 201, "{v}");
        let (code, v) = req(&c.url(), "DELETE", &format!("{CMS}/kept"), JSON, None).await;
        assert_eq!(code, 400, "{v}");
        assert_eq!(v["message"], "admission webhook \"deletes.example.com\" denied the request: no widgets today");
        let d = seen.on("/deny");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0]["operation"], "DELETE");
        assert!(d[0]["object"].is_null());
        assert_eq!(d[0]["oldObject"]["metadata"]["name"], "kept");
        assert_eq!(d[0]["options"]["kind"], "DeleteOptions");
        // DELETE of a collection: each item is a DELETE the webhooks see.
        for (n, labels) in [("g1", json!({"group": "g"})), ("g2", json!({"group": "g", "keep": "yes"}))] {
            let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm(n, labels))).await;
            assert_eq!(code, 201, "{v}");
        }
        let (code, v) = req(&c.url(), "DELETE", &format!("{CMS}?labelSelector=group%3Dg"), JSON, None).await;
        assert_eq!(code, 400, "{v}");
        assert_eq!(v["message"], "admission webhook \"deletes.example.com\" denied the request: no widgets today");
        let (code, _) = req(&c.url(), "GET", &format!("{CMS}/g1"), JSON, None).await;
        assert_eq!(code, 404, "g1 was deleted before g2 was denied");
        let (code, _) = req(&c.url(), "GET", &format!("{CMS}/g2"), JSON, None).await;
        assert_eq!(code, 200);
        assert_eq!(seen.on("/deny").len(), 2);
        // Webhooks never see the admission configuration itself.
        register(&c, VWC, "ValidatingWebhookConfiguration", "everything", vec![
            webhook("everything.example.com", &url("/deny"), &ca, json!({
                "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}],
                "objectSelector": {"matchLabels": {"everything": "denied"}}})),
        ]).await;
        let (code, v) = req(&c.url(), "PATCH", &format!("{VWC}/everything"), MERGE,
            Some(json!({"metadata": {"labels": {"everything": "denied"}}}))).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["metadata"]["generation"], 1, "a label is no change of the webhooks");
        let (code, v) = req(&c.url(), "PATCH", &format!("{VWC}/everything"), "application/json-patch+json",
            Some(json!([{"op": "replace", "path": "/webhooks/0/timeoutSeconds", "value": 5}]))).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["metadata"]["generation"], 2);
        let (code, v) = req(&c.url(), "DELETE", &format!("{VWC}/everything"), JSON, None).await;
        assert_eq!(code, 200, "{v}");
        // Every patch type reaches the webhook with the patched object.
        for (ct, body) in [
            (MERGE, json!({"data": {"m": "1"}})),
            ("application/json-patch+json", json!([{"op": "add", "path": "/data/j", "value": "1"}])),
            ("application/strategic-merge-patch+json", json!({"data": {"s": "1"}})),
        ] {
            let r = raw(&c.url(), "PATCH", &format!("{CMS}/kept"), &[("Content-Type", ct)], Some(&body.to_string())).await;
            assert_eq!(r.status, 200, "{ct}: {}", r.text());
        }
        let r = raw(&c.url(), "PATCH", &format!("{CMS}/kept?fieldManager=t"), &[("Content-Type", "application/apply-patch+yaml")],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept}\ndata: {x: \"1\"}\n")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let p = seen.on("/patches");
        assert_eq!(p.len(), 4);
        assert_eq!(p[0]["object"]["data"]["m"], "1");
        assert_eq!(p[1]["object"]["data"]["j"], "1");
        assert_eq!(p[2]["object"]["data"]["s"], "1");
        assert_eq!(p[3]["object"]["data"]["x"], "1");
        assert!(p.iter().all(|r| r["operation"] == "UPDATE" && r["oldObject"]["metadata"]["name"] == "kept"));
        // The status subresource: only writes to /status call the webhook.
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let deps = "/apis/apps/v1/namespaces/default/deployments";
        let (code, v) = req(&c.url(), "POST", deps, JSON, Some(deploy)).await;
        assert_eq!(code, 201, "{v}");
        let (code, v) = req(&c.url(), "PATCH", &format!("{deps}/web"), MERGE, Some(json!({"spec": {"replicas": 2}}))).await;
        assert_eq!(code, 200, "{v}");
        assert!(seen.on("/status").is_empty());
        let (code, v) = req(&c.url(), "PATCH", &format!("{deps}/web/status"), MERGE, Some(json!({"status": {"replicas": 2}}))).await;
        assert_eq!(code, 200, "{v}");
        let s = seen.on("/status");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0]["subResource"], "status");
        assert_eq!(s[0]["requestSubResource"], "status");
        c.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_webhook_holds_no_store_lock() {
    within(120, "slow webhook", async {
        let (addr, ca, seen) = webhook_server().await;
        let c = SimCluster::start("slow").await.unwrap();
        register(
            &c,
            VWC,
            "ValidatingWebhookConfiguration",
            "slow",
            vec![webhook(
                "slow.example.com",
                &format!("https://{addr}/slow"),
                &ca,
                json!({
                "objectSelector": {"matchLabels": {"speed": "slow"}}, "timeoutSeconds": 30}),
            )],
        )
        .await;
        let (code, _) = req(&c.url(), "POST", CMS, JSON, Some(cm("other", json!({})))).await;
        assert_eq!(code, 201);
        let url = c.url();
        let slow = tokio::spawn(async move {
            req(
                &url,
                "POST",
                CMS,
                JSON,
                Some(cm("held", json!({"speed": "slow"}))),
            )
            .await
        });
        seen.arrived.notified().await;
        // The webhook holds its call: reads and other writes go on.
        let (code, v) = req(&c.url(), "GET", &format!("{CMS}/other"), JSON, None).await;
        assert_eq!(code, 200, "{v}");
        let (code, v) = req(&c.url(), "POST", CMS, JSON, Some(cm("fast", json!({})))).await;
        assert_eq!(code, 201, "{v}");
        let (code, v) = req(
            &c.url(),
            "PATCH",
            &format!("{CMS}/other"),
            MERGE,
            Some(json!({"data": {"b": "2"}})),
        )
        .await;
        assert_eq!(code, 200, "{v}");
        assert!(!slow.is_finished(), "the slow write waits for its webhook");
        let (code, _) = req(&c.url(), "GET", &format!("{CMS}/held"), JSON, None).await;
        assert_eq!(code, 404, "not stored before the webhook answered");
        seen.gate.notify_one();
        let (code, v) = slow.await.unwrap();
        assert_eq!(code, 201, "{v}");
        let order: Vec<String> = {
            let (code, v) = req(&c.url(), "GET", CMS, JSON, None).await;
            assert_eq!(code, 200);
            let mut items: Vec<(u64, String)> = v["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| {
                    (
                        o["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap()
                            .parse()
                            .unwrap(),
                        o["metadata"]["name"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            items.sort();
            items.into_iter().map(|(_, n)| n).collect()
        };
        // `fast` was stored while `held` waited (resourceVersion order).
        let pos = |n: &str| order.iter().position(|x| x == n).unwrap();
        assert!(pos("fast") < pos("held"), "{order:?}");
        c.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_object_changed_during_its_webhook_starts_over() {
    within(120, "webhook retry", async {
        let (addr, ca, seen) = webhook_server().await;
        let c = SimCluster::start("retry").await.unwrap();
        // Only writes that carry the `slow` annotation call the webhook.
        register(&c, MWC, "MutatingWebhookConfiguration", "slow", vec![
            webhook("slow.example.com", &format!("https://{addr}/slow"), &ca, json!({
                "matchConditions": [{"name": "slow", "expression": "has(object.metadata.annotations) && 'slow' in object.metadata.annotations"}],
                "timeoutSeconds": 30})),
        ]).await;
        let (code, _) = req(&c.url(), "POST", CMS, JSON, Some(cm("x", json!({})))).await;
        assert_eq!(code, 201);
        let url = c.url();
        let slow = tokio::spawn(async move {
            req(&url, "PATCH", &format!("{CMS}/x"), MERGE,
                Some(json!({"metadata": {"annotations": {"slow": "yes"}}, "data": {"from": "slow"}}))).await
        });
        seen.arrived.notified().await;
        // Another write changes the object while the webhook holds the first.
        let (code, v) = req(&c.url(), "PATCH", &format!("{CMS}/x"), MERGE, Some(json!({"data": {"other": "1"}}))).await;
        assert_eq!(code, 200, "{v}");
        seen.open.store(true, std::sync::atomic::Ordering::SeqCst);
        seen.gate.notify_one();
        let (code, v) = slow.await.unwrap();
        assert_eq!(code, 200, "{v}");
        // The patch was applied again to the changed object, and the
        // webhook saw that object on the second try.
        assert_eq!(v["data"], json!({"a": "1", "other": "1", "from": "slow"}));
        let calls = seen.on("/slow");
        assert_eq!(calls.len(), 2);
        assert!(calls[0]["oldObject"]["data"]["other"].is_null());
        assert_eq!(calls[1]["oldObject"]["data"]["other"], "1");
        c.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_standard_library_webhook_is_called() {
    within(120, "python webhook", async {
        let c = certs();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, &c.cert_pem).unwrap();
        std::fs::write(&key, &c.key_pem).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/webhook.py");
        let mut child = tokio::process::Command::new("python3")
            .arg(script)
            .arg(&cert)
            .arg(&key)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 is installed");
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
        let port = lines.next_line().await.unwrap().expect("the webhook prints its port");
        let sim = Sim::start(&["main"]).await.unwrap();
        sim.cluster("main").map_webhook_service("py-hook.default:8443", &format!("127.0.0.1:{port}"));
        let ca = ca_b64(&c.ca_pem);
        let (ok, out, err) = kubectl(&sim, &["apply", "-f", "-"], Some(&format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {{name: py}}\nwebhooks:\n- name: mutate.python.example.com\n  clientConfig: {{url: \"https://127.0.0.1:{port}/mutate\", caBundle: {ca}}}\n  rules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}]\n  sideEffects: None\n  admissionReviewVersions: [v1]\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: py}}\nwebhooks:\n- name: validate.python.example.com\n  clientConfig:\n    service: {{name: hook, namespace: default, port: 8443, path: /validate}}\n    caBundle: {ca}\n  rules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}}]\n  sideEffects: None\n  admissionReviewVersions: [v1]\n"
        ))).await;
        assert!(ok, "{out}{err}");
        // The service is not mapped under the name the configuration uses
        // yet: the call fails closed, in the server's words.
        let (ok, _, err) = kubectl(&sim, &["create", "configmap", "a", "--from-literal=x=1"], None).await;
        assert!(!ok);
        assert_eq!(err.trim(), "error: failed to create configmap: Internal error occurred: failed calling webhook \"validate.python.example.com\": Post \"https://hook.default.svc:8443/validate?timeout=10s\": service \"hook\" not found");
        // The TLS name checked is hook.default.svc; the certificate has it.
        sim.cluster("main").map_webhook_service("hook.default:8443", &format!("127.0.0.1:{port}"));
        let (ok, out, err) = kubectl(&sim, &["create", "configmap", "a", "--from-literal=x=1"], None).await;
        assert!(ok, "{out}{err}");
        let (ok, out, _) = kubectl(&sim, &["get", "configmap", "a", "-o", "jsonpath={.metadata.annotations.python-webhook}"], None).await;
        assert!(ok);
        assert_eq!(out, "was-here");
        let (ok, _, err) = kubectl(&sim, &["create", "configmap", "b", "--from-literal=forbidden=1"], None).await;
        assert!(!ok);
        assert_eq!(err.trim(), "error: failed to create configmap: admission webhook \"validate.python.example.com\" denied the request: python says no");
        sim.shutdown().await;
        child.kill().await.unwrap();
    })
    .await;
}

/// `matchPolicy: Equivalent`: webhooks registered for v1 of a CRD see a
/// write at v1alpha1 converted to v1 (`kind` and `resource` at v1,
/// `requestKind` and `requestResource` at v1alpha1); the mutating one's
/// patch applies to the v1 object and comes back at v1alpha1. `Exact`
/// skips the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equivalent_match_policy_converts_to_the_webhooks_version() {
    within(60, "equivalent webhooks", async {
        let (addr, ca, seen) = webhook_server().await;
        let c = SimCluster::start("equivalent").await.unwrap();
        let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
        let (code, v) = req(&c.url(), "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", JSON, Some(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false, "schema": schema},
                    {"name": "v1", "served": true, "storage": true, "schema": schema}]}}))).await;
        assert_eq!(code, 201, "{v}");
        let url = |p: &str| format!("https://{addr}{p}");
        let v1_rules = json!({"rules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["widgets"]}]});
        register(&c, MWC, "MutatingWebhookConfiguration", "eq", vec![
            webhook("label.example.com", &url("/label"), &ca, v1_rules.clone()),
        ]).await;
        let mut exact = v1_rules.clone();
        exact["matchPolicy"] = json!("Exact");
        register(&c, VWC, "ValidatingWebhookConfiguration", "eq", vec![
            webhook("record.example.com", &url("/record-eq"), &ca, v1_rules.clone()),
            webhook("exact.example.com", &url("/exact"), &ca, exact),
        ]).await;
        let (code, v) = req(&c.url(), "POST", "/apis/example.com/v1alpha1/namespaces/default/widgets", JSON,
            Some(json!({"apiVersion": "example.com/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"a": 1}}))).await;
        assert_eq!(code, 201, "{v}");
        assert_eq!(v["apiVersion"], "example.com/v1alpha1");
        assert_eq!(v["metadata"]["labels"]["webhook"], "seen", "{v}");
        for path in ["/label", "/record-eq"] {
            let calls = seen.on(path);
            assert_eq!(calls.len(), 1, "{path}");
            let r = &calls[0];
            assert_eq!(r["kind"], json!({"group": "example.com", "version": "v1", "kind": "Widget"}), "{path}");
            assert_eq!(r["resource"], json!({"group": "example.com", "version": "v1", "resource": "widgets"}));
            assert_eq!(r["requestKind"], json!({"group": "example.com", "version": "v1alpha1", "kind": "Widget"}));
            assert_eq!(r["requestResource"], json!({"group": "example.com", "version": "v1alpha1", "resource": "widgets"}));
            assert_eq!(r["object"]["apiVersion"], "example.com/v1", "{path}");
        }
        // The validating webhook saw the mutation (converted both ways).
        assert_eq!(seen.on("/record-eq")[0]["object"]["metadata"]["labels"]["webhook"], "seen");
        assert!(seen.on("/exact").is_empty(), "Exact does not match v1alpha1");
        c.shutdown().await;
    })
    .await;
}

/// A `/scale` write reaches the webhooks as the server admits it: an
/// autoscaling/v1 Scale (`kind`, `requestKind`), the workload's resource,
/// `subResource: scale`; a mutating webhook's patch to the Scale is what
/// gets stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_writes_reach_the_webhooks_as_scales() {
    within(60, "scale webhooks", async {
        let (addr, ca, seen) = webhook_server().await;
        let c = SimCluster::start("scale-hooks").await.unwrap();
        let deploys = "/apis/apps/v1/namespaces/default/deployments";
        let (code, v) = req(&c.url(), "POST", deploys, JSON, Some(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}))).await;
        assert_eq!(code, 201, "{v}");
        let url = |p: &str| format!("https://{addr}{p}");
        let rules = json!({"rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["UPDATE"], "resources": ["deployments/scale"]}]});
        register(&c, MWC, "MutatingWebhookConfiguration", "scale", vec![
            webhook("four.example.com", &url("/scale-four"), &ca, rules.clone()),
        ]).await;
        register(&c, VWC, "ValidatingWebhookConfiguration", "scale", vec![
            webhook("see.example.com", &url("/scale-seen"), &ca, rules),
        ]).await;
        let (code, v) = req(&c.url(), "PATCH", &format!("{deploys}/d/scale"), MERGE, Some(json!({"spec": {"replicas": 2}}))).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["kind"], "Scale");
        assert_eq!(v["spec"]["replicas"], 4, "the mutating webhook's Scale is stored");
        let stored = c.get("apps/v1", "deployments", Some("default"), "d").unwrap();
        assert_eq!(stored["spec"]["replicas"], 4);
        let scale_kind = json!({"group": "autoscaling", "version": "v1", "kind": "Scale"});
        let m = seen.on("/scale-four");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["kind"], scale_kind);
        assert_eq!(m[0]["requestKind"], scale_kind);
        assert_eq!(m[0]["resource"], json!({"group": "apps", "version": "v1", "resource": "deployments"}));
        assert_eq!(m[0]["subResource"], "scale");
        assert_eq!(m[0]["object"]["kind"], "Scale");
        assert_eq!(m[0]["object"]["spec"]["replicas"], 2);
        assert_eq!(m[0]["oldObject"]["kind"], "Scale");
        assert_eq!(m[0]["oldObject"]["spec"]["replicas"], 1);
        let v = seen.on("/scale-seen");
        assert_eq!(v.len(), 1);
        assert_eq!(v[0]["object"]["kind"], "Scale");
        assert_eq!(v[0]["object"]["spec"]["replicas"], 4);
        // The Deployment's own writes do not match deployments/scale.
        let (code, _) = req(&c.url(), "PATCH", &format!("{deploys}/d"), MERGE, Some(json!({"spec": {"replicas": 3}}))).await;
        assert_eq!(code, 200);
        assert_eq!(seen.on("/scale-four").len(), 1);
        c.shutdown().await;
    })
    .await;
}
