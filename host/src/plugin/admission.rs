//! The admission side of a loaded plugin: its rules, asked once at load
//! (after `register`) and kept with that load, and its `validate` and
//! `mutate` calls, each in a fresh sandbox under the plugin's memory cap,
//! instance slot and fair share, with a deadline no longer than its
//! webhooks' timeout. A call reads through the [`HostReads`] it is given
//! and cannot write: the interface returns no action.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::bindings::AdmissionPluginPre;
use super::bindings::admission as wit;
use super::call::call;
use super::convert::Convert;
use super::error::{CallError, LoadError};
use super::host_reads::{HostReads, NoReads};
use super::runtime::RuntimeInner;
use super::sandbox::CallState;
use crate::action::{Resource, timestamp};

pub use wit::{
    AdmissionKind, Denial, FailurePolicy, FieldError, MatchCondition, Mutation, Operation,
    UserInfo, Verdict,
};

/// One webhook a plugin declared (`admission-rule` in `wit/admission.wit`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AdmissionRule {
    /// A DNS label, unique among the plugin's rules of its kind.
    pub name: String,
    /// Validating or mutating.
    pub kind: AdmissionKind,
    /// The resources admitted (plurals given).
    pub resources: Vec<Resource>,
    /// The operations admitted.
    pub operations: Vec<Operation>,
    /// What the API server does when the call fails.
    pub failure_policy: FailurePolicy,
    /// The API server's timeout for one call, if the plugin gave one.
    pub timeout_seconds: Option<u32>,
    /// CEL conditions narrowing which requests are sent.
    pub match_conditions: Vec<MatchCondition>,
}

impl AdmissionRule {
    /// Whether it configures a mutating webhook.
    #[must_use]
    pub fn mutating(&self) -> bool {
        self.kind == AdmissionKind::Mutate
    }

    /// Its timeout, or the API server's default.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(u64::from(
            self.timeout_seconds
                .unwrap_or(rekon_rules::admission::DEFAULT_TIMEOUT_SECONDS),
        ))
    }
}

impl Convert<AdmissionRule> for wit::AdmissionRule {
    fn convert(self) -> AdmissionRule {
        AdmissionRule {
            name: self.name,
            kind: self.kind,
            resources: self.resources.convert(),
            operations: self.operations,
            failure_policy: self.failure_policy,
            timeout_seconds: self.timeout_seconds,
            match_conditions: self.match_conditions,
        }
    }
}

/// One admission request as the webhook server hands it to a plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Review {
    /// The request's UID.
    pub uid: String,
    /// The cluster the request comes from.
    pub cluster: String,
    /// The resource requested.
    pub resource: Resource,
    /// The subresource requested, if any.
    pub sub_resource: Option<String>,
    /// What is done.
    pub operation: Operation,
    /// The object's namespace.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// The object (JSON); none for a delete.
    pub object: Option<String>,
    /// The object before the change (JSON).
    pub old_object: Option<String>,
    /// Who asks.
    pub user: UserInfo,
    /// Nothing will be stored.
    pub dry_run: bool,
}

impl Convert<wit::AdmissionRequest> for Review {
    fn convert(self) -> wit::AdmissionRequest {
        wit::AdmissionRequest {
            uid: self.uid,
            cluster: self.cluster,
            resource: self.resource.convert(),
            sub_resource: self.sub_resource,
            operation: self.operation,
            namespace: self.namespace,
            name: self.name,
            object: self.object,
            old_object: self.old_object,
            user: self.user,
            dry_run: self.dry_run,
        }
    }
}

/// What a loaded plugin admits: its linked admission export and its rules
/// (never empty: a plugin declaring none has no `PluginAdmission`).
pub(crate) struct PluginAdmission {
    pre: AdmissionPluginPre<CallState>,
    rules: Vec<AdmissionRule>,
}

impl PluginAdmission {
    /// Calls `rules` (under the `register` deadline, reading nothing) and
    /// checks them with [`rekon_rules::admission::check_rules`]: `None` when
    /// the plugin declares no rule.
    pub(crate) fn load(
        runtime: &RuntimeInner,
        pre: AdmissionPluginPre<CallState>,
        name: &Arc<str>,
        origin: &str,
        settings: Option<Arc<str>>,
    ) -> Result<Option<Self>, LoadError> {
        let rules: Vec<AdmissionRule> = call(
            runtime,
            &pre,
            name,
            "admission_rules",
            runtime.config.register_timeout,
            Arc::new(NoReads),
            timestamp(SystemTime::UNIX_EPOCH),
            settings,
            |store, plugin| plugin.rekon_plugin_admission().call_rules(store),
        )
        .map_err(|source| LoadError::Register {
            origin: origin.to_owned(),
            source: Box::new(source),
        })?
        .convert();
        check(&rules).map_err(|reason| LoadError::InvalidRegistration {
            origin: origin.to_owned(),
            reason,
        })?;
        Ok((!rules.is_empty()).then_some(Self { pre, rules }))
    }

