//! Native test kit: run a plugin's `register`, `reconcile` and `map` without
//! wasm and without a cluster, against a fake [`World`] of clusters and
//! objects, and assert on the returned actions.
//!
//! The world plays the host's part: it serves reads from its objects (only
//! those the registration watches, like the host), adds the plugin's
//! finalizer to primaries before reconciling them, checks every write
//! against the declared permissions, and applies outcomes the way the API
//! server would — so a test can loop reconcile → apply until nothing changes
//! and then check the end state.
//!
//! ```
//! use rekon_sdk::prelude::*;
//! use rekon_sdk::testkit::World;
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! /// Copies `data.source` of a ConfigMap into `data.copy`.
//! struct Copier;
//! impl Plugin for Copier {
//!     type Primary = ConfigMap;
//!     fn register() -> Result<Registration, Error> {
//!         Ok(Registration::new::<ConfigMap>("copier", "0.1.0")
//!             .permission::<ConfigMap>(&[Verb::Get, Verb::Patch], ClusterSet::Primary))
//!     }
//!     fn reconcile(ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
//!         let Event::Apply(cm) = event else { return Ok(Outcome::done()) };
//!         let source = cm.data.unwrap_or_default().get("source").cloned().unwrap_or_default();
//!         let mut applied = ConfigMap::default();
//!         applied.metadata.name = Some(req.name.clone());
//!         applied.metadata.namespace = req.namespace.clone();
//!         applied.data = Some([("copy".to_string(), source)].into());
//!         Ok(Outcome::done().with(Action::apply(&req.cluster, &applied)))
//!     }
//! }
//!
//! let mut world = World::new().primary("main");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("c".into());
//! cm.metadata.namespace = Some("default".into());
//! cm.data = Some([("source".to_string(), "hello".to_string())].into());
//! world.insert("main", &cm);
//!
//! let req = Request::namespaced("main", "default", "c");
//! let outcome = world.reconcile::<Copier>(&req).unwrap();
//! let applied: ConfigMap = outcome.find_apply::<ConfigMap>("main", "c").unwrap().decode().unwrap();
//! assert_eq!(applied.data.unwrap()["copy"], "hello");
//!
//! world.converge::<Copier>(&req, 5).unwrap();
//! world.assert_stable::<Copier>(&req); // a second pass changes nothing
//! let cm: ConfigMap = world.get("main", Some("default"), "c").unwrap();
//! assert_eq!(cm.data.unwrap()["copy"], "hello");
//! ```
//!
//! # Fidelity
//!
//! - Server-side apply is modelled per field manager: applied fields are
//!   merged into the object (maps merge, lists and scalars replace), and
//!   fields the plugin applied before and omits now are removed. Fields set
//!   by [`World::insert`] belong to nobody; co-ownership is not modelled.
//! - Merge patches follow RFC 7386 and JSON patches RFC 6902 (json-patch).
//!   A `status` patch or apply changes only `status`.
//! - Deleting an object with finalizers sets `deletionTimestamp`; removing
//!   the last finalizer of a deleting object removes it. Deletion cascades to
//!   dependents (owner references, same cluster) unless `Orphan`.
//! - `resourceVersion` increases on every change; `uid` and
//!   `creationTimestamp` are set on creation. Preconditions are checked.
//! - Label selectors: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`,
//!   `a notin (x,y)`, comma-separated.
//! - Outcomes are applied like the host's writer does: actions are grouped
//!   per cluster (in order of first appearance) and performed in order
//!   within each cluster; a failed action stops the remaining actions *of
//!   that cluster only*, and the finalizer is removed only if every action
//!   succeeded. Write failures can be injected per cluster
//!   ([`World::fail_writes`]) or per object ([`World::fail_writes_to`]) and
//!   lifted with [`World::heal`].
//! - A write to an object of a CRD the plugin registers is checked against
//!   that CRD's `x-kubernetes-validations` rules (kube-cel, the evaluation
//!   kube-sim runs: `rekon_rules::cel::crd_rules`) and refused as the API
//!   server refuses it ([`TestkitError::Invalid`]: `Kind.group "name" is
//!   invalid: spec.size: Invalid value: ...`); the world is left as it was.

mod admit;
mod backend;
mod case;
mod crd_rules;
mod drive;
mod error;
mod policies;
mod store;
mod world;

pub use case::{CASE_FORMAT, CaseError, CaseReplay, RecordedCase, assert_cases};
pub use error::{LogLine, TestkitError};
pub use world::{DEFAULT_TIME_SECONDS, World};

#[cfg(test)]
mod tests;
