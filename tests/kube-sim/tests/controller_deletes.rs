//! The garbage collector's and the namespace controller's deletes are
//! admitted like a client's: a validating webhook or a
//! ValidatingAdmissionPolicy that refuses them keeps the dependent (or the
//! namespace's content) in place, the controller retries, and the delete
//! goes through once the refusal is lifted. The webhook and the policy
//! see the controllers' service accounts.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use common::hooks::{ca_b64, certs};
use common::{req, within};
use kube_sim::SimCluster;
use kube_sim::store::{GC_USER, NAMESPACE_USER};
use parking_lot::Mutex;
use serde_json::{Value, json};

const JSON: &str = "application/json";
const VWC: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

fn cms(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/configmaps")
}

async fn post_ok(u: &str, path: &str, body: Value) -> Value {
    let (code, v) = req(u, "POST", path, JSON, Some(body)).await;
    assert_eq!(code, 201, "{path}: {v}");
    v
}

/// A ConfigMap labelled `keep: yes`, owned by `owner` when given.
fn kept(name: &str, owner: Option<&Value>) -> Value {
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"keep": "yes"}}, "data": {"a": "1"}});
    if let Some(o) = owner {
        cm["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]}]);
    }
    cm
}

/// Polls `path` until it answers `code` (the controllers work
/// asynchronously once deletes are admitted); fails after 20 s.
async fn until_code(u: &str, path: &str, code: u16) -> Value {
    for _ in 0..400 {
        let (c, v) = req(u, "GET", path, JSON, None).await;
        if c == code {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{path} never answered {code}");
}

/// The condition of type `ty` of a namespace.
fn condition<'a>(ns: &'a Value, ty: &str) -> &'a Value {
    ns["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
        .unwrap_or_else(|| panic!("no {ty} condition: {ns}"))
}

/// An HTTPS validating webhook refusing every DELETE it is sent; returns
/// its URL, CA and the AdmissionReview requests it saw.
async fn refusing_webhook() -> (String, String, Arc<Mutex<Vec<Value>>>) {
    let c = certs();
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap().to_string();
    let listener = kube_sim::tls::TlsListener::new(tcp, c.server).unwrap();
    let s = seen.clone();
    let app = axum::Router::new().fallback(post(move |body: axum::body::Bytes| {
        let s = s.clone();
        async move {
            let review: Value = serde_json::from_slice(&body).unwrap();
            let request = review["request"].clone();
            s.lock().push(request.clone());
            axum::Json(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": request["uid"], "allowed": false,
                    "status": {"message": "this one stays"}}}),
            )
        }
    }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("https://{addr}/deny"), c.ca_pem, seen)
}

