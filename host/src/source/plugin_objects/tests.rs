//! Each step of a pass on its own, its success and its typed failure,
//! with a fake [`ModuleSource`], a real plugin runtime and, where a step
//! reads or writes the API, an in-process kube-sim.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use tokio::time::timeout;

use super::context::{Context, Entry, PluginObjectsConfig, origin, shadow_origin};
use super::error::PluginObjectError;
use super::fetch::fetch_serving;
use super::grant::granted;
use super::load::load;
use super::module_source::{FetchFailure, FetchRequest, Module, ModuleSource, VerifyRequest};
use super::reconcile::reconcile;
use super::resolve::{Memory, Plan, resolve};
use super::shadow::shadow;
use super::status::{Served, record};
use crate::lease::reports::ReportBoard;
use crate::plugin::{LoadOptions, PluginRegistry, PluginRuntime, RuntimeConfig};
use crate::queue::WorkQueue;
use crate::source::plugin_crd::{
    DEGRADED, FETCHED, Plugin, PluginObjectStatus, PluginSpec, READY, ShadowSpec, condition,
};
use crate::source::signature::{SignatureEntry, Verified, VerifyError};
use crate::telemetry::metrics::Metrics;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Modules by reference; a reference not listed is unreachable. The cache
/// holds modules by digest.
#[derive(Default)]
struct FakeSource {
    modules: HashMap<String, Result<Module, FetchFailure>>,
    cache: HashMap<String, Module>,
    /// Signatures by manifest digest (none: unsigned).
    signatures: HashMap<String, Vec<SignatureEntry>>,
    asked: Mutex<Vec<FetchRequest>>,
}

impl ModuleSource for Arc<FakeSource> {
    fn fetch(&self, request: FetchRequest) -> BoxFuture<'static, Result<Module, FetchFailure>> {
        self.asked.lock().push(request.clone());
        let answer = self
            .modules
            .get(&request.reference)
            .cloned()
            .unwrap_or_else(|| Err(unreachable(&request.reference)));
        Box::pin(async move { answer })
    }

    fn cached(&self, digest: &str) -> BoxFuture<'static, Option<Module>> {
        let module = self.cache.get(digest).cloned();
        Box::pin(async move { module })
    }

    fn verify(&self, request: VerifyRequest) -> BoxFuture<'static, Result<Verified, VerifyError>> {
        let entries = self
            .signatures
            .get(&request.digest)
            .cloned()
            .unwrap_or_default();
        Box::pin(async move { request.policy.check(&request.digest, &entries) })
    }
}

fn unreachable(reference: &str) -> FetchFailure {
    FetchFailure {
        reason: "RegistryUnreachable",
        message: format!("registry of {reference} does not answer"),
        transient: true,
    }
}

/// A test plugin built by `make test-plugins`; missing is a failure.
fn test_plugin(name: &str) -> Module {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../dist/test-plugins")
        .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "test plugin {} is missing ({e}): run `make test-plugins` first",
            path.display()
        )
    });
    Module {
        digest: format!("sha256:{name}"),
        bytes: Arc::from(bytes),
        from_cache: false,
        precompiled: None,
    }
}

fn bytes_module(digest: &str, bytes: Vec<u8>) -> Module {
    Module {
        digest: digest.to_owned(),
        bytes: Arc::from(bytes),
        from_cache: false,
        precompiled: None,
    }
}

/// A client of nothing: for steps that never reach the API.
fn offline_client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
    kube::Client::try_from(config).expect("a client")
}

