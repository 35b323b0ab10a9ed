//! Admission: what the API server checks after a write is decoded,
//! mutated and defaulted and before it is stored. A CRD's
//! `x-kubernetes-validations` rules ([`crd_rules`], run by the custom
//! resource strategy with the schema checks) and ValidatingAdmissionPolicies
//! with their bindings ([`policy`]), all CEL evaluated by the `cel` crate
//! with kube-cel's Kubernetes libraries (`expr`); and the mutating and
//! validating admission webhooks ([`webhook`]), called outside the store's
//! lock.

// Shared with the SDK's test kit (`rekon_rules::cel`): one evaluation of
// CRD rules, one CEL environment.
pub use rekon_rules::cel::crd_rules;
pub(crate) use rekon_rules::cel::expr;
pub mod policy;
pub mod webhook;

pub use policy::AuditRecord;
