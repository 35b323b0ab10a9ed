//! The API side of a plugin: admission webhooks served by the host.
//!
//! A plugin that implements [`Admission`] besides [`Plugin`] and is exported
//! with `export_plugin!(P, admission)` declares its webhooks in
//! [`Admission::rules`]; the host serves them (`rekon run --webhook-addr`)
//! and calls [`Admission::validate`] or [`Admission::mutate`] for every
//! request the API server sends, in a fresh sandbox like a reconcile. A
//! call reads the caches through its [`Context`] and never writes.
//!
//! ```
//! use rekon_sdk::prelude::*;
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! struct Guard;
//! impl Plugin for Guard {
//!     type Primary = ConfigMap;
//!     fn register() -> Result<Registration, Error> {
//!         Ok(Registration::new::<ConfigMap>("guard", "0.1.0"))
//!     }
//!     fn reconcile(_: &Context, _: &Request, _: Event<ConfigMap>) -> Result<Outcome, Error> {
//!         Ok(Outcome::done())
//!     }
//! }
//! impl Admission for Guard {
//!     fn rules() -> Vec<AdmissionRule> {
//!         vec![AdmissionRule::validate::<ConfigMap>("data")]
//!     }
//!     fn validate(_: &Context, req: &AdmissionRequest) -> Result<Verdict, Error> {
//!         let Some(cm) = req.object::<ConfigMap>()? else { return Ok(Verdict::allow()) };
//!         if cm.data.is_some_and(|d| d.contains_key("password")) {
//!             return Ok(Verdict::deny("passwords belong in Secrets").field("data.password", "not allowed here"));
//!         }
//!         Ok(Verdict::allow())
//!     }
//! }
//!
//! let ctx = rekon_sdk::testkit::World::new().primary("main").context();
//! let mut cm = ConfigMap::default();
//! cm.data = Some([("password".to_string(), "x".to_string())].into());
//! let verdict = Guard::validate(&ctx, &AdmissionRequest::create("main", &cm)).unwrap();
//! assert_eq!(verdict.denial().unwrap().message, "passwords belong in Secrets");
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::action::typed_to_json;
use crate::context::Context;
use crate::error::Error;
use crate::plugin::Plugin;
use crate::resource::{Kind, ResourceType};

/// The operation a request is admitted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A new object.
    Create,
    /// A change of an existing object.
    Update,
    /// A deletion (no object, the old object is the one deleted).
    Delete,
    /// A connect (`pods/exec`...).
    Connect,
}

/// What the API server does when the call fails (trap, timeout, host
/// unreachable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Refuse the request (the default).
    #[default]
    Fail,
    /// Admit it as if there were no webhook.
    Ignore,
}

/// Which webhook a rule configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionKind {
    /// Validating: [`Admission::validate`] is called.
    Validate,
    /// Mutating: [`Admission::mutate`] is called.
    Mutate,
}

/// One webhook of the plugin (an entry of the webhook configuration
/// `rekon webhooks` writes, named `<name>.<plugin>.rekon.dev`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionRule {
    /// A DNS label, unique among the plugin's rules of its kind.
    pub name: String,
    /// Validating or mutating.
    pub kind: AdmissionKind,
    /// The resources admitted (their plurals are the rule's resources).
    pub resources: Vec<ResourceType>,
    /// The operations admitted.
    pub operations: Vec<Operation>,
    /// What the API server does when the call fails.
    pub failure_policy: FailurePolicy,
    /// The API server's timeout for one call (1 to 30 s); `None`: the host's.
    pub timeout_seconds: Option<u32>,
    /// CEL conditions `(name, expression)` narrowing which requests are sent.
    pub match_conditions: Vec<(String, String)>,
}

impl AdmissionRule {
    fn of<K: Kind>(name: &str, kind: AdmissionKind) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            resources: vec![K::resource_type()],
            operations: vec![Operation::Create, Operation::Update],
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: None,
            match_conditions: Vec::new(),
        }
    }

    /// A validating webhook named `name` for creates and updates of `K`,
    /// failure policy `Fail`.
    #[must_use]
    pub fn validate<K: Kind>(name: &str) -> Self {
        Self::of::<K>(name, AdmissionKind::Validate)
    }

    /// A mutating webhook named `name` for creates and updates of `K`,
    /// failure policy `Fail`.
    #[must_use]
    pub fn mutate<K: Kind>(name: &str) -> Self {
        Self::of::<K>(name, AdmissionKind::Mutate)
    }

    /// Admits these operations instead of create and update.
    #[must_use]
    pub fn operations(mut self, operations: &[Operation]) -> Self {
        self.operations = operations.to_vec();
        self
    }

    /// Also admits `K`.
    #[must_use]
    pub fn resource<K: Kind>(mut self) -> Self {
        self.resources.push(K::resource_type());
        self
    }

    /// What the API server does when the call fails.
    #[must_use]
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure_policy = policy;
        self
    }

    /// The API server's timeout for one call, in seconds (1 to 30).
    #[must_use]
    pub fn timeout_seconds(mut self, seconds: u32) -> Self {
        self.timeout_seconds = Some(seconds);
        self
    }

    /// Sends only the requests for which the CEL `expression` is true.
    #[must_use]
    pub fn match_condition(mut self, name: &str, expression: &str) -> Self {
        self.match_conditions
            .push((name.to_owned(), expression.to_owned()));
        self
    }
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// The user's name.
    pub username: String,
    /// The user's UID (may be empty).
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

