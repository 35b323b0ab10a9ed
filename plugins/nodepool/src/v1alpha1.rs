//! The NodePool at `nodes.lailin.xyz/v1alpha1`, and the conversion between
//! it and `v1` (`/convert/nodepool`).
//!
//! `v1alpha1` is v1 with one field named differently: the RuntimeClass
//! handler is `spec.runtimeHandler` (v1's `spec.handler`). It is served
//! beside v1, and **storage stays v1**: objects already stored, the
//! reconcile and every other reader keep seeing v1, nothing is migrated,
//! and a client that writes or reads v1alpha1 gets its objects converted
//! both ways by the plugin. (A v2 with the new name as storage would have
//! made every stored pool need a storage migration and the reconcile a new
//! type, for a rename.) The two versions carry the same fields, so the
//! conversion loses nothing: labels, taints, metadata and status are
//! copied as they are.

use kube::{CustomResource, KubeSchema};
use rekon_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::{MAX_LABELS, NodePoolPlugin, NodePoolStatus, RULE_OTHER_ROLE, RULE_OWN_ROLE};

/// A pool of nodes at v1alpha1: v1's fields, the handler named `runtimeHandler`.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "nodes.lailin.xyz",
    version = "v1alpha1",
    kind = "NodePool",
    status = "NodePoolStatus",
    validation = Rule::new(RULE_OTHER_ROLE)
        .message("a pool may not claim another pool's role label (node-role.kubernetes.io/<pool>)")
        .field_path(".spec.labels")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new(RULE_OWN_ROLE)
        .message("the pool's own role label selects its nodes and is not set by the pool")
        .field_path(".spec.labels")
        .reason(Reason::FieldValueForbidden),
    printcolumn = r#"{"name":"Nodes","type":"integer","jsonPath":".status.nodeCount"}"#,
    printcolumn = r#"{"name":"NotReady","type":"integer","jsonPath":".status.notReadyNodeCount"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct NodePoolSpec {
    /// Labels every node of the pool carries (also the RuntimeClass's node selector).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_LABELS))]
    pub labels: BTreeMap<String, String>,
    /// Taints every node of the pool carries (tolerated by the RuntimeClass).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = crate::taint_effect_enum)]
    pub taints: Vec<Taint>,
    /// The RuntimeClass handler (v1's `spec.handler`); `runc` when empty.
    #[serde(
        default,
        rename = "runtimeHandler",
        skip_serializing_if = "Option::is_none"
    )]
    pub runtime_handler: Option<String>,
}

/// The NodePool CRD at both versions, v1 the storage version.
///
/// # Errors
/// When kube cannot merge the two versions (a bug of the types).
pub fn crd() -> Result<CustomResourceDefinition, Error> {
    use kube::CustomResourceExt;
    kube::core::crd::merge_crds(vec![NodePool::crd(), crate::NodePool::crd()], "v1")
        .map_err(|e| Error::terminal(format!("the NodePool CRD's versions do not merge: {e}")))
}

/// `pool` at v1.
#[must_use]
pub fn to_v1(pool: NodePool) -> crate::NodePool {
    let mut new = crate::NodePool::new(
        "",
        crate::NodePoolSpec {
            labels: pool.spec.labels,
            taints: pool.spec.taints,
            handler: pool.spec.runtime_handler,
        },
    );
    new.metadata = pool.metadata;
    new.status = pool.status;
    new
}

/// `pool` at v1alpha1.
#[must_use]
pub fn from_v1(pool: crate::NodePool) -> NodePool {
    let mut new = NodePool::new(
        "",
        NodePoolSpec {
            labels: pool.spec.labels,
            taints: pool.spec.taints,
            runtime_handler: pool.spec.handler,
        },
    );
    new.metadata = pool.metadata;
    new.status = pool.status;
    new
}

impl Convert for NodePoolPlugin {
    fn conversions() -> Vec<Conversion> {
        vec![Conversion::of::<crate::NodePool>(&["v1alpha1", "v1"])]
    }

    fn convert(_: &Context, req: &ConversionRequest) -> Result<Converted, Error> {
        match (req.version(), req.desired_version()) {
            ("v1alpha1", "v1") => Converted::object(&to_v1(req.decode()?)),
            ("v1", "v1alpha1") => Converted::object(&from_v1(req.decode()?)),
            (from, to) => Err(Error::terminal(format!(
                "nodepool converts between v1alpha1 and v1, not from {from} to {to}"
            ))),
        }
    }
}
