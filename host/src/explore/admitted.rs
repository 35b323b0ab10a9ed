//! The oracle **own writes admitted**: every write the plugin makes in the
//! reference run, of a resource and operation its own admission rules
//! cover, is reviewed by its own webhooks as the API server would send it
//! (the object as stored, the one before the write as the old object, through [`review::to_review`] and [`LoadedPlugin::review_blocking`],
//! reading the cluster's store). A write its own `validate` denies (or
//! whose call fails under a `Fail` policy) is a finding; so is an object
//! whose own `mutate` would change or remove a value the controller itself
//! sent, on more than one write (a controller and its defaulting fighting
//! over a field; a default added where the controller said nothing is
//! defaulting, not a fight).
//!
//! The reviews are made in the wire after the write is stored, on the
//! run's thread (the virtual clock does not move meanwhile); they are
//! observations only: nothing is refused or patched, so the run is the
//! same as without them. The scenario's CEL (CRD `x-kubernetes-validations`,
//! ValidatingAdmissionPolicies) is enforced by the embedded kube-sim store
//! itself: such a refusal is the writer's error, and one still there at
//! the end is a `fixed-point` finding.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use http::Method;
use kube_sim::SimCluster;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::action::{ClusterHealth, ClusterInfo, Resource};
use crate::admission::matching::rule_matches;
use crate::admission::review;
use crate::plugin::{
    AdmissionRule, Answer, FailurePolicy, HostReads, LoadedPlugin, Operation, ReadError,
};

use super::report::Finding;
use super::run::RunOutcome;

/// The oracle's name in the report.
pub const ORACLE: &str = "own-writes-admitted";

/// A mutation of the same object counted this often is a fight.
const FIGHT: usize = 2;

/// One write reviewed.
#[derive(Debug, Clone)]
pub struct Reviewed {
    /// `cluster Kind ns/name`.
    pub object: String,
    /// `CREATE` or `UPDATE`.
    pub operation: &'static str,
    /// The reconcile (ordinal) that wrote it.
    pub reconcile: usize,
    /// The webhook that denied it and why (also: a failed call under `Fail`).
    pub denied: Option<String>,
    /// The JSON Patch the plugin's own mutate would make of it.
    pub mutated: Option<String>,
}

/// The plugin's own admission, reviewing its writes during one run.
pub struct OwnAdmission {
    plugin: LoadedPlugin,
    rules: Vec<AdmissionRule>,
    reviewed: Mutex<Vec<Reviewed>>,
}

impl std::fmt::Debug for OwnAdmission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnAdmission")
            .field("plugin", &self.plugin.name())
            .finish_non_exhaustive()
    }
}

/// Where a write went: `/api[s]/[group/]version/[namespaces/ns/]plural[/name[/sub]]`.
#[derive(Debug, PartialEq)]
struct Target<'a> {
    group: &'a str,
    version: &'a str,
    namespace: Option<&'a str>,
    plural: &'a str,
    name: Option<&'a str>,
    sub: Option<&'a str>,
}

fn target(path: &str) -> Option<Target<'_>> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        _ => return None,
    };
    Some(Target {
        group,
        version,
        namespace,
        plural,
        name,
        sub,
    })
}

impl OwnAdmission {
    /// The admission of `plugin`; `None` when it declares no rule.
    #[must_use]
    pub fn new(plugin: &LoadedPlugin) -> Option<Self> {
        let rules = plugin.admission_rules().to_vec();
        (!rules.is_empty()).then(|| Self {
            plugin: plugin.clone(),
            rules,
            reviewed: Mutex::new(Vec::new()),
        })
    }

    /// The writes reviewed so far.
    #[must_use]
    pub fn reviewed(&self) -> Vec<Reviewed> {
        self.reviewed.lock().clone()
    }

    /// Whether a write of `method` to `path` may be reviewed (one of the
    /// plugin's rules covers its resource): its body is then kept.
    #[must_use]
    pub fn covers(&self, method: &Method, path: &str) -> bool {
        let Some(t) = target(path) else { return false };
        let resource = match t.sub {
            Some(sub) => format!("{}/{sub}", t.plural),
            None => t.plural.to_owned(),
        };
        matches!(*method, Method::POST | Method::PUT | Method::PATCH)
            && self.rules.iter().any(|r| {
                [Operation::Create, Operation::Update]
                    .into_iter()
                    .any(|o| rule_matches(r, t.group, &resource, o))
            })
    }

