//! Why a pass over a Plugin object did not make its desired version serve.

use super::module_source::FetchFailure;
use crate::plugin::Refusal;
use crate::source::plugin_crd::GrantError;
use crate::source::signature::VerifyError;

/// Why the desired version of a Plugin object does not serve (or serves
/// only in part). [`PluginObjectError::reason`] is the reason of the
/// object's `Degraded` condition (and of `Ready` when nothing serves), the
/// message its message.
#[derive(Debug, thiserror::Error)]
pub enum PluginObjectError {
    /// `spec.permissions` does not parse.
    #[error("spec.permissions: {0}")]
    InvalidGrant(#[source] GrantError),
    /// The module declares more than `spec.permissions` grants.
    #[error("the module declares more than spec.permissions grants: {}", .0.join("; "))]
    ExceedsGrant(Vec<String>),
    /// The module (or its pull Secret) could not be fetched.
    #[error(transparent)]
    Fetch(#[from] FetchFailure),
    /// The module's signatures do not satisfy `spec.verification` (or a
    /// key cannot be read); nothing of it was compiled.
    #[error("signature verification failed: {0}")]
    Verification(#[source] VerifyError),
    /// `rekon run --require-signatures` and the Plugin has no
    /// `spec.verification`.
    #[error(
        "signatures are required (rekon run --require-signatures) and spec.verification is not set"
    )]
    VerificationRequired,
    /// The registry refused the module: it does not compile, fit the
    /// contract, register, accept its settings or its grant, or its name is
    /// taken.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The blocking task that loads the module failed.
    #[error("the load task failed: {0}")]
    LoadTask(#[source] tokio::task::JoinError),
    /// The reference does not resolve; the digest it last resolved to
    /// serves from the module cache meanwhile.
    #[error("{failure}; the last resolved digest {digest} serves from the cache meanwhile")]
    LastResolvedServes {
        /// Why the reference does not resolve.
        failure: FetchFailure,
        /// What serves instead.
        digest: String,
    },
    /// The serving version serves; its shadow does not run.
    #[error("shadow: {0}")]
    Shadow(#[source] Box<PluginObjectError>),
}

impl PluginObjectError {
    /// The condition reason (CamelCase), as the status says it.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidGrant(_) => "InvalidGrant",
            Self::ExceedsGrant(_) => "PermissionsExceedGrant",
            Self::Fetch(f) | Self::LastResolvedServes { failure: f, .. } => f.reason,
            Self::Refused(r) => r.reason,
            Self::LoadTask(_) => "LoadFailed",
            Self::Verification(e) => e.reason(),
            Self::VerificationRequired => "VerificationRequired",
            Self::Shadow(e) => e.reason(),
        }
    }

    /// Worth trying again with backoff as is (the registry or a pull
    /// Secret may come back); anything else waits for an edit.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Fetch(f) => f.transient,
            Self::LastResolvedServes { .. } => true,
            Self::Shadow(e) => e.is_transient(),
            // A key Secret may yet be created, the registry come back.
            Self::Verification(e) => {
                e.is_transient() || matches!(e, VerifyError::KeyUnavailable { .. })
            }
            Self::VerificationRequired
            | Self::InvalidGrant(_)
            | Self::ExceedsGrant(_)
            | Self::Refused(_)
            | Self::LoadTask(_) => false,
        }
    }

    /// As the registry's refusal, for [`crate::plugin::PluginRegistry::apply_module`]'s
    /// acceptance check.
    #[must_use]
    pub fn to_refusal(&self) -> Refusal {
        Refusal {
            reason: self.reason(),
            message: self.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable() -> FetchFailure {
        FetchFailure {
            reason: "RegistryUnreachable",
            message: "registry r.example does not answer".to_owned(),
            transient: true,
        }
    }

    #[test]
    fn reasons_and_retries_follow_the_failing_step() {
        let cases: Vec<(PluginObjectError, &str, bool)> = vec![
            (
                PluginObjectError::InvalidGrant(GrantError::Clusters("3".into())),
                "InvalidGrant",
                false,
            ),
            (
                PluginObjectError::ExceedsGrant(vec!["patch on ConfigMap".into()]),
                "PermissionsExceedGrant",
                false,
            ),
            (unreachable().into(), "RegistryUnreachable", true),
            (
                Refusal {
                    reason: "InvalidSettings",
                    message: "no".into(),
                }
                .into(),
                "InvalidSettings",
                false,
            ),
            (
                PluginObjectError::LastResolvedServes {
                    failure: unreachable(),
                    digest: "sha256:1".into(),
                },
                "RegistryUnreachable",
                true,
            ),
            (
                PluginObjectError::Shadow(Box::new(unreachable().into())),
                "RegistryUnreachable",
                true,
            ),
            (
                PluginObjectError::Verification(VerifyError::SignatureMissing {
                    digest: "sha256:1".into(),
                }),
                "SignatureMissing",
                false,
            ),
            (
                PluginObjectError::Verification(VerifyError::KeyUnavailable {
                    detail: "Secret rekon-system/keys does not exist".into(),
                }),
                "KeyUnavailable",
                true,
            ),
            (
                PluginObjectError::VerificationRequired,
                "VerificationRequired",
                false,
            ),
        ];
        for (error, reason, transient) in cases {
            assert_eq!(error.reason(), reason, "{error}");
            assert_eq!(error.is_transient(), transient, "{error}");
        }
    }

    #[test]
    fn messages_say_what_the_status_says() {
        let shadow = PluginObjectError::Shadow(Box::new(unreachable().into()));
        assert_eq!(
            shadow.to_string(),
            "shadow: registry r.example does not answer"
        );
        let cached = PluginObjectError::LastResolvedServes {
            failure: unreachable(),
            digest: "sha256:1".into(),
        };
        assert_eq!(
            cached.to_string(),
            "registry r.example does not answer; the last resolved digest sha256:1 serves from the cache meanwhile"
        );
        let exceeds = PluginObjectError::ExceedsGrant(vec!["a".into(), "b".into()]);
        assert_eq!(
            exceeds.to_refusal().message,
            "the module declares more than spec.permissions grants: a; b"
        );
    }
}
