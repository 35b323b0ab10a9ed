//! High availability with the real `rekon` binary and the seed plugins on
//! kube-sim: fenced leader election (a leader whose Lease renewals fail
//! stops writing before its renew deadline, proven from kube-sim's request
//! log per User-Agent) and sharding (three replicas split the work, no key
//! is reconciled by two replicas at once, a killed replica's shards are
//! taken over, a returning one gets its share back).
//!
//! Needs `cargo build -p rekon-host` and `make plugins` first (the Makefile's
//! test target does both).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use kube_sim::SimCluster;
use kube_sim::faults::FaultRule;
use rekon_e2e::{Env, EnvOptions, RekonProcess, apply_manifests, get, mark_nodes_ready};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
const TEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Short timings so takeovers happen within the test: lease 4 s, renew
/// deadline 3 s, retry 0.5 s.
const LEASE: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(500);
const LEASE_NS: &str = "default";

fn timing_args() -> Vec<String> {
    [
        "--lease-namespace",
        LEASE_NS,
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "500ms",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

fn replica_opts(name: &str, extra: &[&str]) -> EnvOptions {
    let mut extra_args = timing_args();
    extra_args.extend(extra.iter().map(|s| (*s).to_owned()));
    EnvOptions {
        extra_args,
        replica: Some(name.to_owned()),
        ..EnvOptions::default()
    }
}

fn holder(c: &SimCluster, lease: &str) -> Option<String> {
    get(c, "coordination.k8s.io/v1", "leases", Some(LEASE_NS), lease)?
        .pointer("/spec/holderIdentity")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
}

fn create_test(env: &Env, ns: &str, name: &str) {
    rekon_e2e::create_test(env.main(), ns, name).expect("create the Test");
}

/// Every Test named in `tests` has its Job in every cluster of `clusters`.
fn fanned_out(clusters: &[&SimCluster], ns: &str, tests: &[String]) -> bool {
    tests.iter().all(|t| {
        clusters
            .iter()
            .all(|c| get(c, "batch/v1", "jobs", Some(ns), t).is_some())
    })
}

fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

fn micros(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_fail_stops_writing_before_its_renew_deadline() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let a_opts = replica_opts("replica-a", &["--leader-elect", "--on-lost", "demote"]);
        let mut env = Env::start(a_opts).await.expect("start env");
        env.wait_for_crds(WAIT).await.expect("CRDs installed");
        env.wait_for("replica-a leads", WAIT, |env| {
            holder(env.main(), "rekon").filter(|h| h.starts_with("replica-a_"))
        })
        .await
        .unwrap();
        let b_opts = replica_opts("replica-b", &["--leader-elect", "--on-lost", "demote"]);
        let mut b = env.spawn_replica(&b_opts).expect("spawn replica-b");
        // b is up and campaigning (it has seen a's lease and is waiting).
        let b_log = env.work_dir().join("rekon-replica-b.log");
        env.wait_for("replica-b campaigns", WAIT, |_| {
            std::fs::read_to_string(&b_log)
                .ok()
                .filter(|l| l.contains("lease held by another candidate"))
                .map(|_| ())
        })
        .await
        .unwrap();

        let mut tests: Vec<String> = (0..5).map(|i| format!("before-{i}")).collect();
        for t in &tests {
            create_test(&env, "ha", t);
        }
        env.wait_for("the first Tests fan out", WAIT, |env| {
            fanned_out(&[env.main(), env.sub()], "ha", &tests).then_some(())
        })
        .await
        .unwrap();

        // The leader's Lease requests (and only they) now fail; its other
        // requests, writes included, would still succeed.
        let old = holder(env.main(), "rekon").expect("a holder");
        assert!(old.starts_with("replica-a_"), "{old}");
        env.main().fail_next(
            FaultRule::new(503, u32::MAX)
                .path("/leases/")
                .user_agent(format!("({old})")),
        );
        let cut = SystemTime::now();
        // Keep work coming, so the old leader has reasons to write all along.
        let mut i = 0;
        let new = loop {
            let name = format!("during-{i}");
            create_test(&env, "ha", &name);
            tests.push(name);
            i += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
            if let Some(h) = holder(env.main(), "rekon").filter(|h| *h != old) {
                break h;
            }
            if cut.elapsed().unwrap() > LEASE * 3 {
                let agents: std::collections::BTreeSet<String> = env
                    .main()
                    .faults()
                    .request_log()
                    .into_iter()
                    .map(|r| r.user_agent)
                    .collect();
                panic!(
                    "no takeover from {old}; user agents seen: {agents:?}\nreplica-a log:\n{}\nreplica-b log:\n{}",
                    env.rekon.log_tail(30),
                    b.log_tail(30)
                );
            }
        };
        assert!(new.starts_with("replica-b_"), "{new}");
        // More work after the takeover: only the new leader may do it.
        for j in 0..10 {
            let name = format!("after-{j}");
            create_test(&env, "ha", &name);
            tests.push(name);
        }
        env.wait_for("every Test fans out under the new leader", WAIT, |env| {
            fanned_out(&[env.main(), env.sub()], "ha", &tests).then_some(())
        })
        .await
        .unwrap();
        assert!(env.rekon.is_running(), "demoted, not exited");
        assert!(b.is_running());

        let log = env.main().faults().request_log();
        let lease_ok = |ua: &str, verb: &str| {
            log.iter()
                .filter(|r| {
                    r.user_agent.contains(ua)
                        && r.path.contains("/leases/rekon")
                        && r.verb == verb
                        && !r.faulted
                })
                .map(|r| r.at)
                .collect::<Vec<_>>()
        };
        // The last time the old leader's Lease record was written: its last
        // renewal, or its acquisition when the fault came before the first
        // renewal (a fast start-up: the fault is injected ~0.5 s in).
        let acquired = log
            .iter()
            .filter(|r| {
                r.user_agent.contains(&old)
                    && r.verb == "create"
                    && r.path.ends_with("/namespaces/default/leases")
                    && !r.faulted
            })
            .map(|r| r.at)
            .next_back();
        let Some(last_renewal) = lease_ok(&old, "update").last().copied().or(acquired) else {
            let lease_requests: Vec<_> = log.iter().filter(|r| r.path.contains("/leases")).take(20).collect();
            panic!("no renewal of {old} in the request log ({} entries); lease requests: {lease_requests:#?}", log.len());
        };
        let taken = *lease_ok(&new, "update")
            .first()
            .expect("the new leader wrote the lease");
        let deadline = last_renewal + RENEW_DEADLINE;
        // Every write but the Lease's own requests and the replica's Events
        // about itself (`LeaderLost` on its Pod, in POD_NAMESPACE `default`:
        // a deposed leader must be able to say so, as client-go's recorder
        // does). The plugins' objects and Events are all in namespace `ha`.
        let writes_of = |ua: &str| {
            log.iter()
                .filter(|r| {
                    r.user_agent.contains(ua)
                        && is_write(&r.verb)
                        && !r.path.contains("/leases/")
                        && !r.path.ends_with("/namespaces/default/events")
                })
                .collect::<Vec<_>>()
        };
        let old_writes = writes_of(&old);
        let late: Vec<_> = old_writes.iter().filter(|r| r.at > deadline).collect();
        let old_after_cut = old_writes.iter().filter(|r| r.at > cut).count();
        let new_writes = writes_of(&new).len();
        let takeover = taken.duration_since(last_renewal).unwrap();
        println!(
            "old leader: {} writes ({old_after_cut} after its renewals began failing), {} after its renew deadline; \
             new leader: {new_writes} writes; takeover {:.2} s after the last renewal (lease {:?}); \
             the old leader's gate closed at most {:?} after it",
            old_writes.len(),
            late.len(),
            takeover.as_secs_f64(),
            LEASE,
            RENEW_DEADLINE,
        );
        assert!(
            late.is_empty(),
            "writes from the old leader after its renew deadline: {late:#?}"
        );
        assert!(new_writes > 0, "the new leader did the work");
        // b sees the lease expire one lease duration after the last renewal
        // it observed (≤ one jittered retry after that renewal), and takes
        // it at its next retry.
        assert!(
            takeover <= LEASE + RETRY.mul_f64(2.4) + Duration::from_millis(500),
            "takeover took {takeover:?}"
        );
        assert!(micros(taken) > micros(deadline), "never two writers: the new leader starts after the old one's deadline");
        b.stop();
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_lost_exit_a_leader_that_loses_its_lease_exits() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let opts = replica_opts("replica-x", &["--leader-elect"]);
        let mut env = Env::start(opts).await.expect("start env");
        let leader = env
            .wait_for("replica-x leads", WAIT, |env| {
                holder(env.main(), "rekon").filter(|h| h.starts_with("replica-x_"))
            })
            .await
            .unwrap();
        env.main().fail_next(
            FaultRule::new(503, u32::MAX)
                .path("/leases/")
                .user_agent(format!("({leader})")),
        );
        let cut = std::time::Instant::now();
        while env.rekon.is_running() {
            assert!(
                cut.elapsed() < RENEW_DEADLINE * 4,
                "still running; log:\n{}",
                env.rekon.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = std::fs::read_to_string(env.rekon.log_path()).unwrap();
        assert!(log.contains("lost leadership"), "{log}");
        assert!(
            log.contains("lost the leader lease"),
            "exits with the reason: {log}"
        );
        assert_eq!(env.rekon.exit_code(), Some(1), "non-zero exit");
    })
    .await
    .expect("test timed out");
}

// ----- sharding -------------------------------------------------------------

const SHARDS: u32 = 6;

fn shard_holders(c: &SimCluster) -> Vec<Option<String>> {
    (0..SHARDS)
        .map(|i| holder(c, &format!("rekon-shard-{i}")))
        .collect()
}

/// Shards held per replica name (the identity's prefix before `_`).
fn shares(c: &SimCluster) -> BTreeMap<String, usize> {
    let mut per = BTreeMap::new();
    for h in shard_holders(c).into_iter().flatten() {
        let replica = h.split('_').next().unwrap_or_default().to_owned();
        *per.entry(replica).or_insert(0) += 1;
    }
    per
}

/// One "reconciled" line of a replica's log.
#[derive(Debug, Clone)]
struct Reconciled {
    replica: String,
    key: String,
    started: u128,
    finished: u128,
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}="))? + name.len() + 1;
    let rest = &line[start..];
    Some(rest.split([' ', '}', ':']).next().unwrap_or(rest))
}

fn reconciled(replica: &str, log: &str) -> Vec<Reconciled> {
    log.lines()
        .filter(|l| l.contains(": reconciled started_us="))
        .filter_map(|l| {
            Some(Reconciled {
                replica: replica.to_owned(),
                key: format!(
                    "{}/{}/{}/{}",
                    field(l, "plugin")?,
                    field(l, "cluster")?,
                    field(l, "namespace")?,
                    field(l, "name")?
                ),
                started: field(l, "started_us")?.parse().ok()?,
                finished: field(l, "finished_us")?.parse().ok()?,
            })
        })
        .collect()
}

fn create_pool(c: &SimCluster, pool: &str, nodes: usize) {
    let mut yaml = format!(
        "apiVersion: nodes.lailin.xyz/v1\nkind: NodePool\nmetadata:\n  name: {pool}\nspec:\n  labels:\n    pool.example/{pool}: \"true\"\n  handler: runc\n"
    );
    for n in 0..nodes {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: {pool}-node-{n}\n  labels:\n    node-role.kubernetes.io/{pool}: \"\"\n"
        ));
    }
    apply_manifests(c, &yaml).expect("create pool and nodes");
}