fn context(client: kube::Client, source: &Arc<FakeSource>) -> Arc<Context> {
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 32 << 20,
        call_timeout: Duration::from_millis(500),
        max_concurrent_instances: 8,
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let config = PluginObjectsConfig::new("rekon-system");
    Arc::new(Context {
        api: Api::all(client.clone()),
        secrets: Api::namespaced(client.clone(), &config.namespace),
        config_maps: Api::namespaced(client.clone(), &config.namespace),
        events: super::context::recorder(client),
        registry: PluginRegistry::new(runtime),
        source: Arc::new(Arc::clone(source)),
        status_gate: None,
        queue: Mutex::new(WorkQueue::with_backoff(config.backoff())),
        config,
        metrics: Metrics::new(),
        entries: Mutex::new(HashMap::new()),
        status_writes: tokio::sync::Mutex::new(()),
        reports: ReportBoard::local("replica-a"),
        shards: None,
        webhooks: None,
        orphan_sweep: Default::default(),
    })
}

/// The chaos test plugin declares `get` and `patch` on ConfigMaps in the
/// primary cluster.
fn object(name: &str, module: &str, verbs: &[&str]) -> Plugin {
    let spec: PluginSpec = serde_json::from_value(serde_json::json!({
        "module": module,
        "permissions": [{
            "resource": {"apiVersion": "v1", "kind": "ConfigMap"},
            "verbs": verbs,
            "clusters": "Primary",
        }],
    }))
    .expect("a Plugin spec");
    let mut obj = Plugin::new(name, spec);
    obj.metadata.generation = Some(1);
    obj
}

fn remember(ctx: &Context, obj: &Plugin) {
    ctx.entries.lock().insert(
        obj.metadata.name.clone().unwrap_or_default(),
        Entry {
            latest: Some(Arc::new(obj.clone())),
            ..Entry::default()
        },
    );
}

#[tokio::test]
async fn fetch_returns_the_module_or_the_sources_typed_failure() {
    timeout(TEST_TIMEOUT, async {
        let module = bytes_module("sha256:1", b"x".to_vec());
        let source = FakeSource {
            modules: [("r.example/a:1".to_owned(), Ok(module))].into(),
            ..FakeSource::default()
        };
        let ctx = context(offline_client(), &Arc::new(source));
        let fetched = fetch_serving(&ctx, &object("a", "r.example/a:1", &["get"]), false)
            .await
            .expect("fetched");
        assert_eq!(fetched.module.digest, "sha256:1");
        assert!(fetched.unresolved.is_none());

        let failure = fetch_serving(&ctx, &object("b", "r.example/b:1", &["get"]), false)
            .await
            .expect_err("unreachable");
        let error = PluginObjectError::from(failure);
        assert_eq!(error.reason(), "RegistryUnreachable");
        assert!(error.is_transient());
    })
    .await
    .expect("the test timed out, likely deadlocked");
}

#[tokio::test]
async fn after_a_restart_the_last_resolved_digest_stands_in_only_while_nothing_serves() {
    timeout(TEST_TIMEOUT, async {
        let source = FakeSource {
            cache: [(
                "sha256:old".to_owned(),
                bytes_module("sha256:old", b"x".to_vec()),
            )]
            .into(),
            ..FakeSource::default()
        };
        let ctx = context(offline_client(), &Arc::new(source));
        let mut obj = object("a", "r.example/a:2", &["get"]);
        obj.status = Some(PluginObjectStatus {
            digest: Some("sha256:old".into()),
            ..PluginObjectStatus::default()
        });
        let fetched = fetch_serving(&ctx, &obj, false).await.expect("from cache");
        assert_eq!(fetched.module.digest, "sha256:old");
        assert_eq!(
            fetched.unresolved.map(|f| f.reason),
            Some("RegistryUnreachable")
        );
        // A running host keeps what it serves instead.
        let failure = fetch_serving(&ctx, &obj, true)
            .await
            .expect_err("no stand-in");
        assert_eq!(failure.reason, "RegistryUnreachable");
    })
    .await
    .expect("the test timed out, likely deadlocked");
}

