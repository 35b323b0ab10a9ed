//! `kube-sim --clusters main,sub --kubeconfig FILE [--port-base N]`: runs
//! simulated clusters until killed.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kube_sim::{SimCluster, SimConfig, write_kubeconfig};

/// Runs in-memory Kubernetes API servers.
#[derive(Debug, Parser)]
#[command(name = "kube-sim", version)]
struct Args {
    /// Comma-separated cluster names; each gets its own server and context.
    #[arg(long, value_delimiter = ',', default_value = "main")]
    clusters: Vec<String>,
    /// Kubeconfig file to write (one context per cluster).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// First port; cluster i listens on port-base + i (0: free ports).
    #[arg(long, default_value_t = 0)]
    port_base: u16,
    /// Watch history kept per resource (events).
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Watch bookmark interval in seconds.
    #[arg(long, default_value_t = 30)]
    bookmark_seconds: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut clusters = Vec::new();
    for (i, name) in args.clusters.iter().enumerate() {
        let port = if args.port_base == 0 {
            0
        } else {
            let offset = u16::try_from(i).context("too many clusters")?;
            args.port_base
                .checked_add(offset)
                .context("port out of range")?
        };
        let cfg = SimConfig::new(name.clone())
            .port(port)
            .history_limit(args.history)
            .bookmark_interval(Duration::from_secs(args.bookmark_seconds.max(1)));
        clusters.push(SimCluster::start_with(cfg).await?);
    }
    write_kubeconfig(&args.kubeconfig, &clusters.iter().collect::<Vec<_>>())?;
    for c in &clusters {
        println!("{} {}", c.name(), c.url());
    }
    println!("kubeconfig {}", args.kubeconfig.display());
    wait_for_signal().await;
    for c in clusters {
        c.shutdown().await;
    }
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
