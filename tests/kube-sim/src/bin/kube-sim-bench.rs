//! kube-sim throughput benchmark; prints a table.
//!
//! `cargo run --release -p kube-sim --bin kube-sim-bench [-- --seconds 5]`
//!
//! 1. merge-patch writes/s over raw pipelined HTTP/1.1 keep-alive
//!    connections while 50 watches consume every event;
//! 2. watch fan-out: events delivered per second across those watches;
//! 3. RSS growth per 10,000 Nodes;
//! 4. the admission chain's added cost per write (in-process, one writer):
//!    a ConfigMap merge patch with and without one ValidatingAdmissionPolicy
//!    and binding that match it, a custom resource's with and without three
//!    `x-kubernetes-validations` rules;
//! 5. the same over HTTP with a validating admission webhook (HTTPS, on
//!    this machine, answering at once) besides the policy: what a write
//!    costs with neither, with the policy, with both; and the webhook's own
//!    time (its handler, as the webhook measures it);
//! 6. reads through a CRD conversion webhook (HTTPS, on this machine, kept
//!    connections): a GET and a LIST item at the storage version and at
//!    the converted one, and the webhook's own time per object.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use kube_sim::{SimCluster, SimConfig};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug, Parser)]
struct Args {
    /// Seconds of write load.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Writer connections.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Requests in flight per connection (pipeline depth).
    #[arg(long, default_value_t = 32)]
    depth: usize,
    /// Open watches during the write test.
    #[arg(long, default_value_t = 50)]
    watches: usize,
    /// Distinct objects written.
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// Nodes for the memory measurement.
    #[arg(long, default_value_t = 10_000)]
    nodes: usize,
    /// Watch history kept per resource.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Writes per admission measurement.
    #[arg(long, default_value_t = 5_000)]
    admission_writes: usize,
    /// Run only the conversion webhook reads (e.g. under `perf record`).
    #[arg(long)]
    conversion_only: bool,
}

/// Mean microseconds per merge patch of `name` (alternating values).
fn us_per_patch(
    sim: &SimCluster,
    api_version: &str,
    plural: &str,
    name: &str,
    patch: impl Fn(usize) -> serde_json::Value,
    n: usize,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    for i in 0..n {
        sim.merge_patch(api_version, plural, Some("default"), name, &patch(i), false)
            .map_err(|e| anyhow::anyhow!("admission bench write failed: {e}"))?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
}

/// The admission chain's cost per write: (label, without, with) in µs.
async fn admission_cost(n: usize) -> anyhow::Result<Vec<(&'static str, f64, f64)>> {
    let sim = SimCluster::start_with(SimConfig::new("admission-bench")).await?;
    let fail = |e: kube_sim::ApiError| anyhow::anyhow!("admission bench setup failed: {e}");
    sim.create(
        "v1",
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "cm"}, "data": {"v": "0"}}),
    )
    .map_err(fail)?;
    let cm = |i: usize| json!({"data": {"v": format!("{}", i % 2)}});
    let plain = us_per_patch(&sim, "v1", "configmaps", "cm", cm, n)?;
    sim.create("admissionregistration.k8s.io/v1", "validatingadmissionpolicies", None, json!({
        "metadata": {"name": "bench"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
            "matchConditions": [{"name": "labelled", "expression": "!has(object.metadata.labels) || !('skip' in object.metadata.labels)"}],
            "validations": [{"expression": "object.data.all(k, size(object.data[k]) < 64)", "message": "values are short"},
                {"expression": "request.userInfo.username != ''"}]}})).map_err(fail)?;
    sim.create("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", None, json!({
        "metadata": {"name": "bench"}, "spec": {"policyName": "bench", "validationActions": ["Deny"]}}))
        .map_err(fail)?;
    let policy = us_per_patch(&sim, "v1", "configmaps", "cm", cm, n)?;
    let crd = |rules: bool| {
        let v = |r: serde_json::Value| if rules { r } else { json!([]) };
        json!({"metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"spec": {"type": "object",
                        "x-kubernetes-validations": v(json!([{"rule": "self.size <= self.max", "message": "size exceeds max"},
                            {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable"}])),
                        "properties": {"size": {"type": "integer", "x-kubernetes-validations": v(json!([{"rule": "self >= 0"}]))},
                            "max": {"type": "integer", "default": 100}, "mode": {"type": "string"}}}}}}}]}})
    };
    let mut times = Vec::new();
    for rules in [false, true] {
        let _ = sim.delete(
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            None,
            "widgets.example.com",
        );
        sim.create(
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            None,
            crd(rules),
        )
        .map_err(fail)?;
        sim.create(
            "example.com/v1",
            "widgets",
            Some("default"),
            json!({"metadata": {"name": "w"},
            "spec": {"size": 1, "mode": "a"}}),
        )
        .map_err(fail)?;
        let w = |i: usize| json!({"spec": {"size": i % 2}});
        times.push(us_per_patch(&sim, "example.com/v1", "widgets", "w", w, n)?);
    }
    sim.shutdown().await;
    Ok(vec![
        (
            "ConfigMap merge patch, 1 policy + binding (2 validations, 1 matchCondition)",
            plain,
            policy,
        ),
        (
            "Widget merge patch, 3 x-kubernetes-validations rules (1 transition)",
            times[0],
            times[1],
        ),
    ])
}

