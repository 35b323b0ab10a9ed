//! Authorization: request attributes and the RBAC authorizer.
//!
//! [`Attributes::from_request`] derives what the apiserver's
//! `RequestInfoFactory` derives (verb, API group, resource, subresource,
//! name, namespace, or a non-resource path). [`authorize`] evaluates them
//! against the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings
//! in the store the way `plugin/pkg/auth/authorizer/rbac` does: verbs,
//! groups and resources match exactly or by `*`, `*/sub` matches a
//! subresource of any resource, resourceNames restrict to named objects,
//! non-resource URLs match exactly, by `*`, or by a `prefix*`. ClusterRoles
//! with an `aggregationRule` take the rules of the ClusterRoles their
//! selectors match. [`confirm_no_escalation`] keeps a subject from
//! granting, through a role or binding it writes, what it does not hold.
//!
//! The bootstrap policy every cluster has (`cluster-admin` bound to
//! `system:masters`, `system:discovery`, `system:basic-user`,
//! `system:public-info-viewer`) is built in: it is evaluated but not
//! stored, so it survives `/_sim/reset` and is not listed by `kubectl get`.
//! Members of `system:masters` are allowed everything before RBAC is
//! asked, as the apiserver's privileged-group authorizer does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::auth::UserInfo;
use crate::error::ApiError;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{ListOpts, Store};

/// What a request asks to do (`authorizer.Attributes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; for non-resource requests the lowercase method.
    pub verb: String,
    /// A resource request (under `/api/v1` or `/apis/<g>/<v>` with a
    /// resource); otherwise [`Attributes::path`] applies.
    pub resource_request: bool,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Object name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Path of a non-resource request.
    pub path: String,
}

