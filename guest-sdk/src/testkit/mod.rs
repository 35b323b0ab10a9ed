//! Native test kit: run a plugin's `register`, `reconcile` and `map` without
//! wasm and without a cluster, against a fake [`World`] of clusters and
//! objects, and assert on the returned actions.
//!
//! The world plays the host's part: it serves reads from its objects (only
//! those the registration watches, like the host), adds the plugin's
//! finalizer to primaries before reconciling them, checks every write
//! against the declared permissions, and applies outcomes the way the API
//! server would — so a test can loop reconcile → apply until nothing changes
//! and then check the end state.
//!
//! ```
//! use rekon_sdk::prelude::*;
//! use rekon_sdk::testkit::World;
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! /// Copies `data.source` of a ConfigMap into `data.copy`.
//! struct Copier;
//! impl Plugin for Copier {
//!     type Primary = ConfigMap;
//!     fn register() -> Result<Registration, Error> {
//!         Ok(Registration::new::<ConfigMap>("copier", "0.1.0")
//!             .permission::<ConfigMap>(&[Verb::Get, Verb::Patch], ClusterSet::Primary))
//!     }
//!     fn reconcile(ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
//!         let Event::Apply(cm) = event else { return Ok(Outcome::done()) };
//!         let source = cm.data.unwrap_or_default().get("source").cloned().unwrap_or_default();
//!         let mut applied = ConfigMap::default();
//!         applied.metadata.name = Some(req.name.clone());
//!         applied.metadata.namespace = req.namespace.clone();
//!         applied.data = Some([("copy".to_string(), source)].into());
//!         Ok(Outcome::done().with(Action::apply(&req.cluster, &applied)))
//!     }
//! }
//!
//! let mut world = World::new().primary("main");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("c".into());
//! cm.metadata.namespace = Some("default".into());
//! cm.data = Some([("source".to_string(), "hello".to_string())].into());
//! world.insert("main", &cm);
//!
//! let req = Request::namespaced("main", "default", "c");
//! let outcome = world.reconcile::<Copier>(&req).unwrap();
//! let applied: ConfigMap = outcome.find_apply::<ConfigMap>("main", "c").unwrap().decode().unwrap();
//! assert_eq!(applied.data.unwrap()["copy"], "hello");
//!
//! world.converge::<Copier>(&req, 5).unwrap();
//! world.assert_stable::<Copier>(&req); // a second pass changes nothing
//! let cm: ConfigMap = world.get("main", Some("default"), "c").unwrap();
//! assert_eq!(cm.data.unwrap()["copy"], "hello");
//! ```
//!
//! # Fidelity
//!
//! - Server-side apply is modelled per field manager: applied fields are
//!   merged into the object (maps merge, lists and scalars replace), and
//!   fields the plugin applied before and omits now are removed. Fields set
//!   by [`World::insert`] belong to nobody; co-ownership is not modelled.
//! - Merge patches follow RFC 7386 and JSON patches RFC 6902 (json-patch).
//!   A `status` patch or apply changes only `status`.
//! - Deleting an object with finalizers sets `deletionTimestamp`; removing
//!   the last finalizer of a deleting object removes it. Deletion cascades to
//!   dependents (owner references, same cluster) unless `Orphan`.
//! - `resourceVersion` increases on every change; `uid` and
//!   `creationTimestamp` are set on creation. Preconditions are checked.
//! - Label selectors: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`,
//!   `a notin (x,y)`, comma-separated.
//! - Outcomes are applied like the host's writer does: actions are grouped
//!   per cluster (in order of first appearance) and performed in order
//!   within each cluster; a failed action stops the remaining actions *of
//!   that cluster only*, and the finalizer is removed only if every action
//!   succeeded. Write failures can be injected per cluster
//!   ([`World::fail_writes`]) or per object ([`World::fail_writes_to`]) and
//!   lifted with [`World::heal`].

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::core::DynamicObject;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::action::{Action, ObjectRef, Outcome, PatchType, Propagation, typed_to_json};
use crate::context::{Backend, ClusterHealth, ClusterInfo, Context, LogLevel, Phase, Request};
use crate::error::{Error, ReadError};
use crate::plugin::Plugin;
use crate::registration::Registration;
use crate::resource::{Kind, ResourceType, Scope};
use rekon_rules::{LabelSelector, PrimaryState, Step, step};

