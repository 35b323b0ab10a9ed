//! Step 5, shadow: `spec.shadow.module` goes through fetch, verify (under
//! the same `spec.verification` as the serving module), grant and load
//! under `plugins.rekon.dev/NAME.shadow.wasm`. It runs beside the serving
//! version (when `rekon run` shadows) and writes nothing; the status counts
//! its reconciles and divergences, per candidate.

use super::context::{Context, shadow_origin};
use super::error::PluginObjectError;
use super::fetch::fetch;
use super::load::load;
use super::verify::verify;
use crate::action::Permission;
use crate::plugin::LoadOptions;
use crate::source::plugin_crd::{AdmissionShadowStatus, LimitsSpec, Plugin, ShadowStatus};
use crate::source::signature::Policy;

/// Makes `obj`'s shadow run (or, without `spec.shadow`, stop): the digest
/// of the shadow that runs now, `None` for none.
///
/// # Errors
/// [`PluginObjectError::Shadow`]: why the shadow does not run (the serving
/// version is not affected).
pub(super) async fn shadow(
    ctx: &Context,
    obj: &Plugin,
    grant: &[Permission],
    policy: Option<&std::sync::Arc<Policy>>,
) -> Result<Option<String>, PluginObjectError> {
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    let spec = &obj.spec;
    let Some(shadow) = &spec.shadow else {
        ctx.registry.remove_module(&shadow_origin(name));
        if let Some(e) = ctx.entries.lock().get_mut(name) {
            e.shadow_base = None;
        }
        return Ok(None);
    };
    let shadow_error = |e: PluginObjectError| PluginObjectError::Shadow(Box::new(e));
    let module = fetch(ctx, &shadow.module, shadow.digest.as_deref(), spec)
        .await
        .map_err(|f| shadow_error(f.into()))?;
    verify(ctx, obj, &shadow.module, &module, policy, true)
        .await
        .map_err(shadow_error)?;
    let settings = shadow.settings.as_ref().or(spec.settings.as_ref());
    let options = LoadOptions::default()
        .with_settings(settings)
        .with_limits(
            spec.limits
                .as_ref()
                .map(LimitsSpec::to_limits)
                .unwrap_or_default(),
        )
        .with_instance(Some(name));
    load(ctx, &shadow_origin(name), &module, grant, &options)
        .await
        .map_err(shadow_error)?;
    count_candidate(ctx, name, &module.digest, settings);
    Ok(Some(module.digest))
}

/// Starts counting a shadow candidate from zero unless it is the one
/// already counted (same digest, same settings).
fn count_candidate(ctx: &Context, name: &str, digest: &str, settings: Option<&serde_json::Value>) {
    let key = format!(
        "{digest} {}",
        settings.map(ToString::to_string).unwrap_or_default()
    );
    let mut entries = ctx.entries.lock();
    let Some(entry) = entries.get_mut(name) else {
        return;
    };
    if entry.shadow_base.as_ref().is_some_and(|(k, _)| *k == key) {
        return;
    }
    entry.shadow_base = Some((key, ctx.metrics.shadow_counts(name)));
    entry.admission_base = ctx.metrics.admission_shadow_counts(name);
    ctx.metrics.clear_recent_shadow_divergences(name);
    ctx.metrics.clear_recent_admission_divergences(name);
}

/// The counts of the shadow candidate now counted (no digest).
pub(super) fn shadow_counts(ctx: &Context, name: &str) -> ShadowStatus {
    let (reconciles, divergences) = ctx.metrics.shadow_counts(name);
    let ((base_reconciles, base_divergences), admission_base) = ctx
        .entries
        .lock()
        .get(name)
        .map(|e| {
            (
                e.shadow_base
                    .as_ref()
                    .map(|(_, base)| *base)
                    .unwrap_or_default(),
                e.admission_base,
            )
        })
        .unwrap_or_default();
    let reconciles = reconciles.saturating_sub(base_reconciles);
    let divergences = divergences.saturating_sub(base_divergences);
    ShadowStatus {
        digest: None,
        reconciles,
        identical: reconciles.saturating_sub(divergences),
        divergences,
        recent: ctx.metrics.recent_shadow_divergences(name),
        admission: admission_counts(ctx, name, &admission_base),
    }
}

/// The candidate's admission verdicts beside the serving version's, when
/// the candidate admits (or answered reviews).
fn admission_counts(
    ctx: &Context,
    name: &str,
    base: &crate::telemetry::metrics::ShadowVerdictCounts,
) -> Option<AdmissionShadowStatus> {
    let counts = ctx.metrics.admission_shadow_counts(name).since(base);
    let admits = ctx
        .registry
        .serving(&shadow_origin(name))
        .is_some_and(|p| !p.admission_rules().is_empty());
    (admits || counts.reviews() + counts.dropped > 0).then(|| AdmissionShadowStatus {
        reviews: counts.reviews(),
        identical: counts.identical,
        would_deny: counts.would_deny,
        would_allow: counts.would_allow,
        differs: counts.differs,
        failed: counts.failed,
        dropped: counts.dropped,
        recent: ctx.metrics.recent_admission_divergences(name),
    })
}
