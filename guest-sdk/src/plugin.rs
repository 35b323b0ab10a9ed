//! The [`Plugin`] trait and the glue that exports it as a WASM component.

use std::rc::Rc;

use kube::core::DynamicObject;

use crate::action::Outcome;
use crate::context::{Context, Request};
use crate::error::Error;
use crate::registration::Registration;
use crate::resource::{Kind, ResourceType};
use serde::de::DeserializeOwned;

/// Why [`Plugin::reconcile`] runs, with the primary object decoded, like
/// kube-runtime's `finalizer::Event`.
///
/// The finalizer is structural: the SDK tells the host that cleanup is done
/// (so the host removes the plugin's finalizer) whenever `reconcile`
/// returns `Ok` for a [`Event::Cleanup`], unless the outcome says
/// [`Outcome::keep_finalizer`](crate::Outcome::keep_finalizer). There is no
/// flag to forget.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<K> {
    /// The object is one of the plugin's primaries ([`Phase::Live`]): bring
    /// the world in line with it.
    ///
    /// [`Phase::Live`]: crate::Phase::Live
    Apply(K),
    /// The object is being deleted ([`Phase::Deleting`]) or left the
    /// primary selector while carrying the finalizer ([`Phase::Leaving`];
    /// [`Context::phase`] tells which): undo what it caused.
    ///
    /// [`Phase::Deleting`]: crate::Phase::Deleting
    /// [`Phase::Leaving`]: crate::Phase::Leaving
    Cleanup(K),
}

impl<K> Event<K> {
    /// The primary object, whatever the event.
    #[must_use]
    pub fn primary(&self) -> &K {
        match self {
            Event::Apply(k) | Event::Cleanup(k) => k,
        }
    }

    /// The primary object, by value.
    #[must_use]
    pub fn into_primary(self) -> K {
        match self {
            Event::Apply(k) | Event::Cleanup(k) => k,
        }
    }

    /// Whether this is [`Event::Cleanup`].
    #[must_use]
    pub fn is_cleanup(&self) -> bool {
        matches!(self, Event::Cleanup(_))
    }
}

/// A rekon plugin. Implement it on a unit struct and export it with
/// [`export_plugin!`](crate::export_plugin).
///
/// Plugins are stateless: every call runs in a fresh sandbox, so all three
/// functions are associated functions (no `self`). Everything a call needs
/// comes from the [`Context`] and the arguments.
pub trait Plugin {
    /// The primary kind, the one [`Registration::new`] names. The SDK reads
    /// the requested object once and hands it to [`Plugin::reconcile`]
    /// decoded: a request whose object is gone is answered with an empty
    /// outcome without calling the plugin, and an object that does not
    /// decode as `Primary` fails the reconcile with a terminal error
    /// (counted, not retried until the object changes).
    type Primary: Kind + DeserializeOwned;

    /// Describe the plugin: name, version, primary resource, watches,
    /// finalizer, permissions, CRDs. Called once per load; an error refuses
    /// the load and keeps the previously loaded version running.
    fn register() -> Result<Registration, Error>;

    /// Decide what should change for the primary `req` names, given as
    /// [`Event::Apply`] or, for a primary being deleted or leaving the
    /// primary selector, [`Event::Cleanup`].
    fn reconcile(
        ctx: &Context,
        req: &Request,
        event: Event<Self::Primary>,
    ) -> Result<Outcome, Error>;

    /// The entry point the host calls for a request. The default reads and
    /// decodes the primary, skips a request whose object is gone, calls
    /// [`Plugin::reconcile`] with the [`Event`] and finalizes a cleanup.
    /// Override it only to see requests whose object is absent (test
    /// fixtures do); a plugin that does is back to reading the primary
    /// and finalizing by hand.
    fn reconcile_request(ctx: &Context, req: &Request) -> Result<Outcome, Error>
    where
        Self: Sized,
    {
        dispatch::<Self>(ctx, req)
    }

    /// For watches with [`Mapping::Custom`](crate::Mapping::Custom): the
    /// primaries that an event on `object` (of `resource`, in `cluster`)
    /// concerns. The default maps nothing.
    fn map(
        ctx: &Context,
        cluster: &str,
        resource: &ResourceType,
        object: &DynamicObject,
    ) -> Vec<Request> {
        let _ = (ctx, cluster, resource, object);
        Vec::new()
    }
}

