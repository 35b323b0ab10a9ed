//! `rekon plugin replay FILE.wasm CASES...`: runs a plugin build against
//! recorded cases ([`crate::change::record`]) with every host read served from the
//! recording, and compares its decisions with the recorded ones.
//!
//! A read the recording does not hold is answered with a `not-watched`
//! error and reported as a divergence of the case (the build reads
//! something the recorded one did not: its decision cannot be trusted to
//! be the one it would take in the cluster). The shadow rollout
//! ([`crate::change::shadow`]) uses the same [`CaseReads`] with the live caches as
//! the fallback for such reads.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

use crate::action::{ClusterInfo, Resource};
use crate::change::record::{Case, CaseOutcome, RawRead, Read, ReadResult, case_files, read_case};
use crate::plugin::{HostReads, LoadOptions, LoadedPlugin, PluginRuntime, ReadError};

/// Errors of a replay run (a differing case is a result, not an error).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The plugin file did not load.
    #[error("failed to load plugin {path}: {message}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A case path does not exist or a directory cannot be read.
    #[error("failed to find cases")]
    Cases(#[source] std::io::Error),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ReadKey {
    Get {
        cluster: String,
        api: String,
        namespace: Option<String>,
        name: String,
    },
    List {
        cluster: String,
        api: String,
        namespace: Option<String>,
        selector: Option<String>,
    },
}

fn api(r: &Resource) -> String {
    format!("{}/{}/{}", r.group, r.version, r.kind)
}

impl ReadKey {
    fn describe(&self) -> String {
        match self {
            Self::Get {
                cluster,
                api,
                namespace,
                name,
            } => format!(
                "get {api} {}{name} in cluster {cluster}",
                namespace
                    .as_deref()
                    .map(|n| format!("{n}/"))
                    .unwrap_or_default()
            ),
            Self::List {
                cluster,
                api,
                namespace,
                selector,
            } => format!(
                "list {api}{}{} in cluster {cluster}",
                namespace
                    .as_deref()
                    .map(|n| format!(" in namespace {n}"))
                    .unwrap_or_default(),
                selector
                    .as_deref()
                    .map(|s| format!(" with selector {s:?}"))
                    .unwrap_or_default()
            ),
        }
    }
}

#[derive(Clone, Debug)]
enum Answer {
    Object(Option<String>),
    Objects(Vec<String>),
    Error(ReadError),
}

/// A [`HostReads`] serving the reads of a recording. A read it does not
/// hold goes to the fallback, if any (kept in [`Self::extra_reads`]),
/// else fails as `not-watched` (kept in [`Self::missing`]).
pub struct CaseReads {
    answers: HashMap<ReadKey, Answer>,
    clusters: Vec<ClusterInfo>,
    fallback: Option<Arc<dyn HostReads>>,
    missing: Mutex<Vec<String>>,
    extra: Mutex<Vec<RawRead>>,
}

impl std::fmt::Debug for CaseReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaseReads")
            .field("answers", &self.answers.len())
            .finish_non_exhaustive()
    }
}

fn text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

impl CaseReads {
    /// The reads of `case`, nothing else.
    #[must_use]
    pub fn of_case(case: &Case) -> Self {
        let reads: Vec<RawRead> = case
            .reads
            .iter()
            .map(|read| match read {
                Read::Get {
                    cluster,
                    resource,
                    namespace,
                    name,
                    result,
                } => RawRead::Get {
                    cluster: cluster.clone(),
                    resource: resource.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    result: match result {
                        ReadResult::Object(o) => Ok(o.as_ref().map(text)),
                        ReadResult::Error(e) => Err(e.clone()),
                        // A list's answer to a get: the recording is corrupt.
                        ReadResult::Objects(_) => Err(ReadError::NotWatched(
                            "the recording answers this get with a list".to_owned(),
                        )),
                    },
                },
                Read::List {
                    cluster,
                    resource,
                    namespace,
                    label_selector,
                    result,
                } => RawRead::List {
                    cluster: cluster.clone(),
                    resource: resource.clone(),
                    namespace: namespace.clone(),
                    label_selector: label_selector.clone(),
                    result: match result {
                        ReadResult::Objects(list) => Ok(list.iter().map(text).collect()),
                        ReadResult::Error(e) => Err(e.clone()),
                        ReadResult::Object(_) => Err(ReadError::NotWatched(
                            "the recording answers this list with one object".to_owned(),
                        )),
                    },
                },
            })
            .collect();
        Self::new(&reads, case.clusters.clone(), None)
    }

    /// The recorded reads (`reads`, `clusters`) with `fallback` answering the rest.
    pub(crate) fn of_capture(
        reads: &[RawRead],
        clusters: Vec<ClusterInfo>,
        fallback: Arc<dyn HostReads>,
    ) -> Self {
        Self::new(reads, clusters, Some(fallback))
    }

