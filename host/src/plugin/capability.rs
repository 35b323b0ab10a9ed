//! Capability checks: every action a plugin returns must be covered by a
//! permission it declared in its registration (resource, verb, status
//! subresource, cluster). One uncovered action refuses the whole outcome.
//!
//! Verbs required per action:
//!
//! | action          | verb     | notes                                            |
//! |-----------------|----------|--------------------------------------------------|
//! | apply           | `patch`  | server-side apply is a PATCH; see below          |
//! | apply (status)  | `patch`  | on a permission with `status: true`              |
//! | patch           | `patch`  | `status: true` permission for status patches     |
//! | delete          | `delete` |                                                  |
//! | create          | `create` |                                                  |
//! | event           | —        | events.k8s.io Events are always allowed          |
//!
//! An apply of an absent object creates it. The check does not demand
//! `create` for apply (a plugin that labels Nodes must not need to be able
//! to create Nodes); instead the RBAC generated from the permissions grants
//! only the declared verbs, and the API server refuses an apply that would
//! create without `create`. [`permits`] lets the writer ask the same question
//! before it applies.
//!
//! An action the declared permissions cover is then checked against the
//! operator policy ([`super::policy`]), when one applies to the plugin: the
//! operator can only narrow what a plugin declared, never widen it.

use super::bindings::types::{Action, ClusterInfo, ClusterSet, Outcome, Registration, Resource};
use super::error::CallError;
use super::policy::PluginPolicy;

pub use rekon_rules::Verb;

/// `Node`, `Job.batch`, `NodePool.nodes.lailin.xyz`.
pub fn describe_resource(r: &Resource) -> String {
    let kind = if r.kind.is_empty() {
        &r.plural
    } else {
        &r.kind
    };
    if r.group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{}", r.group)
    }
}

/// Same resource type: same group, and same kind (or, when a side gives no
/// kind, the same plural). Versions are not compared: permissions hold for
/// every version of a type, like RBAC.
fn same_resource(declared: &Resource, wanted: &Resource) -> bool {
    if declared.group != wanted.group {
        return false;
    }
    if !declared.kind.is_empty() && !wanted.kind.is_empty() {
        return declared.kind == wanted.kind;
    }
    !declared.plural.is_empty() && declared.plural == wanted.plural
}

/// Whether `cluster` belongs to `set`, with the primary resolved from
/// `clusters`.
fn in_cluster_set(set: &ClusterSet, cluster: &str, clusters: &[ClusterInfo]) -> bool {
    match set {
        ClusterSet::All => true,
        ClusterSet::Primary => clusters.iter().any(|c| c.primary && c.name == cluster),
        ClusterSet::Others => clusters.iter().any(|c| !c.primary && c.name == cluster),
        ClusterSet::Named(names) => names.iter().any(|n| n == cluster),
    }
}

/// Whether the registration permits `verb` on `resource` (its status
/// subresource when `status`) in `cluster`.
#[must_use]
pub fn permits(
    registration: &Registration,
    resource: &Resource,
    verb: Verb,
    status: bool,
    cluster: &str,
    clusters: &[ClusterInfo],
) -> bool {
    registration.permissions.iter().any(|p| {
        same_resource(&p.resource, resource)
            && (!status || p.status)
            && p.verbs.iter().any(|v| v == verb.as_str())
            && in_cluster_set(&p.clusters, cluster, clusters)
    })
}

/// What one action needs from the permissions.
#[derive(Debug, Clone, PartialEq)]
pub struct Required {
    /// `apply`, `status apply`, `patch`, `status patch`, `delete`, `create`.
    pub action: &'static str,
    /// The resource type written.
    pub resource: Resource,
    /// The verb needed.
    pub verb: Verb,
    /// On the status subresource.
    pub status: bool,
    /// In this cluster.
    pub cluster: String,
}

