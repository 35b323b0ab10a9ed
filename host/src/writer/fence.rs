//! The write gate: every write is fenced by a Lease (the leader's, or its
//! shard's) and checked by the plugin's capability gate before it is sent.

use std::sync::Arc;

use crate::action::Action;
use crate::lease::LeaderGate;

tokio::task_local! {
    /// The write fence of the reconcile running in this task (its shard's
    /// Lease when sharding, see `crate::lease::shard`); the writer's leader gate when
    /// unset. A task-local rather than a parameter so every write of a
    /// reconcile — actions, finalizer patches, retries — is fenced by the
    /// same Lease without threading it through each call.
    pub static FENCE: LeaderGate;
}

/// A plugin's capability check, as the writer's last gate: `Err(reason)`
/// refuses the action.
pub type Gate = Arc<dyn Fn(&Action) -> Result<(), String> + Send + Sync>;