impl Attributes {
    /// Parses a request like the apiserver's `RequestInfoFactory`.
    pub fn from_request(method: &str, path: &str, query: Option<&str>) -> Self {
        let mut a = Attributes {
            verb: method.to_ascii_lowercase(),
            path: path.to_string(),
            ..Default::default()
        };
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let mut rest: &[&str] = match parts.as_slice() {
            ["api", v, rest @ ..] => {
                a.version = (*v).to_string();
                rest
            }
            ["apis", g, v, rest @ ..] => {
                a.group = (*g).to_string();
                a.version = (*v).to_string();
                rest
            }
            _ => return a,
        };
        if rest.is_empty() {
            a.group.clear();
            a.version.clear();
            return a;
        }
        a.resource_request = true;
        let query: Vec<(String, String)> = query
            .map(|q| {
                q.split('&')
                    .filter_map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                        Some((unescape(k)?, unescape(v)?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let param = |k: &str| query.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v);
        let mut watch_path = false;
        if rest.first() == Some(&"watch") {
            watch_path = true;
            rest = &rest[1..];
        }
        a.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
        if watch_path {
            a.verb = "watch".into();
        }
        if rest.first() == Some(&"namespaces")
            && let Some(ns) = rest.get(1)
        {
            a.namespace = (*ns).to_string();
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        if let Some(r) = rest.first() {
            a.resource = (*r).to_string();
        }
        if let Some(n) = rest.get(1) {
            a.name = (*n).to_string();
        }
        if let Some(s) = rest.get(2) {
            a.subresource = (*s).to_string();
        }
        if a.name.is_empty() && a.verb == "get" {
            let watch = param("watch").is_some_and(|v| go_bool(v));
            a.verb = if watch { "watch" } else { "list" }.into();
            if let Some(fs) = param("fieldSelector")
                && let Some(name) = exact_name(fs)
            {
                a.name = name;
            }
        }
        if a.name.is_empty() && a.verb == "delete" {
            a.verb = "deletecollection".into();
        }
        a
    }

    /// The same request with another verb (create-on-update checks).
    pub fn with_verb(&self, verb: &str) -> Self {
        Self {
            verb: verb.to_string(),
            ..self.clone()
        }
    }

    /// Attributes of a `SubjectAccessReview`'s `spec.resourceAttributes`
    /// or `spec.nonResourceAttributes`.
    pub fn from_review_spec(spec: &Value) -> Option<Self> {
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        if let Some(r) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
            return Some(Self {
                verb: s(r, "verb"),
                resource_request: true,
                group: s(r, "group"),
                version: s(r, "version"),
                resource: s(r, "resource"),
                subresource: s(r, "subresource"),
                name: s(r, "name"),
                namespace: s(r, "namespace"),
                path: String::new(),
            });
        }
        let n = spec
            .get("nonResourceAttributes")
            .filter(|v| v.is_object())?;
        Some(Self {
            verb: s(n, "verb"),
            path: s(n, "path"),
            ..Default::default()
        })
    }

    /// The 403 the apiserver answers for a denied request
    /// (`responsewriters.Forbidden`); `reason` is the authorizer's.
    pub fn forbidden(&self, user: &str, reason: &str) -> ApiError {
        let mut msg = if !self.resource_request {
            format!("User {user:?} cannot {} path {:?}", self.verb, self.path)
        } else {
            let mut resource = self.resource.clone();
            if !self.subresource.is_empty() {
                resource = format!("{resource}/{}", self.subresource);
            }
            if self.namespace.is_empty() {
                format!(
                    "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
                    self.verb, self.group
                )
            } else {
                format!(
                    "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
                    self.verb, self.group, self.namespace
                )
            }
        };
        if !reason.is_empty() {
            msg = format!("{msg}: {reason}");
        }
        let message = if !self.resource_request || self.resource.is_empty() {
            format!("forbidden: {msg}")
        } else {
            let gr = if self.group.is_empty() {
                self.resource.clone()
            } else {
                format!("{}.{}", self.resource, self.group)
            };
            if self.name.is_empty() {
                format!("{gr} is forbidden: {msg}")
            } else {
                format!("{gr} {:?} is forbidden: {msg}", self.name)
            }
        };
        let mut details = serde_json::Map::new();
        if !self.name.is_empty() {
            details.insert("name".into(), json!(self.name));
        }
        if !self.group.is_empty() {
            details.insert("group".into(), json!(self.group));
        }
        if !self.resource.is_empty() {
            details.insert("kind".into(), json!(self.resource));
        }
        let mut e = ApiError::new(403, "Forbidden", message);
        e.details = Some(Box::new(Value::Object(details)));
        e
    }
}

/// Go `strconv.ParseBool` truthiness.
fn go_bool(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// `metadata.name=x` / `metadata.name==x` as the only requirement.
fn exact_name(selector: &str) -> Option<String> {
    if selector.contains(',') {
        return None;
    }
    let (k, v) = selector
        .split_once("==")
        .or_else(|| selector.split_once('='))?;
    (k.trim() == "metadata.name" && !v.is_empty() && !v.starts_with('=') && !v.contains('/'))
        .then(|| v.trim().to_string())
}

fn unescape(s: &str) -> Option<String> {
    let s = s.replace('+', " ");
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let h = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// An authorization decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allowed.
    pub allowed: bool,
    /// `RBAC: allowed by ...` when allowed; resolution errors otherwise.
    pub reason: String,
}

/// One rule of a role (`rbacv1.PolicyRule`).
#[derive(Debug, Clone, Default)]
pub struct Rule {
    verbs: Vec<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    names: Vec<String>,
    urls: Vec<String>,
}

impl Rule {
    fn from_json(v: &Value) -> Self {
        let list = |k: &str| crate::store::strings(v.get(k));
        Self {
            verbs: list("verbs"),
            groups: list("apiGroups"),
            resources: list("resources"),
            names: list("resourceNames"),
            urls: list("nonResourceURLs"),
        }
    }

    /// `rbac.RuleAllows`.
    fn allows(&self, a: &Attributes) -> bool {
        let has = |l: &[String], x: &str| l.iter().any(|v| v == "*" || v == x);
        if !has(&self.verbs, &a.verb) {
            return false;
        }
        if !a.resource_request {
            return self.urls.iter().any(|u| {
                u == "*"
                    || *u == a.path
                    || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
            });
        }
        let combined = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        has(&self.groups, &a.group)
            && self.resources.iter().any(|r| {
                r == "*"
                    || *r == combined
                    || (!a.subresource.is_empty()
                        && r.strip_prefix("*/") == Some(a.subresource.as_str()))
            })
            && (self.names.is_empty() || (!a.name.is_empty() && self.names.contains(&a.name)))
    }

    /// The rule as `SelfSubjectRulesReview` reports it.
    fn review_json(&self) -> (Option<Value>, Option<Value>) {
        let resource = (!self.resources.is_empty()).then(|| {
            let mut m = serde_json::Map::new();
            m.insert("verbs".into(), json!(self.verbs));
            m.insert("apiGroups".into(), json!(self.groups));
            m.insert("resources".into(), json!(self.resources));
            if !self.names.is_empty() {
                m.insert("resourceNames".into(), json!(self.names));
            }
            Value::Object(m)
        });
        let non_resource = (!self.urls.is_empty())
            .then(|| json!({"verbs": self.verbs, "nonResourceURLs": self.urls}));
        (resource, non_resource)
    }
}

/// A role binding as the authorizer reads it.
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    /// Empty for ClusterRoleBindings.
    namespace: String,
    role_kind: String,
    role_name: String,
    subjects: Vec<Subject>,
}

#[derive(Debug, Clone)]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

impl Subject {
    /// `rbac.appliesToUser`.
    fn applies_to(&self, user: &UserInfo, binding_ns: &str) -> bool {
        match self.kind.as_str() {
            "User" => self.name == user.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_ns
                } else {
                    &self.namespace
                };
                user.name == format!("system:serviceaccount:{ns}:{}", self.name)
            }
            _ => false,
        }
    }

    fn describe(&self, binding_ns: &str) -> String {
        if self.kind == "ServiceAccount" {
            let ns = if self.namespace.is_empty() {
                binding_ns
            } else {
                &self.namespace
            };
            format!("{} {:?}", self.kind, format!("{}/{ns}", self.name))
        } else {
            format!("{} {:?}", self.kind, self.name)
        }
    }
}

impl Binding {
    fn from_json(v: &Value) -> Self {
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        Self {
            name: s("/metadata/name"),
            namespace: s("/metadata/namespace"),
            role_kind: s("/roleRef/kind"),
            role_name: s("/roleRef/name"),
            subjects: v
                .get("subjects")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|x| {
                            let s = |k: &str| x.get(k).and_then(Value::as_str).unwrap_or("");
                            Subject {
                                kind: s("kind").into(),
                                name: s("name").into(),
                                namespace: s("namespace").into(),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    fn describe(&self, subject: &Subject) -> String {
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                self.name,
                self.role_kind,
                self.role_name,
                subject.describe("")
            )
        } else {
            format!(
                "RoleBinding {:?} of {} {:?} to {}",
                format!("{}/{}", self.name, self.namespace),
                self.role_kind,
                self.role_name,
                subject.describe(&self.namespace)
            )
        }
    }
}

/// The policy objects an authorization decision reads, snapshotted from
/// the store.
struct Policy {
    cluster_roles: HashMap<String, Arc<Value>>,
    roles: HashMap<(String, String), Arc<Value>>,
    cluster_bindings: Vec<Binding>,
    bindings: Vec<Binding>,
}

const RBAC: &str = "rbac.authorization.k8s.io";

impl Policy {
    fn load(store: &Store, namespace: &str) -> Self {
        let list = |plural: &str, ns: Option<&str>| -> Vec<Arc<Value>> {
            store.read(|i| {
                let Some(res) = i.registry.get(RBAC, "v1", plural) else {
                    return Vec::new();
                };
                i.list(
                    &res,
                    ns,
                    &LabelSelector::default(),
                    &FieldSelector::default(),
                    &ListOpts::default(),
                )
                .map(|l| l.items)
                .unwrap_or_default()
            })
        };
        let name = |v: &Value, p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let mut cluster_roles: HashMap<String, Arc<Value>> = bootstrap_roles()
            .into_iter()
            .map(|r| (name(&r, "/metadata/name"), Arc::new(r)))
            .collect();
        for r in list("clusterroles", None) {
            cluster_roles.insert(name(&r, "/metadata/name"), r);
        }
        let mut cluster_bindings: Vec<Binding> = bootstrap_bindings()
            .iter()
            .map(Binding::from_json)
            .collect();
        cluster_bindings.extend(
            list("clusterrolebindings", None)
                .iter()
                .map(|b| Binding::from_json(b)),
        );
        let (roles, bindings) = if namespace.is_empty() {
            (HashMap::new(), Vec::new())
        } else {
            (
                list("roles", Some(namespace))
                    .into_iter()
                    .map(|r| ((namespace.to_string(), name(&r, "/metadata/name")), r))
                    .collect(),
                list("rolebindings", Some(namespace))
                    .iter()
                    .map(|b| Binding::from_json(b))
                    .collect(),
            )
        };
        Self {
            cluster_roles,
            roles,
            cluster_bindings,
            bindings,
        }
    }

    /// The rules of a ClusterRole, following its aggregationRule.
    fn cluster_role_rules(&self, name: &str) -> Result<Vec<Rule>, String> {
        let role = self
            .cluster_roles
            .get(name)
            .ok_or_else(|| format!("clusterrole.{RBAC} {name:?} not found"))?;
        let mut rules = rules_of(role);
        if let Some(selectors) = role
            .pointer("/aggregationRule/clusterRoleSelectors")
            .and_then(Value::as_array)
        {
            for sel in selectors {
                let labels = sel.get("matchLabels").and_then(Value::as_object);
                for (other, r) in &self.cluster_roles {
                    if other == name {
                        continue;
                    }
                    let have = r.pointer("/metadata/labels").and_then(Value::as_object);
                    let matches = labels.is_some_and(|want| {
                        !want.is_empty()
                            && want
                                .iter()
                                .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
                    });
                    if matches {
                        rules.extend(rules_of(r));
                    }
                }
            }
        }
        Ok(rules)
    }

    fn binding_rules(&self, b: &Binding) -> Result<Vec<Rule>, String> {
        match b.role_kind.as_str() {
            "ClusterRole" => self.cluster_role_rules(&b.role_name),
            "Role" if !b.namespace.is_empty() => self
                .roles
                .get(&(b.namespace.clone(), b.role_name.clone()))
                .map(|r| rules_of(r))
                .ok_or_else(|| format!("role.{RBAC} {:?} not found", b.role_name)),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    /// `DefaultRuleResolver.VisitRulesFor`: every rule that applies to
    /// `user` in `namespace`, with where it came from; stops when `visit`
    /// returns false.
    fn visit(
        &self,
        user: &UserInfo,
        errors: &mut Vec<String>,
        mut visit: impl FnMut(&str, &Rule) -> bool,
    ) {
        for b in self.cluster_bindings.iter().chain(&self.bindings) {
            let Some(subject) = b.subjects.iter().find(|s| s.applies_to(user, &b.namespace)) else {
                continue;
            };
            match self.binding_rules(b) {
                Ok(rules) => {
                    let source = b.describe(subject);
                    for r in &rules {
                        if !visit(&source, r) {
                            return;
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
    }
}

fn rules_of(role: &Value) -> Vec<Rule> {
    role.get("rules")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(Rule::from_json).collect())
        .unwrap_or_default()
}

/// How a cluster authorizes requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every request is allowed (`--authorization-mode=AlwaysAllow`).
    #[default]
    AlwaysAllow,
    /// `system:masters` and RBAC (`--authorization-mode=RBAC`).
    Rbac,
}

/// Decides whether `user` may do `a`.
pub fn authorize(mode: Mode, store: &Store, user: &UserInfo, a: &Attributes) -> Decision {
    let allow = |reason: String| Decision {
        allowed: true,
        reason,
    };
    if mode == Mode::AlwaysAllow || user.groups.iter().any(|g| g == "system:masters") {
        return allow(String::new());
    }
    let policy = Policy::load(store, &a.namespace);
    let mut errors = Vec::new();
    let mut reason = None;
    policy.visit(user, &mut errors, |source, rule| {
        if rule.allows(a) {
            reason = Some(format!("RBAC: allowed by {source}"));
            return false;
        }
        true
    });
    match reason {
        Some(r) => allow(r),
        None => Decision {
            allowed: false,
            reason: match errors.len() {
                0 => String::new(),
                1 => format!("RBAC: {}", errors[0]),
                _ => format!("RBAC: [{}]", errors.join(", ")),
            },
        },
    }
}

/// Whether [`confirm_no_escalation`] applies to a request: a create or
/// replace of an RBAC object under RBAC authorization.
pub fn checks_escalation(mode: Mode, a: &Attributes) -> bool {
    mode == Mode::Rbac
        && a.group == RBAC
        && a.subresource.is_empty()
        && matches!(a.verb.as_str(), "create" | "update")
        && matches!(
            a.resource.as_str(),
            "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings"
        )
}

/// Privilege-escalation prevention for RBAC writes
/// (`rbac/validation.ConfirmNoEscalation`): creating or replacing a Role or
/// ClusterRole needs `escalate` on it or every permission it grants;
/// creating or replacing a binding needs `bind` on the role it references
/// or every permission of that role, in the binding's namespace (cluster
/// wide for ClusterRoleBindings). `system:masters` may do anything.
/// Patches are not checked.
///
/// # Errors
/// 403 naming the permissions not held, as the apiserver words it.
pub fn confirm_no_escalation(
    mode: Mode,
    store: &Store,
    user: &UserInfo,
    a: &Attributes,
    body: &Value,
) -> Result<(), ApiError> {
    if !checks_escalation(mode, a) || user.groups.iter().any(|g| g == "system:masters") {
        return Ok(());
    }
    let kind = a.resource.as_str();
    let allowed = |attrs: &Attributes| authorize(mode, store, user, attrs).allowed;
    let name = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or(&a.name);
    let namespace = a.namespace.clone();
    let (rules, errors) = match kind {
        "roles" | "clusterroles" => {
            if allowed(&a.with_verb("escalate")) {
                return Ok(());
            }
            (rules_of(body), Vec::new())
        }
        _ => {
            let role_kind = body
                .pointer("/roleRef/kind")
                .and_then(Value::as_str)
                .unwrap_or("");
            let role_name = body
                .pointer("/roleRef/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let bind = Attributes {
                verb: "bind".into(),
                resource_request: true,
                group: RBAC.into(),
                resource: if role_kind == "Role" {
                    "roles"
                } else {
                    "clusterroles"
                }
                .into(),
                name: role_name.into(),
                namespace: namespace.clone(),
                ..Attributes::default()
            };
            if allowed(&bind) {
                return Ok(());
            }
            let policy = Policy::load(store, &namespace);
            let binding = Binding {
                name: name.to_string(),
                namespace: namespace.clone(),
                role_kind: role_kind.into(),
                role_name: role_name.into(),
                subjects: Vec::new(),
            };
            match policy.binding_rules(&binding) {
                Ok(rules) => (rules, Vec::new()),
                Err(e) => (Vec::new(), vec![e]),
            }
        }
    };
    // Each permission granted, one verb (and name) at a time.
    let mut missing: Vec<(String, Vec<String>)> = Vec::new();
    let mut note = |key: String, verb: &str| match missing.iter_mut().find(|(k, _)| *k == key) {
        Some((_, verbs)) => {
            if !verbs.iter().any(|v| v == verb) {
                verbs.push(verb.to_string());
            }
        }
        None => missing.push((key, vec![verb.to_string()])),
    };
    let q = |v: &[String]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for rule in &rules {
        for verb in &rule.verbs {
            for url in &rule.urls {
                let atom = Attributes {
                    verb: verb.clone(),
                    path: url.clone(),
                    ..Attributes::default()
                };
                if !allowed(&atom) {
                    note(
                        format!("NonResourceURLs:[{}]", q(std::slice::from_ref(url))),
                        verb,
                    );
                }
            }
            for group in &rule.groups {
                for resource in &rule.resources {
                    let (res, sub) = resource.split_once('/').unwrap_or((resource, ""));
                    let names: Vec<String> = if rule.names.is_empty() {
                        vec![String::new()]
                    } else {
                        rule.names.clone()
                    };
                    for n in &names {
                        let atom = Attributes {
                            verb: verb.clone(),
                            resource_request: true,
                            group: group.clone(),
                            resource: res.into(),
                            subresource: sub.into(),
                            name: n.clone(),
                            namespace: namespace.clone(),
                            ..Attributes::default()
                        };
                        if !allowed(&atom) {
                            let mut key = format!(
                                "APIGroups:[{}], Resources:[{}]",
                                q(std::slice::from_ref(group)),
                                q(std::slice::from_ref(resource))
                            );
                            if !n.is_empty() {
                                key.push_str(&format!(", ResourceNames:[{n:?}]"));
                            }
                            note(key, verb);
                        }
                    }
                }
            }
        }
    }
    if missing.is_empty() && errors.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = missing
        .iter()
        .map(|(k, verbs)| format!("{{{k}, Verbs:[{}]}}", q(verbs)))
        .collect();
    let mut msg = format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        q(&user.groups),
        lines.join("\n")
    );
    if !errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", errors.join(", ")));
    }
    let gr = format!("{kind}.{RBAC}");
    let mut e = ApiError::new(
        403,
        "Forbidden",
        format!("{gr} {name:?} is forbidden: {msg}"),
    );
    e.details = Some(Box::new(json!({"name": name, "group": RBAC, "kind": kind})));
    Err(e)
}

/// `SelfSubjectRulesReview` status: the rules that apply to `user` in
/// `namespace`.
pub fn rules_review(mode: Mode, store: &Store, user: &UserInfo, namespace: &str) -> Value {
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    let mut errors = Vec::new();
    if mode == Mode::AlwaysAllow {
        // The AlwaysAllow authorizer reports everything.
        resource_rules.push(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
        non_resource_rules.push(json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
    } else {
        let policy = Policy::load(store, namespace);
        policy.visit(user, &mut errors, |_, rule| {
            let (r, n) = rule.review_json();
            resource_rules.extend(r);
            non_resource_rules.extend(n);
            true
        });
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": !errors.is_empty(),
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join(", "));
    }
    status
}

/// The bootstrap ClusterRoles (a subset of the apiserver's).
fn bootstrap_roles() -> Vec<Value> {
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name}, "rules": rules})
    };
    vec![
        role(
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}
            ]),
        ),
        role(
            "system:discovery",
            json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz",
                    "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"],
                    "verbs": ["get"]}]),
        ),
        role(
            "system:basic-user",
            json!([
                {"apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                 "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"],
                 "resources": ["selfsubjectreviews"], "verbs": ["create"]}
            ]),
        ),
        role(
            "system:public-info-viewer",
            json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                    "verbs": ["get"]}]),
        ),
    ]
}

