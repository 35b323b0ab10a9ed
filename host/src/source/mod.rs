//! Where plugins come from besides the plugin directory (which the
//! registry watches itself): [`oci`] registries, the [`plugin_crd`] that
//! names a module, [`signature`]s that vouch for it, and the
//! [`plugin_objects`] controller that follows those objects and loads what
//! they name; the [`webhook_configs`] of plugins that admit, which the host
//! keeps for Plugin objects ([`managed_webhooks`]), with the conversion of
//! the CRDs they convert ([`managed_conversion`]).

pub mod managed_conversion;
pub mod managed_webhooks;
pub mod oci;
pub mod plugin_crd;
pub mod plugin_objects;
pub mod signature;
pub mod webhook_configs;