fn pool_converged(c: &SimCluster, pool: &str, nodes: usize) -> bool {
    (0..nodes).all(|n| {
        get(c, "v1", "nodes", None, &format!("{pool}-node-{n}"))
            .and_then(|node| {
                node.pointer(&format!("/metadata/labels/pool.example~1{pool}"))
                    .cloned()
            })
            .is_some_and(|v| v == "true")
    }) && get(
        c,
        "node.k8s.io/v1",
        "runtimeclasses",
        None,
        &format!("node-pool-{pool}"),
    )
    .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sharded_replicas_split_the_work_and_survive_a_kill_and_a_return() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let shard_args = ["--shards", "6", "--cluster", "third=third"];
        let mut opts = replica_opts("r0", &shard_args);
        opts.standby_clusters = vec!["third".to_owned()];
        let mut env = Env::start(opts).await.expect("start env");
        env.wait_for_crds(WAIT).await.expect("CRDs installed");
        let mut replicas: HashMap<String, RekonProcess> = HashMap::new();
        for name in ["r1", "r2"] {
            let mut o = replica_opts(name, &shard_args);
            o.standby_clusters = vec!["third".to_owned()];
            replicas.insert(name.to_owned(), env.spawn_replica(&o).expect("spawn"));
        }
        env.wait_for("each of three replicas holds two shards", WAIT, |env| {
            let per = shares(env.main());
            (per.len() == 3 && per.values().all(|&n| n == 2)).then_some(())
        })
        .await
        .unwrap();

        // Work: Tests fanning out to three clusters, and node pools.
        let mut tests: Vec<String> = (0..30).map(|i| format!("t-{i}")).collect();
        for t in &tests {
            create_test(&env, "shard", t);
        }
        for p in 0..4 {
            create_pool(env.main(), &format!("pool{p}"), 3);
        }
        mark_nodes_ready(env.main()).unwrap();
        let converged = |env: &Env, tests: &[String]| {
            fanned_out(&[env.main(), env.sub(), env.sim.cluster("third")], "shard", tests)
                && (0..4).all(|p| pool_converged(env.main(), &format!("pool{p}"), 3))
        };
        env.wait_for("the world converges with three replicas", WAIT, |env| {
            converged(env, &tests).then_some(())
        })
        .await
        .unwrap();

        // Kill r1: its shards are taken over once its Leases expire.
        let mut r1 = replicas.remove("r1").unwrap();
        r1.stop();
        let killed = std::time::Instant::now();
        env.wait_for("r1's shards taken over", WAIT, |env| {
            let per = shares(env.main());
            (!per.contains_key("r1") && per.values().sum::<usize>() == SHARDS as usize)
                .then_some(())
        })
        .await
        .unwrap();
        let takeover = killed.elapsed();
        println!("a killed replica's shards were taken over after {takeover:?} (lease {LEASE:?})");
        // The last renewal was at most a jittered retry before the kill;
        // the others see the membership and shard Leases unchanged for a
        // lease duration from when they observed them (≤ a retry later) and
        // act at their next loop (≤ a retry later): lease + ~3 retries, with
        // slack for a loaded test machine.
        assert!(
            takeover <= LEASE + Duration::from_secs(3),
            "takeover took {takeover:?}"
        );
        for i in 30..45 {
            let name = format!("t-{i}");
            create_test(&env, "shard", &name);
            tests.push(name);
        }
        create_pool(env.main(), "pool4", 3);
        mark_nodes_ready(env.main()).unwrap();
        env.wait_for("the world re-converges with two replicas", WAIT, |env| {
            (converged(env, &tests) && pool_converged(env.main(), "pool4", 3)).then_some(())
        })
        .await
        .unwrap();

        // r1 comes back (a new identity): shards rebalance to two each.
        let mut o = replica_opts("r1", &shard_args);
        o.standby_clusters = vec!["third".to_owned()];
        // Its own log file: the killed one's is kept for the overlap check.
        o.replica = Some("r1b".to_owned());
        let returned = std::time::Instant::now();
        replicas.insert("r1b".to_owned(), env.spawn_replica(&o).expect("respawn"));
        env.wait_for("shards rebalance to two each", WAIT, |env| {
            let per = shares(env.main());
            (per.len() == 3 && per.get("r1b") == Some(&2) && per.values().all(|&n| n == 2))
                .then_some(())
        })
        .await
        .unwrap();
        println!("rebalanced {:?} after the replica returned", returned.elapsed());
        for i in 45..60 {
            let name = format!("t-{i}");
            create_test(&env, "shard", &name);
            tests.push(name);
        }
        env.wait_for("the world converges after the rebalance", WAIT, |env| {
            converged(env, &tests).then_some(())
        })
        .await
        .unwrap();

        // No key was reconciled by two replicas at once.
        let mut all = Vec::new();
        for name in ["r0", "r1", "r2", "r1b"] {
            let path = env.work_dir().join(format!("rekon-{name}.log"));
            let log = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let lines = reconciled(name, &log);
            println!("{name}: {} reconciles", lines.len());
            all.extend(lines);
        }
        let per_replica: BTreeMap<&str, usize> = all.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r.replica.as_str()).or_insert(0) += 1;
            m
        });
        for name in ["r0", "r1", "r2", "r1b"] {
            assert!(
                per_replica.get(name).copied().unwrap_or(0) > 0,
                "{name} reconciled nothing: the work was not split ({per_replica:?})"
            );
        }
        let mut by_key: HashMap<&str, Vec<&Reconciled>> = HashMap::new();
        for r in &all {
            by_key.entry(r.key.as_str()).or_default().push(r);
        }
        let mut overlaps = Vec::new();
        let mut moved = 0;
        for runs in by_key.values_mut() {
            runs.sort_by_key(|r| r.started);
            if runs.iter().any(|r| r.replica != runs[0].replica) {
                moved += 1;
            }
            for (i, a) in runs.iter().enumerate() {
                for b in &runs[i + 1..] {
                    if a.replica != b.replica && b.started < a.finished {
                        overlaps.push(format!("{a:?} and {b:?}"));
                    }
                }
            }
        }
        println!(
            "{} reconciles of {} keys; {moved} keys were reconciled by more than one replica over time; overlaps: {}",
            all.len(),
            by_key.len(),
            overlaps.len()
        );
        assert!(moved > 0, "some keys changed hands (kill, rebalance)");
        assert!(overlaps.is_empty(), "keys reconciled by two replicas at once: {overlaps:#?}");
    })
    .await
    .expect("test timed out");
}
