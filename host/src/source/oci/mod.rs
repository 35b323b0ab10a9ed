//! Plugin components in OCI registries.
//!
//! A plugin is published as a [CNCF wasm OCI artifact]: an OCI image
//! manifest whose config has media type [`WASM_CONFIG_MEDIA_TYPE`] and
//! whose one layer, media type [`WASM_LAYER_MEDIA_TYPE`], is the component.
//! [`Fetcher::push`] publishes a component in that layout;
//! [`Fetcher::fetch`] brings one back:
//!
//! 1. The reference is parsed (`registry/repository:tag` or `@sha256:…`).
//!    With [`PullPolicy::IfNotPresent`] and a digest (in the reference or
//!    expected by the caller) whose manifest and module are in the disk
//!    cache, nothing is fetched: a restart neither pulls nor (the runtime
//!    caches compiled code by the component's sha256) recompiles.
//! 2. The manifest is fetched and hashed; a digest the caller expects that
//!    differs from the one the registry served is refused, naming both.
//! 3. The manifest must be a wasm artifact (config and layer media types),
//!    and its layer no larger than [`OciConfig::max_module_bytes`].
//! 4. The layer is downloaded (the limit enforced while reading, whatever
//!    the manifest claimed) and its sha256 compared with the layer digest
//!    before anything else sees the bytes. A layer already in the cache is
//!    not downloaded again.
//! 5. Manifest and module are written to the cache atomically (temporary
//!    file, then rename); entries are content-addressed and verified again
//!    when read, so a damaged cache file is refetched, never loaded.
//!
//! A registry on a loopback address (`127.0.0.0/8`, `::1`, `localhost`) is
//! spoken to over plain HTTP, as Docker and containerd do; any other over
//! TLS (rustls with ring, the system's roots) unless named in
//! [`OciConfig::insecure_registries`]. Every attempt is bounded by
//! [`OciConfig::timeout`]; an unreachable registry is retried with
//! exponential backoff ([`OciConfig::retries`]); every other failure is
//! final and named by a [`FetchError`] whose [`FetchError::reason`] a
//! Plugin's status condition can carry. With [`Fetcher::with_metrics`] each
//! fetch is counted by outcome (`rekon_plugin_fetch_total`) and timed.
//!
//! Credentials: [`RegistryAuth`], read from a `kubernetes.io/dockerconfigjson`
//! Secret's `.dockerconfigjson` with [`RegistryAuth::from_docker_config_json`]
//! (anonymous when the Secret has no entry for the registry).
//!
//! ```no_run
//! # async fn f() -> Result<(), rekon::source::oci::FetchError> {
//! use rekon::source::oci::{Fetcher, OciConfig, PullPolicy, RegistryAuth};
//!
//! let fetcher = Fetcher::new(OciConfig {
//!     cache_dir: Some("/var/cache/rekon".into()),
//!     ..OciConfig::default()
//! });
//! let fetched = fetcher
//!     .fetch("ghcr.io/acme/nodepool:1.2.0", None, PullPolicy::IfNotPresent, &RegistryAuth::Anonymous)
//!     .await?;
//! println!("{} is {}", fetched.reference, fetched.manifest_digest);
//! # Ok(()) }
//! ```
//!
//! Built on `oci-client` (the registry protocol, auth, manifests, blob
//! streams). Not on `oci-wasm`, the Bytecode Alliance's thin wrapper for
//! this layout: its pull goes through `oci_client::Client::pull`, which
//! reads every layer whole into memory, so the size limit while reading
//! (step 4) could not be kept, and its releases track an older
//! `oci-client` (0.4: ^0.16) than the one here. What it would add is the
//! config record, written below in a few lines.
//!
//! # Layout
//! `reference.rs` (references, digests, the wasm layer of a manifest),
//! `auth.rs` ([`RegistryAuth`]), `error.rs` ([`FetchError`], [`PushError`],
//! the registry client's errors sorted into them), `cache.rs` (the disk
//! cache), `fetch.rs` ([`Fetcher`], [`Fetcher::fetch`]), `push.rs`
//! ([`Fetcher::push`]).
//!
//! [CNCF wasm OCI artifact]: https://tag-runtime.cncf.io/wgs/wasm/deliverables/wasm-oci-artifact/

mod auth;
mod cache;
mod error;
mod fetch;
mod push;
mod reference;

pub use auth::{AuthError, RegistryAuth};
pub(crate) use error::classify;
pub use error::{FetchError, PushError};
pub use fetch::{Fetched, Fetcher, OciConfig, PullPolicy};
pub use reference::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
