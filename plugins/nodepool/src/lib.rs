//! # nodepool — a `NodePool` manages labels and taints on its Nodes
//!
//! A rekon seed plugin (see `docs/design.md`, "The seed plugins"). A
//! [`NodePool`] (`nodepools.nodes.lailin.xyz/v1`, cluster-scoped) owns:
//!
//! - its **nodes**: the Nodes labelled `node-role.kubernetes.io/<pool>`
//!   (so `kubectl get nodes` shows the pool as a role). Each carries the
//!   pool's `spec.labels` and `spec.taints`;
//! - a **RuntimeClass** `node-pool-<pool>` (node.k8s.io/v1): `handler` from
//!   the spec (`runc` when empty), `scheduling.nodeSelector` = the pool's
//!   labels, one `Equal` toleration per taint, controller owner reference to
//!   the pool (so it goes by garbage collection with the pool).
//!
//! The plugin also admits its pools ([`admission`]: validation worded as
//! the API server's, the default handler; CEL rules on the CRD) and serves
//! the NodePool at `v1alpha1` beside `v1` ([`v1alpha1`]), converting both
//! ways. See docs/plugins/admission.md, "A worked example".
//!
//! # Layout
//!
//! | item | what |
//! |---|---|
//! | [`NodePool`], [`NodePoolSpec`], [`NodePoolStatus`] | the custom resource (CRD generated from the types) |
//! | [`NodePoolPlugin`] | the [`Plugin`]: registration and reconcile |
//! | [`plan_node`] / [`NodePlan`] | what one pool changes on one node (pure) |
//! | [`Applied`] | what a pool applied to a node, recorded on the node |
//! | [`runtime_class_for`] | the RuntimeClass a pool wants |
//! | [`admission`] | what may be written (`/validate/nodepool`, field errors worded as the API server's) and stored (`/mutate/nodepool`: the default handler) |
//! | [`v1alpha1`] | the NodePool at v1alpha1 (`spec.runtimeHandler`), served beside v1 (storage), and the conversion both ways (`/convert/nodepool`) |
//! | [`NodePoolSettings`] | what an operator configures: the default RuntimeClass handler, the label and taint key prefixes pools may manage |
//!
//! # Ownership of labels and taints (the design choice)
//!
//! Several pools may share a node, other controllers and people label and
//! taint nodes too (`kubectl cordon` adds `node.kubernetes.io/unschedulable`),
//! and `spec.taints` is an *atomic* list for the API: it has no merge key,
//! strategic merge replaces it whole and server-side apply treats it as one
//! field. Server-side apply cannot tell pools apart either: every pool writes
//! with the same field manager `rekon.nodepool`. So the plugin tracks
//! ownership itself:
//!
//! - **Record.** Each pool records what it applied to a node in the node
//!   annotation `applied.nodes.lailin.xyz/<pool>` (JSON [`Applied`]: labels
//!   and taints), and marks the node with the label of the same key
//!   (`"true"`). Only what is recorded there is ever removed by that pool.
//!   The marker makes a former member findable and mappable: a pool reads
//!   only the nodes labelled with its role or its marker (indexed list),
//!   and a node event wakes only the pools its role and marker labels name
//!   (the host's `label-key-prefixes` mapping, old and new labels), never
//!   every pool.
//! - **Write.** A pool changes a node with one RFC 6902 JSON patch: `add` /
//!   `remove` of single label keys, `add` of the whole new `spec.taints`
//!   list, and the annotation, all **guarded by the node's
//!   resourceVersion** (the host turns it into a leading `test`). The taint
//!   list is rebuilt from the node as read, keeping every taint the pool does
//!   not own in place; if anyone (another pool, a cordon, the kubelet)
//!   changed the node meanwhile, the guard fails, the reconcile is retried on
//!   fresh data, and no update is lost.
//! - **Remove.** A label or taint a pool recorded and no longer wants (it
//!   left the spec, the node lost the pool's role label, or the pool is being
//!   deleted) is removed — unless another pool of the node still declares it,
//!   and only if the node still has the value the pool applied (a value
//!   someone changed since is no longer the pool's).
//! - **Conflicts.** Two pools of one node declaring the same label key (or
//!   taint key and effect) with different values: the pool whose name sorts
//!   first wins; the other does not apply it and reports `Ready=False`,
//!   reason `Conflict`. Without this rule they would overwrite each other
//!   forever.
//! - Labels and taints the pool never recorded — `kubernetes.io` ones, other
//!   controllers', a cordon taint, another pool's — are never touched.
//!
//! # Status and events
//!
//! `nodeCount`, `notReadyNodeCount` (node condition `Ready` not `True`),
//! `nodes`, and a `Ready` condition: `True` (`Converged`) when every node
//! carries the pool's labels and taints, else `False` with reason
//! `UpdatingNodes` (naming the nodes not updated yet, including those whose
//! update failed and is being retried), `Conflict` or `InvalidSpec`. The status
//! is written before the node patches (so a node that cannot be updated is
//! visible) and only when it changed. Events: `NodesUpdated`,
//! `RuntimeClassUpdated`, `Conflict`, `NodesCleaned`.
//!
//! # Deletion
//!
//! The finalizer [`FINALIZER`] holds the pool until its labels, taints and
//! annotation are removed from every node that carries its record; the
//! cleanup patches and the "finalized" answer go out together, so the host
//! lets the pool go only once every patch succeeded.

