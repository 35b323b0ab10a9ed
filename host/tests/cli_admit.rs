//! `rekon plugin admit` (issue 38 step 5), run as the binary with the
//! widgets test plugin (`make test-plugins`): a review answered as the
//! webhook server answers it — allowed, denied with code and field causes,
//! defaulted with the JSON Patch printed, read from stdin as a bare
//! AdmissionRequest, quota read from `--objects`; no rule matching, a trap
//! and bad JSON each a clear error with its own exit code; a
//! ConversionReview through `convert`; the settings given at load.

mod plugin_support;

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use plugin_support::test_plugin;
use serde_json::{Value, json};

const ALLOWED: i32 = 0;
const DENIED: i32 = 1;
const INPUT: i32 = 2;
const FAILED: i32 = 3;

fn widget(name: &str, size: i64) -> Value {
    json!({"apiVersion": "widgets.rekon.dev/v1", "kind": "Widget",
           "metadata": {"name": name, "namespace": "default", "labels": {"app": "shop"}},
           "spec": {"size": size}})
}

fn request(object: &Value, operation: &str, plural: &str) -> Value {
    json!({
        "uid": "u-1",
        "kind": {"group": "widgets.rekon.dev", "version": "v1", "kind": "Widget"},
        "resource": {"group": "widgets.rekon.dev", "version": "v1", "resource": plural},
        "name": object["metadata"]["name"], "namespace": "default",
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["dev"]},
        "object": object, "dryRun": false
    })
}

fn review(object: &Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "request": request(object, "CREATE", "widgets")})
}

/// `rekon plugin admit PLUGIN --request FILE ARGS` with `body` in FILE.
fn admit(plugin: &str, body: &str, args: &[&str]) -> (Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("review.json");
    std::fs::write(&file, body).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rekon"))
        .args(["plugin", "admit"])
        .arg(test_plugin(plugin))
        .arg("--request")
        .arg(&file)
        .args(args)
        .current_dir(dir.path())
        .output()
        .expect("run rekon");
    (out, dir)
}

/// The AdmissionReview documents printed, in order.
fn printed(out: &Output) -> Vec<Value> {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is JSON documents ({e}): {text}"))
}

fn code_and_err(out: &Output) -> (Option<i32>, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_create_is_defaulted_then_allowed_with_the_patch_printed() {
    let object = widget("w", 7);
    let (out, _dir) = admit("widgets.wasm", &review(&object).to_string(), &[]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(ALLOWED), "{err}");
    let answers = printed(&out);
    assert_eq!(
        answers.len(),
        2,
        "the mutating webhook, then the validating"
    );
    for a in &answers {
        assert_eq!(a["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(a["kind"], "AdmissionReview");
        assert_eq!(a["response"]["uid"], "u-1");
        assert_eq!(a["response"]["allowed"], true);
    }
    let mutated = &answers[0]["response"];
    assert_eq!(mutated["patchType"], "JSONPatch");
    assert_eq!(
        mutated["warnings"],
        json!(["a widget above size 5 is large"])
    );
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(mutated["patch"].as_str().expect("a base64 patch"))
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "shop", "widgets.rekon.dev/tier": "standard"})
    );
    assert!(answers[1]["response"].get("patch").is_none());
    // Without `--objects` the quota's read fails as in a host with no cache.
    let warning = answers[1]["response"]["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("the widget quota was not checked"),
        "{warning}"
    );
    assert!(
        err.contains("tier.widgets.rekon.dev: allowed, patched: [{\"op\":\"add\""),
        "the decoded patch on stderr: {err}"
    );
    assert!(err.contains("size.widgets.rekon.dev: allowed"), "{err}");
}

#[test]
fn a_large_widget_is_denied_with_code_and_field_cause() {
    let (out, _dir) = admit(
        "widgets.wasm",
        &review(&widget("w", 11)).to_string(),
        &["--rule", "size"],
    );
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(DENIED), "{err}");
    let answers = printed(&out);
    assert_eq!(
        answers.len(),
        1,
        "--rule size: the validating webhook alone"
    );
    let response = &answers[0]["response"];
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    assert_eq!(
        response["status"]["message"],
        "a widget's size is at most 10, not 11"
    );
    assert_eq!(
        response["status"]["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "message": "must be at most 10", "field": "spec.size"}])
    );
    assert!(
        err.contains("size.widgets.rekon.dev: denied (422): a widget's size is at most 10"),
        "{err}"
    );
}

