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

mod gc;
pub(crate) use gc::spawn as spawn_controller_deletes;
pub use gc::{GC_USER, NAMESPACE_USER};

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

/// Type checks of `metadata` the apiserver's decoder and validation do:
/// wrong JSON types → 400, invalid labels or owner references → 422.
fn validate_meta(res: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let Some(m) = obj.get("metadata") else {
        return Ok(());
    };
    let bad = |field: &str, want: &str| {
        ApiError::bad_request(format!(
            "json: cannot unmarshal into Go struct field ObjectMeta.metadata.{field} of type {want}"
        ))
    };
    let Some(m) = m.as_object() else {
        return Err(bad("", "v1.ObjectMeta"));
    };
    let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
    for f in [
        "name",
        "generateName",
        "namespace",
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
    ] {
        if let Some(v) = m.get(f)
            && !v.is_string()
            && !v.is_null()
        {
            return Err(bad(f, "string"));
        }
    }
    for f in ["generation", "deletionGracePeriodSeconds"] {
        if let Some(v) = m.get(f)
            && !v.is_i64()
            && !v.is_null()
        {
            return Err(bad(f, "int64"));
        }
    }
    for f in ["labels", "annotations"] {
        match m.get(f) {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                if map.values().any(|v| !v.is_string()) {
                    return Err(bad(f, "string"));
                }
                for (k, v) in map {
                    let v = v.as_str().unwrap_or_default();
                    let key_ok = crate::selectors::valid_key(k);
                    let value_ok = f == "annotations" || crate::selectors::valid_value(v);
                    if !key_ok || !value_ok {
                        let msg = if key_ok {
                            format!(
                                "Invalid value: \"{v}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                            )
                        } else {
                            format!(
                                "Invalid value: \"{k}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                            )
                        };
                        return Err(ApiError::invalid_field(
                            res,
                            name,
                            &format!("metadata.{f}"),
                            msg,
                        ));
                    }
                }
            }
            Some(_) => return Err(bad(f, "map[string]string")),
        }
    }
    match m.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(_) => return Err(bad("finalizers", "[]string")),
    }
    match m.get("ownerReferences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(refs)) => {
            for (i, r) in refs.iter().enumerate() {
                let Some(r) = r.as_object() else {
                    return Err(bad("ownerReferences", "v1.OwnerReference"));
                };
                for f in ["apiVersion", "kind", "name", "uid"] {
                    match r.get(f) {
                        Some(Value::String(s)) if !s.is_empty() => {}
                        Some(Value::String(_)) | None | Some(Value::Null) => {
                            return Err(ApiError::invalid_field(
                                res,
                                name,
                                &format!("metadata.ownerReferences[{i}].{f}"),
                                "Invalid value: \"\": must not be empty".into(),
                            ));
                        }
                        Some(_) => return Err(bad("ownerReferences", "string")),
                    }
                }
                for f in ["controller", "blockOwnerDeletion"] {
                    if let Some(v) = r.get(f)
                        && !v.is_boolean()
                        && !v.is_null()
                    {
                        return Err(bad("ownerReferences", "bool"));
                    }
                }
            }
        }
        Some(_) => return Err(bad("ownerReferences", "[]v1.OwnerReference")),
    }
    Ok(())
}

/// DNS-1123 subdomain.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// DNS-1123 label.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn validate_name(res: &ResourceInfo, name: &str) -> ApiResult<()> {
    let (ok, msg) = if res.kind == "Namespace" {
        (is_dns_label(name), LABEL_MSG)
    } else if res.group == "rbac.authorization.k8s.io" {
        (
            !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%']),
            "may not contain '/' or '%'",
        )
    } else {
        (is_dns_subdomain(name), SUBDOMAIN_MSG)
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            res,
            name,
            "metadata.name",
            format!("Invalid value: \"{name}\": {msg}"),
        ))
    }
}

/// Five characters of the apiserver's `generateName` alphabet.
pub(crate) fn random_suffix() -> String {
    generate_suffix()
}

fn generate_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Whether anything outside metadata (and status, if `skip_status`) differs.
fn spec_changed(old: &Value, new: &Value, skip_status: bool) -> bool {
    let (Some(a), Some(b)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let skip = |k: &str| {
        k == "metadata" || k == "apiVersion" || k == "kind" || (skip_status && k == "status")
    };
    let ak = a.keys().filter(|k| !skip(k));
    let bk = b.keys().filter(|k| !skip(k));
    if ak.clone().count() != bk.count() {
        return true;
    }
    ak.into_iter().any(|k| a.get(k) != b.get(k))
}

/// Whether two managedFields lists differ only in their `time` fields.
fn same_but_times(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a.and_then(Value::as_array), b.and_then(Value::as_array)) {
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(e, f)| match (e.as_object(), f.as_object()) {
                        (Some(e), Some(f)) => {
                            e.iter().filter(|(k, _)| *k != "time").count()
                                == f.iter().filter(|(k, _)| *k != "time").count()
                                && e.iter().all(|(k, v)| k == "time" || f.get(k) == Some(v))
                        }
                        _ => e == f,
                    })
        }
        _ => a == b,
    }
}

/// Continue tokens: hex of `rv\nnamespace\nname`.
fn encode_continue(rv: u64, key: &ObjKey) -> String {
    let raw = format!("{rv}\n{}\n{}", key.0, key.1);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(tok: &str) -> Option<(u64, ObjKey)> {
    if !tok.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..tok.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(tok.get(i..i + 2)?, 16).ok())
        .collect();
    let s = String::from_utf8(bytes?).ok()?;
    let mut parts = s.splitn(3, '\n');
    let rv = parts.next()?.parse().ok()?;
    let ns = parts.next()?.to_string();
    let name = parts.next()?.to_string();
    Some((rv, (ns, name)))
}

/// The namespace controller's status conditions: (type, status, reason, message).
/// `failed`: the errors of content deletes that failed (admission refused
/// them), one per resource.
fn namespace_conditions(
    failed: &[String],
    remaining: Option<&str>,
    finalizers: Option<&str>,
) -> Vec<(&'static str, &'static str, &'static str, String)> {
    vec![
        (
            "NamespaceDeletionDiscoveryFailure",
            "False",
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            "False",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into(),
        ),
        if failed.is_empty() {
            (
                "NamespaceDeletionContentFailure",
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".into(),
            )
        } else {
            // makeDeleteContentCondition: the messages sorted.
            let mut msgs = failed.to_vec();
            msgs.sort();
            (
                "NamespaceDeletionContentFailure",
                "True",
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    msgs.len(),
                    msgs.join(", ")
                ),
            )
        },
        match remaining {
            Some(r) => (
                "NamespaceContentRemaining",
                "True",
                "SomeResourcesRemain",
                format!("Some resources are remaining: {r}"),
            ),
            None => (
                "NamespaceContentRemaining",
                "False",
                "ContentRemoved",
                "All content successfully removed".into(),
            ),
        },
        match finalizers {
            Some(f) => (
                "NamespaceFinalizersRemaining",
                "True",
                "SomeFinalizersRemain",
                format!("Some content in the namespace has finalizers remaining: {f}"),
            ),
            None => (
                "NamespaceFinalizersRemaining",
                "False",
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".into(),
            ),
        },
    ]
}

