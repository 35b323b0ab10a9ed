//! Where plugins come from, other than the plugin directory.
//!
//! # Layout
//! - [`oci`]: plugin components in OCI registries (the CNCF wasm artifact
//!   layout): fetch with digest verification, a disk cache by digest, size
//!   limit, timeouts and retries; push; pull Secrets.
//!
//! # Floor
//! Floor 5, beside `controller/`: may import `plugin`, `cluster`,
//! `telemetry`, `action`, `cache` and `lease`; never `controller`, `change`,
//! `app` or `commands`.

pub mod oci;
