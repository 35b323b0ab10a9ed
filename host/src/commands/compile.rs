//! `rekon plugin compile`: fills the compiled-plugin cache that `rekon run`
//! reads, so a host started later maps the compiled code instead of
//! compiling (seconds to a minute per JavaScript or Python component).
//! Useful to bake a cache into an image or a volume, or to warm a machine
//! before starting hosts. Each file is loaded exactly as `rekon run` loads
//! it (same engine configuration, hence the same cache key; contract check,
//! `register`, registration check): a file the host would refuse is refused
//! here, and nothing of it is cached beyond its compiled code.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::plugin::{PluginRuntime, RuntimeConfig};

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
}

/// Loads every file into a runtime caching in `cache_dir`, as `rekon run
/// --cache-dir cache_dir` would. Stops at the first file the host would
/// refuse, naming it.
///
/// # Errors
/// The runtime cannot start, or a file cannot be read, compiled or loaded.
pub fn compile_files(files: &[PathBuf], cache_dir: &Path) -> anyhow::Result<Vec<Compiled>> {
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
            Ok(Compiled {
                file: file.clone(),
                name: plugin.name().to_owned(),
                version: plugin.version().to_owned(),
                digest: plugin.digest().to_owned(),
                from_cache: plugin.load_timings().from_cache,
                elapsed: started.elapsed(),
            })
        })
        .collect()
}
