//! Findings and the report: what failed (the oracle), where (the plan,
//! the step, the reconcile), the diff, and a reproducer to keep.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::change::record::Case;
use crate::plugin::LoadedPlugin;

use super::options::{ExploreError, ExploreOptions};
use super::oracle::{counts_diff, end_state_diff};
use super::plan::{Fault, Plan, STRATEGIES};
use super::probe::outcome_line;
use super::run::RunOutcome;
use super::scenario::Scenario;
use super::trace::Reconcile;

/// Plans of one strategy.
#[derive(Clone, Debug, Default)]
pub struct StrategyCount {
    /// Generated from the reference (after pruning).
    pub generated: usize,
    /// Run within the budget.
    pub run: usize,
    /// Runs where the fault never happened (the run went elsewhere, or a
    /// stale view answered nothing the cache would not have).
    pub not_reached: usize,
    /// Plans left out before running because they would give the same
    /// reads as another (a stale view equal to one already planned, or to
    /// the current cache once informers may not go back).
    pub pruned: usize,
    /// Runs stopped because the plan turned out to be a state no real
    /// system reaches (a held delete and re-apply merged into a write on
    /// the terminating object); never judged.
    pub unreachable: usize,
    /// Findings.
    pub findings: usize,
}

/// Checks of one fault-free oracle (consistency, differential).
#[derive(Clone, Debug, Default)]
pub struct OracleCount {
    /// Checkpoints compared with a fresh run of their inputs.
    pub checked: usize,
    /// Findings (one per oracle at most; it names its other failing
    /// checkpoints).
    pub findings: usize,
}

/// One finding.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The plan (None: found in the reference run).
    pub plan: Option<Plan>,
    /// What the fault did.
    pub fault: String,
    /// The oracle that failed first: `end-state`, `counts`, `fixed-point`,
    /// `determinism`, `consistency`, `differential`.
    pub oracle: &'static str,
    /// Other oracles that failed too.
    pub also: Vec<&'static str>,
    /// The reconcile where the fault was injected, if one.
    pub reconcile: Option<String>,
    /// The diff (state, counts, or outcomes).
    pub diff: String,
    /// Reconciles to keep as recorded cases.
    pub cases: Vec<Case>,
    /// Where it was written.
    pub dir: Option<PathBuf>,
}

/// What an exploration found.
#[derive(Clone, Debug)]
pub struct Report {
    /// Plugin name.
    pub plugin: String,
    /// Its version.
    pub version: String,
    /// The scenario file.
    pub scenario: PathBuf,
    /// The seed.
    pub seed: u64,
    /// The scenario's steps (labels), in order.
    pub steps: Vec<String>,
    /// How many of them were generated (the last ones; all of them
    /// without `--scenario`).
    pub generated_steps: usize,
    /// Generated inputs the API server refused, left out of every run
    /// (`step: refused by the API server: message`).
    pub refused_inputs: Vec<String>,
    /// The fault-free oracles' checks.
    pub oracles: BTreeMap<String, OracleCount>,
    /// Reconciles in the reference run.
    pub reference_reconciles: usize,
    /// The kinds compared.
    pub kinds: Vec<String>,
    /// Per strategy.
    pub strategies: BTreeMap<String, StrategyCount>,
    /// Plans run.
    pub plans_run: usize,
    /// Whether the budget ended the run before every plan ran.
    pub budget_exhausted: bool,
    /// Plans that could not run.
    pub errors: Vec<String>,
    /// Findings.
    pub findings: Vec<Finding>,
    /// From the start (reference included) to the first finding.
    pub time_to_first_finding: Option<Duration>,
    /// Time spent on plans.
    pub plans_elapsed: Duration,
    /// Time in all.
    pub elapsed: Duration,
    /// Where the report was written.
    pub out: PathBuf,
}

