//! # bench-fanout — the engine benchmark's plugin
//!
//! Primary: core v1 `ConfigMap` in the primary cluster. For each one, a
//! `Secret` of the same name in every engaged cluster, applied by
//! server-side apply, carrying owner labels (`owner.cluster`,
//! `owner.namespace`, `owner.name`) and the ConfigMap's `data.value` as
//! annotation `bench/value`. Secrets are watched in every cluster and
//! mapped back through the owner labels. `host/benches/engine.rs` runs the
//! same logic natively and as a kube-rs `Controller` for comparison.
//!
//! ```text
//! cargo build -p rekon-bench-fanout --target wasm32-wasip2 --profile wasm
//! ```

use rekon_sdk::k8s_openapi::api::core::v1::{ConfigMap, Secret};
use rekon_sdk::prelude::*;
use serde_json::json;

/// The plugin.
pub struct BenchFanout;

impl Plugin for BenchFanout {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("bench-fanout", "1.0.0")
            .clusters(ClusterSet::All)
            .watch::<Secret>(
                ClusterSet::All,
                Mapping::OwnerLabels(OwnerLabels::new(
                    "owner.cluster",
                    "owner.namespace",
                    "owner.name",
                )),
            )
            .permission::<ConfigMap>(Verb::READ, ClusterSet::Primary)
            .permission::<Secret>(
                &[Verb::Get, Verb::List, Verb::Watch, Verb::Patch],
                ClusterSet::All,
            ))
    }

    fn reconcile(ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
        let cm = event.into_primary();
        let value = cm
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .cloned()
            .unwrap_or_default();
        let ns = req.namespace.clone().unwrap_or_default();
        let mut out = Outcome::done();
        for cluster in ctx.clusters() {
            out.push(
                Action::apply_json(
                    &cluster.name,
                    json!({
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {
                            "name": req.name,
                            "namespace": ns,
                            "labels": {
                                "owner.cluster": req.cluster,
                                "owner.namespace": ns,
                                "owner.name": req.name,
                            },
                            "annotations": {"bench/value": value},
                        },
                    }),
                )
                .force(),
            );
        }
        Ok(out)
    }
}

rekon_sdk::export_plugin!(BenchFanout);
