//! The wire between the engine and the in-process clusters: a tower
//! service per cluster that hands each request to kube-sim's router (no
//! socket), and on the way injects the plan's faults (a cluster down, lists
//! failing, one write failing or timing out) and logs every write the
//! engine makes (what it created, deleted, and whether anything changed).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Method;
use kube_sim::SimCluster;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tower::ServiceExt as _;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a write's answer is replaced with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Injected {
    /// 409 Conflict (an optimistic-concurrency failure).
    Conflict,
    /// 409 AlreadyExists, after the create was applied (what a retried
    /// create meets when the first answer was lost).
    AlreadyExists,
    /// 404 NotFound, after the delete was applied (what a retried delete
    /// meets when the first answer was lost).
    NotFound,
    /// 500 Internal Server Error.
    ServerError,
    /// The write is applied, but its answer is lost: 504 Timeout.
    Timeout,
}

impl Injected {
    fn status(self) -> (u16, &'static str, &'static str) {
        match self {
            Self::Conflict => (
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again (injected by rekon plugin explore)",
            ),
            Self::AlreadyExists => (
                409,
                "AlreadyExists",
                "the object already exists (injected by rekon plugin explore: the create was applied, its answer lost, and this is what its retry meets)",
            ),
            Self::NotFound => (
                404,
                "NotFound",
                "the object was not found (injected by rekon plugin explore: the delete was applied, its answer lost, and this is what its retry meets)",
            ),
            Self::ServerError => (
                500,
                "InternalError",
                "an error on the server (injected by rekon plugin explore)",
            ),
            Self::Timeout => (
                504,
                "Timeout",
                "the request did not complete within the allotted timeout (injected by rekon plugin explore; it was applied)",
            ),
        }
    }

    /// The label used in plan names.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Conflict => "409-conflict",
            Self::AlreadyExists => "409-already-exists",
            Self::NotFound => "404-not-found",
            Self::ServerError => "500",
            Self::Timeout => "timeout",
        }
    }
}

/// One write the engine made (a request with a mutating verb that is not
/// an Event or a Lease).
#[derive(Clone, Debug)]
pub struct Write {
    /// The cluster.
    pub cluster: String,
    /// HTTP method.
    pub method: Method,
    /// Request path (no query).
    pub path: String,
    /// Answer status (the injected one, when a fault answered).
    pub status: u16,
    /// The object it concerned (`kind ns/name`), when the answer said.
    pub object: Option<String>,
    /// Whether the cluster's resourceVersion moved (something changed).
    pub changed: bool,
    /// The ordinal of the reconcile in progress when it was sent.
    pub reconcile: usize,
    /// Whether a fault answered it.
    pub injected: bool,
    /// Whether it reached the server (a fault may answer after it did).
    pub reached: bool,
    /// The server's message when it refused (status 400 and up).
    pub message: Option<String>,
    /// Whether the host wrote it for its own protocol (a finalizer patch),
    /// not for the plugin's outcome: never faulted, never counted as one
    /// of a reconcile's writes.
    pub host: bool,
}

/// Which write to fail, armed for one reconcile.
#[derive(Clone, Debug)]
struct Arm {
    /// The reconcile it belongs to.
    reconcile: usize,
    /// Writes of that reconcile to let through first.
    skip: usize,
    fault: Injected,
    /// Once picked: the write (method, cluster, path) failed on every retry.
    target: Option<(Method, String, String)>,
}

#[derive(Debug, Default)]
struct State {
    down: BTreeSet<String>,
    lists_failing: BTreeSet<String>,
    reconcile: usize,
    seen_in_reconcile: usize,
    arm: Option<Arm>,
    /// Whether the last armed fault answered a write.
    fired: bool,
    writes: Vec<Write>,
    /// Per cluster: whether the write in flight there is the host's own
    /// (the probe tells, from the writer's gate, before each one).
    host_writing: BTreeMap<String, bool>,
    /// The plugin's own admission, reviewing its writes (the reference).
    admission: Option<Arc<super::admitted::OwnAdmission>>,
}

/// Faults and the write log shared by every cluster's wire of one run.
#[derive(Clone, Debug, Default)]
pub struct Switchboard {
    state: Arc<Mutex<State>>,
    written: Arc<tokio::sync::Notify>,
}

impl Switchboard {
    /// Resolves at the next write: a plugin that writes without pause
    /// keeps the virtual clock still, and a settle must still look.
    pub async fn next_write(&self) {
        self.written.notified().await;
    }

    /// `cluster` is unreachable (every request fails to connect).
    pub fn set_down(&self, cluster: &str, down: bool) {
        let mut s = self.state.lock();
        if down {
            s.down.insert(cluster.to_owned());
        } else {
            s.down.remove(cluster);
        }
    }

