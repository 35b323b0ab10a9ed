//! Stale reads that a real controller can meet, and only those.
//!
//! A controller reads through informers, one per cluster × resource. Each
//! may lag behind the API server on its own, but none goes back: what a
//! reconcile reads from an informer is never older than what an earlier
//! reconcile of the same controller already read from it. And the
//! primary's informer is the one the host decided the phase from, just
//! before the call: a `deleting` reconcile always sees its primary with a
//! `deletionTimestamp`.
//!
//! So a `stale` plan serves, for each informer the reconcile reads, the
//! view of an earlier reconcile of the same key ([`View::build`]): the one
//! `behind` reconciles back, or — when some reconcile after it (of any
//! key) read that informer — the latest such read, so the informer never
//! moves backwards. The primary's informer is always current. A read the
//! chosen view does not hold (another query) is answered by the cache as
//! it is now.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use crate::action::{ClusterInfo, Resource};
use crate::change::record::{Read, ReadResult};
use crate::plugin::{HostReads, ReadError};

/// An informer: cluster, API group and kind.
type Informer = (String, String, String);

fn informer_of(read: &Read) -> Informer {
    let (Read::Get {
        cluster, resource, ..
    }
    | Read::List {
        cluster, resource, ..
    }) = read;
    (
        cluster.clone(),
        resource.group.clone(),
        resource.kind.clone(),
    )
}

fn informer(cluster: &str, resource: &Resource) -> Informer {
    (
        cluster.to_owned(),
        resource.group.clone(),
        resource.kind.clone(),
    )
}

/// What one reconcile read: its ordinal in the run, its key, its reads.
#[derive(Clone, Debug)]
pub struct Logged {
    /// Its ordinal (from 1).
    pub ordinal: usize,
    /// `cluster/namespace/name`.
    pub key: String,
    /// The phase it was called in.
    pub phase: crate::action::Phase,
    /// Its reads, in order.
    pub reads: Vec<Read>,
}

/// The earlier view a stale reconcile reads: per informer, the reads that
/// answer for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    reads: Vec<Read>,
}

impl View {
    /// The view for the reconcile of `key` at `ordinal`, `behind` of the
    /// key's reconciles back, given every earlier reconcile's reads
    /// (`log`, in order) and the primary's informer (`primary`: always
    /// current). `None` when the key has no reconcile that far back.
    #[must_use]
    pub fn build(
        log: &[Logged],
        key: &str,
        behind: usize,
        primary: (&str, &Resource),
    ) -> Option<Self> {
        let own: Vec<&Logged> = log.iter().filter(|l| l.key == key).collect();
        let source = own.get(own.len().checked_sub(behind)?)?;
        let primary = informer(primary.0, primary.1);
        // Per informer, the reconcile whose view it serves: the source,
        // unless a later one (of any key) read it (the informer cannot go
        // back to before that read).
        let mut chosen: BTreeMap<Informer, &Logged> = BTreeMap::new();
        for read in &source.reads {
            let i = informer_of(read);
            if i == primary {
                continue;
            }
            let latest = log
                .iter()
                .rev()
                .find(|l| l.reads.iter().any(|r| informer_of(r) == i))
                .filter(|l| l.ordinal > source.ordinal)
                .unwrap_or(source);
            chosen.insert(i, latest);
        }
        let reads = chosen
            .iter()
            .flat_map(|(i, l)| l.reads.iter().filter(move |r| informer_of(r) == *i))
            .cloned()
            .collect();
        Some(Self { reads })
    }
}

impl View {
    /// Sieve's time travel: the whole snapshot the key's reconcile
    /// `behind` back read (every informer, the primary's too) and the
    /// phase it was called in (decided from that primary). A restarted
    /// controller may list from a lagging API server: it is not bound by
    /// what the previous process saw.
    #[must_use]
    pub fn snapshot(
        log: &[Logged],
        key: &str,
        behind: usize,
    ) -> Option<(Self, crate::action::Phase)> {
        let own: Vec<&Logged> = log.iter().filter(|l| l.key == key).collect();
        let source = own.get(own.len().checked_sub(behind)?)?;
        Some((
            Self {
                reads: source.reads.clone(),
            },
            source.phase,
        ))
    }

    /// `reads` as this view answers them: each read's result replaced by
    /// the view's where it holds one (two views that answer a reconcile's
    /// reads alike give the same run up to that reconcile's decision).
    #[must_use]
    pub fn answers(&self, reads: &[Read]) -> Vec<Read> {
        reads
            .iter()
            .map(|read| {
                let mut read = read.clone();
                match &mut read {
                    Read::Get {
                        cluster,
                        resource,
                        namespace,
                        name,
                        result,
                    } => {
                        if let Some(o) = self.get(cluster, resource, namespace.as_deref(), name) {
                            *result = ReadResult::Object(o);
                        }
                    }
                    Read::List {
                        cluster,
                        resource,
                        namespace,
                        label_selector,
                        result,
                    } => {
                        if let Some(os) = self.list(
                            cluster,
                            resource,
                            namespace.as_deref(),
                            label_selector.as_deref(),
                        ) {
                            *result = ReadResult::Objects(os);
                        }
                    }
                }
                read
            })
            .collect()
    }

