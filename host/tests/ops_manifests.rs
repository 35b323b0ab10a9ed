//! The checked-in deploy/ manifests match what `rekon rbac` and `rekon crds`
//! generate from the seed plugins, the kustomize base renders, and kube-sim
//! accepts the rendered manifests in a server-side dry run.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

/// dist/plugins, which `make plugins` fills with the seed plugins.
fn seed_plugins() -> PathBuf {
    let dir = repo().join("dist/plugins");
    let has_wasm = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        })
        .unwrap_or(false);
    assert!(
        has_wasm,
        "{} has no *.wasm: run `make plugins` (the CRDs and RBAC are generated from the seed plugins)",
        dir.display()
    );
    dir
}

fn rekon(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rekon"))
        .args(args)
        .output()
        .expect("run rekon");
    assert!(
        out.status.success(),
        "rekon {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

const REGENERATE: &str = "regenerate with `make plugins && rekon rbac dist/plugins > deploy/base/rbac.yaml && rekon crds dist/plugins --out-dir deploy/base/crds`";

#[test]
fn checked_in_rbac_matches_rekon_rbac() {
    let plugins = seed_plugins();
    let generated = rekon(&["rbac", plugins.to_str().expect("utf-8 path")]);
    let checked_in = std::fs::read_to_string(repo().join("deploy/base/rbac.yaml"))
        .expect("deploy/base/rbac.yaml");
    assert!(
        generated == checked_in,
        "deploy/base/rbac.yaml differs from `rekon rbac dist/plugins`; {REGENERATE}\n--- generated ---\n{generated}"
    );
}

#[test]
fn checked_in_crds_match_rekon_crds() {
    let plugins = seed_plugins();
    let out = tempfile::tempdir().expect("tempdir");
    rekon(&[
        "crds",
        plugins.to_str().expect("utf-8 path"),
        "--out-dir",
        out.path().to_str().expect("utf-8 path"),
    ]);
    let listing = |dir: &Path| {
        let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
            .expect("read dir")
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read_to_string(e.path()).expect("read file"),
                )
            })
            .collect();
        files.sort();
        files
    };
    let generated = listing(out.path());
    let checked_in = listing(&repo().join("deploy/base/crds"));
    assert!(generated.len() > 1, "the seed plugins declare CRDs");
    let names = |v: &[(String, String)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&checked_in),
        names(&generated),
        "deploy/base/crds/ files; {REGENERATE}"
    );
    for ((name, want), (_, have)) in generated.iter().zip(&checked_in) {
        assert!(
            want == have,
            "deploy/base/crds/{name} differs; {REGENERATE}"
        );
    }
    // The stdout form holds the same documents.
    let printed = rekon(&["crds", plugins.to_str().expect("utf-8 path")]);
    for (name, doc) in &generated {
        if name != "kustomization.yaml" {
            assert!(
                printed.contains(doc.as_str()),
                "`rekon crds` does not print {name}"
            );
        }
    }
}

#[test]
fn rekon_crds_prints_the_plugin_crd_without_a_plugin_directory() {
    let printed = rekon(&["crds"]);
    let crd: serde_json::Value = serde_yaml::from_str(
        printed
            .split("---\n")
            .find(|d| d.contains("plugins.rekon.dev"))
            .expect("the Plugin CRD is printed"),
    )
    .expect("YAML");
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["metadata"]["name"], "plugins.rekon.dev");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(printed.matches("kind: CustomResourceDefinition").count(), 1);
}

