//! The probe: what the explorer wraps around the plugin, as the safe-change
//! `Tap` is wrapped in `rekon run` (a [`Reconciler`] the controller runs in
//! its place). It records every reconcile as a case (request, reads,
//! outcome), checks determinism on the reference, and performs the plan's
//! fault where it targets a reconcile: a crash after action k, stale or
//! shuffled reads, an armed write failure, a duplicate or postponed
//! delivery.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rand::SeedableRng as _;
use rand::seq::SliceRandom as _;
use serde_json::Value;

use crate::action::{
    Action, ClusterInfo, Outcome, Phase, Registration, Request, Resource, action_cluster,
    action_kind,
};
use crate::change::record::{Capture, Case, CaseOutcome, CasePlugin, Tape};
use crate::change::replay::{divergence, outcome_diff, replay_case};
use crate::controller::Reconciler;
use crate::plugin::{CallError, HostReads, LoadedPlugin, ReadError};

use super::stale::{Logged, StaleReads, View};

use super::plan::Fault;
use super::trace::{At, Reconcile, WriteSummary};
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
    /// A crash happened: nothing more runs on this controller (no
    /// reconcile, no write but the crashed reconcile's own) until the
    /// restart from a fresh list.
    crashed: bool,
    nondeterministic: Vec<Nondeterminism>,
    /// What every reconcile read, in order (stale views are built from it).
    log: Vec<Logged>,
    /// The actions of the last reconcile's outcome not yet performed: a
    /// write the writer's gate is asked about that is not one of them is
    /// the host's own (a finalizer patch).
    pending: Vec<Action>,
    /// Outcomes the host could not perform: (reconcile ordinal, the
    /// writer's reason).
    refused: Vec<(usize, String)>,
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
    /// Whether a stale view answered anything the cache would not have.
    stale_differed: Arc<AtomicBool>,
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
            stale_differed: Arc::default(),
        }
    }

    /// The reconciles so far.
    #[must_use]
    pub fn trace(&self) -> Vec<Reconcile> {
        self.state.lock().trace.clone()
    }

    /// Whether the fault was performed (a stale view only counts once one
    /// of its answers differed from the cache's).
    #[must_use]
    pub fn fired(&self) -> bool {
        self.state.lock().fired || self.board.fired() || self.stale_differed.load(Ordering::Relaxed)
    }

    /// Whether a crash asks for the controller's restart (and clears it:
    /// the restarted controller runs again).
    pub fn take_restart(&self) -> bool {
        let mut s = self.state.lock();
        let restart = std::mem::take(&mut s.restart_pending);
        if restart {
            s.crashed = false;
            s.pending.clear();
        }
        restart
    }

    /// Reconciles whose decision changed on their own reads.
    #[must_use]
    pub fn nondeterministic(&self) -> Vec<Nondeterminism> {
        self.state.lock().nondeterministic.clone()
    }

    /// Outcomes the host could not perform, by reconcile ordinal.
    #[must_use]
    pub fn refused(&self) -> Vec<(usize, String)> {
        self.state.lock().refused.clone()
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

/// `create ConfigMap default/x in main`: an action and its object.
#[must_use]
pub fn describe_action(a: &Action) -> String {
    let object = |json: &str| {
        let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
        let meta = &v["metadata"];
        let name = meta["name"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| meta["generateName"].as_str().map(|p| format!("{p}*")))
            .unwrap_or_else(|| "?".to_owned());
        let ns = meta["namespace"]
            .as_str()
            .map(|n| format!("{n}/"))
            .unwrap_or_default();
        format!("{} {ns}{name}", v["kind"].as_str().unwrap_or("?"))
    };
    let target = |t: &crate::action::ObjectRef| {
        let ns = t
            .namespace
            .as_deref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default();
        format!("{} {ns}{}", t.resource.kind, t.name)
    };
    let what = match a {
        Action::Apply(x) => object(&x.object),
        Action::Create(x) => object(&x.object),
        Action::Patch(x) => target(&x.target),
        Action::Delete(x) => target(&x.target),
        Action::Event(x) => target(&x.regarding),
    };
    format!("{} {what} in {}", action_kind(a), action_cluster(a))
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

/// A reconcile between its start and the plugin's answer: which one it
/// is, the fault aimed at it, and the reads it was given.
struct Begun {
    ordinal: usize,
    at: At,
    targeted: Option<Fault>,
    fault_label: Option<String>,
    tape: Arc<Tape>,
    request: Request,
    phase: Phase,
    time: SystemTime,
}

/// How a reconcile starts.
enum Start {
    /// Answered without calling the plugin (postponed, or the controller
    /// crashed and waits for its restart).
    Answered(Outcome),
    /// Call the plugin.
    Call(Begun),
}

impl Probe {
    /// Before the call: names the reconcile, decides the fault aimed at
    /// it (one place), and builds the reads it gets.
    fn begin(
        &self,
        request: Request,
        mut phase: Phase,
        reads: Arc<dyn HostReads>,
        time: SystemTime,
    ) -> Start {
        let key = key_of(&request);
        let mut s = self.state.lock();
        if s.crashed {
            // Killed: what was queued never runs on this controller; the
            // restart lists afresh and requeues every primary.
            return Start::Answered(Outcome {
                actions: Vec::new(),
                requeue_after_ms: None,
                finalized: false,
            });
        }
        s.ordinal += 1;
        let ordinal = s.ordinal;
        let n = {
            let n = s.per_key.entry(key.clone()).or_default();
            *n += 1;
            *n
        };
        let at = At { key, n };
        self.board.begin_reconcile(ordinal);
        s.pending.clear();
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
                s.fired = true;
                let outcome = Outcome {
                    actions: Vec::new(),
                    requeue_after_ms: Some(3_000),
                    finalized: false,
                };
                let case = Capture {
                    plugin: self.case_plugin(),
                    request,
                    phase,
                    request_time: time,
                    clusters: Vec::new(),
                    reads: Vec::new(),
                    result: Ok(outcome.clone()),
                    shadow: None,
                }
                .into_case(false);
                s.trace.push(Reconcile::new(
                    ordinal,
                    at,
                    phase,
                    case,
                    Some("postponed".to_owned()),
                ));
                return Start::Answered(outcome);
            }
            Some(Fault::Stale { behind, .. }) => {
                let primary = (request.cluster.as_str(), &self.registration.primary);
                if let Some(view) = View::build(&s.log, &at.key, *behind, primary) {
                    fault_label = Some(format!(
                        "stale reads (informers up to {behind} reconcile(s) behind; the primary's current)"
                    ));
                    reads = Arc::new(StaleReads::new(
                        reads,
                        view,
                        Arc::clone(&self.stale_differed),
                    ));
                }
            }
            Some(Fault::TimeTravel { behind, .. }) => {
                if let Some((view, then)) = View::snapshot(&s.log, &at.key, *behind) {
                    fault_label = Some(format!(
                        "time travel (a restart onto the snapshot {behind} reconcile(s) back, phase {then:?})"
                    ));
                    phase = then;
                    reads = Arc::new(StaleReads::new(
                        reads,
                        view,
                        Arc::clone(&self.stale_differed),
                    ));
                }
            }
            Some(Fault::Transient { write, answer, .. }) => {
                self.board.arm(ordinal, *write, *answer);
                fault_label = Some(format!("write {write} answers {}", answer.label()));
            }
            _ => {}
        }
        drop(s);
        if let Some(Fault::Shuffle { seed }) = &self.config.fault {
            reads = Arc::new(ShuffledReads {
                inner: reads,
                seed: *seed,
                calls: AtomicU64::new(0),
                shuffled: Arc::clone(&self.state),
            });
        }
        Start::Call(Begun {
            ordinal,
            at,
            targeted,
            fault_label,
            tape: Arc::new(Tape::new(reads)),
            request,
            phase,
            time,
        })
    }
}