/// Why a test-kit operation failed. Most of these are what the real host
/// would report as a failed reconcile.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TestkitError {
    /// `register` failed or returned an invalid registration.
    #[error("failed to register plugin: {0}")]
    Register(Error),
    /// `reconcile` returned an error.
    #[error("failed to reconcile {request}: {error}")]
    Reconcile {
        /// The request.
        request: Request,
        /// The plugin's error.
        error: Error,
    },
    /// An action outside the plugin's declared permissions.
    #[error("plugin {plugin} may not {verb} {target}{}", if *.status { " (status)" } else { "" })]
    Forbidden {
        /// Plugin name.
        plugin: String,
        /// The verb needed.
        verb: String,
        /// Whether on the status subresource.
        status: bool,
        /// The target.
        target: String,
    },
    /// An action targets a cluster that is not engaged.
    #[error("failed to write {target}: unknown cluster")]
    UnknownCluster {
        /// The target.
        target: String,
    },
    /// A patch (or status apply) of an object that does not exist.
    #[error("failed to write {target}: not found")]
    NotFound {
        /// The target.
        target: String,
    },
    /// A resourceVersion or uid precondition failed.
    #[error("failed to write {target}: conflict: {message}")]
    Conflict {
        /// The target.
        target: String,
        /// What did not match.
        message: String,
    },
    /// An action that the API server would reject as malformed.
    #[error("failed to write {target}: invalid: {message}")]
    Invalid {
        /// The target (as far as known).
        target: String,
        /// Why.
        message: String,
    },
    /// A write failed because a failure was injected for its cluster or
    /// object ([`World::fail_writes`], [`World::fail_writes_to`]), like a
    /// write the host gave up on (unreachable cluster, persistent 5xx).
    #[error("failed to write {target}: {message}")]
    WriteFailed {
        /// The target.
        target: String,
        /// What was injected.
        message: String,
    },
    /// Several actions of one outcome failed (in different clusters): each
    /// failure, in the order of the clusters' first actions.
    #[error("failed to apply {} actions: {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Writes(Vec<TestkitError>),
    /// Reconcile → apply did not stop changing the world.
    #[error("failed to converge {request} in {rounds} rounds; last outcome: {last:?}")]
    NotConverged {
        /// The request (or `*` for every primary).
        request: String,
        /// Rounds run.
        rounds: usize,
        /// The last outcome.
        last: Box<Outcome>,
    },
}

/// A log line a plugin wrote through its [`Context`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Severity.
    pub level: LogLevel,
    /// The message.
    pub message: String,
    /// Structured fields.
    pub fields: Vec<(String, String)>,
}

/// Where an object lives: cluster, group, kind, namespace, name. The version
/// is not part of the key (one object, many versions).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key {
    cluster: String,
    group: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

impl Key {
    fn of(target: &ObjectRef) -> Self {
        Self {
            cluster: target.cluster.clone(),
            group: target.resource.group.clone(),
            kind: target.resource.kind.clone(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
        }
    }

    fn of_json(cluster: &str, obj: &Value) -> Result<Self, TestkitError> {
        ObjectRef::of_json(cluster, obj)
            .map(|r| Self::of(&r))
            .map_err(|e| TestkitError::Invalid {
                target: format!("object in cluster {cluster}"),
                message: e.message().to_owned(),
            })
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}/{}", self.kind, self.cluster, ns, self.name),
            None => write!(f, "{} {}/{}", self.kind, self.cluster, self.name),
        }
    }
}

#[derive(Debug, Clone)]
struct Stored {
    object: Value,
    /// Last applied configuration per field manager (`<manager>` or
    /// `<manager>/status`), to remove fields a manager stops applying.
    applied: BTreeMap<String, Value>,
}

#[derive(Debug)]
struct State {
    clusters: Vec<ClusterInfo>,
    objects: BTreeMap<Key, Stored>,
    time: Timestamp,
    next_rv: u64,
    next_uid: u64,
    logs: Vec<LogLine>,
    events: Vec<crate::action::EventAction>,
    /// Reads outside this registration fail with `NotWatched` (set while a
    /// plugin runs, as the host does).
    reads: Option<Registration>,
    /// Injected write failures.
    faults: Vec<Fault>,
}

/// An injected write failure.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fault {
    /// Every write to the cluster, events included.
    Cluster(String),
    /// Every write to one object (not events about it).
    Object(Key),
}

