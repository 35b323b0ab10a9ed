//! Recorded reconciles: the case file format, the [`Tape`] that records a
//! plugin's host reads during one call, and the [`Recorder`] that writes
//! cases off the reconcile path (`rekon run --record DIR`).
//!
//! A plugin is a pure function of (request, phase, request time, host reads)
//! → outcome, so one reconcile recorded with every read and its answer can
//! be run again, exactly, against any build ([`crate::change::replay`]).
//!
//! # Case file
//!
//! One pretty-printed JSON document per reconcile ([`Case`]): the plugin's
//! name, version and digest; the request, phase and request time; the
//! engaged clusters; every read in call order with its answer (objects as
//! JSON, not strings); the outcome (actions with their objects and patches
//! as JSON, requeue, finalized) or the error. Field order is fixed and
//! nothing in it depends on the moment it was written, so the same
//! reconcile gives the same bytes. Secrets (objects of kind `Secret`, read
//! or written) keep their keys and lose their values unless
//! [`RecordConfig::keep_secrets`].
//!
//! # Cost on the reconcile path
//!
//! During the call the [`Tape`] keeps a copy of each answer (the JSON text
//! the plugin receives anyway). Afterwards the capture is handed to the
//! recorder's bounded queue with `try_send`; parsing, redaction,
//! serialisation and the file write happen on the recorder's own thread.
//! A full queue drops the case (`rekon_record_dropped_total{kind="queue_full"}`),
//! and so does the size cap (`kind="size_cap"`): recording never waits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::SystemTime;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::action::{Action, ClusterInfo, Outcome, Phase, Request, Resource, Timestamp};
use crate::plugin::{CallError, HostReads, ReadError};
use crate::telemetry::metrics::Metrics;

/// The `format` of every case file this host writes and reads.
pub const CASE_FORMAT: &str = "rekon.dev/case/v1";

/// What replaces the value of each key of a redacted Secret.
pub const REDACTED: &str = "<redacted>";

/// One recorded reconcile, self-contained.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Case {
    /// Always [`CASE_FORMAT`].
    pub format: String,
    /// The plugin build that made the recorded decision.
    pub plugin: CasePlugin,
    /// The request reconciled.
    pub request: Request,
    /// Why (live, deleting, leaving).
    pub phase: Phase,
    /// The request time the plugin saw.
    pub request_time: Timestamp,
    /// Whether Secret values were removed from reads and actions.
    #[serde(default)]
    pub secrets_redacted: bool,
    /// The engaged clusters and their health, as `clusters()` answered.
    #[serde(default)]
    pub clusters: Vec<ClusterInfo>,
    /// Every host read in call order, with its answer.
    #[serde(default)]
    pub reads: Vec<Read>,
    /// What the plugin decided.
    pub outcome: CaseOutcome,
    /// For a shadow divergence: what the shadow version decided instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowDecision>,
}

/// Which build a case was recorded from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CasePlugin {
    /// Plugin name.
    pub name: String,
    /// Its own version.
    pub version: String,
    /// Hex sha256 of the component.
    #[serde(default)]
    pub digest: String,
    /// The settings it ran with (a replay runs the candidate with the
    /// same settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<serde_json::Value>,
}

/// One host read and its answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Read {
    /// `get`.
    Get {
        /// Cluster.
        cluster: String,
        /// Resource.
        resource: Resource,
        /// Namespace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        /// Name.
        name: String,
        /// The answer.
        result: ReadResult,
    },
    /// `list`.
    List {
        /// Cluster.
        cluster: String,
        /// Resource.
        resource: Resource,
        /// Namespace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        /// Label selector.
        #[serde(
            default,
            rename = "labelSelector",
            skip_serializing_if = "Option::is_none"
        )]
        label_selector: Option<String>,
        /// The answer.
        result: ReadResult,
    },
}

/// The answer to a read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReadResult {
    /// `get`: the object, or null.
    Object(Option<Value>),
    /// `list`: the objects.
    Objects(Vec<Value>),
    /// The read failed.
    Error(ReadError),
}

