//! Performing a plugin's actions: grouped by cluster (in order within one,
//! clusters concurrently), each fenced and gated, counted, and its result
//! handed to the caches (read-your-writes).

use tracing::warn;

use super::config::{Error, Failed};
use super::requests::{Writer, Written};
use crate::action::{Action, action_cluster, action_kind};

impl Writer {
    /// Perform `actions` for `plugin`: in order per cluster, clusters
    /// concurrently. Each cluster's actions stop at the first failure, so a
    /// stalled or failing cluster does not keep the others from converging;
    /// the reconcile still fails (and is requeued with backoff) until every
    /// cluster succeeded. Actions are idempotent, so a replay of the ones
    /// that did succeed is harmless. Events are best-effort: a failed Event
    /// is logged and counted, and the outcome goes on.
    ///
    /// # Errors
    /// One error per cluster whose actions did not all succeed.
    pub async fn execute(&self, plugin: &str, actions: &[Action]) -> Result<(), Failed> {
        let mut per_cluster: Vec<(&str, Vec<&Action>)> = Vec::new();
        for action in actions {
            let cluster = action_cluster(action);
            match per_cluster.iter_mut().find(|(c, _)| *c == cluster) {
                Some((_, list)) => list.push(action),
                None => per_cluster.push((cluster, vec![action])),
            }
        }
        let runs = per_cluster.into_iter().map(|(_, list)| async move {
            for action in list {
                match self.perform(plugin, action).await {
                    Ok(()) => {}
                    // Events are best-effort: logged and counted (in
                    // `perform`), never a failure of the outcome.
                    Err(e) if matches!(action, Action::Event(_)) => {
                        warn!(%plugin, cluster = %action_cluster(action), status = ?e.status(), error = %e, "failed to record event (best-effort; the reconcile goes on)");
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok::<(), Error>(())
        });
        let failed: Vec<Error> = futures::future::join_all(runs)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(Failed {
                total: actions.len(),
                failed,
            })
        }
    }

    /// Perform one action for `plugin`. A successful answer goes to the
    /// caches ([`crate::cache::CacheManager::observe_write`]) so the next
    /// reconcile reads what this one wrote.
    ///
    /// # Errors
    /// When the action fails after the writer's own bounded retries.
    pub async fn perform(&self, plugin: &str, action: &Action) -> Result<(), Error> {
        let metrics = self.clusters.metrics();
        let cluster = action_cluster(action);
        let label = match action {
            Action::Apply(a) if a.status => "apply_status",
            Action::Apply(_) => "apply",
            Action::Patch(p) if p.status => "patch_status",
            Action::Patch(_) => "patch",
            Action::Delete(_) => "delete",
            Action::Create(_) => "create",
            Action::Event(_) => "event",
        };
        if !self.fence().is_leader() {
            metrics.writer_action(plugin, cluster, label, "not_leader");
            return Err(Error::NotLeader {
                plugin: plugin.to_owned(),
                action: action_kind(action),
                cluster: cluster.to_owned(),
            });
        }
        let gate = self.gates.read().get(plugin).cloned();
        if let Some(gate) = gate
            && let Err(reason) = gate(action)
        {
            metrics.writer_action(plugin, cluster, label, "denied");
            return Err(Error::Forbidden {
                plugin: plugin.to_owned(),
                action: action_kind(action),
                cluster: cluster.to_owned(),
                reason,
            });
        }
        let result = match action {
            Action::Apply(a) => self.apply(plugin, a).await,
            Action::Patch(p) => self.patch(plugin, p).await,
            Action::Delete(d) => self.delete(plugin, d).await,
            Action::Create(c) => self.create(plugin, c).await,
            Action::Event(e) => self.event(plugin, e).await.map(|()| Written::Nothing),
        };
        let outcome = match &result {
            Ok(_) => "success",
            Err(Error::Unreachable { .. }) => "unreachable",
            Err(Error::NotLeader { .. }) => "not_leader",
            Err(_) => "error",
        };
        metrics.writer_action(plugin, cluster, label, outcome);
        let written = result?;
        if let Some(caches) = &self.caches {
            match written {
                Written::Object(id, obj) => caches.observe_write(cluster, &id, *obj),
                Written::Gone {
                    id,
                    namespace,
                    name,
                } => caches.observe_gone(cluster, &id, namespace.as_deref(), &name),
                Written::Nothing => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::action::{DeleteAction, ObjectRef, Resource, Scope};
    use crate::cache::Resolver;
    use crate::cluster::ClusterRegistry;
    use crate::writer::WriterConfig;

    #[tokio::test]
    async fn the_gate_refuses_before_anything_is_sent() {
        // Nothing listens there: a request would fail differently.
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let clusters = ClusterRegistry::new("main", client);
        let writer = Writer::new(clusters, Resolver::default(), WriterConfig::default());
        writer.set_gate("p", Arc::new(|_| Err("not declared".to_owned())));
        let action = Action::Delete(DeleteAction {
            target: ObjectRef {
                cluster: "main".into(),
                resource: Resource {
                    group: String::new(),
                    version: "v1".into(),
                    kind: "Secret".into(),
                    plural: "secrets".into(),
                    scope: Scope::Namespaced,
                },
                namespace: Some("default".into()),
                name: "x".into(),
            },
            uid: None,
            propagation: None,
        });
        let err = writer.perform("p", &action).await.unwrap_err();
        assert!(matches!(err, Error::Forbidden { .. }), "{err}");
        assert!(!err.is_retryable());
        assert_eq!(
            err.to_string(),
            "refused to delete in cluster main for plugin p: not declared"
        );
    }
}
