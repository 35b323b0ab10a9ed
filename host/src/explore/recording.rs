//! `--from-recording DIR`: a scenario from what ran in production.
//!
//! A host started with `--record DIR` writes one case
//! (`rekon.dev/case/v1`) per reconcile: the request, the engaged clusters
//! and their health, every read with its answer, the decision. Read in
//! request-time order, the reads are a sampled history of the world the
//! plugin lived in; this module turns it back into the steps that made it:
//!
//! - every object the plugin read and did not make itself (its inputs: the
//!   primaries, the Nodes a pool selects, a source ConfigMap) is applied
//!   as first seen, then again each time a later case shows it changed
//!   (labels, annotations, spec, data — what its owner writes), and
//!   deleted when a case shows it terminating or gone;
//! - a status the plugin does not write (a Job's completion on a child the
//!   plugin created, a Node's conditions) is replayed with `apply-status`;
//! - a member cluster whose health left `Ready` in a case goes down before
//!   it, and comes back up when a case shows it ready again;
//! - a `settle` closes the steps of each case that changed anything.
//!
//! What the plugin made (the objects of its `create` and `apply` actions)
//! is left for it to make again, and what it writes of them is not
//! replayed. The result is an ordinary [`Scenario`], written to
//! `OUT/scenario.yaml` so that it can be read, edited and run again with
//! `--scenario`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::scenario::{Scenario, Step, Target};
use crate::action::ClusterHealth;
use crate::change::record::{
    Case, CaseError, CaseOutcome, Read, ReadResult, case_files, read_case,
};

/// Why a recording gives no scenario.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// The directory cannot be read.
    #[error("failed to read recording {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file that is not a case.
    #[error("{path}: {source}")]
    Case {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: CaseError,
    },
    /// No case of this plugin.
    #[error(
        "{path} holds no case of plugin {plugin} (it holds {found}); record with `rekon run --record DIR`"
    )]
    NoCase {
        /// The directory.
        path: PathBuf,
        /// The plugin explored.
        plugin: String,
        /// The plugins whose cases it holds.
        found: String,
    },
}

/// An object's identity across cases: cluster, apiVersion, kind,
/// namespace, name.
type Key = (String, String, String, Option<String>, String);

fn key_of(cluster: &str, object: &Value) -> Option<Key> {
    Some((
        cluster.to_owned(),
        object["apiVersion"].as_str()?.to_owned(),
        object["kind"].as_str()?.to_owned(),
        object["metadata"]["namespace"].as_str().map(str::to_owned),
        object["metadata"]["name"].as_str()?.to_owned(),
    ))
}

/// What its owner wrote of an object: everything but status and what the
/// server sets. The plugin's own finalizer is the host's to add.
fn input_of(object: &Value, finalizer: Option<&str>) -> Value {
    let mut out = object.clone();
    let Some(map) = out.as_object_mut() else {
        return out;
    };
    map.remove("status");
    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        for server_set in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
            "selfLink",
            "ownerReferences",
        ] {
            meta.remove(server_set);
        }
        if let Some(Value::Array(fs)) = meta.get_mut("finalizers") {
            fs.retain(|f| f.as_str() != finalizer);
            if fs.is_empty() {
                meta.remove("finalizers");
            }
        }
    }
    out
}

/// The status of an object, as an `apply-status` document (empty: none).
fn status_of(object: &Value) -> Option<Value> {
    let status = object.get("status").filter(|s| !s.is_null())?;
    if status.as_object().is_some_and(serde_json::Map::is_empty) {
        return None;
    }
    let mut meta = json!({"name": object["metadata"]["name"]});
    if let Some(ns) = object["metadata"]["namespace"].as_str() {
        meta["namespace"] = json!(ns);
    }
    Some(json!({
        "apiVersion": object["apiVersion"],
        "kind": object["kind"],
        "metadata": meta,
        "status": status,
    }))
}

/// What the plugin's actions across all cases made (create, apply) and
/// whose status it writes.
#[derive(Default)]
struct Written {
    made: BTreeSet<Key>,
    status: BTreeSet<Key>,
}

impl Written {
    fn of(cases: &[Case]) -> Self {
        let mut w = Self::default();
        for case in cases {
            let CaseOutcome::Ok { actions, .. } = &case.outcome else {
                continue;
            };
            for action in actions {
                let Some((verb, body)) = action.as_object().and_then(|m| m.iter().next()) else {
                    continue;
                };
                let status = body["status"].as_bool().unwrap_or(false);
                let key = match verb.as_str() {
                    "create" | "apply" => body["cluster"]
                        .as_str()
                        .and_then(|c| key_of(c, &body["object"])),
                    "patch" => target_key(&body["target"]),
                    _ => None,
                };
                let Some(key) = key else { continue };
                if status {
                    w.status.insert(key);
                } else if verb != "patch" {
                    w.made.insert(key);
                }
            }
        }
        w
    }
}

