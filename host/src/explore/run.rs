//! One run: a fresh world, the scenario's steps, the plan's fault where it
//! belongs, then faults stop and a final settle; what is left is judged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::action::Resource;
use crate::controller::Reconciler;
use crate::plugin::LoadedPlugin;

use super::plan::Fault;
use super::probe::{Nondeterminism, Probe, ProbeConfig, attach_writes};
use super::scenario::{Scenario, Step};
use super::trace::Reconcile;
use super::world::{World, WorldError};

/// How long nothing may change for a settle to end (virtual time; a
/// resync of every primary falls inside it).
const QUIET: Duration = Duration::from_secs(30);
/// A settle that has not ended after this much virtual time never will.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);
/// ... or after this many changing writes.
const MAX_CHANGES: usize = 400;
/// ... or after this much real time (a plugin busy without pause keeps the
/// virtual clock from moving).
const REAL_LIMIT: Duration = Duration::from_secs(15);
/// How often a settle looks (virtual time).
const TICK: Duration = Duration::from_secs(1);

/// A settle that never quiesced.
#[derive(Clone, Debug)]
pub struct Unsettled {
    /// The step (index from 0; the scenario's length for the final settle).
    pub step: usize,
    /// What kept changing.
    pub why: String,
}

/// What a run left.
#[derive(Debug)]
pub struct RunOutcome {
    /// Every reconcile, with its writes.
    pub trace: Vec<Reconcile>,
    /// Every object of the plugin's kinds per cluster, after the final settle.
    pub end_state: BTreeMap<String, Vec<Value>>,
    /// Creates and deletes per object.
    pub counts: BTreeMap<String, (u32, u32)>,
    /// A settle that never quiesced (the final one counts for the oracle).
    pub unsettled: Option<Unsettled>,
    /// Keys whose last reconcile failed, with the error.
    pub failing: BTreeMap<String, String>,
    /// Whether the fault happened.
    pub fired: bool,
    /// Decisions that changed on the same reads (reference only).
    pub nondeterministic: Vec<Nondeterminism>,
    /// Why the plan is one no real system can produce (the run was
    /// stopped there and is not judged).
    pub unreachable: Option<String>,
    /// The scenario's apply steps that landed on a terminating object (an
    /// update of the old object where another run created a new one): a
    /// run whose set differs from the reference's did not get the same
    /// inputs, so its end state is not compared with the reference's.
    pub applied_on_terminating: BTreeSet<usize>,
    /// The state after each settle of [`Runner::checkpoints`] that
    /// quiesced (fault-free runs only), with how many reconciles had run.
    pub snapshots: BTreeMap<usize, Snapshot>,
    /// Steps of [`Runner::refusable`] whose write the API server refused
    /// (422, 403), with its message: skipped, the run went on.
    pub refused: BTreeMap<usize, String>,
    /// The plugin's writes reviewed by its own admission (the reference
    /// of a plugin that admits; [`super::admitted`]).
    pub admitted: Vec<super::admitted::Reviewed>,
}

/// What the clusters held after one settle.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Every object of the plugin's kinds per cluster.
    pub state: BTreeMap<String, Vec<Value>>,
    /// Reconciles run until then.
    pub reconciles: usize,
}

/// Runs a plugin through a scenario.
pub struct Runner {
    /// The scenario.
    pub scenario: Scenario,
    /// The plugin.
    pub plugin: LoadedPlugin,
    /// CRDs to install (the scenario's, then the plugin's).
    pub crds: Vec<Value>,
    /// The kinds the plugin reads or writes.
    pub resources: Vec<Resource>,
    /// Settle steps after which a fault-free run keeps a [`Snapshot`]
    /// (the consistency and differential oracles compare them).
    pub checkpoints: BTreeSet<usize>,
    /// Whether a fault-free run checks that the plugin decides the same on
    /// the same reads (the reference does; a run of the fault-free oracles
    /// need not do it again).
    pub determinism: bool,
    /// Steps (indices) whose write the API server may refuse without
    /// failing the run: generated inputs, which the generator cannot
    /// always know to be acceptable (a CRD rule it cannot read). A refused
    /// one is skipped and reported in [`RunOutcome::refused`]; a refused
    /// hand-written step fails the run.
    pub refusable: BTreeSet<usize>,
}

