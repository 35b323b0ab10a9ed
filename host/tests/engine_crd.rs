//! Dynamic resources: a plugin whose primary is a CRD that does not exist
//! yet (plural left empty) starts working once the CRD is installed.

mod engine_support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use engine_support::*;
use futures::FutureExt;
use futures::future::BoxFuture;
use rekon::action::{
    Action, ClusterSet, ObjectRef, Outcome, PatchAction, PatchType, Phase, Registration, Request,
    Resource,
};
use rekon::controller::Reconciler;
use rekon::plugin::{CallError, HostReads};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn widgets() -> Resource {
    // No plural: resolved through discovery, which only knows it after the
    // CRD is installed.
    resource("rekon.test", "v1", "Widget", "", true)
}

/// Marks every Widget with annotation `rekon.test/seen` (merge patch with a
/// resourceVersion precondition).
struct Marker(Registration);

impl Reconciler for Marker {
    fn registration(&self) -> &Registration {
        &self.0
    }

    fn reconcile(
        &self,
        req: Request,
        _phase: Phase,
        reads: Arc<dyn HostReads>,
        _time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        let obj = reads.get(
            &req.cluster,
            &widgets(),
            req.namespace.as_deref(),
            &req.name,
        );
        async move {
            let obj: Value = match obj {
                Ok(Some(o)) => serde_json::from_str(&o).unwrap_or_default(),
                _ => Value::Null,
            };
            let mut actions = vec![];
            if obj
                .pointer("/metadata/annotations/rekon.test~1seen")
                .is_none()
            {
                actions.push(Action::Patch(PatchAction {
                    target: ObjectRef {
                        cluster: req.cluster.clone(),
                        resource: widgets(),
                        namespace: req.namespace.clone(),
                        name: req.name.clone(),
                    },
                    patch_type: PatchType::Merge,
                    patch: json!({"metadata": {"annotations": {"rekon.test/seen": "yes"}}})
                        .to_string(),
                    resource_version: obj["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_owned),
                    status: false,
                }));
            }
            Ok(Outcome {
                actions,
                requeue_after_ms: None,
                finalized: false,
            })
        }
        .boxed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_installed_after_start_is_discovered_and_reconciled() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let engine = Engine::start(&["main"], &["main"]).await?;
        engine.manager.upsert(Arc::new(Marker(Registration {
            name: "marker".into(),
            version: "1.0.0".into(),
            primary: widgets(),
            primary_clusters: ClusterSet::Primary,
            primary_selector: None,
            clusters: ClusterSet::Primary,
            watches: vec![],
            finalizer: None,
            permissions: vec![],
            crds: vec![],
            max_concurrent_reconciles: None,
        })));
        // The kind is unknown for a while: discovery keeps retrying.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let main = engine.cluster("main");
        main.create(
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            None,
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.rekon.test"},
                "spec": {
                    "group": "rekon.test",
                    "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                    "versions": [{
                        "name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
                    }]
                }
            }),
        )?;
        for name in ["w1", "w2"] {
            main.create(
                "rekon.test/v1",
                "widgets",
                Some("default"),
                json!({"apiVersion": "rekon.test/v1", "kind": "Widget", "metadata": {"name": name, "namespace": "default"}, "spec": {"size": 1}}),
            )?;
        }
        for name in ["w1", "w2"] {
            eventually("the widget is reconciled", WAIT, || async {
                main.get("rekon.test/v1", "widgets", Some("default"), name)
                    .ok()
                    .and_then(|w| w.pointer("/metadata/annotations/rekon.test~1seen").cloned())
                    == Some(json!("yes"))
            })
            .await?;
        }
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}
