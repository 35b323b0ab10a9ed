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
//! Promotion (`super::promote`, `rekon plugin promote NAME`) renames the
//! shadow file over the serving one: the registry swaps the new version in
//! and, its shadow file gone, stops shadowing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::action::{Action, ClusterInfo, Outcome, Phase, Registration, Request, Resource};
use crate::change::record::{Capture, CaseOutcome, CasePlugin, RecordConfig, Recorder, Tape};
use crate::change::replay::{CaseReads, divergence};
use crate::controller::{Layer, Reconciler};
use crate::plugin::{CallError, HostReads, LoadedPlugin, PluginRegistry};
use crate::telemetry::metrics::Metrics;

/// Shadow rollout settings.
#[derive(Clone, Debug)]
pub struct ShadowConfig {
    /// Where divergences are written as cases (`DIR/<plugin>/`).
    pub cases_dir: PathBuf,
    /// Shadow runs waiting at most; more are dropped and counted.
    pub queue: usize,
    /// Stop writing divergence cases past this many bytes.
    pub max_bytes: u64,
    /// Where shadow reconciles, drops and recent divergences are kept (the
    /// host's metrics in `rekon run`, which Plugin objects' statuses read;
    /// by default, metrics of its own).
    pub metrics: Metrics,
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
            metrics: Metrics::new(),
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
    metrics: Metrics,
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
    ) -> Result<Self, crate::change::record::RecordError> {
        let shadow = match shadow {
            None => None,
            Some((registry, config)) => {
                let cases = Recorder::start_lazily(RecordConfig {
                    max_bytes: config.max_bytes,
                    metrics: config.metrics.clone(),
                    ..RecordConfig::new(&config.cases_dir)
                })?;
                let (tx, rx) = mpsc::channel(config.queue.max(1));
                tokio::spawn(run_shadows(rx, cases, config.metrics.clone()));
                Some(ShadowRunner {
                    registry,
                    tx,
                    metrics: config.metrics,
                })
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

impl Layer for Tap {
    fn wrap(&self, plugin: Arc<dyn Reconciler>) -> Arc<dyn Reconciler> {
        Tap::wrap(self, plugin)
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

    fn performed(&self, request: &Request, result: Result<(), &crate::writer::Failed>) {
        self.inner.performed(request, result);
    }

    fn settings(&self) -> Option<&str> {
        self.inner.settings()
    }

    fn admit(&self) -> Result<(), std::time::Duration> {
        self.inner.admit()
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
                .map(|p| (p, s.tx.clone(), s.metrics.clone()))
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
            settings: self
                .inner
                .settings()
                .and_then(|s| serde_json::from_str(s).ok()),
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
            if let Some((shadow, tx, metrics)) = shadow {
                let job = ShadowJob {
                    shadow,
                    capture: capture.clone(),
                    live: reads,
                };
                if let Err(mpsc::error::TrySendError::Full(job)) = tx.try_send(job) {
                    metrics.shadow_dropped(&job.capture.plugin.name);
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
async fn run_shadows(mut rx: mpsc::Receiver<ShadowJob>, cases: Recorder, metrics: Metrics) {
    while let Some(job) = rx.recv().await {
        let (cases, metrics) = (cases.clone(), metrics.clone());
        if let Err(e) = tokio::task::spawn_blocking(move || run_shadow(job, &cases, &metrics)).await
        {
            tracing::warn!(error = %e, "shadow reconcile task failed");
        }
    }
}

fn run_shadow(job: ShadowJob, cases: &Recorder, metrics: &Metrics) {
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
        metrics.shadow_reconciled(&name, "identical", took);
        return;
    };
    metrics.shadow_reconciled(&name, kind, took);
    let r = &capture.request;
    metrics.note_shadow_divergence(
        &name,
        crate::telemetry::metrics::Divergence {
            object: match &r.namespace {
                Some(ns) => format!("{}/{ns}/{}", r.cluster, r.name),
                None => format!("{}/{}", r.cluster, r.name),
            },
            kind: kind.to_owned(),
            observed_at: k8s_openapi::jiff::Timestamp::now()
                .round(k8s_openapi::jiff::Unit::Second)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            diff: crate::change::replay::outcome_diff(&serving, &shadowed),
        },
    );
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
            settings: shadow.settings().and_then(|s| serde_json::from_str(s).ok()),
        },
        kind.to_owned(),
        result,
    ));
    cases.submit(capture);
}
