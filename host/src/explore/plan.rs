//! Plans: one fault each, derived from the reference run, deterministic
//! from their seed and written to a file that `--replay` runs again.

use std::collections::{BTreeMap, BTreeSet};

use rand::SeedableRng as _;
use rand::seq::SliceRandom as _;
use serde::{Deserialize, Serialize};

use crate::action::Resource;

use super::scenario::{Scenario, Step};
use super::stale::{Logged, View};
use super::trace::{At, Reconcile};
use super::wire::Injected;

/// The `format` of a plan file.
pub const PLAN_FORMAT: &str = "rekon.dev/explore-plan/v1";

/// The one fault of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "kebab-case")]
pub enum Fault {
    /// Only the first `after` actions of that reconcile are performed (no
    /// finalizer release), then the controller restarts from a fresh list.
    Crash {
        /// The reconcile.
        at: At,
        /// Actions performed before the crash.
        after: usize,
    },
    /// That reconcile reads what the key's previous reconcile read (a
    /// cache one reconcile behind: changes since, the plugin's own last
    /// writes among them, not yet delivered; an object recreated since
    /// still under its old UID).
    Stale {
        /// The reconcile.
        at: At,
        /// How many of the key's reconciles the cache is behind (1: it
        /// answers what the previous one read).
        #[serde(default = "one")]
        behind: usize,
    },
    /// Sieve's time travel: the controller restarted onto an older,
    /// consistent snapshot. That reconcile reads everything — its primary
    /// included — as the key's reconcile `behind` back read it, and gets
    /// the phase decided from that primary.
    TimeTravel {
        /// The reconcile.
        at: At,
        /// How many of the key's reconciles back the snapshot is.
        #[serde(default = "one")]
        behind: usize,
    },
    /// The plugin is held across steps `from..=to` (the settle between is
    /// skipped): it never sees the state in between.
    Unobserved {
        /// First held step (index from 0).
        from: usize,
        /// Last held step.
        to: usize,
    },
    /// Write number `write` (from 1) of that reconcile fails with `answer`.
    Transient {
        /// The reconcile.
        at: At,
        /// Which write.
        write: usize,
        /// The answer.
        answer: Injected,
    },
    /// `cluster` is unreachable during settle step `step`.
    ClusterDown {
        /// The cluster.
        cluster: String,
        /// The settle step (index from 0).
        step: usize,
    },
    /// `cluster`'s caches cannot list during settle step `step`.
    Unsynced {
        /// The cluster.
        cluster: String,
        /// The settle step.
        step: usize,
    },
    /// That reconcile's request is delivered again at once.
    Duplicate {
        /// The reconcile.
        at: At,
    },
    /// That reconcile is postponed (others go first).
    Delay {
        /// The reconcile.
        at: At,
    },
    /// Every list answers in an order drawn from `seed`.
    Shuffle {
        /// The order's seed.
        seed: u64,
    },
}

/// Every strategy, in report order.
pub const STRATEGIES: &[&str] = &[
    "crash",
    "stale",
    "time-travel",
    "unobserved",
    "transient",
    "cluster-down",
    "unsynced",
    "duplicate",
    "delay",
    "shuffle",
];

