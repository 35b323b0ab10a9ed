//! Converting a plugin's CRDs between versions: the conversion webhook
//! served by the host.
//!
//! A plugin that implements [`Convert`] besides [`Plugin`] and is exported
//! with `export_plugin!(P, conversion)` (or `export_plugin!(P, admission,
//! conversion)`) declares in [`Convert::conversions`] which of its CRDs it
//! converts, between all their versions; `rekon webhooks` writes those
//! CRDs with their `spec.conversion` stanza, and the host calls
//! [`Convert::convert`] for every object the API server converts, in a
//! fresh sandbox like a reconcile. A call reads the caches through its
//! [`Context`] and never writes.
//!
//! The converted object must keep the kind, name, namespace and uid and
//! carry the desired apiVersion (the host checks, as the API server does);
//! of the metadata only labels and annotations may change, so keep the
//! original's metadata as it is.
//!
//! ```
//! use rekon_sdk::prelude::*;
//!
//! mod v1alpha1 {
//!     use kube::CustomResource;
//!     use schemars::JsonSchema;
//!     use serde::{Deserialize, Serialize};
//!     #[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
//!     #[kube(group = "example.dev", version = "v1alpha1", kind = "Thing", namespaced)]
//!     pub struct ThingSpec { pub amount: i64 }
//! }
//! mod v1 {
//!     use kube::CustomResource;
//!     use schemars::JsonSchema;
//!     use serde::{Deserialize, Serialize};
//!     #[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
//!     #[kube(group = "example.dev", version = "v1", kind = "Thing", namespaced)]
//!     pub struct ThingSpec { pub size: i64 }
//! }
//!
//! struct Things;
//! impl Plugin for Things {
//!     type Primary = v1::Thing;
//!     fn register() -> Result<Registration, Error> {
//!         let crd = rekon_sdk::kube::core::crd::merge_crds(
//!             vec![v1alpha1::Thing::crd(), v1::Thing::crd()], "v1").unwrap();
//!         Ok(Registration::new::<v1::Thing>("things", "0.1.0").crd(crd))
//!     }
//!     fn reconcile(_: &Context, _: &Request, _: Event<v1::Thing>) -> Result<Outcome, Error> {
//!         Ok(Outcome::done())
//!     }
//! }
//! impl Convert for Things {
//!     fn conversions() -> Vec<Conversion> {
//!         vec![Conversion::of::<v1::Thing>(&["v1alpha1", "v1"])]
//!     }
//!     fn convert(_: &Context, req: &ConversionRequest) -> Result<Converted, Error> {
//!         match req.desired_version() {
//!             "v1" => {
//!                 let old: v1alpha1::Thing = req.decode()?;
//!                 let mut new = v1::Thing::new("", v1::ThingSpec { size: old.spec.amount });
//!                 new.metadata = old.metadata;
//!                 Converted::object(&new)
//!             }
//!             _ => {
//!                 let old: v1::Thing = req.decode()?;
//!                 let mut new = v1alpha1::Thing::new("", v1alpha1::ThingSpec { amount: old.spec.size });
//!                 new.metadata = old.metadata;
//!                 Converted::object(&new)
//!             }
//!         }
//!     }
//! }
//!
//! let world = rekon_sdk::testkit::World::new().primary("main");
//! let mut thing = v1alpha1::Thing::new("t", v1alpha1::ThingSpec { amount: 3 });
//! thing.metadata.namespace = Some("default".into());
//! let at_v1 = world.convert::<Things>(&ConversionRequest::to("example.dev/v1", &thing)).unwrap();
//! assert_eq!(at_v1["spec"]["size"], 3);
//! let back = world.round_trip::<Things>(&thing, "example.dev/v1").unwrap();
//! assert_eq!(back["spec"]["amount"], 3);
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::action::typed_to_json;
use crate::context::Context;
use crate::error::Error;
use crate::plugin::Plugin;
use crate::resource::Kind;

