//! A directory of kubeconfig files, one cluster per file.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::Kubeconfig;
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::engager::{Candidate, ClusterSink, Engager, ProviderError, fingerprint};

/// How a file's cluster name is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NameFrom {
    /// The file name without its extension (`edge.yaml` → `edge`).
    #[default]
    FileStem,
    /// The kubeconfig's `current-context` (falling back to the file stem).
    CurrentContext,
}

/// Engages one cluster per kubeconfig file in a directory, and follows the
/// directory's changes (notify, plus a periodic rescan).
///
/// Every regular, non-hidden file (symlinks followed, so a Secret or
/// ConfigMap mounted as a volume works) is a kubeconfig. Removing the file
/// disengages its cluster; changing it re-engages the cluster.
///
/// ```no_run
/// # async fn demo(registry: rekon::cluster::ClusterRegistry) -> Result<(), rekon::cluster::provider::ProviderError> {
/// use rekon::cluster::provider::DirProvider;
/// DirProvider::new("/etc/rekon/clusters").run(registry, std::future::pending()).await
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct DirProvider {
    dir: PathBuf,
    naming: NameFrom,
    debounce: Duration,
    resync: Duration,
}

impl DirProvider {
    /// Watch `dir`.
    #[must_use]
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            naming: NameFrom::FileStem,
            debounce: Duration::from_millis(200),
            resync: Duration::from_secs(30),
        }
    }

    /// How cluster names are chosen.
    #[must_use]
    pub fn naming(mut self, naming: NameFrom) -> Self {
        self.naming = naming;
        self
    }

    /// Quiet time after a file event before the rescan (default 200 ms).
    #[must_use]
    pub fn debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// Full rescan interval, in case an event was missed (default 30 s).
    #[must_use]
    pub fn resync(mut self, resync: Duration) -> Self {
        self.resync = resync;
        self
    }

    /// Read the directory once: the clusters it describes now.
    ///
    /// # Errors
    /// When the directory cannot be read.
    pub fn scan(&self) -> Result<Vec<Candidate>, ProviderError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| ProviderError::WatchDir {
            path: self.dir.display().to_string(),
            source: Box::new(e),
        })?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            // Hidden files include the `..data` machinery of mounted volumes.
            if file_name.starts_with('.') || !path.is_file() {
                continue;
            }
            match std::fs::read(&path) {
                Ok(bytes) => out.push(self.candidate(&path, &bytes)),
                Err(e) => {
                    warn!(file = %path.display(), error = %e, "failed to read kubeconfig file")
                }
            }
        }
        Ok(out)
    }

    fn candidate(&self, path: &Path, bytes: &[u8]) -> Candidate {
        // read_from resolves relative certificate paths against the file.
        let kubeconfig = Kubeconfig::read_from(path).map_err(|e| e.to_string());
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = match (self.naming, &kubeconfig) {
            (NameFrom::CurrentContext, Ok(k)) => k
                .current_context
                .clone()
                .filter(|c| !c.is_empty())
                .unwrap_or(stem),
            _ => stem,
        };
        Candidate {
            name,
            origin: path.display().to_string(),
            kubeconfig,
            fingerprint: fingerprint(bytes),
        }
    }

    /// Engage the directory's clusters into `sink` and follow its changes
    /// until `shutdown` resolves. Clusters stay engaged after shutdown (the
    /// host is stopping anyway).
    ///
    /// # Errors
    /// When the directory cannot be watched.
    pub async fn run<S: ClusterSink>(
        self,
        sink: S,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ProviderError> {
        let watch_err = |e: notify::Error| ProviderError::WatchDir {
            path: self.dir.display().to_string(),
            source: Box::new(e),
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // The receiver is gone only when `run` returned.
                let _ = tx.send(event.map(|_| ()));
            })
            .map_err(watch_err)?;
        watcher
            .watch(&self.dir, RecursiveMode::NonRecursive)
            .map_err(watch_err)?;
        info!(dir = %self.dir.display(), "watching cluster directory");

        let mut engager = Engager::new(sink, "dir");
        engager.sync(self.scan()?).await;
        tokio::pin!(shutdown);
        let mut resync = tokio::time::interval(self.resync);
        resync.tick().await;
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = resync.tick() => {}
                event = rx.recv() => {
                    match event {
                        Some(Ok(())) => {}
                        Some(Err(e)) => warn!(dir = %self.dir.display(), error = %e, "cluster directory watch error"),
                        None => break,
                    }
                    // Debounce: wait until the directory is quiet.
                    while let Ok(Some(_)) = tokio::time::timeout(self.debounce, rx.recv()).await {}
                }
            }
            match self.scan() {
                Ok(candidates) => engager.sync(candidates).await,
                Err(e) => {
                    warn!(dir = %self.dir.display(), error = %e, "failed to rescan cluster directory")
                }
            }
        }
        drop(watcher);
        debug!(dir = %self.dir.display(), "cluster directory provider stopped");
        Ok(())
    }
}
