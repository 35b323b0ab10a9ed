//! The object store of one cluster: one ordered table per resource, one
//! global resourceVersion counter, a bounded watch history per table, a
//! broadcast channel per table for live watchers, and the controller-like
//! behaviours of an apiserver (finalizers, garbage collection, namespace
//! and CRD cleanup), run synchronously after every write.
//!
//! Every operation takes the cluster's mutex once, does only CPU work, and
//! releases it before any await.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use chrono::Utc;
use parking_lot::Mutex;
use rand::Rng;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::admission::webhook;
use crate::error::{ApiError, ApiResult};
use crate::patch;
use crate::resources::{Generation, Registry, ResourceInfo, StorageKey, prune, storage_key_of};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::validate::FieldValidation;

mod create;
mod delete;
mod gc;
mod meta;
mod read;
mod update;

pub(crate) use gc::spawn as spawn_controller_deletes;
pub use gc::{GC_USER, NAMESPACE_USER};
pub(crate) use meta::random_suffix;
use meta::*;
pub use meta::{is_dns_label, is_dns_subdomain};

/// (namespace, name); namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

/// Live events of one resource.
pub type EventReceiver = broadcast::Receiver<Arc<WatchEvent>>;

/// The kind of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One persisted change, serialized once for every watcher.
#[derive(Debug)]
pub struct WatchEvent {
    /// resourceVersion of the change.
    pub rv: u64,
    /// ADDED, MODIFIED or DELETED.
    pub etype: EventType,
    /// Namespace and name.
    pub key: ObjKey,
    /// State before the change (`None` for ADDED).
    pub old: Option<Arc<Value>>,
    /// State after the change (for DELETED: the last state with the delete's RV).
    pub obj: Arc<Value>,
    /// `obj` serialized as compact JSON.
    pub bytes: Bytes,
}

pub(crate) struct Table {
    pub objects: BTreeMap<ObjKey, Arc<Value>>,
    pub history: VecDeque<Arc<WatchEvent>>,
    /// Events with `rv <= compacted_rv` may be missing from `history`.
    pub compacted_rv: u64,
    pub tx: broadcast::Sender<Arc<WatchEvent>>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct ObjRef {
    sk: StorageKey,
    ns: String,
    name: String,
}

#[derive(Debug)]
enum Work {
    Removed {
        uid: String,
        ns: String,
        sk: StorageKey,
        owners: Vec<String>,
    },
    Dangling(ObjRef),
    Foreground(String),
    Orphan(String),
    Namespace(String),
    Crd(String),
}

/// Options of one write.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// `dryRun=All`: validate, persist nothing.
    pub dry_run: bool,
    /// Field manager recorded in managedFields.
    pub manager: Option<String>,
    /// `Some("status")` for status subresource writes.
    pub subresource: Option<String>,
    /// `fieldValidation`: what unknown fields do.
    pub field_validation: crate::validate::FieldValidation,
    /// The requesting user (admission's `request.userInfo`); `None` is the
    /// kubeconfig's `kubernetes-admin`.
    pub user: Option<crate::auth::UserInfo>,
    /// The admission webhook pass of this write (off unless the API
    /// server drives it).
    pub webhooks: crate::admission::webhook::Pass,
}

impl WriteOpts {
    /// An admission webhook point of this write (`admission::webhook`).
    pub(crate) fn point<'a>(
        &'a self,
        res: &'a ResourceInfo,
        operation: &'static str,
        namespace: &'a str,
        name: &'a str,
        old: Option<&'a Value>,
    ) -> webhook::Point<'a> {
        webhook::Point {
            res,
            operation,
            namespace,
            name,
            subresource: self.subresource.as_deref(),
            old,
            dry_run: self.dry_run,
            user: self.user.as_ref(),
            pass: &self.webhooks,
            scale: None,
        }
    }

    /// Whether this is a write of the `/scale` subresource.
    fn is_scale(&self) -> bool {
        self.subresource.as_deref() == Some("scale")
    }
}

