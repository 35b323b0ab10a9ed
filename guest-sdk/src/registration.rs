//! What a plugin declares about itself: [`Registration`] and its parts.
//!
//! The host derives watches, finalizer handling, capability checks, RBAC and
//! CRDs from it. Build one with the typed helpers:
//!
//! ```
//! use rekon_sdk::{ClusterSet, Mapping, Registration, Verb};
//! use k8s_openapi::api::core::v1::{ConfigMap, Node};
//!
//! let reg = Registration::new::<ConfigMap>("labeler", "0.1.0")
//!     .watch::<Node>(ClusterSet::Primary, Mapping::AllPrimaries)
//!     .finalizer("labeler.example.com/cleanup")
//!     .permission::<Node>(&[Verb::Get, Verb::List, Verb::Watch, Verb::Patch], ClusterSet::Primary)
//!     .permission::<ConfigMap>(Verb::READ, ClusterSet::Primary);
//! assert_eq!(reg.watches.len(), 1);
//! assert!(reg.validate().is_ok());
//! ```
//!
//! [`Registration::validate`] applies `rekon_rules::registration`, the very
//! rules the host applies when it loads the plugin.

use std::collections::BTreeMap;

use rekon_rules::LabelSelector;
pub use rekon_rules::Verb;
use rekon_rules::registration as rules;

use crate::Request;
use crate::error::Error;
use crate::resource::{Kind, ResourceType};

/// A set of clusters, resolved by the host against the clusters engaged at
/// any moment (clusters can be added and removed at runtime).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClusterSet {
    /// Only the primary cluster.
    Primary,
    /// Every engaged cluster, primary included, now and in the future.
    All,
    /// Every engaged cluster but the primary, now and in the future (where
    /// a fan-out plugin writes its copies).
    Others,
    /// The clusters with these names, when engaged.
    Named(Vec<String>),
}

impl ClusterSet {
    /// Whether `cluster` belongs to the set, given which cluster is primary.
    #[must_use]
    pub fn contains(&self, cluster: &str, primary: Option<&str>) -> bool {
        match self {
            ClusterSet::Primary => primary == Some(cluster),
            ClusterSet::All => true,
            ClusterSet::Others => primary.is_some_and(|p| p != cluster),
            ClusterSet::Named(names) => names.iter().any(|n| n == cluster),
        }
    }
}

/// Label keys whose values name a primary object in (possibly) another
/// cluster. Owner references cannot cross clusters; labels can.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerLabels {
    /// Label whose value is the primary's cluster name.
    pub cluster: String,
    /// Label whose value is the primary's namespace (absent or empty for
    /// cluster-scoped primaries).
    pub namespace: String,
    /// Label whose value is the primary's name.
    pub name: String,
}

impl OwnerLabels {
    /// Owner label keys.
    #[must_use]
    pub fn new(cluster: &str, namespace: &str, name: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The labels a child of the primary `owner` carries, to be merged into
    /// the child's `metadata.labels`.
    ///
    /// ```
    /// use rekon_sdk::{OwnerLabels, Request};
    /// let keys = OwnerLabels::new("owner.cluster", "owner.namespace", "owner.name");
    /// let labels = keys.labels_for(&Request::namespaced("main", "default", "t1"));
    /// assert_eq!(labels["owner.cluster"], "main");
    /// assert_eq!(labels["owner.name"], "t1");
    /// ```
    #[must_use]
    pub fn labels_for(&self, owner: &Request) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        labels.insert(self.cluster.clone(), owner.cluster.clone());
        if let Some(ns) = &owner.namespace {
            labels.insert(self.namespace.clone(), ns.clone());
        }
        labels.insert(self.name.clone(), owner.name.clone());
        labels
    }

    /// The primary named by `labels`, if they carry the cluster and name keys.
    #[must_use]
    pub fn owner_of(&self, labels: &BTreeMap<String, String>) -> Option<Request> {
        let cluster = labels.get(&self.cluster)?;
        let name = labels.get(&self.name)?;
        let namespace = labels
            .get(&self.namespace)
            .filter(|ns| !ns.is_empty())
            .cloned();
        Some(Request {
            cluster: cluster.clone(),
            namespace,
            name: name.clone(),
        })
    }

