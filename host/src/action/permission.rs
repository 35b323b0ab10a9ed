//! Which verb on which resource an action needs, and whether a plugin's
//! declared permissions cover it.
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
//! An apply of an absent object creates it. Apply does not demand `create`
//! (a plugin that labels Nodes must not need to be able to create Nodes);
//! the RBAC generated from the permissions grants only the declared verbs,
//! so the API server refuses an apply that would create without `create`.

use super::actions::Action;
use super::registration::Registration;
use super::resource::{
    ClusterInfo, Resource, describe_resource, resource_of_object, same_resource,
};

pub use rekon_rules::Verb;

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
            && p.clusters.contains(cluster, clusters)
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
/// (Events).
///
/// # Errors
/// An object without a parsable `apiVersion`/`kind`.
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

/// Explains which part of a permission is missing when [`permits`] says no.
#[must_use]
pub fn why_not(
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
