//! `rekon rbac`, `rekon crds`, `rekon webhooks` and `rekon policies`: what the plugins in a
//! directory need in a cluster.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct RbacArgs {
    /// Directory of plugin components (`*.wasm`).
    dir: PathBuf,
    /// Name of the ClusterRole, Role and bindings.
    #[arg(long, default_value = "rekon")]
    name: String,
    /// Namespace of the host (Role, RoleBinding, ServiceAccount).
    #[arg(long, default_value = "rekon-system")]
    namespace: String,
    /// The host's ServiceAccount.
    #[arg(long, default_value = "rekon")]
    service_account: String,
    /// Name of the cluster the RBAC is for (matched against plugins' named cluster sets).
    #[arg(long, default_value = "main")]
    cluster: String,
    /// The cluster is not the primary one: no host Role, no `primary` permissions.
    #[arg(long)]
    remote: bool,
    /// Leave out read access to kubeconfig Secrets (no Secret cluster provider).
    #[arg(long)]
    no_secret_provider: bool,
    /// Leave out access to Plugin objects and their pull Secrets (no
    /// `rekon run --plugin-objects`).
    #[arg(long)]
    no_plugin_objects: bool,
    /// Leave out the webhook configurations the host manages for Plugin
    /// objects (no `rekon run --webhook-service` / `--webhook-url-base`).
    #[arg(long)]
    no_managed_webhooks: bool,
    /// Leave out the token and access reviews of secured metrics and the
    /// metrics-reader ClusterRole (no `rekon run --metrics-secure`).
    #[arg(long)]
    no_metrics_auth: bool,
    /// A Secret of the host's namespace holding signature keys
    /// (`spec.verification.keys[].secretRef`): `get` on it by name
    /// (repeatable).
    #[arg(long = "key-secret", value_name = "NAME")]
    key_secrets: Vec<String>,
    /// A ConfigMap of the host's namespace holding signature keys: `get` on
    /// it by name (repeatable); none named, `get` on the namespace's
    /// ConfigMaps.
    #[arg(long = "key-configmap", value_name = "NAME")]
    key_config_maps: Vec<String>,
    /// Operator permission policy: the RBAC covers only the effective
    /// (declared and allowed) permissions.
    #[arg(long)]
    policy: Option<PathBuf>,
}

// `rekon crds`'s arguments (its help is the `Crds` command's).
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Directory of plugin components (`*.wasm`); without it, only the
    /// host's own CRD.
    dir: Option<PathBuf>,
    /// Write `<crd>.yaml` files and `kustomization.yaml` here instead of printing.
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// The webhook server's Service (NAMESPACE/NAME[:PORT]): the CRDs a
    /// plugin converts get their `spec.conversion` stanza pointing at it.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME[:PORT]",
        conflicts_with = "webhook_url"
    )]
    webhook_service: Option<String>,
    /// The webhook server's base URL instead (`https://host:port`).
    #[arg(long)]
    webhook_url: Option<String>,
    /// PEM of the CA of the webhook server's certificate, for the
    /// conversion stanza's `caBundle`.
    #[arg(long)]
    webhook_ca_file: Option<PathBuf>,
}

/// `rekon rbac`: print the least-privilege RBAC.
pub fn rbac(args: RbacArgs) -> anyhow::Result<()> {
    let policy = rekon::plugin::Policy::load(args.policy.as_deref())?;
    let primary = (!args.remote).then_some(args.cluster.as_str());
    let registrations =
        rekon::commands::manifests::load_registrations_with_policy(&args.dir, policy, primary)?;
    let opts = rekon::commands::manifests::RbacOptions {
        name: args.name,
        namespace: args.namespace,
        service_account: args.service_account,
        cluster: args.cluster,
        primary: !args.remote,
        secret_provider: !args.no_secret_provider,
        plugin_objects: !args.no_plugin_objects,
        managed_webhooks: !args.no_managed_webhooks,
        metrics_auth: !args.no_metrics_auth,
        key_secrets: args.key_secrets,
        key_config_maps: args.key_config_maps,
    };
    print!(
        "{}",
        rekon::commands::manifests::rbac_yaml(&registrations, &opts)?
    );
    Ok(())
}

