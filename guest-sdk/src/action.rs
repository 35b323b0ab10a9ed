//! What a reconcile returns: an [`Outcome`] holding [`Action`]s that the host
//! performs, in order, after checking them against the plugin's permissions.
//!
//! ```
//! use std::time::Duration;
//! use rekon_sdk::{Action, ObjectRef, Outcome};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use serde_json::json;
//!
//! # fn main() -> Result<(), rekon_sdk::Error> {
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("settings".into());
//! cm.metadata.namespace = Some("default".into());
//!
//! let target = ObjectRef::new::<ConfigMap>("main", Some("default"), "other");
//! let outcome = Outcome::done()
//!     .with(Action::apply("main", &cm).force())
//!     .with(Action::merge_patch(target.clone(), json!({"metadata": {"labels": {"a": "b"}}})).resource_version("42"))
//!     .with(Action::normal_event(target, "Labelled", "Patch", "added label a"))
//!     .requeue_after(Duration::from_secs(30));
//! assert_eq!(outcome.actions.len(), 3);
//! # Ok(()) }
//! ```

use std::time::Duration;

use serde::Serialize;

use crate::Request;
use crate::error::Error;
use crate::resource::{Kind, ResourceType, Scope};

/// Reference to an object an action targets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// Cluster the object lives in.
    pub cluster: String,
    /// The object's resource type.
    pub resource: ResourceType,
    /// Namespace, for namespaced resources.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
}

impl ObjectRef {
    /// The object `name` of kind `K` in `cluster`.
    #[must_use]
    pub fn new<K: Kind>(cluster: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            resource: K::resource_type(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// The object a request names, as kind `K` (usually the primary).
    #[must_use]
    pub fn for_request<K: Kind>(req: &Request) -> Self {
        Self::new::<K>(&req.cluster, req.namespace.as_deref(), &req.name)
    }

    /// The reference of an object read from `cluster` (name and namespace
    /// from its metadata).
    #[must_use]
    pub fn of<K: Kind>(cluster: &str, obj: &K) -> Self {
        let meta = obj.meta();
        Self {
            cluster: cluster.to_owned(),
            resource: K::resource_type(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// The reference of a JSON object (`apiVersion`, `kind`, `metadata.name`
    /// and `metadata.namespace`; plural left to the host, scope guessed from
    /// the presence of a namespace).
    pub fn of_json(cluster: &str, obj: &serde_json::Value) -> Result<Self, Error> {
        let (api_version, kind, namespace, name) = identity(obj)?;
        let scope = if namespace.is_some() {
            Scope::Namespaced
        } else {
            Scope::Cluster
        };
        Ok(Self {
            cluster: cluster.to_owned(),
            resource: ResourceType::new(&api_version, &kind, "", scope),
            namespace,
            name,
        })
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(
                f,
                "{} {}/{}/{}",
                self.resource.kind, self.cluster, ns, self.name
            ),
            None => write!(f, "{} {}/{}", self.resource.kind, self.cluster, self.name),
        }
    }
}

/// Server-side apply of a (partial) object, field manager `rekon.<plugin>`.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct ApplyAction {
    /// Cluster to apply in.
    pub cluster: String,
    /// The applied configuration: apiVersion, kind, metadata.name (and
    /// namespace) and the fields the plugin owns.
    pub object: serde_json::Value,
    /// Apply to the `status` subresource.
    pub status: bool,
    /// Take ownership of fields other managers own.
    pub force: bool,
}

impl ApplyAction {
    /// Apply to the `status` subresource instead of the main resource.
    pub fn status(mut self) -> Self {
        self.status = true;
        self
    }

    /// Take ownership of conflicting fields (`force=true`).
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }

    /// The target of the apply, from the object's identity.
    pub fn target(&self) -> Result<ObjectRef, Error> {
        ObjectRef::of_json(&self.cluster, &self.object)
    }

    /// Whether the applied object is of kind `K`.
    #[must_use]
    pub fn is<K: Kind>(&self) -> bool {
        is_kind::<K>(&self.object)
    }

    /// The applied object as a typed value (mostly for tests).
    pub fn decode<K: serde::de::DeserializeOwned>(&self) -> Result<K, Error> {
        Ok(serde_json::from_value(self.object.clone())?)
    }
}

/// The format of a patch body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
}

/// A patch of an existing object.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct PatchAction {
    /// The object to patch.
    pub target: ObjectRef,
    /// The patch format.
    pub patch_type: PatchType,
    /// The patch document.
    pub patch: serde_json::Value,
    /// Fail (and retry the reconcile) unless the object still has this resourceVersion.
    pub resource_version: Option<String>,
    /// Patch the `status` subresource.
    pub status: bool,
}

