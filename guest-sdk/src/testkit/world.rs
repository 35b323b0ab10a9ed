//! [`World`]: clusters, objects and time a test sets up and inspects.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::action::{ObjectRef, typed_to_json};
use crate::context::{ClusterHealth, ClusterInfo, Context};
use crate::resource::Kind;

use super::backend::WorldBackend;
use super::error::LogLine;
use super::store::{Fault, Key, State, Stored, set_rv};

/// A fake set of clusters and objects that plays the host for native
/// plugin tests. See the [module docs](super).
pub struct World {
    pub(super) state: Rc<RefCell<State>>,
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("World")
            .field("clusters", &state.clusters)
            .field(
                "objects",
                &state
                    .objects
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
            )
            .field("time", &state.time)
            .finish()
    }
}

/// The default request time of a new world: 2025-01-01T00:00:00Z.
pub const DEFAULT_TIME_SECONDS: i64 = 1_735_689_600;

impl World {
    /// An empty world: no clusters, no objects, request time
    /// 2025-01-01T00:00:00Z.
    #[must_use]
    pub fn new() -> Self {
        Self {
            state: Rc::new(RefCell::new(State {
                clusters: Vec::new(),
                objects: BTreeMap::new(),
                time: Timestamp::new(DEFAULT_TIME_SECONDS, 0).unwrap_or(Timestamp::UNIX_EPOCH),
                next_rv: 1,
                next_uid: 1,
                logs: Vec::new(),
                events: Vec::new(),
                reads: None,
                faults: Vec::new(),
                settings: None,
                settings_schema: None,
            })),
        }
    }

    /// Gives the plugin `settings` (as an operator would in a Plugin
    /// object's `spec.settings`): every register, reconcile and map from
    /// now on sees them, and [`World::register_plugin`] refuses them as the
    /// host would if they are invalid.
    #[must_use]
    pub fn with_settings(mut self, settings: Value) -> Self {
        self.set_settings(Some(settings));
        self
    }

    /// Changes the settings (`None`: none given, the plugin's defaults),
    /// as an operator editing the Plugin object would.
    pub fn set_settings(&mut self, settings: Option<Value>) {
        self.state.borrow_mut().settings = settings.filter(|v| !v.is_null()).map(|v| v.to_string());
    }

    /// The JSON Schema the plugin declared for its settings at its last
    /// registration in this world.
    #[must_use]
    pub fn settings_schema(&self) -> Option<Value> {
        self.state
            .borrow()
            .settings_schema
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
    }

    /// Adds the primary cluster `name` (ready).
    #[must_use]
    pub fn primary(mut self, name: &str) -> Self {
        self.add_cluster(name, true);
        self
    }

    /// Adds a non-primary cluster `name` (ready).
    #[must_use]
    pub fn cluster(mut self, name: &str) -> Self {
        self.add_cluster(name, false);
        self
    }

    /// Engages a cluster (ready). Adding an existing name replaces it.
    pub fn add_cluster(&mut self, name: &str, primary: bool) {
        let mut state = self.state.borrow_mut();
        state.clusters.retain(|c| c.name != name);
        state.clusters.push(ClusterInfo {
            name: name.to_owned(),
            primary,
            health: ClusterHealth::Ready,
        });
    }

    /// Disengages a cluster: reads of it fail with `UnknownCluster`, writes
    /// to it fail. Its objects are kept (re-adding it brings them back).
    pub fn remove_cluster(&mut self, name: &str) {
        self.state.borrow_mut().clusters.retain(|c| c.name != name);
    }

    /// Sets a cluster's health as reported by `ctx.clusters()`.
    pub fn set_health(&mut self, name: &str, health: ClusterHealth) {
        for c in &mut self.state.borrow_mut().clusters {
            if c.name == name {
                c.health = health;
            }
        }
    }

    /// Makes every following write to `cluster` fail (applies, creates,
    /// patches, deletes and events), as when the host cannot reach it;
    /// reads keep working (the host's caches keep the last state). Lifted
    /// by [`World::heal`]. Health is independent: see [`World::set_health`].
    pub fn fail_writes(&mut self, cluster: &str) {
        let fault = Fault::Cluster(cluster.to_owned());
        let mut state = self.state.borrow_mut();
        if !state.faults.contains(&fault) {
            state.faults.push(fault);
        }
    }

    /// Makes every following write to the object `target` fail (events
    /// about it still go out). Lifted by [`World::heal`] of its cluster.
    pub fn fail_writes_to(&mut self, target: &ObjectRef) {
        let fault = Fault::Object(Key::of(target));
        let mut state = self.state.borrow_mut();
        if !state.faults.contains(&fault) {
            state.faults.push(fault);
        }
    }

    /// Lifts every injected write failure of `cluster` (whole cluster and
    /// single objects).
    pub fn heal(&mut self, cluster: &str) {
        self.state.borrow_mut().faults.retain(|f| match f {
            Fault::Cluster(c) => c != cluster,
            Fault::Object(k) => k.cluster != cluster,
        });
    }

    /// The engaged clusters.
    #[must_use]
    pub fn clusters(&self) -> Vec<ClusterInfo> {
        self.state.borrow().clusters.clone()
    }

    /// Sets the request time every following call sees.
    pub fn set_time(&mut self, time: Timestamp) {
        self.state.borrow_mut().time = time;
    }

    /// Moves the request time forward.
    pub fn advance(&mut self, by: Duration) {
        let mut state = self.state.borrow_mut();
        let signed = k8s_openapi::jiff::SignedDuration::try_from(by)
            .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
        state.time = state.time.checked_add(signed).unwrap_or(Timestamp::MAX);
    }

