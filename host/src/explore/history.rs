//! Every version of every object a run has seen: what its reconciles read
//! and what its writes answered, by (cluster, group/kind, namespace, name),
//! oldest first. Stale reads are served from it: the version before the
//! one the cache holds now — the plugin's own last write not yet visible,
//! an object before its last change, the old incarnation of an object
//! deleted and recreated under a new UID.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use serde_json::Value;

use crate::action::Resource;
use crate::change::record::{Read, ReadResult};

/// One object's identity across versions.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjKey {
    cluster: String,
    resource: String,
    namespace: Option<String>,
    name: String,
}

/// `group/Kind` of a resource.
#[must_use]
pub fn resource_key(r: &Resource) -> String {
    format!("{}/{}", r.group, r.kind)
}

/// `group/Kind` from an object's apiVersion and kind.
fn object_resource_key(v: &Value) -> String {
    let group = v["apiVersion"]
        .as_str()
        .and_then(|a| a.split_once('/').map(|(g, _)| g))
        .unwrap_or("");
    format!("{group}/{}", v["kind"].as_str().unwrap_or_default())
}

/// An object's resourceVersion as a number (0 when absent).
#[must_use]
pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

impl ObjKey {
    /// The key of `v` read as `resource` in `cluster`.
    #[must_use]
    pub fn of(cluster: &str, resource: &Resource, v: &Value) -> Self {
        Self::named(
            cluster,
            resource,
            v["metadata"]["namespace"].as_str(),
            v["metadata"]["name"].as_str().unwrap_or_default(),
        )
    }

    /// The key of `namespace/name` of `resource` in `cluster`.
    #[must_use]
    pub fn named(cluster: &str, resource: &Resource, namespace: Option<&str>, name: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            resource: resource_key(resource),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// Whether it is of `resource` in `cluster` (and `namespace`, if given).
    #[must_use]
    pub fn within(&self, cluster: &str, resource: &Resource, namespace: Option<&str>) -> bool {
        self.cluster == cluster
            && self.resource == resource_key(resource)
            && (namespace.is_none() || self.namespace.as_deref() == namespace)
    }
}

/// The versions seen.
#[derive(Debug, Default)]
pub struct History {
    versions: Mutex<BTreeMap<ObjKey, Vec<(u64, Value)>>>,
}

impl History {
    fn add(&self, key: ObjKey, v: &Value) {
        let rv = rv_of(v);
        let mut all = self.versions.lock();
        let versions = all.entry(key).or_default();
        if !versions.iter().any(|(r, _)| *r == rv) {
            versions.push((rv, v.clone()));
            versions.sort_by_key(|(r, _)| *r);
        }
    }

    /// Records what a reconcile read.
    pub fn record_reads(&self, reads: &[Read]) {
        for read in reads {
            match read {
                Read::Get {
                    cluster,
                    resource,
                    result: ReadResult::Object(Some(o)),
                    ..
                } => self.add(ObjKey::of(cluster, resource, o), o),
                Read::List {
                    cluster,
                    resource,
                    result: ReadResult::Objects(os),
                    ..
                } => {
                    for o in os {
                        self.add(ObjKey::of(cluster, resource, o), o);
                    }
                }
                _ => {}
            }
        }
    }

    /// Records an object a write's answer carried.
    pub fn record_answer(&self, cluster: &str, v: &Value) {
        if v["kind"] == "Status" || v["metadata"]["name"].as_str().is_none() {
            return;
        }
        self.add(
            ObjKey {
                cluster: cluster.to_owned(),
                resource: object_resource_key(v),
                namespace: v["metadata"]["namespace"].as_str().map(str::to_owned),
                name: v["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
            },
            v,
        );
    }

    /// Whether anything was seen at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.versions.lock().is_empty()
    }

    /// The version before `current_rv` (or the last one not after
    /// `now_rv` when the object is absent now); `Some(None)`: it did not
    /// exist then; `None`: nothing is known of it.
    #[must_use]
    pub fn before(&self, key: &ObjKey, current_rv: Option<u64>, now_rv: u64) -> Option<Option<Value>> {
        let all = self.versions.lock();
        let versions = all.get(key)?;
        let eligible = versions.iter().filter(|(rv, _)| match current_rv {
            Some(cur) => *rv < cur,
            None => *rv <= now_rv,
        });
        Some(eligible.last().map(|(_, v)| v.clone()))
    }

    /// Objects of `resource` in `cluster` (and `namespace`) known here but
    /// not in `present`, each at its last version not after `now_rv`.
    #[must_use]
    pub fn gone(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        present: &[ObjKey],
        now_rv: u64,
    ) -> Vec<Value> {
        let all = self.versions.lock();
        all.iter()
            .filter(|(k, _)| k.within(cluster, resource, namespace) && !present.contains(k))
            .filter_map(|(_, vs)| vs.iter().rev().find(|(rv, _)| *rv <= now_rv).map(|(_, v)| v.clone()))
            .collect()
    }
}

/// Whether some object `reads` returned had been seen before in another
/// version, or is the only version known (a stale cache would not have it
/// yet): a stale read there would differ from the fresh one.
#[must_use]
pub fn stale_differs(history: &History, reads: &[Read]) -> bool {
    let all = history.versions.lock();
    reads.iter().any(|read| {
        let (cluster, resource, objs): (&str, &Resource, Vec<&Value>) = match read {
            Read::Get {
                cluster,
                resource,
                result: ReadResult::Object(Some(o)),
                ..
            } => (cluster, resource, vec![o]),
            Read::List {
                cluster,
                resource,
                result: ReadResult::Objects(os),
                ..
            } => (cluster, resource, os.iter().collect()),
            _ => return false,
        };
        objs.into_iter().any(|o| {
            all.get(&ObjKey::of(cluster, resource, o))
                .is_some_and(|vs| vs.first().is_some_and(|(first, _)| *first <= rv_of(o)))
        })
    })
}
