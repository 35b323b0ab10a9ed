//! Signed plugin modules, verified before anything is compiled: keys
//! ([`key`]), cosign's signed payload ([`payload`]), the policy and its
//! decision ([`policy`]), signatures in the registry in cosign's tag
//! format ([`store`]: [`store::sign`], [`store::verify`]), and signatures
//! of plugin files in cosign's blob format ([`blob`]).
//!
//! Written here: the payload and the signature manifest (a few JSON
//! documents, over the OCI client the fetcher uses) and the policy. Keys
//! and crypto are rcgen's and ring's (see [`key`]). The `sigstore` crate
//! (0.14) was evaluated and not used: it is still labelled experimental,
//! pins an older `oci-client` than the host's (two registry clients in one
//! binary), and brings the keyless stack (TUF, Fulcio, Rekor clients) that
//! key-based verification does not need.

pub mod blob;
pub mod key;
pub mod payload;
pub mod policy;
pub mod store;

pub use blob::verify_blob;
pub use key::{KeyAlgorithm, KeyError, PublicKey, SigningKey};
pub use policy::{Policy, SignatureEntry, Trust, Verified, VerifyError};
pub use store::{SignError, Signed, sign, signature_tag, verify};
