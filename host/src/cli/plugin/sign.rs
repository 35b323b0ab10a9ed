//! `rekon plugin keygen|sign|verify` and `push --sign`: signatures in
//! cosign's format, made and checked without cosign.

use std::path::PathBuf;

use super::registry::RegistryArgs;
use crate::cli::shared::block_on;

/// `rekon plugin keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Path prefix of the two files.
    #[arg(long, default_value = "cosign")]
    out: PathBuf,
    /// `ecdsa-p256` (cosign's default) or `ed25519`.
    #[arg(long, default_value = "ecdsa-p256")]
    algorithm: String,
}

/// `rekon plugin sign`.
#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// `registry/repository:tag` or `@sha256:…`.
    reference: String,
    /// The signing key (PKCS#8 PEM).
    #[arg(long)]
    key: PathBuf,
    /// `KEY=VALUE` carried in the signed payload (repeatable).
    #[arg(long = "annotation", value_name = "KEY=VALUE", value_parser = parse_annotation)]
    annotations: Vec<(String, String)>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// `rekon plugin verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// `registry/repository:tag` or `@sha256:…`.
    reference: String,
    /// A trusted public key (repeatable).
    #[arg(long, required = true)]
    key: Vec<PathBuf>,
    /// How many distinct keys must have signed.
    #[arg(long, default_value_t = 1)]
    minimum_matches: usize,
    /// `KEY=VALUE` the signed payload must carry (repeatable).
    #[arg(long = "annotation", value_name = "KEY=VALUE", value_parser = parse_annotation)]
    annotations: Vec<(String, String)>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// `KEY=VALUE` of `--annotation`.
fn parse_annotation(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

/// `registry/repository@digest` for a pushed `reference` (tag dropped).
fn pin(reference: &str, digest: &str) -> String {
    let name = reference.split('@').next().unwrap_or(reference);
    let repo = match name.rsplit_once(':') {
        // A colon after the last slash is a tag; before it, a port.
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => name,
    };
    format!("{repo}@{digest}")
}

/// `rekon plugin keygen`: write the key pair, say where.
pub fn keygen(args: KeygenArgs) -> anyhow::Result<()> {
    let (private, public) = rekon::commands::sign::keygen(&args.out, args.algorithm.parse()?)?;
    eprintln!(
        "wrote {} (keep it secret) and {}",
        private.display(),
        public.display()
    );
    Ok(())
}

/// `rekon plugin sign`: print the signature's reference.
pub fn sign(args: SignArgs) -> anyhow::Result<()> {
    let signed = block_on(rekon::commands::sign::sign(
        &args.reference,
        &args.key,
        &args.annotations.into_iter().collect(),
        &args.registry.options(),
    ))?;
    let note = if signed.already_signed {
        " (already signed with this key)"
    } else {
        ""
    };
    eprintln!("signed {} {}{note}", args.reference, signed.digest);
    println!("{}", signed.signature_reference);
    Ok(())
}

/// `rekon plugin verify`: fails saying why unless the keys, the minimum
/// and the annotations are satisfied.
pub fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    let verified = block_on(rekon::commands::sign::verify(
        &args.reference,
        &args.key,
        args.minimum_matches,
        args.annotations.into_iter().collect(),
        &args.registry.options(),
    ))?;
    println!(
        "{} ({}) verified, signed by {}",
        args.reference,
        verified.digest,
        verified.signers.join(", ")
    );
    Ok(())
}

/// `rekon plugin push [--sign KEY]`: publish, sign the pushed digest when
/// asked, print the manifest digest.
pub fn push(
    file: &std::path::Path,
    reference: &str,
    sign: Option<PathBuf>,
    precompile: &rekon::commands::push::Precompile,
    registry: RegistryArgs,
) -> anyhow::Result<()> {
    let options = registry.options();
    let runtime = tokio::runtime::Runtime::new()?;
    let pushed = runtime.block_on(rekon::commands::push::push(
        file, reference, &options, precompile,
    ))?;
    eprintln!("pushed {} {} to {reference}", pushed.name, pushed.version);
    if let Some(engine) = &pushed.precompiled_for {
        eprintln!("with precompiled code for engine {engine}");
    }
    if let Some(key) = sign {
        let signed = runtime.block_on(rekon::commands::sign::sign(
            &pin(reference, &pushed.digest),
            &key,
            &Default::default(),
            &options,
        ))?;
        eprintln!("signed {} ({})", signed.digest, signed.signature_reference);
    }
    println!("{}", pushed.digest);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_drops_the_tag_and_keeps_the_port() {
        assert_eq!(
            pin("localhost:5000/a/b:v1", "sha256:0"),
            "localhost:5000/a/b@sha256:0"
        );
        assert_eq!(
            pin("localhost:5000/a/b", "sha256:0"),
            "localhost:5000/a/b@sha256:0"
        );
        assert_eq!(pin("r.io/a@sha256:9", "sha256:0"), "r.io/a@sha256:0");
    }

    #[test]
    fn annotations_need_a_key() {
        assert_eq!(
            parse_annotation("team=a=b"),
            Ok(("team".into(), "a=b".into()))
        );
        assert!(parse_annotation("=x").is_err());
        assert!(parse_annotation("x").is_err());
    }
}
