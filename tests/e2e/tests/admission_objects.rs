//! Admission from a Plugin object, end to end (issue 38), in each language
//! (the widgets test plugin in Rust, TypeScript and Python, and each one's
//! strict build, sizes up to 5 instead of 10: `make test-plugins`, `make
//! sdk-plugins`; [`rekon_e2e::widgets`]): both builds pushed to a real OCI
//! registry (`docker-registry`), the real `rekon run --plugin-objects
//! --webhook-addr --webhook-url-base`, which writes the plugin's webhook
//! configurations itself, and `kubectl` as the client against kube-sim
//! (which calls the webhooks as the API server does):
//!
//! 1. The serving version's validating and mutating configurations are the
//!    host's (labelled, caBundle the certificate it serves), and repaired
//!    when someone deletes or edits them (the host watches them): kubectl
//!    is denied a size-11 Widget, and a size-7 one is admitted with the
//!    plugin's warning printed by kubectl (`Warning: ...`) and stored with
//!    the tier label defaulted through the managed mutating configuration.
//! 2. The strict build as the shadow: another size-7 Widget is still
//!    admitted, and `status.shadow.admission` counts the shadow's
//!    would-deny with the Widget's name and the shadow's message.
//! 3. Promotion (`rekon plugin promote --object`): the next size-7 Widget
//!    is denied with the strict message.
//! 4. Deleting the Plugin object removes the host's configurations.
//! 5. A MutatingWebhookConfiguration of the same name made by someone else,
//!    then the Plugin object again: the host writes its validating one,
//!    leaves the foreign one alone and names it in `status.webhooks.foreign`;
//!    deleting the object again leaves the foreign one.

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use rekon_e2e::plugin_objects::{self, wait_plugin_crd};
use rekon_e2e::registry::Registry;
use rekon_e2e::widgets::{Build, Lang};
use rekon_e2e::{Env, EnvOptions, apply_object, free_local_addr, get, output_text};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
/// A debug host compiling a JavaScript or Python component takes tens of
/// seconds; both builds are compiled into the host's cache before it
/// starts, and the first load still gets this long.
const LOAD_WAIT: Duration = Duration::from_secs(180);
const VALIDATING: &str = "validatingwebhookconfigurations";
const MUTATING: &str = "mutatingwebhookconfigurations";
const ADMISSION_GROUP: &str = "admissionregistration.k8s.io/v1";

fn widget(name: &str, size: i64) -> String {
    format!(
        "apiVersion: widgets.rekon.dev/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  size: {size}\n"
    )
}

fn plugin(env: &Env) -> Option<Value> {
    get(env.main(), "rekon.dev/v1alpha1", "plugins", None, "widgets")
}

