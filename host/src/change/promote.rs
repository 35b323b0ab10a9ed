//! `rekon plugin promote NAME`: the shadow version becomes the serving one,
//! in the plugin directory (a file renamed) or in a `Plugin` object (an edit:
//! `spec.module` takes `spec.shadow.module`; rolling back is the same edit
//! back).

use std::path::{Path, PathBuf};

use crate::plugin::{PluginRuntime, RuntimeConfig, is_shadow_file};

/// Errors of [`promote`].
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    /// No shadow file registers that plugin.
    #[error(
        "no shadow version of plugin {name} in {dir} (expected a *.shadow.wasm file registering it)"
    )]
    NoShadow {
        /// The plugin.
        name: String,
        /// The directory.
        dir: PathBuf,
    },
    /// The Plugin object has no `spec.shadow`.
    #[error("Plugin {name} has no spec.shadow to promote")]
    NoObjectShadow {
        /// The Plugin object.
        name: String,
    },
    /// Reading or editing the Plugin object failed.
    #[error("failed to promote the shadow of Plugin {name}")]
    Api {
        /// The Plugin object.
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The directory could not be read or the rename failed.
    #[error("failed to promote the shadow of plugin {name}")]
    Io {
        /// The plugin.
        name: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Makes the shadow version of plugin `name` in `dir` the serving one:
/// renames its `*.shadow.wasm` over the file serving `name` (or to
/// `STEM.wasm` when none serves it). A running host swaps it in and stops
/// shadowing. Returns (shadow file, serving file).
///
/// # Errors
/// When no shadow file registers `name`, or the rename fails.
pub fn promote(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), PromoteError> {
    let io = |source| PromoteError::Io {
        name: name.to_owned(),
        source,
    };
    let runtime = PluginRuntime::new(RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    })
    .map_err(|e| io(std::io::Error::other(e.to_string())))?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    files.sort();
    let registers = |path: &Path| runtime.load_file(path).is_ok_and(|p| p.name() == name);
    let is_shadow = |p: &Path| is_shadow_file(p);
    // The conventional names first: no compile needed to find them.
    let shadow = files
        .iter()
        .find(|p| is_shadow(p) && shadow_stem(p) == Some(name) && registers(p))
        .or_else(|| files.iter().find(|p| is_shadow(p) && registers(p)))
        .cloned()
        .ok_or_else(|| PromoteError::NoShadow {
            name: name.to_owned(),
            dir: dir.to_path_buf(),
        })?;
    let serving = files
        .iter()
        .find(|p| !is_shadow(p) && registers(p))
        .cloned()
        .unwrap_or_else(|| dir.join(format!("{}.wasm", shadow_stem(&shadow).unwrap_or(name))));
    std::fs::rename(&shadow, &serving).map_err(io)?;
    tracing::info!(plugin = %name, from = %shadow.display(), to = %serving.display(), "shadow version promoted");
    Ok((shadow, serving))
}

fn shadow_stem(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()?.strip_suffix(".shadow.wasm")
}

/// Makes the shadow of the Plugin object `name` the serving version: one
/// merge patch (with a resourceVersion precondition, so a concurrent edit
/// is not overwritten) sets `spec.module`, `spec.digest` and, when the
/// shadow has its own, `spec.settings` from `spec.shadow`, and removes
/// `spec.shadow`. A running host swaps the new version in. Returns (old
/// module, new module).
///
/// # Errors
/// When the object has no shadow, or the API refuses the read or the edit.
pub async fn promote_object(
    client: kube::Client,
    name: &str,
) -> Result<(String, String), PromoteError> {
    use crate::source::plugin_crd::Plugin;
    let api = kube::Api::<Plugin>::all(client);
    let api_err = |source| PromoteError::Api {
        name: name.to_owned(),
        source: Box::new(source),
    };
    let obj = api.get(name).await.map_err(api_err)?;
    let Some(shadow) = obj.spec.shadow.clone() else {
        return Err(PromoteError::NoObjectShadow {
            name: name.to_owned(),
        });
    };
    let mut spec = serde_json::json!({
        "module": shadow.module,
        "digest": shadow.digest,
        "shadow": null,
    });
    if let Some(settings) = shadow.settings {
        spec["settings"] = settings;
    }
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": obj.metadata.resource_version},
        "spec": spec,
    });
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .map_err(api_err)?;
    tracing::info!(plugin = %name, from = %obj.spec.module, to = %shadow.module, "shadow version promoted in the Plugin object");
    Ok((obj.spec.module, shadow.module))
}