/// `propagationPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Delete dependents after the owner is gone.
    #[default]
    Background,
    /// Delete dependents first.
    Foreground,
    /// Strip the owner reference from dependents.
    Orphan,
}

/// Options of one delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// Propagation policy.
    pub propagation: Option<Propagation>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The requesting user, as in [`WriteOpts::user`].
    pub user: Option<crate::auth::UserInfo>,
    /// The admission webhook pass, as in [`WriteOpts::webhooks`].
    pub webhooks: crate::admission::webhook::Pass,
}

impl DeleteOpts {
    /// The admission webhook point of this DELETE (`admission::webhook`).
    pub(crate) fn point<'a>(
        &'a self,
        res: &'a ResourceInfo,
        namespace: &'a str,
        name: &'a str,
        old: Option<&'a Value>,
    ) -> webhook::Point<'a> {
        webhook::Point {
            res,
            operation: "DELETE",
            namespace,
            name,
            subresource: None,
            old,
            dry_run: self.dry_run,
            user: self.user.as_ref(),
            pass: &self.webhooks,
            scale: None,
        }
    }
}

/// The patch formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// application/merge-patch+json
    Merge,
    /// application/json-patch+json
    Json,
    /// application/strategic-merge-patch+json
    Strategic,
    /// application/apply-patch+yaml
    Apply {
        /// `force=true`.
        force: bool,
    },
}

/// A list page.
#[derive(Debug)]
pub struct ListResult {
    /// Items in stored form.
    pub items: Vec<Arc<Value>>,
    /// The list's resourceVersion.
    pub rv: u64,
    /// Continue token when more items remain.
    pub cont: Option<String>,
}

/// How a list picks its snapshot.
#[derive(Debug, Clone, Default)]
pub struct ListOpts {
    /// `limit`.
    pub limit: Option<usize>,
    /// `continue`.
    pub cont: Option<String>,
    /// Serve exactly this RV (Exact match or legacy limit+RV).
    pub exact_rv: Option<u64>,
}

/// What a watch starts from.
pub struct WatchStart {
    /// Objects to send as synthetic ADDED events (initial state).
    pub initial: Vec<Arc<Value>>,
    /// Events from the history (watch from an RV).
    pub replay: Vec<Arc<WatchEvent>>,
    /// The RV the initial state or replay ends at.
    pub rv: u64,
    /// Live events.
    pub rx: broadcast::Receiver<Arc<WatchEvent>>,
}

/// Outcome of a DELETE.
pub struct Deleted {
    /// The object: final state, or marked for deletion.
    pub obj: Arc<Value>,
    /// Whether it is gone (no pending finalizers).
    pub gone: bool,
}

pub(crate) struct Inner {
    pub rv: u64,
    pub registry: Registry,
    pub tables: HashMap<StorageKey, Table>,
    uids: HashMap<String, ObjRef>,
    dependents: HashMap<String, BTreeSet<ObjRef>>,
    work: VecDeque<Work>,
    pub history_limit: usize,
    pub channel_capacity: usize,
    /// Every event with `rv <= compacted_floor` may be gone, for every
    /// table: set by [`Inner::compact`] and at reset (the dropped store's
    /// history is gone). A table created later starts its history here.
    compacted_floor: u64,
    /// Tables dropped with their history (a deleted CRD's objects), by the
    /// RV of the drop: a table re-created under the same key must not claim
    /// the DELETED events it lost.
    dropped: HashMap<StorageKey, u64>,
    /// The last persisted object and its serialization.
    last_written: Option<(Arc<Value>, Bytes)>,
    /// Service cluster IPs and node ports handed out.
    alloc: std::cell::RefCell<crate::defaults::Allocations>,
    /// Terminating namespaces and when the namespace controller may start
    /// on each (the DELETE answers first; contents go afterwards).
    ns_due: HashMap<String, std::time::Instant>,
    /// Delay between a namespace's DELETE and its controller pass.
    ns_delay: std::time::Duration,
    /// `Warning` headers of the current request (unknown fields).
    pub(crate) warnings: std::cell::RefCell<Vec<String>>,
    /// ValidatingAdmissionPolicies compiled, by name and resourceVersion.
    policy_cache: std::cell::RefCell<crate::admission::policy::Cache>,
    /// What the Audit actions of policy bindings recorded (the latest 10,000).
    pub(crate) admission_audit: std::cell::RefCell<VecDeque<crate::admission::AuditRecord>>,
    /// A write stopped for its webhooks (`admission::webhook`).
    pub(crate) suspended: std::cell::RefCell<Option<crate::admission::webhook::Call>>,
    /// A write stopped for a CRD conversion webhook
    /// (`admission::webhook::conversion`).
    pub(crate) converting:
        std::cell::RefCell<Option<crate::admission::webhook::conversion::Request>>,
    /// The garbage collector's and namespace controller's deletes waiting
    /// for admission (`gc`).
    gc: gc::Queue,
}