    pub(crate) fn rules(&self) -> &[AdmissionRule] {
        &self.rules
    }

    /// The deadline of a call of `kind`: the shortest timeout of its rules
    /// (an answer after the API server gave up is worth nothing), at most
    /// the runtime's call timeout. `None` when no rule is of that kind.
    pub(crate) fn deadline(&self, kind: AdmissionKind, call_timeout: Duration) -> Option<Duration> {
        self.rules
            .iter()
            .filter(|r| r.kind == kind)
            .map(AdmissionRule::timeout)
            .min()
            .map(|t| t.min(call_timeout))
    }

    pub(crate) fn pre(&self) -> &AdmissionPluginPre<CallState> {
        &self.pre
    }
}

fn check(rules: &[AdmissionRule]) -> Result<(), String> {
    let plurals: Vec<Vec<&str>> = rules
        .iter()
        .map(|r| r.resources.iter().map(|t| t.plural.as_str()).collect())
        .collect();
    let conditions: Vec<Vec<&str>> = rules
        .iter()
        .map(|r| r.match_conditions.iter().map(|c| c.name.as_str()).collect())
        .collect();
    let shapes: Vec<_> = rules
        .iter()
        .zip(plurals.iter().zip(&conditions))
        .map(
            |(r, (plurals, conditions))| rekon_rules::admission::RuleShape {
                name: &r.name,
                mutating: r.mutating(),
                plurals,
                operations: r.operations.len(),
                timeout_seconds: r.timeout_seconds,
                condition_names: conditions,
            },
        )
        .collect();
    rekon_rules::admission::check_rules(&shapes)
}

/// A plugin's answer to one review.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// From `validate`.
    Validated(Verdict),
    /// From `mutate`.
    Mutated(Mutation),
}

/// Why a plugin gave no answer to a review.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// The plugin declares no webhook of this kind.
    #[error("plugin {plugin} has no {kind} webhook")]
    NoWebhook {
        /// The plugin.
        plugin: String,
        /// `validating` or `mutating`.
        kind: &'static str,
    },
    /// The plugin is backed off for hitting its bounds again and again
    /// (the fair share, `fair_share.rs`): no call until its next turn.
    #[error("plugin {plugin} is backed off for {wait:?} after repeated containments")]
    BackedOff {
        /// The plugin.
        plugin: String,
        /// Until its next turn.
        wait: Duration,
    },
    /// The call failed in the sandbox (trap, timeout, memory, no slot).
    #[error(transparent)]
    Call(#[from] CallError),
}

impl super::LoadedPlugin {
    /// The webhooks this load declared (empty when it admits nothing).
    #[must_use]
    pub fn admission_rules(&self) -> &[AdmissionRule] {
        self.admission().map_or(&[], PluginAdmission::rules)
    }

    /// Calls `validate` (for [`AdmissionKind::Validate`]) or `mutate` on
    /// `review` in a fresh sandbox on a blocking thread, reading `reads`.
    ///
    /// # Errors
    /// No webhook of that kind, or the call failed.
    pub async fn review(
        &self,
        kind: AdmissionKind,
        review: Review,
        reads: Arc<dyn HostReads>,
    ) -> Result<Answer, AdmitError> {
        let this = self.clone();
        let function = match kind {
            AdmissionKind::Validate => "validate",
            AdmissionKind::Mutate => "mutate",
        };
        self.blocking(function, move || {
            Ok(this.review_blocking(kind, review, reads))
        })
        .await?
    }

    /// [`Self::review`] on the current thread.
    ///
    /// # Errors
    /// As [`Self::review`].
    pub fn review_blocking(
        &self,
        kind: AdmissionKind,
        review: Review,
        reads: Arc<dyn HostReads>,
    ) -> Result<Answer, AdmitError> {
        let no_webhook = || AdmitError::NoWebhook {
            plugin: self.name().to_owned(),
            kind: match kind {
                AdmissionKind::Validate => "validating",
                AdmissionKind::Mutate => "mutating",
            },
        };
        let admission = self.admission().ok_or_else(no_webhook)?;
        let timeout = admission
            .deadline(kind, self.call_timeout())
            .ok_or_else(no_webhook)?;
        // The same fair share as its reconciles: a plugin contained again
        // and again is not called until its next turn.
        self.admit().map_err(|wait| AdmitError::BackedOff {
            plugin: self.name().to_owned(),
            wait,
        })?;
        let request: wit::AdmissionRequest = review.convert();
        let answer = match kind {
            AdmissionKind::Validate => Answer::Validated(self.call_fresh_with(
                admission.pre(),
                "validate",
                timeout,
                reads,
                |store, plugin| {
                    plugin
                        .rekon_plugin_admission()
                        .call_validate(store, &request)
                },
            )?),
            AdmissionKind::Mutate => Answer::Mutated(self.call_fresh_with(
                admission.pre(),
                "mutate",
                timeout,
                reads,
                |store, plugin| plugin.rekon_plugin_admission().call_mutate(store, &request),
            )?),
        };
        Ok(answer)
    }
}
