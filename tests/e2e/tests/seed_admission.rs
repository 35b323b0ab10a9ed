//! The Test seed's admission end to end (issue 38, step 4): the real `rekon
//! run --webhook-addr` serving test-fanout — the Rust seed
//! (`dist/plugins/test_fanout.wasm`, `make plugins`) and its TypeScript
//! port (`dist/sdk-plugins/test_fanout_ts.wasm`, `make sdk-plugins`), the
//! same cases against each — with what `rekon webhooks` prints applied to
//! kube-sim, and `kubectl` as the client over clusters `main` and `sub`:
//!
//! - a Test whose image is not a reference, or naming an unknown cluster,
//!   is refused as the API server refuses an invalid object;
//! - an empty image and a cluster named twice are refused by the CRD's CEL
//!   rules (no webhook in the path);
//! - an untagged image is stored with `:latest`, and that Test still fans
//!   out to both clusters and finishes; applied again as written (server-
//!   side and client-side) it is admitted unchanged;
//! - a Test stored untagged before the mutating webhook keeps its image
//!   through updates, and its deletion (the host's finalizer removal)
//!   completes;
//! - a Test naming `sub` gets its Job there only.

use std::path::PathBuf;
use std::time::Duration;

use rekon_e2e::{Env, complete_job, get, webhook_env};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(40);
const TEST_TIMEOUT: Duration = Duration::from_secs(420);
const NS: &str = "default";

/// test-fanout in one language.
#[derive(Debug, Clone, Copy)]
enum Lang {
    Rust,
    TypeScript,
}

impl Lang {
    fn component(self, paths: &rekon_e2e::Paths) -> PathBuf {
        let (path, target) = match self {
            Lang::Rust => (paths.plugins.join("test_fanout.wasm"), "plugins"),
            Lang::TypeScript => (
                paths.root.join("dist/sdk-plugins/test_fanout_ts.wasm"),
                "sdk-plugins",
            ),
        };
        rekon_e2e::built(path, target)
    }
}

/// What `rekon plugin inspect` reads from `lang`'s build, digest removed.
fn inspect(lang: Lang) -> Value {
    let paths = rekon_e2e::Paths::discover().unwrap();
    rekon_e2e::inspect_json(&paths, &lang.component(&paths))
}