    /// A label selector matching every child that carries these labels for `owner`.
    #[must_use]
    pub fn selector_for(&self, owner: &Request) -> String {
        crate::context::selector_from_labels(&self.labels_for(owner))
    }
}

/// How an event on a watched object becomes requests for primaries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Mapping {
    /// The watched object is a primary: request its own key.
    Itself,
    /// The controller owner reference of the object, in the same cluster,
    /// when it points at the primary kind.
    OwnerReference,
    /// Owner labels naming a primary, possibly in another cluster. When the
    /// host runs sharded, each replica caches only the objects naming one
    /// of its own primaries (and those naming none): a reconcile sees its
    /// primary's children, not another shard's.
    OwnerLabels(OwnerLabels),
    /// Label keys that name primaries: every label of the object whose key
    /// starts with one of the prefixes names the primary called by the rest
    /// of the key (in the object's cluster, and namespace for a namespaced
    /// primary). The host computes it without a wasm call, for the object's
    /// new and previous labels, and wakes only the primaries named. Add the
    /// prefix of a marker label the plugin writes itself to reach former
    /// members too.
    ///
    /// ```
    /// use rekon_sdk::{ClusterSet, Mapping, Registration};
    /// use k8s_openapi::api::core::v1::{ConfigMap, Node};
    /// // `node-role.kubernetes.io/gpu` on a Node wakes primary `gpu`.
    /// let reg = Registration::new::<ConfigMap>("roles", "0.1.0").watch::<Node>(
    ///     ClusterSet::Primary,
    ///     Mapping::label_key_prefixes(&["node-role.kubernetes.io/"]),
    /// );
    /// assert!(reg.validate().is_ok());
    /// ```
    LabelKeyPrefixes(Vec<String>),
    /// Every primary of the plugin: any event wakes them all. Prefer a
    /// selective mapping where one can say which primaries an object
    /// concerns.
    AllPrimaries,
    /// Ask the plugin: the host calls [`Plugin::map`](crate::Plugin::map).
    Custom,
}

impl Mapping {
    /// [`Mapping::LabelKeyPrefixes`] from string slices.
    #[must_use]
    pub fn label_key_prefixes(prefixes: &[&str]) -> Self {
        Self::LabelKeyPrefixes(prefixes.iter().map(|p| (*p).to_owned()).collect())
    }
}

/// A resource the plugin needs to see, and how its events map to primaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// The resource to watch.
    pub resource: ResourceType,
    /// Which clusters to watch it in.
    pub clusters: ClusterSet,
    /// How its events become requests.
    pub mapping: Mapping,
}

/// Something the plugin may do. Every action it returns is checked against
/// these before anything is written; they also generate RBAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    /// The resource the verbs apply to.
    pub resource: ResourceType,
    /// RBAC verbs.
    pub verbs: Vec<Verb>,
    /// Whether the verbs also apply to the `status` subresource.
    pub status: bool,
    /// Clusters in which the permission holds.
    pub clusters: ClusterSet,
}

impl Permission {
    /// Whether this permission grants `verb` on `resource` in `cluster`
    /// (`status`: on the status subresource).
    #[must_use]
    pub fn allows(
        &self,
        resource: &ResourceType,
        verb: Verb,
        status: bool,
        cluster: &str,
        primary: Option<&str>,
    ) -> bool {
        self.resource.same_kind(resource)
            && (!status || self.status)
            && self.verbs.contains(&verb)
            && self.clusters.contains(cluster, primary)
    }
}

