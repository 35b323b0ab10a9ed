//! Shadow versions in the plugin directory: a `*.shadow.wasm` file is the
//! shadow of the plugin it registers and never serves; removing it ends
//! the shadow; promoting it (renaming it over the serving file) makes it
//! serve.

mod plugin_support;

use plugin_support::{chaos_v1, chaos_v2, runtime};
use rekon::plugin::PluginRegistry;

#[test]
fn a_shadow_file_shadows_the_plugin_it_registers_and_never_serves() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(chaos_v1(), dir.path().join("chaos.wasm")).unwrap();
    std::fs::copy(chaos_v2(), dir.path().join("chaos.shadow.wasm")).unwrap();
    let registry = PluginRegistry::new(runtime(None));
    registry.load_dir(dir.path()).unwrap();

    // One serving plugin (v1), its shadow v2; no name conflict between them.
    let serving: Vec<String> = registry
        .plugins()
        .iter()
        .map(|p| p.version().to_owned())
        .collect();
    assert_eq!(serving, vec!["1.0.0".to_owned()]);
    assert_eq!(
        registry
            .shadow("chaos")
            .map(|p| p.version().to_owned())
            .as_deref(),
        Some("2.0.0")
    );
    let status = registry.status();
    assert!(status.iter().all(|s| s.error.is_none()), "{status:?}");
    assert_eq!(status.iter().filter(|s| s.shadow).count(), 1, "{status:?}");

    // Removing the shadow file ends the shadow; the serving version stays.
    std::fs::remove_file(dir.path().join("chaos.shadow.wasm")).unwrap();
    registry.load_dir(dir.path()).unwrap();
    assert!(registry.shadow("chaos").is_none());
    assert_eq!(registry.get("chaos").unwrap().version(), "1.0.0");
}

#[test]
fn promote_renames_the_shadow_over_the_serving_file() {
    let dir = tempfile::tempdir().unwrap();
    // File names need not match the plugin name: the registration decides.
    std::fs::copy(chaos_v1(), dir.path().join("serving-build.wasm")).unwrap();
    std::fs::copy(chaos_v2(), dir.path().join("next.shadow.wasm")).unwrap();
    let (from, to) = rekon::change::promote::promote(dir.path(), "chaos").unwrap();
    assert_eq!(from, dir.path().join("next.shadow.wasm"));
    assert_eq!(to, dir.path().join("serving-build.wasm"));
    let registry = PluginRegistry::new(runtime(None));
    registry.load_dir(dir.path()).unwrap();
    assert_eq!(registry.get("chaos").unwrap().version(), "2.0.0");
    assert!(registry.shadow("chaos").is_none());
    // Nothing left to promote.
    let err = rekon::change::promote::promote(dir.path(), "chaos").unwrap_err();
    assert!(
        err.to_string()
            .contains("no shadow version of plugin chaos"),
        "{err}"
    );
}