/// Mean microseconds per merge patch over one keep-alive HTTP connection.
async fn us_per_http_patch(url: &str, n: usize) -> anyhow::Result<f64> {
    let addr = url.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).await?;
    s.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(1 << 16);
    let t = Instant::now();
    for i in 0..n {
        let body = format!(r#"{{"data":{{"v":"{}"}}}}"#, i % 2);
        s.write_all(
            format!(
                "PATCH /api/v1/namespaces/default/configmaps/cm HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/merge-patch+json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await?;
        let status = read_response(&mut s, &mut buf).await?;
        if status != 200 {
            bail!("webhook bench write answered {status}");
        }
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
}

/// Admission over HTTP with a policy and a validating webhook:
/// (neither, policy, policy + webhook, the webhook's own handler time) in µs.
async fn webhook_cost(n: usize) -> anyhow::Result<(f64, f64, f64, f64)> {
    let sim = SimCluster::start_with(SimConfig::new("webhook-bench")).await?;
    let fail = |e: kube_sim::ApiError| anyhow::anyhow!("webhook bench setup failed: {e}");
    sim.create(
        "v1",
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "cm"}, "data": {"v": "0"}}),
    )
    .map_err(fail)?;
    let plain = us_per_http_patch(&sim.url(), n).await?;
    sim.create("admissionregistration.k8s.io/v1", "validatingadmissionpolicies", None, json!({
        "metadata": {"name": "bench"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "object.data.all(k, size(object.data[k]) < 64)", "message": "values are short"}]}}))
        .map_err(fail)?;
    sim.create("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", None, json!({
        "metadata": {"name": "bench"}, "spec": {"policyName": "bench", "validationActions": ["Deny"]}}))
        .map_err(fail)?;
    let policy = us_per_http_patch(&sim.url(), n).await?;
    // The webhook: allows everything and adds up its own handler time.
    let pki = kube_sim::tls::Pki::generate("webhook-bench")?;
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = tcp.local_addr()?;
    let listener = kube_sim::tls::TlsListener::new(tcp, pki.server_config()?)?;
    let handler_ns = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let (h, c) = (handler_ns.clone(), calls.clone());
    let app = axum::Router::new().fallback(axum::routing::post(move |body: axum::body::Bytes| {
        let (h, c) = (h.clone(), c.clone());
        async move {
            let t = Instant::now();
            let review: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let out = axum::Json(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": true}}),
            );
            h.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            c.fetch_add(1, Ordering::Relaxed);
            out
        }
    }));
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(pki.ca_pem());
    sim.create("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", None, json!({
        "metadata": {"name": "bench"},
        "webhooks": [{"name": "bench.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("https://{addr}/"), "caBundle": ca},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["configmaps"]}]}]}))
        .map_err(fail)?;
    let both = us_per_http_patch(&sim.url(), n).await?;
    let called = calls.load(Ordering::Relaxed).max(1);
    if called < n as u64 {
        bail!("the bench webhook was called {called} times for {n} writes");
    }
    let own = handler_ns.load(Ordering::Relaxed) as f64 / 1e3 / called as f64;
    server.abort();
    sim.shutdown().await;
    Ok((plain, policy, both, own))
}

/// Mean microseconds per GET of `path` over one keep-alive HTTP connection.
async fn us_per_http_get(url: &str, path: &str, n: usize) -> anyhow::Result<f64> {
    let addr = url.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).await?;
    s.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(1 << 16);
    let t = Instant::now();
    for _ in 0..n {
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let status = read_response(&mut s, &mut buf).await?;
        if status != 200 {
            bail!("conversion bench read of {path} answered {status}");
        }
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
}

/// Reads through a conversion webhook: µs per GET and per LIST item at
/// the storage version (v1) and at the converted one (v1alpha1), and the
/// webhook's own handler time per object converted.
async fn conversion_cost(n: usize, items: usize) -> anyhow::Result<[f64; 5]> {
    let sim = SimCluster::start_with(SimConfig::new("conversion-bench")).await?;
    let fail = |e: kube_sim::ApiError| anyhow::anyhow!("conversion bench setup failed: {e}");
    // The webhook: renames spec.size <-> spec.replicas, adds up its time.
    let pki = kube_sim::tls::Pki::generate("conversion-bench")?;
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = tcp.local_addr()?;
    let listener = kube_sim::tls::TlsListener::new(tcp, pki.server_config()?)?;
    let handler_ns = Arc::new(AtomicU64::new(0));
    let converted = Arc::new(AtomicU64::new(0));
    let (h, c) = (handler_ns.clone(), converted.clone());
    let app = axum::Router::new().fallback(axum::routing::post(move |body: axum::body::Bytes| {
        let (h, c) = (h.clone(), c.clone());
        async move {
            let t = Instant::now();
            let review: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let desired = review["request"]["desiredAPIVersion"].clone();
            let objects: Vec<serde_json::Value> = review["request"]["objects"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut o| {
                    o["apiVersion"] = desired.clone();
                    if let Some(spec) = o.get_mut("spec").and_then(|s| s.as_object_mut()) {
                        if let Some(r) = spec.remove("replicas") {
                            spec.insert("size".into(), json!(r.to_string()));
                        } else if let Some(sz) = spec.remove("size") {
                            let r: i64 = sz.as_str().and_then(|x| x.parse().ok()).unwrap_or(0);
                            spec.insert("replicas".into(), json!(r));
                        }
                    }
                    o
                })
                .collect();
            c.fetch_add(objects.len() as u64, Ordering::Relaxed);
            let out = axum::Json(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": {"uid": review["request"]["uid"], "result": {"status": "Success"}, "convertedObjects": objects}}));
            h.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            out
        }
    }));
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(pki.ca_pem());
    let schema = |props: serde_json::Value| json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}});
    sim.create("apiextensions.k8s.io/v1", "customresourcedefinitions", None, json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"url": format!("https://{addr}/"), "caBundle": ca}}},
            "versions": [
                {"name": "v1alpha1", "served": true, "storage": false, "schema": schema(json!({"size": {"type": "string"}}))},
                {"name": "v1", "served": true, "storage": true, "schema": schema(json!({"replicas": {"type": "integer"}}))}]}}))
        .map_err(fail)?;
    for i in 0..items {
        sim.create(
            "example.com/v1",
            "widgets",
            Some("default"),
            json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": format!("w{i}")}, "spec": {"replicas": i}}),
        )
        .map_err(fail)?;
    }
    let url = sim.url();
    let one = |v: &str| format!("/apis/example.com/{v}/namespaces/default/widgets/w0");
    let all = |v: &str| format!("/apis/example.com/{v}/namespaces/default/widgets");
    let get_stored = us_per_http_get(&url, &one("v1"), n).await?;
    let get_converted = us_per_http_get(&url, &one("v1alpha1"), n).await?;
    let lists = (n / items).max(10);
    let list_stored = us_per_http_get(&url, &all("v1"), lists).await? / items as f64;
    let h0 = (
        handler_ns.load(Ordering::Relaxed),
        converted.load(Ordering::Relaxed),
    );
    let list_converted = us_per_http_get(&url, &all("v1alpha1"), lists).await? / items as f64;
    let (h1, c1) = (
        handler_ns.load(Ordering::Relaxed),
        converted.load(Ordering::Relaxed),
    );
    if c1 - h0.1 < (lists * items) as u64 {
        bail!(
            "the conversion webhook converted {} objects for {lists} lists of {items}",
            c1 - h0.1
        );
    }
    let own = (h1 - h0.0) as f64 / 1e3 / (c1 - h0.1) as f64;
    server.abort();
    sim.shutdown().await;
    Ok([get_stored, get_converted, list_stored, list_converted, own])
}

