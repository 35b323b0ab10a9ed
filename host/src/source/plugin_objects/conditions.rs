//! The conditions a pass sets: `Fetched` after the fetch, `Verified`
//! after the signature check, `Ready` and `Degraded` from how the pass
//! ended.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::error::PluginObjectError;
use super::fetch::Fetched;
use super::module_source::FetchFailure;
use crate::plugin::LoadedPlugin;
use crate::source::plugin_crd::{
    CONSISTENT, DEGRADED, FETCHED, PluginObjectStatus, PluginSpec, READY, VERIFIED,
};
use crate::source::signature::Verified;

/// `Verified`'s reason when the signatures satisfy the policy.
pub(super) const SIGNATURES_VERIFIED: &str = "SignaturesVerified";

/// `Verified`: what the signature check of the desired module ended with;
/// no condition when nothing asks for signatures.
pub(super) fn set_verified(
    status: &mut PluginObjectStatus,
    verified: &Result<Option<Verified>, PluginObjectError>,
) {
    match verified {
        Ok(None) => status.conditions.retain(|c| c.type_ != VERIFIED),
        Ok(Some(v)) => set(
            status,
            VERIFIED,
            true,
            SIGNATURES_VERIFIED,
            &format!("{} is signed by {}", v.digest, v.signers.join(", ")),
        ),
        Err(e) => set(status, VERIFIED, false, e.reason(), &e.to_string()),
    }
}

/// `plugin NAME version V (DIGEST) serves`.
pub(super) fn serving_message(plugin: &LoadedPlugin, digest: Option<&str>) -> String {
    let timings = plugin.load_timings();
    format!(
        "plugin {} version {} ({}) serves; its code was {} in {} ms",
        plugin.name(),
        plugin.version(),
        digest.unwrap_or("digest unknown"),
        timings.path,
        timings.code.as_millis()
    )
}

/// `Fetched`: what the fetch step ended with.
pub(super) fn set_fetched(
    status: &mut PluginObjectStatus,
    spec: &PluginSpec,
    fetched: &Result<Fetched, FetchFailure>,
) {
    match fetched {
        Err(f) => set(status, FETCHED, false, f.reason, &f.message),
        Ok(Fetched {
            module,
            unresolved: None,
        }) => set(
            status,
            FETCHED,
            true,
            "Fetched",
            &format!(
                "{} ({}){}",
                spec.module,
                module.digest,
                if module.from_cache {
                    ", from the cache"
                } else {
                    ""
                }
            ),
        ),
        Ok(Fetched {
            module,
            unresolved: Some(f),
        }) => set(
            status,
            FETCHED,
            false,
            f.reason,
            &format!(
                "{}; serving the last resolved digest {} from the cache until the registry answers",
                f.message, module.digest
            ),
        ),
    }
}

/// `Ready` and `Degraded` after a pass that tried to make the desired
/// version serve. `made_serve`: the plugin (and digest) this pass made
/// serve, if it got that far; `serving`: what the object's origin serves
/// now.
pub(super) fn conclude(
    status: &mut PluginObjectStatus,
    spec: &PluginSpec,
    made_serve: Option<(&LoadedPlugin, &str)>,
    serving: Option<&LoadedPlugin>,
    result: &Result<(), PluginObjectError>,
) {
    match (made_serve, result) {
        (Some((plugin, digest)), Ok(())) => {
            set_ready(status, spec, &serving_message(plugin, Some(digest)));
            set(
                status,
                DEGRADED,
                false,
                "Serving",
                "the desired version serves",
            );
        }
        // The serving module serves, the pass did not complete (a shadow,
        // a reference served from the cache).
        (Some((plugin, digest)), Err(e)) => {
            set_ready(status, spec, &serving_message(plugin, Some(digest)));
            set(status, DEGRADED, true, e.reason(), &e.to_string());
        }
        (None, Err(e)) => refused(status, serving, e),
        (None, Ok(())) => {}
    }
}

/// A pass that did not make the desired version serve: `Ready` says
/// whether something older still serves, `Degraded` why the desired one
/// does not.
fn refused(status: &mut PluginObjectStatus, serving: Option<&LoadedPlugin>, e: &PluginObjectError) {
    let reason = e.reason();
    let message = match serving {
        Some(p) => format!("{e}; version {} keeps serving", p.version()),
        None => e.to_string(),
    };
    match serving {
        Some(p) => set(
            status,
            READY,
            true,
            "Serving",
            &format!("an earlier version ({}) serves", p.version()),
        ),
        None => {
            // `status.digest` is "the module serving now": none serves
            // (after a restart, the last digest may no longer be served).
            status.digest = None;
            status.version = None;
            set(status, READY, false, reason, &message);
        }
    }
    set(status, DEGRADED, true, reason, &message);
}

