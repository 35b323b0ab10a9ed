//! The plugin author's loop, out of tree: `rekon plugin new` scaffolds a
//! crate into a temporary directory (outside this workspace) — with
//! `--admission` for the built-in primary, so its webhooks are built and
//! tested too, and without for the custom resource — its own
//! native tests pass with plain `cargo test`, plain `cargo build --target
//! wasm32-wasip2 --release` builds the component, and a running `rekon`
//! against kube-sim loads it and reconciles with it.
//!
//! The crate gets this workspace's `Cargo.lock` copied in (the same
//! dependency versions, no registry index refresh) and builds into the
//! persistent `target/scaffold` so CI compiles its dependencies once. Each
//! step's time and the component's size are printed and written to
//! `target/scaffold/timings.txt`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rekon_e2e::{Env, EnvOptions, Paths, get};
use serde_json::json;

/// Building the SDK's dependencies twice (native, wasm) from nothing takes
/// minutes on a small machine; later runs reuse `target/scaffold`.
const TEST_TIMEOUT: Duration = Duration::from_secs(1500);
const RECONCILE_WAIT: Duration = Duration::from_secs(60);
const NAME: &str = "cm-stamper";
const LABEL: &str = "cm-stamper.example.com/seen";

fn cargo(crate_dir: &Path, target_dir: &Path, args: &[&str]) -> Duration {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let out = Command::new(cargo)
        .args(args)
        .current_dir(crate_dir)
        .env("CARGO_TARGET_DIR", target_dir)
        // What the test harness's own cargo set must not leak into a
        // build that stands for an author's shell.
        .env_remove("CARGO_MANIFEST_DIR")
        .env_remove("CARGO_PKG_NAME")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "`cargo {}` failed in the scaffolded crate:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaffolded_plugin_builds_out_of_tree_and_reconciles() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let paths = Paths::discover().expect("built workspace");
        let outside = tempfile::Builder::new()
            .prefix("rekon-scaffold-")
            .tempdir()
            .expect("temp dir");
        let target_dir = paths.root.join("target/scaffold");

        // 1. Scaffold.
        let started = Instant::now();
        let out = Command::new(&paths.rekon)
            .args(["plugin", "new", NAME, "--dir"])
            .arg(outside.path())
            .arg("--sdk-path")
            .arg(paths.root.join("guest-sdk"))
            .arg("--admission")
            .output()
            .expect("rekon runs");
        let scaffold = started.elapsed();
        assert!(
            out.status.success(),
            "rekon plugin new failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let crate_dir = outside.path().join(NAME);
        let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("Cargo.toml");
        assert!(
            !manifest.contains("workspace = true"),
            "the scaffold leans on this workspace:\n{manifest}"
        );
        std::fs::copy(paths.root.join("Cargo.lock"), crate_dir.join("Cargo.lock"))
            .expect("copy Cargo.lock");

        // 2. Its own test, natively; 3. the component.
        let (dir, target) = (crate_dir.clone(), target_dir.clone());
        let (native, wasm) = tokio::task::spawn_blocking(move || {
            let native = cargo(&dir, &target, &["test"]);
            let wasm = cargo(
                &dir,
                &target,
                &["build", "--target", "wasm32-wasip2", "--release"],
            );
            (native, wasm)
        })
        .await
        .expect("cargo thread");
        let component = target_dir.join("wasm32-wasip2/release/cm_stamper.wasm");
        let size = std::fs::metadata(&component)
            .unwrap_or_else(|e| panic!("{} missing: {e}", component.display()))
            .len();

        // Its webhooks, as the host reads them (and checks them) at load.
        let inspected = Command::new(&paths.rekon)
            .args(["plugin", "inspect"])
            .arg(&component)
            .output()
            .expect("rekon runs");
        let inspected = String::from_utf8_lossy(&inspected.stdout);
        for webhook in ["owner.cm-stamper.rekon.dev", "default-owner.cm-stamper.rekon.dev"] {
            assert!(inspected.contains(&format!("name: {webhook}")), "{inspected}");
        }

        // 4. The README's explore steps: without a scenario (inputs
        // generated from the registration) and with its own, no finding.
        for args in [
            &["--max-plans", "40", "--budget", "600"][..],
            &["--scenario", "explore/scenario.yaml", "--budget", "120"][..],
        ] {
            let explored = std::process::Command::new(&paths.rekon)
                .args(["plugin", "explore"])
                .arg(&component)
                .args(args)
                .arg("--out")
                .arg(crate_dir.join("explore-out"))
                .current_dir(&crate_dir)
                .output()
                .expect("rekon runs");
            assert!(
                explored.status.success(),
                "rekon plugin explore {args:?} of the scaffold exited {:?}:\n{}{}",
                explored.status.code(),
                String::from_utf8_lossy(&explored.stdout),
                String::from_utf8_lossy(&explored.stderr)
            );
        }

        // 5. Loaded into a running host, it reconciles.
        let env = Env::start(EnvOptions {
            plugins: vec![],
            install_crds: false,
            ..EnvOptions::default()
        })
        .await
        .expect("failed to start the e2e environment");
        env.main()
            .create(
                "v1",
                "configmaps",
                Some("default"),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "demo", "namespace": "default"}}),
            )
            .expect("create configmap");
        let started = Instant::now();
        std::fs::copy(&component, env.plugin_dir.join("cm_stamper.wasm")).expect("install");
        loop {
            let stamped = get(env.main(), "v1", "configmaps", Some("default"), "demo")
                .and_then(|o| o.pointer(&format!("/metadata/labels/{}", LABEL.replace('/', "~1"))).cloned());
            if stamped == Some(json!("true")) {
                break;
            }
            assert!(
                started.elapsed() < RECONCILE_WAIT,
                "the scaffolded plugin did not stamp the ConfigMap\n--- rekon log ---\n{}",
                env.rekon.log_tail(60)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let reconciled = started.elapsed();
        let log = std::fs::read_to_string(env.rekon.log_path()).unwrap_or_default();
        assert!(
            log.contains("stamping"),
            "the plugin's own log line is not in the host's log:\n{}",
            env.rekon.log_tail(60)
        );

        let report = format!(
            "scaffold {:.2}s, native test {:.1}s, wasm build {:.1}s, load+reconcile {:.2}s, component {} KiB\n",
            scaffold.as_secs_f64(),
            native.as_secs_f64(),
            wasm.as_secs_f64(),
            reconciled.as_secs_f64(),
            size / 1024
        );
        eprint!("{report}");
        let _ = std::fs::write(target_dir.join("timings.txt"), report);
    })
    .await
    .expect("the scaffold test timed out (likely deadlocked)");
}

