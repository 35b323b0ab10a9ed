//! Admission webhooks (admissionregistration.k8s.io/v1
//! MutatingWebhookConfiguration and ValidatingWebhookConfiguration), in the
//! API server's order: mutating webhooks before the schema, defaults and
//! CEL rules of the object, validating webhooks after the
//! ValidatingAdmissionPolicies.
//!
//! A webhook is an HTTPS call, and the store's lock is never held across
//! one. A write that webhooks may see runs in passes, as the API server
//! runs its admission inside etcd's optimistic `GuaranteedUpdate`:
//!
//! 1. under the lock the write runs up to the **mutation point** (the
//!    object the client sent, or the patch applied to the live object) and
//!    stops there, keeping what the webhooks need (a [`Call`]); the lock is
//!    released and the mutating webhooks are called (`dispatch`);
//! 2. under the lock the write runs again with the mutated object put in at
//!    the mutation point, through schema, defaults, CEL rules and
//!    ValidatingAdmissionPolicies, up to the **validation point**, and
//!    stops there; the lock is released and the validating webhooks are
//!    called;
//! 3. under the lock the write runs once more and stores the object the
//!    validating webhooks admitted (its uid, creation time and generated
//!    name are those they saw, not new ones).
//!
//! A pass stops by returning a sentinel [`ApiError`] (code 0) with the
//! [`Call`] left in `Inner::suspended`; only [`drive`] sees either.
//!
//! Each pass checks that the live object is still the one the previous
//! pass saw (its resourceVersion); if another write came in between, the
//! write starts over (as `GuaranteedUpdate` retries), at most
//! [`ATTEMPTS`] times, then answers 409 Conflict. A pass with nothing to
//! call goes straight on, so a cluster without webhook configurations
//! writes in one pass as before.

mod client;
mod config;
pub(crate) mod conversion;
mod dispatch;
mod equivalent;

use std::sync::Arc;

use serde_json::Value;

pub use client::Services;
pub(crate) use config::validate as validate_configuration;

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceInfo;
use crate::store::Inner;

/// The table of MutatingWebhookConfigurations.
pub(crate) const MUTATING: &str = "admissionregistration.k8s.io/mutatingwebhookconfigurations";
/// The table of ValidatingWebhookConfigurations.
pub(crate) const VALIDATING: &str = "admissionregistration.k8s.io/validatingwebhookconfigurations";

/// How many times a write starts over when another write changed its
/// object while webhooks were called (`GuaranteedUpdate` retries).
pub const ATTEMPTS: usize = 5;

const SUSPEND: &str = "kube-sim:webhook-suspend";
const RETRY: &str = "kube-sim:webhook-retry";

/// Where a write is in its admission passes (see the module docs).
#[derive(Debug, Clone, Default)]
pub enum Pass {
    /// No webhooks: in-process helpers and the API server's own
    /// writes (garbage collection, namespace contents).
    #[default]
    Off,
    /// A write of the API: webhooks run.
    Run(Box<Carry>),
}

/// What earlier passes of one write found.
#[derive(Debug, Clone, Default)]
pub struct Carry {
    /// The resourceVersion of the live object the earlier pass saw
    /// (`Some(None)`: there was none).
    expect_old: Option<Option<String>>,
    /// The object as the mutating webhooks left it (served version).
    mutated: Option<Value>,
    /// The object the validating webhooks admitted (stored version).
    validated: Option<Value>,
    /// The live object converted to the request's version by a CRD's
    /// conversion webhook, with the resourceVersion it was converted at.
    live_view: Option<(Option<String>, Value)>,
    /// The object to store converted to the storage version, with the
    /// resourceVersion of the live object it replaces.
    stored_form: Option<(Option<String>, Value)>,
}

impl Pass {
    /// Whether the validating webhooks (and so the policies before them)
    /// already admitted this write's object.
    pub(crate) fn validated(&self) -> bool {
        matches!(self, Self::Run(c) if c.validated.is_some())
    }
}

/// Which webhooks a suspended write waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Mutating,
    Validating,
}

