//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
//! (admissionregistration.k8s.io/v1), evaluated as the API server's
//! validating policy plugin does (`plugin/policy/validating`): the policy's
//! `matchConstraints` and the binding's `matchResources` (resource rules
//! with `/status` and `*`, exclusions, `resourceNames`, scope, operations,
//! `namespaceSelector`, `objectSelector`, `matchPolicy: Equivalent`), the
//! params of `paramKind` / `paramRef` (name or selector, namespace,
//! `parameterNotFoundAction`), then per param `matchConditions`,
//! `variables`, `validations` (`message`, `messageExpression`, `reason`)
//! and `auditAnnotations`, with the policy's `failurePolicy`. A failure
//! goes where the binding's `validationActions` say: Deny answers the
//! request with the server's error, Warn adds a `Warning` header, Audit
//! records the `validation.policy.admission.k8s.io/validation_failure`
//! annotation ([`AuditRecord`]).
//!
//! Not modelled: the `authorizer` variable (kube-cel has no authorization
//! library). A policy with an expression using it fails closed: it is run
//! as `failurePolicy: Fail` whatever it says, so each write it applies to
//! is refused (`expression '…' resulted in error: kube-sim does not
//! evaluate the authorizer variable …`) rather than admitted. Nor the type checking that fills a policy's
//! `status.typeChecking`, nor the cost budget.

use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::cel::Value as Cel;
use rekon_rules::cel::policy::{Checks, Decision, Expr, Validation};
use serde_json::{Value, json};

use super::expr;
use crate::error::ApiError;
use crate::resources::ResourceInfo;
use crate::store::Inner;

/// Storage key of the policies.
pub(crate) const POLICIES: &str = "admissionregistration.k8s.io/validatingadmissionpolicies";
/// Storage key of the bindings.
pub(crate) const BINDINGS: &str = "admissionregistration.k8s.io/validatingadmissionpolicybindings";

/// One write as admission sees it.
pub(crate) struct Attributes<'a> {
    /// The resource written (at the version the client used).
    pub res: &'a ResourceInfo,
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    /// Object name (after `generateName`).
    pub name: &'a str,
    /// Namespace, empty for cluster-scoped objects.
    pub namespace: &'a str,
    /// Subresource (`status`, `scale`), empty for the main resource.
    pub subresource: &'a str,
    /// The new object (`None` on DELETE).
    pub object: Option<&'a Value>,
    /// The old object (`None` on CREATE).
    pub old: Option<&'a Value>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The requesting user.
    pub user: &'a crate::auth::UserInfo,
}

/// An Audit action's record: the annotations the server adds to the
/// request's audit event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditRecord {
    /// `CREATE`, `UPDATE`, `DELETE`.
    pub operation: String,
    /// `group/version/resource` of the request.
    pub resource: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// Annotation key → value.
    pub annotations: Vec<(String, String)>,
}

/// What the chain decided besides a denial.
#[derive(Debug, Default)]
pub(crate) struct Admitted {
    /// `Warning` headers (Warn actions).
    pub warnings: Vec<String>,
    /// Audit annotations (Audit actions, `auditAnnotations`).
    pub audit: Option<AuditRecord>,
}

/// A policy, compiled once per resourceVersion.
#[derive(Debug)]
pub(crate) struct Compiled {
    name: String,
    param_kind: Option<(String, String)>,
    match_constraints: Value,
    /// Match conditions, variables, validations (`rekon_rules::cel::policy`,
    /// shared with the SDK's test kit).
    checks: Checks,
    audit_annotations: Vec<(String, Expr)>,
}

