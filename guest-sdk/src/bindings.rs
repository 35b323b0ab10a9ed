//! The one place the WIT world is turned into Rust (`wit_bindgen::generate!`),
//! plus conversions between the generated types and the SDK's own types.
//! Nothing here is part of the public API: plugin code never sees the raw
//! bindings. The module is reachable as `rekon_sdk::__private::bindings`
//! only because the code that `export_plugin!` expands to in the plugin crate
//! must name it.

/// The generated bindings. They define `extern "C"` imports and exports and
/// lift and lower values through raw pointers; wit-bindgen guarantees their
/// soundness against the canonical ABI. This is the only unsafe code in the
/// SDK, and the lint allowances stop at this module.
#[allow(unsafe_code)]
mod generated {
    wit_bindgen::generate!({
        path: "../wit",
        // Every SDK plugin exports `admission`, `conversion` and
        // `policies` too; one without `policies` declares no policy; one
        // without `export_plugin!(P, admission)` declares no rules, one
        // without `conversion` no conversions, which the host takes as no
        // webhook.
        world: "api-plugin",
        // `export_plugin!` in the plugin crate expands to this macro, so it
        // must be public and must find the bindings (and wit-bindgen's
        // runtime) through rekon-sdk rather than through a dependency of the
        // plugin.
        pub_export_macro: true,
        export_macro_name: "__export_rekon_plugin_world",
        default_bindings_module: "::rekon_sdk::__private::bindings",
        runtime_path: "::rekon_sdk::__private::wit_bindgen::rt",
    });
}

pub use generated::*;

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use self::rekon::plugin::types as wit;
use crate::action::{Action, EventType, Outcome, PatchType, Propagation};
use crate::context::{Backend, ClusterHealth, ClusterInfo, LogLevel, Request};
use crate::error::{Error, ReadError};
use crate::registration::{ClusterSet, Mapping, Registration};
use crate::resource::{ResourceType, Scope};

/// The host imports, as a [`Backend`] for [`Context`](crate::Context).
pub(crate) struct HostBackend;

impl Backend for HostBackend {
    fn get(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        rekon::plugin::host::get(cluster, &resource.into(), namespace, name).map_err(Into::into)
    }

    fn list(
        &self,
        cluster: &str,
        resource: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        rekon::plugin::host::list(cluster, &resource.into(), namespace, label_selector)
            .map_err(Into::into)
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        rekon::plugin::host::clusters()
            .into_iter()
            .map(|c| ClusterInfo {
                name: c.name,
                primary: c.primary,
                health: match c.health {
                    wit::ClusterHealth::Ready => ClusterHealth::Ready,
                    wit::ClusterHealth::Syncing => ClusterHealth::Syncing,
                    wit::ClusterHealth::Unreachable => ClusterHealth::Unreachable,
                },
            })
            .collect()
    }

    fn log(&self, level: LogLevel, message: &str, fields: &[(String, String)]) {
        let level = match level {
            LogLevel::Debug => wit::LogLevel::Debug,
            LogLevel::Info => wit::LogLevel::Info,
            LogLevel::Warn => wit::LogLevel::Warn,
            LogLevel::Error => wit::LogLevel::Error,
        };
        rekon::plugin::host::log(level, message, fields);
    }

    fn request_time(&self) -> Timestamp {
        let t = rekon::plugin::host::request_time();
        timestamp(t.seconds, t.nanoseconds)
    }

    fn declare_settings_schema(&self, schema: &str) {
        rekon::plugin::host::settings_schema(schema);
    }
}

impl crate::settings::SettingsSource for HostBackend {
    fn settings(&self) -> Option<String> {
        rekon::plugin::host::settings()
    }
}

