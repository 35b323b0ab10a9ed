//! Signed plugins end to end (issue 32): `rekon run --plugin-objects
//! --require-signatures` on kube-sim, modules in a real registry (Debian's
//! docker-registry), signed by `rekon plugin push --sign` and by an
//! independent implementation (`signatures/cosign_side.py`, Python's
//! `cryptography`); then every tamper case through Plugin objects, each
//! refused with its reason while the verified version keeps serving; the
//! registry down after a verified pull; `--plugins DIR` files with cosign
//! blob signatures beside them.
//!
//! The plugin is the chaos test plugin: v1 annotates every ConfigMap it
//! reconciles `chaos.rekon.dev/version: v1`, v2 `v2`, so which build
//! serves is visible on the objects. Across every failure, the test
//! asserts that no digest that did not verify is ever served (the
//! Plugin's `status.digest` and every replica's report) and that the
//! ConfigMaps stay with the verified build.
//!
//! Nothing skips: a missing docker-registry or Python `cryptography`
//! fails the test saying so.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use rekon_e2e::plugin_objects::{
    chaos_plugin, condition, config_map, push, rekon, wait_plugin_crd,
};
use rekon_e2e::registry::Registry;
use rekon_e2e::{Env, EnvOptions, Paths, apply_object, get, with_custom_section};
use serde_json::{Value, json};

const ANNOTATION: &str = "chaos.rekon.dev/version";
const WAIT: Duration = Duration::from_secs(60);
/// Where the host looks for key Secrets (`--lease-namespace`).
const NAMESPACE: &str = "default";

/// Runs the Python side ([`rekon_e2e::cosign_side::run`]).
fn python(args: &[&str]) -> anyhow::Result<String> {
    rekon_e2e::cosign_side::run(args)
}

/// `registry/repo` of `host/repo:tag`, as the Python side wants it.
fn repo_of(reference: &str) -> &str {
    let path = reference.split_once('/').map_or(reference, |(_, p)| p);
    path.split([':', '@']).next().unwrap_or(path)
}

fn plugin(env: &Env) -> Option<Value> {
    get(env.main(), "rekon.dev/v1alpha1", "plugins", None, "chaos")
}

/// Whether the status (and its `Verified` condition) describes the
/// Plugin's current generation: a condition left by an earlier pass must
/// not pass for this one's.
fn current(obj: &Value) -> bool {
    let generation = &obj["metadata"]["generation"];
    let verified = obj["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Verified"));
    !generation.is_null()
        && obj["status"]["observedGeneration"] == *generation
        && verified.is_some_and(|c| c["observedGeneration"] == *generation)
}

/// Edits `spec` of Plugin chaos (a merge patch).
fn edit(env: &Env, spec: Value) -> anyhow::Result<()> {
    apply_object(
        env.main(),
        json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
               "metadata": {"name": "chaos"}, "spec": spec}),
    )?;
    Ok(())
}

fn key_secret(env: &Env, name: &str, public_pem: &str) -> anyhow::Result<()> {
    apply_object(
        env.main(),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": NAMESPACE},
               "stringData": {"cosign.pub": public_pem}}),
    )?;
    Ok(())
}

async fn wait_serving(env: &mut Env, digest: &str) -> anyhow::Result<Value> {
    let what = format!("Plugin chaos to serve {digest}, verified");
    let last = std::cell::RefCell::new(Value::Null);
    env.wait_for(&what, WAIT, |env| {
        let obj = plugin(env)?;
        *last.borrow_mut() = obj.clone();
        let ready = condition(&obj, "Ready")?;
        let degraded = condition(&obj, "Degraded")?;
        let verified = condition(&obj, "Verified")?;
        (current(&obj)
            && ready.0 == "True"
            && degraded.0 == "False"
            && verified.0 == "True"
            && verified.2.contains(digest)
            && obj["status"]["digest"] == digest)
            .then_some(obj)
    })
    .await
    .with_context(|| format!("the Plugin was last:\n{:#}", last.borrow()))
}

