//! The probe: what the explorer wraps around the plugin, as the safe-change
//! `Tap` is wrapped in `rekon run` (a [`Reconciler`] the controller runs in
//! its place). It records every reconcile as a case (request, reads,
//! outcome), checks determinism on the reference, and performs the plan's
//! fault where it targets a reconcile: a crash after action k, stale or
//! shuffled reads, an armed write failure, a duplicate or postponed
//! delivery.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rand::SeedableRng as _;
use rand::seq::SliceRandom as _;
use serde_json::Value;

use crate::action::{Action, ClusterInfo, Outcome, Phase, Registration, Request, Resource};
use crate::change::record::{Capture, Case, CaseOutcome, CasePlugin, Read, ReadResult, Tape};
use crate::change::replay::{divergence, outcome_diff, replay_case};
use crate::controller::Reconciler;
use crate::plugin::{CallError, HostReads, LoadedPlugin, ReadError};

use super::plan::Fault;
use super::trace::{ActionSummary, At, Reconcile, WriteSummary};
use super::wire::Switchboard;

/// A reconcile whose decision changed when replayed on its own reads.
#[derive(Clone, Debug)]
pub struct Nondeterminism {
    /// Which reconcile.
    pub at: At,
    /// The two outcomes' diff.
    pub diff: String,
    /// Its case.
    pub case: Case,
}

#[derive(Debug, Default)]
struct ProbeState {
    ordinal: usize,
    per_key: HashMap<String, usize>,
    trace: Vec<Reconcile>,
    fired: bool,
    restart_pending: bool,
    nondeterministic: Vec<Nondeterminism>,
    /// What each key's reconciles read, in order.
    reads_by_key: HashMap<String, Vec<Vec<Read>>>,
}

/// What a run does to the plugin's reconciles.
#[derive(Clone, Debug, Default)]
pub struct ProbeConfig {
    /// The plan's fault (None: the reference).
    pub fault: Option<Fault>,
    /// Replay every reconcile on its reads and compare (the reference).
    pub check_determinism: bool,
}

/// The wrapped plugin.
pub struct Probe {
    inner: LoadedPlugin,
    registration: Registration,
    settings: Option<Value>,
    config: ProbeConfig,
    board: Switchboard,
    state: Arc<Mutex<ProbeState>>,
}

impl Probe {
    /// Wraps `inner` for one run: one reconcile at a time (the explorer
    /// owns the order), the run's `board` (faults and writes).
    #[must_use]
    pub fn new(inner: LoadedPlugin, config: ProbeConfig, board: Switchboard) -> Self {
        let mut registration = inner.registration().clone();
        registration.max_concurrent_reconciles = Some(1);
        let settings = inner.settings().and_then(|s| serde_json::from_str(s).ok());
        Self {
            inner,
            registration,
            settings,
            config,
            board,
            state: Arc::default(),
        }
    }

    /// The reconciles so far.
    #[must_use]
    pub fn trace(&self) -> Vec<Reconcile> {
        self.state.lock().trace.clone()
    }

    /// Whether the fault was performed.
    #[must_use]
    pub fn fired(&self) -> bool {
        self.state.lock().fired || self.board.fired()
    }

    /// Whether a crash asks for the controller's restart (and clears it).
    pub fn take_restart(&self) -> bool {
        std::mem::take(&mut self.state.lock().restart_pending)
    }

    /// Reconciles whose decision changed on their own reads.
    #[must_use]
    pub fn nondeterministic(&self) -> Vec<Nondeterminism> {
        self.state.lock().nondeterministic.clone()
    }

    fn case_plugin(&self) -> CasePlugin {
        CasePlugin {
            name: self.inner.name().to_owned(),
            version: self.inner.version().to_owned(),
            digest: self.inner.digest().to_owned(),
            settings: self.settings.clone(),
        }
    }
}

/// `cluster/namespace/name` of a request.
#[must_use]
pub fn key_of(req: &Request) -> String {
    format!(
        "{}/{}/{}",
        req.cluster,
        req.namespace.as_deref().unwrap_or(""),
        req.name
    )
}

fn verb_of(a: &Action) -> &'static str {
    match a {
        Action::Apply(_) => "apply",
        Action::Patch(_) => "patch",
        Action::Delete(_) => "delete",
        Action::Create(_) => "create",
        Action::Event(_) => "event",
    }
}

/// Keeps the actions up to and including write number `after`.
fn crash_after(outcome: &mut Outcome, after: usize) {
    let mut writes = 0;
    let cut = outcome
        .actions
        .iter()
        .position(|a| {
            if !matches!(a, Action::Event(_)) {
                writes += 1;
            }
            writes == after
        })
        .map_or(outcome.actions.len(), |i| i + 1);
    outcome.actions.truncate(cut);
    outcome.finalized = false;
    outcome.requeue_after_ms = None;
}

impl Reconciler for Probe {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn registration(&self) -> &Registration {
        &self.registration
    }

    fn digest(&self) -> &str {
        self.inner.digest()
    }

