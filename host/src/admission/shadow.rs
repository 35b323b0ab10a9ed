//! A shadow version's admission: while a plugin has a shadow version
//! (`spec.shadow` of its Plugin object, or a `*.shadow.wasm` file), each
//! review the serving version answered is also given to the shadow, after
//! the answer is made and on a task of its own, so that the API server's
//! answer never waits for it; the two verdicts are compared and counted
//! (`rekon_admission_shadow_verdicts_total`, the Plugin object's
//! `status.shadow.admission`). The shadow's verdict is never enforced.
//!
//! At most [`MAX_IN_FLIGHT`] shadow calls run at a time (they share the
//! plugin's instance slots with the serving version's calls); a review
//! arriving beyond that is not shadowed and is counted `dropped`.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::plugin::{AdmissionKind, Answer, Denial, HostReads, LoadedPlugin, Operation, Review};
use crate::telemetry::metrics::{AdmissionDivergence, Metrics, ShadowVerdict};

/// Shadow admission calls at a time, over every plugin.
pub const MAX_IN_FLIGHT: usize = 8;

/// Runs shadow reviews beside the serving ones; cheap to clone.
#[derive(Clone, Debug)]
pub struct ShadowReviews {
    slots: Arc<Semaphore>,
    metrics: Metrics,
}

impl ShadowReviews {
    /// Counting in `metrics`.
    #[must_use]
    pub fn new(metrics: Metrics) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            metrics,
        }
    }

    /// Gives `review` to `shadow` on a task of its own and compares its
    /// answer with `serving`'s (the answer the API server got).
    pub fn spawn(
        &self,
        shadow: LoadedPlugin,
        kind: AdmissionKind,
        review: Review,
        reads: Arc<dyn HostReads>,
        serving: &Answer,
    ) {
        let label = kind_label(kind);
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            self.metrics.admission_shadow_verdict(
                shadow.name(),
                label,
                ShadowVerdict::Dropped,
                None,
            );
            return;
        };
        let serving = serving.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let object = describe_object(&review);
            let operation = operation(review.operation);
            let answer = shadow.review(kind, review, reads).await;
            let (verdict, message) = match &answer {
                Ok(answer) => compare(&serving, answer),
                Err(e) => (ShadowVerdict::Failed, e.to_string()),
            };
            let divergence = (verdict != ShadowVerdict::Identical).then(|| AdmissionDivergence {
                object,
                operation: operation.to_owned(),
                result: result_name(verdict).to_owned(),
                message,
                observed_at: k8s_openapi::jiff::Timestamp::now()
                    .round(k8s_openapi::jiff::Unit::Second)
                    .map(|t| t.to_string())
                    .unwrap_or_default(),
            });
            if let Some(d) = &divergence {
                tracing::info!(plugin = %shadow.name(), kind = label, object = %d.object, result = %d.result, message = %d.message, "shadow admission verdict differs from the serving one (not enforced)");
            }
            metrics.admission_shadow_verdict(shadow.name(), label, verdict, divergence);
        });
    }
}

fn kind_label(kind: AdmissionKind) -> &'static str {
    match kind {
        AdmissionKind::Validate => "validate",
        AdmissionKind::Mutate => "mutate",
    }
}

fn operation(o: Operation) -> &'static str {
    match o {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// `Kind namespace/name` (`Kind name` when cluster-scoped).
fn describe_object(review: &Review) -> String {
    match &review.namespace {
        Some(ns) => format!("{} {ns}/{}", review.resource.kind, review.name),
        None => format!("{} {}", review.resource.kind, review.name),
    }
}

/// The status name of a result (`wouldDeny`, ...).
fn result_name(verdict: ShadowVerdict) -> &'static str {
    match verdict {
        ShadowVerdict::Identical => "identical",
        ShadowVerdict::WouldDeny => "wouldDeny",
        ShadowVerdict::WouldAllow => "wouldAllow",
        ShadowVerdict::Differs => "differs",
        ShadowVerdict::Failed => "failed",
        ShadowVerdict::Dropped => "dropped",
    }
}