/// One CRD the plugin converts, between all its versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversion {
    /// The CRD's group.
    pub group: String,
    /// Its kind.
    pub kind: String,
    /// Its plural (the CRD is `<plural>.<group>`).
    pub plural: String,
    /// The versions converted: exactly the CRD's versions.
    pub versions: Vec<String>,
}

impl Conversion {
    /// The CRD of `K` (the type of any of its versions), converted between
    /// `versions`.
    #[must_use]
    pub fn of<K: Kind>(versions: &[&str]) -> Self {
        let r = K::resource_type();
        Self {
            group: r.group,
            kind: r.kind,
            plural: r.plural,
            versions: versions.iter().map(|v| (*v).to_owned()).collect(),
        }
    }
}

/// One object to convert.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversionRequest {
    /// The object, at its version.
    pub object: Value,
    /// The apiVersion it is converted to (`group/version`).
    pub desired_api_version: String,
}

impl ConversionRequest {
    /// `obj` (typed, at its version) to be converted to `desired_api_version`
    /// (for tests).
    pub fn to<K: Kind + Serialize>(desired_api_version: &str, obj: &K) -> Self {
        Self {
            object: typed_to_json(obj),
            desired_api_version: desired_api_version.to_owned(),
        }
    }

    /// The object's apiVersion (`group/version`).
    #[must_use]
    pub fn api_version(&self) -> &str {
        self.object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The object's version (`v1alpha1`).
    #[must_use]
    pub fn version(&self) -> &str {
        version_of(self.api_version())
    }

    /// The desired version (`v1`).
    #[must_use]
    pub fn desired_version(&self) -> &str {
        version_of(&self.desired_api_version)
    }

    /// The object decoded as `K` (the type of its version).
    ///
    /// # Errors
    /// When it does not decode.
    pub fn decode<K: DeserializeOwned>(&self) -> Result<K, Error> {
        serde_json::from_value(self.object.clone()).map_err(|e| {
            Error::terminal(format!(
                "the object at {} does not decode: {e}",
                self.api_version()
            ))
        })
    }
}

fn version_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map_or(api_version, |(_, version)| version)
}

/// A converted object.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted(Value);

impl Converted {
    /// `obj` (typed, at the desired version: its apiVersion and kind are
    /// written from its type).
    ///
    /// # Errors
    /// Never for a kube type; kept fallible like [`crate::Mutation::object`].
    pub fn object<K: Kind + Serialize>(obj: &K) -> Result<Self, Error> {
        Ok(Self(typed_to_json(obj)))
    }

    /// An object as JSON (its `apiVersion` must be the desired one).
    #[must_use]
    pub fn json(object: Value) -> Self {
        Self(object)
    }

    /// The converted object.
    #[must_use]
    pub fn value(&self) -> &Value {
        &self.0
    }

    /// The converted object, taken.
    #[must_use]
    pub fn into_value(self) -> Value {
        self.0
    }
}

/// The conversion side of a [`Plugin`]: export it with
/// `export_plugin!(P, conversion)` or `export_plugin!(P, admission,
/// conversion)`. A plugin without it converts nothing.
///
/// An `Err` from `convert` fails the API server's request (a read, write,
/// list or watch at another version) with the error's message; so does a
/// panic or a timeout.
pub trait Convert: Plugin {
    /// The CRDs the plugin converts; called once per load. Each must be a
    /// CRD the registration declares, with exactly its versions.
    fn conversions() -> Vec<Conversion>;

    /// `req.object` converted to `req.desired_api_version`.
    ///
    /// # Errors
    /// When it cannot be converted: the request fails with the message.
    fn convert(ctx: &Context, req: &ConversionRequest) -> Result<Converted, Error>;
}

/// `convert` as the component runs it: the converted object's JSON text,
/// or the error's message.
pub(crate) fn run_convert<P: Convert>(
    ctx: &Context,
    req: &ConversionRequest,
) -> Result<String, String> {
    let converted = P::convert(ctx, req).map_err(|e| e.message().to_owned())?;
    serde_json::to_string(converted.value()).map_err(|e| e.to_string())
}