impl Report {
    pub(super) fn new(
        plugin: &LoadedPlugin,
        scenario: &Scenario,
        opts: &ExploreOptions,
        reference: &RunOutcome,
    ) -> Self {
        Self {
            plugin: plugin.name().to_owned(),
            version: plugin.version().to_owned(),
            scenario: scenario.path.clone(),
            seed: opts.seed,
            steps: scenario
                .steps
                .iter()
                .map(super::scenario::Step::label)
                .collect(),
            generated_steps: 0,
            refused_inputs: Vec::new(),
            oracles: [super::inputs::CONSISTENCY, super::inputs::DIFFERENTIAL]
                .iter()
                .map(|o| ((*o).to_owned(), OracleCount::default()))
                .collect(),
            reference_reconciles: reference.trace.len(),
            kinds: Vec::new(),
            strategies: STRATEGIES
                .iter()
                .map(|s| ((*s).to_owned(), StrategyCount::default()))
                .collect(),
            plans_run: 0,
            budget_exhausted: false,
            errors: Vec::new(),
            findings: Vec::new(),
            time_to_first_finding: None,
            plans_elapsed: Duration::ZERO,
            elapsed: Duration::ZERO,
            out: opts.out.clone(),
        }
    }

    pub(super) fn strategy(&mut self, s: &str) -> &mut StrategyCount {
        self.strategies.entry(s.to_owned()).or_default()
    }

    pub(super) fn oracle(&mut self, o: &str) -> &mut OracleCount {
        self.oracles.entry(o.to_owned()).or_default()
    }

    /// Plans per second over the plans' time.
    #[must_use]
    pub fn plans_per_second(&self) -> f64 {
        let secs = self.plans_elapsed.as_secs_f64();
        if secs > 0.0 {
            self.plans_run as f64 / secs
        } else {
            0.0
        }
    }

