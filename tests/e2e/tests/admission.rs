//! The API side of a plugin, end to end (issue 38): the real `rekon run
//! --webhook-addr` with the widgets test plugin (`make test-plugins`), its
//! webhook configurations from `rekon webhooks` (caBundle: the certificate
//! the host wrote to `--webhook-cert-dir`) applied to kube-sim, and
//! `kubectl` as the client: an invalid Widget is refused with the plugin's
//! message as the API server words it (or, for a 422 with field errors, as
//! kubectl prints an invalid object), a valid one is stored defaulted by
//! `mutate` and then reconciled, and a quota read from the host's cache
//! refuses a fourth Widget in a namespace.

use std::process::Command;
use std::time::{Duration, Instant};

use rekon_e2e::{Env, EnvOptions, free_local_addr, get, output_text, rekon_cli};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(40);
const TEST_TIMEOUT: Duration = Duration::from_secs(240);

async fn until(env: &Env, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}\n--- rekon log ---\n{}",
            env.rekon.log_tail(60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kubectl apply -f -` of `yaml` in `main`: (succeeded, stdout + stderr).
fn kubectl_apply(env: &Env, yaml: &str) -> (bool, String) {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["--context", "main", "--cache-dir"])
        .arg(env.work_dir().join("kubectl-cache"))
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes())
        .expect("yaml written");
    let out = child.wait_with_output().expect("kubectl ends");
    (out.status.success(), output_text(&out))
}

fn widget(name: &str, size: i64) -> String {
    format!(
        "apiVersion: widgets.rekon.dev/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  size: {size}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_plugins_verdicts_and_defaults() {
    tokio::time::timeout(TEST_TIMEOUT, async {
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
        std::fs::copy(
            env.paths.test_plugins.join("widgets.wasm"),
            env.plugin_dir.join("widgets.wasm"),
        )
        .expect("widgets.wasm is built by `make test-plugins`");
        env.wait_for("the Widget CRD to be served", WAIT, |env| {
            env.main()
                .list("widgets.rekon.dev/v1", "widgets", Some("default"), "")
                .ok()
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
        let yaml = String::from_utf8(out.stdout).unwrap();
        let (ok, text) = kubectl_apply(&env, &yaml);
        assert!(ok, "{text}");
        assert!(text.contains("mutatingwebhookconfiguration.admissionregistration.k8s.io/rekon-widgets created"), "{text}");
        assert!(text.contains("validatingwebhookconfiguration.admissionregistration.k8s.io/rekon-widgets created"), "{text}");

        // A plain refusal (403): kubectl prints the API server's wording.
        let (ok, text) = kubectl_apply(&env, &widget("negative", -1));
        assert!(!ok, "an invalid widget was stored: {text}");
        assert!(
            text.contains(
                "admission webhook \"size.widgets.rekon.dev\" denied the request: a widget's size cannot be negative"
            ),
            "{text}"
        );
        // A 422 with a field error: kubectl prints it as an invalid object.
        let (ok, text) = kubectl_apply(&env, &widget("huge", 11));
        assert!(!ok, "an invalid widget was stored: {text}");
        assert!(
            text.contains("The Widget \"huge\" is invalid: spec.size: must be at most 10"),
            "{text}"
        );
        assert!(get(env.main(), "widgets.rekon.dev/v1", "widgets", Some("default"), "huge").is_none());

        let (ok, text) = kubectl_apply(&env, &widget("big", 7));
        assert!(ok, "{text}");
        assert!(text.contains("Warning: a widget above size 5 is large"), "{text}");
        let stored: Value = get(env.main(), "widgets.rekon.dev/v1", "widgets", Some("default"), "big")
            .expect("stored");
        assert_eq!(
            stored.pointer("/metadata/labels/widgets.rekon.dev~1tier"),
            Some(&Value::from("standard")),
            "defaulted by mutate: {stored}"
        );
        until(&env, "the widget reconciled (status.observedSize)", || {
            get(env.main(), "widgets.rekon.dev/v1", "widgets", Some("default"), "big")
                .and_then(|w| w.pointer("/status/observedSize").cloned())
                == Some(Value::from(7))
        })
        .await;

        // The quota reads the host's cache: two more fit, a fourth does not.
        for name in ["second", "third"] {
            let (ok, text) = kubectl_apply(&env, &widget(name, 1));
            assert!(ok, "{text}");
        }
        until(&env, "three widgets reconciled (in the host's cache)", || {
            ["big", "second", "third"].iter().all(|name| {
                get(env.main(), "widgets.rekon.dev/v1", "widgets", Some("default"), name)
                    .and_then(|w| w.pointer("/status/observedSize").cloned())
                    .is_some()
            })
        })
        .await;
        let (ok, text) = kubectl_apply(&env, &widget("fourth", 1));
        assert!(!ok, "a fourth widget was stored: {text}");
        assert!(
            text.contains(
                "admission webhook \"size.widgets.rekon.dev\" denied the request: namespace default already holds 3 widgets, the most it may hold"
            ),
            "{text}"
        );
    })
    .await
    .expect("the admission e2e finished; likely deadlocked");
}
