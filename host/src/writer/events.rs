//! Kubernetes Events a plugin asks for (events.k8s.io/v1, reported as
//! controller `rekon.<plugin>`): best-effort, never a failure of the outcome.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};

use super::config::Error;
use super::requests::{Writer, describe, resource_id};
use crate::action::{EventAction, EventType, field_manager};
use crate::cluster::Cluster;

impl Writer {
    pub(super) async fn event(&self, plugin: &str, e: &EventAction) -> Result<(), Error> {
        let action = "record an event on";
        let r = &e.regarding;
        let cluster = self.cluster(plugin, action, &r.cluster, &r.name)?;
        let id = resource_id(&r.resource);
        let recorder = {
            let mut recorders = self.recorders.lock();
            let entry = recorders
                .entry((r.cluster.clone(), plugin.to_owned()))
                .or_insert_with(|| (Arc::clone(&cluster), recorder_for(&cluster, plugin)));
            // Re-engaged since (new client, maybe new credentials).
            if !Arc::ptr_eq(&entry.0, &cluster) {
                *entry = (Arc::clone(&cluster), recorder_for(&cluster, plugin));
            }
            entry.1.clone()
        };
        let reference = ObjectReference {
            api_version: Some(id.api_version()),
            kind: Some(id.kind.clone()),
            name: Some(r.name.clone()),
            namespace: r.namespace.clone(),
            ..ObjectReference::default()
        };
        let event = KubeEvent {
            type_: match e.event_type {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: e.reason.clone(),
            note: Some(e.note.clone()),
            action: e.action.clone(),
            secondary: None,
        };
        let object = describe(&id, r.namespace.as_deref(), &r.name);
        self.call(plugin, action, &cluster, &object, true, || {
            recorder.publish(&event, &reference)
        })
        .await
    }
}

fn recorder_for(cluster: &Cluster, plugin: &str) -> Recorder {
    Recorder::new(
        cluster.client(),
        Reporter {
            controller: field_manager(plugin),
            instance: std::env::var("POD_NAME").ok(),
        },
    )
}