/// What a plugin declares about itself, returned by [`Plugin::register`](crate::Plugin::register).
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Registration {
    /// Unique plugin name (DNS label); field manager is `rekon.<name>`.
    pub name: String,
    /// The plugin's own version (semver).
    pub version: String,
    /// The primary resource: the objects the plugin reconciles.
    pub primary: ResourceType,
    /// Clusters whose primaries are reconciled (default: the primary cluster).
    pub primary_clusters: ClusterSet,
    /// Label selector narrowing the primaries (default: every object of the
    /// primary kind in the primary clusters).
    pub primary_selector: Option<String>,
    /// Clusters whose engagement or disengagement requeues every primary
    /// (default: the primary cluster). Reads are governed by the primary
    /// clusters and the watches, writes by the permissions.
    pub clusters: ClusterSet,
    /// Other resources to watch.
    pub watches: Vec<Watch>,
    /// Finalizer the host adds to every primary.
    pub finalizer: Option<String>,
    /// Everything the plugin may write and read.
    pub permissions: Vec<Permission>,
    /// CustomResourceDefinition manifests the plugin owns.
    pub crds: Vec<serde_json::Value>,
    /// Upper bound of concurrent reconciles; `None` = host default.
    pub max_concurrent_reconciles: Option<u32>,
    /// The settings type, if the plugin takes settings
    /// ([`Registration::settings`]).
    pub(crate) settings: Option<crate::settings::Declared>,
    /// Problems found while building (reported by [`Registration::validate`]).
    problems: Vec<String>,
}

impl Registration {
    /// A registration whose primary resource is `K`, reconciled in (and
    /// covering only) the primary cluster.
    pub fn new<K: Kind>(name: &str, version: &str) -> Self {
        Self::for_resource(name, version, K::resource_type())
    }

    /// Like [`Registration::new`] with a resource type spelled out by hand.
    pub fn for_resource(name: &str, version: &str, primary: ResourceType) -> Self {
        Self {
            name: name.to_owned(),
            version: version.to_owned(),
            primary,
            primary_clusters: ClusterSet::Primary,
            primary_selector: None,
            clusters: ClusterSet::Primary,
            watches: Vec::new(),
            finalizer: None,
            permissions: Vec::new(),
            crds: Vec::new(),
            max_concurrent_reconciles: None,
            settings: None,
            problems: Vec::new(),
        }
    }

    /// Clusters whose primaries are reconciled.
    pub fn primary_clusters(mut self, clusters: ClusterSet) -> Self {
        self.primary_clusters = clusters;
        self
    }

    /// Only objects whose labels match `label_selector` (Kubernetes syntax,
    /// `app=web,tier in (a,b)`) are primaries: reconciled and given the
    /// finalizer. An object that stops matching while it carries the
    /// finalizer is reconciled once more in [`Phase::Leaving`](crate::Phase::Leaving)
    /// to clean up, then loses the finalizer.
    ///
    /// ```
    /// use rekon_sdk::Registration;
    /// use rekon_sdk::k8s_openapi::api::core::v1::ConfigMap;
    /// let reg = Registration::new::<ConfigMap>("cm-sync", "0.1.0")
    ///     .primary_selector("sync.example.com/source=true");
    /// assert!(reg.validate().is_ok());
    /// ```
    pub fn primary_selector(mut self, label_selector: &str) -> Self {
        self.primary_selector = Some(label_selector.to_owned());
        self
    }

    /// Clusters whose engagement or disengagement requeues every primary
    /// (a fan-out plugin covering [`ClusterSet::All`] hears of a new
    /// cluster this way). It grants no reads or writes: those come from
    /// the primary clusters, the watches and the permissions.
    pub fn clusters(mut self, clusters: ClusterSet) -> Self {
        self.clusters = clusters;
        self
    }

    /// Watch `K` in `clusters`, mapping its events with `mapping`. The
    /// host's shared cache of `K` in those clusters holds every object of
    /// the kind (the plugin reads them with [`Context::list`](crate::Context::list),
    /// narrowing by label selector there); the mapping decides which
    /// events wake which primaries.
    pub fn watch<K: Kind>(self, clusters: ClusterSet, mapping: Mapping) -> Self {
        self.watch_resource(K::resource_type(), clusters, mapping)
    }

    /// Watch a resource type spelled out by hand.
    pub fn watch_resource(
        mut self,
        resource: ResourceType,
        clusters: ClusterSet,
        mapping: Mapping,
    ) -> Self {
        self.watches.push(Watch {
            resource,
            clusters,
            mapping,
        });
        self
    }

