//! The installed `kubectl` doing what users do daily, against kube-sim
//! (contract section 13): the imperative `create` family (protobuf bodies),
//! defaulting read back with `get -o json`, Secret `stringData`, `diff` of
//! an unchanged object, strict field validation of built-ins and custom
//! resources, `delete -f` of a file that starts with its Namespace,
//! `scale`, `apply --prune`, `explain`, and `get -o wide` columns.
//!
//! Every run gets a fresh `--cache-dir`, `--request-timeout` and a hard
//! process timeout; every test a `within` timeout.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::within;
use kube_sim::Sim;
use serde_json::{Value, json};
use tokio::process::Command;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs kubectl to completion (killed after 30 s).
async fn kubectl(sim: &Sim, args: &[&str]) -> Out {
    let cache = tempfile::tempdir().expect("temp dir");
    let child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(sim.kubeconfig_path())
        .arg("--cache-dir")
        .arg(cache.path())
        .arg("--request-timeout=10s")
        .args(args)
        .env_remove("KUBECONFIG")
        .env("KUBECTL_EXTERNAL_DIFF", "diff -u")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl is installed");
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
        .expect("kubectl runs");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn ok(sim: &Sim, args: &[&str]) -> String {
    let out = kubectl(sim, args).await;
    assert_eq!(
        out.code, 0,
        "kubectl {args:?} failed:\n{}\n{}",
        out.stdout, out.stderr
    );
    out.stdout
}

async fn get_json(sim: &Sim, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&ok(sim, &a).await).expect("kubectl prints JSON")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("writes manifest");
    p.to_string_lossy().into_owned()
}

