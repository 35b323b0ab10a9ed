//! Per-replica reports: every replica of a group publishes a small JSON
//! document (for `--plugin-objects`: what it serves of each Plugin object)
//! and every replica reads the live reports of all the others, so the one
//! that writes a status can say whether all of them agree.
//!
//! # Where the reports live
//! One Lease `<name>-reports` in the group's namespace holds one
//! annotation per replica, `rekon.dev/report-<fnv1a(identity) hex>`, whose
//! value is `{"identity", "seq", "durationSeconds", "report"}`. Each replica
//! renews its own annotation every retry period (`seq` counts up), with a
//! read-modify-write that carries the `resourceVersion` it read (a 409 is
//! tried again at once, a few times). One shared object rather than one
//! Lease per replica because it needs nothing the host's Role does not
//! already hold for leader election (`get`, `create`, `update` on Leases):
//! a Lease per replica would need `list` (and `delete`) in every
//! deployment, sharded or not. The annotations of an object may hold 256
//! KiB, room for hundreds of replicas with dozens of plugins each.
//!
//! # Liveness
//! As for membership Leases ([`super::shard`]): a report is live while its
//! value changed within its `durationSeconds` *as observed on the reader's
//! clock*; clocks of different nodes are never compared. A replica that
//! stops (cleanly) removes its annotation; one that crashed stops counting
//! after the duration, and its annotation is removed by the first replica
//! that saw it unchanged for three durations.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::shard::fnv1a;

/// Prefix of the annotation keys of the reports.
pub const REPORT_ANNOTATION_PREFIX: &str = "rekon.dev/report-";

/// Where the reports of a group live and how often they are renewed.
#[derive(Clone, Debug)]
pub struct ReportConfig {
    /// Group name (the `--lease-name`): the Lease is `<name>-reports`.
    pub name: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// This replica's identity.
    pub identity: String,
    /// How long a report counts after it last changed.
    pub lease_duration: Duration,
    /// How often this replica renews its report and reads the others'.
    pub retry_period: Duration,
}

impl ReportConfig {
    /// Name of the Lease holding the reports.
    #[must_use]
    pub fn lease_name(&self) -> String {
        format!("{}-reports", self.name)
    }

    /// Annotation key of `identity`'s report.
    #[must_use]
    pub fn annotation(identity: &str) -> String {
        format!(
            "{REPORT_ANNOTATION_PREFIX}{:016x}",
            fnv1a(identity.as_bytes())
        )
    }
}

/// One live replica's report.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The replica's identity.
    pub identity: String,
    /// What it reports.
    pub report: Value,
}

/// The value of one report annotation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Entry {
    identity: String,
    seq: u64,
    duration_seconds: u64,
    report: Value,
}

/// A report as last observed: its raw value and when it changed, on our clock.
struct Observed {
    raw: String,
    changed_at: Instant,
}

