//! Scenario-free exploration: a scenario derived from the plugin's
//! registration and its primary's schema (Acto's input generation, SOSP
//! '23), and generated steps appended to a hand-written scenario
//! (`--generate N`).
//!
//! The primary is built valid from its schema ([`values`]); then each
//! field is changed in turn (strings, integer bounds, list and map items
//! added and removed, booleans flipped), with a settle after every change;
//! then a rollback to an earlier spec, labels that unselect and select
//! again under the plugin's primary selector, a non-primary cluster
//! dropping out and coming back, for a plugin holding a finalizer a delete
//! and a re-create and one last change, and a delete for good. Objects of
//! the kinds it watches by owner labels are made after its first settle.
//! Everything is deterministic per seed (the order of the fields,
//! the spec rolled back to). The fault strategies then cross these steps
//! like any scenario's, and the consistency and differential oracles
//! ([`super::inputs`]) judge them without a fault.

pub mod others;
pub mod values;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rand::SeedableRng as _;
use rand::seq::{IndexedRandom as _, SliceRandom as _};
use serde_json::{Value, json};

use crate::action::{ClusterSet, Mapping, Registration, Resource, Scope};

use super::scenario::{Scenario, Step, Target};
use values::Change;

/// The primary cluster of a generated scenario.
pub const MAIN: &str = "main";
/// The second cluster, when the plugin reaches more than one.
pub const EDGE: &str = "edge";
/// At most this many field changes in a generated scenario (each a step
/// and a settle; every reconcile they cause is a place for faults).
const MAX_CHANGES: usize = 10;

/// Whether a cluster set reaches beyond the primary cluster.
fn beyond_primary(set: &ClusterSet) -> bool {
    match set {
        ClusterSet::Primary => false,
        ClusterSet::All | ClusterSet::Others => true,
        ClusterSet::Named(names) => names.iter().any(|n| n != MAIN),
    }
}

/// The clusters of a generated scenario: `main`, and `edge` when the
/// plugin fans out (its primaries, watches, permissions or health
/// requeues reach another cluster); clusters it names are used as named.
#[must_use]
pub fn clusters_of(reg: &Registration) -> Vec<String> {
    let sets = std::iter::once(&reg.clusters)
        .chain(std::iter::once(&reg.primary_clusters))
        .chain(reg.watches.iter().map(|w| &w.clusters))
        .chain(reg.permissions.iter().map(|p| &p.clusters));
    let mut out = vec![MAIN.to_owned()];
    let mut fans_out = false;
    for set in sets {
        fans_out |= beyond_primary(set);
        if let ClusterSet::Named(names) = set {
            for n in names {
                if !out.contains(n) {
                    out.push(n.clone());
                }
            }
        }
    }
    if fans_out && out.len() == 1 {
        out.push(EDGE.to_owned());
    }
    out
}

/// Labels that put an object under `selector` (one value per requirement
/// that asks for one), and labels that take it out (the first requirement
/// broken), when the selector can be broken.
fn selector_labels(
    selector: &str,
) -> Option<(
    serde_json::Map<String, Value>,
    serde_json::Map<String, Value>,
)> {
    use rekon_rules::Requirement as R;
    let parsed = rekon_rules::LabelSelector::parse(selector).ok()?;
    let mut select = serde_json::Map::new();
    for r in &parsed.requirements {
        match r {
            R::Equals(k, v) => {
                select.insert(k.clone(), json!(v));
            }
            R::Exists(k) => {
                select.insert(k.clone(), json!("true"));
            }
            R::In(k, vs) => {
                select.insert(k.clone(), json!(vs.iter().next()?));
            }
            R::NotEquals(..) | R::NotExists(_) | R::NotIn(..) => {}
        }
    }
    let mut unselect = select.clone();
    match parsed.requirements.first()? {
        R::Equals(k, _) | R::Exists(k) | R::In(k, _) => {
            unselect.remove(k);
        }
        R::NotEquals(k, v) => {
            unselect.insert(k.clone(), json!(v));
        }
        R::NotExists(k) => {
            unselect.insert(k.clone(), json!("true"));
        }
        R::NotIn(k, vs) => {
            unselect.insert(k.clone(), json!(vs.iter().next()?));
        }
    }
    Some((select, unselect))
}