fn configuration(env: &Env, plural: &str) -> Option<Value> {
    get(env.main(), ADMISSION_GROUP, plural, None, "rekon-widgets")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_plugin_objects_admission_is_configured_shadowed_promoted_and_removed()
-> anyhow::Result<()> {
    admission_is_configured_shadowed_promoted_and_removed(Lang::Rust).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_plugin_objects_admission_is_configured_shadowed_promoted_and_removed()
-> anyhow::Result<()> {
    admission_is_configured_shadowed_promoted_and_removed(Lang::TypeScript).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_objects_admission_is_configured_shadowed_promoted_and_removed()
-> anyhow::Result<()> {
    admission_is_configured_shadowed_promoted_and_removed(Lang::Python).await
}

/// `rekon plugin manifest FILE --module MODULE` as the Plugin `widgets`.
fn widgets_plugin(
    paths: &rekon_e2e::Paths,
    file: &std::path::Path,
    module: &str,
) -> anyhow::Result<Value> {
    let out = plugin_objects::rekon(
        paths,
        &[
            "plugin",
            "manifest",
            &file.display().to_string(),
            "--module",
            module,
        ],
    )?;
    let mut object: Value = serde_yaml::from_str(&out)?;
    object["metadata"]["name"] = json!("widgets");
    Ok(object)
}

/// Checks the host's configuration `plural` of the widgets: its labels,
/// its one webhook's name and route, a caBundle.
fn assert_ours(config: &Value, hook_name: &str, route: &str, port: u16) {
    assert_eq!(
        config["metadata"]["labels"]["app.kubernetes.io/managed-by"], "rekon",
        "{config}"
    );
    assert_eq!(
        config["metadata"]["labels"]["rekon.dev/plugin"], "widgets",
        "{config}"
    );
    let hook = &config["webhooks"][0];
    assert_eq!(hook["name"], hook_name, "{config}");
    assert_eq!(
        hook["clientConfig"]["url"],
        format!("https://localhost:{port}/{route}/widgets"),
        "{config}"
    );
    assert!(hook["clientConfig"]["caBundle"].is_string(), "{config}");
}

/// `rekon run --plugin-objects` with its webhook server and the
/// configurations it manages, kube-sim and the Plugin CRD served.
struct Host {
    env: Env,
    /// The webhook server's address.
    addr: std::net::SocketAddr,
    _cache: tempfile::TempDir,
    _certs: tempfile::TempDir,
}

impl Host {
    /// Started with `components` compiled into its cache first (a
    /// JavaScript or Python component would otherwise be compiled at each
    /// load).
    async fn start(
        paths: &rekon_e2e::Paths,
        components: &[&std::path::Path],
    ) -> anyhow::Result<Self> {
        let cache = tempfile::tempdir()?;
        let cache_dir = cache.path().display().to_string();
        for file in components {
            plugin_objects::rekon(
                paths,
                &[
                    "plugin",
                    "compile",
                    &file.display().to_string(),
                    "--cache-dir",
                    &cache_dir,
                ],
            )?;
        }
        let certs = tempfile::tempdir()?;
        let addr = free_local_addr()?;
        let mut env = Env::start(EnvOptions {
            plugins: Vec::new(),
            extra_args: vec![
                "--plugin-objects".into(),
                "--cache-dir".into(),
                cache_dir,
                "--webhook-addr".into(),
                addr.to_string(),
                "--webhook-cert-dir".into(),
                certs.path().display().to_string(),
                "--webhook-url-base".into(),
                format!("https://localhost:{}", addr.port()),
            ],
            ..EnvOptions::default()
        })
        .await?;
        wait_plugin_crd(&mut env, WAIT).await?;
        Ok(Self {
            env,
            addr,
            _cache: cache,
            _certs: certs,
        })
    }
}

async fn admission_is_configured_shadowed_promoted_and_removed(lang: Lang) -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(600), async {
        let paths = rekon_e2e::Paths::discover()?;
        let serving_file = lang.component(&paths, Build::Default);
        let strict_file = lang.component(&paths, Build::Strict);
        let registry = Registry::start()?;
        let serving = format!("{}/rekon/widgets:1", registry.host());
        let strict = format!("{}/rekon/widgets:1-strict", registry.host());
        let d1 = plugin_objects::push(&paths, &serving_file, &serving, None)?;
        let d2 = plugin_objects::push(&paths, &strict_file, &strict, None)?;
        anyhow::ensure!(d1 != d2, "two builds, two digests");

        let Host {
            mut env,
            addr,
            _cache,
            _certs,
        } = Host::start(&paths, &[&serving_file, &strict_file]).await?;
        apply_object(env.main(), widgets_plugin(&paths, &serving_file, &serving)?)?;

        // 1. The host's configurations, then kubectl denied, warned and
        // defaulted through them.
        let obj = env
            .wait_for(
                "status.webhooks naming both configurations",
                LOAD_WAIT,
                |env| {
                    let obj = plugin(env)?;
                    (obj["status"]["webhooks"]["validating"] == "rekon-widgets"
                        && obj["status"]["webhooks"]["mutating"] == "rekon-widgets"
                        && obj["status"]["digest"] == json!(d1))
                    .then_some(obj)
                },
            )
            .await?;
        assert!(obj["status"]["webhooks"].get("foreign").is_none(), "{obj}");
        let config = configuration(&env, VALIDATING).context("the validating configuration")?;
        assert_ours(&config, "size.widgets.rekon.dev", "validate", addr.port());
        let config = configuration(&env, MUTATING).context("the mutating configuration")?;
        assert_ours(&config, "tier.widgets.rekon.dev", "mutate", addr.port());
        env.wait_for("the Widget CRD to be served", WAIT, |env| {
            env.main()
                .list("widgets.rekon.dev/v1", "widgets", Some("default"), "")
                .ok()
        })
        .await?;

        // Drift: someone deletes the validating configuration and empties
        // the mutating one; the host writes both again (it watches them).
        let drifted = std::time::Instant::now();
        env.kubectl(
            "main",
            &["delete", "validatingwebhookconfiguration", "rekon-widgets"],
        )?;
        env.kubectl(
            "main",
            &[
                "patch",
                "mutatingwebhookconfiguration",
                "rekon-widgets",
                "--type=json",
                "-p",
                r#"[{"op": "replace", "path": "/webhooks/0/clientConfig/url", "value": "https://localhost:1/elsewhere"}]"#,
            ],
        )?;
        env.wait_for("both configurations repaired", WAIT, |env| {
            let validating = configuration(env, VALIDATING)?;
            let mutating = configuration(env, MUTATING)?;
            (mutating["webhooks"][0]["clientConfig"]["url"]
                == format!("https://localhost:{}/mutate/widgets", addr.port()))
            .then_some((validating, mutating))
        })
        .await?;
        // A printout, not an assertion: how soon the watch repaired them.
        eprintln!(
            "{lang:?}: both configurations repaired {:?} after the delete",
            drifted.elapsed()
        );
        let config = configuration(&env, VALIDATING).context("repaired")?;
        assert_ours(&config, "size.widgets.rekon.dev", "validate", addr.port());

        let (ok, text) = env.kubectl_apply("main", &widget("huge", 11));
        assert!(!ok, "a size-11 widget was stored: {text}");
        assert!(
            text.contains("The Widget \"huge\" is invalid: spec.size: must be at most 10"),
            "{text}"
        );
        let (ok, text) = env.kubectl_apply("main", &widget("large", 7));
        assert!(ok, "{text}");
        assert!(
            text.contains("Warning: a widget above size 5 is large"),
            "the plugin's warning reaches kubectl: {text}"
        );
        let stored = get(
            env.main(),
            "widgets.rekon.dev/v1",
            "widgets",
            Some("default"),
            "large",
        )
        .context("the large widget stored")?;
        assert_eq!(
            stored.pointer("/metadata/labels/widgets.rekon.dev~1tier"),
            Some(&json!("standard")),
            "defaulted through the managed MutatingWebhookConfiguration: {stored}"
        );

        // 2. The strict build as the shadow: admitted, would-deny counted.
        apply_object(
            env.main(),
            json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
                   "metadata": {"name": "widgets"},
                   "spec": {"shadow": {"module": strict}}}),
        )?;
        env.wait_for("the shadow to load", LOAD_WAIT, |env| {
            (plugin(env)?["status"]["shadow"]["digest"] == json!(d2)).then_some(())
        })
        .await?;
        let (ok, text) = env.kubectl_apply("main", &widget("seven", 7));
        assert!(ok, "the shadow's verdict was enforced: {text}");
        let obj = env
            .wait_for("a would-deny in status.shadow.admission", WAIT, |env| {
                let obj = plugin(env)?;
                (obj["status"]["shadow"]["admission"]["wouldDeny"].as_u64()? >= 1).then_some(obj)
            })
            .await?;
        let admission = &obj["status"]["shadow"]["admission"];
        let recent = admission["recent"]
            .as_array()
            .context("recent differences")?;
        let seven = recent
            .iter()
            .find(|d| d["result"] == "wouldDeny")
            .with_context(|| format!("a wouldDeny example in {admission}"))?;
        assert_eq!(seven["object"], "Widget default/seven", "{admission}");
        assert_eq!(seven["operation"], "CREATE", "{admission}");
        assert!(
            seven["message"]
                .as_str()
                .unwrap_or_default()
                .contains("at most 5"),
            "{admission}"
        );
        assert_eq!(admission["wouldAllow"], 0, "{admission}");
        assert!(
            get(
                env.main(),
                "widgets.rekon.dev/v1",
                "widgets",
                Some("default"),
                "seven"
            )
            .is_some()
        );

        // 3. Promotion: the strict rule now answers kubectl.
        let out = Command::new(&env.paths.rekon)
            .args([
                "plugin",
                "promote",
                "widgets",
                "--object",
                "--context",
                "main",
            ])
            .arg("--kubeconfig")
            .arg(&env.kubeconfig)
            .env_remove("KUBECONFIG")
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "rekon plugin promote --object: {}",
            output_text(&out)
        );
        env.wait_for("the strict build to serve", LOAD_WAIT, |env| {
            (plugin(env)?["status"]["digest"] == json!(d2)).then_some(())
        })
        .await?;
        let (ok, text) = env.kubectl_apply("main", &widget("eight", 7));
        assert!(
            !ok,
            "a size-7 widget was stored after the promotion: {text}"
        );
        assert!(
            text.contains("The Widget \"eight\" is invalid: spec.size: must be at most 5"),
            "{text}"
        );

        // 4. The Plugin object goes: its configurations too.
        env.kubectl("main", &["delete", "plugins.rekon.dev", "widgets"])?;
        env.wait_for("the host's configurations removed", WAIT, |env| {
            (configuration(env, VALIDATING).is_none() && configuration(env, MUTATING).is_none())
                .then_some(())
        })
        .await?;

        // 5. Someone else's configuration of the name the host would use,
        // then the Plugin object again: left alone, and reported.
        apply_object(
            env.main(),
            json!({"apiVersion": ADMISSION_GROUP, "kind": "MutatingWebhookConfiguration",
                   "metadata": {"name": "rekon-widgets", "labels": {"team": "platform"}},
                   "webhooks": []}),
        )?;
        apply_object(env.main(), widgets_plugin(&paths, &serving_file, &serving)?)?;
        let obj = env
            .wait_for(
                "status.webhooks naming the foreign configuration",
                LOAD_WAIT,
                |env| {
                    let obj = plugin(env)?;
                    (obj["status"]["webhooks"]["validating"] == "rekon-widgets"
                        && obj["status"]["digest"] == json!(d1))
                    .then_some(obj)
                },
            )
            .await?;
        assert_eq!(
            obj["status"]["webhooks"]["foreign"],
            json!(["MutatingWebhookConfiguration/rekon-widgets"]),
            "{obj}"
        );
        assert!(obj["status"]["webhooks"].get("mutating").is_none(), "{obj}");
        let foreign = configuration(&env, MUTATING).context("the foreign configuration")?;
        assert_eq!(
            foreign["metadata"]["labels"],
            json!({"team": "platform"}),
            "left alone: {foreign}"
        );
        assert!(
            foreign["webhooks"].as_array().is_none_or(Vec::is_empty),
            "left alone, no webhooks: {foreign}"
        );
        env.kubectl("main", &["delete", "plugins.rekon.dev", "widgets"])?;
        env.wait_for("the host's configuration removed", WAIT, |env| {
            configuration(env, VALIDATING).is_none().then_some(())
        })
        .await?;
        assert!(
            configuration(&env, MUTATING).is_some(),
            "the foreign configuration stays"
        );
        anyhow::Ok(())
    })
    .await
    .with_context(|| {
        format!("the {lang:?} plugin object's admission timed out (likely deadlocked)")
    })?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_points_a_rust_plugin_objects_crd_conversion_at_it() -> anyhow::Result<()> {
    conversion_is_managed_by_the_host(Lang::Rust).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_points_a_typescript_plugin_objects_crd_conversion_at_it() -> anyhow::Result<()> {
    conversion_is_managed_by_the_host(Lang::TypeScript).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_points_a_python_plugin_objects_crd_conversion_at_it() -> anyhow::Result<()> {
    conversion_is_managed_by_the_host(Lang::Python).await
}

const WIDGET_CRD: &str = "widgets.widgets.rekon.dev";

/// The Widget CRD (`kubectl get crd -o json`).
fn widget_crd(env: &Env) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(&env.kubectl(
        "main",
        &["get", "crd", WIDGET_CRD, "-o", "json"],
    )?)?)
}