/// The bootstrap ClusterRoleBindings of [`bootstrap_roles`].
fn bootstrap_bindings() -> Vec<Value> {
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": RBAC, "kind": "Group", "name": g}))
            .collect();
        json!({"metadata": {"name": name},
               "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
               "subjects": subjects})
    };
    vec![
        binding("cluster-admin", &["system:masters"]),
        binding("system:discovery", &["system:authenticated"]),
        binding("system:basic-user", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}

/// Groups a sorted map of a user's `extra`, for review responses.
pub(crate) fn extra_json(extra: &BTreeMap<String, Vec<String>>) -> Option<Value> {
    (!extra.is_empty()).then(|| json!(extra))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_attributes_follow_request_info() {
        let a = Attributes::from_request("GET", "/api/v1/namespaces/ns/pods", Some("watch=1"));
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.namespace.as_str()),
            ("watch", "pods", "ns")
        );
        let a = Attributes::from_request("PATCH", "/api/v1/nodes/n1/status", None);
        assert_eq!(
            (a.verb.as_str(), a.name.as_str(), a.subresource.as_str()),
            ("patch", "n1", "status")
        );
        let a = Attributes::from_request("GET", "/api/v1/namespaces/ns", None);
        assert_eq!((a.resource.as_str(), a.name.as_str()), ("namespaces", "ns"));
        let a = Attributes::from_request("DELETE", "/apis/apps/v1/namespaces/x/deployments", None);
        assert_eq!(
            (a.verb.as_str(), a.group.as_str()),
            ("deletecollection", "apps")
        );
        let a = Attributes::from_request(
            "GET",
            "/api/v1/namespaces/x/configmaps",
            Some("fieldSelector=metadata.name%3Dcm"),
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "cm"));
        let a = Attributes::from_request("GET", "/apis/apps/v1", None);
        assert!(!a.resource_request);
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/apis/apps/v1"));
    }

    #[test]
    fn forbidden_messages_match_the_apiserver() {
        let a = Attributes::from_request("PATCH", "/api/v1/nodes/n1", None);
        assert_eq!(
            a.forbidden("system:serviceaccount:rekon:rekon", "").message,
            "nodes \"n1\" is forbidden: User \"system:serviceaccount:rekon:rekon\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
        );
        let a = Attributes::from_request("GET", "/apis/apps/v1/namespaces/d/deployments", None);
        assert_eq!(
            a.forbidden("u", "").message,
            "deployments.apps is forbidden: User \"u\" cannot list resource \"deployments\" in API group \"apps\" in the namespace \"d\""
        );
        let a = Attributes::from_request("GET", "/metrics", None);
        assert_eq!(
            a.forbidden("u", "").message,
            "forbidden: User \"u\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn rules_match_like_rbac() {
        let rule = |v: Value| Rule::from_json(&v);
        let get_status = Attributes::from_request("GET", "/api/v1/nodes/n1/status", None);
        assert!(
            rule(json!({"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get"]}))
                .allows(&get_status)
        );
        assert!(
            !rule(json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}))
                .allows(&get_status)
        );
        assert!(
            rule(json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]}))
                .allows(&get_status)
        );
        let named = rule(
            json!({"apiGroups": [""], "resources": ["nodes"], "resourceNames": ["n1"], "verbs": ["get", "list"]}),
        );
        assert!(named.allows(&Attributes::from_request("GET", "/api/v1/nodes/n1", None)));
        assert!(!named.allows(&Attributes::from_request("GET", "/api/v1/nodes/n2", None)));
        assert!(!named.allows(&Attributes::from_request("GET", "/api/v1/nodes", None)));
        let urls = rule(json!({"nonResourceURLs": ["/healthz/*", "/version"], "verbs": ["get"]}));
        assert!(urls.allows(&Attributes::from_request("GET", "/healthz/ping", None)));
        assert!(urls.allows(&Attributes::from_request("GET", "/version", None)));
        assert!(!urls.allows(&Attributes::from_request("GET", "/metrics", None)));
    }
}
