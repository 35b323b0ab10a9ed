//! The leader gate: open only while this replica may write.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::config::{Error, Result};

/// The "may I write?" switch shared by the controller and the writer.
///
/// Cheap to clone. Open only while this process holds the lease and its last
/// renewal is younger than the renew deadline.
#[derive(Clone, Debug)]
pub struct LeaderGate {
    pub(super) rx: watch::Receiver<bool>,
    /// Leadership ends at this instant unless renewed (None = not leading,
    /// or no deadline for [`LeaderGate::always_leader`]).
    pub(super) valid_until: Arc<Mutex<Option<Instant>>>,
    pub(super) deadline_enforced: bool,
    pub(super) lease: Arc<str>,
    /// Keeps the channel of [`LeaderGate::always_leader`] open.
    pub(super) _always: Option<Arc<watch::Sender<bool>>>,
}

impl LeaderGate {
    /// A gate that is always open: for `--leader-elect=false` (one replica).
    #[must_use]
    pub fn always_leader() -> Self {
        let (tx, rx) = watch::channel(true);
        Self {
            rx,
            valid_until: Arc::new(Mutex::new(None)),
            deadline_enforced: false,
            lease: Arc::from("<leader election disabled>"),
            // Receivers never see the channel closed while a gate lives.
            _always: Some(Arc::new(tx)),
        }
    }

    /// Whether this process may write now.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        if !*self.rx.borrow() {
            return false;
        }
        if !self.deadline_enforced {
            return true;
        }
        matches!(*self.valid_until.lock(), Some(until) if Instant::now() < until)
    }

    /// How long this process may still write: until its renew deadline
    /// (`None`: no deadline, leader election disabled). Zero when it does
    /// not lead. A write attempt is bounded by this, so none outlives the
    /// leadership it started under.
    #[must_use]
    pub fn remaining(&self) -> Option<Duration> {
        if !*self.rx.borrow() {
            return Some(Duration::ZERO);
        }
        if !self.deadline_enforced {
            return None;
        }
        Some(self.valid_until.lock().map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        }))
    }

    /// `Ok` when this process may write now.
    ///
    /// # Errors
    /// [`Error::NotLeader`] otherwise.
    pub fn check(&self) -> Result<()> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(Error::NotLeader {
                lease: self.lease.to_string(),
            })
        }
    }

    /// A receiver that changes whenever leadership is gained or lost.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Resolves once this process leads (at once if it already does).
    pub async fn leading(&self) {
        let mut rx = self.rx.clone();
        // An Err means the elector is gone: it will never lead again.
        if rx.wait_for(|leading| *leading).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves once this process stops leading (at once if it does not lead).
    pub async fn lost(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|leading| !*leading).await;
    }
}