#[tokio::test]
async fn a_missing_pull_secret_is_retried() {
    timeout(TEST_TIMEOUT, async {
        let sim = kube_sim::Sim::start(&["main"]).await.expect("sim");
        let client = sim_client(&sim).await;
        let source = Arc::new(FakeSource::default());
        let ctx = context(client, &source);
        let mut obj = object("a", "r.example/a:1", &["get"]);
        obj.spec.pull_secret = Some("registry-credentials".into());
        let failure = fetch_serving(&ctx, &obj, false)
            .await
            .expect_err("no Secret");
        assert_eq!(failure.reason, FetchFailure::PULL_SECRET_UNAVAILABLE);
        assert!(failure.transient);
        assert!(
            failure
                .message
                .contains("pull Secret rekon-system/registry-credentials does not exist"),
            "{failure}"
        );
        assert!(
            source.asked.lock().is_empty(),
            "fetched without credentials"
        );
    })
    .await
    .expect("the test timed out, likely deadlocked");
}

#[tokio::test]
async fn load_serves_a_module_within_its_grant_under_the_objects_name() {
    timeout(TEST_TIMEOUT, async {
        let ctx = context(offline_client(), &Arc::default());
        let obj = object("chaos-a", "r.example/chaos:1", &["get", "patch"]);
        let grant = granted(&obj.spec).expect("grant");
        let options = LoadOptions::default().with_instance(Some("chaos-a"));
        let module = test_plugin("chaos-v1.wasm");
        let loaded = load(&ctx, &origin("chaos-a"), &module, &grant, &options)
            .await
            .expect("loaded");
        assert_eq!(loaded.name(), "chaos-a");
        assert!(ctx.registry.serving(&origin("chaos-a")).is_some());
    })
    .await
    .expect("the test timed out, likely deadlocked");
}

#[tokio::test]
async fn load_refuses_a_module_beyond_its_grant_or_not_a_plugin() {
    timeout(TEST_TIMEOUT, async {
        let ctx = context(offline_client(), &Arc::default());
        let obj = object("chaos-b", "r.example/chaos:1", &["get"]);
        let grant = granted(&obj.spec).expect("grant");
        let options = LoadOptions::default().with_instance(Some("chaos-b"));
        let err = load(
            &ctx,
            &origin("chaos-b"),
            &test_plugin("chaos-v1.wasm"),
            &grant,
            &options,
        )
        .await
        .expect_err("patch is not granted");
        assert_eq!(err.reason(), "PermissionsExceedGrant");
        assert!(err.to_string().contains("patch on ConfigMap"), "{err}");
        assert!(ctx.registry.serving(&origin("chaos-b")).is_none());

        let empty = bytes_module("sha256:empty", wat::parse_str("(component)").expect("wat"));
        let err = load(&ctx, &origin("chaos-b"), &empty, &grant, &options)
            .await
            .expect_err("not a plugin");
        assert!(matches!(err, PluginObjectError::Refused(_)), "{err:?}");
        assert_eq!(err.reason(), "NotAPlugin", "{err}");
        assert!(!err.is_transient());
    })
    .await
    .expect("the test timed out, likely deadlocked");
}

#[tokio::test]
async fn shadow_runs_beside_the_serving_version_or_says_why_not() {
    timeout(TEST_TIMEOUT, async {
        let source = FakeSource {
            modules: [(
                "r.example/chaos:2".to_owned(),
                Ok(test_plugin("chaos-v2.wasm")),
            )]
            .into(),
            ..FakeSource::default()
        };
        let ctx = context(offline_client(), &Arc::new(source));
        let mut obj = object("chaos-c", "r.example/chaos:1", &["get", "patch"]);
        remember(&ctx, &obj);
        let grant = granted(&obj.spec).expect("grant");
        assert_eq!(
            shadow(&ctx, &obj, &grant, None).await.expect("no shadow"),
            None
        );

        obj.spec.shadow = Some(ShadowSpec {
            module: "r.example/chaos:2".into(),
            ..ShadowSpec::default()
        });
        let digest = shadow(&ctx, &obj, &grant, None).await.expect("shadow runs");
        assert_eq!(digest.as_deref(), Some("sha256:chaos-v2.wasm"));
        assert!(ctx.registry.serving(&shadow_origin("chaos-c")).is_some());

        obj.spec.shadow = Some(ShadowSpec {
            module: "r.example/chaos:3".into(),
            ..ShadowSpec::default()
        });
        let err = shadow(&ctx, &obj, &grant, None)
            .await
            .expect_err("unreachable");
        assert!(matches!(err, PluginObjectError::Shadow(_)), "{err:?}");
        assert_eq!(err.reason(), "RegistryUnreachable");
        assert!(err.to_string().starts_with("shadow: "), "{err}");
        assert!(err.is_transient());
        // The candidate that ran keeps running.
        assert!(ctx.registry.serving(&shadow_origin("chaos-c")).is_some());
    })
    .await
    .expect("the test timed out, likely deadlocked");
}