/// The schema of `r`: its CRD's (among `crds`), else a built-in kind's
/// minimal one.
pub(super) fn schema_of(crds: &[Value], api_version: &str, kind: &str) -> Value {
    values::crd_schema(crds, api_version, kind)
        .unwrap_or_else(|| values::builtin_schema(api_version, kind))
}

/// Whether `rule` (a CRD `x-kubernetes-validations` rule) makes the value
/// it sits on immutable: `self == oldSelf`, either way round.
fn is_immutable_rule(rule: &str) -> bool {
    let spaced: Vec<&str> = rule.split_whitespace().collect();
    let joined = spaced.join(" ");
    matches!(joined.as_str(), "self == oldSelf" | "oldSelf == self")
}

/// The first field on `path` (from the object's root) whose schema carries
/// an immutability rule ([`is_immutable_rule`]), as a dotted path: a change
/// there is refused by the API server, the generator does not make it.
fn immutable_on(schema: &Value, path: &[String]) -> Option<String> {
    let mut at = schema;
    for (i, field) in path.iter().enumerate() {
        at = match at["properties"].get(field) {
            Some(s) => s,
            None => &at["additionalProperties"],
        };
        if !at.is_object() {
            return None;
        }
        let rules = at["x-kubernetes-validations"].as_array();
        if rules.is_some_and(|r| {
            r.iter()
                .any(|v| v["rule"].as_str().is_some_and(is_immutable_rule))
        }) {
            return Some(path[..=i].join("."));
        }
    }
    None
}

/// The fields of `schema` a generated change leaves alone because a
/// transition rule makes them immutable, each with why (for the written
/// scenario's comments).
#[must_use]
pub fn immutable_fields(schema: &Value, object: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in values::changes(schema, object) {
        if let Some(field) = immutable_on(schema, &c.path) {
            let note = format!(
                "{field} is not changed: its schema's rule `self == oldSelf` makes it immutable"
            );
            if !out.contains(&note) {
                out.push(note);
            }
        }
    }
    out
}