/// A fake set of clusters and objects that plays the host for native
/// plugin tests. See the [module docs](self).
pub struct World {
    state: Rc<RefCell<State>>,
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
            })),
        }
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

    /// Calls `P::register` and validates the result as the host would.
    pub fn register<P: Plugin>() -> Result<Registration, TestkitError> {
        let reg = P::register().map_err(TestkitError::Register)?;
        reg.validate().map_err(TestkitError::Register)?;
        Ok(reg)
    }

    /// Runs `P::reconcile` for `req` as the host would, deciding with the
    /// host's own rule ([`rekon_rules::step`]): an object that is not a
    /// primary (outside the primary clusters or the primary selector, and
    /// without the plugin's finalizer), or that is gone, is not reconciled
    /// at all (an empty outcome); a new primary first gets the finalizer;
    /// the plugin is told the [`Phase`] (live, deleting, leaving) and served
    /// only the reads its registration declares. The outcome is returned,
    /// not applied (see [`World::apply`]).
    pub fn reconcile<P: Plugin>(&mut self, req: &Request) -> Result<Outcome, TestkitError> {
        let reg = Self::register::<P>()?;
        let phase = match self.step(&reg, req) {
            None | Some(Step::Ignore) => return Ok(Outcome::done()),
            Some(Step::AddFinalizer) => {
                self.ensure_finalizer(&reg, req);
                Phase::Live
            }
            Some(Step::Reconcile { phase, .. }) => phase,
        };
        let ctx = self.restricted_context(reg).with_phase(phase);
        let result = P::reconcile_request(&ctx, req);
        self.state.borrow_mut().reads = None;
        result.map_err(|error| TestkitError::Reconcile {
            request: req.clone(),
            error,
        })
    }

    /// Runs `P::map` for an event on `object` (JSON) of `resource` in
    /// `cluster`, with the registration's read restrictions.
    pub fn map<P: Plugin>(
        &mut self,
        cluster: &str,
        resource: &ResourceType,
        object: &Value,
    ) -> Result<Vec<Request>, TestkitError> {
        let reg = Self::register::<P>()?;
        let obj: DynamicObject =
            serde_json::from_value(object.clone()).map_err(|e| TestkitError::Invalid {
                target: format!("{resource} in cluster {cluster}"),
                message: e.to_string(),
            })?;
        let ctx = self.restricted_context(reg);
        let requests = P::map(&ctx, cluster, resource, &obj);
        self.state.borrow_mut().reads = None;
        Ok(requests)
    }

    /// Applies a reconcile's outcome for `req` as the host would: checks
    /// every action against `P`'s permissions first (nothing is written if
    /// one is forbidden), performs the actions in order per cluster (a
    /// failure stops the remaining actions of that cluster; other clusters
    /// go on), records events, and — when the outcome is `finalized`, every
    /// action succeeded and the primary is being deleted or leaving the
    /// primary scope — removes the plugin's finalizer. Returns whether the
    /// world changed (events do not count).
    ///
    /// # Errors
    ///
    /// A forbidden action, or the failed actions: the failure itself when
    /// one action failed, [`TestkitError::Writes`] when several did. What
    /// succeeded stays applied.
    pub fn apply<P: Plugin>(
        &mut self,
        req: &Request,
        outcome: &Outcome,
    ) -> Result<bool, TestkitError> {
        let reg = Self::register::<P>()?;
        let release = matches!(
            self.step(&reg, req),
            Some(Step::Reconcile { release: true, .. })
        );
        let primary_cluster = self.primary_cluster();
        for action in &outcome.actions {
            check_permission(&reg, action, primary_cluster.as_deref())?;
        }
        // Per cluster, in order of first appearance (the host runs the
        // clusters concurrently; they are independent, so order across
        // clusters does not matter).
        let mut per_cluster: Vec<(&str, Vec<&Action>)> = Vec::new();
        for action in &outcome.actions {
            let cluster = action.cluster();
            match per_cluster.iter_mut().find(|(c, _)| *c == cluster) {
                Some((_, list)) => list.push(action),
                None => per_cluster.push((cluster, vec![action])),
            }
        }
        let mut changed = false;
        let mut failed = Vec::new();
        for (_, actions) in per_cluster {
            for action in actions {
                match self.state.borrow_mut().perform(&reg.name, action) {
                    Ok(c) => changed |= c,
                    Err(e) => {
                        failed.push(e);
                        break;
                    }
                }
            }
        }
        if !failed.is_empty() {
            return Err(if failed.len() == 1 {
                failed.remove(0)
            } else {
                TestkitError::Writes(failed)
            });
        }
        if outcome.finalized
            && release
            && let Some(finalizer) = &reg.finalizer
        {
            let key = Key::of(&ObjectRef {
                cluster: req.cluster.clone(),
                resource: reg.primary.clone(),
                namespace: req.namespace.clone(),
                name: req.name.clone(),
            });
            changed |= self.state.borrow_mut().remove_finalizer(&key, finalizer);
        }
        Ok(changed)
    }

    /// Reconciles `req` and applies the outcome until a round changes
    /// nothing; returns the outcomes of every round (the last one is the
    /// stable one). Fails if the plugin errs, writes something forbidden,
    /// a write fails (see [`World::apply`]) or it does not settle within
    /// `max_rounds`.
    pub fn converge<P: Plugin>(
        &mut self,
        req: &Request,
        max_rounds: usize,
    ) -> Result<Vec<Outcome>, TestkitError> {
        let mut outcomes = Vec::new();
        for _ in 0..max_rounds {
            let outcome = self.reconcile::<P>(req)?;
            let changed = self.apply::<P>(req, &outcome)?;
            outcomes.push(outcome);
            if !changed {
                return Ok(outcomes);
            }
        }
        Err(TestkitError::NotConverged {
            request: req.to_string(),
            rounds: max_rounds,
            last: Box::new(outcomes.pop().unwrap_or_default()),
        })
    }

    /// Like [`World::converge`] for every primary object (of the plugin's
    /// primary kind, in its primary clusters, matching its primary selector,
    /// or leaving that scope with the finalizer): each round reconciles and
    /// applies them all; stops after a round that changed nothing. Returns
    /// the number of rounds.
    pub fn converge_all<P: Plugin>(&mut self, max_rounds: usize) -> Result<usize, TestkitError> {
        let reg = Self::register::<P>()?;
        let mut last = Outcome::done();
        for round in 1..=max_rounds {
            let mut changed = false;
            for req in self.primaries(&reg) {
                // A primary deleted earlier in this round is simply gone.
                let outcome = self.reconcile::<P>(&req)?;
                changed |= self.apply::<P>(&req, &outcome)?;
                last = outcome;
            }
            if !changed {
                return Ok(round);
            }
        }
        Err(TestkitError::NotConverged {
            request: "*".into(),
            rounds: max_rounds,
            last: Box::new(last),
        })
    }

    /// Panics unless a reconcile of `req` returns no writes at all (events
    /// allowed). For plugins that only write on differences (patch, create,
    /// delete); a plugin that server-side applies every time should use
    /// [`World::assert_stable`].
    ///
    /// # Panics
    ///
    /// On writes or on a reconcile error.
    pub fn assert_no_writes<P: Plugin>(&mut self, req: &Request) {
        match self.reconcile::<P>(req) {
            Ok(outcome) => assert!(
                !outcome.has_writes(),
                "expected no writes for {req}, got {:#?}",
                outcome.writes().collect::<Vec<_>>()
            ),
            Err(e) => panic!("expected no writes for {req}, got an error: {e}"),
        }
    }

    /// Panics unless reconciling `req` and applying the outcome changes
    /// nothing in the world.
    ///
    /// # Panics
    ///
    /// On a change or an error.
    pub fn assert_stable<P: Plugin>(&mut self, req: &Request) {
        let outcome = self
            .reconcile::<P>(req)
            .unwrap_or_else(|e| panic!("expected {req} to be stable, got an error: {e}"));
        let before = self.snapshot();
        match self.apply::<P>(req, &outcome) {
            Ok(false) => {}
            Ok(true) => {
                let after = self.snapshot();
                let diff: Vec<String> = after
                    .iter()
                    .filter(|(k, v)| before.get(*k) != Some(*v))
                    .map(|(k, v)| format!("{k}: {v}"))
                    .chain(
                        before
                            .keys()
                            .filter(|k| !after.contains_key(*k))
                            .map(|k| format!("{k}: deleted")),
                    )
                    .collect();
                panic!(
                    "expected {req} to be stable, but applying {outcome:#?} changed:\n{}",
                    diff.join("\n")
                );
            }
            Err(e) => panic!("expected {req} to be stable, applying its outcome failed: {e}"),
        }
    }

    fn snapshot(&self) -> BTreeMap<String, Value> {
        self.state
            .borrow()
            .objects
            .iter()
            .map(|(k, s)| (k.to_string(), s.object.clone()))
            .collect()
    }

    fn primary_cluster(&self) -> Option<String> {
        self.state
            .borrow()
            .clusters
            .iter()
            .find(|c| c.primary)
            .map(|c| c.name.clone())
    }

    fn primaries(&self, reg: &Registration) -> Vec<Request> {
        let candidates: Vec<Request> = self
            .state
            .borrow()
            .objects
            .keys()
            .filter(|k| k.group == reg.primary.group && k.kind == reg.primary.kind)
            .map(|k| Request {
                cluster: k.cluster.clone(),
                namespace: k.namespace.clone(),
                name: k.name.clone(),
            })
            .collect();
        candidates
            .into_iter()
            .filter(|req| !matches!(self.step(reg, req), None | Some(Step::Ignore)))
            .collect()
    }

    /// The host's decision for the object `req` names (`None`: absent or
    /// in a cluster that is not engaged): the shared rule, fed the scope
    /// (primary clusters and selector), deletion and finalizer.
    fn step(&self, reg: &Registration, req: &Request) -> Option<Step> {
        let primary = self.primary_cluster();
        let state = self.state.borrow();
        if !state.engaged(&req.cluster) {
            return None;
        }
        let key = Key::of(&ObjectRef {
            cluster: req.cluster.clone(),
            resource: reg.primary.clone(),
            namespace: req.namespace.clone(),
            name: req.name.clone(),
        });
        let obj = &state.objects.get(&key)?.object;
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        let has_finalizer = reg.finalizer.as_ref().is_some_and(|f| {
            obj.pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|list| list.iter().any(|x| x == f))
        });
        Some(step(
            reg.finalizer.is_some(),
            PrimaryState {
                in_scope: reg.in_primary_scope(&req.cluster, &labels, primary.as_deref()),
                deleting: is_deleting(obj),
                has_finalizer,
            },
        ))
    }

    fn restricted_context(&self, reg: Registration) -> Context {
        self.state.borrow_mut().reads = Some(reg);
        self.context()
    }

    /// The host adds the finalizer before the first reconcile.
    fn ensure_finalizer(&mut self, reg: &Registration, req: &Request) {
        let Some(finalizer) = &reg.finalizer else {
            return;
        };
        let key = Key::of(&ObjectRef {
            cluster: req.cluster.clone(),
            resource: reg.primary.clone(),
            namespace: req.namespace.clone(),
            name: req.name.clone(),
        });
        let mut state = self.state.borrow_mut();
        let rv = state.next_rv;
        let Some(stored) = state.objects.get_mut(&key) else {
            return;
        };
        let meta = &mut stored.object["metadata"];
        if meta.get("deletionTimestamp").is_some_and(|v| !v.is_null()) {
            return;
        }
        let finalizers = meta.as_object_mut().map(|m| {
            let entry = m.entry("finalizers").or_insert_with(|| json!([]));
            if entry.is_null() {
                *entry = json!([]);
            }
            entry
        });
        if let Some(Value::Array(list)) = finalizers
            && !list.iter().any(|f| f == finalizer)
        {
            list.push(Value::String(finalizer.clone()));
            set_rv(&mut stored.object, rv);
            state.next_rv += 1;
        }
    }
}