/// A plugin that converts its CRD (the widgets' conversion build, `make
/// test-plugins`): `rekon crds --webhook-service` writes the CRD with its
/// conversion stanza; without the flag, as declared.
#[test]
fn rekon_crds_writes_the_conversion_stanza_of_a_crd_a_plugin_converts() {
    let wasm = repo().join("dist/test-plugins/widgets-conversion.wasm");
    assert!(
        wasm.is_file(),
        "{} is missing: run `make test-plugins`",
        wasm.display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&wasm, dir.path().join("widgets.wasm")).unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "PEM").unwrap();
    let (dir_text, ca_text) = (dir.path().display().to_string(), ca.display().to_string());
    let widget_crd = |printed: &str| -> serde_json::Value {
        serde_yaml::from_str(
            printed
                .split("---\n")
                .find(|d| d.contains("name: widgets.widgets.rekon.dev"))
                .expect("the Widget CRD is printed"),
        )
        .expect("YAML")
    };
    let plain = widget_crd(&rekon(&["crds", &dir_text]));
    assert!(plain["spec"].get("conversion").is_none(), "{plain}");
    let printed = rekon(&[
        "crds",
        &dir_text,
        "--webhook-service",
        "rekon-system/rekon-webhooks:8443",
        "--webhook-ca-file",
        &ca_text,
    ]);
    let crd = widget_crd(&printed);
    let conversion = &crd["spec"]["conversion"];
    assert_eq!(conversion["strategy"], "Webhook", "{crd}");
    assert_eq!(
        conversion["webhook"]["conversionReviewVersions"],
        serde_json::json!(["v1"])
    );
    let client = &conversion["webhook"]["clientConfig"];
    assert_eq!(
        client["service"],
        serde_json::json!({"namespace": "rekon-system", "name": "rekon-webhooks", "path": "/convert/widgets", "port": 8443})
    );
    assert_eq!(client["caBundle"], "UEVN");
    // The rest of the CRD is the plugin's.
    let mut without = crd.clone();
    without["spec"]
        .as_object_mut()
        .unwrap()
        .remove("conversion");
    assert_eq!(without, plain);
}

#[test]
fn sample_plugin_objects_grant_what_the_seeds_declare() {
    let plugins = seed_plugins();
    let text = std::fs::read_to_string(repo().join("deploy/samples/plugins.yaml"))
        .expect("deploy/samples/plugins.yaml");
    let samples: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML document"))
        .collect();
    assert_eq!(samples.len(), 2, "one Plugin per seed");
    for (crate_name, plugin) in [("nodepool", "nodepool"), ("test_fanout", "test-fanout")] {
        let module = format!("registry.example.com/rekon/{plugin}:0.1.0");
        let printed = rekon(&[
            "plugin",
            "manifest",
            plugins
                .join(format!("{crate_name}.wasm"))
                .to_str()
                .expect("utf-8 path"),
            "--module",
            &module,
        ]);
        let generated: serde_json::Value = serde_yaml::from_str(&printed).expect("YAML");
        let sample = samples
            .iter()
            .find(|s| s["metadata"]["name"] == plugin)
            .unwrap_or_else(|| panic!("no sample Plugin {plugin}"));
        assert_eq!(
            sample, &generated,
            "deploy/samples/plugins.yaml drifted from `rekon plugin manifest` for {plugin}; regenerate it (see its header)"
        );
    }
}

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn render() -> String {
    render_dir("deploy")
}

fn render_dir(dir: &str) -> String {
    let out = Command::new("kubectl")
        .args(["kustomize", repo().join(dir).to_str().expect("utf-8 path")])
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}/ failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn yaml_docs(rendered: &str) -> Vec<serde_yaml::Value> {
    rendered
        .split("\n---\n")
        .map(|d| serde_yaml::from_str(d).expect("rendered YAML parses"))
        .collect()
}

