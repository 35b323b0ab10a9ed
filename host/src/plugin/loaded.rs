//! A loaded plugin and its calls: each call gets a fresh store (memory cap,
//! epoch deadline, capability-free WASI) instantiated from the `InstancePre`
//! built at load time; failures are classified into [`CallError`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use wasmtime::Store;

use super::admission::PluginAdmission;
use super::bindings::types as wit;
use super::bindings::{Plugin, PluginPre};
use super::bounds;
use super::call::{Instantiate, call, classify, new_store, panic_text, set_deadline};
use super::capability;
use super::containment::FORBIDDEN;
use super::conversion::PluginConversion;
use super::convert::Convert;
use super::error::{CallError, LoadError};
use super::host_reads::{HostReads, NoReads};
use super::policy::PluginPolicy;
use super::runtime::{self, LoadTimings, PluginRuntime, Prepared, RuntimeConfig, RuntimeInner};
use super::sandbox::CallState;
use super::validation::{InvalidRegistration, validate_registration};
use crate::action::{
    Action, ClusterInfo, Outcome, Phase, Registration, Request, Resource, timestamp,
};

/// Why [`PluginRuntime::load_one`] has no plugin.
#[derive(Debug, thiserror::Error)]
pub enum LoadOneError {
    /// The runtime did not start.
    #[error(transparent)]
    Runtime(#[from] runtime::RuntimeError),
    /// The file did not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The blocking task that loads it failed.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// Loading: the runtime prepares a component, `register` makes it a plugin.
impl PluginRuntime {
    /// A runtime with `config` loading one file on the blocking pool: what
    /// a command looking at a single plugin (`plan`, `release`) needs.
    ///
    /// # Errors
    /// Why the runtime could not start or the file did not load.
    pub async fn load_one(
        config: RuntimeConfig,
        path: &Path,
    ) -> Result<LoadedPlugin, LoadOneError> {
        let runtime = Self::new(config)?;
        let file = path.to_path_buf();
        Ok(tokio::task::spawn_blocking(move || runtime.load_file(&file)).await??)
    }

    /// Loads a plugin file: compile (or load the cached artifact), check the
    /// contract, link, call `register`, validate the registration.
    pub fn load_file(&self, path: impl AsRef<Path>) -> Result<LoadedPlugin, LoadError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_from(&bytes, path.display().to_string(), Some(path.to_path_buf()))
    }

    /// Like [`Self::load_file`] for bytes; `origin` names them in messages.
    pub fn load_bytes(&self, bytes: &[u8], origin: &str) -> Result<LoadedPlugin, LoadError> {
        self.load_from(bytes, origin.to_string(), None)
    }

    /// Like [`Self::load_bytes`], with settings and an instance name.
    ///
    /// # Errors
    /// As [`Self::load_bytes`]; invalid settings are
    /// [`LoadError::InvalidSettings`] with the plugin's own reason.
    pub fn load_bytes_with(
        &self,
        bytes: &[u8],
        origin: &str,
        options: &LoadOptions,
    ) -> Result<LoadedPlugin, LoadError> {
        self.load_with(bytes, None, origin.to_string(), None, options)
    }

    pub(crate) fn load_from(
        &self,
        bytes: &[u8],
        origin: String,
        path: Option<PathBuf>,
    ) -> Result<LoadedPlugin, LoadError> {
        self.load_with(bytes, None, origin, path, &LoadOptions::default())
    }

    /// `digest`: the bytes' hex sha256 when the caller has taken it already.
    pub(crate) fn load_with(
        &self,
        bytes: &[u8],
        digest: Option<String>,
        origin: String,
        path: Option<PathBuf>,
        options: &LoadOptions,
    ) -> Result<LoadedPlugin, LoadError> {
        let Prepared {
            pre,
            digest,
            timings,
            reads_settings,
            admission,
            conversion,
            policies,
        } = self.prepare(bytes, digest, &origin, options.precompiled.as_ref())?;
        if options.settings.is_some() && !reads_settings {
            // Never run a plugin without the settings it was given.
            return Err(LoadError::InvalidSettings {
                origin,
                reason: "settings were given, but this plugin cannot read settings (it does not import `settings`: built for contract 0.3.0, or with an SDK that does not read them)".to_owned(),
            });
        }
        LoadedPlugin::register(
            self.inner.clone(),
            pre,
            Loading {
                digest,
                origin,
                path,
                timings,
                options: options.clone(),
                admission,
                conversion,
                policies,
            },
        )
    }
}

/// What a load is given besides the module: the operator's settings for
/// it, and the name of the instance it runs as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The settings (JSON text) the plugin reads with `settings()`; `None`
    /// when none were given. Passed to `register` (which validates them)
    /// and to every later call of this load.
    pub settings: Option<Arc<str>>,
    /// Run the module as the plugin named `instance` rather than the name
    /// it registers (one module behind several Plugin objects). The
    /// registration is renamed, so its field manager, queue, metrics and
    /// operator policy follow the instance's name, and a declared finalizer
    /// `prefix/name` becomes `prefix/name.<instance>` (two instances never
    /// release each other's finalizer). `None`, or the registered name
    /// itself: the plugin as it registers.
    pub instance: Option<String>,
    /// Precompiled code shipped with the module, mapped instead of
    /// compiling when it was made for this engine and from these bytes
    /// (else the module is compiled, and a log line and
    /// `rekon_plugin_precompiled_refused` say why). Deserializing it runs
    /// its native code: set it only once it is covered by what was
    /// verified (a signature over the manifest listing it).
    pub precompiled: Option<super::precompiled::Precompiled>,
    /// Limits this plugin asks for, within the host's (`limits.rs`).
    pub limits: super::limits::PluginLimits,
}