    /// The current request time.
    #[must_use]
    pub fn time(&self) -> Timestamp {
        self.state.borrow().time
    }

    /// Puts a typed object into `cluster` (replacing any object with the same
    /// key) and returns its reference. `apiVersion` and `kind` come from `K`;
    /// `uid`, `resourceVersion` and `creationTimestamp` are set if missing.
    ///
    /// # Panics
    ///
    /// If the object has no name: a test bug.
    pub fn insert<K: Kind + Serialize>(&mut self, cluster: &str, obj: &K) -> ObjectRef {
        let value = typed_to_json(obj);
        let mut target = self.insert_json(cluster, value);
        target.resource = K::resource_type();
        target
    }

    /// Puts a JSON object (with apiVersion, kind, metadata.name) into
    /// `cluster`; see [`World::insert`].
    ///
    /// # Panics
    ///
    /// If the object lacks apiVersion, kind or name: a test bug.
    pub fn insert_json(&mut self, cluster: &str, mut obj: Value) -> ObjectRef {
        let target = ObjectRef::of_json(cluster, &obj)
            .unwrap_or_else(|e| panic!("failed to insert an object: {e}"));
        let mut state = self.state.borrow_mut();
        state.stamp_new(&mut obj);
        let rv = state.bump();
        set_rv(&mut obj, rv);
        state.objects.insert(
            Key::of(&target),
            Stored {
                object: obj,
                applied: BTreeMap::new(),
            },
        );
        target
    }

    /// A typed object, if present (`None` also when it does not decode as `K`).
    #[must_use]
    pub fn get<K: Kind + DeserializeOwned>(
        &self,
        cluster: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<K> {
        let target = ObjectRef::new::<K>(cluster, namespace, name);
        self.get_ref(&target)
            .and_then(|v| serde_json::from_value(v).ok())
    }

    /// An object as JSON, if present.
    #[must_use]
    pub fn get_ref(&self, target: &ObjectRef) -> Option<Value> {
        self.state
            .borrow()
            .objects
            .get(&Key::of(target))
            .map(|s| s.object.clone())
    }

    /// Whether the object exists.
    #[must_use]
    pub fn contains(&self, target: &ObjectRef) -> bool {
        self.state.borrow().objects.contains_key(&Key::of(target))
    }

    /// All objects of kind `K` in `cluster` (optionally one namespace), in
    /// name order.
    #[must_use]
    pub fn list<K: Kind + DeserializeOwned>(
        &self,
        cluster: &str,
        namespace: Option<&str>,
    ) -> Vec<K> {
        let resource = K::resource_type();
        self.state
            .borrow()
            .matching(cluster, &resource, namespace)
            .filter_map(|v| serde_json::from_value(v.clone()).ok())
            .collect()
    }

    /// Deletes an object the way the API server does (finalizers hold it
    /// with a `deletionTimestamp`; dependents are garbage-collected). Returns
    /// whether it existed.
    pub fn delete(&mut self, target: &ObjectRef) -> bool {
        let existed = self.contains(target);
        self.state.borrow_mut().delete(&Key::of(target), None);
        existed
    }

    /// Removes an object immediately, ignoring finalizers and dependents.
    pub fn remove(&mut self, target: &ObjectRef) -> Option<Value> {
        self.state
            .borrow_mut()
            .objects
            .remove(&Key::of(target))
            .map(|s| s.object)
    }

    /// Changes an object in place (as another actor would) and bumps its
    /// resourceVersion. Returns false if it does not exist.
    pub fn modify(&mut self, target: &ObjectRef, f: impl FnOnce(&mut Value)) -> bool {
        let mut state = self.state.borrow_mut();
        let rv = state.next_rv;
        match state.objects.get_mut(&Key::of(target)) {
            Some(stored) => {
                f(&mut stored.object);
                set_rv(&mut stored.object, rv);
                state.next_rv += 1;
                true
            }
            None => false,
        }
    }

    /// Changes a typed object in place (as another actor would: a Job
    /// completing, a Node turning NotReady) and bumps its resourceVersion.
    /// Returns false if it does not exist.
    ///
    /// # Panics
    ///
    /// If the stored object does not decode as `K` or `K` does not
    /// serialize: a test bug.
    pub fn update<K: Kind + Serialize + DeserializeOwned>(
        &mut self,
        cluster: &str,
        namespace: Option<&str>,
        name: &str,
        f: impl FnOnce(&mut K),
    ) -> bool {
        let target = ObjectRef::new::<K>(cluster, namespace, name);
        self.modify(&target, |value| {
            let mut typed: K = serde_json::from_value(value.clone())
                .unwrap_or_else(|e| panic!("failed to decode {target} for update: {e}"));
            f(&mut typed);
            *value = typed_to_json(&typed);
        })
    }

    /// Log lines plugins wrote so far.
    #[must_use]
    pub fn logs(&self) -> Vec<LogLine> {
        self.state.borrow().logs.clone()
    }

    /// Events recorded by applied outcomes so far.
    #[must_use]
    pub fn events(&self) -> Vec<crate::action::EventAction> {
        self.state.borrow().events.clone()
    }

    /// A [`Context`] reading this world with no read restrictions, for
    /// calling a plugin's helper functions directly.
    #[must_use]
    pub fn context(&self) -> Context {
        Context::new(Rc::new(WorldBackend(Rc::clone(&self.state))))
    }
}