    /// Lists of `cluster` fail with 500 (its caches cannot sync).
    pub fn set_lists_failing(&self, cluster: &str, failing: bool) {
        let mut s = self.state.lock();
        if failing {
            s.lists_failing.insert(cluster.to_owned());
        } else {
            s.lists_failing.remove(cluster);
        }
    }

    /// Every cluster up, nothing failing, nothing armed.
    pub fn clear(&self) {
        let mut s = self.state.lock();
        s.down.clear();
        s.lists_failing.clear();
        s.arm = None;
    }

    /// A reconcile (ordinal `n`) starts: its writes are attributed to it,
    /// and a fault armed for an earlier one is disarmed.
    pub fn begin_reconcile(&self, n: usize) {
        let mut s = self.state.lock();
        s.reconcile = n;
        s.seen_in_reconcile = 0;
        if s.arm.as_ref().is_some_and(|a| a.reconcile != n) {
            s.arm = None;
        }
    }

    /// Fail the write number `k` (from 1) of reconcile `n` with `fault`,
    /// and every retry of it until the next reconcile begins.
    pub fn arm(&self, n: usize, k: usize, fault: Injected) {
        let mut s = self.state.lock();
        s.fired = false;
        s.arm = Some(Arm {
            reconcile: n,
            skip: k.saturating_sub(1),
            fault,
            target: None,
        });
    }

    /// The writes to `cluster` from now on are the host's own (`true`: a
    /// finalizer patch) or the plugin's (`false`). Within one cluster the
    /// writer performs one action at a time, so the flag set at the gate
    /// holds for every request (retries included) of that action.
    pub fn set_host_writing(&self, cluster: &str, host: bool) {
        self.state
            .lock()
            .host_writing
            .insert(cluster.to_owned(), host);
    }

    /// Review the plugin's writes with its own admission from now on.
    pub fn set_admission(&self, admission: Arc<super::admitted::OwnAdmission>) {
        self.state.lock().admission = Some(admission);
    }

    /// The plugin's own admission, when its writes are reviewed.
    #[must_use]
    pub fn admission(&self) -> Option<Arc<super::admitted::OwnAdmission>> {
        self.state.lock().admission.clone()
    }

    /// Whether the armed fault answered a write.
    #[must_use]
    pub fn fired(&self) -> bool {
        self.state.lock().fired
    }

    /// The write log so far.
    #[must_use]
    pub fn writes(&self) -> Vec<Write> {
        self.state.lock().writes.clone()
    }

    /// How many writes changed something so far.
    #[must_use]
    pub fn changes(&self) -> usize {
        self.state
            .lock()
            .writes
            .iter()
            .filter(|w| w.changed)
            .count()
    }

    /// Successful creates and deletes per object, from the write log.
    #[must_use]
    pub fn counts(&self) -> BTreeMap<String, (u32, u32)> {
        let mut out: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        for w in self.state.lock().writes.iter() {
            let Some(object) = &w.object else { continue };
            if !w.reached {
                continue;
            }
            let key = format!("{} {object}", w.cluster);
            if w.status == 201 {
                out.entry(key).or_default().0 += 1;
            } else if w.method == Method::DELETE && (200..300).contains(&w.status) {
                out.entry(key).or_default().1 += 1;
            }
        }
        out
    }
}

/// What to do with one request.
enum Verdict {
    Pass,
    Refuse,
    Fail(Injected),
    FailAfter(Injected),
}

impl Switchboard {
    /// What to do with a request, whether it is a write, and whether that
    /// write is the host's own.
    fn judge(
        &self,
        cluster: &str,
        method: &Method,
        path: &str,
        query: &str,
    ) -> (Verdict, bool, bool) {
        let (verdict, write) = self.judge_inner(cluster, method, path, query);
        let host = write
            && self
                .state
                .lock()
                .host_writing
                .get(cluster)
                .copied()
                .unwrap_or(false);
        (verdict, write, host)
    }

