//! Inputs from the rest of a cluster: what other controllers and other
//! writers do to the objects a plugin works on, whatever the plugin is.
//!
//! A real cluster is never the plugin's alone (Acto's and Sieve's test
//! inputs include what other controllers do). The classes here are
//! derived from the registration only, never from what a plugin is
//! called or what its strings say:
//!
//! - **adoption**: a second object of the primary kind, made after the
//!   objects of the kinds the plugin watches by owner labels that name it
//!   already exist (more than two, so that a list order the plugin
//!   depends on differs under `shuffle`); its first reconcile sees them
//!   all at once.
//! - **another controller's finalizer** on that second object, from its
//!   creation on (a finalizer name outside any domain the plugin
//!   registers): a plugin that edits `metadata.finalizers` must leave it
//!   where it is.
//! - **changed alongside**: the second object takes every generated spec
//!   change and the rollback the first takes, but is never deleted, so
//!   that what the plugin writes about it (its status, its finalizers,
//!   its children) stays in the end state the oracles compare; the first
//!   object's deletes would take all of that away.
//! - **another writer's object**: an object the plugin looked for by name
//!   in the reference run and never found — not there in any read, never
//!   written by the plugin, not there at the end — is one someone else is
//!   meant to make. A second pass makes it (a valid object of its kind, by
//!   another field manager: the scenario's) after the second object, and
//!   later, before the clusters drop out, changes it (every change the
//!   generator knows for it, at once: keys added, one removed): a plugin
//!   that writes the object back from a cache behind that change reverts
//!   another writer's work.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::change::record::{Read, ReadResult};

use super::super::scenario::Step;
use super::super::trace::Reconcile;
use super::{Generated, known_kind, schema_of, seeded_changes, values};

/// The finalizer another controller holds on the second object. Its
/// domain is the explorer's, never a plugin's: a plugin that removes it
/// removed what is not its own.
pub const FOREIGN_FINALIZER: &str = "explore.rekon.dev/another-controller";

/// Members made before the second object (named out of name order).
pub const ADOPTED: &[&str] = &["c", "a", "b"];

/// The name of the second object of the primary kind (the first is
/// `<kind>-1`).
#[must_use]
pub fn second_name(kind: &str) -> String {
    format!("{}-2", kind.to_lowercase())
}

/// `object` (a version of the first object) as the second object: its
/// name, and another controller's finalizer.
#[must_use]
pub fn as_second(object: &Value, name: &str) -> Value {
    let mut out = object.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("name".into(), json!(name));
        meta.insert("finalizers".into(), json!([FOREIGN_FINALIZER]));
    }
    out
}

/// An object another writer makes, then changes.
#[derive(Clone, Debug, PartialEq)]
pub struct Theirs {
    /// The cluster it lives in.
    pub cluster: String,
    /// As made.
    pub made: Value,
    /// As changed.
    pub changed: Value,
}

fn names(o: &Value, namespace: Option<&str>, name: &str) -> bool {
    o["metadata"]["name"] == name && o["metadata"]["namespace"].as_str() == namespace
}