pub mod admission;
pub mod v1alpha1;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use k8s_openapi::api::node::v1::{RuntimeClass, Scheduling};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::{CustomResource, KubeSchema};
use rekon_sdk::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The plugin's name (field manager `rekon.nodepool`).
pub const PLUGIN_NAME: &str = "nodepool";
/// The finalizer the host puts on every NodePool.
pub const FINALIZER: &str = "nodes.lailin.xyz/cleanup";
/// Prefix of the node label naming a node's pools: `node-role.kubernetes.io/<pool>`.
pub const ROLE_PREFIX: &str = "node-role.kubernetes.io/";
/// Prefix of the node annotation recording what a pool applied: `applied.nodes.lailin.xyz/<pool>`.
pub const APPLIED_PREFIX: &str = "applied.nodes.lailin.xyz/";
/// Value of the marker label `applied.nodes.lailin.xyz/<pool>` a pool puts
/// on every node it recorded something on (beside the annotation of the
/// same key): labels can be selected and mapped, annotations cannot.
pub const MARKER_VALUE: &str = "true";
/// Prefix of the RuntimeClass name: `node-pool-<pool>`.
pub const RUNTIME_CLASS_PREFIX: &str = "node-pool-";
/// Handler of the RuntimeClass when the spec names none.
pub const DEFAULT_HANDLER: &str = "runc";
/// The taint effects Kubernetes accepts.
pub const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// Gives the CRD's `spec.taints[].effect` the enum of [`TAINT_EFFECTS`]:
/// k8s-openapi's `Taint` schema has none (Kubernetes validates the effect
/// in code), so without it the API server would accept a pool whose taint
/// no node can carry.
pub(crate) fn taint_effect_enum(schema: &mut schemars::Schema) {
    if let Some(effect) = schema
        .get_mut("items")
        .and_then(|items| items.get_mut("properties"))
        .and_then(|props| props.get_mut("effect"))
        .and_then(Value::as_object_mut)
    {
        effect.insert("enum".into(), json!(TAINT_EFFECTS));
    }
}

/// The CRD's CEL rule: `spec.labels` claims no other pool's role label
/// (`self.metadata.name` is visible to a rule at the root). Enforced by the
/// API server itself, no webhook in the path; the webhook says the same
/// with the key named ([`admission`]).
pub const RULE_OTHER_ROLE: &str = "!has(self.spec.labels) || self.spec.labels.all(k, !k.startsWith('node-role.kubernetes.io/') || k == 'node-role.kubernetes.io/' + self.metadata.name)";
/// The CRD's CEL rule: `spec.labels` does not set the pool's own role label.
pub const RULE_OWN_ROLE: &str = "!has(self.spec.labels) || !(('node-role.kubernetes.io/' + self.metadata.name) in self.spec.labels)";
/// The most labels a pool declares: bounds the CEL rules' cost as the API
/// server estimates it when the CRD is written (an unbounded map makes the
/// estimate exceed its budget).
pub const MAX_LABELS: u32 = 64;