fn check_permission(
    reg: &Registration,
    action: &Action,
    primary: Option<&str>,
) -> Result<(), TestkitError> {
    let Some(verb) = action.verb() else {
        return Ok(());
    };
    let target = action.target().map_err(|e| TestkitError::Invalid {
        target: format!("{action:?}"),
        message: e.message().to_owned(),
    })?;
    if reg.allows(
        &target.resource,
        verb,
        action.is_status(),
        &target.cluster,
        primary,
    ) {
        Ok(())
    } else {
        Err(TestkitError::Forbidden {
            plugin: reg.name.clone(),
            verb: verb.as_str().to_owned(),
            status: action.is_status(),
            target: target.to_string(),
        })
    }
}

impl State {
    fn bump(&mut self) -> u64 {
        let rv = self.next_rv;
        self.next_rv += 1;
        rv
    }

    /// Sets uid and creationTimestamp on a new object if missing.
    fn stamp_new(&mut self, obj: &mut Value) {
        let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        if !meta.get("uid").is_some_and(Value::is_string) {
            meta.insert(
                "uid".into(),
                Value::String(format!("00000000-0000-4000-8000-{:012}", self.next_uid)),
            );
            self.next_uid += 1;
        }
        if !meta.get("creationTimestamp").is_some_and(Value::is_string) {
            meta.insert(
                "creationTimestamp".into(),
                Value::String(format_time(self.time)),
            );
        }
    }

