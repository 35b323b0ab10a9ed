//! The API side of a plugin (issue 38): the webhook server over real HTTPS
//! (its self-signed certificate written to the certificate directory and
//! trusted from there, as the API server trusts the caBundle), answering
//! AdmissionReview v1 JSON with the widgets test plugin (`make
//! test-plugins`): allowed, denied with message, code and field causes,
//! defaulted through a base64 JSON Patch, a trap and a timeout answered 500
//! (the API server then applies the failure policy) while the plugin keeps
//! serving, and 404 for a plugin without admission. Conversion too, with
//! the widgets built with feature `conversion`: ConversionReview v1 with
//! every object converted, and failures (trap, timeout, an object the API
//! server would refuse, a version not converted, no plugin) answered as the
//! review's `Failure` result while the plugin keeps converting.

mod plugin_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use plugin_support::*;
use rekon::admission::webhook_cert;
use rekon::plugin::{AdmissionKind, FailurePolicy, PluginRegistry, PluginRuntime, RuntimeConfig};
use rekon::telemetry::metrics::Metrics;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// Far beyond any answer below: a request still open then is stuck.
const STUCK: Duration = Duration::from_secs(60);

struct Served {
    addr: SocketAddr,
    anchor: rustls::pki_types::CertificateDer<'static>,
    metrics: Metrics,
    registry: PluginRegistry,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// widgets and chaos (no admission) loaded, the server on a free port.
async fn serve() -> Served {
    serve_widgets("widgets.wasm").await
}

/// The widgets plugin of test plugin file `widgets` and chaos loaded, the
/// server on a free port.
async fn serve_widgets(widgets: &str) -> Served {
    let metrics = Metrics::new();
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 64 << 20,
        call_timeout: Duration::from_millis(800),
        max_concurrent_instances: 8,
        metrics: metrics.clone(),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(test_plugin(widgets), plugins.path().join("widgets.wasm")).unwrap();
    std::fs::copy(chaos_v1(), plugins.path().join("chaos.wasm")).unwrap();
    let registry = PluginRegistry::new(runtime);
    registry.load_dir(plugins.path()).expect("plugins load");
    let certs = tempfile::tempdir().unwrap();
    let cert = webhook_cert(Some(certs.path()), vec!["localhost".into()]).expect("cert made");
    let (addr, stop) = serve_webhooks(cert, &registry, &metrics).await;
    // Trust what was written, as `rekon webhooks` puts it in the caBundle.
    let pem = std::fs::read(certs.path().join("tls.crt")).expect("tls.crt written");
    let anchor = rustls_pemfile_first(&pem);
    Served {
        addr,
        anchor,
        metrics,
        registry,
        _dirs: (plugins, certs),
        _stop: stop,
    }
}

fn rustls_pemfile_first(pem: &[u8]) -> rustls::pki_types::CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .next()
        .expect("a certificate in tls.crt")
        .expect("it parses")
}

/// POST `body` to `path` over TLS, trusting only the served certificate.
async fn post(served: &Served, path: &str, body: &Value) -> anyhow::Result<(u16, String)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(served.anchor.clone())?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(served.addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost")?;
    let mut tls = connector.connect(name, tcp).await?;
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    let _ = timeout(STUCK, tls.read_to_end(&mut raw))
        .await
        .expect("the answer came; likely deadlocked");
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no header end in {text:?}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("no status"))?
        .parse()?;
    Ok((code, body.to_owned()))
}

fn widget(name: &str, size: i64, labels: Value) -> Value {
    json!({
        "apiVersion": "widgets.rekon.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default", "uid": "w-uid", "labels": labels},
        "spec": {"size": size}
    })
}

fn review(uid: &str, object: &Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "widgets.rekon.dev", "version": "v1", "kind": "Widget"},
            "resource": {"group": "widgets.rekon.dev", "version": "v1", "resource": "widgets"},
            "name": object["metadata"]["name"], "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "uid": "a-1", "groups": ["dev", "system:authenticated"]},
            "object": object, "oldObject": null, "dryRun": false
        }
    })
}

