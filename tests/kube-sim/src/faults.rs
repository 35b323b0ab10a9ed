//! Fault injection: failing requests, latency, stalls, watch disconnects,
//! and request counters.

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

/// Fails the next `count` requests that match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`) or HTTP method (`GET`, ...); `None` matches all.
    pub verb: Option<String>,
    /// Substring of the request path (query excluded); `None` matches all.
    pub path_contains: Option<String>,
    /// How many requests to fail.
    pub count: u32,
    /// HTTP status to answer (409, 429, 500, 503, ...).
    pub status: u16,
    /// `Retry-After` seconds (429/503).
    pub retry_after: Option<u64>,
    /// Message of the Status; a default per code otherwise.
    pub message: Option<String>,
    /// Substring of the `User-Agent` header; `None` matches all (so one
    /// client of several can be made to fail).
    pub user_agent_contains: Option<String>,
}

impl FaultRule {
    /// Fails the next `count` requests with `status`.
    pub fn new(status: u16, count: u32) -> Self {
        Self {
            verb: None,
            path_contains: None,
            count,
            status,
            retry_after: None,
            message: None,
            user_agent_contains: None,
        }
    }

    /// Only requests with this verb.
    #[must_use]
    pub fn verb(mut self, verb: impl Into<String>) -> Self {
        self.verb = Some(verb.into());
        self
    }

    /// Only requests whose path contains this.
    #[must_use]
    pub fn path(mut self, s: impl Into<String>) -> Self {
        self.path_contains = Some(s.into());
        self
    }

    /// Only requests whose `User-Agent` contains this.
    #[must_use]
    pub fn user_agent(mut self, s: impl Into<String>) -> Self {
        self.user_agent_contains = Some(s.into());
        self
    }

    /// With a `Retry-After` header.
    #[must_use]
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    fn matches(&self, req: &RequestInfo<'_>) -> bool {
        let (verb, method, path) = (req.verb, req.method, req.path);
        self.user_agent_contains
            .as_deref()
            .is_none_or(|ua| req.user_agent.contains(ua))
            && self
                .verb
                .as_deref()
                .is_none_or(|v| v.eq_ignore_ascii_case(verb) || v.eq_ignore_ascii_case(method))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
    }
}

/// What fault rules and the request log see of a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestInfo<'a> {
    pub(crate) verb: &'a str,
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) user_agent: &'a str,
}

/// One API request as the request log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedRequest {
    /// When it arrived (wall clock), before any fault, latency or stall.
    #[serde(with = "unix_micros")]
    pub at: std::time::SystemTime,
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, ...).
    pub verb: String,
    /// Request path (query excluded).
    pub path: String,
    /// `User-Agent` header (empty when absent).
    pub user_agent: String,
    /// Whether a fault rule answered it instead of the server.
    pub faulted: bool,
}

mod unix_micros {
    pub(super) fn serialize<S: serde::Serializer>(
        t: &std::time::SystemTime,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let micros = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        s.serialize_u128(micros)
    }
}

/// How many requests the log keeps (oldest dropped first).
const REQUEST_LOG_CAPACITY: usize = 200_000;

/// Fault state of one cluster.
#[derive(Debug)]
pub struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    latency: Mutex<Duration>,
    stalled: watch::Sender<bool>,
    counts: Mutex<BTreeMap<String, u64>>,
    log: Mutex<std::collections::VecDeque<LoggedRequest>>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            rules: Mutex::new(Vec::new()),
            latency: Mutex::new(Duration::ZERO),
            stalled: watch::channel(false).0,
            counts: Mutex::new(BTreeMap::new()),
            log: Mutex::new(std::collections::VecDeque::new()),
        }
    }
}

impl Faults {
    /// Adds a rule; rules are tried in order.
    pub fn fail_next(&self, rule: FaultRule) {
        if rule.count > 0 {
            self.rules.lock().push(rule);
        }
    }

    /// Removes every rule and the latency.
    pub fn clear(&self) {
        self.rules.lock().clear();
        *self.latency.lock() = Duration::ZERO;
    }

    /// Delays every API request by `d` (zero disables).
    pub fn set_latency(&self, d: Duration) {
        *self.latency.lock() = d;
    }

    /// Holds every API request (new and queued) until [`Faults::resume`].
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Releases a stall.
    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Whether the cluster is stalled.
    pub fn is_stalled(&self) -> bool {
        *self.stalled.borrow()
    }

    /// Requests seen per Kubernetes verb.
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        self.counts.lock().clone()
    }

    /// Zeroes the counters and empties the request log.
    pub fn reset_counts(&self) {
        self.counts.lock().clear();
        self.log.lock().clear();
    }

    /// Every API request received (the latest 200,000), oldest first:
    /// who sent what, when — e.g. to prove that a client stopped writing.
    pub fn request_log(&self) -> Vec<LoggedRequest> {
        self.log.lock().iter().cloned().collect()
    }

    pub(crate) fn log(&self, req: &RequestInfo<'_>, at: std::time::SystemTime, faulted: bool) {
        let mut log = self.log.lock();
        if log.len() >= REQUEST_LOG_CAPACITY {
            log.pop_front();
        }
        log.push_back(LoggedRequest {
            at,
            verb: req.verb.to_owned(),
            path: req.path.to_owned(),
            user_agent: req.user_agent.to_owned(),
            faulted,
        });
    }

    pub(crate) fn count(&self, verb: &str) {
        let mut counts = self.counts.lock();
        match counts.get_mut(verb) {
            Some(c) => *c += 1,
            None => {
                counts.insert(verb.to_string(), 1);
            }
        }
    }

    pub(crate) fn latency(&self) -> Duration {
        *self.latency.lock()
    }

    /// Waits while stalled.
    pub(crate) async fn wait_unstalled(&self) {
        let mut rx = self.stalled.subscribe();
        // An error means the sender is gone: the cluster is shutting down.
        let _ = rx.wait_for(|s| !*s).await;
    }

    /// Consumes one matching rule.
    pub(crate) fn take(&self, req: &RequestInfo<'_>) -> Option<FaultRule> {
        let mut rules = self.rules.lock();
        let idx = rules.iter().position(|r| r.matches(req))?;
        let rule = rules[idx].clone();
        rules[idx].count -= 1;
        if rules[idx].count == 0 {
            rules.remove(idx);
        }
        Some(rule)
    }
}
