//! `rekon plugin plan`: a dry run against live clusters.

use std::path::PathBuf;

use rekon::commands::inspect::OutputFormat;

use crate::cli::clusters::ClusterArgs;
use crate::cli::shared::block_on;

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The plugin component (`*.wasm`).
    file: PathBuf,
    #[command(flatten)]
    clusters: ClusterArgs,
    /// Only this primary: `name` or `namespace/name`.
    #[arg(long)]
    only: Option<String>,
    /// Operator policy narrowing the plugin's permissions, as for `rekon run`.
    #[arg(long, env = "REKON_POLICY")]
    policy: Option<PathBuf>,
    /// Seconds to wait for the caches' initial lists.
    #[arg(long, default_value_t = 30)]
    sync_timeout: u64,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Yaml)]
    output: OutputFormat,
}

/// `rekon plugin plan`: print what the plugin would do now.
pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let config = rekon::commands::plan::PlanConfig {
        file: args.file,
        clusters: rekon::app::Config {
            policy_file: args.policy,
            ..args.clusters.config()
        },
        only: args.only,
        sync_timeout: std::time::Duration::from_secs(args.sync_timeout),
    };
    let plan = block_on(rekon::commands::plan::plan(config))?;
    match args.output {
        OutputFormat::Yaml => print!("{}", plan.to_yaml_documents()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&plan)?),
    }
    eprintln!(
        "{} primaries, {} actions (dry run: nothing was written)",
        plan.reconciles.len(),
        plan.action_count()
    );
    Ok(())
}
