//! Bounds on what one outcome may ask of the host: how many actions, how
//! large each object (or patch) and the whole outcome, how deeply nested,
//! and that every body is JSON. Checked when the call returns, before the
//! permission checks parse anything and before anything is written; an
//! outcome out of bounds fails the call with the bound it broke
//! ([`Contained`]), and the reconcile is retried with backoff like any
//! failed call.

use crate::action::{Action, Outcome};

/// The largest request body the Kubernetes API server accepts (its
/// `MaxRequestBodyBytes`, 3 MiB; it answers 413 beyond). Objects stored in
/// etcd are further limited to 1.5 MiB by etcd's default request size.
pub const API_SERVER_MAX_REQUEST_BYTES: usize = 3 << 20;

/// Bounds of one outcome (`RuntimeConfig::outcome_bounds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutcomeBounds {
    /// Actions in one outcome. Default 10,000: a pool of 10,000 Nodes
    /// patched in one reconcile still fits.
    pub max_actions: usize,
    /// Bytes of one object (apply, create) or patch body. Default
    /// [`API_SERVER_MAX_REQUEST_BYTES`]: what the API server accepts in one
    /// request; a larger body could only fail there, later and again on
    /// every retry.
    pub max_object_bytes: usize,
    /// Bytes of all bodies and Event notes of one outcome. Default 8 MiB
    /// (the API server takes at most 3 MiB per request). With
    /// `max_actions` it also bounds what the host copies out of the guest
    /// at all ([`OutcomeBounds::lift_bytes`]).
    pub max_outcome_bytes: usize,
    /// Nesting of objects and arrays in one body. Default 100: Kubernetes
    /// objects nest a dozen levels; the host's JSON parser refuses beyond
    /// 128.
    pub max_json_depth: usize,
}

impl Default for OutcomeBounds {
    fn default() -> Self {
        Self {
            max_actions: 10_000,
            max_object_bytes: API_SERVER_MAX_REQUEST_BYTES,
            max_outcome_bytes: 8 << 20,
            max_json_depth: 100,
        }
    }
}

/// What one action may take in host memory once copied out of the guest,
/// besides its body: the value itself and its names (cluster, resource,
/// namespace, name: a few hundred bytes in any real object reference).
const LIFT_BYTES_PER_ACTION: usize = size_of::<super::bindings::types::Action>() + 512;

impl OutcomeBounds {
    /// The most bytes one call may copy from the guest into the host: its
    /// bodies (`max_outcome_bytes`) and `max_actions` actions with their
    /// names. Set as the store's hostcall fuel (`call::new_store`): wasmtime
    /// counts every list and string it lifts against it *before* it
    /// allocates them, so an outcome beyond it is refused without being
    /// copied ([`Contained::LiftTooLarge`]); the checks of [`check`] then
    /// run on what fits. Also what a guest may pass to one host call, and
    /// what the host-wide budget books per instance (`host_budget::book_memory`).
    #[must_use]
    pub fn lift_bytes(&self) -> usize {
        self.max_outcome_bytes
            .saturating_add(self.max_actions.saturating_mul(LIFT_BYTES_PER_ACTION))
    }
}

/// Which bound an outcome broke, with what it asked and the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Contained {
    /// More actions than `max_actions`.
    #[error("{count} actions in one outcome (at most {max})")]
    TooManyActions {
        /// Actions returned.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// One body larger than `max_object_bytes`.
    #[error("{action} has a body of {bytes} bytes (at most {max})")]
    ObjectTooLarge {
        /// The action, described.
        action: String,
        /// Its body's size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// All bodies together larger than `max_outcome_bytes`.
    #[error("the outcome's bodies total {bytes} bytes (at most {max})")]
    OutcomeTooLarge {
        /// The outcome's size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// A body nested deeper than `max_json_depth`.
    #[error("{action} nests its body deeper than {max} levels")]
    TooDeep {
        /// The action, described.
        action: String,
        /// The bound.
        max: usize,
    },
    /// More data than [`OutcomeBounds::lift_bytes`] to copy out of the guest
    /// (found while copying, before the copy is made).
    #[error(
        "the plugin returned more than {max} bytes to copy into the host (its actions, bodies and names)"
    )]
    LiftTooLarge {
        /// The bound.
        max: usize,
    },
    /// A body that is not JSON.
    #[error("{action} has a body that is not JSON: {error}")]
    InvalidJson {
        /// The action, described.
        action: String,
        /// The parser's message.
        error: String,
    },
}