/// The objects the plugin looked for by name in `trace` (a reference
/// run) and never found, of a kind whose valid object is known (not its
/// primary's kind): never in a read's answer, never the target of one of
/// its writes, not in `end_state`. Each with the version another writer
/// makes and the one it changes it to (deterministic per `seed`).
#[must_use]
pub fn looked_for(
    trace: &[Reconcile],
    end_state: &BTreeMap<String, Vec<Value>>,
    crds: &[Value],
    primary_kind: &str,
    seed: u64,
) -> Vec<Theirs> {
    // (cluster, resource, namespace, name) asked for and answered absent.
    let mut absent = Vec::new();
    for r in trace {
        for read in &r.case.reads {
            if let Read::Get {
                cluster,
                resource,
                namespace,
                name,
                result: ReadResult::Object(None),
            } = read
            {
                let key = (
                    cluster.clone(),
                    resource.clone(),
                    namespace.clone(),
                    name.clone(),
                );
                if resource.kind != primary_kind && !absent.contains(&key) {
                    absent.push(key);
                }
            }
        }
    }
    let seen = |cluster: &str, kind: &str, namespace: Option<&str>, name: &str, plural: &str| {
        let in_reads = trace.iter().any(|r| {
            r.case.reads.iter().any(|read| match read {
                Read::Get {
                    cluster: c,
                    resource,
                    result: ReadResult::Object(Some(o)),
                    ..
                } => c == cluster && resource.kind == kind && names(o, namespace, name),
                Read::List {
                    cluster: c,
                    resource,
                    result: ReadResult::Objects(items),
                    ..
                } => {
                    c == cluster
                        && resource.kind == kind
                        && items.iter().any(|o| names(o, namespace, name))
                }
                _ => false,
            })
        });
        let written = trace.iter().any(|r| {
            r.writes
                .iter()
                .any(|w| w.path.contains(&format!("/{plural}/{name}")))
        });
        let at_end = end_state.get(cluster).is_some_and(|objects| {
            objects
                .iter()
                .any(|o| (o["kind"].is_null() || o["kind"] == kind) && names(o, namespace, name))
        });
        in_reads || written || at_end
    };
    let mut out = Vec::new();
    for (i, (cluster, resource, namespace, name)) in absent.into_iter().enumerate() {
        let av = resource.api_version();
        if !known_kind(crds, &av, &resource.kind)
            || seen(
                &cluster,
                &resource.kind,
                namespace.as_deref(),
                &name,
                &resource.plural,
            )
        {
            continue;
        }
        let schema = schema_of(crds, &av, &resource.kind);
        let Some(mut made) = values::valid(&schema, 0) else {
            continue;
        };
        let mut metadata = json!({"name": name});
        if let Some(ns) = &namespace {
            metadata["namespace"] = json!(ns);
        }
        if let Some(map) = made.as_object_mut() {
            map.remove("status");
            map.insert("apiVersion".into(), json!(av));
            map.insert("kind".into(), json!(resource.kind));
            map.insert("metadata".into(), metadata);
        }
        // Every change the generator knows for it at once, but a whole
        // top-level field removed: its writer edits it, not empties it.
        let changed = seeded_changes(&schema, &made, seed.wrapping_add(i as u64), usize::MAX)
            .iter()
            .filter(|c| c.value.is_some() || c.path.len() > 1)
            .fold(made.clone(), |at, c| c.applied(&at));
        if changed == made {
            continue;
        }
        out.push(Theirs {
            cluster,
            made,
            changed,
        });
    }
    out
}