/// The host reads the same webhooks and the same CRD (CEL rules included)
/// from the two builds, so the cases below hold for the same declarations.
#[test]
fn the_rust_seed_and_its_typescript_port_declare_the_same_webhooks_and_crd() {
    let rust = inspect(Lang::Rust);
    let ts = inspect(Lang::TypeScript);
    let names = |v: &Value| -> Vec<String> {
        v["admission"]
            .as_array()
            .map(|a| a.iter().map(|r| r["name"].to_string()).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        names(&rust),
        [
            "\"test.test-fanout.rekon.dev\"",
            "\"defaults.test-fanout.rekon.dev\""
        ]
    );
    assert_eq!(ts["admission"], rust["admission"], "the same webhooks");
    assert_eq!(ts["crds"], rust["crds"], "the same CRD");
    let spec = &rust["crds"][0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    assert!(
        spec["clusters"]["x-kubernetes-validations"].is_array()
            && spec["image"]["x-kubernetes-validations"].is_array(),
        "{spec}"
    );
    assert_eq!(ts, rust, "the same registration");
}

fn test_yaml(name: &str, image: &str, clusters: Option<&str>) -> String {
    let clusters = clusters.map_or_else(String::new, |c| format!("  clusters: {c}\n"));
    format!(
        "apiVersion: job.lailin.xyz/v1\nkind: Test\nmetadata:\n  name: {name}\n  namespace: {NS}\nspec:\n  image: {image:?}\n{clusters}"
    )
}

fn test_obj(env: &Env, name: &str) -> Option<Value> {
    get(env.main(), "job.lailin.xyz/v1", "tests", Some(NS), name)
}

fn job_image(env: &Env, cluster: &str, name: &str) -> Option<String> {
    let c = if cluster == "main" {
        env.main()
    } else {
        env.sub()
    };
    get(c, "batch/v1", "jobs", Some(NS), name).and_then(|j| {
        j.pointer("/spec/template/spec/containers/0/image")
            .and_then(Value::as_str)
            .map(str::to_owned)
    })
}

async fn until(env: &Env, what: &str, check: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for: {what}\n--- rekon log ---\n{}",
            env.rekon.log_tail(60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `rekon run --webhook-addr` serving `lang`'s build as test-fanout, once
/// the Test CRD is served, with its webhook configurations applied (their
/// YAML returned).
async fn serve(lang: Lang) -> (Env, tempfile::TempDir, String) {
    let served = webhook_env::serve(
        |paths| lang.component(paths),
        ("test_fanout", "test-fanout"),
        ("job.lailin.xyz/v1", "tests", Some(NS)),
    )
    .await;
    (served.env, served.certs, served.webhooks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_meets_the_rust_test_seeds_validation_and_defaults() {
    kubectl_meets_the_test_seeds_validation_and_defaults(Lang::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_meets_the_typescript_test_seeds_validation_and_defaults() {
    kubectl_meets_the_test_seeds_validation_and_defaults(Lang::TypeScript).await;
}

async fn kubectl_meets_the_test_seeds_validation_and_defaults(lang: Lang) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (env, _certs, webhooks) = serve(lang).await;
        let refused = |name: &str, yaml: String, wording: &str| {
            let (ok, text) = env.kubectl_apply("main", &yaml);
            assert!(!ok, "{lang:?}: Test {name} was stored: {text}");
            assert!(text.contains(wording), "{lang:?}: {text}");
            assert!(test_obj(&env, name).is_none(), "{lang:?}: {name} stored");
        };

        // The webhook: worded as the API server words an invalid object.
        refused(
            "bad",
            test_yaml("bad", "Busy Box", None),
            "The Test \"bad\" is invalid: spec.image: Invalid value: \"Busy Box\": invalid reference format",
        );
        refused(
            "lost",
            test_yaml("lost", "busybox:1.36", Some("[main, nope]")),
            "The Test \"lost\" is invalid: spec.clusters[1]: Unsupported value: \"nope\": supported values: \"main\", \"sub\"",
        );
        // The CRD's CEL rules, before any webhook.
        refused("empty", test_yaml("empty", "", None), "an image is required");
        refused(
            "twice",
            test_yaml("twice", "busybox", Some("[sub, sub]")),
            "must not name a cluster twice",
        );

        // Defaulted, then fanned out and finished as before.
        let (ok, text) = env.kubectl_apply("main", &test_yaml("hello", "busybox", None));
        assert!(ok, "{lang:?}: {text}");
        let stored = test_obj(&env, "hello").expect("stored");
        assert_eq!(
            stored.pointer("/spec/image"),
            Some(&Value::from("busybox:latest")),
            "{lang:?}: defaulted by mutate: {stored}"
        );
        assert!(stored.pointer("/spec/clusters").is_none(), "{stored}");
        until(&env, "the Job in both clusters", || {
            ["main", "sub"]
                .iter()
                .all(|c| job_image(&env, c, "hello").as_deref() == Some("busybox:latest"))
        })
        .await;
        complete_job(env.sub(), NS, "hello").unwrap();
        until(&env, "the Test finished", || {
            test_obj(&env, "hello").and_then(|t| t.pointer("/status/phase").cloned())
                == Some(Value::from("finished"))
        })
        .await;

        // Applied again as written (server-side apply sets `busybox` over
        // the stored `busybox:latest`): defaulted again on the update, so
        // the immutable spec is unchanged and the apply succeeds.
        let manifest = env.work_dir().join("ssa.yaml");
        std::fs::write(&manifest, test_yaml("ssa", "busybox", None)).unwrap();
        let manifest = manifest.display().to_string();
        for round in 0..2 {
            let applied = env.kubectl("main", &["apply", "--server-side", "-f", &manifest]);
            assert!(applied.is_ok(), "{lang:?}: server-side apply {round}: {applied:?}");
        }
        assert_eq!(
            test_obj(&env, "ssa").and_then(|t| t.pointer("/spec/image").cloned()),
            Some(Value::from("busybox:latest"))
        );
        let (ok, text) = env.kubectl_apply("main", &test_yaml("hello", "busybox", None));
        assert!(ok, "{lang:?}: client-side apply again: {text}");

        // A Test stored untagged before the mutating webhook was configured
        // keeps its image on every update: the host adds and removes its
        // finalizer through the webhook, and the deletion completes.
        env.kubectl("main", &["delete", "mutatingwebhookconfiguration", "rekon-test-fanout"])
            .unwrap();
        let (ok, text) = env.kubectl_apply("main", &test_yaml("legacy", "busybox", None));
        assert!(ok, "{lang:?}: {text}");
        let (ok, text) = env.kubectl_apply("main", &webhooks);
        assert!(ok, "{lang:?}: {text}");
        until(&env, "the legacy Test's Jobs", || {
            ["main", "sub"]
                .iter()
                .all(|c| job_image(&env, c, "legacy").as_deref() == Some("busybox"))
        })
        .await;
        let labelled = env.kubectl("main", &["label", "test", "legacy", "-n", NS, "touched=yes"]);
        assert!(labelled.is_ok(), "{lang:?}: an update of the legacy Test: {labelled:?}");
        assert_eq!(
            test_obj(&env, "legacy").and_then(|t| t.pointer("/spec/image").cloned()),
            Some(Value::from("busybox"))
        );
        env.kubectl("main", &["delete", "test", "legacy", "-n", NS, "--wait=false"])
            .unwrap();
        until(&env, "the legacy Test deleted (finalizer removed)", || {
            test_obj(&env, "legacy").is_none()
        })
        .await;

        // Named clusters: the Job goes to sub only.
        let (ok, text) = env.kubectl_apply(
            "main",
            &test_yaml("only-sub", "busybox:1.36", Some("[sub]")),
        );
        assert!(ok, "{lang:?}: {text}");
        until(&env, "the Job in sub and the status listing sub only", || {
            job_image(&env, "sub", "only-sub").is_some()
                && test_obj(&env, "only-sub")
                .and_then(|t| t.pointer("/status/clusters").cloned())
                .and_then(|c| c.as_array().map(|a| a.iter().map(|l| l["cluster"].clone()).collect::<Vec<_>>()))
                == Some(vec![Value::from("sub")])
        })
        .await;
        assert!(job_image(&env, "main", "only-sub").is_none());
    })
    .await
    .unwrap_or_else(|_| panic!("the Test admission e2e of {lang:?} finished; likely deadlocked"));
}
