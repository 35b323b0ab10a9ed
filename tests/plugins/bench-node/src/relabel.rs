//! The benchmarked logic, shared verbatim by the plugin (`lib.rs`) and the
//! host's native baseline (`host/benches/runtime.rs` includes this file), so
//! that both sides run the same code.

use k8s_openapi::api::core::v1::Node;

/// The labels the "pool" manages.
pub const POOL_LABELS: &[(&str, &str)] = &[
    ("node-role.kubernetes.io/bench", ""),
    ("nodes.lailin.xyz/pool", "bench"),
    ("nodes.lailin.xyz/tier", "gold"),
    ("nodes.lailin.xyz/generation", "7"),
];

/// A label the pool stopped declaring.
pub const STALE_LABEL: &str = "nodes.lailin.xyz/zone-legacy";

/// Sets the pool's labels on `node` and drops the stale one.
pub fn relabel(node: &mut Node) {
    let labels = node.metadata.labels.get_or_insert_with(Default::default);
    for (key, value) in POOL_LABELS {
        labels.insert((*key).to_owned(), (*value).to_owned());
    }
    labels.remove(STALE_LABEL);
}

/// Parse, relabel, serialize: what one reconcile of the plugin does to the
/// Node it reads. The SDK's `Action::apply` turns the typed object into a
/// `serde_json::Value` (adding apiVersion/kind) and the value into text
/// (`serde_json::to_string`) when the action crosses to the host; the same
/// two steps are done here.
pub fn relabel_json(node_json: &str) -> Result<String, serde_json::Error> {
    let mut node: Node = serde_json::from_str(node_json)?;
    relabel(&mut node);
    let mut value = serde_json::to_value(&node)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), "v1".into());
        map.insert("kind".into(), "Node".into());
    }
    serde_json::to_string(&value)
}
