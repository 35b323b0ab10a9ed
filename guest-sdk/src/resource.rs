//! Resource types: which kind of Kubernetes object a read, a watch, a
//! permission or an action is about.
//!
//! [`ResourceType::of`] derives everything from a `kube::Resource` type
//! (every k8s-openapi type and every `#[derive(CustomResource)]` type), so
//! plugins rarely spell a group, version or plural by hand.

use std::fmt;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};

/// Whether a resource lives in a namespace or at cluster scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The resource lives in a namespace (Pods, Jobs, ConfigMaps).
    Namespaced,
    /// The resource is cluster-scoped (Nodes, RuntimeClasses).
    Cluster,
}

/// Maps a `kube::Resource::Scope` marker type to a [`Scope`].
///
/// Implemented for k8s-openapi's `NamespaceResourceScope` and
/// `ClusterResourceScope`, the markers used by k8s-openapi types and by
/// `#[derive(CustomResource)]` (with or without `#[kube(namespaced)]`).
pub trait ScopeMarker {
    /// The scope this marker stands for.
    const SCOPE: Scope;
}

impl ScopeMarker for NamespaceResourceScope {
    const SCOPE: Scope = Scope::Namespaced;
}

impl ScopeMarker for ClusterResourceScope {
    const SCOPE: Scope = Scope::Cluster;
}

/// A Kubernetes resource type such as `batch/v1 Job` (`jobs`, namespaced).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group ("v1").
    pub version: String,
    /// Kind, in CamelCase ("Job").
    pub kind: String,
    /// Plural resource name as used in URLs and RBAC ("jobs"). May be empty:
    /// the host then resolves it through API discovery.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
}

/// A `kube::Resource` whose type information is known at compile time: every
/// k8s-openapi type and every `#[derive(CustomResource)]` type.
///
/// Implemented for every such type by a blanket impl; never implement it
/// yourself. Use it as the bound of generic helpers:
/// `fn f<K: Kind + serde::de::DeserializeOwned>()`.
pub trait Kind: kube::Resource<DynamicType = ()> {
    /// The resource type of `Self`; same as [`ResourceType::of`].
    fn resource_type() -> ResourceType;
}

impl<K> Kind for K
where
    K: kube::Resource<DynamicType = ()>,
    K::Scope: ScopeMarker,
{
    fn resource_type() -> ResourceType {
        ResourceType::of::<K>()
    }
}

impl ResourceType {
    /// The resource type of `K`, e.g. `ResourceType::of::<Node>()`.
    ///
    /// ```
    /// use rekon_sdk::{ResourceType, Scope};
    /// use k8s_openapi::api::batch::v1::Job;
    ///
    /// let jobs = ResourceType::of::<Job>();
    /// assert_eq!((jobs.group.as_str(), jobs.plural.as_str()), ("batch", "jobs"));
    /// assert_eq!(jobs.scope, Scope::Namespaced);
    /// ```
    #[must_use]
    pub fn of<K>() -> Self
    where
        K: kube::Resource<DynamicType = ()>,
        K::Scope: ScopeMarker,
    {
        Self {
            group: K::group(&()).into_owned(),
            version: K::version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
            scope: <K::Scope as ScopeMarker>::SCOPE,
        }
    }

    /// A resource type spelled out by hand, for kinds the plugin has no Rust
    /// type for. `api_version` is `group/version` or just `version` for the
    /// core group; `plural` may be empty (the host resolves it).
    ///
    /// ```
    /// use rekon_sdk::{ResourceType, Scope};
    /// let widgets = ResourceType::new("example.com/v1", "Widget", "widgets", Scope::Namespaced);
    /// assert_eq!(widgets.group, "example.com");
    /// assert_eq!(widgets.api_version(), "example.com/v1");
    /// ```
    #[must_use]
    pub fn new(api_version: &str, kind: &str, plural: &str, scope: Scope) -> Self {
        let (group, version) = split_api_version(api_version);
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            scope,
        }
    }

    /// `group/version`, or `version` for the core group.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether `self` and `other` name the same kind (same group and kind,
    /// any version).
    #[must_use]
    pub fn same_kind(&self, other: &ResourceType) -> bool {
        self.group == other.group && self.kind == other.kind
    }

    /// Whether objects of this type live in namespaces.
    #[must_use]
    pub fn is_namespaced(&self) -> bool {
        self.scope == Scope::Namespaced
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.kind)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.kind)
        }
    }
}

