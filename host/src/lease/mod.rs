//! Leases: leader election and sharding, each fenced by a
//! `coordination.k8s.io/v1` Lease in the primary cluster.
//!
//! # Leader election
//!
//! Leader election on a `coordination.k8s.io/v1` Lease in the primary cluster.
//!
//! Only the leader reconciles and writes; followers keep their caches warm so
//! that a takeover is immediate. The algorithm is client-go's
//! `tools/leaderelection` (the one every controller-runtime manager uses), so
//! rekon replicas behave like any other Kubernetes controller:
//!
//! 1. **Candidate**: every `retry_period` (jittered ×1.2) read the Lease. Take
//!    it when it is absent, has no holder, or its record has not changed for
//!    `lease_duration` *as observed on our own clock* (never by comparing the
//!    holder's `renewTime` with our clock, so clock skew between nodes does
//!    not matter).
//! 2. **Leader**: renew every `retry_period`. Every write is a `replace` (PUT)
//!    carrying the `resourceVersion` that was read, so of two candidates
//!    racing for an expired lease exactly one wins; the other gets 409.
//! 3. If no renewal succeeds within `renew_deadline` of the last successful
//!    one, leadership is lost: the gate closes *before* anything else happens
//!    (and [`LeaderGate::is_leader`] also checks the deadline on its own, so
//!    a starved election task cannot keep the gate open). Since
//!    `renew_deadline < lease_duration`, the old leader stops writing at least
//!    `lease_duration - renew_deadline` before anyone else may take over.
//! 4. **Shutdown**: close the gate, then release the Lease (holder cleared,
//!    `leaseDurationSeconds: 1`), so a follower takes over at its next retry
//!    instead of waiting for the lease to expire.
//!
//! Why hand-written: `kube-leader-election` 0.44 targets kube 4 and
//! `kube-coordinate` kube 2; `kube-lease-manager` 0.13 supports kube 5 but
//! (a) keeps reporting "leader" while renewals fail (an API error only backs
//! off; the watch channel is not told until a later successful read), so a
//! partitioned leader would keep writing after its lease expired, (b) has no
//! renew deadline distinct from the lease duration, and (c) relies on
//! strategic-merge and server-side-apply field ownership instead of
//! resourceVersion preconditions. The state machine below is ~200 lines and
//! fully unit-tested against an in-memory lease store.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), rekon::lease::Error> {
//! use rekon::lease::{LeaderElectionConfig, LeaderElector};
//!
//! let config = LeaderElectionConfig::new("rekon", "rekon-system");
//! let elector = LeaderElector::new(client, config)?;
//! let gate = elector.gate();
//! tokio::spawn(elector.run(std::future::pending()));
//! // In the writer: refuse to write unless leading.
//! gate.check()?;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//! - [`config`]: [`LeaderElectionConfig`], [`OnLost`], errors, the identity.
//! - [`gate`]: [`LeaderGate`], the "may I write?" switch the controller and
//!   the writer check before every write.
//! - [`store`]: where the Lease is read and written ([`KubeLeaseStore`]).
//! - [`elector`]: [`LeaderElector`], client-go's state machine.
//! - [`reports`]: per-replica reports (what each replica serves of the
//!   Plugin objects) in one shared Lease, read by the status writer.
//! - [`shard`]: sharding across replicas (shard and membership Leases, key
//!   → shard, assignment) and the [`shard::Shards`] handle.
//!
//! # Floor
//! Stands on [`crate::telemetry`] only; the writer, the controller and the
//! app stand on it.

pub mod config;
pub mod elector;
pub mod gate;
pub mod reports;
pub mod shard;
pub mod store;

pub use config::{Error, LeaderElectionConfig, OnLost, Result, RunEnd, default_identity};
pub use elector::LeaderElector;
pub use gate::LeaderGate;
pub use store::{KubeLeaseStore, LeaseStore};