impl Runner {
    /// One run with `fault` (none: the reference, checked for determinism).
    ///
    /// # Errors
    /// When a step cannot be performed (a scenario the API server refuses).
    pub async fn run(&self, fault: Option<&Fault>) -> Result<RunOutcome, WorldError> {
        let world = World::start(&self.scenario, &self.crds).await?;
        // The reference's writes are reviewed by the plugin's own
        // admission (observed only: the run is the same without it).
        if fault.is_none()
            && self.determinism
            && let Some(own) = super::admitted::OwnAdmission::new(&self.plugin)
        {
            world.board.set_admission(Arc::new(own));
        }
        let probe = Arc::new(Probe::new(
            self.plugin.clone(),
            ProbeConfig {
                fault: fault.cloned(),
                check_determinism: fault.is_none() && self.determinism,
            },
            world.board.clone(),
        ));
        let name = probe.name().to_owned();
        world.start_plugin(probe.clone());
        let mut unsettled = None;
        let mut fired = false;
        let mut applied_on_terminating = BTreeSet::new();
        let mut snapshots = BTreeMap::new();
        let mut refused = BTreeMap::new();
        let held = match fault {
            Some(Fault::Unobserved { from, to }) => Some((*from, *to)),
            _ => None,
        };
        for (i, step) in self.scenario.steps.iter().enumerate() {
            if held.is_some_and(|(from, _)| from == i) {
                world.manager.set_suspended(&name, true);
                fired = true;
            }
            if matches!(step, Step::Settle) {
                if held.is_some_and(|(from, to)| from < i && i < to) {
                    continue;
                }
                // A fault-free run that did not settle once is a finding
                // already, and no plan runs after it: the later settles
                // would each wait out their limits for nothing.
                if fault.is_none() && unsettled.is_some() {
                    continue;
                }
                let (down, unsynced) = match fault {
                    Some(Fault::ClusterDown { cluster, step }) if *step == i => {
                        (Some(cluster), None)
                    }
                    Some(Fault::Unsynced { cluster, step }) if *step == i => (None, Some(cluster)),
                    _ => (None, None),
                };
                if let Some(c) = down {
                    world.set_down(c, true);
                    fired = true;
                }
                if let Some(c) = unsynced {
                    world.set_unsynced(c, true);
                    fired = true;
                }
                match settle(&world, &probe).await {
                    Err(why) => {
                        unsettled.get_or_insert(Unsettled { step: i, why });
                    }
                    Ok(()) if fault.is_none() && self.checkpoints.contains(&i) => {
                        snapshots.insert(
                            i,
                            Snapshot {
                                state: world.snapshot(&self.resources).await,
                                reconciles: probe.trace().len(),
                            },
                        );
                    }
                    Ok(()) => {}
                }
                if let Some(c) = down {
                    world.set_down(c, false);
                }
                if let Some(c) = unsynced {
                    world.set_unsynced(c, false);
                }
            } else {
                if let Some(why) = held_reapply(&world, held, i, step).await {
                    let trace = probe.trace();
                    world.stop().await;
                    return Ok(RunOutcome {
                        trace,
                        end_state: BTreeMap::new(),
                        counts: BTreeMap::new(),
                        unsettled: None,
                        failing: BTreeMap::new(),
                        fired: false,
                        nondeterministic: Vec::new(),
                        unreachable: Some(why),
                        applied_on_terminating,
                        snapshots: BTreeMap::new(),
                        refused,
                        admitted: Vec::new(),
                    });
                }
                match world.perform(i, step, fault.is_none()).await {
                    Ok(true) => {
                        applied_on_terminating.insert(i);
                    }
                    Ok(false) => {}
                    Err(WorldError::Refused { message, .. }) if self.refusable.contains(&i) => {
                        refused.insert(i, message);
                    }
                    Err(e) => return Err(e),
                }
            }
            if held.is_some_and(|(_, to)| to == i) {
                // Let the engine's watches deliver the held steps first (on
                // the paused clock this sleep ends once nothing else can
                // run): the plan is about unseen intermediate states, not
                // a cache behind the last step, which `stale` covers.
                tokio::time::sleep(Duration::from_millis(100)).await;
                world.manager.set_suspended(&name, false);
            }
        }
        // Faults stop: every cluster up, nothing armed, the plugin free.
        world.board.clear();
        for c in world.sims.keys() {
            world.set_down(c, false);
        }
        world.manager.set_suspended(&name, false);
        let final_settle = if fault.is_none() && unsettled.is_some() {
            Ok(())
        } else {
            settle(&world, &probe).await
        };
        if let Err(why) = final_settle {
            unsettled = Some(Unsettled {
                step: self.scenario.steps.len(),
                why,
            });
        }
        let end_state = world.snapshot(&self.resources).await;
        let counts = world.board.counts();
        let mut trace = probe.trace();
        attach_writes(&mut trace, &world.board, &probe.refused());
        // A reconcile of a primary that is gone, failed on the object's
        // absence (a late or time-travelled write answered 404 NotFound):
        // nothing is left to converge for it, the host drops the key. Any
        // other failure stays (a write refused while it lived).
        let primary = &self.plugin.registration().primary;
        let failing = failing(&trace)
            .into_iter()
            .filter(|(key, why)| {
                primary_exists(&end_state, primary, key) || !why.contains("NotFound")
            })
            .collect();
        let fired = fired || probe.fired();
        let nondeterministic = probe.nondeterministic();
        let admitted = world
            .board
            .admission()
            .map(|a| a.reviewed())
            .unwrap_or_default();
        world.stop().await;
        Ok(RunOutcome {
            trace,
            end_state,
            counts,
            unsettled,
            failing,
            fired,
            nondeterministic,
            unreachable: None,
            applied_on_terminating,
            snapshots,
            refused,
            admitted,
        })
    }
}

