//! The HTTP contract (docs/apiserver-semantics.md) checked with raw requests.

mod common;

use common::{raw, req, within};
use kube_sim::{FaultRule, Sim, SimCluster, SimConfig};
use serde_json::{Value, json};
use std::time::Duration;

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";

async fn cm(url: &str, name: &str, labels: Value) -> Value {
    let (code, v) = req(
        url,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        JSON,
        Some(json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    v
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("object has a resourceVersion")
}

#[tokio::test]
async fn discovery_and_version() {
    within(20, "discovery", async {
        let c = SimCluster::start("d").await.unwrap();
        let u = c.url();
        let (code, v) = req(&u, "GET", "/version?timeout=5s", JSON, None).await;
        assert_eq!((code, v["minor"].as_str()), (200, Some("32")));
        let (_, v) = req(&u, "GET", "/api", JSON, None).await;
        assert_eq!(v["versions"], json!(["v1"]));
        let (_, v) = req(&u, "GET", "/apis", JSON, None).await;
        let groups: Vec<&str> = v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        for g in [
            "apps",
            "batch",
            "coordination.k8s.io",
            "events.k8s.io",
            "node.k8s.io",
            "apiextensions.k8s.io",
        ] {
            assert!(groups.contains(&g), "{g} missing from {groups:?}");
        }
        let (_, v) = req(&u, "GET", "/api/v1", JSON, None).await;
        let pods = v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods")
            .unwrap();
        assert_eq!(pods["namespaced"], true);
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert!(
            v["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "pods/status")
        );
        let (code, v) = req(&u, "GET", "/apis/nope/v1", JSON, None).await;
        assert_eq!((code, v["reason"].as_str()), (404, Some("NotFound")));
        let r = raw(&u, "GET", "/openapi/v2", &[], None).await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("content-type"),
            Some("application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
        );
        let (code, v) = req(&u, "GET", "/api/v1/namespaces/default/widgets", JSON, None).await;
        assert_eq!(code, 404);
        assert_eq!(
            v["message"],
            "the server could not find the requested resource"
        );
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn writes_errors_and_no_op() {
    within(20, "writes", async {
        let c = SimCluster::start("w").await.unwrap();
        let u = c.url();
        let a = cm(&u, "a", json!({})).await;
        assert_eq!(a["metadata"]["namespace"], "default");
        assert!(a["metadata"]["uid"].as_str().unwrap().len() == 36);
        // Duplicate.
        let (code, v) = req(&u, "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(json!({"metadata": {"name": "a"}}))).await;
        assert_eq!(code, 409);
        assert_eq!(v["message"], "configmaps \"a\" already exists");
        assert_eq!(v["details"], json!({"name": "a", "kind": "configmaps"}));
        // Namespace mismatch, invalid name, missing name, missing namespace.
        let (code, _) = req(&u, "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(json!({"metadata": {"name": "x", "namespace": "other"}}))).await;
        assert_eq!(code, 400);
        let (code, v) = req(&u, "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(json!({"metadata": {"name": "Bad_Name"}}))).await;
        assert_eq!((code, v["reason"].as_str()), (422, Some("Invalid")));
        assert_eq!(v["details"]["causes"][0]["field"], "metadata.name");
        let (code, _) = req(&u, "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(json!({"metadata": {}}))).await;
        assert_eq!(code, 422);
        let (code, v) = req(&u, "POST", "/api/v1/namespaces/nope/configmaps", JSON, Some(json!({"metadata": {"name": "x"}}))).await;
        assert_eq!((code, v["message"].as_str()), (404, Some("namespaces \"nope\" not found")));
        // generateName.
        let (code, v) = req(&u, "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(json!({"metadata": {"generateName": "gen-"}}))).await;
        assert_eq!(code, 201);
        let n = v["metadata"]["name"].as_str().unwrap();
        assert!(n.starts_with("gen-") && n.len() == 9, "{n}");
        // Stale update.
        let mut stale = a.clone();
        stale["metadata"]["resourceVersion"] = json!("1");
        let (code, v) = req(&u, "PUT", "/api/v1/namespaces/default/configmaps/a", JSON, Some(stale)).await;
        assert_eq!(code, 409);
        assert_eq!(v["message"], "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again");
        // Name mismatch and missing object on PUT.
        let (code, _) = req(&u, "PUT", "/api/v1/namespaces/default/configmaps/zz", JSON, Some(a.clone())).await;
        assert_eq!(code, 400);
        let mut other = a.clone();
        other["metadata"]["name"] = json!("zz");
        other["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        let (code, _) = req(&u, "PUT", "/api/v1/namespaces/default/configmaps/zz", JSON, Some(other)).await;
        assert_eq!(code, 404);
        // No-op writes bump nothing.
        let before = c.current_rv();
        let (code, v) = req(&u, "PUT", "/api/v1/namespaces/default/configmaps/a", JSON, Some(a.clone())).await;
        assert_eq!(code, 200);
        assert_eq!(rv(&v), rv(&a));
        let (code, v) = req(&u, "PATCH", "/api/v1/namespaces/default/configmaps/a", MERGE, Some(json!({"data": {"k": "v"}}))).await;
        assert_eq!((code, rv(&v)), (200, rv(&a)));
        assert_eq!(c.current_rv(), before);
        // A real change bumps it.
        let (code, v) = req(&u, "PATCH", "/api/v1/namespaces/default/configmaps/a", MERGE, Some(json!({"data": {"k": "w"}}))).await;
        assert_eq!(code, 200);
        assert!(rv(&v) > rv(&a));
        // dryRun persists nothing.
        let (code, _) = req(&u, "POST", "/api/v1/namespaces/default/configmaps?dryRun=All", JSON, Some(json!({"metadata": {"name": "dry"}}))).await;
        assert_eq!(code, 201);
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/default/configmaps/dry", JSON, None).await;
        assert_eq!(code, 404);
        // Malformed bodies and media types.
        let r = raw(&u, "POST", "/api/v1/namespaces/default/configmaps", &[("Content-Type", JSON)], Some("{not json")).await;
        assert_eq!(r.status, 400);
        assert_eq!(r.json()["kind"], "Status");
        // Protobuf: a body without the envelope is a 400 Status; a ConfigMap is created.
        const PB: &str = "application/vnd.kubernetes.protobuf";
        let r = raw(&u, "POST", "/api/v1/namespaces/default/configmaps", &[("Content-Type", PB)], Some("\x00")).await;
        assert_eq!((r.status, r.json()["kind"].as_str()), (400, Some("Status")));
        let r = raw(&u, "POST", "/api/v1/namespaces/default/configmaps", &[("Content-Type", PB)], Some("k8s\0\n\x05\n\x03")).await;
        assert_eq!((r.status, r.json()["reason"].as_str()), (400, Some("BadRequest")), "truncated envelope");
        // A kind without a protobuf message (a custom resource's) is 415 naming it.
        let r = raw(&u, "POST", "/api/v1/namespaces/default/configmaps", &[("Content-Type", PB)], Some("k8s\0\n\x18\n\x0eexample.com/v1\x12\x06Widget")).await;
        assert_eq!(r.status, 415, "{}", r.text());
        assert!(r.json()["message"].as_str().unwrap().contains("\"Widget\""), "{}", r.text());
        let r = raw(&u, "POST", "/api/v1/namespaces/default/configmaps", &[("Content-Type", PB), ("Accept", "application/vnd.kubernetes.protobuf,application/json")], Some("k8s\0\n\x0f\n\x02v1\x12\x09ConfigMap\x12\x07\n\x05\n\x03pbc")).await;
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!((r.header("content-type"), r.json()["metadata"]["name"].as_str()), (Some("application/json"), Some("pbc")));
        assert!(r.body.ends_with(b"}\n"), "JSON bodies end with a newline, as Go's encoder writes them");
        let r = raw(&u, "GET", "/api/v1/namespaces/default/configmaps", &[("Accept", "application/vnd.kubernetes.protobuf")], None).await;
        assert_eq!(r.status, 406);
        assert!(r.body.ends_with(b"}\n"), "error Status bodies too");
        let r = raw(&u, "PATCH", "/api/v1/namespaces/default/configmaps/a", &[("Content-Type", "text/plain")], Some("{}")).await;
        assert_eq!(r.status, 415);
        let r = raw(&u, "GET", "/api/v1/namespaces/default/configmaps?watch=maybe", &[], None).await;
        assert_eq!(r.status, 400);
        // Trailing empty query string.
        let r = raw(&u, "GET", "/api/v1/namespaces/default/configmaps?", &[], None).await;
        assert_eq!(r.status, 200);
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn patches_by_content_type() {
    within(20, "patches", async {
        let c = SimCluster::start("p").await.unwrap();
        let u = c.url();
        cm(&u, "a", json!({})).await;
        let p = "/api/v1/namespaces/default/configmaps/a";
        // JSON patch: Go test semantics for an absent key.
        let (code, v) = req(&u, "PATCH", p, "application/json-patch+json", Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]}
        ]))).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["metadata"]["finalizers"], json!(["x/y"]));
        let (code, _) = req(&u, "PATCH", p, "application/json-patch+json", Some(json!([{"op": "test", "path": "/data/k", "value": "nope"}]))).await;
        assert_eq!(code, 422);
        let (code, _) = req(&u, "PATCH", p, "application/json-patch+json", Some(json!({"op": "add"}))).await;
        assert_eq!(code, 400);
        // Strategic merge on a built-in: finalizers are a union.
        let (code, v) = req(&u, "PATCH", p, "application/strategic-merge-patch+json", Some(json!({"metadata": {"finalizers": ["a/b"]}}))).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["metadata"]["finalizers"], json!(["x/y", "a/b"]));
        // Server-side apply: create-if-absent, conflict, force.
        let ap = "application/apply-patch+yaml";
        let (code, v) = req(&u, "PATCH", "/api/v1/namespaces/default/configmaps/s?fieldManager=m1", ap, Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"k": "1"}}))).await;
        assert_eq!(code, 201, "{v}");
        assert_eq!(v["metadata"]["managedFields"][0]["manager"], "m1");
        assert_eq!(v["metadata"]["managedFields"][0]["operation"], "Apply");
        let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: s\ndata:\n  k: \"2\"\n";
        let r = raw(&u, "PATCH", "/api/v1/namespaces/default/configmaps/s?fieldManager=m2", &[("Content-Type", ap)], Some(yaml)).await;
        assert_eq!(r.status, 409, "{}", r.text());
        let v = r.json();
        assert_eq!(v["reason"], "Conflict");
        assert_eq!(v["message"], "Apply failed with 1 conflict: conflict with \"m1\": .data.k");
        assert_eq!(v["details"]["causes"][0]["reason"], "FieldManagerConflict");
        assert_eq!(v["details"]["causes"][0]["field"], ".data.k");
        let r = raw(&u, "PATCH", "/api/v1/namespaces/default/configmaps/s?fieldManager=m2&force=true", &[("Content-Type", ap)], Some(yaml)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["data"]["k"], "2");
        // Apply without a manager is rejected.
        let (code, _) = req(&u, "PATCH", "/api/v1/namespaces/default/configmaps/s", ap, Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}}))).await;
        assert_eq!(code, 400);
        // Update managers come from the User-Agent.
        let r = raw(&u, "PATCH", p, &[("Content-Type", MERGE), ("User-Agent", "my-tool/1.2 (linux)")], Some(r#"{"data":{"z":"1"}}"#)).await;
        assert_eq!(r.status, 200);
        let mf = r.json()["metadata"]["managedFields"].clone();
        assert!(mf.as_array().unwrap().iter().any(|e| e["manager"] == "my-tool" && e["operation"] == "Update"), "{mf}");
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn custom_resources_generation_and_status() {
    within(20, "crds", async {
        let c = SimCluster::start("crd").await.unwrap();
        let u = c.url();
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
        });
        let (code, v) = req(&u, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", JSON, Some(crd)).await;
        assert_eq!(code, 201, "{v}");
        let conds = v["status"]["conditions"].as_array().unwrap();
        assert!(conds.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
        let (code, v) = req(&u, "GET", "/apis/example.com/v1", JSON, None).await;
        assert_eq!(code, 200);
        assert!(v["resources"].as_array().unwrap().iter().any(|r| r["name"] == "widgets/status"));
        let base = "/apis/example.com/v1/namespaces/default/widgets";
        let (code, v) = req(&u, "POST", base, JSON, Some(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"size": 1, "unknown": true}, "status": {"x": 1}}))).await;
        assert_eq!(code, 201, "{v}");
        assert_eq!(v["metadata"]["generation"], 1);
        assert!(v.get("status").is_none(), "status dropped on create: {v}");
        assert!(v["spec"].get("unknown").is_none(), "pruned: {v}");
        // Status writes do not bump generation; spec writes do.
        let (code, v) = req(&u, "PATCH", &format!("{base}/w/status"), MERGE, Some(json!({"status": {"ready": true}, "spec": {"size": 9}}))).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!((v["metadata"]["generation"].as_i64(), v["spec"]["size"].as_i64()), (Some(1), Some(1)));
        assert_eq!(v["status"]["ready"], true);
        let (_, v) = req(&u, "PATCH", &format!("{base}/w"), MERGE, Some(json!({"spec": {"size": 2}, "status": {"ready": false}}))).await;
        assert_eq!(v["metadata"]["generation"], 2);
        assert_eq!(v["status"]["ready"], true, "main resource keeps status");
        let (_, v) = req(&u, "PATCH", &format!("{base}/w"), MERGE, Some(json!({"metadata": {"labels": {"a": "b"}}}))).await;
        assert_eq!(v["metadata"]["generation"], 2);
        // Server-side apply through /status changes only the status.
        let r = raw(
            &u,
            "PATCH",
            &format!("{base}/w/status?fieldManager=ctl&force=true"),
            &[("Content-Type", "application/apply-patch+yaml")],
            Some(r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":7},"status":{"phase":"Done"}}"#),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["status"]["phase"], "Done");
        assert_eq!(v["spec"]["size"], 2);
        assert!(
            v["metadata"]["managedFields"].as_array().unwrap().iter().any(|m| m["manager"] == "ctl" && m["subresource"] == "status"),
            "{v}"
        );
        // Strategic merge on a CR: 415.
        let (code, _) = req(&u, "PATCH", &format!("{base}/w"), "application/strategic-merge-patch+json", Some(json!({}))).await;
        assert_eq!(code, 415);
        // Deleting the CRD deletes its objects and endpoints.
        let (code, _) = req(&u, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", JSON, None).await;
        assert_eq!(code, 200);
        let (code, _) = req(&u, "GET", base, JSON, None).await;
        assert_eq!(code, 404);
        let (code, _) = req(&u, "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", JSON, None).await;
        assert_eq!(code, 404);
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn lists_selectors_and_pages() {
    within(20, "lists", async {
        let c = SimCluster::start("l").await.unwrap();
        let u = c.url();
        for i in 0..7 {
            cm(
                &u,
                &format!("c{i}"),
                json!({"i": i.to_string(), "even": if i % 2 == 0 { "yes" } else { "no" }}),
            )
            .await;
        }
        let names = |v: &Value| -> Vec<String> {
            v["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        let (_, v) = req(
            &u,
            "GET",
            "/api/v1/namespaces/default/configmaps?labelSelector=even%3Dyes",
            JSON,
            None,
        )
        .await;
        assert_eq!(names(&v), ["c0", "c2", "c4", "c6"]);
        let (_, v) = req(
            &u,
            "GET",
            "/api/v1/configmaps?labelSelector=i%20in%20(1,2),even!%3Dyes",
            JSON,
            None,
        )
        .await;
        assert_eq!(names(&v), ["c1"]);
        let (_, v) = req(
            &u,
            "GET",
            "/api/v1/configmaps?labelSelector=!missing,i",
            JSON,
            None,
        )
        .await;
        assert_eq!(names(&v).len(), 7);
        assert_eq!(v["kind"], "ConfigMapList");
        assert_eq!(v["items"][0]["kind"], "ConfigMap");
        let (_, v) = req(
            &u,
            "GET",
            "/api/v1/configmaps?fieldSelector=metadata.name%3Dc3",
            JSON,
            None,
        )
        .await;
        assert_eq!(names(&v), ["c3"]);
        let (code, _) = req(
            &u,
            "GET",
            "/api/v1/configmaps?fieldSelector=spec.x%3D1",
            JSON,
            None,
        )
        .await;
        assert_eq!(code, 400);
        let (_, v) = req(
            &u,
            "GET",
            "/api/v1/namespaces/kube-system/configmaps",
            JSON,
            None,
        )
        .await;
        assert_eq!(v["items"], json!([]));
        // Pages share the first RV even when writes happen in between.
        let (_, p1) = req(
            &u,
            "GET",
            "/api/v1/namespaces/default/configmaps?limit=3",
            JSON,
            None,
        )
        .await;
        let first_rv = p1["metadata"]["resourceVersion"].clone();
        assert_eq!(names(&p1), ["c0", "c1", "c2"]);
        req(
            &u,
            "DELETE",
            "/api/v1/namespaces/default/configmaps/c4",
            JSON,
            None,
        )
        .await;
        cm(&u, "c35", json!({})).await;
        let mut all = names(&p1);
        let mut token = p1["metadata"]["continue"].as_str().unwrap().to_string();
        loop {
            let (code, p) = req(
                &u,
                "GET",
                &format!("/api/v1/namespaces/default/configmaps?limit=3&continue={token}"),
                JSON,
                None,
            )
            .await;
            assert_eq!(code, 200, "{p}");
            assert_eq!(p["metadata"]["resourceVersion"], first_rv);
            all.extend(names(&p));
            match p["metadata"]["continue"].as_str() {
                Some(t) => token = t.to_string(),
                None => break,
            }
        }
        assert_eq!(
            all,
            ["c0", "c1", "c2", "c3", "c4", "c5", "c6"],
            "snapshot of the first page"
        );
        let (code, v) = req(
            &u,
            "GET",
            "/api/v1/configmaps?limit=3&continue=zzz",
            JSON,
            None,
        )
        .await;
        assert_eq!((code, v["reason"].as_str()), (410, Some("Expired")));
        // resourceVersionMatch validation.
        let (code, _) = req(
            &u,
            "GET",
            "/api/v1/configmaps?resourceVersionMatch=NotOlderThan",
            JSON,
            None,
        )
        .await;
        assert_eq!(code, 422);
        let (code, _) = req(
            &u,
            "GET",
            "/api/v1/configmaps?resourceVersion=0&resourceVersionMatch=Exact",
            JSON,
            None,
        )
        .await;
        assert_eq!(code, 422);
        let (code, _) = req(
            &u,
            "GET",
            "/api/v1/configmaps?sendInitialEvents=true",
            JSON,
            None,
        )
        .await;
        assert_eq!(code, 422);
        // Metadata-only lists.
        let r = raw(
            &u,
            "GET",
            "/api/v1/namespaces/default/configmaps",
            &[(
                "Accept",
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
            )],
            None,
        )
        .await;
        let v = r.json();
        assert_eq!(v["kind"], "PartialObjectMetadataList");
        assert!(v["items"][0].get("data").is_none());
        assert_eq!(v["items"][0]["kind"], "PartialObjectMetadata");
        // Delete collection by selector returns the deleted items.
        let (code, v) = req(
            &u,
            "DELETE",
            "/api/v1/namespaces/default/configmaps?labelSelector=even%3Dno",
            JSON,
            None,
        )
        .await;
        assert_eq!(code, 200);
        assert_eq!(names(&v), ["c1", "c3", "c5"]);
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn watch_semantics() {
    within(30, "watch", async {
        let c = SimCluster::start_with(SimConfig::new("watch").history_limit(50)).await.unwrap();
        let u = c.url();
        cm(&u, "a", json!({"app": "x"})).await;
        let (_, list) = req(&u, "GET", "/api/v1/namespaces/default/configmaps", JSON, None).await;
        let list_rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        // Changes after the list: a selector transition in each direction.
        req(&u, "PATCH", "/api/v1/namespaces/default/configmaps/a", MERGE, Some(json!({"metadata": {"labels": {"app": "y"}}}))).await;
        req(&u, "PATCH", "/api/v1/namespaces/default/configmaps/a", MERGE, Some(json!({"metadata": {"labels": {"app": "x"}}}))).await;
        req(&u, "PATCH", "/api/v1/namespaces/default/configmaps/a", MERGE, Some(json!({"data": {"k": "2"}}))).await;
        req(&u, "DELETE", "/api/v1/namespaces/default/configmaps/a", JSON, None).await;
        let r = raw(&u, "GET", &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={list_rv}&labelSelector=app%3Dx&timeoutSeconds=1&allowWatchBookmarks=true"), &[], None).await;
        assert_eq!(r.status, 200);
        let evs = r.lines();
        let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["DELETED", "ADDED", "MODIFIED", "DELETED", "BOOKMARK"], "{evs:?}");
        assert_eq!(evs[0]["object"]["metadata"]["labels"]["app"], "x", "DELETED on leaving carries the old content");
        let bm = &evs[4]["object"];
        assert_eq!((bm["kind"].as_str(), bm["apiVersion"].as_str()), (Some("ConfigMap"), Some("v1")));
        assert!(bm["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap() >= rv(&evs[3]["object"]));
        // RV unset: synthetic ADDED for current objects.
        cm(&u, "b", json!({})).await;
        let r = raw(&u, "GET", "/api/v1/namespaces/default/configmaps?watch=True&timeoutSeconds=1", &[], None).await;
        let evs = r.lines();
        assert_eq!(evs.len(), 1);
        assert_eq!((evs[0]["type"].as_str(), evs[0]["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("b")));
        // Streaming list: ADDED..., then the initial-events-end bookmark.
        let r = raw(&u, "GET", "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1", &[], None).await;
        let evs = r.lines();
        assert_eq!(evs[0]["type"], "ADDED");
        assert_eq!(evs[1]["type"], "BOOKMARK");
        assert_eq!(evs[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
        // Too old: HTTP 200 with an ERROR event.
        c.compact();
        let r = raw(&u, "GET", &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={list_rv}"), &[], None).await;
        assert_eq!(r.status, 200);
        let evs = r.lines();
        assert_eq!(evs.len(), 1);
        let st = &evs[0]["object"];
        assert_eq!(evs[0]["type"], "ERROR");
        assert_eq!((st["code"].as_i64(), st["reason"].as_str(), st["kind"].as_str()), (Some(410), Some("Expired"), Some("Status")));
        assert!(st["message"].as_str().unwrap().starts_with("too old resource version"));
        // Exact list of a compacted RV: 410.
        let (code, _) = req(&u, "GET", &format!("/api/v1/configmaps?resourceVersion={list_rv}&resourceVersionMatch=Exact"), JSON, None).await;
        assert_eq!(code, 410);
        c.shutdown().await;
    })
    .await;
}

/// Event types of a watch that ended by its timeout, with a check that no
/// ERROR (410) arrived.
async fn watch_types_from(u: &str, path: &str, from: &str) -> Vec<(String, String)> {
    let r = raw(
        u,
        "GET",
        &format!("{path}?watch=1&resourceVersion={from}&timeoutSeconds=1"),
        &[],
        None,
    )
    .await;
    assert_eq!(r.status, 200);
    let evs = r.lines();
    assert!(
        evs.iter().all(|e| e["type"] != "ERROR"),
        "no 410 for a watch from {from}: {evs:?}"
    );
    evs.iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn first_watch_of_a_new_resource_is_not_expired() {
    within(30, "first watch of a new resource", async {
        let c = SimCluster::start_with(SimConfig::new("fresh")).await.unwrap();
        let u = c.url();
        let secrets = "/api/v1/namespaces/default/secrets";
        // List the never-used resource: its RV is the global RV at snapshot.
        let (code, list) = req(&u, "GET", secrets, JSON, None).await;
        assert_eq!(code, 200);
        assert_eq!(list["items"], json!([]));
        let x = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        // Other resources move the global RV on.
        cm(&u, "other-1", json!({})).await;
        cm(&u, "other-2", json!({})).await;
        // The table's first object, created and deleted before anyone watches.
        let (code, s) = req(&u, "POST", secrets, JSON, Some(json!({"metadata": {"name": "s1"}, "stringData": {"k": "v"}}))).await;
        assert_eq!(code, 201, "{s}");
        let (code, _) = req(&u, "DELETE", &format!("{secrets}/s1"), JSON, None).await;
        assert_eq!(code, 200);
        let evs = watch_types_from(&u, secrets, &x).await;
        assert_eq!(evs, [("ADDED".to_string(), "s1".to_string()), ("DELETED".to_string(), "s1".to_string())], "the create-and-delete is not hidden");
        // An exact list at X is served too (nothing was dropped).
        let (code, old) = req(&u, "GET", &format!("{secrets}?resourceVersion={x}&resourceVersionMatch=Exact"), JSON, None).await;
        assert_eq!((code, old["items"].clone()), (200, json!([])), "{old}");

        // A watch that arrives before the table's first write creates the
        // table; it must still accept the older list RV.
        let sas = "/api/v1/namespaces/default/serviceaccounts";
        let (_, list) = req(&u, "GET", sas, JSON, None).await;
        let y = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        cm(&u, "other-3", json!({})).await;
        let url = u.clone();
        let from = y.clone();
        let watcher = tokio::spawn(async move { watch_types_from(&url, sas, &from).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (code, _) = req(&u, "POST", sas, JSON, Some(json!({"metadata": {"name": "sa1"}}))).await;
        assert_eq!(code, 201);
        let evs = watcher.await.unwrap();
        assert_eq!(evs, [("ADDED".to_string(), "sa1".to_string())]);

        // Compaction still expires every RV before it, also for a resource
        // whose table does not exist yet.
        let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
        let (_, list) = req(&u, "GET", leases, JSON, None).await;
        let z = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        c.compact();
        let r = raw(&u, "GET", &format!("{leases}?watch=1&resourceVersion={z}&timeoutSeconds=1"), &[], None).await;
        let evs = r.lines();
        assert_eq!((evs.len(), evs[0]["type"].as_str(), evs[0]["object"]["code"].as_i64()), (1, Some("ERROR"), Some(410)), "{evs:?}");
        let (code, _) = req(&u, "GET", &format!("{leases}?resourceVersion={z}&resourceVersionMatch=Exact"), JSON, None).await;
        assert_eq!(code, 410, "exact list before the compaction");
        // A fresh list after the compaction is watchable again.
        let (_, list) = req(&u, "GET", leases, JSON, None).await;
        let w = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        cm(&u, "other-4", json!({})).await;
        let (code, _) = req(&u, "POST", leases, JSON, Some(json!({"metadata": {"name": "l1"}, "spec": {}}))).await;
        assert_eq!(code, 201);
        assert_eq!(watch_types_from(&u, leases, &w).await, [("ADDED".to_string(), "l1".to_string())]);
        // Same for existing tables: the pre-compaction secrets list RV is gone.
        let r = raw(&u, "GET", &format!("{secrets}?watch=1&resourceVersion={x}&timeoutSeconds=1"), &[], None).await;
        assert_eq!(r.lines()[0]["object"]["code"], 410);

        // A table dropped with its CRD lost its DELETED events: a watch of
        // the re-created resource from before the drop is 410, not silence.
        let crd = json!({
            "metadata": {"name": "things.x.io"},
            "spec": {"group": "x.io", "scope": "Namespaced",
                "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
        c.create("apiextensions.k8s.io/v1", "customresourcedefinitions", None, crd.clone()).unwrap();
        let things = "/apis/x.io/v1/namespaces/default/things";
        let (code, _) = req(&u, "POST", things, JSON, Some(json!({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": "t"}}))).await;
        assert_eq!(code, 201);
        let (_, list) = req(&u, "GET", things, JSON, None).await;
        let before_drop = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        c.delete("apiextensions.k8s.io/v1", "customresourcedefinitions", None, "things.x.io").unwrap();
        c.create("apiextensions.k8s.io/v1", "customresourcedefinitions", None, crd).unwrap();
        let r = raw(&u, "GET", &format!("{things}?watch=1&resourceVersion={before_drop}&timeoutSeconds=1"), &[], None).await;
        assert_eq!(r.lines()[0]["object"]["code"], 410, "{}", r.text());
        // ...while a list after the re-creation is watchable.
        let (_, list) = req(&u, "GET", things, JSON, None).await;
        let after = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        let (code, _) = req(&u, "POST", things, JSON, Some(json!({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": "t2"}}))).await;
        assert_eq!(code, 201);
        assert_eq!(watch_types_from(&u, things, &after).await, [("ADDED".to_string(), "t2".to_string())]);
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn watch_live_periodic_bookmarks_and_close() {
    within(30, "live watch", async {
        let c = SimCluster::start_with(SimConfig::new("live").bookmark_interval(Duration::from_millis(200))).await.unwrap();
        let u = c.url();
        let url = u.clone();
        let watch = tokio::spawn(async move {
            raw(&url, "GET", "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=1&timeoutSeconds=30", &[], None).await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        cm(&u, "live", json!({})).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        // Closing every watch ends the stream long before its timeout.
        let (code, _) = req(&u, "POST", "/_sim/close-watches", JSON, None).await;
        assert_eq!(code, 200);
        let r = watch.await.unwrap();
        let evs = r.lines();
        assert!(evs.iter().any(|e| e["type"] == "ADDED" && e["object"]["metadata"]["name"] == "live"));
        assert!(evs.iter().filter(|e| e["type"] == "BOOKMARK").count() >= 2, "{evs:?}");
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn finalizers_gc_and_namespaces() {
    within(30, "gc", async {
        let c = SimCluster::start("gc").await.unwrap();
        let u = c.url();
        // Finalizer keeps a deleted object; removing it completes the delete.
        let (_, _) = req(&u, "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(json!({"metadata": {"name": "f", "finalizers": ["t/x"]}}))).await;
        let (code, v) = req(&u, "DELETE", "/api/v1/namespaces/default/configmaps/f", JSON, None).await;
        assert_eq!(code, 200);
        assert!(v["metadata"]["deletionTimestamp"].is_string());
        let (code, _) = req(&u, "DELETE", "/api/v1/namespaces/default/configmaps/f", JSON, None).await;
        assert_eq!(code, 200, "repeat delete is idempotent");
        let (code, v) = req(&u, "PATCH", "/api/v1/namespaces/default/configmaps/f", MERGE, Some(json!({"metadata": {"finalizers": ["t/x", "t/new"]}}))).await;
        assert_eq!(code, 422, "{v}");
        let (code, _) = req(&u, "PATCH", "/api/v1/namespaces/default/configmaps/f", MERGE, Some(json!({"metadata": {"finalizers": null}}))).await;
        assert_eq!(code, 200);
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/default/configmaps/f", JSON, None).await;
        assert_eq!(code, 404);
        // Preconditions.
        let owner = cm(&u, "owner", json!({})).await;
        let (code, _) = req(&u, "DELETE", "/api/v1/namespaces/default/configmaps/owner", JSON, Some(json!({"preconditions": {"uid": "nope"}}))).await;
        assert_eq!(code, 409);
        // Background GC.
        let oref = |o: &Value, block: bool| json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"], "uid": o["metadata"]["uid"], "blockOwnerDeletion": block}]);
        let dep = |name: &str, refs: Value| json!({"metadata": {"name": name, "ownerReferences": refs}});
        req(&u, "POST", "/api/v1/namespaces/default/secrets", JSON, Some(dep("dep", oref(&owner, false)))).await;
        req(&u, "DELETE", "/api/v1/namespaces/default/configmaps/owner", JSON, None).await;
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/default/secrets/dep", JSON, None).await;
        assert_eq!(code, 404, "background GC deletes dependents");
        // Orphan.
        let owner = cm(&u, "owner2", json!({})).await;
        req(&u, "POST", "/api/v1/namespaces/default/secrets", JSON, Some(dep("dep2", oref(&owner, false)))).await;
        req(&u, "DELETE", "/api/v1/namespaces/default/configmaps/owner2?propagationPolicy=Orphan", JSON, None).await;
        let (code, v) = req(&u, "GET", "/api/v1/namespaces/default/secrets/dep2", JSON, None).await;
        assert_eq!(code, 200);
        assert!(v["metadata"].get("ownerReferences").is_none());
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/default/configmaps/owner2", JSON, None).await;
        assert_eq!(code, 404);
        // Foreground waits for a blocking dependent with a finalizer.
        let owner = cm(&u, "owner3", json!({})).await;
        let mut d = dep("dep3", oref(&owner, true));
        d["metadata"]["finalizers"] = json!(["t/hold"]);
        req(&u, "POST", "/api/v1/namespaces/default/secrets", JSON, Some(d)).await;
        let (code, v) = req(&u, "DELETE", "/api/v1/namespaces/default/configmaps/owner3", JSON, Some(json!({"propagationPolicy": "Foreground"}))).await;
        assert_eq!(code, 200);
        assert!(v["metadata"]["finalizers"].as_array().unwrap().contains(&json!("foregroundDeletion")));
        let (_, v) = req(&u, "GET", "/api/v1/namespaces/default/secrets/dep3", JSON, None).await;
        assert!(v["metadata"]["deletionTimestamp"].is_string());
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/default/configmaps/owner3", JSON, None).await;
        assert_eq!(code, 200, "owner waits for its blocking dependent");
        req(&u, "PATCH", "/api/v1/namespaces/default/secrets/dep3", MERGE, Some(json!({"metadata": {"finalizers": null}}))).await;
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/default/configmaps/owner3", JSON, None).await;
        assert_eq!(code, 404);
        // Dangling owner.
        req(&u, "POST", "/api/v1/namespaces/default/secrets", JSON, Some(dep("orphaned", json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-000000000000"}])))).await;
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/default/secrets/orphaned", JSON, None).await;
        assert_eq!(code, 404);
        // Namespace lifecycle.
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let (code, _) = req(&u, "GET", &format!("/api/v1/namespaces/{ns}"), JSON, None).await;
            assert_eq!(code, 200, "{ns}");
        }
        let (code, _) = req(&u, "DELETE", "/api/v1/namespaces/default", JSON, None).await;
        assert_eq!(code, 403);
        req(&u, "POST", "/api/v1/namespaces", JSON, Some(json!({"metadata": {"name": "tmp"}}))).await;
        req(&u, "POST", "/api/v1/namespaces/tmp/configmaps", JSON, Some(json!({"metadata": {"name": "held", "finalizers": ["t/x"]}}))).await;
        req(&u, "POST", "/api/v1/namespaces/tmp/configmaps", JSON, Some(json!({"metadata": {"name": "free"}}))).await;
        req(&u, "POST", "/_sim/namespace-delay?ms=200", JSON, None).await;
        // The DELETE answers with the namespace Terminating (its finalizer
        // still in spec); the contents go afterwards, as the namespace
        // controller deletes them.
        let (code, v) = req(&u, "DELETE", "/api/v1/namespaces/tmp", JSON, None).await;
        assert_eq!(code, 200);
        assert_eq!(v["status"]["phase"], "Terminating");
        assert_eq!(v["spec"]["finalizers"], json!(["kubernetes"]));
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/tmp/configmaps/free", JSON, None).await;
        assert_eq!(code, 200, "contents outlive the DELETE call");
        let (code, _) = req(&u, "DELETE", "/api/v1/namespaces/tmp/configmaps/free", JSON, None).await;
        assert_eq!(code, 200, "deleting inside a terminating namespace is allowed");
        req(&u, "POST", "/api/v1/namespaces/tmp/configmaps", JSON, Some(json!({"metadata": {"name": "free"}}))).await;
        let ns = loop {
            let (_, v) = req(&u, "GET", "/api/v1/namespaces/tmp", JSON, None).await;
            if v["status"]["conditions"].is_array() {
                break v;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let cond = |t: &str| ns["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).cloned().unwrap();
        assert_eq!(cond("NamespaceContentRemaining")["message"], "Some resources are remaining: configmaps has 1 resource instances");
        assert_eq!(cond("NamespaceFinalizersRemaining")["message"], "Some content in the namespace has finalizers remaining: t/x in 1 resource instances");
        assert_eq!(cond("NamespaceDeletionContentFailure")["status"], "False");
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/tmp/configmaps/free", JSON, None).await;
        assert_eq!(code, 404);
        let (code, v) = req(&u, "POST", "/api/v1/namespaces/tmp/configmaps", JSON, Some(json!({"metadata": {"name": "late"}}))).await;
        assert_eq!((code, v["reason"].as_str()), (403, Some("Forbidden")));
        req(&u, "PATCH", "/api/v1/namespaces/tmp/configmaps/held", MERGE, Some(json!({"metadata": {"finalizers": null}}))).await;
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/tmp", JSON, None).await;
        assert_eq!(code, 404, "namespace is gone once empty");
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn fault_injection_over_http() {
    within(30, "faults", async {
        let sim = Sim::start(&["f1", "f2"]).await.unwrap();
        let c = sim.cluster("f1");
        let u = c.url();
        let kc = std::fs::read_to_string(sim.kubeconfig_path()).unwrap();
        assert!(kc.contains(&sim.cluster("f2").url()) && kc.contains("name: f2"));
        let (code, _) = req(
            &u,
            "POST",
            "/_sim/fail?status=429&count=2&verb=list&path=configmaps&retryAfter=3",
            JSON,
            None,
        )
        .await;
        assert_eq!(code, 200);
        let r = raw(
            &u,
            "GET",
            "/api/v1/namespaces/default/configmaps",
            &[],
            None,
        )
        .await;
        assert_eq!((r.status, r.header("retry-after")), (429, Some("3")));
        assert_eq!(r.json()["reason"], "TooManyRequests");
        let r = raw(&u, "GET", "/api/v1/secrets", &[], None).await;
        assert_eq!(r.status, 200, "other paths unaffected");
        let r = raw(&u, "GET", "/api/v1/configmaps", &[], None).await;
        assert_eq!(r.status, 429);
        let r = raw(&u, "GET", "/api/v1/configmaps", &[], None).await;
        assert_eq!(r.status, 200, "only count requests fail");
        c.fail_next(FaultRule::new(500, 1).verb("create"));
        let (code, v) = req(
            &u,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            JSON,
            Some(json!({"metadata": {"name": "x"}})),
        )
        .await;
        assert_eq!((code, v["reason"].as_str()), (500, Some("InternalError")));
        // Latency.
        req(&u, "POST", "/_sim/latency?ms=300", JSON, None).await;
        let t = std::time::Instant::now();
        raw(&u, "GET", "/api/v1/namespaces", &[], None).await;
        assert!(t.elapsed() >= Duration::from_millis(300));
        req(&u, "POST", "/_sim/latency?ms=0", JSON, None).await;
        // Stall: requests hang until resumed; /_sim still answers.
        req(&u, "POST", "/_sim/stall", JSON, None).await;
        let url = u.clone();
        let pending =
            tokio::spawn(async move { raw(&url, "GET", "/api/v1/namespaces", &[], None).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !pending.is_finished(),
            "stalled request must not be answered"
        );
        let (code, v) = req(&u, "GET", "/_sim/rv", JSON, None).await;
        assert_eq!(code, 200);
        assert_eq!(
            v["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap(),
            c.current_rv()
        );
        req(&u, "POST", "/_sim/resume", JSON, None).await;
        assert_eq!(pending.await.unwrap().status, 200);
        let (_, counts) = req(&u, "GET", "/_sim/requests", JSON, None).await;
        assert!(counts["list"].as_u64().unwrap() >= 4, "{counts}");
        assert!(counts["create"].as_u64().unwrap() >= 1);
        // Reset drops objects but keeps the system namespaces.
        req(
            &u,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            JSON,
            Some(json!({"metadata": {"name": "y"}})),
        )
        .await;
        let before = c.current_rv();
        req(&u, "POST", "/_sim/reset", JSON, None).await;
        assert!(c.current_rv() > before, "resourceVersion keeps counting");
        let (_, v) = req(&u, "GET", "/api/v1/configmaps", JSON, None).await;
        assert_eq!(v["items"], json!([]));
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/default", JSON, None).await;
        assert_eq!(code, 200);
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn rust_store_handle() {
    within(20, "handle", async {
        let c = SimCluster::start("h").await.unwrap();
        let node = c
            .create("v1", "nodes", None, json!({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
            .unwrap();
        assert_eq!(node["status"]["conditions"][0]["type"], "Ready", "nodes keep status on create");
        let n = c.merge_patch("v1", "nodes", None, "n1", &json!({"metadata": {"labels": {"a": "b"}}}), false).unwrap();
        assert_eq!(n["metadata"]["labels"]["a"], "b");
        assert_eq!(c.list("v1", "nodes", None, "a=b").unwrap().len(), 1);
        c.delete("v1", "nodes", None, "n1").unwrap();
        assert_eq!(c.get("v1", "nodes", None, "n1").unwrap_err().code, 404);
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn malformed_requests_get_a_status_never_a_dropped_connection() {
    within(30, "malformed", async {
        let c = SimCluster::start("bad").await.unwrap();
        let u = c.url();
        cm(&u, "a", json!({})).await;
        let cms = "/api/v1/namespaces/default/configmaps";
        let obj = "/api/v1/namespaces/default/configmaps/a";
        let cases: Vec<(&str, String, &str, &str)> = vec![
            ("POST", cms.into(), JSON, "[]"),
            ("POST", cms.into(), JSON, "\"str\""),
            ("POST", cms.into(), JSON, "null"),
            ("POST", cms.into(), JSON, ""),
            ("POST", cms.into(), JSON, r#"{"metadata": 5}"#),
            ("POST", cms.into(), JSON, r#"{"metadata": {"name": 5}}"#),
            (
                "POST",
                cms.into(),
                JSON,
                r#"{"metadata": {"name": "x", "labels": "y"}}"#,
            ),
            (
                "POST",
                cms.into(),
                JSON,
                r#"{"metadata": {"name": "x", "labels": {"a": 1}}}"#,
            ),
            (
                "POST",
                cms.into(),
                JSON,
                r#"{"metadata": {"name": "x", "labels": {"bad key!": "v"}}}"#,
            ),
            (
                "POST",
                cms.into(),
                JSON,
                r#"{"metadata": {"name": "x", "finalizers": {"a": 1}}}"#,
            ),
            (
                "POST",
                cms.into(),
                JSON,
                r#"{"metadata": {"name": "x", "ownerReferences": [{"uid": 5}]}}"#,
            ),
            (
                "POST",
                cms.into(),
                JSON,
                r#"{"metadata": {"name": "x", "ownerReferences": [{}]}}"#,
            ),
            (
                "POST",
                cms.into(),
                JSON,
                r#"{"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}"#,
            ),
            (
                "POST",
                cms.into(),
                JSON,
                r#"{"kind": "Secret", "metadata": {"name": "x"}}"#,
            ),
            (
                "POST",
                format!("{cms}?dryRun=Maybe"),
                JSON,
                r#"{"metadata": {"name": "x"}}"#,
            ),
            (
                "POST",
                format!("{cms}?fieldValidation=Loud"),
                JSON,
                r#"{"metadata": {"name": "x"}}"#,
            ),
            ("PUT", obj.into(), JSON, "[1,2]"),
            (
                "PUT",
                obj.into(),
                JSON,
                r#"{"metadata": {"name": "a", "generation": "x"}}"#,
            ),
            ("PATCH", obj.into(), MERGE, "[1]"),
            ("PATCH", obj.into(), MERGE, "{"),
            ("PATCH", obj.into(), "application/json-patch+json", "{}"),
            (
                "PATCH",
                obj.into(),
                "application/json-patch+json",
                r#"[{"op": "nope", "path": "/x"}]"#,
            ),
            (
                "PATCH",
                obj.into(),
                "application/json-patch+json",
                r#"[{"op": "add", "path": "/metadata/labels", "value": 7}]"#,
            ),
            (
                "PATCH",
                obj.into(),
                "application/strategic-merge-patch+json",
                "[]",
            ),
            (
                "PATCH",
                format!("{obj}?fieldManager=m"),
                "application/apply-patch+yaml",
                "- a\n- b",
            ),
            (
                "PATCH",
                format!("{obj}?fieldManager=m"),
                "application/apply-patch+yaml",
                ": : :",
            ),
            (
                "PATCH",
                format!("{obj}?fieldManager=m"),
                "application/apply-patch+yaml",
                "metadata: {managedFields: [{manager: x}]}",
            ),
            ("PATCH", format!("{obj}?force=true"), MERGE, "{}"),
            ("PATCH", obj.into(), "", "{}"),
            (
                "DELETE",
                obj.into(),
                JSON,
                r#"{"propagationPolicy": "Sideways"}"#,
            ),
            ("DELETE", obj.into(), JSON, "{bad"),
            ("GET", format!("{cms}?labelSelector=a%20in%20(b"), JSON, ""),
            ("GET", format!("{cms}?labelSelector=%3D%3D%3D"), JSON, ""),
            ("GET", format!("{cms}?limit=abc"), JSON, ""),
            ("GET", format!("{cms}?resourceVersion=abc"), JSON, ""),
            (
                "GET",
                format!("{cms}?watch=1&resourceVersion=abc"),
                JSON,
                "",
            ),
            ("GET", format!("{cms}?watch=1&timeoutSeconds=-1"), JSON, ""),
            (
                "GET",
                format!("{cms}?watch=1&resourceVersionMatch=Exact&resourceVersion=1"),
                JSON,
                "",
            ),
            (
                "GET",
                "/api/v1/namespaces/default/configmaps/a/status".into(),
                JSON,
                "",
            ),
            (
                "GET",
                "/api/v1/namespaces/default/configmaps/a/b/c/d".into(),
                JSON,
                "",
            ),
            ("GET", "/apis".into(), "", ""),
            ("POST", "/version".into(), JSON, "{}"),
            ("GET", "/api/v1/nodes/n/../../x".into(), JSON, ""),
            ("POST", "/_sim/fail?status=abc".into(), JSON, ""),
            ("POST", "/_sim/nothing".into(), JSON, ""),
        ];
        for (method, path, ct, body) in cases {
            let mut headers = vec![("Accept", "application/json")];
            if !ct.is_empty() {
                headers.push(("Content-Type", ct));
            }
            let r = raw(&u, method, &path, &headers, Some(body)).await;
            if path == "/apis" {
                assert_eq!(r.status, 200);
                continue;
            }
            assert!(
                (400..500).contains(&r.status),
                "{method} {path} {body:?}: expected 4xx, got {} {}",
                r.status,
                r.text()
            );
            let v = r.json();
            assert_eq!(
                (v["kind"].as_str(), v["status"].as_str()),
                (Some("Status"), Some("Failure")),
                "{method} {path}: {v}"
            );
            assert_eq!(v["code"].as_u64(), Some(u64::from(r.status)));
        }
        // The object survived every bad write unchanged.
        let (code, v) = req(&u, "GET", obj, JSON, None).await;
        assert_eq!(code, 200);
        assert_eq!(v["data"], json!({"k": "v"}));
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn tables_for_kubectl_get() {
    within(20, "tables", async {
        let c = SimCluster::start("t").await.unwrap();
        let u = c.url();
        c.create(
            "v1",
            "nodes",
            None,
            json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/gpu": ""}},
                   "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.0"}}}),
        )
        .unwrap();
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        let r = raw(&u, "GET", "/api/v1/nodes?limit=500", &[("Accept", accept)], None).await;
        let t = r.json();
        assert_eq!((t["kind"].as_str(), t["apiVersion"].as_str()), (Some("Table"), Some("meta.k8s.io/v1")));
        let cols: Vec<&str> = t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(cols, ["Name", "Status", "Roles", "Age", "Version", "Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"]);
        let prio: Vec<i64> = t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["priority"].as_i64().unwrap()).collect();
        assert_eq!(prio, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1], "wide columns have priority 1");
        assert_eq!(t["rows"][0]["cells"][0], "n1");
        assert_eq!(t["rows"][0]["cells"][1], "Ready");
        assert_eq!(t["rows"][0]["cells"][2], "gpu");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert!(t["metadata"]["resourceVersion"].is_string());
        // Only a table acceptable and includeObject=Object.
        let r = raw(&u, "GET", "/api/v1/nodes/n1?includeObject=Object", &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")], None).await;
        let t = r.json();
        assert_eq!(t["rows"][0]["object"]["status"]["nodeInfo"]["kubeletVersion"], "v1.32.0");
        // Writes answer the object even when a table is acceptable.
        let r = raw(&u, "PATCH", "/api/v1/nodes/n1", &[("Accept", accept), ("Content-Type", MERGE)], Some(r#"{"spec":{"unschedulable":true}}"#)).await;
        assert_eq!(r.json()["kind"], "Node");
        // `kubectl get tests -w` on a CR with printer columns: the watch
        // asks for Tables, each event's object is a Table with one row.
        c.create("apiextensions.k8s.io/v1", "customresourcedefinitions", None, json!({
            "metadata": {"name": "tests.job.lailin.xyz"},
            "spec": {"group": "job.lailin.xyz", "scope": "Namespaced",
                "names": {"plural": "tests", "singular": "test", "kind": "Test"},
                "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                    "additionalPrinterColumns": [{"name": "Image", "type": "string", "jsonPath": ".spec.image"}],
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})).unwrap();
        let tests = "/apis/job.lailin.xyz/v1/namespaces/default/tests";
        let (code, _) = req(&u, "POST", tests, JSON, Some(json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test", "metadata": {"name": "t1"}, "spec": {"image": "busybox"}}))).await;
        assert_eq!(code, 201);
        let list = raw(&u, "GET", &format!("{tests}?limit=500"), &[("Accept", accept)], None).await.json();
        let list_rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        assert_eq!(list["rows"][0]["cells"][1], "busybox");
        let (code, _) = req(&u, "PATCH", &format!("{tests}/t1"), MERGE, Some(json!({"spec": {"image": "alpine"}}))).await;
        assert_eq!(code, 200);
        let (code, _) = req(&u, "POST", tests, JSON, Some(json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test", "metadata": {"name": "t2"}, "spec": {"image": "nginx"}}))).await;
        assert_eq!(code, 201);
        let r = raw(&u, "GET", &format!("{tests}?resourceVersion={list_rv}&watch=true&timeoutSeconds=1"), &[("Accept", accept)], None).await;
        let evs = r.lines();
        assert_eq!(evs.len(), 2, "{evs:?}");
        for (ev, (etype, name, image)) in evs.iter().zip([("MODIFIED", "t1", "alpine"), ("ADDED", "t2", "nginx")]) {
            let t = &ev["object"];
            assert_eq!((ev["type"].as_str(), t["kind"].as_str(), t["apiVersion"].as_str()), (Some(etype), Some("Table"), Some("meta.k8s.io/v1")), "{ev}");
            let cols: Vec<&str> = t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
            assert_eq!(cols, ["Name", "Image", "Age"]);
            assert_eq!(t["rows"].as_array().unwrap().len(), 1);
            assert_eq!((t["rows"][0]["cells"][0].as_str(), t["rows"][0]["cells"][1].as_str()), (Some(name), Some(image)));
            assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
            assert_eq!(t["metadata"]["resourceVersion"], t["rows"][0]["object"]["metadata"]["resourceVersion"], "the event's RV");
        }
        c.shutdown().await;
    })
    .await;
}

/// The official Python client's watch (`kubernetes.watch.Watch`) against
/// kube-sim: events after a list RV, then 410 raised as ApiException.
/// Fails where python3 or the `kubernetes` package is missing.
#[tokio::test]
async fn python_client_watch() {
    within(90, "python watch", async {
        common::require_python_client().await;
        let sim = Sim::start(&["main"]).await.unwrap();
        let script = r#"
import sys, threading, time, urllib.request
from kubernetes import client, config, watch
config.load_kube_config(config_file=sys.argv[1], context="main")
v1 = client.CoreV1Api()
v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py1")))
rv = v1.list_namespaced_config_map("default").metadata.resource_version
def writer():
    time.sleep(0.5)
    v1.patch_namespaced_config_map("py1", "default", {"data": {"a": "b"}})
    v1.delete_namespaced_config_map("py1", "default")
threading.Thread(target=writer).start()
w = watch.Watch()
seen = []
for ev in w.stream(v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=10):
    seen.append(ev["type"])
    if ev["type"] == "DELETED":
        w.stop()
assert seen == ["MODIFIED", "DELETED"], seen
urllib.request.urlopen(urllib.request.Request(v1.api_client.configuration.host + "/_sim/compact", method="POST"))
try:
    for ev in watch.Watch().stream(v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5):
        pass
    sys.exit("no 410 raised")
except client.exceptions.ApiException as e:
    assert e.status == 410, e.status
    print("ok", seen, e.status)
"#;
        let out = tokio::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(sim.kubeconfig_path())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), out)
            .await
            .expect("python watch timed out")
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "python client failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("ok ['MODIFIED', 'DELETED'] 410"));
        sim.shutdown().await;
    })
    .await;
}

/// OpenAPI as kubectl reads it: `/openapi/v3` lists every group-version
/// with its document's URL; a document carries the schemas (with
/// `x-kubernetes-group-version-kind`) and the operations' query parameters;
/// CRD schemas appear once the CRD is established; `/openapi/v2` is JSON
/// when asked for JSON, an empty protobuf document otherwise.
#[tokio::test]
async fn openapi_documents() {
    within(30, "openapi", async {
        let c = SimCluster::start("o").await.unwrap();
        let u = c.url();
        let (code, index) = req(&u, "GET", "/openapi/v3", JSON, None).await;
        assert_eq!(code, 200);
        let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="), "{url}");
        assert!(index["paths"]["api/v1"].is_object() && index["paths"]["apis/batch/v1"].is_object());
        let (code, doc) = req(&u, "GET", url, JSON, None).await;
        assert_eq!(code, 200);
        let d = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(d["x-kubernetes-group-version-kind"], json!([{"group": "apps", "version": "v1", "kind": "Deployment"}]));
        assert_eq!(d["properties"]["spec"]["allOf"][0]["$ref"], "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec");
        assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"].is_object(), "referenced definitions are included");
        let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Deployment");
        let params: Vec<&str> = patch["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert!(params.contains(&"fieldValidation"), "{params:?}");
        let (code, _) = req(&u, "GET", "/openapi/v3/apis/nope.example.com/v1", JSON, None).await;
        assert_eq!(code, 404);

        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema":
                    {"type": "object", "properties": {"spec": {"type": "object", "description": "the spec",
                        "properties": {"size": {"type": "integer"}}}}}}}]}});
        let (code, _) = req(&u, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", JSON, Some(crd)).await;
        assert_eq!(code, 201);
        let (_, index2) = req(&u, "GET", "/openapi/v3", JSON, None).await;
        let url = index2["paths"]["apis/example.com/v1"]["serverRelativeURL"].as_str().unwrap();
        let (code, doc) = req(&u, "GET", url, JSON, None).await;
        assert_eq!(code, 200);
        let w = &doc["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(w["x-kubernetes-group-version-kind"], json!([{"group": "example.com", "version": "v1", "kind": "Widget"}]));
        assert_eq!(w["properties"]["spec"]["description"], "the spec");
        assert_eq!(w["properties"]["metadata"]["$ref"], "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        assert!(doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());

        let r = raw(&u, "GET", "/openapi/v2", &[("Accept", "application/json")], None).await;
        assert_eq!(r.status, 200);
        let v2 = r.json();
        assert_eq!(v2["swagger"], "2.0");
        assert_eq!(
            v2["definitions"]["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"]["allOf"][0]["$ref"],
            "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
        );
        let r = raw(&u, "GET", "/openapi/v2", &[("Accept", "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")], None).await;
        assert_eq!((r.status, r.body.len()), (200, 0));
        assert_eq!(r.header("content-type"), Some("application/com.github.proto-openapi.spec.v2.v1.0+protobuf"));
        c.shutdown().await;
    })
    .await;
}

/// The `/scale` subresource over HTTP: discovery, GET, PUT with a stale
/// resourceVersion (409), a negative count (422), merge patch, and 404
/// where a resource has no scale.
#[tokio::test]
async fn scale_subresource() {
    within(30, "scale", async {
        let c = SimCluster::start("s").await.unwrap();
        let u = c.url();
        let (_, apps) = req(&u, "GET", "/apis/apps/v1", JSON, None).await;
        let scale = apps["resources"].as_array().unwrap().iter().find(|r| r["name"] == "deployments/scale").cloned().unwrap();
        assert_eq!((scale["group"].as_str(), scale["version"].as_str(), scale["kind"].as_str()), (Some("autoscaling"), Some("v1"), Some("Scale")));
        let dep = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        req(&u, "POST", "/apis/apps/v1/namespaces/default/deployments", JSON, Some(dep)).await;
        let path = "/apis/apps/v1/namespaces/default/deployments/web/scale";
        let (code, s) = req(&u, "GET", path, JSON, None).await;
        assert_eq!(code, 200);
        assert_eq!(s["spec"], json!({"replicas": 2}));
        let rv = s["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        let (code, s2) = req(&u, "PUT", path, JSON, Some(json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": rv}, "spec": {"replicas": 4}}))).await;
        assert_eq!((code, &s2["spec"]["replicas"]), (200, &json!(4)));
        let (code, e) = req(&u, "PUT", path, JSON, Some(json!({"metadata": {"name": "web", "resourceVersion": rv}, "spec": {"replicas": 5}}))).await;
        assert_eq!((code, e["reason"].as_str()), (409, Some("Conflict")));
        let (code, e) = req(&u, "PATCH", path, MERGE, Some(json!({"spec": {"replicas": -1}}))).await;
        assert_eq!((code, e["reason"].as_str()), (422, Some("Invalid")));
        assert_eq!(e["message"], "Scale.autoscaling \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0");
        let (code, _) = req(&u, "PATCH", path, MERGE, Some(json!({"spec": {"replicas": 0}}))).await;
        assert_eq!(code, 200);
        let (_, d) = req(&u, "GET", "/apis/apps/v1/namespaces/default/deployments/web", JSON, None).await;
        assert_eq!((&d["spec"]["replicas"], &d["metadata"]["generation"]), (&json!(0), &json!(3)));
        req(&u, "POST", "/api/v1/namespaces/default/configmaps", JSON, Some(json!({"metadata": {"name": "cm"}}))).await;
        let (code, _) = req(&u, "GET", "/api/v1/namespaces/default/configmaps/cm/scale", JSON, None).await;
        assert_eq!(code, 404);
        c.shutdown().await;
    })
    .await;
}
