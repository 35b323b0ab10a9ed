//! # rekon-sdk — write rekon plugins in Rust
//!
//! A rekon plugin is a WebAssembly component that answers one question:
//! *given what the caches show, what should change?* The host owns every
//! connection, watch, cache, queue and write; the plugin reads through a
//! [`Context`] and returns [`Action`]s in an [`Outcome`]. This crate is all a
//! plugin author touches: the WIT bindings stay private.
//!
//! # Layout
//!
//! | module | what |
//! |---|---|
//! | (root) | the [`Plugin`] trait and [`export_plugin!`] |
//! | [`registration`] | [`Registration`] builder: primary, watches ([`Mapping`], [`ClusterSet`]), finalizer, permissions, CRDs |
//! | [`context`] | [`Context`]: typed `get`/`list` from the host caches, clusters, log macros ([`info!`] …), request time; [`Request`] |
//! | [`conversion`] | [`Convert`]: the CRDs the plugin converts ([`Conversion`]), `convert` → [`Converted`] |
//! | [`admission`] | [`Admission`]: the plugin's webhooks ([`AdmissionRule`]), `validate` → [`Verdict`], `mutate` → [`Mutation`] |
//! | [`policies`] | [`Policies`]: CEL admission policies the API server evaluates ([`Policy`], [`Validation`]) |
//! | [`action`] | [`Action`] builders (apply, merge/JSON patch, delete, create-if-absent, event) and [`Outcome`] |
//! | [`resource`] | [`ResourceType`] derived from any `kube::Resource` ([`Kind`]) |
//! | [`settings`](mod@settings) | typed plugin [`Settings`] (serde + JSON Schema), validated at every load |
//! | [`error`](mod@error) | [`Error`] (retryable/terminal) and [`ReadError`] |
//! | [`testkit`] | native test kit (non-wasm targets): a fake world of clusters and objects, convergence loops |
//! | [`prelude`] | the usual imports |
//!
//! Re-exports: [`k8s_openapi`], [`kube`] (derive only), [`serde`],
//! [`serde_json`], [`schemars`], so a plugin's versions always match the SDK's.
//!
//! # A plugin
//!
//! ```no_run
//! use rekon_sdk::prelude::*;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use serde_json::json;
//!
//! /// Stamps `example.com/seen: "true"` on every ConfigMap.
//! pub struct Stamper;
//!
//! impl Plugin for Stamper {
//!     /// The SDK reads the requested ConfigMap once and hands it over.
//!     type Primary = ConfigMap;
//!
//!     fn register() -> Result<Registration, Error> {
//!         Ok(Registration::new::<ConfigMap>("stamper", "0.1.0")
//!             .permission::<ConfigMap>(&[Verb::Get, Verb::List, Verb::Watch, Verb::Patch], ClusterSet::Primary))
//!     }
//!
//!     fn reconcile(ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
//!         // Cleanup (a deletion): nothing to undo; `Ok` lets it go.
//!         let Event::Apply(cm) = event else { return Ok(Outcome::done()) };
//!         if cm.labels().get("example.com/seen").is_some_and(|v| v == "true") {
//!             return Ok(Outcome::done());
//!         }
//!         rekon_sdk::info!(ctx, "stamping {}", req; cluster = req.cluster);
//!         let patch = json!({"metadata": {"labels": {"example.com/seen": "true"}}});
//!         Ok(Outcome::done().with(Action::merge_patch(ObjectRef::for_request::<ConfigMap>(req), patch)))
//!     }
//! }
//!
//! rekon_sdk::export_plugin!(Stamper);
//! ```
//!
//! Its test, natively, with the [`testkit`]:
//!
//! ```
//! # use rekon_sdk::prelude::*;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # use serde_json::json;
//! # pub struct Stamper;
//! # impl Plugin for Stamper {
//! #     type Primary = ConfigMap;
//! #     fn register() -> Result<Registration, Error> {
//! #         Ok(Registration::new::<ConfigMap>("stamper", "0.1.0")
//! #             .permission::<ConfigMap>(&[Verb::Get, Verb::List, Verb::Watch, Verb::Patch], ClusterSet::Primary))
//! #     }
//! #     fn reconcile(ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
//! #         let Event::Apply(cm) = event else { return Ok(Outcome::done()) };
//! #         if cm.labels().get("example.com/seen").is_some_and(|v| v == "true") { return Ok(Outcome::done()); }
//! #         let patch = json!({"metadata": {"labels": {"example.com/seen": "true"}}});
//! #         Ok(Outcome::done().with(Action::merge_patch(ObjectRef::for_request::<ConfigMap>(req), patch)))
//! #     }
//! # }
//! use rekon_sdk::testkit::World;
//!
//! let mut world = World::new().primary("main");
//! world.insert_json("main", json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "app", "namespace": "default"}
//! }));
//! let req = Request::namespaced("main", "default", "app");
//! let outcome = world.reconcile::<Stamper>(&req).unwrap();
//! assert_eq!(outcome.patches().count(), 1);
//!
//! // Run reconcile → apply until nothing changes, then check it is quiet.
//! world.converge::<Stamper>(&req, 5).unwrap();
//! let cm: ConfigMap = world.get("main", Some("default"), "app").unwrap();
//! assert_eq!(cm.metadata.labels.unwrap()["example.com/seen"], "true");
//! world.assert_no_writes::<Stamper>(&req);
//! ```
//!
//! # Building
//!
//! A plugin crate is a `cdylib` (plus `rlib` so its tests can call it) that
//! depends on `rekon-sdk`; `rekon plugin new NAME` scaffolds one that builds
//! outside this repository. Build it for the component target:
//!
//! ```text
//! cargo build --target wasm32-wasip2 --release   # the scaffold's profile: opt-level 3, LTO, stripped
//! ```
//!
//! (`--profile wasm`, the same settings, inside this repository) and drop
//! `target/wasm32-wasip2/release/my_plugin.wasm` (already a component) into
//! the host's plugin directory. Test it natively with `cargo test` (the test
//! kit replaces the host).
//!
//! Plugins get no filesystem, network, environment or clock from the host.
//! The component still imports the WASI interfaces Rust's std links on
//! `wasm32-wasip2` (cli environment/exit/stdio/terminal, io
//! error/poll/streams, random insecure-seed); the host satisfies them with a
//! capability-free WASI context, and a panic message reaches it on stderr.
//! Use [`Context::now`] for time.
//!
//! # Custom resources
//!
//! Derive them with kube's `CustomResource` as usual (the plugin crate
//! depends directly on `kube` with the `derive` feature, `k8s-openapi`,
//! `serde`, `serde_json` and `schemars`, at the SDK's versions, because the
//! derives expand to paths of those crates) and register the CRD with
//! `.crd(MyKind::crd())`. Reads and actions are typed the same way as for
//! k8s-openapi types.
//!
//! ## CRD rules from the type
//!
//! Rules the API server checks on every write (`x-kubernetes-validations`,
//! CEL) are declared on the type: derive [`KubeSchema`](prelude::KubeSchema)
//! (in the prelude) instead of `schemars::JsonSchema` and put
//! `#[x_kube(validation = Rule::new("…"))]` on a field or the struct. The
//! CRD `MyKind::crd()` generates carries them, `rekon crds` prints them
//! unchanged, the host compiles every rule with kube-cel when it loads the
//! plugin (one that does not compile refuses the load, as the API server
//! refuses the CRD), and the [`testkit`] refuses a write of the plugin
//! that breaks one, in the API server's words.
//!
//! ```
//! use kube::CustomResource;
//! use rekon_sdk::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug)]
//! #[kube(group = "example.com", version = "v1", kind = "Gadget", namespaced)]
//! #[x_kube(validation = Rule::new("self.min <= self.max").message("min exceeds max"))]
//! pub struct GadgetSpec {
//!     #[x_kube(validation = Rule::new("self <= 10").message("must be at most 10"))]
//!     pub max: i64,
//!     pub min: i64,
//! }
//!
//! let crd = serde_json::to_value(Gadget::crd()).unwrap();
//! let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
//! assert_eq!(spec["x-kubernetes-validations"][0]["rule"], "self.min <= self.max");
//! assert_eq!(spec["properties"]["max"]["x-kubernetes-validations"][0]["rule"], "self <= 10");
//! // The host's load check (and the test kit's `register`) passes:
//! assert!(Registration::new::<Gadget>("gadgets", "0.1.0").crd(Gadget::crd()).validate().is_ok());
//! ```
//!
//! Checks about the request rather than one object of your type (any
//! resource, the user, the operation) are [`Policies`]; checks CEL cannot
//! say are [`Admission`] webhooks (docs/plugins/admission.md, "CEL where
//! CEL suffices").

