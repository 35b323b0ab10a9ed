//! What the Plugin-object tests share (`plugin_objects.rs`,
//! `signed_plugins.rs`, `precompiled_plugins.rs`): `rekon` itself, pushing a module, the Plugin `chaos`, waiting for the Plugin CRD, a
//! Plugin's conditions, and the ConfigMaps the chaos plugin reconciles.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::{Env, Paths, apply_object, output_text, rekon_cli};

/// `rekon ARGS`, which must succeed: its stdout, trimmed.
///
/// # Errors
/// When the command fails (its output in the error).
pub fn rekon(paths: &Paths, args: &[&str]) -> anyhow::Result<String> {
    let out = rekon_cli(paths, args);
    if !out.status.success() {
        bail!("rekon {args:?} failed: {}", output_text(&out));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `rekon plugin push FILE REF [--sign KEY]`: the manifest digest it prints.
///
/// # Errors
/// When the push fails or prints no digest.
pub fn push(
    paths: &Paths,
    file: &Path,
    reference: &str,
    key: Option<&Path>,
) -> anyhow::Result<String> {
    let key = key.map(|k| k.display().to_string());
    match &key {
        Some(key) => push_with(paths, file, reference, &["--sign", key.as_str()]),
        None => push_with(paths, file, reference, &[]),
    }
}

/// `rekon plugin push FILE REF EXTRA...`: the manifest digest it prints.
///
/// # Errors
/// When the push fails or prints no digest.
pub fn push_with(
    paths: &Paths,
    file: &Path,
    reference: &str,
    extra: &[&str],
) -> anyhow::Result<String> {
    let file = file.display().to_string();
    let mut args = vec!["plugin", "push", file.as_str(), reference];
    args.extend_from_slice(extra);
    let out = rekon(paths, &args)?;
    out.split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .map(str::to_owned)
        .with_context(|| format!("no digest in the output of rekon plugin push: {out}"))
}

/// The Plugin `chaos` serving `module`, its grant from `rekon plugin
/// manifest FILE`, and `verification` when given.
///
/// # Errors
/// When `rekon plugin manifest` fails or prints no YAML.
pub fn chaos_plugin(
    paths: &Paths,
    file: &Path,
    module: &str,
    verification: Option<Value>,
) -> anyhow::Result<Value> {
    let file = file.display().to_string();
    let out = rekon(paths, &["plugin", "manifest", &file, "--module", module])?;
    let mut obj: Value = serde_yaml::from_str(&out)?;
    obj["metadata"]["name"] = json!("chaos");
    if let Some(v) = verification {
        obj["spec"]["verification"] = v;
    }
    Ok(obj)
}

/// Waits until the host has installed the Plugin CRD in the main cluster.
///
/// # Errors
/// When `wait` passes first.
pub async fn wait_plugin_crd(env: &mut Env, wait: Duration) -> anyhow::Result<()> {
    env.wait_for("the Plugin CRD to be installed", wait, |env| {
        env.main()
            .list("rekon.dev/v1alpha1", "plugins", None, "")
            .is_ok()
            .then_some(())
    })
    .await
}

/// The condition `kind` of a Plugin object: (status, reason, message).
#[must_use]
pub fn condition(obj: &Value, kind: &str) -> Option<(String, String, String)> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// Applies ConfigMap `default/NAME` with `mode: ok`, which the chaos
/// plugin reconciles by annotating it with its version.
///
/// # Errors
/// When the apply fails.
pub fn config_map(env: &Env, name: &str) -> anyhow::Result<()> {
    apply_object(
        env.main(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "default"},
               "data": {"mode": "ok"}}),
    )?;
    Ok(())
}
