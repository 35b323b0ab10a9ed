//! # widgets — a plugin that admits its own objects
//!
//! Written like an outside author's plugin, with the SDK's admission
//! support (`export_plugin!(Widgets, admission)`):
//!
//! - **Validate** (`size`): a Widget's `spec.size` is at most [`MAX_SIZE`];
//!   a larger one is denied with code 422 and a field error on
//!   `spec.size`; a negative one is refused with a plain message (403).
//!   A Widget named [`TRAP_NAME`] makes `validate` panic, and
//!   one named [`SPIN_NAME`] makes it loop until its deadline: the host's
//!   failure handling is tested with them.
//!   On a create, a namespace already holding [`MAX_PER_NAMESPACE`]
//!   widgets in the host's cache refuses another (a read of the cache).
//! - **Mutate** (`tier`): a Widget without the [`TIER_LABEL`] label gets
//!   `standard`; a size above [`MAX_SIZE`] / 2 warns.
//! - **Reconcile**: status `observedSize` follows `spec.size`.
//! - **Convert** ([`VersionedWidgets`], the build with feature
//!   `conversion`: `widgets-conversion.wasm`): the CRD gains the older
//!   version `v1alpha1`, whose `spec.amount` is v1's `spec.size`; storage
//!   stays v1, and the plugin converts both ways without loss. A Widget
//!   named [`CONVERT_TRAP_NAME`] makes `convert` panic, one named
//!   [`CONVERT_SPIN_NAME`] loop until its deadline, and one named
//!   [`CONVERT_RENAME_NAME`] come back renamed (which the host refuses, as
//!   the API server would). The default build
//!   keeps one version, as the TypeScript and Python widgets do (the e2e
//!   checks the three declare the same).

use kube::CustomResource;
use rekon_sdk::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The largest size a Widget may have.
#[cfg(not(feature = "strict"))]
pub const MAX_SIZE: i64 = 10;
/// The largest size a Widget may have (the stricter build).
#[cfg(feature = "strict")]
pub const MAX_SIZE: i64 = 5;
/// The label the mutating webhook defaults.
pub const TIER_LABEL: &str = "widgets.rekon.dev/tier";
/// The most widgets one namespace may hold (checked against the cache).
pub const MAX_PER_NAMESPACE: usize = 3;
/// A Widget with this name makes `validate` panic.
pub const TRAP_NAME: &str = "trap";
/// A Widget with this name makes `validate` spin until its deadline.
pub const SPIN_NAME: &str = "spin";
/// A Widget with this name makes `convert` panic.
pub const CONVERT_TRAP_NAME: &str = "convert-trap";
/// A Widget with this name makes `convert` spin until its deadline.
pub const CONVERT_SPIN_NAME: &str = "convert-spin";
/// A Widget with this name is converted with another name.
pub const CONVERT_RENAME_NAME: &str = "convert-rename";

/// The older version of the Widget: its size was called `amount`.
pub mod v1alpha1 {
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// A widget of some amount (v1's size).
    #[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
    #[kube(
        group = "widgets.rekon.dev",
        version = "v1alpha1",
        kind = "Widget",
        namespaced,
        status = "super::WidgetStatus"
    )]
    pub struct WidgetSpec {
        /// How big it is (v1's `spec.size`).
        pub amount: i64,
    }
}

/// A widget of some size.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "widgets.rekon.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    /// How big it is (at most 10).
    pub size: i64,
}

/// What the plugin saw.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    /// The size last reconciled.
    pub observed_size: i64,
}

/// The plugin.
pub struct Widgets;

impl Plugin for Widgets {
    type Primary = Widget;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<Widget>("widgets", "0.1.0")
            .crd(Widget::crd())
            .permission::<Widget>(
                &[Verb::Get, Verb::List, Verb::Watch, Verb::Patch],
                ClusterSet::Primary,
            )
            .status_permission::<Widget>(&[Verb::Patch], ClusterSet::Primary))
    }

    fn reconcile(_: &Context, req: &Request, event: Event<Widget>) -> Result<Outcome, Error> {
        let Event::Apply(widget) = event else {
            return Ok(Outcome::done());
        };
        let size = widget.spec.size;
        if widget.status.as_ref().map(|s| s.observed_size) == Some(size) {
            return Ok(Outcome::done());
        }
        let mut applied = Widget::new(&req.name, widget.spec.clone());
        applied.metadata.namespace = req.namespace.clone();
        applied.status = Some(WidgetStatus {
            observed_size: size,
        });
        Ok(Outcome::done().with(Action::apply(&req.cluster, &applied).status()))
    }
}

impl Admission for Widgets {
    fn rules() -> Vec<AdmissionRule> {
        vec![
            AdmissionRule::validate::<Widget>("size").timeout_seconds(5),
            AdmissionRule::mutate::<Widget>("tier").operations(&[Operation::Create]),
        ]
    }

    fn validate(ctx: &Context, req: &AdmissionRequest) -> Result<Verdict, Error> {
        let Some(widget) = req.object::<Widget>()? else {
            return Ok(Verdict::allow());
        };
        let verdict = if req.operation == Operation::Create {
            quota(ctx, req)
        } else {
            Verdict::allow()
        };
        if !verdict.is_allowed() {
            return Ok(verdict);
        }
        match widget.metadata.name.as_deref() {
            Some(TRAP_NAME) => panic!("widgets: asked to trap"),
            Some(SPIN_NAME) => spin(),
            _ => {}
        }
        if widget.spec.size < 0 {
            // No field and no code: a plain refusal (403).
            return Ok(Verdict::deny("a widget's size cannot be negative"));
        }
        if widget.spec.size > MAX_SIZE {
            return Ok(Verdict::deny(format!(
                "a widget's size is at most {MAX_SIZE}, not {}",
                widget.spec.size
            ))
            .code(422)
            .field("spec.size", format!("must be at most {MAX_SIZE}")));
        }
        Ok(verdict)
    }

