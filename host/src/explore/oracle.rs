//! Oracles: what a run must share with the reference. End state (masked
//! of what the server sets), create and delete counts per object; the
//! fixed point and determinism are judged by the runner and the probe.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::change::replay::line_diff;

/// Metadata the server sets, masked before comparing.
const SERVER_SET: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "managedFields",
    "generation",
    "selfLink",
];

/// Whether `s` reads as an RFC 3339 time (`2026-11-27T00:12:03Z`).
fn is_time(s: &str) -> bool {
    s.len() >= 20
        && s.as_bytes().get(4) == Some(&b'-')
        && s.as_bytes().get(10) == Some(&b'T')
        && chrono::DateTime::parse_from_rfc3339(s).is_ok()
}

fn mask_times(v: &mut Value) {
    match v {
        Value::String(s) if is_time(s) => *s = "<time>".to_owned(),
        Value::Array(items) => items.iter_mut().for_each(mask_times),
        Value::Object(map) => map.values_mut().for_each(mask_times),
        _ => {}
    }
}

/// `object` without what the server sets: uid, resourceVersion,
/// timestamps (any RFC 3339 value), managedFields, generation, owner
/// references' uids.
#[must_use]
pub fn masked(object: &Value) -> Value {
    let mut v = object.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SERVER_SET {
            meta.remove(*field);
        }
        if let Some(owners) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for o in owners {
                if let Some(o) = o.as_object_mut() {
                    o.remove("uid");
                }
            }
        }
        if meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(serde_json::Map::is_empty)
        {
            meta.remove("annotations");
        }
    }
    mask_times(&mut v);
    v
}

/// The apiserver's alphabet of random suffixes (`k8s.io/apiserver`
/// `names.SimpleNameGenerator`, `utilrand.String`): no vowels, no 0/1/3.
const SUFFIX_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

/// A name the ServiceAccount admission gives a Pod's projected token
/// volume: `kube-api-access-` and five random characters.
fn is_token_volume(s: &str) -> bool {
    s.strip_prefix("kube-api-access-")
        .is_some_and(|r| r.len() == 5 && r.chars().all(|c| SUFFIX_ALPHABET.contains(c)))
}

/// Every name the server made up in `objects`: each object named by
/// `generateName` (its name → `<prefix>*`).
fn generated_names(objects: &[Value]) -> BTreeMap<String, String> {
    objects
        .iter()
        .filter_map(|o| {
            let name = o["metadata"]["name"].as_str()?;
            let prefix = o["metadata"]["generateName"].as_str()?;
            (!prefix.is_empty() && name.starts_with(prefix))
                .then(|| (name.to_owned(), format!("{prefix}*")))
        })
        .collect()
}

/// Masks the server's random values wherever they appear (a status that
/// names a generated child, a Pod's token volume and its mounts): two runs
/// draw other suffixes for the same thing.
fn mask_random(v: &mut Value, names: &BTreeMap<String, String>) {
    match v {
        Value::String(s) => {
            if let Some(masked) = names.get(s.as_str()) {
                *s = masked.clone();
            } else if is_token_volume(s) {
                *s = "kube-api-access-*".to_owned();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| mask_random(i, names)),
        Value::Object(map) => map.values_mut().for_each(|i| mask_random(i, names)),
        _ => {}
    }
}

/// Objects keyed for comparison: `kind ns/name`, and for an object named
/// by `generateName`, `kind ns/<prefix>*#i` in the order of their content
/// (their random suffixes differ between runs).
#[must_use]
pub fn keyed(objects: &[Value]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut generated: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut names = generated_names(objects);
    // A value that is an object's uid, wherever it appears (a Job's
    // `controller-uid` label and selector, a status naming its child by
    // uid): the server draws uids, two runs get others.
    for o in objects {
        // (UUIDs: long enough never to be a value a plugin wrote.)
        if let Some(uid) = o["metadata"]["uid"].as_str().filter(|u| u.len() >= 16) {
            names.insert(uid.to_owned(), "<uid>".to_owned());
        }
    }
    for o in objects {
        let kind = o["kind"].as_str().unwrap_or("?");
        let ns = o["metadata"]["namespace"]
            .as_str()
            .map(|n| format!("{n}/"))
            .unwrap_or_default();
        let name = o["metadata"]["name"].as_str().unwrap_or("?");
        let mut m = masked(o);
        mask_random(&mut m, &names);
        match o["metadata"]["generateName"].as_str() {
            Some(prefix) if !prefix.is_empty() && name.starts_with(prefix) => {
                if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("name");
                }
                generated
                    .entry(format!("{kind} {ns}{prefix}*"))
                    .or_default()
                    .push(m);
            }
            _ => {
                out.insert(format!("{kind} {ns}{name}"), m);
            }
        }
    }
    for (key, mut items) in generated {
        items.sort_by_key(Value::to_string);
        for (i, m) in items.into_iter().enumerate() {
            out.insert(format!("{key}#{}", i + 1), m);
        }
    }
    out
}

