//! Step 4, load: compile, check against the contract, register with the
//! object's settings and under its name, accept within the grant (step 3),
//! then swap in ([`crate::plugin::PluginRegistry::apply_module`]). On any
//! failure whatever served keeps serving.

use std::path::Path;
use std::sync::Arc;

use super::context::Context;
use super::error::PluginObjectError;
use super::grant::within_grant;
use super::module_source::Module;
use crate::action::Permission;
use crate::plugin::{LoadOptions, LoadedPlugin};

/// Compiles, registers and accepts `module` under `origin` on the blocking
/// pool: as the plugin named after the Plugin object
/// (`options.instance`), with its settings, declaring nothing beyond
/// `grant`.
///
/// # Errors
/// The registry's refusal (its reason: `InvalidSettings`, `NameConflict`,
/// `PermissionsExceedGrant`, `LoadFailed`, …), or
/// [`PluginObjectError::LoadTask`].
pub(super) async fn load(
    ctx: &Context,
    origin: &Path,
    module: &Module,
    grant: &[Permission],
    options: &LoadOptions,
) -> Result<LoadedPlugin, PluginObjectError> {
    let registry = ctx.registry.clone();
    let origin = origin.to_path_buf();
    let bytes = Arc::clone(&module.bytes);
    let grant = grant.to_vec();
    let options = options.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        registry.apply_module(&origin, &bytes, &options, |plugin| {
            within_grant(&plugin.registration().permissions, &grant).map_err(|e| e.to_refusal())
        })
    })
    .await
    .map_err(PluginObjectError::LoadTask)??;
    Ok(loaded)
}