/// A pool of nodes: labels and taints for its nodes, a RuntimeClass for its pods.
///
/// The CRD carries CEL rules (`x-kubernetes-validations`) for what CEL
/// states cleanly: the role-label rules at the root ([`RULE_OTHER_ROLE`],
/// [`RULE_OWN_ROLE`]); the taint effect is an enum of the schema. The
/// qualified-name checks of keys (which need the API server's per-key
/// messages) and the check against other pools (which needs the cache)
/// stay in the webhook.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "nodes.lailin.xyz",
    version = "v1",
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
    #[schemars(transform = taint_effect_enum)]
    pub taints: Vec<Taint>,
    /// The RuntimeClass handler; `runc` when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
}

/// Observed state of a NodePool.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Nodes labelled with the pool's role.
    #[serde(default)]
    pub node_count: i32,
    /// Of those, nodes whose `Ready` condition is not `True`.
    #[serde(default)]
    pub not_ready_node_count: i32,
    /// The pool's nodes, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// `Ready`: every node carries the pool's labels and taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What one pool applied to one node, recorded in the node's annotation
/// `applied.nodes.lailin.xyz/<pool>`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
pub struct Applied {
    /// Labels the pool set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Taints the pool set (key, value, effect).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

impl Applied {
    /// Whether the pool applied nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.taints.is_empty()
    }
}

/// The role label of pool `pool`.
#[must_use]
pub fn role_label(pool: &str) -> String {
    format!("{ROLE_PREFIX}{pool}")
}

/// The annotation recording what pool `pool` applied.
#[must_use]
pub fn applied_annotation(pool: &str) -> String {
    format!("{APPLIED_PREFIX}{pool}")
}

/// The RuntimeClass name of pool `pool`.
#[must_use]
pub fn runtime_class_name(pool: &str) -> String {
    format!("{RUNTIME_CLASS_PREFIX}{pool}")
}

/// What pool `pool` recorded on `node` (empty when absent or unreadable).
#[must_use]
pub fn applied_on(node: &Node, pool: &str) -> Applied {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&applied_annotation(pool)))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// The pools a node belongs to (its role labels).
fn member_of(node: &Node, pool: &str) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(&role_label(pool)))
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

fn taint_value(t: &Taint) -> &str {
    t.value.as_deref().unwrap_or("")
}

/// A taint as a pool declares it: key, value, effect (no `timeAdded`).
fn declared(t: &Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone().filter(|v| !v.is_empty()),
        effect: t.effect.clone(),
        time_added: None,
    }
}

/// Another pool of the node, as far as conflicts and removals care.
#[derive(Debug, Clone, Copy)]
pub struct OtherPool<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its spec.
    pub spec: &'a NodePoolSpec,
}

/// What one pool changes on one node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePlan {
    /// RFC 6902 operations (without the resourceVersion guard); empty = nothing to do.
    pub ops: Vec<Value>,
    /// Declared labels or taints this pool did not apply because a pool
    /// whose name sorts first declares them differently.
    pub conflicts: Vec<String>,
}