impl Contained {
    /// The reason, for metrics, logs and status (`TooManyActions`, ...).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooManyActions { .. } => "TooManyActions",
            Self::ObjectTooLarge { .. } => "ObjectTooLarge",
            Self::OutcomeTooLarge { .. } | Self::LiftTooLarge { .. } => "OutcomeTooLarge",
            Self::TooDeep { .. } => "TooDeep",
            Self::InvalidJson { .. } => "InvalidJson",
        }
    }
}

/// Checks `outcome` against `bounds`: counts first, then sizes, then each
/// body's depth and syntax (the depth first, so the parser never meets a
/// nesting it would refuse for its own reasons).
pub(crate) fn check(outcome: &Outcome, bounds: &OutcomeBounds) -> Result<(), Contained> {
    check_count(outcome.actions.len(), bounds)?;
    let mut total = 0usize;
    for (index, action) in outcome.actions.iter().enumerate() {
        let (body, bytes) = match action {
            Action::Apply(a) => (Some(&a.object), a.object.len()),
            Action::Create(c) => (Some(&c.object), c.object.len()),
            Action::Patch(p) => (Some(&p.patch), p.patch.len()),
            Action::Event(e) => (None, e.note.len()),
            Action::Delete(_) => (None, 0),
        };
        total = total.saturating_add(bytes);
        let Some(body) = body else { continue };
        let described = || describe(index, action);
        if bytes > bounds.max_object_bytes {
            return Err(Contained::ObjectTooLarge {
                action: described(),
                bytes,
                max: bounds.max_object_bytes,
            });
        }
        if json_depth_exceeds(body, bounds.max_json_depth) {
            return Err(Contained::TooDeep {
                action: described(),
                max: bounds.max_json_depth,
            });
        }
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(body) {
            return Err(Contained::InvalidJson {
                action: described(),
                error: e.to_string(),
            });
        }
    }
    if total > bounds.max_outcome_bytes {
        return Err(Contained::OutcomeTooLarge {
            bytes: total,
            max: bounds.max_outcome_bytes,
        });
    }
    Ok(())
}

/// The first bound alone, for an outcome of `count` actions not yet
/// converted from the guest's values (a refusal then spares the copy).
pub(crate) fn check_count(count: usize, bounds: &OutcomeBounds) -> Result<(), Contained> {
    if count > bounds.max_actions {
        return Err(Contained::TooManyActions {
            count,
            max: bounds.max_actions,
        });
    }
    Ok(())
}

/// What [`check`] or [`check_count`] said of `plugin`'s outcome, a refusal counted
/// (`rekon_plugin_contained_total`) and logged with the bound (the
/// reconcile's span names the object).
pub(crate) fn enforce(
    plugin: &std::sync::Arc<str>,
    checked: Result<(), Contained>,
    bounds: &OutcomeBounds,
    containment: &super::containment::Containment,
    shadow: bool,
) -> Result<(), Contained> {
    checked.inspect_err(|bound| {
        let reason = bound.reason();
        if shadow {
            containment.shadow_contained(plugin, reason);
        } else {
            containment.contained(plugin, reason, &bound.to_string());
        }
        tracing::warn!(
            %plugin,
            reason,
            %bound,
            max_actions = bounds.max_actions,
            max_object_bytes = bounds.max_object_bytes,
            max_outcome_bytes = bounds.max_outcome_bytes,
            max_json_depth = bounds.max_json_depth,
            "refused the plugin's outcome: out of bounds; nothing of it is written"
        );
    })
}

/// "action 3 (patch of ConfigMap default/x in cluster main)".
fn describe(index: usize, action: &Action) -> String {
    let what = match action {
        Action::Apply(a) => format!("apply in cluster {}", a.cluster),
        Action::Create(c) => format!("create in cluster {}", c.cluster),
        Action::Patch(p) => format!(
            "patch of {} {}{} in cluster {}",
            p.target.resource.kind,
            p.target
                .namespace
                .as_deref()
                .map(|ns| format!("{ns}/"))
                .unwrap_or_default(),
            p.target.name,
            p.target.cluster
        ),
        Action::Event(_) => "event".to_owned(),
        Action::Delete(_) => "delete".to_owned(),
    };
    format!("action {index} ({what})")
}

