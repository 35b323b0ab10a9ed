//! The world's objects: where each lives, how actions change them (as the
//! API server would: resourceVersions, finalizers, garbage collection,
//! server-side apply field ownership), and injected write failures.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::action::{Action, ObjectRef, PatchType, Propagation};
use crate::context::ClusterInfo;
use crate::error::ReadError;
use crate::registration::Registration;
use crate::resource::ResourceType;
use rekon_rules::LabelSelector;

use super::error::{LogLine, TestkitError};

/// Where an object lives: cluster, group, kind, namespace, name. The version
/// is not part of the key (one object, many versions).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Key {
    pub(super) cluster: String,
    pub(super) group: String,
    pub(super) kind: String,
    pub(super) namespace: Option<String>,
    pub(super) name: String,
}

impl Key {
    pub(super) fn of(target: &ObjectRef) -> Self {
        Self {
            cluster: target.cluster.clone(),
            group: target.resource.group.clone(),
            kind: target.resource.kind.clone(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
        }
    }

    pub(super) fn of_json(cluster: &str, obj: &Value) -> Result<Self, TestkitError> {
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
pub(super) struct Stored {
    pub(super) object: Value,
    /// Last applied configuration per field manager (`<manager>` or
    /// `<manager>/status`), to remove fields a manager stops applying.
    pub(super) applied: BTreeMap<String, Value>,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) clusters: Vec<ClusterInfo>,
    pub(super) objects: BTreeMap<Key, Stored>,
    pub(super) time: Timestamp,
    pub(super) next_rv: u64,
    pub(super) next_uid: u64,
    pub(super) logs: Vec<LogLine>,
    pub(super) events: Vec<crate::action::EventAction>,
    /// Reads outside this registration fail with `NotWatched` (set while a
    /// plugin runs, as the host does).
    pub(super) reads: Option<Registration>,
    /// Injected write failures.
    pub(super) faults: Vec<Fault>,
    /// The plugin's settings (JSON), as the host would give them.
    pub(super) settings: Option<String>,
    /// What the plugin's `register` declared as its settings' schema.
    pub(super) settings_schema: Option<String>,
}

/// An injected write failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fault {
    /// Every write to the cluster, events included.
    Cluster(String),
    /// Every write to one object (not events about it).
    Object(Key),
}

pub(super) fn check_permission(
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
    /// Five characters of the API server's `generateName` alphabet, from a
    /// counter (a test's world names objects the same way every run).
    fn suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut n = self.next_uid;
        self.next_uid += 1;
        (0..5)
            .map(|_| {
                let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                n /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    pub(super) fn bump(&mut self) -> u64 {
        let rv = self.next_rv;
        self.next_rv += 1;
        rv
    }

    /// Sets uid and creationTimestamp on a new object if missing.
    pub(super) fn stamp_new(&mut self, obj: &mut Value) {
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

    pub(super) fn engaged(&self, cluster: &str) -> bool {
        self.clusters.iter().any(|c| c.name == cluster)
    }

    pub(super) fn primary(&self) -> Option<&str> {
        self.clusters
            .iter()
            .find(|c| c.primary)
            .map(|c| c.name.as_str())
    }

    pub(super) fn matching<'a>(
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

    pub(super) fn check_read(
        &self,
        cluster: &str,
        resource: &ResourceType,
    ) -> Result<(), ReadError> {
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
    pub(super) fn injected_failure(&self, action: &Action) -> Option<String> {
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
    pub(super) fn perform(&mut self, plugin: &str, action: &Action) -> Result<bool, TestkitError> {
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
                let mut obj = c.object.clone();
                // Named by the server: the prefix and five characters, as
                // the API server does (deterministic here: from a counter).
                let generated = c.generate_name().map(|p| format!("{p}{}", self.suffix()));
                if let Some(name) = &generated
                    && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
                {
                    meta.insert("name".into(), Value::String(name.clone()));
                }
                let key = Key::of_json(&c.cluster, &obj)?;
                if self.objects.contains_key(&key) {
                    return Ok(false);
                }
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
    pub(super) fn replace(&mut self, key: &Key, mut new: Value) -> bool {
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

    pub(super) fn finish_deletion_if_released(&mut self, key: &Key) {
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

    pub(super) fn remove_finalizer(&mut self, key: &Key, finalizer: &str) -> bool {
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
    pub(super) fn delete(&mut self, key: &Key, propagation: Option<Propagation>) -> bool {
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
    pub(super) fn remove_with_dependents(&mut self, key: &Key, propagation: Option<Propagation>) {
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
    pub(super) fn server_side_apply(
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

pub(super) fn labels_match(selector: &LabelSelector, obj: &Value) -> bool {
    let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
    selector.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
}

pub(super) fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

pub(super) fn owned_by(obj: &Value, uid: &str) -> bool {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
        })
}

pub(super) fn set_status(obj: &mut Value, status: Option<Value>) {
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

pub(super) fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

pub(super) fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
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
pub(super) fn leaf_paths(v: &Value, prefix: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
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

pub(super) fn remove_path(v: &mut Value, path: &[String]) {
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

pub(super) fn deep_merge(target: &mut Value, patch: &Value) {
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

pub(super) fn format_time(t: Timestamp) -> String {
    // RFC 3339 with second precision, as Kubernetes writes metav1.Time.
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