#[test]
fn a_bare_request_on_stdin_reads_the_objects_given_as_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("widgets.yaml");
    let docs: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| serde_yaml::to_string(&widget(n, 1)).unwrap())
        .collect();
    std::fs::write(&objects, docs.join("---\n")).unwrap();
    let run = |extra: &[&std::ffi::OsStr]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rekon"))
            .args(["plugin", "admit"])
            .arg(test_plugin("widgets.wasm"))
            .args(["--request", "-", "--rule", "size"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let body = request(&widget("d", 1), "CREATE", "widgets").to_string();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run(&["--objects".as_ref(), objects.as_os_str()]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(DENIED), "{err}");
    assert_eq!(
        printed(&out)[0]["response"]["status"]["message"],
        "namespace default already holds 3 widgets, the most it may hold"
    );
    // Without them the read fails, and the quota admits with a warning.
    let out = run(&[]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(ALLOWED), "{err}");
    let response = &printed(&out)[0]["response"];
    assert!(
        response["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("the widget quota was not checked")),
        "{response}"
    );
}

#[test]
fn no_matching_rule_names_the_request_and_the_rules() {
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": request(&widget("w", 1), "CREATE", "gadgets")});
    let (out, _dir) = admit("widgets.wasm", &body.to_string(), &[]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains(
            "no admission rule of plugin widgets matches CREATE of gadgets.widgets.rekon.dev"
        ),
        "{err}"
    );
    assert!(
        err.contains("size (validating CREATE, UPDATE of widgets.widgets.rekon.dev)"),
        "{err}"
    );
    // A rule that does not match the operation is not called.
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": request(&widget("w", 1), "UPDATE", "widgets")});
    let (out, _dir) = admit("widgets.wasm", &body.to_string(), &["--rule", "tier"]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    let (out, _dir) = admit(
        "widgets.wasm",
        &review(&widget("w", 1)).to_string(),
        &["--rule", "nope"],
    );
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    assert!(err.contains("plugin widgets has no rule \"nope\""), "{err}");
    // A plugin without admission.
    let (out, _dir) = admit("chaos-v1.wasm", &review(&widget("w", 1)).to_string(), &[]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    assert!(err.contains("declares no admission rule"), "{err}");
}

#[test]
fn a_trap_is_a_failed_call_naming_the_failure_policy() {
    let (out, _dir) = admit(
        "widgets.wasm",
        &review(&widget("trap", 1)).to_string(),
        &["--rule", "size"],
    );
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(FAILED), "{err}");
    assert!(out.stdout.is_empty());
    assert!(err.contains("admission by plugin widgets failed"), "{err}");
    assert!(err.contains("widgets: asked to trap"), "{err}");
    assert!(
        err.contains("failure policy of size.widgets.rekon.dev: Fail"),
        "{err}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let (out, _dir) = admit("widgets.wasm", "{\"apiVersion\": ", &[]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    assert!(
        err.contains("review.json is not JSON: EOF while parsing"),
        "{err}"
    );
    let (out, _dir) = admit("widgets.wasm", "{\"kind\": \"Pod\"}", &[]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    assert!(err.contains("is neither an AdmissionReview"), "{err}");
    let (out, _dir) = admit(
        "widgets.wasm",
        "{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\"}",
        &[],
    );
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    assert!(err.contains("the AdmissionReview has no request"), "{err}");
    // Settings a plugin without a settings type refuses, in its words.
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("s.json");
    std::fs::write(&settings, "{\"maxSize\": 3}").unwrap();
    let (out, _dir) = admit(
        "widgets.wasm",
        &review(&widget("w", 1)).to_string(),
        &["--settings", settings.to_str().unwrap()],
    );
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    assert!(err.contains("refused its settings"), "{err}");
}

#[test]
fn a_conversion_review_goes_to_convert() {
    let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": "widgets.rekon.dev/v1",
            "objects": [{"apiVersion": "widgets.rekon.dev/v1alpha1", "kind": "Widget",
                         "metadata": {"name": "w", "namespace": "default"}, "spec": {"amount": 3}}]}});
    let (out, _dir) = admit("widgets-conversion.wasm", &body.to_string(), &[]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(ALLOWED), "{err}");
    let answer = &printed(&out)[0];
    assert_eq!(answer["kind"], "ConversionReview");
    assert_eq!(answer["response"]["uid"], "c-1");
    assert_eq!(answer["response"]["result"]["status"], "Success");
    assert_eq!(
        answer["response"]["convertedObjects"][0]["spec"],
        json!({"size": 3})
    );
    // A plugin that converts nothing.
    let (out, _dir) = admit("widgets.wasm", &body.to_string(), &[]);
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    assert!(err.contains("converts no CRD"), "{err}");
}

#[test]
fn the_settings_are_the_plugins_at_load() {
    // The zoo declares its webhook from its settings: with bug
    // own-write-denied a child ConfigMap above 5 replicas is denied; with
    // another bug it admits nothing.
    let zoo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/zoo");
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "w-child", "namespace": "default",
                     "labels": {"zoo.rekon.dev/owner-name": "w"}},
        "data": {"replicas": "8"}});
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-2", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "w-child", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "alice"}, "object": child, "dryRun": false}});
    let settings = zoo.join("own-write-denied/buggy.json");
    let (out, _dir) = admit(
        "zoo.wasm",
        &body.to_string(),
        &["--settings", settings.to_str().unwrap(), "-o", "yaml"],
    );
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(DENIED), "{err}");
    let answer: Value = serde_yaml::from_slice(&out.stdout).expect("YAML");
    assert_eq!(
        answer["response"]["status"]["message"],
        "a child carries at most 5 replicas, not 8"
    );
    let other = zoo.join("refused-write/buggy.json");
    let (out, _dir) = admit(
        "zoo.wasm",
        &body.to_string(),
        &["--settings", other.to_str().unwrap()],
    );
    let (code, err) = code_and_err(&out);
    assert_eq!(code, Some(INPUT), "{err}");
    assert!(
        err.contains("plugin zoo declares no admission rule"),
        "{err}"
    );
}
