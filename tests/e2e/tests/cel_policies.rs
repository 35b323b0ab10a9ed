//! CEL where CEL suffices, end to end (issue 38 step 3): the gadgets test
//! plugin (`tests/plugins/gadgets`, `make test-plugins`) carries a CRD rule
//! from its Rust type (`#[x_kube(validation = ...)]` on `spec.size`) and
//! declares a policy (`spec.color` one of red, green, blue). `rekon crds`
//! and `rekon policies` of its directory are `kubectl apply`-ed to kube-sim
//! and kubectl is the client: no rekon host runs and no webhook is called,
//! the API server evaluates both. A Gadget breaking either is refused in
//! the API server's words, a good one is stored. A component whose CEL
//! does not compile is refused by `rekon policies` (the load) with the
//! expression and kube-cel's error.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rekon_e2e::{Paths, get, output_text, rekon_cli};

fn gadgets(paths: &Paths) -> PathBuf {
    let path = paths.test_plugins.join("gadgets.wasm");
    assert!(
        path.is_file(),
        "{} is missing: run `make test-plugins` first",
        path.display()
    );
    path
}

/// `kubectl apply -f -` of `yaml`: (succeeded, stdout then stderr).
fn kubectl_apply(kubeconfig: &Path, cache: &Path, yaml: &str) -> (bool, String) {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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

fn gadget(name: &str, size: i64, color: &str) -> String {
    format!(
        "apiVersion: gadgets.rekon.dev/v1\nkind: Gadget\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  size: {size}\n  color: {color}\n"
    )
}

/// `rekon ARGS` must succeed: its stdout.
fn rekon_ok(paths: &Paths, args: &[&str]) -> String {
    let out = rekon_cli(paths, args);
    assert!(
        out.status.success(),
        "rekon {}: {}",
        args.join(" "),
        output_text(&out)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_is_refused_by_a_crd_rule_and_a_policy_in_the_api_servers_words() {
    let paths = Paths::discover().unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(gadgets(&paths), dir.join("gadgets.wasm")).unwrap();
    let sim = kube_sim::SimCluster::start("main").await.unwrap();
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig_yaml()).unwrap();
    let cache = work.path().join("kubectl-cache");
    let dir_arg = dir.display().to_string();

    // The CRD with its rule, as `rekon crds` prints it, then the policy and
    // its binding, as `rekon policies` prints them.
    let crds = rekon_ok(&paths, &["crds", &dir_arg]);
    assert!(crds.contains("rule: self <= 10"), "{crds}");
    let (ok, text) = kubectl_apply(&kubeconfig, &cache, &crds);
    assert!(ok, "{text}");
    let policies = rekon_ok(&paths, &["policies", &dir_arg]);
    // `rekon webhooks` (the API side of the plugins in one stream) ends
    // with the same objects: gadgets has no webhook and converts nothing.
    let webhooks = rekon_ok(
        &paths,
        &["webhooks", &dir_arg, "--url", "https://localhost:1"],
    );
    assert_eq!(webhooks, policies);
    let (ok, text) = kubectl_apply(&kubeconfig, &cache, &policies);
    assert!(ok, "{text}");
    assert!(
        text.contains(
            "validatingadmissionpolicy.admissionregistration.k8s.io/color.gadgets.rekon.dev created"
        ),
        "{text}"
    );
    assert!(
        text.contains("validatingadmissionpolicybinding.admissionregistration.k8s.io/color.gadgets.rekon.dev created"),
        "{text}"
    );

    // The CRD rule from the Rust type: the server's field error.
    let (ok, text) = kubectl_apply(&kubeconfig, &cache, &gadget("huge", 11, "red"));
    assert!(!ok, "a gadget breaking the CRD rule was stored: {text}");
    assert!(
        text.contains(
            "The Gadget \"huge\" is invalid: spec.size: Invalid value: \"integer\": must be at most 10"
        ),
        "{text}"
    );
    assert!(
        get(
            &sim,
            "gadgets.rekon.dev/v1",
            "gadgets",
            Some("default"),
            "huge"
        )
        .is_none()
    );

    // The policy: the server's policy denial, its message expression.
    let (ok, text) = kubectl_apply(&kubeconfig, &cache, &gadget("pink", 1, "pink"));
    assert!(!ok, "a gadget breaking the policy was stored: {text}");
    assert!(
        text.contains(
            "ValidatingAdmissionPolicy 'color.gadgets.rekon.dev' with binding 'color.gadgets.rekon.dev' denied request: color pink is not one of red, green, blue"
        ),
        "{text}"
    );
    assert!(
        get(
            &sim,
            "gadgets.rekon.dev/v1",
            "gadgets",
            Some("default"),
            "pink"
        )
        .is_none()
    );

    // A good one is stored; an update breaking the policy is refused too.
    let (ok, text) = kubectl_apply(&kubeconfig, &cache, &gadget("good", 10, "green"));
    assert!(ok, "{text}");
    assert!(
        get(
            &sim,
            "gadgets.rekon.dev/v1",
            "gadgets",
            Some("default"),
            "good"
        )
        .is_some()
    );
    let (ok, text) = kubectl_apply(&kubeconfig, &cache, &gadget("good", 10, "grey"));
    assert!(!ok, "an update breaking the policy was stored: {text}");
    assert!(
        text.contains("denied request: color grey is not one of red, green, blue"),
        "{text}"
    );
}

/// `rekon policies` (a load) and `rekon plugin inspect` of a build whose
/// CEL does not compile: refused, naming where, what and kube-cel's error.
fn refused(paths: &Paths, file: &str, expected: &str) {
    let component = paths.test_plugins.join(file);
    assert!(
        component.is_file(),
        "{} is missing: run `make test-plugins` first",
        component.display()
    );
    let work = tempfile::tempdir().unwrap();
    std::fs::copy(&component, work.path().join(file)).unwrap();
    for args in [
        vec!["policies".to_owned(), work.path().display().to_string()],
        vec![
            "plugin".to_owned(),
            "inspect".to_owned(),
            component.display().to_string(),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = rekon_cli(paths, &args);
        let text = output_text(&out);
        assert!(
            !out.status.success(),
            "rekon {args:?} accepted {file}: {text}"
        );
        assert!(text.contains(expected), "rekon {args:?}: {text}");
        assert!(text.contains("Syntax error"), "kube-cel's error: {text}");
    }
}

#[test]
fn a_crd_rule_that_does_not_compile_refuses_the_load() {
    refused(
        &Paths::discover().unwrap(),
        "gadgets-broken-rule.wasm",
        "CRD gadgets.gadgets.rekon.dev: spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].x-kubernetes-validations[0].rule: rule \"self <=\" does not compile: ERROR: <input>:1:8",
    );
}

#[test]
fn a_policy_expression_that_does_not_compile_refuses_the_load() {
    refused(
        &Paths::discover().unwrap(),
        "gadgets-broken-policy.wasm",
        "policy \"color\": validations[0].expression: expression \"object.spec.color in [\" does not compile: ERROR: <input>:1:23",
    );
}

#[test]
fn components_built_before_policies_load_unchanged_and_declare_none() {
    let paths = Paths::discover().unwrap();
    // Built without `policies` (before it, or by an SDK that does not
    // export it) or exporting an empty list (the Rust SDK's
    // `export_plugin!` without `policies`): each loads, and `rekon
    // policies` prints nothing for them.
    let work = tempfile::tempdir().unwrap();
    for file in ["widgets.wasm", "cm-sync.wasm"] {
        let component = paths.test_plugins.join(file);
        assert!(
            component.is_file(),
            "{} is missing: run `make test-plugins` first",
            component.display()
        );
        std::fs::copy(&component, work.path().join(file)).unwrap();
    }
    let out = rekon_ok(&paths, &["policies", &work.path().display().to_string()]);
    assert_eq!(out, "", "no policy declared");
}

/// The TypeScript widgets built with a policy (`exportPolicies`,
/// `dist/sdk-plugins/widgets_ts_policies.wasm`, `make sdk-plugins`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_is_refused_by_the_typescript_plugins_policy() {
    kubectl_is_refused_by_the_widgets_policy("widgets_ts_policies.wasm").await;
}

/// The Python widgets built with a policy (`export_policies`,
/// `dist/sdk-plugins/widgets_py_policies.wasm`, `make sdk-plugins`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_is_refused_by_the_python_plugins_policy() {
    kubectl_is_refused_by_the_widgets_policy("widgets_py_policies.wasm").await;
}

/// The widgets of another language built with the policy "a Widget's name
/// is not `forbidden`": as `rekon policies` writes it, it refuses a Widget
/// named `forbidden` through kubectl in the API server's words.
async fn kubectl_is_refused_by_the_widgets_policy(file: &str) {
    let paths = Paths::discover().unwrap();
    let component = paths.root.join("dist/sdk-plugins").join(file);
    assert!(
        component.is_file(),
        "{} is missing: run `make sdk-plugins` first",
        component.display()
    );
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&component, dir.join(file)).unwrap();
    let sim = kube_sim::SimCluster::start("main").await.unwrap();
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig_yaml()).unwrap();
    let cache = work.path().join("kubectl-cache");
    let dir_arg = dir.display().to_string();
    for yaml in [
        rekon_ok(&paths, &["crds", &dir_arg]),
        rekon_ok(&paths, &["policies", &dir_arg]),
    ] {
        let (ok, text) = kubectl_apply(&kubeconfig, &cache, &yaml);
        assert!(ok, "{text}");
    }
    let widget = |name: &str| {
        format!(
            "apiVersion: widgets.rekon.dev/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  size: 1\n"
        )
    };
    let (ok, text) = kubectl_apply(&kubeconfig, &cache, &widget("forbidden"));
    assert!(!ok, "a widget breaking the policy was stored: {text}");
    assert!(
        text.contains(
            "ValidatingAdmissionPolicy 'name.widgets.rekon.dev' with binding 'name.widgets.rekon.dev' denied request: the name forbidden is not allowed"
        ),
        "{text}"
    );
    let (ok, text) = kubectl_apply(&kubeconfig, &cache, &widget("fine"));
    assert!(ok, "{text}");
    assert!(
        get(
            &sim,
            "widgets.rekon.dev/v1",
            "widgets",
            Some("default"),
            "fine"
        )
        .is_some()
    );
}
