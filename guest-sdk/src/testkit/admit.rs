//! Running a plugin's [`Admission`] against a [`World`]: `validate` and
//! `mutate` as the host calls them (settings and reads from the world, an
//! `Err` turned into a denial with code 400).

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