    fn judge_inner(
        &self,
        cluster: &str,
        method: &Method,
        path: &str,
        query: &str,
    ) -> (Verdict, bool) {
        let mut s = self.state.lock();
        if s.down.contains(cluster) {
            return (Verdict::Refuse, false);
        }
        let write = is_write(method, path);
        if method == Method::GET
            && s.lists_failing.contains(cluster)
            && is_collection(path)
            && !query.contains("watch=")
        {
            return (Verdict::Fail(Injected::ServerError), false);
        }
        if !write {
            return (Verdict::Pass, false);
        }
        // The host's own writes (finalizer patches) are never a plan's
        // fault: a transient fault names a write of the plugin's outcome.
        if s.host_writing.get(cluster).copied().unwrap_or(false) {
            return (Verdict::Pass, true);
        }
        s.seen_in_reconcile += 1;
        let seen = s.seen_in_reconcile;
        let reconcile = s.reconcile;
        let Some(arm) = s.arm.as_mut() else {
            return (Verdict::Pass, true);
        };
        if arm.reconcile != reconcile {
            return (Verdict::Pass, true);
        }
        let this = (method.clone(), cluster.to_owned(), path.to_owned());
        let hit = match &arm.target {
            Some(t) => *t == this,
            None if seen > arm.skip => {
                arm.target = Some(this);
                true
            }
            None => false,
        };
        if !hit {
            return (Verdict::Pass, true);
        }
        let fault = arm.fault;
        // Applied, its answer lost: once; a retry meets the real answer.
        let applied = matches!(
            fault,
            Injected::Timeout | Injected::AlreadyExists | Injected::NotFound
        );
        if applied {
            arm.target = Some((Method::OPTIONS, String::new(), String::new()));
        }
        s.fired = true;
        if applied {
            return (Verdict::FailAfter(fault), true);
        }
        (Verdict::Fail(fault), true)
    }

    fn log(&self, write: Write) {
        self.state.lock().writes.push(write);
        self.written.notify_waiters();
    }

    fn reconcile(&self) -> usize {
        self.state.lock().reconcile
    }
}

fn is_write(method: &Method, path: &str) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) && !path.ends_with("/events")
        && !path.contains("/events/")
        && !path.contains("/leases")
}

/// `.../plural` (a list) rather than `.../plural/name`.
fn is_collection(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // api/v1/plural, api/v1/namespaces/ns/plural, apis/g/v/plural,
    // apis/g/v/namespaces/ns/plural
    let rest = match parts.first() {
        Some(&"api") => &parts[parts.len().min(2)..],
        Some(&"apis") => &parts[parts.len().min(3)..],
        _ => return false,
    };
    matches!(rest, [_] | ["namespaces", _, _])
}

fn status_response(fault: Injected) -> http::Response<axum::body::Body> {
    let (code, reason, message) = fault.status();
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    http::Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap_or_default()
}

/// The object a write concerned: `plural ns/name` (or `plural name`),
/// from the path (`group/plural`), the name from the answer for a create.
fn object_of(body: &[u8], path: &str) -> Option<String> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.first() {
        Some(&"api") => ("", parts.get(2..)?),
        Some(&"apis") => (*parts.get(1)?, parts.get(3..)?),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
        _ => (None, rest),
    };
    let answer: Option<Value> = serde_json::from_slice(body).ok();
    let (plural, mut name) = match rest {
        [plural] => (
            *plural,
            answer.as_ref()?["metadata"]["name"].as_str()?.to_owned(),
        ),
        [plural, name, ..] => (*plural, (*name).to_owned()),
        _ => return None,
    };
    // Named by generateName: counted by prefix (suffixes differ per run).
    if let Some(prefix) = answer
        .as_ref()
        .and_then(|a| a["metadata"]["generateName"].as_str())
        .filter(|p| !p.is_empty() && name.starts_with(*p))
    {
        name = format!("{prefix}*");
    }
    let resource = if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    };
    Some(match ns {
        Some(ns) => format!("{resource} {ns}/{name}"),
        None => format!("{resource} {name}"),
    })
}

/// One cluster's end of the wire: a tower service for `kube::Client::new`.
#[derive(Clone)]
pub struct Wire {
    cluster: Arc<str>,
    sim: Arc<SimCluster>,
    router: axum::Router,
    board: Switchboard,
}

impl Wire {
    /// The wire to `sim`, faulted through `board`.
    #[must_use]
    pub fn new(sim: Arc<SimCluster>, board: Switchboard) -> Self {
        Self {
            cluster: Arc::from(sim.name()),
            router: sim.router(),
            sim,
            board,
        }
    }
}