#[tokio::test]
async fn write_status_records_what_serves_and_writes_it_with_consistency() {
    timeout(TEST_TIMEOUT, async {
        let sim = kube_sim::Sim::start(&["main"]).await.expect("sim");
        let client = sim_client(&sim).await;
        install_crd(&client).await;
        let ctx = context(client.clone(), &Arc::default());
        let api: Api<Plugin> = Api::all(client);
        let obj = api
            .create(
                &PostParams::default(),
                &object("p", "r.example/p:1", &["get"]),
            )
            .await
            .expect("created");
        remember(&ctx, &obj);
        let mut status = PluginObjectStatus {
            observed_generation: obj.metadata.generation,
            digest: Some("sha256:1".into()),
            ..PluginObjectStatus::default()
        };
        super::conditions::set(&mut status, READY, true, "Serving", "p serves");
        let served = Served {
            digest: Some("sha256:1".into()),
            shadow: None,
        };
        record(&ctx, "p", Some(status), &served).await;
        let written = api
            .get_status("p")
            .await
            .expect("read")
            .status
            .expect("status");
        assert_eq!(written.digest.as_deref(), Some("sha256:1"));
        assert_eq!(
            condition(&written, READY).map(|c| c.status.as_str()),
            Some("True")
        );
        // Nothing serves here (nothing was loaded): `Consistent` says so.
        let consistent =
            condition(&written, crate::source::plugin_crd::CONSISTENT).expect("Consistent");
        assert_eq!(consistent.reason, "DesiredUnresolved", "{consistent:?}");
    })
    .await
    .expect("the test timed out, likely deadlocked");
}

#[tokio::test]
async fn reconcile_makes_the_desired_version_serve_and_a_failure_keeps_it() {
    timeout(TEST_TIMEOUT, async {
        let sim = kube_sim::Sim::start(&["main"]).await.expect("sim");
        let client = sim_client(&sim).await;
        install_crd(&client).await;
        let source = FakeSource {
            modules: [(
                "r.example/chaos:1".to_owned(),
                Ok(test_plugin("chaos-v1.wasm")),
            )]
            .into(),
            ..FakeSource::default()
        };
        let ctx = context(client.clone(), &Arc::new(source));
        let api: Api<Plugin> = Api::all(client);
        let obj = api
            .create(
                &PostParams::default(),
                &object("chaos-d", "r.example/chaos:1", &["get", "patch"]),
            )
            .await
            .expect("created");
        remember(&ctx, &obj);
        let action = reconcile(Arc::new(obj.clone()), Arc::clone(&ctx))
            .await
            .expect("serves");
        assert_eq!(action.requeue_after(), None);
        let status = api
            .get_status("chaos-d")
            .await
            .expect("read")
            .status
            .expect("status");
        for kind in [FETCHED, READY] {
            assert_eq!(
                condition(&status, kind).map(|c| c.status.as_str()),
                Some("True"),
                "{kind}"
            );
        }
        assert_eq!(
            condition(&status, DEGRADED).map(|c| c.status.as_str()),
            Some("False")
        );
        assert_eq!(status.digest.as_deref(), Some("sha256:chaos-v1.wasm"));
        // The same spec again: up to date, nothing to do.
        let memory = Memory::recall(&ctx, "chaos-d");
        assert_eq!(resolve(&obj, &memory, true), Plan::UpToDate);

        // A new generation naming a module that cannot be fetched.
        let mut next = obj.clone();
        next.spec.module = "r.example/chaos:9".into();
        next.metadata.generation = Some(2);
        next.status = Some(status);
        remember(&ctx, &next);
        let err = reconcile(Arc::new(next), Arc::clone(&ctx))
            .await
            .expect_err("unreachable");
        assert_eq!(err.reason(), "RegistryUnreachable");
        let status = api
            .get_status("chaos-d")
            .await
            .expect("read")
            .status
            .expect("status");
        let degraded = condition(&status, DEGRADED).expect("Degraded");
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "RegistryUnreachable")
        );
        assert!(
            degraded.message.contains("keeps serving"),
            "{}",
            degraded.message
        );
        let ready = condition(&status, READY).expect("Ready");
        assert_eq!(ready.status, "True", "the earlier version still serves");
        assert!(ctx.registry.serving(&origin("chaos-d")).is_some());
    })
    .await
    .expect("the test timed out, likely deadlocked");
}

