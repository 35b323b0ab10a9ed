//! `rekon plugin plan`: a dry run of one plugin against live clusters.
//!
//! Plugins perform no I/O and return their writes as actions, so the host can
//! show what a plugin *would* do without doing it: connect the clusters, fill
//! the same shared caches `rekon run` uses for the plugin's primary and
//! watches, reconcile every primary (or one) once, and report the actions of
//! each outcome. Nothing is written: no finalizer is added, no action is
//! performed. Capability checks apply as in `rekon run`, so a forbidden action
//! shows up as the error it would be.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::action::{Action, ClusterSet, Phase, Request, Scope};
use crate::app::{AppError, Config, connect_clusters};
use crate::cache::{CacheManager, Resolver};
use crate::controller::reads::{CacheMap, PluginReads};
use crate::controller::scope::resolve_set;
use crate::controller::{PrimaryScope, WatchKey};
use crate::plugin::{HostReads, PluginRuntime, Policy, RuntimeConfig};
use crate::writer::resource_id;
use rekon_rules::Step;

/// Errors of a dry run.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The clusters could not be connected.
    #[error("failed to connect the clusters")]
    Clusters(#[source] Box<AppError>),
    /// The operator policy file could not be loaded.
    #[error(transparent)]
    Policy(#[from] crate::plugin::PolicyError),
    /// The plugin file could not be loaded.
    #[error("failed to load plugin {path}: {source}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::plugin::LoadOneError,
    },
    /// A cache the plugin needs could not be started.
    #[error("failed to watch {resource} in cluster {cluster} for plugin {plugin}")]
    Cache {
        /// The plugin.
        plugin: String,
        /// The cluster.
        cluster: String,
        /// The resource.
        resource: String,
        /// Cause.
        #[source]
        source: Box<crate::cache::Error>,
    },
    /// A cache did not finish its initial list in time.
    #[error(
        "cache of {resource} in cluster {cluster} did not sync within {timeout:?} (is the cluster reachable, is the CRD installed?)"
    )]
    SyncTimeout {
        /// The cluster.
        cluster: String,
        /// The resource.
        resource: String,
        /// The limit.
        timeout: Duration,
    },
}

/// What to plan.
#[derive(Clone, Debug)]
pub struct PlanConfig {
    /// The plugin component.
    pub file: PathBuf,
    /// Clusters, as for `rekon run` (only the cluster fields, the compiled
    /// cache and the operator policy are used).
    pub clusters: Config,
    /// Only this primary (`name` or `namespace/name`); all when `None`.
    pub only: Option<String>,
    /// How long to wait for the caches' initial lists.
    pub sync_timeout: Duration,
}

/// The plan for one primary object.
#[derive(Clone, Debug, Serialize)]
pub struct PlannedReconcile {
    /// The request reconciled.
    pub request: Request,
    /// The actions the plugin returned (nothing was performed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    /// The requeue the plugin asked for, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    /// Whether the plugin reported its cleanup done (objects being deleted).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub finalized: bool,
    /// Why the reconcile failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The whole dry run.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// Plugin name.
    pub plugin: String,
    /// Plugin version.
    pub version: String,
    /// One entry per primary reconciled.
    pub reconciles: Vec<PlannedReconcile>,
}

impl Plan {
    /// Number of actions over all reconciles.
    #[must_use]
    pub fn action_count(&self) -> usize {
        self.reconciles.iter().map(|r| r.actions.len()).sum()
    }

    /// The plan as YAML documents, like `kubectl diff` reads: a first
    /// document of comments summing up the actions per cluster, then one
    /// document per action (the object applied or created, the patch body,
    /// or what is deleted or reported) headed by a comment naming the
    /// primary, the action and the cluster. Failed reconciles appear as
    /// comments.
    #[must_use]
    pub fn to_yaml_documents(&self) -> String {
        use std::collections::BTreeMap;
        use std::fmt::Write as _;

        let mut per_cluster: BTreeMap<&str, BTreeMap<&'static str, usize>> = BTreeMap::new();
        for action in self.reconciles.iter().flat_map(|r| &r.actions) {
            *per_cluster
                .entry(crate::action::action_cluster(action))
                .or_default()
                .entry(crate::action::action_label(action))
                .or_default() += 1;
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# plugin {} {}: {} primaries, {} actions (dry run: nothing was written)",
            self.plugin,
            self.version,
            self.reconciles.len(),
            self.action_count()
        );
        for (cluster, counts) in &per_cluster {
            let counts: Vec<String> = counts.iter().map(|(v, n)| format!("{n} {v}")).collect();
            let _ = writeln!(out, "# cluster {cluster}: {}", counts.join(", "));
        }
        for r in &self.reconciles {
            let primary = describe_request(&r.request);
            if let Some(error) = &r.error {
                let _ = writeln!(out, "# {primary}: reconcile failed: {error}");
            }
            if r.actions.is_empty() && r.error.is_none() {
                let _ = writeln!(out, "# {primary}: no change");
            }
            for action in &r.actions {
                let (header, body) = action_document(action);
                let _ = write!(out, "---\n# {primary}: {header}\n{body}");
            }
            if r.finalized {
                let _ = writeln!(
                    out,
                    "# {primary}: cleanup done, the finalizer would be removed"
                );
            }
        }
        out
    }
}

