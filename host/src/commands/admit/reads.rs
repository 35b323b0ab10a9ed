//! What a plugin reads during `rekon plugin admit --objects FILE...`: the
//! objects given, as the host's caches of one cluster would serve them
//! (any kind, matched by group and kind; a list filtered by namespace and
//! label selector, in name order).

use crate::action::{ClusterHealth, ClusterInfo, Resource};
use crate::plugin::{HostReads, ReadError};
use serde_json::Value;

/// The objects of `--objects`, served as the caches of `cluster`.
#[derive(Debug, Clone)]
pub struct ObjectReads {
    cluster: String,
    objects: Vec<Value>,
}

impl ObjectReads {
    /// The objects, read as cluster `cluster`'s.
    #[must_use]
    pub fn new(cluster: &str, mut objects: Vec<Value>) -> Self {
        objects.sort_by_key(|o| (text(o, "/metadata/namespace"), text(o, "/metadata/name")));
        Self {
            cluster: cluster.to_owned(),
            objects,
        }
    }

    fn check(&self, cluster: &str) -> Result<(), ReadError> {
        if cluster == self.cluster {
            Ok(())
        } else {
            Err(ReadError::UnknownCluster(format!(
                "{cluster} (the objects given are cluster {}'s)",
                self.cluster
            )))
        }
    }

    fn of<'a>(
        &'a self,
        resource: &'a Resource,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| {
            let group = text(o, "/apiVersion")
                .rsplit_once('/')
                .map_or("", |(g, _)| g)
                .to_owned();
            group == resource.group
                && text(o, "/kind") == resource.kind
                && namespace.is_none_or(|ns| text(o, "/metadata/namespace") == ns)
        })
    }
}

fn text(o: &Value, pointer: &str) -> String {
    o.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl HostReads for ObjectReads {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        self.check(cluster)?;
        Ok(self
            .of(resource, namespace)
            .find(|o| text(o, "/metadata/name") == name)
            .map(Value::to_string))
    }

    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        self.check(cluster)?;
        let selector = rekon_rules::selector::LabelSelector::parse(label_selector.unwrap_or(""))
            .map_err(|e| ReadError::InvalidSelector(e.to_string()))?;
        Ok(self
            .of(resource, namespace)
            .filter(|o| {
                selector.matches_with(|k| {
                    o.pointer("/metadata/labels")
                        .and_then(|l| l.get(k))
                        .and_then(Value::as_str)
                })
            })
            .map(Value::to_string)
            .collect())
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        vec![ClusterInfo {
            name: self.cluster.clone(),
            primary: true,
            health: ClusterHealth::Ready,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Scope;
    use serde_json::json;

    fn widgets() -> Resource {
        Resource {
            group: "widgets.rekon.dev".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            scope: Scope::Namespaced,
        }
    }

    fn widget(ns: &str, name: &str, tier: &str) -> Value {
        json!({"apiVersion": "widgets.rekon.dev/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": ns, "labels": {"tier": tier}}})
    }

    #[test]
    fn reads_by_kind_namespace_name_and_selector() {
        let reads = ObjectReads::new(
            "main",
            vec![
                widget("b", "w2", "gold"),
                widget("a", "w1", "gold"),
                widget("a", "w0", "standard"),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w1", "namespace": "a"}}),
            ],
        );
        let r = widgets();
        let got = reads.get("main", &r, Some("a"), "w1").unwrap().unwrap();
        assert!(got.contains("\"Widget\""), "{got}");
        assert_eq!(reads.get("main", &r, Some("b"), "w1").unwrap(), None);
        let names = |v: Vec<String>| -> Vec<String> {
            v.iter()
                .map(|t| serde_json::from_str::<Value>(t).unwrap()["metadata"]["name"].to_string())
                .collect()
        };
        assert_eq!(
            names(reads.list("main", &r, Some("a"), None).unwrap()),
            ["\"w0\"", "\"w1\""]
        );
        assert_eq!(names(reads.list("main", &r, None, None).unwrap()).len(), 3);
        assert_eq!(
            names(reads.list("main", &r, None, Some("tier=gold")).unwrap()),
            ["\"w1\"", "\"w2\""]
        );
        assert!(matches!(
            reads.list("main", &r, None, Some("tier in (")),
            Err(ReadError::InvalidSelector(_))
        ));
        assert!(matches!(
            reads.get("other", &r, None, "w1"),
            Err(ReadError::UnknownCluster(_))
        ));
        assert_eq!(reads.clusters()[0].name, "main");
    }
}