    /// The report as one JSON document (`--json`).
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({
            "plugin": {"name": self.plugin, "version": self.version},
            "scenario": self.scenario.display().to_string(),
            "seed": self.seed,
            "steps": self.steps,
            "generatedSteps": self.generated_steps,
            "refusedInputs": self.refused_inputs,
            "reference": {"reconciles": self.reference_reconciles},
            "oracles": self.oracles.iter().map(|(k, v)| (k.clone(), json!({
                "checked": v.checked, "findings": v.findings,
            }))).collect::<serde_json::Map<_, _>>(),
            "kinds": self.kinds,
            "strategies": self.strategies.iter().map(|(k, v)| (k.clone(), json!({
                "generated": v.generated, "pruned": v.pruned, "run": v.run, "notReached": v.not_reached,
                "unreachable": v.unreachable, "findings": v.findings,
            }))).collect::<serde_json::Map<_, _>>(),
            "plansRun": self.plans_run,
            "budgetExhausted": self.budget_exhausted,
            "plansPerSecond": (self.plans_per_second() * 10.0).round() / 10.0,
            "elapsedMs": self.elapsed.as_millis() as u64,
            "timeToFirstFindingMs": self.time_to_first_finding.map(|d| d.as_millis() as u64),
            "errors": self.errors,
            "out": self.out.display().to_string(),
            "html": self.out.join("report.html").display().to_string(),
            "findings": self.findings.iter().map(|f| json!({
                "plan": f.plan.as_ref().map(|p| p.id.clone()),
                "planFile": f.dir.as_ref().filter(|_| f.plan.is_some()).map(|d| d.join("plan.json").display().to_string()),
                "strategy": f.plan.as_ref().map_or("reference", |p| p.fault.strategy()),
                "fault": f.fault,
                "oracle": f.oracle,
                "also": f.also,
                "reconcile": f.reconcile,
                "diff": f.diff,
                "reproducer": f.dir.as_ref().map(|d| d.join("cases").display().to_string()),
            })).collect::<Vec<_>>(),
        })
    }

    /// The report for a terminal.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "explored {} {} with {} (seed {}): reference {} reconciles, {} plans in {:.1} s ({:.0} plans/s){}",
            self.plugin,
            self.version,
            shown(&self.scenario),
            self.seed,
            self.reference_reconciles,
            self.plans_run,
            self.plans_elapsed.as_secs_f64(),
            self.plans_per_second(),
            if self.budget_exhausted {
                ", budget exhausted"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "\n  {:<13} {:>9} {:>6} {:>5} {:>11} {:>11} {:>8}",
            "STRATEGY", "GENERATED", "PRUNED", "RUN", "NOT-REACHED", "UNREACHABLE", "FINDINGS"
        );
        for (k, v) in &self.strategies {
            let _ = writeln!(
                out,
                "  {k:<13} {:>9} {:>6} {:>5} {:>11} {:>11} {:>8}",
                v.generated, v.pruned, v.run, v.not_reached, v.unreachable, v.findings
            );
        }
        let width = self
            .oracles
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(13);
        let _ = writeln!(
            out,
            "\n  {:<width$} {:>9} {:>8}",
            "ORACLE", "CHECKED", "FINDINGS"
        );
        for (k, v) in &self.oracles {
            let _ = writeln!(out, "  {k:<width$} {:>9} {:>8}", v.checked, v.findings);
        }
        if self.generated_steps > 0 {
            let from = self.steps.len() - self.generated_steps;
            let _ = writeln!(
                out,
                "\nscenario: {} generated step(s), written to {} (replay with --scenario):",
                self.generated_steps,
                shown(&self.scenario)
            );
            for (i, label) in self.steps.iter().enumerate().skip(from) {
                let _ = writeln!(out, "  {:>3}. {label}", i + 1);
            }
        }
        if !self.refused_inputs.is_empty() {
            let _ = writeln!(
                out,
                "\n{} generated input(s) refused, left out of every run:",
                self.refused_inputs.len()
            );
            for r in &self.refused_inputs {
                let _ = writeln!(out, "  - {r}");
            }
        }
        for e in &self.errors {
            let _ = writeln!(out, "\nplan error: {e}");
        }
        if self.findings.is_empty() {
            let _ = writeln!(out, "\nno finding");
            return out;
        }
        let _ = writeln!(out, "\n{} finding(s):", self.findings.len());
        let mut detailed: Vec<(&str, &str)> = Vec::new();
        for f in &self.findings {
            let strategy = f.plan.as_ref().map_or("reference", |p| p.fault.strategy());
            let id = f
                .plan
                .as_ref()
                .map_or("reference".to_owned(), |p| p.id.clone());
            let _ = writeln!(out, "\n- [{}] {id}: {}", f.oracle, f.fault);
            if let Some(dir) = &f.dir {
                if f.plan.is_some() {
                    let _ = writeln!(out, "  replay: --replay {}", shown(&dir.join("plan.json")));
                }
                let _ = writeln!(
                    out,
                    "  reproducer: {} ({} case(s))",
                    shown(&dir.join("cases")),
                    f.cases.len()
                );
            }
            // The whole diff for the first finding of each (strategy,
            // oracle); the others point at their directory.
            if detailed.contains(&(strategy, f.oracle)) {
                continue;
            }
            detailed.push((strategy, f.oracle));
            for line in f.diff.lines().take(40) {
                let _ = writeln!(out, "  | {line}");
            }
        }
        out
    }
}

