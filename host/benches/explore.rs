//! Explorer benchmark: plans per second and time to the first finding, per
//! zoo bug (buggy and fixed), per seed and per language (the Rust seeds,
//! the TypeScript and Python ports), printed as tables.
//!
//! `cargo bench -p rekon-host --bench explore` after `make plugins
//! test-plugins sdk-plugins` (a missing component is a row saying so);
//! `-- seeds` runs the seeds' table alone. Each row is one `explore` with
//! the default seed and a 60 s budget (scenario-free: at most 40 plans,
//! 300 s).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rekon::explore::{ExploreOptions, Report, explore};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(
    plugin: &Path,
    scenario: &Path,
    settings: Option<PathBuf>,
) -> Result<(Report, Duration), String> {
    run_with(plugin, Some(scenario), settings, Duration::from_secs(60))
}

/// One `explore`; no scenario: scenario-free mode (at most 40 plans).
fn run_with(
    plugin: &Path,
    scenario: Option<&Path>,
    settings: Option<PathBuf>,
    budget: Duration,
) -> Result<(Report, Duration), String> {
    let max_plans = scenario.is_none().then_some(40);
    if !plugin.is_file() {
        return Err(format!("{} missing", plugin.display()));
    }
    let out = tempfile::tempdir().map_err(|e| e.to_string())?;
    let opts = ExploreOptions {
        plugin: plugin.to_path_buf(),
        from_recording: None,
        scenario: scenario.map(Path::to_path_buf),
        generate: 0,
        settings,
        budget,
        max_plans,
        seed: 1,
        out: out.path().to_path_buf(),
        replay: None,
        progress: None,
        memory_reset: rekon::plugin::MemoryReset::default(),
    };
    let t = Instant::now();
    let report = explore(&opts).map_err(|e| e.to_string())?;
    Ok((report, t.elapsed()))
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "-".to_owned(),
        |d| format!("{:.0} ms", d.as_secs_f64() * 1000.0),
    )
}

fn main() {
    // `cargo bench -p rekon-host --bench explore -- seeds`: the seeds and
    // their ports alone.
    if std::env::args().skip(1).any(|a| a == "seeds") {
        seeds();
        return;
    }
    zoo();
    seeds();
}

