//! The election state machine: client-go's `tools/leaderelection` (the one
//! every controller-runtime manager uses), so rekon replicas behave like any
//! other Kubernetes controller. Only the leader reconciles and writes;
//! followers keep their caches warm so that a takeover is immediate.
//!
//! 1. **Candidate**: every `retry_period` (jittered ×1.2) read the Lease. Take
//!    it when it is absent, has no holder, or its record has not changed for
//!    `lease_duration` *as observed on our own clock* (never by comparing the
//!    holder's `renewTime` with our clock, so clock skew between nodes does
//!    not matter).
//! 2. **Leader**: renew every `retry_period`. Every write is a `replace` (PUT)
//!    carrying the `resourceVersion` that was read, so of two candidates
//!    racing for an expired lease exactly one wins; the other gets 409.
//! 3. If no renewal succeeds within `renew_deadline` of the last successful
//!    one, leadership is lost: the gate closes *before* anything else happens
//!    (and [`LeaderGate::is_leader`] also checks the deadline on its own, so
//!    a starved election task cannot keep the gate open). Since
//!    `renew_deadline < lease_duration`, the old leader stops writing at least
//!    `lease_duration - renew_deadline` before anyone else may take over.
//! 4. **Shutdown**: close the gate, then release the Lease (holder cleared,
//!    `leaseDurationSeconds: 1`), so a follower takes over at its next retry
//!    instead of waiting for the lease to expire.
//!
//! Why hand-written: `kube-leader-election` 0.44 targets kube 4 and
//! `kube-coordinate` kube 2; `kube-lease-manager` 0.13 supports kube 5 but
//! (a) keeps reporting "leader" while renewals fail (an API error only backs
//! off; the watch channel is not told until a later successful read), so a
//! partitioned leader would keep writing after its lease expired, (b) has no
//! renew deadline distinct from the lease duration, and (c) relies on
//! strategic-merge and server-side-apply field ownership instead of
//! resourceVersion preconditions. The state machine is this file's
//! [`LeaderElector`], unit-tested against an in-memory lease store.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::Api;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::config::{JITTER_FACTOR, LeaderElectionConfig, OnLost, Result, RunEnd};
use super::gate::LeaderGate;
use super::store::{KubeLeaseStore, LeaseStore};
use crate::telemetry::metrics::Metrics;

/// Runs leader election; see the [module docs](self).
pub struct LeaderElector<S = KubeLeaseStore> {
    config: LeaderElectionConfig,
    store: S,
    tx: watch::Sender<bool>,
    valid_until: Arc<Mutex<Option<Instant>>>,
    metrics: Option<Metrics>,
    /// Last lease read or written, for its resourceVersion.
    observed: Option<Lease>,
    /// When `observed`'s spec last changed, on our clock.
    observed_at: Instant,
}

impl<S> std::fmt::Debug for LeaderElector<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("config", &self.config)
            .field("leading", &*self.tx.borrow())
            .finish_non_exhaustive()
    }
}

impl LeaderElector<KubeLeaseStore> {
    /// An elector for the lease in `config`, read and written through `client`
    /// (the primary cluster's).
    ///
    /// # Errors
    /// When the configuration is invalid.
    pub fn new(client: kube::Client, config: LeaderElectionConfig) -> Result<Self> {
        let store = KubeLeaseStore {
            api: Api::namespaced(client, &config.lease_namespace),
            name: config.lease_name.clone(),
        };
        Self::with_store(store, config)
    }
}