    /// The object a write to `path` is about to change, as stored (the old
    /// object of an update); `None` for a create or an object not there.
    #[must_use]
    pub fn before(sim: &SimCluster, path: &str) -> Option<Value> {
        let t = target(path)?;
        let api_version = if t.group.is_empty() {
            t.version.to_owned()
        } else {
            format!("{}/{}", t.group, t.version)
        };
        sim.get(&api_version, t.plural, t.namespace, t.name?).ok()
    }

    /// Reviews one successful write of the plugin (`sent`: the body the
    /// controller sent; `old`: the object before it, [`Self::before`];
    /// `stored`: the server's answer, the object as stored) when its rules
    /// cover it.
    #[allow(clippy::too_many_arguments)]
    pub fn review(
        &self,
        sim: &Arc<SimCluster>,
        cluster: &str,
        method: &Method,
        path: &str,
        status: u16,
        sent: &[u8],
        old: Option<Value>,
        stored: &[u8],
        reconcile: usize,
    ) {
        let operation = match *method {
            Method::POST => Operation::Create,
            Method::PUT => Operation::Update,
            Method::PATCH if status == 201 => Operation::Create,
            Method::PATCH => Operation::Update,
            _ => return,
        };
        let Some(t) = target(path) else { return };
        let resource = match t.sub {
            Some(sub) => format!("{}/{sub}", t.plural),
            None => t.plural.to_owned(),
        };
        let rules: Vec<&AdmissionRule> = self
            .rules
            .iter()
            .filter(|r| rule_matches(r, t.group, &resource, operation))
            .collect();
        if rules.is_empty() {
            return;
        }
        let Ok(object) = serde_json::from_slice::<Value>(stored) else {
            return;
        };
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
        let name = t.name.unwrap_or(text("/metadata/name")).to_owned();
        let kind = text("/kind").to_owned();
        let key = match t.namespace {
            Some(ns) => format!("{cluster} {kind} {ns}/{name}"),
            None => format!("{cluster} {kind} {name}"),
        };
        let operation_text = if operation == Operation::Create {
            "CREATE"
        } else {
            "UPDATE"
        };
        let old = if operation == Operation::Update {
            old
        } else {
            None
        };
        // The request the API server would send with `object`.
        let request_with = |object: &Value| {
            let review = json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {
                    "uid": format!("explore-{reconcile}"),
                    "kind": {"group": t.group, "version": t.version, "kind": kind},
                    "resource": {"group": t.group, "version": t.version, "resource": t.plural},
                    "subResource": t.sub,
                    "name": name, "namespace": t.namespace,
                    "operation": operation_text,
                    "userInfo": {"username": "rekon"},
                    "object": object,
                    "oldObject": old,
                    "dryRun": false
                }
            });
            review::parse(review.to_string().as_bytes()).ok()
        };
        // Validating webhooks see the object as the mutating ones left it.
        let mut current = object.clone();
        let reads: Arc<dyn HostReads> = Arc::new(StoreReads {
            sim: Arc::clone(sim),
            cluster: cluster.to_owned(),
        });
        let mut reviewed = Reviewed {
            object: key,
            operation: operation_text,
            reconcile,
            denied: None,
            mutated: None,
        };
        // The API server's order: mutating webhooks, then validating ones.
        let mut ordered = rules;
        ordered.sort_by_key(|r| !r.mutating());
        for rule in ordered {
            let webhook = rekon_rules::admission::webhook_name(&rule.name, self.plugin.name());
            let Some(request) = request_with(&current) else {
                break;
            };
            let answer = self.plugin.review_blocking(
                rule.kind,
                review::to_review(&request, cluster),
                Arc::clone(&reads),
            );
            match answer {
                Err(e) if rule.failure_policy == FailurePolicy::Fail => {
                    reviewed.denied = Some(format!(
                        "{webhook} failed ({e}); its failure policy Fail refuses the write"
                    ));
                }
                Err(_) => {}
                Ok(answer) => {
                    let (denial, wanted) = match answer {
                        Answer::Validated(v) => (v.denied, None),
                        Answer::Mutated(m) => (m.denied, m.object),
                    };
                    if let Some(d) = denial {
                        let mut text = format!("denied by {webhook} ({}): {}", d.code, d.message);
                        for f in &d.field_errors {
                            let _ = write!(text, " [{}: {}]", f.path, f.message);
                        }
                        reviewed.denied = Some(text);
                    } else if let Some(wanted) = wanted
                        .as_deref()
                        .and_then(|w| serde_json::from_str::<Value>(w).ok())
                    {
                        let sent = serde_json::from_slice::<Value>(sent).unwrap_or_default();
                        let fought = fought(&sent, &kube_json_patch::diff(&current, &wanted));
                        if !fought.is_empty() {
                            reviewed.mutated =
                                Some(format!("{webhook} changes {}", fought.join(", ")));
                        }
                        current = wanted;
                    }
                }
            }
            if reviewed.denied.is_some() {
                break;
            }
        }
        self.reviewed.lock().push(reviewed);
    }
}

