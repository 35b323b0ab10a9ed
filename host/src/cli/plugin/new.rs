//! `rekon plugin new`: scaffold a plugin project.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The plugin's name (a DNS label); also the crate and directory name.
    name: String,
    /// The primary resource, GROUP/VERSION/KIND (VERSION/KIND for the core
    /// group). A kind the scaffold does not know as built in becomes a
    /// custom resource the plugin defines.
    #[arg(long, default_value = "v1/ConfigMap")]
    primary: String,
    /// Where to create the crate directory.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// The plugin's language: rust (a crate), typescript (an npm package)
    /// or python (a pyproject).
    #[arg(long, value_enum, default_value_t = NewLang::Rust)]
    lang: NewLang,
    /// Depend on the SDK at this path (a checkout's `guest-sdk`,
    /// `sdk/typescript` or `sdk/python`). Default: the SDK of the checkout
    /// this binary was built from, when it is still there.
    #[arg(long, conflicts_with = "sdk_git")]
    sdk_path: Option<PathBuf>,
    /// Depend on the Rust SDK from this git repository (rust only).
    #[arg(long)]
    sdk_git: Option<String>,
    /// Also serve admission webhooks: a mutating one that defaults a label
    /// and a validating one that checks it, with a test (see the
    /// project's README and docs/plugins/admission.md).
    #[arg(long)]
    admission: bool,
}

/// `rekon plugin new --lang`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum NewLang {
    Rust,
    Typescript,
    Python,
}

/// `rekon plugin new`: scaffold a plugin crate.
pub fn run(args: NewArgs) -> anyhow::Result<()> {
    use rekon::commands::scaffold::{Lang, Scaffold, SdkSource};
    let lang = match args.lang {
        NewLang::Rust => Lang::Rust,
        NewLang::Typescript => Lang::TypeScript,
        NewLang::Python => Lang::Python,
    };
    let sdk = match (args.sdk_path, args.sdk_git) {
        (Some(path), _) => SdkSource::Path(std::path::absolute(path)?),
        (None, Some(url)) if lang == Lang::Rust => SdkSource::Git(url),
        (None, Some(_)) => anyhow::bail!("--sdk-git is for --lang rust; pass --sdk-path"),
        (None, None) => {
            // The checkout this binary was built from, if it is still there;
            // a git dependency cannot be assumed to resolve (no git host may
            // be reachable, and the project's URL may not be public).
            let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let sdk = checkout.join(lang.sdk_dir());
            if !sdk.is_dir() {
                anyhow::bail!(
                    "no rekon SDK at {}: pass --sdk-path PATH/TO/REKON/{}{}",
                    sdk.display(),
                    lang.sdk_dir(),
                    if lang == Lang::Rust {
                        " (or --sdk-git URL)"
                    } else {
                        ""
                    }
                );
            }
            SdkSource::Path(std::path::absolute(sdk)?.canonicalize()?)
        }
    };
    let dir = Scaffold::new(&args.name, sdk)
        .lang(lang)
        .admission(args.admission)
        .primary(&args.primary)?
        .write(&args.dir)?;
    let next = match lang {
        Lang::Rust => "rustup target add wasm32-wasip2 && cargo test",
        Lang::TypeScript => "npm install && npm test && npm run build",
        Lang::Python => "pip install -e . && pytest",
    };
    eprintln!(
        "created {}; next: cd {} && {next} (see its README)",
        dir.display(),
        dir.display()
    );
    Ok(())
}
