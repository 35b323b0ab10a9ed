//! Plugin signatures against an independent implementation and a real
//! registry (Debian's docker-registry on loopback): what rekon signs,
//! Python's `cryptography` verifies over cosign's payload, and what that
//! side signs, rekon verifies (`signatures/cosign_side.py`, sharing no
//! code with rekon). Then the tamper set, each refused with its reason:
//! an edited payload, a signature copied to another digest, the wrong key,
//! a key carried inside the signature instead of the configured one
//! (cosign's GHSA-fx35-mq7g-6g98), a tag moved to an unsigned digest.
//!
//! Nothing skips: python3 without `cryptography` (scripts/setup.sh installs
//! it) or a missing docker-registry fails the test saying so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rekon::source::oci::{Fetcher, OciConfig, RegistryAuth};
use rekon::source::signature::{self, KeyAlgorithm, Policy, PublicKey, SigningKey, VerifyError};
use rekon_e2e::registry::Registry;
use rekon_e2e::{Paths, output_text, rekon_cli, with_custom_section};

const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs the Python side ([`rekon_e2e::cosign_side::run`]).
fn python(args: &[&str]) -> anyhow::Result<String> {
    rekon_e2e::cosign_side::run(args)
}

fn module() -> anyhow::Result<Vec<u8>> {
    let paths = Paths::discover()?;
    let file = paths.test_plugins.join("chaos-v1.wasm");
    std::fs::read(&file).with_context(|| {
        format!(
            "{} is missing: run `make test-plugins` first",
            file.display()
        )
    })
}

fn fetcher() -> Fetcher {
    Fetcher::new(OciConfig {
        timeout: Duration::from_secs(10),
        retries: 0,
        ..OciConfig::default()
    })
}

async fn push(
    registry: &Registry,
    repo_tag: &str,
    bytes: &[u8],
) -> anyhow::Result<(String, String)> {
    let reference = format!("{}/{repo_tag}", registry.host());
    let digest = fetcher()
        .push(bytes, &reference, &RegistryAuth::Anonymous, BTreeMap::new())
        .await?;
    Ok((reference, digest))
}

fn write_pub(dir: &Path, name: &str, key: &SigningKey) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("{name}.pub"));
    std::fs::write(&path, key.public_key_pem())?;
    Ok(path)
}

async fn verify_with(
    reference: &str,
    keys: &[&PublicKey],
) -> Result<signature::Verified, VerifyError> {
    let policy = Policy::keys(
        keys.iter()
            .enumerate()
            .map(|(i, k)| (format!("key{i}"), (*k).clone())),
    );
    signature::verify(
        &fetcher(),
        reference,
        None,
        &policy,
        &RegistryAuth::Anonymous,
    )
    .await
}