/// What a plugin decided.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum CaseOutcome {
    /// An outcome.
    Ok {
        /// Actions in order, as JSON (see [`action_value`]).
        actions: Vec<Value>,
        /// Requeue after, in milliseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requeue_after_ms: Option<u64>,
        /// Cleanup done (deleting, leaving).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        finalized: bool,
    },
    /// The call failed.
    Error {
        /// [`CallError::kind`]: `plugin_error`, `timeout`, `out_of_memory`, ...
        kind: String,
        /// The message.
        message: String,
        /// Whether the host would retry.
        retryable: bool,
    },
}

impl CaseOutcome {
    /// The outcome of a call as recorded (Secrets redacted when `redact`).
    #[must_use]
    pub fn of(result: &Result<Outcome, CallError>, redact: bool) -> Self {
        match result {
            Ok(o) => Self::Ok {
                actions: o.actions.iter().map(|a| action_value(a, redact)).collect(),
                requeue_after_ms: o.requeue_after_ms,
                finalized: o.finalized,
            },
            Err(e) => Self::Error {
                kind: e.kind().to_owned(),
                message: e.to_string(),
                retryable: e.is_retryable(),
            },
        }
    }
}

/// A shadow version's decision on a recorded reconcile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShadowDecision {
    /// The shadow build.
    pub plugin: CasePlugin,
    /// How it diverged: `actions`, `outcome`, `error`, `timeout`, `memory`.
    pub divergence: String,
    /// What it decided.
    pub outcome: CaseOutcome,
}

/// An action as readable JSON: `{"apply": {...}}` with the applied object
/// and patch documents as JSON rather than strings; a Secret's values
/// redacted when `redact`.
#[must_use]
pub fn action_value(action: &Action, redact: bool) -> Value {
    let Ok(Value::Object(tagged)) = serde_json::to_value(action) else {
        return Value::Null;
    };
    let mut out = serde_json::Map::new();
    for (tag, mut body) in tagged {
        if let Value::Object(fields) = &mut body {
            for key in ["object", "patch"] {
                if let Some(Value::String(text)) = fields.get(key)
                    && let Ok(mut parsed) = serde_json::from_str::<Value>(text)
                {
                    if redact {
                        redact_secret(&mut parsed);
                    }
                    fields.insert(key.to_owned(), parsed);
                }
            }
        }
        out.insert(tag.to_lowercase(), body);
    }
    Value::Object(out)
}

/// Keeps the keys of a Secret's `data` and `stringData`, drops the values.
/// Other objects are left alone.
pub fn redact_secret(object: &mut Value) {
    if object.get("kind").and_then(Value::as_str) != Some("Secret") {
        return;
    }
    for field in ["data", "stringData"] {
        if let Some(Value::Object(entries)) = object.get_mut(field) {
            for value in entries.values_mut() {
                *value = Value::String(REDACTED.to_owned());
            }
        }
    }
}

/// The JSON answer of a read as a value (a read answer the host produced
/// is always JSON; anything else is kept as a string).
fn object_value(text: &str, redact: bool) -> Value {
    let mut value =
        serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_owned()));
    if redact {
        redact_secret(&mut value);
    }
    value
}

/// A read as captured during the call: the answer's text, converted later.
#[derive(Clone, Debug)]
pub(crate) enum RawRead {
    Get {
        cluster: String,
        resource: Resource,
        namespace: Option<String>,
        name: String,
        result: Result<Option<String>, ReadError>,
    },
    List {
        cluster: String,
        resource: Resource,
        namespace: Option<String>,
        label_selector: Option<String>,
        result: Result<Vec<String>, ReadError>,
    },
}

impl RawRead {
    /// `inner.get(..)`, its answer logged into `log` and passed through
    /// (the recording tape and the replay's live fallback both read so).
    pub(crate) fn get_through(
        inner: &dyn HostReads,
        log: &Mutex<Vec<RawRead>>,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        let result = inner.get(cluster, resource, namespace, name);
        log.lock().push(RawRead::Get {
            cluster: cluster.to_owned(),
            resource: resource.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            result: result.clone(),
        });
        result
    }

    /// `inner.list(..)`, logged like [`RawRead::get_through`].
    pub(crate) fn list_through(
        inner: &dyn HostReads,
        log: &Mutex<Vec<RawRead>>,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let result = inner.list(cluster, resource, namespace, label_selector);
        log.lock().push(RawRead::List {
            cluster: cluster.to_owned(),
            resource: resource.clone(),
            namespace: namespace.map(str::to_owned),
            label_selector: label_selector.map(str::to_owned),
            result: result.clone(),
        });
        result
    }

