//! `rekon plugin explore`: runs a plugin through the faults that break
//! controllers and tells its author what went wrong, before production.
//!
//! The plugin runs through the host's own engine (mapping, queue,
//! read-your-writes, writer, finalizer protocol, capability checks) against
//! kube-sim clusters served in the same process ([`world`], [`wire`]), on a
//! paused tokio clock: requeue-after, backoff and retries advance virtual
//! time, so waiting costs nothing. A fault-free reference run comes first,
//! then one plan per fault ([`plan`]), each judged by the oracles
//! ([`oracle`]) against the reference; a finding keeps its plan (replay it
//! with `--replay`) and the reconciles around the fault as recorded cases
//! (`rekon.dev/case/v1`) that the SDKs' test kits read.
//!
//! It sits above `change/` (it writes that floor's case format and
//! replays on it), on the floor of `app/`, and it is the only module that
//! links kube-sim (`host/tests/layout.rs` says so).

pub mod html;
pub mod options;
pub mod oracle;
pub mod plan;
pub mod probe;
pub mod recording;
pub mod report;
pub mod run;
pub mod scenario;
pub mod stale;
pub mod trace;
pub mod wire;
pub mod world;

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::action::{Resource, describe_resource};
use crate::plugin::{LoadOptions, LoadedPlugin, PluginRuntime, RuntimeConfig};

pub use options::{ExploreError, ExploreOptions, Progress};
pub use plan::{Fault, Plan};
pub use report::{Finding, Report, StrategyCount};
pub use scenario::{Scenario, ScenarioError};

use run::{RunOutcome, Runner};

/// The kinds a registration reads or writes, once each.
fn resources_of(plugin: &LoadedPlugin) -> Vec<Resource> {
    let reg = plugin.registration();
    let mut out: Vec<Resource> = Vec::new();
    let all = std::iter::once(&reg.primary)
        .chain(reg.watches.iter().map(|w| &w.resource))
        .chain(reg.permissions.iter().map(|p| &p.resource));
    for r in all {
        if !out.iter().any(|o| o.group == r.group && o.kind == r.kind) {
            out.push(r.clone());
        }
    }
    out
}

fn load(opts: &ExploreOptions) -> Result<(Scenario, LoadedPlugin, Vec<Value>), ExploreError> {
    let scenario = Scenario::load(&opts.scenario)?;
    let settings: Option<Value> = match &opts.settings {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| ExploreError::Settings {
                path: path.clone(),
                message: e.to_string(),
            })?;
            Some(
                serde_json::from_str(&text).map_err(|e| ExploreError::Settings {
                    path: path.clone(),
                    message: format!("not JSON: {e}"),
                })?,
            )
        }
    };
    let load_err = |message: String| ExploreError::Load {
        path: opts.plugin.clone(),
        message,
    };
    let runtime = PluginRuntime::new(RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    })
    .map_err(|e| load_err(e.to_string()))?;
    let bytes = std::fs::read(&opts.plugin).map_err(|e| load_err(e.to_string()))?;
    let plugin = runtime
        .load_bytes_with(
            &bytes,
            &opts.plugin.display().to_string(),
            &LoadOptions::default().with_settings(settings.as_ref()),
        )
        .map_err(|e| load_err(e.to_string()))?;
    let mut crds = scenario.crds.clone();
    for crd in &plugin.registration().crds {
        let v: Value = serde_json::from_str(crd)
            .map_err(|e| load_err(format!("a CRD it declares is not JSON: {e}")))?;
        if !crds
            .iter()
            .any(|c| c["metadata"]["name"] == v["metadata"]["name"])
        {
            crds.push(v);
        }
    }
    Ok((scenario, plugin, crds))
}

