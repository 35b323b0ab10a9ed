//! CRD conversion webhooks (issue 37 step 5) against a conversion webhook
//! written on the Python standard library (`python/conversion_webhook.py`),
//! with kubectl and the official Python client's dynamic client: a Widget
//! is stored at v1 (`spec.replicas`, `spec.color`) and served at v1alpha1
//! (`spec.size` as a string, `spec.colour`) through the webhook on every
//! read, write, list and watch; failing and misbehaving webhooks fail
//! those requests with the server's words.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::hooks::{ca_b64, certs, kubectl};
use common::{raw, req, require_python_client, within};
use kube_sim::Sim;
use serde_json::{Value, json};

/// The CRD: v1alpha1 served, v1 served and stored, converted by the
/// webhook behind the Service `hook.default:8443` at `path`.
fn crd(ca: &str, path: &str) -> String {
    let ca = ca_b64(ca);
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.example.com}}
spec:
  group: example.com
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        service: {{name: hook, namespace: default, port: 8443, path: {path}}}
        caBundle: {ca}
  versions:
  - name: v1alpha1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: string}}
              colour: {{type: string}}
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {{type: integer, maximum: 10}}
              color: {{type: string}}
"#
    )
}

/// Starts the Python conversion webhook; returns it, its port and the CA.
async fn python_webhook(dir: &std::path::Path) -> (tokio::process::Child, String, String) {
    let c = certs();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, &c.cert_pem).unwrap();
    std::fs::write(&key, &c.key_pem).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/conversion_webhook.py"
    );
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .arg(&cert)
        .arg(&key)
        .arg(dir)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 is installed");
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    let port = lines
        .next_line()
        .await
        .unwrap()
        .expect("the webhook prints its port");
    (child, port, c.ca_pem)
}

