//! Starting and stopping simulated clusters, the handle tests use, and
//! kubeconfig files.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::serve::ListenerExt;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::auth::{ADMIN_USER, Security, TokenUser};
use crate::error::ApiError;
use crate::faults::{FaultRule, Faults};
use crate::rbac::Mode;
use crate::resources::{ResourceInfo, split_api_version};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::{ClusterState, handle};
use crate::store::{DeleteOpts, ListOpts, PatchKind, WriteOpts};
use crate::tls::{CertifiedKey, Peer, Pki, TlsError, TlsListener};

/// Errors of starting or stopping clusters.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Binding the listener failed.
    #[error("failed to bind cluster {cluster} on 127.0.0.1:{port}")]
    Bind {
        /// Cluster name.
        cluster: String,
        /// Requested port.
        port: u16,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Writing the kubeconfig failed.
    #[error("failed to write kubeconfig {path}")]
    Kubeconfig {
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Two clusters share a name.
    #[error("failed to start clusters: duplicate cluster name {0}")]
    DuplicateName(String),
    /// Creating the certificates or the TLS configuration failed.
    #[error("failed to set up TLS for cluster {cluster}")]
    Tls {
        /// Cluster name.
        cluster: String,
        /// Cause.
        #[source]
        source: TlsError,
    },
}

/// Configuration of one cluster.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Cluster (and kubeconfig context) name.
    pub name: String,
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Watch history kept per resource (events); older resourceVersions
    /// answer 410 Expired.
    pub history_limit: usize,
    /// Capacity of each resource's live event channel.
    pub channel_capacity: usize,
    /// Interval of periodic watch bookmarks.
    pub bookmark_interval: Duration,
    /// Serve HTTPS with a generated CA (kubeconfigs carry the CA).
    pub tls: bool,
    /// Require authentication (401 without credentials).
    pub authenticate: bool,
    /// How requests are authorized.
    pub authorization: Mode,
    /// Static bearer-token users (with authentication).
    pub users: Vec<TokenUser>,
}

impl SimConfig {
    /// Defaults: free port, 10,000 events of history per resource,
    /// bookmarks every 30 s.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            port: 0,
            history_limit: 10_000,
            channel_capacity: 4096,
            bookmark_interval: Duration::from_secs(30),
            tls: false,
            authenticate: false,
            authorization: Mode::AlwaysAllow,
            users: Vec::new(),
        }
    }

    /// Serves HTTPS with a generated CA.
    #[must_use]
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Requires authentication and authorizes with RBAC (`on`), or
    /// neither. The kubeconfig's user becomes `kubernetes-admin` in
    /// `system:masters`.
    #[must_use]
    pub fn auth(mut self, on: bool) -> Self {
        self.authenticate = on;
        self.authorization = if on { Mode::Rbac } else { Mode::AlwaysAllow };
        self
    }

    /// Sets the authorization mode alone.
    #[must_use]
    pub fn authorization(mut self, mode: Mode) -> Self {
        self.authorization = mode;
        self
    }

    /// Adds a user authenticated by `token` (the apiserver's
    /// `--token-auth-file`).
    #[must_use]
    pub fn token_user(mut self, token: &str, name: &str, groups: &[&str]) -> Self {
        self.users.push(TokenUser {
            token: token.to_string(),
            name: name.to_string(),
            groups: groups.iter().map(|g| (*g).to_string()).collect(),
        });
        self
    }

    /// Listens on this port.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Keeps this many events of history per resource.
    #[must_use]
    pub fn history_limit(mut self, n: usize) -> Self {
        self.history_limit = n;
        self
    }

    /// Sends watch bookmarks this often.
    #[must_use]
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }
}

/// One running simulated cluster. Dropping it stops the server.
pub struct SimCluster {
    state: Arc<ClusterState>,
    addr: SocketAddr,
    task: Option<JoinHandle<()>>,
    /// The credentials kubeconfigs carry.
    admin: Credentials,
}