/// What an action needs; `None` for actions that are always allowed
/// (Events). An object without a parsable `apiVersion`/`kind` is an error
/// message.
pub fn required_permission(action: &Action) -> Result<Option<Required>, String> {
    let (action, resource, verb, status, cluster) = match action {
        Action::Apply(a) => {
            let resource = resource_of_object(&a.object)?;
            let label = if a.status { "status apply" } else { "apply" };
            (label, resource, Verb::Patch, a.status, a.cluster.clone())
        }
        Action::Patch(p) => {
            let label = if p.status { "status patch" } else { "patch" };
            (
                label,
                p.target.resource.clone(),
                Verb::Patch,
                p.status,
                p.target.cluster.clone(),
            )
        }
        Action::Delete(d) => (
            "delete",
            d.target.resource.clone(),
            Verb::Delete,
            false,
            d.target.cluster.clone(),
        ),
        Action::Create(c) => (
            "create",
            resource_of_object(&c.object)?,
            Verb::Create,
            false,
            c.cluster.clone(),
        ),
        Action::Event(_) => return Ok(None),
    };
    Ok(Some(Required {
        action,
        resource,
        verb,
        status,
        cluster,
    }))
}

/// The resource type of a JSON object, from `apiVersion` and `kind`.
fn resource_of_object(object: &str) -> Result<Resource, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct TypeMeta {
        api_version: Option<String>,
        kind: Option<String>,
    }
    let meta: TypeMeta =
        serde_json::from_str(object).map_err(|e| format!("object is not a JSON object: {e}"))?;
    let (Some(api_version), Some(kind)) = (meta.api_version, meta.kind) else {
        return Err("object has no apiVersion and kind".to_string());
    };
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version),
    };
    Ok(Resource {
        group,
        version,
        kind,
        plural: String::new(),
        // Scope does not take part in the comparison.
        scope: super::Scope::Namespaced,
    })
}

/// Checks every action of `outcome`; the first uncovered one refuses it.
#[cfg(test)]
pub(crate) fn check_outcome(
    plugin: &str,
    registration: &Registration,
    outcome: &Outcome,
    clusters: &[ClusterInfo],
) -> Result<(), CallError> {
    check_outcome_with_policy(plugin, registration, None, outcome, clusters)
}

/// Checks every action of `outcome` against the declared permissions and
/// then the operator `policy` (if one applies to the plugin); the first
/// action that either refuses fails the whole outcome.
pub(crate) fn check_outcome_with_policy(
    plugin: &str,
    registration: &Registration,
    policy: Option<&PluginPolicy>,
    outcome: &Outcome,
    clusters: &[ClusterInfo],
) -> Result<(), CallError> {
    for action in &outcome.actions {
        check_action_with_policy(plugin, registration, policy, action, clusters)?;
    }
    Ok(())
}

/// Checks one action against the declared permissions and then the
/// operator `policy`: the writer's last gate, and the per-action step of
/// [`check_outcome_with_policy`].
pub(crate) fn check_action_with_policy(
    plugin: &str,
    registration: &Registration,
    policy: Option<&PluginPolicy>,
    action: &Action,
    clusters: &[ClusterInfo],
) -> Result<(), CallError> {
    {
        let required = required_permission(action).map_err(|reason| CallError::Forbidden {
            plugin: plugin.to_string(),
            action: action_label(action).to_string(),
            resource: "<unknown>".to_string(),
            cluster: crate::writer::action_cluster(action).to_string(),
            reason,
        })?;
        let Some(Required {
            action: label,
            resource,
            verb,
            status,
            cluster,
        }) = required
        else {
            return Ok(());
        };
        // The plugin's own declaration first, then the operator's policy.
        let refusal = if permits(registration, &resource, verb, status, &cluster, clusters) {
            policy
                .and_then(|p| p.refusal(&resource, verb, &cluster))
                .map(|reason| ("operator policy refused a plugin action", reason))
        } else {
            Some((
                "refused a plugin action outside its permissions",
                why_not(registration, &resource, verb, status, &cluster, clusters),
            ))
        };
        if let Some((what, reason)) = refusal {
            tracing::warn!(
                plugin,
                action = label,
                resource = %describe_resource(&resource),
                cluster = %cluster,
                reason = %reason,
                "{what}"
            );
            return Err(CallError::Forbidden {
                plugin: plugin.to_string(),
                action: label.to_string(),
                resource: describe_resource(&resource),
                cluster,
                reason,
            });
        }
    }
    Ok(())
}

