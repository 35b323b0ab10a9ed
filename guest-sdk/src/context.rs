//! [`Context`]: what a plugin can see during a call — typed reads from the
//! host's caches, the engaged clusters, a structured log and the request time.
//!
//! In a wasm plugin the context is backed by the host imports; in native
//! tests by the [`testkit`](crate::testkit) world. Plugin code is the same.
//!
//! ```no_run
//! use rekon_sdk::{Context, Error, Request};
//! use k8s_openapi::api::core::v1::{ConfigMap, Node};
//!
//! fn nodes_of(ctx: &Context, req: &Request) -> Result<Vec<Node>, Error> {
//!     let Some(cm) = ctx.get_requested::<ConfigMap>(req)? else {
//!         return Ok(Vec::new()); // deleted meanwhile
//!     };
//!     let pool = cm.metadata.name.unwrap_or_default();
//!     let selector = format!("node-role.kubernetes.io/{pool}");
//!     let nodes = ctx.list::<Node>(&req.cluster, None, Some(&selector))?;
//!     rekon_sdk::info!(ctx, "found {} nodes", nodes.len(); pool = pool);
//!     Ok(nodes)
//! }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::core::DynamicObject;
use serde::de::DeserializeOwned;

use crate::error::ReadError;
use crate::resource::{Kind, ResourceType};
use crate::settings::SettingsSource;
pub use rekon_rules::Phase;

/// The key of one object to reconcile. Requests are level-based: they carry
/// no event payload; the plugin reads current state through the [`Context`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// The cluster the object lives in.
    pub cluster: String,
    /// Namespace, for namespaced resources.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
}

impl Request {
    /// A request for a namespaced object.
    #[must_use]
    pub fn namespaced(cluster: &str, namespace: &str, name: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    /// A request for a cluster-scoped object.
    #[must_use]
    pub fn cluster_scoped(cluster: &str, name: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            namespace: None,
            name: name.to_owned(),
        }
    }

    /// The request for a typed object living in `cluster`.
    #[must_use]
    pub fn for_object<K: Kind>(cluster: &str, obj: &K) -> Self {
        let meta = obj.meta();
        Self {
            cluster: cluster.to_owned(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.cluster, ns, self.name),
            None => write!(f, "{}/{}", self.cluster, self.name),
        }
    }
}

/// Health of an engaged cluster as the host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterHealth {
    /// Reachable and its caches are synced.
    Ready,
    /// Reachable; caches are still listing.
    Syncing,
    /// Requests to the cluster are failing; caches may be stale.
    Unreachable,
}

/// An engaged cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClusterInfo {
    /// Cluster name (as used in requests and actions).
    pub name: String,
    /// Whether it is the primary cluster.
    pub primary: bool,
    /// Current health.
    pub health: ClusterHealth,
}

impl ClusterInfo {
    /// Whether the cluster is reachable and synced.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.health == ClusterHealth::Ready
    }
}

/// Severity of a plugin log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogLevel {
    /// Verbose detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something odd but handled.
    Warn,
    /// Something failed.
    Error,
}

