//! What the host reports about itself while `rekon run` runs: plugin
//! loads, swaps, removals and load failures, and leadership changes, each
//! as a log line, metric updates and an Event on the host's Pod.

use std::future::Future;

use kube::runtime::events::EventType;
use tokio::sync::broadcast;
use tracing::{info, warn};

use crate::lease::LeaderGate;
use crate::plugin::{PluginRegistry, RegistryEvent};
use crate::telemetry::events::HostEvents;
use crate::telemetry::metrics::Metrics;

/// Log, count and record an Event for every plugin registry event until
/// `shutdown` resolves or the registry is dropped.
pub async fn report_plugin_status(
    mut events: broadcast::Receiver<RegistryEvent>,
    metrics: Metrics,
    host_events: HostEvents,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let event = tokio::select! {
            () = &mut shutdown => return,
            event = events.recv() => event,
        };
        match event {
            Ok(event) => report_one(&event, &metrics, &host_events).await,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                warn!(
                    missed = n,
                    "plugin status reporter lagged; some plugin events were not reported"
                );
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Report what the registry holds already (loaded before anyone
/// subscribed): one `Loaded` per plugin and one `Failed` per refused file.
pub async fn report_initial_plugins(
    registry: &PluginRegistry,
    metrics: &Metrics,
    host_events: &HostEvents,
) {
    for plugin in registry.plugins() {
        report_one(&RegistryEvent::Loaded(plugin), metrics, host_events).await;
    }
    for status in registry.status() {
        if let Some(error) = status.error {
            report_one(
                &RegistryEvent::Failed {
                    path: status.path,
                    error,
                },
                metrics,
                host_events,
            )
            .await;
        }
    }
}

async fn report_one(event: &RegistryEvent, metrics: &Metrics, host_events: &HostEvents) {
    match event {
        RegistryEvent::Loaded(plugin) => {
            let (name, version) = (plugin.name(), plugin.version());
            info!(plugin = %name, version = %version, digest = %plugin.digest(), "plugin loaded");
            metrics.plugin_loaded(name, version);
            host_events
                .publish_or_log(
                    EventType::Normal,
                    "PluginLoaded",
                    "Load",
                    format!(
                        "plugin {name} version {version} loaded (sha256 {})",
                        plugin.digest()
                    ),
                )
                .await;
        }
        RegistryEvent::Replaced { old, new } => {
            let (name, version) = (new.name(), new.version());
            info!(plugin = %name, version = %version, old_version = %old.version(), digest = %new.digest(), "plugin replaced");
            metrics.plugin_loaded(name, version);
            host_events
                .publish_or_log(
                    EventType::Normal,
                    "PluginReplaced",
                    "Load",
                    format!(
                        "plugin {name} version {version} (sha256 {}) replaced version {}",
                        new.digest(),
                        old.version()
                    ),
                )
                .await;
        }
        RegistryEvent::Removed { name } => {
            info!(plugin = %name, "plugin removed");
            metrics.plugin_removed(name);
            host_events
                .publish_or_log(
                    EventType::Normal,
                    "PluginRemoved",
                    "Unload",
                    format!("plugin {name} removed"),
                )
                .await;
        }
        RegistryEvent::Failed { path, error } => {
            let label = file_stem(path);
            // The registry logged it (once per change, saying what keeps
            // serving); here it is counted and recorded as an Event.
            metrics.plugin_load_failed(&label);
            host_events
                .publish_or_log(
                    EventType::Warning,
                    "PluginLoadFailed",
                    "Load",
                    format!("failed to load plugin file {}: {error}", path.display()),
                )
                .await;
        }
    }
}

fn file_stem(path: &std::path::Path) -> String {
    path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// Record an Event on the host's Pod on every leadership change until
/// `shutdown` resolves.
pub async fn report_leadership(
    gate: LeaderGate,
    host_events: HostEvents,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut rx = gate.subscribe();
    let mut leading = *rx.borrow_and_update();
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
        let now = *rx.borrow_and_update();
        if now == leading {
            continue;
        }
        leading = now;
        let (reason, note) = if now {
            ("LeaderElected", "became leader: reconciling and writing")
        } else {
            (
                "LeaderLost",
                "lost leadership: writes stopped, caches kept warm",
            )
        };
        host_events
            .publish_or_log(EventType::Normal, reason, "LeaderElection", note)
            .await;
    }
}
