//! Which components this host accepts: the world `rekon:plugin/plugin` at a
//! semver-compatible version of the contract.
//!
//! Checked on the component's declared imports and exports before linking,
//! so that a plugin built for another contract version is refused with the
//! version it was built for rather than with a type-mismatch message.

use wasmtime::Engine;
use wasmtime::component::Component;

/// The WIT package plugins are built against.
pub const CONTRACT_PACKAGE: &str = "rekon:plugin";

/// The version of the WIT package this host speaks (`wit/*.wit`).
pub const CONTRACT_VERSION: &str = "0.3.1";

/// Why a component does not fit the contract.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// Built for another (incompatible) version of the package.
    Version { found: String, host: String },
    /// Not our world at all.
    World(String),
}

/// The host's contract version.
fn host_version() -> semver::Version {
    semver::Version::parse(CONTRACT_VERSION).expect("CONTRACT_VERSION is a valid semver")
}

/// How compatible versions are described to a user: `0.1.x` or `1.x`.
pub fn host_range() -> String {
    let v = host_version();
    if v.major == 0 {
        format!("{CONTRACT_PACKAGE}@{}.{}.x", v.major, v.minor)
    } else {
        format!("{CONTRACT_PACKAGE}@{}.x", v.major)
    }
}

/// Semver compatibility with the 0.x rule: below 1.0 the minor version acts
/// as the major one.
pub(crate) fn compatible(found: &semver::Version) -> bool {
    let host = host_version();
    if host.major == 0 {
        found.major == 0 && found.minor == host.minor
    } else {
        found.major == host.major
    }
}

/// Splits `rekon:plugin/guest@0.1.0` into interface `guest` and version text
/// when the name belongs to our package.
fn our_interface(name: &str) -> Option<(&str, Option<&str>)> {
    let rest = name.strip_prefix(CONTRACT_PACKAGE)?.strip_prefix('/')?;
    Some(match rest.split_once('@') {
        Some((iface, version)) => (iface, Some(version)),
        None => (rest, None),
    })
}

/// Checks one name of our package; `Ok(true)` when it is the interface we look for.
fn check_version(name: &str, version: Option<&str>) -> Result<(), Mismatch> {
    let Some(text) = version else {
        return Err(Mismatch::World(format!(
            "`{name}` carries no package version; rebuild the plugin with the rekon SDK"
        )));
    };
    let found = semver::Version::parse(text)
        .map_err(|e| Mismatch::World(format!("`{name}` has an invalid package version: {e}")))?;
    if compatible(&found) {
        Ok(())
    } else {
        Err(Mismatch::Version {
            found: found.to_string(),
            host: host_range(),
        })
    }
}

/// What the contract check learned about a component that fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fit {
    /// It imports `settings` (contract 0.3.1 and later, and an SDK that
    /// reads them): settings given to a component that cannot read them
    /// are refused rather than silently ignored.
    pub(crate) reads_settings: bool,
    /// It exports `rekon:plugin/admission` (world `admission-plugin`): the
    /// host asks for its rules at load and serves them as webhooks.
    pub(crate) exports_admission: bool,
    /// It exports `rekon:plugin/conversion` (world `conversion-plugin`):
    /// the host asks which CRDs it converts at load and serves them as
    /// their conversion webhook.
    pub(crate) exports_conversion: bool,
    /// It exports `rekon:plugin/policies` (world `policies-plugin`): the
    /// host asks for its CEL policies at load and compiles them.
    pub(crate) exports_policies: bool,
}

/// The WASI 0.2 interfaces the host serves: every interface of the
/// `wasi:cli/command` world, as wasmtime-wasi's `p2::add_to_linker_sync`
/// links them, each backed by the context of `sandbox` that grants nothing.
/// Kept in step with the linker by the test
/// `runtime::tests::every_served_wasi_interface_is_linked`.
pub(crate) const SERVED_WASI: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/ip-name-lookup",
];

/// The WASI release [`SERVED_WASI`] belongs to: any `0.2.x` import links
/// (wasmtime matches semver-compatible versions).
const SERVED_WASI_RELEASE: (u64, u64) = (0, 2);

/// Whether `name` (`wasi:cli/stdout@0.2.3`) is a WASI interface this host
/// serves.
fn served_wasi(name: &str) -> bool {
    let Some((iface, version)) = name.split_once('@') else {
        return false;
    };
    SERVED_WASI.contains(&iface)
        && semver::Version::parse(version).is_ok_and(|v| (v.major, v.minor) == SERVED_WASI_RELEASE)
}

