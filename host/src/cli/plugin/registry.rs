//! How `rekon plugin push` and `rekon plugin inspect REF` reach a registry.

use std::path::PathBuf;

/// How `plugin push` and `plugin inspect REF` reach a registry.
#[derive(Debug, clap::Args)]
pub struct RegistryArgs {
    /// A registry (`host[:port]`) spoken to over plain HTTP although it is
    /// not on a loopback address (loopback registries always are).
    #[arg(long = "insecure-registry", value_name = "HOST")]
    insecure_registries: Vec<String>,
    /// Registry user name (with --password); else the credentials file.
    #[arg(long, env = "REKON_REGISTRY_USERNAME", requires = "password")]
    username: Option<String>,
    /// Registry password or token.
    #[arg(
        long,
        env = "REKON_REGISTRY_PASSWORD",
        requires = "username",
        hide_env_values = true
    )]
    password: Option<String>,
    /// Docker config JSON with registry credentials (default: the first
    /// of $REGISTRY_AUTH_FILE, $DOCKER_CONFIG/config.json,
    /// ~/.docker/config.json that exists).
    #[arg(long)]
    auth_file: Option<PathBuf>,
    /// Seconds one registry attempt may take.
    #[arg(long, default_value_t = 30)]
    registry_timeout: u64,
}

impl RegistryArgs {
    pub fn options(self) -> rekon::commands::push::RegistryOptions {
        rekon::commands::push::RegistryOptions {
            insecure_registries: self.insecure_registries,
            username: self.username,
            password: self.password,
            auth_file: self.auth_file,
            timeout: Some(std::time::Duration::from_secs(self.registry_timeout)),
        }
    }
}