/// A difference in the end state: per cluster, objects missing, extra or
/// different (a YAML line diff: `-` reference, `+` this run). Empty when
/// equal.
#[must_use]
pub fn end_state_diff(
    reference: &BTreeMap<String, Vec<Value>>,
    run: &BTreeMap<String, Vec<Value>>,
) -> String {
    let mut out = String::new();
    let empty = Vec::new();
    for cluster in reference
        .keys()
        .chain(run.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let a = keyed(reference.get(cluster).unwrap_or(&empty));
        let b = keyed(run.get(cluster).unwrap_or(&empty));
        for key in a
            .keys()
            .chain(b.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
            match (a.get(key), b.get(key)) {
                (Some(_), None) => out.push_str(&format!(
                    "{cluster}: {key} missing (the reference has it)\n"
                )),
                (None, Some(_)) => out.push_str(&format!(
                    "{cluster}: {key} extra (the reference has none)\n"
                )),
                (Some(x), Some(y)) if x != y => {
                    let yx = serde_yaml::to_string(x).unwrap_or_default();
                    let yy = serde_yaml::to_string(y).unwrap_or_default();
                    out.push_str(&format!(
                        "{cluster}: {key} differs\n{}",
                        line_diff(&yx, &yy, 2)
                    ));
                }
                _ => {}
            }
        }
    }
    out
}

/// `state` without what differs between two histories of the same inputs
/// by design: the values that echo `metadata.generation`
/// (`observedGeneration`, in a status or its conditions — the generation
/// counts an object's spec changes), the order of `metadata.finalizers`
/// and of a spec's lists keyed by `key` (a Node's taints: entries added
/// one change at a time or all at once; the API server keeps their order,
/// but what they hold is a set), and empty maps and lists outside
/// `metadata` (server-side apply keeps a map or list whose last item a
/// later apply removed — structured-merge-diff preserves the emptied
/// container — where a fresh apply never made one: `labels: {}` after a
/// sequence, no `labels` applied at once). For the oracles that
/// compare such runs (consistency, differential); the end state of a plan
/// and the reference's have the same changes and keep both.
#[must_use]
pub fn without_history(state: &BTreeMap<String, Vec<Value>>) -> BTreeMap<String, Vec<Value>> {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("observedGeneration");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    // Lists of entries keyed by `key` (a Node's taints, tolerations): one
    // entry per key, in the order they were added.
    fn sort_keyed(v: &mut Value) {
        match v {
            Value::Object(map) => map.values_mut().for_each(sort_keyed),
            Value::Array(items) => {
                items.iter_mut().for_each(sort_keyed);
                if !items.is_empty()
                    && items
                        .iter()
                        .all(|i| i.get("key").is_some_and(Value::is_string))
                {
                    items.sort_by_key(Value::to_string);
                }
            }
            _ => {}
        }
    }
    fn is_empty(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        }
    }
    // Empty maps and lists, innermost first (a map left holding only
    // emptied ones is empty too); list items keep their places.
    fn drop_empty(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.values_mut().for_each(drop_empty);
                map.retain(|_, v| !is_empty(v));
            }
            Value::Array(items) => items.iter_mut().for_each(drop_empty),
            _ => {}
        }
    }
    state
        .iter()
        .map(|(cluster, objects)| {
            let objects = objects
                .iter()
                .map(|o| {
                    let mut o = o.clone();
                    if let Some(status) = o.get_mut("status") {
                        strip(status);
                    }
                    if let Some(Value::Array(f)) = o.pointer_mut("/metadata/finalizers") {
                        f.sort_by_key(Value::to_string);
                    }
                    if let Some(spec) = o.get_mut("spec") {
                        sort_keyed(spec);
                    }
                    if let Some(map) = o.as_object_mut() {
                        for (k, v) in map.iter_mut() {
                            if k != "metadata" {
                                drop_empty(v);
                            }
                        }
                        map.retain(|k, v| k == "metadata" || !is_empty(v));
                    }
                    o
                })
                .collect();
            (cluster.clone(), objects)
        })
        .collect()
}