impl PatchAction {
    /// Optimistic concurrency: only if the object still has `rv`.
    pub fn resource_version(mut self, rv: impl Into<String>) -> Self {
        self.resource_version = Some(rv.into());
        self
    }

    /// Patch the `status` subresource instead of the main resource.
    pub fn status(mut self) -> Self {
        self.status = true;
        self
    }
}

/// How dependents are handled when an object is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Propagation {
    /// Delete dependents in the background.
    Background,
    /// Delete dependents before the owner.
    Foreground,
    /// Leave dependents, stripping their owner references.
    Orphan,
}

/// Deletion of an object. Deleting an absent object succeeds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct DeleteAction {
    /// The object to delete.
    pub target: ObjectRef,
    /// Delete only if the object still has this UID.
    pub uid: Option<String>,
    /// Propagation policy; `None` = the API default.
    pub propagation: Option<Propagation>,
}

impl DeleteAction {
    /// Delete only the object with this UID (not a newer one with the same name).
    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }

    /// Propagation policy for dependents.
    pub fn propagation(mut self, p: Propagation) -> Self {
        self.propagation = Some(p);
        self
    }
}

/// Create an object unless it exists (an existing object is left untouched).
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct CreateAction {
    /// Cluster to create in.
    pub cluster: String,
    /// The full object.
    pub object: serde_json::Value,
}

impl CreateAction {
    /// The target of the create, from the object's identity. For an object
    /// named by the server (`metadata.generateName` and no name) the name
    /// is the prefix and `*` (`web-*`): which name it gets is known only
    /// once the API server answered.
    pub fn target(&self) -> Result<ObjectRef, Error> {
        match self.generate_name() {
            Some(prefix) => {
                let mut named = self.object.clone();
                if let Some(meta) = named
                    .get_mut("metadata")
                    .and_then(serde_json::Value::as_object_mut)
                {
                    meta.insert("name".into(), format!("{prefix}*").into());
                }
                ObjectRef::of_json(&self.cluster, &named)
            }
            None => ObjectRef::of_json(&self.cluster, &self.object),
        }
    }

    /// The `metadata.generateName` prefix when the object has no name of
    /// its own: the API server names it (`<prefix>` and five random
    /// characters), and read-your-writes shows it under that name.
    #[must_use]
    pub fn generate_name(&self) -> Option<&str> {
        let meta = self.object.get("metadata")?;
        let named = meta
            .get("name")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if named {
            return None;
        }
        meta.get("generateName")
            .and_then(serde_json::Value::as_str)
            .filter(|p| !p.is_empty())
    }

    /// Whether the created object is of kind `K`.
    #[must_use]
    pub fn is<K: Kind>(&self) -> bool {
        is_kind::<K>(&self.object)
    }

    /// The created object as a typed value (mostly for tests).
    pub fn decode<K: serde::de::DeserializeOwned>(&self) -> Result<K, Error> {
        Ok(serde_json::from_value(self.object.clone())?)
    }
}

/// Type of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Progress.
    Normal,
    /// A problem.
    Warning,
}

/// A Kubernetes Event about an object, reported as controller `rekon.<plugin>`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct EventAction {
    /// The object the event is about.
    pub regarding: ObjectRef,
    /// Normal or Warning.
    pub event_type: EventType,
    /// Short CamelCase reason ("JobCreated").
    pub reason: String,
    /// What was done ("Create").
    pub action: String,
    /// Human-readable message.
    pub note: String,
}