/// Splits `group/version` (or a bare core-group `version`) into its parts.
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    use k8s_openapi::api::node::v1::RuntimeClass;

    #[test]
    fn resource_type_from_k8s_openapi_types() {
        let node = ResourceType::of::<Node>();
        assert_eq!(node.group, "");
        assert_eq!(node.version, "v1");
        assert_eq!(node.kind, "Node");
        assert_eq!(node.plural, "nodes");
        assert_eq!(node.scope, Scope::Cluster);
        assert_eq!(node.api_version(), "v1");

        let rc = ResourceType::of::<RuntimeClass>();
        assert_eq!(rc.api_version(), "node.k8s.io/v1");
        assert_eq!(rc.plural, "runtimeclasses");
        assert_eq!(rc.scope, Scope::Cluster);

        assert_eq!(ResourceType::of::<ConfigMap>().scope, Scope::Namespaced);
    }

    #[test]
    fn same_kind_ignores_version() {
        let a = ResourceType::new("batch/v1", "Job", "jobs", Scope::Namespaced);
        let b = ResourceType::new("batch/v2", "Job", "", Scope::Namespaced);
        let c = ResourceType::new("v1", "Job", "jobs", Scope::Namespaced);
        assert!(a.same_kind(&b));
        assert!(!a.same_kind(&c));
        assert_eq!(a.to_string(), "batch/v1/Job");
        assert_eq!(c.to_string(), "v1/Job");
    }
}

#[cfg(test)]
mod crd_tests {
    use kube::CustomResourceExt;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::{Action, Registration};

    /// A cluster-scoped custom resource, like the nodepool seed's.
    #[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[kube(group = "nodes.example.com", version = "v1", kind = "Pool")]
    struct PoolSpec {
        handler: String,
    }

    /// A namespaced one, with an irregular plural.
    #[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[kube(
        group = "job.example.com",
        version = "v1",
        kind = "Test",
        plural = "testz",
        namespaced
    )]
    struct TestSpec {
        image: String,
    }

    #[test]
    fn custom_resources_have_their_scope_and_plural() {
        let pool = ResourceType::of::<Pool>();
        assert_eq!(pool.scope, Scope::Cluster);
        assert_eq!(pool.plural, "pools");
        assert_eq!(pool.api_version(), "nodes.example.com/v1");
        let test = ResourceType::of::<Test>();
        assert_eq!(test.scope, Scope::Namespaced);
        assert_eq!(test.plural, "testz");
    }

    #[test]
    fn crds_serialize_into_the_registration() {
        let reg = Registration::new::<Pool>("pool", "0.1.0")
            .crd(Pool::crd())
            .crd(Test::crd());
        reg.validate().unwrap();
        assert_eq!(reg.crds[0]["metadata"]["name"], "pools.nodes.example.com");
        assert_eq!(reg.crds[0]["spec"]["scope"], "Cluster");
        assert_eq!(reg.crds[1]["spec"]["scope"], "Namespaced");
    }

    #[test]
    fn typed_custom_resources_apply_with_identity() {
        let pool = Pool::new(
            "gpu",
            PoolSpec {
                handler: "runc".into(),
            },
        );
        let apply = Action::apply("main", &pool);
        assert_eq!(apply.object["apiVersion"], "nodes.example.com/v1");
        assert_eq!(apply.object["kind"], "Pool");
        assert_eq!(apply.object["spec"]["handler"], "runc");
        let back: Pool = apply.decode().unwrap();
        assert_eq!(back.spec.handler, "runc");
    }
}