impl tower::Service<http::Request<kube::client::Body>> for Wire {
    type Response = http::Response<axum::body::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let method = req.method().clone();
            let path = req.uri().path().to_owned();
            let query = req.uri().query().unwrap_or_default().to_owned();
            let (verdict, write, host) = this.board.judge(&this.cluster, &method, &path, &query);
            let reconcile = this.board.reconcile();
            let req = req.map(axum::body::Body::new);
            // The body of a plugin's write its own admission reviews: kept
            // to tell what the controller sent from what was stored.
            let own = this
                .board
                .admission()
                .filter(|a| write && !host && a.covers(&method, &path));
            let (req, sent, old) = match &own {
                Some(_) => {
                    let (parts, body) = req.into_parts();
                    let sent: Bytes = axum::body::to_bytes(body, usize::MAX).await?;
                    (
                        http::Request::from_parts(parts, axum::body::Body::from(sent.clone())),
                        sent,
                        super::admitted::OwnAdmission::before(&this.sim, &path),
                    )
                }
                None => (req, Bytes::new(), None),
            };
            match verdict {
                Verdict::Refuse => Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    format!("cluster {} is down (rekon plugin explore)", this.cluster),
                )) as BoxError),
                Verdict::Fail(fault) => {
                    if write {
                        this.board.log(Write {
                            cluster: this.cluster.to_string(),
                            method,
                            path,
                            status: fault.status().0,
                            object: None,
                            changed: false,
                            reconcile,
                            injected: true,
                            reached: false,
                            message: None,
                            host,
                        });
                    }
                    Ok(status_response(fault))
                }
                Verdict::Pass | Verdict::FailAfter(_) => {
                    let before = this.sim.current_rv();
                    let resp = this.router.clone().oneshot(req).await?;
                    if !write {
                        return Ok(resp);
                    }
                    let after = this.sim.current_rv();
                    let (parts, body) = resp.into_parts();
                    let bytes: Bytes = axum::body::to_bytes(body, usize::MAX).await?;
                    let injected = matches!(verdict, Verdict::FailAfter(_));
                    let status = parts.status.as_u16();
                    if !injected
                        && status < 300
                        && let Some(own) = &own
                    {
                        own.review(
                            &this.sim,
                            &this.cluster,
                            &method,
                            &path,
                            status,
                            &sent,
                            old,
                            &bytes,
                            reconcile,
                        );
                    }
                    this.board.log(Write {
                        cluster: this.cluster.to_string(),
                        method,
                        status: parts.status.as_u16(),
                        object: object_of(&bytes, &path),
                        path,
                        changed: after > before,
                        reconcile,
                        injected,
                        reached: true,
                        message: (parts.status.as_u16() >= 400)
                            .then(|| serde_json::from_slice::<Value>(&bytes).ok())
                            .flatten()
                            .and_then(|v| v["message"].as_str().map(str::to_owned)),
                        host,
                    });
                    if let Verdict::FailAfter(fault) = verdict {
                        return Ok(status_response(fault));
                    }
                    Ok(http::Response::from_parts(
                        parts,
                        axum::body::Body::from(bytes),
                    ))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collections_and_writes_are_told_apart() {
        assert!(is_collection("/api/v1/configmaps"));
        assert!(is_collection("/api/v1/namespaces/default/configmaps"));
        assert!(is_collection("/apis/apps/v1/namespaces/x/deployments"));
        assert!(!is_collection("/api/v1/namespaces/default/configmaps/a"));
        assert!(!is_collection("/api/v1/namespaces/default"));
        assert!(is_write(
            &Method::PATCH,
            "/api/v1/namespaces/d/configmaps/a"
        ));
        assert!(!is_write(&Method::POST, "/api/v1/namespaces/d/events"));
        assert!(!is_write(
            &Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/d/leases/x"
        ));
        assert!(!is_write(&Method::GET, "/api/v1/configmaps"));
    }

    #[test]
    fn an_armed_fault_fails_the_kth_write_and_its_retries_only() {
        let board = Switchboard::default();
        board.begin_reconcile(3);
        board.arm(3, 2, Injected::Conflict);
        let p = |path: &str| board.judge("main", &Method::PATCH, path, "").0;
        board.set_host_writing("main", true);
        assert!(
            matches!(p("/api/v1/namespaces/d/configmaps/a"), Verdict::Pass),
            "the host's own write is never the plan's fault"
        );
        board.set_host_writing("main", false);
        assert!(matches!(
            p("/api/v1/namespaces/d/configmaps/a"),
            Verdict::Pass
        ));
        assert!(matches!(
            p("/api/v1/namespaces/d/configmaps/b"),
            Verdict::Fail(Injected::Conflict)
        ));
        assert!(matches!(
            p("/api/v1/namespaces/d/configmaps/b"),
            Verdict::Fail(Injected::Conflict)
        ));
        assert!(matches!(
            p("/api/v1/namespaces/d/configmaps/c"),
            Verdict::Pass
        ));
        assert!(board.fired());
        board.begin_reconcile(4);
        assert!(matches!(
            p("/api/v1/namespaces/d/configmaps/b"),
            Verdict::Pass
        ));
    }
}
