//! Recorded cases as native golden tests.
//!
//! `rekon run --record DIR` writes each reconcile of a plugin as a case
//! file: the request, phase and request time, every host read with its
//! answer, and the decision. [`RecordedCase`] runs a plugin's `reconcile`
//! natively against one, with every read served from the recording, and
//! compares the decision with the recorded one, in the host's own case
//! format (so a case that replays identically here replays identically
//! with `rekon plugin replay` against the built component, and back).
//!
//! ```no_run
//! # use rekon_sdk::prelude::*;
//! # struct MyPlugin;
//! # use rekon_sdk::k8s_openapi::api::core::v1::ConfigMap;
//! # impl Plugin for MyPlugin {
//! #     type Primary = ConfigMap;
//! #     fn register() -> Result<Registration, Error> { Ok(Registration::new::<ConfigMap>("my-plugin", "0.1.0")) }
//! #     fn reconcile(_: &Context, _: &Request, _: Event<ConfigMap>) -> Result<Outcome, Error> { Ok(Outcome::done()) }
//! # }
//! // tests/golden.rs of a plugin crate, with cases copied from production
//! // into tests/cases/:
//! #[test]
//! fn recorded_cases_still_decide_the_same() {
//!     let n = rekon_sdk::testkit::assert_cases::<MyPlugin>("tests/cases");
//!     assert!(n > 0);
//! }
//! ```
//!
//! A read the recording does not hold fails with `not-watched` and is
//! reported: the plugin reads something the recorded build did not.
//! Decisions are compared as the host records them: a failed reconcile as
//! `plugin <name> failed to reconcile: <message>` (host-side failures such
//! as timeouts cannot happen natively and always differ).

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::action::{Action, ObjectRef, Outcome, PatchType, Propagation};
use crate::context::{Backend, ClusterHealth, ClusterInfo, Context, LogLevel, Phase, Request};
use crate::error::{Error, ReadError};
use crate::plugin::Plugin;
use crate::resource::{ResourceType, Scope};

/// The case format this test kit reads (the host's).
pub const CASE_FORMAT: &str = "rekon.dev/case/v1";

/// Why a case could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("failed to load case {path}: {message}")]
pub struct CaseError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ReadKey {
    op: &'static str,
    cluster: String,
    api: String,
    namespace: Option<String>,
    /// The name (get) or the label selector (list).
    what: Option<String>,
}

impl ReadKey {
    fn describe(&self) -> String {
        format!(
            "{} {} {}{} in cluster {}",
            self.op,
            self.api,
            self.namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            self.what.as_deref().unwrap_or(""),
            self.cluster
        )
    }
}

fn api(r: &ResourceType) -> String {
    format!("{}/{}/{}", r.group, r.version, r.kind)
}

/// One recorded reconcile.
#[derive(Clone, Debug)]
pub struct RecordedCase {
    path: PathBuf,
    plugin: String,
    request: Request,
    phase: Phase,
    time: Timestamp,
    clusters: Vec<ClusterInfo>,
    reads: HashMap<ReadKey, Result<Value, ReadError>>,
    outcome: Value,
    redacted: bool,
    /// The settings the recorded version ran with (`plugin.settings`).
    settings: Option<String>,
}

/// A case replayed natively.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseReplay {
    /// The recorded decision (the case file's `outcome`).
    pub recorded: Value,
    /// The decision now, in the same format.
    pub replayed: Value,
    /// Reads the recording does not hold.
    pub missing_reads: Vec<String>,
}

impl CaseReplay {
    /// Same decision, and no read outside the recording.
    #[must_use]
    pub fn is_identical(&self) -> bool {
        self.recorded == self.replayed && self.missing_reads.is_empty()
    }
}

fn str_field(v: &Value, key: &str) -> Result<String, String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("missing {key}"))
}

