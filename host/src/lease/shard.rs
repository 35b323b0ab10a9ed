//! Sharding: any number of replicas split the work, coordinated only by
//! `coordination.k8s.io` Leases in the primary cluster.
//!
//! # Model
//! - **Shard**: one of `N` fixed buckets of work. A primary key (cluster,
//!   namespace, name) belongs to shard `fnv1a(cluster/namespace/name) % N`
//!   ([`ShardBy::Key`], the default: one huge cluster is split too), or
//!   `fnv1a(cluster) % N` ([`ShardBy::Cluster`]: a fleet is split by whole
//!   clusters). The hash is FNV-1a, fixed forever, so replicas of different
//!   versions agree on it.
//! - **Shard Lease** `<name>-shard-<i>`: whoever holds it reconciles (and
//!   writes for) the keys of shard `i`. Each is run by the same state
//!   machine as leader election ([`super::elector`]): acquire only when free
//!   or expired on our clock, renew every retry period, stop writing at the
//!   renew deadline, resourceVersion preconditions on every write. So a key
//!   is reconciled by at most one replica at a time for exactly the reasons
//!   a leader is unique; every write is fenced by its shard's lease, retries
//!   included (`crate::writer::FENCE`).
//! - **Membership Lease** `<name>-member-<hash of identity>` (label
//!   `rekon.dev/shard-group=<name>`): each replica renews its own; a member
//!   is live while its lease was renewed within its duration, as observed on
//!   our clock (never by comparing timestamps across nodes).
//! - **Assignment**: every replica computes the same assignment from the
//!   live members it sees ([`assign`]): each member gets ⌊N/m⌋ or ⌈N/m⌉
//!   shards, each shard going to the member with the highest rendezvous
//!   hash that still has room, so a join or a leave moves few shards. A
//!   replica campaigns for the shards assigned to it and hands over the
//!   others. Views may disagree for a retry period while a member joins or
//!   leaves; that only delays a hand-over, never doubles an owner, because
//!   ownership is the Lease, not the view.
//!
//! # What happens when
//! - **Join**: the new member's Lease appears; within a retry period every
//!   replica sees it and recomputes. A replica that lost a shard in the new
//!   assignment closes that shard's gate (no write from then on), lets its
//!   in-flight reconciles of the shard end, and releases the Lease (holder
//!   cleared, 1 s duration); the newcomer takes it at its next retry.
//! - **Leave** (shutdown): a replica stops its controllers, releases its
//!   shard Leases and deletes its membership Lease: the others take over at
//!   their next retry.
//! - **Crash**: its Leases stop being renewed; after the lease duration the
//!   others see the member gone and its shards expired, and take them.
//! - **Partition** (a replica cannot reach the primary cluster): it fails to
//!   renew and closes its shards' gates at the renew deadline, before the
//!   lease duration lets anyone else take them; when it is back it rejoins
//!   like a new member.
//!
//! This is kubernetes-controller-sharding's model (Leases for membership,
//! a stable hash for assignment) without its central sharder: assignment is
//! a pure function of the membership every replica reads, and exclusivity
//! comes from the shard Leases. No consensus protocol of our own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::config::{self, LeaderElectionConfig, OnLost, default_identity};
use super::elector::LeaderElector;
use super::gate::LeaderGate;
use crate::telemetry::metrics::Metrics;

/// Label of the membership Leases; its value is the shard group name.
pub const GROUP_LABEL: &str = "rekon.dev/shard-group";

/// Annotation of a membership Lease: the member's shard count.
pub const SHARDS_ANNOTATION: &str = "rekon.dev/shards";

/// The most shards a group may have.
pub const MAX_SHARDS: u32 = 1024;

/// How keys are mapped to shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ShardBy {
    /// By cluster, namespace and name: every cluster is split across shards.
    #[default]
    Key,
    /// By cluster only: each cluster's keys all belong to one shard.
    Cluster,
}