/// What pool `pool` (spec `want`, `None` while it is being deleted) must
/// change on `node`, given the other pools the node belongs to. Pure.
///
/// ```
/// use k8s_openapi::api::core::v1::Node;
/// use nodepool::{NodePoolSpec, plan_node};
/// use serde_json::json;
///
/// let node: Node = serde_json::from_value(json!({
///     "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/gpu": "", "team": "a"}},
///     "spec": {"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}
/// })).unwrap();
/// let spec: NodePoolSpec = serde_json::from_value(json!({
///     "labels": {"pool": "gpu"},
///     "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]
/// })).unwrap();
/// let plan = plan_node("gpu", Some(&spec), &node, &[]);
/// // label added, taint list = cordon taint + pool taint, marker label and
/// // ownership record
/// assert_eq!(plan.ops.len(), 4);
/// assert_eq!(plan.ops[2]["path"], "/metadata/labels/applied.nodes.lailin.xyz~1gpu");
/// assert_eq!(plan.ops[1]["value"][0]["key"], "node.kubernetes.io/unschedulable");
/// ```
#[must_use]
pub fn plan_node(
    pool: &str,
    want: Option<&NodePoolSpec>,
    node: &Node,
    others: &[OtherPool<'_>],
) -> NodePlan {
    let member = want.is_some() && member_of(node, pool);
    let empty = NodePoolSpec::default();
    let want = if member {
        want.unwrap_or(&empty)
    } else {
        &empty
    };
    let others: Vec<&OtherPool<'_>> = others
        .iter()
        .filter(|o| o.name != pool && member_of(node, o.name))
        .collect();
    let applied = applied_on(node, pool);
    let mut plan = NodePlan::default();
    let mut now = Applied::default();

    // Labels.
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut set = BTreeMap::new();
    let mut remove = BTreeSet::new();
    for (k, v) in &want.labels {
        let winner = others
            .iter()
            .filter(|o| o.name < pool)
            .find(|o| o.spec.labels.get(k).is_some_and(|ov| ov != v));
        if let Some(o) = winner {
            plan.conflicts.push(format!(
                "label {k}={v} (pool {} sets {k}={})",
                o.name, o.spec.labels[k]
            ));
            continue;
        }
        now.labels.insert(k.clone(), v.clone());
        if labels.get(k) != Some(v) {
            set.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in &applied.labels {
        if now.labels.contains_key(k) || others.iter().any(|o| o.spec.labels.contains_key(k)) {
            continue;
        }
        if labels.get(k) == Some(v) {
            remove.insert(k.clone());
        }
    }
    if node.metadata.labels.is_none() && !set.is_empty() {
        plan.ops
            .push(json!({"op": "add", "path": "/metadata/labels", "value": set}));
    } else {
        for (k, v) in &set {
            plan.ops.push(
                json!({"op": "add", "path": format!("/metadata/labels/{}", escape(k)), "value": v}),
            );
        }
    }
    for k in &remove {
        plan.ops
            .push(json!({"op": "remove", "path": format!("/metadata/labels/{}", escape(k))}));
    }

    // Taints: rebuild the atomic list, keeping every taint not ours in place.
    let current: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let mut taints = current.clone();
    for t in &want.taints {
        let t = declared(t);
        let winner = others.iter().filter(|o| o.name < pool).find(|o| {
            o.spec
                .taints
                .iter()
                .any(|ot| same_taint(ot, &t) && taint_value(ot) != taint_value(&t))
        });
        if let Some(o) = winner {
            plan.conflicts.push(format!(
                "taint {}={}:{} (pool {} sets another value)",
                t.key,
                taint_value(&t),
                t.effect,
                o.name
            ));
            continue;
        }
        match taints.iter_mut().find(|c| same_taint(c, &t)) {
            Some(c) if taint_value(c) == taint_value(&t) => {}
            Some(c) => c.value = t.value.clone(),
            None => taints.push(t.clone()),
        }
        now.taints.push(t);
    }
    for a in &applied.taints {
        let still_wanted = now.taints.iter().any(|t| same_taint(t, a))
            || others
                .iter()
                .any(|o| o.spec.taints.iter().any(|t| same_taint(t, a)));
        if !still_wanted {
            taints.retain(|c| !(same_taint(c, a) && taint_value(c) == taint_value(a)));
        }
    }
    if taints != current {
        if node.spec.is_none() {
            plan.ops
                .push(json!({"op": "add", "path": "/spec", "value": {"taints": taints}}));
        } else if taints.is_empty() {
            plan.ops
                .push(json!({"op": "remove", "path": "/spec/taints"}));
        } else {
            plan.ops
                .push(json!({"op": "add", "path": "/spec/taints", "value": taints}));
        }
    }

    // The record of what this pool applied, and its marker label.
    let key = applied_annotation(pool);
    let marked = labels.contains_key(&key);
    if now.is_empty() && marked && !remove.contains(&key) {
        plan.ops
            .push(json!({"op": "remove", "path": format!("/metadata/labels/{}", escape(&key))}));
    }
    if !now.is_empty() && labels.get(&key).map(String::as_str) != Some(MARKER_VALUE) {
        if node.metadata.labels.is_none() && set.is_empty() {
            plan.ops.push(
                json!({"op": "add", "path": "/metadata/labels", "value": {key.clone(): MARKER_VALUE}}),
            );
        } else {
            plan.ops.push(json!({"op": "add", "path": format!("/metadata/labels/{}", escape(&key)), "value": MARKER_VALUE}));
        }
    }
    let annotations = node.metadata.annotations.as_ref();
    let recorded = annotations.and_then(|a| a.get(&key));
    if now.is_empty() {
        if recorded.is_some() {
            plan.ops.push(
                json!({"op": "remove", "path": format!("/metadata/annotations/{}", escape(&key))}),
            );
        }
    } else if recorded
        .and_then(|text| serde_json::from_str::<Applied>(text).ok())
        .as_ref()
        != Some(&now)
    {
        let text = serde_json::to_string(&now).unwrap_or_default();
        if annotations.is_none() {
            plan.ops
                .push(json!({"op": "add", "path": "/metadata/annotations", "value": {key: text}}));
        } else {
            plan.ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", escape(&key)), "value": text}));
        }
    }
    plan
}

/// RFC 6901 escaping of one JSON pointer segment.
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The handler of `spec`'s RuntimeClass.
#[must_use]
pub fn handler_of(spec: &NodePoolSpec) -> String {
    spec.handler
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| DEFAULT_HANDLER.to_owned())
}

/// The RuntimeClass `pool` wants: handler, node selector = labels, one
/// `Equal` toleration per taint, controller owner reference to the pool.
#[must_use]
pub fn runtime_class_for(pool: &NodePool) -> RuntimeClass {
    let spec = &pool.spec;
    let tolerations: Vec<Toleration> = spec
        .taints
        .iter()
        .map(|t| Toleration {
            key: Some(t.key.clone()),
            operator: Some("Equal".to_owned()),
            value: Some(taint_value(t).to_owned()),
            effect: Some(t.effect.clone()),
            toleration_seconds: None,
        })
        .collect();
    let scheduling = (!spec.labels.is_empty() || !tolerations.is_empty()).then(|| Scheduling {
        node_selector: (!spec.labels.is_empty()).then(|| spec.labels.clone()),
        tolerations: (!tolerations.is_empty()).then_some(tolerations),
    });
    let owner = pool.controller_owner_ref(&()).map(|mut r| {
        // blockOwnerDeletion needs `update` on nodepools/finalizers in real
        // clusters; garbage collection does not need it.
        r.block_owner_deletion = None;
        vec![r]
    });
    RuntimeClass {
        metadata: ObjectMeta {
            name: Some(runtime_class_name(&pool.name_any())),
            owner_references: owner,
            ..ObjectMeta::default()
        },
        handler: handler_of(spec),
        scheduling,
        overhead: None,
    }
}

/// Whether `existing` already is what `want` asks for (in the fields the
/// plugin manages).
fn runtime_class_matches(existing: &RuntimeClass, want: &RuntimeClass) -> bool {
    let norm = |s: &Option<Scheduling>| {
        let s = s.clone().unwrap_or_default();
        (
            s.node_selector.unwrap_or_default(),
            s.tolerations.unwrap_or_default(),
        )
    };
    let owned = want.metadata.owner_references.iter().flatten().all(|w| {
        existing
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|e| e.uid == w.uid && e.controller == Some(true))
    });
    existing.handler == want.handler
        && norm(&existing.scheduling) == norm(&want.scheduling)
        && owned
}

/// Problems of a spec that the API server would refuse on the nodes.
/// What an operator configures for the plugin (`spec.settings` of its
/// Plugin object, or `nodepool.settings.json` beside the file). Every field
/// is optional; the defaults are the plugin's behaviour without settings.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePoolSettings {
    /// The RuntimeClass handler of pools whose spec names none.
    #[serde(default = "default_handler")]
    pub default_handler: String,
    /// Label and taint keys a pool may manage must start with one of these
    /// prefixes (e.g. `example.com/`); empty: any key (the role label's
    /// prefix is never allowed). A pool whose spec uses another key is
    /// invalid: its status says which, and it only cleans up.
    #[serde(default)]
    pub allowed_key_prefixes: Vec<String>,
    /// Only NodePools matching this label selector are this plugin's (e.g.
    /// `tier=gpu`): with it, several Plugin objects can run this module
    /// side by side, each for its own pools, with its own settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_selector: Option<String>,
}