fn opt_str(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn resource(v: &Value) -> Result<ResourceType, String> {
    Ok(ResourceType {
        group: str_field(v, "group")?,
        version: str_field(v, "version")?,
        kind: str_field(v, "kind")?,
        plural: str_field(v, "plural").unwrap_or_default(),
        scope: if v.get("scope").and_then(Value::as_str) == Some("Cluster") {
            Scope::Cluster
        } else {
            Scope::Namespaced
        },
    })
}

fn read_error(v: &Value) -> Option<ReadError> {
    let (tag, msg) = v.as_object()?.iter().next()?;
    let msg = msg.as_str().unwrap_or_default().to_owned();
    Some(match tag.as_str() {
        "NotWatched" => ReadError::NotWatched(msg),
        "UnknownCluster" => ReadError::UnknownCluster(msg),
        _ => ReadError::InvalidSelector(msg),
    })
}

impl RecordedCase {
    /// Loads one case file.
    ///
    /// # Errors
    /// When the file cannot be read or is not a case of [`CASE_FORMAT`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, CaseError> {
        let path = path.as_ref();
        let fail = |message: String| CaseError {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let case: Value = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
        Self::parse(path, &case).map_err(fail)
    }

    fn parse(path: &Path, case: &Value) -> Result<Self, String> {
        if case.get("format").and_then(Value::as_str) != Some(CASE_FORMAT) {
            return Err(format!("not a case of format {CASE_FORMAT}"));
        }
        let r = &case["request"];
        let request = Request {
            cluster: str_field(r, "cluster")?,
            namespace: opt_str(r, "namespace"),
            name: str_field(r, "name")?,
        };
        let phase = match case["phase"].as_str() {
            Some("Deleting") => Phase::Deleting,
            Some("Leaving") => Phase::Leaving,
            _ => Phase::Live,
        };
        let t = &case["requestTime"];
        let time = Timestamp::new(
            t["seconds"].as_i64().unwrap_or_default(),
            i32::try_from(t["nanoseconds"].as_u64().unwrap_or_default()).unwrap_or_default(),
        )
        .map_err(|e| format!("bad requestTime: {e}"))?;
        let clusters = case["clusters"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| ClusterInfo {
                        name: opt_str(c, "name").unwrap_or_default(),
                        primary: c["primary"].as_bool().unwrap_or_default(),
                        health: match c["health"].as_str() {
                            Some("Syncing") => ClusterHealth::Syncing,
                            Some("Unreachable") => ClusterHealth::Unreachable,
                            _ => ClusterHealth::Ready,
                        },
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut reads = HashMap::new();
        for read in case["reads"].as_array().into_iter().flatten() {
            let op = match read["op"].as_str() {
                Some("get") => "get",
                Some("list") => "list",
                other => return Err(format!("unknown read op {other:?}")),
            };
            let key = ReadKey {
                op,
                cluster: str_field(read, "cluster")?,
                api: api(&resource(&read["resource"])?),
                namespace: opt_str(read, "namespace"),
                what: if op == "get" {
                    opt_str(read, "name")
                } else {
                    opt_str(read, "labelSelector")
                },
            };
            let result = &read["result"];
            let answer = if let Some(e) = result.get("error") {
                Err(read_error(e).ok_or("unreadable read error")?)
            } else if let Some(o) = result.get("object") {
                Ok(o.clone())
            } else {
                Ok(result.get("objects").cloned().unwrap_or(json!([])))
            };
            reads.entry(key).or_insert(answer);
        }
        Ok(Self {
            path: path.to_path_buf(),
            plugin: str_field(&case["plugin"], "name")?,
            request,
            phase,
            time,
            clusters,
            reads,
            outcome: case["outcome"].clone(),
            redacted: case["secretsRedacted"].as_bool().unwrap_or_default(),
            settings: case["plugin"]
                .get("settings")
                .filter(|v| !v.is_null())
                .map(Value::to_string),
        })
    }

    /// Every case under `dir` (`*.json`, recursively, in path order).
    ///
    /// # Errors
    /// When the directory cannot be read or a case does not load.
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Vec<Self>, CaseError> {
        let dir = dir.as_ref();
        let paths = rekon_rules::cases::case_files_in(dir).map_err(|e| CaseError {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        paths.iter().map(Self::load).collect()
    }

    /// The case file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The recorded request.
    #[must_use]
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The plugin the case was recorded from.
    #[must_use]
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Runs the plugin (`Plugin::reconcile_request`, as the host calls it) on the recorded request, phase and request time,
    /// reads served from the recording.
    #[must_use]
    pub fn replay<P: Plugin>(&self) -> CaseReplay {
        let backend = Rc::new(CaseBackend {
            case: self.clone(),
            missing: RefCell::new(Vec::new()),
        });
        let ctx = Context::new(Rc::clone(&backend) as Rc<dyn Backend>).with_phase(self.phase);
        let result = crate::settings::with_source(ctx.backend(), || {
            P::reconcile_request(&ctx, &self.request)
        });
        CaseReplay {
            recorded: self.outcome.clone(),
            replayed: outcome_value(&self.plugin, &result, self.redacted),
            missing_reads: backend.missing.borrow().clone(),
        }
    }

    /// [`Self::replay`], panicking with both decisions (YAML) unless identical.
    ///
    /// # Panics
    /// When the decision differs or a read is not in the recording.
    pub fn assert_identical<P: Plugin>(&self) {
        let r = self.replay::<P>();
        assert!(r.is_identical(), "{}", self.describe_difference(&r));
    }

    fn describe_difference(&self, r: &CaseReplay) -> String {
        let yaml = |v: &Value| serde_yaml::to_string(v).unwrap_or_else(|_| v.to_string());
        format!(
            "case {} ({}) decides differently\nreads not in the recording: {:?}\n--- recorded\n{}--- replayed\n{}",
            self.path.display(),
            self.request,
            r.missing_reads,
            yaml(&r.recorded),
            yaml(&r.replayed)
        )
    }
}

/// Replays every case under `dir` against `P` and returns how many there
/// were; panics naming every case that decides differently.
///
/// # Panics
/// When a case does not load or decides differently.
pub fn assert_cases<P: Plugin>(dir: impl AsRef<Path>) -> usize {
    let cases = RecordedCase::load_dir(dir).unwrap_or_else(|e| panic!("{e}"));
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let r = case.replay::<P>();
            (!r.is_identical()).then(|| case.describe_difference(&r))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases decide differently:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}

struct CaseBackend {
    case: RecordedCase,
    missing: RefCell<Vec<String>>,
}

impl CaseBackend {
    fn answer(&self, key: &ReadKey) -> Result<&Value, ReadError> {
        match self.case.reads.get(key) {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(e.clone()),
            None => {
                let what = key.describe();
                self.missing.borrow_mut().push(what.clone());
                Err(ReadError::NotWatched(format!(
                    "not in the recording: {what}"
                )))
            }
        }
    }
}

impl Backend for CaseBackend {
    fn get(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        let key = ReadKey {
            op: "get",
            cluster: cluster.to_owned(),
            api: api(resource),
            namespace: namespace.map(str::to_owned),
            what: Some(name.to_owned()),
        };
        let v = self.answer(&key)?;
        Ok((!v.is_null()).then(|| v.to_string()))
    }

    fn list(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let key = ReadKey {
            op: "list",
            cluster: cluster.to_owned(),
            api: api(resource),
            namespace: namespace.map(str::to_owned),
            what: label_selector.map(str::to_owned),
        };
        Ok(self
            .answer(&key)?
            .as_array()
            .map(|a| a.iter().map(Value::to_string).collect())
            .unwrap_or_default())
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        self.case.clusters.clone()
    }

    fn log(&self, _level: LogLevel, _message: &str, _fields: &[(String, String)]) {}

    fn request_time(&self) -> Timestamp {
        self.case.time
    }

    fn declare_settings_schema(&self, _schema: &str) {}
}

impl crate::settings::SettingsSource for CaseBackend {
    fn settings(&self) -> Option<String> {
        self.case.settings.clone()
    }
}

/// A decision in the host's case format.
fn outcome_value(plugin: &str, result: &Result<Outcome, Error>, redact: bool) -> Value {
    match result {
        Ok(o) => {
            let mut ok = serde_json::Map::new();
            ok.insert(
                "actions".into(),
                o.actions.iter().map(|a| action_value(a, redact)).collect(),
            );
            if let Some(d) = o.requeue_after {
                // Rounded up to whole milliseconds, as the SDK sends it.
                let ms = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
                ok.insert(
                    "requeueAfterMs".into(),
                    json!(u64::try_from(ms).unwrap_or(u64::MAX)),
                );
            }
            if o.finalized {
                ok.insert("finalized".into(), json!(true));
            }
            json!({ "ok": ok })
        }
        Err(e) => json!({"error": {
            "kind": "plugin_error",
            "message": format!("plugin {plugin} failed to reconcile: {}", e.message()),
            "retryable": e.is_retryable(),
        }}),
    }
}

fn object_ref(o: &ObjectRef) -> Value {
    json!({
        "cluster": o.cluster,
        "resource": {
            "group": o.resource.group,
            "version": o.resource.version,
            "kind": o.resource.kind,
            "plural": o.resource.plural,
            "scope": match o.resource.scope {
                Scope::Namespaced => "Namespaced",
                Scope::Cluster => "Cluster",
            },
        },
        "namespace": o.namespace,
        "name": o.name,
    })
}

fn redacted(v: &Value, redact: bool) -> Value {
    let mut v = v.clone();
    if redact && v.get("kind").and_then(Value::as_str) == Some("Secret") {
        for field in ["data", "stringData"] {
            if let Some(Value::Object(entries)) = v.get_mut(field) {
                for value in entries.values_mut() {
                    *value = json!("<redacted>");
                }
            }
        }
    }
    v
}

/// An action as the host records it (`{"apply": {...}}`, objects as JSON).
fn action_value(action: &Action, redact: bool) -> Value {
    match action {
        Action::Apply(a) => json!({"apply": {
            "cluster": a.cluster,
            "object": redacted(&a.object, redact),
            "status": a.status,
            "force": a.force,
        }}),
        Action::Patch(p) => json!({"patch": {
            "target": object_ref(&p.target),
            "patch_type": match p.patch_type {
                PatchType::Merge => "Merge",
                PatchType::Json => "Json",
            },
            "patch": redacted(&p.patch, redact),
            "resource_version": p.resource_version,
            "status": p.status,
        }}),
        Action::Delete(d) => json!({"delete": {
            "target": object_ref(&d.target),
            "uid": d.uid,
            "propagation": d.propagation.map(|p| match p {
                Propagation::Background => "Background",
                Propagation::Foreground => "Foreground",
                Propagation::Orphan => "Orphan",
            }),
        }}),
        Action::Create(c) => json!({"create": {
            "cluster": c.cluster,
            "object": redacted(&c.object, redact),
        }}),
        Action::Event(e) => json!({"event": {
            "regarding": object_ref(&e.regarding),
            "event_type": match e.event_type {
                crate::action::EventType::Normal => "Normal",
                crate::action::EventType::Warning => "Warning",
            },
            "reason": e.reason,
            "action": e.action,
            "note": e.note,
        }}),
    }
}