/// `Ready`: `Serving`, or `Suspended` (loaded, not reconciling) while
/// `spec.suspend` is set.
pub(super) fn set_ready(status: &mut PluginObjectStatus, spec: &PluginSpec, serving: &str) {
    if spec.suspend {
        let message = format!(
            "spec.suspend is set: {} but stays loaded with its watches and queue; events are kept, nothing is reconciled or written until it is resumed; finalizers stay",
            serving.trim_end_matches(" serves")
        );
        set(status, READY, false, "Suspended", &message);
    } else {
        set(status, READY, true, "Serving", serving);
    }
}

/// Sets a condition, keeping its transition time when its status did not
/// change.
pub(super) fn set(
    status: &mut PluginObjectStatus,
    kind: &str,
    value: bool,
    reason: &str,
    message: &str,
) {
    let value = if value { "True" } else { "False" };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let previous = status.conditions.iter().position(|c| c.type_ == kind);
    let transition = previous
        .map(|i| &status.conditions[i])
        .filter(|c| c.status == value)
        .map_or(now, |c| c.last_transition_time.clone());
    let condition = Condition {
        type_: kind.to_owned(),
        status: value.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: status.observed_generation,
        last_transition_time: transition,
    };
    match previous {
        Some(i) => status.conditions[i] = condition,
        None => status.conditions.push(condition),
    }
    // A stable order, whatever order they were first set in.
    let order: BTreeMap<&str, usize> = [
        (FETCHED, 0),
        (VERIFIED, 1),
        (READY, 2),
        (DEGRADED, 3),
        (CONSISTENT, 4),
    ]
    .into();
    status
        .conditions
        .sort_by_key(|c| order.get(c.type_.as_str()).copied().unwrap_or(usize::MAX));
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::source::plugin_crd::condition;
    use crate::source::plugin_objects::module_source::Module;

    #[test]
    fn conditions_keep_their_transition_time_and_order() {
        let mut status = PluginObjectStatus::default();
        set(&mut status, READY, true, "Serving", "a");
        set(&mut status, FETCHED, true, "Fetched", "b");
        let first = status.conditions[1].last_transition_time.clone();
        std::thread::sleep(Duration::from_millis(5));
        set(&mut status, READY, true, "Serving", "c");
        assert_eq!(status.conditions[1].last_transition_time, first);
        assert_eq!(status.conditions[1].message, "c");
        assert_eq!(
            status
                .conditions
                .iter()
                .map(|c| c.type_.as_str())
                .collect::<Vec<_>>(),
            [FETCHED, READY]
        );
        set(&mut status, READY, false, "LoadFailed", "d");
        assert_ne!(status.conditions[1].last_transition_time, first);
    }

    fn module(from_cache: bool) -> Module {
        Module {
            digest: "sha256:abc".into(),
            bytes: Arc::from(Vec::new()),
            from_cache,
            precompiled: None,
        }
    }

    fn unreachable() -> FetchFailure {
        FetchFailure {
            reason: "RegistryUnreachable",
            message: "r.example does not answer".into(),
            transient: true,
        }
    }

    #[test]
    fn fetched_says_where_the_module_came_from() {
        let spec = PluginSpec {
            module: "r.example/pools:1".into(),
            ..PluginSpec::default()
        };
        let mut status = PluginObjectStatus::default();
        let pulled = Ok(Fetched {
            module: module(false),
            unresolved: None,
        });
        set_fetched(&mut status, &spec, &pulled);
        let c = condition(&status, FETCHED).expect("Fetched");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Fetched"));
        assert_eq!(c.message, "r.example/pools:1 (sha256:abc)");
        let cached = Ok(Fetched {
            module: module(true),
            unresolved: None,
        });
        set_fetched(&mut status, &spec, &cached);
        let c = condition(&status, FETCHED).expect("Fetched");
        assert_eq!(c.message, "r.example/pools:1 (sha256:abc), from the cache");
        let stand_in = Ok(Fetched {
            module: module(true),
            unresolved: Some(unreachable()),
        });
        set_fetched(&mut status, &spec, &stand_in);
        let c = condition(&status, FETCHED).expect("Fetched");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "RegistryUnreachable")
        );
        assert!(
            c.message
                .contains("serving the last resolved digest sha256:abc")
        );
        set_fetched(&mut status, &spec, &Err(unreachable()));
        let c = condition(&status, FETCHED).expect("Fetched");
        assert_eq!(c.message, "r.example does not answer");
    }

    #[test]
    fn a_refused_pass_with_nothing_serving_is_not_ready() {
        let spec = PluginSpec::default();
        // What the last status said served, before a restart.
        let mut status = PluginObjectStatus {
            digest: Some("sha256:before".into()),
            version: Some("1.0.0".into()),
            ..PluginObjectStatus::default()
        };
        let failed = Err(PluginObjectError::Fetch(unreachable()));
        conclude(&mut status, &spec, None, None, &failed);
        assert_eq!(
            status.digest, None,
            "status.digest names what serves: nothing"
        );
        assert_eq!(status.version, None);
        let ready = condition(&status, READY).expect("Ready");
        let degraded = condition(&status, DEGRADED).expect("Degraded");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, "RegistryUnreachable");
        assert_eq!(degraded.status, "True");
        assert_eq!(degraded.message, "r.example does not answer");
    }
}