fn default_handler() -> String {
    DEFAULT_HANDLER.to_owned()
}

impl Default for NodePoolSettings {
    fn default() -> Self {
        Self {
            default_handler: default_handler(),
            allowed_key_prefixes: Vec::new(),
            pool_selector: None,
        }
    }
}

impl Settings for NodePoolSettings {
    fn validate(&self) -> Result<(), String> {
        let h = &self.default_handler;
        let dns_label = !h.is_empty()
            && h.len() <= 63
            && h.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !h.starts_with('-')
            && !h.ends_with('-');
        if !dns_label {
            return Err(format!(
                "defaultHandler {h:?} is not a DNS label (lower-case letters, digits and '-', at most 63)"
            ));
        }
        if let Some(p) = self
            .allowed_key_prefixes
            .iter()
            .find(|p| p.is_empty() || p.starts_with(ROLE_PREFIX))
        {
            return Err(format!(
                "allowedKeyPrefixes: {p:?} would allow keys a pool cannot manage"
            ));
        }
        Ok(())
    }
}

impl NodePoolSettings {
    /// Problems of `spec` under these settings (beyond [`invalid_spec`]'s).
    fn problems(&self, spec: &NodePoolSpec) -> Vec<String> {
        if self.allowed_key_prefixes.is_empty() {
            return Vec::new();
        }
        let allowed = |k: &str| self.allowed_key_prefixes.iter().any(|p| k.starts_with(p));
        let labels = spec.labels.keys().map(|k| ("label", k.as_str()));
        let taints = spec.taints.iter().map(|t| ("taint", t.key.as_str()));
        labels
            .chain(taints)
            .filter(|(_, k)| !k.is_empty() && !allowed(k))
            .map(|(what, k)| {
                format!(
                    "{what} key {k:?} is outside the allowed prefixes ({})",
                    self.allowed_key_prefixes.join(", ")
                )
            })
            .collect()
    }

