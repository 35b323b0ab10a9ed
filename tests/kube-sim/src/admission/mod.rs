//! Admission: what the API server checks after a write is decoded,
//! mutated and defaulted and before it is stored. A CRD's
//! `x-kubernetes-validations` rules ([`crd_rules`], run by the custom
//! resource strategy with the schema checks) and ValidatingAdmissionPolicies
//! with their bindings ([`policy`]), all CEL evaluated by the `cel` crate
//! with kube-cel's Kubernetes libraries (`expr`); and the mutating and
//! validating admission webhooks ([`webhook`]), called outside the store's
//! lock.

pub mod crd_rules;
pub(crate) mod expr;
pub mod policy;
pub mod webhook;

pub use policy::AuditRecord;