fn zoo() {
    let zoo = root().join("dist/test-plugins/zoo.wasm");
    println!("## The bug zoo (tests/zoo): found, and quiet when fixed\n");
    println!(
        "| bug | buggy: findings | first finding | strategies | plans | fixed: findings | plans | plans/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut firsts = Vec::new();
    // Wall time of every buggy campaign, whole (reference and plans): the
    // machine time the bugs found cost.
    let mut spent = Duration::ZERO;
    let mut bugs: Vec<_> = std::fs::read_dir(root().join("tests/zoo"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.join("scenario.yaml").is_file())
                .collect()
        })
        .unwrap_or_default();
    bugs.sort();
    for dir in &bugs {
        let bug = dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let scenario = dir.join("scenario.yaml");
        let buggy = run(&zoo, &scenario, Some(dir.join("buggy.json")));
        let fixed = run(&zoo, &scenario, Some(dir.join("fixed.json")));
        match (buggy, fixed) {
            (Ok((b, took)), Ok((f, _))) => {
                spent += took;
                let mut strategies: Vec<&str> = b
                    .findings
                    .iter()
                    .map(|x| x.plan.as_ref().map_or("reference", |p| p.fault.strategy()))
                    .collect();
                strategies.sort_unstable();
                strategies.dedup();
                if let Some(t) = b.time_to_first_finding {
                    firsts.push(t);
                }
                println!(
                    "| {bug} | {} | {} | {} | {} | {} | {} | {:.0} |",
                    b.findings.len(),
                    ms(b.time_to_first_finding),
                    strategies.join(", "),
                    b.plans_run,
                    f.findings.len(),
                    f.plans_run,
                    f.plans_per_second()
                );
            }
            (b, f) => println!(
                "| {bug} | {} | | | | {} | | |",
                b.err().unwrap_or_default(),
                f.err().unwrap_or_default()
            ),
        }
    }
    firsts.sort();
    if let Some(median) = firsts.get(firsts.len() / 2) {
        println!(
            "\nmedian time to a zoo bug's first finding: {} (max {}), {} of {} bugs found",
            ms(Some(*median)),
            ms(firsts.last().copied()),
            firsts.len(),
            bugs.len()
        );
        // One machine: the campaigns ran one after another on it.
        let minutes = spent.as_secs_f64() / 60.0;
        println!(
            "bugs found per machine-minute: {:.1} ({} bugs in {:.1} machine-minutes; Sieve's published total ≈ 0.15 and Acto's ≈ 0.03 per machine-hour)",
            firsts.len() as f64 / minutes.max(f64::EPSILON),
            firsts.len(),
            minutes
        );
    }

    println!("\n## Scenario-free mode on the zoo (no scenario, at most 40 plans)\n");
    println!(
        "| bug | buggy: findings | oracles | first finding | plans | plans/s | fixed: findings | plans |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut found = 0;
    for dir in &bugs {
        let bug = dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let budget = Duration::from_secs(300);
        let buggy = run_with(&zoo, None, Some(dir.join("buggy.json")), budget);
        let fixed = run_with(&zoo, None, Some(dir.join("fixed.json")), budget);
        match (buggy, fixed) {
            (Ok((b, _)), Ok((f, _))) => {
                let mut oracles: Vec<&str> = b.findings.iter().map(|x| x.oracle).collect();
                oracles.sort_unstable();
                oracles.dedup();
                found += usize::from(!b.findings.is_empty());
                println!(
                    "| {bug} | {} | {} | {} | {} | {:.0} | {} | {} |",
                    b.findings.len(),
                    oracles.join(", "),
                    ms(b.time_to_first_finding),
                    b.plans_run,
                    b.plans_per_second(),
                    f.findings.len(),
                    f.plans_run
                );
            }
            (b, f) => println!(
                "| {bug} | {} | | | | | {} | |",
                b.err().unwrap_or_default(),
                f.err().unwrap_or_default()
            ),
        }
    }
    println!(
        "\nscenario-free mode found {found} of {} zoo bugs",
        bugs.len()
    );

    println!("\n## Correct plugins (tests/zoo/correct): must stay clean\n");
    println!("| folder | findings | plans | pruned | unreachable | plans/s |");
    println!("|---|---|---|---|---|---|");
    let mut correct: Vec<_> = std::fs::read_dir(root().join("tests/zoo/correct"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    correct.sort();
    for dir in &correct {
        let name = dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        match run(
            &zoo,
            &dir.join("scenario.yaml"),
            Some(dir.join("settings.json")),
        ) {
            Ok((r, _)) => println!(
                "| {name} | {} | {} | {} | {} | {:.0} |",
                r.findings.len(),
                r.plans_run,
                r.strategies.values().map(|s| s.pruned).sum::<usize>(),
                r.strategies.values().map(|s| s.unreachable).sum::<usize>(),
                r.plans_per_second()
            ),
            Err(e) => println!("| {name} | {e} | | | | |"),
        }
    }
}

fn seeds() {
    println!(
        "\n## The seeds and their ports: on the seed's scenario, and without one (at most 40 plans)\n"
    );
    println!(
        "| plugin | language | mode | steps | plans | plans/s | findings | first finding | refused inputs | reference + plans |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let seeds = [
        (
            "test-fanout",
            "Rust",
            "dist/plugins/test_fanout.wasm",
            "plugins/test-fanout/explore/scenario.yaml",
        ),
        (
            "test-fanout-ts",
            "TypeScript",
            "dist/sdk-plugins/test_fanout_ts.wasm",
            "plugins/test-fanout/explore/scenario.yaml",
        ),
        (
            "nodepool",
            "Rust",
            "dist/plugins/nodepool.wasm",
            "plugins/nodepool/explore/scenario.yaml",
        ),
        (
            "nodepool-py",
            "Python",
            "dist/sdk-plugins/nodepool_py.wasm",
            "plugins/nodepool/explore/scenario.yaml",
        ),
    ];
    // Per language, both modes: plans and plans' time summed.
    let mut per_language: Vec<(String, &str, usize, Duration)> = Vec::new();
    for (name, lang, file, scenario) in seeds {
        let scenario = root().join(scenario);
        for mode in ["scenario", "scenario-free"] {
            let result = if mode == "scenario" {
                run(&root().join(file), &scenario, None)
            } else {
                run_with(&root().join(file), None, None, Duration::from_secs(300))
            };
            match result {
                Ok((r, took)) => {
                    println!(
                        "| {name} | {lang} | {mode} | {} | {} | {:.1} | {} | {} | {} | {:.1} s |",
                        r.steps.len(),
                        r.plans_run,
                        r.plans_per_second(),
                        r.findings.len(),
                        ms(r.time_to_first_finding),
                        r.refused_inputs.len(),
                        took.as_secs_f64()
                    );
                    match per_language
                        .iter_mut()
                        .find(|(l, m, _, _)| l == lang && *m == mode)
                    {
                        Some(entry) => {
                            entry.2 += r.plans_run;
                            entry.3 += r.plans_elapsed;
                        }
                        None => {
                            per_language.push((lang.to_owned(), mode, r.plans_run, r.plans_elapsed))
                        }
                    }
                }
                Err(e) => println!("| {name} | {lang} | {mode} | {e} | | | | | | |"),
            }
        }
    }
    println!("\n| language | mode | plans | plans/s |");
    println!("|---|---|---|---|");
    for (lang, mode, plans, elapsed) in &per_language {
        println!(
            "| {lang} | {mode} | {plans} | {:.1} |",
            *plans as f64 / elapsed.as_secs_f64().max(f64::EPSILON)
        );
    }
}
