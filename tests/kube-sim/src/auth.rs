//! Authentication, ServiceAccount tokens, and the review APIs.
//!
//! When authentication is on, a request authenticates, in the apiserver's
//! order, by
//! 1. a client certificate the TLS handshake verified against the
//!    cluster's CA: CN is the user, each O a group;
//! 2. a bearer token: a static user's ([`crate::SimConfig::token_user`]
//!    is the `--token-auth-file` of kube-sim), or a ServiceAccount token
//!    issued through `serviceaccounts/<name>/token` (TokenRequest), valid
//!    until it expires or the ServiceAccount is deleted, authenticating as
//!    `system:serviceaccount:<ns>:<name>` in `system:serviceaccounts` and
//!    `system:serviceaccounts:<ns>`.
//!
//! Every authenticated user is also in `system:authenticated`. A token
//! nobody issued answers 401. A request with no credentials is anonymous
//! (`system:anonymous`, `system:unauthenticated`) only for `/healthz`,
//! `/livez`, `/readyz` and `/version` (the apiserver's
//! `anonymous.conditions`), and 401 anywhere else.
//!
//! ServiceAccount tokens are shaped like the apiserver's JWTs (the claims
//! are real and decodable) but are checked by lookup, not by signature.
//!
//! With authentication off every request is `system:anonymous` and any
//! bearer token is ignored, as on a server with only anonymous auth.
//!
//! The review APIs are served whatever the mode:
//! `authentication.k8s.io/v1` SelfSubjectReview and TokenReview,
//! `authorization.k8s.io/v1` SelfSubjectAccessReview,
//! SubjectAccessReview, LocalSubjectAccessReview and
//! SelfSubjectRulesReview.

use std::collections::{BTreeMap, HashMap};

use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;
use rand::Rng;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::rbac::{self, Attributes, Mode};
use crate::server::ClusterState;
use crate::tls::{Peer, Pki};

/// Who a request is (`user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub name: String,
    /// UID, empty when unknown.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..Self::default()
        }
    }

    fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == "system:authenticated") {
            self.groups.push("system:authenticated".into());
        }
        self
    }

    /// `userInfo` of review responses.
    fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("username".into(), json!(self.name));
        if !self.uid.is_empty() {
            m.insert("uid".into(), json!(self.uid));
        }
        m.insert("groups".into(), json!(self.groups));
        if let Some(e) = rbac::extra_json(&self.extra) {
            m.insert("extra".into(), e);
        }
        Value::Object(m)
    }
}

/// A static user authenticated by a bearer token.
#[derive(Debug, Clone)]
pub struct TokenUser {
    /// The bearer token.
    pub token: String,
    /// User name.
    pub name: String,
    /// Groups (besides `system:authenticated`).
    pub groups: Vec<String>,
}

/// The administrator every secured cluster has: in `system:masters`, as
/// kubeadm's `kubernetes-admin`. The kubeconfig kube-sim writes uses it.
pub const ADMIN_USER: &str = "kubernetes-admin";

/// The kubeconfig's user as admission sees it (a request without
/// authentication).
pub(crate) fn admin_user() -> UserInfo {
    UserInfo {
        name: ADMIN_USER.into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
        ..Default::default()
    }
}

#[derive(Debug, Clone)]
struct IssuedToken {
    namespace: String,
    name: String,
    uid: String,
    jti: String,
    expires: chrono::DateTime<chrono::Utc>,
}

/// A cluster's security settings and credentials.
#[derive(Debug, Default)]
pub struct Security {
    /// CA and serving certificate when TLS is on.
    pub(crate) pki: Option<Pki>,
    /// Whether requests must authenticate.
    pub(crate) authenticate: bool,
    /// How requests are authorized.
    pub(crate) mode: Mode,
    /// Static token users.
    users: Mutex<HashMap<String, UserInfo>>,
    /// ServiceAccount tokens issued by TokenRequest.
    issued: Mutex<HashMap<String, IssuedToken>>,
    /// The administrator's token.
    pub(crate) admin_token: String,
    /// Authorization decisions, oldest first (at most [`AUDIT_LIMIT`]).
    audit: Mutex<Vec<AuditRecord>>,
}

/// One authorization decision: who asked to do what, and the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// The user name.
    pub user: String,
    /// What was asked.
    pub attributes: Attributes,
    /// Whether it was allowed.
    pub allowed: bool,
}