    /// The plugin takes settings of type `S` (see [`crate::settings`]): at
    /// every load the SDK deserializes and validates what the operator gave
    /// (refusing the load with the reason when they are invalid) and hands
    /// `S`'s JSON Schema to the host. Without this, any settings refuse the
    /// load.
    pub fn settings<S: crate::settings::Settings>(mut self) -> Self {
        self.settings = Some(crate::settings::Declared::of::<S>());
        self
    }

    /// The JSON Schema of the declared settings type, if any.
    #[must_use]
    pub fn settings_schema(&self) -> Option<serde_json::Value> {
        self.settings.map(|d| (d.schema)())
    }

    /// The finalizer the host adds to every primary and removes once the
    /// plugin reports cleanup done ([`Outcome::finalized`](crate::Outcome::finalized)).
    pub fn finalizer(mut self, name: &str) -> Self {
        self.finalizer = Some(name.to_owned());
        self
    }

    /// Allow `verbs` on `K` in `clusters`. [`Verb::READ`] is get, list
    /// and watch.
    pub fn permission<K: Kind>(self, verbs: &[Verb], clusters: ClusterSet) -> Self {
        self.permission_resource(K::resource_type(), verbs, false, clusters)
    }

    /// Allow `verbs` on `K` and on its `status` subresource in `clusters`.
    pub fn status_permission<K: Kind>(self, verbs: &[Verb], clusters: ClusterSet) -> Self {
        self.permission_resource(K::resource_type(), verbs, true, clusters)
    }

    /// Allow `verbs` on a resource type spelled out by hand.
    pub fn permission_resource(
        mut self,
        resource: ResourceType,
        verbs: &[Verb],
        status: bool,
        clusters: ClusterSet,
    ) -> Self {
        self.permissions.push(Permission {
            resource,
            verbs: verbs.to_vec(),
            status,
            clusters,
        });
        self
    }

    /// Own a CRD: `.crd(NodePool::crd())` with `kube::CustomResourceExt`.
    pub fn crd<T: serde::Serialize>(mut self, crd: T) -> Self {
        match serde_json::to_value(crd) {
            Ok(v) => self.crds.push(v),
            Err(e) => self
                .problems
                .push(format!("failed to serialize a CRD: {e}")),
        }
        self
    }

    /// Own a CRD given as YAML text (e.g. `include_str!("crd.yaml")`).
    pub fn crd_yaml(mut self, yaml: &str) -> Self {
        match serde_yaml::from_str::<serde_json::Value>(yaml) {
            Ok(v) => self.crds.push(v),
            Err(e) => self
                .problems
                .push(format!("failed to parse a CRD from YAML: {e}")),
        }
        self
    }

    /// Limit concurrent reconciles of this plugin.
    pub fn max_concurrent_reconciles(mut self, n: u32) -> Self {
        self.max_concurrent_reconciles = Some(n);
        self
    }

