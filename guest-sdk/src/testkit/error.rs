//! Why a test-kit operation failed, and what a plugin logged.

use crate::action::Outcome;
use crate::context::{LogLevel, Request};
use crate::error::Error;

/// Why a test-kit operation failed. Most of these are what the real host
/// would report as a failed reconcile.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TestkitError {
    /// `register` failed or returned an invalid registration.
    #[error("failed to register plugin: {0}")]
    Register(Error),
    /// `reconcile` returned an error.
    #[error("failed to reconcile {request}: {error}")]
    Reconcile {
        /// The request.
        request: Request,
        /// The plugin's error.
        error: Error,
    },
    /// An action outside the plugin's declared permissions.
    #[error("plugin {plugin} may not {verb} {target}{}", if *.status { " (status)" } else { "" })]
    Forbidden {
        /// Plugin name.
        plugin: String,
        /// The verb needed.
        verb: String,
        /// Whether on the status subresource.
        status: bool,
        /// The target.
        target: String,
    },
    /// An action targets a cluster that is not engaged.
    #[error("failed to write {target}: unknown cluster")]
    UnknownCluster {
        /// The target.
        target: String,
    },
    /// A patch (or status apply) of an object that does not exist.
    #[error("failed to write {target}: not found")]
    NotFound {
        /// The target.
        target: String,
    },
    /// A resourceVersion or uid precondition failed.
    #[error("failed to write {target}: conflict: {message}")]
    Conflict {
        /// The target.
        target: String,
        /// What did not match.
        message: String,
    },
    /// An action that the API server would reject as malformed.
    #[error("failed to write {target}: invalid: {message}")]
    Invalid {
        /// The target (as far as known).
        target: String,
        /// Why.
        message: String,
    },
    /// A write failed because a failure was injected for its cluster or
    /// object ([`World::fail_writes`], [`World::fail_writes_to`]), like a
    /// write the host gave up on (unreachable cluster, persistent 5xx).
    #[error("failed to write {target}: {message}")]
    WriteFailed {
        /// The target.
        target: String,
        /// What was injected.
        message: String,
    },
    /// Several actions of one outcome failed (in different clusters): each
    /// failure, in the order of the clusters' first actions.
    #[error("failed to apply {} actions: {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Writes(Vec<TestkitError>),
    /// Reconcile → apply did not stop changing the world.
    #[error("failed to converge {request} in {rounds} rounds; last outcome: {last:?}")]
    NotConverged {
        /// The request (or `*` for every primary).
        request: String,
        /// Rounds run.
        rounds: usize,
        /// The last outcome.
        last: Box<Outcome>,
    },
}

/// A log line a plugin wrote through its [`Context`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Severity.
    pub level: LogLevel,
    /// The message.
    pub message: String,
    /// Structured fields.
    pub fields: Vec<(String, String)>,
}