/// cosign's payload for `digest`, signed by `key`.
fn signed(key: &crate::source::signature::SigningKey, digest: &str) -> SignatureEntry {
    let payload =
        crate::source::signature::payload::payload("r.example/chaos", digest, &Default::default());
    SignatureEntry {
        signature: Some(key.sign(&payload).expect("signs")),
        payload,
        key_material: false,
    }
}

/// The `Verified` condition of Plugin `name`: (status, reason).
async fn verified_condition(api: &Api<Plugin>, name: &str) -> (String, String, String) {
    let status = api
        .get_status(name)
        .await
        .expect("read")
        .status
        .expect("status");
    let c = condition(&status, crate::source::plugin_crd::VERIFIED).expect("Verified");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[tokio::test]
async fn verification_serves_only_signed_modules_and_a_failure_keeps_the_serving_one() {
    use crate::source::signature::{KeyAlgorithm, SigningKey};
    use k8s_openapi::api::core::v1::Secret;

    timeout(TEST_TIMEOUT, async {
        let sim = kube_sim::Sim::start(&["main"]).await.expect("sim");
        let client = sim_client(&sim).await;
        install_crd(&client).await;
        let key = SigningKey::generate(KeyAlgorithm::EcdsaP256).expect("key");
        let stranger = SigningKey::generate(KeyAlgorithm::Ed25519).expect("key");
        let v1 = test_plugin("chaos-v1.wasm");
        let v2 = Module {
            digest: "sha256:chaos-v2".into(),
            ..test_plugin("chaos-v2.wasm")
        };
        let source = FakeSource {
            modules: [
                ("r.example/chaos:1".to_owned(), Ok(v1.clone())),
                ("r.example/chaos:2".to_owned(), Ok(v2.clone())),
                (
                    "r.example/chaos:stranger".to_owned(),
                    Ok(Module {
                        digest: "sha256:stranger".into(),
                        ..v2.clone()
                    }),
                ),
            ]
            .into(),
            signatures: [
                (v1.digest.clone(), vec![signed(&key, &v1.digest)]),
                (
                    "sha256:stranger".to_owned(),
                    vec![signed(&stranger, "sha256:stranger")],
                ),
            ]
            .into(),
            ..FakeSource::default()
        };
        let ctx = context(client.clone(), &Arc::new(source));
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "rekon-system"}}))
                .expect("a Namespace");
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .expect("namespace created");
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "rekon-system");
        let key_secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "plugin-keys"},
            "stringData": {"cosign.pub": key.public_key_pem()},
        }))
        .expect("a Secret");
        secrets
            .create(&PostParams::default(), &key_secret)
            .await
            .expect("key Secret created");
        let api: Api<Plugin> = Api::all(client);
        let mut obj = object("chaos-v", "r.example/chaos:1", &["get", "patch"]);
        obj.spec.verification = serde_json::from_value(serde_json::json!({
            "keys": [{"secretRef": {"name": "plugin-keys"}}],
        }))
        .expect("verification");
        let obj = api
            .create(&PostParams::default(), &obj)
            .await
            .expect("created");
        remember(&ctx, &obj);
        let _ = reconcile(Arc::new(obj.clone()), Arc::clone(&ctx))
            .await
            .expect("a signed module serves");
        let (status, reason, message) = verified_condition(&api, "chaos-v").await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "SignaturesVerified")
        );
        assert!(
            message.contains("Secret rekon-system/plugin-keys[cosign.pub]"),
            "{message}"
        );

        // Each next generation fails verification; v1 keeps serving and
        // nothing of the refused module is loaded.
        let mut generation = 1;
        let mut attempt = |module: &str, digest: Option<&str>| {
            generation += 1;
            let mut next = obj.clone();
            next.spec.module = module.to_owned();
            next.metadata.generation = Some(generation);
            next.spec.digest = digest.map(str::to_owned);
            // What this replica remembers (what serves, the status it
            // wrote) stays; only the object is new.
            if let Some(e) = ctx.entries.lock().get_mut("chaos-v") {
                e.latest = Some(Arc::new(next.clone()));
            }
            reconcile(Arc::new(next), Arc::clone(&ctx))
        };
        let err = attempt("r.example/chaos:2", None)
            .await
            .expect_err("unsigned");
        assert_eq!(err.reason(), "SignatureMissing");
        assert!(!err.is_transient());
        let (status, reason, _) = verified_condition(&api, "chaos-v").await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "SignatureMissing")
        );
        // Pinned: its signatures are read while it is fetched.
        let err = attempt("r.example/chaos:stranger", Some("sha256:stranger"))
            .await
            .expect_err("another key");
        assert_eq!(err.reason(), "UntrustedKey");
        secrets
            .delete("plugin-keys", &Default::default())
            .await
            .expect("key Secret deleted");
        let err = attempt("r.example/chaos:2", None)
            .await
            .expect_err("no key");
        assert_eq!(err.reason(), "KeyUnavailable");
        assert!(err.is_transient(), "a key Secret may come back");
        assert!(err.to_string().contains("does not exist"), "{err}");
        let serving = ctx.registry.serving(&origin("chaos-v")).expect("v1 serves");
        assert_eq!(serving.version(), "1.0.0");
        let status = api
            .get_status("chaos-v")
            .await
            .expect("read")
            .status
            .expect("status");
        assert_eq!(status.digest.as_deref(), Some(v1.digest.as_str()));
        assert_eq!(
            condition(&status, READY).map(|c| c.status.as_str()),
            Some("True")
        );

        // Signatures required: a Plugin without `verification` is refused.
        let strict = context(sim_client(&sim).await, &Arc::default());
        let strict = Arc::new(Context {
            config: PluginObjectsConfig {
                require_signatures: true,
                ..strict.config.clone()
            },
            ..Arc::into_inner(strict).expect("sole owner")
        });
        let bare = api
            .create(
                &PostParams::default(),
                &object("chaos-bare", "r.example/chaos:1", &["get", "patch"]),
            )
            .await
            .expect("created");
        remember(&strict, &bare);
        let err = reconcile(Arc::new(bare), Arc::clone(&strict))
            .await
            .expect_err("refused");
        assert_eq!(err.reason(), "VerificationRequired");
        assert!(strict.registry.serving(&origin("chaos-bare")).is_none());
        let (status, reason, _) = verified_condition(&api, "chaos-bare").await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "VerificationRequired")
        );
        let text = ctx.metrics.encode();
        for (outcome, n) in [
            ("verified", 1),
            ("signature_missing", 1),
            ("untrusted_key", 1),
            ("key_unavailable", 1),
        ] {
            let line = format!("rekon_plugin_verification_total{{outcome=\"{outcome}\"}} {n}\n");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
    })
    .await
    .expect("the test timed out, likely deadlocked");
}

