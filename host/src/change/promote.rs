//! `rekon plugin promote NAME`: the shadow version becomes the serving one.

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