    /// The RuntimeClass `pool` wants under these settings.
    #[must_use]
    pub fn runtime_class_for(&self, pool: &NodePool) -> RuntimeClass {
        let mut rc = runtime_class_for(pool);
        if pool.spec.handler.as_deref().is_none_or(str::is_empty) {
            rc.handler.clone_from(&self.default_handler);
        }
        rc
    }
}

/// The spec's own problems (settings aside).
fn invalid_spec(spec: &NodePoolSpec) -> Vec<String> {
    let mut problems = Vec::new();
    for t in &spec.taints {
        if t.key.is_empty() {
            problems.push("a taint has an empty key".to_owned());
        }
        if !TAINT_EFFECTS.contains(&t.effect.as_str()) {
            problems.push(format!(
                "taint {} has effect {:?} (want one of {})",
                t.key,
                t.effect,
                TAINT_EFFECTS.join(", ")
            ));
        }
    }
    for k in spec.labels.keys() {
        if k.is_empty() || k.starts_with(ROLE_PREFIX) {
            problems.push(format!("label key {k:?} cannot be managed by a pool"));
        }
    }
    problems
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The plugin.
pub struct NodePoolPlugin;

impl Plugin for NodePoolPlugin {
    type Primary = NodePool;

    fn register() -> Result<Registration, Error> {
        let settings = rekon_sdk::settings::<NodePoolSettings>()?;
        let registration = Registration::new::<NodePool>(PLUGIN_NAME, env!("CARGO_PKG_VERSION"));
        let registration = match &settings.pool_selector {
            Some(selector) => registration.primary_selector(selector),
            None => registration,
        };
        Ok(registration
            .settings::<NodePoolSettings>()
            // A node event wakes the pools its role labels name, and
            // those its marker labels name (former members), computed
            // by the host from the node's new and previous labels.
            .watch::<Node>(
                ClusterSet::Primary,
                Mapping::label_key_prefixes(&[ROLE_PREFIX, APPLIED_PREFIX]),
            )
            .watch::<RuntimeClass>(ClusterSet::Primary, Mapping::OwnerReference)
            .finalizer(FINALIZER)
            .permission::<NodePool>(
                &[
                    Verb::Get,
                    Verb::List,
                    Verb::Watch,
                    Verb::Patch,
                    Verb::Update,
                ],
                ClusterSet::Primary,
            )
            .status_permission::<NodePool>(
                &[Verb::Get, Verb::Patch, Verb::Update],
                ClusterSet::Primary,
            )
            .permission::<Node>(
                &[Verb::Get, Verb::List, Verb::Watch, Verb::Patch],
                ClusterSet::Primary,
            )
            .permission::<RuntimeClass>(
                &[
                    Verb::Get,
                    Verb::List,
                    Verb::Watch,
                    Verb::Create,
                    Verb::Patch,
                    Verb::Delete,
                ],
                ClusterSet::Primary,
            )
            .crd(v1alpha1::crd()?))
    }

    fn reconcile(ctx: &Context, req: &Request, event: Event<NodePool>) -> Result<Outcome, Error> {
        let deleting = event.is_cleanup();
        let pool = event.into_primary();
        let name = pool.name_any();
        let cluster = req.cluster.as_str();
        let pool_ref = ObjectRef::for_request::<NodePool>(req);
        let settings: NodePoolSettings = ctx.settings()?;
        let invalid = |spec: &NodePoolSpec| {
            let mut problems = invalid_spec(spec);
            problems.extend(settings.problems(spec));
            problems
        };
        let problems = invalid(&pool.spec);

        // Only the pool's nodes: members (role label) and nodes it recorded
        // something on (marker label), both served from the host's index.
        let mut nodes = ctx.list::<Node>(cluster, None, Some(&role_label(&name)))?;
        for node in ctx.list::<Node>(cluster, None, Some(&applied_annotation(&name)))? {
            if !nodes.iter().any(|n| n.metadata.name == node.metadata.name) {
                nodes.push(node);
            }
        }
        nodes.sort_by_key(|n| n.name_any());
        // Only the other pools that share one of these nodes.
        let mut other_names = BTreeSet::new();
        for node in &nodes {
            for key in node.metadata.labels.iter().flat_map(|l| l.keys()) {
                if let Some(other) = key.strip_prefix(ROLE_PREFIX)
                    && other != name
                    && !other.is_empty()
                {
                    other_names.insert(other.to_owned());
                }
            }
        }
        let mut pools = Vec::new();
        for other in &other_names {
            if let Some(p) = ctx.get::<NodePool>(cluster, None, other)? {
                pools.push(p);
            }
        }
        let others: Vec<OtherPool<'_>> = pools
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && invalid(&p.spec).is_empty())
            .map(|p| OtherPool {
                name: p.metadata.name.as_deref().unwrap_or_default(),
                spec: &p.spec,
            })
            .collect();

        // With an invalid spec the pool only cleans up (as if deleting).
        let want = (!deleting && problems.is_empty()).then_some(&pool.spec);
        let mut patches = Vec::new();
        let mut updated = Vec::new();
        let mut conflicts = Vec::new();
        for node in &nodes {
            let plan = plan_node(&name, want, node, &others);
            let node_name = node.name_any();
            conflicts.extend(plan.conflicts.iter().map(|c| format!("{node_name}: {c}")));
            if plan.ops.is_empty() {
                continue;
            }
            let patch = Action::json_patch(
                ObjectRef::new::<Node>(cluster, None, &node_name),
                Value::Array(plan.ops),
            );
            patches.push(match node.metadata.resource_version.as_deref() {
                Some(rv) => patch.resource_version(rv),
                None => patch,
            });
            updated.push(node_name);
        }

        if deleting {
            let mut outcome = Outcome::with_actions(patches);
            if !updated.is_empty() {
                rekon_sdk::info!(ctx, "removing the pool from its nodes"; pool = name, nodes = updated.join(","));
                outcome.push(Action::normal_event(
                    pool_ref,
                    "NodesCleaned",
                    "Delete",
                    &format!(
                        "removing the pool's labels and taints from {}",
                        updated.join(", ")
                    ),
                ));
            }
            return Ok(outcome);
        }

        let mut outcome = Outcome::done();
        let members: Vec<&Node> = nodes.iter().filter(|n| member_of(n, &name)).collect();
        let status = status_for(ctx, &pool, &members, &updated, &conflicts, &problems);
        let old = pool.status.clone().unwrap_or_default();
        if rekon_sdk::status_changed(pool.status.as_ref(), &status) {
            outcome.push(
                Action::merge_patch(
                    pool_ref.clone(),
                    json!({ "status": serde_json::to_value(&status)? }),
                )
                .status(),
            );
            if let (Some(new), old) = (ready_condition(&status), ready_condition(&old))
                && new.reason == "Conflict"
                && old.is_none_or(|o| o.reason != "Conflict" || o.message != new.message)
            {
                outcome.push(Action::warning_event(
                    pool_ref.clone(),
                    "Conflict",
                    "Update",
                    &new.message,
                ));
            }
        }

        // The RuntimeClass (left as it is while the spec is invalid).
        let want_rc = settings.runtime_class_for(&pool);
        let rc_name = runtime_class_name(&name);
        let existing_rc = ctx.get::<RuntimeClass>(cluster, None, &rc_name)?;
        match existing_rc {
            _ if !problems.is_empty() => {}
            Some(existing) if runtime_class_matches(&existing, &want_rc) => {}
            existing => {
                if let Some(existing) = existing.as_ref().filter(|e| e.handler != want_rc.handler) {
                    // `handler` is immutable: replace the object.
                    let delete =
                        Action::delete(ObjectRef::new::<RuntimeClass>(cluster, None, &rc_name));
                    outcome.push(match existing.metadata.uid.as_deref() {
                        Some(uid) => delete.uid(uid),
                        None => delete,
                    });
                }
                outcome.push(Action::apply(cluster, &want_rc).force());
                outcome.push(Action::normal_event(
                    pool_ref.clone(),
                    "RuntimeClassUpdated",
                    "Apply",
                    &format!("RuntimeClass {rc_name} with handler {}", want_rc.handler),
                ));
            }
        }

        if !updated.is_empty() {
            rekon_sdk::info!(ctx, "updating nodes"; pool = name, nodes = updated.join(","));
            let note = format!("updating labels and taints of {}", updated.join(", "));
            outcome
                .actions
                .extend(patches.into_iter().map(Action::from));
            outcome.push(Action::normal_event(
                pool_ref,
                "NodesUpdated",
                "Patch",
                &note,
            ));
        }
        Ok(outcome)
    }
}