impl Fault {
    /// Its strategy (`crash`, `stale`, ...).
    #[must_use]
    pub fn strategy(&self) -> &'static str {
        match self {
            Self::Crash { .. } => "crash",
            Self::Stale { .. } => "stale",
            Self::TimeTravel { .. } => "time-travel",
            Self::Unobserved { .. } => "unobserved",
            Self::Transient { .. } => "transient",
            Self::ClusterDown { .. } => "cluster-down",
            Self::Unsynced { .. } => "unsynced",
            Self::Duplicate { .. } => "duplicate",
            Self::Delay { .. } => "delay",
            Self::Shuffle { .. } => "shuffle",
        }
    }

    /// The reconcile it targets, if it targets one.
    #[must_use]
    pub fn at(&self) -> Option<&At> {
        match self {
            Self::Crash { at, .. }
            | Self::Stale { at, .. }
            | Self::TimeTravel { at, .. }
            | Self::Transient { at, .. }
            | Self::Duplicate { at }
            | Self::Delay { at } => Some(at),
            _ => None,
        }
    }

    /// One line saying what it does.
    #[must_use]
    pub fn describe(&self, scenario: &Scenario) -> String {
        let step = |i: usize| {
            format!(
                "step {} ({})",
                i + 1,
                scenario.steps.get(i).map(Step::label).unwrap_or_default()
            )
        };
        match self {
            Self::Crash { at, after } => {
                format!(
                    "crash after action {after} of {at}; the controller restarts from a fresh list"
                )
            }
            Self::Stale { at, behind } => format!(
                "{at} reads a cache {behind} reconcile(s) behind (what reconcile #{} of {} read)",
                at.n.saturating_sub(*behind),
                at.key
            ),
            Self::TimeTravel { at, behind } => format!(
                "{at} runs on a controller restarted onto an older snapshot: everything, its primary and phase included, as reconcile #{} of {} saw it",
                at.n.saturating_sub(*behind),
                at.key
            ),
            Self::Unobserved { from, to } => format!(
                "the plugin is held from {} to {}: it never sees the state in between",
                step(*from),
                step(*to)
            ),
            Self::Transient { at, write, answer } => {
                format!("write {write} of {at} answers {}", answer.label())
            }
            Self::ClusterDown { cluster, step: s } => {
                format!("cluster {cluster} is unreachable during {}", step(*s))
            }
            Self::Unsynced { cluster, step: s } => {
                format!("cluster {cluster}'s caches cannot list during {}", step(*s))
            }
            Self::Duplicate { at } => format!("{at} is delivered twice"),
            Self::Delay { at } => format!("{at} is postponed behind the others"),
            Self::Shuffle { seed } => {
                format!("every list answers in a shuffled order (seed {seed})")
            }
        }
    }
}

fn one() -> usize {
    1
}

/// How many distinct earlier views of a key a stale read (or a time
/// travel) may serve, however many reconciles back they are.
const STALE_DEPTH: usize = 3;

/// A plan file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Always [`PLAN_FORMAT`].
    pub format: String,
    /// Its id within the exploration (`crash-3`).
    pub id: String,
    /// The seed of the exploration it came from.
    pub seed: u64,
    /// The fault.
    pub fault: Fault,
}