fn denial(answer: &Answer) -> Option<&Denial> {
    match answer {
        Answer::Validated(v) => v.denied.as_ref(),
        Answer::Mutated(m) => m.denied.as_ref(),
    }
}

/// What an answer decides, for comparing: the denial, the warnings and
/// the mutated object as JSON (two texts of one object compare equal).
fn decision(answer: &Answer) -> (Option<&Denial>, &[String], Option<Value>) {
    let (warnings, object) = match answer {
        Answer::Validated(v) => (&v.warnings[..], None),
        Answer::Mutated(m) => (
            &m.warnings[..],
            m.object.as_deref().map(|text| {
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
            }),
        ),
    };
    (denial(answer), warnings, object)
}

/// How `shadow` answered beside `serving`, and the message worth showing.
#[must_use]
pub fn compare(serving: &Answer, shadow: &Answer) -> (ShadowVerdict, String) {
    match (denial(serving), denial(shadow)) {
        (None, Some(d)) => (ShadowVerdict::WouldDeny, d.message.clone()),
        (Some(d), None) => (ShadowVerdict::WouldAllow, d.message.clone()),
        _ => {
            let (serving_denial, serving_warnings, serving_object) = decision(serving);
            let (shadow_denial, shadow_warnings, shadow_object) = decision(shadow);
            if serving_denial != shadow_denial {
                let message = shadow_denial.map(|d| d.message.clone()).unwrap_or_default();
                (
                    ShadowVerdict::Differs,
                    format!("denied otherwise: {message}"),
                )
            } else if serving_object != shadow_object {
                (
                    ShadowVerdict::Differs,
                    "would store another object (mutation)".to_owned(),
                )
            } else if serving_warnings != shadow_warnings {
                (
                    ShadowVerdict::Differs,
                    format!("other warnings: {}", shadow_warnings.join("; ")),
                )
            } else {
                (ShadowVerdict::Identical, String::new())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{Mutation, Verdict};

    fn allow(warnings: &[&str]) -> Answer {
        Answer::Validated(Verdict {
            denied: None,
            warnings: warnings.iter().map(|w| (*w).to_owned()).collect(),
        })
    }

    fn deny(message: &str) -> Answer {
        Answer::Validated(Verdict {
            denied: Some(Denial {
                message: message.into(),
                code: 422,
                field_errors: vec![],
            }),
            warnings: vec![],
        })
    }

    fn mutated(object: &str) -> Answer {
        Answer::Mutated(Mutation {
            object: Some(object.into()),
            denied: None,
            warnings: vec![],
        })
    }

    #[test]
    fn verdicts_compare_by_what_they_decide() {
        assert_eq!(
            compare(&allow(&[]), &deny("at most 5")),
            (ShadowVerdict::WouldDeny, "at most 5".to_owned())
        );
        assert_eq!(
            compare(&deny("at most 10"), &allow(&[])),
            (ShadowVerdict::WouldAllow, "at most 10".to_owned())
        );
        assert_eq!(compare(&deny("a"), &deny("a")).0, ShadowVerdict::Identical);
        assert_eq!(compare(&deny("a"), &deny("b")).0, ShadowVerdict::Differs);
        assert_eq!(
            compare(&allow(&["x"]), &allow(&[])).0,
            ShadowVerdict::Differs
        );
        // One object in two texts is the same mutation; another is not.
        assert_eq!(
            compare(
                &mutated(r#"{"a":1,"b":2}"#),
                &mutated(r#"{"b": 2, "a": 1}"#)
            )
            .0,
            ShadowVerdict::Identical
        );
        assert_eq!(
            compare(&mutated(r#"{"a":1}"#), &mutated(r#"{"a":2}"#)).0,
            ShadowVerdict::Differs
        );
    }
}