/// The header tokens of `kubectl get` output.
fn header(out: &str) -> Vec<String> {
    out.lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn imperative_creates_decode_protobuf_and_default_like_the_apiserver() {
    within(120, "imperative creates", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        ok(&sim, &["create", "deployment", "web", "--image=nginx:1.27", "--replicas=0"]).await;
        ok(&sim, &["create", "service", "clusterip", "svc", "--tcp=80:8080"]).await;
        ok(&sim, &["create", "job", "j", "--image=busybox"]).await;
        ok(&sim, &["create", "cronjob", "cj", "--image=busybox", "--schedule=*/5 * * * *"]).await;
        ok(&sim, &["create", "job", "manual", "--from=cronjob/cj"]).await;
        ok(&sim, &["create", "role", "r", "--verb=get,list", "--resource=pods"]).await;
        ok(&sim, &["create", "rolebinding", "rb", "--role=r", "--user=alice"]).await;
        ok(&sim, &["create", "poddisruptionbudget", "pdb", "--selector=app=web", "--min-available=1"]).await;
        ok(&sim, &["create", "quota", "q", "--hard=pods=10"]).await;

        // Deployment: replicas is a pointer, so an explicit 0 survives;
        // SetDefaults_Deployment and the pod template defaults are filled.
        let d = get_json(&sim, &["deployment", "web"]).await;
        let spec = &d["spec"];
        assert_eq!(spec["replicas"], 0);
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        let pod = &spec["template"]["spec"];
        assert_eq!(
            (pod["restartPolicy"].as_str(), pod["dnsPolicy"].as_str(), pod["schedulerName"].as_str()),
            (Some("Always"), Some("ClusterFirst"), Some("default-scheduler"))
        );
        assert_eq!(pod["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["securityContext"], json!({}));
        let c = &pod["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent", "a tagged image");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["terminationMessagePolicy"], "File");
        assert_eq!(c["resources"], json!({}));
        assert_eq!(d["status"], json!({}));

        // Service: allocated IP, families, protocol and targetPort.
        let s = get_json(&sim, &["service", "svc"]).await;
        let spec = &s["spec"];
        let ip = spec["clusterIP"].as_str().unwrap();
        assert!(ip.starts_with("10.96."), "{ip}");
        assert_eq!(spec["clusterIPs"], json!([ip]));
        assert_eq!(spec["type"], "ClusterIP");
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        assert_eq!(spec["sessionAffinity"], "None");
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert_eq!(
            spec["ports"],
            json!([{"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}])
        );
        assert_eq!(s["status"], json!({"loadBalancer": {}}));

        // Job: SetDefaults_Job and the generated selector and labels.
        let j = get_json(&sim, &["job", "j"]).await;
        let uid = j["metadata"]["uid"].as_str().unwrap();
        let spec = &j["spec"];
        assert_eq!(
            (&spec["backoffLimit"], &spec["completions"], &spec["parallelism"]),
            (&json!(6), &json!(1), &json!(1))
        );
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        );
        let labels = &spec["template"]["metadata"]["labels"];
        assert_eq!(labels["batch.kubernetes.io/job-name"], "j");
        assert_eq!(labels["controller-uid"], uid);
        assert_eq!(labels["job-name"], "j");
        assert_eq!(spec["template"]["spec"]["restartPolicy"], "Never");
        assert_eq!(spec["template"]["spec"]["containers"][0]["imagePullPolicy"], "Always", "no tag");

        // CronJob defaults; a Job created from it by hand.
        let cj = get_json(&sim, &["cronjob", "cj"]).await;
        assert_eq!(
            (&cj["spec"]["concurrencyPolicy"], &cj["spec"]["suspend"]),
            (&json!("Allow"), &json!(false))
        );
        assert_eq!(
            (&cj["spec"]["successfulJobsHistoryLimit"], &cj["spec"]["failedJobsHistoryLimit"]),
            (&json!(3), &json!(1))
        );
        let m = get_json(&sim, &["job", "manual"]).await;
        assert_eq!(m["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"], "manual");
        assert_eq!(m["metadata"]["ownerReferences"][0]["kind"], "CronJob");

        let r = get_json(&sim, &["role", "r"]).await;
        assert_eq!(
            r["rules"],
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])
        );
        let rb = get_json(&sim, &["rolebinding", "rb"]).await;
        assert_eq!(rb["roleRef"]["name"], "r");
        assert_eq!(rb["subjects"][0]["name"], "alice");
        let pdb = get_json(&sim, &["pdb", "pdb"]).await;
        assert_eq!(pdb["spec"]["minAvailable"], 1, "an IntOrString int");
        let q = get_json(&sim, &["quota", "q"]).await;
        assert_eq!(q["spec"]["hard"]["pods"], "10", "a Quantity");
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn pods_get_admission_defaults_and_wide_columns_are_real() {
    within(90, "pod defaults", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        ok(&sim, &["run", "p", "--image=nginx"]).await;
        let p = get_json(&sim, &["pod", "p"]).await;
        let spec = &p["spec"];
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["enableServiceLinks"], true);
        assert_eq!(spec["priority"], 0);
        let tolerations: Vec<&str> = spec["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["key"].as_str().unwrap())
            .collect();
        assert_eq!(
            tolerations,
            [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable"
            ]
        );
        assert_eq!(spec["tolerations"][0]["tolerationSeconds"], 300);
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "Always");
        // The ServiceAccount admission plugin's token volume and mount.
        let vol = &spec["volumes"][0];
        let vname = vol["name"].as_str().unwrap();
        assert!(vname.starts_with("kube-api-access-") && vname.len() == 21, "{vname}");
        assert_eq!(vol["projected"]["sources"][0]["serviceAccountToken"], json!({"expirationSeconds": 3607, "path": "token"}));
        assert_eq!(
            spec["containers"][0]["volumeMounts"],
            json!([{"name": vname, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
        );
        assert_eq!(
            p["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );

        let wide = ok(&sim, &["get", "pods", "-o", "wide"]).await;
        assert_eq!(
            header(&wide),
            [
                "NAME",
                "READY",
                "STATUS",
                "RESTARTS",
                "AGE",
                "IP",
                "NODE",
                "NOMINATED",
                "NODE",
                "READINESS",
                "GATES"
            ]
        );
        assert!(wide.lines().nth(1).unwrap().starts_with("p "), "{wide}");
        ok(&sim, &["create", "deployment", "web", "--image=nginx"]).await;
        ok(
            &sim,
            &["create", "service", "nodeport", "np", "--tcp=80:8080"],
        )
        .await;
        ok(&sim, &["create", "job", "j", "--image=busybox"]).await;
        let out = ok(&sim, &["get", "deployments"]).await;
        assert_eq!(
            header(&out),
            ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
        );
        assert!(out.contains("web    0/1     0            0"), "{out}");
        let out = ok(&sim, &["get", "services", "np"]).await;
        assert_eq!(
            header(&out),
            [
                "NAME",
                "TYPE",
                "CLUSTER-IP",
                "EXTERNAL-IP",
                "PORT(S)",
                "AGE"
            ]
        );
        let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!((row[1], row[3]), ("NodePort", "<none>"));
        assert!(
            row[4].starts_with("80:3") && row[4].ends_with("/TCP"),
            "{out}"
        );
        let out = ok(&sim, &["get", "jobs", "-o", "wide"]).await;
        assert_eq!(
            header(&out),
            [
                "NAME",
                "STATUS",
                "COMPLETIONS",
                "DURATION",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ]
        );
        ok(&sim, &["create", "rolebinding", "rb", "--clusterrole=view", "--user=alice", "--serviceaccount=default:sa"]).await;
        let out = ok(&sim, &["get", "rolebindings", "-o", "wide"]).await;
        assert_eq!(header(&out), ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]);
        let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!((row[0], row[1], row[3], row[4]), ("rb", "ClusterRole/view", "alice", "default/sa"));
        ok(&sim, &["create", "ingress", "ing", "--rule=foo.com/bar=svc1:8080"]).await;
        let out = ok(&sim, &["get", "ingress"]).await;
        assert_eq!(header(&out), ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]);
        assert!(out.lines().nth(1).unwrap().starts_with("ing    <none>   foo.com             80 "), "{out}");
        let c = sim.cluster("main");
        c.create(
            "v1",
            "events",
            Some("default"),
            json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p"},
                   "reason": "Pulled", "message": "pulled nginx", "type": "Normal",
                   "source": {"component": "kubelet"}, "count": 2}),
        )
        .unwrap();
        let out = ok(&sim, &["get", "events"]).await;
        assert_eq!(
            header(&out),
            ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        );
        assert!(
            out.contains("Normal   Pulled   pod/p    pulled nginx"),
            "{out}"
        );
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn secret_string_data_is_merged_and_never_returned() {
    within(60, "stringData", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "s.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: eA==}\nstringData: {b: hello, a: new}\n",
        );
        ok(&sim, &["create", "-f", &f]).await;
        let s = get_json(&sim, &["secret", "s"]).await;
        assert_eq!(s["data"], json!({"a": "bmV3", "b": "aGVsbG8="}));
        assert!(s.get("stringData").is_none(), "{s}");
        assert_eq!(s["type"], "Opaque");
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn diff_of_an_unchanged_object_is_empty_and_no_op_patches_change_nothing() {
    within(90, "diff", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let manifest = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, annotations: {}}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: c, image: nginx, env: []}]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, labels: {}}\ndata: {a: b}\n";
        let f = write(dir.path(), "app.yaml", manifest);
        ok(&sim, &["apply", "-f", &f]).await;
        let d = kubectl(&sim, &["diff", "-f", &f]).await;
        assert_eq!(d.code, 0, "unchanged: {}{}", d.stdout, d.stderr);
        let d = kubectl(&sim, &["diff", "--server-side", "-f", &f]).await;
        assert_eq!(d.code, 0, "unchanged (server-side): {}{}", d.stdout, d.stderr);
        let cm = get_json(&sim, &["configmap", "cfg"]).await;
        assert!(cm["metadata"].get("labels").is_none(), "empty maps are not stored: {cm}");
        let rv = cm["metadata"]["resourceVersion"].clone();
        let out = ok(&sim, &["patch", "configmap", "cfg", "-p", r#"{"metadata":{"annotations":{}},"data":{"a":"b"}}"#]).await;
        assert!(out.contains("patched (no change)"), "{out}");
        // kubectl re-sends `labels: {}` (it is in the last-applied
        // configuration, not in the live object); the server stores nothing new.
        ok(&sim, &["apply", "-f", &f]).await;
        assert_eq!(get_json(&sim, &["configmap", "cfg"]).await["metadata"]["resourceVersion"], rv);
        let changed = write(dir.path(), "app.yaml", &manifest.replace("{a: b}", "{a: c}"));
        let d = kubectl(&sim, &["diff", "-f", &changed]).await;
        assert_eq!(d.code, 1, "a change: {}{}", d.stdout, d.stderr);
        assert!(d.stdout.contains("-  a: b") && d.stdout.contains("+  a: c"), "{}", d.stdout);
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
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What the widget should be.
            required: [size]
            properties:
              size: {type: integer, minimum: 1, description: Size of the widget in cm.}
              color: {type: string, enum: [red, blue]}
              replicas: {type: integer}
          status:
            type: object
            properties:
              replicas: {type: integer}
"#;

#[tokio::test]
async fn strict_field_validation_for_built_ins_and_custom_resources() {
    within(120, "strict validation", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let bad = write(
            dir.path(),
            "bad.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: bad}\nspec:\n  replica: 2\n  selector: {matchLabels: {app: bad}}\n  template:\n    metadata: {labels: {app: bad}}\n    spec:\n      containers: [{name: c, image: nginx, imagex: x}]\n",
        );
        // kubectl's default --validate=strict sends fieldValidation=Strict.
        let out = kubectl(&sim, &["apply", "-f", &bad]).await;
        assert_eq!(out.code, 1);
        assert_eq!(
            out.stderr.trim(),
            format!(
                "Error from server (BadRequest): error when creating \"{bad}\": Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.replica\", unknown field \"spec.template.spec.containers[0].imagex\""
            )
        );
        // Server-side apply converts the patch to its typed form first; an
        // undeclared field fails whatever fieldValidation says (1.32: a 500
        // without reason), list items named by their keys.
        let out = kubectl(&sim, &["apply", "--server-side", "-f", &bad]).await;
        assert_eq!(out.code, 1);
        assert_eq!(
            out.stderr.trim(),
            "Error from server: failed to create typed patch object (default/bad; apps/v1, Kind=Deployment): errors:\n  .spec.replica: field not declared in schema\n  .spec.template.spec.containers[name=\"c\"].imagex: field not declared in schema"
        );
        // Warn: created, unknown fields dropped, a warning per field.
        let out = kubectl(&sim, &["create", "--validate=warn", "-f", &bad]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stderr.contains("Warning: unknown field \"spec.replica\""), "{}", out.stderr);
        let d = get_json(&sim, &["deployment", "bad"]).await;
        assert!(d["spec"].get("replica").is_none());
        assert!(d["spec"]["template"]["spec"]["containers"][0].get("imagex").is_none());
        // Ignore: silently dropped.
        ok(&sim, &["delete", "deployment", "bad"]).await;
        let out = kubectl(&sim, &["create", "--validate=false", "-f", &bad]).await;
        assert_eq!((out.code, out.stderr.as_str()), (0, ""));

        // Custom resources: unknown fields, wrong types, enum, minimum, required.
        let crd = write(dir.path(), "crd.yaml", WIDGET_CRD);
        ok(&sim, &["apply", "-f", &crd]).await;
        ok(&sim, &["wait", "--for", "condition=established", "crd/widgets.example.com"]).await;
        let w = write(
            dir.path(),
            "w.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3, colour: red}\n",
        );
        let out = kubectl(&sim, &["apply", "-f", &w]).await;
        assert_eq!(
            out.stderr.trim(),
            format!(
                "Error from server (BadRequest): error when creating \"{w}\": Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.colour\""
            )
        );
        let wm = write(
            dir.path(),
            "wm.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: wm, labelz: {a: b}}\nspec: {size: 3}\n",
        );
        let out = kubectl(&sim, &["apply", "-f", &wm]).await;
        assert!(
            out.stderr.contains("strict decoding error: unknown field \"metadata.labelz\""),
            "{}",
            out.stderr
        );
        let w2 = write(
            dir.path(),
            "w2.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2}\nspec: {size: big, color: pink}\n",
        );
        let out = kubectl(&sim, &["apply", "-f", &w2]).await;
        assert_eq!(
            out.stderr.trim(),
            format!(
                "The Widget \"w2\" is invalid: \n* spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\"\n* spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""
            )
        );
        let w3 = write(
            dir.path(),
            "w3.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w3}\nspec: {size: 0}\n",
        );
        let out = kubectl(&sim, &["apply", "-f", &w3]).await;
        assert!(
            out.stderr.contains("spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"),
            "{}",
            out.stderr
        );
        let w4 = write(
            dir.path(),
            "w4.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w4}\nspec: {color: red}\n",
        );
        let out = kubectl(&sim, &["apply", "-f", &w4]).await;
        assert!(out.stderr.contains("spec.size: Required value"), "{}", out.stderr);
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn delete_of_a_file_that_lists_its_namespace_first() {
    within(90, "namespace delete", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "app.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: app}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: app}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: app}\nspec:\n  ports: [{port: 80}]\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: app}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: c, image: nginx}]\n",
        );
        ok(&sim, &["apply", "-f", &f]).await;
        let out = kubectl(&sim, &["delete", "-f", &f]).await;
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        assert_eq!(
            out.stdout.lines().collect::<Vec<_>>(),
            [
                "namespace \"app\" deleted",
                "configmap \"cfg\" deleted",
                "service \"web\" deleted",
                "deployment.apps \"web\" deleted"
            ]
        );
        let out = kubectl(&sim, &["get", "namespace", "app"]).await;
        assert!(out.stderr.contains("namespaces \"app\" not found"), "{}", out.stderr);

        // A namespace held by a finalizer stays Terminating; creating in it
        // is forbidden with the apiserver's message.
        ok(&sim, &["apply", "-f", &f]).await;
        ok(&sim, &["-n", "app", "patch", "configmap", "cfg", "-p", r#"{"metadata":{"finalizers":["example.com/hold"]}}"#]).await;
        let out = ok(&sim, &["delete", "namespace", "app", "--wait=false"]).await;
        assert_eq!(out.trim(), "namespace \"app\" deleted");
        let ns = get_json(&sim, &["namespace", "app"]).await;
        assert_eq!(ns["status"]["phase"], "Terminating");
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        let out = kubectl(&sim, &["-n", "app", "create", "configmap", "late"]).await;
        assert_eq!(
            out.stderr.trim(),
            "error: failed to create configmap: configmaps \"late\" is forbidden: unable to create new content in namespace app because it is being terminated"
        );
        let mut ns = ns;
        for _ in 0..100 {
            if ns["status"]["conditions"].is_array() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            ns = get_json(&sim, &["namespace", "app"]).await;
        }
        let remaining = ns["status"]["conditions"]
            .as_array()
            .expect("the namespace controller reports conditions")
            .iter()
            .find(|c| c["type"] == "NamespaceFinalizersRemaining")
            .cloned()
            .unwrap();
        assert_eq!(
            remaining["message"],
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        );
        ok(&sim, &["-n", "app", "patch", "configmap", "cfg", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#]).await;
        ok(&sim, &["wait", "--for=delete", "namespace/app", "--timeout=10s"]).await;
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn scale_built_in_workloads_and_custom_resources() {
    within(90, "scale", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        ok(&sim, &["create", "deployment", "web", "--image=nginx"]).await;
        let out = ok(&sim, &["scale", "deployment", "web", "--replicas=3"]).await;
        assert_eq!(out.trim(), "deployment.apps/web scaled");
        let d = get_json(&sim, &["deployment", "web"]).await;
        assert_eq!((&d["spec"]["replicas"], &d["metadata"]["generation"]), (&json!(3), &json!(2)));
        let s = get_json(&sim, &["deployment", "web", "--subresource=scale"]).await;
        assert_eq!((s["kind"].as_str(), s["apiVersion"].as_str()), (Some("Scale"), Some("autoscaling/v1")));
        assert_eq!(s["spec"], json!({"replicas": 3}));
        assert_eq!(s["status"], json!({"replicas": 0, "selector": "app=web"}));
        let out = kubectl(&sim, &["scale", "deployment", "web", "--replicas=5", "--current-replicas=2"]).await;
        assert!(out.stderr.contains("Expected replicas to be 2, was 3"), "{}", out.stderr);

        let dir = tempfile::tempdir().unwrap();
        ok(&sim, &["apply", "-f", &write(dir.path(), "crd.yaml", WIDGET_CRD)]).await;
        ok(&sim, &["wait", "--for", "condition=established", "crd/widgets.example.com"]).await;
        ok(&sim, &["apply", "-f", &write(dir.path(), "w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 1, replicas: 1}\n")]).await;
        let out = ok(&sim, &["scale", "widget", "w", "--replicas=4"]).await;
        assert_eq!(out.trim(), "widget.example.com/w scaled");
        assert_eq!(get_json(&sim, &["widget", "w"]).await["spec"]["replicas"], 4);
        // autoscale writes autoscaling/v1; v2 (the stored version) shows a
        // cpu metric, v1 reads it back as targetCPUUtilizationPercentage.
        let out = ok(&sim, &["autoscale", "deployment", "web", "--max=5", "--cpu-percent=60"]).await;
        assert_eq!(out.trim(), "horizontalpodautoscaler.autoscaling/web autoscaled");
        let h = get_json(&sim, &["hpa", "web"]).await;
        assert_eq!(h["apiVersion"], "autoscaling/v2");
        assert_eq!(h["spec"]["minReplicas"], 1);
        assert_eq!(
            h["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}])
        );
        let c = sim.cluster("main");
        let v1 = c.get("autoscaling/v1", "horizontalpodautoscalers", Some("default"), "web").unwrap();
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
        assert!(v1["spec"].get("metrics").is_none());
        let out = ok(&sim, &["get", "hpa"]).await;
        assert_eq!(header(&out), ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]);
        assert!(out.contains("web    Deployment/web   cpu: <unknown>/60%   1         5         0"), "{out}");
        let out = kubectl(&sim, &["scale", "configmap", "x", "--replicas=1"]).await;
        assert_ne!(out.code, 0);
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn apply_prune_with_the_default_allow_list() {
    within(90, "apply --prune", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: {app: demo}}\ndata: {k: v}\n");
        write(dir.path(), "b.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, labels: {app: demo}}\ndata: {k: v}\n");
        let d = dir.path().to_string_lossy().into_owned();
        let out = ok(&sim, &["apply", "--prune", "-l", "app=demo", "-f", &d]).await;
        assert!(out.contains("configmap/a created") && out.contains("configmap/b created"), "{out}");
        std::fs::remove_file(dir.path().join("cm.yaml")).unwrap();
        let out = kubectl(&sim, &["apply", "--prune", "-l", "app=demo", "-f", &d]).await;
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("configmap/a pruned"), "{}", out.stdout);
        assert!(out.stdout.contains("configmap/b unchanged"), "{}", out.stdout);
        let gone = kubectl(&sim, &["get", "configmap", "a"]).await;
        assert!(gone.stderr.contains("not found"), "{}", gone.stderr);
        for r in ["replicationcontrollers", "persistentvolumes", "ingresses", "apiservices", "endpointslices", "networkpolicies", "poddisruptionbudgets", "horizontalpodautoscalers"] {
            let out = kubectl(&sim, &["get", r, "-A"]).await;
            assert_eq!(out.code, 0, "{r}: {}", out.stderr);
        }
        sim.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn explain_built_ins_and_custom_resources() {
    within(90, "explain", async {
        let sim = Sim::start(&["main"]).await.unwrap();
        let out = ok(&sim, &["explain", "deployment.spec.replicas"]).await;
        assert!(
            out.contains("GROUP:      apps") && out.contains("KIND:       Deployment"),
            "{out}"
        );
        assert!(out.contains("FIELD: replicas <integer>"), "{out}");
        assert!(out.contains("Number of desired pods."), "{out}");
        let out = ok(&sim, &["explain", "pods.spec.containers.imagePullPolicy"]).await;
        assert!(out.contains("FIELD: imagePullPolicy <string>"), "{out}");
        let dir = tempfile::tempdir().unwrap();
        ok(
            &sim,
            &["apply", "-f", &write(dir.path(), "crd.yaml", WIDGET_CRD)],
        )
        .await;
        ok(
            &sim,
            &[
                "wait",
                "--for",
                "condition=established",
                "crd/widgets.example.com",
            ],
        )
        .await;
        let out = ok(&sim, &["explain", "widgets.spec"]).await;
        assert!(out.contains("KIND:       Widget"), "{out}");
        assert!(out.contains("What the widget should be."), "{out}");
        assert!(out.contains("size\t<integer> -required-"), "{out}");
        assert!(out.contains("Size of the widget in cm."), "{out}");
        sim.shutdown().await;
    })
    .await;
}
