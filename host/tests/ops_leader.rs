//! Leader election against kube-sim: one leader per Lease, takeover after a
//! clean stop (lease released) and after a crash (lease expires), and the
//! gate closing when the leader cannot renew.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube_sim::{FaultRule, SimCluster};
use rekon::lease::{LeaderElectionConfig, LeaderElector, LeaderGate};
use rekon::telemetry::metrics::Metrics;
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout};

/// Short timings so the tests run in seconds; same ratios as client-go's
/// defaults (15 / 10 / 2).
fn config(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        identity: identity.to_owned(),
        lease_duration: Duration::from_millis(3000),
        renew_deadline: Duration::from_millis(2000),
        retry_period: Duration::from_millis(400),
        // These tests partition a leader and expect it to campaign again.
        on_lost: rekon::lease::OnLost::Demote,
        ..LeaderElectionConfig::new("rekon", "default")
    }
}

async fn client(sim: &SimCluster) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&sim.kubeconfig_yaml())?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

struct Running {
    gate: LeaderGate,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<rekon::lease::RunEnd>,
}

async fn start(
    sim: &SimCluster,
    identity: &str,
    metrics: Option<Metrics>,
) -> anyhow::Result<Running> {
    let mut elector = LeaderElector::new(client(sim).await?, config(identity))?;
    if let Some(m) = metrics {
        elector = elector.with_metrics(m);
    }
    let gate = elector.gate();
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(elector.run(async {
        let _ = stopped.await;
    }));
    Ok(Running {
        gate,
        stop: Some(stop),
        task,
    })
}

async fn holder(sim: &SimCluster) -> anyhow::Result<Option<String>> {
    let api: Api<Lease> = Api::namespaced(client(sim).await?, "default");
    Ok(api
        .get_opt("rekon")
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity))
}

async fn until_leading(gate: &LeaderGate, within: Duration) {
    timeout(within, gate.leading())
        .await
        .expect("no leadership within the expected time: likely deadlocked or election broken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_of_two_electors_leads_and_a_clean_stop_hands_over_at_once() -> anyhow::Result<()>
{
    let sim = SimCluster::start("main").await?;
    let mut a = start(&sim, "a", None).await?;
    until_leading(&a.gate, Duration::from_secs(10)).await;
    let b = start(&sim, "b", None).await?;

    // Over several lease durations, b never leads while a renews.
    let watch_until = Instant::now() + Duration::from_secs(4);
    let mut rx = b.gate.subscribe();
    while Instant::now() < watch_until {
        assert!(
            a.gate.is_leader(),
            "the first leader lost the lease while renewing"
        );
        assert!(!b.gate.is_leader(), "two leaders at once");
        let _ = timeout(Duration::from_millis(100), rx.changed()).await;
    }
    assert_eq!(holder(&sim).await?.as_deref(), Some("a"));

    // Clean stop: a releases; b takes over at its next retry, long before
    // the 3 s lease would have expired.
    let stopped_at = Instant::now();
    a.stop.take().expect("stop once").send(()).ok();
    timeout(Duration::from_secs(10), a.task)
        .await
        .expect("a did not stop: likely deadlocked")?;
    assert!(!a.gate.is_leader(), "a stopped but its gate is open");
    until_leading(&b.gate, Duration::from_secs(10)).await;
    let took = stopped_at.elapsed();
    assert!(
        took < Duration::from_millis(3000),
        "takeover after release took {took:?}: the lease was not released"
    );
    assert_eq!(holder(&sim).await?.as_deref(), Some("b"));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_replaced_after_its_lease_expires() -> anyhow::Result<()> {
    let sim = SimCluster::start("main").await?;
    let a = start(&sim, "a", None).await?;
    until_leading(&a.gate, Duration::from_secs(10)).await;
    let b = start(&sim, "b", None).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!b.gate.is_leader());

    // Crash: the task dies without releasing.
    a.task.abort();
    let crashed = Instant::now();
    // Lease duration (3 s) + up to two jittered retry periods (2 x 0.48 s),
    // plus slack for a loaded CI machine: the point is "after the lease
    // expired, not after some longer timeout".
    until_leading(&b.gate, Duration::from_secs(10)).await;
    let took = crashed.elapsed();
    assert!(
        took <= Duration::from_millis(3000 + 960 + 1500),
        "took {took:?}"
    );
    // The last renewal was at most one retry period before the crash.
    assert!(
        took >= Duration::from_millis(3000 - 400 - 100),
        "took over before the lease expired: {took:?}"
    );
    assert_eq!(holder(&sim).await?.as_deref(), Some("b"));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_writing_before_its_lease_expires() -> anyhow::Result<()> {
    let sim = SimCluster::start("main").await?;
    let metrics = Metrics::new();
    let a = start(&sim, "a", Some(metrics.clone())).await?;
    until_leading(&a.gate, Duration::from_secs(10)).await;
    assert!(
        metrics
            .encode()
            .contains("leader_election_master_status{name=\"default/rekon\"} 1\n")
    );

    // Every lease request fails from now on.
    sim.fail_next(FaultRule::new(503, 1_000_000).path("leases"));
    let cut = Instant::now();
    // The last successful renewal started before the cut, so the gate is
    // closed by the renew deadline (2 s) at the latest, i.e. at least lease
    // duration - renew deadline (1 s) before anyone else may take over. The
    // gate checks the deadline itself, so this holds however late the
    // election task runs.
    tokio::time::sleep_until(cut + Duration::from_millis(2000)).await;
    assert!(
        !a.gate.is_leader(),
        "the gate is open past the renew deadline"
    );
    assert!(a.gate.check().is_err());
    timeout(Duration::from_secs(10), a.gate.lost())
        .await
        .expect("the leader never noticed it lost the lease");
    assert!(
        metrics
            .encode()
            .contains("leader_election_master_status{name=\"default/rekon\"} 0\n")
    );

    // The API recovers: the elector campaigns again and leads.
    sim.clear_faults();
    until_leading(&a.gate, Duration::from_secs(10)).await;
    sim.shutdown().await;
    Ok(())
}