/// Decisions kept per cluster; later ones are dropped.
pub const AUDIT_LIMIT: usize = 100_000;

/// A random URL-safe token.
fn random_token(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::rng().fill(&mut b[..]);
    URL_SAFE_NO_PAD.encode(b)
}

impl Security {
    /// Settings for a cluster: TLS material if `pki`, the admin user and
    /// `users` if `authenticate`.
    pub(crate) fn new(
        pki: Option<Pki>,
        authenticate: bool,
        mode: Mode,
        users: &[TokenUser],
    ) -> Self {
        let s = Self {
            pki,
            authenticate,
            mode,
            admin_token: random_token(24),
            ..Self::default()
        };
        s.add_user(TokenUser {
            token: s.admin_token.clone(),
            name: ADMIN_USER.into(),
            groups: vec!["system:masters".into()],
        });
        for u in users {
            s.add_user(u.clone());
        }
        s
    }

    /// Adds (or replaces) a static token user.
    pub(crate) fn add_user(&self, u: TokenUser) {
        self.users.lock().insert(
            u.token,
            UserInfo {
                name: u.name,
                groups: u.groups,
                ..UserInfo::default()
            }
            .authenticated(),
        );
    }

    /// Records a decision (while fewer than [`AUDIT_LIMIT`] are kept).
    pub(crate) fn record(&self, user: &UserInfo, attributes: &Attributes, allowed: bool) {
        let mut audit = self.audit.lock();
        if audit.len() < AUDIT_LIMIT {
            audit.push(AuditRecord {
                user: user.name.clone(),
                attributes: attributes.clone(),
                allowed,
            });
        }
    }

    /// The decisions recorded so far.
    pub(crate) fn audit_log(&self) -> Vec<AuditRecord> {
        self.audit.lock().clone()
    }

    /// Whether authentication or RBAC is on.
    pub(crate) fn enforcing(&self) -> bool {
        self.authenticate || self.mode == Mode::Rbac
    }
}

/// Authenticates a request; `Err` is the 401 to answer.
pub(crate) fn authenticate(
    cs: &ClusterState,
    headers: &HeaderMap,
    peer: Option<&ConnectInfo<Peer>>,
    path: &str,
) -> ApiResult<UserInfo> {
    let sec = &cs.security;
    if !sec.authenticate {
        return Ok(UserInfo::anonymous());
    }
    if let Some(cert) = peer.and_then(|p| p.0.client_cert.as_ref())
        && let Some((cn, orgs)) = crate::tls::subject(cert)
        && !cn.is_empty()
    {
        return Ok(UserInfo {
            name: cn,
            groups: orgs,
            ..UserInfo::default()
        }
        .authenticated());
    }
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        let token = auth
            .to_str()
            .ok()
            .and_then(|v| {
                let (scheme, t) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| t.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or_else(unauthorized)?;
        return token_user(cs, token).ok_or_else(unauthorized);
    }
    if matches!(
        path,
        "/healthz" | "/livez" | "/readyz" | "/version" | "/version/"
    ) {
        return Ok(UserInfo::anonymous());
    }
    Err(unauthorized())
}

/// Applies `Impersonate-User` / `Impersonate-Group` headers (`kubectl
/// --as`, `--as-group`): the authenticated user needs `impersonate` on
/// `users`, `serviceaccounts` or `groups`, as in the apiserver's
/// impersonation filter.
pub(crate) fn impersonate(
    cs: &ClusterState,
    user: UserInfo,
    headers: &HeaderMap,
) -> ApiResult<UserInfo> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let groups = values("impersonate-group");
    let Some(name) = values("impersonate-user").into_iter().next() else {
        if groups.is_empty() {
            return Ok(user);
        }
        return Err(ApiError::bad_request(format!(
            "requested {groups:?} without impersonating a user"
        )));
    };
    let check = |a: Attributes| -> ApiResult<()> {
        let d = rbac::authorize(cs.security.mode, &cs.store, &user, &a);
        if d.allowed {
            Ok(())
        } else {
            Err(a.forbidden(&user.name, &d.reason))
        }
    };
    let target = |resource: &str, namespace: &str, name: &str| Attributes {
        verb: "impersonate".into(),
        resource_request: true,
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Attributes::default()
    };
    let sa = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    match sa {
        Some((ns, sa)) => check(target("serviceaccounts", ns, sa))?,
        None => check(target("users", "", &name))?,
    }
    for g in &groups {
        check(target("groups", "", g))?;
    }
    let sa_namespace = sa.map(|(ns, _)| ns.to_string());
    let mut as_user = UserInfo {
        name: name.clone(),
        groups,
        ..UserInfo::default()
    };
    if let Some(ns) = sa_namespace
        && as_user.groups.is_empty()
    {
        as_user.groups = vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
        ];
    }
    Ok(if as_user.name == "system:anonymous" {
        as_user.groups.push("system:unauthenticated".into());
        as_user
    } else {
        as_user.authenticated()
    })
}

