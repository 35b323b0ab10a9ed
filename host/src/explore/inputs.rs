//! Acto's two fault-free oracles (SOSP '23): the inputs a scenario has
//! given at a settle, applied at once to fresh clusters, must reach the
//! state the scenario's own sequence reached.
//!
//! - **consistency**: after the final settle — the objects as the scenario
//!   left them (its last applies, its deletes done, every cluster up)
//!   applied to fresh clusters reach the same end state (for a scenario
//!   that ends deleting its object for good: the last settle while it
//!   lived). A status that
//!   reports a spec its children never got, or a child made once and never
//!   updated, shows here.
//! - **differential**: after every settle reached by a sequence of changes
//!   (an object applied more than once, or deleted and made again) — the
//!   state after the sequence ending in spec S equals S applied alone. A
//!   plugin that only ever grows a field, or caches "already done" keyed
//!   by a spec value it has seen before, fails it on a rollback.
//!
//! Both compare end states exactly as the end-state oracle does
//! ([`super::oracle::end_state_diff`]: server-set fields, times and the
//! server's random names masked), and leave out what differs between two
//! histories by design ([`super::oracle::without_history`]: what echoes
//! the generation, the order of finalizers). States after a delete whose
//! object is not applied again, and states after a re-apply that landed on
//! a still-terminating object, are not judged: a fresh run has no history
//! to leave anything behind. They need no fault plan;
//! each distinct set of inputs costs one fresh run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value;

use super::generate::{key_of, object_key};
use super::oracle::{end_state_diff, without_history};
use super::report::Finding;
use super::run::{RunOutcome, Runner};
use super::scenario::{Scenario, Step};

/// The consistency oracle's name.
pub const CONSISTENCY: &str = "consistency";
/// The differential oracle's name.
pub const DIFFERENTIAL: &str = "differential";

/// A settle whose state a fresh run of the same inputs must reach.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// The settle step (index from 0); the scenario's length for the
    /// runner's final settle.
    pub step: usize,
    /// The oracle that judges it.
    pub oracle: &'static str,
    /// The inputs then: the objects applied (their last version), created
    /// in the order and the settles the scenario first made them in (what
    /// was made between two settles is made together, then a settle), and
    /// the statuses applied.
    pub inputs: Vec<Step>,
}

impl Checkpoint {
    /// Where it is, for a finding: `after step 7 (settle)`.
    #[must_use]
    pub fn describe(&self, scenario: &Scenario) -> String {
        if self.step >= scenario.steps.len() {
            return "after the final settle".to_owned();
        }
        let change = scenario.steps[..self.step]
            .iter()
            .enumerate()
            .rev()
            .find(|(_, s)| s.mutates() || matches!(s, Step::ClusterUp(_)))
            .map(|(i, s)| format!(" (after step {}: {})", i + 1, s.label()))
            .unwrap_or_default();
        format!("at step {}{change}", self.step + 1)
    }
}

