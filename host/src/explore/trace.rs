//! A run's trace: each reconcile, named so that another run reaches the
//! same one again, with what it decided and wrote.

use serde::{Deserialize, Serialize};

use crate::action::Phase;
use crate::change::record::Case;

/// A reconcile, named so that a run reaches the same one again: the `n`-th
/// (from 1) reconcile of `key` (`cluster/namespace/name`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct At {
    /// `cluster/namespace/name` of the request.
    pub key: String,
    /// Which of its reconciles, from 1.
    pub n: usize,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reconcile #{} of {}", self.n, self.key)
    }
}

/// One action of a recorded outcome, summarized.
#[derive(Clone, Debug)]
pub struct ActionSummary {
    /// `apply`, `patch`, `delete`, `create`, `event`.
    pub verb: String,
}

/// One write a reconcile's actions made, from the wire's log.
#[derive(Clone, Debug)]
pub struct WriteSummary {
    /// HTTP method.
    pub method: String,
    /// Whether it changed the cluster.
    pub changed: bool,
    /// The API server's answer.
    pub status: u16,
    /// Request path.
    pub path: String,
    /// The server's message when it refused.
    pub message: Option<String>,
}

impl WriteSummary {
    /// Whether the API server refused it for good: a 400, 403 or 422 (a
    /// write the server will never take, whatever the retries). 404 and
    /// 409 are not: the writer takes them as done where they mean it.
    #[must_use]
    pub fn refused(&self) -> bool {
        matches!(self.status, 400 | 403 | 422)
    }
}

/// One reconcile of a run.
#[derive(Clone, Debug)]
pub struct Reconcile {
    /// Its ordinal in the run, from 1.
    pub ordinal: usize,
    /// Which reconcile of which key.
    pub at: At,
    /// The phase.
    pub phase: Phase,
    /// Its actions (after a crash: those performed).
    pub actions: Vec<ActionSummary>,
    /// Whether it finalized.
    pub finalized: bool,
    /// Its error, when it failed.
    pub error: Option<String>,
    /// The writes its actions made (filled when the run ends).
    pub writes: Vec<WriteSummary>,
    /// How many of them changed something.
    pub changed_writes: usize,
    /// How many lists it made.
    pub lists: usize,
    /// Why the host could not perform its outcome (the writer's reason,
    /// naming the action and the object), when it could not.
    pub refused: Vec<String>,
    /// The fault performed on it, if any.
    pub fault: Option<String>,
    /// The case: what it read and decided (as the plugin saw it).
    pub case: Case,
}

impl Reconcile {
    /// A reconcile as it ends, from its case: what it read and decided.
    /// Its writes are attached when the run ends.
    #[must_use]
    pub fn new(ordinal: usize, at: At, phase: Phase, case: Case, fault: Option<String>) -> Self {
        use crate::change::record::CaseOutcome;
        use crate::change::record::Read;
        let (actions, finalized, error) = match &case.outcome {
            CaseOutcome::Ok {
                actions, finalized, ..
            } => (
                actions
                    .iter()
                    .filter_map(|a| a.as_object().and_then(|m| m.keys().next()).cloned())
                    .map(|verb| ActionSummary { verb })
                    .collect(),
                *finalized,
                None,
            ),
            CaseOutcome::Error { message, .. } => (Vec::new(), false, Some(message.clone())),
        };
        Self {
            ordinal,
            at,
            phase,
            actions,
            finalized,
            error,
            writes: Vec::new(),
            changed_writes: 0,
            lists: case
                .reads
                .iter()
                .filter(|r| matches!(r, Read::List { .. }))
                .count(),
            refused: Vec::new(),
            fault,
            case,
        }
    }
}
