//! The writer: performs a plugin's actions against the right cluster.
//!
//! - `apply`: server-side apply with field manager `rekon.<plugin>` (force as
//!   requested), on the object or its `/status`;
//! - `patch`: JSON merge patch (a resourceVersion precondition is written
//!   into `metadata.resourceVersion` of the patch) or JSON patch (the
//!   precondition becomes a leading `test` operation), on the object or `/status`;
//! - `delete`: an absent object is success; propagation policy and UID
//!   precondition (a UID mismatch means the object we meant is gone: success);
//! - `create`: create-if-absent (409 AlreadyExists is success);
//! - `event`: an events.k8s.io/v1 Event through kube-runtime's
//!   [`Recorder`], reporting controller `rekon.<plugin>`.
//!
//! Actions are grouped by cluster: each cluster's actions run in order and
//! stop at the first failure, clusters run concurrently. So a stalled or
//! failing cluster does not keep the others from converging; the reconcile
//! still fails (and is requeued with backoff) until every cluster succeeded.
//! Actions are idempotent, so a replay of the ones that did succeed is harmless.
//!
//! Every request is bounded by a timeout. 429 and 5xx answers are retried a
//! few times inside the writer, honouring `retryAfterSeconds`; a 409 Conflict
//! is retried only for actions without a precondition (a precondition that
//! failed means the plugin decided on stale state: the reconcile is re-run).
//!
//! A cluster known to be unreachable is not written to at all (the action
//! fails at once, retryable), and a request in flight when its cluster goes
//! unreachable gives up at once: a stalled cluster never holds the workers
//! that other clusters' keys need. Events are best-effort: a failed Event is
//! logged and counted, and the outcome goes on. Every successful response is
//! handed to the caches ([`CacheManager::observe_write`]) so the next
//! reconcile reads what this one wrote.

//! # Layout
//! - [`config`]: [`WriterConfig`] and the errors ([`Error`], [`Failed`]).
//! - [`fence`]: the write gate: [`FENCE`] (the Lease fencing this task's
//!   writes) and the plugin's capability [`Gate`].
//! - [`requests`]: the [`Writer`] and how one request is sent (target,
//!   timeout, retries, fencing of every attempt, cluster health).
//! - [`objects`]: apply, patch, delete, create.
//! - [`events`]: the Events a plugin asks for.
//! - [`perform`]: [`Writer::execute`] and [`Writer::perform`].
//!
//! Imports inside the folder point one way, in the order above.
//!
//! # Floor
//! Stands on the action vocabulary, caches, clusters, leases and
//! telemetry; never on the plugin runtime (the capability gate is a
//! closure the controller sets). The controller stands on it.

pub mod config;
pub mod events;
pub mod fence;
pub mod objects;
pub mod perform;
pub mod requests;

pub use config::{Error, Failed, WriterConfig, describe_kube_error};
pub use fence::{FENCE, Gate};
pub use requests::{Writer, resource_id};