/// Per object created or deleted more often than in the reference:
/// `object: this run (c, d), the reference (c, d)`. Empty when none. Fewer
/// is not a finding: a fault that kept an object from being made (a
/// cluster down while it would have been) may change nothing in the end; a
/// delete that heals by a second create is churn a user notices.
#[must_use]
pub fn counts_diff(
    reference: &BTreeMap<String, (u32, u32)>,
    run: &BTreeMap<String, (u32, u32)>,
) -> String {
    let mut out = String::new();
    for key in reference
        .keys()
        .chain(run.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let a = reference.get(key).copied().unwrap_or_default();
        let b = run.get(key).copied().unwrap_or_default();
        if b.0 > a.0 || b.1 > a.1 {
            out.push_str(&format!(
                "{key}: created {} and deleted {} time(s), the reference {} and {}\n",
                b.0, b.1, a.0, a.1
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_set_fields_and_times_are_masked() {
        let a = json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d", "uid": "1", "resourceVersion": "5",
            "creationTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": [{"name": "p", "uid": "x"}]},
            "data": {"at": "2026-01-01T00:00:01Z", "v": "1"}});
        let b = json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d", "uid": "2", "resourceVersion": "9",
            "creationTimestamp": "2026-02-01T00:00:00Z", "ownerReferences": [{"name": "p", "uid": "y"}]},
            "data": {"at": "2026-03-01T10:00:01.5Z", "v": "1"}});
        let mut ra = BTreeMap::new();
        ra.insert("main".to_owned(), vec![a.clone()]);
        let mut rb = BTreeMap::new();
        rb.insert("main".to_owned(), vec![b]);
        assert_eq!(end_state_diff(&ra, &rb), "");
        let mut c = a;
        c["data"]["v"] = json!("2");
        rb.insert("main".to_owned(), vec![c]);
        let d = end_state_diff(&ra, &rb);
        assert!(d.contains("main: ConfigMap d/a differs"), "{d}");
        assert!(
            d.lines()
                .any(|l| l.starts_with('+') && l.ends_with("v: '2'")),
            "{d}"
        );
    }

    #[test]
    fn generated_names_compare_by_prefix_and_content() {
        let o = |name: &str| json!({"kind": "Pod", "metadata": {"name": name, "generateName": "w-", "namespace": "d"}, "spec": {}});
        let mut a = BTreeMap::new();
        a.insert("main".to_owned(), vec![o("w-abcde")]);
        let mut b = BTreeMap::new();
        b.insert("main".to_owned(), vec![o("w-zzzzz")]);
        assert_eq!(end_state_diff(&a, &b), "");
        b.insert("main".to_owned(), vec![o("w-zzzzz"), o("w-yyyyy")]);
        assert!(end_state_diff(&a, &b).contains("Pod d/w-*#2 extra"));
    }

    #[test]
    fn server_made_random_names_are_masked_wherever_they_appear() {
        let pod = |suffix: &str| {
            let volume = format!("kube-api-access-{suffix}");
            json!({"kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
                "spec": {"volumes": [{"name": volume}],
                    "containers": [{"name": "c", "volumeMounts": [{"name": volume, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}]}})
        };
        let owner = |child: &str| json!({"kind": "Widget", "metadata": {"name": "w", "namespace": "d"}, "status": {"child": child}});
        let child = |name: &str| json!({"kind": "ConfigMap", "metadata": {"name": name, "generateName": "w-", "namespace": "d"}});
        let mut a = BTreeMap::new();
        a.insert(
            "main".to_owned(),
            vec![pod("x7b2q"), owner("w-abcde"), child("w-abcde")],
        );
        let mut b = BTreeMap::new();
        b.insert(
            "main".to_owned(),
            vec![pod("zz9kd"), owner("w-fghjk"), child("w-fghjk")],
        );
        assert_eq!(end_state_diff(&a, &b), "");
        // Uids are masked wherever they appear.
        let job = |uid: &str| {
            json!({"kind": "Job", "metadata": {"name": "j", "namespace": "d", "uid": uid,
            "labels": {"batch.kubernetes.io/controller-uid": uid}}})
        };
        let mut ja = BTreeMap::new();
        ja.insert(
            "main".to_owned(),
            vec![job("9485f562-67fa-4315-9059-4173c8cd5eb7")],
        );
        let mut jb = BTreeMap::new();
        jb.insert(
            "main".to_owned(),
            vec![job("de4af2b1-ef4e-4c05-8db8-bcf9c77c5b8f")],
        );
        assert_eq!(end_state_diff(&ja, &jb), "");
        // A name the plugin chose is not masked.
        b.insert(
            "main".to_owned(),
            vec![pod("zz9kd"), owner("w-other"), child("w-fghjk")],
        );
        assert!(end_state_diff(&a, &b).contains("Widget d/w differs"));
    }

    #[test]
    fn observed_generations_are_left_out_for_runs_of_other_histories() {
        let w = |generation: u64, observed: u64| {
            let finalizers = if generation > 1 {
                json!(["b", "a"])
            } else {
                json!(["a", "b"])
            };
            let taints = if generation > 1 {
                json!([{"key": "b"}, {"key": "a"}])
            } else {
                json!([{"key": "a"}, {"key": "b"}])
            };
            json!({"kind": "Widget", "metadata": {"name": "w", "namespace": "d", "generation": generation, "finalizers": finalizers}, "spec": {"taints": taints},
                "status": {"observedGeneration": observed, "conditions": [{"type": "Ready", "observedGeneration": observed}], "size": 1}})
        };
        let mut a = BTreeMap::new();
        a.insert("main".to_owned(), vec![w(5, 5)]);
        let mut b = BTreeMap::new();
        b.insert("main".to_owned(), vec![w(1, 1)]);
        assert!(
            !end_state_diff(&a, &b).is_empty(),
            "a plan's end state keeps them"
        );
        assert_eq!(
            end_state_diff(&without_history(&a), &without_history(&b)),
            ""
        );
    }

    #[test]
    fn emptied_maps_and_lists_are_left_out_for_runs_of_other_histories() {
        // A sequence of applies leaves `labels: {}` behind; the last
        // spec applied at once has none.
        let w = |spec: Value| {
            json!({"kind": "NodePool", "metadata": {"name": "p", "labels": {}}, "spec": spec,
                "status": {"nodes": []}})
        };
        let mut a = BTreeMap::new();
        a.insert(
            "main".to_owned(),
            vec![w(json!({"labels": {}, "taints": [{"key": "k", "x": {}}]}))],
        );
        let mut b = BTreeMap::new();
        b.insert(
            "main".to_owned(),
            vec![w(json!({"taints": [{"key": "k"}]}))],
        );
        assert!(!end_state_diff(&a, &b).is_empty());
        assert_eq!(
            end_state_diff(&without_history(&a), &without_history(&b)),
            ""
        );
        // A value is never left out.
        b.insert("main".to_owned(), vec![w(json!({"labels": {"a": "b"}}))]);
        assert!(!end_state_diff(&without_history(&a), &without_history(&b)).is_empty());
    }

    #[test]
    fn counts_name_the_object() {
        let mut a = BTreeMap::new();
        a.insert("main ConfigMap d/a".to_owned(), (1, 0));
        let mut b = a.clone();
        assert_eq!(counts_diff(&a, &b), "");
        b.insert("main ConfigMap d/a".to_owned(), (0, 0));
        assert_eq!(counts_diff(&a, &b), "", "fewer is no finding");
        b.insert("main ConfigMap d/a".to_owned(), (2, 1));
        assert!(
            counts_diff(&a, &b).contains("created 2 and deleted 1 time(s), the reference 1 and 0")
        );
    }
}