fn repo_of(reference: &str) -> &str {
    let path = reference.split_once('/').map_or(reference, |(_, p)| p);
    path.split([':', '@']).next().unwrap_or(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rekon_and_python_verify_each_others_signatures() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let registry = Registry::start()?;
        let dir = tempfile::tempdir()?;
        let bytes = module()?;
        let mut rows = Vec::new();
        for alg in [KeyAlgorithm::EcdsaP256, KeyAlgorithm::Ed25519] {
            // rekon signs; Python verifies.
            let (reference, digest) = push(
                &registry,
                &format!("plugins/by-rekon-{}:v1", alg.name()),
                &bytes,
            )
            .await?;
            let key = SigningKey::generate(alg)?;
            let annotations = BTreeMap::from([("team".to_owned(), "platform".to_owned())]);
            let signed = signature::sign(
                &fetcher(),
                &reference,
                &key,
                &annotations,
                &RegistryAuth::Anonymous,
            )
            .await?;
            assert_eq!(signed.digest, digest);
            let public = write_pub(dir.path(), alg.name(), &key)?;
            let out = python(&[
                "verify",
                &registry.host(),
                repo_of(&reference),
                &digest,
                public.to_str().unwrap(),
            ])?;
            assert!(out.contains("1 signature(s) verify"), "{out}");
            // Signing again appends nothing (the same signature is there).
            let again = signature::sign(
                &fetcher(),
                &reference,
                &key,
                &annotations,
                &RegistryAuth::Anonymous,
            )
            .await?;
            assert!(again.already_signed || again.digest == digest);

            // Python signs; rekon verifies (cold: resolve + read + check).
            let (reference, digest) = push(
                &registry,
                &format!("plugins/by-python-{}:v1", alg.name()),
                &bytes,
            )
            .await?;
            let prefix = dir.path().join(format!("python-{}", alg.name()));
            python(&[
                "sign",
                &registry.host(),
                repo_of(&reference),
                &digest,
                prefix.to_str().unwrap(),
                alg.name(),
            ])?;
            let theirs =
                PublicKey::from_pem(&std::fs::read_to_string(prefix.with_extension("pub"))?)?;
            let started = Instant::now();
            let verified = verify_with(&reference, &[&theirs]).await?;
            rows.push(format!(
                "{:<11} verify against the registry: {:?}",
                alg.name(),
                started.elapsed()
            ));
            assert_eq!(verified.digest, digest);
            // And the key Python wrote signs for rekon too (PKCS#8 read).
            let their_key =
                SigningKey::from_pem(&std::fs::read_to_string(prefix.with_extension("key"))?)?;
            assert_eq!(their_key.public_key(), theirs);
        }
        println!("signatures:\n{}", rows.join("\n"));
        anyhow::Ok(())
    })
    .await
    .expect("timed out: likely deadlocked")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_signatures_are_refused_with_their_reason() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let registry = Registry::start()?;
        let host = registry.host();
        let bytes = module()?;
        let other_bytes = with_custom_section(&bytes, "rekon-e2e-other", b"");
        let key = SigningKey::generate(KeyAlgorithm::EcdsaP256)?;
        let trusted = key.public_key();
        let sign = |reference: String| {
            let key = &key;
            async move {
                signature::sign(
                    &fetcher(),
                    &reference,
                    key,
                    &BTreeMap::new(),
                    &RegistryAuth::Anonymous,
                )
                .await
            }
        };
        let reason = |r: Result<signature::Verified, VerifyError>| match r {
            Ok(v) => format!("verified {v:?}"),
            Err(e) => e.reason().to_owned(),
        };

        // Unsigned.
        let (unsigned, _) = push(&registry, "plugins/unsigned:v1", &bytes).await?;
        assert_eq!(
            reason(verify_with(&unsigned, &[&trusted]).await),
            "SignatureMissing"
        );

        // Signed, then verified under the wrong key.
        let (signed, _) = push(&registry, "plugins/signed:v1", &bytes).await?;
        sign(signed.clone()).await?;
        assert!(verify_with(&signed, &[&trusted]).await.is_ok());
        let stranger = SigningKey::generate(KeyAlgorithm::EcdsaP256)?.public_key();
        assert_eq!(
            reason(verify_with(&signed, &[&stranger]).await),
            "UntrustedKey",
            "wrong key"
        );

        // The payload edited (the signature kept).
        let (edited, digest) = push(&registry, "plugins/edited:v1", &bytes).await?;
        sign(edited.clone()).await?;
        python(&["edit-payload", &host, repo_of(&edited), &digest])?;
        assert_eq!(
            reason(verify_with(&edited, &[&trusted]).await),
            "UntrustedKey",
            "edited payload"
        );

        // A valid signature of another digest, copied to this one.
        let (original, from) = push(&registry, "plugins/copied:v1", &bytes).await?;
        sign(original).await?;
        let (copy, to) = push(&registry, "plugins/copied:v2", &other_bytes).await?;
        python(&["copy-signature", &host, repo_of(&copy), &from, &to])?;
        let err = verify_with(&copy, &[&trusted]).await.unwrap_err();
        assert_eq!(err.reason(), "SignatureInvalid", "{err}");
        assert!(
            err.to_string().contains(&from),
            "names the digest it was made for: {err}"
        );

        // A signature carrying its own key instead of the configured one.
        let (carried, digest) = push(&registry, "plugins/carried:v1", &bytes).await?;
        let dir = tempfile::tempdir()?;
        let attacker = dir.path().join("attacker");
        python(&[
            "sign",
            &host,
            repo_of(&carried),
            &digest,
            attacker.to_str().unwrap(),
            "ecdsa-p256",
            "--carry-key",
        ])?;
        let err = verify_with(&carried, &[&trusted]).await.unwrap_err();
        assert_eq!(err.reason(), "UntrustedKey", "{err}");
        assert!(err.to_string().contains("never trusted"), "{err}");

        // The tag moved to an unsigned digest: the tag's old signature does
        // not cover it; the old digest still verifies.
        let (tag, old) = push(&registry, "plugins/moving:stable", &bytes).await?;
        sign(tag.clone()).await?;
        let (_, new) = push(&registry, "plugins/moving:stable", &other_bytes).await?;
        assert_ne!(old, new);
        assert_eq!(
            reason(verify_with(&tag, &[&trusted]).await),
            "SignatureMissing",
            "moved tag"
        );
        let pinned = format!("{host}/plugins/moving@{old}");
        assert!(
            verify_with(&pinned, &[&trusted]).await.is_ok(),
            "the old digest"
        );
        anyhow::Ok(())
    })
    .await
    .expect("timed out: likely deadlocked")
    .unwrap();
}

