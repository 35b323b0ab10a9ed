//! Plugin components in OCI registries, published as a [CNCF wasm OCI
//! artifact] (one `application/wasm` layer): [`Fetcher::fetch`] brings one
//! back verified by digest through a disk cache, [`Fetcher::push`]
//! publishes one, [`RegistryAuth`] reads a pull Secret, and a
//! [`FetchError`]'s [`FetchError::reason`] is what a Plugin's condition
//! carries.
//!
//! [CNCF wasm OCI artifact]: https://tag-runtime.cncf.io/wgs/wasm/deliverables/wasm-oci-artifact/

// Built on `oci-client` (the registry protocol, auth, manifests, blob
// streams), not on `oci-wasm`, the Bytecode Alliance's thin wrapper for
// this layout: its pull goes through `oci_client::Client::pull`, which
// reads every layer whole into memory, so the size limit while reading
// could not be kept, and its releases track an older `oci-client` (0.4:
// ^0.16) than the one here. What it would add is the config record,
// written in `push.rs` in a few lines.

mod auth;
mod cache;
mod error;
mod fetch;
mod push;
mod reference;

pub use auth::{AuthError, RegistryAuth};
pub use cache::VerificationRecord;
pub(crate) use error::classify;
pub use error::{FetchError, PushError};
pub use fetch::{Fetched, Fetcher, OciConfig, PullPolicy};
pub use reference::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
