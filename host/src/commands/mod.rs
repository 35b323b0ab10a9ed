//! One-shot jobs that borrow the engine, each behind a `rekon` subcommand:
//! [`admit`] (`rekon plugin admit`), [`plan`], [`release`], [`inspect`], [`compile`], [`explore`], [`push`],
//! [`sign`] (`keygen`, `sign`, `verify`), [`manifests`] (`rekon rbac`,
//! `rekon crds`), [`webhooks`] (`rekon webhooks`), [`policies`] (`rekon policies`), [`plugin_manifest`] and [`scaffold`] (`rekon plugin new`).

pub mod admit;
pub mod compile;
pub mod explore;
pub mod inspect;
pub mod manifests;
pub mod plan;
pub mod plugin_manifest;
pub mod policies;
pub mod push;
pub mod release;
pub mod scaffold;
pub mod sign;
pub mod webhooks;