    fn new(
        reads: &[RawRead],
        clusters: Vec<ClusterInfo>,
        fallback: Option<Arc<dyn HostReads>>,
    ) -> Self {
        let mut answers = HashMap::new();
        for read in reads {
            let (key, answer) = match read {
                RawRead::Get {
                    cluster,
                    resource,
                    namespace,
                    name,
                    result,
                } => (
                    ReadKey::Get {
                        cluster: cluster.clone(),
                        api: api(resource),
                        namespace: namespace.clone(),
                        name: name.clone(),
                    },
                    match result {
                        Ok(o) => Answer::Object(o.clone()),
                        Err(e) => Answer::Error(e.clone()),
                    },
                ),
                RawRead::List {
                    cluster,
                    resource,
                    namespace,
                    label_selector,
                    result,
                } => (
                    ReadKey::List {
                        cluster: cluster.clone(),
                        api: api(resource),
                        namespace: namespace.clone(),
                        selector: label_selector.clone(),
                    },
                    match result {
                        Ok(list) => Answer::Objects(list.clone()),
                        Err(e) => Answer::Error(e.clone()),
                    },
                ),
            };
            answers.entry(key).or_insert(answer);
        }
        Self {
            answers,
            clusters,
            fallback,
            missing: Mutex::new(Vec::new()),
            extra: Mutex::new(Vec::new()),
        }
    }

    /// Reads the recording did not hold and nothing answered.
    #[must_use]
    pub fn missing(&self) -> Vec<String> {
        self.missing.lock().clone()
    }

    /// Reads the fallback answered.
    pub(crate) fn extra_reads(&self) -> Vec<RawRead> {
        self.extra.lock().clone()
    }

    fn miss(&self, key: &ReadKey) -> ReadError {
        let what = key.describe();
        self.missing.lock().push(what.clone());
        ReadError::NotWatched(format!("not in the recording: {what}"))
    }
}

impl HostReads for CaseReads {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        let key = ReadKey::Get {
            cluster: cluster.to_owned(),
            api: api(resource),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        };
        match self.answers.get(&key) {
            Some(Answer::Object(o)) => Ok(o.clone()),
            Some(Answer::Error(e)) => Err(e.clone()),
            Some(Answer::Objects(_)) => Err(self.miss(&key)),
            None => match &self.fallback {
                Some(live) => {
                    RawRead::get_through(&**live, &self.extra, cluster, resource, namespace, name)
                }
                None => Err(self.miss(&key)),
            },
        }
    }

    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let key = ReadKey::List {
            cluster: cluster.to_owned(),
            api: api(resource),
            namespace: namespace.map(str::to_owned),
            selector: label_selector.map(str::to_owned),
        };
        match self.answers.get(&key) {
            Some(Answer::Objects(list)) => Ok(list.clone()),
            Some(Answer::Error(e)) => Err(e.clone()),
            Some(Answer::Object(_)) => Err(self.miss(&key)),
            None => match &self.fallback {
                Some(live) => RawRead::list_through(
                    &**live,
                    &self.extra,
                    cluster,
                    resource,
                    namespace,
                    label_selector,
                ),
                None => Err(self.miss(&key)),
            },
        }
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        self.clusters.clone()
    }
}

/// How `actual` diverges from `expected`, if it does: `actions` (different
/// actions), `outcome` (same actions, another requeue or `finalized`),
/// `timeout`, `memory` (the call ran out of time or memory), `error` (one
/// failed and the other did not, or they failed differently).
#[must_use]
pub fn divergence(expected: &CaseOutcome, actual: &CaseOutcome) -> Option<&'static str> {
    if expected == actual {
        return None;
    }
    Some(match (expected, actual) {
        (_, CaseOutcome::Error { kind, .. }) if kind == "timeout" => "timeout",
        (_, CaseOutcome::Error { kind, .. }) if kind == "out_of_memory" => "memory",
        (CaseOutcome::Ok { actions: a, .. }, CaseOutcome::Ok { actions: b, .. }) => {
            if a == b {
                "outcome"
            } else {
                "actions"
            }
        }
        _ => "error",
    })
}

/// The verdict on one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Same decision, no read outside the recording.
    Identical,
    /// Another decision, or reads the recording does not hold.
    Differs {
        /// [`divergence`], or `reads` when only the reads differ.
        kind: String,
        /// Readable diff (YAML, per action).
        diff: String,
    },
    /// The case could not be replayed (unreadable, another plugin).
    Invalid(String),
}

