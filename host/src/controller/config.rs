//! Controller settings and queue figures.

use std::time::Duration;

/// Controller settings.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Concurrent reconciles per plugin when its registration says none.
    pub max_concurrent_reconciles: usize,
    /// How long a controller waits for its caches to list before it starts
    /// reconciling anyway (unreachable clusters are not waited for).
    pub sync_timeout: Duration,
    /// Requeue every primary this often even if nothing changed, so drift
    /// that no watch reported (an object created and deleted while a watch
    /// was down) is repaired (controller-runtime's `SyncPeriod`). `None`: never.
    pub resync_period: Option<Duration>,
    /// Sharding across replicas: reconcile only the keys of the shards this
    /// replica holds, each write fenced by its shard's Lease. `None`: every key.
    pub shards: Option<crate::lease::shard::Shards>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            max_concurrent_reconciles: 4,
            sync_timeout: Duration::from_secs(30),
            resync_period: Some(Duration::from_secs(600)),
            shards: None,
        }
    }
}

/// Queue figures of one controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueStats {
    /// Ready keys.
    pub ready: usize,
    /// Running reconciles.
    pub running: usize,
    /// Keys waiting on a timer.
    pub delayed: usize,
}
