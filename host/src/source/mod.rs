//! Where plugins come from besides the plugin directory (which the
//! registry watches itself, `crate::plugin::PluginRegistry::watch_dir`).
//!
//! # Layout
//! - [`oci`]: plugin components in OCI registries (the CNCF wasm artifact
//!   layout): fetch with digest verification, a disk cache by digest, size
//!   limit, timeouts and retries; push; pull Secrets.
//! - [`plugin_crd`]: the `Plugin` custom resource (`plugins.rekon.dev`)
//!   and the grant check.
//! - [`signature`]: signed modules (cosign's key-based tag format):
//!   keys, payload, policy, sign and verify against a registry.
//! - [`plugin_objects`]: [`plugin_objects::PluginObjects`], which follows
//!   Plugin objects in the primary cluster, fetches their modules (through
//!   [`oci`]), loads them into the registry and writes their status.

pub mod oci;
pub mod plugin_crd;
pub mod plugin_objects;
pub mod signature;
