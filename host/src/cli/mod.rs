//! The `rekon` command line: its clap types, one module per command with
//! that command's flags and the glue from them to the library. The
//! binary's own modules (beside `main.rs`, not in the library): they reach
//! the library as `rekon::…`.

pub mod clusters;
pub mod manifests;
pub mod plugin;
pub mod run;
pub mod shared;

use clap::{Parser, Subcommand};

/// rekon: a Kubernetes reconciliation engine whose decisions live in
/// WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "rekon", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the engine: connect the clusters, load and follow the plugins
    /// (a directory, Plugin objects, or both), reconcile until
    /// SIGINT/SIGTERM.
    Run(Box<run::RunArgs>),
    /// Work with plugin files.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Print the least-privilege RBAC (ClusterRole, Role, bindings) the
    /// plugins in DIR and the host need in one cluster.
    Rbac(manifests::RbacArgs),
    /// Print the host's own CRD (the Plugin resource) and the CRDs every
    /// plugin in DIR declares (or write one file per CRD plus a
    /// kustomization.yaml with --out-dir).
    Crds(manifests::CrdsArgs),
    /// Print the Validating- and MutatingWebhookConfigurations of the
    /// plugins in DIR that admit, the CRDs they convert with their
    /// conversion webhook (served by `rekon run --webhook-addr`), and the
    /// ValidatingAdmissionPolicies of their CEL policies.
    Webhooks(manifests::WebhooksArgs),
    /// Print a ValidatingAdmissionPolicy and its binding for every CEL
    /// policy the plugins in DIR declare (evaluated by the API server
    /// itself: no webhook in the request path).
    Policies(manifests::PoliciesArgs),
}
