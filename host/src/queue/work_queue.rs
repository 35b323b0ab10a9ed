//! The work queue: a pure data structure, driven by a controller's runner
//! (`controller::runner` for plugins, `source::plugin_objects` for Plugin
//! objects).
//!
//! Semantics (client-go's workqueue + rate limiter, plus per-cluster lanes):
//! - identical keys are deduplicated while queued;
//! - a key is never handed out twice at once: a key that is added while it
//!   runs is marked dirty and queued again when it finishes;
//! - ready keys wait in one FIFO lane per cluster ([`QueueKey::lane`]), and
//!   lanes are served round-robin, so one cluster's initial list (or a flood
//!   of events) cannot starve another cluster's requests;
//! - delayed adds (requeue-after, error backoff) are timers; an immediate add
//!   supersedes a pending timer (level-based: the reconcile that runs sets the
//!   next one);
//! - per-key exponential backoff on error ([`Backoff`]; by default 5 ms
//!   doubling, capped at 1000 s), reset on success.
//!
//! Hand-written rather than kube-runtime's `Controller`/`scheduler`: that
//! runner is bound to one `Api<K>` and one store, keys are `ObjectRef<K>`
//! without a cluster, it has no per-cluster fairness, and its trigger
//! streams are fixed at construction, while rekon adds and removes watches and
//! clusters at runtime and must drop a removed cluster's pending work.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::backoff::Backoff;

/// What a queue key needs: identity, an order (timers), and the lane it
/// waits in.
pub trait QueueKey: Clone + Eq + Hash + Ord {
    /// The lane of the key (its cluster): lanes are served round-robin.
    fn lane(&self) -> &str;
}

/// The key of one request: the WIT `request`, hashable.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqKey {
    /// Cluster of the primary object.
    pub cluster: String,
    /// Namespace, for namespaced primaries.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ReqKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}:{}/{}", self.cluster, ns, self.name),
            None => write!(f, "{}:{}", self.cluster, self.name),
        }
    }
}

impl QueueKey for ReqKey {
    fn lane(&self) -> &str {
        &self.cluster
    }
}

/// A key of a queue with one lane: the name of a cluster-scoped object of
/// one cluster (Plugin objects).
impl QueueKey for String {
    fn lane(&self) -> &str {
        ""
    }
}

/// The per-key error backoff of the plugins' queues: 5 ms doubling,
/// capped at 1000 s.
pub const DEFAULT_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(5), Duration::from_secs(1000));

/// What a reconcile that succeeded asks for next (kube-runtime's
/// `Action`): nothing until something changes, or a run after a delay.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Run again after `after`, whatever happens meanwhile.
    pub const fn requeue(after: Duration) -> Self {
        Self {
            requeue_after: Some(after),
        }
    }

    /// Run again only when the key is added again.
    pub const fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// The delay of [`Action::requeue`].
    #[must_use]
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

impl From<Action> for Done {
    fn from(action: Action) -> Self {
        Done::Success(action.requeue_after)
    }
}

/// How a reconcile ended, as far as the queue cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// Success; optionally come back after a delay.
    Success(Option<Duration>),
    /// Retryable failure: back off.
    Retry,
    /// Terminal failure: not retried until the key is added again.
    Terminal,
    /// Not run: may not start before the delay (its plugin is backed off,
    /// `plugin/fair_share.rs`); its failures and pending work are kept
    /// (an event meanwhile makes it ready at once, as it would any timer:
    /// it is then deferred again by whoever ran it).
    Defer(Duration),
}

#[derive(Debug, Default)]
struct KeyState {
    queued: bool,
    running: bool,
    dirty: bool,
    /// Its pending work was dropped while it ran: its `done` schedules
    /// nothing (unless it was added again meanwhile: `dirty`).
    forgotten: bool,
    reason: String,
    timer: Option<(Instant, u64)>,
    queued_at: Option<Instant>,
}

impl KeyState {
    fn idle(&self) -> bool {
        !self.queued && !self.running && self.timer.is_none()
    }
}