/// The fields of `patch` (the plugin's own mutate of what was stored)
/// that change or remove a value the controller sent itself (`sent`: its
/// object, or its merge patch): a fight over a field. Fields it only adds
/// (defaults the controller left out) are defaulting, not a fight.
fn fought(sent: &Value, patch: &kube_json_patch::Patch) -> Vec<String> {
    use kube_json_patch::PatchOperation as Op;
    if !sent.is_object() {
        return Vec::new();
    }
    patch
        .0
        .iter()
        .filter_map(|op| match op {
            Op::Replace(r) => Some(r.path.to_string()),
            Op::Remove(r) => Some(r.path.to_string()),
            _ => None,
        })
        .filter(|p| sent.pointer(p).is_some_and(|v| !v.is_null()))
        .collect()
}

/// What an admission call reads during a review: the cluster's store as it
/// is at the write (kube-sim's in-process reads).
struct StoreReads {
    sim: Arc<SimCluster>,
    cluster: String,
}

impl HostReads for StoreReads {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        if cluster != self.cluster {
            return Err(ReadError::UnknownCluster(cluster.to_owned()));
        }
        match self
            .sim
            .get(&resource.api_version(), &resource.plural, namespace, name)
        {
            Ok(o) => Ok(Some(o.to_string())),
            Err(e) if e.code == 404 => Ok(None),
            Err(e) => Err(ReadError::NotWatched(e.message)),
        }
    }

    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        if cluster != self.cluster {
            return Err(ReadError::UnknownCluster(cluster.to_owned()));
        }
        self.sim
            .list(
                &resource.api_version(),
                &resource.plural,
                namespace,
                label_selector.unwrap_or(""),
            )
            .map(|items| items.iter().map(Value::to_string).collect())
            .map_err(|e| ReadError::NotWatched(e.message))
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        vec![ClusterInfo {
            name: self.cluster.clone(),
            primary: true,
            health: ClusterHealth::Ready,
        }]
    }
}

