//! What a plugin decides: actions the host performs, and the outcome of a
//! reconcile. The fields' meaning is the contract's: `wit/types.wit`.

use serde::{Deserialize, Serialize};

use super::resource::Resource;

/// An object in a named cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    /// Its cluster.
    pub cluster: String,
    /// Its resource type.
    pub resource: Resource,
    /// Its namespace (`None` for cluster-scoped objects).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// Server-side apply of an object (or its status).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ApplyAction {
    /// Cluster to apply in.
    pub cluster: String,
    /// The applied configuration as JSON.
    pub object: String,
    /// Apply to the `status` subresource.
    pub status: bool,
    /// Take ownership of fields other managers own.
    pub force: bool,
}

/// The kind of a patch body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
}

/// A patch of an existing object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PatchAction {
    /// The object to patch.
    pub target: ObjectRef,
    /// The patch format.
    pub patch_type: PatchType,
    /// The patch document, JSON.
    pub patch: String,
    /// Fail unless the object still has this resourceVersion.
    pub resource_version: Option<String>,
    /// Patch the `status` subresource.
    pub status: bool,
}

/// How dependents are handled when an object is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Propagation {
    /// In the background (the API default).
    Background,
    /// Before the owner.
    Foreground,
    /// Left, their owner references stripped.
    Orphan,
}

/// Deletion of an object (an absent object is success).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeleteAction {
    /// The object to delete.
    pub target: ObjectRef,
    /// Delete only if the object still has this UID.
    pub uid: Option<String>,
    /// Propagation policy; `None` = the API default.
    pub propagation: Option<Propagation>,
}

/// Create an object unless it exists.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CreateAction {
    /// Cluster to create in.
    pub cluster: String,
    /// The full object as JSON.
    pub object: String,
}

/// Type of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// Progress.
    Normal,
    /// A problem.
    Warning,
}

/// A Kubernetes Event about an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventAction {
    /// The object the event is about.
    pub regarding: ObjectRef,
    /// Normal or Warning.
    pub event_type: EventType,
    /// Short CamelCase reason.
    pub reason: String,
    /// What was done.
    pub action: String,
    /// Human-readable message.
    pub note: String,
}

/// One decision of a plugin, performed by the host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// Server-side apply.
    Apply(ApplyAction),
    /// Merge or JSON patch.
    Patch(PatchAction),
    /// Delete.
    Delete(DeleteAction),
    /// Create if absent.
    Create(CreateAction),
    /// Record an Event.
    Event(EventAction),
}

/// What a reconcile decided.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Outcome {
    /// Actions to perform, in order.
    pub actions: Vec<Action>,
    /// Reconcile again after this many milliseconds.
    pub requeue_after_ms: Option<u64>,
    /// Cleanup is complete (phases `deleting` and `leaving`).
    pub finalized: bool,
}

/// The cluster an action writes to.
#[must_use]
pub fn action_cluster(action: &Action) -> &str {
    match action {
        Action::Apply(a) => &a.cluster,
        Action::Create(c) => &c.cluster,
        Action::Patch(p) => &p.target.cluster,
        Action::Delete(d) => &d.target.cluster,
        Action::Event(e) => &e.regarding.cluster,
    }
}

/// A short phrase for an action's kind, for errors and logs (`apply status
/// of`, `record an event on`).
#[must_use]
pub fn action_kind(action: &Action) -> &'static str {
    match action {
        Action::Apply(a) if a.status => "apply status of",
        Action::Apply(_) => "apply",
        Action::Patch(p) if p.status => "patch status of",
        Action::Patch(_) => "patch",
        Action::Delete(_) => "delete",
        Action::Create(_) => "create",
        Action::Event(_) => "record an event on",
    }
}

/// `apply`, `patch`, `delete`, `create` or `event`: an action's label in
/// metrics and refusals.
#[must_use]
pub fn action_label(action: &Action) -> &'static str {
    match action {
        Action::Apply(_) => "apply",
        Action::Patch(_) => "patch",
        Action::Delete(_) => "delete",
        Action::Create(_) => "create",
        Action::Event(_) => "event",
    }
}

/// The field manager (and Event reporter) a plugin writes as: `rekon.<plugin>`.
#[must_use]
pub fn field_manager(plugin: &str) -> String {
    format!("rekon.{plugin}")
}