impl<S: LeaseStore> LeaderElector<S> {
    /// An elector over any [`LeaseStore`].
    ///
    /// # Errors
    /// When the configuration is invalid.
    pub fn with_store(store: S, config: LeaderElectionConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            store,
            tx: watch::channel(false).0,
            valid_until: Arc::new(Mutex::new(None)),
            metrics: None,
            observed: None,
            observed_at: Instant::now(),
        })
    }

    /// Report `leader_election_master_status` to `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        metrics.set_leader(&self.config.lease_key(), false);
        self.metrics = Some(metrics);
        self
    }

    /// The identity this elector writes into the lease.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// The gate for writers; valid for the elector's whole life.
    #[must_use]
    pub fn gate(&self) -> LeaderGate {
        LeaderGate {
            rx: self.tx.subscribe(),
            valid_until: self.valid_until.clone(),
            deadline_enforced: true,
            lease: Arc::from(self.config.lease_key()),
            _always: None,
        }
    }

    /// "Is leader" as a watch channel.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }

    /// Campaign, lead and (with [`OnLost::Demote`]) re-campaign until
    /// `shutdown` resolves; then stop writing and release the lease if held.
    /// With [`OnLost::Exit`], losing the lease ends the run
    /// ([`RunEnd::Lost`]).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> RunEnd {
        let (_always, want) = watch::channel(true);
        self.run_while(want, || async {}, shutdown).await
    }

    /// Like [`LeaderElector::run`], but campaign only while `want` is true.
    /// When `want` turns false while leading, the gate closes at once (no
    /// write is sent from then on), `drained` is awaited (the caller's
    /// in-flight work under this lease ends; bounded here by half the renew
    /// deadline, well inside the lease's remaining validity), and the lease
    /// is released so the next holder need not wait for it to expire. This
    /// is how a shard is handed over (see [`super::shard`]).
    pub async fn run_while<D, DF>(
        mut self,
        mut want: watch::Receiver<bool>,
        drained: D,
        shutdown: impl Future<Output = ()>,
    ) -> RunEnd
    where
        D: Fn() -> DF,
        DF: Future<Output = ()>,
    {
        tokio::pin!(shutdown);
        let lease = self.config.lease_key();
        debug!(lease = %lease, identity = %self.config.identity, "starting leader election");
        let end = 'run: loop {
            // Not wanted: keep observing the lease (reads only), so that
            // when it becomes wanted we already know how long its record
            // has been unchanged and can take an expired one at once.
            while !*want.borrow_and_update() {
                tokio::select! {
                    () = &mut shutdown => break 'run RunEnd::Shutdown,
                    alive = wait_want(&mut want, true) => if !alive { break 'run RunEnd::Shutdown },
                    () = tokio::time::sleep(jittered(self.config.retry_period)) => self.observe_only().await,
                }
            }
            tokio::select! {
                () = &mut shutdown => break RunEnd::Shutdown,
                () = self.acquire() => {}
                _ = wait_want(&mut want, false) => continue,
            }
            info!(lease = %lease, identity = %self.config.identity, "became leader");
            self.set_leading(true);
            tokio::select! {
                () = &mut shutdown => break RunEnd::Shutdown,
                () = self.keep_renewing() => {
                    self.set_leading(false);
                    if self.config.on_lost == OnLost::Exit {
                        error!(lease = %lease, identity = %self.config.identity, "lost leadership: writes stopped; exiting (--on-lost=exit)");
                        break RunEnd::Lost;
                    }
                    warn!(lease = %lease, identity = %self.config.identity, "lost leadership: writes stopped; demoted to follower");
                }
                _ = wait_want(&mut want, false) => {
                    // Handing over: stop writing, let in-flight work end, release.
                    self.set_leading(false);
                    let bound = self.config.renew_deadline / 2;
                    if tokio::time::timeout(bound, drained()).await.is_err() {
                        warn!(lease = %lease, ?bound, "in-flight work did not end in time; releasing anyway (its writes are refused)");
                    }
                    self.release().await;
                    info!(lease = %lease, identity = %self.config.identity, "handed over the lease");
                }
            }
        };
        self.set_leading(false);
        // Also when shutdown raced a successful acquire: `release` checks
        // that the last observed record names us.
        if end == RunEnd::Shutdown {
            self.release().await;
        }
        debug!(lease = %lease, "leader election stopped");
        end
    }

    fn set_leading(&self, leading: bool) {
        if !leading {
            // Close the deadline first: `is_leader` must never be true after this.
            *self.valid_until.lock() = None;
        }
        // Metrics before the watch, so a subscriber woken by the change reads
        // a consistent gauge.
        if let Some(m) = &self.metrics {
            m.set_leader(&self.config.lease_key(), leading);
        }
        self.tx.send_replace(leading);
    }

    /// Until acquired: try every retry period (jittered).
    async fn acquire(&mut self) {
        loop {
            let attempt =
                tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew());
            match attempt.await {
                Ok(true) => return,
                Ok(false) => {}
                Err(_) => debug!(lease = %self.config.lease_key(), "acquire attempt timed out"),
            }
            tokio::time::sleep(jittered(self.config.retry_period)).await;
        }
    }

    /// Renew every retry period; return when renewing failed for longer than
    /// the renew deadline, or someone else holds the lease.
    async fn keep_renewing(&mut self) {
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let Some(deadline) = *self.valid_until.lock() else {
                return;
            };
            let renewed = tokio::time::timeout_at(deadline, async {
                loop {
                    if self.try_acquire_or_renew().await {
                        return true;
                    }
                    if self.held_by_other() {
                        return false;
                    }
                    tokio::time::sleep(self.config.retry_period).await;
                }
            })
            .await;
            if renewed != Ok(true) {
                return;
            }
        }
    }

    fn held_by_other(&self) -> bool {
        let holder = self
            .observed
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.as_deref())
            .unwrap_or("");
        !holder.is_empty() && holder != self.config.identity
    }

    /// Read the lease and note when its record last changed (no write).
    async fn observe_only(&mut self) {
        let started = Instant::now();
        match self.store.get().await {
            Ok(Some(current)) => self.note_read(current, started),
            Ok(None) => {}
            Err(e) => debug!(lease = %self.config.lease_key(), error = %e, "failed to read lease"),
        }
    }

    /// One round of client-go's `tryAcquireOrRenew`. On success, extends
    /// `valid_until` to (start of this attempt + renew deadline).
    async fn try_acquire_or_renew(&mut self) -> bool {
        let started = Instant::now();
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let lease_key = self.config.lease_key();
        let duration_secs = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);

        let current = match self.store.get().await {
            Ok(current) => current,
            Err(e) => {
                warn!(lease = %lease_key, error = %e, "failed to read lease");
                return false;
            }
        };
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    namespace: Some(self.config.lease_namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.store.create(&lease).await {
                Ok(created) => {
                    self.observe(created, started);
                    self.extend(started);
                    true
                }
                Err(e) => {
                    debug!(lease = %lease_key, error = %e, "failed to create lease");
                    false
                }
            };
        };

        self.note_read(current.clone(), started);
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.config.identity;
        let observed_duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        let valid = self.observed_at + observed_duration > Instant::now();
        if !holder.is_empty() && valid && !ours {
            debug!(lease = %lease_key, holder = %holder, "lease held by another candidate");
            return false;
        }

        if !ours && let Some(m) = &self.metrics {
            // Without a valid holder since it was released (holder cleared)
            // or since it expired, as observed on our clock.
            let since = if holder.is_empty() {
                self.observed_at
            } else {
                self.observed_at + observed_duration
            };
            m.observe_leaderless(&lease_key, started.saturating_duration_since(since));
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let mut next = current;
        next.spec = Some(LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(duration_secs),
            acquire_time: if ours {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours {
                transitions
            } else {
                transitions.saturating_add(1)
            }),
            ..spec
        });
        // `next` carries the resourceVersion we read: a concurrent writer makes this 409.
        match self.store.replace(&next).await {
            Ok(written) => {
                self.observe(written, started);
                self.extend(started);
                true
            }
            Err(e) => {
                if is_conflict(&e) {
                    debug!(lease = %lease_key, "lease changed concurrently");
                } else {
                    warn!(lease = %lease_key, error = %e, "failed to update lease");
                }
                false
            }
        }
    }

    /// A read of the lease at `at`: its record's expiry clock restarts
    /// only when the record changed (client-go's `observedTime`).
    fn note_read(&mut self, current: Lease, at: Instant) {
        if self.observed.as_ref().map(|o| &o.spec) != Some(&current.spec) {
            self.observed_at = at;
        }
        self.observed = Some(current);
    }

    fn observe(&mut self, lease: Lease, at: Instant) {
        self.observed = Some(lease);
        self.observed_at = at;
    }

    fn extend(&self, attempt_started: Instant) {
        // Only while leading (or about to lead): `acquire` succeeded means we
        // lead from now on, and `run` flips the watch right after.
        *self.valid_until.lock() = Some(attempt_started + self.config.renew_deadline);
    }

    /// Clear the holder so that followers take over at their next retry.
    async fn release(&mut self) {
        let lease_key = self.config.lease_key();
        let Some(mut lease) = self.observed.clone() else {
            return;
        };
        let Some(spec) = lease.spec.clone() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..spec
        });
        let attempt = tokio::time::timeout(self.config.renew_deadline, self.store.replace(&lease));
        match attempt.await {
            Ok(Ok(_)) => {
                info!(lease = %lease_key, identity = %self.config.identity, "released lease")
            }
            Ok(Err(e)) => warn!(lease = %lease_key, error = %e, "failed to release lease"),
            Err(_) => warn!(lease = %lease_key, "failed to release lease: timed out"),
        }
    }
}