/// One decision of a plugin, performed by the host.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Server-side apply.
    Apply(ApplyAction),
    /// Merge or JSON patch.
    Patch(PatchAction),
    /// Delete.
    Delete(DeleteAction),
    /// Create if absent.
    Create(CreateAction),
    /// Record a Kubernetes Event.
    Event(EventAction),
}

impl Action {
    /// Server-side apply of a typed object in `cluster`. `apiVersion` and
    /// `kind` are set from `K`; the object needs `metadata.name` (and
    /// `metadata.namespace` when namespaced). Build the object with only the
    /// fields the plugin owns. Infallible: Kubernetes objects always
    /// serialize.
    pub fn apply<K: Kind + Serialize>(cluster: &str, obj: &K) -> ApplyAction {
        Self::apply_json(cluster, typed_to_json(obj))
    }

    /// Server-side apply of a JSON object (must carry apiVersion and kind).
    pub fn apply_json(cluster: &str, object: serde_json::Value) -> ApplyAction {
        ApplyAction {
            cluster: cluster.to_owned(),
            object,
            status: false,
            force: false,
        }
    }

    /// RFC 7386 JSON merge patch of `target`.
    pub fn merge_patch(target: ObjectRef, patch: serde_json::Value) -> PatchAction {
        PatchAction {
            target,
            patch_type: PatchType::Merge,
            patch,
            resource_version: None,
            status: false,
        }
    }

    /// RFC 6902 JSON patch of `target`; `ops` is the array of operations.
    pub fn json_patch(target: ObjectRef, ops: serde_json::Value) -> PatchAction {
        PatchAction {
            target,
            patch_type: PatchType::Json,
            patch: ops,
            resource_version: None,
            status: false,
        }
    }

    /// Delete `target` (absent is success).
    pub fn delete(target: ObjectRef) -> DeleteAction {
        DeleteAction {
            target,
            uid: None,
            propagation: None,
        }
    }

    /// Create a typed object in `cluster` unless it exists.
    pub fn create<K: Kind + Serialize>(cluster: &str, obj: &K) -> CreateAction {
        Self::create_json(cluster, typed_to_json(obj))
    }

    /// Create a JSON object in `cluster` unless it exists.
    pub fn create_json(cluster: &str, object: serde_json::Value) -> CreateAction {
        CreateAction {
            cluster: cluster.to_owned(),
            object,
        }
    }