/// `rekon crds`: print the CRDs, or write them with a kustomization; with
/// `--webhook-service` or `--webhook-url`, the CRDs a plugin converts with
/// their conversion stanzas.
pub fn crds(args: CrdsArgs) -> anyhow::Result<()> {
    use rekon::commands::webhooks as w;
    let mut registrations = match &args.dir {
        Some(dir) => rekon::commands::manifests::load_registrations(dir)?,
        None => Vec::new(),
    };
    let client = match (args.webhook_service, args.webhook_url) {
        (Some(service), _) => Some(parse_service(&service)?),
        (None, Some(url)) => Some(w::Client::Url(url)),
        (None, None) => None,
    };
    if let (Some(client), Some(dir)) = (client, &args.dir) {
        let options = w::WebhookOptions {
            prefix: String::new(),
            client,
            ca_bundle: args
                .webhook_ca_file
                .as_deref()
                .map(w::read_ca)
                .transpose()?,
        };
        let side = w::load_api_side(dir)?;
        w::with_conversion_stanzas(&mut registrations, &side.converting, &options)?;
    }
    match args.out_dir {
        None => print!("{}", rekon::commands::manifests::crds_yaml(&registrations)?),
        Some(out) => rekon::commands::manifests::write_crds(&registrations, &out)?,
    }
    Ok(())
}

// `rekon webhooks`'s arguments (its help is the `Webhooks` command's).
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("client").args(["service", "url"]).required(true)))]
pub struct WebhooksArgs {
    /// Directory of plugin components (`*.wasm`).
    dir: PathBuf,
    /// The Service in front of the host's webhook server: NAMESPACE/NAME[:PORT]
    /// (port 443 unless given).
    #[arg(long, value_name = "NAMESPACE/NAME[:PORT]")]
    service: Option<String>,
    /// The webhook server's base URL instead (`https://host:port`).
    #[arg(long)]
    url: Option<String>,
    /// PEM of the CA that signed the serving certificate, for `caBundle`:
    /// the `tls.crt` `rekon run --webhook-cert-dir` wrote (self-signed), or
    /// the CA of the operator's certificate.
    #[arg(long)]
    webhook_ca_file: Option<PathBuf>,
    /// Configuration names are `<prefix>-<plugin>`.
    #[arg(long, default_value = "rekon")]
    prefix: String,
}

pub(super) fn parse_service(text: &str) -> anyhow::Result<rekon::commands::webhooks::Client> {
    let (namespace, rest) = text
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--service {text:?}: give NAMESPACE/NAME[:PORT]"))?;
    let (name, port) = match rest.split_once(':') {
        Some((name, port)) => (name, port.parse()?),
        None => (rest, 443),
    };
    Ok(rekon::commands::webhooks::Client::Service {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        port,
    })
}

/// `rekon webhooks`: print the webhook configurations.
pub fn webhooks(args: WebhooksArgs) -> anyhow::Result<()> {
    use rekon::commands::webhooks as w;
    let client = match (args.service, args.url) {
        (Some(service), _) => parse_service(&service)?,
        (None, Some(url)) => w::Client::Url(url),
        (None, None) => anyhow::bail!("give --service or --url"),
    };
    let ca_bundle = args
        .webhook_ca_file
        .as_deref()
        .map(w::read_ca)
        .transpose()?;
    let side = w::load_api_side(&args.dir)?;
    let options = w::WebhookOptions {
        prefix: args.prefix,
        client,
        ca_bundle,
    };
    // The CRDs with their conversion stanzas first: a conversion is in
    // place before a webhook sees an object at another version.
    print!("{}", w::conversion_yaml(&side.converting, &options)?);
    print!("{}", w::webhooks_yaml(&side.admitting, &options)?);
    // The policies the API server evaluates itself, as `rekon policies`.
    print!(
        "{}",
        rekon::commands::policies::policies_yaml(&side.policies)?
    );
    Ok(())
}

// `rekon policies`'s arguments (its help is the `Policies` command's).
#[derive(Debug, clap::Args)]
pub struct PoliciesArgs {
    /// Directory of plugin components (`*.wasm`).
    dir: PathBuf,
}

/// `rekon policies`: print the ValidatingAdmissionPolicies and bindings.
pub fn policies(args: PoliciesArgs) -> anyhow::Result<()> {
    use rekon::commands::policies as p;
    print!("{}", p::policies_yaml(&p::load_policies(&args.dir)?)?);
    Ok(())
}