async fn seen_deleting(seen: &Mutex<Vec<Value>>, name: &str, times: usize) -> Vec<Value> {
    for _ in 0..400 {
        let calls: Vec<Value> = seen
            .lock()
            .iter()
            .filter(|r| r["oldObject"]["metadata"]["name"] == name)
            .cloned()
            .collect();
        if calls.len() >= times {
            return calls;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the webhook was never asked {times} times to delete {name}");
}

#[tokio::test]
async fn a_webhook_refusing_the_controllers_deletes_keeps_the_objects_until_lifted() {
    within(90, "controller deletes through a webhook", async {
        let (url, ca, seen) = refusing_webhook().await;
        let c = SimCluster::start("gc-webhook").await.unwrap();
        c.set_namespace_delay(Duration::from_millis(20));
        let u = c.url();
        post_ok(&u, VWC, json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "keep"},
            "webhooks": [{"name": "keep.example.com",
                "clientConfig": {"url": url, "caBundle": ca_b64(&ca)},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["configmaps"]}],
                "objectSelector": {"matchLabels": {"keep": "yes"}},
                "sideEffects": "None", "admissionReviewVersions": ["v1"]}]})).await;
        // The garbage collector: the owner goes, its dependent stays.
        let owner = post_ok(&u, &cms("default"), json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "owner"}})).await;
        let dep = post_ok(&u, &cms("default"), kept("dep", Some(&owner))).await;
        let (code, v) = req(&u, "DELETE", &format!("{}/owner", cms("default")), JSON, None).await;
        assert_eq!(code, 200, "{v}");
        let calls = seen_deleting(&seen, "dep", 2).await;
        for r in &calls {
            assert_eq!(r["operation"], "DELETE");
            assert_eq!(r["userInfo"]["username"], GC_USER, "{r}");
            assert_eq!(r["userInfo"]["groups"], json!(["system:serviceaccounts",
                "system:serviceaccounts:kube-system", "system:authenticated"]));
            assert_eq!(r["oldObject"]["metadata"]["uid"], dep["metadata"]["uid"], "{r}");
        }
        let (code, _) = req(&u, "GET", &format!("{}/owner", cms("default")), JSON, None).await;
        assert_eq!(code, 404, "the owner itself is gone");
        let (code, still) = req(&u, "GET", &format!("{}/dep", cms("default")), JSON, None).await;
        assert_eq!(code, 200, "refused twice, the dependent stays");
        assert!(still["metadata"].get("deletionTimestamp").is_none(), "{still}");
        // A foreground deletion: the owner waits, marked, for its dependent.
        let fg_owner = post_ok(&u, &cms("default"), json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fg-owner"}})).await;
        let mut fg_dep = kept("fg-dep", Some(&fg_owner));
        fg_dep["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = json!(true);
        post_ok(&u, &cms("default"), fg_dep).await;
        let (code, v) = req(&u, "DELETE", &format!("{}/fg-owner?propagationPolicy=Foreground", cms("default")), JSON, None).await;
        assert_eq!(code, 200, "{v}");
        let calls = seen_deleting(&seen, "fg-dep", 1).await;
        assert_eq!(calls[0]["userInfo"]["username"], GC_USER, "{}", calls[0]);
        let (code, owner_now) = req(&u, "GET", &format!("{}/fg-owner", cms("default")), JSON, None).await;
        assert_eq!(code, 200, "the owner waits for its refused dependent");
        assert_eq!(owner_now["metadata"]["finalizers"], json!(["foregroundDeletion"]), "{owner_now}");
        assert!(owner_now["metadata"]["deletionTimestamp"].is_string(), "{owner_now}");
        // The namespace controller: the namespace stays Terminating.
        post_ok(&u, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "doomed"}})).await;
        post_ok(&u, &cms("doomed"), kept("precious", None)).await;
        let (code, v) = req(&u, "DELETE", "/api/v1/namespaces/doomed", JSON, None).await;
        assert_eq!(code, 200, "{v}");
        let calls = seen_deleting(&seen, "precious", 1).await;
        assert_eq!(calls[0]["userInfo"]["username"], NAMESPACE_USER, "{}", calls[0]);
        let mut ns = Value::Null;
        for _ in 0..400 {
            ns = until_code(&u, "/api/v1/namespaces/doomed", 200).await;
            if condition(&ns, "NamespaceDeletionContentFailure")["status"] == "True" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(ns["status"]["phase"], "Terminating", "{ns}");
        let failure = condition(&ns, "NamespaceDeletionContentFailure");
        assert_eq!(failure["reason"], "ContentDeletionFailed", "{ns}");
        assert_eq!(
            failure["message"],
            "Failed to delete all resource types, 1 remaining: admission webhook \"keep.example.com\" denied the request: this one stays"
        );
        let remaining = condition(&ns, "NamespaceContentRemaining");
        assert_eq!((&remaining["status"], &remaining["message"]),
            (&json!("True"), &json!("Some resources are remaining: configmaps has 1 resource instances")));
        // Lifting the refusal: both deletes go through on their next try.
        let (code, v) = req(&u, "DELETE", &format!("{VWC}/keep"), JSON, None).await;
        assert_eq!(code, 200, "{v}");
        until_code(&u, &format!("{}/dep", cms("default")), 404).await;
        until_code(&u, &format!("{}/fg-dep", cms("default")), 404).await;
        until_code(&u, &format!("{}/fg-owner", cms("default")), 404).await;
        until_code(&u, "/api/v1/namespaces/doomed", 404).await;
    })
    .await;
}

