//! Precompiled plugin code end to end (issue 39): `rekon plugin push
//! --precompile --sign` attaches the module's code for this engine as a
//! second layer of its OCI artifact in a real registry (Debian's
//! docker-registry); `rekon run --plugin-objects` with an empty cache maps
//! it instead of compiling when the Plugin's signature verification covers
//! the manifest, and compiles (saying why, in its log and
//! `rekon_plugin_precompiled_refused_total`) when it does not: an unsigned
//! artifact, or one signed but made for another engine. Which way the code
//! came is in the Plugin's `Ready` message and in
//! `rekon_plugin_code_load_duration_seconds{path}`.
//!
//! Nothing skips: a missing docker-registry fails the test saying so.

use std::time::Duration;

use anyhow::Context;
use rekon_e2e::plugin_objects::{
    chaos_plugin, condition, config_map, push_with, rekon, wait_plugin_crd,
};
use rekon_e2e::registry::Registry;
use rekon_e2e::{Env, EnvOptions, Paths, apply_object, get, http_get, with_custom_section};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);
const NAMESPACE: &str = "default";

/// Waits until Plugin chaos serves `digest` and its `Ready` message says
/// the code was had by `path`; the message.
async fn wait_serving(env: &mut Env, digest: &str, path: &str) -> anyhow::Result<String> {
    let what = format!("Plugin chaos to serve {digest} with code {path}");
    let last = std::cell::RefCell::new(Value::Null);
    let needle = format!("its code was {path} in");
    env.wait_for(&what, WAIT, |env| {
        let obj = get(env.main(), "rekon.dev/v1alpha1", "plugins", None, "chaos")?;
        *last.borrow_mut() = obj.clone();
        let (status, _, message) = condition(&obj, "Ready")?;
        (status == "True" && obj["status"]["digest"] == digest && message.contains(&needle))
            .then_some(message)
    })
    .await
    .with_context(|| format!("the Plugin was last:\n{:#}", last.borrow()))
}

/// The host's `/metrics`.
fn metrics(env: &Env) -> anyhow::Result<String> {
    let addr = env.ops_addr.context("the host serves no /metrics")?;
    Ok(http_get(addr, "/metrics")?)
}

