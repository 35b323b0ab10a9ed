//! What a cache tells its subscribers: one object changed.

use std::sync::Arc;

use super::resource::ResourceId;
use super::store::CachedObject;

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Created or modified (or present at subscription time).
    Applied,
    /// Deleted; the object is its last known state.
    Deleted,
}

/// One change of one cache, as delivered to subscribers.
#[derive(Debug)]
pub struct CacheEvent {
    /// The cluster.
    pub cluster: Arc<str>,
    /// The resource.
    pub resource: Arc<ResourceId>,
    /// What happened.
    pub change: Change,
    /// The object (last state for deletions).
    pub object: Arc<CachedObject>,
    /// For a change of a cached object, its state before (like
    /// controller-runtime's `UpdateEvent.ObjectOld`): mappings map both, so
    /// an object that stopped naming a primary (a label removed) still
    /// wakes it once.
    pub old: Option<Arc<CachedObject>>,
}
