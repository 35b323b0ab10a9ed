//! Where plugins come from besides the plugin directory (which the
//! registry watches itself, `crate::plugin::PluginRegistry::watch_dir`).
//!
//! # Layout
//! - [`plugin_crd`]: the `Plugin` custom resource (`plugins.rekon.dev`)
//!   and the grant check.
//! - [`plugin_objects`]: [`plugin_objects::PluginObjects`], which follows
//!   Plugin objects in the primary cluster, fetches their modules, loads
//!   them into the registry and writes their status.
//!
//! # Floor
//! Stands on the plugin runtime (its registry), clusters, leases and
//! telemetry; the app wires it in. Never imports the controller.

pub mod plugin_crd;
pub mod plugin_objects;