/// The value of the sample `series` (exact labels) in `text`, 0 if absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precompiled_code_serves_only_when_verified_and_for_this_engine() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(600), async {
        let paths = Paths::discover()?;
        let registry = Registry::start()?;
        let host = registry.host();
        let keys = tempfile::tempdir()?;
        let key = keys.path().join("cosign");
        rekon(
            &paths,
            &["plugin", "keygen", "--out", key.to_str().unwrap()],
        )?;
        let private = key.with_extension("key").display().to_string();
        let public_pem = std::fs::read_to_string(key.with_extension("pub"))?;
        let v1 = paths.test_plugins.join("chaos-v1.wasm");
        // Builds of their own (other digests), the same code.
        let build = |name: &str| -> anyhow::Result<std::path::PathBuf> {
            let bytes = with_custom_section(&std::fs::read(&v1)?, name, b"");
            let file = keys.path().join(format!("{name}.wasm"));
            std::fs::write(&file, bytes)?;
            Ok(file)
        };

        // Signed, with precompiled code for this engine.
        let signed = format!("{host}/rekon/chaos-precompiled:1");
        let d_signed = push_with(&paths, &v1, &signed, &["--precompile", "--sign", &private])?;
        // With precompiled code, unsigned.
        let unsigned_file = build("unsigned")?;
        let unsigned = format!("{host}/rekon/chaos-unsigned:1");
        let d_unsigned = push_with(&paths, &unsigned_file, &unsigned, &["--precompile"])?;
        // Signed, with precompiled code said to be for another engine.
        let foreign_file = build("foreign")?;
        rekon(
            &paths,
            &[
                "plugin",
                "compile",
                "--precompiled",
                "--cache-dir",
                keys.path().join("cache").to_str().unwrap(),
                foreign_file.to_str().unwrap(),
            ],
        )?;
        let cwasm = foreign_file.with_extension("cwasm");
        let engine = rekon(&paths, &["plugin", "engine-key"])?;
        let artifact = std::fs::read(&cwasm)?;
        let header_end = artifact
            .iter()
            .skip(21)
            .position(|b| *b == b'\n')
            .context("header")?
            + 21;
        let header = String::from_utf8(artifact[..header_end].to_vec())?;
        assert!(
            header.contains(&engine),
            "the artifact names this engine: {header}"
        );
        let mut tampered = header
            .replace(&engine, &"0".repeat(engine.len()))
            .into_bytes();
        tampered.extend_from_slice(&artifact[header_end..]);
        std::fs::write(&cwasm, tampered)?;
        let foreign = format!("{host}/rekon/chaos-foreign:1");
        let d_foreign = push_with(
            &paths,
            &foreign_file,
            &foreign,
            &["--precompiled", cwasm.to_str().unwrap(), "--sign", &private],
        )?;

        let cache = tempfile::tempdir()?;
        let mut env = Env::start(EnvOptions {
            plugins: Vec::new(),
            serve_ops: true,
            extra_args: vec![
                "--plugin-objects".to_owned(),
                "--lease-namespace".to_owned(),
                NAMESPACE.to_owned(),
                "--cache-dir".to_owned(),
                cache.path().display().to_string(),
            ],
            ..EnvOptions::default()
        })
        .await?;
        wait_plugin_crd(&mut env, WAIT).await?;
        apply_object(
            env.main(),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "plugin-signing", "namespace": NAMESPACE},
                   "stringData": {"cosign.pub": public_pem}}),
        )?;
        let verification = json!({"keys": [{"secretRef": {"name": "plugin-signing"}}]});

        // Verified and for this engine: mapped, not compiled.
        apply_object(
            env.main(),
            chaos_plugin(&paths, &v1, &signed, Some(verification.clone()))?,
        )?;
        wait_serving(&mut env, &d_signed, "precompiled").await?;
        config_map(&env, "by-precompiled-code")?;
        env.wait_for("the precompiled plugin to reconcile", WAIT, |env| {
            let cm = get(
                env.main(),
                "v1",
                "configmaps",
                Some("default"),
                "by-precompiled-code",
            )?;
            (cm["metadata"]["annotations"]["chaos.rekon.dev/version"] == "v1").then_some(())
        })
        .await?;
        let text = metrics(&env)?;
        assert_eq!(
            sample(
                &text,
                "rekon_plugin_code_load_duration_seconds_count{path=\"precompiled\"}"
            ),
            1.0,
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "rekon_plugin_code_load_duration_seconds_count{path=\"compiled\"}"
            ),
            0.0,
            "nothing was compiled: {text}"
        );

        // Not covered by a verified signature: compiled.
        let mut patch = chaos_plugin(&paths, &unsigned_file, &unsigned, None)?;
        // A merge patch: null removes the verification the object had.
        patch["spec"]["verification"] = Value::Null;
        patch["spec"]["verification"] = Value::Null;
        apply_object(env.main(), patch)?;
        wait_serving(&mut env, &d_unsigned, "compiled").await?;
        let text = metrics(&env)?;
        assert_eq!(
            sample(
                &text,
                "rekon_plugin_precompiled_refused_total{outcome=\"unverified\"}"
            ),
            1.0,
            "{text}"
        );

        // Verified, but made for another engine: not even downloaded, compiled.
        apply_object(
            env.main(),
            chaos_plugin(&paths, &foreign_file, &foreign, Some(verification))?,
        )?;
        wait_serving(&mut env, &d_foreign, "compiled").await?;
        let text = metrics(&env)?;
        assert_eq!(
            sample(
                &text,
                "rekon_plugin_precompiled_refused_total{outcome=\"engine_mismatch\"}"
            ),
            1.0,
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "rekon_plugin_code_load_duration_seconds_count{path=\"precompiled\"}"
            ),
            1.0,
            "only the verified one was mapped: {text}"
        );
        let log = std::fs::read_to_string(env.rekon.log_path())?;
        assert!(
            log.contains("no verified signature covers it"),
            "the unverified artifact's refusal is logged"
        );
        assert!(
            log.contains("compiled for engine 000"),
            "the foreign artifact's refusal names its engine"
        );
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}