/// The checkpoints of `scenario`: every settle after a change (an apply, a
/// delete, a cluster back up) with every cluster up — differential where
/// the state came from a sequence of changes — and the final settle
/// (consistency).
#[must_use]
pub fn checkpoints(scenario: &Scenario) -> Vec<Checkpoint> {
    let mut objects: Vec<(String, String, Value, usize)> = Vec::new();
    let mut statuses: Vec<(String, String, Value, usize)> = Vec::new();
    let mut settles = 0usize;
    let mut down: BTreeSet<&str> = BTreeSet::new();
    // Objects deleted and not applied again: what a delete leaves behind
    // (children without an owner reference, a finalizer the plugin holds)
    // is the business of the end-state oracle under faults; a fresh run
    // has no history to leave anything, so such a state is not judged.
    let mut gone: BTreeSet<String> = BTreeSet::new();
    let mut changed = false;
    let mut mutations = 0usize;
    let mut out = Vec::new();
    // Per object: (key, cluster, last version, the settles before it was
    // made).
    let inputs = |objects: &[(String, String, Value, usize)],
                  statuses: &[(String, String, Value, usize)]| {
        let mut epochs: Vec<usize> = objects.iter().map(|o| o.3).collect();
        epochs.sort_unstable();
        epochs.dedup();
        let mut steps = Vec::new();
        for (n, epoch) in epochs.iter().enumerate() {
            if n > 0 {
                steps.push(Step::Settle);
            }
            for c in &scenario.clusters {
                let applied: Vec<Value> = objects
                    .iter()
                    .filter(|(_, cl, _, e)| cl == c && e == epoch)
                    .map(|(_, _, o, _)| o.clone())
                    .collect();
                if !applied.is_empty() {
                    steps.push(Step::Apply {
                        cluster: c.clone(),
                        objects: applied,
                    });
                }
            }
        }
        for c in &scenario.clusters {
            let status: Vec<Value> = statuses
                .iter()
                .filter(|(_, cl, _, _)| cl == c)
                .map(|(_, _, o, _)| o.clone())
                .collect();
            if !status.is_empty() {
                steps.push(Step::ApplyStatus {
                    cluster: c.clone(),
                    objects: status,
                });
            }
        }
        steps
    };
    let upsert =
        |list: &mut Vec<(String, String, Value, usize)>, cluster: &str, o: &Value, epoch: usize| {
            let key = key_of(cluster, o);
            match list.iter_mut().find(|(k, _, _, _)| *k == key) {
                Some(entry) => entry.2 = o.clone(),
                None => list.push((key, cluster.to_owned(), o.clone(), epoch)),
            }
        };
    for (i, step) in scenario.steps.iter().enumerate() {
        match step {
            Step::Apply {
                cluster,
                objects: list,
            } => {
                for o in list {
                    gone.remove(&key_of(cluster, o));
                    upsert(&mut objects, cluster, o, settles);
                    mutations += 1;
                }
                changed = true;
            }
            Step::ApplyStatus {
                cluster,
                objects: list,
            } => {
                for o in list {
                    upsert(&mut statuses, cluster, o, settles);
                    mutations += 1;
                }
                changed = true;
            }
            Step::Delete(t) => {
                let key = object_key(
                    &t.cluster,
                    &t.api_version,
                    &t.kind,
                    t.namespace.as_deref(),
                    &t.name,
                );
                objects.retain(|(k, _, _, _)| *k != key);
                statuses.retain(|(k, _, _, _)| *k != key);
                gone.insert(key);
                mutations += 1;
                changed = true;
            }
            Step::ClusterDown(c) => {
                down.insert(c);
            }
            Step::ClusterUp(c) => {
                down.remove(c.as_str());
                changed = true;
            }
            Step::Settle => {
                settles += 1;
                // A sequence: more changes than the objects there now.
                let sequence = mutations > objects.len() + statuses.len();
                if changed && down.is_empty() && sequence && gone.is_empty() {
                    out.push(Checkpoint {
                        step: i,
                        oracle: DIFFERENTIAL,
                        inputs: inputs(&objects, &statuses),
                    });
                }
                if down.is_empty() {
                    changed = false;
                }
            }
        }
    }
    // The final settle: the last settle's state, unless nothing changed
    // since a differential checkpoint (the same comparison again).
    if let Some(last) = out.last()
        && !changed
        && last.step + 1 == scenario.steps.len()
    {
        out.pop();
    }
    if (!objects.is_empty() || !statuses.is_empty()) && gone.is_empty() {
        out.push(Checkpoint {
            step: scenario.steps.len(),
            oracle: CONSISTENCY,
            inputs: inputs(&objects, &statuses),
        });
    } else if let Some(last) = out.last_mut() {
        // A scenario that ends deleting: its final inputs are those of the
        // last state judged, while its objects lived.
        last.oracle = CONSISTENCY;
    }
    out
}

/// What the two oracles checked and found.
#[derive(Debug, Default)]
pub struct Judged {
    /// Checkpoints judged per oracle.
    pub checked: BTreeMap<&'static str, usize>,
    /// At most one finding per oracle: its first failing checkpoint (the
    /// others named in its text).
    pub findings: Vec<Finding>,
    /// Fresh runs that could not be made (the API server refused the
    /// inputs at once, or they never settled).
    pub errors: Vec<String>,
}

