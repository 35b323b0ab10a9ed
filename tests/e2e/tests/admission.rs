//! The API side of a plugin, end to end (issue 38): the real `rekon run
//! --webhook-addr` with the widgets test plugin in each language — Rust
//! (`tests/plugins/widgets`, `make test-plugins`), TypeScript and Python
//! (`tests/plugins/widgets-ts`, `widgets-py`, `make sdk-plugins`), the same
//! cases run against each — its webhook configurations from `rekon webhooks` (caBundle: the certificate
//! the host wrote to `--webhook-cert-dir`) applied to kube-sim, and
//! `kubectl` as the client: an invalid Widget is refused with the plugin's
//! message as the API server words it (or, for a 422 with field errors, as
//! kubectl prints an invalid object), a trapping call fails the request
//! (failure policy `Fail`) and the plugin keeps serving, a valid one is stored defaulted by
//! `mutate` and then reconciled, and a quota read from the host's cache
//! refuses a fourth Widget in a namespace. The Rust widgets built with
//! feature `conversion` are also read and written at both CRD versions
//! through the conversion the plugin serves.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use rekon_e2e::widgets::{Build, Lang};
use rekon_e2e::{Env, get, output_text, webhook_env};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(40);
const TEST_TIMEOUT: Duration = Duration::from_secs(420);

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