/// The store of one cluster.
pub struct Store {
    pub(crate) inner: Mutex<Inner>,
    /// Wakes the task of the controllers' admitted deletes (`gc`).
    pub(crate) gc_wake: Arc<tokio::sync::Notify>,
}

/// Default delay of the namespace controller: long enough that `kubectl
/// delete -f` of a file listing a Namespace before its objects deletes them
/// all itself (as against a real cluster, whose controller first runs
/// discovery), short enough for tests that wait for the namespace to go.
pub const DEFAULT_NAMESPACE_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];
const FG: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";
const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";
const CRD_SK: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// RFC 3339 with seconds, UTC.
/// The largest object etcd stores: its default `--max-request-bytes`,
/// 1.5 MiB (measured here on the object's JSON, which is how custom
/// resources are stored; built-in kinds go in as protobuf, a little
/// smaller).
pub const ETCD_MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// The API server's answer to a write etcd refuses as too large: a 500
/// whose Status has no reason, the etcd message as its message
/// (kubernetes/kubernetes#74600, #112152).
fn fits_in_etcd(obj: &Value) -> ApiResult<()> {
    /// Counts what is written: the size without a copy of the object.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, obj);
    if count.0 > ETCD_MAX_OBJECT_BYTES {
        return Err(ApiError::new(500, "", "etcdserver: request is too large"));
    }
    Ok(())
}

pub fn now_rfc3339() -> String {
    Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let o = obj.as_object_mut().expect("objects are JSON objects");
    let m = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut().expect("metadata is an object")
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    strings(meta(obj).and_then(|m| m.get("finalizers")))
}

/// The strings of a JSON array (other items skipped; none when `v` is
/// absent or not an array).
pub(crate) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn set_finalizers(obj: &mut Value, f: &[String]) {
    let m = meta_mut(obj);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(f));
    }
}

/// Finalizers that keep a deleting object: metadata.finalizers, and for
/// namespaces also spec.finalizers.
fn has_pending_finalizers(obj: &Value) -> bool {
    !finalizers(obj).is_empty()
        || (obj.get("kind").and_then(Value::as_str) == Some("Namespace")
            && obj.get("apiVersion").and_then(Value::as_str) == Some("v1")
            && obj
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()))
}

fn is_deleting(obj: &Value) -> bool {
    meta(obj).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|v| !v.is_null()))
}