fn string_list(v: &serde_yaml::Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The sharded variant: the base's objects, three replicas with --shards
/// instead of --leader-elect (arguments `rekon` accepts), and the Lease
/// rights sharding adds (list the group's membership Leases, delete its
/// own), in the host's namespace.
#[test]
fn kustomize_sharded_variant_runs_replicas_with_shards_and_lease_rights() {
    assert!(
        kubectl_available(),
        "kubectl is needed to render deploy/sharded"
    );
    let base = yaml_docs(&render_dir("deploy/base"));
    let docs = yaml_docs(&render_dir("deploy/sharded"));
    assert_eq!(
        docs.len(),
        base.len() + 2,
        "the base plus a Role and a RoleBinding"
    );
    let deploy = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("deployment");
    assert_eq!(deploy["spec"]["replicas"], 3);
    let args = string_list(&deploy["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(args.iter().any(|a| a.starts_with("--shards=")), "{args:?}");
    assert!(!args.iter().any(|a| a == "--leader-elect"), "{args:?}");
    // The base has no plugin files: its replicas serve Plugin objects.
    assert!(args.iter().any(|a| a == "--plugin-objects"), "{args:?}");
    assert_rekon_accepts("the sharded Deployment's", &args);
    let role = docs
        .iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "rekon-sharding")
        .expect("sharding Role");
    assert_eq!(role["metadata"]["namespace"], "rekon-system");
    let rule = &role["rules"][0];
    assert_eq!(string_list(&rule["resources"]), ["leases"]);
    assert_eq!(string_list(&rule["verbs"]), ["list", "delete"]);
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "RoleBinding" && d["metadata"]["name"] == "rekon-sharding")
        .expect("sharding RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], "rekon-system");
    assert_eq!(binding["subjects"][0]["name"], "rekon");
    assert_eq!(binding["subjects"][0]["namespace"], "rekon-system");
}

#[test]
fn kustomize_base_renders_a_hardened_deployment() {
    assert!(
        kubectl_available(),
        "kubectl is needed to render deploy/ (it is installed on the dev machines and CI)"
    );
    let rendered = render();
    let docs: Vec<serde_yaml::Value> = rendered
        .split("\n---\n")
        .map(|d| serde_yaml::from_str(d).expect("rendered YAML parses"))
        .collect();
    let kind = |k: &'static str| docs.iter().filter(move |d| d["kind"] == k);
    assert_eq!(
        kind("Namespace").next().expect("namespace")["metadata"]["name"],
        "rekon-system"
    );
    for k in [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
    ] {
        let d = kind(k).next().unwrap_or_else(|| panic!("{k} rendered"));
        assert_eq!(d["metadata"]["namespace"], "rekon-system", "{k} namespace");
    }
    kind("ClusterRole").next().expect("ClusterRole");
    kind("ClusterRoleBinding")
        .next()
        .expect("ClusterRoleBinding");

    let deploy = kind("Deployment").next().expect("deployment");
    assert_eq!(deploy["spec"]["replicas"], 2);
    let pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let host = &pod["containers"][0];
    assert_eq!(host["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(host["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(host["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(host["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(host["resources"]["requests"]["memory"].is_string());
    let args: Vec<&str> = host["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(args.contains(&"--leader-elect"), "{args:?}");
    // Plugins from Plugin objects only: no plugin directory to invent.
    assert!(args.contains(&"--plugin-objects"), "{args:?}");
    assert!(!args.iter().any(|a| a.starts_with("--plugins")), "{args:?}");
    // The writable compiled-component cache, and no plugin directory.
    let mounts: Vec<&str> = host["volumeMounts"]
        .as_sequence()
        .expect("mounts")
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    assert!(
        mounts.contains(&"/var/cache/rekon") && !mounts.contains(&"/var/lib/rekon/plugins"),
        "{mounts:?}"
    );
    let env: Vec<&str> = host["env"]
        .as_sequence()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        env.contains(&"POD_NAME") && env.contains(&"POD_NAMESPACE"),
        "{env:?}"
    );

    assert_rekon_accepts("the Deployment's", &args);
}

/// The webhook server is on in the base: `--webhook-addr` on the
/// container port `webhooks`, `--webhook-cert-dir` the mount of the Secret
/// `rekon-webhook-cert` (read-only, required: one certificate for every
/// replica), `--webhook-service` the Service `rekon-webhooks` of this
/// namespace on 443, which targets that port and selects the host's Pods.
/// The sharded variant serves them the same way.
#[test]
fn kustomize_base_serves_webhooks_through_the_rekon_webhooks_service() {
    assert!(
        kubectl_available(),
        "kubectl is needed to render deploy/ (it is installed on the dev machines and CI)"
    );
    for dir in ["deploy", "deploy/sharded"] {
        let docs = yaml_docs(&render_dir(dir));
        let deploy = docs
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("a Deployment");
        let pod = &deploy["spec"]["template"]["spec"];
        let host = &pod["containers"][0];
        let args = string_list(&host["args"]);
        let arg = |flag: &str| {
            args.iter()
                .find_map(|a| a.strip_prefix(&format!("{flag}=")).map(str::to_owned))
                .unwrap_or_else(|| panic!("{dir}: no {flag} in {args:?}"))
        };
        let port: u16 = arg("--webhook-addr")
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .expect("--webhook-addr HOST:PORT");
        let ports = host["ports"].as_sequence().expect("ports");
        let named = ports
            .iter()
            .find(|p| p["containerPort"].as_u64() == Some(u64::from(port)))
            .unwrap_or_else(|| panic!("{dir}: no container port {port}: {ports:?}"));
        let port_name = named["name"].as_str().expect("a named port");

        let cert_dir = arg("--webhook-cert-dir");
        let mount = host["volumeMounts"]
            .as_sequence()
            .expect("mounts")
            .iter()
            .find(|m| m["mountPath"].as_str() == Some(cert_dir.as_str()))
            .unwrap_or_else(|| panic!("{dir}: nothing mounted at {cert_dir}"));
        assert_eq!(mount["readOnly"], true, "{mount:?}");
        let volume = pod["volumes"]
            .as_sequence()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == mount["name"])
            .expect("the mount's volume");
        assert_eq!(
            volume["secret"]["secretName"], "rekon-webhook-cert",
            "{volume:?}"
        );
        assert!(
            volume["secret"]["optional"].as_bool() != Some(true),
            "a required Secret: {volume:?}"
        );

        assert_eq!(
            arg("--webhook-service"),
            "$(POD_NAMESPACE)/rekon-webhooks:443"
        );
        let service = docs
            .iter()
            .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "rekon-webhooks")
            .unwrap_or_else(|| panic!("{dir}: the Service rekon-webhooks"));
        assert_eq!(service["metadata"]["namespace"], "rekon-system");
        assert_eq!(
            service["spec"]["selector"],
            deploy["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
                .as_str()
                .map(|name| {
                    let mut m = serde_yaml::Mapping::new();
                    m.insert("app.kubernetes.io/name".into(), name.into());
                    serde_yaml::Value::Mapping(m)
                })
                .expect("the Pods' name label"),
            "the Service selects the host's Pods"
        );
        let service_port = &service["spec"]["ports"][0];
        assert_eq!(service_port["port"], 443, "{service_port:?}");
        assert_eq!(service_port["targetPort"], port_name, "{service_port:?}");
        assert_rekon_accepts(&format!("{dir}'s Deployment"), &args);
    }
}

/// `rekon` accepts exactly these arguments (clap rejects an unknown flag
/// before it gets to the trailing --help).
fn assert_rekon_accepts<S: AsRef<std::ffi::OsStr>>(whose: &str, args: &[S]) {
    let out = Command::new(env!("CARGO_BIN_EXE_rekon"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run rekon");
    assert!(
        out.status.success(),
        "{whose} args are not accepted by `rekon`: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The server-side dry run runs against a kube-sim with TLS, authentication
/// and RBAC on, as a token user `deployer`: refused (403) until a
/// ClusterRoleBinding grants it `cluster-admin`, as it would be on a real
/// cluster (the manifests create cluster-scoped RBAC and CRDs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_sim_accepts_the_rendered_base_in_a_server_side_dry_run() -> anyhow::Result<()> {
    assert!(kubectl_available(), "kubectl is needed for the dry run");
    let rendered = render();
    let sim =
        kube_sim::SimCluster::start_with(kube_sim::SimConfig::new("main").tls(true).auth(true))
            .await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    let deployer = sim.add_token_user("deployer", &[]);
    std::fs::write(
        &kubeconfig,
        sim.kubeconfig_for(kube_sim::Credentials::Token(deployer)),
    )?;
    let manifest = dir.path().join("rendered.yaml");
    std::fs::write(&manifest, &rendered)?;
    // As with a real API server, a dry run cannot create the namespace that
    // the namespaced objects then go into: the administrator creates it for
    // real first.
    let admin = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&sim.kubeconfig_yaml())?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?,
    )?;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "rekon-system"}}))?;
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .create(&kube::api::PostParams::default(), &ns)
        .await?;
    let dry_run = || {
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .args(["apply", "--dry-run=server", "-f"])
            .arg(&manifest)
            .output()
    };
    let refused = dry_run().await?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("is forbidden: User \"deployer\" cannot get resource"),
        "an unprivileged user's dry run must be refused: {stderr}"
    );
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(
        serde_json::json!({
            "metadata": {"name": "deployer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "deployer"}],
        }),
    )?;
    kube::Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin)
        .create(&kube::api::PostParams::default(), &binding)
        .await?;
    let before = sim.current_rv();
    let out = dry_run().await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "dry run refused: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("deployment.apps/rekon created (server dry run)"),
        "{stdout}"
    );
    assert_eq!(sim.current_rv(), before, "a dry run persisted something");

    // The samples, once the base (with its CRDs) is applied for real.
    let kubectl = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .args(args);
        cmd
    };
    let applied = kubectl(&["apply", "-f", manifest.to_str().expect("utf-8 path")])
        .output()
        .await?;
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let samples = repo().join("deploy/samples");
    let out = kubectl(&[
        "apply",
        "--dry-run=server",
        "-k",
        samples.to_str().expect("utf-8 path"),
    ])
    .output()
    .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "samples refused: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    for created in [
        "test.job.lailin.xyz/hello created (server dry run)",
        "node/node-c created (server dry run)",
        "nodepool.nodes.lailin.xyz/gpu created (server dry run)",
        "nodepool.nodes.lailin.xyz/batch created (server dry run)",
    ] {
        assert!(stdout.contains(created), "{created:?} missing in {stdout}");
    }
    sim.shutdown().await;
    Ok(())
}