/// One reconcile as the host asks for it: reads the primary once, decodes
/// it, picks the [`Event`] from the phase and, for a cleanup, marks the
/// outcome finalized: [`Plugin::reconcile_request`]'s default.
pub fn dispatch<P: Plugin>(ctx: &Context, req: &Request) -> Result<Outcome, Error> {
    let resource = <P::Primary as Kind>::resource_type();
    let Some(text) = ctx.get_json(&req.cluster, &resource, req.namespace.as_deref(), &req.name)?
    else {
        // Gone meanwhile: nothing left to reconcile or to finalize.
        return Ok(Outcome::done());
    };
    let primary: P::Primary = serde_json::from_value(text).map_err(|e| {
        Error::terminal(format!("primary {req} does not decode as {resource}: {e}"))
    })?;
    if ctx.phase().is_cleanup() {
        let outcome = P::reconcile(ctx, req, Event::Cleanup(primary))?;
        Ok(outcome.finish_cleanup())
    } else {
        P::reconcile(ctx, req, Event::Apply(primary))
    }
}

/// `register` as the host runs it (and the test kit, against its world):
/// the plugin's registration, validated, with the settings `backend` gives
/// checked against the declared type (refused with `invalid settings: …`)
/// and the type's schema declared. Run inside
/// [`crate::settings::with_source`] so that `register` can read them.
pub(crate) fn register_checked<P: Plugin>(
    backend: &dyn crate::context::Backend,
) -> Result<Registration, String> {
    let reg = P::register().map_err(|e| e.message().to_owned())?;
    reg.validate().map_err(|e| e.message().to_owned())?;
    crate::settings::check_at_register(reg.settings.as_ref(), backend.settings().as_deref())?;
    if let Some(schema) = reg.settings_schema() {
        backend.declare_settings_schema(&schema.to_string());
    }
    Ok(reg)
}