impl LoadOptions {
    /// Settings given as a JSON value (`None` and JSON `null` are no
    /// settings).
    #[must_use]
    pub fn with_settings(mut self, settings: Option<&serde_json::Value>) -> Self {
        self.settings = settings
            .filter(|v| !v.is_null())
            .map(|v| Arc::from(v.to_string().as_str()));
        self
    }

    /// Running as instance `name`.
    #[must_use]
    pub fn with_instance(mut self, name: Option<&str>) -> Self {
        self.instance = name.map(str::to_owned);
        self
    }

    /// Bounded by `limits` where they are narrower than the host's.
    #[must_use]
    pub fn with_limits(mut self, limits: super::limits::PluginLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// One load in progress (what [`LoadedPlugin::register`] is given).
pub(crate) struct Loading {
    pub(crate) digest: String,
    pub(crate) origin: String,
    pub(crate) path: Option<PathBuf>,
    pub(crate) timings: LoadTimings,
    pub(crate) options: LoadOptions,
    /// Its admission export, linked, when it has one.
    pub(crate) admission: Option<super::bindings::AdmissionPluginPre<CallState>>,
    /// Its conversion export, linked, when it has one.
    pub(crate) conversion: Option<super::bindings::ConversionPluginPre<CallState>>,
    /// Its policies export, linked, when it has one.
    pub(crate) policies: Option<super::bindings::PoliciesPluginPre<CallState>>,
}

/// The longest settings schema kept (a schema is documentation; a module
/// declaring a larger one is loaded without it, and a warning says so).
const MAX_SETTINGS_SCHEMA_BYTES: usize = 256 * 1024;

/// `registration` renamed to instance `instance` (see
/// [`LoadOptions::instance`]).
fn as_instance(
    mut registration: Registration,
    instance: &str,
) -> Result<Registration, InstanceError> {
    if registration.name == instance {
        return Ok(registration);
    }
    if let Some(finalizer) = &registration.finalizer {
        registration.finalizer = Some(
            rekon_rules::settings::instance_finalizer(finalizer, instance).ok_or_else(|| {
                InstanceError::Finalizer {
                    finalizer: finalizer.clone(),
                }
            })?,
        );
    }
    registration.name = instance.to_owned();
    validate_registration(&registration)?;
    Ok(registration)
}

/// Why a registration cannot run as an instance.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum InstanceError {
    /// The finalizer with the instance name appended is too long.
    #[error(
        "its finalizer {finalizer:?} with the instance name appended is not a valid qualified name (the part after '/' would exceed 63 characters)"
    )]
    Finalizer {
        /// The registration's finalizer.
        finalizer: String,
    },
    /// The renamed registration breaks a rule (the name is no DNS label).
    #[error(transparent)]
    Invalid(#[from] InvalidRegistration),
}