/// A work queue: a plugin's ([`ReqKey`]s, the default) or the Plugin
/// objects' (their names).
#[derive(Debug)]
pub struct WorkQueue<K = ReqKey> {
    lanes: HashMap<String, VecDeque<K>>,
    round_robin: VecDeque<String>,
    keys: HashMap<K, KeyState>,
    timers: BTreeSet<(Instant, u64, K)>,
    failures: HashMap<K, u32>,
    backoff: Backoff,
    seq: u64,
    queued: usize,
    running: usize,
}

impl<K: QueueKey> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::with_backoff(DEFAULT_BACKOFF)
    }
}

impl WorkQueue {
    /// An empty queue of request keys, backing off by [`DEFAULT_BACKOFF`].
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

impl<K: QueueKey> WorkQueue<K> {
    /// An empty queue whose failing keys back off by `backoff`.
    #[must_use]
    pub fn with_backoff(backoff: Backoff) -> Self {
        Self {
            lanes: HashMap::new(),
            round_robin: VecDeque::new(),
            keys: HashMap::new(),
            timers: BTreeSet::new(),
            failures: HashMap::new(),
            backoff,
            seq: 0,
            queued: 0,
            running: 0,
        }
    }

    /// Keys ready to run.
    #[must_use]
    pub fn ready(&self) -> usize {
        self.queued
    }

    /// Keys handed out and not done yet.
    #[must_use]
    pub fn running(&self) -> usize {
        self.running
    }

    /// Keys waiting on a timer.
    #[must_use]
    pub fn delayed(&self) -> usize {
        self.timers.len()
    }

    /// Consecutive failures of `key`.
    #[must_use]
    pub fn failures(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    /// Whether `key` was handed out and is not done yet.
    #[must_use]
    pub fn is_running(&self, key: &K) -> bool {
        self.keys.get(key).is_some_and(|s| s.running)
    }

    /// Start `key`'s backoff over (what it failed on changed): its next
    /// failure waits the first delay again.
    pub fn reset_backoff(&mut self, key: &K) {
        self.failures.remove(key);
    }

    /// Queue `key` now. Returns whether it became ready (false: deduplicated
    /// or marked to re-run after the running reconcile).
    pub fn add(&mut self, key: K, reason: &str) -> bool {
        let state = self.keys.entry(key.clone()).or_default();
        if let Some(t) = state.timer.take() {
            self.timers.remove(&(t.0, t.1, key.clone()));
        }
        if state.running {
            if !state.dirty {
                state.dirty = true;
                reason.clone_into(&mut state.reason);
            }
            return false;
        }
        if state.queued {
            return false;
        }
        state.queued = true;
        state.queued_at = Some(Instant::now());
        reason.clone_into(&mut state.reason);
        self.queued += 1;
        let lane = self.lanes.entry(key.lane().to_owned()).or_default();
        if lane.is_empty() {
            self.round_robin.push_back(key.lane().to_owned());
        }
        lane.push_back(key);
        true
    }

    /// Queue `key` after `delay` (unless it is ready already or an earlier
    /// timer is pending).
    pub fn add_after(&mut self, key: K, delay: Duration, reason: &str, now: Instant) {
        if delay.is_zero() {
            self.add(key, reason);
            return;
        }
        let at = now + delay;
        let state = self.keys.entry(key.clone()).or_default();
        if state.queued || state.dirty {
            return;
        }
        if let Some((t, seq)) = state.timer {
            if t <= at {
                return;
            }
            self.timers.remove(&(t, seq, key.clone()));
        }
        self.seq += 1;
        state.timer = Some((at, self.seq));
        reason.clone_into(&mut state.reason);
        self.timers.insert((at, self.seq, key));
    }

    /// The next ready key, fairly across clusters, with the reason it was
    /// queued. The key counts as running until [`WorkQueue::done`].
    pub fn pop(&mut self) -> Option<(K, String)> {
        self.pop_timed().map(|(key, reason, _)| (key, reason))
    }

    /// [`WorkQueue::pop`], also returning how long the key waited while ready.
    pub fn pop_timed(&mut self) -> Option<(K, String, Duration)> {
        let lane_name = self.round_robin.pop_front()?;
        let lane = self.lanes.get_mut(&lane_name)?;
        let key = lane.pop_front()?;
        if lane.is_empty() {
            self.lanes.remove(&lane_name);
        } else {
            self.round_robin.push_back(lane_name);
        }
        let state = self.keys.entry(key.clone()).or_default();
        state.queued = false;
        state.running = true;
        let waited = state
            .queued_at
            .take()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        self.queued -= 1;
        self.running += 1;
        Some((key, std::mem::take(&mut state.reason), waited))
    }

    /// Report the end of a reconcile handed out by [`WorkQueue::pop`].
    pub fn done(&mut self, key: &K, result: Done, now: Instant) {
        let Some(state) = self.keys.get_mut(key) else {
            // The key's cluster was dropped while it ran.
            return;
        };
        if !state.running {
            return;
        }
        state.running = false;
        self.running -= 1;
        let dirty = std::mem::take(&mut state.dirty);
        let reason = std::mem::take(&mut state.reason);
        if std::mem::take(&mut state.forgotten) && !dirty {
            self.failures.remove(key);
            self.gc(key);
            return;
        }
        match result {
            Done::Success(after) => {
                self.failures.remove(key);
                if let Some(after) = after.filter(|_| !dirty) {
                    self.add_after(key.clone(), after, "requeue-after", now);
                }
            }
            Done::Retry if !dirty => {
                let n = self.failures.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
                let delay = self.backoff.delay(*n);
                self.add_after(key.clone(), delay, "retry after error", now);
            }
            Done::Retry => {
                let n = self.failures.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
            }
            Done::Terminal => {
                self.failures.remove(key);
            }
            Done::Defer(after) => {
                let why = if dirty {
                    reason.as_str()
                } else {
                    "deferred: plugin backed off"
                };
                self.add_after(key.clone(), after, why, now);
                self.gc(key);
                return;
            }
        }
        if dirty {
            self.add(key.clone(), &reason);
        }
        self.gc(key);
    }

    /// Move keys whose timer expired by `now` to their lanes.
    pub fn fire_due(&mut self, now: Instant) {
        while let Some(first) = self.timers.first() {
            if first.0 > now {
                break;
            }
            let Some((_, _, key)) = self.timers.pop_first() else {
                break;
            };
            let reason = self
                .keys
                .get_mut(&key)
                .map(|s| {
                    s.timer = None;
                    std::mem::take(&mut s.reason)
                })
                .unwrap_or_default();
            self.add(key, &reason);
        }
    }

    /// When the next timer fires.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.first().map(|t| t.0)
    }