/// `--primary` naming a kind that is not built in scaffolds a custom
/// resource: the crate's test passes, the component builds and registers
/// the CRD (`rekon plugin inspect` shows it).
#[tokio::test]
async fn a_scaffolded_custom_resource_plugin_owns_its_crd() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let paths = Paths::discover().expect("built workspace");
        let outside = tempfile::Builder::new()
            .prefix("rekon-scaffold-crd-")
            .tempdir()
            .expect("temp dir");
        let target_dir = paths.root.join("target/scaffold");
        let out = Command::new(&paths.rekon)
            .args(["plugin", "new", "widgeteer", "--primary"])
            .arg("widgets.example.com/v1alpha1/Widget")
            .arg("--dir")
            .arg(outside.path())
            .arg("--sdk-path")
            .arg(paths.root.join("guest-sdk"))
            .output()
            .expect("rekon runs");
        assert!(
            out.status.success(),
            "rekon plugin new failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let crate_dir = outside.path().join("widgeteer");
        std::fs::copy(paths.root.join("Cargo.lock"), crate_dir.join("Cargo.lock"))
            .expect("copy Cargo.lock");
        let (dir, target) = (crate_dir.clone(), target_dir.clone());
        tokio::task::spawn_blocking(move || {
            cargo(&dir, &target, &["test"]);
            cargo(
                &dir,
                &target,
                &["build", "--target", "wasm32-wasip2", "--release"],
            );
        })
        .await
        .expect("cargo thread");
        let out = Command::new(&paths.rekon)
            .args(["plugin", "inspect", "-o", "json"])
            .arg(target_dir.join("wasm32-wasip2/release/widgeteer.wasm"))
            .output()
            .expect("rekon runs");
        assert!(
            out.status.success(),
            "inspect failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("inspect prints JSON");
        assert_eq!(
            report["primary"]["apiVersion"],
            "widgets.example.com/v1alpha1"
        );
        assert_eq!(
            report["crds"][0]["metadata"]["name"],
            "widgets.widgets.example.com"
        );
    })
    .await
    .expect("the scaffold test timed out (likely deadlocked)");
}
