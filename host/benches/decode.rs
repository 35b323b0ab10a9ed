//! Decode benchmark: what one watch event costs the cache, from the line the
//! API server sent to the cached object, for
//! - `tree`: kube's `DynamicObject` (everything but metadata parsed into a
//!   `serde_json::Value`), serialised back to text (how the caches decoded
//!   watch events and write answers before `RawObject`),
//! - `raw`: `RawObject` (metadata parsed, the other fields kept as the text
//!   the server sent), written out once,
//! - `typed`: kube-rs' typed `Node` from k8s-openapi, as a native controller's
//!   reflector holds it (no text: for scale, not a cache rekon could use).
//!
//! For a kubelet-shaped Node (labels, annotations, managedFields, status
//! with conditions, addresses and images) and for the small Nodes the
//! `nodepool` bench creates. Prints ns per event, heap allocations and bytes
//! allocated per event (a counting global allocator), and the cached text's
//! size.
//!
//! ```text
//! cargo bench -p rekon-host --bench decode
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use kube::api::{DynamicObject, WatchEvent};
use kube::core::TypeMeta;
use rekon::cache::{CachedObject, RawObject};
use serde_json::{Value, json};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn kubelet_node(i: usize) -> Value {
    let images: Vec<Value> = (0..20)
        .map(|j| {
            json!({"names": [format!("registry.example.com/team/image-{j}@sha256:{:064x}", j * 7919 + i),
                             format!("registry.example.com/team/image-{j}:v1.{j}.0")],
                   "sizeBytes": 100_000_000 + j * 1_234_567})
        })
        .collect();
    let conditions: Vec<Value> = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready", "NetworkUnavailable"]
        .iter()
        .map(|t| json!({"type": t, "status": if *t == "Ready" {"True"} else {"False"},
                        "lastHeartbeatTime": "2026-11-25T10:00:00Z", "lastTransitionTime": "2026-11-01T00:00:00Z",
                        "reason": format!("Kubelet{t}"), "message": format!("kubelet reports {t}")}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": format!("node-{i}"), "uid": format!("{:032x}", i), "resourceVersion": format!("{}", 1000 + i),
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": {"kubernetes.io/hostname": format!("node-{i}"), "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "node.kubernetes.io/instance-type": "m5.xlarge", "topology.kubernetes.io/zone": "eu-west-1a",
                       "topology.kubernetes.io/region": "eu-west-1", "node-role.kubernetes.io/gpu": "",
                       "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "pool": "gpu"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                            "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock"},
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-25T10:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:kubernetes.io/hostname": {}, "f:kubernetes.io/os": {}}},
                              "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {"f:lastHeartbeatTime": {}, "f:status": {}}}, "f:images": {}}}},
                {"manager": "rekon/nodepool", "operation": "Apply", "apiVersion": "v1", "time": "2026-11-25T10:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:pool": {}}}, "f:spec": {"f:taints": {}}}}
            ]
        },
        "spec": {"podCIDR": format!("10.{}.{}.0/24", i / 256 % 256, i % 256), "providerID": format!("aws:///eu-west-1a/i-{:017x}", i),
                 "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "16091360Ki", "pods": "58", "ephemeral-storage": "83873772Ki"},
            "allocatable": {"cpu": "3920m", "memory": "15074528Ki", "pods": "58", "ephemeral-storage": "76224326324"},
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 256 % 256, i % 256)},
                          {"type": "Hostname", "address": format!("node-{i}")}, {"type": "InternalDNS", "address": format!("node-{i}.internal")}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{:032x}", i * 31), "systemUUID": format!("{:032x}", i * 37), "bootID": format!("{:032x}", i * 41),
                         "kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12", "containerRuntimeVersion": "containerd://1.7.0",
                         "kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images
        }
    })
}

fn bench_node(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": format!("node-{i}"), "uid": format!("{:032x}", i), "resourceVersion": format!("{}", 1000 + i),
                        "labels": {"node-role.kubernetes.io/pool-3": "", "kubernetes.io/hostname": format!("node-{i}")}},
           "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
}

struct Row {
    ns: f64,
    allocs: f64,
    bytes: f64,
    text: f64,
}

fn measure(lines: &[String], mut decode: impl FnMut(&str) -> usize) -> Row {
    // Warm up (allocator pools, caches), then one timed pass.
    for line in lines.iter().take(200) {
        std::hint::black_box(decode(line));
    }
    let (a0, b0) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let t0 = Instant::now();
    let mut text = 0;
    for line in lines {
        text += std::hint::black_box(decode(line));
    }
    let elapsed = t0.elapsed().as_nanos() as f64;
    let n = lines.len() as f64;
    Row {
        ns: elapsed / n,
        allocs: (ALLOCS.load(Ordering::Relaxed) - a0) as f64 / n,
        bytes: (BYTES.load(Ordering::Relaxed) - b0) as f64 / n,
        text: text as f64 / n,
    }
}

fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let types = TypeMeta {
        api_version: "v1".into(),
        kind: "Node".into(),
    };
    let n = 5_000;
    println!(
        "decode benchmark: one watch event (MODIFIED Node) to a cached object, {n} events per row"
    );
    println!(
        "{:<16} {:<6} {:>10} {:>12} {:>14} {:>12} {:>9}",
        "node", "path", "ns/event", "allocs/event", "bytes alloc'd", "cached text", "× raw"
    );
    for (shape, make) in [
        ("kubelet-shaped", kubelet_node as fn(usize) -> Value),
        ("nodepool bench", bench_node),
    ] {
        let lines: Vec<String> = (0..n)
            .map(|i| json!({"type": "MODIFIED", "object": make(i)}).to_string())
            .collect();
        let raw = measure(&lines, |line| {
            let WatchEvent::Modified(obj) =
                serde_json::from_str::<WatchEvent<RawObject>>(line).unwrap()
            else {
                unreachable!()
            };
            CachedObject::from_raw(obj, &types).unwrap().json.len()
        });
        let tree = measure(&lines, |line| {
            let WatchEvent::Modified(obj) =
                serde_json::from_str::<WatchEvent<DynamicObject>>(line).unwrap()
            else {
                unreachable!()
            };
            CachedObject::from_dynamic(obj, &types).unwrap().json.len()
        });
        let typed = measure(&lines, |line| {
            let WatchEvent::Modified(mut node) =
                serde_json::from_str::<WatchEvent<Node>>(line).unwrap()
            else {
                unreachable!()
            };
            node.metadata.managed_fields = None;
            std::hint::black_box(node)
                .metadata
                .name
                .map_or(0, |n| n.len())
        });
        for (path, row) in [("tree", &tree), ("raw", &raw), ("typed", &typed)] {
            println!(
                "{:<16} {:<6} {:>10.0} {:>12.1} {:>14.0} {:>12.0} {:>9.2}",
                shape,
                path,
                row.ns,
                row.allocs,
                row.bytes,
                row.text,
                row.ns / raw.ns
            );
        }
    }
    Ok(())
}
