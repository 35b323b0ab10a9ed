//! [`Reconciler`]: what a controller needs from a plugin, and [`Layer`]:
//! what may be wrapped around every plugin the manager runs (recording and
//! shadow rollout are one, built above the controller).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::action::{Action, ClusterInfo, Outcome, Phase, Registration, Request, Resource};
use crate::plugin::{CallError, HostReads, LoadedPlugin};

/// What the controller needs from a plugin. [`LoadedPlugin`] is the real
/// one; tests and benchmarks can drive the engine with native code.
pub trait Reconciler: Send + Sync + 'static {
    /// Plugin name (by default the registration's).
    fn name(&self) -> &str {
        &self.registration().name
    }
    /// Its registration.
    fn registration(&self) -> &Registration;
    /// Hex sha256 of the build, where there is one (recorded cases name it).
    fn digest(&self) -> &str {
        ""
    }
    /// Reconcile one request in `phase` (live, deleting, leaving).
    /// The settings (JSON text) this version runs with, if any.
    fn settings(&self) -> Option<&str> {
        None
    }

    fn reconcile(
        &self,
        req: Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>>;

    /// Whether a reconcile may start now; `Err(wait)`: the plugin is backed
    /// off (CPU fair share) and its next turn is `wait` away. By default
    /// always (native reconcilers are trusted code); a [`Layer`] forwards it.
    ///
    /// # Errors
    /// How long until the plugin's next turn.
    fn admit(&self) -> Result<(), Duration> {
        Ok(())
    }

    /// Whether the plugin may perform `action`: the writer's last gate,
    /// checked before every write done for the plugin (the host's own
    /// finalizer patches included). By default everything (native
    /// reconcilers in tests and benchmarks are trusted code).
    ///
    /// # Errors
    /// Why the action is refused.
    fn check_action(&self, action: &Action, clusters: &[ClusterInfo]) -> Result<(), CallError> {
        let _ = (action, clusters);
        Ok(())
    }

    /// Told what became of a reconcile's outcome: `Err` with the writer's
    /// reason when the host could not perform it (a refused or invalid
    /// action, an API error after the writer's retries). By default
    /// nothing; `rekon plugin explore` judges by it (a write that fails on
    /// every reconcile is a finding, not a quiet baseline).
    fn performed(&self, request: &Request, result: Result<(), &crate::writer::Failed>) {
        let _ = (request, result);
    }

    /// The `custom` mapping. By default nothing: only plugins that declare a
    /// watch with the `custom` mapping are ever asked.
    fn map(
        &self,
        cluster: &str,
        resource: &Resource,
        object: String,
        reads: Arc<dyn HostReads>,
    ) -> BoxFuture<'static, Result<Vec<Request>, CallError>> {
        let _ = (cluster, resource, object, reads);
        async { Ok(Vec::new()) }.boxed()
    }
}

impl Reconciler for LoadedPlugin {
    fn name(&self) -> &str {
        LoadedPlugin::name(self)
    }

    fn registration(&self) -> &Registration {
        LoadedPlugin::registration(self)
    }

    fn digest(&self) -> &str {
        LoadedPlugin::digest(self)
    }

    fn settings(&self) -> Option<&str> {
        LoadedPlugin::settings(self)
    }

    fn reconcile(
        &self,
        req: Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        let this = self.clone();
        async move { LoadedPlugin::reconcile(&this, req, phase, reads, time).await }.boxed()
    }

    fn check_action(&self, action: &Action, clusters: &[ClusterInfo]) -> Result<(), CallError> {
        LoadedPlugin::check_action(self, action, clusters)
    }

    fn admit(&self) -> Result<(), Duration> {
        LoadedPlugin::admit(self)
    }

    fn map(
        &self,
        cluster: &str,
        resource: &Resource,
        object: String,
        reads: Arc<dyn HostReads>,
    ) -> BoxFuture<'static, Result<Vec<Request>, CallError>> {
        let this = self.clone();
        let cluster = cluster.to_owned();
        let resource = resource.clone();
        async move { LoadedPlugin::map(&this, &cluster, &resource, object, reads).await }.boxed()
    }
}

/// Wraps every plugin the [`super::Manager`] starts or swaps in
/// ([`super::Manager::set_layer`]): how the safe-change machinery (recording,
/// shadow rollout) sees every reconcile without the controller knowing it.
pub trait Layer: Send + Sync + 'static {
    /// `plugin`, wrapped (or `plugin` itself when there is nothing to do).
    fn wrap(&self, plugin: Arc<dyn Reconciler>) -> Arc<dyn Reconciler>;
}
