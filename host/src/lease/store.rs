//! Where an elector reads and writes its Lease.

use std::future::Future;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};

/// Storage of the one Lease an elector uses: the Kubernetes API
/// ([`KubeLeaseStore`]) in production, memory in unit tests.
pub trait LeaseStore: Send + Sync + 'static {
    /// Read the lease; `None` when it does not exist.
    fn get(&self) -> impl Future<Output = Result<Option<Lease>, kube::Error>> + Send;
    /// Create the lease; fails with 409 when it exists.
    fn create(&self, lease: &Lease) -> impl Future<Output = Result<Lease, kube::Error>> + Send;
    /// Replace (PUT) the lease; fails with 409 when `metadata.resourceVersion` is stale.
    fn replace(&self, lease: &Lease) -> impl Future<Output = Result<Lease, kube::Error>> + Send;
}

/// [`LeaseStore`] backed by the API server.
#[derive(Clone, Debug)]
pub struct KubeLeaseStore {
    pub(super) api: Api<Lease>,
    pub(super) name: String,
}

impl LeaseStore for KubeLeaseStore {
    async fn get(&self) -> Result<Option<Lease>, kube::Error> {
        self.api.get_opt(&self.name).await
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        self.api.create(&PostParams::default(), lease).await
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
    }
}