    /// Drop every pending request of `cluster` (it was disengaged): queued
    /// keys, timers, backoff. A running key stays known until its `done`
    /// (which then requeues nothing), so the same key engaged again is not
    /// handed out while the old reconcile still runs.
    pub fn forget_cluster(&mut self, cluster: &str) {
        self.forget_where(|k| k.lane() == cluster);
    }

    /// Drop `key`'s pending work (its object is gone), keeping it known
    /// while it runs like [`WorkQueue::forget_cluster`].
    pub fn forget(&mut self, key: &K) {
        self.forget_where(|k| k == key);
    }

    /// Drop every pending request (the primary kind changed), keeping
    /// running keys known until their `done` like [`WorkQueue::forget_cluster`].
    pub fn forget_pending(&mut self) {
        self.forget_where(|_| true);
    }

    fn forget_where(&mut self, forget: impl Fn(&K) -> bool) {
        for lane in self.lanes.values_mut() {
            let before = lane.len();
            lane.retain(|k| !forget(k));
            self.queued -= before - lane.len();
        }
        self.lanes.retain(|_, lane| !lane.is_empty());
        let lanes = &self.lanes;
        self.round_robin.retain(|c| lanes.contains_key(c));
        self.timers.retain(|(_, _, k)| !forget(k));
        self.failures.retain(|k, _| !forget(k));
        self.keys.retain(|k, s| {
            if !forget(k) {
                return true;
            }
            s.queued = false;
            s.queued_at = None;
            s.timer = None;
            s.dirty = false;
            s.forgotten = s.running;
            s.running
        });
    }

