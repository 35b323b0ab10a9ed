//! `rekon plugin …`: the subcommands that work with plugin files and
//! objects, each one's flags and glue.

pub mod new;
pub mod plan;
pub mod registry;
pub mod release;
pub mod sign;

use std::path::{Path, PathBuf};

use clap::Subcommand;
use rekon::commands::inspect::OutputFormat;

use self::registry::RegistryArgs;
use crate::cli::clusters::ClusterArgs;
use crate::cli::shared::{block_on, default_cache_dir};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Create a plugin crate that builds outside this repository with plain
    /// cargo: `NAME/` with Cargo.toml, src/lib.rs, a test-kit test and a
    /// README (test, build, inspect).
    New(new::NewArgs),
    /// Load a plugin file, or a plugin from an OCI registry
    /// (`registry/repository:tag` or `@sha256:…`), and print its
    /// registration: name, version, primary resource, watches, permissions
    /// and CRDs.
    Inspect {
        /// The plugin component (`*.wasm`), or an OCI reference naming one
        /// (anything that is not an existing path and starts with a
        /// registry host: `ghcr.io/…`, `localhost:5000/…`).
        file: String,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = OutputFormat::Yaml)]
        output: OutputFormat,
        /// Operator permission policy: print the effective permissions.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Settings to register the plugin with, as JSON text or `@FILE`
        /// (JSON or YAML): the plugin validates them as it would in a
        /// cluster, and refuses invalid ones with its own message.
        #[arg(long, value_parser = parse_settings)]
        settings: Option<serde_json::Value>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Compile plugin components into the compiled-plugin cache `rekon run`
    /// reads, so that a host started later maps them instead of compiling
    /// (seconds to a minute per JavaScript or Python plugin). Each file is
    /// loaded as `rekon run` loads it: one the host would refuse is refused.
    Compile {
        /// Plugin components (`*.wasm`).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The cache directory, as `rekon run --cache-dir` (default:
        /// `$XDG_CACHE_HOME/rekon`, else `~/.cache/rekon`).
        #[arg(long, env = "REKON_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        /// Also write `NAME.cwasm` beside each `NAME.wasm`: its compiled
        /// code for this machine's engine, for `rekon plugin push
        /// --precompiled` or, with a signature `NAME.cwasm.sig`, for
        /// `rekon run --plugins` with signature keys.
        #[arg(long)]
        precompiled: bool,
    },
    /// Print this machine's engine key: what a precompiled artifact must
    /// have been compiled for to serve here.
    EngineKey,
    /// What `rekon run --compile-memory-limit` runs for each compile: the
    /// component on stdin, its compiled artifact on stdout, this process's
    /// writable memory capped first.
    #[command(hide = true)]
    CompileApart {
        /// The cap (RLIMIT_DATA), in bytes.
        #[arg(long)]
        memory_limit_bytes: Option<u64>,
    },
    /// Publish a plugin component to an OCI registry in the CNCF wasm
    /// artifact layout (config `application/vnd.wasm.config.v0+json`, one
    /// `application/wasm` layer) and print the manifest digest. The plugin
    /// is loaded first: a file the host would refuse is not pushed.
    Push {
        /// The plugin component (`*.wasm`).
        file: PathBuf,
        /// Where to push: `registry/repository:tag`.
        reference: String,
        /// Sign the pushed manifest with this key (as `rekon plugin sign`).
        #[arg(long, value_name = "KEY")]
        sign: Option<PathBuf>,
        /// Attach the component's precompiled code for this machine's
        /// engine (`rekon plugin engine-key` prints its key): a
        /// host of that engine whose Plugin verifies the signature maps it
        /// instead of compiling.
        #[arg(long, conflicts_with = "precompiled")]
        precompile: bool,
        /// Attach this precompiled artifact (`rekon plugin compile
        /// --precompiled` made it from FILE, possibly on another machine).
        #[arg(long, value_name = "CWASM")]
        precompiled: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Write a new signing key pair: `<out>.key` (unencrypted PKCS#8 PEM,
    /// mode 0600) and `<out>.pub` (the public key, as cosign's `cosign.pub`).
    Keygen(sign::KeygenArgs),
    /// Sign the module REF names (its manifest digest) with KEY, in
    /// cosign's format (a `sha256-<digest>.sig` tag beside it): `cosign
    /// verify --key` and Plugin objects' `verification` read it. KEY is an
    /// unencrypted PKCS#8 PEM key, ECDSA P-256 or Ed25519.
    Sign(Box<sign::SignArgs>),
    /// Verify the signatures of the module REF names against public keys
    /// (PEM, cosign's `cosign.pub`); exits non-zero saying why when they do
    /// not satisfy the keys, the minimum and the annotations.
    Verify(Box<sign::VerifyArgs>),
    /// Print a Plugin object (plugins.rekon.dev) that serves FILE from the
    /// OCI reference --module, granting exactly what FILE declares (review
    /// the grant before applying).
    Manifest {
        /// The plugin component (`*.wasm`).
        file: PathBuf,
        /// OCI reference the component is published under.
        #[arg(long)]
        module: String,
        /// Pin the manifest digest (`sha256:…`, as `rekon plugin push` printed).
        #[arg(long)]
        digest: Option<String>,
        /// `spec.settings`, as JSON text or `@FILE` (JSON or YAML); the
        /// component must accept them.
        #[arg(long, value_parser = parse_settings)]
        settings: Option<serde_json::Value>,
        /// The Plugin object's name: another instance of the module
        /// (default: the name it registers).
        #[arg(long)]
        name: Option<String>,
    },
    /// Dry run: connect the clusters, fill the plugin's caches, reconcile
    /// every primary once and print the actions it would take. Writes nothing.
    Plan(Box<plan::PlanArgs>),
    /// List the objects that still carry a plugin's finalizer (after the
    /// plugin was removed, they cannot finish deleting) and, with
    /// `--remove`, remove that finalizer from them without cleanup.
    Release(Box<release::ReleaseArgs>),
    /// Run a plugin build against recorded cases (`rekon run --record`),
    /// host reads served from the recording; print per case whether its
    /// decision is identical, else a YAML diff per action. Exits non-zero
    /// on any difference unless --allow-diff.
    Replay {
        /// The plugin component (`*.wasm`).
        file: PathBuf,
        /// Case files, or directories searched for `*.json`.
        #[arg(required = true)]
        cases: Vec<PathBuf>,
        /// Exit 0 even when cases differ.
        #[arg(long)]
        allow_diff: bool,
    },
    /// Run a plugin through the faults that break controllers (crashes
    /// between writes, stale reads, unobserved states, failing writes,
    /// clusters down, reordered deliveries) on in-process clusters and a
    /// virtual clock; report what differs from a fault-free run. Exit 0: no
    /// finding, 1: findings, 2: the inputs do not load.
    Explore(Box<rekon::commands::explore::ExploreArgs>),
    /// Answer one review with a plugin, as its webhook would (as
    /// Kubewarden's `kwctl run`): an AdmissionReview v1 (or a bare
    /// AdmissionRequest) through the plugin's matching rules, mutating
    /// before validating, or a ConversionReview through `convert`; prints
    /// each AdmissionReview/ConversionReview answer. Exit 0: allowed, 1:
    /// denied, 2: the inputs do not load or no rule matches, 3: the
    /// plugin's call failed (trap, deadline, memory).
    Admit(Box<rekon::commands::admit::AdmitArgs>),
    /// Make the shadow version of plugin NAME the serving one: in the
    /// plugin directory (`*.shadow.wasm` renamed over the serving file), or
    /// with --object in its Plugin object (spec.shadow becomes spec.module;
    /// roll back with the same edit back). A running host swaps it in.
    Promote {
        /// The plugin's name.
        name: String,
        /// Directory of plugin components.
        #[arg(long, env = "REKON_PLUGINS", required_unless_present = "object")]
        plugins: Option<PathBuf>,
        /// Promote in the Plugin object NAME of the primary cluster.
        #[arg(long)]
        object: bool,
        #[command(flatten)]
        clusters: ClusterArgs,
    },
}

/// `--settings`: JSON text, or `@FILE` holding JSON or YAML.
fn parse_settings(arg: &str) -> Result<serde_json::Value, String> {
    match arg.strip_prefix('@') {
        Some(file) => {
            let text =
                std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
            serde_yaml::from_str(&text).map_err(|e| format!("{file} is not JSON or YAML: {e}"))
        }
        None => serde_json::from_str(arg).map_err(|e| format!("not JSON: {e}")),
    }
}

/// Runs one `rekon plugin` subcommand.
pub fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::New(args) => new::run(args),
        PluginCommand::Inspect {
            file,
            output,
            policy,
            settings,
            registry,
        } => inspect(
            &file,
            output,
            policy.as_deref(),
            settings.as_ref(),
            registry,
        ),
        PluginCommand::Compile {
            files,
            cache_dir,
            precompiled,
        } => compile(&files, cache_dir, precompiled),
        PluginCommand::CompileApart { memory_limit_bytes } => {
            rekon::plugin::compile_stdio(memory_limit_bytes).map_err(|e| anyhow::anyhow!(e))
        }
        PluginCommand::EngineKey => {
            println!("{}", rekon::plugin::host_engine_key()?);
            Ok(())
        }
        PluginCommand::Push {
            file,
            reference,
            sign,
            precompile,
            precompiled,
            registry,
        } => {
            use rekon::commands::push::Precompile;
            let precompile = match (precompile, precompiled) {
                (_, Some(path)) => Precompile::File(path),
                (true, None) => Precompile::Compile,
                (false, None) => Precompile::No,
            };
            sign::push(&file, &reference, sign, &precompile, registry)
        }
        PluginCommand::Keygen(args) => sign::keygen(args),
        PluginCommand::Sign(args) => sign::sign(*args),
        PluginCommand::Verify(args) => sign::verify(*args),
        PluginCommand::Explore(args) => std::process::exit(rekon::commands::explore::run(*args)),
        PluginCommand::Admit(args) => std::process::exit(rekon::commands::admit::run(*args)),
        PluginCommand::Manifest {
            file,
            module,
            digest,
            settings,
            name,
        } => manifest(
            &file,
            &module,
            &rekon::commands::plugin_manifest::ManifestOptions {
                digest: digest.as_deref(),
                settings: settings.as_ref(),
                name: name.as_deref(),
            },
        ),
        PluginCommand::Plan(args) => plan::run(*args),
        PluginCommand::Release(args) => release::run(*args),
        PluginCommand::Replay {
            file,
            cases,
            allow_diff,
        } => replay(&file, &cases, allow_diff),
        PluginCommand::Promote {
            name,
            plugins,
            object,
            clusters,
        } => promote(&name, plugins, object, clusters),
    }
}