impl Compiled {
    fn new(policy: &Value) -> Self {
        let spec = &policy["spec"];
        let list = |k: &str| {
            spec.get(k)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let s = |v: &Value, k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        // Every expression of the policy, to find `authorizer` (fail closed).
        let mut sources = Vec::new();
        for (k, field) in [
            ("matchConditions", "expression"),
            ("variables", "expression"),
            ("validations", "expression"),
            ("validations", "messageExpression"),
            ("auditAnnotations", "valueExpression"),
        ] {
            for x in list(k) {
                sources.push(s(&x, field));
            }
        }
        let authorizer = sources.iter().any(|src| expr::uses_authorizer(src));
        let checks = Checks {
            fail: authorizer || spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
            match_conditions: list("matchConditions")
                .iter()
                .map(|m| (s(m, "name"), Expr::new(&s(m, "expression"))))
                .collect(),
            variables: list("variables")
                .iter()
                .map(|m| (s(m, "name"), Expr::new(&s(m, "expression"))))
                .collect(),
            validations: list("validations")
                .iter()
                .map(|v| Validation {
                    expr: Expr::new(&s(v, "expression")),
                    message: v.get("message").and_then(Value::as_str).map(str::to_string),
                    message_expression: v
                        .get("messageExpression")
                        .and_then(Value::as_str)
                        .filter(|m| !m.is_empty())
                        .map(Expr::new),
                    reason: v.get("reason").and_then(Value::as_str).map(str::to_string),
                })
                .collect(),
        };
        Self {
            name: s(&policy["metadata"], "name"),
            param_kind: spec
                .get("paramKind")
                .filter(|p| p.is_object())
                .map(|p| (s(p, "apiVersion"), s(p, "kind"))),
            match_constraints: spec.get("matchConstraints").cloned().unwrap_or(Value::Null),
            checks,
            audit_annotations: list("auditAnnotations")
                .iter()
                .map(|a| (s(a, "key"), Expr::new(&s(a, "valueExpression"))))
                .collect(),
        }
    }
}

/// Compiled policies by (name, resourceVersion).
pub(crate) type Cache = HashMap<String, (String, Arc<Compiled>)>;

/// A denial waiting to be answered (the first one is).
struct Denied {
    policy: String,
    binding: Option<String>,
    decision: Decision,
}

/// Runs every policy bound to this request. `Err` is the denial.
pub(crate) fn admit(
    inner: &Inner,
    cache: &mut Cache,
    a: &Attributes<'_>,
) -> Result<Admitted, ApiError> {
    let (Some(policies), Some(bindings)) = (inner.objects(POLICIES), inner.objects(BINDINGS))
    else {
        return Ok(Admitted::default());
    };
    if policies.is_empty() || bindings.is_empty() {
        return Ok(Admitted::default());
    }
    let mut out = Admitted::default();
    let mut denied: Vec<Denied> = Vec::new();
    let mut annotations: Vec<(String, String)> = Vec::new();
    for policy in policies.values() {
        let name = policy
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let rv = policy
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let compiled = match cache.get(name) {
            Some((r, c)) if r == rv => c.clone(),
            _ => {
                let c = Arc::new(Compiled::new(policy));
                cache.insert(name.to_string(), (rv.to_string(), c.clone()));
                c
            }
        };
        let config_error = |binding: Option<&str>, err: String, denied: &mut Vec<Denied>| {
            if compiled.checks.fail {
                let what = if binding.is_some() {
                    "binding"
                } else {
                    "policy"
                };
                denied.push(Denied {
                    policy: compiled.name.clone(),
                    binding: binding.map(str::to_string),
                    decision: Decision {
                        message: format!("failed to configure {what}: {err}"),
                        reason: None,
                    },
                });
            }
        };
        match matches(inner, &compiled.match_constraints, a) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                config_error(None, e, &mut denied);
                continue;
            }
        }
        let mut bound: Vec<&Arc<Value>> = bindings
            .values()
            .filter(|b| b.pointer("/spec/policyName").and_then(Value::as_str) == Some(name))
            .collect();
        bound.sort_by_key(|b| {
            b.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        for binding in bound {
            let bname = binding
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if let Some(mr) = binding
                .pointer("/spec/matchResources")
                .filter(|m| m.is_object())
            {
                match matches(inner, mr, a) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        config_error(Some(bname), e, &mut denied);
                        continue;
                    }
                }
            }
            let params = match collect_params(inner, &compiled, binding, a) {
                Ok(p) => p,
                Err(e) => {
                    config_error(Some(bname), e, &mut denied);
                    continue;
                }
            };
            let actions: Vec<&str> = binding
                .pointer("/spec/validationActions")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for param in &params {
                let result = validate(inner, &compiled, param.as_deref(), a);
                for (index, decision) in result.decisions {
                    for action in &actions {
                        match *action {
                            "Deny" => denied.push(Denied {
                                policy: compiled.name.clone(),
                                binding: Some(bname.to_string()),
                                decision: Decision {
                                    message: decision.message.clone(),
                                    reason: decision.reason.clone(),
                                },
                            }),
                            "Warn" => out.warnings.push(format!(
                                "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{bname}': {}",
                                compiled.name, decision.message
                            )),
                            "Audit" => annotations.push((
                                "validation.policy.admission.k8s.io/validation_failure".into(),
                                json!([{"message": decision.message, "policy": compiled.name,
                                    "binding": bname, "expressionIndex": index,
                                    "validationActions": actions}])
                                .to_string(),
                            )),
                            _ => {}
                        }
                    }
                }
                for (key, value) in result.audit {
                    let k = format!("{}/{key}", compiled.name);
                    if !annotations.iter().any(|(ek, ev)| *ek == k && *ev == value) {
                        annotations.push((k, value));
                    }
                }
                if let Some(e) = result.error {
                    denied.push(Denied {
                        policy: compiled.name.clone(),
                        binding: Some(bname.to_string()),
                        decision: e,
                    });
                }
            }
        }
    }
    if let Some(d) = denied.into_iter().next() {
        return Err(denial(a, d));
    }
    if !annotations.is_empty() {
        out.audit = Some(AuditRecord {
            operation: a.operation.into(),
            resource: format!("{}/{}/{}", a.res.group, a.res.version, a.res.plural),
            namespace: a.namespace.into(),
            name: a.name.into(),
            annotations,
        });
    }
    Ok(out)
}

