//! kube-sim refuses what the API server refuses for size: a request body
//! over 3 MiB (413, before the body is decoded) and an object over etcd's
//! 1.5 MiB request limit (the server's 500 with etcd's message), leaving
//! the stored object as it was.

mod common;

use common::{req, within};
use kube_sim::SimCluster;
use serde_json::{Value, json};

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const BASE: &str = "/apis/example.com/v1/namespaces/default/blobs";

/// A custom kind whose `spec` keeps anything: no validation of its own
/// stands between a large object and the storage limit.
async fn blob_kind(url: &str) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "blobs.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "blobs", "singular": "blob", "kind": "Blob"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    });
    let (code, v) = req(
        url,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        JSON,
        Some(crd),
    )
    .await;
    assert_eq!(code, 201, "{v}");
}

fn blob(name: &str, kib: usize) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Blob",
        "metadata": {"name": name}, "spec": {"data": "x".repeat(kib * 1024)}})
}

#[tokio::test]
async fn bodies_over_3_mib_get_413_and_objects_over_1_5_mib_the_etcd_error() {
    within(60, "size limits", async {
        let c = SimCluster::start("sizes").await.expect("cluster starts");
        let u = c.url();
        blob_kind(&u).await;

        // A 4 MiB body: the API server's 413, exactly.
        let (code, v) = req(&u, "POST", BASE, JSON, Some(blob("huge", 4096))).await;
        assert_eq!(code, 413, "{v}");
        assert_eq!(v["reason"], "RequestEntityTooLarge", "{v}");
        assert_eq!(v["message"], "Request entity too large: limit is 3145728");

        // 2 MiB passes the request limit but not etcd's.
        let (code, v) = req(&u, "POST", BASE, JSON, Some(blob("big", 2048))).await;
        assert_eq!(code, 500, "{v}");
        assert_eq!(v["message"], "etcdserver: request is too large");
        assert!(
            v.get("reason").is_none(),
            "no reason, as from the server: {v}"
        );
        let (code, _) = req(&u, "GET", &format!("{BASE}/big"), JSON, None).await;
        assert_eq!(code, 404, "nothing was stored");

        // 1 MiB is stored; a patch growing it past the limit is refused and
        // leaves it as it was.
        let (code, v) = req(&u, "POST", BASE, JSON, Some(blob("fits", 1024))).await;
        assert_eq!(code, 201, "{}", v["message"]);
        let before = v["metadata"]["resourceVersion"].clone();
        let grow = json!({"spec": {"more": "y".repeat(1024 * 1024)}});
        let (code, v) = req(&u, "PATCH", &format!("{BASE}/fits"), MERGE, Some(grow)).await;
        assert_eq!(code, 500, "{}", v["message"]);
        assert_eq!(v["message"], "etcdserver: request is too large");
        let (code, v) = req(&u, "GET", &format!("{BASE}/fits"), JSON, None).await;
        assert_eq!(code, 200);
        assert_eq!(v["metadata"]["resourceVersion"], before);
        assert!(v["spec"].get("more").is_none());
    })
    .await;
}