/// User+system CPU time of this process in seconds (clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = f.get(11)?.parse().ok()?;
            let stime: f64 = f.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0)
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// Reads one HTTP/1.1 response with Content-Length from `buf`/`s`.
async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<u16> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..end]).context("response head is not UTF-8")?;
            let status: u16 = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .context("no status code")?;
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .context("no content-length")?;
            let total = end + 4 + len;
            while buf.len() < total {
                let mut tmp = [0u8; 65536];
                let n = s.read(&mut tmp).await?;
                if n == 0 {
                    bail!("connection closed mid-response");
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            buf.drain(..total);
            return Ok(status);
        }
        let mut tmp = [0u8; 65536];
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            bail!("connection closed");
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

async fn writer(
    addr: String,
    conn: usize,
    args: Arc<Args>,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(&addr).await?;
    s.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(1 << 16);
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut out = Vec::with_capacity(args.depth * 256);
        for _ in 0..args.depth {
            i += 1;
            let obj = (conn + (i as usize) * args.connections) % args.objects;
            let body = format!(r#"{{"data":{{"v":"{conn}-{i}"}}}}"#);
            out.extend_from_slice(
                format!(
                    "PATCH /api/v1/namespaces/default/configmaps/bench-{obj} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/merge-patch+json\r\nUser-Agent: bench/1\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
        s.write_all(&out).await?;
        for _ in 0..args.depth {
            let status = read_response(&mut s, &mut buf).await?;
            if status == 200 {
                done.fetch_add(1, Ordering::Relaxed);
            } else {
                errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

async fn watch_reader(
    addr: String,
    events: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(&addr).await?;
    let req = format!(
        "GET /api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut tmp = vec![0u8; 1 << 16];
    let mut pending: i64 = 0;
    // Every event ends with '\n'; chunk framing adds "\r\n" pairs and
    // JSON never contains a raw '\r': events = count('\n') - count('\r').
    while !stop.load(Ordering::Relaxed) {
        let n = tokio::time::timeout(Duration::from_millis(200), s.read(&mut tmp)).await;
        match n {
            Ok(Ok(0)) => bail!("watch closed"),
            Ok(Ok(n)) => {
                let nl = tmp[..n].iter().filter(|b| **b == b'\n').count() as i64;
                let cr = tmp[..n].iter().filter(|b| **b == b'\r').count() as i64;
                // A "\r\n" split across reads makes one read's count -1.
                pending += nl - cr;
                if pending > 0 {
                    events.fetch_add(pending.unsigned_abs(), Ordering::Relaxed);
                    pending = 0;
                }
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {}
        }
    }
    Ok(())
}

fn node(i: usize) -> serde_json::Value {
    json!({
        "metadata": {
            "name": format!("node-{i:05}"),
            "labels": {
                "kubernetes.io/hostname": format!("node-{i:05}"),
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node-role.kubernetes.io/worker": "",
                "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
            }
        },
        "spec": {"podCIDR": format!("10.{}.{}.0/24", i / 256 % 256, i % 256), "providerID": format!("sim://node-{i}")},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "7800m", "memory": "31Gi", "pods": "110"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "ok",
                 "lastHeartbeatTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"}
            ],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 256 % 256, i % 256)}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Sim Linux", "containerRuntimeVersion": "containerd://1.7.0",
                         "kernelVersion": "6.1.0", "architecture": "amd64", "operatingSystem": "linux"}
        }
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    if args.conversion_only {
        return print_conversion_cost(&args).await;
    }
    let sim = SimCluster::start_with(SimConfig::new("bench").history_limit(args.history)).await?;
    let addr = sim.addr().to_string();
    for i in 0..args.objects {
        sim.create(
            "v1",
            "configmaps",
            Some("default"),
            json!({"metadata": {"name": format!("bench-{i}")}, "data": {"v": "0"}}),
        )
        .map_err(|e| anyhow::anyhow!("failed to seed: {e}"))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let events = Arc::new(AtomicU64::new(0));
    let mut watchers = Vec::new();
    for _ in 0..args.watches {
        watchers.push(tokio::spawn(watch_reader(
            addr.clone(),
            events.clone(),
            stop.clone(),
        )));
    }
    // Let the watches receive their initial ADDED events.
    let initial = (args.watches * args.objects) as u64;
    let t0 = Instant::now();
    while events.load(Ordering::Relaxed) < initial && t0.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let events_start = events.load(Ordering::Relaxed);
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let writer_stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let cpu0 = cpu_seconds();
    let mut writers = Vec::new();
    for c in 0..args.connections {
        writers.push(tokio::spawn(writer(
            addr.clone(),
            c,
            args.clone(),
            writer_stop.clone(),
            done.clone(),
            errors.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    writer_stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let writes = done.load(Ordering::Relaxed);
    // Let the watchers drain what was written.
    let expected = events_start + writes * args.watches as u64;
    let drain_start = Instant::now();
    while events.load(Ordering::Relaxed) < expected
        && drain_start.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fanout_elapsed = start.elapsed().as_secs_f64();
    let cpu_per_write_us = (cpu_seconds() - cpu0) * 1e6 / writes.max(1) as f64;
    let delivered = events.load(Ordering::Relaxed) - events_start;
    stop.store(true, Ordering::Relaxed);
    for w in watchers {
        let _ = w.await;
    }

    // Memory per 10,000 Nodes.
    let rss0 = rss_bytes();
    let t = Instant::now();
    for i in 0..args.nodes {
        sim.create("v1", "nodes", None, node(i))
            .map_err(|e| anyhow::anyhow!("failed to create node: {e}"))?;
    }
    let create_secs = t.elapsed().as_secs_f64();
    let rss1 = rss_bytes();
    let per_10k =
        (rss1.saturating_sub(rss0)) as f64 * 10_000.0 / args.nodes as f64 / (1024.0 * 1024.0);

    // Baseline: the same Nodes as bare serde_json Values, for comparison.
    let rss2 = rss_bytes();
    let bare: Vec<serde_json::Value> = (0..args.nodes).map(node).collect();
    let rss3 = rss_bytes();
    let bare_per_10k =
        (rss3.saturating_sub(rss2)) as f64 * 10_000.0 / args.nodes as f64 / (1024.0 * 1024.0);
    let json_len: usize = bare
        .iter()
        .map(|n| serde_json::to_vec(n).map_or(0, |v| v.len()))
        .sum();
    drop(bare);

    println!("| metric | value |");
    println!("|---|---|");
    println!(
        "| merge-patch writes/s ({} conns x depth {}, {} watches) | {:.0} |",
        args.connections,
        args.depth,
        args.watches,
        writes as f64 / elapsed
    );
    println!("| write errors | {} |", errors.load(Ordering::Relaxed));
    println!("| CPU per write incl. fan-out and the bench client (us) | {cpu_per_write_us:.0} |");
    println!(
        "| watch fan-out events/s ({} watches) | {:.0} |",
        args.watches,
        delivered as f64 / fanout_elapsed
    );
    println!(
        "| events delivered / expected | {delivered} / {} |",
        writes * args.watches as u64
    );
    println!("| RSS per 10,000 Nodes (incl. watch history) | {per_10k:.1} MiB |");
    println!(
        "| Node creates/s (in-process handle) | {:.0} |",
        args.nodes as f64 / create_secs
    );
    println!("| same Nodes as bare serde_json::Value, per 10,000 | {bare_per_10k:.1} MiB |");
    println!(
        "| same Nodes as JSON text, per 10,000 | {:.1} MiB |",
        json_len as f64 * 10_000.0 / args.nodes as f64 / (1024.0 * 1024.0)
    );
    sim.shutdown().await;

    println!();
    println!(
        "| admission, per write (in-process, 1 writer) | without (us) | with (us) | added (us) |"
    );
    println!("|---|---|---|---|");
    for (what, without, with) in admission_cost(args.admission_writes).await? {
        println!(
            "| {what} | {without:.1} | {with:.1} | {:.1} |",
            with - without
        );
    }
    let (plain, policy, both, own) = webhook_cost(args.admission_writes / 5).await?;
    println!();
    println!(
        "| admission over HTTP, per write (1 keep-alive connection) | neither (us) | policy (us) | policy + webhook (us) | webhook's own (us) | added by the chain (us) |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| ConfigMap merge patch, 1 policy + 1 validating webhook (HTTPS) | {plain:.1} | {policy:.1} | {both:.1} | {own:.1} | {:.1} |",
        both - plain - own
    );
    print_conversion_cost(&args).await
}

/// The conversion webhook table.
async fn print_conversion_cost(args: &Args) -> anyhow::Result<()> {
    let items = 100;
    let [get_s, get_c, list_s, list_c, own] =
        conversion_cost(args.admission_writes / 5, items).await?;
    println!();
    println!(
        "| reads through a conversion webhook (1 keep-alive connection; webhook over HTTPS, kept connections) | storage version v1 (us) | converted v1alpha1 (us) | added (us) | webhook's own per object (us) |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| GET of one Widget | {get_s:.1} | {get_c:.1} | {:.1} | {own:.1} |",
        get_c - get_s
    );
    println!(
        "| LIST of {items} Widgets, per item (one review per list) | {list_s:.2} | {list_c:.2} | {:.2} | {own:.1} |",
        list_c - list_s
    );
    Ok(())
}