    fn engaged(&self, cluster: &str) -> bool {
        self.clusters.iter().any(|c| c.name == cluster)
    }

    fn primary(&self) -> Option<&str> {
        self.clusters
            .iter()
            .find(|c| c.primary)
            .map(|c| c.name.as_str())
    }

    fn matching<'a>(
        &'a self,
        cluster: &'a str,
        resource: &'a ResourceType,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects
            .iter()
            .filter(move |(k, _)| {
                k.cluster == cluster
                    && k.group == resource.group
                    && k.kind == resource.kind
                    && (namespace.is_none() || k.namespace.as_deref() == namespace)
            })
            .map(|(_, s)| &s.object)
    }

    fn check_read(&self, cluster: &str, resource: &ResourceType) -> Result<(), ReadError> {
        if !self.engaged(cluster) {
            return Err(ReadError::UnknownCluster(cluster.to_owned()));
        }
        if let Some(reg) = &self.reads
            && !reg.reads(resource, cluster, self.primary())
        {
            return Err(ReadError::NotWatched(format!(
                "{resource} in cluster {cluster}"
            )));
        }
        Ok(())
    }

    /// Why `action` must fail, if a failure was injected for it.
    fn injected_failure(&self, action: &Action) -> Option<String> {
        let cluster = action.cluster();
        let object = match action {
            Action::Event(_) => None,
            _ => action.target().ok().map(|t| Key::of(&t)),
        };
        self.faults.iter().find_map(|f| match f {
            Fault::Cluster(c) if c == cluster => {
                Some(format!("writes to cluster {cluster} fail (injected)"))
            }
            Fault::Object(k) if object.as_ref() == Some(k) => {
                Some(format!("writes to {k} fail (injected)"))
            }
            _ => None,
        })
    }

    /// Performs one action; returns whether the world changed.
    fn perform(&mut self, plugin: &str, action: &Action) -> Result<bool, TestkitError> {
        let manager = format!("rekon.{plugin}");
        let cluster = action.cluster();
        if !self.engaged(cluster) {
            return Err(TestkitError::UnknownCluster {
                target: action
                    .target()
                    .map(|t| t.to_string())
                    .unwrap_or_else(|_| cluster.to_owned()),
            });
        }
        if let Some(message) = self.injected_failure(action) {
            return Err(TestkitError::WriteFailed {
                target: action
                    .target()
                    .map(|t| t.to_string())
                    .unwrap_or_else(|_| cluster.to_owned()),
                message,
            });
        }
        match action {
            Action::Apply(a) => {
                let key = Key::of_json(&a.cluster, &a.object)?;
                self.server_side_apply(&key, &manager, &a.object, a.status)
            }
            Action::Create(c) => {
                let key = Key::of_json(&c.cluster, &c.object)?;
                if self.objects.contains_key(&key) {
                    return Ok(false);
                }
                let mut obj = c.object.clone();
                self.stamp_new(&mut obj);
                let rv = self.bump();
                set_rv(&mut obj, rv);
                self.objects.insert(
                    key,
                    Stored {
                        object: obj,
                        applied: BTreeMap::new(),
                    },
                );
                Ok(true)
            }
            Action::Patch(p) => {
                let key = Key::of(&p.target);
                let stored = self
                    .objects
                    .get(&key)
                    .ok_or_else(|| TestkitError::NotFound {
                        target: key.to_string(),
                    })?;
                if let Some(rv) = &p.resource_version {
                    let current = stored
                        .object
                        .pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if current != rv {
                        return Err(TestkitError::Conflict {
                            target: key.to_string(),
                            message: format!("resourceVersion is {current}, precondition {rv}"),
                        });
                    }
                }
                let mut patched = stored.object.clone();
                match p.patch_type {
                    PatchType::Merge => json_patch::merge(&mut patched, &p.patch),
                    PatchType::Json => {
                        let ops: json_patch::Patch = serde_json::from_value(p.patch.clone())
                            .map_err(|e| TestkitError::Invalid {
                                target: key.to_string(),
                                message: format!("invalid JSON patch: {e}"),
                            })?;
                        json_patch::patch(&mut patched, &ops.0).map_err(|e| {
                            TestkitError::Invalid {
                                target: key.to_string(),
                                message: format!("failed to apply JSON patch: {e}"),
                            }
                        })?;
                    }
                }
                let new = if p.status {
                    let mut new = stored.object.clone();
                    set_status(&mut new, patched.get("status").cloned());
                    new
                } else {
                    // The main resource ignores status changes.
                    set_status(&mut patched, stored.object.get("status").cloned());
                    patched
                };
                Ok(self.replace(&key, new))
            }
            Action::Delete(d) => {
                let key = Key::of(&d.target);
                let Some(stored) = self.objects.get(&key) else {
                    return Ok(false);
                };
                if let Some(uid) = &d.uid {
                    let current = stored
                        .object
                        .pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if current != uid {
                        return Err(TestkitError::Conflict {
                            target: key.to_string(),
                            message: format!("uid is {current}, precondition {uid}"),
                        });
                    }
                }
                Ok(self.delete(&key, d.propagation))
            }
            Action::Event(e) => {
                self.events.push(e.clone());
                Ok(false)
            }
        }
    }

    /// Replaces an object if it differs (bumping its resourceVersion); a
    /// deleting object without finalizers goes away. Returns whether it changed.
    fn replace(&mut self, key: &Key, mut new: Value) -> bool {
        let Some(stored) = self.objects.get(key) else {
            return false;
        };
        if same_ignoring_rv(&stored.object, &new) {
            return false;
        }
        let rv = self.bump();
        set_rv(&mut new, rv);
        if let Some(stored) = self.objects.get_mut(key) {
            stored.object = new;
        }
        self.finish_deletion_if_released(key);
        true
    }

    fn finish_deletion_if_released(&mut self, key: &Key) {
        let Some(stored) = self.objects.get(key) else {
            return;
        };
        let deleting = is_deleting(&stored.object);
        let held = stored
            .object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if deleting && !held {
            self.remove_with_dependents(key, None);
        }
    }

    fn remove_finalizer(&mut self, key: &Key, finalizer: &str) -> bool {
        // The caller decided (the shared scope rule): deleting or leaving.
        let Some(stored) = self.objects.get(key) else {
            return false;
        };
        let mut new = stored.object.clone();
        if let Some(list) = new
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f != finalizer);
        }
        self.replace(key, new)
    }

    /// API-server deletion: finalizers hold the object with a
    /// deletionTimestamp; otherwise it and its dependents go.
    fn delete(&mut self, key: &Key, propagation: Option<Propagation>) -> bool {
        let time = format_time(self.time);
        let Some(stored) = self.objects.get_mut(key) else {
            return false;
        };
        let held = stored
            .object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if held {
            let meta = &mut stored.object["metadata"];
            if meta.get("deletionTimestamp").is_some_and(|v| !v.is_null()) {
                return false;
            }
            meta["deletionTimestamp"] = Value::String(time);
            let rv = self.bump();
            if let Some(stored) = self.objects.get_mut(key) {
                set_rv(&mut stored.object, rv);
            }
            return true;
        }
        self.remove_with_dependents(key, propagation);
        true
    }

    /// Removes an object and garbage-collects its dependents in the same
    /// cluster (or strips their owner references when orphaning).
    fn remove_with_dependents(&mut self, key: &Key, propagation: Option<Propagation>) {
        let Some(stored) = self.objects.remove(key) else {
            return;
        };
        let Some(uid) = stored
            .object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return;
        };
        let dependents: Vec<Key> = self
            .objects
            .iter()
            .filter(|(k, s)| k.cluster == key.cluster && owned_by(&s.object, &uid))
            .map(|(k, _)| k.clone())
            .collect();
        for dep in dependents {
            if propagation == Some(Propagation::Orphan) {
                if let Some(mut obj) = self.objects.get(&dep).map(|s| s.object.clone()) {
                    if let Some(refs) = obj
                        .pointer_mut("/metadata/ownerReferences")
                        .and_then(Value::as_array_mut)
                    {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                    }
                    self.replace(&dep, obj);
                }
            } else {
                self.delete(&dep, propagation);
            }
        }
    }

    /// Server-side apply as seen by one field manager: fields it applied
    /// before and omits now are removed, then the applied configuration is
    /// merged in (maps merge, everything else replaces).
    fn server_side_apply(
        &mut self,
        key: &Key,
        manager: &str,
        applied: &Value,
        status: bool,
    ) -> Result<bool, TestkitError> {
        let slot = if status {
            format!("{manager}/status")
        } else {
            manager.to_owned()
        };
        // Identity fields are not "owned" content.
        let mut config = applied.clone();
        if let Some(m) = config.as_object_mut() {
            m.remove("apiVersion");
            m.remove("kind");
            if status {
                m.retain(|k, _| k == "status");
            } else {
                m.remove("status");
            }
        }
        if let Some(meta) = config.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in ["name", "namespace", "resourceVersion", "uid"] {
                meta.remove(k);
            }
        }
        let Some(stored) = self.objects.get(key) else {
            if status {
                return Err(TestkitError::NotFound {
                    target: key.to_string(),
                });
            }
            let mut obj = applied.clone();
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
            self.stamp_new(&mut obj);
            let rv = self.bump();
            set_rv(&mut obj, rv);
            self.objects.insert(
                key.clone(),
                Stored {
                    object: obj,
                    applied: BTreeMap::from([(slot, config)]),
                },
            );
            return Ok(true);
        };
        let mut new = stored.object.clone();
        if let Some(previous) = stored.applied.get(&slot) {
            let mut now = BTreeSet::new();
            leaf_paths(&config, &mut Vec::new(), &mut now);
            let mut before = BTreeSet::new();
            leaf_paths(previous, &mut Vec::new(), &mut before);
            for path in before.difference(&now) {
                remove_path(&mut new, path);
            }
        }
        deep_merge(&mut new, &config);
        let changed = self.replace(key, new);
        if let Some(stored) = self.objects.get_mut(key) {
            stored.applied.insert(slot, config);
        }
        Ok(changed)
    }
}