fn owner_uids(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Sets `kind` and the storage `apiVersion` (the request's, for a version a
/// conversion webhook converts before storing), first in the object as the
/// apiserver serializes them.
fn set_type(obj: &mut Value, res: &ResourceInfo) {
    let Some(o) = obj.as_object_mut() else { return };
    let rest = std::mem::take(o);
    o.insert("kind".into(), Value::String(res.kind.clone()));
    o.insert("apiVersion".into(), Value::String(res.write_api_version()));
    for (k, v) in rest {
        if k != "kind" && k != "apiVersion" {
            o.insert(k, v);
        }
    }
}

impl Inner {
    fn new(history_limit: usize, channel_capacity: usize, start_rv: u64) -> Self {
        let mut inner = Self {
            rv: start_rv,
            registry: Registry::builtin(),
            tables: HashMap::new(),
            uids: HashMap::new(),
            dependents: HashMap::new(),
            work: VecDeque::new(),
            history_limit,
            channel_capacity,
            compacted_floor: start_rv,
            dropped: HashMap::new(),
            last_written: None,
            alloc: std::cell::RefCell::default(),
            warnings: std::cell::RefCell::default(),
            policy_cache: std::cell::RefCell::default(),
            admission_audit: std::cell::RefCell::default(),
            suspended: std::cell::RefCell::default(),
            converting: std::cell::RefCell::default(),
            ns_due: HashMap::new(),
            ns_delay: DEFAULT_NAMESPACE_DELAY,
            gc: gc::Queue::default(),
        };
        inner.seed();
        inner
    }

    /// Creates the namespaces every cluster has.
    fn seed(&mut self) {
        let ns = self
            .registry
            .get("", "v1", "namespaces")
            .expect("namespaces are built in");
        for name in SYSTEM_NAMESPACES {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            if let Err(e) = self.create(&ns, None, obj, &WriteOpts::default()) {
                tracing::error!(namespace = name, error = %e, "failed to seed namespace");
            }
        }
    }

    /// The table of `sk`, created empty on first use.
    ///
    /// A watch from RV N is valid exactly when no event after N has been
    /// dropped from the history. A new table has dropped nothing of its
    /// own, so its history starts at the newest point where events may have
    /// been lost for every table (compaction, reset) or for this key (a
    /// dropped table), not at the current RV: a client that listed the
    /// still-empty resource at an older RV must be able to watch from that
    /// RV and see the table's first ADDED instead of a spurious 410.
    pub(crate) fn table(&mut self, sk: &StorageKey) -> &mut Table {
        let cap = self.channel_capacity;
        let start = self.history_floor(sk);
        self.tables.entry(sk.clone()).or_insert_with(|| Table {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted_rv: start,
            tx: broadcast::channel(cap).0,
        })
    }

    /// Events of `sk` with `rv <= history_floor(sk)` may be missing, for a
    /// table that does not exist yet.
    fn history_floor(&self, sk: &StorageKey) -> u64 {
        self.dropped
            .get(sk)
            .copied()
            .unwrap_or(0)
            .max(self.compacted_floor)
    }

    /// Events of `sk` with `rv <= compacted_rv(sk)` may be missing.
    fn compacted_rv(&self, sk: &StorageKey) -> u64 {
        self.tables
            .get(sk)
            .map_or_else(|| self.history_floor(sk), |t| t.compacted_rv)
    }

    fn lookup(&self, sk: &StorageKey, key: &ObjKey) -> Option<Arc<Value>> {
        self.tables
            .get(sk)
            .and_then(|t| t.objects.get(key))
            .cloned()
    }

    fn lookup_ref(&self, r: &ObjRef) -> Option<Arc<Value>> {
        self.lookup(&r.sk, &(r.ns.clone(), r.name.clone()))
    }

    fn info_for(&self, sk: &StorageKey) -> Option<Arc<ResourceInfo>> {
        self.registry.storage_info(sk)
    }

    /// The objects of one table (`group/plural`), if it has any.
    pub(crate) fn objects(&self, sk: &str) -> Option<&BTreeMap<ObjKey, Arc<Value>>> {
        self.tables.get(sk).map(|t| &t.objects)
    }

    /// A namespace object.
    pub(crate) fn namespace(&self, ns: &str) -> Option<Arc<Value>> {
        self.namespace_obj(ns)
    }

    /// Validating admission (ValidatingAdmissionPolicies) of one write:
    /// `Err` is the denial; warnings and audit records are kept.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        res: &ResourceInfo,
        operation: &'static str,
        key: &ObjKey,
        subresource: Option<&str>,
        object: Option<&Value>,
        old: Option<&Value>,
        dry_run: bool,
        user: Option<&crate::auth::UserInfo>,
    ) -> ApiResult<()> {
        if self
            .objects(crate::admission::policy::POLICIES)
            .is_none_or(BTreeMap::is_empty)
        {
            return Ok(());
        }
        fn served<'v>(res: &ResourceInfo, o: &'v Value) -> std::borrow::Cow<'v, Value> {
            if res.needs_conversion() {
                std::borrow::Cow::Owned(crate::resources::to_served(res, o))
            } else {
                std::borrow::Cow::Borrowed(o)
            }
        }
        let object = object.map(|o| served(res, o));
        let old = old.map(|o| served(res, o));
        let admin = crate::auth::admin_user();
        let a = crate::admission::policy::Attributes {
            res,
            operation,
            name: &key.1,
            namespace: &key.0,
            subresource: subresource.unwrap_or_default(),
            object: object.as_deref(),
            old: old.as_deref(),
            dry_run,
            user: user.unwrap_or(&admin),
        };
        let mut cache = self.policy_cache.borrow_mut();
        let admitted = crate::admission::policy::admit(self, &mut cache, &a)?;
        self.warnings.borrow_mut().extend(admitted.warnings);
        if let Some(r) = admitted.audit {
            let mut log = self.admission_audit.borrow_mut();
            if log.len() >= 10_000 {
                log.pop_front();
            }
            log.push_back(r);
        }
        Ok(())
    }

    fn namespace_obj(&self, ns: &str) -> Option<Arc<Value>> {
        self.lookup(
            &storage_key_of("", "namespaces"),
            &(String::new(), ns.to_string()),
        )
    }

    fn obj_key(res: &ResourceInfo, ns: Option<&str>, name: &str) -> ObjKey {
        let ns = if res.namespaced {
            ns.unwrap_or_default()
        } else {
            ""
        };
        (ns.to_string(), name.to_string())
    }

    // ----- persistence primitives -------------------------------------

    fn emit(&mut self, sk: &StorageKey, ev: WatchEvent) {
        let limit = self.history_limit;
        let table = self.table(sk);
        let ev = Arc::new(ev);
        table.history.push_back(ev.clone());
        while table.history.len() > limit {
            if let Some(old) = table.history.pop_front() {
                table.compacted_rv = old.rv;
            }
        }
        // No receivers is fine.
        let _ = table.tx.send(ev);
    }

    /// Persists `new` (already validated) and emits ADDED/MODIFIED, or
    /// removes it when it is being deleted and has no finalizers left.
    fn persist(
        &mut self,
        sk: &StorageKey,
        key: ObjKey,
        old: Option<Arc<Value>>,
        mut new: Value,
    ) -> Arc<Value> {
        if is_deleting(&new) && !has_pending_finalizers(&new) {
            return self.remove(sk, &key, Some(new));
        }
        self.rv += 1;
        let rv = self.rv;
        meta_mut(&mut new).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let new = Arc::new(new);
        let bytes = Bytes::from(serde_json::to_vec(&*new).unwrap_or_default());
        self.last_written = Some((new.clone(), bytes.clone()));
        self.table(sk).objects.insert(key.clone(), new.clone());
        // Indexes.
        let r = ObjRef {
            sk: sk.clone(),
            ns: key.0.clone(),
            name: key.1.clone(),
        };
        if let Some(uid) = meta_str(&new, "uid") {
            self.uids.insert(uid.to_string(), r.clone());
        }
        let old_owners = old.as_deref().map(owner_uids).unwrap_or_default();
        let new_owners = owner_uids(&new);
        if old_owners != new_owners {
            for o in &old_owners {
                if let Some(set) = self.dependents.get_mut(o) {
                    set.remove(&r);
                    if set.is_empty() {
                        self.dependents.remove(o);
                    }
                }
            }
            for o in &new_owners {
                self.dependents
                    .entry(o.clone())
                    .or_default()
                    .insert(r.clone());
            }
            if new_owners.iter().any(|o| !self.uids.contains_key(o)) {
                self.work.push_back(Work::Dangling(r.clone()));
            }
        }
        if **sk == *CRD_SK
            && !is_deleting(&new)
            && let Err(e) = self.registry.register_crd(&new)
        {
            tracing::warn!(error = %e, "failed to register custom resource definition");
        }
        let etype = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.emit(
            sk,
            WatchEvent {
                rv,
                etype,
                key,
                old,
                obj: new.clone(),
                bytes,
            },
        );
        new
    }

    /// Removes an object and emits DELETED. `last` is its final state
    /// (defaults to the stored one).
    fn remove(&mut self, sk: &StorageKey, key: &ObjKey, last: Option<Value>) -> Arc<Value> {
        let Some(stored) = self.table(sk).objects.remove(key) else {
            return Arc::new(last.unwrap_or(Value::Null));
        };
        self.rv += 1;
        let rv = self.rv;
        let mut obj = last.unwrap_or_else(|| (*stored).clone());
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let obj = Arc::new(obj);
        let bytes = Bytes::from(serde_json::to_vec(&*obj).unwrap_or_default());
        let r = ObjRef {
            sk: sk.clone(),
            ns: key.0.clone(),
            name: key.1.clone(),
        };
        let uid = meta_str(&obj, "uid").unwrap_or_default().to_string();
        self.uids.remove(&uid);
        if &**sk == "/services" {
            self.alloc.get_mut().release(&obj);
        }
        let owners = owner_uids(&obj);
        for o in &owners {
            if let Some(set) = self.dependents.get_mut(o) {
                set.remove(&r);
                if set.is_empty() {
                    self.dependents.remove(o);
                }
            }
        }
        if **sk == *CRD_SK {
            let crd_name = key.1.clone();
            if let Some(cr_sk) = self.registry.get_crd_storage_key(&crd_name) {
                self.registry.unregister_crd(&crd_name);
                // Dropping the table closes its watchers and loses its
                // history up to now.
                self.tables.remove(&cr_sk);
                self.dropped.insert(cr_sk, rv);
            }
        }
        self.emit(
            sk,
            WatchEvent {
                rv,
                etype: EventType::Deleted,
                key: key.clone(),
                old: Some(stored),
                obj: obj.clone(),
                bytes,
            },
        );
        self.work.push_back(Work::Removed {
            uid,
            ns: key.0.clone(),
            sk: sk.clone(),
            owners,
        });
        obj
    }

    // ----- writes ------------------------------------------------------

    fn record_update(
        &self,
        res: &ResourceInfo,
        old: Option<&Value>,
        new: &mut Value,
        opts: &WriteOpts,
    ) {
        let manager = patch::Manager {
            name: opts.manager.clone().unwrap_or_else(|| "unknown".into()),
            operation: patch::Operation::Update,
            api_version: res.api_version(),
            subresource: opts.subresource.clone(),
            time: Utc::now(),
        };
        patch::record_update(old, new, &manager, res.type_info());
    }
}