    fn settings(&self) -> Option<&str> {
        self.inner.settings()
    }

    fn reconcile(
        &self,
        req: Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        let key = key_of(&req);
        let (ordinal, at) = {
            let mut s = self.state.lock();
            s.ordinal += 1;
            let n = {
                let n = s.per_key.entry(key.clone()).or_default();
                *n += 1;
                *n
            };
            (s.ordinal, At { key, n })
        };
        self.board.begin_reconcile(ordinal);
        let targeted = self
            .config
            .fault
            .as_ref()
            .filter(|f| f.at() == Some(&at))
            .cloned();
        let mut reads = reads;
        let mut fault_label = None;
        match &targeted {
            Some(Fault::Delay { .. }) => {
                let mut s = self.state.lock();
                s.fired = true;
                let outcome = Outcome {
                    actions: Vec::new(),
                    requeue_after_ms: Some(3_000),
                    finalized: false,
                };
                s.trace.push(Reconcile {
                    ordinal,
                    at,
                    phase,
                    actions: Vec::new(),
                    finalized: false,
                    error: None,
                    writes: Vec::new(),
                    changed_writes: 0,
                    lists: 0,
                    fault: Some("postponed".to_owned()),
                    case: Capture {
                        plugin: self.case_plugin(),
                        request: req,
                        phase,
                        request_time: time,
                        clusters: Vec::new(),
                        reads: Vec::new(),
                        result: Ok(outcome.clone()),
                        shadow: None,
                    }
                    .into_case(false),
                });
                return async move { Ok(outcome) }.boxed();
            }
            Some(Fault::Stale { behind, .. }) => {
                let previous = self
                    .state
                    .lock()
                    .reads_by_key
                    .get(&at.key)
                    .and_then(|all| all.len().checked_sub(*behind).map(|i| all[i].clone()));
                if let Some(previous) = previous {
                    self.state.lock().fired = true;
                    fault_label = Some(format!(
                        "stale reads (a cache {behind} reconcile(s) behind)"
                    ));
                    reads = Arc::new(StaleReads {
                        inner: reads,
                        previous,
                    });
                }
            }
            Some(Fault::Transient { write, answer, .. }) => {
                self.board.arm(ordinal, *write, *answer);
                fault_label = Some(format!("write {write} answers {}", answer.label()));
            }
            _ => {}
        }
        if let Some(Fault::Shuffle { seed }) = &self.config.fault {
            reads = Arc::new(ShuffledReads {
                inner: reads,
                seed: *seed,
                calls: AtomicU64::new(0),
                shuffled: Arc::clone(&self.state),
            });
        }
        let tape = Arc::new(Tape::new(reads));
        let inner = self.inner.clone();
        let state = Arc::clone(&self.state);
        let plugin = self.case_plugin();
        let check = self.config.check_determinism;
        async move {
            let result = inner.reconcile_blocking(
                &req,
                phase,
                Arc::clone(&tape) as Arc<dyn HostReads>,
                time,
            );
            let (raw, clusters) = tape.take();
            let mut result = result;
            let mut restart = false;
            if let Ok(outcome) = &mut result {
                match &targeted {
                    Some(Fault::Crash { after, .. }) => {
                        crash_after(outcome, *after);
                        restart = true;
                        fault_label = Some(format!("crash after action {after}"));
                    }
                    Some(Fault::Duplicate { .. }) => {
                        outcome.requeue_after_ms = Some(0);
                        fault_label = Some("delivered again".to_owned());
                    }
                    _ => {}
                }
            }
            let case = Capture {
                plugin,
                request: req,
                phase,
                request_time: time,
                clusters,
                reads: raw,
                result: result.clone(),
                shadow: None,
            }
            .into_case(false);
            let lists = case
                .reads
                .iter()
                .filter(|r| matches!(r, Read::List { .. }))
                .count();
            let nondeterminism = if check {
                let (again, missing) = replay_case(&inner, &case);
                (divergence(&case.outcome, &again).is_some() || !missing.is_empty()).then(|| {
                    let mut diff = String::new();
                    for m in &missing {
                        diff.push_str(&format!("read not made the first time: {m}\n"));
                    }
                    diff.push_str(&outcome_diff(&case.outcome, &again));
                    diff
                })
            } else {
                None
            };
            let (actions, finalized, error) = match &result {
                Ok(o) => (
                    o.actions
                        .iter()
                        .map(|a| ActionSummary {
                            verb: verb_of(a).to_owned(),
                        })
                        .collect(),
                    o.finalized,
                    None,
                ),
                Err(e) => (Vec::new(), false, Some(e.to_string())),
            };
            let mut s = state.lock();
            if targeted.is_some()
                && !matches!(
                    targeted,
                    Some(Fault::Transient { .. } | Fault::Stale { .. })
                )
            {
                s.fired = true;
            }
            s.reads_by_key
                .entry(at.key.clone())
                .or_default()
                .push(case.reads.clone());
            if restart {
                s.restart_pending = true;
            }
            if let Some(diff) = nondeterminism {
                s.nondeterministic.push(Nondeterminism {
                    at: at.clone(),
                    diff,
                    case: case.clone(),
                });
            }
            s.trace.push(Reconcile {
                ordinal,
                at,
                phase,
                actions,
                finalized,
                error,
                writes: Vec::new(),
                changed_writes: 0,
                lists,
                fault: fault_label,
                case,
            });
            result
        }
        .boxed()
    }

