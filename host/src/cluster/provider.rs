//! Dynamic clusters: providers that engage and disengage clusters at runtime
//! (controller-runtime's multi-cluster `Provider` → Engage/Disengage).
//!
//! - [`DirProvider`]: a watched directory of kubeconfig files, one cluster
//!   per file (a Secret mounted as a volume works too).
//! - [`SecretProvider`]: labelled Secrets in a namespace of the primary
//!   cluster, one kubeconfig per Secret under the key `kubeconfig` (as
//!   multicluster-runtime's kubeconfig provider does).
//!
//! Both are level-based: each change (a file event, a Secret event, or a
//! periodic resync) rescans the full desired set and [`Engager::sync`]
//! applies the difference through a [`ClusterSink`] (implemented by
//! [`ClusterRegistry`]): new names are engaged, vanished ones disengaged,
//! changed kubeconfigs disengaged and re-engaged. A kubeconfig that cannot be
//! loaded is reported once and the previously engaged version (if any) keeps
//! running, as with plugins.

mod dir;
mod engager;
mod secret;

pub use dir::{DirProvider, NameFrom};
pub use engager::{Candidate, ClusterSink, Engager, ProviderError, fingerprint};
pub use secret::SecretProvider;
