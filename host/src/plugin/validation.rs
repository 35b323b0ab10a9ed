//! Load-time validation of what `register` returned: the registration is
//! converted into `rekon_rules::registration::Spec` and checked with the
//! same rules the SDK applies at `register()` and in its test kit, so a
//! plugin that passed its native tests is not refused here.

use rekon_rules::registration as rules;

use crate::action::{ClusterSet, Mapping, Registration, Resource};

/// A registration the shared rules refuse: every problem found (shown
/// joined with `; `).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .problems.join("; "))]
pub struct InvalidRegistration {
    /// Each problem, as `rekon_rules::registration::problems` words it.
    pub problems: Vec<String>,
}

/// Checks a registration as the host does when it loads a plugin (its
/// CRDs' `x-kubernetes-validations` rules compiled with kube-cel,
/// `rekon_rules::cel`, as the API server compiles them); logs
/// what it accepts with a warning (a finalizer without a domain prefix).
///
/// # Errors
/// [`InvalidRegistration`], with every problem found.
pub fn validate_registration(reg: &Registration) -> Result<(), InvalidRegistration> {
    let spec = spec(reg);
    // Accepted, as Kubernetes accepts it, with the API server's warning.
    for warning in rules::warnings(&spec) {
        tracing::warn!(plugin = %reg.name, "{warning}");
    }
    let mut problems = rules::problems(&spec);
    // Every CRD rule compiles, as the API server requires of the CRD.
    for text in &reg.crds {
        if let Ok(crd) = serde_json::from_str::<serde_json::Value>(text) {
            problems.extend(rekon_rules::cel::crd_rule_problems(&crd));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(InvalidRegistration { problems })
    }
}

fn spec(reg: &Registration) -> rules::Spec {
    rules::Spec {
        name: reg.name.clone(),
        version: reg.version.clone(),
        primary: resource(&reg.primary),
        primary_clusters: clusters(&reg.primary_clusters),
        primary_selector: reg.primary_selector.clone(),
        clusters: clusters(&reg.clusters),
        watches: reg
            .watches
            .iter()
            .map(|w| rules::Watch {
                resource: resource(&w.resource),
                clusters: clusters(&w.clusters),
                mapping: match &w.mapping {
                    Mapping::OwnerLabels(k) => rules::Mapping::OwnerLabels {
                        cluster: k.cluster.clone(),
                        namespace: k.namespace.clone(),
                        name: k.name.clone(),
                    },
                    Mapping::LabelKeyPrefixes(p) => rules::Mapping::LabelKeyPrefixes(p.clone()),
                    Mapping::Itself
                    | Mapping::OwnerReference
                    | Mapping::AllPrimaries
                    | Mapping::Custom => rules::Mapping::Plain,
                },
                label_selector: w.label_selector.clone(),
            })
            .collect(),
        finalizer: reg.finalizer.clone(),
        permissions: reg
            .permissions
            .iter()
            .map(|p| rules::Permission {
                resource: resource(&p.resource),
                verbs: p.verbs.clone(),
                clusters: clusters(&p.clusters),
            })
            .collect(),
        crds: reg
            .crds
            .iter()
            .map(
                |text| match serde_json::from_str::<serde_json::Value>(text) {
                    Ok(serde_json::Value::Object(o)) => rules::Crd::Parsed(
                        o.get("kind").and_then(|k| k.as_str()).map(str::to_owned),
                    ),
                    Ok(_) => rules::Crd::Unreadable("not a JSON object".to_owned()),
                    Err(e) => rules::Crd::Unreadable(e.to_string()),
                },
            )
            .collect(),
        crd_names: reg
            .crds
            .iter()
            .filter_map(|text| serde_json::from_str::<serde_json::Value>(text).ok())
            .filter_map(|crd| {
                rules::CrdNames::read(|path| {
                    path.iter()
                        .try_fold(&crd, |v, k| v.get(k))
                        .and_then(|v| v.as_str())
                        .map(str::to_owned)
                })
            })
            .collect(),
        max_concurrent_reconciles: reg.max_concurrent_reconciles,
    }
}

fn resource(r: &Resource) -> rules::Resource {
    rules::Resource::new(&r.group, &r.version, &r.kind).declared(
        &r.plural,
        matches!(r.scope, crate::action::Scope::Namespaced),
    )
}

fn clusters(c: &ClusterSet) -> rules::Clusters {
    match c {
        ClusterSet::Primary => rules::Clusters::Primary,
        ClusterSet::All => rules::Clusters::All,
        ClusterSet::Others => rules::Clusters::Others,
        ClusterSet::Named(n) => rules::Clusters::Named(n.clone()),
    }
}