/// Exports a [`Plugin`] implementation as the component's `guest` interface.
/// Use it once, in the plugin crate's `lib.rs` (crate type `cdylib`):
///
/// ```no_run
/// use rekon_sdk::prelude::*;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// struct MyPlugin;
///
/// impl Plugin for MyPlugin {
///     type Primary = ConfigMap;
///     fn register() -> Result<Registration, Error> {
///         Ok(Registration::new::<ConfigMap>("my-plugin", "0.1.0"))
///     }
///     fn reconcile(_ctx: &Context, _req: &Request, _event: Event<ConfigMap>) -> Result<Outcome, Error> {
///         Ok(Outcome::done())
///     }
/// }
///
/// rekon_sdk::export_plugin!(MyPlugin);
/// ```
///
/// With `export_plugin!(MyPlugin, admission)` the plugin's
/// [`Admission`](crate::admission::Admission) implementation is exported
/// too (its webhooks); without it the component's admission declares no
/// rules and the host serves no webhook for it. With
/// `export_plugin!(MyPlugin, conversion)` (or `admission, conversion`) its
/// [`Convert`](crate::conversion::Convert) implementation is exported (the
/// CRDs it converts); without it the component converts nothing. With
/// `policies` last (`export_plugin!(MyPlugin, policies)`,
/// `export_plugin!(MyPlugin, admission, conversion, policies)`...) its
/// [`Policies`](crate::policies::Policies) are exported (CEL admission
/// policies the API server evaluates); without it it declares none.
///
/// On wasm targets this exports `rekon:plugin/guest@0.3.1`,
/// `rekon:plugin/admission@0.3.1`, `rekon:plugin/conversion@0.3.1` and
/// `rekon:plugin/policies@0.3.1`;
/// natively it only
/// type-checks (so the plugin crate's tests, which call the plugin through
/// the [`testkit`](crate::testkit), link normally).
///
/// The plugin crate needs no dependency on `wit-bindgen`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        $crate::export_plugin!(@export $plugin, $crate::__private::NoAdmission<$plugin>, $crate::__private::NoConversion<$plugin>, $crate::__private::NoPolicies<$plugin>);
    };
    ($plugin:ty, admission) => {
        $crate::export_plugin!(@export $plugin, $plugin, $crate::__private::NoConversion<$plugin>, $crate::__private::NoPolicies<$plugin>);
    };
    ($plugin:ty, conversion) => {
        $crate::export_plugin!(@export $plugin, $crate::__private::NoAdmission<$plugin>, $plugin, $crate::__private::NoPolicies<$plugin>);
    };
    ($plugin:ty, admission, conversion) => {
        $crate::export_plugin!(@export $plugin, $plugin, $plugin, $crate::__private::NoPolicies<$plugin>);
    };
    ($plugin:ty, policies) => {
        $crate::export_plugin!(@export $plugin, $crate::__private::NoAdmission<$plugin>, $crate::__private::NoConversion<$plugin>, $plugin);
    };
    ($plugin:ty, admission, policies) => {
        $crate::export_plugin!(@export $plugin, $plugin, $crate::__private::NoConversion<$plugin>, $plugin);
    };
    ($plugin:ty, conversion, policies) => {
        $crate::export_plugin!(@export $plugin, $crate::__private::NoAdmission<$plugin>, $plugin, $plugin);
    };
    ($plugin:ty, admission, conversion, policies) => {
        $crate::export_plugin!(@export $plugin, $plugin, $plugin, $plugin);
    };
    (@export $plugin:ty, $admission:ty, $conversion:ty, $policies:ty) => {
        const _: () = {
            // Natively the impl is still type-checked, but nothing is
            // exported: the component's export names (`rekon:plugin/...`)
            // are not valid native symbol names.
            #[allow(dead_code)]
            struct __RekonGuest;

            impl $crate::__private::Guest for __RekonGuest {
                fn register()
                -> ::std::result::Result<$crate::__private::WitRegistration, ::std::string::String>
                {
                    $crate::__private::register::<$plugin>()
                }

                fn reconcile(
                    request: $crate::__private::WitRequest,
                    phase: $crate::__private::WitPhase,
                ) -> ::std::result::Result<
                    $crate::__private::WitOutcome,
                    $crate::__private::WitReconcileError,
                > {
                    $crate::__private::reconcile::<$plugin>(request, phase)
                }

                fn map(
                    cluster: ::std::string::String,
                    resource: $crate::__private::WitResource,
                    object: ::std::string::String,
                ) -> ::std::vec::Vec<$crate::__private::WitRequest> {
                    $crate::__private::map::<$plugin>(cluster, resource, object)
                }
            }

            impl $crate::__private::AdmissionGuest for __RekonGuest {
                fn rules() -> ::std::vec::Vec<$crate::__private::WitAdmissionRule> {
                    $crate::__private::rules::<$admission>()
                }

                fn validate(
                    request: $crate::__private::WitAdmissionRequest,
                ) -> $crate::__private::WitVerdict {
                    $crate::__private::validate::<$admission>(request)
                }

                fn mutate(
                    request: $crate::__private::WitAdmissionRequest,
                ) -> $crate::__private::WitMutation {
                    $crate::__private::mutate::<$admission>(request)
                }
            }

            impl $crate::__private::ConversionGuest for __RekonGuest {
                fn conversions() -> ::std::vec::Vec<$crate::__private::WitConversionRule> {
                    $crate::__private::conversions::<$conversion>()
                }

                fn convert(
                    object: ::std::string::String,
                    desired_api_version: ::std::string::String,
                ) -> ::std::result::Result<::std::string::String, ::std::string::String> {
                    $crate::__private::convert::<$conversion>(object, desired_api_version)
                }
            }

            impl $crate::__private::PoliciesGuest for __RekonGuest {
                fn policies() -> ::std::vec::Vec<$crate::__private::WitPolicy> {
                    $crate::__private::policies::<$policies>()
                }
            }

            #[cfg(target_arch = "wasm32")]
            $crate::__private::bindings::__export_rekon_plugin_world!(
                __RekonGuest with_types_in $crate::__private::bindings
            );
        };
    };
}

