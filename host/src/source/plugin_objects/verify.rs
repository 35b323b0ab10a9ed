//! Step 2b, verify: the signatures of the manifest digest fetched (the one
//! that will be served) against `spec.verification`, before anything of
//! the module is compiled. The keys come from Secrets and ConfigMaps of the
//! host's namespace (read on every pass, so a rotated key counts at once)
//! or inline; the check itself is [`crate::source::signature::Policy`]'s,
//! through the [`ModuleSource`](super::module_source::ModuleSource) (which
//! remembers verified digests with the module cache). Every outcome is
//! counted (`rekon_plugin_verification_total{outcome}`); a failure is
//! logged and recorded as an Event on the Plugin.

use std::sync::Arc;

use kube::runtime::events::{Event, EventType};
use kube::{Resource as _, ResourceExt as _};
use tracing::{info, warn};

use super::context::Context;
use super::error::PluginObjectError;
use super::module_source::{Module, VerifyRequest};
use crate::source::plugin_crd::{Plugin, PluginSpec, PullPolicy, VerificationSpec};
use crate::source::signature::{Policy, PublicKey, Trust, Verified, VerifyError};

/// `rekon_plugin_verification_total`'s outcome of a module verified.
pub(super) const VERIFIED_OUTCOME: &str = "verified";
/// Its outcome of a Plugin refused for having no `spec.verification`
/// under `--require-signatures`.
pub(super) const REQUIRED_OUTCOME: &str = "verification_required";

/// What a pass asks of signatures: `None` when nothing does (no
/// `spec.verification`, signatures not required).
///
/// # Errors
/// [`PluginObjectError::VerificationRequired`], or a key that cannot be
/// read ([`VerifyError::KeyUnavailable`]).
pub(super) async fn policy(
    ctx: &Context,
    spec: &PluginSpec,
) -> Result<Option<Arc<Policy>>, PluginObjectError> {
    let Some(verification) = &spec.verification else {
        return if ctx.config.require_signatures {
            Err(PluginObjectError::VerificationRequired)
        } else {
            Ok(None)
        };
    };
    let mut trust = Vec::with_capacity(verification.keys.len());
    for (i, key) in verification.keys.iter().enumerate() {
        let (name, pem) = key_pem(ctx, i, key).await?;
        let key = PublicKey::from_pem(&pem).map_err(|e| unavailable(format!("{name}: {e}")))?;
        trust.push(Trust::Key { name, key });
    }
    if trust.is_empty() {
        return Err(unavailable("spec.verification.keys is empty".to_owned()));
    }
    Ok(Some(Arc::new(policy_of(verification, trust))))
}

fn policy_of(verification: &VerificationSpec, trust: Vec<Trust>) -> Policy {
    Policy {
        trust,
        minimum_matches: verification
            .minimum_matches
            .map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX).max(1)),
        annotations: verification.annotations.clone(),
    }
}

fn unavailable(detail: String) -> PluginObjectError {
    PluginObjectError::Verification(VerifyError::KeyUnavailable { detail })
}

/// The name (for messages) and PEM of key `i` of `spec.verification.keys`.
async fn key_pem(
    ctx: &Context,
    i: usize,
    key: &crate::source::plugin_crd::VerificationKey,
) -> Result<(String, String), PluginObjectError> {
    let ns = &ctx.config.namespace;
    match (&key.secret_ref, &key.config_map_ref, &key.pem) {
        (Some(r), None, None) => {
            let name = format!("Secret {ns}/{}[{}]", r.name, r.field());
            let secret = ctx
                .secrets
                .get_opt(&r.name)
                .await
                .map_err(|e| unavailable(format!("failed to read {name}: {e}")))?
                .ok_or_else(|| {
                    unavailable(format!("{name}: Secret {ns}/{} does not exist", r.name))
                })?;
            let data = secret
                .data
                .and_then(|d| d.get(r.field()).map(|b| b.0.clone()))
                .or_else(|| {
                    secret
                        .string_data
                        .and_then(|d| d.get(r.field()).map(|s| s.clone().into_bytes()))
                })
                .ok_or_else(|| unavailable(format!("{name}: no data key {}", r.field())))?;
            let pem = String::from_utf8(data)
                .map_err(|_| unavailable(format!("{name}: not UTF-8 PEM")))?;
            Ok((name, pem))
        }
        (None, Some(r), None) => {
            let name = format!("ConfigMap {ns}/{}[{}]", r.name, r.field());
            let map = ctx
                .config_maps
                .get_opt(&r.name)
                .await
                .map_err(|e| unavailable(format!("failed to read {name}: {e}")))?
                .ok_or_else(|| {
                    unavailable(format!("{name}: ConfigMap {ns}/{} does not exist", r.name))
                })?;
            let pem = map
                .data
                .and_then(|d| d.get(r.field()).cloned())
                .ok_or_else(|| unavailable(format!("{name}: no data key {}", r.field())))?;
            Ok((name, pem))
        }
        (None, None, Some(pem)) => Ok((format!("keys[{i}] (inline)"), pem.clone())),
        _ => Err(unavailable(format!(
            "spec.verification.keys[{i}] must name exactly one of secretRef, configMapRef, pem"
        ))),
    }
}

/// The manifest digest `spec` pins (`spec.digest`, or the reference's
/// `@sha256:…`): known before the fetch, so its signatures can be read
/// while the module downloads.
pub(super) fn pinned(spec: &PluginSpec) -> Option<String> {
    spec.digest.clone().or_else(|| {
        spec.module
            .parse::<oci_client::Reference>()
            .ok()
            .and_then(|r| r.digest().map(str::to_owned))
    })
}