fn describe_request(r: &Request) -> String {
    match &r.namespace {
        Some(ns) => format!("{}/{ns}/{}", r.cluster, r.name),
        None => format!("{}/{}", r.cluster, r.name),
    }
}

/// A JSON text as a YAML body (the text itself when it is not JSON).
fn yaml_body(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| serde_yaml::to_string(&v).ok())
        .unwrap_or_else(|| format!("{json}\n"))
}

fn describe_target(t: &crate::action::ObjectRef) -> String {
    let what = crate::action::describe_resource(&t.resource);
    match &t.namespace {
        Some(ns) => format!("{what} {ns}/{}", t.name),
        None => format!("{what} {}", t.name),
    }
}

/// The comment heading an action's document, and its body.
fn action_document(a: &Action) -> (String, String) {
    match a {
        Action::Apply(a) => (
            format!(
                "server-side apply{}{} in cluster {}",
                if a.status { " of status" } else { "" },
                if a.force { " (force)" } else { "" },
                a.cluster
            ),
            yaml_body(&a.object),
        ),
        Action::Create(c) => (
            format!("create if absent in cluster {}", c.cluster),
            yaml_body(&c.object),
        ),
        Action::Patch(p) => (
            format!(
                "{} patch{} of {} in cluster {}",
                match p.patch_type {
                    crate::action::PatchType::Merge => "merge",
                    crate::action::PatchType::Json => "JSON",
                },
                if p.status { " of status" } else { "" },
                describe_target(&p.target),
                p.target.cluster
            ),
            yaml_body(&p.patch),
        ),
        Action::Delete(d) => (
            format!(
                "delete {} in cluster {}",
                describe_target(&d.target),
                d.target.cluster
            ),
            String::new(),
        ),
        Action::Event(e) => (
            format!(
                "{:?} event {} about {} in cluster {}",
                e.event_type,
                e.reason,
                describe_target(&e.regarding),
                e.regarding.cluster
            ),
            format!("# {}\n", e.note.replace('\n', " ")),
        ),
    }
}

