//! One-shot jobs that borrow the engine, each behind a `rekon` subcommand.
//!
//! # Layout
//! - [`plan`]: `rekon plugin plan`, a dry run against live clusters.
//! - [`release`]: `rekon plugin release`, a removed plugin's finalizers.
//! - [`inspect`]: `rekon plugin inspect`, Kubernetes-style views of a
//!   plugin's registration.
//! - [`compile`]: `rekon plugin compile`, the compiled-plugin cache filled
//!   ahead of `rekon run`.
//! - [`push`]: `rekon plugin push`, and fetching a reference for
//!   `rekon plugin inspect`.
//! - [`sign`]: `rekon plugin keygen`, `sign`, `verify` and `push --sign`:
//!   cosign-compatible signatures of modules in registries.
//! - [`manifests`]: `rekon rbac` and `rekon crds`.
//! - [`plugin_manifest`]: `rekon plugin manifest`, a Plugin object to review.
//! - [`scaffold`]: `rekon plugin new`.
//!
//! # Floor
//! The top floor of the library: may import anything below; only
//! `main.rs` imports it.

pub mod compile;
pub mod explore;
pub mod inspect;
pub mod manifests;
pub mod plan;
pub mod plugin_manifest;
pub mod push;
pub mod release;
pub mod scaffold;
pub mod sign;
