//! kube-rs against kube-sim: Api CRUD, watcher, reflector, streaming
//! lists, metadata watches, Controller with the finalizer helper, the
//! events Recorder and Leases.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{client, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as KEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use kube_sim::{FaultRule, Sim};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn api_crud_and_errors() {
    within(30, "crud", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let api: Api<ConfigMap> = Api::namespaced(client(&sim, "main").await, "default");
        let created = api.create(&PostParams::default(), &cm("a")).await.unwrap();
        assert!(created.metadata.uid.is_some());
        let err = api.create(&PostParams::default(), &cm("a")).await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"), "{err:?}");
        let mut got = api.get("a").await.unwrap();
        got.data = Some([("k".to_string(), "w".to_string())].into());
        let replaced = api.replace("a", &PostParams::default(), &got).await.unwrap();
        let err = api.replace("a", &PostParams::default(), &got).await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"), "stale RV: {err:?}");
        let patched = api
            .patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"m": "1"}})))
            .await
            .unwrap();
        assert_ne!(patched.resource_version(), replaced.resource_version());
        let patched = api
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::<()>::Json(serde_json::from_value(json!([{"op": "add", "path": "/data/j", "value": "2"}])).unwrap()),
            )
            .await
            .unwrap();
        assert_eq!(patched.data.as_ref().unwrap()["j"], "2");
        let ssa = PatchParams::apply("sim-test");
        let applied = api
            .patch("b", &ssa, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"x": "1"}})))
            .await
            .unwrap();
        assert_eq!(applied.managed_fields()[0].manager.as_deref(), Some("sim-test"));
        let err = api
            .patch("b", &PatchParams::apply("other"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"x": "2"}})))
            .await
            .unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 409), "{err:?}");
        let forced = api
            .patch("b", &PatchParams::apply("other").force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"x": "2"}})))
            .await
            .unwrap();
        assert_eq!(forced.data.unwrap()["x"], "2");
        let list = api.list(&ListParams::default().labels("")).await.unwrap();
        assert_eq!(list.items.len(), 2);
        let deleted = api.delete("a", &DeleteParams::default()).await.unwrap();
        assert!(deleted.is_right(), "immediate deletes answer a Status");
        let err = api.get("a").await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 404 && s.reason == "NotFound"), "{err:?}");
        // Injected faults surface as API errors, then clear.
        sim.cluster("main").fail_next(FaultRule::new(500, 1).verb("list"));
        let err = api.list(&ListParams::default()).await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 500), "{err:?}");
        api.list(&ListParams::default()).await.unwrap();
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn reflector_survives_compaction_and_disconnects() {
    within(60, "reflector", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        let api: Api<ConfigMap> = Api::namespaced(client(&sim, "main").await, "default");
        for n in ["a", "b"] {
            api.create(&PostParams::default(), &cm(n)).await.unwrap();
        }
        let (reader, writer) = reflector::store::<ConfigMap>();
        let stream =
            reflector(writer, watcher(api.clone(), watcher::Config::default())).applied_objects();
        let task = tokio::spawn(async move {
            stream.for_each(|_| async {}).await;
        });
        let wait_for = |n: usize| {
            let reader = reader.clone();
            async move {
                while reader.state().len() != n {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        within(10, "initial sync", wait_for(2)).await;
        let lists_before = c.request_counts().get("list").copied().unwrap_or(0);
        // Expire the history and drop the watch: the watcher must re-list.
        api.create(&PostParams::default(), &cm("c")).await.unwrap();
        c.compact();
        c.close_watches();
        api.create(&PostParams::default(), &cm("d")).await.unwrap();
        within(15, "resync after 410", wait_for(4)).await;
        api.delete("a", &DeleteParams::default()).await.unwrap();
        within(10, "delete observed", wait_for(3)).await;
        let lists_after = c.request_counts().get("list").copied().unwrap_or(0);
        assert!(
            lists_after > lists_before,
            "watcher re-listed after the expired watch"
        );
        task.abort();
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn streaming_list_and_metadata_watch() {
    within(30, "streaming", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let kc = client(&sim, "main").await;
        let api: Api<ConfigMap> = Api::namespaced(kc.clone(), "default");
        for n in ["s1", "s2", "s3"] {
            api.create(&PostParams::default(), &cm(n)).await.unwrap();
        }
        let mut names = Vec::new();
        let mut s = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
        while let Some(ev) = s.try_next().await.unwrap() {
            match ev {
                watcher::Event::InitApply(o) => names.push(o.name_any()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(names, ["s1", "s2", "s3"]);
        // Api<PartialObjectMeta<K>> sends metadata-only (PartialObjectMetadata) requests.
        let meta_api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(kc, "default");
        let mut m = watcher(meta_api, watcher::Config::default()).boxed();
        let mut seen = Vec::new();
        while let Some(ev) = m.try_next().await.unwrap() {
            match ev {
                watcher::Event::InitApply(o) => seen.push(o.metadata.name.unwrap_or_default()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(seen, ["s1", "s2", "s3"]);
        api.delete("s2", &DeleteParams::default()).await.unwrap();
        loop {
            if let Some(watcher::Event::Delete(o)) = m.try_next().await.unwrap() {
                assert_eq!(o.metadata.name.as_deref(), Some("s2"));
                break;
            }
        }
        sim.shutdown().await;
    })
    .await;
}

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "sim.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus"
)]
struct GadgetSpec {
    size: i32,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, Default)]
struct GadgetStatus {
    observed: i32,
}

#[derive(Debug, thiserror::Error)]
#[error("reconcile failed: {0}")]
struct ReconcileError(#[from] kube::Error);

struct Ctx {
    api: Api<Gadget>,
    cleanups: AtomicUsize,
}

async fn reconcile(
    g: Arc<Gadget>,
    ctx: Arc<Ctx>,
) -> Result<Action, kube::runtime::finalizer::Error<ReconcileError>> {
    let api = ctx.api.clone();
    finalizer(&api, "sim.example.com/cleanup", g, |ev| async {
        match ev {
            FinalizerEvent::Apply(g) => {
                let status = json!({"status": {"observed": g.spec.size}});
                ctx.api
                    .patch_status(
                        &g.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(status),
                    )
                    .await?;
                Ok(Action::await_change())
            }
            FinalizerEvent::Cleanup(_) => {
                ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ReconcileError>(Action::await_change())
            }
        }
    })
    .await
}

#[tokio::test]
async fn controller_with_finalizer_on_a_crd() {
    within(60, "controller", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let client = client(&sim, "main").await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &Gadget::crd())
            .await
            .unwrap();
        within(
            10,
            "crd established",
            await_condition(
                crds,
                "gadgets.sim.example.com",
                conditions::is_crd_established(),
            ),
        )
        .await
        .unwrap();
        let api: Api<Gadget> = Api::namespaced(client.clone(), "default");
        let ctx = Arc::new(Ctx {
            api: api.clone(),
            cleanups: AtomicUsize::new(0),
        });
        let controller = Controller::new(api.clone(), watcher::Config::default())
            .run(
                reconcile,
                |_, _, _| Action::requeue(Duration::from_millis(100)),
                ctx.clone(),
            )
            .for_each(|_| async {});
        let task = tokio::spawn(controller);
        let g = Gadget::new("g1", GadgetSpec { size: 3 });
        api.create(&PostParams::default(), &g).await.unwrap();
        let done = within(15, "status written", async {
            loop {
                let g = api.get("g1").await.unwrap();
                if g.status.as_ref().map(|s| s.observed) == Some(3) {
                    break g;
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
        .await;
        assert_eq!(done.finalizers(), ["sim.example.com/cleanup"]);
        assert_eq!(
            done.metadata.generation,
            Some(1),
            "status writes keep the generation"
        );
        let uid = done.uid().unwrap();
        api.delete("g1", &DeleteParams::default()).await.unwrap();
        within(
            15,
            "finalizer cleanup",
            await_condition(api.clone(), "g1", conditions::is_deleted(&uid)),
        )
        .await
        .unwrap();
        assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1);
        task.abort();
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn events_recorder_and_lease() {
    within(30, "events", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let client = client(&sim, "main").await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let obj = cms
            .create(&PostParams::default(), &cm("subject"))
            .await
            .unwrap();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "sim-test".into(),
                instance: Some("pod-1".into()),
            },
        );
        let reference: ObjectReference = obj.object_ref(&());
        let ev = KEvent {
            type_: EventType::Normal,
            reason: "Tested".into(),
            note: Some("hello".into()),
            action: "Test".into(),
            secondary: None,
        };
        recorder.publish(&ev, &reference).await.unwrap();
        recorder.publish(&ev, &reference).await.unwrap();
        let ev1: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(client.clone(), "default");
        let list = ev1.list(&ListParams::default()).await.unwrap();
        assert_eq!(list.items.len(), 1, "the second publish updates the series");
        assert_eq!(list.items[0].note.as_deref(), Some("hello"));
        assert_eq!(
            list.items[0]
                .regarding
                .as_ref()
                .and_then(|r| r.name.as_deref()),
            Some("subject")
        );
        let core: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(client.clone(), "default");
        let list = core.list(&ListParams::default()).await.unwrap();
        assert_eq!(
            list.items[0].message.as_deref(),
            Some("hello"),
            "the same event through core/v1"
        );
        assert_eq!(
            list.items[0].involved_object.name.as_deref(),
            Some("subject")
        );

        let leases: Api<Lease> = Api::namespaced(client, "kube-system");
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some("leader".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("a".into()),
                lease_duration_seconds: Some(15),
                ..Default::default()
            }),
        };
        let mut l = leases.create(&PostParams::default(), &lease).await.unwrap();
        let stale = l.clone();
        l.spec.as_mut().unwrap().holder_identity = Some("b".into());
        leases
            .replace("leader", &PostParams::default(), &l)
            .await
            .unwrap();
        let err = leases
            .replace("leader", &PostParams::default(), &stale)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 409),
            "second writer loses: {err:?}"
        );
        assert_eq!(
            leases
                .get("leader")
                .await
                .unwrap()
                .spec
                .unwrap()
                .holder_identity
                .as_deref(),
            Some("b")
        );
        sim.shutdown().await;
    })
    .await;
}