/// Publishes this replica's report and follows everyone's. Cheap to clone.
#[derive(Clone)]
pub struct ReportBoard {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None`: a single replica without leases; only its own report counts.
    api: Option<Api<Lease>>,
    config: ReportConfig,
    own: Mutex<Value>,
    wake: Notify,
    live: watch::Sender<Vec<Report>>,
}

impl std::fmt::Debug for ReportBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportBoard")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl ReportBoard {
    /// Reports shared through the Lease `<name>-reports` of the primary
    /// cluster `client` talks to.
    #[must_use]
    pub fn new(client: kube::Client, config: ReportConfig) -> Self {
        let api = Api::namespaced(client, &config.namespace);
        Self::build(Some(api), config)
    }

    /// A single replica (no leader election, no shards): its own report is
    /// the only one, nothing is written.
    #[must_use]
    pub fn local(identity: impl Into<String>) -> Self {
        Self::build(
            None,
            ReportConfig {
                name: String::new(),
                namespace: String::new(),
                identity: identity.into(),
                lease_duration: Duration::from_secs(15),
                retry_period: Duration::from_secs(2),
            },
        )
    }

    fn build(api: Option<Api<Lease>>, config: ReportConfig) -> Self {
        let own = Report {
            identity: config.identity.clone(),
            report: Value::Null,
        };
        Self {
            inner: Arc::new(Inner {
                api,
                config,
                own: Mutex::new(Value::Null),
                wake: Notify::new(),
                live: watch::channel(vec![own]).0,
            }),
        }
    }

    /// This replica's identity.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.inner.config.identity
    }

    /// Replace this replica's report; published at once when it changed.
    pub fn set_own(&self, report: Value) {
        {
            let mut own = self.inner.own.lock();
            if *own == report {
                return;
            }
            own.clone_from(&report);
        }
        // Our own report is current at once in our view; the others see it
        // at the next round (woken now).
        let others: Vec<Report> = self.inner.live.borrow().clone();
        self.publish(others);
        self.inner.wake.notify_one();
    }

    /// The live reports, this replica's own (as set last) among them,
    /// sorted by identity.
    #[must_use]
    pub fn live(&self) -> Vec<Report> {
        self.inner.live.borrow().clone()
    }

    /// Changes of [`Self::live`].
    #[must_use]
    pub fn changes(&self) -> watch::Receiver<Vec<Report>> {
        self.inner.live.subscribe()
    }

    /// The others' live reports and our own, sorted, published if changed.
    fn publish(&self, others: Vec<Report>) {
        let me = &self.inner.config.identity;
        let mut live: Vec<Report> = others.into_iter().filter(|r| r.identity != *me).collect();
        live.push(Report {
            identity: me.clone(),
            report: self.inner.own.lock().clone(),
        });
        live.sort_by(|a, b| a.identity.cmp(&b.identity));
        self.inner.live.send_if_modified(|current| {
            let changed = *current != live;
            if changed {
                *current = live;
            }
            changed
        });
    }

    /// Renew this replica's report and read the others' every retry period
    /// (at once after [`Self::set_own`]) until `shutdown`; then remove it.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send) {
        let Some(api) = self.inner.api.clone() else {
            shutdown.await;
            return;
        };
        tokio::pin!(shutdown);
        let mut observed: HashMap<String, Observed> = HashMap::new();
        let mut seq: u64 = 0;
        loop {
            seq += 1;
            self.round(&api, &mut observed, Some(seq)).await;
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(self.inner.config.retry_period) => {}
                () = self.inner.wake.notified() => {}
            }
        }
        // Leaving: our report goes with us.
        self.round(&api, &mut observed, None).await;
    }

    /// One read-modify-write: observe every report, prune the long-dead,
    /// write ours (`seq`) or remove it (`None`). A conflict is tried again.
    async fn round(
        &self,
        api: &Api<Lease>,
        observed: &mut HashMap<String, Observed>,
        seq: Option<u64>,
    ) {
        let config = &self.inner.config;
        let name = config.lease_name();
        let key = ReportConfig::annotation(&config.identity);
        for _ in 0..5 {
            let current = match api.get_opt(&name).await {
                Ok(c) => c,
                Err(e) => {
                    warn!(lease = %name, error = %e, "failed to read the replica reports");
                    return;
                }
            };
            let now = Instant::now();
            let mut annotations: BTreeMap<String, String> = current
                .as_ref()
                .and_then(|l| l.metadata.annotations.clone())
                .unwrap_or_default();
            let mut seen = HashMap::new();
            let mut others = Vec::new();
            let mut dead = Vec::new();
            for (k, raw) in &annotations {
                if !k.starts_with(REPORT_ANNOTATION_PREFIX) || *k == key {
                    continue;
                }
                let changed_at = match observed.remove(k) {
                    Some(o) if o.raw == *raw => o.changed_at,
                    _ => now,
                };
                let Ok(entry) = serde_json::from_str::<Entry>(raw) else {
                    debug!(annotation = %k, "ignoring a report that does not parse");
                    continue;
                };
                let duration = Duration::from_secs(entry.duration_seconds.max(1));
                if now < changed_at + duration {
                    others.push(Report {
                        identity: entry.identity,
                        report: entry.report,
                    });
                } else if now >= changed_at + duration * 3 {
                    dead.push(k.clone());
                }
                seen.insert(
                    k.clone(),
                    Observed {
                        raw: raw.clone(),
                        changed_at,
                    },
                );
            }
            *observed = seen;
            self.publish(others);
            for k in &dead {
                debug!(lease = %name, annotation = %k, "removing the report of a replica gone for three lease durations");
                annotations.remove(k);
                observed.remove(k);
            }
            match seq {
                Some(seq) => {
                    let entry = Entry {
                        identity: config.identity.clone(),
                        seq,
                        duration_seconds: config.lease_duration.as_secs().max(1),
                        report: self.inner.own.lock().clone(),
                    };
                    let raw = serde_json::to_string(&entry).unwrap_or_default();
                    annotations.insert(key.clone(), raw);
                }
                None => {
                    if annotations.remove(&key).is_none() && dead.is_empty() {
                        return;
                    }
                }
            }
            let result = match current {
                Some(mut lease) => {
                    lease.metadata.annotations = Some(annotations);
                    api.replace(&name, &PostParams::default(), &lease).await
                }
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            namespace: Some(config.namespace.clone()),
                            annotations: Some(annotations),
                            labels: Some(BTreeMap::from([(
                                "app.kubernetes.io/name".to_owned(),
                                "rekon".to_owned(),
                            )])),
                            ..ObjectMeta::default()
                        },
                        spec: None,
                    };
                    api.create(&PostParams::default(), &lease).await
                }
            };
            match result {
                Ok(_) => return,
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    debug!(lease = %name, "replica reports changed meanwhile; trying again");
                }
                Err(e) => {
                    warn!(lease = %name, error = %e, "failed to write this replica's report");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_replica_sees_its_own_report_only() {
        let board = ReportBoard::local("me");
        board.set_own(serde_json::json!({"a": 1}));
        assert_eq!(
            board.live(),
            vec![Report {
                identity: "me".to_owned(),
                report: serde_json::json!({"a": 1})
            }]
        );
    }

    #[test]
    fn annotation_keys_are_valid_and_stable() {
        let k = ReportConfig::annotation("replica-a_1234");
        assert!(k.starts_with(REPORT_ANNOTATION_PREFIX));
        assert_eq!(k.len(), REPORT_ANNOTATION_PREFIX.len() + 16);
        assert_eq!(k, ReportConfig::annotation("replica-a_1234"));
    }
}
