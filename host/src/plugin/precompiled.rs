//! Precompiled code that travels with a module (issue 39): the artifact
//! `Engine::precompile_component` makes for one engine configuration,
//! shipped beside the component (a layer of its OCI artifact, `rekon
//! plugin push --precompile`) so that a host on a cold node maps it in
//! milliseconds instead of compiling for seconds with hundreds of MiB.
//!
//! Deserializing an artifact runs its native code: it is trusted code.
//! The runtime therefore takes one only as the caller hands it over
//! ([`super::LoadOptions::precompiled`]), and callers hand one over only
//! once it is covered by what was verified (a signature over the manifest
//! that lists it); the runtime checks that it was made for this engine
//! ([`PluginRuntime::engine_key`]) and from these very bytes, and compiles
//! as before when it was not. [`CodePath`] says which way a load went.

use std::path::Path;

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

use super::error::LoadError;
use super::runtime::{PluginRuntime, RuntimeError, base_config, key_of};
use crate::files::write_atomically;

/// Where a loaded module's native code came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CodePath {
    /// Compiled by Cranelift on this host.
    #[default]
    Compiled,
    /// Mapped from this host's compiled-plugin cache.
    Cached,
    /// A precompiled artifact shipped with the module, verified with it.
    Precompiled,
}

impl CodePath {
    /// `compiled`, `cached` or `precompiled` (metric label, status text).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Compiled => "compiled",
            Self::Cached => "cached",
            Self::Precompiled => "precompiled",
        }
    }
}

impl std::fmt::Display for CodePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A precompiled artifact of a component for one engine configuration.
#[derive(Clone)]
pub struct Precompiled {
    /// The engine key it was compiled for ([`PluginRuntime::engine_key`]).
    pub engine: String,
    /// `sha256:<hex>` of the component it was compiled from.
    pub source: String,
    /// The artifact, as `Engine::precompile_component` wrote it (tens of
    /// MiB for an interpreter: shared, and cut from a file without a copy).
    pub bytes: bytes::Bytes,
}

/// How a precompiled artifact file starts (`NAME.cwasm` beside `NAME.wasm`,
/// `rekon plugin compile --precompiled`): this line, then one line of JSON
/// naming the engine and the source, then the artifact. (An OCI layer is
/// the bare artifact; its annotations say the same.)
const FILE_MAGIC: &[u8] = b"rekon-precompiled v1\n";

/// The header line of an artifact file.
#[derive(serde::Serialize, serde::Deserialize)]
struct FileHeader {
    engine: String,
    source: String,
}

impl Precompiled {
    /// The artifact as a file: [`FILE_MAGIC`], a JSON line, the bytes.
    #[must_use]
    pub fn to_file_bytes(&self) -> Vec<u8> {
        let header = serde_json::to_string(&FileHeader {
            engine: self.engine.clone(),
            source: self.source.clone(),
        })
        .unwrap_or_default();
        let mut out = Vec::with_capacity(FILE_MAGIC.len() + header.len() + 1 + self.bytes.len());
        out.extend_from_slice(FILE_MAGIC);
        out.extend_from_slice(header.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(&self.bytes);
        out
    }

    /// An artifact file read back (see [`Self::to_file_bytes`]).
    ///
    /// # Errors
    /// What is wrong with it, for the log line that says it is ignored.
    pub fn from_file_bytes(bytes: bytes::Bytes) -> Result<Self, String> {
        let rest = bytes.strip_prefix(FILE_MAGIC).ok_or(
            "not a rekon precompiled artifact (it does not start with `rekon-precompiled v1`)",
        )?;
        let end = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or("its header line is not terminated")?;
        let header: FileHeader = serde_json::from_slice(&rest[..end])
            .map_err(|e| format!("its header is not the expected JSON: {e}"))?;
        Ok(Self {
            engine: header.engine,
            source: header.source,
            bytes: bytes.slice(FILE_MAGIC.len() + end + 1..),
        })
    }
}

impl std::fmt::Debug for Precompiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Precompiled")
            .field("engine", &self.engine)
            .field("source", &self.source)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Two artifacts are the same when they are the same bytes for the same
/// engine and component (compared by digest, not byte by byte).
impl PartialEq for Precompiled {
    fn eq(&self, other: &Self) -> bool {
        self.engine == other.engine
            && self.source == other.source
            && (self.bytes.as_ptr() == other.bytes.as_ptr()
                && self.bytes.len() == other.bytes.len()
                || Sha256::digest(&self.bytes) == Sha256::digest(&other.bytes))
    }
}

impl Eq for Precompiled {}

/// Why a precompiled artifact was not used (the load compiles instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrecompiledRefused {
    /// Made for another engine (wasmtime version, configuration or CPU
    /// features).
    #[error(
        "it was compiled for engine {found}, this host's engine is {host} (another rekon/wasmtime version, engine configuration or CPU)"
    )]
    Engine {
        /// The artifact's engine key.
        found: String,
        /// This host's.
        host: String,
    },
    /// Made from another component.
    #[error("it was compiled from {found}, not from this module ({module})")]
    Source {
        /// The component it names.
        found: String,
        /// The component being loaded.
        module: String,
    },
    /// wasmtime refused to load it.
    #[error("wasmtime could not load it: {0}")]
    Invalid(String),
}

