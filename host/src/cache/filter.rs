//! Shard-scoped caches: which objects a cache keeps when replicas split the
//! work.
//!
//! With sharding, a replica reconciles only the primaries of the shards it
//! holds. The objects a plugin watches through the **owner-labels** mapping
//! (a fan-out's Jobs in every cluster) name their primary in their labels,
//! so the replica can tell, for each one, whether it is the child of one of
//! its own primaries. A [`ShardFilter`] keeps exactly those, plus every
//! object that names no primary (the plugin may still read it: a Job with
//! a Test's name but no owner labels is someone else's, and seeing it is
//! how the plugin knows). With three replicas each holds about a third of
//! a fleet's children instead of all of them.
//!
//! The filter is part of a cache's identity ([`super::CacheManager`] keys
//! caches by cluster, resource and filter): when the held shards change,
//! the controller acquires a cache with the new filter, whose first list
//! brings in the gained shards' children (as events, so nothing of a
//! hand-over is lost), and drops the old one. The filter is applied on the
//! client, after the list and each watch event arrive: the API server has
//! no selector for "the hash of three labels modulo N", so every replica
//! still receives every event of the resource; what it keeps is its share.

use std::collections::BTreeSet;

use crate::action::OwnerLabels;
use crate::lease::shard::{ShardBy, shard_of};

use super::store::CachedObject;

/// Keep an object when the primary its owner labels name belongs to a
/// held shard, or when it names none.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShardFilter {
    /// The owner label keys of the watch.
    pub owner: OwnerLabels,
    /// Whether the plugin's primary kind is namespaced (an object's own
    /// namespace then stands in for a missing namespace label).
    pub primary_namespaced: bool,
    /// How keys map to shards.
    pub by: ShardBy,
    /// The number of shards.
    pub shards: u32,
    /// The shards held when the cache was acquired.
    pub held: BTreeSet<u32>,
}

impl ShardFilter {
    /// Whether a cache of `cluster` with this filter keeps `obj`.
    #[must_use]
    pub fn keeps(&self, cluster: &str, obj: &CachedObject) -> bool {
        match self.owner.primary_of(
            &obj.labels,
            cluster,
            obj.key.namespace(),
            self.primary_namespaced,
        ) {
            None => true,
            Some(p) => self.held.contains(&shard_of(
                self.by,
                self.shards,
                &p.cluster,
                p.namespace.as_deref(),
                &p.name,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::store::tests::obj;

    fn job(namespace: &str, labels: &[(&str, &str)]) -> CachedObject {
        (*obj(namespace, "t1", "1", labels)).clone()
    }

    fn filter(held: &[u32]) -> ShardFilter {
        ShardFilter {
            owner: OwnerLabels {
                cluster: "owner.cluster".into(),
                namespace: "owner.namespace".into(),
                name: "owner.name".into(),
            },
            primary_namespaced: true,
            by: ShardBy::Key,
            shards: 6,
            held: held.iter().copied().collect(),
        }
    }

    #[test]
    fn keeps_the_children_of_held_shards_and_what_names_no_primary() {
        let owned = job(
            "ns",
            &[
                ("owner.cluster", "main"),
                ("owner.namespace", "ns"),
                ("owner.name", "t1"),
            ],
        );
        let shard = shard_of(ShardBy::Key, 6, "main", Some("ns"), "t1");
        let others: Vec<u32> = (0..6).filter(|s| *s != shard).collect();
        // In a member cluster, named by its labels: the primary's shard decides.
        assert!(filter(&[shard]).keeps("m1", &owned));
        assert!(!filter(&others).keeps("m1", &owned));
        // No owner name: names no primary, kept by every replica.
        let unowned = job("ns", &[("team", "x"), ("owner.cluster", "main")]);
        assert!(filter(&[]).keeps("m1", &unowned));
        // Missing cluster and namespace labels: the object's own cluster and
        // namespace stand in, as for the mapping.
        let local = job("ns", &[("owner.name", "t1")]);
        assert!(filter(&[shard]).keeps("main", &local));
        assert!(!filter(&others).keeps("main", &local));
        // By cluster: the primary's cluster decides, whatever the name.
        let by_cluster = ShardFilter {
            by: ShardBy::Cluster,
            held: [shard_of(ShardBy::Cluster, 6, "main", None, "")].into(),
            ..filter(&[])
        };
        assert!(by_cluster.keeps("m1", &owned));
    }
}
