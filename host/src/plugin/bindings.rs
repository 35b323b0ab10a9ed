//! The one place where `bindgen!` runs over the WIT contract (`wit/`).
//!
//! Everything generated stays private to `plugin`; `plugin/mod.rs` re-exports
//! the curated type surface the rest of the host uses.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    // Records and variants cross into the engine (queues, status, `plugin
    // inspect` output): make them serializable and comparable. `Clone` is
    // derived by bindgen already, `Debug` is implemented by it.
    additional_derives: [
        PartialEq,
        serde::Serialize,
        serde::Deserialize,
    ],
});

// `self::`: the generated module `rekon` would otherwise be ambiguous with
// the crate itself (named `rekon`) where it is in the extern prelude (doctests).
pub(crate) use self::rekon::plugin::host;
pub(crate) use self::rekon::plugin::types;

/// The world `admission-plugin` (`plugin` plus the `admission` export),
/// its shared interfaces taken from the bindings above so that one linker
/// and one set of types serve both worlds.
mod admission_world {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "admission-plugin",
        with: {
            "rekon:plugin/types": super::rekon::plugin::types,
            "rekon:plugin/host": super::rekon::plugin::host,
        },
        additional_derives: [
            PartialEq,
            serde::Serialize,
            serde::Deserialize,
        ],
    });
}

pub(crate) use admission_world::exports::rekon::plugin::admission;
pub(crate) use admission_world::{AdmissionPlugin, AdmissionPluginPre};

/// The world `conversion-plugin` (`plugin` plus the `conversion` export),
/// its shared interfaces taken from the bindings above. A component that
/// exports `admission` too links through both worlds' bindings: each
/// looks up only its own exports.
mod conversion_world {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "conversion-plugin",
        with: {
            "rekon:plugin/types": super::rekon::plugin::types,
            "rekon:plugin/host": super::rekon::plugin::host,
        },
        additional_derives: [
            PartialEq,
            serde::Serialize,
            serde::Deserialize,
        ],
    });
}

pub(crate) use conversion_world::{ConversionPlugin, ConversionPluginPre};

/// The world `policies-plugin` (`plugin` plus the `policies` export), its
/// shared interfaces taken from the bindings above.
mod policies_world {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "policies-plugin",
        with: {
            "rekon:plugin/types": super::rekon::plugin::types,
            "rekon:plugin/host": super::rekon::plugin::host,
        },
    });
}

pub(crate) use policies_world::exports::rekon::plugin::policies as wit_policies;
pub(crate) use policies_world::{PoliciesPlugin, PoliciesPluginPre};