impl PrecompiledRefused {
    /// `engine_mismatch`, `source_mismatch` or `invalid` (metric label).
    #[must_use]
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::Engine { .. } => "engine_mismatch",
            Self::Source { .. } => "source_mismatch",
            Self::Invalid(_) => "invalid",
        }
    }
}

/// The engine key of a runtime of this build on this machine (what
/// [`PluginRuntime::engine_key`] says, without building the instance
/// pool): for deciding, before any runtime exists, which precompiled
/// artifacts are worth downloading.
///
/// # Errors
/// [`RuntimeError::Engine`] when no engine can be built here.
pub fn host_engine_key() -> Result<String, RuntimeError> {
    let engine = wasmtime::Engine::new(&base_config())
        .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
    Ok(key_of(&engine))
}

impl PluginRuntime {
    /// The key of this runtime's engine: a digest of wasmtime's
    /// `precompile_compatibility_hash` (target, CPU features, compiler
    /// settings, tunables, wasm features) and the wasmtime version. A
    /// precompiled artifact serves only a host whose key is the one it was
    /// compiled for; the compiled-plugin cache is keyed by it too.
    #[must_use]
    pub fn engine_key(&self) -> &str {
        &self.inner.engine_key
    }

    /// The artifact of `bytes` for this engine, for shipping beside the
    /// component (`rekon plugin push --precompile`, `rekon plugin compile
    /// --precompiled`): read from the compiled-plugin cache when a load
    /// put it there, else compiled (on an engine of its own, as a load
    /// compiles).
    ///
    /// # Errors
    /// [`LoadError::Compile`] when it does not compile.
    pub fn precompile(&self, bytes: &[u8], origin: &str) -> Result<Precompiled, LoadError> {
        let digest = hex::encode(Sha256::digest(bytes));
        let cached = self
            .cache_file(&digest)
            .and_then(|file| std::fs::read(file).ok());
        let artifact = match cached {
            Some(artifact) => artifact,
            None => self
                .compile_artifact(bytes)
                .map_err(|message| LoadError::Compile {
                    origin: origin.to_owned(),
                    message,
                })?,
        };
        Ok(Precompiled {
            engine: self.inner.engine_key.clone(),
            source: format!("sha256:{digest}"),
            bytes: bytes::Bytes::from(artifact),
        })
    }