fn too_old(rv: u64, oldest: u64) -> ApiError {
    ApiError::expired(format!("too old resource version: {rv} ({oldest})"))
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

    /// Normalizes and validates a new object; returns its key.
    fn prepare_create(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        obj: &mut Value,
        fv: FieldValidation,
    ) -> ApiResult<ObjKey> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        validate_meta(res, obj)?;
        if res.namespaced {
            let url_ns = ns.unwrap_or_default();
            let m = meta_mut(obj);
            match m.get("namespace").and_then(Value::as_str) {
                Some(body_ns) if !body_ns.is_empty() && !url_ns.is_empty() && body_ns != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                Some(body_ns) if !body_ns.is_empty() && url_ns.is_empty() => {}
                _ => {
                    m.insert("namespace".into(), Value::String(url_ns.to_string()));
                }
            }
        } else {
            meta_mut(obj).remove("namespace");
        }
        let m = meta_mut(obj);
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            match m.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => {
                    name = format!("{prefix}{}", generate_suffix());
                    m.insert("name".into(), Value::String(name.clone()));
                }
                _ => {
                    return Err(ApiError::invalid(
                        &res.kind,
                        &res.group,
                        "",
                        &[(
                            "FieldValueRequired",
                            "metadata.name".into(),
                            "Required value: name or generateName is required".into(),
                        )],
                    ));
                }
            }
        }
        validate_name(res, &name)?;
        let ns_name = m
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if res.namespaced {
            match self.namespace_obj(&ns_name) {
                None => return Err(ApiError::namespace_not_found(&ns_name)),
                Some(n) if is_deleting(&n) => {
                    return Err(ApiError::forbidden(
                        res,
                        &name,
                        &format!(
                            "unable to create new content in namespace {ns_name} because it is being terminated"
                        ),
                    ));
                }
                _ => {}
            }
        }
        let key = (ns_name, name);
        if self.lookup(&res.storage_key(), &key).is_some() {
            return Err(ApiError::already_exists(res, &key.1));
        }
        // Server-owned metadata.
        let m = meta_mut(obj);
        m.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        m.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        m.remove("resourceVersion");
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if res.generation.maintained() {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        if let Some(o) = obj.as_object_mut() {
            if res.drop_status_on_create {
                o.remove("status");
            }
            match res.kind.as_str() {
                // PrepareForCreate (PersistentVolumeLastPhaseTransitionTime,
                // GA in 1.31): the phase starts Pending, now.
                "PersistentVolume" if res.builtin => {
                    o.insert(
                        "status".into(),
                        json!({"phase": "Pending", "lastPhaseTransitionTime": now_rfc3339()}),
                    );
                }
                // PrepareForCreate: the `kubernetes` finalizer is required
                // on create (appended to the client's own).
                "Namespace" if res.builtin => {
                    let spec = o.entry("spec").or_insert_with(|| json!({}));
                    if !spec.is_object() {
                        *spec = json!({});
                    }
                    if let Some(f) = spec
                        .as_object_mut()
                        .map(|s| s.entry("finalizers").or_insert_with(|| json!([])))
                    {
                        if !f.is_array() {
                            *f = json!([]);
                        }
                        if let Some(a) = f.as_array_mut()
                            && !a.iter().any(|x| x == "kubernetes")
                        {
                            a.push(json!("kubernetes"));
                        }
                    }
                }
                // SetDefaults_Secret: an empty type is Opaque.
                "Secret"
                    if res.builtin
                        && o.get("type")
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty) =>
                {
                    o.insert("type".into(), json!("Opaque"));
                }
                _ => {}
            }
        }
        crate::defaults::apply(res, obj, None, &mut self.alloc.borrow_mut());
        self.finish_object(res, &key.1, obj, None, fv)?;
        Ok(key)
    }

    /// Per-kind defaulting and validation shared by create and update.
    fn finish_object(
        &self,
        res: &ResourceInfo,
        name: &str,
        obj: &mut Value,
        old: Option<&Value>,
        fv: FieldValidation,
    ) -> ApiResult<()> {
        crate::defaults::drop_empty_metadata(obj);
        if !res.builtin
            && let Some(schema) = &res.schema
        {
            crate::validate::apply_defaults(obj, schema);
        }
        self.validate_fields(res, name, obj, old, fv)?;
        if !res.builtin
            && let Some(schema) = &res.schema
        {
            prune(obj, schema);
        }
        if res.builtin
            && res.group == "admissionregistration.k8s.io"
            && res.kind.ends_with("WebhookConfiguration")
        {
            let errs = webhook::validate_configuration(obj, res.kind.starts_with("Mutating"));
            if !errs.is_empty() {
                return Err(ApiError::invalid(&res.kind, &res.group, name, &errs));
            }
        }
        if res.builtin && res.kind == "CustomResourceDefinition" {
            let infos = crate::resources::crd_resources(obj).map_err(|msg| {
                let (field, m) = msg.split_once(": ").unwrap_or(("spec", msg.as_str()));
                ApiError::invalid(
                    &res.kind,
                    &res.group,
                    name,
                    &[("FieldValueInvalid", field.to_string(), m.to_string())],
                )
            })?;
            let info = &infos[0];
            if let Some(spec_names) = obj
                .pointer_mut("/spec/names")
                .and_then(Value::as_object_mut)
            {
                spec_names
                    .entry("singular")
                    .or_insert_with(|| json!(info.singular));
                spec_names
                    .entry("listKind")
                    .or_insert_with(|| json!(info.list_kind));
            }
            let accepted = obj.pointer("/spec/names").cloned().unwrap_or(Value::Null);
            let mut stored: Vec<String> = old
                .and_then(|o| o.pointer("/status/storedVersions"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if !stored.contains(&info.storage_version) {
                stored.push(info.storage_version.clone());
            }
            let old_conditions = old.and_then(|o| o.pointer("/status/conditions")).cloned();
            let now = now_rfc3339();
            let cond_time = |t: &str| -> String {
                old_conditions
                    .as_ref()
                    .and_then(Value::as_array)
                    .and_then(|a| {
                        a.iter()
                            .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
                    })
                    .and_then(|c| c.get("lastTransitionTime"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| now.clone())
            };
            let mut conditions = vec![
                json!({"type": "NamesAccepted", "status": "True", "lastTransitionTime": cond_time("NamesAccepted"),
                       "reason": "NoConflicts", "message": "no conflicts found"}),
                json!({"type": "Established", "status": "True", "lastTransitionTime": cond_time("Established"),
                       "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}),
            ];
            if is_deleting(obj) {
                conditions.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": cond_time("Terminating"),
                    "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
            }
            if let Some(o) = obj.as_object_mut() {
                o.insert(
                    "status".into(),
                    json!({"conditions": conditions, "acceptedNames": accepted, "storedVersions": stored}),
                );
            }
        }
        Ok(())
    }

    /// Server-side apply converts the patch to its typed form first: a field
    /// the schema does not declare fails the request whatever
    /// `fieldValidation` says, with structured-merge-diff's message (the
    /// apiserver answers 500 with no reason for it, as of 1.32).
    fn check_typed_patch(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        body: &Value,
    ) -> ApiResult<()> {
        // The schema is the stored version's; a converted body is checked
        // after conversion, by `validate_fields`.
        if res.needs_conversion() {
            return Ok(());
        }
        let Some((schema, defs)) = crate::openapi::schema_of(res) else {
            return Ok(());
        };
        let mut copy = body.clone();
        let mut f = crate::validate::Findings::default();
        crate::validate::walk(&mut copy, schema, defs, "", true, false, &mut f);
        if f.unknown.is_empty() {
            return Ok(());
        }
        let errs: Vec<String> = f
            .unknown
            .iter()
            .map(|p| {
                let path = res
                    .type_info()
                    .smd_path(body, &crate::validate::segments(p));
                format!("{path}: field not declared in schema")
            })
            .collect();
        let errs = if errs.len() == 1 {
            errs[0].clone()
        } else {
            format!("errors:\n  {}", errs.join("\n  "))
        };
        Err(ApiError::new(
            500,
            "",
            format!(
                "failed to create typed patch object ({}/{name}; {}/{}, Kind={}): {errs}",
                if res.namespaced {
                    ns.unwrap_or_default()
                } else {
                    ""
                },
                res.group,
                res.version,
                res.kind
            ),
        ))
    }

    /// Unknown fields per `fieldValidation`; a custom resource's value
    /// constraints and `x-kubernetes-validations` rules (422, one error
    /// list as the server's strategy builds it).
    fn validate_fields(
        &self,
        res: &ResourceInfo,
        name: &str,
        obj: &mut Value,
        old: Option<&Value>,
        fv: FieldValidation,
    ) -> ApiResult<()> {
        let Some((schema, defs)) = crate::openapi::schema_of(res) else {
            return Ok(());
        };
        let mut f = crate::validate::Findings::default();
        crate::validate::walk(obj, schema, defs, "", true, !res.builtin, &mut f);
        if !res.builtin {
            // A custom resource's metadata is a typed ObjectMeta all the same.
            let b = crate::openapi::builtins();
            if let Some(meta_schema) = b
                .defs
                .get("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
                && let Some(m) = obj.get_mut("metadata")
            {
                crate::validate::walk(
                    m,
                    meta_schema,
                    Some(&b.defs),
                    "metadata",
                    false,
                    false,
                    &mut f,
                );
            }
        }
        if !f.unknown.is_empty() {
            match fv {
                FieldValidation::Strict => {
                    return Err(ApiError::bad_request(crate::validate::strict_message(
                        &res.kind,
                        &res.version,
                        &f.unknown,
                    )));
                }
                FieldValidation::Warn => {
                    let mut w = self.warnings.borrow_mut();
                    for u in &f.unknown {
                        w.push(format!("unknown field \"{u}\""));
                    }
                }
                FieldValidation::Ignore => {}
            }
        }
        let mut invalid = f.invalid;
        if let Some(rules) = res.crd_rules() {
            match crate::admission::crd_rules::blocking(&invalid) {
                Some(e) => invalid.push(e),
                None => {
                    let (errors, warnings) = rules.validate(obj, old);
                    invalid.extend(errors);
                    self.warnings.borrow_mut().extend(warnings);
                }
            }
        }
        if !invalid.is_empty() {
            return Err(ApiError::invalid(&res.kind, &res.group, name, &invalid));
        }
        Ok(())
    }

    pub(crate) fn create(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        mut obj: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        let ns_of = if res.namespaced {
            ns.unwrap_or_default()
        } else {
            ""
        };
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        webhook::mutation_point(
            self,
            &opts.point(res, "CREATE", ns_of, &name, None),
            Some(&mut obj),
        )?;
        crate::resources::to_storage(res, &mut obj);
        set_type(&mut obj, res);
        let key = self.prepare_create(res, ns, &mut obj, opts.field_validation)?;
        self.record_update(res, None, &mut obj, opts);
        let key = self.admit_created(res, key, &mut obj, opts)?;
        if opts.dry_run {
            return Ok(Arc::new(obj));
        }
        fits_in_etcd(&obj)?;
        let sk = res.storage_key();
        Ok(self.persist(&sk, key, None, obj))
    }

    /// Validating admission of a create: the policies, then the
    /// validating webhooks' point (which may put in the object they
    /// admitted, whose generated name then keys it).
    fn admit_created(
        &self,
        res: &ResourceInfo,
        key: ObjKey,
        obj: &mut Value,
        opts: &WriteOpts,
    ) -> ApiResult<ObjKey> {
        if !opts.webhooks.validated() {
            self.admit(
                res,
                "CREATE",
                &key,
                opts.subresource.as_deref(),
                Some(obj),
                None,
                opts.dry_run,
                opts.user.as_ref(),
            )?;
        }
        webhook::validation_point(
            self,
            &opts.point(res, "CREATE", &key.0, &key.1, None),
            Some(obj),
        )?;
        webhook::conversion::storage_point(self, res, None, obj, &opts.webhooks)?;
        let name = meta_str(obj, "name").unwrap_or_default().to_string();
        if name != key.1
            && self
                .lookup(&res.storage_key(), &(key.0.clone(), name.clone()))
                .is_some()
        {
            return Err(ApiError::already_exists(res, &name));
        }
        Ok((key.0, name))
    }

    /// Completes an update of `old` to `new`: server-owned fields, status
    /// subresource scoping, finalizer rules, managedFields, generation.
    fn prepare_update(
        &self,
        res: &ResourceInfo,
        old: &Value,
        mut new: Value,
        opts: &WriteOpts,
        record: bool,
    ) -> ApiResult<Value> {
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        let name = meta_str(old, "name").unwrap_or_default().to_string();
        let ns_of = meta_str(old, "namespace").unwrap_or_default().to_string();
        // A `/scale` write met the mutating webhooks with its Scale.
        if !opts.is_scale() {
            webhook::mutation_point(
                self,
                &opts.point(res, "UPDATE", &ns_of, &name, Some(old)),
                Some(&mut new),
            )?;
        }
        validate_meta(res, &new)?;
        crate::resources::to_storage(res, &mut new);
        set_type(&mut new, res);
        let old_uid = meta_str(old, "uid").unwrap_or_default().to_string();
        if let Some(uid) = meta_str(&new, "uid")
            && !uid.is_empty()
            && uid != old_uid
        {
            return Err(ApiError::conflict_msg(
                res,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {old_uid}"
                ),
            ));
        }
        let empty = Map::new();
        let om = meta(old).unwrap_or(&empty);
        let is_status = opts.subresource.as_deref() == Some("status");
        let mut new = if is_status {
            // Only .status changes through /status.
            let mut out = old.clone();
            let new_status = new.get("status").cloned();
            let new_mf = meta(&new).and_then(|m| m.get("managedFields")).cloned();
            if let Some(o) = out.as_object_mut() {
                match new_status {
                    Some(s) => {
                        o.insert("status".into(), s);
                    }
                    None => {
                        o.remove("status");
                    }
                }
            }
            if let Some(mf) = new_mf {
                meta_mut(&mut out).insert("managedFields".into(), mf);
            }
            out
        } else {
            let m = meta_mut(&mut new);
            for f in [
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "namespace",
                "name",
            ] {
                match om.get(f) {
                    Some(v) => {
                        m.insert(f.into(), v.clone());
                    }
                    None => {
                        m.remove(f);
                    }
                }
            }
            m.remove("selfLink");
            if res.status_subresource
                && let Some(o) = new.as_object_mut()
            {
                match old.get("status") {
                    Some(s) => {
                        o.insert("status".into(), s.clone());
                    }
                    None => {
                        o.remove("status");
                    }
                }
            }
            if res.builtin
                && res.kind == "Namespace"
                && let Some(o) = new.as_object_mut()
                && let Some(spec) = old.get("spec")
            {
                o.insert("spec".into(), spec.clone());
            }
            new
        };
        if is_deleting(old) {
            let old_f = finalizers(old);
            let added: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !old_f.contains(f))
                .collect();
            if !added.is_empty() {
                let list = added
                    .iter()
                    .map(|f| format!("{f:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(ApiError::invalid(
                    &res.kind,
                    &res.group,
                    &name,
                    &[(
                        "FieldValueForbidden",
                        "metadata.finalizers".into(),
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
                        ),
                    )],
                ));
            }
        }
        crate::defaults::apply(res, &mut new, Some(old), &mut self.alloc.borrow_mut());
        self.finish_object(res, &name, &mut new, Some(old), opts.field_validation)?;
        if record {
            self.record_update(res, Some(old), &mut new, opts);
        }
        let bumped = match res.generation {
            Generation::None => false,
            Generation::Spec => spec_changed(old, &new, res.status_subresource),
            Generation::SpecOrAnnotations => {
                spec_changed(old, &new, res.status_subresource)
                    || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations")
            }
        };
        if bumped {
            let g = om.get("generation").and_then(Value::as_i64).unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        Ok(new)
    }

    /// Persists an update of `old` (stored) unless it changes nothing.
    /// `view` is `old` at the request's version (`old` itself unless a
    /// conversion webhook converts it), what admission sees; `new` is at
    /// the request's version until the storage conversion point. Returns
    /// the stored object.
    fn commit_update(
        &mut self,
        res: &ResourceInfo,
        key: ObjKey,
        old: Arc<Value>,
        view: &Value,
        mut new: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        // Admission runs for no-op writes too, as on a real server.
        if !opts.webhooks.validated() {
            self.admit(
                res,
                "UPDATE",
                &key,
                opts.subresource.as_deref(),
                Some(&new),
                Some(view),
                opts.dry_run,
                opts.user.as_ref(),
            )?;
        }
        match res.scale.as_deref().filter(|_| opts.is_scale()) {
            // A `/scale` write: the validating webhooks see the Scales.
            Some(paths) => {
                let served = if res.needs_conversion() {
                    crate::resources::to_served(res, &new)
                } else {
                    new.clone()
                };
                let mut scale = crate::scale::to_scale(paths, &served);
                let mut point = opts.point(res, "UPDATE", &key.0, &key.1, Some(view));
                point.scale = Some(paths);
                webhook::validation_point(self, &point, Some(&mut scale))?;
            }
            None => webhook::validation_point(
                self,
                &opts.point(res, "UPDATE", &key.0, &key.1, Some(view)),
                Some(&mut new),
            )?,
        }
        webhook::conversion::storage_point(self, res, Some(&old), &mut new, &opts.webhooks)?;
        let dry_run = opts.dry_run;
        // No-op detection: RV and managedFields timestamps do not count.
        if let Some(rv) = meta_str(&old, "resourceVersion") {
            meta_mut(&mut new).insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let old_mf = meta(&old).and_then(|m| m.get("managedFields"));
        let new_mf = meta(&new).and_then(|m| m.get("managedFields"));
        if old_mf != new_mf
            && same_but_times(old_mf, new_mf)
            && let Some(mf) = old_mf.cloned()
        {
            meta_mut(&mut new).insert("managedFields".into(), mf);
        }
        if new == *old {
            return Ok(old);
        }
        if dry_run {
            return Ok(Arc::new(new));
        }
        fits_in_etcd(&new)?;
        let sk = res.storage_key();
        Ok(self.persist(&sk, key, Some(old), new))
    }

    pub(crate) fn get(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
    ) -> ApiResult<Arc<Value>> {
        let key = Self::obj_key(res, ns, name);
        self.lookup(&res.storage_key(), &key)
            .ok_or_else(|| ApiError::not_found(res, name))
    }

    pub(crate) fn update(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        new: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        let body_name = meta_str(&new, "name").unwrap_or_default();
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if res.namespaced
            && let Some(body_ns) = meta_str(&new, "namespace")
            && !body_ns.is_empty()
            && Some(body_ns) != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let old = self.get(res, ns, name)?;
        if let Some(rv) = meta_str(&new, "resourceVersion")
            && !rv.is_empty()
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(res, name));
        }
        let view = webhook::conversion::view(self, res, &old, &opts.webhooks)?;
        let new = self.prepare_update(res, &view, new, opts, true)?;
        let key = Self::obj_key(res, ns, name);
        self.commit_update(res, key, old, &view, new, opts)
    }

    /// Reads and writes the `/scale` subresource: `f` turns the current
    /// Scale into the one the client wants (a PUT body, a patched Scale).
    pub(crate) fn scale(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        f: impl FnOnce(&Value) -> ApiResult<Option<Value>>,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        let Some(paths) = res.scale.clone() else {
            return Err(ApiError::not_found(res, name));
        };
        let old = self.get(res, ns, name)?;
        let view = webhook::conversion::view(self, res, &old, &opts.webhooks)?;
        let served = if res.needs_conversion() {
            crate::resources::to_served(res, &view)
        } else {
            (*view).clone()
        };
        let current = crate::scale::to_scale(&paths, &served);
        let Some(mut wanted) = f(&current)? else {
            return Ok(current);
        };
        // Admission webhooks see the Scales (autoscaling/v1, subResource
        // scale), as the server admits a `/scale` write.
        let (ns_of, _) = Self::obj_key(res, ns, name);
        let mut point = opts.point(res, "UPDATE", &ns_of, name, Some(&view));
        point.scale = Some(&paths);
        webhook::mutation_point(self, &point, Some(&mut wanted))?;
        if let Some(rv) = meta_str(&wanted, "resourceVersion")
            && !rv.is_empty()
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(res, name));
        }
        let replicas = crate::scale::replicas(name, &wanted)?;
        let mut new = served;
        crate::scale::set_replicas(&paths, &mut new, replicas);
        let new = self.prepare_update(res, &view, new, opts, true)?;
        let key = Self::obj_key(res, ns, name);
        let stored = self.commit_update(res, key, old, &view, new, opts)?;
        let served = if res.needs_conversion() {
            crate::resources::to_served(res, &stored)
        } else {
            (*stored).clone()
        };
        Ok(crate::scale::to_scale(&paths, &served))
    }

    pub(crate) fn patch(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &Value,
        opts: &WriteOpts,
    ) -> ApiResult<(Arc<Value>, bool)> {
        let key = Self::obj_key(res, ns, name);
        let old = self.lookup(&res.storage_key(), &key);
        let map_err = |e: patch::PatchError| -> ApiError {
            match e {
                patch::PatchError::Conflict(c) => {
                    let mut d = Map::new();
                    d.insert("name".into(), json!(name));
                    if !res.group.is_empty() {
                        d.insert("group".into(), json!(res.group));
                    }
                    d.insert("kind".into(), json!(res.plural));
                    d.insert("causes".into(), Value::Array(c.causes()));
                    ApiError::conflict_raw(c.to_string(), Value::Object(d))
                }
                patch::PatchError::Unsupported(m) => ApiError::new(415, "UnsupportedMediaType", m),
                patch::PatchError::Malformed(m) => ApiError::bad_request(m),
                patch::PatchError::Invalid(m) => ApiError::unprocessable(m),
            }
        };
        let PatchKind::Apply { force } = kind else {
            let Some(old) = old else {
                return Err(ApiError::not_found(res, name));
            };
            let view = webhook::conversion::view(self, res, &old, &opts.webhooks)?;
            let served = if res.needs_conversion() {
                crate::resources::to_served(res, &view)
            } else {
                (*view).clone()
            };
            let patched = match kind {
                PatchKind::Merge => {
                    if !body.is_object() {
                        return Err(ApiError::bad_request(
                            "json: cannot unmarshal non-object into Go value of type map[string]interface {}",
                        ));
                    }
                    let mut served = served;
                    patch::merge_patch_in_place(&mut served, body);
                    served
                }
                PatchKind::Json => patch::json_patch(&served, body).map_err(map_err)?,
                PatchKind::Strategic => {
                    if !res.builtin {
                        return Err(ApiError::unsupported_media(
                            "application/strategic-merge-patch+json",
                        ));
                    }
                    patch::strategic_merge_patch(&served, body, res.type_info()).map_err(map_err)?
                }
                PatchKind::Apply { .. } => unreachable!("handled above"),
            };
            // A patch carrying a resourceVersion is a precondition.
            if let Some(rv) = meta_str(&patched, "resourceVersion")
                && !rv.is_empty()
                && Some(rv) != meta_str(&old, "resourceVersion")
            {
                return Err(ApiError::conflict(res, name));
            }
            if meta_str(&patched, "name").is_some_and(|n| n != name) {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta_str(&patched, "name").unwrap_or_default()
                )));
            }
            let new = self.prepare_update(res, &view, patched, opts, true)?;
            return Ok((self.commit_update(res, key, old, &view, new, opts)?, false));
        };
        // Server-side apply.
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a YAML or JSON object",
            ));
        }
        if let Some(bn) = meta_str(body, "name")
            && bn != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({bn}) does not match the name on the URL ({name})"
            )));
        }
        if opts.manager.is_none() {
            return Err(ApiError::bad_request(
                "PATCH, fieldManager is required for apply requests",
            ));
        }
        self.check_typed_patch(res, ns, name, body)?;
        let manager = patch::Manager {
            name: opts.manager.clone().unwrap_or_default(),
            operation: patch::Operation::Apply,
            api_version: res.api_version(),
            subresource: opts.subresource.clone(),
            time: Utc::now(),
        };
        match old {
            // The status subresource never creates: the apiserver's status
            // REST updates with `forceAllowCreate = false` (NotFound).
            None if opts.subresource.is_some() => Err(ApiError::not_found(res, name)),
            None => {
                let mut applied =
                    patch::apply(None, body, &manager, force, res.type_info()).map_err(map_err)?;
                meta_mut(&mut applied).insert("name".into(), json!(name));
                webhook::mutation_point(
                    self,
                    &opts.point(res, "CREATE", &key.0, name, None),
                    Some(&mut applied),
                )?;
                crate::resources::to_storage(res, &mut applied);
                set_type(&mut applied, res);
                {
                    let m = meta_mut(&mut applied);
                    m.insert("name".into(), json!(name));
                }
                let key = self.prepare_create(res, ns, &mut applied, opts.field_validation)?;
                let key = self.admit_created(res, key, &mut applied, opts)?;
                if opts.dry_run {
                    return Ok((Arc::new(applied), true));
                }
                fits_in_etcd(&applied)?;
                let sk = res.storage_key();
                Ok((self.persist(&sk, key, None, applied), true))
            }
            Some(old) => {
                let view = webhook::conversion::view(self, res, &old, &opts.webhooks)?;
                let served = if res.needs_conversion() {
                    crate::resources::to_served(res, &view)
                } else {
                    (*view).clone()
                };
                let applied = if opts.subresource.as_deref() == Some("status") {
                    // Scope the apply to what /status may change.
                    let mut live = served.clone();
                    let mut body = body.clone();
                    if let Some(o) = live.as_object_mut() {
                        o.retain(|k, _| {
                            k == "apiVersion" || k == "kind" || k == "metadata" || k == "status"
                        });
                    }
                    if let Some(o) = body.as_object_mut() {
                        o.retain(|k, _| {
                            k == "apiVersion" || k == "kind" || k == "metadata" || k == "status"
                        });
                    }
                    patch::apply(Some(&live), &body, &manager, force, res.type_info())
                        .map_err(map_err)?
                } else {
                    patch::apply(Some(&served), body, &manager, force, res.type_info())
                        .map_err(map_err)?
                };
                let new = self.prepare_update(res, &view, applied, opts, false)?;
                Ok((self.commit_update(res, key, old, &view, new, opts)?, false))
            }
        }
    }

    // ----- deletes -----------------------------------------------------

    pub(crate) fn delete(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<Deleted> {
        let key = Self::obj_key(res, ns, name);
        let sk = res.storage_key();
        let obj = self
            .lookup(&sk, &key)
            .ok_or_else(|| ApiError::not_found(res, name))?;
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta_str(&obj, "uid")
        {
            return Err(ApiError::conflict_msg(
                res,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&obj, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && Some(rv.as_str()) != meta_str(&obj, "resourceVersion")
        {
            return Err(ApiError::conflict_msg(
                res,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&obj, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        if res.builtin
            && res.kind == "Namespace"
            && ["default", "kube-system", "kube-public"].contains(&name)
        {
            return Err(ApiError::forbidden(
                res,
                name,
                "this namespace may not be deleted",
            ));
        }
        // Admission sees the object at the request's version (converted by
        // a CRD's conversion webhook for a DELETE of the API).
        let view = match &opts.webhooks {
            webhook::Pass::Run(_) => webhook::conversion::view(self, res, &obj, &opts.webhooks)?,
            webhook::Pass::Off => obj.clone(),
        };
        let point = opts.point(res, &key.0, &key.1, Some(&view));
        webhook::mutation_point(self, &point, None)?;
        if !opts.webhooks.validated() {
            self.admit(
                res,
                "DELETE",
                &key,
                None,
                None,
                Some(&view),
                opts.dry_run,
                opts.user.as_ref(),
            )?;
        }
        webhook::validation_point(self, &point, None)?;
        if opts.dry_run {
            let gone = !is_deleting(&obj) && finalizers(&obj).is_empty();
            return Ok(Deleted { obj, gone });
        }
        Ok(self.delete_stored(res, &sk, key, obj, opts.propagation))
    }

    /// Deletes a stored object: marks it when finalizers remain, else removes it.
    fn delete_stored(
        &mut self,
        res: &ResourceInfo,
        sk: &StorageKey,
        key: ObjKey,
        obj: Arc<Value>,
        propagation: Option<Propagation>,
    ) -> Deleted {
        let mut fins = finalizers(&obj);
        let policy = propagation.unwrap_or_default();
        match policy {
            Propagation::Foreground if !fins.iter().any(|f| f == FG) => fins.push(FG.into()),
            Propagation::Orphan if !fins.iter().any(|f| f == ORPHAN) => fins.push(ORPHAN.into()),
            _ => {}
        }
        let is_ns = res.builtin && res.kind == "Namespace";
        let is_crd = **sk == *CRD_SK;
        if is_crd && !fins.iter().any(|f| f == CRD_CLEANUP) && !is_deleting(&obj) {
            fins.push(CRD_CLEANUP.into());
        }
        let ns_pending = is_ns
            && obj
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        if fins.is_empty() && !ns_pending {
            let gone = self.remove(sk, &key, None);
            return Deleted {
                obj: gone,
                gone: true,
            };
        }
        let mut new = (*obj).clone();
        let first = !is_deleting(&obj);
        set_finalizers(&mut new, &fins);
        if first {
            let m = meta_mut(&mut new);
            m.insert("deletionTimestamp".into(), Value::String(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if res.generation.maintained() {
                let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
                m.insert("generation".into(), json!(g + 1));
            }
            if is_ns && let Some(o) = new.as_object_mut() {
                o.insert("status".into(), json!({"phase": "Terminating"}));
            }
        }
        if is_crd {
            let name = key.1.clone();
            if let Err(e) =
                self.finish_object(res, &name, &mut new, Some(&obj), FieldValidation::Ignore)
            {
                tracing::warn!(error = %e, "failed to refresh crd status");
            }
        }
        let uid = meta_str(&obj, "uid").unwrap_or_default().to_string();
        let out = if new == *obj {
            obj
        } else {
            self.persist(sk, key.clone(), Some(obj), new)
        };
        let fins = finalizers(&out);
        if fins.iter().any(|f| f == FG) {
            self.work.push_back(Work::Foreground(uid.clone()));
        }
        if fins.iter().any(|f| f == ORPHAN) {
            self.work.push_back(Work::Orphan(uid));
        }
        if is_ns {
            if first {
                self.ns_due
                    .insert(key.1.clone(), std::time::Instant::now() + self.ns_delay);
            }
            self.work.push_back(Work::Namespace(key.1.clone()));
        }
        if is_crd {
            self.work.push_back(Work::Crd(key.1.clone()));
        }
        Deleted {
            gone: false,
            obj: out,
        }
    }

    /// Internal delete by reference: the garbage collector's and the
    /// namespace controller's (`actor`; queued for admission when the
    /// cluster has any, see `gc`) and the CRD cleanup's (`None`: the
    /// apiextensions finalizer deletes through the storage, unadmitted).
    fn delete_ref(&mut self, r: &ObjRef, propagation: Propagation, actor: Option<gc::Actor>) {
        let Some(obj) = self.lookup_ref(r) else {
            return;
        };
        let Some(res) = self.info_for(&r.sk) else {
            return;
        };
        let key = (r.ns.clone(), r.name.clone());
        let fins = finalizers(&obj);
        let already = is_deleting(&obj)
            && match propagation {
                Propagation::Foreground => fins.iter().any(|f| f == FG),
                Propagation::Orphan => fins.iter().any(|f| f == ORPHAN),
                Propagation::Background => true,
            };
        if already {
            return;
        }
        if let Some(actor) = actor
            && self.deletes_are_admitted()
        {
            self.queue_delete(&r.sk, &obj, propagation, actor);
            return;
        }
        self.delete_stored(&res, &r.sk, key, obj, Some(propagation));
    }

    /// Rewrites a stored object through `f` (finalizer and ownerRef edits).
    fn edit_ref(&mut self, r: &ObjRef, f: impl FnOnce(&mut Value)) {
        let Some(old) = self.lookup_ref(r) else {
            return;
        };
        let mut new = (*old).clone();
        f(&mut new);
        if new == *old {
            return;
        }
        let key = (r.ns.clone(), r.name.clone());
        self.persist(&r.sk.clone(), key, Some(old), new);
    }

    fn remove_finalizer(&mut self, r: &ObjRef, fin: &str) {
        self.edit_ref(r, |obj| {
            let f: Vec<String> = finalizers(obj).into_iter().filter(|x| x != fin).collect();
            set_finalizers(obj, &f);
        });
    }

    fn strip_owner(&mut self, r: &ObjRef, owner: &str) {
        self.edit_ref(r, |obj| {
            let m = meta_mut(obj);
            if let Some(refs) = m.get_mut("ownerReferences").and_then(Value::as_array_mut) {
                refs.retain(|x| x.get("uid").and_then(Value::as_str) != Some(owner));
                if refs.is_empty() {
                    m.remove("ownerReferences");
                }
            }
        });
    }

    /// Runs the controller-like reactions until nothing is left to do.
    pub(crate) fn settle(&mut self) {
        let mut guard = 0usize;
        while let Some(w) = self.work.pop_front() {
            guard += 1;
            if guard > 1_000_000 {
                tracing::error!("failed to settle store: too many follow-up actions");
                self.work.clear();
                break;
            }
            match w {
                Work::Removed {
                    uid,
                    ns,
                    sk,
                    owners,
                } => {
                    if let Some(deps) = self.dependents.get(&uid) {
                        for d in deps.clone() {
                            self.work.push_back(Work::Dangling(d));
                        }
                    }
                    for o in owners {
                        if let Some(r) = self.uids.get(&o).cloned()
                            && let Some(owner) = self.lookup_ref(&r)
                            && finalizers(&owner).iter().any(|f| f == FG)
                        {
                            self.work.push_back(Work::Foreground(o));
                        }
                    }
                    if !ns.is_empty() && self.namespace_obj(&ns).is_some_and(|n| is_deleting(&n)) {
                        self.work.push_back(Work::Namespace(ns));
                    }
                    if let Some((group, plural)) = sk.split_once('/')
                        && !group.is_empty()
                    {
                        let crd = format!("{plural}.{group}");
                        if self
                            .lookup(&Arc::from(CRD_SK), &(String::new(), crd.clone()))
                            .is_some_and(|c| is_deleting(&c))
                        {
                            self.work.push_back(Work::Crd(crd));
                        }
                    }
                }
                Work::Dangling(r) => {
                    let Some(obj) = self.lookup_ref(&r) else {
                        continue;
                    };
                    let owners = owner_uids(&obj);
                    let missing: Vec<String> = owners
                        .iter()
                        .filter(|o| !self.uids.contains_key(*o))
                        .cloned()
                        .collect();
                    if missing.is_empty() {
                        continue;
                    }
                    if missing.len() == owners.len() {
                        if !is_deleting(&obj) {
                            self.delete_ref(&r, Propagation::Background, Some(gc::Actor::Dangling));
                        }
                    } else {
                        for m in missing {
                            self.strip_owner(&r, &m);
                        }
                    }
                }
                Work::Foreground(owner_uid) => {
                    let Some(or) = self.uids.get(&owner_uid).cloned() else {
                        continue;
                    };
                    let Some(owner) = self.lookup_ref(&or) else {
                        continue;
                    };
                    if !is_deleting(&owner) || !finalizers(&owner).iter().any(|f| f == FG) {
                        continue;
                    }
                    let deps: Vec<ObjRef> = self
                        .dependents
                        .get(&owner_uid)
                        .map(|s| s.iter().cloned().collect())
                        .unwrap_or_default();
                    for d in &deps {
                        let has_deps = self
                            .lookup_ref(d)
                            .and_then(|o| meta_str(&o, "uid").map(str::to_string))
                            .is_some_and(|u| self.dependents.contains_key(&u));
                        let policy = if has_deps {
                            Propagation::Foreground
                        } else {
                            Propagation::Background
                        };
                        self.delete_ref(d, policy, Some(gc::Actor::Foreground(owner_uid.clone())));
                    }
                    let blocking = self
                        .dependents
                        .get(&owner_uid)
                        .map(|s| {
                            s.iter().any(|d| {
                                self.lookup_ref(d).is_some_and(|o| {
                                    meta(&o)
                                        .and_then(|m| m.get("ownerReferences"))
                                        .and_then(Value::as_array)
                                        .is_some_and(|refs| {
                                            refs.iter().any(|x| {
                                                x.get("uid").and_then(Value::as_str)
                                                    == Some(owner_uid.as_str())
                                                    && x.get("blockOwnerDeletion")
                                                        .and_then(Value::as_bool)
                                                        == Some(true)
                                            })
                                        })
                                })
                            })
                        })
                        .unwrap_or(false);
                    if !blocking {
                        self.remove_finalizer(&or, FG);
                    }
                }
                Work::Orphan(owner_uid) => {
                    let Some(or) = self.uids.get(&owner_uid).cloned() else {
                        continue;
                    };
                    let Some(owner) = self.lookup_ref(&or) else {
                        continue;
                    };
                    if !is_deleting(&owner) || !finalizers(&owner).iter().any(|f| f == ORPHAN) {
                        continue;
                    }
                    let deps: Vec<ObjRef> = self
                        .dependents
                        .get(&owner_uid)
                        .map(|s| s.iter().cloned().collect())
                        .unwrap_or_default();
                    for d in &deps {
                        self.strip_owner(d, &owner_uid);
                    }
                    self.remove_finalizer(&or, ORPHAN);
                }
                Work::Namespace(ns) => self.namespace_controller(&ns),
                Work::Crd(name) => {
                    let crd_sk: StorageKey = Arc::from(CRD_SK);
                    let Some(crd) = self.lookup(&crd_sk, &(String::new(), name.clone())) else {
                        continue;
                    };
                    if !is_deleting(&crd) {
                        continue;
                    }
                    let Some(cr_sk) = self.registry.get_crd_storage_key(&name) else {
                        self.remove_finalizer(
                            &ObjRef {
                                sk: crd_sk,
                                ns: String::new(),
                                name,
                            },
                            CRD_CLEANUP,
                        );
                        continue;
                    };
                    let refs: Vec<ObjRef> = self
                        .tables
                        .get(&cr_sk)
                        .map(|t| {
                            t.objects
                                .iter()
                                .filter(|(_, o)| !is_deleting(o))
                                .map(|((ns, n), _)| ObjRef {
                                    sk: cr_sk.clone(),
                                    ns: ns.clone(),
                                    name: n.clone(),
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    for r in &refs {
                        self.delete_ref(r, Propagation::Background, None);
                    }
                    let left = self.tables.get(&cr_sk).map_or(0, |t| t.objects.len());
                    if left == 0 {
                        self.remove_finalizer(
                            &ObjRef {
                                sk: crd_sk,
                                ns: String::new(),
                                name,
                            },
                            CRD_CLEANUP,
                        );
                    }
                }
            }
        }
    }

    /// One pass of the namespace controller over a terminating namespace:
    /// deletes its contents, reports progress in the status conditions,
    /// and drops the `kubernetes` finalizer (removing the namespace) once
    /// nothing is left. Waits until the namespace's start time (the delay
    /// after its DELETE), as the real controller answers asynchronously.
    fn namespace_controller(&mut self, ns: &str) {
        let Some(nso) = self.namespace_obj(ns) else {
            self.ns_due.remove(ns);
            return;
        };
        if !is_deleting(&nso) {
            self.ns_due.remove(ns);
            return;
        }
        if self
            .ns_due
            .get(ns)
            .is_some_and(|t| *t > std::time::Instant::now())
        {
            return;
        }
        let mut to_delete = Vec::new();
        for (sk, t) in &self.tables {
            for ((ons, name), o) in t.objects.range((ns.to_string(), String::new())..) {
                if ons != ns {
                    break;
                }
                if !is_deleting(o) {
                    to_delete.push(ObjRef {
                        sk: sk.clone(),
                        ns: ns.to_string(),
                        name: name.clone(),
                    });
                }
            }
        }
        for r in &to_delete {
            self.delete_ref(
                r,
                Propagation::Background,
                Some(gc::Actor::Namespace(ns.to_string())),
            );
        }
        // What is left: objects per resource, finalizers per name.
        let mut by_resource: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_finalizer: BTreeMap<String, usize> = BTreeMap::new();
        for (sk, t) in &self.tables {
            let n = t
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((o, _), _)| o == ns)
                .inspect(|(_, o)| {
                    for f in finalizers(o) {
                        *by_finalizer.entry(f).or_default() += 1;
                    }
                })
                .count();
            if n > 0 {
                // GroupResource.String(): `resource.group`, `resource` for core.
                let gr = match sk.split_once('/') {
                    Some(("", plural)) => plural.to_string(),
                    Some((group, plural)) => format!("{plural}.{group}"),
                    None => sk.to_string(),
                };
                *by_resource.entry(gr).or_default() += n;
            }
        }
        let r = ObjRef {
            sk: storage_key_of("", "namespaces"),
            ns: String::new(),
            name: ns.to_string(),
        };
        let now = now_rfc3339();
        let remaining = (!by_resource.is_empty()).then(|| {
            by_resource
                .iter()
                .map(|(gr, n)| format!("{gr} has {n} resource instances"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let fins = (!by_finalizer.is_empty()).then(|| {
            by_finalizer
                .iter()
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let failed = self.gc.namespace_errors(ns);
        let conditions = namespace_conditions(&failed, remaining.as_deref(), fins.as_deref());
        self.edit_ref(&r, |o| {
            let old: Vec<Value> = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let merged: Vec<Value> = conditions
                .into_iter()
                .map(|(ty, status, reason, message)| {
                    // The transition time moves only when the status does.
                    let prev = old.iter().find(|c| c["type"] == ty);
                    let time = match prev {
                        Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
                        _ => json!(now),
                    };
                    json!({"type": ty, "status": status, "lastTransitionTime": time,
                           "reason": reason, "message": message})
                })
                .collect();
            if let Some(st) = o.get_mut("status").and_then(Value::as_object_mut) {
                st.insert("conditions".into(), Value::Array(merged));
            }
            if by_resource.is_empty()
                && let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.remove("finalizers");
            }
        });
        if by_resource.is_empty()
            && let Some(n) = self.lookup_ref(&r)
            && !has_pending_finalizers(&n)
        {
            self.ns_due.remove(ns);
            self.remove(&r.sk.clone(), &(String::new(), ns.to_string()), None);
        }
    }

    /// Runs the namespace controller for namespaces whose start time has come.
    pub(crate) fn run_due_namespaces(&mut self) {
        let now = std::time::Instant::now();
        let due: Vec<String> = self
            .ns_due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for ns in due {
            self.work.push_back(Work::Namespace(ns));
        }
    }

    /// How long after its DELETE the namespace controller starts on a namespace.
    pub(crate) fn namespace_delay(&self) -> std::time::Duration {
        self.ns_delay
    }

    /// Sets the namespace controller's delay (tests, `/_sim/namespace-delay`).
    pub(crate) fn set_namespace_delay(&mut self, d: std::time::Duration) {
        self.ns_delay = d;
    }

    // ----- reads ---------------------------------------------------------

    /// The objects of a table as they were at `rv` (reconstructed from the
    /// history), restricted to keys in `(after, ns)`.
    fn snapshot_overlay(
        &self,
        sk: &StorageKey,
        rv: u64,
    ) -> ApiResult<BTreeMap<ObjKey, Option<Arc<Value>>>> {
        let mut overlay = BTreeMap::new();
        let compacted = self.compacted_rv(sk);
        if rv < compacted {
            return Err(ApiError::expired(format!(
                "The resourceVersion for the provided list is too old. (requested {rv}, oldest {})",
                compacted + 1
            )));
        }
        let Some(t) = self.tables.get(sk) else {
            return Ok(overlay);
        };
        for ev in t.history.iter().rev() {
            if ev.rv <= rv {
                break;
            }
            overlay.insert(ev.key.clone(), ev.old.clone());
        }
        Ok(overlay)
    }

    pub(crate) fn list(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        label: &LabelSelector,
        field: &FieldSelector,
        opts: &ListOpts,
    ) -> ApiResult<ListResult> {
        let sk = res.storage_key();
        let (snap_rv, start) = match &opts.cont {
            Some(tok) => {
                let (rv, key) = decode_continue(tok).ok_or_else(|| {
                    ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
                })?;
                if rv < self.compacted_rv(&sk) {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                    ));
                }
                (rv, Some(key))
            }
            None => match opts.exact_rv {
                Some(rv) if rv > self.rv => {
                    let mut e = ApiError::new(
                        504,
                        "Timeout",
                        format!("Too large resource version: {rv}, current: {}", self.rv),
                    );
                    e.details = Some(Box::new(
                        json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
                    ));
                    return Err(e);
                }
                Some(rv) => (rv, None),
                None => (self.rv, None),
            },
        };
        let overlay = if snap_rv < self.rv {
            self.snapshot_overlay(&sk, snap_rv)?
        } else {
            BTreeMap::new()
        };
        let empty = BTreeMap::new();
        let objects = self.tables.get(&sk).map_or(&empty, |t| &t.objects);
        let ns_filter: Option<&str> = if res.namespaced { ns } else { None };
        let lower: Bound<ObjKey> = match (&start, ns_filter) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(n)) => Bound::Included((n.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let mut cur = objects.range((lower.clone(), Bound::Unbounded)).peekable();
        let mut ov = overlay.range((lower, Bound::Unbounded)).peekable();
        let limit = opts.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut last_key: Option<ObjKey> = None;
        let mut more = false;
        loop {
            // Merge the two ordered sequences; the overlay wins on equal keys.
            let next: Option<(ObjKey, Option<Arc<Value>>)> = match (cur.peek(), ov.peek()) {
                (None, None) => None,
                (Some((ck, _)), Some((ok, _))) => {
                    if ck < ok {
                        cur.next().map(|(k, v)| (k.clone(), Some(v.clone())))
                    } else if ok < ck {
                        ov.next().map(|(k, v)| (k.clone(), v.clone()))
                    } else {
                        cur.next();
                        ov.next().map(|(k, v)| (k.clone(), v.clone()))
                    }
                }
                (Some(_), None) => cur.next().map(|(k, v)| (k.clone(), Some(v.clone()))),
                (None, Some(_)) => ov.next().map(|(k, v)| (k.clone(), v.clone())),
            };
            let Some((key, val)) = next else { break };
            if let Some(n) = ns_filter
                && key.0 != n
            {
                break;
            }
            let Some(obj) = val else { continue };
            if !label.matches(&obj) || !field.matches(&obj) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                break;
            }
            last_key = Some(key);
            items.push(obj);
        }
        let cont = match (more, last_key) {
            (true, Some(k)) => Some(encode_continue(snap_rv, &k)),
            _ => None,
        };
        Ok(ListResult {
            items,
            rv: snap_rv,
            cont,
        })
    }

    pub(crate) fn watch_start(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        label: &LabelSelector,
        field: &FieldSelector,
        from: Option<u64>,
    ) -> ApiResult<WatchStart> {
        let sk = res.storage_key();
        let current = self.rv;
        let ns_filter = if res.namespaced { ns } else { None };
        let t = self.table(&sk);
        let rx = t.tx.subscribe();
        match from {
            None => {
                let initial: Vec<Arc<Value>> = t
                    .objects
                    .iter()
                    .filter(|((o, _), _)| ns_filter.is_none_or(|n| n == o))
                    .filter(|(_, v)| label.matches(v) && field.matches(v))
                    .map(|(_, v)| v.clone())
                    .collect();
                Ok(WatchStart {
                    initial,
                    replay: Vec::new(),
                    rv: current,
                    rx,
                })
            }
            Some(rv) => {
                if rv < t.compacted_rv {
                    return Err(too_old(rv, t.compacted_rv + 1));
                }
                let replay = t.history.iter().filter(|e| e.rv > rv).cloned().collect();
                Ok(WatchStart {
                    initial: Vec::new(),
                    replay,
                    rv: current,
                    rx,
                })
            }
        }
    }

    /// Replays history after `rv` for a watcher that fell behind its channel.
    pub(crate) fn resync(
        &mut self,
        sk: &StorageKey,
        rv: u64,
    ) -> ApiResult<(Vec<Arc<WatchEvent>>, EventReceiver)> {
        let t = self.table(sk);
        if rv < t.compacted_rv {
            return Err(too_old(rv, t.compacted_rv + 1));
        }
        let rx = t.tx.subscribe();
        Ok((
            t.history.iter().filter(|e| e.rv > rv).cloned().collect(),
            rx,
        ))
    }

    /// Forgets the history: every resourceVersion issued so far becomes too
    /// old to watch from (the counter skips one so that a fresh list's RV
    /// is watchable again).
    pub(crate) fn compact(&mut self) -> u64 {
        self.rv += 1;
        let rv = self.rv;
        self.compacted_floor = rv;
        self.dropped.clear();
        for t in self.tables.values_mut() {
            t.history.clear();
            t.compacted_rv = rv;
        }
        rv
    }

    /// The serialization of `obj` if it is the object persisted last.
    pub(crate) fn cached_bytes(&mut self, obj: &Arc<Value>) -> Option<Bytes> {
        match self.last_written.take() {
            Some((o, b)) if Arc::ptr_eq(&o, obj) => Some(b),
            _ => None,
        }
    }

    pub(crate) fn object_count(&self) -> usize {
        self.tables.values().map(|t| t.objects.len()).sum()
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