/// One admission request, its objects as JSON (decode them with
/// [`AdmissionRequest::object`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionRequest {
    /// The request's UID.
    pub uid: String,
    /// The cluster the request comes from.
    pub cluster: String,
    /// The resource requested.
    pub resource: ResourceType,
    /// The subresource requested, if any.
    pub sub_resource: Option<String>,
    /// What is done.
    pub operation: Operation,
    /// The object's namespace.
    pub namespace: Option<String>,
    /// The object's name (empty on a create with `generateName`).
    pub name: String,
    /// The object as it would be stored; `None` for a delete.
    pub object: Option<Value>,
    /// The object before the change, for update and delete.
    pub old_object: Option<Value>,
    /// Who asks.
    pub user: UserInfo,
    /// Nothing will be stored.
    pub dry_run: bool,
}

impl AdmissionRequest {
    /// A create of `obj` in `cluster` by `kubernetes-admin` (for tests).
    pub fn create<K: Kind + Serialize>(cluster: &str, obj: &K) -> Self {
        let value = typed_to_json(obj);
        Self::of::<K>(cluster, Operation::Create, Some(value), None)
    }

    /// An update of `old` to `new` in `cluster` (for tests).
    pub fn update<K: Kind + Serialize>(cluster: &str, old: &K, new: &K) -> Self {
        let (new, old) = (typed_to_json(new), typed_to_json(old));
        Self::of::<K>(cluster, Operation::Update, Some(new), Some(old))
    }

    /// A delete of `obj` in `cluster` (for tests).
    pub fn delete<K: Kind + Serialize>(cluster: &str, obj: &K) -> Self {
        let old = typed_to_json(obj);
        Self::of::<K>(cluster, Operation::Delete, None, Some(old))
    }

    fn of<K: Kind>(
        cluster: &str,
        operation: Operation,
        object: Option<Value>,
        old: Option<Value>,
    ) -> Self {
        let meta = object.as_ref().or(old.as_ref());
        let text = |key: &str| {
            meta.and_then(|o| o.pointer(&format!("/metadata/{key}")))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Self {
            uid: "00000000-0000-0000-0000-000000000000".to_owned(),
            cluster: cluster.to_owned(),
            resource: K::resource_type(),
            sub_resource: None,
            operation,
            namespace: text("namespace"),
            name: text("name").unwrap_or_default(),
            object,
            old_object: old,
            user: UserInfo {
                username: "kubernetes-admin".to_owned(),
                uid: String::new(),
                groups: vec![
                    "system:masters".to_owned(),
                    "system:authenticated".to_owned(),
                ],
            },
            dry_run: false,
        }
    }

    /// The object decoded as `K`; `None` for a delete.
    ///
    /// # Errors
    /// When it does not decode (the SDK denies the request with code 400).
    pub fn object<K: DeserializeOwned>(&self) -> Result<Option<K>, Error> {
        decode(self.object.as_ref(), "object")
    }

    /// The object before the change decoded as `K`; `None` for a create.
    ///
    /// # Errors
    /// When it does not decode.
    pub fn old_object<K: DeserializeOwned>(&self) -> Result<Option<K>, Error> {
        decode(self.old_object.as_ref(), "oldObject")
    }
}

fn decode<K: DeserializeOwned>(value: Option<&Value>, what: &str) -> Result<Option<K>, Error> {
    value
        .map(|v| {
            serde_json::from_value(v.clone())
                .map_err(|e| Error::terminal(format!("the request's {what} does not decode: {e}")))
        })
        .transpose()
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The message the client sees.
    pub message: String,
    /// The HTTP status code (403 unless set).
    pub code: u16,
    /// `(path, message)` of the fields concerned.
    pub field_errors: Vec<(String, String)>,
}

/// A validating webhook's answer: allowed, or denied with a [`Denial`];
/// warnings either way.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[must_use]
pub struct Verdict {
    denied: Option<Denial>,
    warnings: Vec<String>,
}

impl Verdict {
    /// Allowed.
    pub fn allow() -> Self {
        Self::default()
    }

    /// Denied with `message` (code 403; see [`Verdict::code`]).
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            denied: Some(Denial {
                message: message.into(),
                code: 403,
                field_errors: Vec::new(),
            }),
            warnings: Vec::new(),
        }
    }

    /// The HTTP code of a denial (400 to 599); ignored when allowed.
    pub fn code(mut self, code: u16) -> Self {
        if let Some(d) = &mut self.denied {
            d.code = code;
        }
        self
    }

    /// A field the denial concerns (`spec.size`); ignored when allowed.
    pub fn field(mut self, path: impl Into<String>, message: impl Into<String>) -> Self {
        if let Some(d) = &mut self.denied {
            d.field_errors.push((path.into(), message.into()));
        }
        self
    }

    /// A warning for the client (`kubectl` prints `Warning: ...`).
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// Whether the request is allowed.
    #[must_use]
    pub fn is_allowed(&self) -> bool {
        self.denied.is_none()
    }

    /// Why it is denied, if it is.
    #[must_use]
    pub fn denial(&self) -> Option<&Denial> {
        self.denied.as_ref()
    }

    /// The warnings.
    #[must_use]
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub(crate) fn into_parts(self) -> (Option<Denial>, Vec<String>) {
        (self.denied, self.warnings)
    }
}