/// Implementation details of [`export_plugin!`]. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;

    pub use crate::bindings;
    pub use crate::bindings::exports::rekon::plugin::admission::{
        AdmissionRequest as WitAdmissionRequest, AdmissionRule as WitAdmissionRule,
        Guest as AdmissionGuest, Mutation as WitMutation, Verdict as WitVerdict,
    };
    pub use crate::bindings::exports::rekon::plugin::conversion::{
        ConversionRule as WitConversionRule, Guest as ConversionGuest,
    };
    pub use crate::bindings::exports::rekon::plugin::guest::Guest;
    pub use crate::bindings::exports::rekon::plugin::policies::{
        Guest as PoliciesGuest, Policy as WitPolicy,
    };
    pub use crate::bindings::rekon::plugin::types::{
        Outcome as WitOutcome, Phase as WitPhase, ReconcileError as WitReconcileError,
        Registration as WitRegistration, Request as WitRequest, Resource as WitResource,
    };

    use super::*;

    fn host_context() -> Context {
        Context::new(Rc::new(crate::bindings::HostBackend))
    }

    /// `register` of the component: validates the registration and the
    /// settings before they leave the plugin so the host gets one clear
    /// message, and declares the settings' schema.
    pub fn register<P: Plugin>() -> Result<WitRegistration, String> {
        // Natively (tests driving the export path) there is no host: no
        // settings, nowhere to declare a schema.
        #[cfg(target_arch = "wasm32")]
        let backend = host_context().backend();
        #[cfg(not(target_arch = "wasm32"))]
        let backend: Rc<dyn crate::context::Backend> = Rc::new(super::Detached);
        let source: Rc<dyn crate::context::Backend> = Rc::clone(&backend);
        let reg = crate::settings::with_source(source, || super::register_checked::<P>(&*backend))?;
        Ok(reg.into())
    }

    /// `reconcile` of the component.
    pub fn reconcile<P: Plugin>(
        request: WitRequest,
        phase: WitPhase,
    ) -> Result<WitOutcome, WitReconcileError> {
        let request = Request::from(request);
        let ctx = host_context().with_phase(phase.into());
        crate::settings::with_source(ctx.backend(), || {
            P::reconcile_request(&ctx, &request)
                .map(Into::into)
                .map_err(Into::into)
        })
    }

    /// The admission of a plugin exported without it: no rules (the host
    /// serves no webhook for it), and calls that allow and change nothing.
    pub struct NoAdmission<P>(std::marker::PhantomData<P>);

    impl<P: Plugin> Plugin for NoAdmission<P> {
        type Primary = P::Primary;
        fn register() -> Result<Registration, Error> {
            P::register()
        }
        fn reconcile(
            ctx: &Context,
            req: &Request,
            event: Event<Self::Primary>,
        ) -> Result<crate::action::Outcome, Error> {
            P::reconcile(ctx, req, event)
        }
    }

    impl<P: Plugin> crate::admission::Admission for NoAdmission<P> {
        fn rules() -> Vec<crate::admission::AdmissionRule> {
            Vec::new()
        }
    }

    /// The policies of a plugin exported without them: none.
    pub struct NoPolicies<P>(std::marker::PhantomData<P>);

    impl<P: Plugin> Plugin for NoPolicies<P> {
        type Primary = P::Primary;
        fn register() -> Result<Registration, Error> {
            P::register()
        }
        fn reconcile(
            ctx: &Context,
            req: &Request,
            event: Event<Self::Primary>,
        ) -> Result<crate::action::Outcome, Error> {
            P::reconcile(ctx, req, event)
        }
    }

    impl<P: Plugin> crate::policies::Policies for NoPolicies<P> {
        fn policies() -> Vec<crate::policies::Policy> {
            Vec::new()
        }
    }

    /// `policies` of the component.
    pub fn policies<P: crate::policies::Policies>() -> Vec<WitPolicy> {
        P::policies().into_iter().map(Into::into).collect()
    }

    /// The conversion of a plugin exported without it: no CRD converted
    /// (the host serves no conversion for it).
    pub struct NoConversion<P>(std::marker::PhantomData<P>);

    impl<P: Plugin> Plugin for NoConversion<P> {
        type Primary = P::Primary;
        fn register() -> Result<Registration, Error> {
            P::register()
        }
        fn reconcile(
            ctx: &Context,
            req: &Request,
            event: Event<Self::Primary>,
        ) -> Result<crate::action::Outcome, Error> {
            P::reconcile(ctx, req, event)
        }
    }

    impl<P: Plugin> crate::conversion::Convert for NoConversion<P> {
        fn conversions() -> Vec<crate::conversion::Conversion> {
            Vec::new()
        }
        fn convert(
            _: &Context,
            req: &crate::conversion::ConversionRequest,
        ) -> Result<crate::conversion::Converted, Error> {
            Err(Error::terminal(format!(
                "this plugin converts nothing (asked for {})",
                req.desired_api_version
            )))
        }
    }

    /// `conversions` of the component.
    pub fn conversions<P: crate::conversion::Convert>() -> Vec<WitConversionRule> {
        P::conversions().into_iter().map(Into::into).collect()
    }

    /// `convert` of the component. An object that is not JSON is refused
    /// with a message (the host sends what the API server sent).
    pub fn convert<P: crate::conversion::Convert>(
        object: String,
        desired_api_version: String,
    ) -> Result<String, String> {
        let ctx = host_context();
        let object: serde_json::Value = serde_json::from_str(&object)
            .map_err(|e| format!("the object to convert is not JSON: {e}"))?;
        let request = crate::conversion::ConversionRequest {
            object,
            desired_api_version,
        };
        crate::settings::with_source(ctx.backend(), || {
            crate::conversion::run_convert::<P>(&ctx, &request)
        })
    }

    /// `rules` of the component, with the load's settings readable
    /// ([`crate::settings()`]), as in `register`: a plugin may declare its
    /// webhooks from its settings.
    pub fn rules<P: crate::admission::Admission>() -> Vec<WitAdmissionRule> {
        let ctx = host_context();
        crate::settings::with_source(ctx.backend(), || {
            P::rules().into_iter().map(Into::into).collect()
        })
    }

    /// `validate` of the component.
    pub fn validate<P: crate::admission::Admission>(request: WitAdmissionRequest) -> WitVerdict {
        let ctx = host_context();
        let request = crate::admission::AdmissionRequest::from(request);
        crate::settings::with_source(ctx.backend(), || {
            crate::admission::run_validate::<P>(&ctx, &request).into()
        })
    }

    /// `mutate` of the component.
    pub fn mutate<P: crate::admission::Admission>(request: WitAdmissionRequest) -> WitMutation {
        let ctx = host_context();
        let request = crate::admission::AdmissionRequest::from(request);
        crate::settings::with_source(ctx.backend(), || {
            crate::admission::run_mutate::<P>(&ctx, &request).into()
        })
    }

    /// `map` of the component. An object that does not parse maps to nothing
    /// (and is logged): `map` has no error channel.
    pub fn map<P: Plugin>(
        cluster: String,
        resource: WitResource,
        object: String,
    ) -> Vec<WitRequest> {
        let ctx = host_context();
        let resource = ResourceType::from(resource);
        match serde_json::from_str::<DynamicObject>(&object) {
            Ok(obj) => crate::settings::with_source(ctx.backend(), || {
                P::map(&ctx, &cluster, &resource, &obj)
            })
            .into_iter()
            .map(Into::into)
            .collect(),
            Err(e) => {
                crate::warn!(ctx, "failed to decode the object to map: {e}"; cluster = cluster, resource = resource);
                Vec::new()
            }
        }
    }
}

