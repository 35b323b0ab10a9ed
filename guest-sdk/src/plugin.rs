//! The [`Plugin`] trait and the glue that exports it as a WASM component.

use std::rc::Rc;

use kube::core::DynamicObject;

use crate::action::Outcome;
use crate::context::{Context, Request};
use crate::error::Error;
use crate::registration::Registration;
use crate::resource::ResourceType;

/// A rekon plugin. Implement it on a unit struct and export it with
/// [`export_plugin!`](crate::export_plugin).
///
/// Plugins are stateless: every call runs in a fresh sandbox, so all three
/// functions are associated functions (no `self`). Everything a call needs
/// comes from the [`Context`] and the arguments.
pub trait Plugin {
    /// Describe the plugin: name, version, primary resource, watches,
    /// finalizer, permissions, CRDs. Called once per load; an error refuses
    /// the load and keeps the previously loaded version running.
    fn register() -> Result<Registration, Error>;

    /// Decide what should change for the primary object `req` names.
    /// [`Context::phase`] says why it is called: [`Phase::Live`] for a
    /// primary; [`Phase::Deleting`] while it is being deleted (it has a
    /// `deletionTimestamp`); [`Phase::Leaving`] when it carries the plugin's
    /// finalizer but its labels stopped matching the primary selector. In the
    /// last two, clean up and return [`Outcome::finalized`] once done: the
    /// host then removes the finalizer.
    ///
    /// [`Phase::Live`]: crate::Phase::Live
    /// [`Phase::Deleting`]: crate::Phase::Deleting
    /// [`Phase::Leaving`]: crate::Phase::Leaving
    fn reconcile(ctx: &Context, req: &Request) -> Result<Outcome, Error>;

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
///     fn register() -> Result<Registration, Error> {
///         Ok(Registration::new::<ConfigMap>("my-plugin", "0.1.0"))
///     }
///     fn reconcile(_ctx: &Context, _req: &Request) -> Result<Outcome, Error> {
///         Ok(Outcome::done())
///     }
/// }
///
/// rekon_sdk::export_plugin!(MyPlugin);
/// ```
///
/// On wasm targets this exports `rekon:plugin/guest@0.2.0`; natively it only
/// type-checks (so the plugin crate's tests, which call the plugin through
/// the [`testkit`](crate::testkit), link normally).
///
/// The plugin crate needs no dependency on `wit-bindgen`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
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
    pub use crate::bindings::exports::rekon::plugin::guest::Guest;
    pub use crate::bindings::rekon::plugin::types::{
        Outcome as WitOutcome, Phase as WitPhase, ReconcileError as WitReconcileError,
        Registration as WitRegistration, Request as WitRequest, Resource as WitResource,
    };

    use super::*;

    fn host_context() -> Context {
        Context::new(Rc::new(crate::bindings::HostBackend))
    }

    /// `register` of the component: validates the registration before it
    /// leaves the plugin so the host gets one clear message.
    pub fn register<P: Plugin>() -> Result<WitRegistration, String> {
        let reg = P::register().map_err(|e| e.message().to_owned())?;
        reg.validate().map_err(|e| e.message().to_owned())?;
        Ok(reg.into())
    }

    /// `reconcile` of the component.
    pub fn reconcile<P: Plugin>(
        request: WitRequest,
        phase: WitPhase,
    ) -> Result<WitOutcome, WitReconcileError> {
        let request = Request::from(request);
        let ctx = host_context().with_phase(phase.into());
        P::reconcile(&ctx, &request)
            .map(Into::into)
            .map_err(Into::into)
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
            Ok(obj) => P::map(&ctx, &cluster, &resource, &obj)
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
