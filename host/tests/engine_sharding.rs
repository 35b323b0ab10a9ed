//! Sharding by cluster (`--shard-by=cluster`): each replica watches and
//! caches the primaries of the clusters whose shards it holds, and no
//! other; when a replica dies, the new owners of its shards start those
//! caches, and every object converges (nothing lost at the hand-over).
//!
//! Sharding by key (`--shard-by=key`) with a fan-out's children in every
//! cluster: each replica caches only the children of the primaries of the
//! shards it holds (and what names no primary); a dead replica's share is
//! listed by the new owners of its shards, and everything converges.
//!
//! Three replicas run in this process, each with its own clusters, caches,
//! writer, manager and shard Leases (in the primary sim cluster), like
//! three Pods.

mod engine_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use rekon::cache::CacheManager;
use rekon::cluster::ClusterRegistry;
use rekon::controller::{ControllerConfig, Manager};
use rekon::lease::shard::{ShardBy, ShardRunner, ShardingConfig, Shards, shard_of};

const CLUSTERS: [&str; 6] = ["c0", "c1", "c2", "c3", "c4", "c5"];
const SHARDS: u32 = 6;
const WAIT: Duration = Duration::from_secs(40);

struct Replica {
    name: String,
    shards: Shards,
    caches: CacheManager,
    manager: Manager,
    runner: tokio::task::JoinHandle<()>,
    probes: tokio::task::JoinHandle<()>,
}

impl Replica {
    async fn start(sim: &kube_sim::Sim, name: &str, by: ShardBy) -> anyhow::Result<Self> {
        let clusters = ClusterRegistry::new(CLUSTERS[0], client(sim, CLUSTERS[0]).await?);
        for c in &CLUSTERS[1..] {
            clusters.add(*c, client(sim, c).await?)?;
        }
        let config = ShardingConfig {
            by,
            identity: name.to_owned(),
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1500),
            retry_period: Duration::from_millis(200),
            ..ShardingConfig::new(SHARDS, "rekon", "default")
        };
        let (shards, runner) = ShardRunner::new(
            &clients_primary(&clusters),
            config,
            clusters.metrics().clone(),
        )?;
        // A crash is simulated by aborting this task: the Leases are left
        // to expire, as a killed Pod leaves them.
        let runner = tokio::spawn(runner.run(std::future::pending()));
        let (caches, _writer, manager, probes) = assemble(
            &clusters,
            ControllerConfig {
                max_concurrent_reconciles: 4,
                sync_timeout: Duration::from_secs(5),
                resync_period: None,
                shards: Some(shards.clone()),
            },
        );
        Ok(Self {
            name: name.to_owned(),
            shards,
            caches,
            manager,
            runner,
            probes,
        })
    }

    /// The clusters whose shard this replica holds.
    fn held_clusters(&self) -> BTreeSet<String> {
        CLUSTERS
            .iter()
            .filter(|c| self.shards.holds_cluster(c) == Some(true))
            .map(|c| (*c).to_owned())
            .collect()
    }

    /// The clusters whose ConfigMaps (the primaries) this replica caches.
    fn primary_caches(&self) -> BTreeSet<String> {
        self.caches
            .active()
            .into_iter()
            .filter(|(_, r)| r == "/v1/ConfigMap")
            .map(|(c, _)| c)
            .collect()
    }

    async fn kill(self) {
        self.runner.abort();
        self.manager.shutdown().await;
        self.probes.abort();
    }
}

/// Three replicas, each holding two of the six shards.
async fn three_replicas(sim: &kube_sim::Sim, by: ShardBy) -> anyhow::Result<Vec<Replica>> {
    let mut replicas = Vec::new();
    for name in ["r0", "r1", "r2"] {
        replicas.push(Replica::start(sim, name, by).await?);
    }
    eventually("each replica holds two shards", WAIT, || async {
        replicas.iter().all(|r| r.shards.held().len() == 2)
    })
    .await?;
    Ok(replicas)
}

fn clients_primary(clusters: &ClusterRegistry) -> kube::Client {
    clusters
        .get(clusters.primary())
        .expect("primary engaged")
        .client()
}

/// The fan-out with a primary in every cluster: each cluster's ConfigMaps
/// are primaries, each with a Secret in every cluster.
fn per_cluster_fanout() -> FanOut {
    let mut plugin = FanOut::new("fleet", "1.0.0", None);
    plugin.registration.primary_clusters = rekon::action::ClusterSet::All;
    plugin
}

fn converged(sim: &kube_sim::Sim, names: &[String], value: &str) -> bool {
    names.iter().all(|name| {
        CLUSTERS
            .iter()
            .all(|c| child_value(sim.cluster(c), name).as_deref() == Some(value))
    })
}

