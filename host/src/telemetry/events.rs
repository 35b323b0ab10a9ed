//! Kubernetes Events about the host itself, on its own Pod.
//!
//! When rekon runs in a cluster, the Deployment passes `POD_NAME` and
//! `POD_NAMESPACE` through the downward API; [`HostEvents::from_env`] then
//! records Events (events.k8s.io/v1) regarding that Pod, so
//! `kubectl describe pod rekon-…` shows plugin loads, load failures and
//! leadership changes. Out of cluster (no `POD_NAME`), [`HostEvents`] is
//! disabled and publishing is a no-op: logs and metrics carry the same facts.
//!
//! What is reported this way (plugin loads, leadership) is decided above,
//! in `crate::app::reporting`: this module knows nothing of the engine.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::{debug, warn};

/// The `reportingController` of the host's own Events.
pub const REPORTING_CONTROLLER: &str = "rekon.dev/host";

/// Publishes Events regarding the host's Pod. Cheap to clone.
#[derive(Clone, Default)]
pub struct HostEvents {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    client: kube::Client,
    reporter: Reporter,
    pod: ObjectReference,
}

impl std::fmt::Debug for HostEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(i) => f
                .debug_struct("HostEvents")
                .field("namespace", &i.pod.namespace)
                .field("pod", &i.pod.name)
                .finish(),
            None => f.write_str("HostEvents(disabled)"),
        }
    }
}

impl HostEvents {
    /// Events are only logged (not in a cluster).
    #[must_use]
    pub fn disabled() -> Self {
        Self { inner: None }
    }

    /// Events regarding Pod `namespace/name` (with `uid` when known, which
    /// `kubectl describe` uses to match them).
    #[must_use]
    pub fn for_pod(
        client: kube::Client,
        namespace: impl Into<String>,
        name: impl Into<String>,
        uid: Option<String>,
    ) -> Self {
        let name = name.into();
        let pod = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(namespace.into()),
            name: Some(name.clone()),
            uid,
            ..ObjectReference::default()
        };
        Self {
            inner: Some(Arc::new(Inner {
                client,
                reporter: Reporter {
                    controller: REPORTING_CONTROLLER.into(),
                    instance: Some(name),
                },
                pod,
            })),
        }
    }

    /// From `POD_NAME` / `POD_NAMESPACE` (downward API); disabled when
    /// `POD_NAME` is unset. Reads the Pod once for its uid; if that fails
    /// (e.g. no `get pods` permission) Events are still recorded without it.
    pub async fn from_env(client: kube::Client) -> Self {
        let Some(name) = std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()) else {
            debug!("POD_NAME not set: host events are only logged");
            return Self::disabled();
        };
        let namespace = std::env::var("POD_NAMESPACE")
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .ok()
                    .map(|s| s.trim().to_owned())
            })
            .unwrap_or_else(|| "default".to_owned());
        let uid = match Api::<Pod>::namespaced(client.clone(), &namespace)
            .get_opt(&name)
            .await
        {
            Ok(pod) => pod.and_then(|p| p.metadata.uid),
            Err(e) => {
                debug!(pod = %name, namespace = %namespace, error = %e, "failed to read own pod; events carry no uid");
                None
            }
        };
        Self::for_pod(client, namespace, name, uid)
    }

    /// Whether Events are recorded (in a cluster).
    #[must_use]
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The Pod the Events regard, when enabled.
    #[must_use]
    pub fn pod(&self) -> Option<&ObjectReference> {
        self.inner.as_ref().map(|i| &i.pod)
    }

    /// Record an Event on the host's Pod (a no-op when disabled).
    ///
    /// # Errors
    /// When the API server refuses the Event.
    pub async fn publish(
        &self,
        type_: EventType,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) -> Result<(), kube::Error> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let mut note: String = note.into();
        truncate(&mut note, 1024);
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        // A fresh Recorder per Event: the Recorder's deduplication key ignores
        // the note, so "loaded nodepool 0.2.0" would otherwise be folded into
        // the series of "loaded nodepool 0.1.0" and keep the old text. Host
        // Events are rare (loads, failures, leadership), so no series needed.
        Recorder::new(inner.client.clone(), inner.reporter.clone())
            .publish(&event, &inner.pod)
            .await
    }

    /// [`publish`](Self::publish), logging a failure instead of returning it.
    pub async fn publish_or_log(
        &self,
        type_: EventType,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        if let Err(e) = self.publish(type_, reason, action, note).await {
            warn!(reason = %reason, error = %e, "failed to record event on the host pod");
        }
    }
}

/// Truncate to at most `max` bytes on a char boundary.
fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_truncated_on_a_char_boundary() {
        let mut s = "é".repeat(600);
        truncate(&mut s, 1024);
        assert_eq!(s.len(), 1024);
        let mut s = format!("a{}", "é".repeat(600));
        truncate(&mut s, 1024);
        assert_eq!(s.len(), 1023);
    }

    #[tokio::test]
    async fn disabled_events_are_a_noop() {
        let events = HostEvents::disabled();
        assert!(!events.is_enabled());
        events
            .publish(EventType::Warning, "PluginLoadFailed", "Load", "x")
            .await
            .expect("disabled publish succeeds");
    }
}
