//! The API side of test-fanout: what the API server asks the plugin before
//! a Test is stored (issue 38).
//!
//! | webhook | kind | when | what |
//! |---|---|---|---|
//! | [`VALIDATE_RULE`] | validating | create | `spec.image` is an image reference; each of `spec.clusters` is a cluster the plugin fans out to |
//! | [`DEFAULT_RULE`] | mutating | create, update | `spec.image` without a tag or digest gets [`DEFAULT_TAG`] |
//!
//! What a rule on the object alone can say is in CEL on the CRD (an image
//! is given, no cluster twice, the spec is immutable): the API server
//! enforces it with no webhook in the path. The webhook keeps what needs the
//! host's view (the engaged clusters) or a parser (the image reference
//! grammar, as `oci-spec` implements the distribution project's: see
//! [`crate::reference`]).
//!
//! Only creates are validated: a Test's spec is immutable, and refusing an
//! update because a named cluster has since gone would block the host's
//! own finalizer removal. Updates are defaulted too: applying the written
//! manifest again (`kubectl apply --server-side` sets `busybox` over the
//! stored `busybox:latest`) would otherwise change the immutable spec and
//! be refused.
//!
//! Denials are worded as the API server words its own validation: code
//! 422, message `Test.job.lailin.xyz "t1" is invalid: <field errors>`, one
//! field error per wrong field (`spec.image: Invalid value: "X": invalid
//! reference format`, `spec.clusters[1]: Unsupported value: "nope":
//! supported values: "main", "sub"`), which kubectl prints as `The Test
//! "t1" is invalid: ...`.

use rekon_sdk::prelude::*;

use crate::{FanoutSettings, Test, TestFanout};

/// The validating webhook's name (`test.test-fanout.rekon.dev`).
pub const VALIDATE_RULE: &str = "test";
/// The mutating webhook's name (`defaults.test-fanout.rekon.dev`).
pub const DEFAULT_RULE: &str = "defaults";
/// The tag an image without tag or digest is pulled with, as the container
/// runtime assumes it; the mutating webhook writes it out.
pub const DEFAULT_TAG: &str = "latest";

/// One field error: the path and the API server's wording of what is wrong.
type FieldError = (String, String);

impl Admission for TestFanout {
    fn rules() -> Vec<AdmissionRule> {
        vec![
            AdmissionRule::validate::<Test>(VALIDATE_RULE).operations(&[Operation::Create]),
            AdmissionRule::mutate::<Test>(DEFAULT_RULE)
                .operations(&[Operation::Create, Operation::Update]),
        ]
    }

    fn validate(ctx: &Context, req: &AdmissionRequest) -> Result<Verdict, Error> {
        let Some(test) = req.object::<Test>()? else {
            return Ok(Verdict::allow());
        };
        let mut errors = Vec::new();
        errors.extend(image_error(&test.spec.image));
        if let Some(named) = &test.spec.clusters {
            let settings: FanoutSettings = ctx.settings()?;
            errors.extend(cluster_errors(named, &known_clusters(ctx, &settings)));
        }
        Ok(invalid(&req.name, errors))
    }

    fn mutate(_: &Context, req: &AdmissionRequest) -> Result<Mutation, Error> {
        let Some(mut test) = req.object::<Test>()? else {
            return Ok(Mutation::unchanged());
        };
        let image = defaulted_image(&test.spec.image);
        // An update keeps the image as stored: defaulted again only when
        // that is what is stored (the manifest applied again as written).
        // A Test stored untagged (before the webhook) stays so: changing
        // it would change the immutable spec, and every update of the Test
        // (the host's finalizer removal too) would be refused.
        let image = match req.operation {
            Operation::Update => {
                let old = req.old_object::<Test>()?.map(|o| o.spec.image);
                image.filter(|image| old.as_ref() == Some(image))
            }
            _ => image,
        };
        match image {
            Some(image) => {
                test.spec.image = image;
                Mutation::object(&test)
            }
            None => Ok(Mutation::unchanged()),
        }
    }
}

/// The field error of `spec.image`, if it is not an image reference.
#[must_use]
pub fn image_error(image: &str) -> Option<FieldError> {
    if image.is_empty() {
        return Some(("spec.image".to_owned(), "Required value".to_owned()));
    }
    crate::reference::parse(image).err().map(|e| {
        (
            "spec.image".to_owned(),
            format!("Invalid value: {image:?}: {e}"),
        )
    })
}

/// `image` with [`DEFAULT_TAG`] when it is a reference with neither tag nor
/// digest; `None` when it has one (or is not a reference: validation
/// refuses it).
#[must_use]
pub fn defaulted_image(image: &str) -> Option<String> {
    let reference = crate::reference::parse(image).ok()?;
    // The parser fills in the default tag itself; whether the text had one
    // is whether it ends with it.
    let tagged = reference
        .tag
        .as_ref()
        .is_some_and(|tag| image.ends_with(&format!(":{tag}")));
    (reference.digest.is_none() && !tagged).then(|| format!("{image}:{DEFAULT_TAG}"))
}

/// The clusters a Test may name: the engaged clusters the plugin fans out
/// to (its settings' `clusters`, or all), sorted.
#[must_use]
pub fn known_clusters(ctx: &Context, settings: &FanoutSettings) -> Vec<String> {
    let fanout = settings.cluster_set();
    let mut names: Vec<String> = ctx
        .clusters()
        .into_iter()
        .map(|c| c.name)
        .filter(|name| fanout.contains(name, None))
        .collect();
    names.sort();
    names
}

/// A field error per name of `named` not in `known`, as the API server
/// words a value outside an enum.
#[must_use]
pub fn cluster_errors(named: &[String], known: &[String]) -> Vec<FieldError> {
    let supported = known
        .iter()
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    named
        .iter()
        .enumerate()
        .filter(|(_, name)| !known.contains(name))
        .map(|(i, name)| {
            (
                format!("spec.clusters[{i}]"),
                format!("Unsupported value: {name:?}: supported values: {supported}"),
            )
        })
        .collect()
}

/// Allowed without errors; else denied as the API server denies an invalid
/// object (422, `Test.job.lailin.xyz "NAME" is invalid: ...`, one cause
/// per field; several are listed in brackets, as it lists them).
pub fn invalid(name: &str, errors: Vec<FieldError>) -> Verdict {
    if errors.is_empty() {
        return Verdict::allow();
    }
    let each: Vec<String> = errors.iter().map(|(p, m)| format!("{p}: {m}")).collect();
    let listed = if each.len() == 1 {
        each[0].clone()
    } else {
        format!("[{}]", each.join(", "))
    };
    errors.into_iter().fold(
        Verdict::deny(format!("Test.job.lailin.xyz {name:?} is invalid: {listed}")).code(422),
        |verdict, (path, message)| verdict.field(path, message),
    )
}
