//! The NodePool seed's API side, end to end (issue 38, step 4): the real
//! `rekon run --webhook-addr` serving the seed (`plugins/nodepool`, `make
//! plugins`) or its Python port (`plugins/nodepool-py`, `make
//! sdk-plugins`), what `rekon webhooks` prints for it applied to kube-sim
//! (webhook configurations and the CRD's conversion stanza), and `kubectl`
//! as the client:
//!
//! - a bad taint effect is refused by the CRD's enum, an unqualified label
//!   key by the webhook, another pool's role label by the CRD's CEL rule,
//!   and a pool with the labels of another by the webhook reading the
//!   host's cache — each in the API server's words;
//! - a pool without handler is stored with `runc` (mutate);
//! - a pool written at v1alpha1 (`spec.runtimeHandler`) reads back at v1
//!   (`spec.handler`) and at v1alpha1, the same object.
//!
//! And, without a cluster: the port declares exactly what the seed
//! declares (webhooks, CRD with its versions and CEL rules, conversion).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rekon_e2e::{Env, get, webhook_env};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(40);
const TEST_TIMEOUT: Duration = Duration::from_secs(420);
const NODEPOOLS: (&str, &str) = ("nodes.lailin.xyz/v1", "nodepools");

#[derive(Debug, Clone, Copy)]
enum Lang {
    Rust,
    Python,
}

impl Lang {
    /// The component and the make target that builds it.
    fn component(self, paths: &rekon_e2e::Paths) -> PathBuf {
        let (path, target) = match self {
            Lang::Rust => (paths.plugins.join("nodepool.wasm"), "plugins"),
            Lang::Python => (
                paths.root.join("dist/sdk-plugins/nodepool_py.wasm"),
                "sdk-plugins",
            ),
        };
        rekon_e2e::built(path, target)
    }
}

fn inspect(paths: &rekon_e2e::Paths, lang: Lang) -> Value {
    rekon_e2e::inspect_json(paths, &lang.component(paths))
}

