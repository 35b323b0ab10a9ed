//! A plugin's primaries and the finalizer protocol.
//!
//! A plugin's primaries are exactly the objects of its primary kind, in its
//! primary clusters, that match its primary selector (if any). Only they are
//! reconciled as [`Phase::Live`] and given the plugin's finalizer. An object
//! that carries the finalizer but no longer matches the selector is
//! *leaving*: it gets reconciles in [`Phase::Leaving`] until the plugin says
//! it is finalized, then loses the finalizer — the same protocol as deletion.
//!
//! ```
//! use rekon_rules::{Phase, PrimaryState, Step, step};
//! // A new primary of a plugin with a finalizer: the finalizer comes first.
//! let new = PrimaryState { in_scope: true, deleting: false, has_finalizer: false };
//! assert_eq!(step(true, new), Step::AddFinalizer);
//! // Its label was removed: one last reconcile to clean up, then release.
//! let leaving = PrimaryState { in_scope: false, deleting: false, has_finalizer: true };
//! assert_eq!(step(true, leaving), Step::Reconcile { phase: Phase::Leaving, release: true });
//! // An unrelated object of the same kind is never touched.
//! let unrelated = PrimaryState { in_scope: false, deleting: false, has_finalizer: false };
//! assert_eq!(step(true, unrelated), Step::Ignore);
//! ```

/// Why a primary is reconciled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Phase {
    /// The object is a primary: bring the world in line with it.
    #[default]
    Live,
    /// The object is being deleted (it has a `deletionTimestamp`). With a
    /// finalizer, clean up and report the outcome `finalized`.
    Deleting,
    /// The object left the primary scope (its labels stopped matching the
    /// primary selector) while it carried the plugin's finalizer: clean up
    /// and report the outcome `finalized`; the finalizer is then removed.
    Leaving,
}

impl Phase {
    /// Whether the plugin is asked to clean up (deleting or leaving).
    #[must_use]
    pub fn is_cleanup(self) -> bool {
        self != Phase::Live
    }

    /// Lowercase name, as in logs.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Live => "live",
            Phase::Deleting => "deleting",
            Phase::Leaving => "leaving",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is known of an object of the plugin's primary kind, in one of its
/// primary clusters. (Objects in other clusters are never primaries.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrimaryState {
    /// Its labels match the primary selector (always true without one).
    pub in_scope: bool,
    /// It has a `deletionTimestamp`.
    pub deleting: bool,
    /// It carries the plugin's finalizer (false when none is declared).
    pub has_finalizer: bool,
}

/// What to do with such an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Not a primary, and nothing of the plugin's is on it: leave it alone.
    Ignore,
    /// A primary without the plugin's finalizer: add it first (the change
    /// it makes brings the object back for its first reconcile).
    AddFinalizer,
    /// Call `reconcile` in `phase`. With `release`, the finalizer is removed
    /// once the outcome says `finalized` and all its actions succeeded.
    Reconcile {
        /// The phase the plugin is told.
        phase: Phase,
        /// Remove the finalizer after a finalized outcome.
        release: bool,
    },
}

/// The step for an object in `state`, for a plugin that declares a
/// finalizer (`finalizer_declared`) or not.
#[must_use]
pub fn step(finalizer_declared: bool, state: PrimaryState) -> Step {
    let PrimaryState {
        in_scope,
        deleting,
        has_finalizer,
    } = state;
    let has_finalizer = finalizer_declared && has_finalizer;
    match (deleting, in_scope, has_finalizer) {
        // Ours to clean up, whatever its labels say now.
        (true, _, true) => Step::Reconcile {
            phase: Phase::Deleting,
            release: true,
        },
        // Our finalizer is gone (cleanup done): nothing left to do.
        (true, _, false) if finalizer_declared => Step::Ignore,
        // No finalizer declared: a primary is still shown its deletion.
        (true, true, false) => Step::Reconcile {
            phase: Phase::Deleting,
            release: false,
        },
        (true, false, false) => Step::Ignore,
        (false, false, true) => Step::Reconcile {
            phase: Phase::Leaving,
            release: true,
        },
        (false, false, false) => Step::Ignore,
        (false, true, false) if finalizer_declared => Step::AddFinalizer,
        (false, true, _) => Step::Reconcile {
            phase: Phase::Live,
            release: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(in_scope: bool, deleting: bool, has_finalizer: bool) -> PrimaryState {
        PrimaryState {
            in_scope,
            deleting,
            has_finalizer,
        }
    }

    const LIVE: Step = Step::Reconcile {
        phase: Phase::Live,
        release: false,
    };

    #[test]
    fn every_state_with_a_finalizer() {
        assert_eq!(step(true, s(true, false, false)), Step::AddFinalizer);
        assert_eq!(step(true, s(true, false, true)), LIVE);
        assert_eq!(step(true, s(false, false, false)), Step::Ignore);
        assert_eq!(
            step(true, s(false, false, true)),
            Step::Reconcile {
                phase: Phase::Leaving,
                release: true
            }
        );
        for in_scope in [true, false] {
            assert_eq!(
                step(true, s(in_scope, true, true)),
                Step::Reconcile {
                    phase: Phase::Deleting,
                    release: true
                }
            );
            assert_eq!(step(true, s(in_scope, true, false)), Step::Ignore);
        }
    }

    #[test]
    fn every_state_without_a_finalizer() {
        // `has_finalizer` means nothing when none is declared.
        for has in [true, false] {
            assert_eq!(step(false, s(true, false, has)), LIVE);
            assert_eq!(step(false, s(false, false, has)), Step::Ignore);
            assert_eq!(
                step(false, s(true, true, has)),
                Step::Reconcile {
                    phase: Phase::Deleting,
                    release: false
                }
            );
            assert_eq!(step(false, s(false, true, has)), Step::Ignore);
        }
    }
}