async fn answer(served: &Served, path: &str, object: &Value) -> Value {
    let (code, body) = post(served, path, &review("uid-1", object)).await.unwrap();
    assert_eq!(code, 200, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(json["kind"], "AdmissionReview");
    assert_eq!(json["response"]["uid"], "uid-1", "uid echoed");
    json["response"].clone()
}

#[tokio::test]
async fn the_rules_are_kept_with_the_load() {
    let served = serve().await;
    let widgets = served.registry.get("widgets").expect("widgets loaded");
    let rules = widgets.admission_rules();
    let names: Vec<(&str, AdmissionKind)> =
        rules.iter().map(|r| (r.name.as_str(), r.kind)).collect();
    assert_eq!(
        names,
        [
            ("size", AdmissionKind::Validate),
            ("tier", AdmissionKind::Mutate)
        ]
    );
    assert_eq!(rules[0].resources[0].plural, "widgets");
    assert_eq!(rules[0].failure_policy, FailurePolicy::Fail);
    assert_eq!(rules[0].timeout_seconds, Some(5));
    let chaos = served.registry.get("chaos").expect("chaos loaded");
    assert!(
        chaos.admission_rules().is_empty(),
        "a plugin without admission has no rule"
    );
}

#[tokio::test]
async fn a_valid_widget_is_allowed_and_a_large_one_denied_with_code_and_field() {
    let served = serve().await;
    let allowed = answer(&served, "/validate/widgets", &widget("w", 10, json!({}))).await;
    assert_eq!(allowed["allowed"], true);
    // Its quota reads the host's cache through the host imports; with no
    // engine behind this server the read fails, and the plugin says so.
    let warning = allowed["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.starts_with("the widget quota was not checked: "),
        "{allowed}"
    );
    let denied = answer(&served, "/validate/widgets", &widget("w", 11, json!({}))).await;
    assert_eq!(denied["allowed"], false);
    assert_eq!(denied["status"]["code"], 422);
    assert_eq!(denied["status"]["reason"], "Invalid");
    assert_eq!(
        denied["status"]["message"],
        "a widget's size is at most 10, not 11"
    );
    assert_eq!(
        denied["status"]["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "message": "must be at most 10", "field": "spec.size"}])
    );
    let text = served.metrics.encode();
    assert!(
        text.contains(
            "controller_runtime_webhook_requests_total{webhook=\"/validate/widgets\",code=\"200\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains(
        "rekon_admission_verdicts_total{plugin=\"widgets\",kind=\"validate\",verdict=\"denied\"} 1"
    ));
    assert!(text.contains(
        "controller_runtime_webhook_requests_in_flight{webhook=\"/validate/widgets\"} 0"
    ));
    assert!(text.contains(
        "controller_runtime_webhook_latency_seconds_count{webhook=\"/validate/widgets\"} 2"
    ));
}

#[tokio::test]
async fn mutate_defaults_the_tier_through_a_json_patch_and_warns() {
    let served = serve().await;
    let object = widget("w", 7, json!({"app": "shop"}));
    let response = answer(&served, "/mutate/widgets", &object).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    assert_eq!(
        response["warnings"],
        json!(["a widget above size 5 is large"])
    );
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().expect("patch is base64 text"))
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).expect("the patch applies to the object sent");
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "shop", "widgets.rekon.dev/tier": "standard"})
    );
    // Everything else is as sent: the patch changes only what mutate did.
    patched["metadata"]["labels"] = object["metadata"]["labels"].clone();
    assert_eq!(patched, object);
    let labelled = widget("w", 1, json!({"widgets.rekon.dev/tier": "gold"}));
    let unchanged = answer(&served, "/mutate/widgets", &labelled).await;
    assert_eq!(unchanged["allowed"], true);
    assert!(unchanged.get("patch").is_none(), "{unchanged}");
}

#[tokio::test]
async fn a_trap_or_a_timeout_answers_500_and_the_plugin_keeps_serving() {
    let served = serve().await;
    let (code, body) = post(
        &served,
        "/validate/widgets",
        &review("t", &widget("trap", 1, json!({}))),
    )
    .await
    .unwrap();
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("admission by plugin widgets failed"),
        "{body}"
    );
    assert!(body.contains("widgets: asked to trap"), "{body}");
    let (code, body) = post(
        &served,
        "/validate/widgets",
        &review("s", &widget("spin", 1, json!({}))),
    )
    .await
    .unwrap();
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("timed out") || body.contains("deadline"),
        "{body}"
    );
    // The next request is served by a fresh instance.
    let allowed = answer(&served, "/validate/widgets", &widget("w", 1, json!({}))).await;
    assert_eq!(allowed["allowed"], true);
    let text = served.metrics.encode();
    assert!(
        text.contains(
            "controller_runtime_webhook_requests_total{webhook=\"/validate/widgets\",code=\"500\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains(
        "rekon_admission_verdicts_total{plugin=\"widgets\",kind=\"validate\",verdict=\"failed\"} 2"
    ));
}