/// The port declares what the seed declares: webhooks, the CRD at both
/// versions with its CEL rules, the conversion.
#[test]
fn the_python_port_declares_the_seeds_webhooks_crd_rules_and_conversion() {
    let paths = rekon_e2e::Paths::discover().unwrap();
    let rust = inspect(&paths, Lang::Rust);
    assert_eq!(
        inspect(&paths, Lang::Python),
        rust,
        "the Python port declares what the Rust seed declares"
    );
    let webhooks: Vec<(&str, &str)> = rust["admission"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|w| (w["name"].as_str().unwrap(), w["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        webhooks,
        [
            ("spec.nodepool.rekon.dev", "validate"),
            ("handler.nodepool.rekon.dev", "mutate")
        ]
    );
    assert_eq!(
        rust["conversion"][0]["versions"],
        serde_json::json!(["v1alpha1", "v1"]),
        "{rust}"
    );
    let versions = rust["crds"][0]["spec"]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2);
    for v in versions {
        let rules = &v["schema"]["openAPIV3Schema"]["x-kubernetes-validations"];
        assert_eq!(rules.as_array().map(Vec::len), Some(2), "{}", v["name"]);
    }
}

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

/// `rekon run --webhook-addr` serving `lang`'s component as the plugin
/// `nodepool`, once its CRD is served, with what `rekon webhooks` prints
/// applied by kubectl. The certificate directory lives as long as the env.
async fn serve_nodepool(lang: Lang) -> (Env, tempfile::TempDir) {
    let served = webhook_env::serve(
        |paths| lang.component(paths),
        ("nodepool", "nodepool"),
        (NODEPOOLS.0, NODEPOOLS.1, None),
    )
    .await;
    let text = served.applied;
    let crd = "customresourcedefinition.apiextensions.k8s.io/nodepools.nodes.lailin.xyz configured";
    assert!(text.contains(crd), "{text}");
    (served.env, served.certs)
}

fn pool(name: &str, labels: &str, taints: &str) -> String {
    format!(
        "apiVersion: nodes.lailin.xyz/v1\nkind: NodePool\nmetadata:\n  name: {name}\nspec:\n  labels: {labels}\n  taints: {taints}\n"
    )
}

fn refused(env: &Env, yaml: &str, words: &str) {
    let (ok, text) = env.kubectl_apply("main", yaml);
    assert!(!ok, "stored: {yaml}\n{text}");
    assert!(text.contains(words), "want {words:?} in:\n{text}");
}

/// The pool `name` at `version` as `kubectl get` prints it.
fn kubectl_get_pool(env: &Env, version: &str, name: &str) -> Value {
    let resource = format!("nodepools.{version}.nodes.lailin.xyz");
    let text = env
        .kubectl("main", &["get", &resource, name, "-o", "json"])
        .unwrap_or_else(|e| panic!("kubectl get {resource} {name}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

async fn kubectl_sees_the_nodepool_verdicts_defaults_and_versions(lang: Lang) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (env, _certs) = serve_nodepool(lang).await;

        // A bad taint effect: the CRD's enum, in the API server's words
        // (the webhook words it the same).
        refused(
            &env,
            &pool("bad-effect", "{}", r#"[{key: gpu, value: "true", effect: Sometimes}]"#),
            r#"spec.taints[0].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#,
        );
        // An unqualified label key: the webhook, as kubectl prints an
        // invalid object (422 with field causes).
        refused(
            &env,
            &pool("bad-key", r#"{"-team": a}"#, "[]"),
            r#"The NodePool "bad-key" is invalid: spec.labels[-team]: Invalid value: "-team": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#,
        );
        // Another pool's role label: the CRD's CEL rule at the root.
        refused(
            &env,
            &pool("claims", r#"{"node-role.kubernetes.io/batch": ""}"#, "[]"),
            "a pool may not claim another pool's role label (node-role.kubernetes.io/<pool>)",
        );

        // A pool without handler: stored with runc (mutate), reconciled.
        let (ok, text) = env.kubectl_apply(
            "main",
            &pool("gpu", r#"{"example.com/gpu": "true"}"#, r#"[{key: example.com/gpu, value: "true", effect: NoSchedule}]"#),
        );
        assert!(ok, "{text}");
        let stored = get(env.main(), NODEPOOLS.0, NODEPOOLS.1, None, "gpu").expect("stored");
        assert_eq!(stored["spec"]["handler"], "runc", "defaulted by mutate: {stored}");
        until(&env, "the pool reconciled (its RuntimeClass)", || {
            get(env.main(), "node.k8s.io/v1", "runtimeclasses", None, "node-pool-gpu")
                .is_some_and(|rc| rc["handler"] == "runc")
        })
        .await;

        // The same labels as gpu: the webhook reads gpu in the host's cache.
        refused(
            &env,
            &pool("gpu-twin", r#"{"example.com/gpu": "true"}"#, "[]"),
            r#"spec.labels: Forbidden: pool "gpu" already selects these nodes"#,
        );

        // Written at v1alpha1: read at both versions as the same object.
        let old = "apiVersion: nodes.lailin.xyz/v1alpha1\nkind: NodePool\nmetadata:\n  name: batch\nspec:\n  labels:\n    example.com/batch: \"true\"\n  runtimeHandler: kata\n";
        let (ok, text) = env.kubectl_apply("main", old);
        assert!(ok, "{text}");
        // The reconcile writes the status meanwhile: read the pair again
        // until no write fell between the two reads.
        let mut tries = 0;
        let (at_v1, at_v1alpha1) = loop {
            let at_v1 = kubectl_get_pool(&env, "v1", "batch");
            let at_v1alpha1 = kubectl_get_pool(&env, "v1alpha1", "batch");
            tries += 1;
            if at_v1["metadata"]["resourceVersion"] == at_v1alpha1["metadata"]["resourceVersion"]
                || tries == 20
            {
                break (at_v1, at_v1alpha1);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(
            at_v1["spec"],
            serde_json::json!({"labels": {"example.com/batch": "true"}, "handler": "kata"}),
            "{at_v1}"
        );
        assert_eq!(
            at_v1alpha1["spec"],
            serde_json::json!({"labels": {"example.com/batch": "true"}, "runtimeHandler": "kata"}),
            "{at_v1alpha1}"
        );
        for field in ["uid", "resourceVersion", "finalizers"] {
            assert_eq!(at_v1["metadata"][field], at_v1alpha1["metadata"][field], "{field}");
        }
        // Without runtimeHandler at v1alpha1: defaulted through the conversion.
        let bare = old
            .replace("name: batch", "name: bare")
            .replace("example.com/batch", "example.com/bare")
            .replace("  runtimeHandler: kata\n", "");
        let (ok, text) = env.kubectl_apply("main", &bare);
        assert!(ok, "{text}");
        assert_eq!(kubectl_get_pool(&env, "v1alpha1", "bare")["spec"]["runtimeHandler"], "runc");
        // Validation applies to a write at v1alpha1 too.
        refused(
            &env,
            &old.replace("name: batch", "name: bad-alpha").replace("example.com/batch", "-batch"),
            r#"spec.labels[-batch]: Invalid value: "-batch""#,
        );
    })
    .await
    .unwrap_or_else(|_| panic!("the nodepool admission e2e of {lang:?} finished; likely deadlocked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_rust_nodepools_verdicts_defaults_and_versions() {
    kubectl_sees_the_nodepool_verdicts_defaults_and_versions(Lang::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_python_nodepools_verdicts_defaults_and_versions() {
    kubectl_sees_the_nodepool_verdicts_defaults_and_versions(Lang::Python).await;
}