/// Configuration of sharding.
#[derive(Clone, Debug)]
pub struct ShardingConfig {
    /// Number of shards (1..=1024). Every replica of a group must use the same.
    pub shards: u32,
    /// How keys map to shards.
    pub by: ShardBy,
    /// Group name: prefix of the Lease names and value of [`GROUP_LABEL`].
    pub name: String,
    /// Namespace of the Leases (in the primary cluster).
    pub namespace: String,
    /// This replica's identity (see [`default_identity`]).
    pub identity: String,
    /// Lease duration of shard and membership Leases.
    pub lease_duration: Duration,
    /// How long a shard holder keeps trying to renew before it stops writing.
    pub renew_deadline: Duration,
    /// Interval between acquire/renew attempts and membership reads.
    pub retry_period: Duration,
}

impl ShardingConfig {
    /// `shards` shards in group `name` in `namespace`, client-go's timings.
    #[must_use]
    pub fn new(shards: u32, name: impl Into<String>, namespace: impl Into<String>) -> Self {
        Self {
            shards,
            by: ShardBy::Key,
            name: name.into(),
            namespace: namespace.into(),
            identity: default_identity(),
            lease_duration: LeaderElectionConfig::DEFAULT_LEASE_DURATION,
            renew_deadline: LeaderElectionConfig::DEFAULT_RENEW_DEADLINE,
            retry_period: LeaderElectionConfig::DEFAULT_RETRY_PERIOD,
        }
    }

    /// Name of shard `i`'s Lease.
    #[must_use]
    pub fn shard_lease(&self, i: u32) -> String {
        format!("{}-shard-{i}", self.name)
    }

    /// Name of the membership Lease of `identity` (identities need not be
    /// valid object names, so it is hashed).
    #[must_use]
    pub fn member_lease(&self, identity: &str) -> String {
        format!("{}-member-{:016x}", self.name, fnv1a(identity.as_bytes()))
    }

    fn election(&self, i: u32) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_name: self.shard_lease(i),
            lease_namespace: self.namespace.clone(),
            identity: self.identity.clone(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            // Losing a shard is ordinary (rebalancing, a slow renewal): the
            // replica keeps serving its other shards and campaigns again.
            on_lost: OnLost::Demote,
        }
    }

    /// Check the shard count and the timings.
    ///
    /// # Errors
    /// When the count is out of range or the timings are inconsistent.
    pub fn validate(&self) -> Result<(), config::Error> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(config::Error::Shards {
                shards: self.shards,
                max: MAX_SHARDS,
            });
        }
        self.election(0).validate()
    }
}

/// FNV-1a, 64 bit. Written out (eight lines) rather than taken from a
/// crate because the value is a wire contract between replicas: it must
/// never change with a dependency's version.
#[must_use]
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The shard of a key.
#[must_use]
pub fn shard_of(
    by: ShardBy,
    shards: u32,
    cluster: &str,
    namespace: Option<&str>,
    name: &str,
) -> u32 {
    let hash = match by {
        ShardBy::Cluster => fnv1a(cluster.as_bytes()),
        ShardBy::Key => {
            let key = format!("{cluster}/{}/{name}", namespace.unwrap_or(""));
            fnv1a(key.as_bytes())
        }
    };
    u32::try_from(hash % u64::from(shards.max(1))).unwrap_or(0)
}

/// Which member (index into `members`, which must be sorted and unique)
/// gets each of `shards` shards: member `j` gets ⌈N/m⌉ if `j < N mod m`,
/// else ⌊N/m⌋; shard `s` goes to the member with the highest
/// `fnv1a("s/member")` that still has room (rendezvous hashing with
/// capacities). Deterministic: every replica seeing the same members
/// computes the same assignment.
#[must_use]
pub fn assign(shards: u32, members: &[String]) -> Vec<usize> {
    let m = members.len();
    if m == 0 {
        return Vec::new();
    }
    let n = shards as usize;
    let mut room: Vec<usize> = (0..m).map(|j| n / m + usize::from(j < n % m)).collect();
    (0..shards)
        .map(|s| {
            let best = (0..m)
                .filter(|&j| room[j] > 0)
                .max_by_key(|&j| (fnv1a(format!("{s}/{}", members[j]).as_bytes()), j))
                .expect("total room equals the shard count");
            room[best] -= 1;
            best
        })
        .collect()
}

/// The handle controllers and the writer use: which shards this replica
/// holds, the fence of each, and in-flight accounting for hand-overs.
#[derive(Clone)]
pub struct Shards {
    inner: Arc<Inner>,
}

