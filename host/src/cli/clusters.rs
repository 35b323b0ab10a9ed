//! The flags that say which clusters to connect.

use std::path::PathBuf;

/// Which clusters to connect: the flags `run`, `plugin plan` and `plugin
/// release` share.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: KUBECONFIG, ~/.kube/config, else in-cluster).
    #[arg(long, env = "REKON_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Context of the primary cluster (default: the current context).
    #[arg(long, env = "REKON_CONTEXT")]
    context: Option<String>,
    /// Name of the primary cluster in requests (default: the context name, or `main`).
    #[arg(long, env = "REKON_PRIMARY_NAME")]
    primary_name: Option<String>,
    /// Another cluster, NAME=CONTEXT (repeatable; env: comma-separated).
    #[arg(long = "cluster", env = "REKON_CLUSTERS", value_delimiter = ',', value_parser = parse_cluster)]
    clusters: Vec<(String, String)>,
}

impl ClusterArgs {
    /// The cluster fields of an app config (the rest defaulted, no plugin
    /// source).
    pub fn config(self) -> rekon::app::Config {
        rekon::app::Config {
            kubeconfig: self.kubeconfig,
            context: self.context,
            primary_name: self.primary_name,
            clusters: self.clusters,
            ..rekon::app::Config::default()
        }
    }
}

fn parse_cluster(s: &str) -> Result<(String, String), String> {
    rekon::cluster::parse_cluster_spec(s).map_err(|e| e.to_string())
}
