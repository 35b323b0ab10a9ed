//! `rekon plugin compile`: fills the compiled-plugin cache that `rekon run`
//! reads, so a host started later maps the compiled code instead of
//! compiling (seconds to a minute per JavaScript or Python component).
//! Useful to bake a cache into an image or a volume, or to warm a machine
//! before starting hosts. Each file is loaded exactly as `rekon run` loads
//! it (same engine configuration, hence the same cache key; contract check,
//! `register`, registration check): a file the host would refuse is refused
//! here, and nothing of it is cached beyond its compiled code.
//!
//! With `--precompiled` each `NAME.wasm` also gets `NAME.cwasm` beside it:
//! the compiled code with the engine key and the component's digest
//! ([`crate::plugin::Precompiled::to_file_bytes`]), for `rekon plugin push
//! --precompiled` or, signed (`NAME.cwasm.sig`), for `rekon run --plugins`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::files::write_atomically;
use crate::plugin::{PluginRuntime, RuntimeConfig, precompiled_file};

/// One file's outcome.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The file.
    pub file: PathBuf,
    /// The name and version it registers.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Hex sha256 of the component (the cache key with the engine's).
    pub digest: String,
    /// Already in the cache (nothing compiled).
    pub from_cache: bool,
    /// Time of the whole load.
    pub elapsed: Duration,
    /// The artifact file written beside it (`--precompiled`).
    pub precompiled: Option<PathBuf>,
}

/// Loads every file into a runtime caching in `cache_dir`, as `rekon run
/// --cache-dir cache_dir` would. Stops at the first file the host would
/// refuse, naming it.
///
/// # Errors
/// The runtime cannot start, or a file cannot be read, compiled or loaded.
pub fn compile_files(
    files: &[PathBuf],
    cache_dir: &Path,
    write_precompiled: bool,
) -> anyhow::Result<Vec<Compiled>> {
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(cache_dir.to_path_buf()),
        ..RuntimeConfig::default()
    })?;
    files
        .iter()
        .map(|file| {
            let started = Instant::now();
            let plugin = runtime
                .load_file(file)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let precompiled = if write_precompiled {
                let bytes = std::fs::read(file)?;
                let origin = file.display().to_string();
                let artifact = runtime
                    .precompile(&bytes, &origin)
                    .map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
                let out = precompiled_file(file);
                artifact
                    .to_file_bytes()
                    .and_then(|bytes| write_atomically(&out, &bytes))
                    .map_err(|e| anyhow::anyhow!("failed to write {}: {e}", out.display()))?;
                Some(out)
            } else {
                None
            };
            Ok(Compiled {
                file: file.clone(),
                name: plugin.name().to_owned(),
                version: plugin.version().to_owned(),
                digest: plugin.digest().to_owned(),
                from_cache: plugin.load_timings().from_cache,
                elapsed: started.elapsed(),
                precompiled,
            })
        })
        .collect()
}