/// The key of an action's `target` (an ObjectRef as JSON).
fn target_key(target: &Value) -> Option<Key> {
    let r = &target["resource"];
    let group = r["group"].as_str().unwrap_or_default();
    let version = r["version"].as_str()?;
    let api_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some((
        target["cluster"].as_str()?.to_owned(),
        api_version,
        r["kind"].as_str()?.to_owned(),
        target["namespace"].as_str().map(str::to_owned),
        target["name"].as_str()?.to_owned(),
    ))
}

/// What one case saw: per object, present (with its JSON) or known absent.
fn observed(case: &Case) -> BTreeMap<Key, Option<Value>> {
    let mut seen = BTreeMap::new();
    for read in &case.reads {
        match read {
            Read::Get {
                cluster,
                resource,
                namespace,
                name,
                result,
            } => match result {
                ReadResult::Object(Some(o)) => {
                    if let Some(k) = key_of(cluster, o) {
                        seen.insert(k, Some(o.clone()));
                    }
                }
                ReadResult::Object(None) => {
                    let k = (
                        cluster.clone(),
                        resource.api_version(),
                        resource.kind.clone(),
                        namespace.clone(),
                        name.clone(),
                    );
                    seen.entry(k).or_insert(None);
                }
                _ => {}
            },
            Read::List {
                cluster, result, ..
            } => {
                if let ReadResult::Objects(items) = result {
                    for o in items {
                        if let Some(k) = key_of(cluster, o) {
                            seen.insert(k, Some(o.clone()));
                        }
                    }
                }
            }
        }
    }
    seen
}

