//! Why a fetch or a push failed, and how the registry client's errors
//! sort into those.

use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};

/// Why a fetch failed. Each variant names the reference; [`Self::reason`]
/// is a condition reason, [`Self::outcome`] the metric label.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Not a reference, or a malformed digest.
    #[error("invalid reference `{reference}`: {detail}")]
    InvalidReference {
        /// The reference.
        reference: String,
        /// What is wrong.
        detail: String,
    },
    /// The registry did not answer (refused, timed out, 5xx) after retries.
    #[error("registry of `{reference}` unreachable: {detail}")]
    Unreachable {
        /// The reference.
        reference: String,
        /// The last attempt's failure.
        detail: String,
    },
    /// The repository or the tag/digest does not exist (a tag that vanished).
    #[error("`{reference}` not found: {detail}")]
    NotFound {
        /// The reference.
        reference: String,
        /// The registry's words.
        detail: String,
    },
    /// The registry refused the credentials (or their absence).
    #[error("not authorized to pull `{reference}`: {detail}")]
    Unauthorized {
        /// The reference.
        reference: String,
        /// The registry's words.
        detail: String,
    },
    /// Content did not hash to the digest it should have.
    #[error("digest mismatch for the {what} of `{reference}`: expected {expected}, found {found}")]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// `manifest` or `layer`.
        what: &'static str,
        /// The digest expected (pinned, or the manifest's layer digest).
        expected: String,
        /// The digest of what was served.
        found: String,
    },
    /// The module is larger than the limit.
    #[error("module of `{reference}` too large: {size} bytes, the limit is {limit}")]
    TooLarge {
        /// The reference.
        reference: String,
        /// Its size (as declared, or as read so far).
        size: u64,
        /// [`OciConfig::max_module_bytes`].
        limit: u64,
    },
    /// Not a wasm artifact (media types, layer count).
    #[error("`{reference}` is not a wasm artifact: {detail}")]
    NotAWasmArtifact {
        /// The reference.
        reference: String,
        /// What it is instead.
        detail: String,
    },
    /// Any other refusal by the registry (or a failure to set up the client).
    #[error("registry error for `{reference}`: {detail}")]
    Registry {
        /// The reference.
        reference: String,
        /// The registry's words.
        detail: String,
    },
}

impl FetchError {
    /// A condition reason (CamelCase) for a Plugin's status.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidReference { .. } => "InvalidReference",
            Self::Unreachable { .. } => "RegistryUnreachable",
            Self::NotFound { .. } => "ArtifactNotFound",
            Self::Unauthorized { .. } => "RegistryUnauthorized",
            Self::DigestMismatch { .. } => "DigestMismatch",
            Self::TooLarge { .. } => "ModuleTooLarge",
            Self::NotAWasmArtifact { .. } => "NotAWasmArtifact",
            Self::Registry { .. } => "RegistryError",
        }
    }

    /// The `outcome` label of `rekon_plugin_fetch_total` (snake_case).
    #[must_use]
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::InvalidReference { .. } => "invalid_reference",
            Self::Unreachable { .. } => "registry_unreachable",
            Self::NotFound { .. } => "not_found",
            Self::Unauthorized { .. } => "unauthorized",
            Self::DigestMismatch { .. } => "digest_mismatch",
            Self::TooLarge { .. } => "too_large",
            Self::NotAWasmArtifact { .. } => "not_a_wasm_artifact",
            Self::Registry { .. } => "registry_error",
        }
    }

    /// Worth retrying later: the registry did not answer.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }
}

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// Not a reference.
    #[error("invalid reference `{reference}`: {detail}")]
    InvalidReference {
        /// The reference.
        reference: String,
        /// What is wrong.
        detail: String,
    },
    /// The bytes are not a WebAssembly component.
    #[error("cannot push to `{reference}`: not a WebAssembly component: {detail}")]
    NotAComponent {
        /// The reference.
        reference: String,
        /// What the parser said.
        detail: String,
    },
    /// The registry refused or did not answer.
    #[error("failed to push the {stage} of `{reference}`: {source}")]
    Registry {
        /// The reference.
        reference: String,
        /// `layer`, `config` or `manifest`.
        stage: &'static str,
        /// The failure, classified as for fetches.
        #[source]
        source: Box<FetchError>,
    },
    /// The precompiled code to attach could not be read from its file.
    #[error("cannot push to `{reference}`: failed to read the precompiled code: {source}")]
    ReadPrecompiled {
        /// The reference.
        reference: String,
        /// The read's failure.
        #[source]
        source: std::io::Error,
    },
}

/// An error and its sources, `: `-separated.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// Sorts the registry client's errors into [`FetchError`]s.
pub(crate) fn classify(reference: &str, e: OciDistributionError) -> FetchError {
    let reference = reference.to_string();
    let detail = error_chain(&e);
    match e {
        OciDistributionError::RequestError(_) | OciDistributionError::IoError(_) => {
            FetchError::Unreachable { reference, detail }
        }
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => {
            FetchError::Unauthorized { reference, detail }
        }
        OciDistributionError::DigestError(DigestError::VerificationError { expected, actual }) => {
            FetchError::DigestMismatch {
                reference,
                what: "manifest",
                expected,
                found: actual,
            }
        }
        OciDistributionError::ImageManifestNotFoundError(_) => {
            FetchError::NotFound { reference, detail }
        }
        OciDistributionError::RegistryError { envelope, .. } => {
            let code = envelope.errors.first().map(|e| &e.code);
            match code {
                Some(
                    OciErrorCode::ManifestUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::NotFound
                    | OciErrorCode::BlobUnknown,
                ) => FetchError::NotFound { reference, detail },
                Some(OciErrorCode::Unauthorized | OciErrorCode::Denied) => {
                    FetchError::Unauthorized { reference, detail }
                }
                Some(OciErrorCode::Toomanyrequests) => {
                    FetchError::Unreachable { reference, detail }
                }
                _ => FetchError::Registry { reference, detail },
            }
        }
        OciDistributionError::ServerError { code, .. } => match code {
            404 => FetchError::NotFound { reference, detail },
            401 | 403 => FetchError::Unauthorized { reference, detail },
            429 | 500..=599 => FetchError::Unreachable { reference, detail },
            _ => FetchError::Registry { reference, detail },
        },
        OciDistributionError::ManifestParsingError(_)
        | OciDistributionError::UnsupportedMediaTypeError(_)
        | OciDistributionError::ImageIndexParsingNoPlatformResolverError
        | OciDistributionError::IncompatibleLayerMediaTypeError(_) => {
            FetchError::NotAWasmArtifact { reference, detail }
        }
        _ => FetchError::Registry { reference, detail },
    }
}
