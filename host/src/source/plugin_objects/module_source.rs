//! Where the modules of Plugin objects come from: [`ModuleSource`], and the
//! OCI fetcher as one.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::source::oci::{Fetcher, PullPolicy as Policy, RegistryAuth, VerificationRecord};
use crate::source::signature::{self, Verified, VerifyError};

/// What a module fetch is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchRequest {
    /// OCI reference.
    pub reference: String,
    /// Expected manifest digest, if pinned.
    pub digest: Option<String>,
    /// Resolve the reference again even if the cache has it.
    pub always: bool,
    /// `.dockerconfigjson` of the pull Secret, if any.
    pub docker_config: Option<Vec<u8>>,
}

/// What a signature check is asked for: the signatures of manifest
/// `digest` (the one fetched, that will be served) under `policy`.
#[derive(Clone, Debug)]
pub struct VerifyRequest {
    /// OCI reference of the module (its repository holds the signatures).
    pub reference: String,
    /// The manifest digest fetched.
    pub digest: String,
    /// What the signatures must satisfy.
    pub policy: Arc<signature::Policy>,
    /// `.dockerconfigjson` of the pull Secret, if any.
    pub docker_config: Option<Vec<u8>>,
    /// Read the signatures from the registry even when the cache remembers
    /// this digest verified under this policy (`pullPolicy: Always`).
    pub always: bool,
}

/// A fetched, verified module.
#[derive(Clone, Debug)]
pub struct Module {
    /// Manifest digest (`sha256:…`), what the status records.
    pub digest: String,
    /// The component's bytes.
    pub bytes: Arc<[u8]>,
    /// Served from the host's disk cache (nothing pulled).
    pub from_cache: bool,
    /// Its precompiled code for this host's engine, when the artifact
    /// ships one; used only once the manifest's signatures verified.
    pub precompiled: Option<crate::plugin::Precompiled>,
}

/// Why a fetch failed: a condition reason and a message naming the
/// reference.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FetchFailure {
    /// CamelCase condition reason: one of
    /// [`crate::source::oci::FetchError::reason`]'s, or
    /// [`FetchFailure::PULL_SECRET_UNAVAILABLE`].
    pub reason: &'static str,
    /// For humans.
    pub message: String,
    /// Worth trying again as is (an unreachable registry, a missing pull
    /// Secret); a digest mismatch or a wrong artifact waits for an edit.
    pub transient: bool,
}

impl FetchFailure {
    /// The reason of a pull Secret that is missing or unusable.
    pub const PULL_SECRET_UNAVAILABLE: &'static str = "PullSecretUnavailable";

    /// A pull Secret that is missing or unusable.
    #[must_use]
    pub fn pull_secret(message: String, transient: bool) -> Self {
        Self {
            reason: Self::PULL_SECRET_UNAVAILABLE,
            message,
            transient,
        }
    }
}

impl From<crate::source::oci::FetchError> for FetchFailure {
    fn from(e: crate::source::oci::FetchError) -> Self {
        Self {
            reason: e.reason(),
            message: e.to_string(),
            transient: e.is_transient(),
        }
    }
}

/// Where modules come from: the OCI fetcher in production.
pub trait ModuleSource: Send + Sync + 'static {
    /// Fetch and verify one module.
    fn fetch(&self, request: FetchRequest) -> BoxFuture<'static, Result<Module, FetchFailure>>;
    /// The module with manifest digest `digest` if the local cache holds
    /// it; never asks a registry.
    fn cached(&self, digest: &str) -> BoxFuture<'static, Option<Module>>;
    /// Whether the signatures of the fetched digest satisfy the policy:
    /// remembered from an earlier check under the same policy, else read
    /// from the registry (and remembered when they do).
    fn verify(&self, request: VerifyRequest) -> BoxFuture<'static, Result<Verified, VerifyError>>;
}

/// The credentials a pull Secret gives for `reference`'s registry.
fn auth_for(reference: &str, docker_config: Option<&[u8]>) -> Result<RegistryAuth, String> {
    let Some(json) = docker_config else {
        return Ok(RegistryAuth::Anonymous);
    };
    let registry = reference
        .parse::<oci_client::Reference>()
        .map(|r| r.registry().to_owned())
        .unwrap_or_default();
    RegistryAuth::from_docker_config_json(json, &registry)
        .map_err(|e| format!("the pull Secret is unusable: {e}"))
}

/// The OCI fetcher as the module source of Plugin objects: the pull
/// Secret's credentials for the reference's registry, `pullPolicy: Always`
/// as [`Policy::Always`].
impl ModuleSource for Fetcher {
    fn fetch(&self, request: FetchRequest) -> BoxFuture<'static, Result<Module, FetchFailure>> {
        let fetcher = self.clone();
        Box::pin(async move {
            let auth = auth_for(&request.reference, request.docker_config.as_deref())
                .map_err(|message| FetchFailure::pull_secret(message, false))?;
            let policy = if request.always {
                Policy::Always
            } else {
                Policy::IfNotPresent
            };
            let fetched = fetcher
                .fetch(&request.reference, request.digest.as_deref(), policy, &auth)
                .await?;
            Ok(Module {
                digest: fetched.manifest_digest,
                bytes: fetched.bytes,
                from_cache: fetched.from_cache,
                precompiled: fetched.precompiled,
            })
        })
    }

    fn cached(&self, digest: &str) -> BoxFuture<'static, Option<Module>> {
        let (fetcher, digest) = (self.clone(), digest.to_owned());
        Box::pin(async move {
            let (_, bytes) = fetcher.cached(&digest).await?;
            Some(Module {
                digest,
                bytes,
                from_cache: true,
                precompiled: None,
            })
        })
    }

    fn verify(&self, request: VerifyRequest) -> BoxFuture<'static, Result<Verified, VerifyError>> {
        let fetcher = self.clone();
        Box::pin(async move {
            let VerifyRequest {
                reference,
                digest,
                policy,
                docker_config,
                always,
            } = request;
            let fingerprint = policy.fingerprint();
            if !always && let Some(record) = fetcher.verification(&digest, &fingerprint).await {
                return Ok(Verified {
                    digest,
                    signers: record.signers,
                });
            }
            // The fetch read the same pull Secret: an unusable one failed
            // it already.
            let auth =
                auth_for(&reference, docker_config.as_deref()).unwrap_or(RegistryAuth::Anonymous);
            let verified =
                signature::verify(&fetcher, &reference, Some(&digest), &policy, &auth).await?;
            let record = VerificationRecord {
                policy: fingerprint,
                keys: policy.key_fingerprints(),
                signers: verified.signers.clone(),
            };
            fetcher.remember_verification(&digest, record).await;
            Ok(verified)
        })
    }
}