fn ready_condition(status: &NodePoolStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

/// The status the pool should show.
fn status_for(
    ctx: &Context,
    pool: &NodePool,
    members: &[&Node],
    updating: &[String],
    conflicts: &[String],
    problems: &[String],
) -> NodePoolStatus {
    let (status, reason, message) = if !problems.is_empty() {
        ("False", "InvalidSpec", problems.join("; "))
    } else if !conflicts.is_empty() {
        (
            "False",
            "Conflict",
            format!("not applied: {}", conflicts.join("; ")),
        )
    } else if !updating.is_empty() {
        (
            "False",
            "UpdatingNodes",
            format!("updating {}", updating.join(", ")),
        )
    } else {
        let n = members.len();
        (
            "True",
            "Converged",
            format!("{n} node(s) carry the pool's labels and taints"),
        )
    };
    let old = pool.status.as_ref().and_then(ready_condition);
    let last_transition_time = match old {
        Some(o) if o.status == status => o.last_transition_time.clone(),
        _ => ctx.now_seconds(),
    };
    let ready = Condition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: pool.metadata.generation,
        last_transition_time,
    };
    let not_ready = members.iter().filter(|n| !node_ready(n)).count();
    NodePoolStatus {
        node_count: i32::try_from(members.len()).unwrap_or(i32::MAX),
        not_ready_node_count: i32::try_from(not_ready).unwrap_or(i32::MAX),
        nodes: members.iter().map(|n| n.name_any()).collect(),
        conditions: vec![ready],
    }
}

rekon_sdk::export_plugin!(NodePoolPlugin, admission, conversion);