/// The command line: a key pair from `rekon plugin keygen`, `rekon plugin
/// push --sign`, `rekon plugin verify`, checked by the Python side too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_signs_pushes_and_verifies() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let paths = Paths::discover()?;
        let registry = Registry::start()?;
        let dir = tempfile::tempdir()?;
        let prefix = dir.path().join("cosign");
        let out = rekon_cli(
            &paths,
            &["plugin", "keygen", "--out", prefix.to_str().unwrap()],
        );
        assert!(out.status.success(), "{}", output_text(&out));
        let (key, public) = (prefix.with_extension("key"), prefix.with_extension("pub"));
        let file = paths.test_plugins.join("chaos-v1.wasm");
        let reference = format!("{}/plugins/cli:v1", registry.host());
        let out = rekon_cli(
            &paths,
            &[
                "plugin",
                "push",
                file.to_str().unwrap(),
                &reference,
                "--sign",
                key.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", output_text(&out));
        let digest = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(digest.starts_with("sha256:"), "{}", output_text(&out));
        let checked = python(&[
            "verify",
            &registry.host(),
            "plugins/cli",
            &digest,
            public.to_str().unwrap(),
        ])?;
        assert!(checked.contains("1 signature(s) verify"), "{checked}");
        let out = rekon_cli(
            &paths,
            &[
                "plugin",
                "verify",
                &reference,
                "--key",
                public.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", output_text(&out));
        // Another key: refused, saying why.
        let other = dir.path().join("other");
        assert!(
            rekon_cli(
                &paths,
                &[
                    "plugin",
                    "keygen",
                    "--out",
                    other.to_str().unwrap(),
                    "--algorithm",
                    "ed25519"
                ]
            )
            .status
            .success()
        );
        let out = rekon_cli(
            &paths,
            &[
                "plugin",
                "verify",
                &reference,
                "--key",
                other.with_extension("pub").to_str().unwrap(),
            ],
        );
        assert!(!out.status.success());
        assert!(
            output_text(&out).contains("UntrustedKey"),
            "{}",
            output_text(&out)
        );
        // `plugin sign` on a second tag of the same module.
        let out = rekon_cli(
            &paths,
            &[
                "plugin",
                "sign",
                &format!("{}/plugins/cli@{digest}", registry.host()),
                "--key",
                other.with_extension("key").to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", output_text(&out));
        let out = rekon_cli(
            &paths,
            &[
                "plugin",
                "verify",
                &reference,
                "--key",
                public.to_str().unwrap(),
                "--key",
                other.with_extension("pub").to_str().unwrap(),
                "--minimum-matches",
                "2",
            ],
        );
        assert!(out.status.success(), "{}", output_text(&out));
        anyhow::Ok(())
    })
    .await
    .expect("timed out: likely deadlocked")
    .unwrap();
}