/// A backend with no host behind it (the export path driven natively):
/// no settings, no objects, no clusters.
#[cfg(not(target_arch = "wasm32"))]
struct Detached;

#[cfg(not(target_arch = "wasm32"))]
impl crate::context::Backend for Detached {
    fn get(
        &self,
        cluster: &str,
        _resource: &crate::ResourceType,
        _namespace: Option<&str>,
        _name: &str,
    ) -> Result<Option<String>, crate::ReadError> {
        Err(crate::ReadError::UnknownCluster(cluster.to_owned()))
    }

    fn list(
        &self,
        cluster: &str,
        _resource: &crate::ResourceType,
        _namespace: Option<&str>,
        _label_selector: Option<&str>,
    ) -> Result<Vec<String>, crate::ReadError> {
        Err(crate::ReadError::UnknownCluster(cluster.to_owned()))
    }

    fn clusters(&self) -> Vec<crate::ClusterInfo> {
        Vec::new()
    }

    fn log(&self, _level: crate::LogLevel, _message: &str, _fields: &[(String, String)]) {}

    fn request_time(&self) -> k8s_openapi::jiff::Timestamp {
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH
    }

    fn declare_settings_schema(&self, _schema: &str) {}
}

#[cfg(not(target_arch = "wasm32"))]
impl crate::settings::SettingsSource for Detached {
    fn settings(&self) -> Option<String> {
        None
    }
}
