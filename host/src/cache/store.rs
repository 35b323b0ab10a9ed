//! The in-memory store of one (cluster, resource) cache, with indexes.
//!
//! Our own map rather than kube-runtime's `reflector::Store` because we need
//! (a) the serialized JSON of each object kept once, so a plugin read is a
//! string clone and not a re-serialization, (b) a label index so the
//! `owner.*=…` lists plugins do for their children are not scans, (c) a
//! controller-owner-UID index, (d) namespace range queries, and (e) a diff of
//! a re-list against the previous contents so subscribers see exactly the
//! changes a dropped watch or a 410 made them miss.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::DynamicObject;
use rekon_rules::LabelSelector;

use super::raw::RawObject;

/// Identity of an object inside one cache: namespace ("" at cluster scope)
/// and name.
///
/// Shared strings: the store's indexes (one entry per label and per
/// controller owner), inboxes, re-list diffs and queues each hold a copy of
/// the key, and a clone is a reference count, not two allocations.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

/// The empty namespace, allocated once.
fn no_namespace() -> Arc<str> {
    static EMPTY: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));
    Arc::clone(&EMPTY)
}

impl ObjectKey {
    /// Key of `name` in `namespace` (`None` = cluster scope).
    #[must_use]
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self {
            namespace: namespace
                .filter(|ns| !ns.is_empty())
                .map_or_else(no_namespace, Arc::from),
            name: Arc::from(name),
        }
    }

    /// The namespace as an option.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        (!self.namespace.is_empty()).then_some(&*self.namespace)
    }
}

/// One cached object: the metadata the engine needs, and the JSON plugins read.
#[derive(Debug, Clone)]
pub struct CachedObject {
    /// Namespace and name.
    pub key: ObjectKey,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The owner reference with `controller: true`, if any.
    pub controller: Option<OwnerReference>,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The whole object as JSON (managedFields stripped).
    pub json: Arc<str>,
}

impl CachedObject {
    /// Build from a `DynamicObject` (kube's parsed tree; the engine's own
    /// watches and writes decode straight to text: [`Self::from_raw`]).
    /// `types` fills in apiVersion/kind.
    ///
    /// # Errors
    /// When the object cannot be serialized.
    pub fn from_dynamic(
        mut obj: DynamicObject,
        types: &kube::core::TypeMeta,
    ) -> Result<Self, serde_json::Error> {
        obj.types = Some(types.clone());
        obj.metadata.managed_fields = None;
        let json = serde_json::to_string(&obj)?;
        Ok(Self::from_parts(obj.metadata, json))
    }

    /// Build from a watched or listed object (decoded straight to text:
    /// [`RawObject`]). `types` fills in apiVersion/kind, which list
    /// responses omit on items.
    ///
    /// # Errors
    /// When the metadata cannot be serialized.
    pub fn from_raw(
        obj: RawObject,
        types: &kube::core::TypeMeta,
    ) -> Result<Self, serde_json::Error> {
        let (meta, json) = obj.into_json(types)?;
        Ok(Self::from_parts(meta, json))
    }

    fn from_parts(meta: ObjectMeta, json: String) -> Self {
        Self {
            key: ObjectKey::new(
                meta.namespace.as_deref(),
                meta.name.as_deref().unwrap_or_default(),
            ),
            uid: meta.uid,
            resource_version: meta.resource_version,
            labels: meta.labels.unwrap_or_default(),
            controller: meta
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .find(|r| r.controller == Some(true)),
            finalizers: meta.finalizers.unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
            json: json.into(),
        }
    }
}

/// Objects keyed by namespace and name, with label and owner indexes.
#[derive(Debug, Default)]
pub struct Store {
    objects: BTreeMap<ObjectKey, Arc<CachedObject>>,
    by_label: HashMap<(String, String), BTreeSet<ObjectKey>>,
    /// Objects per label key (any value): `list` by `k` (exists) selectors.
    by_key: HashMap<String, BTreeSet<ObjectKey>>,
    by_owner_uid: HashMap<String, BTreeSet<ObjectKey>>,
    /// resourceVersions at which recently removed objects were last seen,
    /// so a late write response cannot resurrect a deleted object. Bounded
    /// to [`TOMBSTONES`] entries (oldest dropped first).
    tombstones: HashMap<ObjectKey, u64>,
    tombstone_order: std::collections::VecDeque<ObjectKey>,
}

