//! Errors: [`Error`], what a reconcile returns when it fails, and
//! [`ReadError`], why a read from the host's caches failed.
//!
//! `?` converts read errors and (de)serialization errors into an [`Error`],
//! so a reconcile body rarely builds one by hand:
//!
//! ```
//! use rekon_sdk::Error;
//!
//! fn parse(text: &str) -> Result<serde_json::Value, Error> {
//!     Ok(serde_json::from_str(text)?) // a serde error becomes a retryable Error
//! }
//! assert!(parse("{").unwrap_err().is_retryable());
//! ```

use std::fmt;

/// A failed reconcile (or registration).
///
/// A *retryable* error makes the host requeue the request with exponential
/// backoff; a *terminal* one is counted and not retried until the object
/// changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
    retryable: bool,
}

impl Error {
    /// An error worth retrying (a missing dependency, a stale cache, a
    /// conflict): the host requeues with backoff.
    ///
    /// ```
    /// let e = rekon_sdk::Error::retry("failed to find the pool's nodes");
    /// assert!(e.is_retryable());
    /// ```
    #[must_use]
    pub fn retry(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }

    /// An error that retrying cannot fix (an invalid spec): counted and not
    /// retried until the object changes.
    ///
    /// ```
    /// let e = rekon_sdk::Error::terminal("spec.image must not be empty");
    /// assert!(!e.is_retryable());
    /// ```
    #[must_use]
    pub fn terminal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }

    /// The message shown in logs, metrics and Events.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the host retries with backoff.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// Prefixes the message with context, keeping retryability:
    /// `err.context("failed to read job main/default/t1")`.
    #[must_use]
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self {
            message: format!("{context}: {}", self.message),
            retryable: self.retryable,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::retry(format!("failed to (de)serialize an object: {e}"))
    }
}

impl From<serde_yaml::Error> for Error {
    fn from(e: serde_yaml::Error) -> Self {
        Self::retry(format!("failed to (de)serialize YAML: {e}"))
    }
}

/// Every read error is retryable: even "not watched" can be transient (a
/// cluster engaged a moment ago whose watches are still starting), and a
/// capped backoff costs little when it is not.
impl From<ReadError> for Error {
    fn from(e: ReadError) -> Self {
        Self::retry(e.to_string())
    }
}

/// Why a read of the host's caches failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The resource is not watched by this plugin in that cluster: declare it
    /// as the primary or in a watch of the registration.
    #[error("failed to read: resource not watched by this plugin: {0}")]
    NotWatched(String),
    /// The cluster is not engaged (never was, or was removed).
    #[error("failed to read: unknown cluster: {0}")]
    UnknownCluster(String),
    /// The label selector does not parse.
    #[error("failed to read: invalid label selector: {0}")]
    InvalidSelector(String),
    /// The host returned an object that does not decode as the requested type.
    #[error("failed to decode {kind} from cluster {cluster}: {message}")]
    Decode {
        /// Cluster read from.
        cluster: String,
        /// The kind requested.
        kind: String,
        /// The decoder's message.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_errors_are_retryable() {
        let not_watched: Error = ReadError::NotWatched("v1/Secret".into()).into();
        assert!(not_watched.is_retryable());
        assert!(not_watched.message().contains("v1/Secret"));
        let unknown: Error = ReadError::UnknownCluster("sub".into()).into();
        assert!(unknown.is_retryable());
        let decode: Error = ReadError::Decode {
            cluster: "main".into(),
            kind: "Node".into(),
            message: "missing field".into(),
        }
        .into();
        assert!(decode.is_retryable());
        assert_eq!(
            decode.to_string(),
            "failed to decode Node from cluster main: missing field"
        );
    }

    #[test]
    fn context_prefixes_and_keeps_retryability() {
        let e = Error::terminal("bad spec").context("failed to reconcile pool p1");
        assert_eq!(e.message(), "failed to reconcile pool p1: bad spec");
        assert!(!e.is_retryable());
    }
}