/// Run the dry run.
///
/// # Errors
/// When the clusters cannot be connected, the plugin cannot be loaded, or a
/// cache it needs does not sync in time. A failing reconcile is not an error:
/// it is reported in its [`PlannedReconcile`].
pub async fn plan(config: PlanConfig) -> Result<Plan, PlanError> {
    let clusters = connect_clusters(&config.clusters)
        .await
        .map_err(|e| PlanError::Clusters(Box::new(e)))?;
    let policy = Policy::load(config.clusters.policy_file.as_deref())?;
    let runtime_config = RuntimeConfig {
        cache_dir: config.clusters.cache_dir.clone(),
        policy,
        ..RuntimeConfig::default()
    };
    let plugin = PluginRuntime::load_one(runtime_config, &config.file)
        .await
        .map_err(|source| PlanError::Load {
            path: config.file.clone(),
            source,
        })?;
    let reg = plugin.registration().clone();

    // The same caches `rekon run` would start for this plugin.
    let resolve = |set: &ClusterSet| resolve_set(set, &clusters);
    let caches = CacheManager::new(clusters.clone(), Resolver::default());
    let mut wanted = vec![];
    for cluster in resolve(&reg.primary_clusters) {
        wanted.push((cluster, reg.primary.clone(), true));
    }
    for watch in &reg.watches {
        for cluster in resolve(&watch.clusters) {
            wanted.push((cluster, watch.resource.clone(), false));
        }
    }
    let mut map = CacheMap::new();
    let mut primaries = Vec::new();
    for (cluster, resource, is_primary) in wanted {
        let id = resource_id(&resource);
        let cache = caches
            .acquire(&cluster, &id)
            .map_err(|source| PlanError::Cache {
                plugin: reg.name.clone(),
                cluster: cluster.clone(),
                resource: id.to_string(),
                source: Box::new(source),
            })?;
        tokio::time::timeout(config.sync_timeout, cache.wait_settled())
            .await
            .map_err(|_| PlanError::SyncTimeout {
                cluster: cluster.clone(),
                resource: id.to_string(),
                timeout: config.sync_timeout,
            })?;
        if is_primary {
            primaries.push((cluster.clone(), Arc::clone(&cache)));
        }
        map.insert(WatchKey::of(&cluster, &resource), cache);
    }
    let reads: Arc<dyn HostReads> = Arc::new(PluginReads {
        caches: Arc::new(map),
        clusters: clusters.clone(),
    });

    // Exactly the objects `rekon run` would reconcile, in the phase it would
    // tell the plugin (the same scope rule as the controller).
    let scope = PrimaryScope::of(&reg.name, &reg, &clusters);
    let namespaced = matches!(reg.primary.scope, Scope::Namespaced);
    let mut requests: Vec<(Request, Phase)> = primaries
        .iter()
        .flat_map(|(cluster, cache)| {
            cache.read(|store| {
                store
                    .objects()
                    .filter_map(|obj| {
                        let phase = match scope.step(cluster, obj) {
                            Step::Ignore => return None,
                            Step::AddFinalizer => Phase::Live,
                            Step::Reconcile { phase, .. } => phase.into(),
                        };
                        let request = Request {
                            cluster: cluster.clone(),
                            namespace: if namespaced {
                                obj.key.namespace().map(str::to_owned)
                            } else {
                                None
                            },
                            name: obj.key.name.to_string(),
                        };
                        Some((request, phase))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .filter(|(req, _)| matches_only(config.only.as_deref(), req))
        .collect();
    requests.sort_by(|(a, _), (b, _)| {
        (&a.cluster, &a.namespace, &a.name).cmp(&(&b.cluster, &b.namespace, &b.name))
    });

    let now = SystemTime::now();
    let mut reconciles = Vec::with_capacity(requests.len());
    for (request, phase) in requests {
        let planned = match plugin
            .reconcile(request.clone(), phase, Arc::clone(&reads), now)
            .await
        {
            Ok(outcome) => PlannedReconcile {
                request,
                actions: outcome.actions,
                requeue_after_ms: outcome.requeue_after_ms,
                finalized: outcome.finalized,
                error: None,
            },
            Err(e) => PlannedReconcile {
                request,
                actions: Vec::new(),
                requeue_after_ms: None,
                finalized: false,
                error: Some(e.to_string()),
            },
        };
        reconciles.push(planned);
    }
    Ok(Plan {
        plugin: reg.name,
        version: reg.version,
        reconciles,
    })
}

/// `name` matches a cluster-scoped or any-namespace object of that name;
/// `namespace/name` matches exactly.
fn matches_only(only: Option<&str>, req: &Request) -> bool {
    match only {
        None => true,
        Some(spec) => match spec.split_once('/') {
            Some((ns, name)) => req.namespace.as_deref() == Some(ns) && req.name == name,
            None => req.name == spec,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ns: Option<&str>, name: &str) -> Request {
        Request {
            cluster: "main".into(),
            namespace: ns.map(str::to_owned),
            name: name.into(),
        }
    }

    #[test]
    fn yaml_documents_show_objects_and_a_per_cluster_summary() {
        use crate::action::{ApplyAction, DeleteAction, ObjectRef, Resource};
        let target = ObjectRef {
            cluster: "sub".into(),
            resource: Resource {
                group: "batch".into(),
                version: "v1".into(),
                kind: "Job".into(),
                plural: String::new(),
                scope: Scope::Namespaced,
            },
            namespace: Some("ns".into()),
            name: "j".into(),
        };
        let plan = Plan {
            plugin: "p".into(),
            version: "1.0.0".into(),
            reconciles: vec![PlannedReconcile {
                request: req(Some("ns"), "t"),
                actions: vec![
                    Action::Apply(ApplyAction {
                        cluster: "main".into(),
                        object: r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#
                            .into(),
                        status: false,
                        force: false,
                    }),
                    Action::Delete(DeleteAction {
                        target,
                        uid: None,
                        propagation: None,
                    }),
                ],
                requeue_after_ms: None,
                finalized: false,
                error: None,
            }],
        };
        let text = plan.to_yaml_documents();
        assert!(text.contains("# cluster main: 1 apply\n"), "{text}");
        assert!(text.contains("# cluster sub: 1 delete\n"), "{text}");
        assert!(
            text.contains("---\n# main/ns/t: server-side apply in cluster main\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"),
            "{text}"
        );
        assert!(
            text.contains("delete Job.batch ns/j in cluster sub"),
            "{text}"
        );
        assert!(!text.contains("\\\""), "no escaped JSON: {text}");
    }

    #[test]
    fn only_filters_by_name_or_namespace_and_name() {
        assert!(matches_only(None, &req(Some("a"), "x")));
        assert!(matches_only(Some("x"), &req(Some("a"), "x")));
        assert!(matches_only(Some("x"), &req(None, "x")));
        assert!(matches_only(Some("a/x"), &req(Some("a"), "x")));
        assert!(!matches_only(Some("b/x"), &req(Some("a"), "x")));
        assert!(!matches_only(Some("y"), &req(None, "x")));
    }
}