/// A plugin that compiled, linked and registered. Cheap to clone; a call
/// holds a clone, so a reload never disturbs in-flight calls.
#[derive(Clone)]
pub struct LoadedPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    registration: Registration,
    /// The operator policy entries that apply to this plugin (resolved at
    /// load from the runtime's policy; a reload resolves them again).
    policy: Option<PluginPolicy>,
    /// `registration` with its permissions narrowed by `policy`.
    effective: Registration,
    digest: String,
    origin: String,
    path: Option<PathBuf>,
    loaded_at: SystemTime,
    timings: LoadTimings,
    /// The settings this load was given (every call reads them).
    settings: Option<Arc<str>>,
    /// The JSON Schema of its settings, as `register` declared it.
    settings_schema: Option<serde_json::Value>,
    /// The name the module registers (differs from `name` for an instance).
    registered_as: String,
    pre: PluginPre<CallState>,
    /// Its webhooks, when it declares any (asked once, after `register`).
    admission: Option<PluginAdmission>,
    /// The CRDs it converts, when it declares any (asked once, after `register`).
    conversion: Option<PluginConversion>,
    /// Its CEL policies (empty when it declares none).
    policies: Vec<super::cel_policies::CelPolicy>,
    runtime: Arc<RuntimeInner>,
    /// Its share of the host-wide memory budget (`host_budget.rs`).
    _booking: super::host_budget::Booking,
    /// Deadline of one `reconcile` or `map` call (the host's, or the
    /// plugin's narrower one: `limits.rs`).
    call_timeout: Duration,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.name())
            .field("version", &self.version())
            .field("digest", &self.digest())
            .field("origin", &self.inner.origin)
            .finish_non_exhaustive()
    }
}