/// One replayed case.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The case file.
    pub path: PathBuf,
    /// What happened.
    pub verdict: Verdict,
    /// Time of the call.
    pub took: Duration,
}

/// Every case of a replay run.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    /// Plugin name.
    pub plugin: String,
    /// Plugin version.
    pub version: String,
    /// Per case, in path order.
    pub cases: Vec<CaseReport>,
}

impl ReplayReport {
    /// Cases whose verdict is not [`Verdict::Identical`].
    #[must_use]
    pub fn differing(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| c.verdict != Verdict::Identical)
            .count()
    }

    /// The report as text: one line per case, diffs indented below.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        for case in &self.cases {
            match &case.verdict {
                Verdict::Identical => {
                    let _ = writeln!(out, "identical  {}", case.path.display());
                }
                Verdict::Differs { kind, diff } => {
                    let _ = writeln!(out, "DIFFERS    {} ({kind})", case.path.display());
                    for line in diff.lines() {
                        let _ = writeln!(out, "    {line}");
                    }
                }
                Verdict::Invalid(why) => {
                    let _ = writeln!(out, "INVALID    {}: {why}", case.path.display());
                }
            }
        }
        let _ = writeln!(
            out,
            "{} {}: {} cases, {} identical, {} differ",
            self.plugin,
            self.version,
            self.cases.len(),
            self.cases.len() - self.differing(),
            self.differing()
        );
        out
    }
}

/// Replays one case against `plugin`: its decision (recorded the way the
/// case was: Secrets redacted or not) and the reads it made outside the
/// recording.
#[must_use]
pub fn replay_case(plugin: &LoadedPlugin, case: &Case) -> (CaseOutcome, Vec<String>) {
    let reads = Arc::new(CaseReads::of_case(case));
    let time = case.request_time.system_time();
    let result = plugin.reconcile_blocking(
        &case.request,
        case.phase,
        Arc::clone(&reads) as Arc<dyn HostReads>,
        time,
    );
    (
        CaseOutcome::of(&result, case.secrets_redacted),
        reads.missing(),
    )
}

/// The verdict on `case` for `plugin`.
#[must_use]
pub fn judge(plugin: &LoadedPlugin, case: &Case) -> Verdict {
    if case.plugin.name != plugin.name() {
        return Verdict::Invalid(format!(
            "recorded for plugin {}, not {}",
            case.plugin.name,
            plugin.name()
        ));
    }
    let (outcome, missing) = replay_case(plugin, case);
    let kind = divergence(&case.outcome, &outcome);
    if kind.is_none() && missing.is_empty() {
        return Verdict::Identical;
    }
    let mut diff = String::new();
    for m in &missing {
        let _ = writeln!(diff, "read not in the recording: {m}");
    }
    diff.push_str(&outcome_diff(&case.outcome, &outcome));
    Verdict::Differs {
        kind: kind.unwrap_or("reads").to_owned(),
        diff,
    }
}

/// Loads `file` and replays every case under `cases` (files, or
/// directories searched for `*.json`).
///
/// # Errors
/// When the plugin does not load or a case path does not exist.
pub fn replay(file: &Path, cases: &[PathBuf]) -> Result<ReplayReport, ReplayError> {
    let load = |message: String| ReplayError::Load {
        path: file.to_path_buf(),
        message,
    };
    let runtime = PluginRuntime::new(crate::plugin::RuntimeConfig {
        pooling: false,
        ..crate::plugin::RuntimeConfig::default()
    })
    .map_err(|e| load(e.to_string()))?;
    let bytes = std::fs::read(file).map_err(|e| load(e.to_string()))?;
    let origin = file.display().to_string();
    let load_with = |settings: Option<&Value>| {
        runtime.load_bytes_with(
            &bytes,
            &origin,
            &LoadOptions::default().with_settings(settings),
        )
    };
    // Loaded without settings first: a file that does not load at all is
    // an error of the whole replay; a case recorded with settings replays
    // on a load with those settings (one load per distinct settings).
    let plugin = load_with(None).map_err(|e| load(e.to_string()))?;
    let mut with_settings: HashMap<String, Result<LoadedPlugin, String>> = HashMap::new();
    let paths = case_files(cases).map_err(ReplayError::Cases)?;
    let cases = paths
        .into_iter()
        .map(|path| {
            let started = std::time::Instant::now();
            let verdict = match read_case(&path) {
                Ok(case) => match &case.plugin.settings {
                    None => judge(&plugin, &case),
                    Some(settings) => match with_settings
                        .entry(settings.to_string())
                        .or_insert_with(|| load_with(Some(settings)).map_err(|e| e.to_string()))
                    {
                        Ok(p) => judge(p, &case),
                        Err(e) => Verdict::Invalid(format!(
                            "the plugin does not load with the recorded settings: {e}"
                        )),
                    },
                },
                Err(e) => Verdict::Invalid(e.to_string()),
            };
            CaseReport {
                path,
                verdict,
                took: started.elapsed(),
            }
        })
        .collect();
    Ok(ReplayReport {
        plugin: plugin.name().to_owned(),
        version: plugin.version().to_owned(),
        cases,
    })
}