    /// A Kubernetes Event of type `event_type` about `regarding`.
    pub fn event(
        regarding: ObjectRef,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> EventAction {
        EventAction {
            regarding,
            event_type,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: note.to_owned(),
        }
    }

    /// A Normal event (progress) about `regarding`.
    pub fn normal_event(
        regarding: ObjectRef,
        reason: &str,
        action: &str,
        note: &str,
    ) -> EventAction {
        Self::event(regarding, EventType::Normal, reason, action, note)
    }

    /// A Warning event (a problem) about `regarding`.
    pub fn warning_event(
        regarding: ObjectRef,
        reason: &str,
        action: &str,
        note: &str,
    ) -> EventAction {
        Self::event(regarding, EventType::Warning, reason, action, note)
    }

    /// Whether this action writes an object (everything but an Event).
    #[must_use]
    pub fn is_write(&self) -> bool {
        !matches!(self, Action::Event(_))
    }

    /// The cluster the action happens in.
    #[must_use]
    pub fn cluster(&self) -> &str {
        match self {
            Action::Apply(a) => &a.cluster,
            Action::Create(c) => &c.cluster,
            Action::Patch(p) => &p.target.cluster,
            Action::Delete(d) => &d.target.cluster,
            Action::Event(e) => &e.regarding.cluster,
        }
    }

    /// The object the action concerns (for apply/create: from the object's
    /// apiVersion, kind and metadata).
    pub fn target(&self) -> Result<ObjectRef, Error> {
        match self {
            Action::Apply(a) => a.target(),
            Action::Create(c) => c.target(),
            Action::Patch(p) => Ok(p.target.clone()),
            Action::Delete(d) => Ok(d.target.clone()),
            Action::Event(e) => Ok(e.regarding.clone()),
        }
    }

    /// The RBAC verb the host needs for this action (`None` for events,
    /// which the host records under its own identity).
    #[must_use]
    pub fn verb(&self) -> Option<crate::Verb> {
        match self {
            Action::Apply(_) | Action::Patch(_) => Some(crate::Verb::Patch),
            Action::Create(_) => Some(crate::Verb::Create),
            Action::Delete(_) => Some(crate::Verb::Delete),
            Action::Event(_) => None,
        }
    }

    /// Whether the action targets the `status` subresource.
    #[must_use]
    pub fn is_status(&self) -> bool {
        match self {
            Action::Apply(a) => a.status,
            Action::Patch(p) => p.status,
            _ => false,
        }
    }
}

macro_rules! into_action {
    ($($ty:ident => $variant:ident),*) => {$(
        impl From<$ty> for Action {
            fn from(a: $ty) -> Self {
                Action::$variant(a)
            }
        }
    )*};
}
into_action!(ApplyAction => Apply, PatchAction => Patch, DeleteAction => Delete, CreateAction => Create, EventAction => Event);

/// The result of a successful reconcile: actions plus an optional requeue.
#[derive(Debug, Clone, PartialEq, Default)]
#[must_use]
pub struct Outcome {
    /// Actions to perform, in order. A failure stops the remaining ones and
    /// requeues the request with backoff.
    pub actions: Vec<Action>,
    /// Reconcile again after this long even if nothing changes.
    pub requeue_after: Option<Duration>,
    /// Cleanup is complete, the host may remove the finalizer once every
    /// action succeeded. Set by the SDK for an `Ok` answer to
    /// [`Event::Cleanup`](crate::Event::Cleanup) unless the plugin asked to
    /// [`keep_finalizer`](Outcome::keep_finalizer); never set for `Apply`.
    pub finalized: bool,
    /// Cleanup is not finished (something to wait for): keep the finalizer
    /// and reconcile again.
    pub keep_finalizer: bool,
}

impl Outcome {
    /// Nothing to do.
    pub fn done() -> Self {
        Self::default()
    }