struct Inner {
    by: ShardBy,
    gates: Vec<LeaderGate>,
    running: Vec<AtomicUsize>,
    idle: Notify,
    changes: watch::Sender<u64>,
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards")
            .field("shards", &self.inner.gates.len())
            .field("by", &self.inner.by)
            .field("held", &self.held())
            .finish()
    }
}

impl Shards {
    /// Number of shards.
    #[must_use]
    pub fn count(&self) -> u32 {
        u32::try_from(self.inner.gates.len()).unwrap_or(u32::MAX)
    }

    /// The shard of a key.
    #[must_use]
    pub fn shard_of(&self, cluster: &str, namespace: Option<&str>, name: &str) -> u32 {
        shard_of(self.inner.by, self.count(), cluster, namespace, name)
    }

    /// The write fence of `shard`: open only while this replica holds its
    /// Lease and its last renewal is younger than the renew deadline.
    #[must_use]
    pub fn gate(&self, shard: u32) -> &LeaderGate {
        &self.inner.gates[shard as usize % self.inner.gates.len()]
    }

    /// Whether this replica may reconcile and write for `shard` now.
    #[must_use]
    pub fn owns(&self, shard: u32) -> bool {
        self.gate(shard).is_leader()
    }

    /// How keys are mapped to shards.
    #[must_use]
    pub fn by(&self) -> ShardBy {
        self.inner.by
    }

    /// With [`ShardBy::Cluster`]: whether this replica holds the shard of
    /// every key of `cluster` (so it must watch and cache that cluster's
    /// primaries). `None` with [`ShardBy::Key`]: a cluster's keys are spread
    /// over every shard.
    #[must_use]
    pub fn holds_cluster(&self, cluster: &str) -> Option<bool> {
        (self.inner.by == ShardBy::Cluster).then(|| self.owns_key(cluster, None, ""))
    }

    /// Whether this replica may reconcile the key now.
    #[must_use]
    pub fn owns_key(&self, cluster: &str, namespace: Option<&str>, name: &str) -> bool {
        self.owns(self.shard_of(cluster, namespace, name))
    }

    /// The shards held now, ascending.
    #[must_use]
    pub fn held(&self) -> Vec<u32> {
        (0..self.count()).filter(|&s| self.owns(s)).collect()
    }

    /// Bumped whenever a shard is gained or lost.
    #[must_use]
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Count a reconcile of `shard` as in flight until the guard drops; a
    /// hand-over of the shard waits for these.
    #[must_use]
    pub fn enter(&self, shard: u32) -> InFlight {
        let shard = shard as usize % self.inner.gates.len();
        self.inner.running[shard].fetch_add(1, Ordering::SeqCst);
        InFlight {
            shards: self.clone(),
            shard,
        }
    }

