//! Running a plugin's [`Admission`] and [`Convert`](crate::Convert)
//! against a [`World`]: `validate`, `mutate` and `convert` as the host
//! calls them (settings and reads from the world, an `Err` of an admission
//! call turned into a denial with code 400, a converted object checked as
//! the host checks it).

use std::rc::Rc;

use crate::admission::{Admission, AdmissionRequest, Mutation, Verdict};

use super::world::World;

impl World {
    /// Calls `P::validate` for `req` as the host would: reading this world,
    /// an error denying with code 400.
    pub fn validate<P: Admission>(&self, req: &AdmissionRequest) -> Verdict {
        let ctx = self.context();
        let source: Rc<dyn crate::context::Backend> = ctx.backend();
        crate::settings::with_source(source, || crate::admission::run_validate::<P>(&ctx, req))
    }

    /// Calls `P::mutate` for `req` as the host would.
    pub fn mutate<P: Admission>(&self, req: &AdmissionRequest) -> Mutation {
        let ctx = self.context();
        let source: Rc<dyn crate::context::Backend> = ctx.backend();
        crate::settings::with_source(source, || crate::admission::run_mutate::<P>(&ctx, req))
    }

    /// The declared webhooks of `P`, checked as the host checks them at
    /// load (see [`crate::admission::check_rules`]).
    ///
    /// # Errors
    /// The first rule the host would refuse, and why.
    pub fn admission_rules<P: Admission>() -> Result<Vec<crate::AdmissionRule>, String> {
        let rules = P::rules();
        crate::admission::check_rules(&rules)?;
        Ok(rules)
    }
}

impl World {
    /// Calls `P::convert` for `req` as the host would (reading this world)
    /// and checks the result as the host and the API server check it: the
    /// desired apiVersion, the same kind, name, namespace and uid. The
    /// converted object, or the message the API server would show.
    ///
    /// # Errors
    /// The plugin's error, or what the host would refuse in its answer.
    pub fn convert<P: crate::conversion::Convert>(
        &self,
        req: &crate::conversion::ConversionRequest,
    ) -> Result<serde_json::Value, String> {
        let ctx = self.context();
        let source: Rc<dyn crate::context::Backend> = ctx.backend();
        let text = crate::settings::with_source(source, || {
            crate::conversion::run_convert::<P>(&ctx, req)
        })?;
        let converted: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| format!("the converted object is not JSON: {e}"))?;
        crate::conversion::check_converted(&req.object, &converted, &req.desired_api_version)?;
        Ok(converted)
    }

    /// `obj` converted to `via` and back to its own apiVersion with
    /// [`World::convert`]: equal to `obj` (as JSON) when the conversion
    /// loses nothing.
    ///
    /// # Errors
    /// As [`World::convert`], either way.
    pub fn round_trip<P: crate::conversion::Convert>(
        &self,
        obj: &impl serde::Serialize,
        via: &str,
    ) -> Result<serde_json::Value, String> {
        let object = serde_json::to_value(obj).map_err(|e| e.to_string())?;
        let back_to = object
            .get("apiVersion")
            .and_then(serde_json::Value::as_str)
            .ok_or("the object has no apiVersion")?
            .to_owned();
        let there = self.convert::<P>(&crate::conversion::ConversionRequest {
            object,
            desired_api_version: via.to_owned(),
        })?;
        self.convert::<P>(&crate::conversion::ConversionRequest {
            object: there,
            desired_api_version: back_to,
        })
    }

    /// The CRDs `P` converts, checked as the host checks them at load
    /// against the CRDs of `P::register()` (see
    /// [`crate::conversion::check_conversions`]).
    ///
    /// # Errors
    /// The registration's error, or the first conversion the host would
    /// refuse, and why.
    pub fn conversions<P: crate::conversion::Convert>()
    -> Result<Vec<crate::conversion::Conversion>, String> {
        let registration = P::register().map_err(|e| e.message().to_owned())?;
        let conversions = P::conversions();
        crate::conversion::check_conversions(&conversions, &registration.crds)?;
        Ok(conversions)
    }
}

impl World {
    /// The CEL admission policies of `P`, checked as the host checks them
    /// at load: the rules, and every expression compiled with kube-cel
    /// (see [`crate::policies::check_policies`]).
    ///
    /// # Errors
    /// Every problem the host would refuse the load for.
    pub fn policies<P: crate::policies::Policies>() -> Result<Vec<crate::policies::Policy>, String>
    {
        let policies = P::policies();
        crate::policies::check_policies(&policies)?;
        Ok(policies)
    }
}