fn widget(name: &str, size: i64) -> String {
    format!(
        "apiVersion: widgets.rekon.dev/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  size: {size}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_rust_plugins_verdicts_and_defaults() {
    kubectl_sees_the_plugins_verdicts_and_defaults(Lang::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_typescript_plugins_verdicts_and_defaults() {
    kubectl_sees_the_plugins_verdicts_and_defaults(Lang::TypeScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_python_plugins_verdicts_and_defaults() {
    kubectl_sees_the_plugins_verdicts_and_defaults(Lang::Python).await;
}

/// The host reads the same registration and the same webhooks from the
/// three builds (the cases below then hold for the same declared rules).
#[test]
fn the_three_languages_declare_the_same_plugin_and_webhooks() {
    let rust = declared_alike(Build::Default);
    assert_eq!(
        rust["admission"].as_array().map(Vec::len),
        Some(2),
        "{rust}"
    );
    assert!(rust.get("conversion").is_none(), "{rust}");
}

/// The same of the three conversion builds: the same CRD at two versions
/// and the same conversion declared.
#[test]
fn the_three_languages_declare_the_same_conversion() {
    let rust = declared_alike(Build::Conversion);
    assert_eq!(
        rust["conversion"][0]["versions"],
        serde_json::json!(["v1alpha1", "v1"]),
        "{rust}"
    );
    assert_eq!(
        rust["crds"][0]["spec"]["versions"].as_array().map(Vec::len),
        Some(2)
    );
}

/// What `rekon plugin inspect` reads from the Rust build `build`,
/// asserted equal to what it reads from the TypeScript and Python builds.
fn declared_alike(build: Build) -> Value {
    let paths = rekon_e2e::Paths::discover().unwrap();
    let inspect = |lang: Lang| rekon_e2e::inspect_json(&paths, &lang.component(&paths, build));

    let rust = inspect(Lang::Rust);
    for lang in [Lang::TypeScript, Lang::Python] {
        assert_eq!(
            inspect(lang),
            rust,
            "{lang:?} declares what the Rust build declares"
        );
    }
    rust
}

/// `rekon run --webhook-addr` serving `component` as the plugin
/// `widgets`, once its CRD is served, with what `rekon webhooks` prints for
/// it applied by `kubectl` (the output returned). The certificate directory
/// lives as long as the environment.
async fn serve_widgets(
    component: impl FnOnce(&rekon_e2e::Paths) -> PathBuf,
) -> (Env, tempfile::TempDir, String) {
    let served = webhook_env::serve(
        component,
        ("widgets", "widgets"),
        ("widgets.rekon.dev/v1", "widgets", Some("default")),
    )
    .await;
    (served.env, served.certs, served.applied)
}

async fn kubectl_sees_the_plugins_verdicts_and_defaults(lang: Lang) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (env, _certs, _) = serve_widgets(|paths| lang.component(paths, Build::Default)).await;

        // A plain refusal (403): kubectl prints the API server's wording.
        let (ok, text) = env.kubectl_apply("main", &widget("negative", -1));
        assert!(!ok, "an invalid widget was stored: {text}");
        assert!(
            text.contains(
                "admission webhook \"size.widgets.rekon.dev\" denied the request: a widget's size cannot be negative"
            ),
            "{text}"
        );
        // A 422 with a field error: kubectl prints it as an invalid object.
        let (ok, text) = env.kubectl_apply("main", &widget("huge", 11));
        assert!(!ok, "an invalid widget was stored: {text}");
        assert!(
            text.contains("The Widget \"huge\" is invalid: spec.size: must be at most 10"),
            "{text}"
        );
        assert!(get(env.main(), "widgets.rekon.dev/v1", "widgets", Some("default"), "huge").is_none());

        // A trap (Rust: a panic; TypeScript, Python: an exception that is
        // not an admission error) is a failed call: the host answers 500
        // and the API server applies the rule's failure policy (Fail).
        let (ok, text) = env.kubectl_apply("main", &widget("trap", 1));
        assert!(!ok, "a widget was stored past a trapping webhook: {text}");
        assert!(
            text.contains("failed calling webhook \"size.widgets.rekon.dev\""),
            "{text}"
        );

        // The plugin keeps serving.
        let (ok, text) = env.kubectl_apply("main", &widget("big", 7));
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
            let (ok, text) = env.kubectl_apply("main", &widget(name, 1));
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
        let (ok, text) = env.kubectl_apply("main", &widget("fourth", 1));
        assert!(!ok, "a fourth widget was stored: {text}");
        assert!(
            text.contains(
                "admission webhook \"size.widgets.rekon.dev\" denied the request: namespace default already holds 3 widgets, the most it may hold"
            ),
            "{text}"
        );
    })
    .await
    .unwrap_or_else(|_| panic!("the admission e2e of {lang:?} finished; likely deadlocked"));
}

/// `kubectl --context main ARGS..`: (succeeded, stdout + stderr).
fn kubectl(env: &Env, args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["--context", "main", "--cache-dir"])
        .arg(env.work_dir().join("kubectl-cache"))
        .args(args)
        .output()
        .expect("kubectl runs");
    (out.status.success(), output_text(&out))
}

/// The Widget `name` in `default` as `kubectl get` prints it at `version`
/// (`widgets.<version>.widgets.rekon.dev`).
fn kubectl_get_widget(env: &Env, version: &str, name: &str) -> Value {
    let resource = format!("widgets.{version}.widgets.rekon.dev");
    let (ok, text) = kubectl(
        env,
        &["get", &resource, name, "-n", "default", "-o", "json"],
    );
    assert!(ok, "kubectl get {resource} {name}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_and_writes_the_rust_plugins_crd_at_both_versions() {
    kubectl_reads_and_writes_the_crd_at_both_versions(Lang::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_and_writes_the_typescript_plugins_crd_at_both_versions() {
    kubectl_reads_and_writes_the_crd_at_both_versions(Lang::TypeScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_and_writes_the_python_plugins_crd_at_both_versions() {
    kubectl_reads_and_writes_the_crd_at_both_versions(Lang::Python).await;
}

/// Conversion from the plugin (the widgets' conversion builds: Rust with
/// feature `conversion`, `make test-plugins`; TypeScript's
/// `build:conversion` and Python's `widgets_py_conversion`, `make
/// sdk-plugins`): `rekon webhooks` writes the
/// CRD's conversion stanza; a Widget applied at v1alpha1 is admitted (the
/// webhooks' rules name v1: the server converts for them), stored at v1
/// and read at both versions as the same object; a convert that traps
/// fails kubectl's read with the server's conversion error while the
/// reconcile side keeps running.
async fn kubectl_reads_and_writes_the_crd_at_both_versions(lang: Lang) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (env, _certs, applied) = serve_widgets(|paths| lang.component(paths, Build::Conversion)).await;
        assert!(
            applied.contains("customresourcedefinition.apiextensions.k8s.io/widgets.widgets.rekon.dev configured"),
            "{applied}"
        );
        let crd = env
            .kubectl("main", &["get", "crd", "widgets.widgets.rekon.dev", "-o", "json"])
            .unwrap();
        let crd: Value = serde_json::from_str(&crd).unwrap();
        assert_eq!(crd["spec"]["conversion"]["strategy"], "Webhook", "{crd}");

        // Applied at v1alpha1 (`spec.amount`): defaulted by mutate through
        // the conversion, stored at v1.
        let old = "apiVersion: widgets.rekon.dev/v1alpha1\nkind: Widget\nmetadata:\n  name: old\n  namespace: default\nspec:\n  amount: 4\n";
        let (ok, text) = env.kubectl_apply("main", old);
        assert!(ok, "{text}");
        assert!(text.contains("widget.widgets.rekon.dev/old created"), "{text}");
        // The plugin's reconcile writes the Widget's status meanwhile: a
        // pair of reads on either side of that write sees two
        // resourceVersions. Read the pair again until no write fell between
        // them (the comparison below still covers every field).
        let mut tries = 0;
        let (at_v1, at_v1alpha1) = loop {
            let at_v1 = kubectl_get_widget(&env, "v1", "old");
            let at_v1alpha1 = kubectl_get_widget(&env, "v1alpha1", "old");
            tries += 1;
            if at_v1["metadata"]["resourceVersion"] == at_v1alpha1["metadata"]["resourceVersion"]
                || tries == 20
            {
                break (at_v1, at_v1alpha1);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(at_v1["apiVersion"], "widgets.rekon.dev/v1");
        assert_eq!(at_v1["spec"], serde_json::json!({"size": 4}), "{at_v1}");
        assert_eq!(at_v1alpha1["apiVersion"], "widgets.rekon.dev/v1alpha1");
        assert_eq!(at_v1alpha1["spec"], serde_json::json!({"amount": 4}), "{at_v1alpha1}");
        for field in ["uid", "resourceVersion", "labels"] {
            assert_eq!(
                at_v1["metadata"][field], at_v1alpha1["metadata"][field],
                "the same object at both versions: {field}"
            );
        }
        assert_eq!(
            at_v1.pointer("/metadata/labels/widgets.rekon.dev~1tier"),
            Some(&Value::from("standard")),
            "defaulted by mutate: {at_v1}"
        );
        // Validation still applies to a write at v1alpha1.
        let huge = old.replace("name: old", "name: huge").replace("amount: 4", "amount: 11");
        let (ok, text) = env.kubectl_apply("main", &huge);
        assert!(!ok, "an invalid widget was stored at v1alpha1: {text}");
        assert!(text.contains("must be at most 10"), "{text}");

        // Reconciled at v1 (the host watches the storage version); the
        // status reads the same at v1alpha1.
        until(&env, "the widget reconciled (status.observedSize)", || {
            get(env.main(), "widgets.rekon.dev/v1", "widgets", Some("default"), "old")
                .and_then(|w| w.pointer("/status/observedSize").cloned())
                == Some(Value::from(4))
        })
        .await;
        let at_v1alpha1 = kubectl_get_widget(&env, "v1alpha1", "old");
        assert_eq!(at_v1alpha1["status"]["observedSize"], 4, "{at_v1alpha1}");

        // A convert that traps: the read at v1alpha1 fails as the API
        // server fails it; the read at v1 (no conversion) does not.
        let (ok, text) = env.kubectl_apply("main", &widget("convert-trap", 1));
        assert!(ok, "{text}");
        let (ok, text) = kubectl(
            &env,
            &["get", "widgets.v1alpha1.widgets.rekon.dev", "convert-trap", "-n", "default"],
        );
        assert!(!ok, "a trapping conversion answered: {text}");
        assert!(
            text.contains("conversion webhook for widgets.rekon.dev/v1, Kind=Widget failed"),
            "{text}"
        );
        // A Rust panic traps; a QuickJS component returns what is thrown
        // as the error result (a refusal with its message); componentize-py
        // traps with no message (the traceback goes to the plugin's output,
        // in the host's log).
        let why = match lang {
            Lang::Rust => "conversion by plugin widgets failed: plugin widgets panicked in convert: widgets: asked to trap in convert",
            Lang::TypeScript => "plugin widgets refused to convert Widget default/convert-trap to widgets.rekon.dev/v1alpha1: widgets: asked to trap in convert",
            Lang::Python => "conversion by plugin widgets failed: plugin widgets panicked in convert: Python function threw an unexpected exception",
        };
        assert!(text.contains(why), "{text}");
        // The reconcile side keeps running.
        until(&env, "the trapping widget reconciled at v1", || {
            get(env.main(), "widgets.rekon.dev/v1", "widgets", Some("default"), "convert-trap")
                .and_then(|w| w.pointer("/status/observedSize").cloned())
                == Some(Value::from(1))
        })
        .await;
        let (ok, text) = env.kubectl_apply("main", &old.replace("name: old", "name: after"));
        assert!(ok, "the plugin keeps converting after a trap: {text}");
        assert_eq!(kubectl_get_widget(&env, "v1alpha1", "after")["spec"]["amount"], 4);
    })
    .await
    .unwrap_or_else(|_| panic!("the conversion e2e of {lang:?} finished; likely deadlocked"));
}