/// Explores: the reference, then every plan within the budget.
///
/// # Errors
/// When the scenario, settings, plugin or plan file do not load, the
/// reference cannot perform the scenario, or the output cannot be written
/// (exit code 2). Findings are not errors: they are in the report.
pub fn explore(opts: &ExploreOptions) -> Result<Report, ExploreError> {
    let (scenario, plugin, crds) = load(opts)?;
    let replay: Option<Plan> = match &opts.replay {
        None => None,
        Some(path) => {
            let bad = |message: String| ExploreError::Plan {
                path: path.clone(),
                message,
            };
            let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
            let plan: Plan = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
            if plan.format != plan::PLAN_FORMAT {
                return Err(bad(format!(
                    "format {} is not {}",
                    plan.format,
                    plan::PLAN_FORMAT
                )));
            }
            Some(plan)
        }
    };
    let resources = resources_of(&plugin);
    let runner = Runner {
        scenario,
        plugin: plugin.clone(),
        crds,
        resources,
    };
    let started = Instant::now();
    let reference = paused_runtime()?
        .block_on(runner.run(None))
        .map_err(ExploreError::Reference)?;
    if std::env::var_os("REKON_EXPLORE_DEBUG").is_some() {
        for r in &reference.trace {
            eprintln!(
                "reference #{} {} ({:?}): {} read(s), {}",
                r.ordinal,
                r.at,
                r.phase,
                r.case.reads.len(),
                probe::outcome_line(&r.case)
            );
        }
    }
    let mut report = Report::new(&plugin, &runner.scenario, opts, &reference);
    report.kinds = runner.resources.iter().map(describe_resource).collect();
    let mut findings = report::reference_findings(&runner.scenario, &reference);
    let generated = plan::generate(
        &runner.scenario,
        &reference.trace,
        &plugin.registration().primary,
        opts.seed,
    );
    for (s, faults) in &generated.plans {
        report.strategy(s).generated = faults.len();
    }
    for (s, n) in &generated.pruned {
        report.strategy(s).pruned = *n;
    }
    let by_strategy = generated.plans;
    // A reference that never settles: every plan would say the same.
    let plans = match replay {
        Some(p) => vec![p],
        None if reference.unsettled.is_none() => plan::schedule(&by_strategy, opts.seed),
        None => Vec::new(),
    };
    let plans_started = Instant::now();
    let results = run_plans(opts, &runner, &reference, &plans, started)?;
    report.plans_elapsed = plans_started.elapsed();
    report.budget_exhausted = results.len() < plans.len() && opts.replay.is_none();
    for (plan, result) in plans.iter().zip(&results) {
        let Some(result) = result else { continue };
        match result {
            Err(e) => report.errors.push(format!("{}: {e}", plan.id)),
            Ok((fired, unreachable, finding, at)) => {
                report.plans_run += 1;
                let counts = report.strategy(plan.fault.strategy());
                counts.run += 1;
                if *unreachable {
                    counts.unreachable += 1;
                } else if !fired {
                    counts.not_reached += 1;
                }
                if let Some(f) = finding {
                    counts.findings += 1;
                    let first = report.time_to_first_finding.get_or_insert(*at);
                    *first = (*first).min(*at);
                    findings.push(f.clone());
                }
            }
        }
    }
    if !findings.is_empty() && report.time_to_first_finding.is_none() {
        report.time_to_first_finding = Some(started.elapsed());
    }
    report.elapsed = started.elapsed();
    report.findings = findings;
    report::write(&mut report, &opts.out)?;
    let page = opts.out.join("report.html");
    std::fs::write(&page, html::render(&report, &opts.out))
        .map_err(|source| ExploreError::Write { path: page, source })?;
    Ok(report)
}

/// A current-thread runtime on a paused clock: timers fire as soon as
/// nothing else can run (tokio's auto-advance), so requeue-after, backoff
/// and settle windows cost no real time. The clock needs tokio's
/// `test-util` feature, enabled for this alone.
fn paused_runtime() -> Result<tokio::runtime::Runtime, ExploreError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(ExploreError::Runtime)
}

/// What one plan's run gave: whether its fault happened, whether it was
/// stopped as unreachable, its finding, and when (since the start).
type PlanResult = Result<(bool, bool, Option<Finding>, Duration), world::WorldError>;

/// Runs `plans` on one worker per core (each its own paused runtime and
/// worlds), in order, until the budget is spent. Entry `i` is plan `i`'s
/// result, `None` for a plan the budget left out (the vector ends there).
fn run_plans(
    opts: &ExploreOptions,
    runner: &Runner,
    reference: &RunOutcome,
    plans: &[Plan],
    started: Instant,
) -> Result<Vec<Option<PlanResult>>, ExploreError> {
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(plans.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let found = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<PlanResult>>> =
        std::sync::Mutex::new((0..plans.len()).map(|_| None).collect());
    let plans_started = Instant::now();
    let debug = std::env::var_os("REKON_EXPLORE_DEBUG").is_some();
    let outcomes: Vec<Result<(), ExploreError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let rt = paused_runtime()?;
                    rt.block_on(async {
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            if i >= plans.len()
                                || (opts.replay.is_none() && plans_started.elapsed() > opts.budget)
                            {
                                return;
                            }
                            let plan = &plans[i];
                            let t = Instant::now();
                            let result = runner.run(Some(&plan.fault)).await.map(|outcome| {
                                let finding =
                                    report::judge(&runner.scenario, plan, reference, &outcome);
                                (
                                    outcome.fired,
                                    outcome.unreachable.is_some(),
                                    finding,
                                    started.elapsed(),
                                )
                            });
                            if debug {
                                eprintln!(
                                    "{} {:?} {}",
                                    plan.id,
                                    t.elapsed(),
                                    plan.fault.describe(&runner.scenario)
                                );
                            }
                            if matches!(result, Ok((_, _, Some(_), _))) {
                                found.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                            if let Ok(mut r) = results.lock() {
                                r[i] = Some(result);
                            }
                            let n = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                            if let Some(progress) = &opts.progress {
                                progress(
                                    n,
                                    plans.len(),
                                    found.load(std::sync::atomic::Ordering::SeqCst),
                                    plans_started.elapsed(),
                                );
                            }
                        }
                    });
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Ok(())))
            .collect()
    });
    for o in outcomes {
        o?;
    }
    let mut results = results.into_inner().unwrap_or_default();
    // Plans the budget left out end the vector; a gap (a plan started
    // late on one worker) keeps its place.
    while results.last().is_some_and(Option::is_none) {
        results.pop();
    }
    Ok(results)
}
