//! The installed `kubectl` against kube-sim: get, get -w, apply (client and
//! server side, with a conflict), patch of every type, delete --wait on an
//! object with a finalizer, wait --for condition=established, and GC.
//!
//! Every run gets a fresh `--cache-dir`, `--request-timeout` and a hard
//! process timeout.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::within;
use kube_sim::Sim;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn command(sim: &Sim, cache: &tempfile::TempDir, args: &[&str]) -> Command {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(sim.kubeconfig_path())
        .arg("--cache-dir")
        .arg(cache.path())
        .arg("--request-timeout=10s")
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs kubectl to completion (killed after 30 s).
async fn kubectl(sim: &Sim, args: &[&str], stdin: Option<&str>) -> Out {
    let cache = tempfile::tempdir().expect("temp dir");
    let mut child = command(sim, &cache, args)
        .spawn()
        .expect("kubectl is installed");
    let mut input = child.stdin.take().expect("stdin piped");
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).await.expect("writes stdin");
    }
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
        .expect("kubectl runs");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn ok(sim: &Sim, args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(sim, args, stdin).await;
    assert!(
        out.ok,
        "kubectl {args:?} failed:\n{}\n{}",
        out.stdout, out.stderr
    );
    out.stdout
}

async fn get_json(sim: &Sim, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&ok(sim, &a, None).await).expect("kubectl prints JSON")
}

const DEPLOY: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: nginx:1
        env: [{name: A, value: "1"}]
      - name: side
        image: busybox:1
"#;