/// After the call: the fault's share of the outcome (a crash cuts it, a
/// duplicate asks again), the case, the determinism check, the trace.
fn finish(
    state: &Mutex<ProbeState>,
    inner: &LoadedPlugin,
    plugin: CasePlugin,
    check: bool,
    begun: Begun,
    mut result: Result<Outcome, CallError>,
) -> Result<Outcome, CallError> {
    let Begun {
        ordinal,
        at,
        targeted,
        mut fault_label,
        tape,
        request,
        phase,
        time,
    } = begun;
    let (raw, clusters) = tape.take();
    let mut crashed = false;
    if let Ok(outcome) = &mut result {
        match &targeted {
            Some(Fault::Crash { after, .. }) => {
                crash_after(outcome, *after);
                crashed = true;
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
        request,
        phase,
        request_time: time,
        clusters,
        reads: raw,
        result: result.clone(),
        shadow: None,
    }
    .into_case(false);
    let nondeterminism = check
        .then(|| {
            let (again, missing) = replay_case(inner, &case);
            (divergence(&case.outcome, &again).is_some() || !missing.is_empty()).then(|| {
                let mut diff = String::new();
                for m in &missing {
                    diff.push_str(&format!("read not made the first time: {m}\n"));
                }
                diff.push_str(&outcome_diff(&case.outcome, &again));
                diff
            })
        })
        .flatten();
    let mut s = state.lock();
    if targeted.is_some()
        && !matches!(
            targeted,
            Some(Fault::Transient { .. } | Fault::Stale { .. })
        )
    {
        s.fired = true;
    }
    s.log.push(Logged {
        ordinal,
        key: at.key.clone(),
        phase,
        reads: case.reads.clone(),
    });
    s.pending = result
        .as_ref()
        .map(|o| o.actions.clone())
        .unwrap_or_default();
    if crashed {
        s.restart_pending = true;
        s.crashed = true;
    }
    if let Some(diff) = nondeterminism {
        s.nondeterministic.push(Nondeterminism {
            at: at.clone(),
            diff,
            case: case.clone(),
        });
    }
    s.trace
        .push(Reconcile::new(ordinal, at, phase, case, fault_label));
    result
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
        let begun = match self.begin(req, phase, reads, time) {
            Start::Answered(outcome) => return async move { Ok(outcome) }.boxed(),
            Start::Call(begun) => begun,
        };
        let inner = self.inner.clone();
        let state = Arc::clone(&self.state);
        let plugin = self.case_plugin();
        let check = self.config.check_determinism;
        async move {
            let result = inner.reconcile_blocking(
                &begun.request,
                begun.phase,
                Arc::clone(&begun.tape) as Arc<dyn HostReads>,
                begun.time,
            );
            finish(&state, &inner, plugin, check, begun, result)
        }
        .boxed()
    }

    /// The writer's gate, asked before every write: tells the wire whose
    /// write comes next (the plugin's outcome, or the host's own finalizer
    /// patch, never faulted), and holds everything but the crashed
    /// reconcile's own writes once a crash happened.
    fn check_action(&self, action: &Action, clusters: &[ClusterInfo]) -> Result<(), CallError> {
        let cluster = action_cluster(action);
        let mut s = self.state.lock();
        let own = s.pending.iter().position(|a| a == action);
        if let Some(i) = own {
            s.pending.remove(i);
        }
        self.board.set_host_writing(cluster, own.is_none());
        if s.crashed && own.is_none() {
            return Err(CallError::Plugin {
                plugin: self.inner.name().to_owned(),
                message: "the controller crashed (rekon plugin explore): nothing is written until it restarts".to_owned(),
                retryable: true,
            });
        }
        drop(s);
        Reconciler::check_action(&self.inner, action, clusters)
    }

    /// The host could not perform the outcome: noted against the
    /// reconcile (the writer's reason names the action and the object).
    fn performed(&self, _request: &Request, result: Result<(), &crate::writer::Failed>) {
        if let Err(failed) = result {
            let why = failed.to_string();
            let mut s = self.state.lock();
            let ordinal = s.ordinal;
            s.refused.push((ordinal, why));
        }
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

/// Fills each reconcile's writes from the wire's log (the plugin's own:
/// the host's finalizer patches are not a reconcile's writes) and what
/// the capability check refused it.
pub fn attach_writes(trace: &mut [Reconcile], board: &Switchboard, refused: &[(usize, String)]) {
    let mut by: BTreeMap<usize, Vec<WriteSummary>> = BTreeMap::new();
    for w in board.writes() {
        if w.injected || w.host {
            continue;
        }
        by.entry(w.reconcile).or_default().push(WriteSummary {
            method: w.method.to_string(),
            changed: w.changed,
            status: w.status,
            path: w.path.clone(),
            message: w.message.clone(),
        });
    }
    for r in trace {
        r.writes = by.remove(&r.ordinal).unwrap_or_default();
        r.changed_writes = r.writes.iter().filter(|w| w.changed).count();
        r.refused = refused
            .iter()
            .filter(|(n, _)| *n == r.ordinal)
            .map(|(_, why)| why.clone())
            .collect();
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
