//! # `pod-token` — a correct controller that creates a Pod (no bug)
//!
//! **A correct plugin that must stay clean.** The Widget gets one Pod
//! (`<widget>-pod`, created if absent, with the owner labels), written
//! the way an outside author writes one: no `automountServiceAccountToken`,
//! so the API server's ServiceAccount admission adds the projected token
//! volume `kube-api-access-<random>` and its mounts. The explorer once
//! compared that random name between runs and reported every plan.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, owner_labels, status_of, status_patch};

/// The Pod's name: `<widget>-pod`.
#[must_use]
pub fn pod_name(req: &Request) -> String {
    format!("{}-pod", req.name)
}

/// One reconcile of a Widget.
///
/// # Errors
/// A failed cache read.
pub fn reconcile(ctx: &Context, req: &Request, widget: &Widget) -> Result<Outcome, Error> {
    let name = pod_name(req);
    let ns = crate::namespace(req)?;
    let mut outcome = Outcome::done();
    if ctx.get::<Pod>(&req.cluster, Some(ns), &name)?.is_none() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(ns.to_owned()),
                labels: Some(owner_labels().labels_for(req)),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".to_owned(),
                    image: Some("registry.k8s.io/pause:3.10".to_owned()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        outcome.push(Action::create(&req.cluster, &pod));
    }
    if status_of(widget).children != Some(1) {
        outcome.push(status_patch(req, json!({"children": 1})));
    }
    Ok(outcome)
}