/// Changes of `object` in a seeded order of fields (the changes of one
/// field stay together and in order: bounds first, a list grown before it
/// shrinks), at most `max`. None under an immutable field
/// ([`immutable_on`]).
pub(super) fn seeded_changes(schema: &Value, object: &Value, seed: u64, max: usize) -> Vec<Change> {
    let mut all = values::changes(schema, object);
    all.retain(|c| immutable_on(schema, &c.path).is_none());
    let mut fields: Vec<Vec<String>> = Vec::new();
    for c in &all {
        if !fields.contains(&c.path) {
            fields.push(c.path.clone());
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    fields.shuffle(&mut rng);
    let mut out = Vec::new();
    for f in fields {
        out.extend(all.iter().filter(|c| c.path == f).cloned());
    }
    out.truncate(max);
    out
}

/// A generated scenario, with a note per step saying what it changes
/// (empty for a step that needs none).
#[derive(Clone, Debug)]
pub struct Generated {
    /// The scenario.
    pub scenario: Scenario,
    /// One note per step.
    pub notes: Vec<String>,
    /// What the generator left alone and why (fields a transition rule
    /// makes immutable), for the written scenario's comments.
    pub skipped: Vec<String>,
}

/// A scenario for `reg`'s plugin from nothing but its registration and the
/// schema of its primary (among `crds`). Deterministic per `seed`.
#[must_use]
pub fn scenario(reg: &Registration, crds: &[Value], seed: u64) -> Generated {
    let clusters = clusters_of(reg);
    let av = reg.primary.api_version();
    let kind = &reg.primary.kind;
    let schema = schema_of(crds, &av, kind);
    let name = format!("{}-1", kind.to_lowercase());
    let namespace = (reg.primary.scope == Scope::Namespaced).then_some("default");
    let labels = reg.primary_selector.as_deref().and_then(selector_labels);
    let mut metadata = json!({"name": name});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    if let Some((select, _)) = &labels
        && !select.is_empty()
    {
        metadata["labels"] = Value::Object(select.clone());
    }
    let mut first = values::valid(&schema, 0).unwrap_or_else(|| json!({}));
    if let Some(map) = first.as_object_mut() {
        map.remove("status");
        map.remove("metadata");
        map.insert("apiVersion".into(), json!(av));
        map.insert("kind".into(), json!(kind));
        map.insert("metadata".into(), metadata);
    }
    let mut steps = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let apply_all =
        |steps: &mut Vec<Step>, notes: &mut Vec<String>, objects: Vec<Value>, note: String| {
            steps.push(Step::Apply {
                cluster: MAIN.to_owned(),
                objects,
            });
            steps.push(Step::Settle);
            notes.push(note);
            notes.push(String::new());
        };
    let apply = |steps: &mut Vec<Step>, notes: &mut Vec<String>, object: &Value, note: String| {
        apply_all(steps, notes, vec![object.clone()], note);
    };
    // The first object's version `v`, and the second object's (see
    // [`others`]): both take every change and the rollback.
    let second = others::second_name(kind);
    let both = |v: &Value| vec![v.clone(), others::as_second(v, &second)];
    apply(
        &mut steps,
        &mut notes,
        &first,
        "create: a valid object from the schema".into(),
    );
    // Objects of the kinds it watches that name the primary (someone
    // else's members), made together once it has done its own first work,
    // in an order that is not their names'.
    let made = members(reg, crds, &name, namespace, &["b", "a"]);
    if !made.is_empty() {
        steps.push(Step::Apply {
            cluster: MAIN.to_owned(),
            objects: made,
        });
        steps.push(Step::Settle);
        notes.extend([
            "watched objects whose owner labels name the primary".into(),
            String::new(),
        ]);
    }
    // The second object, made after members that name it exist, held by
    // another controller's finalizer (see [`others`]).
    let mut adopted = members(reg, crds, &second, namespace, others::ADOPTED);
    let note = if adopted.is_empty() {
        "a second object, held by another controller's finalizer"
    } else {
        "a second object, made after watched objects that name it exist, held by another controller's finalizer"
    };
    adopted.push(others::as_second(&first, &second));
    apply_all(&mut steps, &mut notes, adopted, note.into());
    // Each field changed in turn, the changes adding up.
    let mut versions = vec![first.clone()];
    for change in seeded_changes(&schema, &first, seed, MAX_CHANGES) {
        let next = change.applied(versions.last().unwrap_or(&first));
        if versions.last() == Some(&next) {
            continue;
        }
        apply_all(
            &mut steps,
            &mut notes,
            both(&next),
            format!("change: {} (both objects)", change.describe()),
        );
        versions.push(next);
    }
    let last = versions.last().cloned().unwrap_or_else(|| first.clone());
    // A rollback to an earlier spec (the first, or one drawn by the seed).
    if versions.len() > 2 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_add(1));
        let n = versions.len() - 2;
        let i = (0..n)
            .collect::<Vec<_>>()
            .choose(&mut rng)
            .copied()
            .unwrap_or(0);
        let note = format!("rollback to the spec of change {i} (0: as created; both objects)");
        apply_all(&mut steps, &mut notes, both(&versions[i]), note);
    } else if versions.len() == 2 {
        apply_all(
            &mut steps,
            &mut notes,
            both(&first),
            "rollback to the spec as created (both objects)".into(),
        );
    }
    // Labels that take it out of the plugin's selector, then back in.
    if let Some((select, unselect)) = &labels {
        let mut out = first.clone();
        out["metadata"]["labels"] = Value::Object(unselect.clone());
        apply(
            &mut steps,
            &mut notes,
            &out,
            "labels: out of the primary selector".into(),
        );
        let mut back = first.clone();
        back["metadata"]["labels"] = Value::Object(select.clone());
        apply(
            &mut steps,
            &mut notes,
            &back,
            "labels: selected again".into(),
        );
    }
    // Every other cluster drops out and comes back.
    for c in clusters.iter().skip(1) {
        steps.push(Step::ClusterDown(c.clone()));
        steps.push(Step::Settle);
        steps.push(Step::ClusterUp(c.clone()));
        steps.push(Step::Settle);
        notes.extend([
            format!("{c} drops out"),
            String::new(),
            format!("{c} comes back"),
            String::new(),
        ]);
    }
    let target = Target {
        cluster: MAIN.to_owned(),
        api_version: av,
        kind: kind.clone(),
        namespace: namespace.map(str::to_owned),
        name,
    };
    // A delete and a re-create of the same name, then one more change —
    // for a plugin that holds a finalizer: its cleanup and the new
    // object's first reconcile race (Sieve's recreate bugs). Without one,
    // a re-create only adopts what the delete left behind and hides the
    // intermediate states of the first object from the end state.
    if reg.finalizer.is_some() {
        steps.push(Step::Delete(target.clone()));
        steps.push(Step::Settle);
        notes.extend(["delete".to_owned(), String::new()]);
        apply(
            &mut steps,
            &mut notes,
            &first,
            "re-create as first created".into(),
        );
        if last != first {
            apply(
                &mut steps,
                &mut notes,
                &last,
                "change: to the last spec of the changes".into(),
            );
        }
    }
    // The end: deleted for good, so that what a delete leaves behind (a
    // child without an owner, a copy in a cluster the cleanup missed)
    // stays in the end state the oracles compare.
    steps.push(Step::Delete(target));
    steps.push(Step::Settle);
    notes.extend(["delete for good".to_owned(), String::new()]);
    Generated {
        scenario: Scenario {
            path: PathBuf::new(),
            clusters,
            crds: Vec::new(),
            steps,
        },
        notes,
        skipped: immutable_fields(&schema, &first),
    }
}

