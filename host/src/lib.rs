//! rekon host library: the engine behind the `rekon` binary.
//!
//! # Floors
//!
//! The crate is built in floors; a module only imports modules on floors
//! below its own (checked by `host/tests/layout.rs`). From the bottom:
//!
//! | floor | modules | what |
//! |---|---|---|
//! | 1 | [`telemetry`], [`action`], [`queue`], [`files`] | metrics, Events and the HTTP server; the decision vocabulary; the work queue and backoff; files written whole |
//! | 2 | [`cluster`], [`lease`] | the cluster registry; leader election and shards |
//! | 3 | [`cache`] | shared watches and stores |
//! | 4 | [`plugin`], [`writer`] | the wasm runtime; performing actions (they meet only in [`action`]) |
//! | 5 | [`controller`], [`source`], [`admission`] | per-plugin controllers and their manager; where plugins come from (Plugin objects, OCI); the webhook server answering plugins' admission |
//! | 6 | [`change`] | safe change: record, replay, shadow, promote |
//! | 7 | [`app`], [`explore`] | `rekon run`: the wiring, probes, reporting; `rekon plugin explore`: faults, oracles, reproducers |
//! | 8 | [`commands`] | one-shot jobs: plan, release, inspect, crds, rbac, scaffold |
//!
//! The binary stands on top (floor 9): `main.rs` parses the command line
//! with the clap types of its `cli/` folder and hands each command to its
//! glue there, which calls into these.

pub mod action;
pub mod admission;
pub mod app;
pub mod cache;
pub mod change;
pub mod cluster;
pub mod commands;
pub mod controller;
pub mod explore;
pub mod files;
pub mod lease;
pub mod plugin;
pub mod queue;
pub mod source;
pub mod telemetry;
pub mod writer;