/// The scenario the cases of `plugin` in `dir` describe. `finalizer` is
/// the plugin's own (not replayed: the host adds it).
///
/// # Errors
/// When the directory or a case cannot be read, or it holds no case of
/// `plugin`.
pub fn scenario(
    dir: &Path,
    plugin: &str,
    finalizer: Option<&str>,
) -> Result<Scenario, RecordingError> {
    let files = case_files(&[dir.to_path_buf()]).map_err(|source| RecordingError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut cases = Vec::new();
    let mut others = BTreeSet::new();
    for f in files {
        let case = read_case(&f).map_err(|source| RecordingError::Case {
            path: f.clone(),
            source,
        })?;
        if case.plugin.name == plugin {
            cases.push(case);
        } else {
            others.insert(case.plugin.name.clone());
        }
    }
    if cases.is_empty() {
        return Err(RecordingError::NoCase {
            path: dir.to_path_buf(),
            plugin: plugin.to_owned(),
            found: if others.is_empty() {
                "none".to_owned()
            } else {
                others.into_iter().collect::<Vec<_>>().join(", ")
            },
        });
    }
    // Stable: equal request times keep the files' (name) order.
    cases.sort_by_key(|c| (c.request_time.seconds, c.request_time.nanoseconds));
    Ok(from_cases(&cases, finalizer))
}

/// The scenario of `cases`, in request-time order.
#[must_use]
pub fn from_cases(cases: &[Case], finalizer: Option<&str>) -> Scenario {
    let primary = cases
        .iter()
        .flat_map(|c| c.clusters.iter())
        .find(|c| c.primary)
        .map_or_else(|| cases[0].request.cluster.clone(), |c| c.name.clone());
    let mut clusters = vec![primary.clone()];
    for name in cases.iter().flat_map(|c| {
        c.clusters
            .iter()
            .map(|i| i.name.clone())
            .chain([c.request.cluster.clone()])
    }) {
        if !clusters.contains(&name) {
            clusters.push(name);
        }
    }
    let written = Written::of(cases);
    // What the scenario has made of each object so far: its input, its
    // status (None: absent or not replayed).
    let mut inputs: BTreeMap<Key, Value> = BTreeMap::new();
    let mut statuses: BTreeMap<Key, Value> = BTreeMap::new();
    let mut down: BTreeSet<String> = BTreeSet::new();
    // Objects deleted by a step, by the uid they had (a recreation has
    // another).
    let mut deleted: BTreeMap<Key, Option<String>> = BTreeMap::new();
    let mut steps = Vec::new();
    for case in cases {
        let before = steps.len();
        for info in &case.clusters {
            if info.name == primary {
                continue;
            }
            let ready = info.health == ClusterHealth::Ready;
            if !ready && down.insert(info.name.clone()) {
                steps.push(Step::ClusterDown(info.name.clone()));
            } else if ready && down.remove(&info.name) {
                steps.push(Step::ClusterUp(info.name.clone()));
            }
        }
        for (key, seen) in observed(case) {
            if written.made.contains(&key) {
                // The plugin makes it; only a status others write is
                // replayed.
                if let Some(object) = &seen {
                    replay_status(&mut steps, &mut statuses, &written, &key, object);
                }
                continue;
            }
            let Some(object) = seen else {
                if inputs.remove(&key).is_some() {
                    statuses.remove(&key);
                    steps.push(delete_step(&key));
                }
                continue;
            };
            let uid = object["metadata"]["uid"].as_str().map(str::to_owned);
            if !object["metadata"]["deletionTimestamp"].is_null() {
                // Terminating (a finalizer holds it): deleted once, when
                // first seen so; made first if never seen alive.
                if deleted.get(&key) == Some(&uid) {
                    continue;
                }
                if !inputs.contains_key(&key) {
                    steps.push(Step::Apply {
                        cluster: key.0.clone(),
                        objects: vec![input_of(&object, finalizer)],
                    });
                }
                inputs.remove(&key);
                statuses.remove(&key);
                steps.push(delete_step(&key));
                deleted.insert(key, uid);
                continue;
            }
            deleted.remove(&key);
            let input = input_of(&object, finalizer);
            if inputs.get(&key) != Some(&input) {
                steps.push(Step::Apply {
                    cluster: key.0.clone(),
                    objects: vec![input.clone()],
                });
                inputs.insert(key.clone(), input);
            }
            replay_status(&mut steps, &mut statuses, &written, &key, &object);
        }
        if steps.len() > before {
            steps.push(Step::Settle);
        }
    }
    for c in down {
        steps.push(Step::ClusterUp(c));
        steps.push(Step::Settle);
    }
    // The namespaces the recorded objects live in, made first in every
    // cluster (the plugin never read them, so no case holds them; a
    // fresh cluster has only `default`).
    let namespaces: BTreeSet<String> = cases
        .iter()
        .flat_map(|c| observed(c).into_keys())
        .filter_map(|k| k.3)
        .filter(|ns| ns != "default")
        .collect();
    if !namespaces.is_empty() {
        let objects: Vec<Value> = namespaces
            .iter()
            .map(|ns| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .collect();
        let first: Vec<Step> = clusters
            .iter()
            .map(|c| Step::Apply {
                cluster: c.clone(),
                objects: objects.clone(),
            })
            .collect();
        steps.splice(0..0, first);
    }
    Scenario {
        path: PathBuf::new(),
        clusters,
        crds: Vec::new(),
        steps,
    }
}

/// An `apply-status` step when the status of `object` changed and the
/// plugin does not write it.
fn replay_status(
    steps: &mut Vec<Step>,
    statuses: &mut BTreeMap<Key, Value>,
    written: &Written,
    key: &Key,
    object: &Value,
) {
    if written.status.contains(key) {
        return;
    }
    if let Some(status) = status_of(object)
        && statuses.get(key) != Some(&status)
    {
        steps.push(Step::ApplyStatus {
            cluster: key.0.clone(),
            objects: vec![status.clone()],
        });
        statuses.insert(key.clone(), status);
    }
}

fn delete_step(key: &Key) -> Step {
    Step::Delete(Target {
        cluster: key.0.clone(),
        api_version: key.1.clone(),
        kind: key.2.clone(),
        namespace: key.3.clone(),
        name: key.4.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{
        Action, ClusterInfo, CreateAction, Phase, Request, Resource, Scope, Timestamp,
    };
    use crate::change::record::{CASE_FORMAT, CasePlugin, action_value};

    fn resource(group: &str, kind: &str, scope: Scope) -> Resource {
        Resource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: String::new(),
            scope,
        }
    }

    fn get(cluster: &str, r: Resource, name: &str, object: Option<Value>) -> Read {
        Read::Get {
            cluster: cluster.into(),
            namespace: (r.scope == Scope::Namespaced).then(|| "default".to_owned()),
            resource: r,
            name: name.into(),
            result: ReadResult::Object(object),
        }
    }

    fn widget(spec: Value, extra: Value) -> Value {
        let mut w = json!({"apiVersion": "zoo.rekon.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                         "finalizers": ["zoo.rekon.dev/cleanup"], "managedFields": []},
            "spec": spec, "status": {"phase": "Ready"}});
        if let (Some(w), Some(extra)) = (w["metadata"].as_object_mut(), extra.as_object()) {
            w.extend(extra.clone());
        }
        w
    }

    fn case(second: i64, edge: ClusterHealth, reads: Vec<Read>, actions: Vec<Action>) -> Case {
        Case {
            format: CASE_FORMAT.into(),
            plugin: CasePlugin {
                name: "zoo".into(),
                version: "1".into(),
                digest: String::new(),
                settings: None,
            },
            request: Request {
                cluster: "main".into(),
                namespace: Some("default".into()),
                name: "w".into(),
            },
            phase: Phase::Live,
            request_time: Timestamp {
                seconds: second,
                nanoseconds: 0,
            },
            secrets_redacted: false,
            clusters: vec![
                ClusterInfo {
                    name: "main".into(),
                    primary: true,
                    health: ClusterHealth::Ready,
                },
                ClusterInfo {
                    name: "edge".into(),
                    primary: false,
                    health: edge,
                },
            ],
            reads,
            outcome: CaseOutcome::Ok {
                actions: actions.iter().map(|a| action_value(a, false)).collect(),
                requeue_after_ms: None,
                finalized: false,
            },
            shadow: None,
        }
    }

    #[test]
    fn a_recording_becomes_the_steps_that_made_it() {
        let w = || resource("zoo.rekon.dev", "Widget", Scope::Namespaced);
        let cm = || resource("", "ConfigMap", Scope::Namespaced);
        let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "w-child", "namespace": "default"}});
        let create = Action::Create(CreateAction {
            cluster: "edge".into(),
            object: child.to_string(),
        });
        let ready = ClusterHealth::Ready;
        // Out of order on purpose: request time decides.
        let cases = vec![
            case(
                3,
                ClusterHealth::Unreachable,
                vec![get(
                    "main",
                    w(),
                    "w",
                    Some(widget(json!({"size": 2}), json!({}))),
                )],
                vec![],
            ),
            case(
                1,
                ready,
                vec![
                    get(
                        "main",
                        w(),
                        "w",
                        Some(widget(json!({"size": 1}), json!({}))),
                    ),
                    get("edge", cm(), "w-child", None),
                ],
                vec![create],
            ),
            case(
                2,
                ready,
                vec![
                    get(
                        "main",
                        w(),
                        "w",
                        Some(widget(json!({"size": 1}), json!({}))),
                    ),
                    get("edge", cm(), "w-child", Some(child.clone())),
                ],
                vec![],
            ),
            case(
                4,
                ready,
                vec![get(
                    "main",
                    w(),
                    "w",
                    Some(widget(
                        json!({"size": 2}),
                        json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
                    )),
                )],
                vec![],
            ),
            case(
                5,
                ready,
                vec![get(
                    "main",
                    w(),
                    "w",
                    Some(widget(
                        json!({"size": 2}),
                        json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
                    )),
                )],
                vec![],
            ),
        ];
        let mut sorted = cases;
        sorted.sort_by_key(|c| c.request_time.seconds);
        let s = from_cases(&sorted, Some("zoo.rekon.dev/cleanup"));
        assert_eq!(s.clusters, ["main", "edge"]);
        let labels: Vec<String> = s.steps.iter().map(Step::label).collect();
        // Everything lives in `default`: no namespace to make.
        assert_eq!(
            labels,
            [
                // The Widget as first seen, its status replayed (the plugin
                // never wrote it); the child is the plugin's to make.
                "apply main (Widget w)",
                "apply-status main (Widget w)",
                "settle",
                // Case 2 changed nothing; case 3: edge down, a new size.
                "cluster-down edge",
                "apply main (Widget w)",
                "settle",
                // Case 4: edge back, the Widget terminating (once).
                "cluster-up edge",
                "delete main Widget default/w",
                "settle",
            ],
            "{labels:#?}"
        );
        let Step::Apply { objects, .. } = &s.steps[0] else {
            panic!()
        };
        // What the server and the host set is not an input.
        assert_eq!(
            objects[0]["metadata"],
            json!({"name": "w", "namespace": "default"})
        );
        assert!(objects[0].get("status").is_none());
        // Written out, it parses back to the same steps.
        let dir = tempfile::tempdir().unwrap();
        let notes = vec![String::new(); s.steps.len()];
        let path = super::super::generate::write(&s, &notes, dir.path(), "test").unwrap();
        let again = Scenario::load(&path).unwrap();
        let again: Vec<String> = again.steps.iter().map(Step::label).collect();
        assert_eq!(again, labels);
    }

    #[test]
    fn the_namespaces_of_the_recorded_objects_are_made_first_everywhere() {
        let cm = resource("", "ConfigMap", Scope::Namespaced);
        let source = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "src", "namespace": "team", "uid": "u"}, "data": {"a": "1"}});
        let read = Read::Get {
            cluster: "main".into(),
            resource: cm,
            namespace: Some("team".into()),
            name: "src".into(),
            result: ReadResult::Object(Some(source)),
        };
        let s = from_cases(&[case(1, ClusterHealth::Ready, vec![read], vec![])], None);
        let labels: Vec<String> = s.steps.iter().map(Step::label).collect();
        assert_eq!(
            labels,
            [
                "apply main (Namespace team)",
                "apply edge (Namespace team)",
                "apply main (ConfigMap src)",
                "settle",
            ],
            "{labels:#?}"
        );
    }
}