    fn into_read(self, redact: bool) -> Read {
        match self {
            Self::Get {
                cluster,
                resource,
                namespace,
                name,
                result,
            } => Read::Get {
                cluster,
                resource,
                namespace,
                name,
                result: match result {
                    Ok(o) => ReadResult::Object(o.map(|t| object_value(&t, redact))),
                    Err(e) => ReadResult::Error(e),
                },
            },
            Self::List {
                cluster,
                resource,
                namespace,
                label_selector,
                result,
            } => Read::List {
                cluster,
                resource,
                namespace,
                label_selector,
                result: match result {
                    Ok(list) => {
                        ReadResult::Objects(list.iter().map(|t| object_value(t, redact)).collect())
                    }
                    Err(e) => ReadResult::Error(e),
                },
            },
        }
    }
}

/// A [`HostReads`] that answers from another one and keeps every read with
/// its answer. One per call.
pub struct Tape {
    inner: Arc<dyn HostReads>,
    reads: Mutex<Vec<RawRead>>,
    clusters: Mutex<Option<Vec<ClusterInfo>>>,
}

impl std::fmt::Debug for Tape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tape")
            .field("reads", &self.reads.lock().len())
            .finish_non_exhaustive()
    }
}

impl Tape {
    /// Records the reads made through `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn HostReads>) -> Self {
        Self {
            inner,
            reads: Mutex::new(Vec::new()),
            clusters: Mutex::new(None),
        }
    }

    /// The reads so far, and the clusters answer (asked now if it never was).
    pub(crate) fn take(&self) -> (Vec<RawRead>, Vec<ClusterInfo>) {
        let reads = std::mem::take(&mut *self.reads.lock());
        let clusters = self
            .clusters
            .lock()
            .clone()
            .unwrap_or_else(|| self.inner.clusters());
        (reads, clusters)
    }
}

impl HostReads for Tape {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        RawRead::get_through(
            &*self.inner,
            &self.reads,
            cluster,
            resource,
            namespace,
            name,
        )
    }

    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        RawRead::list_through(
            &*self.inner,
            &self.reads,
            cluster,
            resource,
            namespace,
            label_selector,
        )
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        let mut seen = self.clusters.lock();
        seen.get_or_insert_with(|| self.inner.clusters()).clone()
    }
}

/// One reconcile as captured on the reconcile path (cheap to build: no
/// parsing), turned into a [`Case`] by the recorder's thread.
#[derive(Clone, Debug)]
pub(crate) struct Capture {
    pub(crate) plugin: CasePlugin,
    pub(crate) request: Request,
    pub(crate) phase: Phase,
    pub(crate) request_time: SystemTime,
    pub(crate) clusters: Vec<ClusterInfo>,
    pub(crate) reads: Vec<RawRead>,
    pub(crate) result: Result<Outcome, CallError>,
    /// Set for shadow divergences.
    pub(crate) shadow: Option<(CasePlugin, String, Result<Outcome, CallError>)>,
}

impl Capture {
    /// The case file content.
    pub(crate) fn into_case(self, redact: bool) -> Case {
        Case {
            format: CASE_FORMAT.to_owned(),
            plugin: self.plugin,
            request: self.request,
            phase: self.phase,
            request_time: crate::action::timestamp(self.request_time),
            secrets_redacted: redact,
            clusters: self.clusters,
            reads: self
                .reads
                .into_iter()
                .map(|r| r.into_read(redact))
                .collect(),
            outcome: CaseOutcome::of(&self.result, redact),
            shadow: self
                .shadow
                .map(|(plugin, divergence, result)| ShadowDecision {
                    plugin,
                    divergence,
                    outcome: CaseOutcome::of(&result, redact),
                }),
        }
    }
}

