//! `use rekon_sdk::prelude::*;` brings what almost every plugin uses.

pub use crate::action::{Action, EventType, ObjectRef, Outcome, Propagation};
pub use crate::admission::{
    Admission, AdmissionRequest, AdmissionRule, FailurePolicy, Mutation, Operation, Verdict,
};
pub use crate::context::{ClusterHealth, ClusterInfo, Context, LogLevel, Phase, Request};
pub use crate::conversion::{Conversion, ConversionRequest, Convert, Converted};
pub use crate::error::{Error, ReadError};
pub use crate::plugin::{Event, Plugin};
pub use crate::policies::{Policies, Policy, PolicyReason, Validation};
pub use crate::registration::{ClusterSet, Mapping, OwnerLabels, Registration, Verb};
pub use crate::resource::{Kind, ResourceType, Scope};
pub use crate::settings::Settings;
/// Derives a type's schema with the CRD rules (`x-kubernetes-validations`)
/// its `#[x_kube(validation = Rule::new("…"))]` attributes declare.
pub use kube::KubeSchema;
pub use kube::{CustomResourceExt as _, Resource as _, ResourceExt as _};
