//! The level-based engine both providers share: a desired set of
//! kubeconfigs in, engage/disengage calls on a [`ClusterSink`] out.

use std::collections::BTreeMap;

use kube::config::{KubeConfigOptions, Kubeconfig};
use sha2::{Digest, Sha256};
use tracing::{error, info, warn};

use crate::cluster::ClusterRegistry;

/// Errors of the cluster providers.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The sink refused to engage the cluster (e.g. the name is taken by a
    /// statically configured cluster).
    #[error("failed to engage cluster {cluster} from {origin}")]
    Engage {
        /// Cluster name.
        cluster: String,
        /// File or Secret it came from.
        origin: String,
        /// Cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The sink refused to disengage the cluster.
    #[error("failed to disengage cluster {cluster}")]
    Disengage {
        /// Cluster name.
        cluster: String,
        /// Cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The cluster directory cannot be watched or read.
    #[error("failed to watch cluster directory {path}")]
    WatchDir {
        /// The directory.
        path: String,
        /// Cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Where engaged clusters go: the engine's [`ClusterRegistry`], or a test double.
pub trait ClusterSink: Send + Sync + 'static {
    /// Engage cluster `name` with `config`.
    ///
    /// # Errors
    /// When the client cannot be built or the name is taken.
    fn engage(&self, name: &str, config: kube::Config) -> Result<(), ProviderError>;

    /// Disengage cluster `name` (engaged before by this provider).
    ///
    /// # Errors
    /// When the sink refuses (e.g. it is the primary cluster).
    fn disengage(&self, name: &str) -> Result<(), ProviderError>;
}

impl ClusterSink for ClusterRegistry {
    fn engage(&self, name: &str, config: kube::Config) -> Result<(), ProviderError> {
        let engage_err = |source: Box<dyn std::error::Error + Send + Sync>| ProviderError::Engage {
            cluster: name.to_owned(),
            origin: "provider".to_owned(),
            source,
        };
        let mut config = config;
        crate::cluster::set_user_agent(&mut config, &self.user_agent());
        let client = kube::Client::try_from(config).map_err(|e| engage_err(Box::new(e)))?;
        self.add(name, client).map_err(|e| engage_err(Box::new(e)))
    }

    fn disengage(&self, name: &str) -> Result<(), ProviderError> {
        self.remove(name)
            .map(|_| ())
            .map_err(|e| ProviderError::Disengage {
                cluster: name.to_owned(),
                source: Box::new(e),
            })
    }
}

/// One cluster a provider wants engaged.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Cluster name.
    pub name: String,
    /// Human-readable origin (file path, `namespace/secret`).
    pub origin: String,
    /// The kubeconfig, or why it could not be read.
    pub kubeconfig: Result<Kubeconfig, String>,
    /// Digest of the kubeconfig's bytes: a change re-engages the cluster.
    pub fingerprint: String,
}

impl Candidate {
    /// A candidate from raw kubeconfig bytes.
    #[must_use]
    pub fn from_bytes(name: String, origin: String, bytes: &[u8]) -> Self {
        let kubeconfig = std::str::from_utf8(bytes)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(|text| Kubeconfig::from_yaml(text).map_err(|e| e.to_string()));
        Self {
            name,
            origin,
            kubeconfig,
            fingerprint: fingerprint(bytes),
        }
    }
}

/// sha256 hex of `bytes`.
#[must_use]
pub fn fingerprint(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Applies a provider's desired set of clusters to a [`ClusterSink`].
pub struct Engager<S> {
    sink: S,
    provider: &'static str,
    /// Engaged by us: name -> fingerprint.
    engaged: BTreeMap<String, String>,
    /// Refused: name -> fingerprint (reported once per content).
    refused: BTreeMap<String, String>,
}

impl<S> std::fmt::Debug for Engager<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engager")
            .field("provider", &self.provider)
            .field("engaged", &self.engaged.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<S: ClusterSink> Engager<S> {
    /// An engager named after its provider (`dir`, `secret`) for logs.
    pub fn new(sink: S, provider: &'static str) -> Self {
        Self {
            sink,
            provider,
            engaged: BTreeMap::new(),
            refused: BTreeMap::new(),
        }
    }

    /// Names engaged by this provider, sorted.
    #[must_use]
    pub fn engaged(&self) -> Vec<String> {
        self.engaged.keys().cloned().collect()
    }

    /// Make the engaged set match `desired`.
    pub async fn sync(&mut self, desired: Vec<Candidate>) {
        // One candidate per name: the first by origin wins, others are reported.
        let mut by_name: BTreeMap<String, Candidate> = BTreeMap::new();
        let mut sorted = desired;
        sorted.sort_by(|a, b| a.origin.cmp(&b.origin));
        for c in sorted {
            if let Some(first) = by_name.get(&c.name) {
                if self.refused.get(&c.name) != Some(&c.fingerprint) {
                    error!(provider = self.provider, cluster = %c.name, origin = %c.origin, first = %first.origin, "cluster name is provided twice; ignoring the second");
                }
                continue;
            }
            by_name.insert(c.name.clone(), c);
        }

        let gone: Vec<String> = self
            .engaged
            .keys()
            .filter(|name| !by_name.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            self.disengage(&name);
        }
        self.refused.retain(|name, _| by_name.contains_key(name));

        for (name, candidate) in by_name {
            if self.engaged.get(&name) == Some(&candidate.fingerprint) {
                continue;
            }
            if self.refused.get(&name) == Some(&candidate.fingerprint) {
                continue;
            }
            let config = match &candidate.kubeconfig {
                Ok(kubeconfig) => kube::Config::from_custom_kubeconfig(
                    kubeconfig.clone(),
                    &KubeConfigOptions::default(),
                )
                .await
                .map_err(|e| e.to_string()),
                Err(e) => Err(e.clone()),
            };
            let config = match config {
                Ok(config) => config,
                Err(e) => {
                    let keeps = if self.engaged.contains_key(&name) {
                        "; the previous kubeconfig stays engaged"
                    } else {
                        ""
                    };
                    error!(provider = self.provider, cluster = %name, origin = %candidate.origin, error = %e, "failed to load kubeconfig{keeps}");
                    self.refused.insert(name, candidate.fingerprint);
                    continue;
                }
            };
            if self.engaged.contains_key(&name) {
                info!(provider = self.provider, cluster = %name, origin = %candidate.origin, "kubeconfig changed; re-engaging cluster");
                self.disengage(&name);
            }
            match self.sink.engage(&name, config) {
                Ok(()) => {
                    info!(provider = self.provider, cluster = %name, origin = %candidate.origin, "engaged cluster");
                    self.refused.remove(&name);
                    self.engaged.insert(name, candidate.fingerprint);
                }
                Err(e) => {
                    error!(provider = self.provider, cluster = %name, origin = %candidate.origin, error = %e, source = ?std::error::Error::source(&e).map(ToString::to_string), "failed to engage cluster");
                    self.refused.insert(name, candidate.fingerprint);
                }
            }
        }
    }

    fn disengage(&mut self, name: &str) {
        self.engaged.remove(name);
        match self.sink.disengage(name) {
            Ok(()) => info!(provider = self.provider, cluster = %name, "disengaged cluster"),
            Err(e) => {
                warn!(provider = self.provider, cluster = %name, error = %e, "failed to disengage cluster")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl ClusterSink for Recorder {
        fn engage(&self, name: &str, config: kube::Config) -> Result<(), ProviderError> {
            if name == "taken" {
                return Err(ProviderError::Engage {
                    cluster: name.into(),
                    origin: "test".into(),
                    source: "already engaged".into(),
                });
            }
            self.0
                .lock()
                .push(format!("+{name} {}", config.cluster_url));
            Ok(())
        }
        fn disengage(&self, name: &str) -> Result<(), ProviderError> {
            self.0.lock().push(format!("-{name}"));
            Ok(())
        }
    }

    fn kubeconfig(port: u16) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: sim, cluster: {{server: \"http://127.0.0.1:{port}\"}}}}]\nusers: [{{name: u, user: {{}}}}]\ncontexts: [{{name: sim, context: {{cluster: sim, user: u, namespace: default}}}}]\ncurrent-context: sim\n"
        )
    }

    fn cand(name: &str, origin: &str, text: &str) -> Candidate {
        Candidate::from_bytes(name.into(), origin.into(), text.as_bytes())
    }

    #[tokio::test]
    async fn sync_engages_changes_and_disengages() {
        let rec = Recorder::default();
        let mut e = Engager::new(rec.clone(), "test");
        e.sync(vec![
            cand("edge", "a", &kubeconfig(1)),
            cand("far", "b", &kubeconfig(2)),
        ])
        .await;
        assert_eq!(e.engaged(), ["edge", "far"]);
        // Same content: nothing happens.
        e.sync(vec![
            cand("edge", "a", &kubeconfig(1)),
            cand("far", "b", &kubeconfig(2)),
        ])
        .await;
        // Changed content re-engages; a vanished one is disengaged.
        e.sync(vec![cand("edge", "a", &kubeconfig(3))]).await;
        assert_eq!(
            *rec.0.lock(),
            [
                "+edge http://127.0.0.1:1/",
                "+far http://127.0.0.1:2/",
                "-far",
                "-edge",
                "+edge http://127.0.0.1:3/"
            ]
        );
    }

    #[tokio::test]
    async fn a_broken_kubeconfig_keeps_the_previous_one() {
        let rec = Recorder::default();
        let mut e = Engager::new(rec.clone(), "test");
        e.sync(vec![cand("edge", "a", &kubeconfig(1))]).await;
        e.sync(vec![cand("edge", "a", "not: [a kubeconfig")]).await;
        assert_eq!(e.engaged(), ["edge"]);
        assert_eq!(*rec.0.lock(), ["+edge http://127.0.0.1:1/"]);
        // A broken new cluster is not engaged, a taken name neither.
        e.sync(vec![
            cand("edge", "a", &kubeconfig(1)),
            cand("new", "b", "garbage: ["),
            cand("taken", "c", &kubeconfig(4)),
        ])
        .await;
        assert_eq!(e.engaged(), ["edge"]);
    }

    #[tokio::test]
    async fn duplicate_names_engage_once() {
        let rec = Recorder::default();
        let mut e = Engager::new(rec.clone(), "test");
        e.sync(vec![
            cand("edge", "b", &kubeconfig(2)),
            cand("edge", "a", &kubeconfig(1)),
        ])
        .await;
        assert_eq!(*rec.0.lock(), ["+edge http://127.0.0.1:1/"]);
    }
}
