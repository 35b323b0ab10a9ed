//! Leader election settings, errors and the replica's identity.

use std::time::Duration;

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The durations violate `lease_duration > renew_deadline > retry_period * 1.2`.
    #[error(
        "invalid leader election timing for lease {lease}: need lease duration ({lease_duration:?}) > renew deadline ({renew_deadline:?}) > 1.2 x retry period ({retry_period:?})"
    )]
    InvalidTiming {
        /// `namespace/name` of the lease.
        lease: String,
        /// Configured lease duration.
        lease_duration: Duration,
        /// Configured renew deadline.
        renew_deadline: Duration,
        /// Configured retry period.
        retry_period: Duration,
    },
    /// Lease name, namespace or identity is empty.
    #[error("invalid leader election config: {0} must not be empty")]
    Empty(&'static str),
    /// The shard count is out of range.
    #[error("invalid sharding config: {shards} shards (need 1..={max})")]
    Shards {
        /// Configured count.
        shards: u32,
        /// Largest allowed.
        max: u32,
    },
    /// A write was attempted without holding the lease.
    #[error("not the leader of lease {lease}: writes are disabled")]
    NotLeader {
        /// `namespace/name` of the lease.
        lease: String,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Configuration of leader election. Defaults are client-go's.
#[derive(Clone, Debug)]
pub struct LeaderElectionConfig {
    /// Name of the Lease object.
    pub lease_name: String,
    /// Namespace of the Lease object (in the primary cluster).
    pub lease_namespace: String,
    /// Unique identity of this process (see [`default_identity`]).
    pub identity: String,
    /// How long a lease is valid after its last renewal, as seen by
    /// followers (client-go default 15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up
    /// leadership (client-go default 10 s).
    pub renew_deadline: Duration,
    /// Interval between attempts to acquire or renew (client-go default 2 s).
    pub retry_period: Duration,
    /// What losing the lease (other than at shutdown) does.
    pub on_lost: OnLost,
}

/// What a replica does when it loses its lease while running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnLost {
    /// Stop: the process shuts down (in-flight reconciles finish without
    /// writing) and exits non-zero, so it restarts clean — controller-runtime's
    /// default, and ours.
    #[default]
    Exit,
    /// Demote to a warm follower: keep the caches and the queue, stop
    /// reconciling and writing, and campaign again.
    Demote,
}

/// How [`LeaderElector::run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// `shutdown` resolved (the lease was released if held).
    Shutdown,
    /// Leadership was lost and [`OnLost::Exit`] is configured.
    Lost,
}

impl LeaderElectionConfig {
    /// client-go's default lease duration.
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
    /// client-go's default renew deadline.
    pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
    /// client-go's default retry period.
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

    /// Defaults for the Lease `namespace/name` and a fresh [`default_identity`].
    #[must_use]
    pub fn new(lease_name: impl Into<String>, lease_namespace: impl Into<String>) -> Self {
        Self {
            lease_name: lease_name.into(),
            lease_namespace: lease_namespace.into(),
            identity: default_identity(),
            lease_duration: Self::DEFAULT_LEASE_DURATION,
            renew_deadline: Self::DEFAULT_RENEW_DEADLINE,
            retry_period: Self::DEFAULT_RETRY_PERIOD,
            on_lost: OnLost::default(),
        }
    }

    /// `namespace/name` of the lease (the `name` label of `leader_election_master_status`).
    #[must_use]
    pub fn lease_key(&self) -> String {
        format!("{}/{}", self.lease_namespace, self.lease_name)
    }

    /// Check the timing invariants client-go enforces.
    ///
    /// # Errors
    /// When a name is empty or the durations are inconsistent.
    pub fn validate(&self) -> Result<()> {
        if self.lease_name.is_empty() {
            return Err(Error::Empty("lease name"));
        }
        if self.lease_namespace.is_empty() {
            return Err(Error::Empty("lease namespace"));
        }
        if self.identity.is_empty() {
            return Err(Error::Empty("identity"));
        }
        if self.lease_duration <= self.renew_deadline
            || self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR)
        {
            return Err(Error::InvalidTiming {
                lease: self.lease_key(),
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        Ok(())
    }
}

/// client-go's `JitterFactor`: retries wait between 1× and 1.2× the retry period.
pub(super) const JITTER_FACTOR: f64 = 1.2;

/// `POD_NAME` (downward API), else the host name, plus `_` and a random
/// suffix, so that a restarted container never mistakes the previous
/// incarnation's lease for its own.
#[must_use]
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "rekon".to_owned());
    format!("{base}_{:016x}", rand::random::<u64>())
}