fn labels_match(selector: &LabelSelector, obj: &Value) -> bool {
    let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
    selector.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
}

fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn owned_by(obj: &Value, uid: &str) -> bool {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
        })
}

fn set_status(obj: &mut Value, status: Option<Value>) {
    if let Some(m) = obj.as_object_mut() {
        match status {
            Some(s) => {
                m.insert("status".into(), s);
            }
            None => {
                m.remove("status");
            }
        }
    }
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
}

/// Paths to every non-map value (lists are leaves: the fake treats them
/// atomically).
fn leaf_paths(v: &Value, prefix: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(k.clone());
                leaf_paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for p in parents {
        match cur.get_mut(p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

fn deep_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        deep_merge(existing, v)
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn format_time(t: Timestamp) -> String {
    // RFC 3339 with second precision, as Kubernetes writes metav1.Time.
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Serves a [`Context`] from the world's state.
struct WorldBackend(Rc<RefCell<State>>);

impl Backend for WorldBackend {
    fn get(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        let state = self.0.borrow();
        state.check_read(cluster, resource)?;
        let namespace = if resource.scope == Scope::Cluster {
            None
        } else {
            namespace
        };
        let key = Key {
            cluster: cluster.to_owned(),
            group: resource.group.clone(),
            kind: resource.kind.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        };
        Ok(state.objects.get(&key).map(|s| s.object.to_string()))
    }

    fn list(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let state = self.0.borrow();
        state.check_read(cluster, resource)?;
        let selector = match label_selector {
            Some(s) => {
                LabelSelector::parse(s).map_err(|e| ReadError::InvalidSelector(e.to_string()))?
            }
            None => LabelSelector::default(),
        };
        Ok(state
            .matching(cluster, resource, namespace)
            .filter(|obj| labels_match(&selector, obj))
            .map(Value::to_string)
            .collect())
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        self.0.borrow().clusters.clone()
    }

    fn log(&self, level: LogLevel, message: &str, fields: &[(String, String)]) {
        self.0.borrow_mut().logs.push(LogLine {
            level,
            message: message.to_owned(),
            fields: fields.to_vec(),
        });
    }

    fn request_time(&self) -> Timestamp {
        self.0.borrow().time
    }
}

mod case;
pub use case::{CASE_FORMAT, CaseError, CaseReplay, RecordedCase, assert_cases};

#[cfg(test)]
mod tests;