/// `admission.NewForbidden` with the decision's reason and code (Invalid,
/// 422, unless the validation names another reason).
fn denial(a: &Attributes<'_>, d: Denied) -> ApiError {
    let message = rekon_rules::cel::policy::denial_message(
        &d.policy,
        d.binding.as_deref(),
        &d.decision.message,
    );
    let name = if a.name.is_empty() { "Unknown" } else { a.name };
    let mut e = ApiError::forbidden(a.res, name, &message);
    let reason = d.decision.reason.unwrap_or_else(|| "Invalid".into());
    e.code = rekon_rules::cel::policy::denial_code(&reason);
    e.reason = reason;
    if let Some(d) = e.details.as_deref_mut().and_then(Value::as_object_mut) {
        d.insert("causes".into(), json!([{"message": message}]));
    }
    e
}

/// What one (policy, binding, param) evaluation found.
#[derive(Default)]
struct Evaluation {
    /// Failed validations by index.
    decisions: Vec<(usize, Decision)>,
    /// Published audit annotations.
    audit: Vec<(String, String)>,
    /// An audit annotation error under `failurePolicy: Fail`.
    error: Option<Decision>,
}

fn validate(inner: &Inner, p: &Compiled, param: Option<&Value>, a: &Attributes<'_>) -> Evaluation {
    let mut ev = Evaluation::default();
    let object = a.object.map(|o| expr::to_cel(o, None)).unwrap_or(Cel::Null);
    let old = a.old.map(|o| expr::to_cel(o, None)).unwrap_or(Cel::Null);
    let request = expr::to_cel(&request(a), None);
    let params = param.map(|o| expr::to_cel(o, None)).unwrap_or(Cel::Null);
    let ns = namespace_object(inner, a)
        .map(|o| expr::to_cel(&o, None))
        .unwrap_or(Cel::Null);
    let mut vars: Vec<(&str, &Cel)> = vec![
        ("object", &object),
        ("oldObject", &old),
        ("request", &request),
        ("params", &params),
        ("namespaceObject", &ns),
    ];
    let checked = p.checks.check(&vars);
    ev.decisions = checked.decisions.clone();
    if checked.skipped {
        return ev;
    }
    vars.push(("variables", &checked.variables));
    let explain = |e: String| checked.explain(e);
    for (key, x) in &p.audit_annotations {
        match x.eval(&vars) {
            Ok(Cel::String(s)) if !s.trim().is_empty() => {
                ev.audit.push((key.clone(), s.trim().to_string()))
            }
            Ok(Cel::String(_) | Cel::Null) => {}
            Ok(other) => {
                if p.checks.fail {
                    ev.error = Some(Decision {
                        message: format!(
                            "valueExpression '{}' resulted in unsupported return type: {:?}. Return type must be either string or null.",
                            x.source,
                            other.type_of()
                        ),
                        reason: None,
                    });
                }
            }
            Err(e) => {
                if p.checks.fail {
                    ev.error = Some(Decision {
                        message: explain(e),
                        reason: None,
                    });
                }
            }
        }
    }
    ev
}