    /// Checks what the host would refuse, with the host's own rules
    /// (`rekon_rules::registration::problems`): the name is a DNS label,
    /// the version semver, resources complete, selectors parse, named
    /// cluster sets name clusters, mappings and the finalizer are well
    /// formed, CRDs are CRDs (and, natively, every CRD's
    /// `x-kubernetes-validations` rule compiles with kube-cel). Called by the export glue before the
    /// registration leaves the plugin, and by the test kit.
    ///
    /// # Errors
    /// A terminal [`Error`] listing every problem.
    pub fn validate(&self) -> Result<(), Error> {
        let mut problems = self.problems.clone();
        problems.extend(rules::problems(&self.spec()));
        // Natively (the test kit) the CRDs' CEL rules are compiled as the
        // host compiles them at load; a plugin built for wasm leaves that
        // to the host (kube-cel is not linked into components).
        #[cfg(not(target_arch = "wasm32"))]
        for crd in &self.crds {
            problems.extend(rekon_rules::cel::crd_rule_problems(crd));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::terminal(format!(
                "invalid registration of plugin {}: {}",
                self.name,
                problems.join("; ")
            )))
        }
    }

    /// The registration in the rules' plain form.
    fn spec(&self) -> rules::Spec {
        rules::Spec {
            name: self.name.clone(),
            version: self.version.clone(),
            primary: self.primary.rule(),
            primary_clusters: self.primary_clusters.rule(),
            primary_selector: self.primary_selector.clone(),
            clusters: self.clusters.rule(),
            watches: self
                .watches
                .iter()
                .map(|w| rules::Watch {
                    resource: w.resource.rule(),
                    clusters: w.clusters.rule(),
                    mapping: match &w.mapping {
                        Mapping::OwnerLabels(k) => rules::Mapping::OwnerLabels {
                            cluster: k.cluster.clone(),
                            namespace: k.namespace.clone(),
                            name: k.name.clone(),
                        },
                        Mapping::LabelKeyPrefixes(p) => rules::Mapping::LabelKeyPrefixes(p.clone()),
                        Mapping::Itself
                        | Mapping::OwnerReference
                        | Mapping::AllPrimaries
                        | Mapping::Custom => rules::Mapping::Plain,
                    },
                    label_selector: None,
                })
                .collect(),
            finalizer: self.finalizer.clone(),
            permissions: self
                .permissions
                .iter()
                .map(|p| rules::Permission {
                    resource: p.resource.rule(),
                    verbs: p.verbs.iter().map(|v| v.as_str().to_owned()).collect(),
                    clusters: p.clusters.rule(),
                })
                .collect(),
            crds: self
                .crds
                .iter()
                .map(|c| match c {
                    serde_json::Value::Object(o) => rules::Crd::Parsed(
                        o.get("kind").and_then(|k| k.as_str()).map(str::to_owned),
                    ),
                    _ => rules::Crd::Unreadable("not a JSON object".to_owned()),
                })
                .collect(),
            crd_names: self
                .crds
                .iter()
                .filter_map(|crd| {
                    rules::CrdNames::read(|path| {
                        path.iter()
                            .try_fold(crd, |v, k| v.get(k))
                            .and_then(|v| v.as_str())
                            .map(str::to_owned)
                    })
                })
                .collect(),
            max_concurrent_reconciles: self.max_concurrent_reconciles,
        }
    }

    /// Whether the declared permissions allow `verb` on `resource` in `cluster`.
    #[must_use]
    pub fn allows(
        &self,
        resource: &ResourceType,
        verb: Verb,
        status: bool,
        cluster: &str,
        primary: Option<&str>,
    ) -> bool {
        self.permissions
            .iter()
            .any(|p| p.allows(resource, verb, status, cluster, primary))
    }

    /// Whether an object of the primary kind in `cluster` with `labels` is
    /// one of the plugin's primaries: `cluster` is a primary cluster and the
    /// labels match the primary selector. (An invalid selector matches
    /// nothing; [`Registration::validate`] reports it.)
    #[must_use]
    pub fn in_primary_scope(
        &self,
        cluster: &str,
        labels: &BTreeMap<String, String>,
        primary: Option<&str>,
    ) -> bool {
        self.primary_clusters.contains(cluster, primary)
            && self
                .primary_selector
                .as_deref()
                .is_none_or(|s| LabelSelector::parse(s).is_ok_and(|sel| sel.matches(labels)))
    }

    /// Whether the plugin may read `resource` in `cluster`: it is the
    /// primary (in the primary clusters) or watched there.
    #[must_use]
    pub fn reads(&self, resource: &ResourceType, cluster: &str, primary: Option<&str>) -> bool {
        (self.primary.same_kind(resource) && self.primary_clusters.contains(cluster, primary))
            || self
                .watches
                .iter()
                .any(|w| w.resource.same_kind(resource) && w.clusters.contains(cluster, primary))
    }
}

impl ClusterSet {
    fn rule(&self) -> rules::Clusters {
        match self {
            ClusterSet::Primary => rules::Clusters::Primary,
            ClusterSet::All => rules::Clusters::All,
            ClusterSet::Others => rules::Clusters::Others,
            ClusterSet::Named(n) => rules::Clusters::Named(n.clone()),
        }
    }
}

