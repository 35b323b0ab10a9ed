//! The API side of the NodePool: what may be written (validate, webhook
//! `/validate/nodepool`) and what is stored (mutate, `/mutate/nodepool`).
//!
//! # Validate (rule `spec`, creates and updates)
//!
//! A pool is denied with code 422 and one field error per problem, worded
//! as the API server words its own validation (`NodePool.nodes.lailin.xyz
//! "gpu" is invalid: spec.taints[0].effect: Unsupported value: ...`):
//!
//! - `spec.taints[i].effect` is one of [`TAINT_EFFECTS`] (`Required value`
//!   when empty, else `Unsupported value`);
//! - `spec.taints[i].key` is a qualified name and `spec.taints[i].value` a
//!   label value, as the API server requires of a Node's taints;
//! - every `spec.labels` key is a qualified name and every value a label
//!   value (`spec.labels[<key>]`), as a Node's labels must be;
//! - no `spec.labels` key is a role label (`node-role.kubernetes.io/<x>`):
//!   another pool's would make this pool's nodes members of that pool, and
//!   the pool's own is what selects its nodes (set by whoever assigns the
//!   node, never by the pool — the reconcile treats both as an invalid spec);
//! - keys are inside the operator's `allowedKeyPrefixes` when set;
//! - **no other pool already selects these nodes**, read from the host's
//!   cache: a pool's RuntimeClass schedules onto `nodeSelector` = the
//!   pool's `spec.labels`, so another live pool (not being deleted) with
//!   the **same non-empty labels** would have a RuntimeClass selecting
//!   exactly the same nodes, and pods of either pool could land on the
//!   other's. (Pools whose labels merely overlap are allowed: nested pools
//!   such as `{gpu: "true"}` and `{gpu: "true", zone: a}` are a design, and
//!   the reconcile's conflict rule settles differing values.) Pools without
//!   labels select no nodes by label and are never compared. A cache that
//!   cannot be read admits with a warning, as the check is about
//!   scheduling ambiguity, not security.
//!
//! An update leaving the spec as it was is admitted without checks (the
//! host's finalizer patches, label and annotation changes): a pool admitted
//! under older rules can always be deleted. So is every update of a pool
//! being deleted.
//!
//! # Mutate (rule `handler`, creates and updates)
//!
//! A pool without `spec.handler` (absent or empty) gets the operator's
//! `defaultHandler` (`runc` unless configured), the value the reconcile
//! gives its RuntimeClass for such a pool; a defaulted pool therefore
//! reconciles to the same RuntimeClass as before.

use rekon_rules::validation::{
    FieldError, invalid_message, is_qualified_name, is_valid_label_value, key_path,
};
use rekon_sdk::prelude::*;

use crate::{NodePool, NodePoolPlugin, NodePoolSettings, NodePoolSpec, ROLE_PREFIX, TAINT_EFFECTS};

/// The NodePool's kind and group, as the API server names them in a denial.
const KIND: &str = "NodePool";
const GROUP: &str = "nodes.lailin.xyz";

/// Problems of the pool named `name` with `spec`, the object alone (no
/// cache), as field errors in the order of the spec (labels by key, then
/// taints by index).
#[must_use]
pub fn field_errors(
    name: &str,
    spec: &NodePoolSpec,
    settings: &NodePoolSettings,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let allowed = |k: &str| {
        settings.allowed_key_prefixes.is_empty()
            || settings
                .allowed_key_prefixes
                .iter()
                .any(|p| k.starts_with(p.as_str()))
    };
    let outside = format!(
        "outside the allowed key prefixes ({})",
        settings.allowed_key_prefixes.join(", ")
    );
    for (k, v) in &spec.labels {
        let path = key_path("spec.labels", k);
        for msg in is_qualified_name(k) {
            errors.push(FieldError::invalid(&path, k, &msg));
        }
        for msg in is_valid_label_value(v) {
            errors.push(FieldError::invalid(&path, v, &msg));
        }
        if let Some(role) = k.strip_prefix(ROLE_PREFIX).filter(|r| !r.is_empty()) {
            let detail = if role == name {
                "the pool's own role label selects its nodes and is set by whoever assigns a node to the pool, not by the pool".to_owned()
            } else {
                format!(
                    "may not claim pool {role:?}'s role label: the pool's nodes would join pool {role:?}"
                )
            };
            errors.push(FieldError::forbidden(&path, &detail));
        } else if !allowed(k) {
            errors.push(FieldError::forbidden(&path, &outside));
        }
    }
    for (i, t) in spec.taints.iter().enumerate() {
        let path = format!("spec.taints[{i}]");
        for msg in is_qualified_name(&t.key) {
            errors.push(FieldError::invalid(format!("{path}.key"), &t.key, &msg));
        }
        if !t.key.is_empty() && !allowed(&t.key) {
            errors.push(FieldError::forbidden(format!("{path}.key"), &outside));
        }
        let value = t.value.as_deref().unwrap_or_default();
        let value_msgs = is_valid_label_value(value);
        if !value_msgs.is_empty() {
            // The API server joins a taint value's messages with ";".
            errors.push(FieldError::invalid(
                format!("{path}.value"),
                value,
                &value_msgs.join(";"),
            ));
        }
        if t.effect.is_empty() {
            errors.push(FieldError::required(format!("{path}.effect"), ""));
        } else if !TAINT_EFFECTS.contains(&t.effect.as_str()) {
            errors.push(FieldError::not_supported(
                format!("{path}.effect"),
                &t.effect,
                TAINT_EFFECTS,
            ));
        }
    }
    errors
}

