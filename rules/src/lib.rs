//! The rules that rekon's host and the guest SDK must apply identically.
//!
//! A plugin that passes its native tests (the SDK's test kit) must behave the
//! same in a cluster, so wherever the host and the test kit decide the same
//! question they call the same function here rather than keeping two copies
//! that drift apart.
//!
//! # Layout
//! | module | rule |
//! |---|---|
//! | [`admission`] | what makes a plugin's admission rules valid; its webhooks' names and paths |
//! | `cel` (feature `cel`) | which CEL a plugin ships compiles: its CRDs' `x-kubernetes-validations` rules and its policies' expressions (kube-cel) |
//! | [`conversion`] | what makes a plugin's conversion declaration valid; what a converted object keeps; its webhook path |
//! | [`selector`] | Kubernetes label selector strings: parsing and matching |
//! | [`cases`] | which files of a directory are recorded cases |
//! | [`mapping`] | what makes a declarative mapping valid |
//! | [`policies`] | what makes a plugin's CEL admission policies valid; the names of their objects |
//! | [`registration`] | what makes a plugin's registration valid (names, versions, verbs, resources, selectors, cluster sets, mappings, finalizer, CRDs) |
//! | [`settings`] | how a plugin refuses its settings; the finalizer of an instance of a module |
//! | [`validation`] | Kubernetes' validation of label keys and values (qualified names), worded as the API server words it |
//! | [`scope`] | which objects are a plugin's primaries, and the finalizer protocol around them |

pub mod admission;
pub mod cases;
#[cfg(feature = "cel")]
pub mod cel;
pub mod conversion;
pub mod mapping;
pub mod policies;
pub mod registration;
pub mod scope;
pub mod selector;
pub mod settings;
pub mod validation;

pub use registration::Verb;
pub use scope::{Phase, PrimaryState, Step, step};
pub use selector::{LabelSelector, ParseError, Requirement};
