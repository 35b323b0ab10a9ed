//! Precompiled code beside a plugin file (issue 39): `x.cwasm` next to
//! `x.wasm` is mapped instead of compiling only when its own signature
//! (`x.cwasm.sig`) verifies with the host's `--signature-key`s, and only
//! when it was made for this engine from this very module; in every other
//! case the module compiles as before, and the refusal is counted.

mod plugin_support;

use std::path::Path;
use std::time::SystemTime;

use base64::Engine as _;
use plugin_support::*;
use rekon::action::Phase;
use rekon::app::file_signatures::FileSignatures;
use rekon::plugin::{
    CodePath, CompileBound, LoadOptions, PluginRegistry, PluginRuntime, Precompiled, RuntimeConfig,
    precompiled_file, signature_file,
};
use rekon::source::signature::{KeyAlgorithm, SigningKey};
use rekon::telemetry::metrics::Metrics;

/// `bytes`' cosign blob signature (one base64 line), as `x.sig` beside `file`.
fn sign(key: &SigningKey, file: &Path) {
    let bytes = std::fs::read(file).expect("read");
    let sig = base64::engine::general_purpose::STANDARD.encode(key.sign(&bytes).expect("sign"));
    std::fs::write(signature_file(file), sig).expect("write signature");
}

/// A plugin directory with chaos v1 signed, and its precompiled code
/// `artifact` beside it (signed when `signed`).
fn plugin_dir(key: &SigningKey, artifact: &Precompiled, signed: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let wasm = dir.path().join("chaos.wasm");
    std::fs::copy(chaos_v1(), &wasm).expect("copy");
    sign(key, &wasm);
    let cwasm = precompiled_file(&wasm);
    std::fs::write(&cwasm, artifact.to_file_bytes().expect("artifact bytes"))
        .expect("write artifact");
    if signed {
        sign(key, &cwasm);
    }
    dir
}