impl LoadedPlugin {
    /// Calls `register` and validates the result (load time).
    pub(crate) fn register(
        runtime: Arc<RuntimeInner>,
        pre: PluginPre<CallState>,
        loading: Loading,
    ) -> Result<Self, LoadError> {
        let Loading {
            digest,
            origin,
            path,
            mut timings,
            options,
            admission,
            conversion,
            policies,
        } = loading;
        let started = Instant::now();
        // Until `register` returns, the plugin is named after its file.
        let provisional: Arc<str> = Arc::from(origin.as_str());
        let timeout = runtime.config.register_timeout;
        let mut schema = None;
        let registration = call(
            &runtime,
            &pre,
            &provisional,
            "register",
            timeout,
            Arc::new(NoReads),
            timestamp(SystemTime::UNIX_EPOCH),
            options.settings.clone(),
            |store, plugin| {
                let result = plugin.rekon_plugin_guest().call_register(&mut *store);
                schema = store.data_mut().settings_schema.take();
                result
            },
        )
        .map_err(|source| LoadError::Register {
            origin: origin.clone(),
            source: Box::new(source),
        })?
        .map_err(
            |message| match rekon_rules::settings::refused_settings(&message) {
                Some(reason) => LoadError::InvalidSettings {
                    origin: origin.clone(),
                    reason: reason.to_owned(),
                },
                None => LoadError::Refused {
                    origin: origin.clone(),
                    message,
                },
            },
        )?
        .convert();
        timings.register = started.elapsed();
        validate_registration(&registration).map_err(|e| LoadError::InvalidRegistration {
            origin: origin.clone(),
            reason: e.to_string(),
        })?;
        let registered_as = registration.name.clone();
        let registration = match &options.instance {
            None => registration,
            Some(instance) => {
                as_instance(registration, instance).map_err(|e| LoadError::Instance {
                    origin: origin.clone(),
                    instance: instance.clone(),
                    reason: e.to_string(),
                })?
            }
        };
        let settings_schema = match schema {
            Some(s) if s.len() > MAX_SETTINGS_SCHEMA_BYTES => {
                tracing::warn!(
                    plugin = %registration.name,
                    bytes = s.len(),
                    "the plugin's settings schema exceeds 256 KiB; not kept"
                );
                None
            }
            Some(s) => match serde_json::from_str::<serde_json::Value>(&s) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(plugin = %registration.name, error = %e, "the plugin's settings schema is not JSON; not kept");
                    None
                }
            },
            None => None,
        };
        let policy = runtime
            .config
            .policy
            .as_ref()
            .and_then(|p| p.for_plugin(&registration.name));
        let effective = match &policy {
            Some(policy) => {
                policy
                    .check_reads(&registration)
                    .map_err(|reason| LoadError::Policy {
                        origin: origin.clone(),
                        reason,
                    })?;
                let effective = policy.narrow_registration(&registration, None);
                if effective.permissions != registration.permissions {
                    tracing::info!(
                        plugin = %registration.name,
                        declared = ?registration.permissions,
                        effective = ?effective.permissions,
                        "operator policy narrowed the plugin's permissions"
                    );
                }
                effective
            }
            None => registration.clone(),
        };
        tracing::debug!(
            plugin = %registration.name,
            plugin.version = %registration.version,
            plugin.origin = %origin,
            ?timings,
            "registered plugin"
        );
        let name: Arc<str> = Arc::from(registration.name.as_str());
        let limits = options.limits.within(
            runtime.config.call_timeout,
            runtime.slots.per_plugin(),
            runtime.config.memory_limit_bytes,
        );
        let admission = match admission {
            Some(pre) => {
                PluginAdmission::load(&runtime, pre, &name, &origin, options.settings.clone())?
            }
            None => None,
        };
        let conversion = PluginConversion::load(
            &runtime,
            conversion,
            &name,
            &origin,
            &registration,
            options.settings.clone(),
        )?;
        let policies = super::cel_policies::load(
            &runtime,
            policies,
            &name,
            &origin,
            options.settings.clone(),
        )?;
        let booking =
            super::host_budget::book_memory(&runtime, &origin, &registration, limits.instances)?;
        // Its reserve holds from the load on; at most its instances.
        runtime.slots.know(&name, limits.instances);
        Ok(Self {
            inner: Arc::new(Inner {
                _booking: booking,
                call_timeout: limits.call_timeout,
                name,
                registration,
                policy,
                effective,
                digest,
                origin,
                path,
                loaded_at: runtime::now(),
                timings,
                settings: options.settings,
                settings_schema,
                registered_as,
                pre,
                admission,
                conversion,
                policies,
                runtime,
            }),
        })
    }

    /// Its webhooks, when it declares any.
    pub(super) fn admission(&self) -> Option<&PluginAdmission> {
        self.inner.admission.as_ref()
    }

    /// Its CEL admission policies (`wit/policies.wit`; empty when it
    /// declares none), each checked and compiled at load.
    #[must_use]
    pub fn policies(&self) -> &[super::cel_policies::CelPolicy] {
        &self.inner.policies
    }

    /// The CRDs it converts, when it declares any.
    pub(super) fn conversion(&self) -> Option<&PluginConversion> {
        self.inner.conversion.as_ref()
    }

    /// The deadline of its reconciles.
    pub(super) fn call_timeout(&self) -> std::time::Duration {
        self.inner.call_timeout
    }

    /// Whether a reconcile of this plugin may start now: `Err(wait)` while
    /// it is backed off for hitting its bounds again and again and its next
    /// turn is `wait` away (CPU fair share, `fair_share.rs`). The
    /// controller puts the key back on its queue for that long.
    ///
    /// # Errors
    /// How long until its next turn.
    pub fn admit(&self) -> Result<(), std::time::Duration> {
        self.inner.runtime.containment.admit(&self.inner.name)
    }

    /// The plugin's name (from its registration).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The plugin's own version (from its registration).
    #[must_use]
    pub fn version(&self) -> &str {
        &self.inner.registration.version
    }

    /// What the plugin declared when it was loaded.
    #[must_use]
    pub fn registration(&self) -> &Registration {
        &self.inner.registration
    }

    /// The registration with its permissions narrowed by the operator
    /// policy (the same as [`Self::registration`] when no policy applies).
    /// A `primary` permission stays `primary` here; the per-action check
    /// refuses clusters the policy does not allow.
    #[must_use]
    pub fn effective_registration(&self) -> &Registration {
        &self.inner.effective
    }

    /// The operator policy entries that apply to this plugin, if any.
    #[must_use]
    pub fn policy(&self) -> Option<&PluginPolicy> {
        self.inner.policy.as_ref()
    }

    /// Hex sha256 of the component file.
    #[must_use]
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// The file it was loaded from (`None` for [`PluginRuntime::load_bytes`]).
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// When it was loaded.
    #[must_use]
    pub fn loaded_at(&self) -> SystemTime {
        self.inner.loaded_at
    }

    /// Where the time of this load went.
    #[must_use]
    pub fn load_timings(&self) -> LoadTimings {
        self.inner.timings
    }

    /// The settings (JSON text) this load was given.
    #[must_use]
    pub fn settings(&self) -> Option<&str> {
        self.inner.settings.as_deref()
    }

    /// The JSON Schema of the settings the plugin accepts, if it declared
    /// one during `register`.
    #[must_use]
    pub fn settings_schema(&self) -> Option<&serde_json::Value> {
        self.inner.settings_schema.as_ref()
    }

    /// The name the module registers itself under; differs from
    /// [`Self::name`] when it runs as an instance ([`LoadOptions::instance`]).
    #[must_use]
    pub fn registered_as(&self) -> &str {
        &self.inner.registered_as
    }

    /// Whether `other` is the very same load (not just the same name).
    #[must_use]
    pub fn same_load(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Reconciles one request in a fresh sandbox on a blocking thread, then
    /// checks every returned action against the registered permissions and
    /// the operator policy: an action outside them fails the whole
    /// reconcile with [`CallError::Forbidden`] (nothing of that outcome is
    /// to be written).
    pub async fn reconcile(
        &self,
        req: Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        request_time: SystemTime,
    ) -> Result<Outcome, CallError> {
        let this = self.clone();
        self.blocking("reconcile", move || {
            this.reconcile_blocking(&req, phase, reads, request_time)
        })
        .await
    }

    /// [`Self::reconcile`] on the current thread (blocks it for the call).
    pub fn reconcile_blocking(
        &self,
        req: &Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        request_time: SystemTime,
    ) -> Result<Outcome, CallError> {
        self.reconcile_as("reconcile", req, phase, reads, request_time)
    }

    /// [`Self::reconcile_blocking`] for a shadow run (`crate::change::shadow`): its
    /// time and sandbox failures are reported under function
    /// `shadow_reconcile`, apart from the serving version's `reconcile`.
    pub(crate) fn shadow_reconcile_blocking(
        &self,
        req: &Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        request_time: SystemTime,
    ) -> Result<Outcome, CallError> {
        self.reconcile_as("shadow_reconcile", req, phase, reads, request_time)
    }

    fn reconcile_as(
        &self,
        metric: &'static str,
        req: &Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        request_time: SystemTime,
    ) -> Result<Outcome, CallError> {
        let clusters = reads.clusters();
        let req: wit::Request = req.clone().convert();
        let result =
            self.call_fresh_as("reconcile", metric, reads, request_time, |store, plugin| {
                plugin
                    .rekon_plugin_guest()
                    .call_reconcile(store, &req, phase.convert())
            })?;
        self.finish_reconcile(result, &clusters, metric != "reconcile")
    }

    /// Whether this plugin may perform `action` (declared permissions, then
    /// the operator policy): the check the writer makes before every write
    /// done for it, the host's own finalizer patches included.
    ///
    /// # Errors
    /// [`CallError::Forbidden`] naming the action and why.
    pub fn check_action(&self, action: &Action, clusters: &[ClusterInfo]) -> Result<(), CallError> {
        capability::check_action_with_policy(
            self.name(),
            &self.inner.registration,
            self.inner.policy.as_ref(),
            action,
            clusters,
        )
    }

    fn finish_reconcile(
        &self,
        result: Result<wit::Outcome, wit::ReconcileError>,
        clusters: &[ClusterInfo],
        shadow: bool,
    ) -> Result<Outcome, CallError> {
        let outcome = result.map_err(|e| CallError::Plugin {
            plugin: self.name().to_string(),
            message: e.message,
            retryable: e.retryable,
        })?;
        let (runtime, name) = (&self.inner.runtime, &self.inner.name);
        let config = &runtime.config;
        let enforce = |checked| {
            bounds::enforce(
                name,
                checked,
                &config.outcome_bounds,
                &runtime.containment,
                shadow,
            )
            .map_err(|bound| CallError::Contained {
                plugin: name.to_string(),
                bound,
            })
        };
        enforce(bounds::check_count(
            outcome.actions.len(),
            &config.outcome_bounds,
        ))?;
        let outcome: Outcome = outcome.convert();
        enforce(bounds::check(&outcome, &config.outcome_bounds))?;
        capability::check_outcome_with_policy(
            self.name(),
            &self.inner.registration,
            self.inner.policy.as_ref(),
            &outcome,
            clusters,
        )
        .inspect_err(|e| {
            // A write it never declared (or the operator's policy refuses):
            // counted and shown with the bounds, never written.
            let containment = &runtime.containment;
            if shadow {
                containment.shadow_contained(name, FORBIDDEN);
            } else {
                containment.contained(name, FORBIDDEN, &e.to_string());
            }
        })?;
        Ok(outcome)
    }

    /// Asks the plugin which primaries an event on `object_json` (of
    /// `resource` in `cluster`) concerns; for watches with the `custom`
    /// mapping. Runs in a fresh sandbox on a blocking thread.
    pub async fn map(
        &self,
        cluster: &str,
        resource: &Resource,
        object_json: String,
        reads: Arc<dyn HostReads>,
    ) -> Result<Vec<Request>, CallError> {
        let this = self.clone();
        let cluster = cluster.to_string();
        let resource = resource.clone();
        self.blocking("map", move || {
            this.map_blocking(&cluster, &resource, &object_json, reads)
        })
        .await
    }

    /// [`Self::map`] on the current thread.
    pub fn map_blocking(
        &self,
        cluster: &str,
        resource: &Resource,
        object_json: &str,
        reads: Arc<dyn HostReads>,
    ) -> Result<Vec<Request>, CallError> {
        let resource: wit::Resource = resource.clone().convert();
        self.call_fresh("map", reads, SystemTime::now(), |store, plugin| {
            plugin
                .rekon_plugin_guest()
                .call_map(store, cluster, &resource, object_json)
        })
        .map(Convert::convert)
    }

    /// Instantiates the plugin once for several calls. The controller does
    /// not use this (plugins are specified to keep no state between calls
    /// and each reconcile gets a fresh instance); it exists for dry runs of
    /// many requests and for measuring instantiation cost. After a failed
    /// call the session is unusable (the instance may be poisoned).
    pub fn session(
        &self,
        reads: Arc<dyn HostReads>,
        request_time: SystemTime,
    ) -> Result<PluginSession, CallError> {
        let clusters = reads.clusters();
        let (runtime, timeout) = (&self.inner.runtime, self.inner.call_timeout);
        let slot = runtime
            .slots
            .take_for_call(&self.inner.name, timeout, &runtime.containment)?;
        let mut store = new_store(
            &self.inner.runtime,
            &self.inner.name,
            reads,
            timestamp(request_time),
            self.inner.settings.clone(),
        );
        set_deadline(&self.inner.runtime, &mut store, timeout);
        let instance =
            self.inner.pre.instantiate(&mut store).map_err(|e| {
                classify(&self.inner.name, "instantiate", &store, &e, timeout, true)
            })?;
        Ok(PluginSession {
            _slot: slot,
            plugin: self.clone(),
            store,
            instance,
            clusters,
            poisoned: false,
        })
    }

    fn call_fresh<R>(
        &self,
        function: &'static str,
        reads: Arc<dyn HostReads>,
        request_time: SystemTime,
        f: impl FnOnce(&mut Store<CallState>, &Plugin) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        self.call_fresh_as(function, function, reads, request_time, f)
    }

    /// [`Self::call_fresh`], its metrics labelled `metric` rather than `function`.
    fn call_fresh_as<R>(
        &self,
        function: &'static str,
        metric: &'static str,
        reads: Arc<dyn HostReads>,
        request_time: SystemTime,
        f: impl FnOnce(&mut Store<CallState>, &Plugin) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let timeout = self.inner.call_timeout;
        self.call_measured(
            &self.inner.pre,
            function,
            metric,
            timeout,
            reads,
            request_time,
            f,
        )
    }

    /// One call of `function` on an instance of `pre` (the admission export's
    /// bindings) under `timeout`, measured and contained like a reconcile.
    pub(super) fn call_fresh_with<P: Instantiate, R>(
        &self,
        pre: &P,
        function: &'static str,
        timeout: std::time::Duration,
        reads: Arc<dyn HostReads>,
        f: impl FnOnce(&mut Store<CallState>, &P::Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        self.call_measured(
            pre,
            function,
            function,
            timeout,
            reads,
            SystemTime::now(),
            f,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn call_measured<P: Instantiate, R>(
        &self,
        pre: &P,
        function: &'static str,
        metric: &'static str,
        timeout: std::time::Duration,
        reads: Arc<dyn HostReads>,
        request_time: SystemTime,
        f: impl FnOnce(&mut Store<CallState>, &P::Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let span = tracing::debug_span!("plugin call", plugin = %self.inner.name, function);
        let _entered = span.enter();
        let started = std::time::Instant::now();
        let result = call(
            &self.inner.runtime,
            pre,
            &self.inner.name,
            function,
            timeout,
            reads,
            timestamp(request_time),
            self.inner.settings.clone(),
            f,
        );
        // ops hook: per-call WASM time and sandbox failures (a plugin's own
        // error result is not a sandbox failure).
        let metrics = &self.inner.runtime.config.metrics;
        metrics.observe_wasm_call(&self.inner.name, metric, started.elapsed());
        if let Err(e) = &result
            && e.kind() != "plugin_error"
        {
            metrics.wasm_call_failed(&self.inner.name, metric, e.kind());
            // Stopped by the host at its deadline or memory cap: counted
            // with the outcome bounds (`bounds::enforce`).
            let containment = &self.inner.runtime.containment;
            let reason = match e {
                CallError::Timeout { .. } => Some("Timeout"),
                CallError::OutOfMemory { .. } => Some("OutOfMemory"),
                // Refused while being copied out (`bounds::LiftTooLarge`).
                CallError::Contained { bound, .. } => {
                    tracing::warn!(plugin = %self.inner.name, function, %bound, "refused what the plugin returned: out of bounds; nothing of it is written");
                    Some(bound.reason())
                }
                _ => None,
            };
            match reason {
                // A shadow's (`shadow_reconcile`): not the serving version's.
                Some(reason) if metric != function => {
                    containment.shadow_contained(&self.inner.name, reason);
                }
                Some(reason) => containment.contained(&self.inner.name, reason, &e.to_string()),
                None => {}
            }
        } else if function == "reconcile" && metric == "reconcile" {
            // Within its deadline and memory (its outcome's bounds are
            // checked next, and count against it if broken).
            self.inner
                .runtime
                .containment
                .within_bounds(&self.inner.name);
        }
        result
    }

    pub(super) async fn blocking<R: Send + 'static>(
        &self,
        function: &'static str,
        f: impl FnOnce() -> Result<R, CallError> + Send + 'static,
    ) -> Result<R, CallError> {
        // The caller's span (the reconcile's: plugin, cluster, namespace,
        // name) follows the call to the blocking thread, so the plugin's
        // log lines carry the request.
        let span = tracing::Span::current();
        let panicked = |payload| CallError::Host {
            plugin: self.name().to_string(),
            function,
            message: format!(
                "host code panicked during the call: {}",
                panic_text(payload)
            ),
        };
        let in_place = self.inner.runtime.config.call_mode == super::runtime::CallMode::InPlace
            && tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if in_place {
            // The wasm call is synchronous and bounded by its epoch
            // deadline; running it here spares the hand-off to the blocking
            // pool while tokio moves this worker's other tasks elsewhere.
            return tokio::task::block_in_place(|| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| span.in_scope(f)))
            })
            .unwrap_or_else(|payload| Err(panicked(payload)));
        }
        match tokio::task::spawn_blocking(move || span.in_scope(f)).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => Err(panicked(e.into_panic())),
            Err(_) => Err(CallError::Host {
                plugin: self.name().to_string(),
                function,
                message: "the call was cancelled".to_string(),
            }),
        }
    }
}

