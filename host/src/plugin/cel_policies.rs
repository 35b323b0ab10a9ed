//! The CEL admission policies of a loaded plugin (`wit/policies.wit`):
//! asked once at load (after `register`, in a fresh sandbox reading
//! nothing), checked with `rekon_rules::policies` and every expression
//! compiled with kube-cel (`rekon_rules::cel`), as the API server compiles
//! a ValidatingAdmissionPolicy; a policy that breaks a rule or does not
//! compile refuses the load. Kept with that load; the host never evaluates
//! them (the API server does, from what `rekon policies` writes).

use std::sync::Arc;
use std::time::SystemTime;

use super::bindings::PoliciesPluginPre;
use super::bindings::wit_policies as wit;
use super::call::{Instantiate, call};
use super::convert::Convert;
use super::error::LoadError;
use super::host_reads::NoReads;
use super::runtime::RuntimeInner;
use super::sandbox::CallState;
use crate::action::{Resource, timestamp};

/// One policy a plugin declared (`policy` in `wit/policies.wit`), in the
/// API server's words (`CREATE`, `Fail`, `Invalid`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CelPolicy {
    /// A DNS label, unique among the plugin's policies.
    pub name: String,
    /// The resources it applies to (plurals given).
    pub resources: Vec<Resource>,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operations: Vec<String>,
    /// `Fail` or `Ignore`.
    pub failure_policy: String,
    /// Conditions narrowing which requests it applies to.
    pub match_conditions: Vec<CelCondition>,
    /// The checks.
    pub validations: Vec<CelValidation>,
}

/// A match condition of a [`CelPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CelCondition {
    /// Its name.
    pub name: String,
    /// The CEL expression.
    pub expression: String,
}

/// One validation of a [`CelPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CelValidation {
    /// The CEL expression that must be true.
    pub expression: String,
    /// The message of a refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The CEL expression of the message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_expression: Option<String>,
    /// `Unauthorized`, `Forbidden`, `Invalid` or `RequestEntityTooLarge`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Instantiate for PoliciesPluginPre<CallState> {
    type Instance = super::bindings::PoliciesPlugin;
    fn instantiate(
        &self,
        store: &mut wasmtime::Store<CallState>,
    ) -> wasmtime::Result<Self::Instance> {
        PoliciesPluginPre::instantiate(self, store)
    }
}

/// The policies export of a component that has one, linked.
pub(super) fn link(
    exported: bool,
    instance_pre: &wasmtime::component::InstancePre<CallState>,
    origin: &str,
) -> Result<Option<PoliciesPluginPre<CallState>>, LoadError> {
    if !exported {
        return Ok(None);
    }
    PoliciesPluginPre::new(instance_pre.clone())
        .map(Some)
        .map_err(|e| LoadError::WrongWorld {
            origin: origin.to_owned(),
            reason: format!(
                "policies exports do not match {}: {e:#}",
                super::contract::host_range()
            ),
        })
}

fn operation(o: wit::PolicyOperation) -> String {
    match o {
        wit::PolicyOperation::Create => "CREATE",
        wit::PolicyOperation::Update => "UPDATE",
        wit::PolicyOperation::Delete => "DELETE",
        wit::PolicyOperation::Connect => "CONNECT",
    }
    .to_owned()
}

fn reason(r: wit::PolicyReason) -> String {
    match r {
        wit::PolicyReason::Unauthorized => "Unauthorized",
        wit::PolicyReason::Forbidden => "Forbidden",
        wit::PolicyReason::Invalid => "Invalid",
        wit::PolicyReason::RequestEntityTooLarge => "RequestEntityTooLarge",
    }
    .to_owned()
}

impl From<wit::Policy> for CelPolicy {
    fn from(p: wit::Policy) -> Self {
        Self {
            name: p.name,
            resources: p.resources.convert(),
            operations: p.operations.into_iter().map(operation).collect(),
            failure_policy: match p.failure_policy {
                wit::PolicyFailure::Fail => "Fail",
                wit::PolicyFailure::Ignore => "Ignore",
            }
            .to_owned(),
            match_conditions: p
                .match_conditions
                .into_iter()
                .map(|c| CelCondition {
                    name: c.name,
                    expression: c.expression,
                })
                .collect(),
            validations: p
                .validations
                .into_iter()
                .map(|v| CelValidation {
                    expression: v.expression,
                    message: v.message,
                    message_expression: v.message_expression,
                    reason: v.reason.map(reason),
                })
                .collect(),
        }
    }
}

/// Every problem of `policies`: the first rule one breaks
/// (`rekon_rules::policies`), then every expression that does not compile.
#[must_use]
pub fn problems(policies: &[CelPolicy]) -> Vec<String> {
    let plurals: Vec<Vec<&str>> = policies
        .iter()
        .map(|p| p.resources.iter().map(|r| r.plural.as_str()).collect())
        .collect();
    let conditions: Vec<Vec<&str>> = policies
        .iter()
        .map(|p| p.match_conditions.iter().map(|c| c.name.as_str()).collect())
        .collect();
    let shapes: Vec<_> = policies
        .iter()
        .zip(plurals.iter().zip(&conditions))
        .map(
            |(p, (plurals, conditions))| rekon_rules::policies::PolicyShape {
                name: &p.name,
                plurals,
                operations: p.operations.len(),
                condition_names: conditions,
                validations: p.validations.len(),
            },
        )
        .collect();
    let mut found: Vec<String> = rekon_rules::policies::check_policies(&shapes)
        .err()
        .into_iter()
        .collect();
    for p in policies {
        let validations: Vec<_> = p
            .validations
            .iter()
            .map(|v| (v.expression.as_str(), v.message_expression.as_deref()))
            .collect();
        let conditions: Vec<_> = p
            .match_conditions
            .iter()
            .map(|c| (c.name.as_str(), c.expression.as_str()))
            .collect();
        found.extend(rekon_rules::cel::policy_problems(
            &p.name,
            &validations,
            &conditions,
        ));
    }
    found
}

/// Calls `policies` (under the `register` deadline, reading nothing) and
/// checks them: empty when there is no policies export or it declares none.
pub(super) fn load(
    runtime: &RuntimeInner,
    pre: Option<PoliciesPluginPre<CallState>>,
    name: &Arc<str>,
    origin: &str,
    settings: Option<Arc<str>>,
) -> Result<Vec<CelPolicy>, LoadError> {
    let Some(pre) = pre else {
        return Ok(Vec::new());
    };
    let policies: Vec<CelPolicy> = call(
        runtime,
        &pre,
        name,
        "policies",
        runtime.config.register_timeout,
        Arc::new(NoReads),
        timestamp(SystemTime::UNIX_EPOCH),
        settings,
        |store, plugin| plugin.rekon_plugin_policies().call_policies(store),
    )
    .map_err(|source| LoadError::Register {
        origin: origin.to_owned(),
        source: Box::new(source),
    })?
    .into_iter()
    .map(CelPolicy::from)
    .collect();
    let found = problems(&policies);
    if found.is_empty() {
        Ok(policies)
    } else {
        Err(LoadError::InvalidRegistration {
            origin: origin.to_owned(),
            reason: found.join("; "),
        })
    }
}