/// Where a [`Context`] gets its data: the host imports in wasm, the test
/// kit's world natively. Objects are JSON text, exactly as over the WIT.
/// The settings of the load come through [`SettingsSource`].
pub(crate) trait Backend: SettingsSource {
    fn get(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError>;
    fn list(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError>;
    fn clusters(&self) -> Vec<ClusterInfo>;
    fn log(&self, level: LogLevel, message: &str, fields: &[(String, String)]);
    fn request_time(&self) -> Timestamp;
    /// Hands the settings' JSON Schema to the host (during `register`).
    fn declare_settings_schema(&self, schema: &str);
}

/// What a plugin can see during one call. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    backend: Rc<dyn Backend>,
    phase: Phase,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

impl Context {
    pub(crate) fn new(backend: Rc<dyn Backend>) -> Self {
        Self {
            backend,
            phase: Phase::Live,
        }
    }

    pub(crate) fn backend(&self) -> Rc<dyn Backend> {
        Rc::clone(&self.backend)
    }

    /// The plugin's settings as `S` (its settings type, see
    /// [`crate::settings`]): what the operator configured, or `S::default()`
    /// when nothing was. They were validated when the plugin loaded, so
    /// this fails only if `S` is not the type the registration declared.
    ///
    /// # Errors
    /// Settings that do not deserialize as `S` or do not validate
    /// (terminal).
    pub fn settings<S: crate::settings::Settings>(&self) -> Result<S, crate::Error> {
        crate::settings::parse::<S>(self.backend.settings().as_deref())
            .map_err(|e| crate::Error::terminal(rekon_rules::settings::refusal(&e)))
    }

    pub(crate) fn with_phase(mut self, phase: Phase) -> Self {
        self.phase = phase;
        self
    }

    /// Why the current reconcile runs: [`Phase::Live`] for a primary,
    /// [`Phase::Deleting`] while it is being deleted, [`Phase::Leaving`]
    /// when it carries the plugin's finalizer but no longer matches the
    /// primary selector. `Live` outside `reconcile` (in `map`).
    ///
    /// [`Plugin::reconcile`](crate::Plugin::reconcile) gets the same
    /// answer as an [`Event`](crate::Event); the phase tells a deletion
    /// from a departure from the selector:
    ///
    /// ```no_run
    /// # use rekon_sdk::prelude::*;
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// fn reconcile(ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
    ///     match event {
    ///         Event::Cleanup(_) if ctx.phase() == Phase::Leaving => Ok(Outcome::done()),
    ///         Event::Cleanup(_) => Ok(Outcome::done()), // Ok releases the finalizer
    ///         Event::Apply(_) => Ok(Outcome::done()),
    ///     }
    /// }
    /// ```
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The object `name` of kind `K` in `cluster` (`namespace` for
    /// namespaced kinds, `None` for cluster-scoped ones), or `None` if the
    /// cache has no such object.
    pub fn get<K: Kind + DeserializeOwned>(
        &self,
        cluster: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, ReadError> {
        let resource = K::resource_type();
        match self.backend.get(cluster, &resource, namespace, name)? {
            Some(text) => decode(cluster, &resource, &text).map(Some),
            None => Ok(None),
        }
    }

    /// The object a request names, as kind `K` (usually the primary).
    pub fn get_requested<K: Kind + DeserializeOwned>(
        &self,
        req: &Request,
    ) -> Result<Option<K>, ReadError> {
        self.get::<K>(&req.cluster, req.namespace.as_deref(), &req.name)
    }

    /// Objects of kind `K` in `cluster`, optionally in one namespace and
    /// matching a label selector (`a=b,c in (d),!e`).
    pub fn list<K: Kind + DeserializeOwned>(
        &self,
        cluster: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<K>, ReadError> {
        let resource = K::resource_type();
        self.backend
            .list(cluster, &resource, namespace, label_selector)?
            .iter()
            .map(|text| decode(cluster, &resource, text))
            .collect()
    }

    /// Untyped read: the object as JSON.
    pub fn get_json(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<serde_json::Value>, ReadError> {
        match self.backend.get(cluster, resource, namespace, name)? {
            Some(text) => decode(cluster, resource, &text).map(Some),
            None => Ok(None),
        }
    }

    /// Untyped list: objects as JSON.
    pub fn list_json(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<serde_json::Value>, ReadError> {
        self.backend
            .list(cluster, resource, namespace, label_selector)?
            .iter()
            .map(|text| decode(cluster, resource, text))
            .collect()
    }

    /// Untyped read as a kube `DynamicObject` (typed metadata, untyped data;
    /// `DynamicObject::try_parse` turns it into a typed value).
    pub fn get_dynamic(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<DynamicObject>, ReadError> {
        match self.backend.get(cluster, resource, namespace, name)? {
            Some(text) => decode(cluster, resource, &text).map(Some),
            None => Ok(None),
        }
    }

    /// Untyped list as kube `DynamicObject`s.
    pub fn list_dynamic(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<DynamicObject>, ReadError> {
        self.backend
            .list(cluster, resource, namespace, label_selector)?
            .iter()
            .map(|text| decode(cluster, resource, text))
            .collect()
    }

    /// The engaged clusters and their health.
    #[must_use]
    pub fn clusters(&self) -> Vec<ClusterInfo> {
        self.backend.clusters()
    }

    /// The name of the primary cluster, if it is engaged.
    #[must_use]
    pub fn primary_cluster(&self) -> Option<String> {
        self.clusters()
            .into_iter()
            .find(|c| c.primary)
            .map(|c| c.name)
    }

    /// One engaged cluster by name.
    #[must_use]
    pub fn cluster(&self, name: &str) -> Option<ClusterInfo> {
        self.clusters().into_iter().find(|c| c.name == name)
    }

    /// The time the request was taken from the queue, as a k8s-openapi
    /// `Time` (ready for status fields). Constant during a call.
    #[must_use]
    pub fn now(&self) -> Time {
        Time(self.backend.request_time())
    }

    /// The request time truncated to whole seconds: exactly what a `Time`
    /// field holds once written and read back (it serializes as RFC 3339
    /// with whole seconds). Use it for timestamps in a status that is
    /// compared with the stored one, so nanoseconds do not make every
    /// reconcile look like a change. Constant during a call.
    ///
    /// ```
    /// # use rekon_sdk::testkit::World;
    /// # let mut world = World::new().primary("main");
    /// # world.advance(std::time::Duration::from_millis(1500));
    /// # let ctx = world.context();
    /// use rekon_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    /// use rekon_sdk::serde_json;
    /// let stored: Time = serde_json::from_value(serde_json::to_value(ctx.now()).unwrap()).unwrap();
    /// assert_ne!(ctx.now(), stored);
    /// assert_eq!(ctx.now_seconds(), stored);
    /// ```
    #[must_use]
    pub fn now_seconds(&self) -> Time {
        Time(whole_seconds(self.backend.request_time()))
    }

    /// The request time as a `jiff::Timestamp`, for arithmetic
    /// (`ctx.timestamp().duration_since(created)`).
    #[must_use]
    pub fn timestamp(&self) -> Timestamp {
        self.backend.request_time()
    }

    /// A structured log line; the host tags it with the plugin and request.
    /// The [`info!`](crate::info) family of macros is shorter.
    pub fn log(&self, level: LogLevel, message: &str, fields: &[(&str, &dyn fmt::Display)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.to_string()))
            .collect();
        self.backend.log(level, message, &fields);
    }

    /// A debug line without fields.
    pub fn debug(&self, message: &str) {
        self.log(LogLevel::Debug, message, &[]);
    }

    /// An info line without fields.
    pub fn info(&self, message: &str) {
        self.log(LogLevel::Info, message, &[]);
    }

    /// A warning line without fields.
    pub fn warn(&self, message: &str) {
        self.log(LogLevel::Warn, message, &[]);
    }

    /// An error line without fields.
    pub fn error(&self, message: &str) {
        self.log(LogLevel::Error, message, &[]);
    }
}

/// `t` truncated to the second like `Time`'s serialization (`%S` floors the
/// civil time, so instants before 1970 go down, not towards zero).
fn whole_seconds(t: Timestamp) -> Timestamp {
    let second = t.as_second() - i64::from(t.subsec_nanosecond() < 0);
    Timestamp::new(second, 0).unwrap_or(t)
}

/// Whether a status (or any API value) a plugin computed differs from the
/// stored one *as the API server would store it*: both are compared in
/// their JSON form, so what does not survive a round trip — nanoseconds of a
/// `Time`, `None` versus an omitted default — is not a difference. `None`
/// (nothing stored yet) always differs. A value that cannot be serialized
/// counts as changed (writing it will report the error).
///
/// ```
/// use rekon_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
/// use rekon_sdk::k8s_openapi::jiff::Timestamp;
/// let stored = Time(Timestamp::new(1_735_689_600, 0).unwrap());
/// let computed = Time(Timestamp::new(1_735_689_600, 500_000_000).unwrap());
/// assert_ne!(stored, computed);
/// assert!(!rekon_sdk::status_changed(Some(&stored), &computed));
/// assert!(rekon_sdk::status_changed(None, &computed));
/// ```
#[must_use]
pub fn status_changed<T: serde::Serialize>(stored: Option<&T>, computed: &T) -> bool {
    let Some(stored) = stored else {
        return true;
    };
    match (serde_json::to_value(stored), serde_json::to_value(computed)) {
        (Ok(a), Ok(b)) => a != b,
        _ => true,
    }
}

fn decode<T: DeserializeOwned>(
    cluster: &str,
    resource: &ResourceType,
    text: &str,
) -> Result<T, ReadError> {
    serde_json::from_str(text).map_err(|e| ReadError::Decode {
        cluster: cluster.to_owned(),
        kind: resource.kind.clone(),
        message: e.to_string(),
    })
}

/// An equality label selector (`a=b,c=d`) from a label map.
///
/// ```
/// use std::collections::BTreeMap;
/// let labels = BTreeMap::from([("app".to_string(), "web".to_string()), ("tier".to_string(), "db".to_string())]);
/// assert_eq!(rekon_sdk::selector_from_labels(&labels), "app=web,tier=db");
/// ```
#[must_use]
pub fn selector_from_labels(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Logs through a [`Context`] at a level, with a format string and
/// optional `key = value` fields after a `;`.
///
/// ```no_run
/// # let ctx: rekon_sdk::Context = unimplemented!();
/// # let name = "n1";
/// rekon_sdk::log!(ctx, rekon_sdk::LogLevel::Info, "labelled node {name}"; node = name, count = 3);
/// ```
#[macro_export]
macro_rules! log {
    ($ctx:expr, $level:expr, $fmt:literal $(, $arg:expr)* ; $($key:ident = $value:expr),+ $(,)?) => {
        $ctx.log($level, &::std::format!($fmt $(, $arg)*), &[$((::std::stringify!($key), &$value as &dyn ::std::fmt::Display)),+])
    };
    ($ctx:expr, $level:expr, $fmt:literal $(, $arg:expr)* $(,)?) => {
        $ctx.log($level, &::std::format!($fmt $(, $arg)*), &[])
    };
}

/// `debug!(ctx, "fmt", args..; key = value, ..)`: see [`log!`](crate::log).
#[macro_export]
macro_rules! debug {
    ($ctx:expr, $($rest:tt)+) => { $crate::log!($ctx, $crate::LogLevel::Debug, $($rest)+) };
}

/// `info!(ctx, "fmt", args..; key = value, ..)`: see [`log!`](crate::log).
#[macro_export]
macro_rules! info {
    ($ctx:expr, $($rest:tt)+) => { $crate::log!($ctx, $crate::LogLevel::Info, $($rest)+) };
}

/// `warn!(ctx, "fmt", args..; key = value, ..)`: see [`log!`](crate::log).
#[macro_export]
macro_rules! warn {
    ($ctx:expr, $($rest:tt)+) => { $crate::log!($ctx, $crate::LogLevel::Warn, $($rest)+) };
}

/// `error!(ctx, "fmt", args..; key = value, ..)`: see [`log!`](crate::log).
#[macro_export]
macro_rules! error {
    ($ctx:expr, $($rest:tt)+) => { $crate::log!($ctx, $crate::LogLevel::Error, $($rest)+) };
}