impl ResourceType {
    fn rule(&self) -> rules::Resource {
        rules::Resource::new(&self.group, &self.version, &self.kind)
            .declared(&self.plural, matches!(self.scope, crate::Scope::Namespaced))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scope;
    use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};

    #[test]
    fn builder_collects_watches_permissions_and_finalizer() {
        let reg = Registration::new::<ConfigMap>("demo", "1.0.0")
            .clusters(ClusterSet::All)
            .watch::<Node>(ClusterSet::All, Mapping::AllPrimaries)
            .watch::<Secret>(ClusterSet::Primary, Mapping::OwnerReference)
            .finalizer("demo.rekon.dev/cleanup")
            .permission::<Node>(&[Verb::Get, Verb::Patch], ClusterSet::All)
            .status_permission::<ConfigMap>(&[Verb::Patch], ClusterSet::Primary)
            .max_concurrent_reconciles(4);
        reg.validate().unwrap();
        assert_eq!(reg.primary.kind, "ConfigMap");
        assert_eq!(reg.primary.scope, Scope::Namespaced);
        assert_eq!(reg.watches[0].resource.scope, Scope::Cluster);
        assert!(reg.allows(
            &ResourceType::of::<Node>(),
            Verb::Patch,
            false,
            "sub",
            Some("main")
        ));
        assert!(!reg.allows(
            &ResourceType::of::<Node>(),
            Verb::Delete,
            false,
            "sub",
            Some("main")
        ));
        assert!(reg.allows(
            &ResourceType::of::<ConfigMap>(),
            Verb::Patch,
            true,
            "main",
            Some("main")
        ));
        assert!(!reg.allows(
            &ResourceType::of::<ConfigMap>(),
            Verb::Patch,
            true,
            "sub",
            Some("main")
        ));
        assert!(reg.reads(&ResourceType::of::<Secret>(), "main", Some("main")));
        assert!(!reg.reads(&ResourceType::of::<Secret>(), "sub", Some("main")));
        assert!(reg.reads(&ResourceType::of::<ConfigMap>(), "main", Some("main")));
    }

    #[test]
    fn validate_reports_every_problem() {
        let err = Registration::new::<ConfigMap>("Bad_Name", " ")
            .permission::<Node>(&[], ClusterSet::Primary)
            .finalizer("no domain")
            .crd_yaml("{ not yaml")
            .validate()
            .unwrap_err();
        let msg = err.message();
        assert!(!err.is_retryable());
        for needle in [
            "not a DNS label",
            "not semver",
            "names no verb",
            "no domain",
            "YAML",
        ] {
            assert!(msg.contains(needle), "{needle:?} missing from {msg}");
        }
    }

    #[test]
    fn crd_is_serialized_to_json() {
        let yaml = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\n";
        let reg = Registration::new::<ConfigMap>("demo", "1.0.0").crd_yaml(yaml);
        assert_eq!(reg.crds[0]["metadata"]["name"], "widgets.example.com");
    }

    #[test]
    fn owner_labels_round_trip() {
        let keys = OwnerLabels::new("owner.cluster", "owner.namespace", "owner.name");
        let owner = Request::namespaced("main", "ns1", "t1");
        let labels = keys.labels_for(&owner);
        assert_eq!(keys.owner_of(&labels), Some(owner.clone()));
        assert_eq!(
            keys.selector_for(&owner),
            "owner.cluster=main,owner.name=t1,owner.namespace=ns1"
        );
        let cluster_scoped = Request::cluster_scoped("main", "p1");
        assert_eq!(
            keys.owner_of(&keys.labels_for(&cluster_scoped)),
            Some(cluster_scoped)
        );
    }

    #[test]
    fn cluster_set_membership() {
        assert!(ClusterSet::Primary.contains("main", Some("main")));
        assert!(!ClusterSet::Primary.contains("sub", Some("main")));
        assert!(ClusterSet::All.contains("sub", Some("main")));
        assert!(ClusterSet::Others.contains("sub", Some("main")));
        assert!(!ClusterSet::Others.contains("main", Some("main")));
        assert!(ClusterSet::Named(vec!["sub".into()]).contains("sub", None));
    }
}