/// Until `want` is `value`; false when its sender is gone (then it never
/// changes again: a caller campaigning "while wanted" stops).
async fn wait_want(want: &mut watch::Receiver<bool>, value: bool) -> bool {
    want.wait_for(|w| *w == value).await.is_ok()
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

/// `period` × a random factor in [1, 1.2) (client-go's `wait.Jitter`).
fn jittered(period: Duration) -> Duration {
    period.mul_f64(1.0 + (JITTER_FACTOR - 1.0) * rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::config::{Error, default_identity};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// An in-memory lease with resourceVersion preconditions, shared by
    /// several electors, that can be made unreachable.
    type Hook = Box<dyn FnOnce(&mut Lease) + Send>;

    #[derive(Clone, Default)]
    struct MemStore {
        lease: Arc<Mutex<Option<Lease>>>,
        down: Arc<AtomicBool>,
        /// Runs inside the next `replace`, before the precondition check:
        /// a concurrent writer.
        before_replace: Arc<Mutex<Option<Hook>>>,
    }

    fn status(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(reason, reason)
                .with_code(code)
                .boxed(),
        )
    }

    impl MemStore {
        fn check_up(&self) -> Result<(), kube::Error> {
            if self.down.load(Ordering::SeqCst) {
                Err(status(503, "ServiceUnavailable"))
            } else {
                Ok(())
            }
        }
        fn holder(&self) -> Option<String> {
            self.lease
                .lock()
                .as_ref()
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.holder_identity.clone())
        }
    }

    impl LeaseStore for MemStore {
        async fn get(&self) -> Result<Option<Lease>, kube::Error> {
            self.check_up()?;
            Ok(self.lease.lock().clone())
        }
        async fn create(&self, lease: &Lease) -> Result<Lease, kube::Error> {
            self.check_up()?;
            let mut slot = self.lease.lock();
            if slot.is_some() {
                return Err(status(409, "AlreadyExists"));
            }
            let mut l = lease.clone();
            l.metadata.resource_version = Some("1".into());
            *slot = Some(l.clone());
            Ok(l)
        }
        async fn replace(&self, lease: &Lease) -> Result<Lease, kube::Error> {
            self.check_up()?;
            let mut slot = self.lease.lock();
            if let (Some(hook), Some(cur)) = (self.before_replace.lock().take(), slot.as_mut()) {
                hook(cur);
            }
            let Some(cur) = slot.as_ref() else {
                return Err(status(404, "NotFound"));
            };
            if lease.metadata.resource_version.is_some()
                && lease.metadata.resource_version != cur.metadata.resource_version
            {
                return Err(status(409, "Conflict"));
            }
            let rv: u64 = cur
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or("0")
                .parse()
                .unwrap();
            let mut l = lease.clone();
            l.metadata.resource_version = Some((rv + 1).to_string());
            *slot = Some(l.clone());
            Ok(l)
        }
    }

    fn config(identity: &str) -> LeaderElectionConfig {
        LeaderElectionConfig {
            identity: identity.to_owned(),
            ..LeaderElectionConfig::new("rekon", "rekon-system")
        }
    }

    async fn wait_until(gate: &LeaderGate, leading: bool) {
        let mut rx = gate.subscribe();
        rx.wait_for(|l| *l == leading).await.expect("elector gone");
    }

    #[test]
    fn timing_is_validated() {
        assert!(config("a").validate().is_ok());
        let bad = LeaderElectionConfig {
            renew_deadline: Duration::from_secs(20),
            ..config("a")
        };
        assert!(matches!(bad.validate(), Err(Error::InvalidTiming { .. })));
        let bad = LeaderElectionConfig {
            retry_period: Duration::from_secs(9),
            ..config("a")
        };
        assert!(bad.validate().is_err());
        assert!(
            LeaderElectionConfig {
                identity: String::new(),
                ..config("a")
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn identity_has_a_random_suffix() {
        let a = default_identity();
        let b = default_identity();
        assert_ne!(a, b);
        assert!(
            a.rsplit_once('_')
                .is_some_and(|(base, suffix)| !base.is_empty() && suffix.len() == 16)
        );
    }

    #[test]
    fn always_leader_gate_is_open() {
        let gate = LeaderGate::always_leader();
        assert!(gate.is_leader());
        assert!(gate.check().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn one_of_two_leads_and_the_other_takes_over_after_release() {
        let store = MemStore::default();
        let a = LeaderElector::with_store(store.clone(), config("a")).unwrap();
        let metrics = Metrics::new();
        let b = LeaderElector::with_store(store.clone(), config("b"))
            .unwrap()
            .with_metrics(metrics.clone());
        let (ga, gb) = (a.gate(), b.gate());
        let (stop_a, stopped_a) = tokio::sync::oneshot::channel::<()>();
        let ta = tokio::spawn(a.run(async {
            let _ = stopped_a.await;
        }));
        wait_until(&ga, true).await;
        tokio::spawn(b.run(std::future::pending()));
        // Several retry periods later, still only one leader.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(ga.is_leader());
        assert!(!gb.is_leader());
        assert_eq!(store.holder().as_deref(), Some("a"));

        let before = Instant::now();
        stop_a.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(60), ta)
            .await
            .expect("a did not stop: likely deadlocked")
            .unwrap();
        assert!(!ga.is_leader());
        wait_until(&gb, true).await;
        // Released: b takes over at its next retry, not after the lease duration.
        assert!(before.elapsed() <= Duration::from_millis(2400) + Duration::from_millis(10));
        assert_eq!(store.holder().as_deref(), Some("b"));
        let transitions = store
            .lease
            .lock()
            .as_ref()
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .lease_transitions;
        assert_eq!(transitions, Some(1));
        // b observed the lease without a valid holder (released) for at
        // most one retry period before it took it.
        let text = metrics.encode();
        assert!(
            text.contains(
                "rekon_leader_election_leaderless_seconds_count{name=\"rekon-system/rekon\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("rekon_leader_election_transitions_total{name=\"rekon-system/rekon\"} 1")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_crashed_leader_is_replaced_within_the_lease_duration() {
        let store = MemStore::default();
        let a = LeaderElector::with_store(store.clone(), config("a")).unwrap();
        let b = LeaderElector::with_store(store.clone(), config("b")).unwrap();
        let (ga, gb) = (a.gate(), b.gate());
        let ta = tokio::spawn(a.run(std::future::pending()));
        wait_until(&ga, true).await;
        tokio::spawn(b.run(std::future::pending()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Crash: no release.
        ta.abort();
        let crashed = Instant::now();
        wait_until(&gb, true).await;
        let took = crashed.elapsed();
        // The last renewal was at most one retry period before the crash; b
        // saw it at most one jittered retry later and notices the expiry at
        // most one jittered retry after it: lease duration -2 s / +4.8 s.
        assert!(
            took <= Duration::from_millis(15_000 + 4_800),
            "took {took:?}"
        );
        assert!(
            took >= Duration::from_millis(15_000 - 2_000),
            "took {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_partitioned_leader_closes_the_gate_before_the_lease_expires() {
        let store = MemStore::default();
        let demote = LeaderElectionConfig {
            on_lost: OnLost::Demote,
            ..config("a")
        };
        let a = LeaderElector::with_store(store.clone(), demote).unwrap();
        let ga = a.gate();
        let metrics = Metrics::new();
        let a = a.with_metrics(metrics.clone());
        tokio::spawn(a.run(std::future::pending()));
        wait_until(&ga, true).await;
        assert!(
            metrics
                .encode()
                .contains("leader_election_master_status{name=\"rekon-system/rekon\"} 1")
        );
        let last_renew = store
            .lease
            .lock()
            .as_ref()
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .renew_time
            .clone();
        store.down.store(true, Ordering::SeqCst);
        let cut = Instant::now();
        wait_until(&ga, false).await;
        // Within the renew deadline of the last successful renewal, i.e. well
        // before the 15 s lease could be taken by anyone else.
        assert!(
            cut.elapsed() <= Duration::from_secs(10),
            "took {:?}",
            cut.elapsed()
        );
        assert!(ga.check().is_err());
        assert!(
            metrics
                .encode()
                .contains("leader_election_master_status{name=\"rekon-system/rekon\"} 0")
        );
        assert_eq!(
            store
                .lease
                .lock()
                .as_ref()
                .unwrap()
                .spec
                .as_ref()
                .unwrap()
                .renew_time,
            last_renew
        );
        // Back up: a re-acquires its own (still held) lease.
        store.down.store(false, Ordering::SeqCst);
        wait_until(&ga, true).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_closes_on_its_own_when_renewals_stall() {
        // The elector task is never polled again after leading (simulated
        // starvation): the deadline alone must close the gate.
        let store = MemStore::default();
        let mut a = LeaderElector::with_store(store, config("a")).unwrap();
        let ga = a.gate();
        assert!(a.try_acquire_or_renew().await);
        a.set_leading(true);
        assert!(ga.is_leader());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!ga.is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_restarts_the_followers_expiry_clock() {
        let store = MemStore::default();
        let mut a = LeaderElector::with_store(store.clone(), config("a")).unwrap();
        let mut b = LeaderElector::with_store(store.clone(), config("b")).unwrap();
        assert!(a.try_acquire_or_renew().await);
        assert!(!b.try_acquire_or_renew().await);
        tokio::time::advance(Duration::from_secs(16)).await;
        // a renews late (its record changed) just before b looks again: b
        // restarts its clock from this observation and must not take over.
        assert!(a.try_acquire_or_renew().await);
        assert!(!b.try_acquire_or_renew().await);
        assert_eq!(store.holder().as_deref(), Some("a"));
        // No renewal for a lease duration: now b may take over.
        tokio::time::advance(Duration::from_secs(16)).await;
        assert!(b.try_acquire_or_renew().await);
        assert_eq!(store.holder().as_deref(), Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn racing_candidates_conflict_on_resource_version() {
        let store = MemStore::default();
        let mut dead = LeaderElector::with_store(store.clone(), config("dead")).unwrap();
        let mut b = LeaderElector::with_store(store.clone(), config("b")).unwrap();
        assert!(dead.try_acquire_or_renew().await);
        assert!(!b.try_acquire_or_renew().await);
        tokio::time::advance(Duration::from_secs(16)).await;
        // Between b's read and b's write another candidate takes the expired lease.
        *store.before_replace.lock() = Some(Box::new(|lease: &mut Lease| {
            lease.spec.as_mut().unwrap().holder_identity = Some("c".into());
            let rv: u64 = lease
                .metadata
                .resource_version
                .as_deref()
                .unwrap()
                .parse()
                .unwrap();
            lease.metadata.resource_version = Some((rv + 1).to_string());
        }));
        assert!(
            !b.try_acquire_or_renew().await,
            "a stale resourceVersion must not win"
        );
        assert_eq!(store.holder().as_deref(), Some("c"));
    }

    #[tokio::test(start_paused = true)]
    async fn with_on_lost_exit_a_lost_lease_ends_the_run() {
        let store = MemStore::default();
        let a = LeaderElector::with_store(store.clone(), config("a")).unwrap();
        let ga = a.gate();
        let run = tokio::spawn(a.run(std::future::pending()));
        wait_until(&ga, true).await;
        store.down.store(true, Ordering::SeqCst);
        let end = tokio::time::timeout(Duration::from_secs(15), run)
            .await
            .expect("the run did not end within the renew deadline")
            .unwrap();
        assert_eq!(end, RunEnd::Lost);
        assert!(!ga.is_leader());
        // It does not come back when the API does.
        store.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!ga.is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn unwanted_the_lease_is_drained_then_released_and_taken_at_once() {
        let store = MemStore::default();
        let a = LeaderElector::with_store(store.clone(), config("a")).unwrap();
        let b = LeaderElector::with_store(store.clone(), config("b")).unwrap();
        let (ga, gb) = (a.gate(), b.gate());
        let (want_a, want_rx) = watch::channel(true);
        let drained = Arc::new(tokio::sync::Notify::new());
        let drained_seen = Arc::new(AtomicBool::new(false));
        let (d, seen) = (drained.clone(), drained_seen.clone());
        let gate_in_drain = ga.clone();
        tokio::spawn(a.run_while(
            want_rx,
            move || {
                let (d, seen, gate) = (d.clone(), seen.clone(), gate_in_drain.clone());
                async move {
                    // The gate is closed before draining starts.
                    assert!(!gate.is_leader());
                    d.notified().await;
                    seen.store(true, Ordering::SeqCst);
                }
            },
            std::future::pending(),
        ));
        wait_until(&ga, true).await;
        tokio::spawn(b.run(std::future::pending()));
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(!gb.is_leader());

        want_a.send_replace(false);
        wait_until(&ga, false).await;
        // Still draining: the lease stays a's, b waits.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(store.holder().as_deref(), Some("a"));
        assert!(!gb.is_leader());
        let released = Instant::now();
        drained.notify_one();
        wait_until(&gb, true).await;
        assert!(drained_seen.load(Ordering::SeqCst));
        assert!(released.elapsed() <= Duration::from_millis(2400) + Duration::from_millis(10));
        // Wanted again: a campaigns but b holds a valid lease.
        want_a.send_replace(true);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!ga.is_leader());
        assert_eq!(store.holder().as_deref(), Some("b"));
    }
}