    fn mutate(_: &Context, req: &AdmissionRequest) -> Result<Mutation, Error> {
        let Some(mut widget) = req.object::<Widget>()? else {
            return Ok(Mutation::unchanged());
        };
        let warn = widget.spec.size > MAX_SIZE / 2;
        let labels = widget.metadata.labels.get_or_insert_default();
        if labels.contains_key(TIER_LABEL) && !warn {
            return Ok(Mutation::unchanged());
        }
        labels
            .entry(TIER_LABEL.to_owned())
            .or_insert_with(|| "standard".to_owned());
        let mutation = Mutation::object(&widget)?;
        Ok(if warn {
            mutation.warn(format!("a widget above size {} is large", MAX_SIZE / 2))
        } else {
            mutation
        })
    }
}

/// At most [`MAX_PER_NAMESPACE`] widgets per namespace, counted in the
/// host's cache (what a CEL rule on one object cannot say). A cache that
/// cannot be read admits, with a warning: the quota is a convenience, not
/// a security boundary.
fn quota(ctx: &Context, req: &AdmissionRequest) -> Verdict {
    match ctx.list::<Widget>(&req.cluster, req.namespace.as_deref(), None) {
        Ok(widgets) if widgets.len() >= MAX_PER_NAMESPACE => Verdict::deny(format!(
            "namespace {} already holds {} widgets, the most it may hold",
            req.namespace.as_deref().unwrap_or_default(),
            widgets.len()
        )),
        Ok(_) => Verdict::allow(),
        Err(e) => Verdict::allow().warn(format!("the widget quota was not checked: {e}")),
    }
}

/// Loops until the host stops the call at its deadline.
fn spin() {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// The widgets plugin with the CRD at two versions, `v1alpha1` and `v1`
/// (storage), converting between them; otherwise [`Widgets`].
pub struct VersionedWidgets;

impl Plugin for VersionedWidgets {
    type Primary = Widget;

    fn register() -> Result<Registration, Error> {
        let mut registration = Widgets::register()?;
        let crd = kube::core::crd::merge_crds(vec![v1alpha1::Widget::crd(), Widget::crd()], "v1")
            .map_err(|e| {
            Error::terminal(format!("the Widget CRD's versions do not merge: {e}"))
        })?;
        registration.crds = vec![serde_json::to_value(crd)?];
        Ok(registration)
    }

    fn reconcile(ctx: &Context, req: &Request, event: Event<Widget>) -> Result<Outcome, Error> {
        Widgets::reconcile(ctx, req, event)
    }
}

impl Admission for VersionedWidgets {
    fn rules() -> Vec<AdmissionRule> {
        Widgets::rules()
    }

    fn validate(ctx: &Context, req: &AdmissionRequest) -> Result<Verdict, Error> {
        Widgets::validate(ctx, req)
    }

    fn mutate(ctx: &Context, req: &AdmissionRequest) -> Result<Mutation, Error> {
        Widgets::mutate(ctx, req)
    }
}

impl Convert for VersionedWidgets {
    fn conversions() -> Vec<Conversion> {
        vec![Conversion::of::<Widget>(&["v1alpha1", "v1"])]
    }

    fn convert(_: &Context, req: &ConversionRequest) -> Result<Converted, Error> {
        let name = req
            .object
            .pointer("/metadata/name")
            .and_then(|n| n.as_str());
        match name {
            Some(CONVERT_TRAP_NAME) => panic!("widgets: asked to trap in convert"),
            Some(CONVERT_SPIN_NAME) => spin(),
            Some(CONVERT_RENAME_NAME) => {
                let mut object = req.object.clone();
                object["apiVersion"] = req.desired_api_version.clone().into();
                object["metadata"]["name"] = "renamed".into();
                return Ok(Converted::json(object));
            }
            _ => {}
        }
        match (req.version(), req.desired_version()) {
            ("v1alpha1", "v1") => {
                let old: v1alpha1::Widget = req.decode()?;
                let mut new = Widget::new(
                    "",
                    WidgetSpec {
                        size: old.spec.amount,
                    },
                );
                new.metadata = old.metadata;
                new.status = old.status;
                Converted::object(&new)
            }
            ("v1", "v1alpha1") => {
                let old: Widget = req.decode()?;
                let mut new = v1alpha1::Widget::new(
                    "",
                    v1alpha1::WidgetSpec {
                        amount: old.spec.size,
                    },
                );
                new.metadata = old.metadata;
                new.status = old.status;
                Converted::object(&new)
            }
            (from, to) => Err(Error::terminal(format!(
                "widgets converts between v1alpha1 and v1, not from {from} to {to}"
            ))),
        }
    }
}

#[cfg(not(feature = "conversion"))]
rekon_sdk::export_plugin!(Widgets, admission);
#[cfg(feature = "conversion")]
rekon_sdk::export_plugin!(VersionedWidgets, admission, conversion);