fn yaml(v: &Value) -> String {
    serde_yaml::to_string(v).unwrap_or_else(|_| text(v))
}

/// A readable diff of two outcomes: per differing action its YAML diff
/// (`-` recorded, `+` replayed), then requeue, `finalized` and errors.
#[must_use]
pub fn outcome_diff(expected: &CaseOutcome, actual: &CaseOutcome) -> String {
    let mut out = String::new();
    match (expected, actual) {
        (
            CaseOutcome::Ok {
                actions: a,
                requeue_after_ms: ra,
                finalized: fa,
            },
            CaseOutcome::Ok {
                actions: b,
                requeue_after_ms: rb,
                finalized: fb,
            },
        ) => {
            if a.len() != b.len() {
                let _ = writeln!(out, "actions: {} recorded, {} replayed", a.len(), b.len());
            }
            for i in 0..a.len().max(b.len()) {
                let (x, y) = (a.get(i), b.get(i));
                if x == y {
                    continue;
                }
                let _ = writeln!(out, "action #{}:", i + 1);
                let left = x.map(yaml).unwrap_or_default();
                let right = y.map(yaml).unwrap_or_default();
                // A short action is shown whole (its target included).
                let context = if left.lines().count().max(right.lines().count()) <= 40 {
                    usize::MAX
                } else {
                    3
                };
                out.push_str(&line_diff(&left, &right, context));
            }
            if ra != rb {
                let _ = writeln!(out, "requeueAfterMs: {ra:?} recorded, {rb:?} replayed");
            }
            if fa != fb {
                let _ = writeln!(out, "finalized: {fa} recorded, {fb} replayed");
            }
        }
        _ => {
            let left = serde_yaml::to_string(expected).unwrap_or_default();
            let right = serde_yaml::to_string(actual).unwrap_or_default();
            out.push_str(&line_diff(&left, &right, 3));
        }
    }
    out
}

/// A unified line diff of `a` → `b` with `context` lines around changes
/// (`- ` removed, `+ ` added, `  ` kept; `...` between hunks).
#[must_use]
pub fn line_diff(a: &str, b: &str, context: usize) -> String {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    // Longest common subsequence table, from the end.
    let mut lcs = vec![vec![0_usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let shown = |k: usize| {
        changed
            .iter()
            .any(|&c| k.saturating_add(context) >= c && k <= c.saturating_add(context))
    };
    let mut out = String::new();
    let mut skipped = false;
    for (k, (tag, line)) in ops.iter().enumerate() {
        if shown(k) {
            if skipped {
                out.push_str("  ...\n");
                skipped = false;
            }
            let _ = writeln!(out, "{tag} {line}");
        } else {
            skipped = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn line_diff_shows_changes_with_context() {
        let a = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let b = "a\nb\nc\nd\nX\nf\ng\nh\n";
        let d = line_diff(a, b, 1);
        assert_eq!(d, "  ...\n  d\n- e\n+ X\n  f\n");
        assert_eq!(line_diff(a, a, 3), "");
    }

    #[test]
    fn divergences_are_classified() {
        let ok = |n: u64| CaseOutcome::Ok {
            actions: vec![json!({"apply": {"n": n}})],
            requeue_after_ms: None,
            finalized: false,
        };
        let err = |kind: &str| CaseOutcome::Error {
            kind: kind.into(),
            message: "m".into(),
            retryable: true,
        };
        assert_eq!(divergence(&ok(1), &ok(1)), None);
        assert_eq!(divergence(&ok(1), &ok(2)), Some("actions"));
        assert_eq!(divergence(&ok(1), &err("timeout")), Some("timeout"));
        assert_eq!(divergence(&ok(1), &err("out_of_memory")), Some("memory"));
        assert_eq!(divergence(&ok(1), &err("trap")), Some("error"));
        let requeue = CaseOutcome::Ok {
            actions: vec![json!({"apply": {"n": 1}})],
            requeue_after_ms: Some(5),
            finalized: false,
        };
        assert_eq!(divergence(&ok(1), &requeue), Some("outcome"));
        let diff = outcome_diff(&ok(1), &ok(2));
        assert!(diff.contains("action #1:"), "{diff}");
        assert!(diff.contains("-     n: 1") || diff.contains("- "), "{diff}");
        assert!(diff.contains("n: 2"), "{diff}");
    }
}
