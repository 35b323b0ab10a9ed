//! `rekon plugin release`: the objects still carrying a plugin's finalizer.

use std::path::PathBuf;

use rekon::commands::inspect::OutputFormat;

use crate::cli::clusters::ClusterArgs;
use crate::cli::shared::block_on;

#[derive(Debug, clap::Args)]
pub struct ReleaseArgs {
    /// The plugin's name.
    name: String,
    /// The plugin file: its finalizer and primary kind say what to search.
    #[arg(long)]
    from: Option<PathBuf>,
    /// The finalizer to look for (without `--from`: searched in every
    /// listable resource type).
    #[arg(long)]
    finalizer: Option<String>,
    /// Remove the finalizer from every object found (its cleanup is skipped).
    #[arg(long)]
    remove: bool,
    #[command(flatten)]
    clusters: ClusterArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Yaml)]
    output: OutputFormat,
}

/// `rekon plugin release`: list (and with `--remove`, release) the objects
/// carrying a plugin's finalizer. Exits non-zero when a removal failed.
pub fn run(args: ReleaseArgs) -> anyhow::Result<()> {
    let remove = args.remove;
    let config = rekon::commands::release::ReleaseConfig {
        name: args.name,
        from: args.from,
        finalizer: args.finalizer,
        remove,
        clusters: args.clusters.config(),
    };
    let report = block_on(rekon::commands::release::release(config))?;
    match args.output {
        OutputFormat::Yaml => print!("{}", serde_yaml::to_string(&report)?),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    let failed = report.objects.iter().filter(|o| o.error.is_some()).count();
    let released = report.objects.iter().filter(|o| o.released).count();
    if remove {
        eprintln!(
            "{} objects carried finalizer {}; {released} released, {failed} failed",
            report.objects.len(),
            report.finalizer
        );
    } else {
        eprintln!(
            "{} objects carry finalizer {} (run again with --remove to release them without cleanup)",
            report.objects.len(),
            report.finalizer
        );
    }
    for s in &report.skipped {
        eprintln!("not searched: {s}");
    }
    if failed > 0 {
        anyhow::bail!("failed to release {failed} objects");
    }
    Ok(())
}
