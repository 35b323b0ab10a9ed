//! `rekon run`'s plugin sources on the command line: a plugin directory,
//! Plugin objects, or both; neither is a usage error naming both.

use std::process::{Command, Output};

/// `rekon run ARGS` with no plugin source from the environment, a
/// kubeconfig that does not exist (so a run that gets past parsing stops
/// at connecting the cluster) and the ops endpoints off.
fn rekon_run(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    Command::new(env!("CARGO_BIN_EXE_rekon"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(dir.path().join("no-such-kubeconfig"))
        .args([
            "--context",
            "main",
            "--metrics-addr",
            "off",
            "--probe-addr",
            "off",
        ])
        .arg("--cache-dir")
        .arg(dir.path())
        .args(args)
        .env_remove("REKON_PLUGINS")
        .env_remove("REKON_PLUGIN_OBJECTS")
        .env_remove("KUBECONFIG")
        .output()
        .expect("run rekon")
}

#[test]
fn neither_plugin_source_is_a_usage_error_naming_both() {
    let out = rekon_run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a usage error: {stderr}");
    assert!(
        stderr.contains("--plugins <PLUGINS>") && stderr.contains("--plugin-objects"),
        "the error names both sources: {stderr}"
    );
}

#[test]
fn plugin_objects_alone_or_a_directory_alone_is_enough() {
    let plugins = tempfile::tempdir().expect("temp dir");
    let dir = plugins.path().to_str().expect("utf-8 temp dir");
    for args in [
        &["--plugin-objects"][..],
        &["--plugins", dir][..],
        &["--plugins", dir, "--plugin-objects"][..],
    ] {
        let out = rekon_run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Past the command line: it stops at the missing kubeconfig.
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("no-such-kubeconfig"), "{args:?}: {stderr}");
    }
}