/// Adds `theirs` to a generated scenario: made (and a settle) after the
/// second object's step, changed (and a settle) before the first cluster
/// drops out, or before the first delete when none does.
pub fn add_theirs(g: &mut Generated, theirs: &[Theirs]) {
    if theirs.is_empty() {
        return;
    }
    let apply = |pick: fn(&Theirs) -> &Value| -> Vec<Step> {
        let mut by_cluster: Vec<(String, Vec<Value>)> = Vec::new();
        for t in theirs {
            match by_cluster.iter_mut().find(|(c, _)| *c == t.cluster) {
                Some((_, objects)) => objects.push(pick(t).clone()),
                None => by_cluster.push((t.cluster.clone(), vec![pick(t).clone()])),
            }
        }
        by_cluster
            .into_iter()
            .flat_map(|(cluster, objects)| [Step::Apply { cluster, objects }, Step::Settle])
            .collect()
    };
    let note_at =
        |notes: &[String], pred: &dyn Fn(&str) -> bool| notes.iter().position(|n| pred(n));
    let change_at = note_at(&g.notes, &|n: &str| n.ends_with(" drops out"))
        .or_else(|| note_at(&g.notes, &|n: &str| n.starts_with("delete")))
        .unwrap_or(g.notes.len());
    let changes = apply(|t| &t.changed);
    let made_notes = |steps: &[Step], note: &str| -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Settle => String::new(),
                _ => note.to_owned(),
            })
            .collect()
    };
    let change_notes = made_notes(
        &changes,
        "another writer changes an object it made (fields or keys added, changed, removed)",
    );
    g.scenario.steps.splice(change_at..change_at, changes);
    g.notes.splice(change_at..change_at, change_notes);
    let make_at = note_at(&g.notes, &|n: &str| n.starts_with("a second object"))
        .map_or(0, |i| i + 2)
        .min(change_at);
    let makes = apply(|t| &t.made);
    let make_notes = made_notes(
        &makes,
        "another writer makes an object the plugin looked for by name and never found",
    );
    g.scenario.steps.splice(make_at..make_at, makes);
    g.notes.splice(make_at..make_at, make_notes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Phase, Request, Resource, Scope, Timestamp};
    use crate::change::record::{CASE_FORMAT, Case, CaseOutcome, CasePlugin};
    use crate::explore::trace::{At, WriteSummary};

    fn cm() -> Resource {
        Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            scope: Scope::Namespaced,
        }
    }

    fn get(name: &str, object: Option<Value>) -> Read {
        Read::Get {
            cluster: "main".into(),
            resource: cm(),
            namespace: Some("default".into()),
            name: name.into(),
            result: ReadResult::Object(object),
        }
    }

    fn reconcile(n: usize, reads: Vec<Read>) -> Reconcile {
        let case = Case {
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
                seconds: 0,
                nanoseconds: 0,
            },
            secrets_redacted: false,
            clusters: Vec::new(),
            reads,
            outcome: CaseOutcome::Ok {
                actions: Vec::new(),
                requeue_after_ms: None,
                finalized: false,
            },
            shadow: None,
        };
        let at = At {
            key: "main/default/w".into(),
            n,
        };
        Reconcile::new(n, at, Phase::Live, case, None)
    }

    #[test]
    fn what_the_plugin_looked_for_and_never_found_is_made_and_changed_by_another_writer() {
        let made_later = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "w-child", "namespace": "default"}});
        let mut deleted = reconcile(3, vec![get("w-gone", None)]);
        deleted.writes.push(WriteSummary {
            method: "DELETE".into(),
            changed: false,
            status: 404,
            path: "/api/v1/namespaces/default/configmaps/w-gone".into(),
            message: None,
        });
        let trace = vec![
            reconcile(
                1,
                vec![
                    get("w-settings", None),
                    get("w-child", None),
                    get("w-at-end", None),
                ],
            ),
            reconcile(
                2,
                vec![get("w-settings", None), get("w-child", Some(made_later))],
            ),
            deleted,
        ];
        let end = BTreeMap::from([(
            "main".to_owned(),
            vec![json!({"metadata": {"name": "w-at-end", "namespace": "default"}})],
        )]);
        let theirs = looked_for(&trace, &end, &[], "Widget", 1);
        // Only the object nobody ever made: not the one the plugin made
        // (read later), wrote, or that is there at the end.
        assert_eq!(theirs.len(), 1, "{theirs:?}");
        let t = &theirs[0];
        assert_eq!(t.cluster, "main");
        assert_eq!(
            t.made["metadata"],
            json!({"name": "w-settings", "namespace": "default"})
        );
        assert_eq!(t.made["data"], json!({"key": "value"}));
        assert_eq!(t.changed["metadata"], t.made["metadata"]);
        assert_ne!(t.changed["data"], t.made["data"]);
        assert!(t.changed["data"].as_object().is_some_and(|d| !d.is_empty()));
        // Made after the second object, changed before a cluster drops out.
        let notes: Vec<String> = [
            "create",
            "",
            "a second object, held",
            "",
            "change",
            "",
            "edge drops out",
            "",
            "delete for good",
            "",
        ]
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
        let steps = notes
            .iter()
            .map(|n| {
                if n.is_empty() {
                    Step::Settle
                } else {
                    Step::ClusterUp(n.clone())
                }
            })
            .collect();
        let mut g = Generated {
            scenario: crate::explore::Scenario {
                path: std::path::PathBuf::new(),
                clusters: vec!["main".into(), "edge".into()],
                crds: Vec::new(),
                steps,
            },
            notes,
            skipped: Vec::new(),
        };
        add_theirs(&mut g, &theirs);
        assert_eq!(g.notes.len(), g.scenario.steps.len());
        assert!(
            g.notes[4].starts_with("another writer makes"),
            "{:?}",
            g.notes
        );
        assert!(
            g.notes[8].starts_with("another writer changes"),
            "{:?}",
            g.notes
        );
        assert_eq!(g.notes[10], "edge drops out");
        let Step::Apply { objects, .. } = &g.scenario.steps[8] else {
            unreachable!()
        };
        assert_eq!(objects[0], t.changed);
        assert!(matches!(g.scenario.steps[9], Step::Settle));
    }

    #[test]
    fn the_second_object_keeps_the_spec_and_gets_a_foreign_finalizer() {
        let first = json!({"apiVersion": "zoo.rekon.dev/v1", "kind": "Widget",
            "metadata": {"name": "widget-1", "namespace": "default", "labels": {"a": "b"}},
            "spec": {"replicas": 2}});
        let second = as_second(&first, &second_name("Widget"));
        assert_eq!(second["metadata"]["name"], "widget-2");
        assert_eq!(second["metadata"]["labels"], first["metadata"]["labels"]);
        assert_eq!(second["metadata"]["finalizers"], json!([FOREIGN_FINALIZER]));
        assert_eq!(second["spec"], first["spec"]);
    }
}
