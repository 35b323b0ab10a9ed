//! Step 1, resolve: what a pass over an object has to do, from the object
//! and what this replica remembers of it.

use super::context::{Context, Entry};
use crate::source::plugin_crd::{Plugin, PluginObjectStatus, PluginSpec};

/// What a pass does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// The spec already serves (same generation applied): nothing to do and
    /// nothing to write; a stale copy of the object must never bring back
    /// an older status.
    UpToDate,
    /// Only `spec.suspend` changed since the spec that serves: no fetch, no
    /// reload (a reload would requeue every primary for nothing).
    Suspend,
    /// Fetch, load, shadow.
    Apply,
}

/// What this replica remembers of an object when a pass starts.
#[derive(Clone, Debug, Default)]
pub(super) struct Memory {
    /// The generation and spec that serve.
    pub(super) applied: Option<(Option<i64>, PluginSpec)>,
    /// The status this replica wrote last: newer than what a watch event
    /// may carry.
    pub(super) written: Option<PluginObjectStatus>,
    /// The digest this replica serves.
    pub(super) digest: Option<String>,
    /// The last finished pass left the desired version not serving.
    pub(super) problem: bool,
}

impl Memory {
    pub(super) fn of(entry: &Entry) -> Self {
        Self {
            applied: entry.applied.clone(),
            written: entry.written.clone(),
            digest: entry.here.digest.clone(),
            problem: entry.here.problem.is_some(),
        }
    }

    pub(super) fn recall(ctx: &Context, name: &str) -> Self {
        ctx.entries
            .lock()
            .get(name)
            .map(Self::of)
            .unwrap_or_default()
    }
}

/// What a pass over `obj` does, `serving`: whether its origin serves a
/// module now.
pub(super) fn resolve(obj: &Plugin, memory: &Memory, serving: bool) -> Plan {
    let (generation, spec) = (obj.metadata.generation, &obj.spec);
    let already = memory
        .applied
        .as_ref()
        .is_some_and(|(g, s)| *g == generation && s == spec);
    if already && serving {
        return Plan::UpToDate;
    }
    let only_suspend_changed = memory.applied.as_ref().is_some_and(|(_, s)| {
        PluginSpec {
            suspend: spec.suspend,
            ..s.clone()
        } == *spec
    }) && !memory.problem;
    if serving && only_suspend_changed {
        Plan::Suspend
    } else {
        Plan::Apply
    }
}

/// The status a pass starts from: the last one written (or the object's),
/// for the object's generation.
pub(super) fn base_status(obj: &Plugin, memory: &Memory) -> PluginObjectStatus {
    PluginObjectStatus {
        observed_generation: obj.metadata.generation,
        ..memory
            .written
            .clone()
            .or_else(|| obj.status.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(generation: i64, suspend: bool) -> Plugin {
        let mut obj = Plugin::new(
            "pools",
            PluginSpec {
                module: "r.example/pools:1".into(),
                suspend,
                ..PluginSpec::default()
            },
        );
        obj.metadata.generation = Some(generation);
        obj
    }

    fn applied(obj: &Plugin) -> Memory {
        Memory {
            applied: Some((obj.metadata.generation, obj.spec.clone())),
            ..Memory::default()
        }
    }

    #[test]
    fn a_spec_that_serves_is_up_to_date() {
        let obj = object(2, false);
        assert_eq!(resolve(&obj, &applied(&obj), true), Plan::UpToDate);
    }

    #[test]
    fn a_spec_that_no_longer_serves_is_applied_again() {
        let obj = object(2, false);
        assert_eq!(resolve(&obj, &applied(&obj), false), Plan::Apply);
        assert_eq!(resolve(&obj, &Memory::default(), true), Plan::Apply);
    }

    #[test]
    fn toggling_suspend_alone_reloads_nothing() {
        let before = object(2, false);
        let after = object(3, true);
        assert_eq!(resolve(&after, &applied(&before), true), Plan::Suspend);
        // Not while the last pass left a problem: that one is tried again.
        let troubled = Memory {
            problem: true,
            ..applied(&before)
        };
        assert_eq!(resolve(&after, &troubled, true), Plan::Apply);
        // Nor when nothing serves.
        assert_eq!(resolve(&after, &applied(&before), false), Plan::Apply);
    }

    #[test]
    fn another_change_is_applied() {
        let before = object(2, false);
        let mut after = object(3, false);
        after.spec.module = "r.example/pools:2".into();
        assert_eq!(resolve(&after, &applied(&before), true), Plan::Apply);
    }

    #[test]
    fn the_base_status_is_the_last_written_for_this_generation() {
        let mut obj = object(4, false);
        obj.status = Some(PluginObjectStatus {
            version: Some("0.1.0".into()),
            ..PluginObjectStatus::default()
        });
        let written = PluginObjectStatus {
            version: Some("0.2.0".into()),
            observed_generation: Some(3),
            ..PluginObjectStatus::default()
        };
        let base = base_status(&obj, &Memory::default());
        assert_eq!(base.version.as_deref(), Some("0.1.0"));
        assert_eq!(base.observed_generation, Some(4));
        let memory = Memory {
            written: Some(written),
            ..Memory::default()
        };
        let base = base_status(&obj, &memory);
        assert_eq!(base.version.as_deref(), Some("0.2.0"));
        assert_eq!(base.observed_generation, Some(4));
    }
}
