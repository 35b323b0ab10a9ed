//! The independent side of the signature tests: `tests/signatures/cosign_side.py`,
//! cosign's formats written and checked with Python's `cryptography`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The script.
#[must_use]
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/signatures/cosign_side.py")
}

/// Runs `cosign_side.py ARGS`: its combined output, or an error with it.
/// A missing `cryptography` is an error that says so (scripts/setup.sh
/// installs it), never a skipped check.
///
/// # Errors
/// When python3 or `cryptography` is missing, or the script fails.
pub fn run(args: &[&str]) -> anyhow::Result<String> {
    let probe = Command::new("python3")
        .args(["-c", "import cryptography"])
        .output()
        .context("python3 is missing")?;
    if !probe.status.success() {
        bail!(
            "Python's cryptography is missing (`pip install cryptography`; scripts/setup.sh installs it): {}",
            String::from_utf8_lossy(&probe.stderr)
        );
    }
    let out = Command::new("python3").arg(script()).args(args).output()?;
    let text = crate::output_text(&out);
    if !out.status.success() {
        bail!("cosign_side.py {args:?} failed: {text}");
    }
    Ok(text)
}
