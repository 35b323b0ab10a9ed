//! Precompiled code beside a plugin file: `x.cwasm` next to `x.wasm`
//! (`rekon plugin compile --precompiled`), used only when its own cosign
//! blob signature `x.cwasm.sig` passes the same [`FileCheck`] as the
//! module (`rekon run --signature-key`); without keys, or without a valid
//! signature, it is ignored with a log line and the module compiles. The
//! artifact of a verified file is staged into the compiled-plugin cache
//! directory (`Code::Staged`) from the bytes that were verified, and those
//! bytes dropped, before anything is mapped: the host holds the whole
//! artifact in memory only while its signature is checked.

use std::path::{Path, PathBuf};

use super::file_check::{FileCheck, signature_file};
use super::precompiled::{Code, Precompiled};
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
/// when a file was there but is not used). Staged in `staging` (the
/// compiled-plugin cache directory) when there is one, else kept in memory.
pub(super) fn beside(
    plugin_file: &Path,
    check: Option<&FileCheck>,
    staging: Option<&Path>,
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
    let precompiled = match Precompiled::from_file_bytes(bytes.into()) {
        Ok(precompiled) => precompiled,
        Err(reason) => {
            ignored("invalid", &reason);
            return None;
        }
    };
    let Some(dir) = staging else {
        return Some(precompiled);
    };
    match stage(&precompiled.code, dir) {
        Ok(staged) => Some(Precompiled {
            code: Code::Staged(staged),
            ..precompiled
        }),
        Err(e) => {
            tracing::warn!(
                precompiled.file = %file.display(),
                cache.dir = %dir.display(),
                error = %e,
                "failed to stage precompiled code in the compiled-plugin cache directory; keeping it in memory"
            );
            Some(precompiled)
        }
    }
}

/// `code` written to a temporary file in `dir` (`.NAME.staged.tmp`: one a
/// crash leaves behind is pruned at the next start, as the cache's other
/// temporary files are), removed when dropped.
fn stage(code: &Code, dir: &Path) -> std::io::Result<std::sync::Arc<tempfile::TempPath>> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::Builder::new()
        .prefix(".")
        .suffix(".staged.tmp")
        .tempfile_in(dir)?;
    file.write_all(&code.bytes()?)?;
    file.as_file().sync_all()?;
    Ok(std::sync::Arc::new(file.into_temp_path()))
}