    /// Keys of `cluster` known to the queue (for tests).
    #[must_use]
    pub fn pending_in(&self, cluster: &str) -> usize {
        self.keys.keys().filter(|k| k.lane() == cluster).count()
    }

    fn gc(&mut self, key: &K) {
        if self.keys.get(key).is_some_and(KeyState::idle) {
            self.keys.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(cluster: &str, name: &str) -> ReqKey {
        ReqKey {
            cluster: cluster.into(),
            namespace: Some("default".into()),
            name: name.into(),
        }
    }

    fn backoff(failures: u32) -> Duration {
        DEFAULT_BACKOFF.delay(failures)
    }

    #[test]
    fn backoff_doubles_from_5ms_and_caps() {
        assert_eq!(backoff(1), Duration::from_millis(5));
        assert_eq!(backoff(2), Duration::from_millis(10));
        assert_eq!(backoff(3), Duration::from_millis(20));
        assert_eq!(backoff(11), Duration::from_millis(5 * 1024));
        assert_eq!(backoff(18), Duration::from_millis(5 << 17));
        assert_eq!(backoff(19), DEFAULT_BACKOFF.max);
        assert_eq!(backoff(u32::MAX), DEFAULT_BACKOFF.max);
    }

    #[test]
    fn dedupes_queued_keys() {
        let mut q = WorkQueue::new();
        assert!(q.add(k("a", "x"), "first"));
        assert!(!q.add(k("a", "x"), "second"));
        assert_eq!(q.ready(), 1);
        let (key, reason) = q.pop().unwrap();
        assert_eq!(key, k("a", "x"));
        assert_eq!(reason, "first");
        assert!(q.pop().is_none());
    }

    #[test]
    fn never_hands_out_a_running_key_and_reruns_dirty_keys() {
        let now = Instant::now();
        let mut q = WorkQueue::new();
        q.add(k("a", "x"), "event 1");
        let (key, _) = q.pop().unwrap();
        assert!(!q.add(k("a", "x"), "event 2"));
        assert!(!q.add(k("a", "x"), "event 3"));
        assert!(
            q.pop().is_none(),
            "a running key must not be handed out again"
        );
        q.done(&key, Done::Success(None), now);
        let (again, reason) = q.pop().unwrap();
        assert_eq!(again, key);
        assert_eq!(reason, "event 2");
        q.done(&again, Done::Success(None), now);
        assert!(q.pop().is_none());
        assert_eq!(q.running(), 0);
        assert!(q.keys.is_empty(), "idle keys are forgotten");
    }

    #[test]
    fn round_robin_across_clusters() {
        let mut q = WorkQueue::new();
        for i in 0..100 {
            q.add(k("big", &format!("o{i}")), "initial list");
        }
        q.add(k("small", "s0"), "initial list");
        q.add(k("small", "s1"), "initial list");
        let order: Vec<String> = (0..4).map(|_| q.pop().unwrap().0.cluster).collect();
        assert_eq!(order, vec!["big", "small", "big", "small"]);
    }

    #[test]
    fn error_backoff_grows_and_resets_on_success() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new();
        let key = k("a", "x");
        q.add(key.clone(), "e");
        let mut now = t0;
        for n in 1..=4_u32 {
            let (popped, _) = q.pop().unwrap();
            q.done(&popped, Done::Retry, now);
            assert_eq!(q.failures(&key), n);
            assert_eq!(q.next_deadline(), Some(now + backoff(n)));
            q.fire_due(now + backoff(n) - Duration::from_micros(1));
            assert!(q.pop().is_none(), "must not run before the backoff elapsed");
            now += backoff(n);
            q.fire_due(now);
        }
        let (popped, reason) = q.pop().unwrap();
        assert_eq!(reason, "retry after error");
        q.done(&popped, Done::Success(None), now);
        assert_eq!(q.failures(&key), 0);
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn a_deferred_key_comes_back_after_its_delay_with_its_failures_kept() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new();
        let key = k("a", "x");
        q.add(key.clone(), "e");
        let (popped, _) = q.pop().unwrap();
        q.done(&popped, Done::Retry, t0);
        q.fire_due(t0 + backoff(1));
        let (popped, _) = q.pop().unwrap();
        // An event while it ran: deferred all the same.
        q.add(key.clone(), "changed");
        q.done(&popped, Done::Defer(Duration::from_secs(8)), t0);
        assert_eq!(q.failures(&key), 1, "a deferral is no success");
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_secs(8)));
        assert!(q.pop().is_none());
        q.fire_due(t0 + Duration::from_secs(8));
        let (_, reason) = q.pop().unwrap();
        assert_eq!(reason, "changed", "the pending work's reason kept");
    }