/// Whether a valid object of the kind is known: a CRD's schema among
/// `crds`, a ConfigMap, a Secret.
pub(super) fn known_kind(crds: &[Value], api_version: &str, kind: &str) -> bool {
    values::crd_schema(crds, api_version, kind).is_some()
        || matches!((api_version, kind), ("v1", "ConfigMap" | "Secret"))
}

/// Objects of the kinds `reg` watches by owner labels in the primary
/// cluster, one per suffix and kind, labelled for the primary `name` (and for the
/// watch's selector): members someone else made. Only kinds whose valid
/// object is known (a CRD's schema, a ConfigMap, a Secret); named in
/// `<name>-member-<suffix>` in the order of `suffixes` (not their names'
/// order, so that list order and apply order differ).
fn members(
    reg: &Registration,
    crds: &[Value],
    name: &str,
    namespace: Option<&str>,
    suffixes: &[&str],
) -> Vec<Value> {
    let mut out = Vec::new();
    for w in &reg.watches {
        let Mapping::OwnerLabels(keys) = &w.mapping else {
            continue;
        };
        let in_main = match &w.clusters {
            ClusterSet::Primary | ClusterSet::All => true,
            ClusterSet::Others => false,
            ClusterSet::Named(n) => n.iter().any(|c| c == MAIN),
        };
        let av = w.resource.api_version();
        let known = known_kind(crds, &av, &w.resource.kind);
        if !in_main || !known || w.resource.kind == reg.primary.kind {
            continue;
        }
        let schema = schema_of(crds, &av, &w.resource.kind);
        let mut labels = serde_json::Map::new();
        if let Some((select, _)) = w.label_selector.as_deref().and_then(selector_labels) {
            labels.extend(select);
        }
        labels.insert(keys.cluster.clone(), json!(MAIN));
        if let Some(ns) = namespace {
            labels.insert(keys.namespace.clone(), json!(ns));
        }
        labels.insert(keys.name.clone(), json!(name));
        for (i, suffix) in suffixes.iter().enumerate() {
            let Some(mut m) = values::valid(&schema, i) else {
                continue;
            };
            let mut metadata = json!({"name": format!("{name}-member-{suffix}"), "labels": labels});
            if w.resource.scope == Scope::Namespaced {
                metadata["namespace"] = json!(namespace.unwrap_or("default"));
            }
            if let Some(map) = m.as_object_mut() {
                map.remove("status");
                map.insert("apiVersion".into(), json!(av));
                map.insert("kind".into(), json!(w.resource.kind));
                map.insert("metadata".into(), metadata);
            }
            out.push(m);
        }
    }
    out
}

/// A key naming one object of a scenario (the generator's and the input
/// oracles' one spelling).
pub(super) fn key_of(cluster: &str, o: &Value) -> String {
    object_key(
        cluster,
        o["apiVersion"].as_str().unwrap_or_default(),
        o["kind"].as_str().unwrap_or_default(),
        o["metadata"]["namespace"].as_str(),
        o["metadata"]["name"].as_str().unwrap_or_default(),
    )
}

