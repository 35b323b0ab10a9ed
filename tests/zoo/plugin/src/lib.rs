//! # The bug zoo — known controller bugs, each with its fixed twin
//!
//! One plugin, many bugs: the settings (`{"bug": "<name>", "fixed": false}`)
//! pick which seeded bug the plugin reconciles with, and whether the buggy
//! or the fixed variant runs. Every bug is a class of controller bug that
//! does not show in a fault-free run — both variants converge to the same
//! state when nothing goes wrong — and shows under one fault that
//! `rekon plugin explore` injects (a crash between two writes, a stale
//! read, an unobserved intermediate state, a cluster out of reach, a list
//! in another order). `tests/zoo/<bug>/` holds the scenario that reveals it
//! and the settings of both variants; `docs/plugins/exploring.md` has the
//! table.
//!
//! # Layout
//!
//! | item | what |
//! |---|---|
//! | [`Widget`] | the primary kind (`widgets.zoo.rekon.dev`, namespaced, status subresource) |
//! | [`ZooSettings`], [`Bug`] | which bug, which variant |
//! | [`Zoo`] | the [`Plugin`]: registration shaped by the bug, reconcile dispatched to its module |
//! | one module per bug | the bug class, how it fails in production, what finds it, the fix |
//!
//! Children are ConfigMaps in the Widget's namespace carrying the owner
//! labels [`owner_labels`] (so their events wake the Widget).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use rekon_sdk::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod already_exists_forever;
pub mod cleanup_lag;
pub mod delete_after_recreate;
pub mod finalizer_by_index;
pub mod finalizer_child;
pub mod finalizer_unreachable;
pub mod full_object_write;
pub mod generate_name_lag;
pub mod intermediate_status;
pub mod list_order;
pub mod orphaned_child;
pub mod own_write_denied;
pub mod pod_token;
pub mod refused_write;
pub mod resize_restart;
pub mod rollback_skipped;
pub mod status_every_reconcile;
pub mod status_not_applied;
pub mod transient_cleanup;

/// The plugin's name (field manager `rekon.zoo`).
pub const PLUGIN_NAME: &str = "zoo";
/// The finalizer of the bugs that register one (`finalizer-unreachable`).
pub const FINALIZER: &str = "zoo.rekon.dev/cleanup";
/// Owner label keys on every child.
pub const OWNER: (&str, &str, &str) = (
    "zoo.rekon.dev/owner-cluster",
    "zoo.rekon.dev/owner-namespace",
    "zoo.rekon.dev/owner-name",
);

/// The owner label keys every child carries.
#[must_use]
pub fn owner_labels() -> OwnerLabels {
    OwnerLabels::new(OWNER.0, OWNER.1, OWNER.2)
}

/// The primary of every zoo bug. Each bug reads the fields it needs.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "zoo.rekon.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct WidgetSpec {
    /// `transient-cleanup`: how many numbered children;
    /// `rollback-skipped`, `status-not-applied`: the child's `data.replicas`
    /// (1 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// `finalizer-by-index`: each hold keeps a finalizer `zoo.rekon.dev/hold-<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holds: Option<Vec<String>>,
    /// `resize-restart`: the size of the workload and its volume (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
}

/// What the bugs write about a Widget.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    /// `intermediate-status`: `Creating` or `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `already-exists-forever`, `cleanup-lag`: whether the child was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// `generate-name-lag`: how many children it sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<u32>,
    /// `delete-after-recreate`: the live (not expired) children, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Vec<String>>,
    /// `list-order`: the member chosen as leader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// `full-object-write`: how many clusters are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_clusters: Option<u32>,
    /// `status-every-reconcile`: the generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `status-every-reconcile` (buggy): how many reconciles ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciles: Option<u64>,
    /// `status-not-applied`: the replicas the Widget reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
}

/// The seeded bugs (the names of their folders under `tests/zoo/`).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Bug {
    /// [`intermediate_status`]
    IntermediateStatus,
    /// [`finalizer_unreachable`]
    FinalizerUnreachable,
    /// [`generate_name_lag`]
    GenerateNameLag,
    /// [`already_exists_forever`]
    AlreadyExistsForever,
    /// [`delete_after_recreate`]
    DeleteAfterRecreate,
    /// [`transient_cleanup`]
    TransientCleanup,
    /// [`status_every_reconcile`]
    StatusEveryReconcile,
    /// [`finalizer_by_index`]
    FinalizerByIndex,
    /// [`full_object_write`]
    FullObjectWrite,
    /// [`list_order`]
    ListOrder,
    /// [`orphaned_child`]
    OrphanedChild,
    /// [`refused_write`]
    RefusedWrite,
    /// [`resize_restart`]
    ResizeRestart,
    /// [`cleanup_lag`]
    CleanupLag,
    /// [`rollback_skipped`]
    RollbackSkipped,
    /// [`status_not_applied`]
    StatusNotApplied,
    /// [`own_write_denied`]
    OwnWriteDenied,
    /// [`finalizer_child`]: a correct plugin (no bug; `fixed` changes
    /// nothing).
    FinalizerChild,
    /// [`pod_token`]: a correct plugin (no bug; `fixed` changes nothing).
    PodToken,
}

