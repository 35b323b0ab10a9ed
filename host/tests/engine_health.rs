//! Cluster health changes requeue the primaries of the plugins covering the
//! cluster (and only those), coalesced per cluster.

mod engine_support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use engine_support::*;
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rekon::action::{ClusterHealth, ClusterSet, Outcome, Phase, Registration, Request};
use rekon::cluster::Health;
use rekon::controller::Reconciler;
use rekon::plugin::{CallError, HostReads};

/// Within this, a health change must have requeued every covered primary.
const WAIT: Duration = Duration::from_secs(15);

/// Each request a [`Counter`] served, with the health of `edge` it saw.
type Seen = Arc<Mutex<Vec<(String, Option<ClusterHealth>)>>>;

/// Reconciles ConfigMaps of the primary cluster, writes nothing, and
/// records each request with the health of `edge` it saw. Nothing but a
/// requeue can make it reconcile an unchanged ConfigMap again.
struct Counter {
    registration: Registration,
    seen: Seen,
}

impl Counter {
    fn new(name: &str, clusters: ClusterSet) -> (Self, Seen) {
        let seen = Arc::default();
        let counter = Self {
            registration: Registration {
                name: name.into(),
                version: "1.0.0".into(),
                primary: configmaps(),
                primary_clusters: ClusterSet::Primary,
                primary_selector: None,
                clusters,
                watches: vec![],
                finalizer: None,
                permissions: vec![],
                crds: vec![],
                max_concurrent_reconciles: None,
            },
            seen: Arc::clone(&seen),
        };
        (counter, seen)
    }
}

impl Reconciler for Counter {
    fn registration(&self) -> &Registration {
        &self.registration
    }

    fn reconcile(
        &self,
        req: Request,
        _phase: Phase,
        reads: Arc<dyn HostReads>,
        _time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        let edge = reads
            .clusters()
            .into_iter()
            .find(|c| c.name == "edge")
            .map(|c| c.health);
        self.seen.lock().push((req.name, edge));
        async {
            Ok(Outcome {
                actions: vec![],
                requeue_after_ms: None,
                finalized: false,
            })
        }
        .boxed()
    }
}

const NAMES: [&str; 3] = ["a", "b", "c"];

/// Whether every primary was reconciled after the first `from` records,
/// seeing `edge` as `health`.
fn all_requeued(seen: &Seen, from: usize, health: ClusterHealth) -> bool {
    let seen = seen.lock();
    NAMES.iter().all(|n| {
        seen[from.min(seen.len())..]
            .iter()
            .any(|(name, h)| name == n && *h == Some(health))
    })
}

/// Wait until `seen` has not grown for `quiet`.
async fn quiet(seen: &Seen, quiet: Duration) {
    let mut last = seen.lock().len();
    let mut since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let n = seen.lock().len();
        if n != last {
            last = n;
            since = tokio::time::Instant::now();
        } else if since.elapsed() >= quiet {
            return;
        }
    }
}

fn edge_is(engine: &Engine, health: Health) -> bool {
    engine
        .clusters
        .get("edge")
        .is_some_and(|c| c.health() == health)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_changes_requeue_the_primaries_of_covering_plugins() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "edge"];
        let engine = Engine::start(&clusters, &clusters).await?;
        let (all, all_seen) = Counter::new("all", ClusterSet::All);
        let (named, named_seen) = Counter::new("named", ClusterSet::Named(vec!["edge".into()]));
        let (primary, primary_seen) = Counter::new("primary-only", ClusterSet::Primary);
        let (other, other_seen) = Counter::new("other", ClusterSet::Named(vec!["far".into()]));
        engine.manager.upsert(Arc::new(all));
        engine.manager.upsert(Arc::new(named));
        engine.manager.upsert(Arc::new(primary));
        engine.manager.upsert(Arc::new(other));
        for n in NAMES {
            create_cm(engine.cluster("main"), n, "v1");
        }
        let covered = [&all_seen, &named_seen];
        let uncovered = [&primary_seen, &other_seen];
        eventually("every plugin reconciled every primary", WAIT, || async {
            covered
                .iter()
                .chain(&uncovered)
                .all(|s| all_requeued(s, 0, ClusterHealth::Ready))
        })
        .await?;
        for s in covered.iter().chain(&uncovered) {
            quiet(s, HEALTH_QUIET).await;
        }

        for (round, (stall, want)) in [
            (true, ClusterHealth::Unreachable),
            (false, ClusterHealth::Ready),
        ]
        .into_iter()
        .enumerate()
        {
            let before: Vec<usize> = covered.iter().map(|s| s.lock().len()).collect();
            let before_uncovered: Vec<usize> = uncovered.iter().map(|s| s.lock().len()).collect();
            if stall {
                engine.cluster("edge").stall();
            } else {
                engine.cluster("edge").resume();
            }
            let health = if stall {
                Health::Unreachable
            } else {
                Health::Ready
            };
            eventually("edge health follows", WAIT, || async {
                edge_is(&engine, health)
            })
            .await?;
            eventually(
                &format!("round {round}: every covered primary requeued seeing edge {want:?}"),
                WAIT,
                || async {
                    covered
                        .iter()
                        .zip(&before)
                        .all(|(s, b)| all_requeued(s, *b, want))
                },
            )
            .await?;
            for s in covered.iter().chain(&uncovered) {
                quiet(s, HEALTH_QUIET).await;
            }
            // Coalesced: one requeue per primary for this change.
            for (s, b) in covered.iter().zip(&before) {
                let n = s.lock().len() - b;
                assert_eq!(n, NAMES.len(), "round {round}: {:?}", &s.lock()[*b..]);
            }
            for (s, b) in uncovered.iter().zip(&before_uncovered) {
                assert_eq!(
                    s.lock().len(),
                    *b,
                    "round {round}: plugins not covering edge are not requeued"
                );
            }
        }
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

/// Longer than the debounce window, so a pending requeue would show.
const HEALTH_QUIET: Duration = Duration::from_millis(1500);
