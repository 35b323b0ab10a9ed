//! The writer: performs a plugin's actions against the right cluster
//! ([`Writer`]): objects ([`objects`]) and Events ([`events`]), every request
//! bounded, retried where that is safe, fenced by the leader or shard lease
//! ([`fence`]), and its answer handed to the caches (read-your-writes).
//! It never imports the plugin runtime: the capability check is a closure,
//! a [`Gate`], the controller sets per plugin.

pub mod config;
pub mod events;
pub mod fence;
pub mod objects;
pub mod perform;
pub mod requests;

pub use config::{Error, Failed, WriterConfig, describe_kube_error};
pub use fence::{FENCE, Gate};
pub use requests::{Writer, resource_id};