impl Bug {
    /// Every bug, in the order of `docs/plugins/exploring.md`.
    pub const ALL: [Bug; 17] = [
        Bug::IntermediateStatus,
        Bug::FinalizerUnreachable,
        Bug::GenerateNameLag,
        Bug::AlreadyExistsForever,
        Bug::DeleteAfterRecreate,
        Bug::TransientCleanup,
        Bug::StatusEveryReconcile,
        Bug::FinalizerByIndex,
        Bug::FullObjectWrite,
        Bug::ListOrder,
        Bug::OrphanedChild,
        Bug::RefusedWrite,
        Bug::ResizeRestart,
        Bug::CleanupLag,
        Bug::RollbackSkipped,
        Bug::StatusNotApplied,
        Bug::OwnWriteDenied,
    ];

    /// The correct plugins that must stay clean (`tests/zoo/correct/`).
    pub const CORRECT: [Bug; 2] = [Bug::FinalizerChild, Bug::PodToken];

    /// The bug's name (its folder under `tests/zoo/`).
    #[must_use]
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// Which bug the plugin runs, buggy or fixed.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ZooSettings {
    /// The bug (required).
    #[serde(default)]
    pub bug: Option<Bug>,
    /// Run the fixed twin instead of the buggy variant.
    #[serde(default)]
    pub fixed: bool,
}

impl Settings for ZooSettings {
    fn validate(&self) -> Result<(), String> {
        if self.bug.is_none() {
            let names: Vec<String> = Bug::ALL.iter().map(|b| b.name()).collect();
            return Err(format!("bug is required, one of: {}", names.join(", ")));
        }
        Ok(())
    }
}

impl ZooSettings {
    /// The settings of `bug`, buggy (`fixed == false`) or fixed.
    #[must_use]
    pub fn of(bug: Bug, fixed: bool) -> Self {
        Self {
            bug: Some(bug),
            fixed,
        }
    }

    fn bug(&self) -> Result<Bug, Error> {
        self.bug
            .ok_or_else(|| Error::terminal("the zoo's settings name no bug"))
    }
}

/// The plugin.
pub struct Zoo;

impl Plugin for Zoo {
    type Primary = Widget;

    fn register() -> Result<Registration, Error> {
        let settings = rekon_sdk::settings::<ZooSettings>()?;
        let reg = Registration::new::<Widget>(PLUGIN_NAME, env!("CARGO_PKG_VERSION"))
            .settings::<ZooSettings>()
            .permission::<Widget>(
                &[Verb::Get, Verb::List, Verb::Watch, Verb::Patch],
                ClusterSet::Primary,
            )
            .status_permission::<Widget>(&[Verb::Get, Verb::Patch], ClusterSet::Primary)
            .crd(Widget::crd());
        let bug = settings.bug()?;
        Ok(match bug {
            // A host-managed finalizer, a child in the primary cluster.
            Bug::FinalizerChild => reg
                .clusters(ClusterSet::Primary)
                .watch::<ConfigMap>(ClusterSet::Primary, Mapping::OwnerLabels(owner_labels()))
                .finalizer(FINALIZER)
                .permission::<ConfigMap>(CHILD_VERBS, ClusterSet::Primary),
            Bug::PodToken => reg
                .clusters(ClusterSet::Primary)
                .watch::<Pod>(ClusterSet::Primary, Mapping::OwnerLabels(owner_labels()))
                .permission::<Pod>(CHILD_VERBS, ClusterSet::Primary),
            // Children in every cluster, a finalizer to clean them up.
            Bug::FinalizerUnreachable | Bug::CleanupLag => reg
                .clusters(ClusterSet::All)
                .watch::<ConfigMap>(ClusterSet::All, Mapping::OwnerLabels(owner_labels()))
                .finalizer(FINALIZER)
                .permission::<ConfigMap>(CHILD_VERBS, ClusterSet::All),
            _ => {
                // full-object-write is told of every cluster's health changes.
                let covered = if bug == Bug::FullObjectWrite {
                    ClusterSet::All
                } else {
                    ClusterSet::Primary
                };
                reg.clusters(covered)
                    .watch::<ConfigMap>(ClusterSet::Primary, Mapping::OwnerLabels(owner_labels()))
                    .permission::<ConfigMap>(CHILD_VERBS, ClusterSet::Primary)
            }
        })
    }