async fn get_json(sim: &Sim, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let (ok, out, err) = kubectl(sim, &all, None).await;
    assert!(ok, "kubectl {all:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_and_writes_both_versions_through_the_webhook() {
    within(180, "conversion with kubectl", async {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, port, ca) = python_webhook(dir.path()).await;
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        c.map_webhook_service("hook.default:8443", &format!("127.0.0.1:{port}"));
        // Strategy Webhook without a webhook is refused as the server does.
        let no_hook = crd(&ca, "/convert").replace("    webhook:\n", "    nowebhook:\n");
        let (ok, _, err) = kubectl(&sim, &["create", "--validate=false", "-f", "-"], Some(&no_hook)).await;
        assert!(!ok);
        assert_eq!(err.trim(), "The CustomResourceDefinition \"widgets.example.com\" is invalid: spec.conversion.webhook: Required value: required when strategy is set to Webhook");
        let (ok, out, err) = kubectl(&sim, &["apply", "-f", "-"], Some(&crd(&ca, "/convert"))).await;
        assert!(ok, "{out}{err}");

        // Created at v1alpha1: stored at v1, converted by the webhook.
        let old = "apiVersion: example.com/v1alpha1\nkind: Widget\nmetadata: {name: w}\nspec: {size: \"3\", colour: red}\n";
        let (ok, out, err) = kubectl(&sim, &["create", "-f", "-"], Some(old)).await;
        assert!(ok, "{out}{err}");
        let stored = c.get("example.com/v1", "widgets", Some("default"), "w").unwrap();
        assert_eq!(stored["apiVersion"], "example.com/v1");
        assert_eq!(stored["spec"], json!({"replicas": 3, "color": "red"}));
        // Of the metadata the webhook may change labels only.
        assert_eq!(stored["metadata"]["labels"], json!({"converted-to": "v1"}));
        assert_eq!(stored["metadata"]["generation"], 1);

        // The same object at both versions.
        let v1 = get_json(&sim, &["widgets.v1.example.com", "w"]).await;
        let v1alpha1 = get_json(&sim, &["widgets.v1alpha1.example.com", "w"]).await;
        assert_eq!(v1["apiVersion"], "example.com/v1");
        assert_eq!(v1["spec"], json!({"replicas": 3, "color": "red"}));
        assert_eq!(v1alpha1["apiVersion"], "example.com/v1alpha1");
        assert_eq!(v1alpha1["spec"], json!({"size": "3", "colour": "red"}));
        assert_eq!(v1alpha1["metadata"]["labels"]["converted-to"], "v1alpha1");
        for k in ["uid", "resourceVersion", "creationTimestamp", "name"] {
            assert_eq!(v1["metadata"][k], v1alpha1["metadata"][k], "{k}");
        }
        // The in-process helpers take the storage version only.
        let refused = c.get("example.com/v1alpha1", "widgets", Some("default"), "w");
        assert!(refused.unwrap_err().message.contains("storage version v1"));

        // Created at v1, read at v1alpha1; both listed at v1alpha1.
        let new = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: other}\nspec: {replicas: 5}\n";
        let (ok, out, err) = kubectl(&sim, &["create", "-f", "-"], Some(new)).await;
        assert!(ok, "{out}{err}");
        let other = get_json(&sim, &["widgets.v1alpha1.example.com", "other"]).await;
        assert_eq!(other["spec"], json!({"size": "5"}));
        let list = get_json(&sim, &["widgets.v1alpha1.example.com"]).await;
        let sizes: Vec<&Value> = list["items"].as_array().unwrap().iter().map(|i| &i["spec"]["size"]).collect();
        assert_eq!(sizes, vec![&json!("5"), &json!("3")], "other, then w");
        assert!(list["items"].as_array().unwrap().iter().all(|i| i["apiVersion"] == "example.com/v1alpha1"));
        // A label selector matches the labels of the converted objects
        // (the webhook labels each with the version it converted to): w is
        // stored with `converted-to: v1` but read at v1alpha1 without it.
        let selected = get_json(&sim, &["widgets.v1alpha1.example.com", "-l", "converted-to=v1alpha1"]).await;
        assert_eq!(selected["items"].as_array().unwrap().len(), 2, "{selected}");
        let none = get_json(&sim, &["widgets.v1alpha1.example.com", "-l", "converted-to=v1"]).await;
        assert_eq!(none["items"], json!([]), "{none}");
        let stored_label = get_json(&sim, &["widgets.v1.example.com", "-l", "converted-to=v1"]).await;
        let names: Vec<&Value> = stored_label["items"].as_array().unwrap().iter().map(|i| &i["metadata"]["name"]).collect();
        assert_eq!(names, vec![&json!("w")], "{stored_label}");
        // So does a watch: its initial events and, replayed from a
        // resourceVersion, a change made at v1.
        let (_, listed) = req(&c.url(), "GET", "/apis/example.com/v1/namespaces/default/widgets", "application/json", None).await;
        let rv0 = listed["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        let (code, v) = req(&c.url(), "PATCH", "/apis/example.com/v1/namespaces/default/widgets/w",
            "application/merge-patch+json", Some(json!({"metadata": {"annotations": {"touched": "at v1"}}}))).await;
        assert_eq!(code, 200, "{v}");
        let watch = |query: String| {
            let url = c.url();
            async move {
                let r = raw(&url, "GET", &format!("/apis/example.com/v1alpha1/namespaces/default/widgets?watch=true&timeoutSeconds=1&{query}"),
                    &[("Accept", "application/json")], None).await;
                assert_eq!(r.status, 200);
                String::from_utf8_lossy(&r.body)
                    .lines()
                    .map(|l| serde_json::from_str::<Value>(l).unwrap())
                    .filter(|e| e["type"] != "BOOKMARK")
                    .map(|e| format!("{} {}", e["type"].as_str().unwrap(), e["object"]["metadata"]["name"].as_str().unwrap()))
                    .collect::<Vec<String>>()
            }
        };
        let mut initial = watch("labelSelector=converted-to%3Dv1alpha1".into()).await;
        initial.sort();
        assert_eq!(initial, vec!["ADDED other", "ADDED w"]);
        assert_eq!(watch("labelSelector=converted-to%3Dv1".into()).await, Vec::<String>::new());
        assert_eq!(watch(format!("labelSelector=converted-to%3Dv1alpha1&resourceVersion={rv0}")).await, vec!["MODIFIED w"]);
        assert_eq!(watch(format!("labelSelector=converted-to%3Dv1&resourceVersion={rv0}")).await, Vec::<String>::new());

        // A patch at v1alpha1 applies to the v1alpha1 object, is validated
        // with v1alpha1's schema and stored at v1 (generation bumped once).
        let (ok, out, err) = kubectl(&sim, &["patch", "widgets.v1alpha1.example.com", "w", "--type=merge", "-p", r#"{"spec":{"size":"4"}}"#], None).await;
        assert!(ok, "{out}{err}");
        let stored = c.get("example.com/v1", "widgets", Some("default"), "w").unwrap();
        assert_eq!(stored["spec"], json!({"replicas": 4, "color": "red"}));
        assert_eq!(stored["metadata"]["generation"], 2);
        // v1's schema is checked too: the stored object must be valid at v1
        // when written there (maximum 10).
        let (ok, _, err) = kubectl(&sim, &["patch", "widgets.v1.example.com", "w", "--type=merge", "-p", r#"{"spec":{"replicas":11}}"#], None).await;
        assert!(!ok);
        assert!(err.contains("spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"), "{err}");
        // A server-side apply at v1alpha1.
        let apply = "apiVersion: example.com/v1alpha1\nkind: Widget\nmetadata: {name: w}\nspec: {colour: blue}\n";
        let (ok, out, err) = kubectl(&sim, &["apply", "--server-side", "--force-conflicts", "--field-manager=t", "-f", "-"], Some(apply)).await;
        assert!(ok, "{out}{err}");
        let v1 = get_json(&sim, &["widgets.v1.example.com", "w"]).await;
        assert_eq!(v1["spec"], json!({"replicas": 4, "color": "blue"}));
        // Writing back what was read at v1alpha1 changes nothing: the
        // conversion round trip is exact, so nothing is stored.
        let before = c.get("example.com/v1", "widgets", Some("default"), "w").unwrap();
        let read = get_json(&sim, &["widgets.v1alpha1.example.com", "w"]).await;
        let (ok, out, err) = kubectl(&sim, &["replace", "-f", "-"], Some(&read.to_string())).await;
        assert!(ok, "{out}{err}");
        let after = c.get("example.com/v1", "widgets", Some("default"), "w").unwrap();
        assert_eq!(before["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"]);
        // Deleted at v1alpha1.
        let (ok, out, err) = kubectl(&sim, &["delete", "widgets.v1alpha1.example.com", "other"], None).await;
        assert!(ok, "{out}{err}");
        assert!(c.get("example.com/v1", "widgets", Some("default"), "other").is_err());
        // DELETE of a collection selects on the converted labels too.
        let coll = "/apis/example.com/v1alpha1/namespaces/default/widgets?labelSelector=converted-to%3D";
        let (code, v) = req(&c.url(), "DELETE", &format!("{coll}v1"), "application/json", None).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["items"], json!([]), "w is labelled v1 only as stored: {v}");
        assert!(c.get("example.com/v1", "widgets", Some("default"), "w").is_ok());
        let (code, v) = req(&c.url(), "DELETE", &format!("{coll}v1alpha1"), "application/json", None).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["items"][0]["metadata"]["name"], "w", "{v}");
        assert_eq!(v["items"][0]["apiVersion"], "example.com/v1alpha1", "{v}");
        assert!(c.get("example.com/v1", "widgets", Some("default"), "w").is_err());
        sim.shutdown().await;
        child.kill().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_webhook_fails_reads_and_writes_at_the_other_version() {
    within(180, "failing conversion", async {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, port, ca) = python_webhook(dir.path()).await;
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        c.map_webhook_service("hook.default:8443", &format!("127.0.0.1:{port}"));
        let (ok, out, err) = kubectl(&sim, &["apply", "-f", "-"], Some(&crd(&ca, "/convert"))).await;
        assert!(ok, "{out}{err}");
        let (ok, out, err) = kubectl(&sim, &["create", "-f", "-"], Some("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {replicas: 1}\n")).await;
        assert!(ok, "{out}{err}");
        let set_path = |p: &str| {
            format!(r#"{{"spec":{{"conversion":{{"webhook":{{"clientConfig":{{"service":{{"path":"{p}"}}}}}}}}}}}}"#)
        };
        let cases = [
            ("/fail", "no converter for that".to_string()),
            ("/bad-uid", "expected response.uid=".to_string()),
        ];
        for (path, says) in cases {
            let (ok, out, err) = kubectl(&sim, &["patch", "crd", "widgets.example.com", "--type=merge", "-p", &set_path(path)], None).await;
            assert!(ok, "{out}{err}");
            let (ok, _, err) = kubectl(&sim, &["get", "widgets.v1alpha1.example.com", "w"], None).await;
            assert!(!ok);
            assert!(
                err.starts_with("Error from server: conversion webhook for example.com/v1, Kind=Widget failed: "),
                "{err}"
            );
            assert!(err.contains(&says), "{err}");
            // The storage version needs no conversion.
            let (ok, _, err) = kubectl(&sim, &["get", "widgets.v1.example.com", "w"], None).await;
            assert!(ok, "{err}");
        }
        // /fail, the exact text; a write at v1alpha1 fails converting its
        // object to v1 (the GVK is the request's).
        let (ok, ..) = kubectl(&sim, &["patch", "crd", "widgets.example.com", "--type=merge", "-p", &set_path("/fail")], None).await;
        assert!(ok);
        let (ok, _, err) = kubectl(&sim, &["get", "widgets.v1alpha1.example.com", "w"], None).await;
        assert!(!ok);
        assert_eq!(err.trim(), "Error from server: conversion webhook for example.com/v1, Kind=Widget failed: no converter for that");
        let (ok, _, err) = kubectl(&sim, &["create", "-f", "-"], Some("apiVersion: example.com/v1alpha1\nkind: Widget\nmetadata: {name: x}\nspec: {size: \"2\"}\n")).await;
        assert!(!ok);
        assert_eq!(err.trim(), "Error from server: error when creating \"STDIN\": conversion webhook for example.com/v1alpha1, Kind=Widget failed: no converter for that");
        let (code, v) = req(&c.url(), "GET", "/apis/example.com/v1alpha1/namespaces/default/widgets", "", None).await;
        assert_eq!(code, 500, "{v}");
        assert_eq!(v["message"], "conversion webhook for example.com/v1, Kind=Widget failed: no converter for that");
        assert!(v.get("reason").is_none(), "{v}");
        // A watch at v1alpha1 ends with an ERROR event carrying it; at v1
        // it streams.
        let path = "/apis/example.com/v1alpha1/namespaces/default/widgets?watch=1&timeoutSeconds=3";
        let w = raw(&c.url(), "GET", path, &[], None).await;
        assert_eq!(w.status, 200);
        let lines = w.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["type"], "ERROR");
        assert_eq!(lines[0]["object"]["code"], 500);
        assert_eq!(lines[0]["object"]["message"], "conversion webhook for example.com/v1, Kind=Widget failed: no converter for that");
        let path = "/apis/example.com/v1/namespaces/default/widgets?watch=1&timeoutSeconds=1";
        let w = raw(&c.url(), "GET", path, &[], None).await;
        let lines = w.lines();
        assert_eq!(lines[0]["type"], "ADDED", "{lines:?}");
        assert_eq!(lines[0]["object"]["spec"]["replicas"], 1);
        // A webhook that renames the object.
        let (ok, ..) = kubectl(&sim, &["patch", "crd", "widgets.example.com", "--type=merge", "-p", &set_path("/rename")], None).await;
        assert!(ok);
        let (ok, _, err) = kubectl(&sim, &["get", "widgets.v1alpha1.example.com", "w"], None).await;
        assert!(!ok);
        assert_eq!(err.trim(), "Error from server: conversion webhook for example.com/v1, Kind=Widget returned invalid object: must have the same name: w != renamed");
        // Unreachable: the Service is not mapped.
        let (ok, ..) = kubectl(&sim, &["patch", "crd", "widgets.example.com", "--type=json", "-p", r#"[{"op":"replace","path":"/spec/conversion/webhook/clientConfig/service/name","value":"nowhere"}]"#], None).await;
        assert!(ok);
        let (ok, _, err) = kubectl(&sim, &["get", "widgets.v1alpha1.example.com", "w"], None).await;
        assert!(!ok);
        assert_eq!(err.trim(), "Error from server: conversion webhook for example.com/v1, Kind=Widget failed: Post \"https://nowhere.default.svc:8443/rename?timeout=30s\": service \"nowhere\" not found");
        // Strategy None keeps rewriting apiVersion only.
        let (ok, out, err) = kubectl(&sim, &["patch", "crd", "widgets.example.com", "--type=json", "-p", r#"[{"op":"replace","path":"/spec/conversion","value":{"strategy":"None"}}]"#], None).await;
        assert!(ok, "{out}{err}");
        let w = get_json(&sim, &["widgets.v1alpha1.example.com", "w"]).await;
        assert_eq!(w["apiVersion"], "example.com/v1alpha1");
        assert_eq!(w["spec"], json!({"replicas": 1}));
        sim.shutdown().await;
        child.kill().await.unwrap();
    })
    .await;
}

/// The official Python client's dynamic client, a second client nobody
/// here wrote: create at v1alpha1, read at v1, list and watch at v1alpha1
/// (the watch replays a change made at v1 after the list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_dynamic_client_reads_lists_and_watches_converted() {
    within(180, "conversion with the python client", async {
        require_python_client().await;
        let dir = tempfile::tempdir().unwrap();
        let (mut child, port, ca) = python_webhook(dir.path()).await;
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        c.map_webhook_service("hook.default:8443", &format!("127.0.0.1:{port}"));
        let (ok, out, err) = kubectl(&sim, &["apply", "-f", "-"], Some(&crd(&ca, "/convert"))).await;
        assert!(ok, "{out}{err}");
        let script = r#"
import sys
from kubernetes import config, dynamic
from kubernetes.client import api_client
client = dynamic.DynamicClient(api_client.ApiClient(configuration=config.load_kube_config(config_file=sys.argv[1])))
old = client.resources.get(api_version="example.com/v1alpha1", kind="Widget")
new = client.resources.get(api_version="example.com/v1", kind="Widget")
made = old.create(namespace="default", body={"apiVersion": "example.com/v1alpha1", "kind": "Widget", "metadata": {"name": "p"}, "spec": {"size": "6"}})
print("created", made.apiVersion, made.spec.size)
got = new.get(namespace="default", name="p")
print("v1", got.apiVersion, got.spec.replicas)
listed = old.get(namespace="default")
print("list", listed.apiVersion, [i.spec.size for i in listed.items])
new.patch(namespace="default", name="p", body={"spec": {"replicas": 7}}, content_type="application/merge-patch+json")
for ev in old.watch(namespace="default", resource_version=listed.metadata.resourceVersion, timeout=5):
    print("watch", ev["type"], ev["object"].apiVersion, ev["object"].spec.size)
    break
"#;
        let out = tokio::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(sim.kubeconfig_path())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), out).await.unwrap().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            stdout.trim(),
            "created example.com/v1alpha1 6\nv1 example.com/v1 6\nlist example.com/v1alpha1 ['6']\nwatch MODIFIED example.com/v1alpha1 7"
        );
        sim.shutdown().await;
        child.kill().await.unwrap();
    })
    .await;
}

/// A write at v1alpha1 held in the conversion of its live object while
/// another write changes the object at v1: the held write starts over
/// (the converted object was made against the old resourceVersion), so
/// neither change is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_object_changed_during_its_conversion_starts_over() {
    within(120, "conversion start over", async {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, port, ca) = python_webhook(dir.path()).await;
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        c.map_webhook_service("hook.default:8443", &format!("127.0.0.1:{port}"));
        let (ok, out, err) = kubectl(&sim, &["apply", "-f", "-"], Some(&crd(&ca, "/gate"))).await;
        assert!(ok, "{out}{err}");
        c.create(
            "example.com/v1",
            "widgets",
            Some("default"),
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"replicas": 1, "color": "red"}}),
        )
        .unwrap();
        let url = c.url();
        let held = tokio::spawn(async move {
            req(
                &url,
                "PATCH",
                "/apis/example.com/v1alpha1/namespaces/default/widgets/w",
                "application/merge-patch+json",
                Some(json!({"spec": {"colour": "green"}})),
            )
            .await
        });
        let arrived = dir.path().join("arrived");
        while !arrived.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The storage version needs no conversion: this write goes through.
        let (code, v) = req(
            &c.url(),
            "PATCH",
            "/apis/example.com/v1/namespaces/default/widgets/w",
            "application/merge-patch+json",
            Some(json!({"spec": {"replicas": 9}})),
        )
        .await;
        assert_eq!(code, 200, "{v}");
        std::fs::write(dir.path().join("open"), "").unwrap();
        let (code, v) = held.await.unwrap();
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["spec"], json!({"size": "9", "colour": "green"}));
        let stored = c
            .get("example.com/v1", "widgets", Some("default"), "w")
            .unwrap();
        assert_eq!(stored["spec"], json!({"replicas": 9, "color": "green"}));
        sim.shutdown().await;
        child.kill().await.unwrap();
    })
    .await;
}