/// A `jiff::Timestamp` from the host's (seconds, nanoseconds), clamped to
/// jiff's range: a nonsensical host clock must not make every call fail.
pub(crate) fn timestamp(seconds: i64, nanoseconds: u32) -> Timestamp {
    let nanos = i32::try_from(nanoseconds.min(999_999_999)).unwrap_or(0);
    Timestamp::new(seconds, nanos).unwrap_or(if seconds < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

impl From<wit::ReadError> for ReadError {
    fn from(e: wit::ReadError) -> Self {
        match e {
            wit::ReadError::NotWatched(m) => ReadError::NotWatched(m),
            wit::ReadError::UnknownCluster(m) => ReadError::UnknownCluster(m),
            wit::ReadError::InvalidSelector(m) => ReadError::InvalidSelector(m),
        }
    }
}

impl From<&ResourceType> for wit::Resource {
    fn from(r: &ResourceType) -> Self {
        wit::Resource {
            group: r.group.clone(),
            version: r.version.clone(),
            kind: r.kind.clone(),
            plural: r.plural.clone(),
            scope: match r.scope {
                Scope::Namespaced => wit::Scope::Namespaced,
                Scope::Cluster => wit::Scope::Cluster,
            },
        }
    }
}

impl From<wit::Resource> for ResourceType {
    fn from(r: wit::Resource) -> Self {
        ResourceType {
            group: r.group,
            version: r.version,
            kind: r.kind,
            plural: r.plural,
            scope: match r.scope {
                wit::Scope::Namespaced => Scope::Namespaced,
                wit::Scope::Cluster => Scope::Cluster,
            },
        }
    }
}

impl From<wit::Request> for Request {
    fn from(r: wit::Request) -> Self {
        Request {
            cluster: r.cluster,
            namespace: r.namespace,
            name: r.name,
        }
    }
}

impl From<Request> for wit::Request {
    fn from(r: Request) -> Self {
        wit::Request {
            cluster: r.cluster,
            namespace: r.namespace,
            name: r.name,
        }
    }
}

impl From<wit::Phase> for rekon_rules::Phase {
    fn from(p: wit::Phase) -> Self {
        match p {
            wit::Phase::Live => Self::Live,
            wit::Phase::Deleting => Self::Deleting,
            wit::Phase::Leaving => Self::Leaving,
        }
    }
}

impl From<ClusterSet> for wit::ClusterSet {
    fn from(c: ClusterSet) -> Self {
        match c {
            ClusterSet::Primary => wit::ClusterSet::Primary,
            ClusterSet::All => wit::ClusterSet::All,
            ClusterSet::Others => wit::ClusterSet::Others,
            ClusterSet::Named(n) => wit::ClusterSet::Named(n),
        }
    }
}

impl From<Mapping> for wit::Mapping {
    fn from(m: Mapping) -> Self {
        match m {
            Mapping::Itself => wit::Mapping::Itself,
            Mapping::OwnerReference => wit::Mapping::OwnerReference,
            Mapping::OwnerLabels(l) => wit::Mapping::OwnerLabels(wit::OwnerLabels {
                cluster: l.cluster,
                namespace: l.namespace,
                name: l.name,
            }),
            Mapping::LabelKeyPrefixes(p) => wit::Mapping::LabelKeyPrefixes(p),
            Mapping::AllPrimaries => wit::Mapping::AllPrimaries,
            Mapping::Custom => wit::Mapping::Custom,
        }
    }
}

impl From<Registration> for wit::Registration {
    fn from(r: Registration) -> Self {
        wit::Registration {
            name: r.name,
            version: r.version,
            primary: (&r.primary).into(),
            primary_clusters: r.primary_clusters.into(),
            primary_selector: r.primary_selector,
            clusters: r.clusters.into(),
            watches: r
                .watches
                .into_iter()
                .map(|w| wit::Watch {
                    resource: (&w.resource).into(),
                    clusters: w.clusters.into(),
                    mapping: w.mapping.into(),
                    // The SDK does not narrow watches: the host's caches
                    // are shared per resource and cluster.
                    label_selector: None,
                })
                .collect(),
            finalizer: r.finalizer,
            permissions: r
                .permissions
                .into_iter()
                .map(|p| wit::Permission {
                    resource: (&p.resource).into(),
                    verbs: p.verbs.iter().map(|v| v.as_str().to_owned()).collect(),
                    status: p.status,
                    clusters: p.clusters.into(),
                })
                .collect(),
            crds: r.crds.iter().map(serde_json::Value::to_string).collect(),
            max_concurrent_reconciles: r.max_concurrent_reconciles,
        }
    }
}

impl From<crate::action::ObjectRef> for wit::ObjectRef {
    fn from(o: crate::action::ObjectRef) -> Self {
        wit::ObjectRef {
            cluster: o.cluster,
            resource: (&o.resource).into(),
            namespace: o.namespace,
            name: o.name,
        }
    }
}

impl From<Action> for wit::Action {
    fn from(a: Action) -> Self {
        match a {
            Action::Apply(a) => wit::Action::Apply(wit::ApplyAction {
                cluster: a.cluster,
                object: json_text(&a.object),
                status: a.status,
                force: a.force,
            }),
            Action::Patch(p) => wit::Action::Patch(wit::PatchAction {
                target: p.target.into(),
                patch_type: match p.patch_type {
                    PatchType::Merge => wit::PatchType::Merge,
                    PatchType::Json => wit::PatchType::Json,
                },
                patch: json_text(&p.patch),
                resource_version: p.resource_version,
                status: p.status,
            }),
            Action::Delete(d) => wit::Action::Delete(wit::DeleteAction {
                target: d.target.into(),
                uid: d.uid,
                propagation: d.propagation.map(|p| match p {
                    Propagation::Background => wit::Propagation::Background,
                    Propagation::Foreground => wit::Propagation::Foreground,
                    Propagation::Orphan => wit::Propagation::Orphan,
                }),
            }),
            Action::Create(c) => wit::Action::Create(wit::CreateAction {
                cluster: c.cluster,
                object: json_text(&c.object),
            }),
            Action::Event(e) => wit::Action::Event(wit::EventAction {
                regarding: e.regarding.into(),
                event_type: match e.event_type {
                    EventType::Normal => wit::EventType::Normal,
                    EventType::Warning => wit::EventType::Warning,
                },
                reason: e.reason,
                action: e.action,
                note: e.note,
            }),
        }
    }
}

impl From<Outcome> for wit::Outcome {
    fn from(o: Outcome) -> Self {
        wit::Outcome {
            actions: o.actions.into_iter().map(Into::into).collect(),
            requeue_after_ms: o.requeue_after.map(duration_ms),
            finalized: o.finalized,
        }
    }
}

/// The JSON text of a value crossing to the host. `serde_json::to_string`
/// writes straight into a byte buffer; `Value`'s `Display` (`to_string()`)
/// goes through a `fmt::Write` adapter per write: 14% of the instructions
/// of a whole 5 KB relabel reconcile in wasm (callgrind, host bench). Serializing a `Value` cannot fail (its keys are
/// strings and its numbers finite); should it ever, `Display` is the fallback.
fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// Milliseconds, rounded up so that a sub-millisecond requeue is not "now".
fn duration_ms(d: Duration) -> u64 {
    let ms = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms).unwrap_or(u64::MAX)
}

impl From<Error> for wit::ReconcileError {
    fn from(e: Error) -> Self {
        wit::ReconcileError {
            retryable: e.is_retryable(),
            message: e.message().to_owned(),
        }
    }
}

/// The admission interface's values, to and from the SDK's own.
mod admission {
    use super::exports::rekon::plugin::admission as wit;
    use crate::admission::{
        AdmissionKind, AdmissionRequest, AdmissionRule, Denial, FailurePolicy, Mutation, Operation,
        UserInfo, Verdict,
    };

    impl From<AdmissionRule> for wit::AdmissionRule {
        fn from(r: AdmissionRule) -> Self {
            wit::AdmissionRule {
                name: r.name,
                kind: match r.kind {
                    AdmissionKind::Validate => wit::AdmissionKind::Validate,
                    AdmissionKind::Mutate => wit::AdmissionKind::Mutate,
                },
                resources: r.resources.iter().map(Into::into).collect(),
                operations: r.operations.into_iter().map(Into::into).collect(),
                failure_policy: match r.failure_policy {
                    FailurePolicy::Fail => wit::FailurePolicy::Fail,
                    FailurePolicy::Ignore => wit::FailurePolicy::Ignore,
                },
                timeout_seconds: r.timeout_seconds,
                match_conditions: r
                    .match_conditions
                    .into_iter()
                    .map(|(name, expression)| wit::MatchCondition { name, expression })
                    .collect(),
            }
        }
    }

    impl From<Operation> for wit::Operation {
        fn from(o: Operation) -> Self {
            match o {
                Operation::Create => wit::Operation::Create,
                Operation::Update => wit::Operation::Update,
                Operation::Delete => wit::Operation::Delete,
                Operation::Connect => wit::Operation::Connect,
            }
        }
    }

    /// A JSON text from the host; text that is not JSON is kept as a
    /// string value (the plugin's decode then fails with a clear message).
    fn json(text: Option<String>) -> Option<serde_json::Value> {
        text.map(|t| serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t)))
    }

    impl From<wit::AdmissionRequest> for AdmissionRequest {
        fn from(r: wit::AdmissionRequest) -> Self {
            AdmissionRequest {
                uid: r.uid,
                cluster: r.cluster,
                resource: r.resource.into(),
                sub_resource: r.sub_resource,
                operation: match r.operation {
                    wit::Operation::Create => Operation::Create,
                    wit::Operation::Update => Operation::Update,
                    wit::Operation::Delete => Operation::Delete,
                    wit::Operation::Connect => Operation::Connect,
                },
                namespace: r.namespace,
                name: r.name,
                object: json(r.object),
                old_object: json(r.old_object),
                user: UserInfo {
                    username: r.user.username,
                    uid: r.user.uid,
                    groups: r.user.groups,
                },
                dry_run: r.dry_run,
            }
        }
    }

    fn denial(d: Denial) -> wit::Denial {
        wit::Denial {
            message: d.message,
            code: d.code,
            field_errors: d
                .field_errors
                .into_iter()
                .map(|(path, message)| wit::FieldError { path, message })
                .collect(),
        }
    }

    impl From<Verdict> for wit::Verdict {
        fn from(v: Verdict) -> Self {
            let (denied, warnings) = v.into_parts();
            wit::Verdict {
                denied: denied.map(denial),
                warnings,
            }
        }
    }

    impl From<Mutation> for wit::Mutation {
        fn from(m: Mutation) -> Self {
            let (object, verdict) = m.into_parts();
            let (denied, warnings) = verdict.into_parts();
            wit::Mutation {
                object: object.map(|o| o.to_string()),
                denied: denied.map(denial),
                warnings,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_to_milliseconds() {
        assert_eq!(duration_ms(Duration::from_secs(2)), 2000);
        assert_eq!(duration_ms(Duration::from_micros(1)), 1);
        assert_eq!(duration_ms(Duration::from_micros(1500)), 2);
        assert_eq!(duration_ms(Duration::MAX), u64::MAX);
    }

    #[test]
    fn timestamps_are_clamped() {
        assert_eq!(timestamp(1, 5).as_nanosecond(), 1_000_000_005);
        assert_eq!(timestamp(i64::MAX, 0), Timestamp::MAX);
        assert_eq!(timestamp(i64::MIN, 0), Timestamp::MIN);
    }
}

/// The conversion interface's values, from the SDK's own.
mod conversion {
    use super::exports::rekon::plugin::conversion as wit;
    use crate::conversion::Conversion;

    impl From<Conversion> for wit::ConversionRule {
        fn from(c: Conversion) -> Self {
            wit::ConversionRule {
                group: c.group,
                kind: c.kind,
                plural: c.plural,
                versions: c.versions,
            }
        }
    }
}

/// The policies interface's values, from the SDK's own.
mod policies {
    use super::exports::rekon::plugin::policies as wit;
    use crate::admission::{FailurePolicy, Operation};
    use crate::policies::{Policy, PolicyReason};

    impl From<Policy> for wit::Policy {
        fn from(p: Policy) -> Self {
            wit::Policy {
                name: p.name,
                resources: p.resources.iter().map(Into::into).collect(),
                operations: p
                    .operations
                    .into_iter()
                    .map(|o| match o {
                        Operation::Create => wit::PolicyOperation::Create,
                        Operation::Update => wit::PolicyOperation::Update,
                        Operation::Delete => wit::PolicyOperation::Delete,
                        Operation::Connect => wit::PolicyOperation::Connect,
                    })
                    .collect(),
                failure_policy: match p.failure_policy {
                    FailurePolicy::Fail => wit::PolicyFailure::Fail,
                    FailurePolicy::Ignore => wit::PolicyFailure::Ignore,
                },
                match_conditions: p
                    .match_conditions
                    .into_iter()
                    .map(|(name, expression)| wit::PolicyCondition { name, expression })
                    .collect(),
                validations: p
                    .validations
                    .into_iter()
                    .map(|v| wit::PolicyValidation {
                        expression: v.expression,
                        message: v.message,
                        message_expression: v.message_expression,
                        reason: v.reason.map(|r| match r {
                            PolicyReason::Unauthorized => wit::PolicyReason::Unauthorized,
                            PolicyReason::Forbidden => wit::PolicyReason::Forbidden,
                            PolicyReason::Invalid => wit::PolicyReason::Invalid,
                            PolicyReason::RequestEntityTooLarge => {
                                wit::PolicyReason::RequestEntityTooLarge
                            }
                        }),
                    })
                    .collect(),
            }
        }
    }
}
