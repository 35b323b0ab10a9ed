//! One pass over a Plugin object, in kube-runtime's shape:
//! [`reconcile`]`(object, ctx) -> Result<Action, PluginObjectError>`, the
//! error's [`PluginObjectError::reason`] feeding the object's conditions.
//! The steps, each a function of its own: resolve ([`super::resolve`]),
//! fetch ([`super::fetch`]), verify ([`super::verify`]), check the grant
//! ([`super::grant`]), load
//! ([`super::load`]), shadow ([`super::shadow`]), write status
//! ([`super::status`]).

use std::sync::Arc;

use kube::ResourceExt;

use super::conditions::{conclude, serving_message, set_fetched, set_ready, set_verified};
use super::context::{Context, origin};
use super::error::PluginObjectError;
use super::fetch::{Fetched, fetch_serving};
use super::grant::granted;
use super::load::load;
use super::resolve::{Memory, Plan, base_status, resolve};
use super::shadow::{shadow, shadow_counts};
use super::status::{Served, record};
use super::verify::{check, pinned, policy, refused, report, trusted_precompiled, verify};
use super::webhooks::sync_webhooks;
use crate::plugin::{LoadOptions, LoadedPlugin};
use crate::queue::Action;
use crate::source::plugin_crd::{LimitsSpec, Plugin, PluginObjectStatus, ShadowStatus};

/// Makes `obj`'s desired version serve on this replica and says so in its
/// status: fetch, verify, load within the grant, swap in, the shadow
/// beside it. Whatever served keeps serving on any failure.
///
/// # Errors
/// Why the desired version does not serve (or its shadow does not run);
/// the status already says so. [`PluginObjectError::is_transient`] ones
/// are retried with backoff.
pub(super) async fn reconcile(
    obj: Arc<Plugin>,
    ctx: Arc<Context>,
) -> Result<Action, PluginObjectError> {
    let name = obj.name_any();
    let memory = Memory::recall(&ctx, &name);
    let serving = ctx.registry.serving(&origin(&name));
    let plan = resolve(&obj, &memory, serving.is_some());
    if plan == Plan::UpToDate {
        record(&ctx, &name, None, &Served::default()).await;
        return Ok(Action::await_change());
    }
    // Suspended: the plugin stays loaded (watches, queue, finalizers),
    // nothing is reconciled; set before any load so that a version loaded
    // now starts suspended.
    ctx.registry.set_suspended(&name, obj.spec.suspend);
    let mut pass = Pass {
        status: base_status(&obj, &memory),
        ..Pass::default()
    };
    let result = match (plan, &serving) {
        (Plan::Suspend, Some(loaded)) => {
            let message = serving_message(loaded, memory.digest.as_deref());
            set_ready(&mut pass.status, &obj.spec, &message);
            Ok(())
        }
        _ => {
            let result = apply(&ctx, &obj, serving.is_some(), &mut pass).await;
            let serving = ctx.registry.serving(&origin(&name));
            let made_serve = pass.made_serve.as_ref().map(|(p, d)| (p, d.as_str()));
            conclude(
                &mut pass.status,
                &obj.spec,
                made_serve,
                serving.as_ref(),
                &result,
            );
            result
        }
    };
    // A failed pass leaves nothing applied: the next one tries again.
    let applied = result
        .is_ok()
        .then_some((obj.metadata.generation, &obj.spec));
    ctx.set_applied(&name, applied);
    // The configurations follow the version now serving (written with
    // the status below).
    sync_webhooks(&ctx, &name).await;
    record(&ctx, &name, Some(pass.status), &pass.served).await;
    result.map(|()| Action::await_change())
}

/// What a pass builds up.
#[derive(Default)]
struct Pass {
    /// The status to write.
    status: PluginObjectStatus,
    /// The plugin and digest this pass made serve.
    made_serve: Option<(LoadedPlugin, String)>,
    /// What now serves here, for the report.
    served: Served,
}

/// The steps after resolve: grant, fetch (the keys read meanwhile),
/// verify, load, shadow.
async fn apply(
    ctx: &Context,
    obj: &Plugin,
    serving: bool,
    pass: &mut Pass,
) -> Result<(), PluginObjectError> {
    let name = obj.name_any();
    let spec = &obj.spec;
    let grant = granted(spec)?;
    // The keys are read while the module is fetched; a digest pinned in
    // the spec has its signatures read meanwhile too.
    let pinned = pinned(spec);
    let keys_then_signatures = async {
        let policy = policy(ctx, spec).await;
        let early = match (&policy, &pinned) {
            (Ok(Some(p)), Some(digest)) => {
                Some(check(ctx, obj, &spec.module, digest, p, true).await)
            }
            _ => None,
        };
        (policy, early)
    };
    let ((policy, early), fetched) =
        tokio::join!(keys_then_signatures, fetch_serving(ctx, obj, serving));
    set_fetched(&mut pass.status, spec, &fetched);
    // Signatures required but not configured, or a key that cannot be
    // read, is said first, whatever the fetch did.
    let policy = match policy {
        Ok(policy) => policy,
        Err(e) => {
            refused(ctx, obj, &spec.module, &e).await;
            let failed = Err(e);
            set_verified(&mut pass.status, &failed);
            return failed.map(|_| ());
        }
    };
    let Fetched { module, unresolved } = fetched?;
    // The manifest digest fetched (checked against the reference and
    // `spec.digest`) is the one verified, and the one loaded below; nothing
    // is compiled before this. A failure keeps whatever served.
    let fresh = unresolved.is_none();
    let verified = match (&policy, early) {
        // Read for the digest that was fetched: taken as is.
        (Some(_), Some(result)) if fresh && pinned.as_deref() == Some(module.digest.as_str()) => {
            report(ctx, obj, &spec.module, result).await
        }
        _ => verify(ctx, obj, &spec.module, &module, policy.as_ref(), fresh).await,
    };
    set_verified(&mut pass.status, &verified);
    let verified = verified?;
    let mut options = LoadOptions::default()
        .with_settings(spec.settings.as_ref())
        .with_instance(Some(&name))
        .with_limits(
            spec.limits
                .as_ref()
                .map(LimitsSpec::to_limits)
                .unwrap_or_default(),
        );
    options.precompiled = trusted_precompiled(ctx, obj, &module, verified.as_ref());
    let loaded = load(ctx, &origin(&name), &module, &grant, &options).await?;
    pass.status.digest = Some(module.digest.clone());
    pass.status.version = Some(loaded.version().to_owned());
    pass.served.digest = Some(module.digest.clone());
    pass.made_serve = Some((loaded, module.digest.clone()));
    if let Some(failure) = unresolved {
        // The last resolved version serves; the desired one is tried
        // again (the shadow too, once the registry answers).
        return Err(PluginObjectError::LastResolvedServes {
            failure,
            digest: module.digest,
        });
    }
    let shadow_digest = shadow(ctx, obj, &grant, policy.as_ref()).await?;
    pass.status.shadow = shadow_digest.as_ref().map(|digest| ShadowStatus {
        digest: Some(digest.clone()),
        ..shadow_counts(ctx, &name)
    });
    pass.served.shadow = Some(shadow_digest);
    Ok(())
}