    fn reconcile(ctx: &Context, req: &Request, event: Event<Widget>) -> Result<Outcome, Error> {
        let settings: ZooSettings = ctx.settings()?;
        let fixed = settings.fixed;
        match settings.bug()? {
            Bug::FinalizerUnreachable => finalizer_unreachable::reconcile(ctx, req, &event, fixed),
            Bug::FinalizerChild => finalizer_child::reconcile(ctx, req, event.primary()),
            Bug::CleanupLag => cleanup_lag::reconcile(ctx, req, &event, fixed),
            // Its own hold finalizers are released while the Widget is
            // deleted, whatever the phase.
            Bug::FinalizerByIndex => {
                finalizer_by_index::reconcile(ctx, req, event.primary(), fixed)
            }
            // The other bugs register no finalizer: a Widget is never
            // reconciled in cleanup.
            _ if event.is_cleanup() => Ok(Outcome::done()),
            Bug::IntermediateStatus => {
                intermediate_status::reconcile(ctx, req, event.primary(), fixed)
            }
            Bug::GenerateNameLag => generate_name_lag::reconcile(ctx, req, event.primary(), fixed),
            Bug::AlreadyExistsForever => {
                already_exists_forever::reconcile(ctx, req, event.primary(), fixed)
            }
            Bug::DeleteAfterRecreate => {
                delete_after_recreate::reconcile(ctx, req, event.primary(), fixed)
            }
            Bug::TransientCleanup => transient_cleanup::reconcile(ctx, req, event.primary(), fixed),
            Bug::StatusEveryReconcile => {
                status_every_reconcile::reconcile(ctx, req, event.primary(), fixed)
            }
            Bug::FullObjectWrite => full_object_write::reconcile(ctx, req, event.primary(), fixed),
            Bug::ListOrder => list_order::reconcile(ctx, req, event.primary(), fixed),
            Bug::OrphanedChild => orphaned_child::reconcile(ctx, req, event.primary(), fixed),
            Bug::PodToken => pod_token::reconcile(ctx, req, event.primary()),
            Bug::RefusedWrite => refused_write::reconcile(ctx, req, event.primary(), fixed),
            Bug::ResizeRestart => resize_restart::reconcile(ctx, req, event.primary(), fixed),
            Bug::RollbackSkipped => rollback_skipped::reconcile(ctx, req, event.primary(), fixed),
            Bug::StatusNotApplied => {
                status_not_applied::reconcile(ctx, req, event.primary(), fixed)
            }
            Bug::OwnWriteDenied => own_write_denied::reconcile(ctx, req, event.primary(), fixed),
        }
    }
}

/// Only `own-write-denied` admits (its rules are asked at load, with the
/// settings): every other bug and correct plugin declares no webhook.
impl Admission for Zoo {
    fn rules() -> Vec<AdmissionRule> {
        match rekon_sdk::settings::<ZooSettings>().map(|s| s.bug) {
            Ok(Some(Bug::OwnWriteDenied)) => own_write_denied::rules(),
            _ => Vec::new(),
        }
    }

    fn validate(_: &Context, req: &AdmissionRequest) -> Result<Verdict, Error> {
        own_write_denied::validate(req)
    }
}

rekon_sdk::export_plugin!(Zoo, admission);

/// What every bug may do to its ConfigMaps.
const CHILD_VERBS: &[Verb] = &[
    Verb::Get,
    Verb::List,
    Verb::Watch,
    Verb::Create,
    Verb::Patch,
    Verb::Delete,
];

/// The namespace of a Widget's request (Widgets are namespaced).
pub(crate) fn namespace(req: &Request) -> Result<&str, Error> {
    req.namespace
        .as_deref()
        .ok_or_else(|| Error::terminal(format!("widget {req} has no namespace")))
}

/// A child ConfigMap of `req` named `name`, with the owner labels and `data`.
#[must_use]
pub fn child(req: &Request, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: req.namespace.clone(),
            labels: Some(owner_labels().labels_for(req)),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..ConfigMap::default()
    }
}

/// The name of the one child of the bugs that have one: `<widget>-child`.
#[must_use]
pub fn child_name(req: &Request) -> String {
    format!("{}-child", req.name)
}

/// Whether the cache shows the ConfigMap `name` in the Widget's namespace
/// of its own cluster.
pub(crate) fn exists(ctx: &Context, req: &Request, name: &str) -> Result<bool, Error> {
    Ok(ctx
        .get::<ConfigMap>(&req.cluster, Some(namespace(req)?), name)?
        .is_some())
}

/// The children of `req` the cache shows in `cluster` (by owner labels),
/// in the order the list returned them.
pub(crate) fn children(
    ctx: &Context,
    req: &Request,
    cluster: &str,
) -> Result<Vec<ConfigMap>, Error> {
    let selector = owner_labels().selector_for(req);
    Ok(ctx.list::<ConfigMap>(cluster, Some(namespace(req)?), Some(&selector))?)
}

/// A merge patch of the Widget's status.
pub(crate) fn status_patch(req: &Request, status: Value) -> Action {
    Action::merge_patch(
        ObjectRef::for_request::<Widget>(req),
        serde_json::json!({ "status": status }),
    )
    .status()
    .into()
}

/// The Widget's status, or the empty one.
pub(crate) fn status_of(widget: &Widget) -> WidgetStatus {
    widget.status.clone().unwrap_or_default()
}
