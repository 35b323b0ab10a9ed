//! Recording and shadow rollout around every reconcile: the [`Tap`].
//!
//! The manager hands each plugin it starts or swaps in to [`Tap::wrap`];
//! the wrapped plugin reconciles as before and, when the reconcile is to
//! be recorded or the plugin has a shadow version, reads through a
//! [`Tape`] so that every host read and its answer are known afterwards.
//!
//! # Shadow versions
//!
//! A file `NAME.shadow.wasm` in the plugin directory is loaded by the
//! registry as the shadow of the plugin it registers (see
//! [`crate::plugin::PluginRegistry::shadow`]); it never serves. After each
//! reconcile of the serving version, the request, its phase, its request
//! time and the reads the serving version made go to a bounded queue; one
//! worker runs the shadow on them in plan-only mode (its actions are
//! compared, never written). Reads the serving version did not make are
//! answered from the live caches (and kept in the case). A divergence
//! (actions, outcome, error, timeout, memory) is counted in
//! `rekon_shadow_reconciles_total{plugin, kind}`, logged with the object,
//! and written as a replayable case (with the shadow's decision) to the
//! shadow case directory. A full queue drops the shadow run
//! (`rekon_shadow_dropped_total`): the serving version never waits.
//!
//! Promotion ([`promote`], `rekon plugin promote NAME`) renames the shadow
//! file over the serving one: the registry swaps the new version in and,
//! its shadow file gone, stops shadowing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::controller::Reconciler;
use crate::ops::metrics::Metrics;
use crate::plugin::{
    Action, CallError, ClusterInfo, HostReads, LoadedPlugin, Outcome, Phase, PluginRegistry,
    Registration, Request, Resource,
};
use crate::record::{Capture, CaseOutcome, CasePlugin, RecordConfig, Recorder, Tape};
use crate::replay::{CaseReads, divergence};

/// Shadow rollout settings.
#[derive(Clone, Debug)]
pub struct ShadowConfig {
    /// Where divergences are written as cases (`DIR/<plugin>/`).
    pub cases_dir: PathBuf,
    /// Shadow runs waiting at most; more are dropped and counted.
    pub queue: usize,
    /// Stop writing divergence cases past this many bytes.
    pub max_bytes: u64,
}

impl ShadowConfig {
    /// Divergences into `cases_dir`, 256 queued runs, 32 MiB of cases
    /// (the default directory is in the temp directory, which the
    /// Deployment in `deploy/` limits to 64 MiB).
    #[must_use]
    pub fn new(cases_dir: impl Into<PathBuf>) -> Self {
        Self {
            cases_dir: cases_dir.into(),
            queue: 256,
            max_bytes: 32 << 20,
        }
    }
}

/// Recording and shadowing for every plugin the manager runs. Cheap to clone.
#[derive(Clone, Default)]
pub struct Tap {
    inner: Arc<TapInner>,
}

#[derive(Default)]
struct TapInner {
    recorder: Option<Recorder>,
    shadow: Option<ShadowRunner>,
}

struct ShadowRunner {
    registry: PluginRegistry,
    tx: mpsc::Sender<ShadowJob>,
}

struct ShadowJob {
    shadow: LoadedPlugin,
    capture: Capture,
    live: Arc<dyn HostReads>,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap")
            .field("recorder", &self.inner.recorder)
            .field("shadow", &self.inner.shadow.is_some())
            .finish()
    }
}

impl Tap {
    /// Records with `recorder` (if any) and runs the shadows `registry`
    /// holds (if `shadow` is set). Must be called inside a tokio runtime
    /// when shadowing (the shadow worker is a task).
    ///
    /// # Errors
    /// When the case writer thread cannot start.
    pub fn new(
        recorder: Option<Recorder>,
        shadow: Option<(PluginRegistry, ShadowConfig)>,
    ) -> Result<Self, crate::record::RecordError> {
        let shadow = match shadow {
            None => None,
            Some((registry, config)) => {
                let cases = Recorder::start_lazily(RecordConfig {
                    max_bytes: config.max_bytes,
                    ..RecordConfig::new(&config.cases_dir)
                })?;
                let (tx, rx) = mpsc::channel(config.queue.max(1));
                tokio::spawn(run_shadows(rx, cases));
                Some(ShadowRunner { registry, tx })
            }
        };
        Ok(Self {
            inner: Arc::new(TapInner { recorder, shadow }),
        })
    }

    /// Whether the tap does anything at all.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.inner.recorder.is_some() || self.inner.shadow.is_some()
    }

    /// `plugin`, recorded and shadowed.
    #[must_use]
    pub fn wrap(&self, plugin: Arc<dyn Reconciler>) -> Arc<dyn Reconciler> {
        if !self.is_active() {
            return plugin;
        }
        Arc::new(Tapped {
            inner: plugin,
            tap: self.clone(),
        })
    }
}

struct Tapped {
    inner: Arc<dyn Reconciler>,
    tap: Tap,
}

impl Reconciler for Tapped {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn registration(&self) -> &Registration {
        self.inner.registration()
    }

    fn digest(&self) -> &str {
        self.inner.digest()
    }

