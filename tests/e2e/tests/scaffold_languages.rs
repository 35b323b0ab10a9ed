//! `rekon plugin new --lang typescript|python`, out of tree: the generated
//! project's README commands work as written — `npm install && npm test &&
//! npm run build`, or (in a fresh venv) `pip install -e . && pytest &&
//! rekon-py-build ...` — and `rekon plugin inspect` accepts the component.
//! Also the Rust default: with no `--sdk-*` flag, the crate depends on this
//! checkout's SDK by path (resolves with no git host reachable).
//!
//! Needs node/npm and python3 with venv (installed by `.ci/run`); a missing
//! tool fails the test saying which.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_and_python_scaffolds_test_build_and_load() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let paths = Paths::discover().expect("built workspace");
        let outside = tempfile::Builder::new()
            .prefix("rekon-scaffold-langs-")
            .tempdir()
            .expect("temp dir");
        let sdk = |d: &str| paths.root.join(d).display().to_string();

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
            ],
        );
        let install = run(&ts, "npm", &["install", "--no-audit", "--no-fund"], &[]);
        let test = run(&ts, "npm", &["test"], &[]);
        let build = run(&ts, "npm", &["run", "build"], &[]);
        let reg = inspect(&paths, &ts.join("dist/widget_ts.wasm"));
        assert!(
            reg.contains("name: widget-ts") && reg.contains("kind: CustomResourceDefinition"),
            "{reg}"
        );
        eprintln!(
            "typescript: npm install {install:?}, npm test {test:?}, npm run build {build:?}"
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
        assert!(
            reg.contains("name: pool-py") && reg.contains("kind: Node"),
            "{reg}"
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