/// How a fresh host (empty compiled cache) loads `dir` with `keys` as its
/// `--signature-key`s; and its metrics.
fn load(dir: &Path, keys: &[&SigningKey]) -> (CodePath, Metrics) {
    let metrics = Metrics::new();
    let cache = tempfile::tempdir().expect("tempdir");
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        pooling: false,
        metrics: metrics.clone(),
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let registry = PluginRegistry::new(runtime);
    let signatures = FileSignatures {
        keys: keys
            .iter()
            .map(|k| ("k.pub".to_owned(), k.public_key()))
            .collect(),
        required: false,
    };
    if let Some(check) = signatures.check(metrics.clone()) {
        registry.set_file_check(check);
    }
    registry.load_dir(dir).expect("load dir");
    let plugin = registry.get("chaos").expect("chaos serves");
    // The verified artifact was staged in the cache directory and moved
    // into the compiled cache (or removed when not used): nothing staged
    // stays behind.
    let staged: Vec<_> = std::fs::read_dir(cache.path())
        .expect("cache dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".staged.tmp"))
        .collect();
    assert!(staged.is_empty(), "staged files left behind: {staged:?}");
    (plugin.load_timings().path, metrics)
}

fn refused(metrics: &Metrics, outcome: &str) -> bool {
    metrics.encode().contains(&format!(
        "rekon_plugin_precompiled_refused_total{{outcome=\"{outcome}\"}} 1"
    ))
}

#[test]
fn signed_precompiled_code_beside_a_plugin_file_is_mapped_anything_else_compiles() {
    let key = SigningKey::generate(KeyAlgorithm::Ed25519).expect("key");
    let stranger = SigningKey::generate(KeyAlgorithm::EcdsaP256).expect("key");
    let bytes = std::fs::read(chaos_v1()).expect("chaos v1");
    let artifact = runtime(None)
        .precompile(&bytes, "chaos-v1")
        .expect("precompile");

    // Signed with a trusted key, for this engine, from this module: mapped.
    let dir = plugin_dir(&key, &artifact, true);
    let (path, metrics) = load(dir.path(), &[&key]);
    assert_eq!(path, CodePath::Precompiled);
    assert!(
        metrics
            .encode()
            .contains("rekon_plugin_code_load_duration_seconds_count{path=\"precompiled\"} 1"),
        "{}",
        metrics.encode()
    );

    // No signature beside it: ignored, compiled.
    let dir = plugin_dir(&key, &artifact, false);
    let (path, metrics) = load(dir.path(), &[&key]);
    assert_eq!(path, CodePath::Compiled);
    assert!(refused(&metrics, "unverified"), "{}", metrics.encode());

    // Signed by a key the host does not trust (the module by both).
    let dir = plugin_dir(&key, &artifact, false);
    sign(&stranger, &precompiled_file(&dir.path().join("chaos.wasm")));
    let (path, metrics) = load(dir.path(), &[&key]);
    assert_eq!(path, CodePath::Compiled);
    assert!(refused(&metrics, "unverified"), "{}", metrics.encode());

    // No keys at all: precompiled code is never run.
    let dir = plugin_dir(&key, &artifact, true);
    let (path, metrics) = load(dir.path(), &[]);
    assert_eq!(path, CodePath::Compiled);
    assert!(refused(&metrics, "unverified"), "{}", metrics.encode());

    // Signed, but made for another engine: compiled.
    let other_engine = Precompiled {
        engine: "0123456789abcdef01234567".to_owned(),
        ..artifact.clone()
    };
    let dir = plugin_dir(&key, &other_engine, true);
    let (path, metrics) = load(dir.path(), &[&key]);
    assert_eq!(path, CodePath::Compiled);
    assert!(refused(&metrics, "engine_mismatch"), "{}", metrics.encode());

    // Signed, but made from another module (chaos v2's code beside v1).
    let v2 = std::fs::read(chaos_v2()).expect("chaos v2");
    let of_v2 = runtime(None).precompile(&v2, "chaos-v2").expect("v2");
    let dir = plugin_dir(&key, &of_v2, true);
    let (path, metrics) = load(dir.path(), &[&key]);
    assert_eq!(path, CodePath::Compiled);
    assert!(refused(&metrics, "source_mismatch"), "{}", metrics.encode());
}

/// Through `LoadOptions` (what a Plugin object hands over once its
/// signatures verified): mapped, then found in the compiled cache on a
/// restart; and the plugin reconciles as the compiled one does.
#[test]
fn a_precompiled_load_serves_and_fills_the_compiled_cache() {
    let bytes = std::fs::read(chaos_v1()).expect("chaos v1");
    let artifact = runtime(None).precompile(&bytes, "v1").expect("precompile");
    let cache = tempfile::tempdir().expect("tempdir");
    let options = LoadOptions {
        precompiled: Some(artifact),
        ..LoadOptions::default()
    };
    let host = runtime(Some(cache.path().to_path_buf()));
    let plugin = host
        .load_bytes_with(&bytes, "chaos-v1", &options)
        .expect("loads");
    assert_eq!(plugin.load_timings().path, CodePath::Precompiled);
    let reads = FakeCache::with_config_map("main", "default", "cm", "ok");
    let outcome = plugin
        .reconcile_blocking(&request("cm"), Phase::Live, reads, SystemTime::now())
        .expect("reconciles");
    assert!(!outcome.actions.is_empty(), "{outcome:?}");
    let restarted = runtime(Some(cache.path().to_path_buf()));
    let again = restarted
        .load_bytes_with(&bytes, "chaos-v1", &LoadOptions::default())
        .expect("loads");
    assert_eq!(again.load_timings().path, CodePath::Cached);
}

/// A runtime whose compiles run in `rekon plugin compile-apart` under
/// `limit_mib` MiB, caching in `cache`.
fn bounded(cache: &Path, limit_mib: u64) -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        pooling: false,
        compile_bound: Some(CompileBound {
            program: env!("CARGO_BIN_EXE_rekon").into(),
            memory_limit_bytes: limit_mib << 20,
        }),
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

/// Compiling under `rekon run --compile-memory-limit`: within the bound
/// the module compiles in the child and serves; a compile that needs
/// more fails naming the bound, and the serving version keeps serving.
#[test]
fn a_compile_over_the_memory_bound_fails_and_the_serving_version_is_kept() {
    let cache = tempfile::tempdir().expect("tempdir");
    let v1 = std::fs::read(chaos_v1()).expect("chaos v1");
    let v2 = std::fs::read(chaos_v2()).expect("chaos v2");
    // Within a generous bound: compiled in the child, serves.
    let roomy = bounded(cache.path(), 1024);
    let plugin = roomy
        .load_bytes(&v1, "chaos-v1")
        .expect("compiles in the child");
    assert_eq!(plugin.load_timings().path, CodePath::Compiled);
    assert_eq!(plugin.version(), "1.0.0");

    // v1 is cached now; under a bound too small to compile, v1 still
    // loads (nothing to compile) and v2 is refused, v1 serving on.
    let registry = PluginRegistry::new(bounded(cache.path(), 8));
    let origin = Path::new("plugins.rekon.dev/chaos.wasm");
    let served = registry
        .apply_module(origin, &v1, &LoadOptions::default(), |_| Ok(()))
        .expect("v1 from the cache");
    assert_eq!(served.load_timings().path, CodePath::Cached);
    let refusal = registry
        .apply_module(origin, &v2, &LoadOptions::default(), |_| Ok(()))
        .expect_err("v2 cannot compile under 8 MiB");
    assert!(
        refusal
            .message
            .contains("compile memory limit (8 MiB, rekon run --compile-memory-limit)"),
        "{}",
        refusal.message
    );
    let serving = registry.serving(origin).expect("something serves");
    assert_eq!(serving.version(), "1.0.0", "the serving version is kept");
}
