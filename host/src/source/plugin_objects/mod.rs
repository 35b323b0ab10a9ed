//! Plugins from `Plugin` objects in the primary cluster (`rekon run
//! --plugin-objects`), a single-kind CRD controller in kube-runtime's
//! shape: [`PluginObjects`] follows the objects and schedules one pass per
//! object through the [`crate::queue::WorkQueue`]; a pass is
//! `reconcile(object, ctx) -> Result<Action, PluginObjectError>`, whose
//! error's [`PluginObjectError::reason`] is the reason of the object's
//! conditions. Every replica loads what the objects say and reports what
//! it serves; the status writer (the leader, or the holder of shard 0)
//! writes statuses, `Consistent` from every live replica's report.

// The files in the order of a pass: what the steps share (module_source,
// error, context); the steps resolve, fetch, verify (before anything is
// compiled), grant, load, shadow, conditions, status; reconcile (one
// pass) and run (the watch and the queue). Each imports only files
// earlier in that order.
mod conditions;
mod contained;
mod context;
mod drift;
mod error;
mod fetch;
mod grant;
mod load;
pub mod module_source;
mod reconcile;
mod resolve;
mod run;
mod shadow;
mod status;
#[cfg(test)]
mod tests;
mod verify;
mod webhooks;

pub use context::{PluginObjectsConfig, origin, shadow_origin};
pub use error::PluginObjectError;
pub use module_source::{FetchFailure, FetchRequest, Module, ModuleSource, VerifyRequest};
pub use run::PluginObjects;
