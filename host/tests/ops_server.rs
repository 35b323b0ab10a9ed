//! The ops HTTP server: probes follow their checks and `/metrics` serves the
//! series the engine and the runtime report.

use std::net::SocketAddr;
use std::time::Duration;

use rekon::telemetry::metrics::{Metrics, ReconcileResult};
use rekon::telemetry::server::{OpsServer, Readiness};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, watch};
use tokio::time::timeout;

/// A minimal HTTP/1.1 GET: (status, content type, body).
async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8(raw)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no header end"))?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("no status"))?
        .parse()?;
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type: "))
        .unwrap_or_default()
        .to_owned();
    // Bodies here are small and sent with content-length (no chunking).
    Ok((status, content_type, body.to_owned()))
}

#[tokio::test]
async fn probes_and_metrics_answer_on_one_address() -> anyhow::Result<()> {
    timeout(Duration::from_secs(30), async {
        let (caches_tx, caches_rx) = watch::channel(false);
        let (plugins_tx, plugins_rx) = watch::channel(false);
        let readiness = Readiness::new()
            .watch("primary-caches", caches_rx, "caches of the primary cluster not synced")
            .watch("plugins", plugins_rx, "plugins not loaded");
        let metrics = Metrics::new();
        let addr: SocketAddr = "127.0.0.1:0".parse()?;
        let server = OpsServer::bind(Some(addr), Some(addr), metrics.clone(), readiness).await?;
        let addrs = server.local_addrs();
        assert_eq!(addrs.len(), 1, "one listener when the addresses are equal");
        let addr = addrs[0];
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));

        let (status, _, body) = get(addr, "/healthz").await?;
        assert_eq!((status, body.as_str()), (200, "ok"));

        let (status, _, body) = get(addr, "/readyz").await?;
        assert_eq!(status, 503);
        assert!(body.contains("[-]primary-caches failed: caches of the primary cluster not synced"), "{body}");
        assert!(body.contains("[-]plugins failed: plugins not loaded"), "{body}");

        caches_tx.send_replace(true);
        let (status, _, body) = get(addr, "/readyz").await?;
        assert_eq!(status, 503);
        assert!(!body.contains("primary-caches"), "{body}");
        plugins_tx.send_replace(true);
        let (status, _, _) = get(addr, "/readyz").await?;
        assert_eq!(status, 200);
        let (_, _, body) = get(addr, "/readyz?verbose").await?;
        assert!(body.contains("[+]primary-caches ok") && body.contains("[+]plugins ok"), "{body}");

        // What the engine and the runtime report shows up in /metrics.
        metrics.reconcile_started("test-fanout", "sub").finish(ReconcileResult::Success);
        metrics.reconcile_started("test-fanout", "sub").finish(ReconcileResult::Error);
        metrics.set_max_concurrent_reconciles("test-fanout", 8);
        let queue = metrics.queue("test-fanout");
        queue.add();
        queue.set_depth(1);
        queue.retry();
        metrics.set_leader("rekon-system/rekon", true);
        metrics.watch_restarted("sub", "batch/v1/jobs");
        metrics.set_cache_objects("sub", "batch/v1/jobs", 2);
        metrics.plugin_loaded("test-fanout", "0.1.0");
        metrics.plugin_load_failed("broken");
        metrics.observe_wasm_call("test-fanout", "reconcile", Duration::from_micros(800));

        let (status, content_type, body) = get(addr, "/metrics").await?;
        assert_eq!(status, 200);
        assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
        for series in [
            "controller_runtime_reconcile_total{controller=\"test-fanout\",cluster=\"sub\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"test-fanout\",cluster=\"sub\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"test-fanout\",cluster=\"sub\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"test-fanout\",cluster=\"sub\"} 2",
            "controller_runtime_active_workers{controller=\"test-fanout\"} 0",
            "controller_runtime_max_concurrent_reconciles{controller=\"test-fanout\"} 8",
            "workqueue_depth{name=\"test-fanout\",controller=\"test-fanout\"} 1",
            "workqueue_adds_total{name=\"test-fanout\",controller=\"test-fanout\"} 1",
            "workqueue_retries_total{name=\"test-fanout\",controller=\"test-fanout\"} 1",
            "leader_election_master_status{name=\"rekon-system/rekon\"} 1",
            "rekon_watch_restarts_total{cluster=\"sub\",resource=\"batch/v1/jobs\"} 1",
            "rekon_cache_objects{cluster=\"sub\",resource=\"batch/v1/jobs\"} 2",
            "rekon_plugin_info{plugin=\"test-fanout\",version=\"0.1.0\"} 1",
            "rekon_plugin_load_failures_total{plugin=\"broken\"} 1",
            "rekon_wasm_call_duration_seconds_count{plugin=\"test-fanout\",function=\"reconcile\"} 1",
            "# TYPE workqueue_queue_duration_seconds histogram",
        ] {
            assert!(body.lines().any(|l| l == series), "missing {series:?} in\n{body}");
        }

        let (status, _, _) = get(addr, "/nope").await?;
        assert_eq!(status, 404);

        stop.send(()).ok();
        task.await??;
        anyhow::Ok(())
    })
    .await
    .expect("ops server test timed out: likely deadlocked")
}

#[tokio::test]
async fn metrics_and_probes_can_listen_apart() -> anyhow::Result<()> {
    timeout(Duration::from_secs(30), async {
        let any: SocketAddr = "127.0.0.1:0".parse()?;
        // Port 0 twice: two distinct listeners.
        let server = OpsServer::bind(
            Some(any),
            Some("127.0.0.2:0".parse()?),
            Metrics::new(),
            Readiness::new(),
        )
        .await?;
        let addrs = server.local_addrs();
        assert_eq!(addrs.len(), 2);
        let (metrics_addr, probe_addr) = (addrs[0], addrs[1]);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        assert_eq!(get(metrics_addr, "/metrics").await?.0, 200);
        assert_eq!(get(metrics_addr, "/healthz").await?.0, 404);
        assert_eq!(get(probe_addr, "/healthz").await?.0, 200);
        assert_eq!(get(probe_addr, "/readyz").await?.0, 200);
        assert_eq!(get(probe_addr, "/metrics").await?.0, 404);
        stop.send(()).ok();
        task.await??;
        anyhow::Ok(())
    })
    .await
    .expect("ops server test timed out: likely deadlocked")
}