/// Whether the signatures of manifest `digest` of `reference` satisfy
/// `policy`, through the module source (nothing reported yet). `fresh`:
/// the reference resolved now (with `pullPolicy: Always` the signatures
/// are read again rather than remembered; a module standing in from the
/// cache is only ever taken on its record).
pub(super) async fn check(
    ctx: &Context,
    obj: &Plugin,
    reference: &str,
    digest: &str,
    policy: &Arc<Policy>,
    fresh: bool,
) -> Result<Verified, VerifyError> {
    let docker_config = match &obj.spec.pull_secret {
        Some(secret) => super::fetch::pull_secret(ctx, secret).await.ok(),
        None => None,
    };
    ctx.source
        .verify(VerifyRequest {
            reference: reference.to_owned(),
            digest: digest.to_owned(),
            policy: Arc::clone(policy),
            docker_config,
            always: fresh && obj.spec.pull_policy == Some(PullPolicy::Always),
        })
        .await
}

/// Counts and logs a [`check`]'s outcome (a refusal also as an Event).
///
/// # Errors
/// [`PluginObjectError::Verification`] with the reason.
pub(super) async fn report(
    ctx: &Context,
    obj: &Plugin,
    reference: &str,
    result: Result<Verified, VerifyError>,
) -> Result<Option<Verified>, PluginObjectError> {
    match result {
        Ok(verified) => {
            ctx.metrics.plugin_verified(VERIFIED_OUTCOME);
            info!(
                plugin = %obj.name_any(),
                reference,
                digest = %verified.digest,
                signers = %verified.signers.join(", "),
                "plugin module signatures verified"
            );
            Ok(Some(verified))
        }
        Err(e) => {
            let e = PluginObjectError::Verification(e);
            refused(ctx, obj, reference, &e).await;
            Err(e)
        }
    }
}

/// [`check`] and [`report`] for `module` (fetched from `reference`);
/// `Ok(None)` when there is no policy.
///
/// # Errors
/// [`PluginObjectError::Verification`] with the reason.
pub(super) async fn verify(
    ctx: &Context,
    obj: &Plugin,
    reference: &str,
    module: &Module,
    policy: Option<&Arc<Policy>>,
    fresh: bool,
) -> Result<Option<Verified>, PluginObjectError> {
    let Some(policy) = policy else {
        return Ok(None);
    };
    let result = check(ctx, obj, reference, &module.digest, policy, fresh).await;
    report(ctx, obj, reference, result).await
}

/// The module's precompiled code, when there is one and the manifest's
/// signatures verified (`verified`: they cover every layer the manifest
/// lists, the precompiled one too). Without a verification the code is
/// not run: the host compiles the module, and a log line and
/// `rekon_plugin_precompiled_refused{outcome="unverified"}` say so.
pub(super) fn trusted_precompiled(
    ctx: &Context,
    obj: &Plugin,
    module: &Module,
    verified: Option<&Verified>,
) -> Option<crate::plugin::Precompiled> {
    let precompiled = module.precompiled.clone()?;
    if verified.is_some_and(|v| v.digest == module.digest) {
        return Some(precompiled);
    }
    ctx.metrics.plugin_precompiled_refused("unverified");
    warn!(
        plugin = %obj.name_any(),
        digest = %module.digest,
        "not using the module's precompiled code: no verified signature covers it (set spec.verification); compiling it"
    );
    None
}

/// Counts, logs and records as an Event on the Plugin why its module (or
/// the Plugin itself) was refused; nothing of it is compiled.
pub(super) async fn refused(ctx: &Context, obj: &Plugin, reference: &str, e: &PluginObjectError) {
    let outcome = match e {
        PluginObjectError::Verification(v) => v.outcome(),
        _ => REQUIRED_OUTCOME,
    };
    ctx.metrics.plugin_verified(outcome);
    warn!(
        plugin = %obj.name_any(),
        reference,
        reason = e.reason(),
        error = %e,
        "plugin module refused before compiling: signature verification failed; whatever served keeps serving"
    );
    let event = Event {
        type_: EventType::Warning,
        reason: e.reason().to_owned(),
        note: Some(truncated(format!("{reference}: {e}"))),
        action: "Verify".to_owned(),
        secondary: None,
    };
    if let Err(err) = ctx.events.publish(&event, &obj.object_ref(&())).await {
        tracing::debug!(plugin = %obj.name_any(), error = %err, "failed to record the verification Event");
    }
}

/// At most 1 KiB (an Event's note), on a char boundary.
pub(super) fn truncated(mut note: String) -> String {
    let mut end = note.len().min(1024);
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note.truncate(end);
    note
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::source::signature::{KeyAlgorithm, SigningKey};

    #[test]
    fn minimum_matches_defaults_to_one_and_annotations_carry_over() {
        let key = SigningKey::generate(KeyAlgorithm::Ed25519).unwrap();
        let trust = || {
            vec![Trust::Key {
                name: "k".into(),
                key: key.public_key(),
            }]
        };
        let spec = VerificationSpec {
            keys: Vec::new(),
            minimum_matches: None,
            annotations: BTreeMap::from([("team".into(), "platform".into())]),
        };
        let policy = policy_of(&spec, trust());
        assert_eq!(policy.minimum_matches, 1);
        assert_eq!(policy.annotations["team"], "platform");
        let spec = VerificationSpec {
            minimum_matches: Some(0),
            ..spec
        };
        assert_eq!(policy_of(&spec, trust()).minimum_matches, 1);
    }

    #[test]
    fn notes_are_cut_on_a_char_boundary() {
        assert_eq!(truncated("é".repeat(600)).len(), 1024);
    }
}