/// What and how to record.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// Cases go to `DIR/<plugin>/`.
    pub dir: PathBuf,
    /// Only these plugins (empty: every plugin).
    pub plugins: Vec<String>,
    /// Fraction of reconciles recorded (0.0..=1.0), spread evenly.
    pub sample: f64,
    /// Stop recording once this many bytes of cases were written.
    pub max_bytes: u64,
    /// Keep Secret values (default: keys only).
    pub keep_secrets: bool,
    /// Captures waiting for the writer thread at most; more are dropped.
    pub queue: usize,
    /// Where recorded and dropped cases are counted (the host's metrics in
    /// `rekon run`; by default, metrics of its own).
    pub metrics: Metrics,
}

impl RecordConfig {
    /// Every reconcile of every plugin into `dir`, 1 GiB at most, Secrets redacted.
    #[must_use]
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            plugins: Vec::new(),
            sample: 1.0,
            max_bytes: 1 << 30,
            keep_secrets: false,
            queue: 1024,
            metrics: Metrics::new(),
        }
    }
}

/// Errors of starting a recorder.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The case directory could not be created.
    #[error("failed to create case directory {dir}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The writer thread could not start.
    #[error("failed to start the case writer thread")]
    Thread(#[source] std::io::Error),
}

/// Writes captures as case files on its own thread. Cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<RecorderInner>,
}

struct RecorderInner {
    config: RecordConfig,
    tx: SyncSender<Capture>,
    considered: AtomicU64,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("dir", &self.inner.config.dir)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// Creates the directory and starts the writer thread (it ends when
    /// the last clone is dropped, after writing what was queued).
    ///
    /// # Errors
    /// When the directory cannot be created or the thread cannot start.
    pub fn start(config: RecordConfig) -> Result<Self, RecordError> {
        std::fs::create_dir_all(&config.dir).map_err(|source| RecordError::Dir {
            dir: config.dir.clone(),
            source,
        })?;
        Self::spawn(config)
    }

    /// Like [`Self::start`], creating the directory only when the first
    /// case is written (a host that never writes one needs no writable
    /// directory); failures to write are counted and logged.
    ///
    /// # Errors
    /// When the thread cannot start.
    pub fn start_lazily(config: RecordConfig) -> Result<Self, RecordError> {
        Self::spawn(config)
    }

    fn spawn(config: RecordConfig) -> Result<Self, RecordError> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Capture>(config.queue.max(1));
        let dir = config.dir.clone();
        let redact = !config.keep_secrets;
        let max_bytes = config.max_bytes;
        let metrics = config.metrics.clone();
        std::thread::Builder::new()
            .name("rekon-record".into())
            .spawn(move || {
                let mut written = 0_u64;
                let mut capped = false;
                let mut failed_before = false;
                for capture in rx {
                    let plugin = capture.plugin.name.clone();
                    if capped {
                        metrics.record_dropped(&plugin, "size_cap");
                        continue;
                    }
                    let case = capture.into_case(redact);
                    match write_case(&dir, &case) {
                        Ok((path, bytes)) => {
                            written += bytes;
                            metrics.record_case(&plugin);
                            tracing::trace!(path = %path.display(), bytes, "case recorded");
                            if written >= max_bytes {
                                capped = true;
                                tracing::warn!(dir = %dir.display(), max_bytes, "case size cap reached; recording stops");
                            }
                        }
                        Err(e) => {
                            metrics.record_dropped(&plugin, "write_error");
                            // Once at warn: a read-only directory fails every case.
                            if failed_before {
                                tracing::debug!(dir = %dir.display(), error = %e, "failed to write a case");
                            } else {
                                tracing::warn!(dir = %dir.display(), error = %e, "failed to write a case (further failures are logged at debug and counted in rekon_record_dropped_total)");
                            }
                            failed_before = true;
                        }
                    }
                }
            })
            .map_err(RecordError::Thread)?;
        tracing::debug!(dir = %config.dir.display(), plugins = ?config.plugins, sample = config.sample, max_bytes = config.max_bytes, "case writer started");
        Ok(Self {
            inner: Arc::new(RecorderInner {
                config,
                tx,
                considered: AtomicU64::new(0),
            }),
        })
    }

    /// The directory cases are written to.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.inner.config.dir
    }

    /// Whether the next reconcile of `plugin` is to be recorded (plugin
    /// selection, then the sampling rate: of every `1/sample` reconciles
    /// considered, one is taken).
    #[must_use]
    pub fn wants(&self, plugin: &str) -> bool {
        let c = &self.inner.config;
        if !c.plugins.is_empty() && !c.plugins.iter().any(|p| p == plugin) {
            return false;
        }
        if c.sample >= 1.0 {
            return true;
        }
        if c.sample <= 0.0 {
            return false;
        }
        let n = self.inner.considered.fetch_add(1, Ordering::Relaxed);
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
        let taken = |n: u64| (n as f64 * c.sample).floor() as u64;
        taken(n + 1) > taken(n)
    }

    /// Queues a capture for writing; drops it (counted) when the queue is full.
    pub(crate) fn submit(&self, capture: Capture) {
        match self.inner.tx.try_send(capture) {
            Ok(()) => {}
            Err(TrySendError::Full(c) | TrySendError::Disconnected(c)) => {
                self.inner
                    .config
                    .metrics
                    .record_dropped(&c.plugin.name, "queue_full");
            }
        }
    }
}

