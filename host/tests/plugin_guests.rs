//! Guests of every kind the SDKs build, and what they are linked against:
//! the real componentize-js and componentize-py ports (`make sdk-plugins`)
//! load, a Python guest's WASI imports are served by the capability-free
//! stubs, and an import the host does not serve is named at load.

mod plugin_support;

use std::path::PathBuf;

use plugin_support::runtime;
use rekon::plugin::LoadError;

/// `dist/sdk-plugins/<name>` (or `$REKON_SDK_PLUGINS/<name>`), built by
/// `make sdk-plugins`. Missing is a failure: tests never build plugins.
fn sdk_plugin(name: &str) -> PathBuf {
    let dir = std::env::var_os("REKON_SDK_PLUGINS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/sdk-plugins"),
        PathBuf::from,
    );
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "SDK port {} is missing: run `make sdk-plugins` first",
        path.display()
    );
    path
}

/// The names the component itself imports (`wasi:cli/stdout@0.2.3`, …),
/// from its top-level import section (nested components and modules have
/// their own imports, satisfied inside the component).
fn imports(bytes: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload.expect("the component parses") {
            wasmparser::Payload::Version { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth -= 1,
            wasmparser::Payload::ComponentImportSection(section) if depth == 1 => {
                for import in section.into_iter().flatten() {
                    names.push(import.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    names
}

#[test]
fn the_typescript_port_imports_no_wasi_and_loads() {
    let path = sdk_plugin("test_fanout_ts.wasm");
    let bytes = std::fs::read(&path).unwrap();
    let imported = imports(&bytes);
    assert!(
        imported.iter().all(|i| i.starts_with("rekon:plugin/")),
        "{imported:?}"
    );
    let plugin = runtime(None)
        .load_file(&path)
        .expect("the TypeScript port loads");
    assert_eq!(plugin.name(), "test-fanout");
}

#[test]
fn the_python_port_gets_wasi_stubs_and_loads() {
    let path = sdk_plugin("nodepool_py.wasm");
    let bytes = std::fs::read(&path).unwrap();
    let imported = imports(&bytes);
    // componentize-py imports the whole WASI 0.2 surface, sockets and
    // filesystem included: all served, none granting anything.
    for wanted in [
        "wasi:filesystem/preopens",
        "wasi:sockets/tcp",
        "wasi:cli/environment",
    ] {
        assert!(
            imported.iter().any(|i| i.starts_with(wanted)),
            "{wanted} not in {imported:?}"
        );
    }
    let plugin = runtime(None)
        .load_file(&path)
        .expect("the Python port loads");
    assert_eq!(plugin.name(), "nodepool");
}

/// A hand-written plugin importing, besides a WASI interface the host
/// serves, two it does not: refused as the wrong world, both named, before
/// any linking.
#[test]
fn imports_the_host_does_not_serve_are_named() {
    let bytes = wat::parse_str(
        r#"(component
             (import "wasi:cli/stdout@0.2.0" (instance))
             (import "acme:secrets/vault@1.0.0" (instance
               (export "read" (func (param "key" string) (result string)))))
             (import "wasi:http/outgoing-handler@0.2.0" (instance))
             (instance $guest)
             (export "rekon:plugin/guest@0.3.1" (instance $guest)))"#,
    )
    .unwrap();
    let err = runtime(None).load_bytes(&bytes, "greedy.wasm").unwrap_err();
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("greedy.wasm"), "{text}");
    assert!(text.contains("`acme:secrets/vault@1.0.0`"), "{text}");
    assert!(
        text.contains("`wasi:http/outgoing-handler@0.2.0`"),
        "{text}"
    );
    assert!(text.contains("does not serve"), "{text}");
    assert!(!text.contains("`wasi:cli/stdout@0.2.0`"), "{text}");
}