/// A user's credentials in a kubeconfig.
#[derive(Debug, Clone, Default)]
pub enum Credentials {
    /// None (`user: {}`).
    #[default]
    None,
    /// A bearer token.
    Token(String),
    /// A client certificate and key.
    ClientCert(CertifiedKey),
}

/// One cluster of a kubeconfig: context, cluster and user share `name`.
#[derive(Debug, Clone)]
pub struct KubeconfigEntry {
    /// Context, cluster and user name.
    pub name: String,
    /// `http://` or `https://` URL.
    pub server: String,
    /// CA certificate (PEM) for `certificate-authority-data`.
    pub ca_pem: Option<String>,
    /// The user's credentials.
    pub credentials: Credentials,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("name", &self.state.name)
            .field("addr", &self.addr)
            .finish()
    }
}

impl SimCluster {
    /// Starts a cluster named `name` on a free port.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kube_sim::SimError> {
    /// let sim = kube_sim::SimCluster::start("main").await?;
    /// println!("{}", sim.url());
    /// # Ok(()) }
    /// ```
    pub async fn start(name: &str) -> Result<Self, SimError> {
        Self::start_with(SimConfig::new(name)).await
    }

    /// Starts a cluster with a configuration.
    pub async fn start_with(cfg: SimConfig) -> Result<Self, SimError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", cfg.port))
            .await
            .map_err(|source| SimError::Bind {
                cluster: cfg.name.clone(),
                port: cfg.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            cluster: cfg.name.clone(),
            port: cfg.port,
            source,
        })?;
        let tls_err = |source| SimError::Tls {
            cluster: cfg.name.clone(),
            source,
        };
        let (pki, server_config, admin) = if cfg.tls {
            let pki = Pki::generate(&cfg.name).map_err(tls_err)?;
            let server_config = pki.server_config().map_err(tls_err)?;
            let admin = pki
                .client_cert(ADMIN_USER, &["system:masters"])
                .map_err(tls_err)?;
            (Some(pki), Some(server_config), Some(admin))
        } else {
            (None, None, None)
        };
        let mut state = ClusterState::new(
            &cfg.name,
            cfg.history_limit,
            cfg.channel_capacity,
            cfg.bookmark_interval,
        );
        state.security = Security::new(pki, cfg.authenticate, cfg.authorization, &cfg.users);
        // With TLS the admin always has a certificate: kubectl prompts for
        // a password when an https cluster's user has no credentials.
        let admin = match admin {
            Some(cert) => Credentials::ClientCert(cert),
            None if cfg.authenticate => Credentials::Token(state.security.admin_token.clone()),
            None => Credentials::None,
        };
        let state = Arc::new(state);
        *state.address.lock() = addr.to_string();
        // The garbage collector's and namespace controller's deletes meet
        // admission through this task (`store::gc`).
        crate::store::spawn_controller_deletes(&state);
        let app = Router::new().fallback(handle).with_state(state.clone());
        let mut stop = state.shutdown.subscribe();
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let name = cfg.name.clone();
        let task = match server_config {
            Some(server_config) => {
                let listener =
                    TlsListener::new(listener, server_config).map_err(|source| SimError::Bind {
                        cluster: cfg.name.clone(),
                        port: cfg.port,
                        source,
                    })?;
                let app = app.into_make_service_with_connect_info::<Peer>();
                tokio::spawn(async move {
                    let serve = axum::serve(listener, app).with_graceful_shutdown(stopped);
                    if let Err(e) = serve.await {
                        tracing::error!(cluster = %name, error = %e, "failed to serve cluster");
                    }
                })
            }
            None => {
                let listener = listener.tap_io(|tcp| {
                    // Small request/response pairs: Nagle would add 40 ms stalls.
                    let _ = tcp.set_nodelay(true);
                });
                tokio::spawn(async move {
                    let serve = axum::serve(listener, app).with_graceful_shutdown(stopped);
                    if let Err(e) = serve.await {
                        tracing::error!(cluster = %name, error = %e, "failed to serve cluster");
                    }
                })
            }
        };
        let scheme = if cfg.tls { "https" } else { "http" };
        tracing::info!(cluster = %cfg.name, url = %format!("{scheme}://{addr}"), "cluster started");
        Ok(Self {
            state,
            addr,
            task: Some(task),
            admin,
        })
    }

    /// A cluster served in-process, without a listener: requests reach it
    /// through [`SimCluster::router`], a tower service (no sockets, no
    /// TLS). For embedders that drive many short-lived clusters on one
    /// thread, such as `rekon plugin explore`. Authentication and TLS in
    /// `cfg` are ignored: every request is the admin's.
    #[must_use]
    pub fn detached(cfg: SimConfig) -> Self {
        let state = ClusterState::new(
            &cfg.name,
            cfg.history_limit,
            cfg.channel_capacity,
            cfg.bookmark_interval,
        );
        let state = Arc::new(state);
        *state.address.lock() = "in-process".to_owned();
        Self {
            state,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            task: None,
            admin: Credentials::None,
        }
    }

    /// The cluster's HTTP API as a tower service (an axum `Router`), the
    /// same handler its listener serves.
    pub fn router(&self) -> Router {
        Router::new()
            .fallback(handle)
            .with_state(self.state.clone())
    }

    /// Cluster name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// Listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, or `https://` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.state.security.pki.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// A kubeconfig with this cluster only (context = cluster name), with
    /// the CA and the administrator's credentials when security is on.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_entries_yaml(&[self.kubeconfig_entry()], self.name())
    }

    /// This cluster's kubeconfig entry with the administrator's credentials.
    pub fn kubeconfig_entry(&self) -> KubeconfigEntry {
        self.entry_with(self.admin.clone())
    }

    fn entry_with(&self, credentials: Credentials) -> KubeconfigEntry {
        KubeconfigEntry {
            name: self.name().to_string(),
            server: self.url(),
            ca_pem: self.ca_pem().map(str::to_string),
            credentials,
        }
    }

    /// A kubeconfig for this cluster that authenticates with `credentials`.
    pub fn kubeconfig_for(&self, credentials: Credentials) -> String {
        kubeconfig_entries_yaml(&[self.entry_with(credentials)], self.name())
    }

    /// The CA certificate (PEM) when TLS is on.
    pub fn ca_pem(&self) -> Option<&str> {
        self.state.security.pki.as_ref().map(Pki::ca_pem)
    }

    /// The credentials of `kubernetes-admin` (`system:masters`) when
    /// authentication is on: a client certificate with TLS, else a token.
    pub fn admin_credentials(&self) -> &Credentials {
        &self.admin
    }

    /// Adds a user authenticated by a new random bearer token; returns
    /// the token.
    pub fn add_token_user(&self, name: &str, groups: &[&str]) -> String {
        let token = uuid::Uuid::new_v4().simple().to_string();
        self.state.security.add_user(TokenUser {
            token: token.clone(),
            name: name.to_string(),
            groups: groups.iter().map(|g| (*g).to_string()).collect(),
        });
        token
    }

    /// A client certificate for `user` in `groups` (at most two), signed
    /// by the cluster's CA.
    ///
    /// # Errors
    /// Without TLS, or with more than two groups.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<CertifiedKey, TlsError> {
        let pki = self.state.security.pki.as_ref().ok_or(TlsError::NoTls)?;
        pki.client_cert(user, groups)
    }

    /// Every authorization decision so far (user, attributes, allowed),
    /// oldest first, when authentication or RBAC is on: what each client
    /// actually did, e.g. to compare with the permissions it was granted.
    pub fn audit_log(&self) -> Vec<crate::auth::AuditRecord> {
        self.state.security.audit_log()
    }

    /// The audit annotations ValidatingAdmissionPolicy bindings with the
    /// `Audit` action (and policies' `auditAnnotations`) added to requests,
    /// oldest first (the latest 10,000); also `GET /_sim/admission-audit`.
    pub fn admission_audit(&self) -> Vec<crate::admission::AuditRecord> {
        self.state
            .store
            .read(|i| i.admission_audit.borrow().iter().cloned().collect())
    }

    /// Issues a token for ServiceAccount `ns/name` as TokenRequest does.
    ///
    /// # Errors
    /// 404 when the ServiceAccount does not exist.
    pub fn service_account_token(
        &self,
        ns: &str,
        name: &str,
        expiration: Duration,
    ) -> Result<String, ApiError> {
        let secs = i64::try_from(expiration.as_secs()).unwrap_or(i64::MAX);
        let audiences = ["https://kubernetes.default.svc.cluster.local".to_string()];
        crate::auth::issue_token(&self.state, ns, name, secs, &audiences).map(|(t, _)| t)
    }

    /// Fault injection state.
    pub fn faults(&self) -> &Faults {
        &self.state.faults
    }

    /// The current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.state.store.current_rv()
    }

    /// Forgets all watch history: a watch or Exact list from any older
    /// resourceVersion answers 410 Expired. Returns the compaction RV.
    pub fn compact(&self) -> u64 {
        self.state.store.read(|i| i.compact())
    }

    /// Closes every open watch stream.
    pub fn close_watches(&self) {
        self.state.close_watches();
    }

    /// Fails the next matching requests.
    pub fn fail_next(&self, rule: FaultRule) {
        self.state.faults.fail_next(rule);
    }

    /// Removes fault rules and latency.
    pub fn clear_faults(&self) {
        self.state.faults.clear();
    }

    /// Delays every API request.
    pub fn set_latency(&self, d: Duration) {
        self.state.faults.set_latency(d);
    }

    /// Stops answering API requests (connections are still accepted).
    pub fn stall(&self) {
        self.state.faults.stall();
    }

    /// Answers again, including the requests held while stalled.
    pub fn resume(&self) {
        self.state.faults.resume();
    }

    /// Requests seen per verb (`get`, `list`, `watch`, `create`, ...).
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        self.state.faults.request_counts()
    }

    /// Sets the bookmark interval for watches opened from now on.
    pub fn set_bookmark_interval(&self, d: Duration) {
        self.state.set_bookmark_interval(d);
    }

    /// Where admission webhooks reach the Service `name.namespace[:port]`
    /// (port 443 when absent): `host:port` on this machine. The TLS name
    /// checked stays `name.namespace.svc`.
    pub fn map_webhook_service(&self, service: &str, address: &str) {
        self.state.webhook_services.map(service, address);
    }

    /// Sets how long after a namespace's DELETE its contents are deleted
    /// (the namespace controller's start; 500 ms by default).
    pub fn set_namespace_delay(&self, d: Duration) {
        self.state.store.write(|i| i.set_namespace_delay(d));
    }

    /// Drops every object and CRD, closes watches, clears faults.
    pub fn reset(&self) {
        self.state.store.reset();
        self.state.faults.clear();
        self.state.faults.resume();
        self.state.faults.reset_counts();
        self.state.close_watches();
    }

    /// Number of stored objects (all kinds).
    pub fn object_count(&self) -> usize {
        self.state.store.read(|i| i.object_count())
    }

    /// The resource the helpers read and write. A version a CRD's
    /// conversion webhook converts is refused: the helpers run under the
    /// store's lock, where no webhook is called (use the storage version).
    fn resource(&self, api_version: &str, plural: &str) -> Result<Arc<ResourceInfo>, ApiError> {
        let (g, v) = split_api_version(api_version);
        let res = self
            .state
            .store
            .read(|i| i.registry.get(g, v, plural))
            .ok_or_else(ApiError::unknown_path)?;
        if res.webhook_converted() {
            return Err(ApiError::bad_request(format!(
                "kube-sim: {plural}.{g} {v} is converted by a webhook; the in-process helpers take the storage version {}",
                res.storage_version
            )));
        }
        Ok(res)
    }

    fn served(res: &ResourceInfo, obj: &Value) -> Value {
        crate::watch::render(res, crate::watch::Shape::Full, obj)
    }

    /// Reads an object (`api_version` like `v1` or `apps/v1`).
    pub fn get(
        &self,
        api_version: &str,
        plural: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let res = self.resource(api_version, plural)?;
        let obj = self.state.store.read(|i| i.get(&res, ns, name))?;
        Ok(Self::served(&res, &obj))
    }

    /// Lists objects, optionally in one namespace and with a label selector.
    pub fn list(
        &self,
        api_version: &str,
        plural: &str,
        ns: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<Value>, ApiError> {
        let res = self.resource(api_version, plural)?;
        let label = LabelSelector::parse(label_selector)?;
        let lr = self.state.store.read(|i| {
            i.list(
                &res,
                ns,
                &label,
                &FieldSelector::default(),
                &ListOpts::default(),
            )
        })?;
        Ok(lr.items.iter().map(|o| Self::served(&res, o)).collect())
    }

    fn opts(sub: Option<&str>) -> WriteOpts {
        WriteOpts {
            dry_run: false,
            manager: Some("kube-sim".into()),
            subresource: sub.map(str::to_string),
            field_validation: Default::default(),
            user: None,
            webhooks: Default::default(),
        }
    }

    /// Creates an object.
    pub fn create(
        &self,
        api_version: &str,
        plural: &str,
        ns: Option<&str>,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let res = self.resource(api_version, plural)?;
        let o = self
            .state
            .store
            .write(|i| i.create(&res, ns, obj, &Self::opts(None)))?;
        Ok(Self::served(&res, &o))
    }

    /// Replaces an object (or its status with `status = true`).
    pub fn update(
        &self,
        api_version: &str,
        plural: &str,
        ns: Option<&str>,
        obj: Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        let res = self.resource(api_version, plural)?;
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let sub = status.then_some("status");
        let o = self
            .state
            .store
            .write(|i| i.update(&res, ns, &name, obj, &Self::opts(sub)))?;
        Ok(Self::served(&res, &o))
    }

    /// Applies a JSON merge patch (to the status with `status = true`).
    pub fn merge_patch(
        &self,
        api_version: &str,
        plural: &str,
        ns: Option<&str>,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        let res = self.resource(api_version, plural)?;
        let sub = status.then_some("status");
        let (o, _) = self
            .state
            .store
            .write(|i| i.patch(&res, ns, name, PatchKind::Merge, patch, &Self::opts(sub)))?;
        Ok(Self::served(&res, &o))
    }

    /// Deletes an object (background propagation). Returns its last state.
    pub fn delete(
        &self,
        api_version: &str,
        plural: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let res = self.resource(api_version, plural)?;
        let d = self
            .state
            .store
            .write(|i| i.delete(&res, ns, name, &DeleteOpts::default()))?;
        Ok(Self::served(&res, &d.obj))
    }

    /// Stops the server: open watches end, in-flight requests are dropped
    /// after a short grace period.
    pub async fn shutdown(mut self) {
        self.state.shutdown.send_replace(true);
        self.state.faults.resume();
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        self.state.shutdown.send_replace(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A kubeconfig (contract section 10) with one context per cluster;
/// context, cluster and user names equal the cluster name.
pub fn kubeconfig_yaml(clusters: &[(&str, &str)], current: &str) -> String {
    let entries: Vec<KubeconfigEntry> = clusters
        .iter()
        .map(|(name, url)| KubeconfigEntry {
            name: (*name).to_string(),
            server: (*url).to_string(),
            ca_pem: None,
            credentials: Credentials::None,
        })
        .collect();
    kubeconfig_entries_yaml(&entries, current)
}

/// A kubeconfig with one context per entry, carrying CAs and credentials.
pub fn kubeconfig_entries_yaml(entries: &[KubeconfigEntry], current: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut s = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
    for e in entries {
        s.push_str(&format!(
            "- name: {}\n  cluster:\n    server: \"{}\"\n",
            e.name, e.server
        ));
        if let Some(ca) = &e.ca_pem {
            s.push_str(&format!("    certificate-authority-data: {}\n", b64(ca)));
        }
    }
    s.push_str("users:\n");
    for e in entries {
        match &e.credentials {
            Credentials::None => s.push_str(&format!("- name: {}\n  user: {{}}\n", e.name)),
            Credentials::Token(t) => {
                s.push_str(&format!(
                    "- name: {}\n  user:\n    token: \"{t}\"\n",
                    e.name
                ));
            }
            Credentials::ClientCert(c) => s.push_str(&format!(
                "- name: {}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
                e.name,
                b64(&c.cert_pem),
                b64(&c.key_pem)
            )),
        }
    }
    s.push_str("contexts:\n");
    for name in entries.iter().map(|e| e.name.as_str()) {
        s.push_str(&format!(
            "- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\n"
        ));
    }
    s.push_str(&format!("current-context: {current}\n"));
    s
}

/// Writes a kubeconfig for `clusters`; the first is the current context.
pub fn write_kubeconfig(path: &Path, clusters: &[&SimCluster]) -> Result<(), SimError> {
    let entries: Vec<KubeconfigEntry> = clusters.iter().map(|c| c.kubeconfig_entry()).collect();
    let current = clusters.first().map(|c| c.name()).unwrap_or_default();
    std::fs::write(path, kubeconfig_entries_yaml(&entries, current)).map_err(|source| {
        SimError::Kubeconfig {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Several clusters and a kubeconfig file naming them all.
pub struct Sim {
    clusters: Vec<SimCluster>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("clusters", &self.clusters)
            .field("kubeconfig", &self.kubeconfig)
            .finish()
    }
}

impl Sim {
    /// Starts one cluster per name on free ports and writes a kubeconfig
    /// into a temporary directory (removed on drop). The first name is the
    /// current context.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kube_sim::SimError> {
    /// let sim = kube_sim::Sim::start(&["main", "sub"]).await?;
    /// let kubeconfig = sim.kubeconfig_path();
    /// let main_url = sim.cluster("main").url();
    /// # Ok(()) }
    /// ```
    pub async fn start(names: &[&str]) -> Result<Self, SimError> {
        Self::start_with(names.iter().map(|n| SimConfig::new(*n)).collect()).await
    }

    /// Starts clusters from configurations.
    pub async fn start_with(configs: Vec<SimConfig>) -> Result<Self, SimError> {
        let mut clusters: Vec<SimCluster> = Vec::new();
        for cfg in configs {
            if clusters.iter().any(|c| c.name() == cfg.name) {
                return Err(SimError::DuplicateName(cfg.name));
            }
            clusters.push(SimCluster::start_with(cfg).await?);
        }
        let dir = tempfile::tempdir().map_err(|source| SimError::Kubeconfig {
            path: std::env::temp_dir(),
            source,
        })?;
        let kubeconfig = dir.path().join("kubeconfig");
        write_kubeconfig(&kubeconfig, &clusters.iter().collect::<Vec<_>>())?;
        Ok(Self {
            clusters,
            kubeconfig,
            _dir: dir,
        })
    }

    /// The cluster named `name`.
    ///
    /// # Panics
    /// If no cluster has that name (a test bug).
    pub fn cluster(&self, name: &str) -> &SimCluster {
        self.try_cluster(name)
            .unwrap_or_else(|| panic!("no simulated cluster named {name}"))
    }

    /// The cluster named `name`, if any.
    pub fn try_cluster(&self, name: &str) -> Option<&SimCluster> {
        self.clusters.iter().find(|c| c.name() == name)
    }

    /// All clusters in start order.
    pub fn clusters(&self) -> &[SimCluster] {
        &self.clusters
    }

    /// Path of the kubeconfig with one context per cluster.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The kubeconfig text.
    pub fn kubeconfig_yaml(&self) -> String {
        let entries: Vec<KubeconfigEntry> = self
            .clusters
            .iter()
            .map(SimCluster::kubeconfig_entry)
            .collect();
        let current = self.clusters.first().map(|c| c.name()).unwrap_or_default();
        kubeconfig_entries_yaml(&entries, current)
    }

    /// Stops every cluster.
    pub async fn shutdown(self) {
        let Self { clusters, .. } = self;
        for c in clusters {
            c.shutdown().await;
        }
    }
}