extern crate self as rekon_sdk;

pub mod action;
pub mod admission;
// Public only so that `export_plugin!` can name it from the plugin crate;
// hidden, not API. Reached as `rekon_sdk::__private::bindings`.
#[doc(hidden)]
pub mod bindings;
pub mod context;
pub mod conversion;
pub mod error;
mod plugin;
pub mod policies;
pub mod prelude;
pub mod registration;
pub mod resource;
pub mod settings;
#[cfg(not(target_arch = "wasm32"))]
pub mod testkit;

pub use action::{
    Action, ApplyAction, CreateAction, DeleteAction, EventAction, EventType, ObjectRef, Outcome,
    PatchAction, PatchType, Propagation,
};
pub use admission::{
    Admission, AdmissionKind, AdmissionRequest, AdmissionRule, Denial, FailurePolicy, Mutation,
    Operation, UserInfo, Verdict,
};
pub use context::{
    ClusterHealth, ClusterInfo, Context, LogLevel, Phase, Request, selector_from_labels,
    status_changed,
};
pub use conversion::{Conversion, ConversionRequest, Convert, Converted};
pub use error::{Error, ReadError};
#[doc(hidden)]
pub use plugin::__private;
pub use plugin::{Event, Plugin};
pub use policies::{Policies, Policy, PolicyReason, Validation};
pub use registration::{ClusterSet, Mapping, OwnerLabels, Permission, Registration, Verb, Watch};
pub use resource::{Kind, ResourceType, Scope, ScopeMarker};
pub use settings::{Settings, settings};

pub use k8s_openapi;
pub use kube;
pub use schemars;
pub use serde;
pub use serde_json;