/// `rekon plugin inspect`: a file, or a reference fetched first.
fn inspect(
    file: &str,
    output: OutputFormat,
    policy: Option<&Path>,
    settings: Option<&serde_json::Value>,
    registry: RegistryArgs,
) -> anyhow::Result<()> {
    let policy = rekon::plugin::Policy::load(policy)?;
    let report = if rekon::commands::push::is_reference(file) {
        let fetched = block_on(rekon::commands::push::fetch(file, &registry.options()))?;
        eprintln!("{} is {}", fetched.reference, fetched.pinned);
        rekon::commands::inspect::inspect_bytes_with_policy(
            &fetched.bytes,
            &fetched.pinned,
            output,
            policy,
            settings,
        )?
    } else {
        rekon::commands::inspect::inspect_file_with_policy(
            Path::new(file),
            output,
            policy,
            settings,
        )?
    };
    print!("{report}");
    Ok(())
}

/// `rekon plugin compile`: fill the compiled-plugin cache.
fn compile(files: &[PathBuf], cache_dir: Option<PathBuf>, precompiled: bool) -> anyhow::Result<()> {
    let cache_dir = cache_dir.or_else(default_cache_dir).ok_or_else(|| {
        anyhow::anyhow!("no --cache-dir, and no XDG_CACHE_HOME or HOME to cache in")
    })?;
    for c in rekon::commands::compile::compile_files(files, &cache_dir, precompiled)? {
        println!(
            "{} {} {} (sha256:{}) {} in {:.2} s",
            c.file.display(),
            c.name,
            c.version,
            c.digest,
            if c.from_cache {
                "already cached"
            } else {
                "compiled"
            },
            c.elapsed.as_secs_f64()
        );
        if let Some(out) = &c.precompiled {
            println!("{}: precompiled code written", out.display());
        }
    }
    eprintln!("cache: {}", cache_dir.display());
    Ok(())
}

