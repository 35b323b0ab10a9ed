//! The decision vocabulary: the WIT contract's records (`wit/types.wit`) as
//! plain host types — what a plugin declares ([`registration`], [`resource`]),
//! what it decides ([`actions`]) and which verb each action needs
//! ([`permission`]) — so that the plugin runtime, which translates the
//! generated WIT values into them, and the writer, which performs them, never
//! import each other.

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