#[tokio::test]
async fn a_plugin_without_admission_or_unknown_answers_404() {
    let served = serve().await;
    let object = widget("w", 1, json!({}));
    for path in ["/validate/chaos", "/mutate/chaos", "/validate/nobody"] {
        let (code, body) = post(&served, path, &review("u", &object)).await.unwrap();
        assert_eq!(code, 404, "{path}: {body}");
    }
    let (code, _) = post(&served, "/validate/widgets", &json!({"kind": "Nonsense"}))
        .await
        .unwrap();
    assert_eq!(code, 400);
}

#[tokio::test]
async fn a_new_version_takes_its_admission_over_with_its_reconcile() {
    let served = serve().await;
    let before = served.registry.get("widgets").expect("widgets loaded");
    // The same code under another digest: a new version from the same file.
    let origin = before.path().expect("loaded from a file").to_path_buf();
    let mut bytes = std::fs::read(&origin).unwrap();
    wasm_encoder::ComponentSection::append_to_component(
        &wasm_encoder::CustomSection {
            name: "version".into(),
            data: [2u8][..].into(),
        },
        &mut bytes,
    );
    let registry = served.registry.clone();
    let after = tokio::task::spawn_blocking(move || {
        registry.apply_module(
            &origin,
            &bytes,
            &rekon::plugin::LoadOptions::default(),
            |_| Ok(()),
        )
    })
    .await
    .unwrap()
    .expect("the new version loads");
    let serving = served.registry.get("widgets").expect("widgets serves");
    assert!(serving.same_load(&after) && !serving.same_load(&before));
    assert_eq!(serving.admission_rules(), before.admission_rules());
    let denied = answer(&served, "/validate/widgets", &widget("w", 11, json!({}))).await;
    assert_eq!(denied["allowed"], false, "the new load answers");
}

#[test]
fn inspect_lists_the_webhooks_of_a_plugin_that_admits_only() {
    use rekon::commands::inspect::{OutputFormat, inspect_file};
    let widgets = inspect_file(&test_plugin("widgets.wasm"), OutputFormat::Yaml).unwrap();
    assert!(
        widgets.contains("admission:\n- name: size.widgets.rekon.dev\n  kind: validate"),
        "{widgets}"
    );
    assert!(
        widgets.contains("- name: tier.widgets.rekon.dev\n  kind: mutate"),
        "{widgets}"
    );
    let chaos = inspect_file(&chaos_v1(), OutputFormat::Yaml).unwrap();
    assert!(!chaos.contains("admission:"), "{chaos}");
}

fn old_widget(name: &str, amount: i64) -> Value {
    json!({
        "apiVersion": "widgets.rekon.dev/v1alpha1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"),
                     "labels": {"widgets.rekon.dev/tier": "gold"}},
        "spec": {"amount": amount}
    })
}

fn conversion_review(uid: &str, desired: &str, objects: &[Value]) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects}
    })
}

/// The `response` of a ConversionReview posted to `/convert/<plugin>`.
async fn converted(served: &Served, plugin: &str, desired: &str, objects: &[Value]) -> Value {
    let path = format!("/convert/{plugin}");
    let (code, body) = post(served, &path, &conversion_review("c-1", desired, objects))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(json["kind"], "ConversionReview");
    assert_eq!(json["response"]["uid"], "c-1", "uid echoed");
    json["response"].clone()
}