/// The objects a step writes: (cluster, apiVersion, kind, namespace, name).
fn targets(step: &Step) -> Vec<(String, String, String, String, String)> {
    let of = |cluster: &str, o: &serde_json::Value| {
        (
            cluster.to_owned(),
            o["apiVersion"].as_str().unwrap_or_default().to_owned(),
            o["kind"].as_str().unwrap_or_default().to_owned(),
            o["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    match step {
        Step::Apply { cluster, objects } | Step::ApplyStatus { cluster, objects } => {
            objects.iter().map(|o| of(cluster, o)).collect()
        }
        Step::Delete(t) => vec![(
            t.cluster.clone(),
            t.api_version.clone(),
            t.kind.clone(),
            t.namespace.clone().unwrap_or_default(),
            t.name.clone(),
        )],
        _ => Vec::new(),
    }
}

/// The objects a step applies (creates or updates) itself.
fn targets_applied(step: &Step) -> Vec<(String, String, String, String, String)> {
    match step {
        Step::Apply { .. } => targets(step),
        _ => Vec::new(),
    }
}

/// Whether a reconcile's outcome holds a destructive or creating write (a
/// stale read before it can do harm).
fn consequential(r: &Reconcile) -> bool {
    r.finalized
        || r.actions
            .iter()
            .any(|a| matches!(a.verb.as_str(), "delete" | "create" | "apply" | "patch"))
}

/// The plans of an exploration, and how many were left out per strategy
/// because they would give the same reads as another.
#[derive(Clone, Debug, Default)]
pub struct Generated {
    /// Plans per strategy.
    pub plans: BTreeMap<&'static str, Vec<Fault>>,
    /// Plans pruned per strategy.
    pub pruned: BTreeMap<&'static str, usize>,
    /// Plans [`schedule`] runs first within their strategy: a cluster out
    /// of reach, or its caches unsynced, while a delete is cleaned up.
    pub first: Vec<Fault>,
}

/// The plans the reference run makes possible, per strategy, pruned by
/// causality: only reconciles that wrote something that changed the
/// cluster (for stale reads: only views that answer the reconcile's reads
/// otherwise than the cache did and than every other view planned, built
/// as [`View::build`] does at run time: informers that never go back, the
/// primary's current), only settles that follow a change.
#[must_use]
pub fn generate(
    scenario: &Scenario,
    reference: &[Reconcile],
    primary: &Resource,
    seed: u64,
) -> Generated {
    // What every earlier reconcile read: a stale view is built from it.
    let mut log: Vec<Logged> = Vec::new();
    let mut out: BTreeMap<&'static str, Vec<Fault>> = BTreeMap::new();
    let mut pruned: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut add = |f: Fault| out.entry(f.strategy()).or_default().push(f);
    let mut seen_dup: BTreeSet<String> = BTreeSet::new();
    let mut first = Vec::new();
    for r in reference {
        let writes: Vec<_> = r.actions.iter().filter(|a| a.verb != "event").collect();
        // Crash: between any two writes (what is performed before the
        // crash must have changed something, or the crash is the same as
        // none at all).
        if writes.len() >= 2 && r.changed_writes > 0 {
            for k in 1..writes.len() {
                add(Fault::Crash {
                    at: r.at.clone(),
                    after: k,
                });
            }
        }
        if consequential(r) {
            let current = &r.case.reads;
            let mut seen = vec![current.clone()];
            let primary = (r.case.request.cluster.as_str(), primary);
            // Up to STALE_DEPTH distinct views, however far back (a resync
            // repeats the same reads).
            for behind in 1.. {
                if seen.len() > STALE_DEPTH {
                    break;
                }
                let Some(view) = View::build(&log, &r.at.key, behind, primary) else {
                    break;
                };
                let answers = view.answers(current);
                if seen.contains(&answers) {
                    *pruned.entry("stale").or_default() += 1;
                    continue;
                }
                seen.push(answers);
                add(Fault::Stale {
                    at: r.at.clone(),
                    behind,
                });
            }
            // Time travel: whole earlier snapshots of the key, the phase
            // with them.
            let mut seen = vec![(r.phase, current.clone())];
            for behind in 1.. {
                if seen.len() > STALE_DEPTH {
                    break;
                }
                let Some((view, phase)) = View::snapshot(&log, &r.at.key, behind) else {
                    break;
                };
                let answers = (phase, view.answers(current));
                if seen.contains(&answers) {
                    *pruned.entry("time-travel").or_default() += 1;
                    continue;
                }
                seen.push(answers);
                add(Fault::TimeTravel {
                    at: r.at.clone(),
                    behind,
                });
            }
        }
        log.push(Logged {
            ordinal: r.ordinal,
            key: r.at.key.clone(),
            phase: r.phase,
            reads: r.case.reads.clone(),
        });
        for (i, w) in r.writes.iter().enumerate() {
            if !w.changed {
                continue;
            }
            let answers: &[Injected] = match w.method.as_str() {
                "POST" => &[
                    Injected::AlreadyExists,
                    Injected::ServerError,
                    Injected::Timeout,
                ],
                "DELETE" => &[Injected::NotFound, Injected::ServerError, Injected::Timeout],
                _ => &[Injected::Conflict, Injected::ServerError, Injected::Timeout],
            };
            for answer in answers {
                add(Fault::Transient {
                    at: r.at.clone(),
                    write: i + 1,
                    answer: *answer,
                });
            }
        }
        // Duplicate and delay: the first reconcile of each key that changed
        // something (later ones repeat the same delivery).
        if r.changed_writes > 0 && seen_dup.insert(r.at.key.clone()) {
            add(Fault::Duplicate { at: r.at.clone() });
            add(Fault::Delay { at: r.at.clone() });
        }
    }
    let steps = &scenario.steps;
    for (s, step) in steps.iter().enumerate() {
        if !matches!(step, Step::Settle) {
            continue;
        }
        let before = steps[..s].iter().rposition(Step::mutates);
        let after = steps[s + 1..]
            .iter()
            .position(Step::mutates)
            .map(|p| p + s + 1);
        if let (Some(from), Some(to)) = (before, after) {
            // Only when the later step acts on what the scenario itself
            // made before: a step on an object the plugin creates (a Job
            // marked complete) depends on the plugin having run.
            if targets(&steps[to]).iter().all(|t| {
                steps[..=from]
                    .iter()
                    .any(|s| targets_applied(s).contains(t))
            }) {
                add(Fault::Unobserved { from, to });
            }
        }
        if let Some(b) = before {
            // The settle after a delete is where a cleanup runs and a
            // finalizer is released for good: a cluster out of reach then
            // is the fault that cannot heal later (an object released is
            // gone, whatever comes back), and there are few such settles
            // against one per change.
            let cleanup = matches!(steps[b], Step::Delete(_));
            for cluster in scenario.clusters.iter().skip(1) {
                let faults = [
                    Fault::ClusterDown {
                        cluster: cluster.clone(),
                        step: s,
                    },
                    Fault::Unsynced {
                        cluster: cluster.clone(),
                        step: s,
                    },
                ];
                for f in faults {
                    if cleanup {
                        first.push(f.clone());
                    }
                    add(f);
                }
            }
        }
    }
    let lists = reference.iter().any(|r| r.lists > 0);
    if lists {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for _ in 0..3 {
            add(Fault::Shuffle {
                seed: rand::Rng::random(&mut rng),
            });
        }
    }
    Generated {
        plans: out,
        pruned,
        first,
    }
}

/// The order plans run in: round-robin across strategies (so a short
/// budget tries every strategy), each strategy's plans in an order drawn
/// from `seed`, those in `first` ([`Generated::first`]) ahead of the
/// others (in the same drawn order).
#[must_use]
pub fn schedule(
    by_strategy: &BTreeMap<&'static str, Vec<Fault>>,
    first: &[Fault],
    seed: u64,
) -> Vec<Plan> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut queues: Vec<(&'static str, Vec<Fault>)> = STRATEGIES
        .iter()
        .filter_map(|s| by_strategy.get(s).map(|f| (*s, f.clone())))
        .collect();
    for (_, q) in &mut queues {
        q.shuffle(&mut rng);
        // Stable: the drawn order within each part.
        q.sort_by_key(|f| !first.contains(f));
        q.reverse();
    }
    let mut out = Vec::new();
    let mut counters: BTreeMap<&'static str, usize> = BTreeMap::new();
    loop {
        let mut any = false;
        for (strategy, q) in &mut queues {
            if let Some(fault) = q.pop() {
                any = true;
                let n = counters.entry(strategy).or_default();
                *n += 1;
                out.push(Plan {
                    format: PLAN_FORMAT.to_owned(),
                    id: format!("{strategy}-{n}"),
                    seed,
                    fault,
                });
            }
        }
        if !any {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::*;
    use crate::action::Scope;
    use crate::explore::scenario::Target;

    fn widget() -> Resource {
        Resource {
            group: "zoo.rekon.dev".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            scope: Scope::Namespaced,
        }
    }

    #[test]
    fn a_cluster_out_of_reach_during_a_cleanup_runs_first() {
        let object = json!({"apiVersion": "zoo.rekon.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"}, "spec": {}});
        let apply = |n: u64| {
            let mut o = object.clone();
            o["spec"]["n"] = json!(n);
            Step::Apply {
                cluster: "main".into(),
                objects: vec![o],
            }
        };
        let mut steps = Vec::new();
        for n in 0..8 {
            steps.extend([apply(n), Step::Settle]);
        }
        steps.extend([
            Step::Delete(Target {
                cluster: "main".into(),
                api_version: "zoo.rekon.dev/v1".into(),
                kind: "Widget".into(),
                namespace: Some("default".into()),
                name: "w".into(),
            }),
            Step::Settle,
        ]);
        let cleanup = steps.len() - 1;
        let scenario = Scenario {
            path: PathBuf::new(),
            clusters: vec!["main".into(), "edge".into()],
            crds: Vec::new(),
            steps,
        };
        let generated = generate(&scenario, &[], &widget(), 1);
        assert_eq!(generated.plans["cluster-down"].len(), 9);
        assert_eq!(
            generated.first,
            [
                Fault::ClusterDown {
                    cluster: "edge".into(),
                    step: cleanup
                },
                Fault::Unsynced {
                    cluster: "edge".into(),
                    step: cleanup
                },
            ]
        );
        for seed in 1..20 {
            let plans = schedule(&generated.plans, &generated.first, seed);
            assert_eq!(plans.len(), 2 * 9 + scenario_unobserved(&generated));
            for strategy in ["cluster-down", "unsynced"] {
                let first = plans
                    .iter()
                    .find(|p| p.fault.strategy() == strategy)
                    .expect("planned");
                assert!(generated.first.contains(&first.fault), "seed {seed}");
            }
        }
        // Without a preference, the drawn order: some seed puts another
        // settle first.
        assert!((1..20).any(|seed| {
            let plans = schedule(&generated.plans, &[], seed);
            plans
                .iter()
                .find(|p| p.fault.strategy() == "cluster-down")
                .is_some_and(|p| !generated.first.contains(&p.fault))
        }));
    }

    fn scenario_unobserved(g: &Generated) -> usize {
        g.plans.get("unobserved").map_or(0, Vec::len)
    }
}
