//! `rekon plugin explore`: the command line of [`crate::explore`] — a
//! progress line on a terminal, the report (text or `--json`), and the exit
//! code: 0 without a finding, 1 with findings, 2 when the scenario, the
//! settings, the plugin or the plan file do not load.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::explore::{ExploreOptions, Progress, explore};

/// `rekon plugin explore PLUGIN.wasm [--scenario FILE] [--generate N]`.
#[derive(Debug, clap::Args)]
pub struct ExploreArgs {
    /// The plugin component (`*.wasm`, any language).
    pub plugin: PathBuf,
    /// The scenario (YAML): clusters, CRDs, steps. Without it, a scenario
    /// is generated from the plugin's registration and its primary's
    /// schema (written to OUT/scenario.yaml).
    #[arg(long, conflicts_with = "from_recording")]
    pub scenario: Option<PathBuf>,
    /// Explore what ran in production: the cases `rekon run --record DIR`
    /// wrote for this plugin (DIR or DIR/<plugin>) turned into a scenario
    /// — the inputs as they were read and changed, statuses others wrote,
    /// member clusters down and up, deletes — written to OUT/scenario.yaml.
    #[arg(long, value_name = "DIR")]
    pub from_recording: Option<PathBuf>,
    /// Append N generated steps (changes of the objects the scenario
    /// applied, each followed by a settle) to the scenario.
    #[arg(long, default_value_t = 0, requires = "scenario")]
    pub generate: usize,
    /// The plugin's settings (a JSON file).
    #[arg(long)]
    pub settings: Option<PathBuf>,
    /// Seconds for the plans (the reference run is not counted).
    #[arg(long, default_value_t = 60)]
    pub budget: u64,
    /// Run at most N plans (the first in schedule order): a campaign
    /// bounded by count runs the same plans on any machine.
    #[arg(long)]
    pub max_plans: Option<usize>,
    /// Seed of the plans' order, of shuffled lists and of generated steps.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where plans, findings and reproducers are written (default:
    /// `rekon-explore/<scenario file stem>` in the current directory, or
    /// `rekon-explore/<plugin file stem>` without a scenario).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the report as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Run only this plan file (from a finding's directory), after the
    /// reference.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// How a plugin instance's memory is made fresh after each call, as
    /// `rekon run --memory-reset`: `whole` explores an interpreter plugin
    /// (componentize-py) faster, a compiled one slower.
    #[arg(long, value_enum, default_value_t = crate::plugin::MemoryReset::DirtyPages)]
    pub memory_reset: crate::plugin::MemoryReset,
}

/// Runs the exploration; returns the process exit code.
#[must_use]
pub fn run(args: ExploreArgs) -> i32 {
    let out = args.out.clone().unwrap_or_else(|| {
        let stem = args
            .scenario
            .as_deref()
            .or(args.from_recording.as_deref())
            .unwrap_or(&args.plugin)
            .file_stem()
            .map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned());
        PathBuf::from("rekon-explore").join(stem)
    });
    let tty = std::io::stderr().is_terminal() && !args.json;
    let budget = Duration::from_secs(args.budget);
    let progress: Option<Progress> = tty.then(|| {
        Arc::new(
            move |done: usize, total: usize, findings: usize, spent: Duration| {
                let left = budget.saturating_sub(spent).as_secs();
                let width = 30;
                let filled = (done * width).checked_div(total).unwrap_or(width);
                eprint!(
                    "\r[{}{}] plans {done}/{total}  findings {findings}  time left {left}s ",
                    "#".repeat(filled),
                    " ".repeat(width - filled)
                );
            },
        ) as Progress
    });
    let opts = ExploreOptions {
        plugin: args.plugin,
        from_recording: args.from_recording,
        scenario: args.scenario,
        generate: args.generate,
        settings: args.settings,
        budget,
        max_plans: args.max_plans,
        seed: args.seed,
        out,
        replay: args.replay,
        progress,
        memory_reset: args.memory_reset,
    };
    match explore(&opts) {
        Ok(report) => {
            if tty {
                eprintln!();
            }
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
                );
            } else {
                print!("{}", report.render());
                println!(
                    "\nreport: {}",
                    crate::explore::report::shown(&report.out.join("report.html"))
                );
            }
            i32::from(!report.findings.is_empty())
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}