    #[test]
    fn requeue_after_and_event_supersedes_timer() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new();
        q.add(k("a", "x"), "e");
        let (key, _) = q.pop().unwrap();
        q.done(&key, Done::Success(Some(Duration::from_secs(30))), t0);
        assert_eq!(q.delayed(), 1);
        q.add(key.clone(), "changed");
        assert_eq!(q.delayed(), 0, "the immediate add cancels the timer");
        let (_, reason) = q.pop().unwrap();
        assert_eq!(reason, "changed");
        q.done(&key, Done::Success(Some(Duration::from_secs(30))), t0);
        q.fire_due(t0 + Duration::from_secs(30));
        assert_eq!(q.pop().unwrap().1, "requeue-after");
    }

    #[test]
    fn earlier_timer_wins() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new();
        q.add_after(k("a", "x"), Duration::from_secs(10), "late", t0);
        q.add_after(k("a", "x"), Duration::from_secs(1), "early", t0);
        q.add_after(k("a", "x"), Duration::from_secs(5), "middle", t0);
        assert_eq!(q.delayed(), 1);
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_secs(1)));
    }

    #[test]
    fn terminal_errors_are_not_retried() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new();
        q.add(k("a", "x"), "e");
        let (key, _) = q.pop().unwrap();
        q.done(&key, Done::Terminal, t0);
        assert_eq!(q.delayed(), 0);
        assert!(q.pop().is_none());
    }

    #[test]
    fn forgetting_a_cluster_drops_its_work_only() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new();
        q.add(k("gone", "a"), "e");
        q.add(k("gone", "b"), "e");
        q.add_after(k("gone", "c"), Duration::from_secs(1), "t", t0);
        q.add(k("stay", "a"), "e");
        let (running, _) = q.pop().unwrap();
        assert_eq!(running.cluster, "gone");
        q.forget_cluster("gone");
        // Only the running key is still known (until its done).
        assert_eq!(q.pending_in("gone"), 1);
        assert_eq!(q.delayed(), 0);
        assert_eq!(q.running(), 1);
        q.done(&running, Done::Retry, t0);
        assert_eq!(q.delayed(), 0, "a dropped key is not requeued");
        assert_eq!(q.pending_in("gone"), 0);
        assert_eq!(q.pop().unwrap().0, k("stay", "a"));
        assert!(q.pop().is_none());
    }

    #[test]
    fn a_key_engaged_again_waits_for_its_old_reconcile() {
        // Cluster disengaged and re-engaged while a reconcile of one of its
        // keys runs: the key must not be handed out twice at once.
        let t0 = Instant::now();
        let mut q = WorkQueue::new();
        q.add(k("edge", "a"), "e");
        let (running, _) = q.pop().unwrap();
        q.forget_cluster("edge");
        q.add(k("edge", "a"), "re-engaged");
        assert!(q.pop().is_none(), "handed out while still running");
        q.done(&running, Done::Success(None), t0);
        assert_eq!(q.pop().unwrap().0, k("edge", "a"));
        // Same for a swap that changed the primary kind.
        let (running, _) = (k("edge", "a"), ());
        q.forget_pending();
        q.add(k("edge", "a"), "swapped");
        assert!(q.pop().is_none(), "handed out while still running");
        q.done(&running, Done::Retry, t0);
        assert_eq!(q.pop().unwrap().0, k("edge", "a"));
        q.done(&k("edge", "a"), Done::Success(None), t0);
        assert_eq!((q.ready(), q.running(), q.delayed()), (0, 0, 0));
    }
}