/// Writes `case` as `DIR/<plugin>/<time>-<cluster>-<namespace>-<name>.json`
/// (never overwriting: a suffix is added); returns the path and its size.
fn write_case(dir: &Path, case: &Case) -> std::io::Result<(PathBuf, u64)> {
    let text = serde_json::to_string_pretty(case).map_err(std::io::Error::other)? + "\n";
    let plugin_dir = dir.join(file_part(&case.plugin.name));
    std::fs::create_dir_all(&plugin_dir)?;
    let r = &case.request;
    let stem = format!(
        "{}.{:09}-{}-{}-{}",
        case.request_time.seconds,
        case.request_time.nanoseconds,
        file_part(&r.cluster),
        file_part(r.namespace.as_deref().unwrap_or("_")),
        file_part(&r.name)
    );
    // Written aside, then renamed into place: a reader (or a crash) never
    // sees half a case. This thread is the only writer of the directory,
    // so a name found free stays free; an existing case is never replaced.
    // (A rename costs half of a link and an unlink: file creation is the
    // bulk of a case's cost.)
    let part = plugin_dir.join(format!(".{stem}.part"));
    std::fs::write(&part, text.as_bytes())?;
    for n in 0..1000 {
        let name = if n == 0 {
            format!("{stem}.json")
        } else {
            format!("{stem}-{n}.json")
        };
        let path = plugin_dir.join(name);
        if path.exists() {
            continue;
        }
        if let Err(e) = std::fs::rename(&part, &path) {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
        return Ok((path, text.len() as u64));
    }
    let _ = std::fs::remove_file(&part);
    Err(std::io::Error::other(format!(
        "too many cases named {stem} in {}",
        plugin_dir.display()
    )))
}

fn file_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Why a file is not a case this host reads.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// The file cannot be read.
    #[error("failed to read: {0}")]
    Read(#[source] std::io::Error),
    /// It is not a case.
    #[error("not a case file: {0}")]
    NotACase(#[source] serde_json::Error),
    /// A case of another format.
    #[error("case format {found:?} is not {CASE_FORMAT:?}")]
    Format {
        /// The file's format.
        found: String,
    },
}

/// Reads one case file.
///
/// # Errors
/// When the file cannot be read, is not a case, or has another format.
pub fn read_case(path: &Path) -> Result<Case, CaseError> {
    let text = std::fs::read_to_string(path).map_err(CaseError::Read)?;
    let case: Case = serde_json::from_str(&text).map_err(CaseError::NotACase)?;
    if case.format != CASE_FORMAT {
        return Err(CaseError::Format { found: case.format });
    }
    Ok(case)
}

/// The case files named by `paths`: files as given, directories searched
/// recursively for `*.json`, in name order.
///
/// # Errors
/// When a path does not exist or a directory cannot be read.
pub fn case_files(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            out.extend(rekon_rules::cases::case_files_in(p)?);
        } else if p.exists() {
            out.push(p.clone());
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} does not exist", p.display()),
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{ApplyAction, Scope};

    fn secret_json() -> String {
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"ns"},"data":{"password":"aHVudGVyMg=="}}"#.to_owned()
    }

    fn capture(result: Result<Outcome, CallError>) -> Capture {
        let resource = Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "Secret".into(),
            plural: "secrets".into(),
            scope: Scope::Namespaced,
        };
        Capture {
            plugin: CasePlugin {
                name: "p".into(),
                version: "1.0.0".into(),
                digest: "ab".into(),
                settings: None,
            },
            request: Request {
                cluster: "main".into(),
                namespace: Some("ns".into()),
                name: "x".into(),
            },
            phase: Phase::Live,
            request_time: SystemTime::UNIX_EPOCH + std::time::Duration::new(5, 7),
            clusters: Vec::new(),
            reads: vec![RawRead::Get {
                cluster: "main".into(),
                resource,
                namespace: Some("ns".into()),
                name: "s".into(),
                result: Ok(Some(secret_json())),
            }],
            result,
            shadow: None,
        }
    }

    fn apply_secret() -> Outcome {
        Outcome {
            actions: vec![Action::Apply(ApplyAction {
                cluster: "main".into(),
                object: secret_json(),
                status: false,
                force: true,
            })],
            requeue_after_ms: Some(1000),
            finalized: false,
        }
    }

    #[test]
    fn secrets_keep_their_keys_not_their_values_unless_asked() {
        let case = capture(Ok(apply_secret())).into_case(true);
        let text = serde_json::to_string(&case).unwrap();
        assert!(!text.contains("aHVudGVyMg=="), "{text}");
        assert!(text.contains(r#""password":"<redacted>""#), "{text}");
        let kept = capture(Ok(apply_secret())).into_case(false);
        let text = serde_json::to_string(&kept).unwrap();
        assert_eq!(text.matches("aHVudGVyMg==").count(), 2, "{text}");
    }

    #[test]
    fn a_case_round_trips_and_is_stable() {
        let case = capture(Ok(apply_secret())).into_case(true);
        let text = serde_json::to_string_pretty(&case).unwrap();
        let again: Case = serde_json::from_str(&text).unwrap();
        assert_eq!(again, case);
        assert_eq!(serde_json::to_string_pretty(&again).unwrap(), text);
        // Readable: objects are JSON, actions are tagged in lowercase.
        assert!(text.contains(r#""op": "get""#), "{text}");
        assert!(text.contains(r#""apply": {"#), "{text}");
        assert!(text.contains(r#""requeueAfterMs": 1000"#), "{text}");
    }

    #[test]
    fn errors_are_recorded_with_their_kind() {
        let err = CallError::Plugin {
            plugin: "p".into(),
            message: "boom".into(),
            retryable: true,
        };
        let case = capture(Err(err)).into_case(true);
        match case.outcome {
            CaseOutcome::Error {
                kind, retryable, ..
            } => {
                assert_eq!(kind, "plugin_error");
                assert!(retryable);
            }
            CaseOutcome::Ok { .. } => panic!("expected an error outcome"),
        }
    }

    #[test]
    fn sampling_takes_the_given_fraction_and_selection_filters() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::start(RecordConfig {
            sample: 0.25,
            plugins: vec!["a".into()],
            ..RecordConfig::new(dir.path())
        })
        .unwrap();
        let taken = (0..100).filter(|_| rec.wants("a")).count();
        assert_eq!(taken, 25);
        assert!(!rec.wants("b"));
    }

    #[test]
    fn cases_are_written_once_each_and_the_size_cap_stops_recording() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::start(RecordConfig {
            max_bytes: 1,
            ..RecordConfig::new(dir.path())
        })
        .unwrap();
        rec.submit(capture(Ok(apply_secret())));
        rec.submit(capture(Ok(apply_secret())));
        drop(rec);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let files = case_files(&[dir.path().to_path_buf()]).unwrap();
            if !files.is_empty() {
                // The writer may still be finishing: give it a moment, then
                // the cap must have held it to one file.
                std::thread::sleep(std::time::Duration::from_millis(200));
                let files = case_files(&[dir.path().to_path_buf()]).unwrap();
                assert_eq!(files.len(), 1, "{files:?}");
                let case = read_case(&files[0]).unwrap();
                assert_eq!(case.request.name, "x");
                assert!(
                    files[0]
                        .to_string_lossy()
                        .ends_with("p/5.000000007-main-ns-x.json")
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no case written: likely deadlocked"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
