//! rekon host library.

pub mod app;
pub mod cache;
pub mod cluster;
pub mod controller;
pub mod ops;
pub mod plan;
pub mod plugin;
pub mod plugin_crds;
pub mod record;
pub mod release;
pub mod replay;
pub mod scaffold;
pub mod shadow;
pub mod writer;
