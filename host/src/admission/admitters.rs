//! Where the webhook server finds plugins and what their calls read.

use std::sync::Arc;

use crate::plugin::{HostReads, LoadedPlugin};

/// Where the webhook server finds plugins and their reads.
pub trait Admitters: Send + Sync + 'static {
    /// The serving load of plugin `name`.
    fn plugin(&self, name: &str) -> Option<LoadedPlugin>;
    /// What an admission call of `plugin` may read (its caches).
    fn reads(&self, plugin: &LoadedPlugin) -> Arc<dyn HostReads>;
    /// The shadow version of plugin `name`, whose verdicts are compared
    /// with the serving version's and never enforced.
    fn shadow(&self, _name: &str) -> Option<LoadedPlugin> {
        None
    }
}

/// The plugins of a registry, reading nothing (no engine running: the
/// reads fail as `not watched`).
impl Admitters for crate::plugin::PluginRegistry {
    fn plugin(&self, name: &str) -> Option<LoadedPlugin> {
        self.get(name)
    }

    fn reads(&self, _plugin: &LoadedPlugin) -> Arc<dyn HostReads> {
        Arc::new(crate::plugin::NoReads)
    }

    fn shadow(&self, name: &str) -> Option<LoadedPlugin> {
        crate::plugin::PluginRegistry::shadow(self, name)
    }
}