/// Every replica caches the primaries of exactly the clusters it holds;
/// every cluster's primaries are cached by the one replica holding it.
fn check_split(replicas: &[&Replica]) -> Result<(), String> {
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in replicas {
        let held = r.held_clusters();
        let cached = r.primary_caches();
        if cached != held {
            return Err(format!(
                "{} holds {held:?} but caches the primaries of {cached:?}",
                r.name
            ));
        }
        // The children (owner labels) of the held clusters' primaries, in
        // every cluster, and no other.
        for (cluster, children) in cached_children(r) {
            let foreign: Vec<&String> = children
                .iter()
                .filter(|n| !held.iter().any(|c| n.starts_with(&format!("{c}-"))))
                .collect();
            if !foreign.is_empty() {
                return Err(format!(
                    "{} holds {held:?} but caches in {cluster} the children {foreign:?}",
                    r.name
                ));
            }
        }
        for c in held {
            owners.entry(c).or_default().push(r.name.clone());
        }
    }
    if owners.len() != CLUSTERS.len() || owners.values().any(|o| o.len() != 1) {
        return Err(format!("clusters and their owners: {owners:?}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_by_cluster_splits_the_caches_and_a_dead_replicas_clusters_are_taken_over() {
    tokio::time::timeout(Duration::from_secs(150), async {
        init_tracing();
        // The test is only meaningful if the clusters spread over shards.
        let used: BTreeSet<u32> = CLUSTERS
            .iter()
            .map(|c| shard_of(ShardBy::Cluster, SHARDS, c, None, ""))
            .collect();
        assert!(used.len() >= 3, "clusters map to shards {used:?}");
        let sim = kube_sim::Sim::start(&CLUSTERS).await?;
        let mut replicas = three_replicas(&sim, ShardBy::Cluster).await?;
        for r in &replicas {
            r.manager.upsert(Arc::new(per_cluster_fanout()));
        }
        let mut names = Vec::new();
        for c in CLUSTERS {
            for i in 0..3 {
                let name = format!("{c}-cm{i}");
                create_cm(sim.cluster(c), &name, "v1");
                names.push(name);
            }
        }
        eventually(
            "every primary fanned out with three replicas",
            WAIT,
            || async { converged(&sim, &names, "v1") },
        )
        .await?;
        let all: Vec<&Replica> = replicas.iter().collect();
        eventually_ok("caches split by held cluster", || check_split(&all)).await?;
        drop(all);
        // Some replica holds clusters; kill one that does.
        let victim = replicas
            .iter()
            .position(|r| !r.held_clusters().is_empty())
            .expect("a replica holding clusters");
        let victim = replicas.remove(victim);
        let orphaned = victim.held_clusters();
        victim.kill().await;
        // While nobody holds them, the orphaned clusters change: the new
        // owners must see these changes (their caches start with a list).
        for c in &orphaned {
            set_cm(sim.cluster(c), &format!("{c}-cm0"), "v2");
            create_cm(sim.cluster(c), &format!("{c}-late"), "v2");
        }
        eventually("the dead replica's shards are taken over", WAIT, || async {
            replicas
                .iter()
                .map(|r| r.shards.held().len())
                .sum::<usize>()
                == SHARDS as usize
        })
        .await?;
        let v2: Vec<String> = orphaned
            .iter()
            .flat_map(|c| [format!("{c}-cm0"), format!("{c}-late")])
            .collect();
        eventually("the orphaned clusters' changes converge", WAIT, || async {
            converged(&sim, &v2, "v2")
        })
        .await?;
        // A change in any cluster after the hand-over converges too.
        for c in CLUSTERS {
            set_cm(sim.cluster(c), &format!("{c}-cm1"), "v3");
        }
        let v3: Vec<String> = CLUSTERS.iter().map(|c| format!("{c}-cm1")).collect();
        eventually(
            "every cluster converges with two replicas",
            WAIT,
            || async { converged(&sim, &v3, "v3") },
        )
        .await?;
        let alive: Vec<&Replica> = replicas.iter().collect();
        eventually_ok("caches split again between the survivors", || {
            check_split(&alive)
        })
        .await?;
        for c in &orphaned {
            assert!(
                alive.iter().any(|r| r.primary_caches().contains(c)),
                "nobody caches {c} after the hand-over"
            );
        }
        drop(alive);
        for r in replicas {
            r.kill().await;
        }
        sim.shutdown().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out")
    .unwrap();
}

/// Waits until `check` passes; on a timeout the error says what it last found.
async fn eventually_ok(what: &str, check: impl Fn() -> Result<(), String>) -> anyhow::Result<()> {
    eventually(what, WAIT, || async { check().is_ok() })
        .await
        .map_err(|e| anyhow::anyhow!("{e}: {:?}", check()))
}

/// The names of the child Secrets `replica` caches, per cluster.
fn cached_children(replica: &Replica) -> BTreeMap<String, BTreeSet<String>> {
    CLUSTERS
        .iter()
        .map(|c| {
            let names = replica
                .caches
                .running_all(c, &rekon::writer::resource_id(&secrets()))
                .iter()
                .flat_map(|cache| {
                    cache.read(|store| {
                        store
                            .objects()
                            .map(|o| o.key.name.to_string())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            ((*c).to_owned(), names)
        })
        .collect()
}

/// Each replica caches, in every cluster, exactly the children of the
/// primaries of the shards it holds plus the unowned `stray` Secret; each
/// child is cached by exactly one replica.
fn check_children_split(replicas: &[&Replica], primaries: &[String]) -> Result<(), String> {
    for r in replicas {
        let mine: BTreeSet<String> = primaries
            .iter()
            .filter(|p| r.shards.owns_key(CLUSTERS[0], Some("default"), p))
            .cloned()
            .chain(["stray".to_owned()])
            .collect();
        for (cluster, cached) in cached_children(r) {
            if cached != mine {
                return Err(format!(
                    "{} holds shards {:?}; in {cluster} it caches {} children, {} expected (extra {:?}, missing {:?})",
                    r.name,
                    r.shards.held(),
                    cached.len(),
                    mine.len(),
                    cached.difference(&mine).collect::<Vec<_>>(),
                    mine.difference(&cached).collect::<Vec<_>>(),
                ));
            }
        }
    }
    let held: usize = replicas.iter().map(|r| r.shards.held().len()).sum();
    if held != SHARDS as usize {
        return Err(format!("{held} shards held, {SHARDS} expected"));
    }
    Ok(())
}

/// Every primary's children carry `value` everywhere, and the replicas'
/// children caches are split by the shards they hold.
async fn converged_and_split(
    sim: &kube_sim::Sim,
    replicas: &[Replica],
    names: &[String],
    value: &str,
) -> anyhow::Result<()> {
    eventually(
        &format!(
            "every primary converges to {value} with {} replicas",
            replicas.len()
        ),
        WAIT,
        || async { converged(sim, names, value) },
    )
    .await?;
    let all: Vec<&Replica> = replicas.iter().collect();
    eventually_ok("children caches split by held shard", || {
        check_children_split(&all, names)
    })
    .await
}

fn stray_secret(sim: &kube_sim::SimCluster) {
    sim.create(
        "v1",
        "secrets",
        Some("default"),
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "stray", "namespace": "default", "labels": {"team": "x"}},
        }),
    )
    .expect("create the stray Secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_by_key_splits_the_children_caches_and_a_dead_replicas_share_is_listed_again() {
    tokio::time::timeout(Duration::from_secs(150), async {
        init_tracing();
        let sim = kube_sim::Sim::start(&CLUSTERS).await?;
        for c in CLUSTERS {
            stray_secret(sim.cluster(c));
        }
        let mut replicas = three_replicas(&sim, ShardBy::Key).await?;
        for r in &replicas {
            r.manager
                .upsert(Arc::new(FanOut::new("fanout", "1.0.0", None)));
        }
        let names: Vec<String> = (0..24).map(|i| format!("t{i}")).collect();
        // The test is only meaningful if the primaries spread over shards.
        let used: BTreeSet<u32> = names
            .iter()
            .map(|n| shard_of(ShardBy::Key, SHARDS, CLUSTERS[0], Some("default"), n))
            .collect();
        assert_eq!(
            used.len(),
            SHARDS as usize,
            "primaries map to shards {used:?}"
        );
        for n in &names {
            create_cm(sim.cluster(CLUSTERS[0]), n, "v1");
        }
        converged_and_split(&sim, &replicas, &names, "v1").await?;
        let victim = replicas.remove(0);
        let orphaned: Vec<String> = names
            .iter()
            .filter(|n| victim.shards.owns_key(CLUSTERS[0], Some("default"), n))
            .cloned()
            .collect();
        assert!(!orphaned.is_empty(), "the victim reconciled nothing");
        victim.kill().await;
        // While nobody holds their shards, the orphaned primaries change:
        // the new owners must see it and rewrite their children everywhere.
        for n in &orphaned {
            set_cm(sim.cluster(CLUSTERS[0]), n, "v2");
        }
        eventually("the dead replica's shards are taken over", WAIT, || async {
            replicas
                .iter()
                .map(|r| r.shards.held().len())
                .sum::<usize>()
                == SHARDS as usize
        })
        .await?;
        eventually("the orphaned primaries converge", WAIT, || async {
            converged(&sim, &orphaned, "v2")
        })
        .await?;
        for n in &names {
            set_cm(sim.cluster(CLUSTERS[0]), n, "v3");
        }
        converged_and_split(&sim, &replicas, &names, "v3").await?;
        for r in replicas {
            r.kill().await;
        }
        sim.shutdown().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out")
    .unwrap();
}
