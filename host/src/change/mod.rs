//! Safe change of reconcile logic: [`record`] real reconciles as case files,
//! [`replay`] them against a new build, [`shadow`] a candidate beside the
//! serving version (a controller [`Layer`] the app sets), [`promote`] it.
//!
//! [`Layer`]: crate::controller::Layer

pub mod promote;
pub mod record;
pub mod replay;
pub mod shadow;
