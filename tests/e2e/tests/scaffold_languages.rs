//! `rekon plugin new --lang typescript|python --admission`, out of tree, as
//! on a fresh machine: the generated project's README commands work as
//! written (its reconcile and its webhooks tested natively, the component
//! of world `admission-plugin` built, its webhooks read by the host) —
//! `npm install && npm test && npm run build`, or (in a fresh venv) `pip
//! install -e . && pytest && rekon-py-build ...` — and `rekon plugin
//! inspect` accepts the component (for TypeScript, built on each engine
//! `rekon-build` offers). The SDKs come from a copy of this checkout's
//! `wit/`, `sdk/typescript` and `sdk/python` without anything installed in
//! them (no `node_modules`, no build output), and npm starts from an empty
//! cache: the project must get the SDK's dependencies itself, not borrow
//! them from a prepared checkout. Also the Rust default: with no `--sdk-*`
//! flag, the crate depends on this checkout's SDK by path (resolves with no
//! git host reachable).
//!
//! Needs node/npm and python3 with venv (installed by `.ci/run`) and the
//! package registries; a missing tool fails the test saying which.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rekon_e2e::Paths;

const TEST_TIMEOUT: Duration = Duration::from_secs(900);

fn run(dir: &Path, program: &str, args: &[&str], envs: &[(&str, &str)]) -> Duration {
    let started = Instant::now();
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(envs.iter().copied())
        .output()
        .unwrap_or_else(|e| {
            panic!("failed to run {program} (is it installed? .ci/run installs it): {e}")
        });
    assert!(
        out.status.success(),
        "`{program} {}` failed in {}:\n{}{}",
        args.join(" "),
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed()
}

/// A checkout-like copy of `wit/` and the two SDKs under `dir` (links kept,
/// so `sdk/typescript/wit` points at the copy's `wit/`), without what a
/// prepared checkout has installed in them.
fn bare_checkout(paths: &Paths, dir: &Path) -> std::path::PathBuf {
    let root = dir.join("rekon");
    std::fs::create_dir_all(root.join("sdk")).expect("create the copy");
    for (from, to) in [
        ("wit", "."),
        ("sdk/typescript", "sdk"),
        ("sdk/python", "sdk"),
    ] {
        run(
            dir,
            "cp",
            &[
                "-a",
                &paths.root.join(from).display().to_string(),
                &root.join(to).display().to_string(),
            ],
            &[],
        );
    }
    for installed in [
        "sdk/typescript/node_modules",
        "sdk/python/build",
        "sdk/python/rekon_sdk.egg-info",
    ] {
        let path = root.join(installed);
        if path.exists() {
            std::fs::remove_dir_all(&path).expect("remove installed files from the copy");
        }
    }
    root
}

fn scaffold(paths: &Paths, parent: &Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let out = Command::new(&paths.rekon)
        .args(["plugin", "new", name, "--dir"])
        .arg(parent)
        .args(extra)
        .output()
        .expect("rekon runs");
    assert!(
        out.status.success(),
        "rekon plugin new failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parent.join(name)
}

fn inspect(paths: &Paths, wasm: &Path) -> String {
    let out = Command::new(&paths.rekon)
        .args(["plugin", "inspect"])
        .arg(wasm)
        .output()
        .expect("rekon runs");
    assert!(
        out.status.success(),
        "inspect refused {}: {}",
        wasm.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The README's last steps: `rekon plugin explore` without a scenario
/// (inputs generated from the registration and the CRD, `--max-plans 40`)
/// and with the scaffold's own scenario find nothing in the generated
/// plugin.
fn explore(paths: &Paths, project: &Path, wasm: &Path) {
    for scenario in [false, true] {
        let mut cmd = Command::new(&paths.rekon);
        cmd.args(["plugin", "explore"]).arg(wasm);
        if scenario {
            cmd.args(["--scenario", "explore/scenario.yaml", "--budget", "120"]);
        } else {
            cmd.args(["--max-plans", "40", "--budget", "600"]);
        }
        let out = cmd
            .arg("--out")
            .arg(project.join("explore-out"))
            .current_dir(project)
            .output()
            .expect("rekon runs");
        assert!(
            out.status.success(),
            "explore of {} (scenario: {scenario}) exited {:?}:\n{}{}",
            wasm.display(),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("no finding"), "{text}");
        if !scenario {
            assert!(text.contains("generated step(s)"), "{text}");
            assert!(project.join("explore-out/scenario.yaml").is_file());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_and_python_scaffolds_test_build_and_load() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let paths = Paths::discover().expect("built workspace");
        let outside = tempfile::Builder::new()
            .prefix("rekon-scaffold-langs-")
            .tempdir()
            .expect("temp dir");
        let checkout = tempfile::Builder::new()
            .prefix("rekon-bare-checkout-")
            .tempdir()
            .expect("temp dir");
        let bare = bare_checkout(&paths, checkout.path());
        let sdk = |d: &str| bare.join(d).display().to_string();
        let npm_cache = checkout.path().join("npm-cache");
        let npm_cache = npm_cache.display().to_string();
        let npm_env = [
            ("npm_config_cache", npm_cache.as_str()),
            ("npm_config_update_notifier", "false"),
        ];

        // TypeScript, custom primary (so the CRD path is exercised too).
        let ts = scaffold(
            &paths,
            outside.path(),
            "widget-ts",
            &[
                "--lang",
                "typescript",
                "--primary",
                "widgets.example.com/v1/Widget",
                "--sdk-path",
                &sdk("sdk/typescript"),
                "--admission",
            ],
        );
        let install = run(
            &ts,
            "npm",
            &["install", "--no-audit", "--no-fund"],
            &npm_env,
        );
        assert!(
            !ts.join("node_modules/@rekon/sdk")
                .symlink_metadata()
                .expect("@rekon/sdk installed")
                .is_symlink(),
            "@rekon/sdk is installed as a link: its imports would resolve in the checkout"
        );
        let test = run(&ts, "npm", &["test"], &npm_env);
        let build = run(&ts, "npm", &["run", "build"], &npm_env);
        let reg = inspect(&paths, &ts.join("dist/widget_ts.wasm"));
        explore(&paths, &ts, &ts.join("dist/widget_ts.wasm"));
        assert!(
            reg.contains("name: widget-ts") && reg.contains("kind: CustomResourceDefinition"),
            "{reg}"
        );
        assert!(
            reg.contains("name: owner.widget-ts.rekon.dev")
                && reg.contains("name: default-owner.widget-ts.rekon.dev"),
            "the webhooks of src/admission.ts: {reg}"
        );
        // The other engine, from the same installed SDK.
        let build_sm = run(
            &ts,
            "npm",
            &[
                "run",
                "build",
                "--",
                "--engine",
                "starlingmonkey",
                "-o",
                "dist/widget_ts_sm.wasm",
            ],
            &npm_env,
        );
        let reg_sm = inspect(&paths, &ts.join("dist/widget_ts_sm.wasm"));
        let registration = |r: &str| {
            r.lines()
                .filter(|l| !l.starts_with("digest: "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            registration(&reg_sm),
            registration(&reg),
            "the two engines' components register alike"
        );
        eprintln!(
            "typescript: npm install {install:?}, npm test {test:?}, npm run build {build:?} \
             (starlingmonkey {build_sm:?})"
        );

        // Python, cluster-scoped built-in primary, in a fresh venv.
        let py = scaffold(
            &paths,
            outside.path(),
            "pool-py",
            &[
                "--lang",
                "python",
                "--primary",
                "v1/Node",
                "--sdk-path",
                &sdk("sdk/python"),
                "--admission",
            ],
        );
        run(&py, "python3", &["-m", "venv", ".venv"], &[]);
        let venv = py.join(".venv/bin");
        let bin = |b: &str| venv.join(b).display().to_string();
        let path = format!(
            "{}:{}",
            venv.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let env = [("PATH", path.as_str()), ("VIRTUAL_ENV", "")];
        let install = run(&py, &bin("pip"), &["install", "-q", "-e", "."], &env);
        let test = run(&py, &bin("pytest"), &["-q"], &env);
        let build = run(
            &py,
            &bin("rekon-py-build"),
            &["pool_py", "-o", "dist/pool_py.wasm"],
            &env,
        );
        let reg = inspect(&paths, &py.join("dist/pool_py.wasm"));
        explore(&paths, &py, &py.join("dist/pool_py.wasm"));
        assert!(
            reg.contains("name: pool-py") && reg.contains("kind: Node"),
            "{reg}"
        );
        assert!(
            reg.contains("name: owner.pool-py.rekon.dev")
                && reg.contains("name: default-owner.pool-py.rekon.dev"),
            "the webhooks of pool_py.py: {reg}"
        );
        eprintln!("python: pip install {install:?}, pytest {test:?}, build {build:?}");

        // Rust, no flag: this checkout's SDK by path, never `git = ""`.
        let rs = scaffold(&paths, outside.path(), "cm-rs", &[]);
        let manifest = std::fs::read_to_string(rs.join("Cargo.toml")).expect("Cargo.toml");
        let guest_sdk = paths
            .root
            .join("guest-sdk")
            .canonicalize()
            .expect("guest-sdk");
        assert!(
            manifest.contains(&format!(
                "rekon-sdk = {{ path = {:?} }}",
                guest_sdk.display().to_string()
            )),
            "{manifest}"
        );
    })
    .await
    .expect("test timed out: likely deadlocked");
}