/// An instance reused across calls; see [`LoadedPlugin::session`].
pub struct PluginSession {
    /// Its instance slot, held for the session's life.
    _slot: super::slots::Slot,
    plugin: LoadedPlugin,
    store: Store<CallState>,
    instance: Plugin,
    clusters: Vec<ClusterInfo>,
    poisoned: bool,
}

impl PluginSession {
    /// Reconciles `req` (phase live) on the session's instance (same checks
    /// as [`LoadedPlugin::reconcile`]).
    pub fn reconcile(&mut self, req: &Request) -> Result<Outcome, CallError> {
        let inner = &self.plugin.inner;
        if self.poisoned {
            return Err(CallError::Instantiate {
                plugin: self.plugin.name().to_string(),
                message: "session instance is unusable after a failed call".to_string(),
            });
        }
        let timeout = inner.call_timeout;
        set_deadline(&inner.runtime, &mut self.store, timeout);
        let result = self
            .instance
            .rekon_plugin_guest()
            .call_reconcile(&mut self.store, &req.clone().convert(), wit::Phase::Live)
            .map_err(|e| {
                self.poisoned = true;
                classify(&inner.name, "reconcile", &self.store, &e, timeout, false)
            })?;
        self.plugin.finish_reconcile(result, &self.clusters, false)
    }
}