async fn sim_client(sim: &kube_sim::Sim) -> kube::Client {
    crate::cluster::connect(
        "main",
        &crate::cluster::Source::Context {
            kubeconfig: Some(sim.kubeconfig_path().to_path_buf()),
            context: Some("main".to_owned()),
        },
        &crate::cluster::default_user_agent(),
    )
    .await
    .expect("a client of the sim")
}

async fn install_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Plugin::crd())
        .await
        .expect("the Plugin CRD");
}

/// A Plugin object's plugin stopped at its deadline again and again: its
/// status counts the containments per reason, names the latest and its
/// backoff, and an Event whose reason names the bound is recorded once,
/// not again until there are new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containments_show_on_the_plugin_objects_status_and_in_an_event() {
    use k8s_openapi::api::events::v1::Event as KubeEvent;
    timeout(TEST_TIMEOUT, async {
        let sim = kube_sim::Sim::start(&["main"]).await.expect("sim");
        let client = sim_client(&sim).await;
        install_crd(&client).await;
        let ctx = context(client.clone(), &Arc::default());
        let api: Api<Plugin> = Api::all(client.clone());
        let obj = api
            .create(
                &PostParams::default(),
                &object("chaos-c", "r.example/chaos:1", &["get", "patch"]),
            )
            .await
            .expect("created");
        remember(&ctx, &obj);
        let status = PluginObjectStatus {
            observed_generation: obj.metadata.generation,
            ..PluginObjectStatus::default()
        };
        record(&ctx, "chaos-c", Some(status), &Served::default()).await;
        super::contained::refresh_contained(&ctx).await;
        let before = api.get_status("chaos-c").await.expect("read").status;
        assert_eq!(before.and_then(|s| s.contained), None, "never contained");

        let grant = granted(&obj.spec).expect("grant");
        let options = LoadOptions::default().with_instance(Some("chaos-c"));
        let loaded = load(
            &ctx,
            &origin("chaos-c"),
            &test_plugin("chaos-v1.wasm"),
            &grant,
            &options,
        )
        .await
        .expect("loaded");
        for _ in 0..3 {
            let request = crate::action::Request {
                cluster: "main".into(),
                namespace: Some("default".into()),
                name: "loop".into(),
            };
            let reads = Arc::new(crate::plugin::NoReads);
            loaded
                .reconcile(
                    request,
                    crate::action::Phase::Live,
                    reads,
                    std::time::SystemTime::now(),
                )
                .await
                .expect_err("spins to its deadline");
        }
        super::contained::refresh_contained(&ctx).await;
        let contained = api
            .get_status("chaos-c")
            .await
            .expect("read")
            .status
            .and_then(|s| s.contained)
            .expect("status.contained");
        assert_eq!(contained.counts.get("Timeout"), Some(&3), "{contained:?}");
        assert_eq!(contained.last_reason.as_deref(), Some("Timeout"));
        assert!(
            contained
                .last_message
                .as_deref()
                .is_some_and(|m| m.contains("chaos-c timed out")),
            "{contained:?}"
        );
        assert!(contained.last_time.is_some());
        assert_eq!(
            contained.backoff_seconds,
            Some(4),
            "the first interval by default"
        );
        let events: Api<KubeEvent> = Api::all(client);
        let told = || async {
            events
                .list(&Default::default())
                .await
                .expect("events")
                .items
                .into_iter()
                .filter(|e| {
                    e.reason.as_deref() == Some("Timeout") && e.action.as_deref() == Some("Contain")
                })
                .collect::<Vec<_>>()
        };
        let first = told().await;
        assert_eq!(first.len(), 1, "{first:?}");
        let note = first[0].note.clone().unwrap_or_default();
        assert!(
            note.contains("Timeout: 3") && note.contains("backed off"),
            "{note}"
        );
        // Nothing new: no second Event, nothing written.
        super::contained::refresh_contained(&ctx).await;
        let again = told().await;
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].series, None, "not recorded again: {again:?}");
    })
    .await
    .expect("the test timed out, likely deadlocked");
}
