//! Safe change of reconcile logic: record real reconciles, replay them
//! against a new build, shadow a candidate beside the serving version,
//! promote it.
//!
//! # Layout
//! - [`record`]: the case file format ([`record::Case`]), the
//!   [`record::Tape`] that records a call's host reads, the
//!   [`record::Recorder`] writing cases on its own thread.
//! - [`replay`]: `rekon plugin replay`: [`replay::CaseReads`] (reads served
//!   from a recording), verdicts and diffs.
//! - [`shadow`]: the [`shadow::Tap`], the controller [`Layer`] that records
//!   and shadows every reconcile, and the shadow worker.
//! - [`promote`]: `rekon plugin promote`.
//!
//! # Floor
//! Stands on the controller (its [`Reconciler`] and [`Layer`] traits) and
//! the plugin runtime; the app wires it in, nothing below imports it.
//!
//! [`Layer`]: crate::controller::Layer
//! [`Reconciler`]: crate::controller::Reconciler

pub mod promote;
pub mod record;
pub mod replay;
pub mod shadow;