/// Explains which part of the permission is missing.
fn why_not(
    registration: &Registration,
    resource: &Resource,
    verb: Verb,
    status: bool,
    cluster: &str,
    clusters: &[ClusterInfo],
) -> String {
    let matching: Vec<_> = registration
        .permissions
        .iter()
        .filter(|p| same_resource(&p.resource, resource))
        .collect();
    let what = describe_resource(resource);
    if matching.is_empty() {
        return format!("no permission declared for {what}");
    }
    let with_verb: Vec<_> = matching
        .iter()
        .filter(|p| p.verbs.iter().any(|v| v == verb.as_str()))
        .collect();
    if with_verb.is_empty() {
        return format!("verb {} is not declared for {what}", verb.as_str());
    }
    if status && !with_verb.iter().any(|p| p.status) {
        return format!(
            "verb {} is declared for {what} but not for its status subresource",
            verb.as_str()
        );
    }
    let primary = clusters
        .iter()
        .find(|c| c.primary)
        .map_or("<none engaged>", |c| c.name.as_str());
    format!(
        "{} on {what} is not declared for cluster {cluster} (primary is {primary})",
        verb.as_str()
    )
}

/// `apply`, `patch`, `delete`, `create` or `event`.
pub(crate) fn action_label(action: &Action) -> &'static str {
    match action {
        Action::Apply(_) => "apply",
        Action::Patch(_) => "patch",
        Action::Delete(_) => "delete",
        Action::Create(_) => "create",
        Action::Event(_) => "event",
    }
}

#[cfg(test)]
mod tests {
    use super::super::bindings::types::*;
    use super::*;