/// The `request` variable: the AdmissionRequest the server builds.
pub(crate) fn request(a: &Attributes<'_>) -> Value {
    let r = a.res;
    rekon_rules::cel::policy::request(&rekon_rules::cel::policy::RequestAttributes {
        uid: &uuid::Uuid::new_v4().to_string(),
        group: &r.group,
        version: &r.version,
        kind: &r.kind,
        plural: &r.plural,
        subresource: a.subresource,
        name: a.name,
        namespace: a.namespace,
        operation: a.operation,
        user: json!({"username": a.user.name, "uid": a.user.uid, "groups": a.user.groups,
            "extra": a.user.extra}),
        dry_run: a.dry_run,
    })
}

/// The request's namespace (none for cluster-scoped objects and for a
/// Namespace itself).
fn namespace_object(inner: &Inner, a: &Attributes<'_>) -> Option<Value> {
    if a.namespace.is_empty() || (a.res.builtin && a.res.kind == "Namespace") {
        return None;
    }
    inner.namespace(a.namespace).map(|n| (*n).clone())
}

/// `matchConstraints` / `matchResources`.
fn matches(inner: &Inner, m: &Value, a: &Attributes<'_>) -> Result<bool, String> {
    if !m.is_object() {
        return Ok(false);
    }
    // namespaceSelector
    if let Some(sel) = selector(m.get("namespaceSelector"))? {
        let labels_of = if a.res.builtin && a.res.kind == "Namespace" {
            a.object.or(a.old).cloned()
        } else if a.namespace.is_empty() {
            None
        } else {
            inner.namespace(a.namespace).map(|n| (*n).clone())
        };
        let cluster_scoped =
            a.namespace.is_empty() && !(a.res.builtin && a.res.kind == "Namespace");
        if !cluster_scoped && !labels_of.is_some_and(|n| sel.matches(&n)) {
            return Ok(false);
        }
    }
    if let Some(sel) = selector(m.get("objectSelector"))?
        && !a.object.is_some_and(|o| sel.matches(o))
        && !a.old.is_some_and(|o| sel.matches(o))
    {
        return Ok(false);
    }
    let rules = |k: &str| {
        m.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let equivalent = m.get("matchPolicy").and_then(Value::as_str) != Some("Exact");
    if rules("excludeResourceRules")
        .iter()
        .any(|r| rule_matches(inner, r, a, equivalent))
    {
        return Ok(false);
    }
    let include = rules("resourceRules");
    Ok(include.is_empty()
        || include
            .iter()
            .any(|r| rule_matches(inner, r, a, equivalent)))
}

/// A label selector, `None` when it selects everything.
pub(crate) fn selector(
    sel: Option<&Value>,
) -> Result<Option<crate::selectors::LabelSelector>, String> {
    let Some(sel) = sel.filter(|s| s.as_object().is_some_and(|o| !o.is_empty())) else {
        return Ok(None);
    };
    let text = crate::scale::format_selector(sel).unwrap_or_default();
    let parsed = crate::selectors::LabelSelector::parse(&text).map_err(|e| e.message)?;
    Ok((!parsed.is_empty()).then_some(parsed))
}

fn listed(rule: &Value, key: &str, want: &str) -> bool {
    rule.get(key).and_then(Value::as_array).is_some_and(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .any(|x| x == "*" || x == want)
    })
}