    async fn idle(&self, shard: usize) {
        loop {
            let notified = self.inner.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inner.running[shard].load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// A reconcile in flight for a shard; see [`Shards::enter`].
#[derive(Debug)]
pub struct InFlight {
    shards: Shards,
    shard: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let inner = &self.shards.inner;
        if inner.running[self.shard].fetch_sub(1, Ordering::SeqCst) == 1 {
            inner.idle.notify_waiters();
        }
    }
}

/// Runs membership and the shard Leases of one replica; see the [module docs](self).
pub struct ShardRunner {
    config: ShardingConfig,
    shards: Shards,
    electors: Vec<LeaderElector>,
    wants: Vec<watch::Sender<bool>>,
    api: Api<Lease>,
    metrics: Metrics,
}

impl std::fmt::Debug for ShardRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardRunner")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A member as last observed: its record and when it last changed, on our clock.
struct Observed {
    spec: Option<LeaseSpec>,
    shards: Option<u32>,
    created: Option<k8s_openapi::jiff::Timestamp>,
    changed_at: Instant,
}

/// A live member as the assignment sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its identity.
    pub identity: String,
    /// Its shard count (`None`: not announced).
    pub shards: Option<u32>,
    /// When its membership Lease was created (the API server's clock).
    pub created: Option<k8s_openapi::jiff::Timestamp>,
}

/// Whether `me` must hold no shard because an older live member runs a
/// different shard count: keys map to shards by the count, so two counts
/// at once could give one key two owners. The older group keeps serving
/// until its members leave (a rollout that changes `--shards`), then the
/// newer one takes over; members that joined later never make an older one
/// stand down, so the two cannot wait for each other.
#[must_use]
pub fn defer_to_older(me: &Member, members: &[Member]) -> bool {
    members.iter().any(|m| {
        m.identity != me.identity
            && m.shards.is_some_and(|n| Some(n) != me.shards)
            && match (m.created, me.created) {
                (Some(theirs), Some(mine)) => (theirs, &m.identity) < (mine, &me.identity),
                // We have not seen our own Lease yet: we are the newcomer.
                (Some(_), None) => true,
                _ => false,
            }
    })
}

impl ShardRunner {
    /// The runner and the handle for controllers, with Leases in the
    /// primary cluster reached through `client`.
    ///
    /// # Errors
    /// When the configuration is invalid.
    pub fn new(
        client: &kube::Client,
        config: ShardingConfig,
        metrics: Metrics,
    ) -> Result<(Shards, Self), config::Error> {
        config.validate()?;
        let mut electors = Vec::new();
        let mut gates = Vec::new();
        for i in 0..config.shards {
            let elector = LeaderElector::new(client.clone(), config.election(i))?
                .with_metrics(metrics.clone());
            gates.push(elector.gate());
            electors.push(elector);
        }
        let shards = Shards {
            inner: Arc::new(Inner {
                by: config.by,
                running: (0..gates.len()).map(|_| AtomicUsize::new(0)).collect(),
                gates,
                idle: Notify::new(),
                changes: watch::channel(0).0,
            }),
        };
        let wants = (0..config.shards)
            .map(|_| watch::channel(false).0)
            .collect();
        let api = Api::namespaced(client.clone(), &config.namespace);
        Ok((
            shards.clone(),
            Self {
                config,
                shards,
                electors,
                wants,
                api,
                metrics,
            },
        ))
    }

    /// Join the group, hold the assigned shards and follow membership until
    /// `shutdown`; then release every shard held and leave the group.
    /// Call it only after the controllers stopped (the caller's job), so no
    /// reconcile outlives the Leases.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()> + Send) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let mut tasks = tokio::task::JoinSet::new();
        for (i, elector) in std::mem::take(&mut self.electors).into_iter().enumerate() {
            let want = self.wants[i].subscribe();
            let shards = self.shards.clone();
            let drained = move || {
                let shards = shards.clone();
                async move { shards.idle(i).await }
            };
            let run = elector.run_while(want, drained, stopped());
            tasks.spawn(async move {
                // A shard Lease demotes on loss (never `RunEnd::Lost`).
                run.await;
            });
            // Forward this shard's gains and losses to the controllers.
            let mut gate = self.shards.inner.gates[i].subscribe();
            let shards = self.shards.clone();
            let metrics = self.metrics.clone();
            let stop = stopped();
            tasks.spawn(async move {
                tokio::pin!(stop);
                loop {
                    tokio::select! {
                        () = &mut stop => break,
                        changed = gate.changed() => if changed.is_err() { break },
                    }
                    metrics.set_shards_held(shards.held().len());
                    shards.inner.changes.send_modify(|g| *g += 1);
                }
            });
        }
        info!(
            group = %self.config.name,
            shards = self.config.shards,
            identity = %self.config.identity,
            "joining shard group"
        );
        let member = self.config.member_lease(&self.config.identity);
        let mut observed: HashMap<String, Observed> = HashMap::new();
        let mut mine: Vec<u32> = Vec::new();
        let mut deferring = false;
        tokio::pin!(shutdown);
        loop {
            self.renew_membership(&member).await;
            let live = self.live_members(&mut observed).await;
            let me = live
                .iter()
                .find(|m| m.identity == self.config.identity)
                .cloned()
                .expect("self is always a member");
            let defer = defer_to_older(&me, &live);
            if defer != deferring {
                if defer {
                    warn!(
                        group = %self.config.name,
                        shards = self.config.shards,
                        others = ?live.iter().filter(|m| m.shards != me.shards).map(|m| (&m.identity, m.shards)).collect::<Vec<_>>(),
                        "older members of the group run a different shard count: holding no shard until they leave"
                    );
                } else {
                    info!(group = %self.config.name, "no member runs a different shard count any more");
                }
                deferring = defer;
            }
            // Members of the same shard count share the work.
            let members: Vec<String> = live
                .iter()
                .filter(|m| {
                    m.identity == me.identity || m.shards == me.shards || m.shards.is_none()
                })
                .map(|m| m.identity.clone())
                .collect();
            let assignment = assign(self.config.shards, &members);
            let me = members
                .iter()
                .position(|m| *m == self.config.identity)
                .expect("self is always a member");
            let assigned: Vec<u32> = if defer {
                Vec::new()
            } else {
                (0..self.config.shards)
                    .filter(|&s| assignment[s as usize] == me)
                    .collect()
            };
            if assigned != mine {
                info!(
                    group = %self.config.name,
                    members = members.len(),
                    assigned = ?assigned,
                    "shard assignment changed"
                );
                mine = assigned;
            }
            for (s, want) in self.wants.iter().enumerate() {
                let wanted = !defer && assignment[s] == me;
                want.send_if_modified(|w| std::mem::replace(w, wanted) != wanted);
            }
            let wait = self
                .config
                .retry_period
                .mul_f64(1.0 + 0.2 * rand::random::<f64>());
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        // Release every shard (the electors release on stop), then leave.
        let _ = stop_tx.send(true);
        while tasks.join_next().await.is_some() {}
        self.metrics.set_shards_held(0);
        match self.api.delete(&member, &DeleteParams::default()).await {
            Ok(_) => info!(group = %self.config.name, "left shard group"),
            Err(e) => {
                warn!(group = %self.config.name, error = %e, "failed to delete membership lease (it expires)")
            }
        }
    }

