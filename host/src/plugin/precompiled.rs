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
//! ([`crate::plugin::PluginRuntime::engine_key`]) and from these very bytes, and compiles
//! as before when it was not (`artifacts.rs`). [`CodePath`] says which
//! way a load went.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

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
    /// The engine key it was compiled for ([`crate::plugin::PluginRuntime::engine_key`]).
    pub engine: String,
    /// `sha256:<hex>` of the component it was compiled from.
    pub source: String,
    /// The artifact, as `Engine::precompile_component` wrote it: tens of
    /// MiB for an interpreter, so a host that received one keeps it in a
    /// file ([`Code::File`]) and maps it from there.
    pub code: Code,
}

/// Where an artifact's bytes are.
#[derive(Clone)]
pub enum Code {
    /// In memory (made by `precompile`, read for `push`; shared, and cut
    /// from a file's bytes without a copy).
    Bytes(bytes::Bytes),
    /// A whole file of a cache of this host's (the OCI module cache: a
    /// registry layer streamed to disk, its digest checked on the way,
    /// `source/oci/fetch.rs`): the runtime links or copies it into the
    /// compiled-plugin cache and maps it from there, so the host never
    /// holds the whole artifact in memory.
    File(PathBuf),
    /// A file staged for this load alone (a verified `NAME.cwasm`'s
    /// artifact, written out once its signature checked): moved into the
    /// compiled-plugin cache when used; removed when the last clone is
    /// dropped, used or not.
    Staged(Arc<tempfile::TempPath>),
}

impl Code {
    /// The file that holds it, if one does.
    #[must_use]
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::Bytes(_) => None,
            Self::File(path) => Some(path),
            Self::Staged(path) => Some(path),
        }
    }

    /// The artifact's bytes (read from its file when it is in one).
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn bytes(&self) -> std::io::Result<bytes::Bytes> {
        match (self, self.file()) {
            (Self::Bytes(bytes), _) => Ok(bytes.clone()),
            (_, Some(path)) => std::fs::read(path).map(bytes::Bytes::from),
            (_, None) => Ok(bytes::Bytes::new()),
        }
    }

    /// The artifact's sha256 (a file is hashed as it is read, in blocks).
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn sha256(&self) -> std::io::Result<[u8; 32]> {
        match (self, self.file()) {
            (Self::Bytes(bytes), _) => Ok(Sha256::digest(bytes).into()),
            (_, Some(path)) => {
                let mut hasher = Sha256::new();
                std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
                Ok(hasher.finalize().into())
            }
            (_, None) => Ok(Sha256::digest([]).into()),
        }
    }
}

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self, self.file()) {
            (Self::Bytes(bytes), _) => write!(f, "{} bytes", bytes.len()),
            (_, path) => write!(f, "file {}", path.unwrap_or(Path::new("")).display()),
        }
    }
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
    ///
    /// # Errors
    /// A [`Code::File`] that cannot be read.
    pub fn to_file_bytes(&self) -> std::io::Result<Vec<u8>> {
        let header = serde_json::to_string(&FileHeader {
            engine: self.engine.clone(),
            source: self.source.clone(),
        })
        .unwrap_or_default();
        let bytes = self.code.bytes()?;
        let mut out = Vec::with_capacity(FILE_MAGIC.len() + header.len() + 1 + bytes.len());
        out.extend_from_slice(FILE_MAGIC);
        out.extend_from_slice(header.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(&bytes);
        Ok(out)
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
            code: Code::Bytes(bytes.slice(FILE_MAGIC.len() + end + 1..)),
        })
    }
}

impl std::fmt::Debug for Precompiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Precompiled")
            .field("engine", &self.engine)
            .field("source", &self.source)
            .field("code", &self.code)
            .finish()
    }
}

/// Two artifacts are the same when they are the same bytes for the same
/// engine and component (compared by digest, not byte by byte; an
/// artifact whose file cannot be read equals nothing).
impl PartialEq for Precompiled {
    fn eq(&self, other: &Self) -> bool {
        let same_code = match (&self.code, &other.code) {
            (Code::Bytes(a), Code::Bytes(b)) if a.as_ptr() == b.as_ptr() && a.len() == b.len() => {
                true
            }
            (a, b) if a.file().is_some() && a.file() == b.file() => true,
            (a, b) => matches!((a.sha256(), b.sha256()), (Ok(a), Ok(b)) if a == b),
        };
        self.engine == other.engine && self.source == other.source && same_code
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_compare_by_digest_and_names() {
        let a = Precompiled {
            engine: "e".into(),
            source: "sha256:s".into(),
            code: Code::Bytes(bytes::Bytes::from_static(b"code")),
        };
        let mut b = a.clone();
        b.code = Code::Bytes(bytes::Bytes::copy_from_slice(b"code"));
        assert_eq!(a, b);
        b.code = Code::Bytes(bytes::Bytes::from_static(b"other"));
        assert_ne!(a, b);
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("artifact");
        std::fs::write(&file, b"code").expect("write");
        b.code = Code::File(file.clone());
        assert_eq!(a, b, "the same bytes in a file");
        b.code = Code::File(dir.path().join("missing"));
        assert_ne!(a, b, "a file that cannot be read equals nothing");
        assert_eq!(
            format!("{a:?}"),
            r#"Precompiled { engine: "e", source: "sha256:s", code: 4 bytes }"#
        );
        assert_eq!(CodePath::Precompiled.to_string(), "precompiled");
        let read = Precompiled::from_file_bytes(a.to_file_bytes().expect("bytes").into())
            .expect("read back");
        assert_eq!(read, a);
        let err = Precompiled::from_file_bytes(bytes::Bytes::from_static(b"\0asm\x01\0\0\0"))
            .unwrap_err();
        assert!(err.contains("not a rekon precompiled artifact"), "{err}");
    }
}
