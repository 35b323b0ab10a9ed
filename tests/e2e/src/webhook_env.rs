//! One plugin's admission served to kube-sim the way an operator sets it
//! up for a plugin file (`admission.rs`, `nodepool_admission.rs`,
//! `seed_admission.rs`): `rekon run --webhook-addr` with a certificate
//! directory, the component compiled into the cache and dropped into the
//! plugin directory, then what `rekon webhooks` prints for it applied with
//! kubectl.

use std::path::PathBuf;
use std::time::Duration;

use crate::{Env, EnvOptions, Paths, free_local_addr, output_text, rekon_cli};

/// How long a plugin may take to load (a Python component compiled by a
/// debug build takes tens of seconds) before its CRD is served.
pub const LOAD_WAIT: Duration = Duration::from_secs(180);

/// A host serving one plugin's webhooks, configured in kube-sim.
pub struct Served {
    /// The environment (kube-sim, `rekon run`).
    pub env: Env,
    /// The certificate directory; lives as long as the environment.
    pub certs: tempfile::TempDir,
    /// What `rekon webhooks` printed (the configurations, and the CRDs it
    /// converts with their conversion stanza).
    pub webhooks: String,
    /// What `kubectl apply` said of it.
    pub applied: String,
}

/// Serves `component` as the file `<file>.wasm` of the plugin named
/// `plugin` (its registration's name), waits until `crd` (apiVersion,
/// plural, namespace) lists, applies its configurations and checks kubectl
/// created both (`rekon-<plugin>`, validating and mutating).
///
/// # Panics
/// On any step failing: a test without its webhooks fails.
pub async fn serve(
    component: impl FnOnce(&Paths) -> PathBuf,
    (file, plugin): (&str, &str),
    crd: (&str, &str, Option<&str>),
) -> Served {
    let addr = free_local_addr().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let mut env = Env::start(EnvOptions {
        plugins: Vec::new(),
        extra_args: vec![
            "--webhook-addr".into(),
            addr.to_string(),
            "--webhook-cert-dir".into(),
            certs.path().display().to_string(),
        ],
        ..EnvOptions::default()
    })
    .await
    .unwrap();
    let component = component(&env.paths);
    // Into the compiled-plugin cache `rekon run` maps (a JavaScript or
    // Python component would otherwise be compiled at load).
    let out = rekon_cli(
        &env.paths,
        &["plugin", "compile", &component.display().to_string()],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    std::fs::copy(&component, env.plugin_dir.join(format!("{file}.wasm"))).expect("copied");
    let (api_version, plural, namespace) = crd;
    env.wait_for(&format!("{plural} to be served"), LOAD_WAIT, |env| {
        env.main().list(api_version, plural, namespace, "").ok()
    })
    .await
    .unwrap();
    let ca = certs.path().join("tls.crt");
    assert!(ca.is_file(), "rekon run wrote its self-signed certificate");
    let out = rekon_cli(
        &env.paths,
        &[
            "webhooks",
            &env.plugin_dir.display().to_string(),
            "--url",
            &format!("https://localhost:{}", addr.port()),
            "--webhook-ca-file",
            &ca.display().to_string(),
        ],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let webhooks = String::from_utf8(out.stdout).unwrap();
    let (ok, applied) = env.kubectl_apply("main", &webhooks);
    assert!(ok, "{applied}");
    for kind in ["mutating", "validating"] {
        let created = format!(
            "{kind}webhookconfiguration.admissionregistration.k8s.io/rekon-{plugin} created"
        );
        assert!(applied.contains(&created), "{applied}");
    }
    Served {
        env,
        certs,
        webhooks,
        applied,
    }
}
