//! Labelled Secrets of the primary cluster, one kubeconfig each.

use std::future::Future;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tracing::{debug, info, warn};

use super::engager::{Candidate, ClusterSink, Engager, ProviderError, fingerprint};

/// Engages one cluster per Secret carrying a label (default
/// `rekon.dev/kubeconfig=true`) in a namespace of the primary cluster.
///
/// The kubeconfig is the Secret's `kubeconfig` key; the cluster name is the
/// annotation `rekon.dev/cluster-name` when present, else the Secret's name.
/// Deleting the Secret (or removing its label) disengages the cluster;
/// changing its kubeconfig re-engages it.
///
/// ```no_run
/// # async fn demo(registry: rekon::cluster::ClusterRegistry, client: kube::Client) -> Result<(), rekon::cluster::provider::ProviderError> {
/// use rekon::cluster::provider::SecretProvider;
/// SecretProvider::new(client, "rekon-system").run(registry, std::future::pending()).await
/// # }
/// ```
#[derive(Clone)]
pub struct SecretProvider {
    client: kube::Client,
    namespace: String,
    selector: String,
    key: String,
    name_annotation: String,
}

impl std::fmt::Debug for SecretProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretProvider")
            .field("namespace", &self.namespace)
            .field("selector", &self.selector)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl SecretProvider {
    /// The default label selector.
    pub const DEFAULT_SELECTOR: &'static str = "rekon.dev/kubeconfig=true";
    /// The default data key.
    pub const DEFAULT_KEY: &'static str = "kubeconfig";
    /// The annotation that overrides the cluster name.
    pub const NAME_ANNOTATION: &'static str = "rekon.dev/cluster-name";

    /// Secrets in `namespace`, read through `client` (the primary cluster's).
    #[must_use]
    pub fn new(client: kube::Client, namespace: impl Into<String>) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            selector: Self::DEFAULT_SELECTOR.into(),
            key: Self::DEFAULT_KEY.into(),
            name_annotation: Self::NAME_ANNOTATION.into(),
        }
    }

    /// The label selector of the Secrets.
    #[must_use]
    pub fn selector(mut self, selector: impl Into<String>) -> Self {
        self.selector = selector.into();
        self
    }

    /// The data key holding the kubeconfig.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    fn candidate(&self, secret: &Secret) -> Option<Candidate> {
        let secret_name = secret.metadata.name.clone()?;
        let origin = format!("secret {}/{secret_name}", self.namespace);
        let name = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&self.name_annotation))
            .filter(|n| !n.is_empty())
            .cloned()
            .unwrap_or(secret_name);
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&self.key))
            .map(|b| b.0.clone())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(&self.key))
                    .map(|s| s.clone().into_bytes())
            });
        Some(match bytes {
            Some(bytes) => Candidate::from_bytes(name, origin, &bytes),
            None => Candidate {
                fingerprint: fingerprint(
                    secret
                        .metadata
                        .resource_version
                        .as_deref()
                        .unwrap_or("")
                        .as_bytes(),
                ),
                kubeconfig: Err(format!("the secret has no key {:?}", self.key)),
                name,
                origin,
            },
        })
    }

    /// Follow the Secrets and engage their clusters into `sink` until
    /// `shutdown` resolves. Watch errors are retried with backoff (the
    /// engaged set is kept meanwhile).
    ///
    /// # Errors
    /// Never at present; the `Result` leaves room for setup failures.
    pub async fn run<S: ClusterSink>(
        self,
        sink: S,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ProviderError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let (reader, writer) = reflector::store();
        let stream = reflector(
            writer,
            watcher(api, watcher::Config::default().labels(&self.selector)),
        )
        .default_backoff();
        tokio::pin!(stream);
        tokio::pin!(shutdown);
        info!(namespace = %self.namespace, selector = %self.selector, "watching kubeconfig secrets");
        let mut engager = Engager::new(sink, "secret");
        let mut synced = false;
        loop {
            let event = tokio::select! {
                () = &mut shutdown => break,
                event = stream.next() => event,
            };
            match event {
                None => break,
                Some(Err(e)) => {
                    warn!(namespace = %self.namespace, error = %e, "kubeconfig secret watch failed; retrying");
                    continue;
                }
                Some(Ok(watcher::Event::InitDone)) => synced = true,
                Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => continue,
                Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) => {}
            }
            if synced {
                let candidates = reader
                    .state()
                    .iter()
                    .filter_map(|s| self.candidate(s))
                    .collect();
                engager.sync(candidates).await;
            }
        }
        debug!(namespace = %self.namespace, "kubeconfig secret provider stopped");
        Ok(())
    }
}