/// The user a bearer token authenticates, if any.
fn token_user(cs: &ClusterState, token: &str) -> Option<UserInfo> {
    let sec = &cs.security;
    if let Some(u) = sec.users.lock().get(token) {
        return Some(u.clone());
    }
    let t = sec.issued.lock().get(token).cloned()?;
    if t.expires <= chrono::Utc::now() {
        return None;
    }
    // Bound to the ServiceAccount's UID: a deleted (or recreated) account
    // invalidates its tokens.
    let uid = service_account_uid(cs, &t.namespace, &t.name)?;
    if uid != t.uid {
        return None;
    }
    Some(service_account_user(&t))
}

fn service_account_user(t: &IssuedToken) -> UserInfo {
    UserInfo {
        name: format!("system:serviceaccount:{}:{}", t.namespace, t.name),
        uid: t.uid.clone(),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", t.namespace),
        ],
        extra: BTreeMap::from([(
            "authentication.kubernetes.io/credential-id".to_string(),
            vec![format!("JTI={}", t.jti)],
        )]),
    }
    .authenticated()
}

fn service_account_uid(cs: &ClusterState, ns: &str, name: &str) -> Option<String> {
    cs.store.read(|i| {
        let res = i.registry.get("", "v1", "serviceaccounts")?;
        let sa = i.get(&res, Some(ns), name).ok()?;
        sa.pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

/// 401 as the apiserver answers it.
pub(crate) fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// Issues a ServiceAccount token (TokenRequest), `expiration_seconds`
/// long. Fails with 404 when the ServiceAccount does not exist.
pub(crate) fn issue_token(
    cs: &ClusterState,
    ns: &str,
    name: &str,
    expiration_seconds: i64,
    audiences: &[String],
) -> ApiResult<(String, chrono::DateTime<chrono::Utc>)> {
    let uid = cs.store.read(|i| {
        let res = i
            .registry
            .get("", "v1", "serviceaccounts")
            .ok_or_else(ApiError::unknown_path)?;
        let sa = i.get(&res, Some(ns), name)?;
        Ok::<_, ApiError>(
            sa.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        )
    })?;
    let now = chrono::Utc::now();
    let expires = now + chrono::Duration::seconds(expiration_seconds);
    let jti = uuid::Uuid::new_v4().to_string();
    let header = json!({"alg": "RS256", "kid": format!("kube-sim-{}", cs.name)});
    let claims = json!({
        "aud": audiences,
        "exp": expires.timestamp(),
        "iat": now.timestamp(),
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": jti,
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": uid}},
        "nbf": now.timestamp(),
        "sub": format!("system:serviceaccount:{ns}:{name}"),
    });
    let enc = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap_or_default());
    let token = format!("{}.{}.{}", enc(&header), enc(&claims), random_token(64));
    cs.security.issued.lock().insert(
        token.clone(),
        IssuedToken {
            namespace: ns.to_string(),
            name: name.to_string(),
            uid,
            jti,
            expires,
        },
    );
    Ok((token, expires))
}

/// Whether `a` names an endpoint served here rather than by the store.
pub(crate) fn is_virtual(a: &Attributes) -> bool {
    if !a.resource_request || a.version != "v1" {
        return false;
    }
    match a.group.as_str() {
        "authorization.k8s.io" => matches!(
            a.resource.as_str(),
            "selfsubjectaccessreviews"
                | "subjectaccessreviews"
                | "localsubjectaccessreviews"
                | "selfsubjectrulesreviews"
        ),
        "authentication.k8s.io" => {
            matches!(a.resource.as_str(), "selfsubjectreviews" | "tokenreviews")
        }
        "" => a.resource == "serviceaccounts" && a.subresource == "token",
        _ => false,
    }
}

/// Serves a review or TokenRequest (`is_virtual`); `body` is the parsed
/// request body. Answers `(status, body)`.
pub(crate) fn serve_virtual(
    cs: &ClusterState,
    user: &UserInfo,
    a: &Attributes,
    body: Value,
) -> ApiResult<(u16, Value)> {
    if a.verb != "create" || (!a.name.is_empty() && a.subresource.is_empty()) {
        return Err(ApiError::method_not_allowed());
    }
    let mode = cs.security.mode;
    let reply = |kind: &str, group: &str, mut body: Value, status: Value| {
        body["kind"] = json!(kind);
        body["apiVersion"] = json!(format!("{group}/v1"));
        let mut meta = body
            .get("metadata")
            .filter(|m| m.is_object())
            .cloned()
            .unwrap_or_else(|| json!({}));
        meta["creationTimestamp"] = Value::Null;
        body["metadata"] = meta;
        if body.get("spec").is_none_or(|s| !s.is_object()) {
            body["spec"] = json!({});
        }
        body["status"] = status;
        Ok((201, body))
    };
    let invalid = |kind: &str, group: &str, field: &str, msg: &str| {
        ApiError::invalid(
            kind,
            group,
            "",
            &[("FieldValueInvalid", field.to_string(), msg.to_string())],
        )
    };
    let spec = body.get("spec").cloned().unwrap_or(Value::Null);
    let access = |kind: &str, who: &UserInfo, spec: &Value| -> ApiResult<Value> {
        let attrs = Attributes::from_review_spec(spec).ok_or_else(|| {
            invalid(
                kind,
                "authorization.k8s.io",
                "spec.resourceAttributes",
                "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )
        })?;
        let d = rbac::authorize(mode, &cs.store, who, &attrs);
        let mut status = json!({"allowed": d.allowed});
        if !d.reason.is_empty() {
            status["reason"] = json!(d.reason);
        }
        Ok(status)
    };
    match (a.group.as_str(), a.resource.as_str()) {
        ("authentication.k8s.io", "selfsubjectreviews") => reply(
            "SelfSubjectReview",
            "authentication.k8s.io",
            body,
            json!({"userInfo": user.to_json()}),
        ),
        ("authentication.k8s.io", "tokenreviews") => {
            let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
            let status = match token_user(cs, token).filter(|_| cs.security.authenticate) {
                Some(u) => json!({"authenticated": true, "user": u.to_json(),
                                  "audiences": ["https://kubernetes.default.svc.cluster.local"]}),
                None => json!({"user": {}, "error": "invalid bearer token"}),
            };
            reply("TokenReview", "authentication.k8s.io", body, status)
        }
        ("authorization.k8s.io", "selfsubjectaccessreviews") => {
            let status = access("SelfSubjectAccessReview", user, &spec)?;
            reply(
                "SelfSubjectAccessReview",
                "authorization.k8s.io",
                body,
                status,
            )
        }
        ("authorization.k8s.io", kind @ ("subjectaccessreviews" | "localsubjectaccessreviews")) => {
            let kind = if kind == "subjectaccessreviews" {
                "SubjectAccessReview"
            } else {
                "LocalSubjectAccessReview"
            };
            let strs = |k: &str| -> Vec<String> {
                spec.get(k)
                    .and_then(Value::as_array)
                    .map(|v| {
                        v.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let subject = UserInfo {
                name: spec
                    .get("user")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                uid: spec
                    .get("uid")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                groups: strs("groups"),
                extra: BTreeMap::new(),
            };
            if subject.name.is_empty() && subject.groups.is_empty() {
                return Err(invalid(
                    kind,
                    "authorization.k8s.io",
                    "spec.user",
                    "Invalid value: \"\": at least one of user or group must be specified",
                ));
            }
            if kind == "LocalSubjectAccessReview" {
                let ns = spec
                    .pointer("/resourceAttributes/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if ns != a.namespace {
                    return Err(invalid(
                        kind,
                        "authorization.k8s.io",
                        "spec.resourceAttributes.namespace",
                        &format!("Invalid value: {ns:?}: must match metadata.namespace"),
                    ));
                }
            }
            let status = access(kind, &subject, &spec)?;
            reply(kind, "authorization.k8s.io", body, status)
        }
        ("authorization.k8s.io", "selfsubjectrulesreviews") => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            let status = rbac::rules_review(mode, &cs.store, user, ns);
            reply(
                "SelfSubjectRulesReview",
                "authorization.k8s.io",
                body,
                status,
            )
        }
        ("", "serviceaccounts") => token_request(cs, a, body),
        _ => Err(ApiError::unknown_path()),
    }
}

/// `POST .../serviceaccounts/<name>/token`.
fn token_request(cs: &ClusterState, a: &Attributes, mut body: Value) -> ApiResult<(u16, Value)> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let seconds = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    if seconds < 600 {
        return Err(ApiError::invalid(
            "TokenRequest",
            "authentication.k8s.io",
            &a.name,
            &[(
                "FieldValueInvalid",
                "spec.expirationSeconds".into(),
                format!(
                    "Invalid value: {seconds}: may not specify a duration less than 10 minutes"
                ),
            )],
        ));
    }
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|v| {
            v.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .filter(|v: &Vec<String>| !v.is_empty())
        .unwrap_or_else(|| vec!["https://kubernetes.default.svc.cluster.local".into()]);
    let (token, expires) = issue_token(cs, &a.namespace, &a.name, seconds, &audiences)?;
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    body["kind"] = json!("TokenRequest");
    body["apiVersion"] = json!("authentication.k8s.io/v1");
    body["metadata"] = json!({"name": a.name, "namespace": a.namespace, "creationTimestamp": now});
    let mut spec = spec;
    spec["audiences"] = json!(audiences);
    spec["expirationSeconds"] = json!(seconds);
    if spec.get("boundObjectRef").is_none() {
        spec["boundObjectRef"] = Value::Null;
    }
    body["spec"] = spec;
    body["status"] = json!({
        "token": token,
        "expirationTimestamp": expires.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    Ok((201, body))
}

/// Resources of the virtual groups, for discovery.
fn virtual_resources(group: &str) -> Option<Value> {
    let r = |name: &str, kind: &str, namespaced: bool| json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["create"]});
    match group {
        "authentication.k8s.io" => Some(json!([
            r("selfsubjectreviews", "SelfSubjectReview", false),
            r("tokenreviews", "TokenReview", false)
        ])),
        "authorization.k8s.io" => Some(json!([
            r(
                "localsubjectaccessreviews",
                "LocalSubjectAccessReview",
                true
            ),
            r("selfsubjectaccessreviews", "SelfSubjectAccessReview", false),
            r("selfsubjectrulesreviews", "SelfSubjectRulesReview", false),
            r("subjectaccessreviews", "SubjectAccessReview", false)
        ])),
        _ => None,
    }
}

const VIRTUAL_GROUPS: [&str; 2] = ["authentication.k8s.io", "authorization.k8s.io"];

fn group_json(g: &str) -> Value {
    let gv = json!({"groupVersion": format!("{g}/v1"), "version": "v1"});
    json!({"name": g, "versions": [gv], "preferredVersion": gv})
}

/// Adds the review groups to `/apis`.
pub(crate) fn discovery_group_list(list: &mut Value) {
    if let Some(groups) = list.get_mut("groups").and_then(Value::as_array_mut) {
        for g in VIRTUAL_GROUPS {
            if !groups.iter().any(|x| x["name"] == g) {
                groups.push(group_json(g));
            }
        }
    }
}

/// `/apis/<group>` of a review group.
pub(crate) fn discovery_group(g: &str) -> Option<Value> {
    VIRTUAL_GROUPS.contains(&g).then(|| {
        let mut v = group_json(g);
        v["kind"] = json!("APIGroup");
        v["apiVersion"] = json!("v1");
        v
    })
}

/// `/apis/<group>/v1` of a review group, or `/api/v1` with
/// `serviceaccounts/token` added.
pub(crate) fn discovery_resources(g: &str, v: &str, served: Option<Value>) -> Option<Value> {
    if g.is_empty() && v == "v1" {
        let mut list = served?;
        if let Some(rs) = list.get_mut("resources").and_then(Value::as_array_mut) {
            rs.push(
                json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                           "group": "authentication.k8s.io", "version": "v1",
                           "kind": "TokenRequest", "verbs": ["create"]}),
            );
        }
        return Some(list);
    }
    if v != "v1" {
        return served;
    }
    virtual_resources(g)
        .map(|resources| {
            json!({"kind": "APIResourceList", "apiVersion": "v1",
                   "groupVersion": format!("{g}/v1"), "resources": resources})
        })
        .or(served)
}