/// `kubectl explain` of a CRD with two versions shows each version's own
/// schema (issue 37 step 7): kubectl reads `/openapi/v3`, then the
/// document of the group-version `--api-version` names (the preferred
/// version's without it).
#[tokio::test]
async fn kubectl_explain_shows_each_versions_schema() {
    within(90, "explain of a versioned CRD", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        // No conversion is asked for: explain reads only the OpenAPI.
        let (ok, out, err) = kubectl(
            &sim,
            &["apply", "-f", "-"],
            Some(&crd(&certs().ca_pem, "/convert")),
        )
        .await;
        assert!(ok, "{out}{err}");
        let explain = |args: Vec<&'static str>| {
            let sim = &sim;
            async move {
                let mut all = vec!["explain"];
                all.extend(args);
                let (ok, out, err) = kubectl(sim, &all, None).await;
                assert!(ok, "kubectl {all:?}: {err}");
                out
            }
        };
        let old = explain(vec!["widgets.spec", "--api-version=example.com/v1alpha1"]).await;
        assert!(old.contains("VERSION:    v1alpha1"), "{old}");
        assert!(
            old.contains("size\t<string>") && old.contains("colour\t<string>"),
            "{old}"
        );
        assert!(!old.contains("replicas"), "{old}");
        let new = explain(vec!["widgets.spec", "--api-version=example.com/v1"]).await;
        assert!(new.contains("VERSION:    v1\n"), "{new}");
        assert!(
            new.contains("replicas\t<integer>") && new.contains("color\t<string>"),
            "{new}"
        );
        assert!(!new.contains("colour"), "{new}");
        // One field at the old version; the preferred version (v1) without a flag.
        let size = explain(vec![
            "widgets.spec.size",
            "--api-version=example.com/v1alpha1",
        ])
        .await;
        assert!(size.contains("FIELD: size <string>"), "{size}");
        let preferred = explain(vec!["widgets.spec"]).await;
        assert!(
            preferred.contains("VERSION:    v1\n") && preferred.contains("replicas\t<integer>"),
            "{preferred}"
        );
        // A version the CRD does not serve is kubectl's error.
        let (ok, _, err) = kubectl(
            &sim,
            &["explain", "widgets", "--api-version=example.com/v2"],
            None,
        )
        .await;
        assert!(!ok);
        assert!(err.contains("example.com/v2"), "{err}");
        sim.shutdown().await;
    })
    .await;
}