/// `kubectl get widgets.<version>.widgets.rekon.dev NAME -o json`.
fn widget_at(env: &Env, version: &str, name: &str) -> anyhow::Result<Value> {
    let resource = format!("widgets.{version}.widgets.rekon.dev");
    Ok(serde_json::from_str(&env.kubectl(
        "main",
        &["get", &resource, name, "-n", "default", "-o", "json"],
    )?)?)
}

/// Host-managed conversion: the widgets' conversion build as a Plugin
/// object, and no `rekon crds --webhook-*` step. The host points the
/// Widget CRD's `spec.conversion` at `/convert/widgets` (caBundle the
/// served certificate, labelled with the plugin); kubectl writes a Widget
/// at v1alpha1 and reads it at both versions. Deleting the Plugin object
/// leaves the stanza (the CRD still serves two versions: `None` would lose
/// fields), so a read at v1 works and one at v1alpha1 fails loudly.
async fn conversion_is_managed_by_the_host(lang: Lang) -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(600), async {
        let paths = rekon_e2e::Paths::discover()?;
        let file = lang.component(&paths, Build::Conversion);
        let registry = Registry::start()?;
        let module = format!("{}/rekon/widgets:1-conversion", registry.host());
        let digest = plugin_objects::push(&paths, &file, &module, None)?;
        let Host {
            mut env,
            addr,
            _cache,
            _certs,
        } = Host::start(&paths, &[&file]).await?;
        apply_object(env.main(), widgets_plugin(&paths, &file, &module)?)?;

        let obj = env
            .wait_for("status.webhooks.conversion", LOAD_WAIT, |env| {
                let obj = plugin(env)?;
                (obj["status"]["webhooks"]["conversion"] == json!([WIDGET_CRD])
                    && obj["status"]["digest"] == json!(digest))
                .then_some(obj)
            })
            .await?;
        assert!(obj["status"]["webhooks"].get("error").is_none(), "{obj}");
        let crd = widget_crd(&env)?;
        let conversion = &crd["spec"]["conversion"];
        assert_eq!(conversion["strategy"], "Webhook", "{crd}");
        assert_eq!(
            conversion["webhook"]["clientConfig"]["url"],
            format!("https://localhost:{}/convert/widgets", addr.port()),
            "{crd}"
        );
        assert!(
            conversion["webhook"]["clientConfig"]["caBundle"].is_string(),
            "{crd}"
        );
        assert_eq!(
            conversion["webhook"]["conversionReviewVersions"],
            json!(["v1"]),
            "{crd}"
        );
        assert_eq!(
            crd["metadata"]["labels"]["rekon.dev/conversion-plugin"], "widgets",
            "{crd}"
        );

        // Written at v1alpha1, read at both versions.
        let old = "apiVersion: widgets.rekon.dev/v1alpha1\nkind: Widget\nmetadata:\n  name: old\n  namespace: default\nspec:\n  amount: 4\n";
        let (ok, text) = env.kubectl_apply("main", old);
        assert!(ok, "{text}");
        let at_v1 = widget_at(&env, "v1", "old")?;
        assert_eq!(at_v1["apiVersion"], "widgets.rekon.dev/v1", "{at_v1}");
        assert_eq!(at_v1["spec"], json!({"size": 4}), "{at_v1}");
        let at_v1alpha1 = widget_at(&env, "v1alpha1", "old")?;
        assert_eq!(
            at_v1alpha1["apiVersion"], "widgets.rekon.dev/v1alpha1",
            "{at_v1alpha1}"
        );
        assert_eq!(at_v1alpha1["spec"], json!({"amount": 4}), "{at_v1alpha1}");
        assert_eq!(at_v1["metadata"]["uid"], at_v1alpha1["metadata"]["uid"]);

        // The Plugin object goes (its configurations, released after the
        // conversion, show the release happened): the stanza stays.
        env.kubectl("main", &["delete", "plugins.rekon.dev", "widgets"])?;
        env.wait_for("the host's configurations removed", WAIT, |env| {
            (configuration(env, VALIDATING).is_none() && configuration(env, MUTATING).is_none())
                .then_some(())
        })
        .await?;
        let crd = widget_crd(&env)?;
        assert_eq!(
            crd["spec"]["conversion"]["strategy"], "Webhook",
            "two versions served: the conversion is kept, not None: {crd}"
        );
        assert!(
            env.rekon
                .log_tail(200)
                .contains("their conversion webhook is left in place"),
            "the host says why it kept it"
        );
        assert_eq!(widget_at(&env, "v1", "old")?["spec"], json!({"size": 4}));
        let read = env.kubectl(
            "main",
            &["get", "widgets.v1alpha1.widgets.rekon.dev", "old", "-n", "default"],
        );
        assert!(
            read.is_err(),
            "a read at v1alpha1 with no plugin to convert: {read:?}"
        );
        anyhow::Ok(())
    })
    .await
    .with_context(|| format!("the {lang:?} plugin object's conversion timed out (likely deadlocked)"))?
}