    fn check_action(&self, action: &Action, clusters: &[ClusterInfo]) -> Result<(), CallError> {
        Reconciler::check_action(&self.inner, action, clusters)
    }

    fn map(
        &self,
        cluster: &str,
        resource: &Resource,
        object: String,
        reads: Arc<dyn HostReads>,
    ) -> BoxFuture<'static, Result<Vec<Request>, CallError>> {
        Reconciler::map(&self.inner, cluster, resource, object, reads)
    }
}

/// Fills each reconcile's writes from the wire's log.
pub fn attach_writes(trace: &mut [Reconcile], board: &Switchboard) {
    let mut by: BTreeMap<usize, Vec<WriteSummary>> = BTreeMap::new();
    for w in board.writes() {
        if w.injected {
            continue;
        }
        by.entry(w.reconcile).or_default().push(WriteSummary {
            method: w.method.to_string(),
            changed: w.changed,
        });
    }
    for r in trace {
        r.writes = by.remove(&r.ordinal).unwrap_or_default();
        r.changed_writes = r.writes.iter().filter(|w| w.changed).count();
    }
}

/// A cache some reconciles behind: each read answered as an earlier
/// reconcile of the key saw it (the same get, a list of the same query, or a get
/// answered from such a list); a read it never made, as the cache now.
struct StaleReads {
    inner: Arc<dyn HostReads>,
    previous: Vec<Read>,
}

fn same_list(
    read: &Read,
    cluster: &str,
    resource: &Resource,
    namespace: Option<&str>,
) -> Option<(Option<String>, Vec<Value>)> {
    match read {
        Read::List {
            cluster: c,
            resource: r,
            namespace: n,
            label_selector,
            result: ReadResult::Objects(os),
        } if c == cluster
            && r.group == resource.group
            && r.kind == resource.kind
            && (n.is_none() || n.as_deref() == namespace) =>
        {
            Some((label_selector.clone(), os.clone()))
        }
        _ => None,
    }
}

impl HostReads for StaleReads {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        for read in &self.previous {
            if let Read::Get {
                cluster: c,
                resource: r,
                namespace: n,
                name: m,
                result: ReadResult::Object(o),
            } = read
                && c == cluster
                && r.group == resource.group
                && r.kind == resource.kind
                && n.as_deref() == namespace
                && m == name
            {
                return Ok(o.as_ref().map(Value::to_string));
            }
        }
        // A list without a selector of that namespace (or all) holds it
        // or says it was absent.
        for read in &self.previous {
            if let Some((None, objects)) = same_list(read, cluster, resource, namespace) {
                return Ok(objects
                    .iter()
                    .find(|o| {
                        o["metadata"]["name"] == name
                            && o["metadata"]["namespace"].as_str() == namespace
                    })
                    .map(Value::to_string));
            }
        }
        self.inner.get(cluster, resource, namespace, name)
    }

    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        for read in &self.previous {
            if let Some((selector, objects)) = same_list(read, cluster, resource, namespace)
                && selector.as_deref() == label_selector
            {
                return Ok(objects
                    .iter()
                    .filter(|o| {
                        namespace.is_none() || o["metadata"]["namespace"].as_str() == namespace
                    })
                    .map(Value::to_string)
                    .collect());
            }
        }
        self.inner
            .list(cluster, resource, namespace, label_selector)
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        self.inner.clusters()
    }
}

/// Lists in a seeded random order.
struct ShuffledReads {
    inner: Arc<dyn HostReads>,
    seed: u64,
    calls: AtomicU64,
    shuffled: Arc<Mutex<ProbeState>>,
}

impl HostReads for ShuffledReads {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        self.inner.get(cluster, resource, namespace, name)
    }

    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let mut items = self
            .inner
            .list(cluster, resource, namespace, label_selector)?;
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let mut rng =
            rand::rngs::StdRng::seed_from_u64(self.seed ^ call.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        items.shuffle(&mut rng);
        if items.len() > 1 {
            self.shuffled.lock().fired = true;
        }
        Ok(items)
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        self.inner.clusters()
    }
}

/// The outcome of a case as one line (`3 actions`, `error: …`).
#[must_use]
pub fn outcome_line(case: &Case) -> String {
    match &case.outcome {
        CaseOutcome::Ok {
            actions, finalized, ..
        } => format!(
            "{} action(s){}",
            actions.len(),
            if *finalized { ", finalized" } else { "" }
        ),
        CaseOutcome::Error { kind, message, .. } => format!("error ({kind}): {message}"),
    }
}