    fn res(group: &str, kind: &str) -> Resource {
        Resource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: String::new(),
            scope: Scope::Namespaced,
        }
    }

    fn reg(permissions: Vec<Permission>) -> Registration {
        Registration {
            name: "t".into(),
            version: "1.0.0".into(),
            primary: res("job.lailin.xyz", "Test"),
            primary_clusters: ClusterSet::Primary,
            primary_selector: None,
            clusters: ClusterSet::All,
            watches: vec![],
            finalizer: None,
            permissions,
            crds: vec![],
            max_concurrent_reconciles: None,
        }
    }

    fn clusters() -> Vec<ClusterInfo> {
        vec![
            ClusterInfo {
                name: "main".into(),
                primary: true,
                health: ClusterHealth::Ready,
            },
            ClusterInfo {
                name: "sub".into(),
                primary: false,
                health: ClusterHealth::Ready,
            },
        ]
    }

    fn outcome(actions: Vec<Action>) -> Outcome {
        Outcome {
            actions,
            requeue_after_ms: None,
            finalized: false,
        }
    }

    fn job_apply(cluster: &str, status: bool) -> Action {
        Action::Apply(ApplyAction {
            cluster: cluster.into(),
            object: r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"a"}}"#.into(),
            status,
            force: false,
        })
    }

    #[test]
    fn apply_needs_patch_in_the_right_cluster() {
        let r = reg(vec![Permission {
            resource: res("batch", "Job"),
            verbs: vec!["create".into(), "patch".into()],
            status: false,
            clusters: ClusterSet::Primary,
        }]);
        assert!(
            check_outcome(
                "t",
                &r,
                &outcome(vec![job_apply("main", false)]),
                &clusters()
            )
            .is_ok()
        );
        let err = check_outcome(
            "t",
            &r,
            &outcome(vec![job_apply("sub", false)]),
            &clusters(),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("plugin t") && text.contains("Job.batch") && text.contains("sub"),
            "{text}"
        );
        // status apply needs a status permission
        let err = check_outcome(
            "t",
            &r,
            &outcome(vec![job_apply("main", true)]),
            &clusters(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("status subresource"), "{err}");
    }

    #[test]
    fn delete_and_events() {
        let r = reg(vec![Permission {
            resource: res("", "Node"),
            verbs: vec!["patch".into()],
            status: false,
            clusters: ClusterSet::All,
        }]);
        let target = ObjectRef {
            cluster: "sub".into(),
            resource: res("", "Node"),
            namespace: None,
            name: "n1".into(),
        };
        let delete = Action::Delete(DeleteAction {
            target: target.clone(),
            uid: None,
            propagation: None,
        });
        let err = check_outcome("t", &r, &outcome(vec![delete]), &clusters()).unwrap_err();
        assert!(
            matches!(err, CallError::Forbidden { ref action, .. } if action == "delete"),
            "{err}"
        );
        let event = Action::Event(EventAction {
            regarding: target,
            event_type: EventType::Normal,
            reason: "R".into(),
            action: "A".into(),
            note: "n".into(),
        });
        assert!(check_outcome("t", &r, &outcome(vec![event]), &clusters()).is_ok());
    }

    #[test]
    fn named_clusters_and_unknown_objects() {
        let r = reg(vec![Permission {
            resource: res("batch", "Job"),
            verbs: vec!["create".into()],
            status: false,
            clusters: ClusterSet::Named(vec!["sub".into()]),
        }]);
        let create = |cluster: &str, object: &str| {
            outcome(vec![Action::Create(CreateAction {
                cluster: cluster.into(),
                object: object.into(),
            })])
        };
        let job = r#"{"apiVersion":"batch/v1","kind":"Job"}"#;
        assert!(check_outcome("t", &r, &create("sub", job), &clusters()).is_ok());
        assert!(check_outcome("t", &r, &create("main", job), &clusters()).is_err());
        assert!(check_outcome("t", &r, &create("sub", r#"{"kind":"Job"}"#), &clusters()).is_err());
        let cm = r#"{"apiVersion":"v1","kind":"ConfigMap"}"#;
        let err = check_outcome("t", &r, &create("sub", cm), &clusters()).unwrap_err();
        assert!(
            err.to_string()
                .contains("no permission declared for ConfigMap"),
            "{err}"
        );
    }

    #[test]
    fn others_means_every_engaged_cluster_but_the_primary() {
        let r = reg(vec![Permission {
            resource: res("batch", "Job"),
            verbs: vec!["create".into()],
            status: false,
            clusters: ClusterSet::Others,
        }]);
        let create = |cluster: &str| {
            outcome(vec![Action::Create(CreateAction {
                cluster: cluster.into(),
                object: r#"{"apiVersion":"batch/v1","kind":"Job"}"#.into(),
            })])
        };
        assert!(check_outcome("t", &r, &create("sub"), &clusters()).is_ok());
        let err = check_outcome("t", &r, &create("main"), &clusters()).unwrap_err();
        assert!(err.to_string().contains("primary is main"), "{err}");
        assert!(check_outcome("t", &r, &create("gone"), &clusters()).is_err());
    }

    #[test]
    fn operator_policy_narrows_declared_permissions() {
        let r = reg(vec![Permission {
            resource: res("batch", "Job"),
            verbs: vec!["create".into(), "patch".into()],
            status: false,
            clusters: ClusterSet::All,
        }]);
        let policy = crate::plugin::Policy::from_yaml(
            "plugins: {t: {clusters: [main], deny: [{group: batch, kind: Job, verbs: [create]}]}}",
            "/etc/rekon/policy.yaml",
        )
        .unwrap()
        .for_plugin("t")
        .unwrap();
        let check = |actions| {
            check_outcome_with_policy("t", &r, Some(&policy), &outcome(actions), &clusters())
        };
        assert!(check(vec![job_apply("main", false)]).is_ok());
        // Declared for every cluster, but the operator allows only main.
        let err = check(vec![job_apply("sub", false)]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("plugin t")
                && text.contains("apply of Job.batch in cluster sub")
                && text.contains("refused by operator policy /etc/rekon/policy.yaml"),
            "{text}"
        );
        let create = Action::Create(CreateAction {
            cluster: "main".into(),
            object: r#"{"apiVersion":"batch/v1","kind":"Job"}"#.into(),
        });
        let err = check(vec![job_apply("main", false), create]).unwrap_err();
        assert!(
            matches!(&err, CallError::Forbidden { action, reason, .. }
                if action == "create" && reason.contains("denies create on Job.batch")),
            "{err}"
        );
        assert!(!err.is_retryable());
        // The declared check comes first: the policy never widens.
        let cm = Action::Create(CreateAction {
            cluster: "main".into(),
            object: r#"{"apiVersion":"v1","kind":"ConfigMap"}"#.into(),
        });
        let err = check(vec![cm]).unwrap_err();
        assert!(err.to_string().contains("no permission declared"), "{err}");
    }
}