#[tokio::test]
async fn a_policy_refusing_the_controllers_deletes_keeps_the_objects_until_lifted() {
    within(60, "controller deletes through a policy", async {
        let c = SimCluster::start("gc-policy").await.unwrap();
        c.set_namespace_delay(Duration::from_millis(20));
        let u = c.url();
        post_ok(&u, POLICIES, json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "keep"},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["DELETE"], "resources": ["configmaps"]}]},
                "validations": [{"expression": format!(
                    "!(request.userInfo.username in ['{GC_USER}', '{NAMESPACE_USER}'])"),
                    "messageExpression": "'controllers keep ' + oldObject.metadata.name"}]}})).await;
        post_ok(&u, BINDINGS, json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "keep-binding"},
            "spec": {"policyName": "keep", "validationActions": ["Deny"],
                "matchResources": {"objectSelector": {"matchLabels": {"keep": "yes"}}}}})).await;
        // The garbage collector's delete is refused ...
        let owner = post_ok(&u, &cms("default"), json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "owner"}})).await;
        post_ok(&u, &cms("default"), kept("dep", Some(&owner))).await;
        post_ok(&u, &cms("default"), kept("mine", Some(&owner))).await;
        let (code, v) = req(&u, "DELETE", &format!("{}/owner", cms("default")), JSON, None).await;
        assert_eq!(code, 200, "{v}");
        // ... a client's (the admin's) is not: the policy tells them apart.
        let (code, v) = req(&u, "DELETE", &format!("{}/mine", cms("default")), JSON, None).await;
        assert_eq!(code, 200, "{v}");
        // The namespace controller's too.
        post_ok(&u, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "doomed"}})).await;
        post_ok(&u, &cms("doomed"), kept("precious", None)).await;
        post_ok(&u, &cms("doomed"), json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "plain"}})).await;
        let (code, v) = req(&u, "DELETE", "/api/v1/namespaces/doomed", JSON, None).await;
        assert_eq!(code, 200, "{v}");
        let mut ns = Value::Null;
        for _ in 0..400 {
            ns = until_code(&u, "/api/v1/namespaces/doomed", 200).await;
            if ns["status"]["conditions"].is_array()
                && condition(&ns, "NamespaceDeletionContentFailure")["status"] == "True"
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(ns["status"]["phase"], "Terminating", "{ns}");
        assert_eq!(
            condition(&ns, "NamespaceDeletionContentFailure")["message"],
            "Failed to delete all resource types, 1 remaining: configmaps \"precious\" is forbidden: ValidatingAdmissionPolicy 'keep' with binding 'keep-binding' denied request: controllers keep precious"
        );
        // The unlabelled ConfigMap went; the refused one and the dependent stay.
        until_code(&u, &format!("{}/plain", cms("doomed")), 404).await;
        let (code, _) = req(&u, "GET", &format!("{}/precious", cms("doomed")), JSON, None).await;
        assert_eq!(code, 200);
        let (code, _) = req(&u, "GET", &format!("{}/dep", cms("default")), JSON, None).await;
        assert_eq!(code, 200);
        // Deleting the binding lifts the policy: both deletes go through.
        let (code, v) = req(&u, "DELETE", &format!("{BINDINGS}/keep-binding"), JSON, None).await;
        assert_eq!(code, 200, "{v}");
        until_code(&u, &format!("{}/dep", cms("default")), 404).await;
        until_code(&u, "/api/v1/namespaces/doomed", 404).await;
    })
    .await;
}

#[tokio::test]
async fn without_admission_configured_the_controllers_delete_at_once() {
    within(30, "controller deletes in place", async {
        let c = SimCluster::start("gc-plain").await.unwrap();
        let u = c.url();
        let owner = post_ok(
            &u,
            &cms("default"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "owner"}}),
        )
        .await;
        post_ok(&u, &cms("default"), kept("dep", Some(&owner))).await;
        let (code, v) = req(
            &u,
            "DELETE",
            &format!("{}/owner", cms("default")),
            JSON,
            None,
        )
        .await;
        assert_eq!(code, 200, "{v}");
        // No webhook or policy can refuse it: gone by the DELETE's answer.
        let (code, _) = req(&u, "GET", &format!("{}/dep", cms("default")), JSON, None).await;
        assert_eq!(code, 404);
    })
    .await;
}
