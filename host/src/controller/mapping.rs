//! The native mappings: how an event on a watched object becomes requests
//! for primaries. Pure functions of the event; `custom` is the plugin's
//! `map` export and `all-primaries` reads the primary caches, both handled
//! by the controller.

use crate::action::{Mapping, OwnerLabels};
use crate::cache::{CacheEvent, CachedObject, ResourceId};

use crate::queue::ReqKey;

/// What a mapping asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Mapped {
    /// These keys (possibly none).
    Keys(Vec<ReqKey>),
    /// Every primary of the plugin.
    AllPrimaries,
    /// Ask the plugin's `map` export.
    Custom,
}

/// Map one cache event with a native mapping. `primary` is the plugin's
/// primary resource. The caller filters keys to the clusters whose primaries
/// the plugin reconciles. Mappings that read the object (owner reference,
/// owner labels, label keys) map its previous state too, so a primary it
/// stopped naming is woken once more.
#[must_use]
pub fn map_event(mapping: &Mapping, event: &CacheEvent, primary: &ResourceId) -> Mapped {
    match mapping {
        Mapping::Itself | Mapping::AllPrimaries | Mapping::Custom => {
            map_object(mapping, event, &event.object, primary)
        }
        _ => {
            let Mapped::Keys(mut keys) = map_object(mapping, event, &event.object, primary) else {
                unreachable!("object mappings map to keys")
            };
            if let Some(old) = &event.old
                && let Mapped::Keys(before) = map_object(mapping, event, old, primary)
            {
                for k in before {
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
            }
            Mapped::Keys(keys)
        }
    }
}

fn map_object(
    mapping: &Mapping,
    event: &CacheEvent,
    obj: &CachedObject,
    primary: &ResourceId,
) -> Mapped {
    match mapping {
        Mapping::Itself => Mapped::Keys(vec![ReqKey {
            cluster: event.cluster.to_string(),
            namespace: obj.key.namespace().map(str::to_owned),
            name: obj.key.name.to_string(),
        }]),
        Mapping::OwnerReference => {
            let keys = obj
                .controller
                .as_ref()
                .filter(|owner| {
                    owner.kind == primary.kind && group_of(&owner.api_version) == primary.group
                })
                .map(|owner| ReqKey {
                    cluster: event.cluster.to_string(),
                    namespace: if primary.namespaced {
                        obj.key.namespace().map(str::to_owned)
                    } else {
                        None
                    },
                    name: owner.name.clone(),
                })
                .into_iter()
                .collect();
            Mapped::Keys(keys)
        }
        Mapping::OwnerLabels(labels) => Mapped::Keys(
            owner_labels(labels, event, obj, primary)
                .into_iter()
                .collect(),
        ),
        Mapping::LabelKeyPrefixes(prefixes) => Mapped::Keys(
            obj.labels
                .keys()
                .filter_map(|k| prefixes.iter().find_map(|p| k.strip_prefix(p.as_str())))
                .filter(|name| !name.is_empty())
                .map(|name| ReqKey {
                    cluster: event.cluster.to_string(),
                    namespace: if primary.namespaced {
                        obj.key.namespace().map(str::to_owned)
                    } else {
                        None
                    },
                    name: name.to_owned(),
                })
                .collect(),
        ),
        Mapping::AllPrimaries => Mapped::AllPrimaries,
        Mapping::Custom => Mapped::Custom,
    }
}

fn owner_labels(
    keys: &OwnerLabels,
    event: &CacheEvent,
    obj: &CachedObject,
    primary: &ResourceId,
) -> Option<ReqKey> {
    keys.primary_of(
        &obj.labels,
        &event.cluster,
        obj.key.namespace(),
        primary.namespaced,
    )
    .map(|r| ReqKey {
        cluster: r.cluster,
        namespace: r.namespace,
        name: r.name,
    })
}

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CachedObject, Change, ObjectKey};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::sync::Arc;

    fn test_kind() -> ResourceId {
        ResourceId {
            group: "job.lailin.xyz".into(),
            version: "v1".into(),
            kind: "Test".into(),
            plural: String::new(),
            namespaced: true,
        }
    }

    fn event(
        cluster: &str,
        labels: &[(&str, &str)],
        owner: Option<(&str, &str, &str)>,
    ) -> CacheEvent {
        CacheEvent {
            cluster: Arc::from(cluster),
            resource: Arc::new(ResourceId {
                group: "batch".into(),
                version: "v1".into(),
                kind: "Job".into(),
                plural: "jobs".into(),
                namespaced: true,
            }),
            change: Change::Applied,
            object: Arc::new(CachedObject {
                key: ObjectKey::new(Some("ns1"), "job1"),
                uid: None,
                resource_version: None,
                labels: labels
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
                controller: owner.map(|(api_version, kind, name)| OwnerReference {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    name: name.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }),
                finalizers: vec![],
                deleting: false,
                json: Arc::from("{}"),
            }),
            old: None,
        }
    }

    fn key(cluster: &str, ns: Option<&str>, name: &str) -> ReqKey {
        ReqKey {
            cluster: cluster.into(),
            namespace: ns.map(Into::into),
            name: name.into(),
        }
    }

    #[test]
    fn itself_keeps_the_cluster() {
        let e = event("edge", &[], None);
        assert_eq!(
            map_event(&Mapping::Itself, &e, &test_kind()),
            Mapped::Keys(vec![key("edge", Some("ns1"), "job1")])
        );
    }

    #[test]
    fn owner_reference_requires_the_primary_kind() {
        let primary = test_kind();
        let e = event("main", &[], Some(("job.lailin.xyz/v1", "Test", "t1")));
        assert_eq!(
            map_event(&Mapping::OwnerReference, &e, &primary),
            Mapped::Keys(vec![key("main", Some("ns1"), "t1")])
        );
        let other_group = event("main", &[], Some(("other.io/v1", "Test", "t1")));
        assert_eq!(
            map_event(&Mapping::OwnerReference, &other_group, &primary),
            Mapped::Keys(vec![])
        );
        let other_kind = event("main", &[], Some(("job.lailin.xyz/v1", "Other", "t1")));
        assert_eq!(
            map_event(&Mapping::OwnerReference, &other_kind, &primary),
            Mapped::Keys(vec![])
        );
        let none = event("main", &[], None);
        assert_eq!(
            map_event(&Mapping::OwnerReference, &none, &primary),
            Mapped::Keys(vec![])
        );
        // cluster-scoped primary: no namespace in the key
        let pool = ResourceId {
            group: "nodes.lailin.xyz".into(),
            kind: "NodePool".into(),
            namespaced: false,
            ..test_kind()
        };
        let e = event("main", &[], Some(("nodes.lailin.xyz/v1", "NodePool", "p")));
        assert_eq!(
            map_event(&Mapping::OwnerReference, &e, &pool),
            Mapped::Keys(vec![key("main", None, "p")])
        );
    }

    #[test]
    fn owner_labels_cross_clusters() {
        let m = Mapping::OwnerLabels(OwnerLabels {
            cluster: "owner.cluster".into(),
            namespace: "owner.namespace".into(),
            name: "owner.name".into(),
        });
        let e = event(
            "edge",
            &[
                ("owner.cluster", "main"),
                ("owner.namespace", "tests"),
                ("owner.name", "t1"),
            ],
            None,
        );
        assert_eq!(
            map_event(&m, &e, &test_kind()),
            Mapped::Keys(vec![key("main", Some("tests"), "t1")])
        );
        // no name label: not ours
        let e = event("edge", &[("owner.cluster", "main")], None);
        assert_eq!(map_event(&m, &e, &test_kind()), Mapped::Keys(vec![]));
        // no cluster label: the event's cluster; no namespace label: the object's
        let e = event("edge", &[("owner.name", "t2")], None);
        assert_eq!(
            map_event(&m, &e, &test_kind()),
            Mapped::Keys(vec![key("edge", Some("ns1"), "t2")])
        );
    }

    #[test]
    fn label_key_prefixes_name_primaries_now_and_before() {
        let pool = ResourceId {
            group: "nodes.lailin.xyz".into(),
            kind: "NodePool".into(),
            namespaced: false,
            ..test_kind()
        };
        let m = Mapping::LabelKeyPrefixes(vec![
            "node-role.kubernetes.io/".into(),
            "applied.nodes.lailin.xyz/".into(),
        ]);
        let mut e = event(
            "main",
            &[
                ("node-role.kubernetes.io/gpu", ""),
                ("node-role.kubernetes.io/", ""),
                ("applied.nodes.lailin.xyz/batch", "true"),
                ("team", "a"),
            ],
            None,
        );
        assert_eq!(
            map_event(&m, &e, &pool),
            Mapped::Keys(vec![key("main", None, "batch"), key("main", None, "gpu")])
        );
        // Left pool `old` since the previous state: it is woken once more.
        let before = event("main", &[("node-role.kubernetes.io/old", "")], None);
        e.old = Some(Arc::clone(&before.object));
        assert_eq!(
            map_event(&m, &e, &pool),
            Mapped::Keys(vec![
                key("main", None, "batch"),
                key("main", None, "gpu"),
                key("main", None, "old")
            ])
        );
    }

    #[test]
    fn owner_labels_map_the_previous_owner_too() {
        let m = Mapping::OwnerLabels(OwnerLabels {
            cluster: "owner.cluster".into(),
            namespace: "owner.namespace".into(),
            name: "owner.name".into(),
        });
        let mut e = event("edge", &[("owner.name", "t2")], None);
        let before = event("edge", &[("owner.name", "t1")], None);
        e.old = Some(Arc::clone(&before.object));
        assert_eq!(
            map_event(&m, &e, &test_kind()),
            Mapped::Keys(vec![
                key("edge", Some("ns1"), "t2"),
                key("edge", Some("ns1"), "t1")
            ])
        );
    }

    #[test]
    fn all_primaries_and_custom_are_deferred() {
        let e = event("main", &[], None);
        assert_eq!(
            map_event(&Mapping::AllPrimaries, &e, &test_kind()),
            Mapped::AllPrimaries
        );
        assert_eq!(
            map_event(&Mapping::Custom, &e, &test_kind()),
            Mapped::Custom
        );
    }
}
