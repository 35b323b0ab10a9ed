//! Limits one plugin asks for (a Plugin object's `spec.limits`): only ever
//! narrower than the operator's flags. A plugin's call deadline is the
//! smaller of its own and `--plugin-call-timeout`; its memory budget the
//! smaller of its own and `--plugin-memory-budget` (at least one
//! instance). So a plugin can tighten its bounds, never widen them.

use std::time::Duration;

/// What one plugin asks to be bounded by (`None`: the host's setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginLimits {
    /// Deadline of one `reconcile` or `map` call.
    pub call_timeout: Option<Duration>,
    /// Linear memory all its live instances may hold together, bytes.
    pub memory_budget_bytes: Option<usize>,
}

/// The limits a plugin runs with, within the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Effective {
    pub(crate) call_timeout: Duration,
    /// Instances it may run at once (its memory budget / the memory cap).
    pub(crate) instances: usize,
}

impl PluginLimits {
    /// These limits within the host's: its `call_timeout`, its per-plugin
    /// instances (`host_instances`) of `memory_limit_bytes` each.
    pub(crate) fn within(
        &self,
        call_timeout: Duration,
        host_instances: usize,
        memory_limit_bytes: usize,
    ) -> Effective {
        let call_timeout = self
            .call_timeout
            .filter(|t| !t.is_zero())
            .map_or(call_timeout, |t| t.min(call_timeout));
        let instances = self
            .memory_budget_bytes
            .map_or(host_instances, |b| {
                (b / memory_limit_bytes.max(1)).min(host_instances)
            })
            .max(1);
        Effective {
            call_timeout,
            instances,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_narrows_its_limits_and_never_widens_them() {
        let host = (Duration::from_secs(2), 4, 64 << 20);
        let within = |l: PluginLimits| l.within(host.0, host.1, host.2);
        assert_eq!(
            within(PluginLimits::default()),
            Effective {
                call_timeout: Duration::from_secs(2),
                instances: 4
            }
        );
        let narrower = PluginLimits {
            call_timeout: Some(Duration::from_millis(500)),
            memory_budget_bytes: Some(128 << 20),
        };
        assert_eq!(
            within(narrower),
            Effective {
                call_timeout: Duration::from_millis(500),
                instances: 2
            }
        );
        let wider = PluginLimits {
            call_timeout: Some(Duration::from_secs(60)),
            memory_budget_bytes: Some(4 << 30),
        };
        assert_eq!(within(wider), within(PluginLimits::default()));
        let tiny = PluginLimits {
            call_timeout: Some(Duration::ZERO),
            memory_budget_bytes: Some(1),
        };
        assert_eq!(
            within(tiny),
            Effective {
                call_timeout: Duration::from_secs(2),
                instances: 1
            },
            "at least one instance; a zero deadline is no setting"
        );
    }
}
