//! The runtime's side of shipped code (issue 39): its engine key, an
//! artifact made for shipping, and mapping a shipped one after checking it
//! was made for this engine from these bytes (the types:
//! [`super::precompiled`]).

use std::path::Path;

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

use super::compile_bound::{self, base_config};
use super::error::LoadError;
use super::precompiled::{Code, Precompiled, PrecompiledRefused};
use super::runtime::{PluginRuntime, RuntimeError, key_of};
use crate::files::{place_atomically, write_atomically};

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
            None => compile_bound::compile(
                &self.inner.compile_config,
                self.inner.config.compile_bound.as_ref(),
                bytes,
            )
            .map_err(|message| LoadError::Compile {
                origin: origin.to_owned(),
                message,
            })?,
        };
        Ok(Precompiled {
            engine: self.inner.engine_key.clone(),
            source: format!("sha256:{digest}"),
            code: Code::Bytes(bytes::Bytes::from(artifact)),
        })
    }

    /// Maps `artifact` for the component with hex sha256 `digest`, after
    /// checking it was made for this engine and from that component; put
    /// into the compiled-plugin cache (`cache_file`) first when there is
    /// one, so a restart finds it there, and mapped from that file. An
    /// artifact in a file ([`Code::File`]) is linked or copied there by
    /// the kernel (never read into memory), or without a cache mapped from
    /// its own file.
    pub(super) fn map_precompiled(
        &self,
        artifact: &Precompiled,
        digest: &str,
        cache_file: Option<&Path>,
    ) -> Result<Component, PrecompiledRefused> {
        if let Some(refused) = self.refusal(artifact, digest) {
            return Err(refused);
        }
        let engine = &self.inner.engine;
        // SAFETY (every `deserialize*` below): the artifact is trusted
        // code: the caller hands one over only once it is covered by a
        // verified signature (`LoadOptions::precompiled`), a file of it is
        // one this host wrote from checked bytes (`Code`), and it
        // was made for this engine's key from this component (checked
        // above); wasmtime additionally checks its header and engine
        // compatibility and fails rather than run a mismatched artifact.
        let in_file = |file: &Path| {
            #[allow(unsafe_code)]
            let mapped = unsafe { Component::deserialize_file(engine, file) };
            mapped.map_err(|e| PrecompiledRefused::Invalid(format!("{e:#}")))
        };
        if let Some(file) = cache_file {
            let placed = match &artifact.code {
                Code::Bytes(bytes) => write_atomically(file, bytes),
                Code::File(path) => place_atomically(path, file, false),
                Code::Staged(path) => place_atomically(path, file, true),
            };
            match placed {
                Ok(()) => {
                    return in_file(file).inspect_err(|_| {
                        // Never left for a restart to find.
                        let _ = std::fs::remove_file(file);
                    });
                }
                Err(e) => tracing::warn!(
                    cache.file = %file.display(),
                    error = %e,
                    "failed to put a precompiled plugin into the compiled-plugin cache; loading it from where it is"
                ),
            }
        }
        match (&artifact.code, artifact.code.file()) {
            (Code::Bytes(bytes), _) => {
                #[allow(unsafe_code)]
                let loaded = unsafe { Component::deserialize(engine, bytes) };
                loaded.map_err(|e| PrecompiledRefused::Invalid(format!("{e:#}")))
            }
            (_, file) => in_file(file.unwrap_or(Path::new(""))),
        }
    }

    /// Why `artifact` does not serve the component with hex sha256
    /// `digest` on this engine, if it does not.
    fn refusal(&self, artifact: &Precompiled, digest: &str) -> Option<PrecompiledRefused> {
        let host = &self.inner.engine_key;
        if &artifact.engine != host {
            return Some(PrecompiledRefused::Engine {
                found: artifact.engine.clone(),
                host: host.clone(),
            });
        }
        let module = format!("sha256:{digest}");
        (artifact.source != module).then(|| PrecompiledRefused::Source {
            found: artifact.source.clone(),
            module,
        })
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
            code: Code::Bytes(bytes::Bytes::from_static(b"\x7fELF not really")),
            ..good.clone()
        };
        let err = runtime
            .map_precompiled(&garbage, &digest, Some(&file))
            .unwrap_err();
        assert_eq!(err.outcome(), "invalid", "{err}");
        assert!(!file.exists(), "a refused artifact stays out of the cache");

        // In a file: linked or copied into the cache, the file of a cache
        // of its own kept; a staged one moved.
        let elsewhere = dir.path().join("oci/precompiled");
        std::fs::create_dir_all(&elsewhere).expect("dir");
        let shipped = elsewhere.join("artifact");
        std::fs::write(&shipped, good.code.bytes().expect("bytes")).expect("write");
        let in_file = |code| Precompiled {
            code,
            ..good.clone()
        };
        runtime
            .map_precompiled(&in_file(Code::File(shipped.clone())), &digest, Some(&file))
            .expect("mapped from a file");
        assert!(file.is_file() && shipped.is_file(), "linked or copied");
        std::fs::remove_file(&file).expect("rm");
        let staged = || {
            let mut temp = tempfile::NamedTempFile::new_in(&elsewhere).expect("temp");
            std::io::Write::write_all(&mut temp, &good.code.bytes().expect("bytes"))
                .expect("write");
            std::sync::Arc::new(temp.into_temp_path())
        };
        let one = staged();
        let staged_at = one.to_path_buf();
        runtime
            .map_precompiled(&in_file(Code::Staged(one)), &digest, Some(&file))
            .expect("mapped from a staged file");
        assert!(file.is_file() && !staged_at.exists(), "moved");
        runtime
            .map_precompiled(&in_file(Code::File(shipped.clone())), &digest, None)
            .expect("mapped from its own file without a cache");
        let two = staged();
        let staged_at = two.to_path_buf();
        let refused = in_file(Code::Staged(two));
        let err = runtime
            .map_precompiled(&refused, &"0".repeat(64), None)
            .unwrap_err();
        assert_eq!(err.outcome(), "source_mismatch", "{err}");
        drop(refused);
        assert!(!staged_at.exists(), "a staged file is removed when dropped");
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
}
