//! The `rekon` command line: parses the arguments (`cli/`) and hands each
//! command to its glue, which calls the library.

mod cli;

use clap::Parser;
use cli::{Cli, Command, plugin::PluginCommand};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match &cli.command {
        // `rekon run` sets up its own logging (`--log-format`, default `info`).
        Command::Run(_) => {}
        // The explorer's report is its output; the engine it drives logs
        // every injected fault, which is noise there unless RUST_LOG asks.
        Command::Plugin(PluginCommand::Explore(_)) if std::env::var_os("RUST_LOG").is_none() => {}
        _ => cli::shared::init_logging(),
    }
    match cli.command {
        Command::Run(args) => cli::run::run(*args),
        Command::Plugin(command) => cli::plugin::run(command),
        Command::Rbac(args) => cli::manifests::rbac(args),
        Command::Crds(args) => cli::manifests::crds(args),
        Command::Webhooks(args) => cli::manifests::webhooks(args),
        Command::Policies(args) => cli::manifests::policies(args),
    }
}