/// The oracle's findings on the reference's reviews: one for the writes
/// denied, one for the objects whose own mutate changed the controller's
/// write (a value the controller sent) [`FIGHT`] times or more.
#[must_use]
pub fn findings(reference: &RunOutcome) -> Vec<Finding> {
    let cases = |ordinals: &[usize]| {
        reference
            .trace
            .iter()
            .filter(|r| ordinals.contains(&r.ordinal))
            .take(3)
            .map(|r| r.case.clone())
            .collect()
    };
    let mut out = Vec::new();
    let denied: Vec<&Reviewed> = reference
        .admitted
        .iter()
        .filter(|r| r.denied.is_some())
        .collect();
    if !denied.is_empty() {
        // The same denial of the same object once, with every reconcile.
        let mut grouped: BTreeMap<(&str, &str, &str), Vec<usize>> = BTreeMap::new();
        for r in &denied {
            grouped
                .entry((
                    &r.object,
                    r.operation,
                    r.denied.as_deref().unwrap_or_default(),
                ))
                .or_default()
                .push(r.reconcile);
        }
        let mut diff = String::new();
        for ((object, operation, why), reconciles) in &grouped {
            let list: Vec<String> = reconciles.iter().map(|n| format!("#{n}")).collect();
            let _ = writeln!(
                diff,
                "{object} ({operation}, reconcile {}): {why}",
                list.join(", ")
            );
        }
        let ordinals: Vec<usize> = denied.iter().map(|r| r.reconcile).collect();
        out.push(Finding {
            plan: None,
            fault: format!(
                "no fault: {} write(s) of the plugin denied by its own admission",
                denied.len()
            ),
            oracle: ORACLE,
            also: Vec::new(),
            reconcile: denied.first().map(|r| format!("#{}", r.reconcile)),
            diff,
            cases: cases(&ordinals),
            dir: None,
        });
    }
    let mut mutated: BTreeMap<&str, Vec<&Reviewed>> = BTreeMap::new();
    for r in reference.admitted.iter().filter(|r| r.mutated.is_some()) {
        mutated.entry(&r.object).or_default().push(r);
    }
    mutated.retain(|_, writes| writes.len() >= FIGHT);
    if !mutated.is_empty() {
        let mut diff = String::new();
        let mut ordinals = Vec::new();
        for (object, writes) in &mutated {
            let _ = writeln!(
                diff,
                "{object}: {} of the plugin's writes changed by its own mutate; the last: {}",
                writes.len(),
                writes
                    .last()
                    .and_then(|r| r.mutated.as_deref())
                    .unwrap_or_default()
            );
            ordinals.extend(writes.iter().map(|r| r.reconcile));
        }
        out.push(Finding {
            plan: None,
            fault: format!(
                "no fault: the plugin's own mutate keeps changing what it writes ({} object(s))",
                mutated.len()
            ),
            oracle: ORACLE,
            also: Vec::new(),
            reconcile: None,
            diff,
            cases: cases(&ordinals),
            dir: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_path_names_its_target() {
        assert_eq!(
            target("/api/v1/namespaces/d/configmaps/c"),
            Some(Target {
                group: "",
                version: "v1",
                namespace: Some("d"),
                plural: "configmaps",
                name: Some("c"),
                sub: None
            })
        );
        let t = target("/apis/zoo.rekon.dev/v1/namespaces/d/widgets/w/status").unwrap();
        assert_eq!(
            (t.group, t.plural, t.sub),
            ("zoo.rekon.dev", "widgets", Some("status"))
        );
        let t = target("/apis/nodes.example/v1/nodepools").unwrap();
        assert_eq!((t.namespace, t.name), (None, None));
        assert_eq!(target("/version"), None);
    }

    #[test]
    fn a_fight_is_a_value_the_controller_sent_changed_not_a_default_added() {
        let sent =
            json!({"metadata": {"name": "c", "labels": {"tier": "gold"}}, "data": {"a": "1"}});
        let stored = json!({"metadata": {"name": "c", "uid": "u", "labels": {"tier": "gold"}}, "data": {"a": "1"}});
        // Defaulting what the controller left out: no fight.
        let mut defaulted = stored.clone();
        defaulted["data"]["b"] = json!("2");
        defaulted["metadata"]["labels"]["zone"] = json!("x");
        assert!(fought(&sent, &kube_json_patch::diff(&stored, &defaulted)).is_empty());
        // Changing or removing what it sent: a fight, by path.
        let mut changed = stored.clone();
        changed["metadata"]["labels"]["tier"] = json!("standard");
        changed["data"].as_object_mut().unwrap().remove("a");
        let mut got = fought(&sent, &kube_json_patch::diff(&stored, &changed));
        got.sort();
        assert_eq!(got, ["/data/a", "/metadata/labels/tier"]);
        // A server-set field the mutate drops is not the controller's.
        let mut dropped = stored;
        dropped["metadata"].as_object_mut().unwrap().remove("uid");
        assert!(
            fought(
                &sent,
                &kube_json_patch::diff(&json!({"metadata": {"uid": "u"}}), &dropped)
            )
            .is_empty()
        );
        // A JSON Patch sent (an array) says nothing of fields.
        assert!(
            fought(
                &json!([]),
                &kube_json_patch::diff(&json!({"a": 1}), &json!({}))
            )
            .is_empty()
        );
    }
}
