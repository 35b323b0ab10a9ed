//! `rekon plugin push FILE REF` and the registry half of `rekon plugin
//! inspect REF`: a plugin component to and from an OCI registry, with the
//! credentials and transport options of the command line.
//!
//! Push loads the component first (compile, contract, `register`,
//! validation, as `rekon run` would), so a file the host would refuse is
//! never published; the manifest carries the plugin's name and version as
//! `org.opencontainers.image.title` and `org.opencontainers.image.version`.
//! With [`Precompile::Compile`] (`--precompile`) or [`Precompile::File`]
//! (`--precompiled FILE`) the artifact carries the component's precompiled
//! code as a second layer (see [`crate::plugin::Precompiled`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::plugin::{LoadError, PluginRuntime, Precompiled, RuntimeConfig, RuntimeError};
use crate::source::oci::{
    AuthError, FetchError, Fetched, Fetcher, OciConfig, PullPolicy, PushError, RegistryAuth,
};

/// Errors of `rekon plugin push` and of fetching for `inspect`.
#[derive(Debug, thiserror::Error)]
pub enum RegistryCommandError {
    /// The plugin file could not be read.
    #[error("failed to read plugin file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The credentials file could not be read.
    #[error("failed to read registry credentials {path}: {source}")]
    AuthFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The credentials file is not a docker config.
    #[error("registry credentials {path}: {source}")]
    Auth {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: AuthError,
    },
    /// The runtime could not start.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The load task panicked or was cancelled.
    #[error("plugin load task failed: {0}")]
    Task(String),
    /// The plugin does not load: it is not pushed.
    #[error("not pushing: {0}")]
    Load(#[from] LoadError),
    /// The push failed.
    #[error(transparent)]
    Push(#[from] PushError),
    /// The fetch failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The precompiled artifact given cannot be attached.
    #[error("not pushing: precompiled artifact {path}: {reason}")]
    Precompiled {
        /// The artifact file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Whether a push attaches precompiled code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Precompile {
    /// The component alone.
    #[default]
    No,
    /// Compiled here, for this machine's engine (the load before the push
    /// compiles it anyway).
    Compile,
    /// An artifact file (`rekon plugin compile --precompiled`), made from
    /// this component, possibly on another machine for its engine.
    File(PathBuf),
}

/// How the command line reaches registries.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Registries (`host[:port]`) spoken to over plain HTTP although not on
    /// a loopback address.
    pub insecure_registries: Vec<String>,
    /// User name (with `password`): overrides any credentials file.
    pub username: Option<String>,
    /// Password for `username`.
    pub password: Option<String>,
    /// A docker config JSON (`auth.json`, `~/.docker/config.json`); `None`:
    /// `$REGISTRY_AUTH_FILE`, else `$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`, when present.
    pub auth_file: Option<PathBuf>,
    /// Bound of each registry attempt.
    pub timeout: Option<Duration>,
}

impl RegistryOptions {
    pub(crate) fn fetcher(&self) -> Fetcher {
        let defaults = OciConfig::default();
        Fetcher::new(OciConfig {
            insecure_registries: self.insecure_registries.clone(),
            timeout: self.timeout.unwrap_or(defaults.timeout),
            ..defaults
        })
    }

    /// The credentials for the registry of `reference`.
    pub(crate) fn auth(&self, reference: &str) -> Result<RegistryAuth, RegistryCommandError> {
        if let (Some(username), Some(password)) = (&self.username, &self.password) {
            return Ok(RegistryAuth::Basic {
                username: username.clone(),
                password: password.clone(),
            });
        }
        let Some(path) = self.auth_file.clone().or_else(default_auth_file) else {
            return Ok(RegistryAuth::Anonymous);
        };
        let bytes = std::fs::read(&path).map_err(|source| RegistryCommandError::AuthFile {
            path: path.clone(),
            source,
        })?;
        // An unparsable reference fails later with its own message.
        let registry = reference
            .parse::<oci_client::Reference>()
            .map(|r| r.registry().to_string())
            .unwrap_or_default();
        RegistryAuth::from_docker_config_json(&bytes, &registry)
            .map_err(|source| RegistryCommandError::Auth { path, source })
    }
}

/// The credentials file used when none is named: the first that exists.
fn default_auth_file() -> Option<PathBuf> {
    let env = |name| std::env::var_os(name).map(PathBuf::from);
    [
        env("REGISTRY_AUTH_FILE"),
        env("DOCKER_CONFIG").map(|d| d.join("config.json")),
        env("HOME").map(|h| h.join(".docker/config.json")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file())
}

/// What a push published.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The plugin's name.
    pub name: String,
    /// The plugin's version.
    pub version: String,
    /// The manifest digest (`sha256:…`).
    pub digest: String,
    /// The engine key of the precompiled layer pushed with it, if any.
    pub precompiled_for: Option<String>,
}

/// Loads `file` (refusing a plugin the host would refuse) and pushes it to
/// `reference` in the CNCF wasm artifact layout, with precompiled code as
/// `precompile` says.
pub async fn push(
    file: &Path,
    reference: &str,
    options: &RegistryOptions,
    precompile: &Precompile,
) -> Result<Pushed, RegistryCommandError> {
    let bytes = std::fs::read(file).map_err(|source| RegistryCommandError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let bytes: Arc<[u8]> = bytes.into();
    let origin = file.display().to_string();
    let loaded = {
        let bytes = bytes.clone();
        let compile = *precompile == Precompile::Compile;
        tokio::task::spawn_blocking(move || {
            // Compiling for the artifact: the load's compile goes to a
            // cache of its own, read back rather than compiled twice.
            let cache = compile.then(tempfile::tempdir).transpose().map_err(|e| {
                RegistryCommandError::Task(format!("failed to create a temporary directory: {e}"))
            })?;
            let runtime = PluginRuntime::new(RuntimeConfig {
                pooling: false,
                cache_dir: cache.as_ref().map(|d| d.path().to_path_buf()),
                ..RuntimeConfig::default()
            })?;
            let plugin = runtime.load_bytes(&bytes, &origin)?;
            let reg = plugin.registration();
            let precompiled = compile
                .then(|| runtime.precompile(&bytes, &origin))
                .transpose()?;
            Ok::<_, RegistryCommandError>((reg.name.clone(), reg.version.clone(), precompiled))
        })
        .await
    };
    let (name, version, compiled) =
        loaded.map_err(|e| RegistryCommandError::Task(e.to_string()))??;
    let precompiled = match precompile {
        Precompile::File(path) => Some(read_precompiled(path, &bytes)?),
        Precompile::No | Precompile::Compile => compiled,
    };
    let annotations = BTreeMap::from([
        ("org.opencontainers.image.title".to_string(), name.clone()),
        (
            "org.opencontainers.image.version".to_string(),
            version.clone(),
        ),
    ]);
    let auth = options.auth(reference)?;
    let digest = options
        .fetcher()
        .push_with(&bytes, precompiled.as_ref(), reference, &auth, annotations)
        .await?;
    Ok(Pushed {
        name,
        version,
        digest,
        precompiled_for: precompiled.map(|p| p.engine),
    })
}

/// The artifact file `path`, which must have been made from `component`.
fn read_precompiled(path: &Path, component: &[u8]) -> Result<Precompiled, RegistryCommandError> {
    use sha2::Digest as _;
    let failed = |reason: String| RegistryCommandError::Precompiled {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| failed(format!("failed to read it: {e}")))?;
    let artifact = Precompiled::from_file_bytes(bytes.into()).map_err(failed)?;
    let source = format!("sha256:{}", hex::encode(sha2::Sha256::digest(component)));
    if artifact.source != source {
        return Err(failed(format!(
            "it was compiled from {}, not from this component ({source})",
            artifact.source
        )));
    }
    Ok(artifact)
}

/// Fetches the component `reference` names (no cache), verified.
pub async fn fetch(
    reference: &str,
    options: &RegistryOptions,
) -> Result<Fetched, RegistryCommandError> {
    let auth = options.auth(reference)?;
    Ok(options
        .fetcher()
        .fetch(reference, None, PullPolicy::Always, &auth)
        .await?)
}

/// Is `arg` of `inspect` a registry reference rather than a file? Anything
/// that is not an existing path and has a registry host (a `.` or `:` in
/// the first component, or `localhost`) and parses as a reference.
#[must_use]
pub fn is_reference(arg: &str) -> bool {
    if Path::new(arg).exists() {
        return false;
    }
    let Some((host, _)) = arg.split_once('/') else {
        return false;
    };
    (host.contains('.') || host.contains(':') || host == "localhost")
        && arg.parse::<oci_client::Reference>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_files() {
        assert!(is_reference("127.0.0.1:5000/rekon/chaos:v1"));
        assert!(is_reference(
            "ghcr.io/acme/nodepool@sha256:0123456789012345678901234567890123456789012345678901234567890123"
        ));
        assert!(is_reference("localhost/chaos:v1"));
        // A missing file stays a file (its error names the path).
        assert!(!is_reference("dist/plugins/missing.wasm"));
        assert!(!is_reference("chaos.wasm"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ghcr.io");
        std::fs::create_dir_all(&file).unwrap();
        assert!(!is_reference(&file.display().to_string()));
    }
}