/// Findings of the reference run itself: a settle that never quiesces,
/// reconciles that keep failing, decisions that change on the same reads.
pub(super) fn reference_findings(scenario: &Scenario, reference: &RunOutcome) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(u) = &reference.unsettled {
        let step = scenario
            .steps
            .get(u.step)
            .map_or("the final settle".to_owned(), |s| {
                format!("step {} ({})", u.step + 1, s.label())
            });
        out.push(Finding {
            plan: None,
            fault: format!("no fault: {step} never settles"),
            oracle: "fixed-point",
            also: Vec::new(),
            reconcile: None,
            diff: format!("{}\n{}", u.why, last_reconciles(reference)),
            cases: reference
                .trace
                .iter()
                .rev()
                .take(3)
                .rev()
                .map(|r| r.case.clone())
                .collect(),
            dir: None,
        });
    }
    if !reference.failing.is_empty() {
        out.push(Finding {
            plan: None,
            fault: "no fault: reconciles keep failing at the end".to_owned(),
            oracle: "fixed-point",
            also: Vec::new(),
            reconcile: None,
            diff: failing_text(&reference.failing),
            cases: reference
                .trace
                .iter()
                .rev()
                .filter(|r| {
                    r.error.is_some()
                        || !r.refused.is_empty()
                        || r.writes.iter().any(|w| w.refused())
                })
                .take(3)
                .map(|r| r.case.clone())
                .collect(),
            dir: None,
        });
    }
    for n in &reference.nondeterministic {
        out.push(Finding {
            plan: None,
            fault: format!("no fault: {} decided differently on the same reads", n.at),
            oracle: "determinism",
            also: Vec::new(),
            reconcile: Some(n.at.to_string()),
            diff: n.diff.clone(),
            cases: vec![n.case.clone()],
            dir: None,
        });
    }
    out
}

fn failing_text(failing: &BTreeMap<String, String>) -> String {
    failing.iter().map(|(k, e)| format!("{k}: {e}\n")).collect()
}

fn last_reconciles(outcome: &RunOutcome) -> String {
    let mut out = String::from("last reconciles:\n");
    for r in outcome.trace.iter().rev().take(5).rev() {
        let _ = writeln!(out, "  {} ({:?}): {}", r.at, r.phase, outcome_line(&r.case));
    }
    out
}

