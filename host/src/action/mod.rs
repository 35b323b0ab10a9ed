//! The decision vocabulary: what a plugin declares and what it may ask the
//! host to do, as plain host types.
//!
//! These are the records and variants of the WIT contract's `types`
//! interface (`wit/types.wit`), written as host types so that everything
//! above can speak them without the WebAssembly runtime: the plugin runtime
//! (`crate::plugin`) translates the generated WIT values into them and back,
//! the capability check and the writer (`crate::writer`) consume them, and
//! the two never import each other.
//!
//! # Layout
//! - [`resource`]: resource types, scopes, cluster sets and the engaged
//!   clusters' health; `Node`/`Job.batch` descriptions.
//! - [`registration`]: what a plugin declares: its primary, watches with
//!   their mappings, permissions, finalizer; the request it is asked about.
//! - [`actions`]: what a plugin decides: apply, patch, delete, create, Event;
//!   the outcome of a reconcile; which cluster an action targets, its kind,
//!   the field manager it writes with.
//! - [`permission`]: which verb on which resource an action needs, and
//!   whether a registration's permissions cover it.
//!
//! # Floor
//! Imports nothing of the crate (only `rekon-rules`). Imported by the plugin
//! runtime, the writer, the controller and everything above them.

pub mod actions;
pub mod permission;
pub mod registration;
pub mod resource;

pub use actions::{
    Action, ApplyAction, CreateAction, DeleteAction, EventAction, EventType, ObjectRef, Outcome,
    PatchAction, PatchType, Propagation, action_cluster, action_kind, action_label, field_manager,
};
pub use permission::{Required, Verb, permits, required_permission, why_not};
pub use registration::{
    Mapping, OwnerLabels, Permission, Phase, Registration, Request, Timestamp, Watch, timestamp,
};
pub use resource::{
    ClusterHealth, ClusterInfo, ClusterSet, Resource, Scope, describe_resource, resource_of_object,
};