    /// The view's answer to a get, if it holds one.
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Option<Value>> {
        for read in &self.reads {
            if let Read::Get {
                cluster: c,
                resource: r,
                namespace: n,
                name: m,
                result: ReadResult::Object(o),
            } = read
                && c == cluster
                && r.group == resource.group
                && r.kind == resource.kind
                && n.as_deref() == namespace
                && m == name
            {
                return Some(o.clone());
            }
        }
        // A list without a selector of that namespace (or all) holds it
        // or says it was absent.
        for read in &self.reads {
            if let Some((None, objects)) = same_list(read, cluster, resource, namespace) {
                return Some(
                    objects
                        .iter()
                        .find(|o| {
                            o["metadata"]["name"] == name
                                && o["metadata"]["namespace"].as_str() == namespace
                        })
                        .cloned(),
                );
            }
        }
        None
    }

    /// The view's answer to a list, if it holds one.
    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Option<Vec<Value>> {
        self.reads.iter().find_map(|read| {
            let (selector, objects) = same_list(read, cluster, resource, namespace)?;
            (selector.as_deref() == label_selector).then(|| {
                objects
                    .into_iter()
                    .filter(|o| {
                        namespace.is_none() || o["metadata"]["namespace"].as_str() == namespace
                    })
                    .collect()
            })
        })
    }
}

/// Reads answered from a [`View`] where it holds an answer, from the cache
/// otherwise; notes whether any answer differed from the cache's.
pub struct StaleReads {
    inner: Arc<dyn HostReads>,
    view: View,
    differed: Arc<AtomicBool>,
}

impl StaleReads {
    /// `view` over `inner`; `differed` is set once an answer differs.
    #[must_use]
    pub fn new(inner: Arc<dyn HostReads>, view: View, differed: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            view,
            differed,
        }
    }

    fn note(&self, differs: bool) {
        if differs {
            self.differed.store(true, Ordering::Relaxed);
        }
    }
}

fn same_list(
    read: &Read,
    cluster: &str,
    resource: &Resource,
    namespace: Option<&str>,
) -> Option<(Option<String>, Vec<Value>)> {
    match read {
        Read::List {
            cluster: c,
            resource: r,
            namespace: n,
            label_selector,
            result: ReadResult::Objects(os),
        } if c == cluster
            && r.group == resource.group
            && r.kind == resource.kind
            && (n.is_none() || n.as_deref() == namespace) =>
        {
            Some((label_selector.clone(), os.clone()))
        }
        _ => None,
    }
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

impl HostReads for StaleReads {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        let now = self.inner.get(cluster, resource, namespace, name)?;
        let Some(then) = self.view.get(cluster, resource, namespace, name) else {
            return Ok(now);
        };
        self.note(now.as_deref().map(parsed) != then);
        Ok(then.as_ref().map(Value::to_string))
    }

    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let now = self
            .inner
            .list(cluster, resource, namespace, label_selector)?;
        let Some(then) = self.view.list(cluster, resource, namespace, label_selector) else {
            return Ok(now);
        };
        let current: Vec<Value> = now.iter().map(|t| parsed(t)).collect();
        self.note(current != then);
        Ok(then.iter().map(Value::to_string).collect())
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        self.inner.clusters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Scope;
    use serde_json::json;

    fn res(kind: &str) -> Resource {
        Resource {
            group: if kind == "Widget" { "zoo" } else { "" }.to_owned(),
            version: "v1".to_owned(),
            kind: kind.to_owned(),
            plural: String::new(),
            scope: Scope::Namespaced,
        }
    }

    fn get(kind: &str, name: &str, v: i64) -> Read {
        Read::Get {
            cluster: "main".to_owned(),
            resource: res(kind),
            namespace: Some("d".to_owned()),
            name: name.to_owned(),
            result: ReadResult::Object(Some(json!({"metadata": {"name": name}, "v": v}))),
        }
    }

    fn logged(ordinal: usize, key: &str, reads: Vec<Read>) -> Logged {
        Logged {
            ordinal,
            key: key.to_owned(),
            phase: crate::action::Phase::Live,
            reads,
        }
    }

    #[test]
    fn the_primary_is_never_stale_and_an_informer_never_goes_back() {
        let widget = res("Widget");
        let log = vec![
            logged(
                1,
                "a",
                vec![
                    get("Widget", "a", 1),
                    get("ConfigMap", "x", 1),
                    get("Secret", "s", 1),
                ],
            ),
            // Another key read the ConfigMaps since: their informer is at
            // least that new.
            logged(2, "b", vec![get("ConfigMap", "y", 2)]),
            // Key a's last reconcile read no Secret.
            logged(
                3,
                "a",
                vec![get("Widget", "a", 3), get("ConfigMap", "x", 3)],
            ),
        ];
        let view = View::build(&log, "a", 2, ("main", &widget)).expect("a view");
        assert!(
            view.reads.iter().all(|r| informer_of(r).2 != "Widget"),
            "the primary's informer is always current: {:?}",
            view.reads
        );
        // The Secret informer was read by no one since reconcile 1: its
        // view; the ConfigMap informer was read by reconcile 3 (of a)
        // since: reconcile 3's view.
        assert!(view.reads.contains(&get("Secret", "s", 1)));
        assert!(view.reads.contains(&get("ConfigMap", "x", 3)));
        assert!(!view.reads.contains(&get("ConfigMap", "x", 1)));
        assert!(View::build(&log, "a", 3, ("main", &widget)).is_none());
        // Time travel is a restart onto a whole older snapshot: the
        // primary too, and no bound from what was seen since.
        let (snapshot, _) = View::snapshot(&log, "a", 2).expect("a snapshot");
        assert!(snapshot.reads.contains(&get("Widget", "a", 1)));
        assert!(snapshot.reads.contains(&get("ConfigMap", "x", 1)));
    }
}
