//! The writer's settings and errors.

use std::time::Duration;

/// Writer settings.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Bound of one API request.
    pub request_timeout: Duration,
    /// Attempts per action for 429/5xx/safe-409 answers.
    pub max_attempts: u32,
    /// Longest wait between attempts (a longer Retry-After gives up and requeues).
    pub max_retry_wait: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(10),
            max_attempts: 4,
            max_retry_wait: Duration::from_secs(5),
        }
    }
}

/// Why an action failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This replica does not hold the leader lease: nothing is written.
    #[error(
        "failed to write for plugin {plugin} in cluster {cluster} ({action}): this replica is not the leader"
    )]
    NotLeader {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
    },
    /// The action names a cluster that is not engaged.
    #[error("failed to {action} {object} for plugin {plugin}: cluster {cluster} is not engaged")]
    UnknownCluster {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Object.
        object: String,
    },
    /// The action itself is malformed (bad JSON, no name, ...). Terminal.
    #[error(
        "failed to {action} for plugin {plugin} in cluster {cluster}: invalid action: {reason}"
    )]
    Invalid {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// What is wrong.
        reason: String,
    },
    /// The kind could not be resolved in the cluster.
    #[error("failed to {action} {object} for plugin {plugin}")]
    Resolve {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Object.
        object: String,
        /// Cause.
        #[source]
        source: Box<crate::cache::Error>,
    },
    /// The API server refused or the request failed.
    #[error(
        "failed to {action} {object} in cluster {cluster} for plugin {plugin}: {}",
        describe_kube_error(source)
    )]
    Api {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Object.
        object: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The cluster is unreachable (known before the request, or it went
    /// unreachable while the request was in flight): nothing was sent or
    /// the answer was not awaited.
    #[error(
        "failed to {action} {object} in cluster {cluster} for plugin {plugin}: the cluster is unreachable"
    )]
    Unreachable {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Object.
        object: String,
    },
    /// The capability gate refused the action: outside the plugin's
    /// declared permissions or the operator policy. Nothing was sent.
    #[error("refused to {action} in cluster {cluster} for plugin {plugin}: {reason}")]
    Forbidden {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Why.
        reason: String,
    },
    /// The request did not complete in time.
    #[error(
        "failed to {action} {object} in cluster {cluster} for plugin {plugin}: timed out after {timeout:?}"
    )]
    Timeout {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Object.
        object: String,
        /// The limit.
        timeout: Duration,
    },
}

impl Error {
    /// Whether a re-run of the reconcile may succeed (false for malformed actions).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Invalid { .. } | Self::Forbidden { .. })
    }

    /// HTTP status of an API error.
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { source, .. } => match source.as_ref() {
                kube::Error::Api(s) => Some(s.code),
                _ => None,
            },
            _ => None,
        }
    }
}

/// A client error as a user reads it: the HTTP status, reason and message
/// of an API answer, or the transport error.
#[must_use]
pub fn describe_kube_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", s.reason)
            };
            format!("HTTP {}{reason}: {}", s.code, s.message)
        }
        other => other.to_string(),
    }
}

/// The failures of one outcome (at most one per cluster).
#[derive(Debug, thiserror::Error)]
#[error("failed to perform {} of {total} actions: {}", failed.len(), list(failed))]
pub struct Failed {
    /// Number of actions in the outcome.
    pub total: usize,
    /// One error per cluster that failed.
    pub failed: Vec<Error>,
}

impl Failed {
    /// Whether any failure may go away on retry.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        self.failed.iter().any(Error::is_retryable)
    }
}

pub(super) fn list(errors: &[Error]) -> String {
    errors
        .iter()
        .map(|e| {
            let mut s = e.to_string();
            // The API error's text is already in the message.
            if !matches!(e, Error::Api { .. }) {
                let mut src = std::error::Error::source(e);
                while let Some(cause) = src {
                    s.push_str(": ");
                    s.push_str(&cause.to_string());
                    src = cause.source();
                }
            }
            s
        })
        .collect::<Vec<_>>()
        .join("; ")
}