/// Whether `text` nests objects and arrays deeper than `max`. Hand-written
/// because serde_json reports no depth (only its own fixed recursion limit,
/// 128, as a syntax error): a scan of the brackets outside strings, in one
/// pass, allocating nothing. Syntax is the parser's to judge afterwards.
fn json_depth_exceeds(text: &str, max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{ApplyAction, EventAction, EventType, ObjectRef, PatchAction, PatchType};

    fn patch(body: &str) -> Action {
        Action::Patch(PatchAction {
            target: ObjectRef {
                cluster: "main".into(),
                resource: crate::action::Resource {
                    group: String::new(),
                    version: "v1".into(),
                    kind: "ConfigMap".into(),
                    plural: "configmaps".into(),
                    scope: crate::action::Scope::Namespaced,
                },
                namespace: Some("default".into()),
                name: "x".into(),
            },
            patch_type: PatchType::Merge,
            patch: body.into(),
            resource_version: None,
            status: false,
        })
    }

    fn apply(body: &str) -> Action {
        Action::Apply(ApplyAction {
            cluster: "main".into(),
            object: body.into(),
            status: false,
            force: false,
        })
    }

    fn outcome(actions: Vec<Action>) -> Outcome {
        Outcome {
            actions,
            requeue_after_ms: None,
            finalized: false,
        }
    }

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    const SMALL: OutcomeBounds = OutcomeBounds {
        max_actions: 3,
        max_object_bytes: 64,
        max_outcome_bytes: 100,
        max_json_depth: 4,
    };

    #[test]
    fn each_bound_names_its_reason_and_what_broke_it() {
        let cases: Vec<(Vec<Action>, &str, &str)> = vec![
            (vec![patch("{}"); 4], "TooManyActions", "4 actions"),
            (
                vec![patch(&format!("{{\"a\":\"{}\"}}", "x".repeat(70)))],
                "ObjectTooLarge",
                "action 0 (patch of ConfigMap default/x in cluster main) has a body of 78 bytes",
            ),
            (
                vec![apply(&"1".repeat(60)), apply(&"1".repeat(60))],
                "OutcomeTooLarge",
                "total 120 bytes",
            ),
            (
                vec![apply("{}"), apply(&nested(5))],
                "TooDeep",
                "action 1 (apply",
            ),
            (vec![apply("{\"a\": tru}")], "InvalidJson", "not JSON"),
            (vec![apply("{\"a\": 1} {")], "InvalidJson", "not JSON"),
        ];
        for (actions, reason, text) in cases {
            let err = check(&outcome(actions), &SMALL).expect_err(reason);
            assert_eq!(err.reason(), reason, "{err}");
            assert!(err.to_string().contains(text), "{err}");
        }
    }

    #[test]
    fn outcomes_within_bounds_pass() {
        let event = Action::Event(EventAction {
            regarding: match patch("{}") {
                Action::Patch(p) => p.target,
                _ => unreachable!(),
            },
            event_type: EventType::Normal,
            reason: "R".into(),
            action: "A".into(),
            note: "n".repeat(10),
        });
        let ok = outcome(vec![
            apply(&nested(4)),
            patch(r#"{"a":"[[[[[[{{{{"}"#),
            event,
        ]);
        assert_eq!(check(&ok, &SMALL), Ok(()));
        assert_eq!(check(&outcome(Vec::new()), &SMALL), Ok(()));
    }

    /// What the host may copy out of a guest per call, with the defaults:
    /// 8 MiB of bodies and 10,000 actions with their names, well under one
    /// instance's 64 MiB (it is booked per instance in the host budget).
    #[test]
    fn the_default_lift_bound_is_the_bodies_and_the_actions_names() {
        let bounds = OutcomeBounds::default();
        let per_action = size_of::<crate::plugin::bindings::types::Action>() + 512;
        assert_eq!(bounds.lift_bytes(), (8 << 20) + 10_000 * per_action);
        assert!(bounds.lift_bytes() < 16 << 20, "{}", bounds.lift_bytes());
    }

    /// A string's brackets and escaped quotes are not nesting; a body
    /// 100,000 deep is refused without recursion.
    #[test]
    fn depth_counts_brackets_outside_strings_only() {
        assert!(!json_depth_exceeds(r#"{"a":"\"{{{{{{{{"}"#, 1));
        assert!(json_depth_exceeds(r#"{"a":[{}]}"#, 2));
        assert!(!json_depth_exceeds(r#"{"a":[{}]}"#, 3));
        assert!(json_depth_exceeds(&nested(100_000), 100));
    }
}