/// How many removed objects' last resourceVersions a store remembers.
pub const TOMBSTONES: usize = 4096;

/// What an upsert did.
#[derive(Debug, PartialEq, Eq)]
pub enum Upsert {
    /// New object, or a new resourceVersion.
    Changed,
    /// Same resourceVersion as cached (a re-list of an unchanged object).
    Unchanged,
    /// Older than what is cached (or than its recorded deletion): ignored,
    /// so a late watch event never rolls back a write the host already saw.
    Stale,
}

/// A resourceVersion as a number, when it is one. Kubernetes says they are
/// opaque, but every etcd-backed server issues increasing integers; where one
/// does not parse, no order is assumed and the newer arrival wins.
fn rv_number(rv: Option<&str>) -> Option<u64> {
    rv.and_then(|v| v.parse().ok())
}

impl Store {
    /// Number of objects.
    #[must_use]
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the store is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Insert or replace an object, unless the cached one (or its recorded
    /// deletion) is newer.
    pub fn upsert(&mut self, obj: Arc<CachedObject>) -> Upsert {
        let key = obj.key.clone();
        let new_rv = rv_number(obj.resource_version.as_deref());
        if let Some(old) = self.objects.get(&key) {
            if old.resource_version.is_some() && old.resource_version == obj.resource_version {
                return Upsert::Unchanged;
            }
            if let (Some(old_rv), Some(new_rv)) =
                (rv_number(old.resource_version.as_deref()), new_rv)
                && new_rv < old_rv
            {
                return Upsert::Stale;
            }
            let old = Arc::clone(old);
            self.unindex(&old);
        } else if let (Some(gone), Some(new_rv)) = (self.tombstones.get(&key), new_rv)
            && new_rv <= *gone
        {
            return Upsert::Stale;
        }
        self.index(&obj);
        self.objects.insert(key, obj);
        Upsert::Changed
    }

    /// Remove an object, returning what was cached.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Arc<CachedObject>> {
        let old = self.objects.remove(key)?;
        self.unindex(&old);
        Some(old)
    }

    /// Remove an object that was deleted at `resource_version` (the deleted
    /// object's last version): it is remembered so that an older state
    /// arriving later (a write response racing the watch) is refused.
    pub fn remove_deleted(
        &mut self,
        key: &ObjectKey,
        resource_version: Option<&str>,
    ) -> Option<Arc<CachedObject>> {
        if let Some(rv) = rv_number(resource_version) {
            if self.tombstones.insert(key.clone(), rv).is_none() {
                self.tombstone_order.push_back(key.clone());
            }
            while self.tombstone_order.len() > TOMBSTONES {
                if let Some(old) = self.tombstone_order.pop_front() {
                    self.tombstones.remove(&old);
                }
            }
        }
        self.remove(key)
    }

    /// The object at `key`.
    #[must_use]
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<CachedObject>> {
        self.objects.get(key).cloned()
    }

    /// Every key (for re-list diffs and all-primaries mapping).
    pub fn keys(&self) -> impl Iterator<Item = &ObjectKey> {
        self.objects.keys()
    }

    /// Every object.
    pub fn objects(&self) -> impl Iterator<Item = &Arc<CachedObject>> {
        self.objects.values()
    }

    /// Objects in `namespace` (all when `None`) matching `selector`. Served
    /// from the narrowest index entry the selector allows (a required
    /// `key=value`, or a required key), never by scanning the store when
    /// the selector requires any label.
    #[must_use]
    pub fn list(
        &self,
        namespace: Option<&str>,
        selector: Option<&LabelSelector>,
    ) -> Vec<Arc<CachedObject>> {
        let in_ns = |k: &ObjectKey| namespace.is_none_or(|ns| *k.namespace == *ns);
        let matches = |o: &CachedObject| selector.is_none_or(|s| s.matches(&o.labels));
        // Narrowest index entry among the required pairs and keys.
        let empty = BTreeSet::new();
        let candidates: Option<&BTreeSet<ObjectKey>> = selector.and_then(|s| {
            let pairs = s.required_pairs().into_iter().map(|(k, v)| {
                self.by_label
                    .get(&(k.to_owned(), v.to_owned()))
                    .unwrap_or(&empty)
            });
            let keys = s
                .required_keys()
                .into_iter()
                .map(|key| self.by_key.get(key).unwrap_or(&empty));
            pairs.chain(keys).min_by_key(|set| set.len())
        });
        match candidates {
            Some(set) => set
                .iter()
                .filter(|k| in_ns(k))
                .filter_map(|k| self.objects.get(k))
                .filter(|o| matches(o))
                .cloned()
                .collect(),
            None => {
                let iter: Box<dyn Iterator<Item = &Arc<CachedObject>>> = match namespace {
                    Some(ns) => Box::new(
                        self.objects
                            .range(ObjectKey::new(Some(ns), "")..)
                            .take_while(move |(k, _)| *k.namespace == *ns)
                            .map(|(_, v)| v),
                    ),
                    None => Box::new(self.objects.values()),
                };
                iter.filter(|o| matches(o)).cloned().collect()
            }
        }
    }