impl Store {
    /// A store with the system namespaces.
    pub fn new(history_limit: usize, channel_capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::new(
                history_limit.max(1),
                channel_capacity.max(16),
                0,
            )),
            gc_wake: Arc::default(),
        }
    }

    /// Runs `f` under the lock, then settles follow-up reactions.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut g = self.inner.lock();
        let out = f(&mut g);
        g.settle();
        if !g.ns_due.is_empty() {
            g.run_due_namespaces();
            g.settle();
        }
        if g.gc.has_due() {
            self.gc_wake.notify_one();
        }
        out
    }

    /// Runs a read under the lock.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut g = self.inner.lock();
        f(&mut g)
    }

    /// The current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.inner.lock().rv
    }

    /// Drops every object and custom resource definition and re-seeds the
    /// system namespaces; the resourceVersion keeps counting up. Watches of
    /// dropped tables end.
    pub fn reset(&self) {
        let mut g = self.inner.lock();
        let (hl, cap) = (g.history_limit, g.channel_capacity);
        let mut fresh = Inner::new(hl, cap, g.rv);
        fresh.ns_delay = g.ns_delay;
        fresh.gc.enabled = g.gc.enabled;
        let rv = fresh.rv;
        for t in fresh.tables.values_mut() {
            t.compacted_rv = rv;
            t.history.clear();
        }
        *g = fresh;
    }
}
