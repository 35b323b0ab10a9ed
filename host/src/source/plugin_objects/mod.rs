//! Plugins from `Plugin` objects in the primary cluster (`rekon run
//! --plugin-objects`), a single-kind CRD controller in kube-runtime's
//! shape: [`PluginObjects`] follows the objects and schedules one pass per
//! object through the [`crate::queue::WorkQueue`]; a pass is
//! `reconcile(object, ctx) -> Result<Action, PluginObjectError>`, whose
//! error's [`PluginObjectError::reason`] is the reason of the object's
//! conditions. Every replica loads what the objects say and reports what
//! it serves; the status writer (the leader, or the holder of shard 0)
//! writes statuses, `Consistent` from every live replica's report.
//!
//! # Layout
//! The steps of a pass, in order, one file each, each importing only files
//! listed before it:
//! - [`module_source`]: [`ModuleSource`] (the OCI fetcher in production);
//! - `error`: [`PluginObjectError`];
//! - `context`: what every pass shares, what this replica remembers of an
//!   object, [`PluginObjectsConfig`], the origins modules load under;
//! - `resolve`: step 1, what a pass has to do (nothing, toggle suspension,
//!   apply);
//! - `fetch`: step 2, the module (verified by digest), or after a restart
//!   with the registry out of reach the last resolved digest from the
//!   cache;
//! - `verify`: step 2b, the signatures of the digest fetched against
//!   `spec.verification` (keys from Secrets, ConfigMaps or inline;
//!   `--require-signatures` refuses a Plugin without it), before anything
//!   is compiled;
//! - `grant`: step 3, `spec.permissions` and the check that a module
//!   declares nothing beyond it;
//! - `load`: step 4, compile, register (settings, instance name), accept,
//!   swap in through [`crate::plugin::PluginRegistry::apply_module`];
//! - `shadow`: step 5, `spec.shadow` the same way beside it;
//! - `conditions`: `Fetched`, `Verified`, `Ready` and `Degraded` from the
//!   steps;
//! - `status`: step 6, this replica's report and the status write;
//! - `reconcile`: one pass through the steps;
//! - `run`: [`PluginObjects`], the watch and the queue.

mod conditions;
mod context;
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

pub use context::{PluginObjectsConfig, origin, shadow_origin};
pub use error::PluginObjectError;
pub use module_source::{FetchFailure, FetchRequest, Module, ModuleSource, VerifyRequest};
pub use run::PluginObjects;