    /// Objects whose controller owner reference has `uid`.
    #[must_use]
    pub fn controlled_by(&self, uid: &str) -> Vec<Arc<CachedObject>> {
        self.by_owner_uid
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|k| self.objects.get(k).cloned())
            .collect()
    }

    fn index(&mut self, obj: &CachedObject) {
        for (k, v) in &obj.labels {
            self.by_label
                .entry((k.clone(), v.clone()))
                .or_default()
                .insert(obj.key.clone());
            self.by_key
                .entry(k.clone())
                .or_default()
                .insert(obj.key.clone());
        }
        if let Some(owner) = &obj.controller {
            self.by_owner_uid
                .entry(owner.uid.clone())
                .or_default()
                .insert(obj.key.clone());
        }
    }

    fn unindex(&mut self, obj: &CachedObject) {
        for (k, v) in &obj.labels {
            let pair = (k.clone(), v.clone());
            if let Some(set) = self.by_label.get_mut(&pair) {
                set.remove(&obj.key);
                if set.is_empty() {
                    self.by_label.remove(&pair);
                }
            }
            if let Some(set) = self.by_key.get_mut(k) {
                set.remove(&obj.key);
                if set.is_empty() {
                    self.by_key.remove(k);
                }
            }
        }
        if let Some(owner) = &obj.controller
            && let Some(set) = self.by_owner_uid.get_mut(&owner.uid)
        {
            set.remove(&obj.key);
            if set.is_empty() {
                self.by_owner_uid.remove(&owner.uid);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    fn parse(s: &str) -> Result<LabelSelector, rekon_rules::ParseError> {
        LabelSelector::parse(s)
    }

    pub(crate) fn obj(
        ns: &str,
        name: &str,
        rv: &str,
        labels: &[(&str, &str)],
    ) -> Arc<CachedObject> {
        Arc::new(CachedObject {
            key: ObjectKey::new((!ns.is_empty()).then_some(ns), name),
            uid: Some(format!("uid-{ns}-{name}")),
            resource_version: Some(rv.to_owned()),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            controller: None,
            finalizers: vec![],
            deleting: false,
            json: Arc::from(format!(r#"{{"metadata":{{"name":"{name}"}}}}"#)),
        })
    }

    #[test]
    fn upsert_detects_unchanged_resource_versions() {
        let mut s = Store::default();
        assert_eq!(s.upsert(obj("a", "x", "1", &[])), Upsert::Changed);
        assert_eq!(s.upsert(obj("a", "x", "1", &[])), Upsert::Unchanged);
        assert_eq!(s.upsert(obj("a", "x", "2", &[])), Upsert::Changed);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn older_states_never_roll_the_store_back() {
        let mut s = Store::default();
        // A write response (rv 7) lands before the watch event of an
        // earlier change (rv 5): the event is stale, the write stays.
        assert_eq!(
            s.upsert(obj("a", "x", "7", &[("k", "new")])),
            Upsert::Changed
        );
        assert_eq!(s.upsert(obj("a", "x", "5", &[("k", "old")])), Upsert::Stale);
        assert_eq!(
            s.get(&ObjectKey::new(Some("a"), "x")).unwrap().labels["k"],
            "new"
        );
        // Deleted at rv 9: a late write response (rv 8) cannot resurrect it;
        // a re-creation (rv 12) can.
        assert!(
            s.remove_deleted(&ObjectKey::new(Some("a"), "x"), Some("9"))
                .is_some()
        );
        assert_eq!(s.upsert(obj("a", "x", "8", &[])), Upsert::Stale);
        assert!(s.is_empty());
        assert_eq!(s.upsert(obj("a", "x", "12", &[])), Upsert::Changed);
        // Versions that are not numbers carry no order: the newer arrival wins.
        assert_eq!(s.upsert(obj("a", "y", "b", &[])), Upsert::Changed);
        assert_eq!(s.upsert(obj("a", "y", "a", &[])), Upsert::Changed);
    }

    #[test]
    fn tombstones_are_bounded() {
        let mut s = Store::default();
        for i in 0..(TOMBSTONES + 10) {
            let name = format!("o{i}");
            s.upsert(obj("a", &name, "1", &[]));
            s.remove_deleted(&ObjectKey::new(Some("a"), &name), Some("2"));
        }
        assert_eq!(s.tombstones.len(), TOMBSTONES);
        assert_eq!(s.tombstone_order.len(), TOMBSTONES);
        // The oldest were forgotten: their old state is accepted again.
        assert_eq!(s.upsert(obj("a", "o0", "1", &[])), Upsert::Changed);
    }

    #[test]
    fn list_by_namespace_and_selector_uses_fresh_index() {
        let mut s = Store::default();
        s.upsert(obj("a", "x", "1", &[("owner.name", "t1")]));
        s.upsert(obj("a", "y", "1", &[("owner.name", "t2")]));
        s.upsert(obj("b", "x", "1", &[("owner.name", "t1")]));
        s.upsert(obj("ab", "z", "1", &[]));
        let names = |v: Vec<Arc<CachedObject>>| {
            v.iter()
                .map(|o| format!("{}/{}", o.key.namespace, o.key.name))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(s.list(Some("a"), None)), vec!["a/x", "a/y"]);
        let sel = parse("owner.name=t1").unwrap();
        assert_eq!(names(s.list(None, Some(&sel))), vec!["a/x", "b/x"]);
        assert_eq!(names(s.list(Some("b"), Some(&sel))), vec!["b/x"]);
        // relabel: the index must follow
        s.upsert(obj("a", "x", "2", &[("owner.name", "t2")]));
        assert_eq!(names(s.list(None, Some(&sel))), vec!["b/x"]);
        s.remove(&ObjectKey::new(Some("b"), "x"));
        assert!(s.list(None, Some(&sel)).is_empty());
        let not = parse("owner.name!=t2").unwrap();
        assert_eq!(names(s.list(None, Some(&not))), vec!["ab/z"]);
    }

    #[test]
    fn exists_selectors_are_served_from_the_key_index() {
        let mut s = Store::default();
        for i in 0..1000 {
            let role = format!("node-role.kubernetes.io/p{}", i % 100);
            s.upsert(obj("", &format!("n{i}"), "1", &[(role.as_str(), "")]));
        }
        let sel = parse("node-role.kubernetes.io/p7").unwrap();
        let names: Vec<String> = s
            .list(None, Some(&sel))
            .iter()
            .map(|o| o.key.name.to_string())
            .collect();
        assert_eq!(names.len(), 10);
        assert!(
            names
                .iter()
                .all(|n| n.trim_start_matches('n').parse::<usize>().unwrap() % 100 == 7)
        );
        // The key index follows relabels and removals.
        s.upsert(obj("", "n7", "2", &[]));
        s.remove(&ObjectKey::new(None, "n107"));
        assert_eq!(s.list(None, Some(&sel)).len(), 8);
        assert_eq!(s.by_key["node-role.kubernetes.io/p7"].len(), 8);
        assert!(s.list(None, Some(&parse("absent").unwrap())).is_empty());
    }

    #[test]
    fn controller_index_follows_owner_changes() {
        let mut s = Store::default();
        let mut child = (*obj("a", "c", "1", &[])).clone();
        child.controller = Some(OwnerReference {
            uid: "p1".into(),
            controller: Some(true),
            ..OwnerReference::default()
        });
        s.upsert(Arc::new(child.clone()));
        assert_eq!(s.controlled_by("p1").len(), 1);
        child.controller = None;
        child.resource_version = Some("2".into());
        s.upsert(Arc::new(child));
        assert!(s.controlled_by("p1").is_empty());
    }
}