#[tokio::test]
async fn kubectl_get_apply_and_patch() {
    within(120, "kubectl apply", async {
        let sim = Sim::start(&["main", "sub"]).await.unwrap();
        let out = ok(&sim, &["get", "namespaces"], None).await;
        assert!(out.contains("kube-system") && out.contains("NAME"), "{out}");
        // Client-side apply: create, unchanged, configured (strategic merge).
        assert!(ok(&sim, &["apply", "-f", "-"], Some(DEPLOY)).await.contains("created"));
        assert!(ok(&sim, &["apply", "-f", "-"], Some(DEPLOY)).await.contains("unchanged"));
        let changed = DEPLOY.replace("nginx:1", "nginx:2");
        assert!(ok(&sim, &["apply", "-f", "-"], Some(&changed)).await.contains("configured"));
        let d = get_json(&sim, &["deployment", "web"]).await;
        assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:2");
        assert_eq!(d["metadata"]["generation"], 2);
        // Patches of every type.
        ok(&sim, &["patch", "deployment", "web", "--type=strategic", "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"busybox:2"}]}}}}"#], None).await;
        let d = get_json(&sim, &["deployment", "web"]).await;
        let containers = d["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 2, "strategic merge keeps the other container");
        assert_eq!(containers[0]["env"][0]["name"], "A");
        assert_eq!(containers[1]["image"], "busybox:2");
        ok(&sim, &["patch", "deployment", "web", "--type=merge", "-p", r#"{"spec":{"replicas":3}}"#], None).await;
        ok(&sim, &["patch", "deployment", "web", "--type=json", "-p", r#"[{"op":"replace","path":"/metadata/labels/app","value":"web2"}]"#], None).await;
        let d = get_json(&sim, &["deployment", "web"]).await;
        assert_eq!((d["spec"]["replicas"].as_i64(), d["metadata"]["labels"]["app"].as_str()), (Some(3), Some("web2")));
        let bad = kubectl(&sim, &["patch", "deployment", "web", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/nope"}]"#], None).await;
        assert!(!bad.ok, "a failing JSON patch is an error");
        // Server-side apply, a conflict, and --force-conflicts.
        let cmy = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  k: \"1\"\n";
        assert!(ok(&sim, &["apply", "--server-side", "-f", "-"], Some(cmy)).await.contains("serverside-applied"));
        let other = cmy.replace("\"1\"", "\"2\"");
        let conflict = kubectl(&sim, &["apply", "--server-side", "--field-manager=other", "-f", "-"], Some(&other)).await;
        assert!(!conflict.ok);
        assert!(conflict.stderr.contains("conflict with \"kubectl\""), "{}", conflict.stderr);
        assert!(conflict.stderr.contains(".data.k"), "{}", conflict.stderr);
        ok(&sim, &["apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-"], Some(&other)).await;
        let cm = get_json(&sim, &["configmap", "ssa", "--show-managed-fields"]).await;
        assert_eq!(cm["data"]["k"], "2");
        assert!(cm["metadata"]["managedFields"].as_array().unwrap().iter().any(|m| m["manager"] == "other"));
        // The second context is a different cluster.
        let out = ok(&sim, &["--context", "sub", "get", "configmaps", "-o", "name"], None).await;
        assert!(!out.contains("ssa"), "sub is a separate cluster: {out}");
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn kubectl_get_watch_streams_changes() {
    within(60, "kubectl get -w", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        c.create(
            "v1",
            "configmaps",
            Some("default"),
            json!({"metadata": {"name": "before"}}),
        )
        .unwrap();
        let cache = tempfile::tempdir().unwrap();
        let mut child: Child = command(
            &sim,
            &cache,
            &["get", "configmaps", "-w", "--output-watch-events"],
        )
        .spawn()
        .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = Vec::new();
        within(20, "initial line", async {
            while let Some(l) = lines.next_line().await.unwrap() {
                seen.push(l.clone());
                if l.contains("before") {
                    break;
                }
            }
        })
        .await;
        c.create(
            "v1",
            "configmaps",
            Some("default"),
            json!({"metadata": {"name": "after"}}),
        )
        .unwrap();
        c.delete("v1", "configmaps", Some("default"), "after")
            .unwrap();
        within(20, "watch lines", async {
            while let Some(l) = lines.next_line().await.unwrap() {
                seen.push(l.clone());
                if l.contains("DELETED") && l.contains("after") {
                    break;
                }
            }
        })
        .await;
        assert!(
            seen.iter()
                .any(|l| l.contains("ADDED") && l.contains("after")),
            "{seen:?}"
        );
        child.kill().await.ok();
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn kubectl_delete_wait_finalizer_gc_and_wait_established() {
    within(120, "kubectl delete --wait", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        // delete --wait blocks until a test removes the finalizer.
        c.create("v1", "configmaps", Some("default"), json!({"metadata": {"name": "held", "finalizers": ["sim.test/hold"]}})).unwrap();
        let cache = tempfile::tempdir().unwrap();
        let child = command(&sim, &cache, &["delete", "configmap", "held", "--wait=true", "--timeout=40s"]).spawn().unwrap();
        let waiter = tokio::spawn(async move { child.wait_with_output().await });
        within(20, "deletion marked", async {
            loop {
                let o = c.get("v1", "configmaps", Some("default"), "held").unwrap();
                if o["metadata"]["deletionTimestamp"].is_string() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiter.is_finished(), "kubectl waits while the finalizer is present");
        c.merge_patch("v1", "configmaps", Some("default"), "held", &json!({"metadata": {"finalizers": null}}), false).unwrap();
        let out = within(30, "kubectl delete returns", waiter).await.unwrap().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("deleted"));
        assert_eq!(c.get("v1", "configmaps", Some("default"), "held").unwrap_err().code, 404);

        // Garbage collection of an owned object deleted through kubectl.
        let owner = c.create("v1", "configmaps", Some("default"), json!({"metadata": {"name": "owner"}})).unwrap();
        c.create("v1", "secrets", Some("default"), json!({"metadata": {"name": "owned", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"], "controller": true}]}})).unwrap();
        ok(&sim, &["delete", "configmap", "owner"], None).await;
        within(10, "dependent collected", async {
            while c.get("v1", "secrets", Some("default"), "owned").is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;

        // wait --for condition=established on a CRD applied with kubectl.
        let crd = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: tests.job.lailin.xyz
spec:
  group: job.lailin.xyz
  scope: Namespaced
  names: {plural: tests, singular: test, kind: Test, shortNames: [tst]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {image: {type: string}}}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;
        ok(&sim, &["apply", "-f", "-"], Some(crd)).await;
        ok(&sim, &["wait", "--for", "condition=established", "crd/tests.job.lailin.xyz", "--timeout=20s"], None).await;
        let t = "apiVersion: job.lailin.xyz/v1\nkind: Test\nmetadata:\n  name: t1\nspec:\n  image: busybox\n";
        ok(&sim, &["apply", "-f", "-"], Some(t)).await;
        ok(&sim, &["apply", "-f", "-"], Some(&t.replace("busybox", "alpine"))).await;
        let out = ok(&sim, &["get", "tst"], None).await;
        assert!(out.contains("t1"), "short names resolve through discovery: {out}");
        let v = get_json(&sim, &["tests.job.lailin.xyz", "t1"]).await;
        assert_eq!(v["spec"]["image"], "alpine", "client-side apply of a CR uses merge patch");
        sim.shutdown().await;
    })
    .await;
}

/// `kubectl create namespace|configmap|secret generic|serviceaccount` send
/// protobuf bodies (`application/vnd.kubernetes.protobuf`, accepting JSON
/// back); other typed creates get a 415 that names the kind.
#[tokio::test]
async fn kubectl_imperative_creates_send_protobuf() {
    within(120, "kubectl create", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        assert!(
            ok(&sim, &["create", "namespace", "foo"], None)
                .await
                .contains("namespace/foo created")
        );
        ok(
            &sim,
            &[
                "-n",
                "foo",
                "create",
                "configmap",
                "x",
                "--from-literal=a=b",
                "--from-literal=c=d",
            ],
            None,
        )
        .await;
        ok(
            &sim,
            &[
                "-n",
                "foo",
                "create",
                "secret",
                "generic",
                "s",
                "--from-literal=k=v",
            ],
            None,
        )
        .await;
        ok(&sim, &["-n", "foo", "create", "serviceaccount", "sa"], None).await;

        let ns = get_json(&sim, &["namespace", "foo"]).await;
        assert_eq!(ns["status"]["phase"], "Active");
        let cm = get_json(&sim, &["-n", "foo", "configmap", "x"]).await;
        assert_eq!(cm["data"], json!({"a": "b", "c": "d"}));
        assert_eq!(cm["metadata"]["namespace"], "foo");
        let s = get_json(&sim, &["-n", "foo", "secret", "s"]).await;
        assert_eq!(s["data"], json!({"k": "dg=="}), "bytes are base64 in JSON");
        assert_eq!(s["type"], "Opaque", "an empty type defaults to Opaque");
        let sa = get_json(&sim, &["-n", "foo", "serviceaccount", "sa"]).await;
        assert_eq!(sa["metadata"]["name"], "sa");
        let stored = c.get("v1", "configmaps", Some("foo"), "x").unwrap();
        assert_eq!(
            stored["metadata"]["managedFields"][0]["manager"],
            "kubectl-create"
        );

        // A duplicate is still a 409 through the protobuf path.
        let dup = kubectl(
            &sim,
            &[
                "-n",
                "foo",
                "create",
                "configmap",
                "x",
                "--from-literal=a=z",
            ],
            None,
        )
        .await;
        assert!(
            !dup.ok && dup.stderr.contains("already exists"),
            "{}",
            dup.stderr
        );
        sim.shutdown().await;
    })
    .await;
}

/// `kubectl get tests -w` on a CR with printer columns: kubectl asks for
/// Tables on the watch too and prints each change with the custom columns.
#[tokio::test]
async fn kubectl_get_watch_custom_resource_printer_columns() {
    within(60, "kubectl get tests -w", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let c = sim.cluster("main");
        c.create("apiextensions.k8s.io/v1", "customresourcedefinitions", None, json!({
            "metadata": {"name": "tests.job.lailin.xyz"},
            "spec": {"group": "job.lailin.xyz", "scope": "Namespaced",
                "names": {"plural": "tests", "singular": "test", "kind": "Test"},
                "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                    "additionalPrinterColumns": [{"name": "Image", "type": "string", "jsonPath": ".spec.image"}],
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})).unwrap();
        c.create("job.lailin.xyz/v1", "tests", Some("default"), json!({"metadata": {"name": "t1"}, "spec": {"image": "busybox"}})).unwrap();
        let cache = tempfile::tempdir().unwrap();
        let mut child: Child = command(&sim, &cache, &["get", "tests", "-w"]).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = Vec::new();
        within(20, "header and first row", async {
            while let Some(l) = lines.next_line().await.unwrap() {
                seen.push(l.clone());
                if l.starts_with("t1") {
                    break;
                }
            }
        })
        .await;
        assert!(seen[0].contains("IMAGE"), "printer columns in the header: {seen:?}");
        assert!(seen.last().unwrap().contains("busybox"), "{seen:?}");
        c.merge_patch("job.lailin.xyz/v1", "tests", Some("default"), "t1", &json!({"spec": {"image": "alpine"}}), false).unwrap();
        c.create("job.lailin.xyz/v1", "tests", Some("default"), json!({"metadata": {"name": "t2"}, "spec": {"image": "nginx"}})).unwrap();
        within(20, "watched rows", async {
            while let Some(l) = lines.next_line().await.unwrap() {
                seen.push(l.clone());
                if l.starts_with("t2") {
                    break;
                }
            }
        })
        .await;
        let row = |name: &str, image: &str| seen.iter().any(|l| l.split_whitespace().take(2).eq([name, image]));
        assert!(row("t1", "alpine") && row("t2", "nginx"), "watch rows use the columns: {seen:?}");
        child.kill().await.ok();
        sim.shutdown().await;
    })
    .await;
}

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: integer
                default: 1
                x-kubernetes-validations:
                - rule: self % 2 == 1
                  messageExpression: "'size ' + string(self) + ' must be odd'"
"#;

const DEMO_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: demo-policy.example.com}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas <= 5
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: demo-binding-test.example.com}
spec:
  policyName: demo-policy.example.com
  validationActions: [ACTIONS]
"#;

/// What kubectl prints for a CRD rule and a ValidatingAdmissionPolicy,
/// on create, client- and server-side apply and `--dry-run=server`: the
/// lines a real cluster makes it print (the policy's is the Kubernetes
/// documentation's example, word for word).
#[tokio::test]
async fn kubectl_prints_admission_denials_as_against_a_real_server() {
    within(120, "kubectl admission", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        ok(&sim, &["apply", "-f", "-"], Some(WIDGET_CRD)).await;
        ok(&sim, &["wait", "--for", "condition=established", "crd/widgets.example.com"], None).await;
        let w = |size: i64| format!("apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w}}\nspec: {{size: {size}}}\n");
        let line = "The Widget \"w\" is invalid: spec.size: Invalid value: \"integer\": size 4 must be odd";
        for args in [
            &["create", "-f", "-"][..],
            &["create", "--dry-run=server", "-f", "-"],
            &["apply", "-f", "-"],
            &["apply", "--server-side", "-f", "-"],
        ] {
            let out = kubectl(&sim, args, Some(&w(4))).await;
            assert!(!out.ok, "kubectl {args:?} succeeded: {}", out.stdout);
            assert_eq!(out.stderr.trim(), line, "kubectl {args:?}");
        }
        // Defaults show in what kubectl reads back.
        ok(&sim, &["create", "-f", "-"], Some("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: d}\nspec: {}\n")).await;
        assert_eq!(get_json(&sim, &["widget", "d"]).await["spec"]["size"], 1);

        ok(&sim, &["apply", "-f", "-"], Some(&DEMO_POLICY.replace("ACTIONS", "Deny"))).await;
        let big = DEPLOY.replace("replicas: 1", "replicas: 7");
        let denied = "The deployments \"web\" is invalid: : ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5";
        for args in [&["apply", "-f", "-"][..], &["create", "--dry-run=server", "-f", "-"]] {
            let out = kubectl(&sim, args, Some(&big)).await;
            assert!(!out.ok, "kubectl {args:?} succeeded: {}", out.stdout);
            assert_eq!(out.stderr.trim(), denied, "kubectl {args:?}");
        }
        // Warn: the write goes through and kubectl prints the warning.
        ok(&sim, &["apply", "-f", "-"], Some(&DEMO_POLICY.replace("ACTIONS", "Warn"))).await;
        let out = kubectl(&sim, &["apply", "-f", "-"], Some(&big)).await;
        assert!(out.ok, "{}", out.stderr);
        assert_eq!(
            out.stderr.trim(),
            "Warning: Validation failed for ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com': failed expression: object.spec.replicas <= 5"
        );
        sim.shutdown().await;
    })
    .await;
}
