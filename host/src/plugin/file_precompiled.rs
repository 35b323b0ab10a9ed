//! Precompiled code beside a plugin file: `x.cwasm` next to `x.wasm`
//! (`rekon plugin compile --precompiled`), used only when its own cosign
//! blob signature `x.cwasm.sig` passes the same [`FileCheck`] as the
//! module (`rekon run --signature-key`); without keys, or without a valid
//! signature, it is ignored with a log line and the module compiles.

use std::path::{Path, PathBuf};

use super::file_check::{FileCheck, signature_file};
use super::precompiled::Precompiled;
use crate::telemetry::metrics::Metrics;

/// The artifact file of plugin file `x.wasm`: `x.cwasm` (its signature:
/// [`signature_file`] of it, `x.cwasm.sig`).
#[must_use]
pub fn precompiled_file(plugin_file: &Path) -> PathBuf {
    plugin_file.with_extension("cwasm")
}

/// The precompiled code beside `plugin_file` when there is some and it
/// passes `check` with its signature; `None` otherwise (logged, and
/// counted as `rekon_plugin_precompiled_refused{outcome="unverified"}`,
/// when a file was there but is not used).
pub(super) fn beside(
    plugin_file: &Path,
    check: Option<&FileCheck>,
    metrics: &Metrics,
) -> Option<Precompiled> {
    let file = precompiled_file(plugin_file);
    let bytes = std::fs::read(&file).ok()?;
    let ignored = |outcome: &str, reason: &str| {
        metrics.plugin_precompiled_refused(outcome);
        tracing::warn!(
            plugin.file = %plugin_file.display(),
            precompiled.file = %file.display(),
            reason,
            "ignoring the precompiled code beside the plugin file; compiling the plugin"
        );
    };
    let Some(check) = check else {
        ignored(
            "unverified",
            "precompiled code runs only with a verified signature, and rekon run was given no --signature-key",
        );
        return None;
    };
    let signature = std::fs::read(signature_file(&file)).ok();
    if let Err(reason) = check(&file, &bytes, signature.as_deref()) {
        ignored("unverified", &reason);
        return None;
    }
    match Precompiled::from_file_bytes(bytes.into()) {
        Ok(precompiled) => Some(precompiled),
        Err(reason) => {
            ignored("invalid", &reason);
            None
        }
    }
}