/// Judges one plan's run against the reference: a finding when an oracle
/// fails (end state, counts, fixed point).
pub(super) fn judge(
    scenario: &Scenario,
    plan: &Plan,
    reference: &RunOutcome,
    outcome: &RunOutcome,
) -> Option<Finding> {
    if outcome.unreachable.is_some() {
        return None;
    }
    let mut failed: Vec<(&'static str, String)> = Vec::new();
    // A scenario apply that updated a terminating object in one run and
    // made a new object in the other (a cleanup delayed by the fault, as a
    // real cluster delays it): the runs got different inputs, so their end
    // states and counts are not compared; the fixed point still is.
    let same_inputs = outcome.applied_on_terminating == reference.applied_on_terminating;
    let state = end_state_diff(&reference.end_state, &outcome.end_state);
    if same_inputs && !state.is_empty() {
        failed.push(("end-state", state));
    }
    // Not for plans that change the steps themselves (unobserved), nor
    // for a restart onto an old snapshot (time travel), which redoes the
    // work of that time — a child made again and cleaned up again is the
    // healing of a level-based controller; its harm shows in the end state.
    if same_inputs
        && !matches!(
            plan.fault,
            Fault::Unobserved { .. } | Fault::TimeTravel { .. }
        )
    {
        let counts = counts_diff(&reference.counts, &outcome.counts);
        if !counts.is_empty() {
            failed.push(("counts", counts));
        }
    }
    if let Some(u) = &outcome.unsettled
        && u.step >= scenario.steps.len()
    {
        failed.push((
            "fixed-point",
            format!("{}\n{}", u.why, last_reconciles(outcome)),
        ));
    }
    let new_failures: BTreeMap<String, String> = outcome
        .failing
        .iter()
        .filter(|(k, _)| !reference.failing.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !new_failures.is_empty() {
        failed.push((
            "fixed-point",
            format!(
                "reconciles keep failing after the faults stopped:\n{}",
                failing_text(&new_failures)
            ),
        ));
    }
    if failed.is_empty() {
        return None;
    }
    let oracle = failed[0].0;
    let also = failed[1..]
        .iter()
        .map(|(o, _)| *o)
        .filter(|o| *o != oracle)
        .collect();
    let diff = failed
        .iter()
        .map(|(o, d)| format!("[{o}]\n{d}"))
        .collect::<Vec<_>>()
        .join("\n");
    Some(Finding {
        plan: Some(plan.clone()),
        fault: plan.fault.describe(scenario),
        oracle,
        also,
        reconcile: plan.fault.at().map(ToString::to_string),
        diff,
        cases: reproducer(plan, outcome)
            .into_iter()
            .map(|r| r.case)
            .collect(),
        dir: None,
    })
}

fn write_file(path: &Path, text: &str) -> Result<(), ExploreError> {
    std::fs::write(path, text).map_err(|source| ExploreError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes every finding under `out/findings/<plan>/` (`plan.json`,
/// `finding.txt`, `cases/*.json`) and the report as `out/report.json`.
///
/// # Errors
/// When a file cannot be written.
pub(super) fn write(report: &mut Report, out: &Path) -> Result<(), ExploreError> {
    let mkdir = |p: &Path| {
        std::fs::create_dir_all(p).map_err(|source| ExploreError::Write {
            path: p.to_path_buf(),
            source,
        })
    };
    let findings_dir = out.join("findings");
    if findings_dir.exists() {
        std::fs::remove_dir_all(&findings_dir).map_err(|source| ExploreError::Write {
            path: findings_dir.clone(),
            source,
        })?;
    }
    mkdir(out)?;
    let mut reference_n = 0;
    for f in &mut report.findings {
        let name = match &f.plan {
            Some(p) => p.id.clone(),
            None => {
                reference_n += 1;
                format!("reference-{reference_n}-{}", f.oracle)
            }
        };
        let dir = findings_dir.join(safe(&name));
        let cases = dir.join("cases");
        mkdir(&cases)?;
        if let Some(plan) = &f.plan {
            let text = serde_json::to_string_pretty(plan).unwrap_or_default();
            write_file(&dir.join("plan.json"), &text)?;
        }
        let mut text = format!("oracle: {}\nfault: {}\n", f.oracle, f.fault);
        if !f.also.is_empty() {
            let _ = writeln!(text, "also: {}", f.also.join(", "));
        }
        if let Some(r) = &f.reconcile {
            let _ = writeln!(text, "reconcile: {r}");
        }
        let _ = writeln!(text, "\n{}", f.diff);
        write_file(&dir.join("finding.txt"), &text)?;
        for (i, case) in f.cases.iter().enumerate() {
            let key = format!("{}-{}", case.request.cluster, case.request.name);
            let path = cases.join(format!("{:03}-{}.json", i + 1, safe(&key)));
            let text = serde_json::to_string_pretty(case).unwrap_or_default();
            write_file(&path, &text)?;
        }
        f.dir = Some(dir);
    }
    let json = serde_json::to_string_pretty(&report.to_json()).unwrap_or_default();
    write_file(&out.join("report.json"), &json)?;
    Ok(())
}

/// The reconciles of `outcome` worth keeping as a reproducer for a fault at
/// `plan`: the faulted reconcile and those of the same key after it (at
/// most five); without a targeted reconcile, the last five that wrote.
#[must_use]
pub fn reproducer(plan: &Plan, outcome: &RunOutcome) -> Vec<Reconcile> {
    if let Some(at) = plan.fault.at() {
        let start = outcome.trace.iter().position(|r| r.at == *at).unwrap_or(0);
        return outcome.trace[start..]
            .iter()
            .filter(|r| r.at.key == at.key)
            .take(5)
            .cloned()
            .collect();
    }
    let mut wrote: Vec<_> = outcome
        .trace
        .iter()
        .filter(|r| !r.actions.is_empty() || r.error.is_some())
        .cloned()
        .collect();
    let keep = wrote.len().saturating_sub(5);
    wrote.drain(..keep);
    wrote
}

/// A path relative to the current directory when it is under it.
#[must_use]
pub fn shown(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|d| path.strip_prefix(d).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
        .display()
        .to_string()
}
