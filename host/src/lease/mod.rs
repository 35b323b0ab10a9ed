//! Leases in the primary cluster (`coordination.k8s.io/v1`): leader
//! election ([`elector`], client-go's state machine, behind the
//! [`LeaderGate`] the controller and the writer check before every write),
//! sharding across replicas ([`shard`]), and per-replica reports of what
//! each serves ([`reports`]).
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