/// `rekon plugin manifest`: print a Plugin object for the file.
fn manifest(
    file: &Path,
    module: &str,
    options: &rekon::commands::plugin_manifest::ManifestOptions<'_>,
) -> anyhow::Result<()> {
    print!(
        "{}",
        rekon::commands::plugin_manifest::plugin_manifest(file, module, options)?
    );
    Ok(())
}

/// `rekon plugin replay`: fails when a case differs, unless allowed.
fn replay(file: &Path, cases: &[PathBuf], allow_diff: bool) -> anyhow::Result<()> {
    let report = rekon::change::replay::replay(file, cases)?;
    print!("{}", report.render());
    if report.differing() > 0 && !allow_diff {
        anyhow::bail!(
            "{} of {} cases differ",
            report.differing(),
            report.cases.len()
        );
    }
    Ok(())
}

/// `rekon plugin promote`: in the plugin directory, or with `--object` in
/// the Plugin object of the primary cluster.
fn promote(
    name: &str,
    plugins: Option<PathBuf>,
    object: bool,
    clusters: ClusterArgs,
) -> anyhow::Result<()> {
    if object {
        let config = clusters.config();
        let (from, to) = block_on(async {
            let clusters = rekon::app::connect_clusters(&config).await?;
            let primary = clusters
                .get(clusters.primary())
                .ok_or_else(|| anyhow::anyhow!("the primary cluster is not connected"))?;
            anyhow::Ok(rekon::change::promote::promote_object(primary.client(), name).await?)
        })?;
        eprintln!("promoted Plugin {name}: {from} -> {to}");
    } else {
        let plugins =
            plugins.ok_or_else(|| anyhow::anyhow!("--plugins is required without --object"))?;
        let (from, to) = rekon::change::promote::promote(&plugins, name)?;
        eprintln!("promoted {name}: {} -> {}", from.display(), to.display());
    }
    Ok(())
}