/// One `NamedRuleWithOperations` (webhook/predicates/rules): operations,
/// groups, versions, `resource[/subresource]` with `*`, scope, names.
fn rule_matches(inner: &Inner, rule: &Value, a: &Attributes<'_>, equivalent: bool) -> bool {
    rule_matches_with(rule, a, equivalent, || served_versions(inner, a.res))
}

/// The versions a resource is served at (the `matchPolicy: Equivalent`
/// candidates: the same storage, the same kind).
pub(crate) fn served_versions(inner: &Inner, res: &ResourceInfo) -> Vec<String> {
    inner
        .registry
        .all()
        .iter()
        .filter(|r| r.storage_key() == res.storage_key() && r.kind == res.kind)
        .map(|r| r.version.clone())
        .collect()
}

/// [`rule_matches`] with the served versions given by `versions` (asked
/// only when the request's own version is not listed).
pub(crate) fn rule_matches_with(
    rule: &Value,
    a: &Attributes<'_>,
    equivalent: bool,
    versions: impl FnOnce() -> Vec<String>,
) -> bool {
    if !listed(rule, "operations", a.operation) {
        return false;
    }
    let scope_ok = match rule.get("scope").and_then(Value::as_str) {
        Some("Cluster") => a.namespace.is_empty(),
        Some("Namespaced") => !a.namespace.is_empty(),
        _ => true,
    };
    if !scope_ok {
        return false;
    }
    if let Some(names) = rule.get("resourceNames").and_then(Value::as_array)
        && !names.is_empty()
        && !names.iter().any(|n| n == a.name)
    {
        return false;
    }
    let resource_ok = rule
        .get("resources")
        .and_then(Value::as_array)
        .is_some_and(|rs| {
            rs.iter().filter_map(Value::as_str).any(|r| {
                let (res, sub) = r.split_once('/').unwrap_or((r, ""));
                (res == "*" || res == a.res.plural) && (sub == "*" || sub == a.subresource)
            })
        });
    if !resource_ok || !listed(rule, "apiGroups", &a.res.group) {
        return false;
    }
    if listed(rule, "apiVersions", &a.res.version) {
        return true;
    }
    // matchPolicy Equivalent: the same resource at another served version.
    equivalent && versions().iter().any(|v| listed(rule, "apiVersions", v))
}

/// The params of a binding (`[None]` when the policy has no `paramKind` or
/// the binding no `paramRef`), as `generic.CollectParams` finds them.
fn collect_params(
    inner: &Inner,
    p: &Compiled,
    binding: &Value,
    a: &Attributes<'_>,
) -> Result<Vec<Option<Arc<Value>>>, String> {
    let (Some((api_version, kind)), Some(r)) = (
        &p.param_kind,
        binding.pointer("/spec/paramRef").filter(|r| r.is_object()),
    ) else {
        return Ok(vec![None]);
    };
    let Some(res) = inner.registry.by_kind(api_version, kind) else {
        return Err(format!(
            "paramKind kind `{api_version}, Kind={kind}` not known"
        ));
    };
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
    let ns = if res.namespaced {
        if !s("namespace").is_empty() {
            s("namespace")
        } else if a.namespace.is_empty() {
            return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into());
        } else {
            a.namespace
        }
    } else if !s("namespace").is_empty() {
        return Err(
            "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
        );
    } else {
        ""
    };
    let all = inner
        .objects(&res.storage_key())
        .cloned()
        .unwrap_or_default();
    let found: Vec<Option<Arc<Value>>> = if !s("name").is_empty() {
        all.get(&(ns.to_string(), s("name").to_string()))
            .map(|o| Some(o.clone()))
            .into_iter()
            .collect()
    } else if let Some(sel) = r.get("selector") {
        let sel = selector(Some(sel))?;
        all.iter()
            .filter(|((ons, _), o)| *ons == ns && sel.as_ref().is_none_or(|s| s.matches(o)))
            .map(|(_, o)| Some(o.clone()))
            .collect()
    } else {
        return Err("one of name or selector must be provided".into());
    };
    if found.is_empty() && s("parameterNotFoundAction") == "Deny" {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(found)
}