    /// An outcome performing `actions` in order.
    pub fn with_actions<A: Into<Action>>(actions: impl IntoIterator<Item = A>) -> Self {
        Self {
            actions: actions.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Appends an action.
    pub fn with(mut self, action: impl Into<Action>) -> Self {
        self.actions.push(action.into());
        self
    }

    /// Appends an action in place.
    pub fn push(&mut self, action: impl Into<Action>) {
        self.actions.push(action.into());
    }

    /// Reconcile again after `after` even if nothing changes.
    pub fn requeue_after(mut self, after: Duration) -> Self {
        self.requeue_after = Some(after);
        self
    }

    /// In a cleanup: not finished yet (a cluster to wait for, children
    /// still going). The finalizer stays; combine with
    /// [`Outcome::requeue_after`] to come back. Without it, an `Ok` cleanup
    /// releases the finalizer.
    pub fn keep_finalizer(mut self) -> Self {
        self.keep_finalizer = true;
        self
    }

    /// The answer to a cleanup: finalized unless the plugin keeps the
    /// finalizer.
    pub(crate) fn finish_cleanup(mut self) -> Self {
        self.finalized = !self.keep_finalizer;
        self
    }

    /// The actions that write objects (all but Events).
    pub fn writes(&self) -> impl Iterator<Item = &Action> {
        self.actions.iter().filter(|a| a.is_write())
    }

    /// Whether any action writes an object.
    #[must_use]
    pub fn has_writes(&self) -> bool {
        self.writes().next().is_some()
    }

    /// The server-side applies, in order.
    pub fn applies(&self) -> impl Iterator<Item = &ApplyAction> {
        self.actions.iter().filter_map(|a| match a {
            Action::Apply(x) => Some(x),
            _ => None,
        })
    }

    /// The patches, in order.
    pub fn patches(&self) -> impl Iterator<Item = &PatchAction> {
        self.actions.iter().filter_map(|a| match a {
            Action::Patch(x) => Some(x),
            _ => None,
        })
    }

    /// The deletes, in order.
    pub fn deletes(&self) -> impl Iterator<Item = &DeleteAction> {
        self.actions.iter().filter_map(|a| match a {
            Action::Delete(x) => Some(x),
            _ => None,
        })
    }

    /// The create-if-absent actions, in order.
    pub fn creates(&self) -> impl Iterator<Item = &CreateAction> {
        self.actions.iter().filter_map(|a| match a {
            Action::Create(x) => Some(x),
            _ => None,
        })
    }

    /// The events, in order.
    pub fn events(&self) -> impl Iterator<Item = &EventAction> {
        self.actions.iter().filter_map(|a| match a {
            Action::Event(x) => Some(x),
            _ => None,
        })
    }

    /// The objects of kind `K` applied (main resource or status), decoded.
    pub fn applied<K: Kind + serde::de::DeserializeOwned>(&self) -> Result<Vec<K>, Error> {
        self.applies()
            .filter(|a| a.is::<K>())
            .map(ApplyAction::decode)
            .collect()
    }

    /// The apply of the `K` named `name` in `cluster`, if any.
    #[must_use]
    pub fn find_apply<K: Kind>(&self, cluster: &str, name: &str) -> Option<&ApplyAction> {
        self.applies().find(|a| {
            a.cluster == cluster
                && a.is::<K>()
                && a.object.pointer("/metadata/name").and_then(|n| n.as_str()) == Some(name)
        })
    }

    /// The create of the `K` named `name` in `cluster`, if any.
    #[must_use]
    pub fn find_create<K: Kind>(&self, cluster: &str, name: &str) -> Option<&CreateAction> {
        self.creates().find(|a| {
            a.cluster == cluster
                && a.is::<K>()
                && a.object.pointer("/metadata/name").and_then(|n| n.as_str()) == Some(name)
        })
    }

    /// The patch of the `K` named `name` in `cluster`, if any.
    #[must_use]
    pub fn find_patch<K: Kind>(&self, cluster: &str, name: &str) -> Option<&PatchAction> {
        let resource = K::resource_type();
        self.patches().find(|p| {
            p.target.cluster == cluster
                && p.target.resource.same_kind(&resource)
                && p.target.name == name
        })
    }

    /// The delete of the `K` named `name` in `cluster`, if any.
    #[must_use]
    pub fn find_delete<K: Kind>(&self, cluster: &str, name: &str) -> Option<&DeleteAction> {
        let resource = K::resource_type();
        self.deletes().find(|d| {
            d.target.cluster == cluster
                && d.target.resource.same_kind(&resource)
                && d.target.name == name
        })
    }

    /// The first event with this reason, if any.
    #[must_use]
    pub fn find_event(&self, reason: &str) -> Option<&EventAction> {
        self.events().find(|e| e.reason == reason)
    }
}

fn is_kind<K: Kind>(obj: &serde_json::Value) -> bool {
    let api_version = obj
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let kind = obj.get("kind").and_then(|v| v.as_str()).unwrap_or_default();
    let (group, _) = crate::resource::split_api_version(api_version);
    kind == K::kind(&()) && group == K::group(&())
}

/// Serializes a typed object and stamps `apiVersion` and `kind` from `K`.
///
/// # Panics
/// When `K`'s `Serialize` fails or yields something other than a JSON
/// object: never for k8s-openapi types or `#[derive(CustomResource)]` kinds,
/// whose serialization is infallible (a hand-written `Serialize` that
/// fails is a bug in the plugin, reported by the host as a panic).
pub(crate) fn typed_to_json<K: Kind + Serialize>(obj: &K) -> serde_json::Value {
    let kind = K::kind(&());
    let mut value = serde_json::to_value(obj)
        .unwrap_or_else(|e| panic!("a {kind} failed to serialize to JSON: {e}"));
    let Some(map) = value.as_object_mut() else {
        panic!("a {kind} serialized to something other than a JSON object");
    };
    map.insert("apiVersion".into(), K::api_version(&()).into_owned().into());
    map.insert("kind".into(), kind.into_owned().into());
    value
}

/// `(apiVersion, kind, namespace, name)` of a JSON object.
pub(crate) fn identity(
    obj: &serde_json::Value,
) -> Result<(String, String, Option<String>, String), Error> {
    let field = |ptr: &str| {
        obj.pointer(ptr)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    let api_version =
        field("/apiVersion").ok_or_else(|| Error::terminal("object has no apiVersion"))?;
    let kind = field("/kind").ok_or_else(|| Error::terminal("object has no kind"))?;
    let name = field("/metadata/name")
        .ok_or_else(|| Error::terminal(format!("{kind} has no metadata.name")))?;
    let namespace = field("/metadata/namespace").map(str::to_owned);
    Ok((
        api_version.to_owned(),
        kind.to_owned(),
        namespace,
        name.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    use serde_json::json;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some(ns.into());
        cm
    }

    #[test]
    fn apply_sets_api_version_and_kind() {
        let a = Action::apply("main", &cm("default", "x")).status().force();
        assert_eq!(a.object["apiVersion"], "v1");
        assert_eq!(a.object["kind"], "ConfigMap");
        assert!(a.status && a.force);
        let target = a.target().unwrap();
        assert_eq!(target.namespace.as_deref(), Some("default"));
        assert_eq!(target.name, "x");
        assert_eq!(target.to_string(), "ConfigMap main/default/x");
    }

    #[test]
    fn a_create_may_leave_its_name_to_the_server() {
        let mut named_by_server = cm("default", "");
        named_by_server.metadata.name = None;
        named_by_server.metadata.generate_name = Some("web-".into());
        let c = Action::create("main", &named_by_server);
        assert_eq!(c.generate_name(), Some("web-"));
        assert_eq!(c.target().unwrap().name, "web-*");
        // A name of its own wins, as on the API server.
        let mut both = cm("default", "x");
        both.metadata.generate_name = Some("web-".into());
        assert_eq!(Action::create("main", &both).generate_name(), None);
        assert!(
            Action::create("main", &ConfigMap::default())
                .target()
                .is_err()
        );
    }

    #[test]
    fn apply_without_name_has_no_target() {
        let a = Action::apply("main", &ConfigMap::default());
        assert!(a.target().is_err());
    }

    #[test]
    fn actions_know_their_verb_cluster_and_status() {
        let node = ObjectRef::new::<Node>("sub", None, "n1");
        let patch: Action = Action::merge_patch(node.clone(), json!({}))
            .resource_version("7")
            .status()
            .into();
        assert_eq!(patch.verb(), Some(crate::Verb::Patch));
        assert!(patch.is_status());
        assert_eq!(patch.cluster(), "sub");
        let del: Action = Action::delete(node.clone())
            .propagation(Propagation::Foreground)
            .uid("u1")
            .into();
        assert_eq!(del.verb(), Some(crate::Verb::Delete));
        let ev: Action = Action::warning_event(node, "Bad", "Check", "broken").into();
        assert_eq!(ev.verb(), None);
        assert!(!ev.is_write());
        let create: Action = Action::create("main", &cm("a", "b")).into();
        assert_eq!(create.verb(), Some(crate::Verb::Create));
        assert_eq!(create.target().unwrap().resource.kind, "ConfigMap");
    }

    #[test]
    fn outcome_builders() {
        let node = ObjectRef::new::<Node>("main", None, "n1");
        let o = Outcome::done();
        assert!(!o.has_writes() && !o.finalized && o.requeue_after.is_none());
        let o = Outcome::with_actions([Action::normal_event(node.clone(), "R", "A", "n")]);
        assert!(!o.has_writes());
        let o = o
            .with(Action::delete(node))
            .requeue_after(Duration::from_millis(1500))
            .keep_finalizer();
        assert!(o.has_writes());
        assert_eq!(o.writes().count(), 1);
        assert_eq!(o.requeue_after, Some(Duration::from_millis(1500)));
        assert!(o.keep_finalizer && !o.finalized);
        assert!(!o.finish_cleanup().finalized);
    }

    #[test]
    fn object_ref_of_typed_and_request() {
        let r = ObjectRef::of("main", &cm("ns", "n"));
        assert_eq!(
            r,
            ObjectRef::for_request::<ConfigMap>(&Request::namespaced("main", "ns", "n"))
        );
    }
}
