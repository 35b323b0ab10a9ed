//! # cm-sync — copy labelled ConfigMaps to every other cluster
//!
//! A plugin nobody on the host side had in mind when the controller core
//! was written: its primary kind (ConfigMap) is also what it writes, and it
//! watches that kind in every cluster. It exercises what the seeds do not:
//!
//! - **Primary scope.** Primaries are the ConfigMaps of the primary cluster
//!   labelled [`SOURCE_LABEL`]`=true` (a primary selector). Every other
//!   ConfigMap — unrelated ones in the primary cluster, the copies in the
//!   other clusters — is watched, never a primary: it never gets the
//!   finalizer and is never reconciled as a primary.
//! - **Copies.** Each primary is server-side applied, with its `data`, as a
//!   ConfigMap of the same namespace and name in every other engaged cluster
//!   (namespace created if absent), carrying owner labels ([`OWNER`]).
//! - **Custom mapping.** An event on a copy maps back to its source through
//!   the plugin's own `map` (so the host's off-pump `map` path is used).
//! - **Leaving and deletion.** When a source loses its label (phase
//!   `leaving`) or is deleted (phase `deleting`), its copies are deleted
//!   everywhere and the outcome is finalized; the host then drops the
//!   finalizer.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rekon_sdk::ResourceType;
use rekon_sdk::kube::core::DynamicObject;
use rekon_sdk::prelude::*;

/// The label that makes a ConfigMap of the primary cluster a source.
pub const SOURCE_LABEL: &str = "sync.rekon.dev/source";
/// The plugin's finalizer.
pub const FINALIZER: &str = "sync.rekon.dev/cleanup";
/// Owner labels on the copies.
pub const OWNER: (&str, &str, &str) = (
    "sync.rekon.dev/owner-cluster",
    "sync.rekon.dev/owner-namespace",
    "sync.rekon.dev/owner-name",
);

fn owner() -> OwnerLabels {
    OwnerLabels::new(OWNER.0, OWNER.1, OWNER.2)
}

/// The plugin.
pub struct CmSync;

impl Plugin for CmSync {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("cm-sync", "0.1.0")
            .primary_selector(&format!("{SOURCE_LABEL}=true"))
            .clusters(ClusterSet::All)
            .watch::<ConfigMap>(ClusterSet::All, Mapping::Custom)
            .watch::<Namespace>(ClusterSet::All, Mapping::Custom)
            .finalizer(FINALIZER)
            .permission::<ConfigMap>(
                &[
                    Verb::Get,
                    Verb::List,
                    Verb::Watch,
                    Verb::Patch,
                    Verb::Delete,
                ],
                ClusterSet::All,
            )
            .permission::<Namespace>(
                &[Verb::Get, Verb::List, Verb::Watch, Verb::Create],
                ClusterSet::All,
            ))
    }

    fn reconcile(ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
        let others: Vec<String> = ctx
            .clusters()
            .into_iter()
            .filter(|c| c.name != req.cluster)
            .map(|c| c.name)
            .collect();
        let namespace = req.namespace.clone().unwrap_or_default();
        if event.is_cleanup() {
            let mut outcome = Outcome::done();
            for cluster in &others {
                outcome.push(Action::delete(ObjectRef::new::<ConfigMap>(
                    cluster,
                    Some(&namespace),
                    &req.name,
                )));
            }
            return Ok(outcome);
        }
        let source = event.into_primary();
        let mut outcome = Outcome::done();
        for cluster in &others {
            if ctx.get::<Namespace>(cluster, None, &namespace)?.is_none() {
                outcome.push(Action::create(
                    cluster,
                    &Namespace {
                        metadata: ObjectMeta {
                            name: Some(namespace.clone()),
                            ..ObjectMeta::default()
                        },
                        ..Namespace::default()
                    },
                ));
            }
            let copy = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(req.name.clone()),
                    namespace: Some(namespace.clone()),
                    labels: Some(owner().labels_for(req)),
                    ..ObjectMeta::default()
                },
                data: source.data.clone(),
                ..ConfigMap::default()
            };
            let current = ctx.get::<ConfigMap>(cluster, Some(&namespace), &req.name)?;
            let up_to_date = current.is_some_and(|c| {
                c.data == copy.data
                    && owner()
                        .owner_of(&c.metadata.labels.unwrap_or_default())
                        .as_ref()
                        == Some(req)
            });
            if !up_to_date {
                outcome.push(Action::apply(cluster, &copy));
            }
        }
        Ok(outcome)
    }

    fn map(
        ctx: &Context,
        cluster: &str,
        resource: &ResourceType,
        object: &DynamicObject,
    ) -> Vec<Request> {
        let labels = object.metadata.labels.clone().unwrap_or_default();
        if resource.kind == "ConfigMap" {
            return owner().owner_of(&labels).into_iter().collect();
        }
        // A namespace appeared or went away in another cluster: the sources
        // of that namespace need their copies there.
        let Some(primary) = ctx.primary_cluster() else {
            return Vec::new();
        };
        if cluster == primary {
            return Vec::new();
        }
        let ns = object.metadata.name.clone().unwrap_or_default();
        ctx.list::<ConfigMap>(&primary, Some(&ns), Some(&format!("{SOURCE_LABEL}=true")))
            .unwrap_or_default()
            .iter()
            .map(|cm| Request::for_object(&primary, cm))
            .collect()
    }
}

rekon_sdk::export_plugin!(CmSync);