/// The host's check of declared conversions against the registration's
/// CRDs ([`rekon_rules::conversion::check_conversions`]).
///
/// # Errors
/// The first conversion the host would refuse, and why.
pub fn check_conversions(conversions: &[Conversion], crds: &[Value]) -> Result<(), String> {
    fn text<'a>(v: &'a Value, p: &str) -> &'a str {
        v.pointer(p).and_then(Value::as_str).unwrap_or_default()
    }
    let crd_versions: Vec<Vec<&str>> = crds
        .iter()
        .map(|c| {
            c.pointer("/spec/versions")
                .and_then(Value::as_array)
                .map(|vs| vs.iter().filter_map(|v| v.get("name")?.as_str()).collect())
                .unwrap_or_default()
        })
        .collect();
    let crd_shapes: Vec<_> = crds
        .iter()
        .zip(&crd_versions)
        .map(|(c, versions)| rekon_rules::conversion::CrdShape {
            name: text(c, "/metadata/name"),
            kind: text(c, "/spec/names/kind"),
            versions,
        })
        .collect();
    let versions: Vec<Vec<&str>> = conversions
        .iter()
        .map(|c| c.versions.iter().map(String::as_str).collect())
        .collect();
    let shapes: Vec<_> = conversions
        .iter()
        .zip(&versions)
        .map(|(c, versions)| rekon_rules::conversion::ConversionShape {
            group: &c.group,
            kind: &c.kind,
            plural: &c.plural,
            versions,
        })
        .collect();
    rekon_rules::conversion::check_conversions(&shapes, &crd_shapes)
}

/// Whether `converted` is what the host (and the API server) accepts as
/// the conversion of `original` to `desired_api_version`
/// ([`rekon_rules::conversion::check_converted`]).
///
/// # Errors
/// What differs, worded as the API server words it.
pub fn check_converted(
    original: &Value,
    converted: &Value,
    desired_api_version: &str,
) -> Result<(), String> {
    fn identity(v: &Value) -> rekon_rules::conversion::Identity<'_> {
        rekon_rules::conversion::Identity::read(|p| v.pointer(p).and_then(Value::as_str))
    }
    rekon_rules::conversion::check_converted(
        &identity(original),
        &identity(converted),
        desired_api_version,
    )
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::prelude::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// Converts ConfigMaps "to v2" by renaming them (what the API server refuses).
    struct Renamer;
    impl Plugin for Renamer {
        type Primary = ConfigMap;
        fn register() -> Result<Registration, Error> {
            Ok(Registration::new::<ConfigMap>("renamer", "0.1.0"))
        }
        fn reconcile(_: &Context, _: &Request, _: Event<ConfigMap>) -> Result<Outcome, Error> {
            Ok(Outcome::done())
        }
    }
    impl Convert for Renamer {
        fn conversions() -> Vec<Conversion> {
            vec![Conversion::of::<ConfigMap>(&["v1", "v2"])]
        }
        fn convert(_: &Context, req: &ConversionRequest) -> Result<Converted, Error> {
            if req.desired_version() == "v3" {
                return Err(Error::terminal("no v3"));
            }
            let mut object = req.object.clone();
            object["apiVersion"] = req.desired_api_version.clone().into();
            object["metadata"]["name"] = "renamed".into();
            Ok(Converted::json(object))
        }
    }

    #[test]
    fn the_test_kit_refuses_what_the_host_refuses() {
        let world = crate::testkit::World::new().primary("main");
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("c".into());
        let req = ConversionRequest::to("v2", &cm);
        assert_eq!(req.version(), "v1");
        assert_eq!(req.desired_version(), "v2");
        assert_eq!(
            world.convert::<Renamer>(&req).unwrap_err(),
            "must have the same name: c != renamed"
        );
        assert_eq!(
            world
                .convert::<Renamer>(&ConversionRequest::to("v3", &cm))
                .unwrap_err(),
            "no v3"
        );
        // ConfigMaps are no CRD (no group): the host refuses the load.
        assert!(
            crate::testkit::World::conversions::<Renamer>()
                .unwrap_err()
                .contains("group, kind and plural must all be given")
        );
    }
}
