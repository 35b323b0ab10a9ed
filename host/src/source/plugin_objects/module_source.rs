//! Where the modules of Plugin objects come from: [`ModuleSource`], and the
//! OCI fetcher as one.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::source::oci::{Fetcher, PullPolicy as Policy, RegistryAuth};

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

/// A fetched, verified module.
#[derive(Clone, Debug)]
pub struct Module {
    /// Manifest digest (`sha256:…`), what the status records.
    pub digest: String,
    /// The component's bytes.
    pub bytes: Arc<[u8]>,
    /// Served from the host's disk cache (nothing pulled).
    pub from_cache: bool,
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
}

/// The OCI fetcher as the module source of Plugin objects: the pull
/// Secret's credentials for the reference's registry, `pullPolicy: Always`
/// as [`Policy::Always`].
impl ModuleSource for Fetcher {
    fn fetch(&self, request: FetchRequest) -> BoxFuture<'static, Result<Module, FetchFailure>> {
        let fetcher = self.clone();
        Box::pin(async move {
            let auth = match &request.docker_config {
                None => RegistryAuth::Anonymous,
                Some(json) => {
                    let registry = request
                        .reference
                        .parse::<oci_client::Reference>()
                        .map(|r| r.registry().to_owned())
                        .unwrap_or_default();
                    RegistryAuth::from_docker_config_json(json, &registry).map_err(|e| {
                        FetchFailure::pull_secret(
                            format!("the pull Secret is unusable: {e}"),
                            false,
                        )
                    })?
                }
            };
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
            })
        })
    }
}