/// Runs each distinct set of inputs of `points` on fresh clusters (on
/// `workers` threads) and compares with `reference`'s state there.
#[must_use]
pub fn judge(
    runner: &Runner,
    reference: &RunOutcome,
    points: &[Checkpoint],
    fresh_run: impl Fn(&Runner) -> Result<RunOutcome, String> + Sync,
) -> Judged {
    let mut judged = Judged::default();
    if reference.unsettled.is_some() {
        // Never settles: the fixed-point finding says it; there is no
        // state to compare.
        return judged;
    }
    // One fresh run per distinct inputs.
    let mut distinct: Vec<String> = Vec::new();
    for p in points {
        let k = format!("{:?}", p.inputs);
        if !distinct.contains(&k) {
            distinct.push(k);
        }
    }
    let runners: Vec<Runner> = distinct
        .iter()
        .map(|k| {
            let inputs = points
                .iter()
                .find(|p| format!("{:?}", p.inputs) == *k)
                .map(|p| p.inputs.clone())
                .unwrap_or_default();
            Runner {
                scenario: Scenario {
                    path: runner.scenario.path.clone(),
                    clusters: runner.scenario.clusters.clone(),
                    crds: runner.scenario.crds.clone(),
                    steps: inputs,
                },
                plugin: runner.plugin.clone(),
                crds: runner.crds.clone(),
                resources: runner.resources.clone(),
                checkpoints: BTreeSet::new(),
                determinism: false,
                // The inputs are the versions the scenario's run accepted.
                refusable: BTreeSet::new(),
            }
        })
        .collect();
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(runners.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: parking_lot::Mutex<BTreeMap<usize, Result<RunOutcome, String>>> =
        parking_lot::Mutex::new(BTreeMap::new());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(r) = runners.get(i) else { return };
                    let result = fresh_run(r);
                    results.lock().insert(i, result);
                }
            });
        }
    });
    let results = results.into_inner();
    // Per oracle: the failing checkpoints, the first with its diff.
    let mut failing: BTreeMap<&'static str, Vec<(&Checkpoint, String)>> = BTreeMap::new();
    for p in points {
        // After a re-apply that landed on a still-terminating object (a
        // finalizer held across the delete) the reference's inputs do not
        // mean what they say: nothing after it is judged.
        if reference.applied_on_terminating.iter().any(|s| *s < p.step) {
            continue;
        }
        let state = if p.step >= runner.scenario.steps.len() {
            Some(&reference.end_state)
        } else {
            reference.snapshots.get(&p.step).map(|s| &s.state)
        };
        let Some(state) = state else { continue };
        let k = format!("{:?}", p.inputs);
        let Some(i) = distinct.iter().position(|d| *d == k) else {
            continue;
        };
        let fresh = match results.get(&i) {
            Some(Ok(f)) if f.unsettled.is_none() => f,
            Some(Ok(f)) => {
                let why = f
                    .unsettled
                    .as_ref()
                    .map(|u| u.why.clone())
                    .unwrap_or_default();
                judged.errors.push(format!(
                    "{} {}: the inputs applied at once never settle: {why}",
                    p.oracle,
                    p.describe(&runner.scenario)
                ));
                continue;
            }
            Some(Err(e)) => {
                judged.errors.push(format!(
                    "{} {}: {e}",
                    p.oracle,
                    p.describe(&runner.scenario)
                ));
                continue;
            }
            None => continue,
        };
        *judged.checked.entry(p.oracle).or_default() += 1;
        let diff = end_state_diff(&without_history(state), &without_history(&fresh.end_state));
        if !diff.is_empty() {
            failing.entry(p.oracle).or_default().push((p, diff));
        }
    }
    for (oracle, fails) in failing {
        let (first, diff) = &fails[0];
        let mut text = format!(
            "{}: the state the scenario reached (-) and the same inputs applied at once to fresh clusters (+):\n{diff}",
            first.describe(&runner.scenario)
        );
        if fails.len() > 1 {
            let _ = writeln!(
                text,
                "\nthe same oracle fails {} more time(s): {}",
                fails.len() - 1,
                fails[1..]
                    .iter()
                    .map(|(p, _)| p.describe(&runner.scenario))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        let upto = if first.step >= runner.scenario.steps.len() {
            reference.trace.len()
        } else {
            reference
                .snapshots
                .get(&first.step)
                .map_or(reference.trace.len(), |s| s.reconciles)
        };
        let what = if oracle == CONSISTENCY {
            "the final inputs applied at once to fresh clusters reach another state"
        } else {
            "a sequence of changes reaches another state than its last spec applied alone"
        };
        judged.findings.push(Finding {
            plan: None,
            fault: format!("no fault: {what} ({})", first.describe(&runner.scenario)),
            oracle,
            also: Vec::new(),
            reconcile: None,
            diff: text,
            cases: {
                let mut wrote: Vec<_> = reference.trace[..upto.min(reference.trace.len())]
                    .iter()
                    .filter(|r| !r.actions.is_empty() || r.error.is_some())
                    .map(|r| r.case.clone())
                    .collect();
                wrote.drain(..wrote.len().saturating_sub(5));
                wrote
            },
            dir: None,
        });
    }
    judged
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn checkpoints_follow_sequences_and_the_end() {
        let s = Scenario::parse(
            "clusters: [main, edge]\nsteps:\n\
             - apply: {cluster: main, object: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: d}, data: {v: '1'}}}\n\
             - settle: {}\n\
             - apply: {cluster: main, object: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: d}, data: {v: '2'}}}\n\
             - settle: {}\n\
             - cluster-down: {cluster: edge}\n\
             - settle: {}\n\
             - cluster-up: {cluster: edge}\n\
             - settle: {}\n\
             - delete: {cluster: main, apiVersion: v1, kind: ConfigMap, namespace: d, name: a}\n\
             - settle: {}\n\
             - apply: {cluster: main, object: {apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: d}}}\n",
            Path::new("."),
        )
        .unwrap();
        let points = checkpoints(&s);
        let at: Vec<(usize, &str)> = points.iter().map(|p| (p.step, p.oracle)).collect();
        // Not the first settle (one apply, no sequence), not while edge is
        // down, not after the delete (the deleted object is not applied
        // again); the scenario ends with `a` deleted and gone: its last
        // judged state is the consistency oracle's.
        assert_eq!(at, [(3, DIFFERENTIAL), (7, CONSISTENCY)]);
        let Step::Apply { objects, .. } = &points[0].inputs[0] else {
            panic!("{:?}", points[0].inputs)
        };
        assert_eq!(objects[0]["data"]["v"], "2", "the last version");
        // Applied again: judged, the final settle by consistency.
        let mut s = s;
        s.steps.push(Step::Apply {
            cluster: "main".into(),
            objects: vec![serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "d"}, "data": {"v": "3"}})],
        });
        let points = checkpoints(&s);
        let last = points.last().unwrap();
        assert_eq!((last.step, last.oracle), (12, CONSISTENCY));
        // `b` and `a`, made again between the same two settles: together.
        let names: Vec<String> = last
            .inputs
            .iter()
            .map(|st| match st {
                Step::Apply { objects, .. } => objects
                    .iter()
                    .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.label(),
            })
            .collect();
        assert_eq!(names, ["b,a"], "in the order last made");
        // Objects made between other settles are made so again.
        let s = Scenario::parse(
            "clusters: [main]\nsteps:\n\
             - apply: {cluster: main, object: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: d}, data: {v: '1'}}}\n\
             - settle: {}\n\
             - apply: {cluster: main, object: {apiVersion: v1, kind: ConfigMap, metadata: {name: y, namespace: d}}}\n\
             - settle: {}\n\
             - apply: {cluster: main, object: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: d}, data: {v: '2'}}}\n\
             - settle: {}\n",
            Path::new("."),
        )
        .unwrap();
        let points = checkpoints(&s);
        let last = points.last().unwrap();
        let shape: Vec<String> = last.inputs.iter().map(Step::label).collect();
        assert_eq!(
            shape,
            [
                "apply main (ConfigMap x)",
                "settle",
                "apply main (ConfigMap y)"
            ]
        );
        let Step::Apply { objects, .. } = &last.inputs[0] else {
            panic!()
        };
        assert_eq!(objects[0]["data"]["v"], "2");
    }
}