/// The other pool among `pools` that already selects the nodes the pool
/// named `name` with `spec` selects: a live pool (not `name`, not being
/// deleted) with the same non-empty `spec.labels`. See the module's docs.
#[must_use]
pub fn selecting_the_same_nodes<'a>(
    name: &str,
    spec: &NodePoolSpec,
    pools: &'a [NodePool],
) -> Option<&'a NodePool> {
    if spec.labels.is_empty() {
        return None;
    }
    pools.iter().find(|p| {
        p.metadata.name.as_deref() != Some(name)
            && p.metadata.deletion_timestamp.is_none()
            && p.spec.labels == spec.labels
    })
}

fn deny(name: &str, errors: &[FieldError]) -> Verdict {
    let mut verdict = Verdict::deny(invalid_message(KIND, GROUP, name, errors)).code(422);
    for e in errors {
        verdict = verdict.field(e.field.clone(), e.body.clone());
    }
    verdict
}

impl Admission for NodePoolPlugin {
    fn rules() -> Vec<AdmissionRule> {
        vec![
            AdmissionRule::validate::<NodePool>("spec"),
            AdmissionRule::mutate::<NodePool>("handler"),
        ]
    }

    fn validate(ctx: &Context, req: &AdmissionRequest) -> Result<Verdict, Error> {
        let Some(pool) = req.object::<NodePool>()? else {
            return Ok(Verdict::allow());
        };
        let old = req.old_object::<NodePool>()?;
        if pool.metadata.deletion_timestamp.is_some()
            || old.as_ref().is_some_and(|o| o.spec == pool.spec)
        {
            return Ok(Verdict::allow());
        }
        let name = pool
            .metadata
            .name
            .clone()
            .unwrap_or_else(|| req.name.clone());
        let settings: NodePoolSettings = ctx.settings()?;
        let mut errors = field_errors(&name, &pool.spec, &settings);
        let mut warning = None;
        let labels_changed = old
            .as_ref()
            .is_none_or(|o| o.spec.labels != pool.spec.labels);
        if labels_changed && !pool.spec.labels.is_empty() {
            match ctx.list::<NodePool>(&req.cluster, None, None) {
                Ok(pools) => {
                    if let Some(other) = selecting_the_same_nodes(&name, &pool.spec, &pools) {
                        errors.push(FieldError::forbidden(
                            "spec.labels",
                            &format!(
                                "pool {:?} already selects these nodes (its labels are the same, so both RuntimeClasses would schedule onto the same nodes)",
                                other.metadata.name.as_deref().unwrap_or_default()
                            ),
                        ));
                    }
                }
                Err(e) => {
                    warning = Some(format!(
                        "whether another pool already selects these nodes was not checked: {e}"
                    ));
                }
            }
        }
        let verdict = if errors.is_empty() {
            Verdict::allow()
        } else {
            deny(&name, &errors)
        };
        Ok(match warning {
            Some(w) => verdict.warn(w),
            None => verdict,
        })
    }

    fn mutate(ctx: &Context, req: &AdmissionRequest) -> Result<Mutation, Error> {
        let (Some(pool), Some(mut object)) = (req.object::<NodePool>()?, req.object.clone()) else {
            return Ok(Mutation::unchanged());
        };
        if pool.metadata.deletion_timestamp.is_some()
            || pool.spec.handler.as_deref().is_some_and(|h| !h.is_empty())
        {
            return Ok(Mutation::unchanged());
        }
        let settings: NodePoolSettings = ctx.settings()?;
        // The request's object with the handler set, nothing else
        // re-serialized: the patch is one `add` of `/spec/handler`.
        if let Some(spec) = object
            .get_mut("spec")
            .and_then(serde_json::Value::as_object_mut)
        {
            spec.insert("handler".into(), settings.default_handler.into());
        } else {
            object["spec"] = serde_json::json!({ "handler": settings.default_handler });
        }
        Mutation::object(&object)
    }
}
