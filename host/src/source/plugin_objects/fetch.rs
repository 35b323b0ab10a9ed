//! Step 2, fetch: the module a spec names, through the [`ModuleSource`]
//! (digest verified before anything is compiled), with the pull Secret's
//! credentials; after a restart with the registry out of reach, the digest
//! the object last resolved to, from the module cache.

use super::context::Context;
use super::module_source::{FetchFailure, FetchRequest, Module};
use crate::source::plugin_crd::{Plugin, PluginSpec, PullPolicy};

/// The serving module of a pass.
#[derive(Debug)]
pub(super) struct Fetched {
    /// What serves.
    pub(super) module: Module,
    /// `Some`: the reference did not resolve and `module` is the last
    /// resolved digest, from the cache.
    pub(super) unresolved: Option<FetchFailure>,
}

/// The module `spec.module` names, or the last resolved one (see
/// [`last_resolved`]).
///
/// # Errors
/// Why the module could not be fetched, when no last resolved one stands
/// in.
pub(super) async fn fetch_serving(
    ctx: &Context,
    obj: &Plugin,
    serving: bool,
) -> Result<Fetched, FetchFailure> {
    let spec = &obj.spec;
    match fetch(ctx, &spec.module, spec.digest.as_deref(), spec).await {
        Ok(module) => Ok(Fetched {
            module,
            unresolved: None,
        }),
        Err(failure) => match last_resolved(ctx, obj, serving, &failure).await {
            Some(module) => Ok(Fetched {
                module,
                unresolved: Some(failure),
            }),
            None => Err(failure),
        },
    }
}

/// Fetches `reference` (pinned to `digest` if any) with `spec`'s pull
/// policy and pull Secret.
///
/// # Errors
/// The source's failure, or [`FetchFailure::PULL_SECRET_UNAVAILABLE`].
pub(super) async fn fetch(
    ctx: &Context,
    reference: &str,
    digest: Option<&str>,
    spec: &PluginSpec,
) -> Result<Module, FetchFailure> {
    let docker_config = match &spec.pull_secret {
        None => None,
        Some(secret) => Some(pull_secret(ctx, secret).await?),
    };
    ctx.source
        .fetch(FetchRequest {
            reference: reference.to_owned(),
            digest: digest.map(str::to_owned),
            always: spec.pull_policy == Some(PullPolicy::Always),
            docker_config,
        })
        .await
}

/// The `.dockerconfigjson` of the pull Secret `name` in the host's
/// namespace.
pub(super) async fn pull_secret(ctx: &Context, name: &str) -> Result<Vec<u8>, FetchFailure> {
    // The Secret may yet be created or fixed: tried again.
    let fail = |message: String| FetchFailure::pull_secret(message, true);
    let ns = &ctx.config.namespace;
    let secret = ctx
        .secrets
        .get_opt(name)
        .await
        .map_err(|e| fail(format!("failed to read pull Secret {ns}/{name}: {e}")))?
        .ok_or_else(|| fail(format!("pull Secret {ns}/{name} does not exist")))?;
    if secret.type_.as_deref() != Some("kubernetes.io/dockerconfigjson") {
        return Err(fail(format!(
            "pull Secret {ns}/{name} is of type {}, not kubernetes.io/dockerconfigjson",
            secret.type_.as_deref().unwrap_or("Opaque")
        )));
    }
    secret
        .data
        .and_then(|d| d.get(".dockerconfigjson").map(|b| b.0.clone()))
        .ok_or_else(|| fail(format!("pull Secret {ns}/{name} has no .dockerconfigjson")))
}

/// After a restart with the registry out of reach, nothing serves here
/// yet: the digest this object last resolved to (its `status.digest`),
/// when the host's module cache holds it, serves until the desired
/// reference can be fetched. A transient failure only (an unreachable
/// registry, a pull Secret not there yet): a wrong digest or a module
/// that is not there waits for an edit. Never used while something
/// serves: a running host keeps what it serves.
async fn last_resolved(
    ctx: &Context,
    obj: &Plugin,
    serving: bool,
    failure: &FetchFailure,
) -> Option<Module> {
    if serving || !failure.transient {
        return None;
    }
    let digest = obj.status.as_ref()?.digest.as_deref()?;
    // The registry just failed: the cache alone, no second attempt.
    ctx.source.cached(digest).await
}