/// A write stopped at a mutation or validation point: the admission
/// attributes and the configurations, taken under the lock.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub stage: Stage,
    pub res: ResourceInfo,
    pub operation: &'static str,
    pub namespace: String,
    pub name: String,
    pub subresource: String,
    /// The object (served version), `None` for DELETE.
    pub object: Option<Value>,
    /// The live object (served version), `None` for CREATE.
    pub old: Option<Value>,
    old_rv: Option<String>,
    /// What goes back in at the validation point (stored version).
    stored: Option<Value>,
    pub dry_run: bool,
    pub user: crate::auth::UserInfo,
    /// The configurations, in name order.
    pub configs: Vec<Arc<Value>>,
    /// The request's namespace (for `namespaceSelector`).
    pub namespace_obj: Option<Value>,
    /// Versions the resource is served at (`matchPolicy: Equivalent`).
    pub versions: Vec<String>,
    /// `kind` and `requestKind` when they are not the resource's: a
    /// `/scale` write is admitted as an autoscaling/v1 Scale.
    pub kind: Option<Value>,
}

/// One admission point of a write.
pub(crate) struct Point<'a> {
    pub res: &'a ResourceInfo,
    pub operation: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub subresource: Option<&'a str>,
    /// The live object (stored version).
    pub old: Option<&'a Value>,
    pub dry_run: bool,
    pub user: Option<&'a crate::auth::UserInfo>,
    pub pass: &'a Pass,
    /// A `/scale` write: the webhooks see autoscaling/v1 Scales (the old
    /// one made from `old` with these paths; the object is the Scale the
    /// write asks for).
    pub scale: Option<&'a crate::resources::ScalePaths>,
}

fn suspend() -> ApiError {
    ApiError::new(0, SUSPEND, "")
}