#[tokio::test]
async fn a_conversion_review_is_answered_with_every_object_converted() {
    let served = serve_widgets("widgets-conversion.wasm").await;
    let widgets = served.registry.get("widgets").expect("widgets loaded");
    assert_eq!(widgets.conversion_rules()[0].versions, ["v1alpha1", "v1"]);
    assert!(
        served
            .registry
            .get("chaos")
            .unwrap()
            .conversion_rules()
            .is_empty()
    );
    let objects = [old_widget("a", 1), old_widget("b", 2)];
    let response = converted(&served, "widgets", "widgets.rekon.dev/v1", &objects).await;
    assert_eq!(response["result"]["status"], "Success", "{response}");
    let out = response["convertedObjects"].as_array().unwrap();
    assert_eq!(out.len(), 2);
    for (object, size) in out.iter().zip([1, 2]) {
        assert_eq!(object["apiVersion"], "widgets.rekon.dev/v1");
        assert_eq!(object["spec"], json!({"size": size}));
    }
    assert_eq!(out[1]["metadata"], objects[1]["metadata"], "metadata kept");
    let back = converted(&served, "widgets", "widgets.rekon.dev/v1alpha1", out).await;
    assert_eq!(
        back["convertedObjects"],
        json!(objects),
        "the round trip loses nothing"
    );
    let text = served.metrics.encode();
    assert!(
        text.contains(
            "controller_runtime_webhook_requests_total{webhook=\"/convert/widgets\",code=\"200\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains(
        "rekon_admission_verdicts_total{plugin=\"widgets\",kind=\"convert\",verdict=\"converted\"} 2"
    ));
}

#[tokio::test]
async fn a_failed_conversion_is_a_failure_result_and_the_plugin_keeps_converting() {
    let served = serve_widgets("widgets-conversion.wasm").await;
    let v1 = "widgets.rekon.dev/v1";
    let failure = |response: &Value| {
        assert_eq!(response["result"]["status"], "Failure", "{response}");
        assert!(
            response["convertedObjects"]
                .as_array()
                .is_none_or(Vec::is_empty)
        );
        response["result"]["message"].as_str().unwrap().to_owned()
    };
    let trap = converted(&served, "widgets", v1, &[old_widget("convert-trap", 1)]).await;
    let message = failure(&trap);
    assert!(
        message.starts_with("conversion by plugin widgets failed: "),
        "{message}"
    );
    assert!(
        message.contains("widgets: asked to trap in convert"),
        "{message}"
    );
    let spin = converted(&served, "widgets", v1, &[old_widget("convert-spin", 1)]).await;
    let message = failure(&spin);
    assert!(
        message.contains("timed out") || message.contains("deadline"),
        "{message}"
    );
    let renamed = converted(&served, "widgets", v1, &[old_widget("convert-rename", 1)]).await;
    assert_eq!(
        failure(&renamed),
        "plugin widgets converted Widget default/convert-rename to an object the API server refuses: must have the same name: convert-rename != renamed"
    );
    let v2 = converted(
        &served,
        "widgets",
        "widgets.rekon.dev/v2",
        &[old_widget("w", 1)],
    )
    .await;
    assert_eq!(
        failure(&v2),
        "plugin widgets does not convert Widget from widgets.rekon.dev/v1alpha1 to widgets.rekon.dev/v2"
    );
    let chaos = converted(&served, "chaos", v1, &[old_widget("w", 1)]).await;
    assert!(failure(&chaos).ends_with("converts no CRD"), "{chaos}");
    let nobody = converted(&served, "nobody", v1, &[old_widget("w", 1)]).await;
    assert_eq!(failure(&nobody), "no plugin nobody is loaded");
    let (code, _) = post(&served, "/convert/widgets", &json!({"kind": "Nonsense"}))
        .await
        .unwrap();
    assert_eq!(code, 400);
    // The next review is converted by a fresh instance.
    let ok = converted(&served, "widgets", v1, &[old_widget("w", 3)]).await;
    assert_eq!(ok["result"]["status"], "Success", "{ok}");
    assert_eq!(ok["convertedObjects"][0]["spec"]["size"], 3);
    let text = served.metrics.encode();
    assert!(text.contains(
        "rekon_admission_verdicts_total{plugin=\"widgets\",kind=\"convert\",verdict=\"failed\"} 3"
    ), "{text}");
    assert!(text.contains(
        "rekon_admission_verdicts_total{plugin=\"widgets\",kind=\"convert\",verdict=\"refused\"} 1"
    ), "{text}");
}
