//! What several commands share: a runtime for their async calls, their
//! logging, and the default cache directory.

use std::path::PathBuf;

/// Runs one command's async work to its end on a fresh tokio runtime.
///
/// # Errors
/// When the runtime cannot start, or the work fails.
pub fn block_on<T, E>(work: impl Future<Output = Result<T, E>>) -> anyhow::Result<T>
where
    E: Into<anyhow::Error>,
{
    tokio::runtime::Runtime::new()?
        .block_on(work)
        .map_err(Into::into)
}

/// Logging of the one-shot commands: stderr, filtered by `RUST_LOG`
/// (default `warn`). `rekon run` sets up its own (`--log-format`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
}

/// Where `run` caches compiled plugins and pulled modules without
/// `--cache-dir`: `$XDG_CACHE_HOME/rekon`, else `$HOME/.cache/rekon`. A
/// restart then maps the compiled code instead of compiling again (seconds
/// to a minute per interpreter plugin on a small machine). `None`, logged,
/// when neither variable is set or the directory cannot be created: the
/// host then compiles every load, as before.
pub fn default_cache_dir() -> Option<PathBuf> {
    let nonempty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    let Some(base) = nonempty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".cache")))
    else {
        tracing::warn!("no --cache-dir, XDG_CACHE_HOME or HOME: compiled plugins are not cached");
        return None;
    };
    let dir = base.join("rekon");
    match std::fs::create_dir_all(&dir) {
        Ok(()) => {
            tracing::info!(cache.dir = %dir.display(), "caching compiled plugins (default --cache-dir)");
            Some(dir)
        }
        Err(e) => {
            tracing::warn!(cache.dir = %dir.display(), error = %e, "cannot create the default cache directory: compiled plugins are not cached");
            None
        }
    }
}