/// [`key_of`] from its parts (a `delete` step's target).
pub(super) fn object_key(
    cluster: &str,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> String {
    format!(
        "{cluster}/{api_version}/{kind}/{}/{name}",
        namespace.unwrap_or_default()
    )
}

/// Appends `n` generated changes (each an apply and a settle) to
/// `scenario`: changes of the objects it applied that are still there at
/// its end (the primary kind's first), field by field, with a rollback to
/// an object's first version when its changes run out. Deterministic per
/// `seed`. Returns a note per appended step.
pub fn extend(
    scenario: &mut Scenario,
    crds: &[Value],
    primary: &Resource,
    n: usize,
    seed: u64,
) -> Vec<String> {
    let mut notes = Vec::new();
    // (key, cluster, first version, last version) of live objects, in the
    // order first applied.
    let mut live: Vec<(String, String, Value, Value)> = Vec::new();
    for step in &scenario.steps {
        match step {
            Step::Apply { cluster, objects } => {
                for o in objects {
                    let key = key_of(cluster, o);
                    match live.iter_mut().find(|l| l.0 == key) {
                        Some(l) => l.3 = o.clone(),
                        None => live.push((key, cluster.clone(), o.clone(), o.clone())),
                    }
                }
            }
            Step::Delete(t) => {
                let key = format!(
                    "{}/{}/{}/{}/{}",
                    t.cluster,
                    t.api_version,
                    t.kind,
                    t.namespace.as_deref().unwrap_or_default(),
                    t.name
                );
                live.retain(|l| l.0 != key);
            }
            _ => {}
        }
    }
    live.sort_by_key(|l| l.3["kind"] != primary.kind.as_str());
    let mut all_crds = scenario.crds.clone();
    all_crds.extend(crds.iter().cloned());
    let mut made = 0;
    let mut round = 0u64;
    while made < n && !live.is_empty() {
        let before = made;
        for (_, cluster, first, last) in &mut live {
            if made >= n {
                break;
            }
            let schema = schema_of(
                &all_crds,
                last["apiVersion"].as_str().unwrap_or_default(),
                last["kind"].as_str().unwrap_or_default(),
            );
            let changes = seeded_changes(&schema, last, seed.wrapping_add(round), usize::MAX);
            let mut next: Vec<(Value, String)> = Vec::new();
            let mut at = last.clone();
            for c in &changes {
                at = c.applied(&at);
                next.push((at.clone(), format!("change: {}", c.describe())));
            }
            next.push((first.clone(), "rollback to the first version".to_owned()));
            for (v, note) in next {
                if made >= n {
                    break;
                }
                if v == *last {
                    continue;
                }
                scenario.steps.push(Step::Apply {
                    cluster: cluster.clone(),
                    objects: vec![v.clone()],
                });
                scenario.steps.push(Step::Settle);
                notes.extend([note, String::new()]);
                *last = v;
                made += 1;
            }
        }
        round += 1;
        if made == before {
            break;
        }
    }
    notes
}

/// Writes `scenario` as `out/scenario.yaml` (in the format `--scenario`
/// reads; its CRDs beside it in `scenario-crds.yaml`, an apply of several
/// objects in `scenario-files/step-N.yaml`), so that a campaign on a
/// generated scenario is reproduced with `--scenario out/scenario.yaml`.
///
/// # Errors
/// When a file cannot be written.
pub fn write(
    scenario: &Scenario,
    notes: &[String],
    out: &Path,
    header: &str,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let to_yaml = |v: &Value| serde_yaml::to_string(v).unwrap_or_default();
    let mut doc = serde_json::Map::new();
    doc.insert("clusters".into(), json!(scenario.clusters));
    if !scenario.crds.is_empty() {
        let text: Vec<String> = scenario.crds.iter().map(to_yaml).collect();
        std::fs::write(out.join("scenario-crds.yaml"), text.join("---\n"))?;
        doc.insert("crds".into(), json!(["scenario-crds.yaml"]));
    }
    let mut steps = String::from("steps:\n");
    for (i, step) in scenario.steps.iter().enumerate() {
        let objects_of = |objects: &[Value]| -> std::io::Result<Value> {
            if let [one] = objects {
                return Ok(json!({"object": one}));
            }
            let dir = out.join("scenario-files");
            std::fs::create_dir_all(&dir)?;
            let file = format!("step-{}.yaml", i + 1);
            let text: Vec<String> = objects.iter().map(to_yaml).collect();
            std::fs::write(dir.join(&file), text.join("---\n"))?;
            Ok(json!({"file": format!("scenario-files/{file}")}))
        };
        let with_cluster = |mut body: Value, cluster: &str| {
            body["cluster"] = json!(cluster);
            body
        };
        if let Some(note) = notes.get(i).filter(|n| !n.is_empty()) {
            let _ = writeln!(steps, "# step {}: {note}", i + 1);
        }
        let step = match step {
            Step::Apply { cluster, objects } => {
                json!({"apply": with_cluster(objects_of(objects)?, cluster)})
            }
            Step::ApplyStatus { cluster, objects } => {
                json!({"apply-status": with_cluster(objects_of(objects)?, cluster)})
            }
            Step::Delete(t) => {
                let mut body = json!({"cluster": t.cluster, "apiVersion": t.api_version,
                    "kind": t.kind, "name": t.name});
                if let Some(ns) = &t.namespace {
                    body["namespace"] = json!(ns);
                }
                json!({ "delete": body })
            }
            Step::Settle => json!({"settle": {}}),
            Step::ClusterDown(c) => json!({"cluster-down": {"cluster": c}}),
            Step::ClusterUp(c) => json!({"cluster-up": {"cluster": c}}),
        };
        steps.push_str(&to_yaml(&json!([step])));
    }
    let comments: String = header.lines().map(|l| format!("# {l}\n")).collect();
    let path = out.join("scenario.yaml");
    std::fs::write(
        &path,
        format!("{comments}{}{steps}", to_yaml(&Value::Object(doc))),
    )?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Watch;

    fn registration(clusters: ClusterSet, selector: Option<&str>) -> Registration {
        let widget = Resource {
            group: "zoo.rekon.dev".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            scope: Scope::Namespaced,
        };
        let cm = Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            scope: Scope::Namespaced,
        };
        Registration {
            name: "zoo".into(),
            version: "0.1.0".into(),
            primary: widget,
            primary_clusters: ClusterSet::Primary,
            primary_selector: selector.map(str::to_owned),
            clusters: ClusterSet::Primary,
            watches: vec![Watch {
                resource: cm,
                clusters,
                mapping: Mapping::OwnerReference,
                label_selector: None,
            }],
            finalizer: None,
            permissions: Vec::new(),
            crds: Vec::new(),
            max_concurrent_reconciles: None,
        }
    }

    fn crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.zoo.rekon.dev"},
            "spec": {"group": "zoo.rekon.dev", "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Namespaced", "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"replicas": {"type": "integer", "minimum": 0},
                        "holds": {"type": "array", "items": {"type": "string"}}}}}}}}]}})
    }

    #[test]
    fn one_cluster_unless_the_plugin_fans_out() {
        assert_eq!(
            clusters_of(&registration(ClusterSet::Primary, None)),
            ["main"]
        );
        assert_eq!(
            clusters_of(&registration(ClusterSet::All, None)),
            ["main", "edge"]
        );
        assert_eq!(
            clusters_of(&registration(
                ClusterSet::Named(vec!["main".into(), "west".into()]),
                None
            )),
            ["main", "west"]
        );
    }

    #[test]
    fn a_generated_scenario_changes_rolls_back_drops_a_cluster_and_recreates() {
        let g = scenario(
            &registration(ClusterSet::All, Some("tier=gold")),
            &[crd()],
            1,
        );
        let s = &g.scenario;
        assert_eq!(g.notes.len(), s.steps.len());
        assert!(g.notes.iter().any(|n| n.starts_with("rollback")));
        let labels: Vec<String> = s.steps.iter().map(Step::label).collect();
        assert!(matches!(s.steps[0], Step::Apply { .. }));
        assert!(matches!(s.steps[1], Step::Settle));
        let Step::Apply { objects, .. } = &s.steps[0] else {
            unreachable!()
        };
        assert_eq!(objects[0]["metadata"]["labels"]["tier"], "gold");
        assert_eq!(objects[0]["metadata"]["namespace"], "default");
        let specs: Vec<Value> = s
            .steps
            .iter()
            .filter_map(|st| match st {
                Step::Apply { objects, .. } => Some(objects[0]["spec"].clone()),
                _ => None,
            })
            .collect();
        for v in [json!(0), json!(4), json!(1)] {
            assert!(specs.iter().any(|s| s["replicas"] == v), "{specs:?}");
        }
        assert!(specs.iter().any(|s| s["holds"] == json!(["value-1", "a"])));
        // Unselected, then selected again.
        let unselected = s.steps.iter().any(|st| {
            matches!(st, Step::Apply { objects, .. } if objects[0]["metadata"]["labels"].get("tier").is_none())
        });
        assert!(unselected, "{labels:?}");
        assert!(labels.contains(&"cluster-down edge".to_owned()));
        assert!(labels.contains(&"cluster-up edge".to_owned()));
        // No finalizer: one delete, at the end.
        let delete = labels.iter().position(|l| l.starts_with("delete")).unwrap();
        assert_eq!(delete, s.steps.len() - 2, "{labels:?}");
        let mut with_finalizer = registration(ClusterSet::All, None);
        with_finalizer.finalizer = Some("zoo.rekon.dev/cleanup".into());
        let f = scenario(&with_finalizer, &[crd()], 1).scenario;
        let labels: Vec<String> = f.steps.iter().map(Step::label).collect();
        let delete = labels.iter().position(|l| l.starts_with("delete")).unwrap();
        assert!(
            matches!(f.steps[delete + 2], Step::Apply { .. }),
            "re-created"
        );
        assert!(labels.last().is_some_and(|l| l == "settle"));
        assert!(labels[labels.len() - 2].starts_with("delete"));
        // A second object, held by another controller's finalizer, takes
        // every change and the rollback, and is never deleted.
        let second: Vec<&Value> = s
            .steps
            .iter()
            .filter_map(|st| match st {
                Step::Apply { objects, .. } => {
                    objects.iter().find(|o| o["metadata"]["name"] == "widget-2")
                }
                _ => None,
            })
            .collect();
        assert!(second.len() > 5, "{labels:?}");
        for o in &second {
            assert_eq!(
                o["metadata"]["finalizers"],
                json!([others::FOREIGN_FINALIZER])
            );
        }
        assert!(second.iter().any(|o| o["spec"]["replicas"] == json!(4)));
        assert!(
            !labels
                .iter()
                .any(|l| l.starts_with("delete") && l.contains("widget-2"))
        );
        // A settle after every change.
        for (i, st) in s.steps.iter().enumerate() {
            if st.mutates() {
                assert!(matches!(s.steps[i + 1], Step::Settle), "{labels:?}");
            }
        }
        // The same per seed, another order for another.
        let again = scenario(
            &registration(ClusterSet::All, Some("tier=gold")),
            &[crd()],
            1,
        )
        .scenario;
        assert_eq!(format!("{:?}", s.steps), format!("{:?}", again.steps));
        let other = (2..10).any(|seed| {
            let o = scenario(&registration(ClusterSet::All, None), &[crd()], seed).scenario;
            let first = scenario(&registration(ClusterSet::All, None), &[crd()], 1).scenario;
            format!("{:?}", o.steps) != format!("{:?}", first.steps)
        });
        assert!(other, "the seed orders the fields");
    }

    #[test]
    fn members_named_by_owner_labels_come_after_the_primary() {
        let mut reg = registration(ClusterSet::Primary, None);
        reg.watches[0].mapping = Mapping::OwnerLabels(crate::action::OwnerLabels {
            cluster: "o/cluster".into(),
            namespace: "o/namespace".into(),
            name: "o/name".into(),
        });
        let s = scenario(&reg, &[crd()], 1).scenario;
        let applied: Vec<Value> = s
            .steps
            .iter()
            .take(4)
            .filter_map(|st| match st {
                Step::Apply { objects, .. } => Some(objects.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(applied.len(), 3, "the Widget, then two members together");
        assert_eq!(applied[0]["kind"], "Widget");
        assert!(matches!(s.steps[1], Step::Settle));
        assert!(matches!(s.steps[3], Step::Settle));
        assert_eq!(applied[1]["metadata"]["name"], "widget-1-member-b");
        assert_eq!(applied[2]["metadata"]["labels"]["o/name"], "widget-1");
        assert_eq!(applied[2]["metadata"]["labels"]["o/cluster"], "main");
        assert_eq!(applied[2]["data"], json!({"key": "value"}));
        // The second Widget is made after three members naming it, in an
        // order that is not their names'.
        let Step::Apply { objects, .. } = &s.steps[4] else {
            unreachable!("{:?}", s.steps[4])
        };
        let names: Vec<&str> = objects
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "widget-2-member-c",
                "widget-2-member-a",
                "widget-2-member-b",
                "widget-2"
            ]
        );
        assert_eq!(objects[0]["metadata"]["labels"]["o/name"], "widget-2");
        assert!(matches!(s.steps[5], Step::Settle));
    }

    #[test]
    fn a_built_in_primary_gets_a_minimal_object() {
        let mut reg = registration(ClusterSet::Primary, None);
        reg.primary = Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            scope: Scope::Namespaced,
        };
        let s = scenario(&reg, &[], 1).scenario;
        let Step::Apply { objects, .. } = &s.steps[0] else {
            unreachable!()
        };
        assert_eq!(objects[0]["data"], json!({"key": "value"}));
        assert!(s.steps.len() > 8, "data keys added and removed");
    }

    #[test]
    fn fields_under_a_self_equals_old_self_rule_are_left_alone() {
        let mut immutable = crd();
        let spec = &mut immutable["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"];
        spec["properties"]["holds"]["x-kubernetes-validations"] =
            json!([{"rule": "oldSelf  ==  self", "message": "holds are fixed"}]);
        let g = scenario(
            &registration(ClusterSet::Primary, None),
            &[immutable.clone()],
            1,
        );
        assert!(
            !g.notes.iter().any(|n| n.contains("spec.holds")),
            "{:?}",
            g.notes
        );
        assert!(
            g.notes.iter().any(|n| n.contains("spec.replicas")),
            "{:?}",
            g.notes
        );
        assert_eq!(
            g.skipped,
            ["spec.holds is not changed: its schema's rule `self == oldSelf` makes it immutable"]
        );
        // On the whole spec: no change at all. Other transition rules are
        // not read: what they refuse, the API server says (refused inputs).
        let spec = &mut immutable["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"];
        spec["x-kubernetes-validations"] = json!([{"rule": "self == oldSelf"}]);
        let g = scenario(&registration(ClusterSet::Primary, None), &[immutable], 1);
        assert!(
            !g.notes.iter().any(|n| n.starts_with("change:")),
            "{:?}",
            g.notes
        );
        assert!(
            !g.notes.iter().any(|n| n.starts_with("rollback")),
            "{:?}",
            g.notes
        );
        assert_eq!(g.skipped.len(), 1, "{:?}", g.skipped);
        assert!(g.skipped[0].starts_with("spec is not changed"));
        assert!(is_immutable_rule("self == oldSelf"));
        assert!(!is_immutable_rule("self.replicas >= oldSelf.replicas"));
    }

    #[test]
    fn extend_changes_what_the_scenario_left_and_the_written_file_parses() {
        let Generated {
            scenario: mut s,
            mut notes,
            ..
        } = scenario(&registration(ClusterSet::Primary, None), &[crd()], 1);
        // Without the delete for good: the Widget is there to change.
        s.steps.truncate(s.steps.len() - 2);
        notes.truncate(s.steps.len());
        let before = s.steps.len();
        notes.extend(extend(
            &mut s,
            &[crd()],
            &registration(ClusterSet::Primary, None).primary,
            4,
            3,
        ));
        assert_eq!(s.steps.len(), before + 8);
        assert_eq!(notes.len(), s.steps.len());
        let tmp = tempfile::tempdir().unwrap();
        let path = write(&s, &notes, tmp.path(), "generated").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# generated\n"), "{text}");
        assert!(
            text.contains(": change: spec.replicas = 0 (both objects)\n"),
            "{text}"
        );
        let back = Scenario::load(&path).unwrap();
        assert_eq!(back.clusters, s.clusters);
        let a: Vec<String> = s.steps.iter().map(Step::label).collect();
        let b: Vec<String> = back.steps.iter().map(Step::label).collect();
        assert_eq!(a, b);
    }
}
