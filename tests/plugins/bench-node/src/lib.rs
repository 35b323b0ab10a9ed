//! # bench-node — the realistic reconcile of the runtime benchmark
//!
//! Reconciling a Node reads it from the host's cache (a ~5 KB JSON object,
//! see `node.json`), parses it into `k8s_openapi`'s `Node`, sets a few pool
//! labels, drops a stale one and returns a server-side apply of the edited
//! object. `host/benches/runtime.rs` runs it through the plugin runtime and
//! compares it with [`relabel::relabel_json`] compiled natively.
//!
//! ```text
//! cargo build -p rekon-bench-node --target wasm32-wasip2 --profile wasm
//! ```

pub mod relabel;

use k8s_openapi::api::core::v1::Node;
use rekon_sdk::prelude::*;

/// The benchmark plugin.
pub struct BenchNode;

impl Plugin for BenchNode {
    type Primary = Node;

    fn register() -> Result<Registration, Error> {
        Ok(
            Registration::new::<Node>("bench-node", "1.0.0").permission::<Node>(
                &[Verb::Get, Verb::List, Verb::Watch, Verb::Patch],
                ClusterSet::All,
            ),
        )
    }

    fn reconcile(_ctx: &Context, req: &Request, event: Event<Node>) -> Result<Outcome, Error> {
        let mut node = event.into_primary();
        relabel::relabel(&mut node);
        Ok(Outcome::done().with(Action::apply(&req.cluster, &node)))
    }
}

rekon_sdk::export_plugin!(BenchNode);