/// Checks the component's exports (it must export `rekon:plugin/guest` at a
/// compatible version, and may export `rekon:plugin/admission` and
/// `rekon:plugin/conversion`) and its imports: of our package only
/// `rekon:plugin/host` and `types` at a compatible version, besides them
/// only the WASI interfaces of [`SERVED_WASI`]; every other import is named.
pub(crate) fn check(engine: &Engine, component: &Component) -> Result<Fit, Mismatch> {
    let ty = component.component_type();
    let mut reads_settings = false;
    let mut unserved = Vec::new();
    let mut guest_found = false;
    let mut exports_admission = false;
    let mut exports_conversion = false;
    let mut exports_policies = false;
    let mut exports = Vec::new();
    for (name, _) in ty.exports(engine) {
        exports.push(name.to_string());
        if let Some((iface, version)) = our_interface(name) {
            check_version(name, version)?;
            match iface {
                "guest" => guest_found = true,
                "admission" => exports_admission = true,
                "conversion" => exports_conversion = true,
                "policies" => exports_policies = true,
                _ => {}
            }
        }
    }
    for (name, item) in ty.imports(engine) {
        if let Some((iface, version)) = our_interface(name) {
            check_version(name, version)?;
            if iface != "host" && iface != "types" {
                return Err(Mismatch::World(format!(
                    "imports `{name}`, which {} does not define",
                    host_range()
                )));
            }
            if iface == "host"
                && let wasmtime::component::types::ComponentItem::ComponentInstance(instance) =
                    item.ty
            {
                reads_settings |= instance.exports(engine).any(|(f, _)| f == "settings");
            }
        } else if !served_wasi(name) {
            unserved.push(format!("`{name}`"));
        }
    }
    if !unserved.is_empty() {
        return Err(Mismatch::World(format!(
            "imports {}, which this host does not serve; a plugin may import \
             `{CONTRACT_PACKAGE}/host` and `{CONTRACT_PACKAGE}/types` ({}) and WASI {}.{}.x \
             interfaces of `wasi:cli/command` (linked with no capabilities: no files, \
             sockets, environment, real clock or entropy)",
            unserved.join(", "),
            host_range(),
            SERVED_WASI_RELEASE.0,
            SERVED_WASI_RELEASE.1,
        )));
    }
    if !guest_found {
        let found = if exports.is_empty() {
            "it exports nothing".to_string()
        } else {
            format!("it exports {}", exports.join(", "))
        };
        return Err(Mismatch::World(format!(
            "component does not export `{CONTRACT_PACKAGE}/guest@{CONTRACT_VERSION}` \
             (world `{CONTRACT_PACKAGE}/plugin`); {found}"
        )));
    }
    Ok(Fit {
        reads_settings,
        exports_admission,
        exports_conversion,
        exports_policies,
    })
}

/// What raw bytes are instead of a component (see [`precheck`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotAComponent {
    /// No WebAssembly header at all.
    #[error("not a WebAssembly file ({len} bytes, no `\\0asm` header)")]
    NotWasm {
        /// How many bytes there are.
        len: usize,
    },
    /// A wasmtime artifact (`rekon plugin compile`'s cache), not a `.wasm`.
    #[error("a precompiled wasmtime artifact; give the .wasm component")]
    Precompiled,
    /// A core module.
    #[error(
        "a core WebAssembly module, not a component; build the plugin for wasm32-wasip2 with the rekon SDK"
    )]
    CoreModule,
    /// A header of neither kind.
    #[error("unknown WebAssembly binary version/layer")]
    UnknownLayer,
}

/// Classifies raw bytes before compiling, for clearer messages than the
/// parser's: not WebAssembly at all, a core module, a precompiled artifact.
///
/// # Errors
/// What the bytes are instead of a component.
pub(crate) fn precheck(bytes: &[u8]) -> Result<(), NotAComponent> {
    const MAGIC: &[u8; 4] = b"\0asm";
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(NotAComponent::NotWasm { len: bytes.len() });
    }
    if Engine::detect_precompiled(bytes).is_some() {
        return Err(NotAComponent::Precompiled);
    }
    // Version/layer field: core modules are `01 00 00 00`, components
    // `0d 00 01 00` (any version of layer 1 goes on to the compiler, which
    // names the version it wants).
    match bytes[4..8] {
        [0x01, 0x00, 0x00, 0x00] => Err(NotAComponent::CoreModule),
        [_, _, 0x01, 0x00] => Ok(()),
        _ => Err(NotAComponent::UnknownLayer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> semver::Version {
        semver::Version::parse(s).unwrap()
    }

    #[test]
    fn zero_minor_acts_as_major() {
        assert!(compatible(&v("0.3.0")));
        assert!(compatible(&v("0.3.7")));
        assert!(!compatible(&v("0.2.0")));
        assert!(!compatible(&v("0.4.0")));
        assert!(!compatible(&v("0.0.9")));
        assert!(!compatible(&v("1.1.0")));
        assert!(!compatible(&v("2.0.0")));
        assert_eq!(host_range(), "rekon:plugin@0.3.x");
    }

    #[test]
    fn precheck_names_the_problem() {
        let not_wasm = precheck(b"hello world").unwrap_err();
        assert_eq!(not_wasm, NotAComponent::NotWasm { len: 11 });
        assert!(not_wasm.to_string().contains("not a WebAssembly"));
        let core = wat::parse_str("(module)").unwrap();
        let err = precheck(&core).unwrap_err();
        assert_eq!(err, NotAComponent::CoreModule);
        assert!(err.to_string().contains("core WebAssembly module"));
        let mut odd = core.clone();
        odd[4..8].copy_from_slice(&[0x02, 0x00, 0x02, 0x00]);
        assert_eq!(precheck(&odd), Err(NotAComponent::UnknownLayer));
        let component = wat::parse_str("(component)").unwrap();
        assert_eq!(precheck(&component), Ok(()));
    }

    #[test]
    fn version_check_of_names() {
        assert_eq!(
            our_interface("rekon:plugin/guest@0.1.0"),
            Some(("guest", Some("0.1.0")))
        );
        assert_eq!(our_interface("wasi:cli/stderr@0.2.0"), None);
        assert_eq!(
            check_version("rekon:plugin/guest@2.0.0", Some("2.0.0")),
            Err(Mismatch::Version {
                found: "2.0.0".into(),
                host: "rekon:plugin@0.3.x".into()
            })
        );
    }
}
