//! The disk cache of manifests and modules, by digest, and what verified
//! each module's signatures (`verified/sha256/<hex>`: one record per
//! policy that verified that manifest digest).

use std::path::PathBuf;
use std::sync::Arc;

use super::reference::{hex_of, sha256_digest, wasm_layer};
use crate::files::write_atomically;

/// That a manifest digest's signatures satisfied a policy: kept beside the
/// module so that a restart with the registry out of reach serves only what
/// was verified, under the same policy. The cache directory is trusted as
/// the compiled-code cache beside it is (whoever writes there could
/// replace compiled code too).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VerificationRecord {
    /// The fingerprint of the policy that verified it (its keys, minimum
    /// and annotations): another policy finds no record.
    pub policy: String,
    /// The fingerprints of the policy's keys (`sha256:` of each SPKI).
    pub keys: Vec<String>,
    /// The keys that signed, as the policy named them.
    pub signers: Vec<String>,
}

/// Manifests and modules on disk, by digest. Every read is verified
/// against its digest (a damaged file is removed and refetched); every
/// write goes to a temporary file renamed into place. Write failures are
/// logged, not returned: a fetch that could not be cached still succeeded.
#[derive(Debug, Clone)]
pub(super) struct ModuleCache {
    dir: Option<PathBuf>,
}

impl ModuleCache {
    /// A cache in `dir` (`None`: nothing is cached).
    pub(super) fn new(dir: Option<PathBuf>) -> Self {
        Self { dir }
    }

    fn path(&self, kind: &str, digest: &str) -> Option<PathBuf> {
        let hex = hex_of(digest)?;
        Some(self.dir.as_ref()?.join(kind).join("sha256").join(hex))
    }

    /// The content of `kind/digest`, when present and intact.
    async fn read(&self, kind: &str, digest: &str) -> Option<Vec<u8>> {
        let path = self.path(kind, digest)?;
        let bytes = tokio::fs::read(&path).await.ok()?;
        if sha256_digest(&bytes) == digest {
            return Some(bytes);
        }
        tracing::warn!(path = %path.display(), "damaged cache entry; removing it");
        let _ = tokio::fs::remove_file(&path).await;
        None
    }

    /// Where the precompiled layer with `digest` is (or goes): it is
    /// streamed there, never held in memory (`fetch.rs`). `None` without a
    /// cache directory.
    pub(super) fn precompiled_path(&self, digest: &str) -> Option<PathBuf> {
        self.path("precompiled", digest)
    }

    /// The cached precompiled layer with `digest`, when present and intact
    /// (hashed as it is read, in blocks; a damaged one is removed).
    pub(super) async fn precompiled(&self, digest: &str) -> Option<PathBuf> {
        let path = self.precompiled_path(digest)?;
        if !tokio::fs::try_exists(&path).await.unwrap_or(false) {
            return None;
        }
        let (read, expected) = (path.clone(), digest.to_owned());
        let intact = tokio::task::spawn_blocking(move || {
            crate::plugin::Code::File(read)
                .sha256()
                .is_ok_and(|sha| format!("sha256:{}", hex::encode(sha)) == expected)
        })
        .await
        .unwrap_or(false);
        if intact {
            return Some(path);
        }
        tracing::warn!(path = %path.display(), "damaged cache entry; removing it");
        let _ = tokio::fs::remove_file(&path).await;
        None
    }

    /// The cached module with `layer_digest`.
    pub(super) async fn module(&self, layer_digest: &str) -> Option<Arc<[u8]>> {
        self.read("modules", layer_digest).await.map(Arc::from)
    }

    /// The cached artifact with manifest `digest`: its layer digest and
    /// module, when both are cached.
    pub(super) async fn artifact(&self, digest: &str) -> Option<(String, Arc<[u8]>)> {
        let manifest = self.read("manifests", digest).await?;
        let layer = wasm_layer(&manifest).ok()?;
        let module = self.module(&layer.digest).await?;
        Some((layer.digest, module))
    }

    /// The record of `digest` verified under the policy with fingerprint
    /// `policy`, if one was written.
    pub(super) async fn verification(
        &self,
        digest: &str,
        policy: &str,
    ) -> Option<VerificationRecord> {
        let path = self.path("verified", digest)?;
        let bytes = tokio::fs::read(&path).await.ok()?;
        let records: Vec<VerificationRecord> = serde_json::from_slice(&bytes).ok()?;
        records.into_iter().find(|r| r.policy == policy)
    }

    /// Remembers that `digest` verified under `record.policy` (replacing an
    /// older record of the same policy). Failures are logged.
    pub(super) async fn remember_verification(&self, digest: &str, record: VerificationRecord) {
        let Some(path) = self.path("verified", digest) else {
            return;
        };
        let mut records: Vec<VerificationRecord> = match tokio::fs::read(&path).await {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        if records.contains(&record) {
            return;
        }
        records.retain(|r| r.policy != record.policy);
        records.push(record);
        let text = serde_json::to_vec_pretty(&records).unwrap_or_default();
        let target = path.clone();
        let write = tokio::task::spawn_blocking(move || write_atomically(&target, &text));
        if let Err(e) = write
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        {
            tracing::warn!(path = %path.display(), error = %e, "failed to record a module's verification");
        }
    }

    pub(super) async fn store(
        &self,
        manifest_digest: &str,
        manifest: &[u8],
        layer_digest: &str,
        module: &[u8],
    ) {
        for (kind, digest, bytes) in [
            ("modules", layer_digest, module),
            ("manifests", manifest_digest, manifest),
        ] {
            let Some(path) = self.path(kind, digest) else {
                continue;
            };
            if tokio::fs::try_exists(&path).await.unwrap_or(false) {
                continue;
            }
            let (target, owned) = (path.clone(), bytes.to_vec());
            let write = tokio::task::spawn_blocking(move || write_atomically(&target, &owned));
            let written = write
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e)));
            if let Err(e) = written {
                tracing::warn!(path = %path.display(), error = %e, "failed to cache a plugin artifact");
            }
        }
    }
}