    /// Maps `artifact` for the component with hex sha256 `digest`, after
    /// checking it was made for this engine and from that component; put
    /// into the compiled-plugin cache (`cache_file`) first when there is
    /// one, so a restart finds it there.
    pub(super) fn map_precompiled(
        &self,
        artifact: &Precompiled,
        digest: &str,
        cache_file: Option<&Path>,
    ) -> Result<Component, PrecompiledRefused> {
        let host = &self.inner.engine_key;
        if &artifact.engine != host {
            return Err(PrecompiledRefused::Engine {
                found: artifact.engine.clone(),
                host: host.clone(),
            });
        }
        let module = format!("sha256:{digest}");
        if artifact.source != module {
            return Err(PrecompiledRefused::Source {
                found: artifact.source.clone(),
                module,
            });
        }
        let engine = &self.inner.engine;
        if let Some(file) = cache_file {
            match write_atomically(file, &artifact.bytes) {
                Ok(()) => {
                    // SAFETY: the artifact is trusted code: the caller hands
                    // one over only once it is covered by a verified
                    // signature (`LoadOptions::precompiled`), and it was
                    // made for this engine's key (checked above); wasmtime
                    // additionally checks its header and engine
                    // compatibility and fails rather than run a mismatched
                    // artifact.
                    #[allow(unsafe_code)]
                    let mapped = unsafe { Component::deserialize_file(engine, file) };
                    return mapped.map_err(|e| {
                        // Never left for a restart to find.
                        let _ = std::fs::remove_file(file);
                        PrecompiledRefused::Invalid(format!("{e:#}"))
                    });
                }
                Err(e) => tracing::warn!(
                    cache.file = %file.display(),
                    error = %e,
                    "failed to write a precompiled plugin into the compiled-plugin cache; loading it from memory"
                ),
            }
        }
        // SAFETY: as above.
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize(engine, &artifact.bytes) };
        loaded.map_err(|e| PrecompiledRefused::Invalid(format!("{e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::RuntimeConfig;

    /// An artifact is mapped only when made for this engine from these
    /// bytes; one wasmtime cannot load is refused and leaves nothing in
    /// the cache for a restart to find.
    #[test]
    fn only_an_artifact_for_this_engine_and_module_is_mapped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runtime = PluginRuntime::new(RuntimeConfig {
            cache_dir: Some(dir.path().to_path_buf()),
            pooling: false,
            ..RuntimeConfig::default()
        })
        .expect("runtime");
        let bytes = wat::parse_str("(component (core module (memory 1)))").expect("wat");
        let digest = hex::encode(Sha256::digest(&bytes));
        let good = runtime.precompile(&bytes, "t").expect("precompile");
        assert_eq!(good.source, format!("sha256:{digest}"));
        let file = runtime.cache_file(&digest).expect("a cache");
        runtime
            .map_precompiled(&good, &digest, Some(&file))
            .expect("mapped");
        assert!(file.is_file(), "kept in the compiled cache for a restart");
        std::fs::remove_file(&file).expect("rm");

        let other_engine = Precompiled {
            engine: "0123456789abcdef01234567".into(),
            ..good.clone()
        };
        let err = runtime
            .map_precompiled(&other_engine, &digest, Some(&file))
            .unwrap_err();
        assert_eq!(err.outcome(), "engine_mismatch", "{err}");
        let err = runtime
            .map_precompiled(&good, &"0".repeat(64), Some(&file))
            .unwrap_err();
        assert_eq!(err.outcome(), "source_mismatch", "{err}");
        let garbage = Precompiled {
            bytes: bytes::Bytes::from_static(b"\x7fELF not really"),
            ..good
        };
        let err = runtime
            .map_precompiled(&garbage, &digest, Some(&file))
            .unwrap_err();
        assert_eq!(err.outcome(), "invalid", "{err}");
        assert!(!file.exists(), "a refused artifact stays out of the cache");
    }

    /// The pool is no part of the key: what `push` (no pool) and the
    /// fetcher (no runtime yet) compute is what a serving host has.
    #[test]
    fn the_engine_key_does_not_depend_on_the_pool() {
        let key = host_engine_key().expect("engine");
        for pooling in [true, false] {
            let runtime = PluginRuntime::new(RuntimeConfig {
                pooling,
                ..RuntimeConfig::default()
            })
            .expect("runtime");
            assert_eq!(runtime.engine_key(), key, "pooling: {pooling}");
        }
    }

    #[test]
    fn artifacts_compare_by_digest_and_names() {
        let a = Precompiled {
            engine: "e".into(),
            source: "sha256:s".into(),
            bytes: bytes::Bytes::from_static(b"code"),
        };
        let mut b = a.clone();
        b.bytes = bytes::Bytes::copy_from_slice(b"code");
        assert_eq!(a, b);
        b.bytes = bytes::Bytes::from_static(b"other");
        assert_ne!(a, b);
        assert_eq!(
            format!("{a:?}"),
            r#"Precompiled { engine: "e", source: "sha256:s", bytes: 4 }"#
        );
        assert_eq!(CodePath::Precompiled.to_string(), "precompiled");
        let read = Precompiled::from_file_bytes(a.to_file_bytes().into()).expect("read back");
        assert_eq!(read, a);
        let err = Precompiled::from_file_bytes(bytes::Bytes::from_static(b"\0asm\x01\0\0\0"))
            .unwrap_err();
        assert!(err.contains("not a rekon precompiled artifact"), "{err}");
    }
}
