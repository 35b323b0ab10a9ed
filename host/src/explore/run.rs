//! One run: a fresh world, the scenario's steps, the plan's fault where it
//! belongs, then faults stop and a final settle; what is left is judged.

use std::collections::BTreeMap;
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
}

impl Runner {
    /// One run with `fault` (none: the reference, checked for determinism).
    ///
    /// # Errors
    /// When a step cannot be performed (a scenario the API server refuses).
    pub async fn run(&self, fault: Option<&Fault>) -> Result<RunOutcome, WorldError> {
        let world = World::start(&self.scenario, &self.crds).await?;
        let probe = Arc::new(Probe::new(
            self.plugin.clone(),
            ProbeConfig {
                fault: fault.cloned(),
                check_determinism: fault.is_none(),
            },
            world.board.clone(),
        ));
        let name = probe.name().to_owned();
        world.start_plugin(probe.clone());
        let mut unsettled = None;
        let mut fired = false;
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
                if let Err(why) = settle(&world, &probe).await {
                    unsettled.get_or_insert(Unsettled { step: i, why });
                }
                if let Some(c) = down {
                    world.set_down(c, false);
                }
                if let Some(c) = unsynced {
                    world.set_unsynced(c, false);
                }
            } else {
                world.perform(i, step, fault.is_none()).await?;
            }
            if held.is_some_and(|(_, to)| to == i) {
                world.manager.set_suspended(&name, false);
            }
        }
        // Faults stop: every cluster up, nothing armed, the plugin free.
        world.board.clear();
        for c in world.sims.keys() {
            world.set_down(c, false);
        }
        world.manager.set_suspended(&name, false);
        let final_settle = settle(&world, &probe).await;
        if let Err(why) = final_settle {
            unsettled = Some(Unsettled {
                step: self.scenario.steps.len(),
                why,
            });
        }
        let end_state = world.snapshot(&self.resources).await;
        let counts = world.board.counts();
        let mut trace = probe.trace();
        attach_writes(&mut trace, &world.board);
        let mut failing = BTreeMap::new();
        let mut last: BTreeMap<&str, &Reconcile> = BTreeMap::new();
        for r in &trace {
            last.insert(&r.at.key, r);
        }
        for (key, r) in last {
            if let Some(e) = &r.error {
                failing.insert(key.to_owned(), e.clone());
            }
        }
        let fired = fired || probe.fired();
        let nondeterministic = probe.nondeterministic();
        world.stop().await;
        Ok(RunOutcome {
            trace,
            end_state,
            counts,
            unsettled,
            failing,
            fired,
            nondeterministic,
        })
    }
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