    fn reconcile(
        &self,
        req: Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        let tap = &self.tap.inner;
        let name = self.inner.name();
        let record = tap.recorder.as_ref().filter(|r| r.wants(name)).cloned();
        let shadow = tap.shadow.as_ref().and_then(|s| {
            s.registry
                .shadow(name)
                .filter(|p| p.digest() != self.inner.digest())
                .map(|p| (p, s.tx.clone()))
        });
        if record.is_none() && shadow.is_none() {
            return self.inner.reconcile(req, phase, reads, time);
        }
        let tape = Arc::new(Tape::new(Arc::clone(&reads)));
        let call = self.inner.reconcile(
            req.clone(),
            phase,
            Arc::clone(&tape) as Arc<dyn HostReads>,
            time,
        );
        let plugin = CasePlugin {
            name: name.to_owned(),
            version: self.inner.registration().version.clone(),
            digest: self.inner.digest().to_owned(),
        };
        async move {
            let result = call.await;
            let (recorded, clusters) = tape.take();
            let capture = Capture {
                plugin,
                request: req,
                phase,
                request_time: time,
                clusters,
                reads: recorded,
                result: result.clone(),
                shadow: None,
            };
            if let Some((shadow, tx)) = shadow {
                let job = ShadowJob {
                    shadow,
                    capture: capture.clone(),
                    live: reads,
                };
                if let Err(mpsc::error::TrySendError::Full(job)) = tx.try_send(job) {
                    Metrics::global().shadow_dropped(&job.capture.plugin.name);
                }
            }
            if let Some(recorder) = record {
                recorder.submit(capture);
            }
            result
        }
        .boxed()
    }

    fn check_action(&self, action: &Action, clusters: &[ClusterInfo]) -> Result<(), CallError> {
        self.inner.check_action(action, clusters)
    }

    fn map(
        &self,
        cluster: &str,
        resource: &Resource,
        object: String,
        reads: Arc<dyn HostReads>,
    ) -> BoxFuture<'static, Result<Vec<Request>, CallError>> {
        self.inner.map(cluster, resource, object, reads)
    }
}

/// The shadow worker: one shadow call at a time, on the blocking pool.
async fn run_shadows(mut rx: mpsc::Receiver<ShadowJob>, cases: Recorder) {
    while let Some(job) = rx.recv().await {
        let cases = cases.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || run_shadow(job, &cases)).await {
            tracing::warn!(error = %e, "shadow reconcile task failed");
        }
    }
}

fn run_shadow(job: ShadowJob, cases: &Recorder) {
    let ShadowJob {
        shadow,
        mut capture,
        live,
    } = job;
    let reads = Arc::new(CaseReads::of_capture(
        &capture.reads,
        capture.clusters.clone(),
        live,
    ));
    let started = Instant::now();
    let result = shadow.shadow_reconcile_blocking(
        &capture.request,
        capture.phase,
        Arc::clone(&reads) as Arc<dyn HostReads>,
        capture.request_time,
    );
    let took = started.elapsed();
    let serving = CaseOutcome::of(&capture.result, false);
    let shadowed = CaseOutcome::of(&result, false);
    let name = capture.plugin.name.clone();
    let Some(kind) = divergence(&serving, &shadowed) else {
        Metrics::global().shadow_reconciled(&name, "identical", took);
        return;
    };
    Metrics::global().shadow_reconciled(&name, kind, took);
    let r = &capture.request;
    tracing::warn!(
        plugin = %name,
        cluster = %r.cluster,
        namespace = r.namespace.as_deref().unwrap_or(""),
        name = %r.name,
        divergence = kind,
        serving.version = %capture.plugin.version,
        shadow.version = %shadow.version(),
        "shadow version decides differently"
    );
    capture.reads.extend(reads.extra_reads());
    capture.shadow = Some((
        CasePlugin {
            name: shadow.name().to_owned(),
            version: shadow.version().to_owned(),
            digest: shadow.digest().to_owned(),
        },
        kind.to_owned(),
        result,
    ));
    cases.submit(capture);
}

/// Errors of [`promote`].
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    /// No shadow file registers that plugin.
    #[error(
        "no shadow version of plugin {name} in {dir} (expected a *.shadow.wasm file registering it)"
    )]
    NoShadow {
        /// The plugin.
        name: String,
        /// The directory.
        dir: PathBuf,
    },
    /// The directory could not be read or the rename failed.
    #[error("failed to promote the shadow of plugin {name}")]
    Io {
        /// The plugin.
        name: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Makes the shadow version of plugin `name` in `dir` the serving one:
/// renames its `*.shadow.wasm` over the file serving `name` (or to
/// `STEM.wasm` when none serves it). A running host swaps it in and stops
/// shadowing. Returns (shadow file, serving file).
///
/// # Errors
/// When no shadow file registers `name`, or the rename fails.
pub fn promote(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), PromoteError> {
    let io = |source| PromoteError::Io {
        name: name.to_owned(),
        source,
    };
    let runtime = crate::plugin::PluginRuntime::new(crate::plugin::RuntimeConfig {
        pooling: false,
        ..crate::plugin::RuntimeConfig::default()
    })
    .map_err(|e| io(std::io::Error::other(e.to_string())))?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    files.sort();
    let registers = |path: &Path| runtime.load_file(path).is_ok_and(|p| p.name() == name);
    let is_shadow = |p: &Path| crate::plugin::is_shadow_file(p);
    // The conventional names first: no compile needed to find them.
    let shadow = files
        .iter()
        .find(|p| is_shadow(p) && shadow_stem(p) == Some(name) && registers(p))
        .or_else(|| files.iter().find(|p| is_shadow(p) && registers(p)))
        .cloned()
        .ok_or_else(|| PromoteError::NoShadow {
            name: name.to_owned(),
            dir: dir.to_path_buf(),
        })?;
    let serving = files
        .iter()
        .find(|p| !is_shadow(p) && registers(p))
        .cloned()
        .unwrap_or_else(|| dir.join(format!("{}.wasm", shadow_stem(&shadow).unwrap_or(name))));
    std::fs::rename(&shadow, &serving).map_err(io)?;
    tracing::info!(plugin = %name, from = %shadow.display(), to = %serving.display(), "shadow version promoted");
    Ok((shadow, serving))
}

fn shadow_stem(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()?.strip_suffix(".shadow.wasm")
}
