//! Capability checks: every action a plugin returns must be covered by a
//! permission it declared in its registration (resource, verb, status
//! subresource, cluster; which verb an action needs is
//! [`crate::action::permission`]'s table). One uncovered action refuses the
//! whole outcome.
//!
//! An action the declared permissions cover is then checked against the
//! operator policy ([`super::policy`]), when one applies to the plugin: the
//! operator can only narrow what a plugin declared, never widen it.

use crate::action::{
    Action, ClusterInfo, Outcome, Registration, Required, action_cluster, action_label,
    describe_resource, permits, required_permission, why_not,
};

use super::error::CallError;
use super::policy::PluginPolicy;

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
            cluster: action_cluster(action).to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::*;

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