/// Waits for `Verified` False with `reason` (and `Degraded` saying the
/// same); the Plugin and `Verified`'s message.
async fn wait_refused(env: &mut Env, reason: &str) -> anyhow::Result<(Value, String)> {
    let what = format!("Plugin chaos to be refused with reason {reason}");
    let last = std::cell::RefCell::new(Value::Null);
    env.wait_for(&what, WAIT, |env| {
        let obj = plugin(env)?;
        *last.borrow_mut() = obj.clone();
        let (status, why, message) = condition(&obj, "Verified")?;
        let degraded = condition(&obj, "Degraded")?;
        (current(&obj)
            && status == "False"
            && why == reason
            && degraded.0 == "True"
            && degraded.1 == reason)
            .then_some((obj, message))
    })
    .await
    .with_context(|| format!("the Plugin was last:\n{:#}", last.borrow()))
}

/// Points Plugin chaos at `reference`, which must be refused with
/// `reason` while `serving` keeps serving; `Verified`'s message.
async fn refused(
    env: &mut Env,
    verified: &BTreeSet<String>,
    serving: &str,
    reference: String,
    reason: &str,
) -> anyhow::Result<String> {
    edit(env, json!({"module": reference}))?;
    let (obj, message) = wait_refused(env, reason).await?;
    assert_eq!(
        obj["status"]["digest"],
        json!(serving),
        "the verified version keeps serving"
    );
    assert_eq!(
        condition(&obj, "Ready").map(|c| c.0).as_deref(),
        Some("True")
    );
    assert_only_verified_served(&obj, verified);
    Ok(message)
}

/// Every digest the Plugin says is served (its status, every replica's
/// report) verified.
fn assert_only_verified_served(obj: &Value, verified: &BTreeSet<String>) {
    let mut served: Vec<&str> = obj["status"]["digest"].as_str().into_iter().collect();
    if let Some(replicas) = obj["status"]["replicas"].as_array() {
        served.extend(replicas.iter().filter_map(|r| r["digest"].as_str()));
    }
    for digest in served {
        assert!(
            verified.contains(digest),
            "an unverified module serves: {digest} (verified: {verified:?})\n{obj:#}"
        );
    }
}

/// A new ConfigMap is reconciled by the build `mark` (v1 or v2).
async fn assert_reconciled_by(env: &mut Env, name: &str, mark: &str) -> anyhow::Result<()> {
    config_map(env, name)?;
    let what = format!("ConfigMap {name} annotated {mark}");
    env.wait_for(&what, WAIT, |env| {
        let cm = get(env.main(), "v1", "configmaps", Some("default"), name)?;
        (cm["metadata"]["annotations"][ANNOTATION] == mark).then_some(())
    })
    .await
}

