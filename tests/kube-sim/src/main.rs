//! `kube-sim --clusters main,sub --kubeconfig FILE [--port-base N]
//! [--tls] [--auth] [--token-auth-file FILE]`: runs simulated clusters
//! until killed.

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
    /// Serve HTTPS with a generated CA (written into the kubeconfig).
    #[arg(long)]
    tls: bool,
    /// Require authentication and authorize with RBAC; the kubeconfig's
    /// user is `kubernetes-admin` in `system:masters`. kubectl sends
    /// credentials only over TLS: use with --tls.
    #[arg(long)]
    auth: bool,
    /// Static token users, as the apiserver's `--token-auth-file`: CSV
    /// lines `token,user,uid,"group1,group2"`.
    #[arg(long, requires = "auth")]
    token_auth_file: Option<PathBuf>,
}

/// Parses a `--token-auth-file` (`token,user,uid[,"g1,g2"]` per line).
fn token_users(path: &std::path::Path) -> anyhow::Result<Vec<(String, String, Vec<String>)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("failed to read {}", path.display()))?;
    let mut users = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.splitn(4, ',');
        let (Some(token), Some(user), Some(_uid)) = (fields.next(), fields.next(), fields.next())
        else {
            anyhow::bail!("{}:{}: want token,user,uid[,groups]", path.display(), n + 1);
        };
        let groups = fields
            .next()
            .map(|g| {
                g.trim_matches('"')
                    .split(',')
                    .filter(|g| !g.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        users.push((token.to_string(), user.to_string(), groups));
    }
    Ok(users)
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
    let users = match &args.token_auth_file {
        Some(path) => token_users(path)?,
        None => Vec::new(),
    };
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
            .bookmark_interval(Duration::from_secs(args.bookmark_seconds.max(1)))
            .tls(args.tls)
            .auth(args.auth);
        let cfg = users.iter().fold(cfg, |cfg, (token, user, groups)| {
            let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
            cfg.token_user(token, user, &groups)
        });
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