fn rv(o: Option<&Value>) -> Option<String> {
    o.and_then(|o| o.pointer("/metadata/resourceVersion"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn served(res: &ResourceInfo, o: &Value) -> Value {
    if res.needs_conversion() {
        crate::resources::to_served(res, o)
    } else {
        o.clone()
    }
}

/// Whether the live object is the one an earlier pass saw.
fn same_old(c: &Carry, old: Option<&Value>) -> ApiResult<()> {
    match &c.expect_old {
        Some(e) if *e != rv(old) => Err(ApiError::new(0, RETRY, "")),
        _ => Ok(()),
    }
}

/// `IsExemptAdmissionConfigurationResource`: webhooks never see writes of
/// the admission configuration itself (webhook configurations, policies
/// and their bindings), so no webhook can lock the cluster's admission.
fn exempt(res: &ResourceInfo) -> bool {
    res.builtin
        && res.group == "admissionregistration.k8s.io"
        && matches!(
            res.kind.as_str(),
            "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
        )
}

fn capture(inner: &Inner, p: &Point<'_>, stage: Stage, table: &str) -> Option<Call> {
    if exempt(p.res) {
        return None;
    }
    let configs: Vec<Arc<Value>> = inner
        .objects(table)
        .map(|t| t.values().cloned().collect())
        .unwrap_or_default();
    let user = p.user.cloned().unwrap_or_else(crate::auth::admin_user);
    let attrs = crate::admission::policy::Attributes {
        res: p.res,
        operation: p.operation,
        name: p.name,
        namespace: p.namespace,
        subresource: p.subresource.unwrap_or_default(),
        object: None,
        old: None,
        dry_run: p.dry_run,
        user: &user,
    };
    let versions = || crate::admission::policy::served_versions(inner, p.res);
    let any = configs.iter().any(|c| {
        dispatch::hooks(c)
            .iter()
            .any(|h| dispatch::rules_match(h, &attrs, versions))
    });
    if !any {
        return None;
    }
    let namespace_obj = if p.namespace.is_empty() {
        None
    } else {
        inner.namespace(p.namespace).map(|n| (*n).clone())
    };
    Some(Call {
        stage,
        res: p.res.clone(),
        operation: p.operation,
        namespace: p.namespace.to_string(),
        name: p.name.to_string(),
        subresource: p.subresource.unwrap_or_default().to_string(),
        object: None,
        old: p.old.map(|o| {
            let o = served(p.res, o);
            match p.scale {
                Some(paths) => crate::scale::to_scale(paths, &o),
                None => o,
            }
        }),
        old_rv: rv(p.old),
        stored: None,
        dry_run: p.dry_run,
        user,
        configs,
        namespace_obj,
        versions: versions(),
        kind: p
            .scale
            .map(|_| serde_json::json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})),
    })
}

/// Whether any webhook configuration is registered.
pub(crate) fn configured(inner: &Inner) -> bool {
    [MUTATING, VALIDATING]
        .iter()
        .any(|t| inner.objects(t).is_some_and(|o| !o.is_empty()))
}

/// The mutation point: `obj` is the object the client sent (served
/// version; `None` for DELETE). The first pass stops here when a mutating
/// webhook's rules match; the second puts the mutated object in.
pub(crate) fn mutation_point(
    inner: &Inner,
    p: &Point<'_>,
    obj: Option<&mut Value>,
) -> ApiResult<()> {
    let Pass::Run(c) = p.pass else {
        return Ok(());
    };
    same_old(c, p.old)?;
    if c.mutated.is_some() || c.validated.is_some() || c.expect_old.is_some() {
        if let (Some(m), Some(obj)) = (&c.mutated, obj) {
            *obj = m.clone();
        }
        return Ok(());
    }
    if let Some(mut call) = capture(inner, p, Stage::Mutating, MUTATING) {
        call.object = obj.map(|o| o.clone());
        *inner.suspended.borrow_mut() = Some(call);
        return Err(suspend());
    }
    Ok(())
}

/// The validation point, after the ValidatingAdmissionPolicies: `obj` is
/// the object to store (stored version; `None` for DELETE). A pass stops
/// here when a validating webhook's rules match; the last pass puts the
/// admitted object in.
pub(crate) fn validation_point(
    inner: &Inner,
    p: &Point<'_>,
    obj: Option<&mut Value>,
) -> ApiResult<()> {
    let Pass::Run(c) = p.pass else {
        return Ok(());
    };
    same_old(c, p.old)?;
    if let Some(v) = &c.validated {
        if let Some(obj) = obj {
            *obj = v.clone();
        }
        return Ok(());
    }
    if let Some(mut call) = capture(inner, p, Stage::Validating, VALIDATING) {
        call.object = obj.as_deref().map(|o| match p.scale {
            // The Scale the write asks for, as it is.
            Some(_) => o.clone(),
            None => served(p.res, o),
        });
        call.stored = obj.map(|o| o.clone());
        *inner.suspended.borrow_mut() = Some(call);
        return Err(suspend());
    }
    Ok(())
}

/// Runs one write of the API through its passes: `write` runs a pass
/// under the store's lock; webhooks are called between passes. Returns
/// the write's result and the warnings of the passes and of the webhooks
/// (deduplicated, as the server's warning recorder does); a failed write
/// carries them in [`ApiError::warnings`], as the server sends warning
/// headers with errors too.
pub(crate) async fn drive<T>(
    cs: &crate::server::ClusterState,
    mut write: impl FnMut(&mut Inner, Pass) -> ApiResult<T>,
) -> ApiResult<(T, Vec<String>)> {
    fn add(all: &mut Vec<String>, more: Vec<String>) {
        for x in more {
            if !all.contains(&x) {
                all.push(x);
            }
        }
    }
    let failed = |mut e: ApiError, warnings: Vec<String>| {
        e.warnings = warnings;
        Err(e)
    };
    for _ in 0..ATTEMPTS {
        let mut carry = Carry::default();
        let mut warnings: Vec<String> = Vec::new();
        loop {
            let pass = Pass::Run(Box::new(carry.clone()));
            let (out, w, call, converting) = cs.store.write(|i| {
                let out = write(i, pass);
                (
                    out,
                    i.warnings.take(),
                    i.suspended.take(),
                    i.converting.take(),
                )
            });
            add(&mut warnings, w);
            match out {
                Ok(t) => return Ok((t, warnings)),
                Err(e) if e.reason == RETRY => break,
                Err(e) if e.reason == conversion::CONVERT => {
                    let r = converting.ok_or_else(|| ApiError::internal("lost conversion"))?;
                    if let Err(e) = conversion::run(cs, r, &mut carry).await {
                        return failed(e, warnings);
                    }
                }
                Err(e) if e.reason == SUSPEND => {
                    let call = call.ok_or_else(|| ApiError::internal("lost webhook call"))?;
                    let mut w = Vec::new();
                    let mut audit = Vec::new();
                    let object = dispatch::run(cs, &call, &mut w, &mut audit).await;
                    add(&mut warnings, w);
                    record_audit(cs, &call, audit);
                    let object = match object {
                        Ok(o) => o,
                        Err(e) => return failed(e, warnings),
                    };
                    carry.expect_old = Some(call.old_rv.clone());
                    match call.stage {
                        Stage::Mutating => carry.mutated = object,
                        Stage::Validating => {
                            carry.validated = Some(call.stored.unwrap_or(Value::Null));
                        }
                    }
                }
                Err(e) => return failed(e, warnings),
            }
        }
    }
    Err(ApiError::new(
        409,
        "Conflict",
        "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
    ))
}

/// Records the webhooks' `auditAnnotations` of one call where kube-sim
/// keeps admission audit annotations (`SimCluster::admission_audit`), as
/// the server adds them to the request's audit event.
fn record_audit(cs: &crate::server::ClusterState, call: &Call, annotations: Vec<(String, String)>) {
    if annotations.is_empty() {
        return;
    }
    let record = crate::admission::AuditRecord {
        operation: call.operation.into(),
        resource: format!(
            "{}/{}/{}",
            call.res.group, call.res.version, call.res.plural
        ),
        namespace: call.namespace.clone(),
        name: call.name.clone(),
        annotations,
    };
    cs.store.write(|i| {
        let mut log = i.admission_audit.borrow_mut();
        if log.len() >= 10_000 {
            log.pop_front();
        }
        log.push_back(record);
    });
}

/// DELETE of a collection with webhooks registered (or with a label
/// selector at a webhook-converted version): each listed item is one
/// DELETE through [`drive`] (the first error answers; items deleted
/// before it stay deleted, as the server's DeleteCollection leaves them).
/// Returns the deleted objects, the resourceVersion and the warnings.
pub(crate) async fn delete_each(
    cs: &crate::server::ClusterState,
    res: &ResourceInfo,
    ns: Option<&str>,
    label: &crate::selectors::LabelSelector,
    field: &crate::selectors::FieldSelector,
    opts: &crate::store::DeleteOpts,
) -> ApiResult<(Vec<Arc<Value>>, u64, Vec<String>)> {
    // At a version a webhook converts to, the label selector matches the
    // converted objects (as a LIST's does).
    let after = res.webhook_converted() && !label.is_empty();
    let everything = crate::selectors::LabelSelector::default();
    let stored_label = if after { &everything } else { label };
    let listed = cs.store.read(|i| {
        i.list(
            res,
            ns,
            stored_label,
            field,
            &crate::store::ListOpts::default(),
        )
    })?;
    let mut candidates = listed.items;
    if after {
        let converted = conversion::served(cs, res, candidates.clone()).await?;
        candidates = candidates
            .into_iter()
            .zip(converted)
            .filter(|(_, c)| label.matches(c))
            .map(|(o, _)| o)
            .collect();
    }
    let mut items = Vec::new();
    let mut warnings = Vec::new();
    for obj in candidates {
        let meta = |k: &str| {
            obj.pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let (name, ons) = (meta("name").unwrap_or_default(), meta("namespace"));
        let deleted = drive(cs, |i, pass| {
            let opts = crate::store::DeleteOpts {
                webhooks: pass,
                ..opts.clone()
            };
            i.delete(res, ons.as_deref(), &name, &opts)
        })
        .await;
        match deleted {
            Ok((d, w)) => {
                items.push(d.obj);
                warnings.extend(w);
            }
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok((items, cs.store.current_rv(), warnings))
}