/// Whether step `i`, inside the plugin's hold, applies an object that is
/// still terminating: a delete and a re-apply of the same name that the
/// hold merged into a write on the old object. Without the hold the
/// plugin would have released its finalizer and the apply made a new
/// object; no watch, however late, turns that into an update of the old
/// one, so the plan is not a state the system can reach.
async fn held_reapply(
    world: &World,
    held: Option<(usize, usize)>,
    i: usize,
    step: &Step,
) -> Option<String> {
    let (from, to) = held?;
    if i <= from || i > to {
        return None;
    }
    let Step::Apply { cluster, objects } = step else {
        return None;
    };
    for o in objects {
        if world.terminating(cluster, o).await {
            return Some(format!(
                "step {} re-applies {} {} while the hold keeps it terminating: a delete and a re-apply merged into a write no real watch produces",
                i + 1,
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            ));
        }
    }
    None
}

/// Whether the primary of `key` (`cluster/namespace/name`) is in `state`.
fn primary_exists(state: &BTreeMap<String, Vec<Value>>, primary: &Resource, key: &str) -> bool {
    let mut parts = key.splitn(3, '/');
    let (Some(cluster), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return true;
    };
    state.get(cluster).is_none_or(|objects| {
        objects.iter().any(|o| {
            o["kind"] == primary.kind.as_str()
                && o["metadata"]["name"] == name
                && o["metadata"]["namespace"].as_str().unwrap_or_default() == ns
        })
    })
}

/// Keys whose last reconcile failed: the plugin's call, an outcome the
/// host's writer could not perform (refused, invalid, or an API error
/// after its retries), or a write the API server refused for good (with
/// the writer's or the server's reason, the action and the object).
fn failing(trace: &[Reconcile]) -> BTreeMap<String, String> {
    let mut last: BTreeMap<&str, &Reconcile> = BTreeMap::new();
    for r in trace {
        last.insert(&r.at.key, r);
    }
    let mut out = BTreeMap::new();
    for (key, r) in last {
        let mut why: Vec<String> = Vec::new();
        if let Some(e) = &r.error {
            why.push(e.clone());
        }
        why.extend(r.refused.iter().map(|x| format!("not performed: {x}")));
        why.extend(r.writes.iter().filter(|w| w.refused()).map(|w| {
            format!(
                "the API server answered {} to {} {}{}",
                w.status,
                w.method,
                w.path,
                w.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )
        }));
        if !why.is_empty() {
            out.insert(key.to_owned(), why.join("; "));
        }
    }
    out
}

/// Runs until the plugin's queue is idle and nothing changed for
/// [`QUIET`] (virtual time); restarts the controller when a crash asks.
async fn settle(world: &World, probe: &Arc<Probe>) -> Result<(), String> {
    let name = probe.name().to_owned();
    let start = tokio::time::Instant::now();
    let real = std::time::Instant::now();
    let first = world.board.changes();
    let mut last = first;
    let mut quiet_since = start;
    loop {
        tokio::select! {
            () = tokio::time::sleep(TICK) => {}
            () = world.board.next_write() => {}
        }
        let stats = world.manager.queue_stats(&name);
        let running = stats.is_some_and(|q| q.running > 0);
        if !running && probe.take_restart() {
            world.restart_plugin(probe.clone()).await;
            quiet_since = tokio::time::Instant::now();
            continue;
        }
        let idle = stats.is_some_and(|q| q.ready == 0 && q.running == 0)
            && world.manager.pending_events(&name).unwrap_or(0) == 0;
        let changes = world.board.changes();
        let now = tokio::time::Instant::now();
        if changes != last || !idle {
            last = changes;
            quiet_since = now;
        } else if now - quiet_since >= QUIET {
            return Ok(());
        }
        let made = changes - first;
        if made > MAX_CHANGES || now - start > SETTLE_LIMIT || real.elapsed() > REAL_LIMIT {
            return Err(format!(
                "still changing after {made} changing write(s) in {} s (virtual): never reaches a fixed point",
                (now - start).as_secs()
            ));
        }
    }
}