fn options(cache: &Path, extra: &[&str]) -> EnvOptions {
    let mut extra_args: Vec<String> = [
        "--plugin-objects",
        "--require-signatures",
        "--lease-namespace",
        NAMESPACE,
        "--cache-dir",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    extra_args.push(cache.display().to_string());
    extra_args.extend(extra.iter().map(|s| (*s).to_owned()));
    EnvOptions {
        plugins: Vec::new(),
        extra_args,
        ..EnvOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_verified_modules_serve_from_plugin_objects() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(600), async {
        let paths = Paths::discover()?;
        let mut registry = Registry::start()?;
        let host = registry.host();
        let keys = tempfile::tempdir()?;
        let key = keys.path().join("cosign");
        rekon(
            &paths,
            &["plugin", "keygen", "--out", key.to_str().unwrap()],
        )?;
        let (private, public) = (key.with_extension("key"), key.with_extension("pub"));
        let public_pem = std::fs::read_to_string(&public)?;
        let stranger = keys.path().join("stranger");
        rekon(
            &paths,
            &["plugin", "keygen", "--out", stranger.to_str().unwrap()],
        )?;

        let v1_file = paths.test_plugins.join("chaos-v1.wasm");
        let v2_file = paths.test_plugins.join("chaos-v2.wasm");
        let v1 = format!("{host}/rekon/chaos:1");
        let d1 = push(&paths, &v1_file, &v1, Some(&private))?;
        let mut verified: BTreeSet<String> = BTreeSet::from([d1.clone()]);

        let cache = tempfile::tempdir()?;
        let mut env = Env::start(options(cache.path(), &[])).await?;
        wait_plugin_crd(&mut env, WAIT).await?;
        key_secret(&env, "plugin-signing", &public_pem)?;
        let verification = json!({"keys": [{"secretRef": {"name": "plugin-signing"}}]});

        // --require-signatures: a Plugin without `verification` is refused.
        apply_object(env.main(), chaos_plugin(&paths, &v1_file, &v1, None)?)?;
        let (obj, message) = wait_refused(&mut env, "VerificationRequired").await?;
        assert!(message.contains("--require-signatures"), "{message}");
        assert_eq!(
            condition(&obj, "Ready").map(|c| c.0).as_deref(),
            Some("False")
        );
        assert!(obj["status"]["digest"].is_null(), "nothing serves: {obj:#}");

        // Signed with `rekon plugin push --sign`: serves.
        edit(&env, json!({"verification": verification}))?;
        let obj = wait_serving(&mut env, &d1).await?;
        let (_, reason, message) = condition(&obj, "Verified").context("Verified")?;
        assert_eq!(reason, "SignaturesVerified");
        assert!(message.contains("plugin-signing"), "{message}");
        assert_reconciled_by(&mut env, "signed-by-rekon", "v1").await?;

        // Signed by the independent side (its own key, trusted inline): serves.
        let by_python = format!("{host}/rekon/chaos-python:2");
        let d2 = push(&paths, &v2_file, &by_python, None)?;
        let python_key = keys.path().join("python");
        python(&[
            "sign",
            &host,
            repo_of(&by_python),
            &d2,
            python_key.to_str().unwrap(),
            "ed25519",
        ])?;
        let python_pem = std::fs::read_to_string(python_key.with_extension("pub"))?;
        edit(
            &env,
            json!({"module": by_python, "verification": {"keys": [
                {"secretRef": {"name": "plugin-signing"}},
                {"pem": python_pem},
            ]}}),
        )?;
        let obj = wait_serving(&mut env, &d2).await?;
        verified.insert(d2.clone());
        assert_only_verified_served(&obj, &verified);
        assert_reconciled_by(&mut env, "signed-by-python", "v2").await?;

        // Back to v1, then the tamper set: each is refused with its reason
        // and v1 keeps serving.
        edit(&env, json!({"module": v1, "verification": verification}))?;
        wait_serving(&mut env, &d1).await?;
        let other = |name: &str| -> anyhow::Result<PathBuf> {
            // A build of its own (another digest), still chaos v2.
            let bytes = with_custom_section(&std::fs::read(&v2_file)?, name, b"");
            let file = keys.path().join(format!("{name}.wasm"));
            std::fs::write(&file, bytes)?;
            Ok(file)
        };
        // The payload edited after signing.
        let edited = format!("{host}/rekon/edited:1");
        let digest = push(&paths, &other("edited")?, &edited, Some(&private))?;
        python(&["edit-payload", &host, repo_of(&edited), &digest])?;
        refused(&mut env, &verified, &d1, edited, "UntrustedKey").await?;

        // A valid signature of another digest, copied to this one.
        let copied = format!("{host}/rekon/copied:1");
        let from = push(&paths, &other("copied-from")?, &copied, Some(&private))?;
        let copied = format!("{host}/rekon/copied:2");
        let to = push(&paths, &other("copied-to")?, &copied, None)?;
        python(&["copy-signature", &host, repo_of(&copied), &from, &to])?;
        let message = refused(&mut env, &verified, &d1, copied, "SignatureInvalid").await?;
        assert!(
            message.contains(&from),
            "names the digest signed: {message}"
        );

        // Signed by a key the Plugin does not trust.
        let wrong = format!("{host}/rekon/wrong-key:1");
        push(
            &paths,
            &other("wrong-key")?,
            &wrong,
            Some(&stranger.with_extension("key")),
        )?;
        refused(&mut env, &verified, &d1, wrong, "UntrustedKey").await?;

        // A signature carrying its own key instead of the configured one.
        let carried = format!("{host}/rekon/carried:1");
        let digest = push(&paths, &other("carried")?, &carried, None)?;
        let attacker = keys.path().join("attacker");
        python(&[
            "sign",
            &host,
            repo_of(&carried),
            &digest,
            attacker.to_str().unwrap(),
            "ecdsa-p256",
            "--carry-key",
        ])?;
        let message = refused(&mut env, &verified, &d1, carried, "UntrustedKey").await?;
        assert!(message.contains("never trusted"), "{message}");

        // Signed to unsigned: the signed version keeps serving.
        let unsigned = format!("{host}/rekon/unsigned:1");
        push(&paths, &other("unsigned")?, &unsigned, None)?;
        refused(&mut env, &verified, &d1, unsigned, "SignatureMissing").await?;

        // A tag whose signature is for its old digest, after it moved.
        let moving = format!("{host}/rekon/moving:stable");
        let old = push(&paths, &v1_file, &moving, Some(&private))?;
        verified.insert(old.clone());
        edit(&env, json!({"module": moving, "pullPolicy": "Always"}))?;
        wait_serving(&mut env, &old).await?;
        let new = push(&paths, &other("moved")?, &moving, None)?;
        edit(&env, json!({"pullPolicy": "IfNotPresent"}))?;
        let (obj, message) = wait_refused(&mut env, "SignatureMissing").await?;
        assert!(message.contains(&new), "the moved digest: {message}");
        assert_eq!(obj["status"]["digest"], json!(old));
        assert_only_verified_served(&obj, &verified);
        assert_reconciled_by(&mut env, "after-tampering", "v1").await?;
        // Each refusal was also recorded as a Warning Event on the Plugin.
        let reasons: BTreeSet<String> = env
            .main()
            .list("events.k8s.io/v1", "events", None, "")
            .map_err(|e| anyhow::anyhow!("list Events: {e:?}"))?
            .iter()
            .filter(|e| e["regarding"]["kind"] == "Plugin" && e["regarding"]["name"] == "chaos")
            .filter(|e| e["type"] == "Warning")
            .filter_map(|e| e["reason"].as_str().map(str::to_owned))
            .collect();
        for reason in [
            "VerificationRequired",
            "UntrustedKey",
            "SignatureInvalid",
            "SignatureMissing",
        ] {
            assert!(reasons.contains(reason), "no {reason} Event: {reasons:?}");
        }

        // The key Secret deleted: a validly signed module cannot be
        // verified (KeyUnavailable) and v1 keeps serving; the Secret back,
        // the retry verifies it.
        let next = format!("{host}/rekon/next:1");
        let d_next = push(&paths, &other("next")?, &next, Some(&private))?;
        env.main()
            .delete("v1", "secrets", Some(NAMESPACE), "plugin-signing")
            .map_err(|e| anyhow::anyhow!("delete the key Secret: {e:?}"))?;
        let message = refused(&mut env, &verified, &old, next, "KeyUnavailable").await?;
        assert!(message.contains("does not exist"), "{message}");
        assert_reconciled_by(&mut env, "without-key", "v1").await?;
        key_secret(&env, "plugin-signing", &public_pem)?;
        let obj = wait_serving(&mut env, &d_next).await?;
        verified.insert(d_next.clone());
        assert_only_verified_served(&obj, &verified);

        // The registry down after a verified pull: a restart serves the
        // verified module from the cache (the tag cannot be resolved).
        edit(&env, json!({"module": v1}))?;
        wait_serving(&mut env, &d1).await?;
        registry.stop();
        env.rekon.stop();
        env.rekon = env.spawn_replica(&options(cache.path(), &[]))?;
        let obj = env
            .wait_for(
                "the restarted host to serve the verified cached module",
                WAIT,
                |env| {
                    let obj = plugin(env)?;
                    let ready = condition(&obj, "Ready")?;
                    let degraded = condition(&obj, "Degraded")?;
                    let verified = condition(&obj, "Verified")?;
                    (ready.0 == "True"
                        && degraded.1 == "RegistryUnreachable"
                        && degraded.2.contains("serves from the cache meanwhile")
                        && verified.0 == "True")
                        .then_some(obj)
                },
            )
            .await?;
        assert_eq!(obj["status"]["digest"], json!(d1));
        assert_only_verified_served(&obj, &verified);
        assert_reconciled_by(&mut env, "after-restart", "v1").await?;

        // The same cache under another key: the record is not this
        // policy's, the registry cannot be asked, nothing serves.
        key_secret(
            &env,
            "plugin-signing",
            &std::fs::read_to_string(stranger.with_extension("pub"))?,
        )?;
        env.rekon.stop();
        env.rekon = env.spawn_replica(&options(cache.path(), &[]))?;
        let obj = env
            .wait_for(
                "the restarted host to refuse the cached module",
                WAIT,
                |env| {
                    let obj = plugin(env)?;
                    let verified = condition(&obj, "Verified")?;
                    let ready = condition(&obj, "Ready")?;
                    (verified.0 == "False"
                        && verified.1 == "RegistryUnreachable"
                        && ready.0 == "False")
                        .then_some(obj)
                },
            )
            .await?;
        let log = std::fs::read_to_string(env.rekon.log_path())?;
        assert!(!log.contains("loaded plugin"), "nothing may load:\n{log}");
        let _ = obj;
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

/// `--plugins DIR` with `--signature-key`: a file loads only with a valid
/// cosign blob signature beside it (`NAME.wasm.sig`, made by the Python
/// side); a refused file keeps the previous version serving, and the
/// refusal is logged and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_files_load_only_with_a_valid_signature_file() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let paths = Paths::discover()?;
        let keys = tempfile::tempdir()?;
        let signer = keys.path().join("signer");
        let v1 = paths.test_plugins.join("chaos-v1.wasm");
        let v2 = paths.test_plugins.join("chaos-v2.wasm");
        let staged = keys.path().join("chaos-v1.wasm.sig");
        python(&[
            "sign-blob",
            v1.to_str().unwrap(),
            signer.to_str().unwrap(),
            "ecdsa-p256",
            staged.to_str().unwrap(),
        ])?;
        let public = signer.with_extension("pub");
        let mut env = Env::start(EnvOptions {
            plugins: Vec::new(),
            serve_ops: true,
            extra_args: vec![
                "--require-signatures".to_owned(),
                "--signature-key".to_owned(),
                public.display().to_string(),
            ],
            ..EnvOptions::default()
        })
        .await?;
        let file = env.plugin_dir.join("chaos.wasm");
        let sig = env.plugin_dir.join("chaos.wasm.sig");
        // An unsigned file: refused, nothing serves.
        std::fs::copy(&v1, &file)?;
        wait_log(&mut env, "SignatureMissing").await?;
        // Its signature arrives: it loads.
        std::fs::copy(&staged, &sig)?;
        wait_log(&mut env, "loaded plugin").await?;
        assert_reconciled_by(&mut env, "signed-file", "v1").await?;

        // v2 replaces it with v1's signature still beside it: refused,
        // v1 keeps serving.
        let tmp = env.plugin_dir.join(".chaos.tmp");
        std::fs::copy(&v2, &tmp)?;
        std::fs::rename(&tmp, &file)?;
        wait_log(&mut env, "UntrustedKey").await?;
        assert_reconciled_by(&mut env, "unsigned-v2", "v1").await?;
        // A signature file that is not one.
        std::fs::write(&sig, "not base64!")?;
        wait_log(&mut env, "SignatureInvalid").await?;
        // v2 signed by the configured key: it loads.
        python(&[
            "sign-blob",
            v2.to_str().unwrap(),
            signer.to_str().unwrap(),
            "ecdsa-p256",
            keys.path().join("v2.sig").to_str().unwrap(),
        ])?;
        std::fs::copy(keys.path().join("v2.sig"), &sig)?;
        wait_log(&mut env, "replaced plugin").await?;
        assert_reconciled_by(&mut env, "signed-v2", "v2").await?;

        let ops = env.ops_addr.context("ops served")?;
        let metrics = rekon_e2e::http_get(ops, "/metrics")?;
        for outcome in [
            "verified",
            "signature_missing",
            "untrusted_key",
            "signature_invalid",
        ] {
            let series = format!("rekon_plugin_verification_total{{outcome=\"{outcome}\"}}");
            assert!(metrics.contains(&series), "{series} missing:\n{metrics}");
        }
        let log = std::fs::read_to_string(env.rekon.log_path())?;
        let loads = log
            .lines()
            .filter(|l| {
                l.contains("rekon::plugin::registry:")
                    && (l.contains(" loaded plugin ") || l.contains(" replaced plugin "))
            })
            .count();
        assert_eq!(loads, 2, "only the two signed files were loaded:\n{log}");
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

/// Waits until the host's log contains `text`.
async fn wait_log(env: &mut Env, text: &str) -> anyhow::Result<()> {
    let what = format!("the host to log {text:?}");
    env.wait_for(&what, WAIT, |env| {
        let log = std::fs::read_to_string(env.rekon.log_path()).ok()?;
        log.contains(text).then_some(())
    })
    .await
    .with_context(|| {
        format!(
            "the host's log:\n{}",
            std::fs::read_to_string(env.rekon.log_path()).unwrap_or_default()
        )
    })
}