/// A mutating webhook's answer: the object as it should be stored (the
/// host diffs it into the JSON Patch the API server applies), or a denial.
#[derive(Debug, Clone, PartialEq, Default)]
#[must_use]
pub struct Mutation {
    object: Option<Value>,
    verdict: Verdict,
}

impl Mutation {
    /// No change.
    pub fn unchanged() -> Self {
        Self::default()
    }

    /// Store `obj` instead of the request's object.
    ///
    /// # Errors
    /// When `obj` does not serialize.
    pub fn object<K: Serialize>(obj: &K) -> Result<Self, Error> {
        Ok(Self {
            object: Some(serde_json::to_value(obj)?),
            verdict: Verdict::allow(),
        })
    }

    /// Refused (a mutating webhook may deny too).
    pub fn deny(verdict: Verdict) -> Self {
        Self {
            object: None,
            verdict,
        }
    }

    /// A warning for the client.
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        self.verdict = self.verdict.warn(warning);
        self
    }

    /// The object to store, when changed.
    #[must_use]
    pub fn changed_object(&self) -> Option<&Value> {
        self.object.as_ref()
    }

    /// Decodes the object to store as `K`, when changed.
    ///
    /// # Errors
    /// When it does not decode.
    pub fn decode<K: DeserializeOwned>(&self) -> Result<Option<K>, Error> {
        decode(self.object.as_ref(), "mutated object")
    }

    /// The verdict (allowed unless [`Mutation::deny`]) and warnings.
    pub fn verdict(&self) -> &Verdict {
        &self.verdict
    }

    pub(crate) fn into_parts(self) -> (Option<Value>, Verdict) {
        (self.object, self.verdict)
    }
}

/// The admission side of a [`Plugin`]: export it with
/// `export_plugin!(P, admission)`. A plugin without it has no webhook.
///
/// An `Err` from `validate` or `mutate` denies the request with code 400
/// and the error's message (a request whose object does not decode is a
/// bad request); a panic or a timeout is a failed call, which the API
/// server handles by the rule's [`FailurePolicy`].
pub trait Admission: Plugin {
    /// The plugin's webhooks; called once per load.
    fn rules() -> Vec<AdmissionRule>;

    /// Whether `req` may be stored. The default allows everything.
    ///
    /// # Errors
    /// Denies the request with code 400.
    fn validate(ctx: &Context, req: &AdmissionRequest) -> Result<Verdict, Error> {
        let _ = (ctx, req);
        Ok(Verdict::allow())
    }

    /// The object of `req` as it should be stored. The default changes
    /// nothing.
    ///
    /// # Errors
    /// Denies the request with code 400.
    fn mutate(ctx: &Context, req: &AdmissionRequest) -> Result<Mutation, Error> {
        let _ = (ctx, req);
        Ok(Mutation::unchanged())
    }
}

/// `validate` as the component runs it: an error denies with 400.
pub(crate) fn run_validate<P: Admission>(ctx: &Context, req: &AdmissionRequest) -> Verdict {
    P::validate(ctx, req).unwrap_or_else(|e| Verdict::deny(e.message()).code(400))
}

/// `mutate` as the component runs it: an error denies with 400.
pub(crate) fn run_mutate<P: Admission>(ctx: &Context, req: &AdmissionRequest) -> Mutation {
    P::mutate(ctx, req).unwrap_or_else(|e| Mutation::deny(Verdict::deny(e.message()).code(400)))
}

/// The host's check of declared rules ([`rekon_rules::admission::check_rules`]).
///
/// # Errors
/// The first rule the host would refuse, and why.
pub fn check_rules(rules: &[AdmissionRule]) -> Result<(), String> {
    let plurals: Vec<Vec<&str>> = rules
        .iter()
        .map(|r| r.resources.iter().map(|t| t.plural.as_str()).collect())
        .collect();
    let conditions: Vec<Vec<&str>> = rules
        .iter()
        .map(|r| r.match_conditions.iter().map(|(n, _)| n.as_str()).collect())
        .collect();
    let shapes: Vec<_> = rules
        .iter()
        .zip(plurals.iter().zip(&conditions))
        .map(
            |(r, (plurals, conditions))| rekon_rules::admission::RuleShape {
                name: &r.name,
                mutating: r.kind == AdmissionKind::Mutate,
                plurals,
                operations: r.operations.len(),
                timeout_seconds: r.timeout_seconds,
                condition_names: conditions,
            },
        )
        .collect();
    rekon_rules::admission::check_rules(&shapes)
}
