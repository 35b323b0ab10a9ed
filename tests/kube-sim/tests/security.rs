//! Contract section 14: TLS, authentication, RBAC and the review APIs,
//! checked with raw HTTPS requests, the installed `kubectl` (`auth whoami`,
//! `auth can-i`, `auth can-i --list`, `create token`, `--as`), kube-rs and
//! the Python client.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::within;
use kube_sim::cluster::Credentials;
use kube_sim::{Sim, SimCluster, SimConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn secure(name: &str) -> SimCluster {
    SimCluster::start_with(SimConfig::new(name).tls(true).auth(true))
        .await
        .expect("cluster starts")
}

/// How a raw request authenticates.
enum As<'a> {
    Nobody,
    Token(&'a str),
    /// A token, impersonating a user (`Impersonate-User`).
    Impersonating(&'a str, &'a str),
    Cert(&'a kube_sim::tls::CertifiedKey),
}

struct Reply {
    status: u16,
    body: Value,
}

/// One HTTPS request on a fresh connection that trusts only the
/// cluster's CA.
async fn https(
    c: &SimCluster,
    who: As<'_>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Reply {
    try_https(c, who, method, path, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

async fn try_https(
    c: &SimCluster,
    who: As<'_>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Reply, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(c.ca_pem().expect("TLS is on").as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match &who {
        As::Cert(ck) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(ck.cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(ck.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        _ => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(c.addr()).await.unwrap();
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .map_err(|e| format!("TLS handshake failed: {e}"))?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAccept: application/json\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
        c.addr(),
        if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        },
        body.len()
    );
    match who {
        As::Token(t) => req.push_str(&format!("Authorization: Bearer {t}\r\n")),
        As::Impersonating(t, user) => req.push_str(&format!(
            "Authorization: Bearer {t}\r\nImpersonate-User: {user}\r\n"
        )),
        As::Nobody | As::Cert(_) => {}
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("write failed: {e}"))?;
    let mut buf = Vec::new();
    // rustls reports the peer's missing close_notify as an error after
    // the body has been read.
    let _ = s.read_to_end(&mut buf).await;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no response")?;
    let head = String::from_utf8_lossy(&buf[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status code")?;
    let body = &buf[split + 4..];
    Ok(Reply {
        status,
        body: serde_json::from_slice(body).unwrap_or(Value::Null),
    })
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs kubectl with `kubeconfig` (text), killed after 30 s.
async fn kubectl(kubeconfig: &str, args: &[&str]) -> Out {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&path)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .arg("--request-timeout=10s")
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
        .expect("kubectl is installed");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn admin_cert(c: &SimCluster) -> &kube_sim::tls::CertifiedKey {
    match c.admin_credentials() {
        Credentials::ClientCert(ck) => ck,
        other => panic!("with TLS the admin has a client certificate, not {other:?}"),
    }
}

fn apply(c: &SimCluster, api_version: &str, plural: &str, ns: Option<&str>, obj: Value) {
    c.create(api_version, plural, ns, obj).expect("created");
}

/// A ServiceAccount `ns/name` and a TokenRequest token for it.
async fn service_account(c: &SimCluster, ns: &str, name: &str) -> String {
    apply(
        c,
        "v1",
        "serviceaccounts",
        Some(ns),
        json!({"metadata": {"name": name}}),
    );
    let r = https(
        c,
        As::Cert(admin_cert(c)),
        "POST",
        &format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"),
        Some(
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": 3600}}),
        ),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["kind"], "TokenRequest");
    assert!(r.body["status"]["expirationTimestamp"].is_string());
    r.body["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string()
}

#[tokio::test]
async fn unauthenticated_requests_get_401_and_credentials_authenticate() {
    within(30, "authentication", async {
        let c = secure("authn").await;
        assert!(c.url().starts_with("https://127.0.0.1:"));
        // No credentials: 401 with the apiserver's Status, except the
        // anonymous health and version endpoints.
        let r = https(&c, As::Nobody, "GET", "/api/v1/namespaces", None).await;
        assert_eq!(r.status, 401);
        assert_eq!(
            r.body,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
        assert_eq!(
            https(&c, As::Nobody, "GET", "/version", None).await.status,
            200
        );
        assert_eq!(
            https(&c, As::Nobody, "GET", "/readyz", None).await.status,
            200
        );
        assert_eq!(
            https(&c, As::Token("nope"), "GET", "/version", None)
                .await
                .status,
            401
        );
        // The admin's client certificate (system:masters) may do anything.
        let admin = admin_cert(&c);
        let r = https(&c, As::Cert(admin), "GET", "/api/v1/namespaces", None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        // A certificate from another CA fails the handshake's verification
        // and so authenticates nobody.
        let other = secure("other").await;
        let stranger = other.client_cert("mallory", &["system:masters"]).unwrap();
        let r = try_https(&c, As::Cert(&stranger), "GET", "/api/v1/namespaces", None).await;
        assert!(
            r.is_err(),
            "a client certificate from another CA must be rejected, got {}",
            r.map(|r| r.status).unwrap_or_default()
        );
        // Static token users and client certificates carry their groups.
        let token = c.add_token_user("alice", &["dev"]);
        let r = https(
            &c,
            As::Token(&token),
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(
            r.body["status"]["userInfo"],
            json!({"username": "alice", "groups": ["dev", "system:authenticated"]})
        );
        let bob = c.client_cert("bob", &["ops", "dev"]).unwrap();
        let r = https(
            &c,
            As::Cert(&bob),
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some(json!({})),
        )
        .await;
        assert_eq!(
            r.body["status"]["userInfo"],
            json!({"username": "bob", "groups": ["ops", "dev", "system:authenticated"]})
        );
        other.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn token_request_tokens_authenticate_as_the_service_account() {
    within(30, "service account tokens", async {
        let c = secure("sa").await;
        apply(&c, "v1", "namespaces", None, json!({"metadata": {"name": "team"}}));
        let token = service_account(&c, "team", "bot").await;
        let uid = c.get("v1", "serviceaccounts", Some("team"), "bot").unwrap()["metadata"]["uid"].clone();
        // JWT-shaped, with the apiserver's claims.
        let claims = token.split('.').nth(1).expect("three parts");
        let claims: Value = serde_json::from_slice(
            &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, claims)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(claims["sub"], "system:serviceaccount:team:bot");
        assert_eq!(claims["kubernetes.io"]["serviceaccount"]["uid"], uid);
        let r = https(
            &c,
            As::Token(&token),
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
        let info = &r.body["status"]["userInfo"];
        assert_eq!(info["username"], "system:serviceaccount:team:bot");
        assert_eq!(info["uid"], uid);
        assert_eq!(
            info["groups"],
            json!(["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"])
        );
        // The account may not mint tokens for others.
        let r = https(
            &c,
            As::Token(&token),
            "POST",
            "/api/v1/namespaces/team/serviceaccounts/bot/token",
            Some(json!({"spec": {}})),
        )
        .await;
        assert_eq!(r.status, 403);
        assert_eq!(
            r.body["message"],
            "serviceaccounts \"bot\" is forbidden: User \"system:serviceaccount:team:bot\" cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"team\""
        );
        let admin = admin_cert(&c);
        let r = https(
            &c,
            As::Cert(admin),
            "POST",
            "/api/v1/namespaces/team/serviceaccounts/ghost/token",
            Some(json!({"spec": {}})),
        )
        .await;
        assert_eq!((r.status, r.body["message"].as_str()), (404, Some("serviceaccounts \"ghost\" not found")));
        let r = https(
            &c,
            As::Cert(admin),
            "POST",
            "/api/v1/namespaces/team/serviceaccounts/bot/token",
            Some(json!({"spec": {"expirationSeconds": 60}})),
        )
        .await;
        assert_eq!(r.status, 422, "{}", r.body);
        // Deleting the account revokes its tokens.
        c.delete("v1", "serviceaccounts", Some("team"), "bot").unwrap();
        let r = https(&c, As::Token(&token), "GET", "/api", None).await;
        assert_eq!(r.status, 401);
        c.shutdown().await;
    })
    .await;
}

/// Objects for the RBAC tests: ServiceAccount rekon/rekon with
/// - Role `cm-reader` in `rekon` (configmaps get/list/watch), RoleBinding;
/// - ClusterRole `node-status` (nodes/status patch, nodes get only `n1`),
///   ClusterRoleBinding;
/// - ClusterRole `urls` (GET `/logs/*`, `/debug/flags`) bound to the
///   group `system:serviceaccounts:rekon`;
/// - ClusterRole `aggregated` aggregating `secret-lister` (secrets list),
///   bound by a RoleBinding in namespace `other` only;
/// - user carol bound to a ClusterRole that does not exist.
async fn rbac_fixture(c: &SimCluster) -> String {
    for ns in ["rekon", "other"] {
        apply(
            c,
            "v1",
            "namespaces",
            None,
            json!({"metadata": {"name": ns}}),
        );
    }
    apply(c, "v1", "nodes", None, json!({"metadata": {"name": "n1"}}));
    apply(c, "v1", "nodes", None, json!({"metadata": {"name": "n2"}}));
    let rbac = "rbac.authorization.k8s.io/v1";
    let sa = json!([{"kind": "ServiceAccount", "name": "rekon", "namespace": "rekon"}]);
    let role_ref = |kind: &str, name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name});
    apply(
        c,
        rbac,
        "roles",
        Some("rekon"),
        json!({"metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]}),
    );
    apply(
        c,
        rbac,
        "rolebindings",
        Some("rekon"),
        json!({"metadata": {"name": "cm-reader"},
        "roleRef": role_ref("Role", "cm-reader"), "subjects": sa}),
    );
    apply(
        c,
        rbac,
        "clusterroles",
        None,
        json!({"metadata": {"name": "node-status"},
        "rules": [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
                  {"apiGroups": [""], "resources": ["nodes"], "resourceNames": ["n1"], "verbs": ["get"]}]}),
    );
    apply(
        c,
        rbac,
        "clusterrolebindings",
        None,
        json!({"metadata": {"name": "node-status"},
        "roleRef": role_ref("ClusterRole", "node-status"), "subjects": sa}),
    );
    apply(
        c,
        rbac,
        "clusterroles",
        None,
        json!({"metadata": {"name": "urls"},
        "rules": [{"nonResourceURLs": ["/logs/*", "/debug/flags"], "verbs": ["get"]}]}),
    );
    apply(
        c,
        rbac,
        "clusterrolebindings",
        None,
        json!({"metadata": {"name": "urls"},
        "roleRef": role_ref("ClusterRole", "urls"),
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:serviceaccounts:rekon"}]}),
    );
    apply(
        c,
        rbac,
        "clusterroles",
        None,
        json!({"metadata": {"name": "aggregated"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate": "true"}}]},
        "rules": []}),
    );
    apply(
        c,
        rbac,
        "clusterroles",
        None,
        json!({"metadata": {"name": "secret-lister",
        "labels": {"example.com/aggregate": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]}),
    );
    apply(
        c,
        rbac,
        "rolebindings",
        Some("other"),
        json!({"metadata": {"name": "agg"},
        "roleRef": role_ref("ClusterRole", "aggregated"), "subjects": sa}),
    );
    apply(
        c,
        rbac,
        "clusterrolebindings",
        None,
        json!({"metadata": {"name": "carol"},
        "roleRef": role_ref("ClusterRole", "ghost"),
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]}),
    );
    service_account(c, "rekon", "rekon").await
}

#[tokio::test]
async fn rbac_enforces_roles_bindings_names_subresources_and_urls() {
    within(30, "rbac", async {
        let c = secure("rbac").await;
        let token = rbac_fixture(&c).await;
        let user = "User \"system:serviceaccount:rekon:rekon\"";
        let merge = json!({"metadata": {"labels": {"x": "y"}}});
        // (method, path, body, status, message of a 403)
        let cases: Vec<(&str, &str, Option<Value>, u16, String)> = vec![
            ("GET", "/api/v1/namespaces/rekon/configmaps", None, 200, String::new()),
            ("GET", "/api/v1/namespaces/rekon/configmaps?watch=1&timeoutSeconds=1", None, 200, String::new()),
            ("GET", "/api/v1/configmaps", None, 403, format!(
                "configmaps is forbidden: {user} cannot list resource \"configmaps\" in API group \"\" at the cluster scope")),
            ("POST", "/api/v1/namespaces/rekon/configmaps", Some(json!({"metadata": {"name": "x"}})), 403, format!(
                "configmaps is forbidden: {user} cannot create resource \"configmaps\" in API group \"\" in the namespace \"rekon\"")),
            ("GET", "/api/v1/nodes/n1", None, 200, String::new()),
            ("GET", "/api/v1/nodes/n2", None, 403, format!(
                "nodes \"n2\" is forbidden: {user} cannot get resource \"nodes\" in API group \"\" at the cluster scope")),
            ("GET", "/api/v1/nodes", None, 403, format!(
                "nodes is forbidden: {user} cannot list resource \"nodes\" in API group \"\" at the cluster scope")),
            ("PATCH", "/api/v1/nodes/n1/status", Some(merge.clone()), 200, String::new()),
            ("PATCH", "/api/v1/nodes/n1", Some(merge.clone()), 403, format!(
                "nodes \"n1\" is forbidden: {user} cannot patch resource \"nodes\" in API group \"\" at the cluster scope")),
            ("GET", "/api/v1/namespaces/other/secrets", None, 200, String::new()),
            ("GET", "/api/v1/namespaces/rekon/secrets", None, 403, format!(
                "secrets is forbidden: {user} cannot list resource \"secrets\" in API group \"\" in the namespace \"rekon\"")),
            ("GET", "/apis/apps/v1/namespaces/rekon/deployments", None, 403, format!(
                "deployments.apps is forbidden: {user} cannot list resource \"deployments\" in API group \"apps\" in the namespace \"rekon\"")),
            // Discovery through the bootstrap system:discovery role.
            ("GET", "/apis", None, 200, String::new()),
            ("GET", "/api/v1", None, 200, String::new()),
            // Non-resource URLs: allowed ones reach the router (404 here).
            ("GET", "/logs/kube-sim.log", None, 404, String::new()),
            ("GET", "/debug/flags", None, 404, String::new()),
            ("GET", "/debug/pprof", None, 403, format!("forbidden: {user} cannot get path \"/debug/pprof\"")),
        ];
        for (method, path, body, status, message) in cases {
            let r = https(&c, As::Token(&token), method, path, body).await;
            assert_eq!(r.status, status, "{method} {path}: {}", r.body);
            if status == 403 {
                assert_eq!(r.body["reason"], "Forbidden", "{method} {path}");
                assert_eq!(r.body["code"], 403);
                assert_eq!(r.body["message"], message.as_str(), "{method} {path}");
            }
        }
        // The audit log holds each decision.
        let audit = c.audit_log();
        let patched = |allowed: bool, sub: &str| {
            audit.iter().any(|r| {
                r.user == "system:serviceaccount:rekon:rekon"
                    && r.allowed == allowed
                    && r.attributes.verb == "patch"
                    && r.attributes.resource == "nodes"
                    && r.attributes.name == "n1"
                    && r.attributes.subresource == sub
            })
        };
        assert!(patched(true, "status") && patched(false, ""), "{audit:?}");
        // A binding to a missing role is reported in the denial.
        let carol = c.add_token_user("carol", &[]);
        let r = https(&c, As::Token(&carol), "GET", "/api/v1/pods", None).await;
        assert_eq!(
            r.body["message"],
            "pods is forbidden: User \"carol\" cannot list resource \"pods\" in API group \"\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"ghost\" not found"
        );
        // Server-side apply that would create needs `create` as well.
        apply(&c, "rbac.authorization.k8s.io/v1", "roles", Some("rekon"), json!({"metadata": {"name": "cm-patch"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}]}));
        apply(&c, "rbac.authorization.k8s.io/v1", "rolebindings", Some("rekon"), json!({"metadata": {"name": "cm-patch"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-patch"},
            "subjects": [{"kind": "ServiceAccount", "name": "rekon", "namespace": "rekon"}]}));
        let applied = apply_patch(&c, &token, "cm1").await;
        assert_eq!(applied.0, 403, "{}", applied.1);
        assert_eq!(applied.1["message"], "configmaps \"cm1\" is forbidden: ");
        apply(&c, "v1", "configmaps", Some("rekon"), json!({"metadata": {"name": "cm1"}}));
        assert_eq!(apply_patch(&c, &token, "cm1").await.0, 200);
        c.shutdown().await;
    })
    .await;
}

/// A server-side apply of configmap `rekon/<name>` with a token.
async fn apply_patch(c: &SimCluster, token: &str, name: &str) -> (u16, Value) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(c.ca_pem().unwrap().as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(c.addr()).await.unwrap();
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}).to_string();
    let req = format!(
        "PATCH /api/v1/namespaces/rekon/configmaps/{name}?fieldManager=t HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/apply-patch+yaml\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn kubectl_auth_whoami_can_i_and_list() {
    within(60, "kubectl auth", async {
        let c = secure("kubectl").await;
        let token = rbac_fixture(&c).await;
        let admin = c.kubeconfig_yaml();
        let sa = c.kubeconfig_for(Credentials::Token(token.clone()));
        let out = kubectl(&admin, &["auth", "whoami"]).await;
        assert!(out.ok, "{}", out.stderr);
        assert!(out.stdout.contains("kubernetes-admin"), "{}", out.stdout);
        assert!(out.stdout.contains("[system:masters system:authenticated]"), "{}", out.stdout);
        let out = kubectl(&sa, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]).await;
        assert_eq!(out.stdout, "system:serviceaccount:rekon:rekon", "{}", out.stderr);
        // can-i: yes exits 0, no exits 1.
        for (args, yes) in [
            (vec!["list", "configmaps", "-n", "rekon"], true),
            (vec!["create", "configmaps", "-n", "rekon"], false),
            (vec!["patch", "nodes", "--subresource=status"], true),
            (vec!["patch", "nodes"], false),
            (vec!["get", "nodes/n1"], true),
            (vec!["get", "nodes/n2"], false),
            (vec!["get", "/debug/flags"], true),
            (vec!["get", "/debug/pprof"], false),
        ] {
            let mut full = vec!["auth", "can-i"];
            full.extend(&args);
            let out = kubectl(&sa, &full).await;
            let want = if yes { "yes" } else { "no" };
            assert_eq!(out.stdout.trim(), want, "can-i {args:?}: {}", out.stderr);
            assert_eq!(out.ok, yes, "can-i {args:?} exit code");
        }
        let out = kubectl(&sa, &["auth", "can-i", "--list", "-n", "rekon"]).await;
        assert!(out.ok, "{}", out.stderr);
        let line = |prefix: &str| out.stdout.lines().find(|l| l.starts_with(prefix)).map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "));
        assert_eq!(line("configmaps").as_deref(), Some("configmaps [] [] [get list watch]"), "{}", out.stdout);
        assert_eq!(line("nodes/status").as_deref(), Some("nodes/status [] [] [patch]"), "{}", out.stdout);
        assert_eq!(line("nodes ").as_deref(), Some("nodes [] [n1] [get]"), "{}", out.stdout);
        assert!(out.stdout.contains("[/debug/flags]"), "{}", out.stdout);
        assert!(!out.stdout.contains("secrets"), "the secrets rule is bound in `other` only:\n{}", out.stdout);
        // A denied request through kubectl.
        let out = kubectl(&sa, &["get", "configmaps", "-n", "kube-system"]).await;
        assert!(!out.ok);
        assert!(out.stderr.contains("Error from server (Forbidden): configmaps is forbidden: User \"system:serviceaccount:rekon:rekon\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"kube-system\""), "{}", out.stderr);
        // kubectl create token (TokenRequest) and impersonation.
        let out = kubectl(&admin, &["create", "token", "rekon", "-n", "rekon"]).await;
        assert!(out.ok, "{}", out.stderr);
        let minted = c.kubeconfig_for(Credentials::Token(out.stdout.trim().to_string()));
        let out = kubectl(&minted, &["auth", "can-i", "list", "configmaps", "-n", "rekon"]).await;
        assert_eq!(out.stdout.trim(), "yes", "{}", out.stderr);
        let out = kubectl(&admin, &["auth", "can-i", "create", "configmaps", "-n", "rekon", "--as=system:serviceaccount:rekon:rekon"]).await;
        assert_eq!(out.stdout.trim(), "no", "{}", out.stderr);
        let r = https(&c, As::Impersonating(&token, "kubernetes-admin"), "GET", "/api/v1/namespaces", None).await;
        assert_eq!(r.status, 403);
        assert_eq!(r.body["message"], "users \"kubernetes-admin\" is forbidden: User \"system:serviceaccount:rekon:rekon\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope");
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn with_authorization_off_can_i_answers_yes() {
    within(60, "always allow", async {
        // Plain HTTP, no authentication: an AlwaysAllow server.
        let sim = Sim::start(&["plain"]).await.unwrap();
        let kc = sim.kubeconfig_yaml();
        let out = kubectl(&kc, &["auth", "can-i", "delete", "nodes"]).await;
        assert_eq!((out.ok, out.stdout.trim()), (true, "yes"), "{}", out.stderr);
        let out = kubectl(
            &kc,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        )
        .await;
        assert_eq!(out.stdout, "system:anonymous", "{}", out.stderr);
        let out = kubectl(&kc, &["auth", "can-i", "--list"]).await;
        assert!(
            out.stdout
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["*.*", "[]", "[]", "[*]"]),
            "{}",
            out.stdout
        );
        sim.shutdown().await;
        // TLS without authentication: the kubeconfig's CA is enough.
        let c = SimCluster::start_with(SimConfig::new("tls-only").tls(true))
            .await
            .unwrap();
        let kc = c.kubeconfig_yaml();
        assert!(kc.contains("certificate-authority-data: "));
        let out = kubectl(&kc, &["get", "ns", "default", "-o", "name"]).await;
        assert_eq!(out.stdout.trim(), "namespace/default", "{}", out.stderr);
        let out = kubectl(&kc, &["auth", "can-i", "create", "pods"]).await;
        assert_eq!(out.stdout.trim(), "yes", "{}", out.stderr);
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn kube_rs_and_python_clients_over_tls() {
    within(90, "clients", async {
        use k8s_openapi::api::core::v1::ConfigMap;
        let c = secure("clients").await;
        let token = rbac_fixture(&c).await;
        let client = |yaml: String| async move {
            let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
            let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
            kube::Client::try_from(cfg).unwrap()
        };
        // The admin's client certificate.
        let admin = client(c.kubeconfig_yaml()).await;
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(admin, "kube-system");
        api.list(&Default::default()).await.expect("admin lists");
        // The ServiceAccount token: allowed in rekon, a 403 in kube-system.
        let sa = client(c.kubeconfig_for(Credentials::Token(token.clone()))).await;
        let ok: kube::Api<ConfigMap> = kube::Api::namespaced(sa.clone(), "rekon");
        ok.list(&Default::default()).await.expect("allowed list");
        let denied: kube::Api<ConfigMap> = kube::Api::namespaced(sa, "kube-system");
        match denied.list(&Default::default()).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
                assert!(s.message.contains("cannot list resource \"configmaps\""), "{}", s.message);
            }
            other => panic!("want a 403, got {other:?}"),
        }
        // The official Python client, with the CA and the token.
        common::require_python_client().await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, c.kubeconfig_for(Credentials::Token(token))).unwrap();
        let script = r#"
import sys
from kubernetes import client, config
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
v1.list_namespaced_config_map("rekon")
try:
    v1.list_namespaced_config_map("kube-system")
    sys.exit("no 403")
except client.exceptions.ApiException as e:
    assert e.status == 403, e.status
print("ok", client.AuthenticationV1Api().create_self_subject_review(client.V1SelfSubjectReview()).status.user_info.username)
"#;
        let out = tokio::process::Command::new("python3").arg("-c").arg(script).arg(&path).kill_on_drop(true).output();
        let out = tokio::time::timeout(Duration::from_secs(60), out).await.expect("python timed out").expect("python3 runs");
        assert!(out.status.success(), "python client failed:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok system:serviceaccount:rekon:rekon");
        c.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn command_line_tls_auth_and_token_auth_file() {
    within(60, "kube-sim binary", async {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, "s3cret,dave,1001,\"dev,ops\"\n").unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-sim"))
            .args(["--clusters", "main", "--tls", "--auth", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--token-auth-file")
            .arg(&tokens)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("kube-sim runs");
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            use tokio::io::AsyncBufReadExt;
            assert!(
                stdout.read_line(&mut line).await.unwrap() > 0,
                "kube-sim exited"
            );
            if line.starts_with("kubeconfig ") {
                break;
            }
            assert!(line.starts_with("main https://127.0.0.1:"), "{line}");
        }
        let admin = std::fs::read_to_string(&kubeconfig).unwrap();
        let out = kubectl(
            &admin,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        )
        .await;
        assert_eq!(out.stdout, "kubernetes-admin", "{}", out.stderr);
        let out = kubectl(
            &admin,
            &[
                "--token=s3cret",
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.groups}",
            ],
        )
        .await;
        // kubectl sends both the client certificate and the token; the
        // certificate wins, as in the apiserver's authenticator order.
        assert!(out.stdout.contains("system:masters"), "{}", out.stderr);
        let dave = admin
            .lines()
            .filter(|l| !l.contains("client-key-data"))
            .map(|l| {
                if l.contains("client-certificate-data") {
                    "    token: s3cret"
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let out = kubectl(
            &dave,
            &["auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"],
        )
        .await;
        assert_eq!(
            out.stdout, r#"["dev","ops","system:authenticated"]"#,
            "{}",
            out.stderr
        );
        let out = kubectl(&dave, &["get", "ns"]).await;
        assert!(
            out.stderr.contains(
                "namespaces is forbidden: User \"dave\" cannot list resource \"namespaces\""
            ),
            "{}",
            out.stderr
        );
        child.kill().await.unwrap();
    })
    .await;
}

async fn post(c: &SimCluster, who: As<'_>, path: &str, body: Value) -> Reply {
    https(c, who, "POST", path, Some(body)).await
}

#[tokio::test]
async fn subject_access_and_token_reviews() {
    within(30, "reviews", async {
        let c = secure("reviews").await;
        let token = rbac_fixture(&c).await;
        let admin = admin_cert(&c);
        let sar = |spec: Value| {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        };
        let r = post(
            &c,
            As::Cert(admin),
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar(json!({"user": "system:serviceaccount:rekon:rekon",
                       "groups": ["system:serviceaccounts", "system:serviceaccounts:rekon"],
                       "resourceAttributes": {"verb": "list", "resource": "configmaps", "namespace": "rekon"}})),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.body["kind"], "SubjectAccessReview");
        assert_eq!(
            r.body["status"],
            json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"cm-reader/rekon\" of Role \"cm-reader\" to ServiceAccount \"rekon/rekon\""})
        );
        // A group alone, and a non-resource URL.
        let r = post(
            &c,
            As::Cert(admin),
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar(json!({"groups": ["system:serviceaccounts:rekon"],
                       "nonResourceAttributes": {"path": "/debug/flags", "verb": "get"}})),
        )
        .await;
        assert_eq!(r.body["status"]["allowed"], true, "{}", r.body);
        let r = post(
            &c,
            As::Cert(admin),
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar(json!({"user": "nobody", "resourceAttributes": {"verb": "get", "resource": "nodes"}})),
        )
        .await;
        assert_eq!(r.body["status"], json!({"allowed": false}));
        let r = post(
            &c,
            As::Cert(admin),
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar(json!({"resourceAttributes": {"verb": "get", "resource": "nodes"}})),
        )
        .await;
        assert_eq!(r.status, 422, "{}", r.body);
        // LocalSubjectAccessReview: the namespace must match the path's.
        let local = |ns: &str| {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
                   "metadata": {"namespace": "rekon"},
                   "spec": {"user": "system:serviceaccount:rekon:rekon",
                            "resourceAttributes": {"verb": "watch", "resource": "configmaps", "namespace": ns}}})
        };
        let path = "/apis/authorization.k8s.io/v1/namespaces/rekon/localsubjectaccessreviews";
        let r = post(&c, As::Cert(admin), path, local("rekon")).await;
        assert_eq!(r.body["status"]["allowed"], true, "{}", r.body);
        assert_eq!(post(&c, As::Cert(admin), path, local("other")).await.status, 422);
        // Reviewing others needs permission the ServiceAccount lacks.
        let r = post(
            &c,
            As::Token(&token),
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar(json!({"user": "x", "resourceAttributes": {"verb": "get", "resource": "pods"}})),
        )
        .await;
        assert_eq!(r.status, 403);
        assert_eq!(
            r.body["message"],
            "subjectaccessreviews.authorization.k8s.io is forbidden: User \"system:serviceaccount:rekon:rekon\" cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
        );
        // TokenReview.
        let review = |t: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": t}});
        let r = post(&c, As::Cert(admin), "/apis/authentication.k8s.io/v1/tokenreviews", review(&token)).await;
        assert_eq!(r.body["status"]["authenticated"], true, "{}", r.body);
        assert_eq!(r.body["status"]["user"]["username"], "system:serviceaccount:rekon:rekon");
        let r = post(&c, As::Cert(admin), "/apis/authentication.k8s.io/v1/tokenreviews", review("forged")).await;
        assert_eq!(r.body["status"]["authenticated"], Value::Null, "{}", r.body);
        // Discovery lists the review APIs and the TokenRequest subresource.
        let r = https(&c, As::Token(&token), "GET", "/apis/authorization.k8s.io/v1", None).await;
        assert!(r.body["resources"].as_array().unwrap().iter().any(|x| x["name"] == "selfsubjectaccessreviews"));
        let r = https(&c, As::Token(&token), "GET", "/api/v1", None).await;
        assert!(r.body["resources"].as_array().unwrap().iter().any(|x| x["name"] == "serviceaccounts/token"));
        c.shutdown().await;
    })
    .await;
}

/// Authentication without TLS: tokens over plain HTTP. kube-rs sends them;
/// kubectl, like every client-go program, sends no credentials to an
/// `http://` server (clientcmd reads auth info only for TLS transports), so
/// it is refused as the real apiserver refuses it.
#[tokio::test]
async fn authentication_over_plain_http_uses_tokens() {
    within(60, "plain http auth", async {
        use k8s_openapi::api::core::v1::Namespace;
        let sim = Sim::start_with(vec![
            SimConfig::new("a").auth(true),
            SimConfig::new("b").auth(true),
        ])
        .await
        .unwrap();
        let a = sim.cluster("a");
        assert!(a.url().starts_with("http://"));
        let Credentials::Token(token_a) = a.admin_credentials().clone() else {
            panic!("without TLS the admin authenticates with a token")
        };
        let (code, body) = common::req(
            &a.url(),
            "GET",
            "/api/v1/namespaces",
            "application/json",
            None,
        )
        .await;
        assert_eq!((code, body["reason"].as_str()), (401, Some("Unauthorized")));
        // kube-rs with the kubeconfig's per-cluster token.
        for ctx in ["a", "b"] {
            let client = common::client(&sim, ctx).await;
            let list = kube::Api::<Namespace>::all(client)
                .list(&Default::default())
                .await;
            assert!(list.is_ok(), "{ctx}: {list:?}");
        }
        // The tokens are per cluster.
        let b_with_a = kube::config::Kubeconfig::from_yaml(
            &sim.cluster("b").kubeconfig_for(Credentials::Token(token_a)),
        )
        .unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(b_with_a, &Default::default())
            .await
            .unwrap();
        let denied = kube::Api::<Namespace>::all(kube::Client::try_from(cfg).unwrap())
            .list(&Default::default())
            .await;
        assert!(
            matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 401),
            "{denied:?}"
        );
        // kubectl sends nothing over http://.
        let out = kubectl(&sim.kubeconfig_yaml(), &["--context", "a", "get", "ns"]).await;
        assert!(
            !out.ok && out.stderr.contains("You must be logged in to the server"),
            "{}",
            out.stderr
        );
        sim.shutdown().await;
    })
    .await;
}

/// A subject cannot grant what it does not hold: roles and bindings beyond
/// its own permissions are refused unless it may `escalate` / `bind`.
#[tokio::test]
async fn rbac_writes_cannot_escalate() {
    within(30, "escalation", async {
        let c = secure("escalate").await;
        apply(&c, "v1", "namespaces", None, json!({"metadata": {"name": "team"}}));
        let rbac = "rbac.authorization.k8s.io/v1";
        // dave may manage Roles and RoleBindings in `team` and read pods there.
        apply(&c, rbac, "roles", Some("team"), json!({"metadata": {"name": "rbac-manager"},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create", "update", "get"]},
                      {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}));
        apply(&c, rbac, "rolebindings", Some("team"), json!({"metadata": {"name": "dave"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rbac-manager"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave"}]}));
        let dave = c.add_token_user("dave", &["dev"]);
        let role = |name: &str, verbs: Value| {
            json!({"apiVersion": rbac, "kind": "Role", "metadata": {"name": name},
                   "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]})
        };
        let path = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles";
        // Within what dave holds: allowed.
        let r = post(&c, As::Token(&dave), path, role("pod-reader", json!(["get"]))).await;
        assert_eq!(r.status, 201, "{}", r.body);
        // Beyond it: refused, naming what is missing.
        let r = post(&c, As::Token(&dave), path, role("pod-admin", json!(["get", "delete", "patch"]))).await;
        assert_eq!(r.status, 403, "{}", r.body);
        assert_eq!(
            r.body["message"],
            "roles.rbac.authorization.k8s.io \"pod-admin\" is forbidden: user \"dave\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"patch\"]}"
        );
        // Binding a role dave cannot fully use: refused; one he holds: allowed.
        let binding = |name: &str, kind: &str, role: &str| {
            json!({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "erin"}]})
        };
        let path = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings";
        let r = post(&c, As::Token(&dave), path, binding("erin-admin", "ClusterRole", "cluster-admin")).await;
        assert_eq!(r.status, 403, "{}", r.body);
        assert!(
            r.body["message"].as_str().unwrap().starts_with(
                "rolebindings.rbac.authorization.k8s.io \"erin-admin\" is forbidden: user \"dave\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"
            ),
            "{}",
            r.body["message"]
        );
        let r = post(&c, As::Token(&dave), path, binding("erin-read", "Role", "pod-reader")).await;
        assert_eq!(r.status, 201, "{}", r.body);
        // With `bind` on cluster-admin he may bind it.
        apply(&c, rbac, "roles", Some("team"), json!({"metadata": {"name": "binder"},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["cluster-admin"]}]}));
        apply(&c, rbac, "rolebindings", Some("team"), json!({"metadata": {"name": "dave-binder"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave"}]}));
        let r = post(&c, As::Token(&dave), path, binding("erin-admin", "ClusterRole", "cluster-admin")).await;
        assert_eq!(r.status, 201, "{}", r.body);
        c.shutdown().await;
    })
    .await;
}