    /// Create or renew this replica's membership Lease.
    async fn renew_membership(&self, member: &str) {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let duration =
            i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(duration),
            renew_time: Some(now),
            ..LeaseSpec::default()
        };
        let result = match self.api.get_opt(member).await {
            Ok(Some(mut lease)) => {
                lease.spec = Some(spec);
                lease
                    .metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(SHARDS_ANNOTATION.to_owned(), self.config.shards.to_string());
                self.api
                    .replace(member, &PostParams::default(), &lease)
                    .await
            }
            Ok(None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(member.to_owned()),
                        namespace: Some(self.config.namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            GROUP_LABEL.to_owned(),
                            self.config.name.clone(),
                        )])),
                        annotations: Some(BTreeMap::from([(
                            SHARDS_ANNOTATION.to_owned(),
                            self.config.shards.to_string(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            warn!(group = %self.config.name, lease = %member, error = %e, "failed to renew membership lease");
        }
    }

    /// The live members, sorted by identity, always including ourselves.
    async fn live_members(&self, observed: &mut HashMap<String, Observed>) -> Vec<Member> {
        let params = ListParams::default().labels(&format!("{GROUP_LABEL}={}", self.config.name));
        match self.api.list(&params).await {
            Ok(list) => {
                let now = Instant::now();
                let mut seen = HashMap::new();
                for lease in list.items {
                    let Some(name) = lease.metadata.name.clone() else {
                        continue;
                    };
                    let changed_at = match observed.remove(&name) {
                        Some(o) if o.spec == lease.spec => o.changed_at,
                        _ => now,
                    };
                    let shards = lease
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(SHARDS_ANNOTATION))
                        .and_then(|v| v.parse().ok());
                    seen.insert(
                        name,
                        Observed {
                            spec: lease.spec,
                            shards,
                            created: lease.metadata.creation_timestamp.map(|t| t.0),
                            changed_at,
                        },
                    );
                }
                *observed = seen;
            }
            Err(e) => {
                warn!(group = %self.config.name, error = %e, "failed to list membership leases; keeping the last view");
            }
        }
        let now = Instant::now();
        let mut members: Vec<Member> = observed
            .values()
            .filter_map(|o| {
                let spec = o.spec.as_ref()?;
                let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
                let duration = Duration::from_secs(
                    u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
                );
                (now < o.changed_at + duration).then(|| Member {
                    identity: holder.to_owned(),
                    shards: o.shards,
                    created: o.created,
                })
            })
            .collect();
        if !members.iter().any(|m| m.identity == self.config.identity) {
            members.push(Member {
                identity: self.config.identity.clone(),
                shards: Some(self.config.shards),
                created: None,
            });
        }
        members.sort_by(|a, b| a.identity.cmp(&b.identity));
        members.dedup_by(|a, b| a.identity == b.identity);
        debug!(group = %self.config.name, members = ?members.iter().map(|m| &m.identity).collect::<Vec<_>>(), "live members");
        members
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<String> {
        let mut m: Vec<String> = (0..n)
            .map(|i| format!("replica-{i}_{:x}", i * 7919))
            .collect();
        m.sort();
        m
    }

    #[test]
    fn fnv1a_matches_the_reference_values() {
        // Test vectors of the FNV reference implementation.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn keys_spread_over_shards_and_cluster_mode_keeps_a_cluster_together() {
        let mut counts = [0_u32; 8];
        for i in 0..8000 {
            counts
                [shard_of(ShardBy::Key, 8, "main", Some("default"), &format!("t-{i}")) as usize] +=
                1;
        }
        for c in counts {
            assert!((800..=1200).contains(&c), "uneven spread: {counts:?}");
        }
        let s = shard_of(ShardBy::Cluster, 8, "east", Some("a"), "x");
        assert!(
            (0..100).all(|i| shard_of(ShardBy::Cluster, 8, "east", None, &format!("n{i}")) == s)
        );
    }

    #[test]
    fn assignment_is_fair_and_deterministic() {
        for m in 1..=5 {
            for n in [1_u32, 2, 3, 7, 12, 32] {
                let ms = members(m);
                let a = assign(n, &ms);
                assert_eq!(a, assign(n, &ms));
                let mut per = vec![0_u32; m];
                for j in &a {
                    per[*j] += 1;
                }
                let (lo, hi) = (n / m as u32, n.div_ceil(m as u32));
                assert!(
                    per.iter().all(|c| (lo..=hi).contains(c)),
                    "{m} members, {n} shards: {per:?}"
                );
            }
        }
    }

    #[test]
    fn a_join_or_leave_moves_few_shards() {
        let n = 32;
        for m in 2..=5 {
            let before = members(m);
            let mut after = before.clone();
            after.push("zz-new-replica".to_owned());
            after.sort();
            let a = assign(n, &before);
            let b = assign(n, &after);
            let moved = (0..n as usize)
                .filter(|&s| before[a[s]] != after[b[s]])
                .count();
            // The newcomer's fair share must move; allow a little more for
            // the capacities that shift.
            let share = (n as usize).div_ceil(m + 1);
            assert!(moved <= share * 2, "{m}→{}: moved {moved} of {n}", m + 1);
        }
    }

    #[test]
    fn a_different_shard_count_defers_only_to_older_members() {
        let t = |s: i64| Some(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let m = |id: &str, shards: u32, created| Member {
            identity: id.to_owned(),
            shards: Some(shards),
            created,
        };
        let old_a = m("old-a", 12, t(100));
        let old_b = m("old-b", 12, t(101));
        let new_a = m("new-a", 8, t(200));
        let all = vec![new_a.clone(), old_a.clone(), old_b.clone()];
        // The newcomer with another count waits; the older ones serve on.
        assert!(defer_to_older(&new_a, &all));
        assert!(!defer_to_older(&old_a, &all));
        assert!(!defer_to_older(&old_b, &all));
        // Once the old members are gone, it serves.
        assert!(!defer_to_older(&new_a, std::slice::from_ref(&new_a)));
        // Same count: nobody defers.
        let same = vec![old_a.clone(), m("new-c", 12, t(300))];
        assert!(same.iter().all(|me| !defer_to_older(me, &same)));
        // Our own Lease not seen yet: we are the newcomer.
        let unseen = m("new-d", 8, None);
        assert!(defer_to_older(&unseen, &[unseen.clone(), old_a]));
    }

    #[tokio::test]
    async fn in_flight_work_is_counted_and_idle_resolves() {
        let gates = vec![LeaderGate::always_leader(), LeaderGate::always_leader()];
        let shards = Shards {
            inner: Arc::new(Inner {
                by: ShardBy::Key,
                running: (0..2).map(|_| AtomicUsize::new(0)).collect(),
                gates,
                idle: Notify::new(),
                changes: watch::channel(0).0,
            }),
        };
        shards.idle(1).await;
        let guard = shards.enter(1);
        let waiting = tokio::spawn({
            let shards = shards.clone();
            async move { shards.idle(1).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(guard);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("idle after the last guard dropped")
            .unwrap();
    }
}
