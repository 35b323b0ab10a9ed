//! Plugins as cluster objects, end to end with real parts: a real OCI
//! registry (Docker Distribution, `docker-registry`), `rekon plugin push`,
//! `rekon plugin manifest`, and `rekon run --plugin-objects` on kube-sim.
//!
//! The plugin is the chaos test plugin in two builds: v1 annotates every
//! ConfigMap it reconciles (`data.mode: ok`) with `chaos.rekon.dev/version:
//! v1`, v2 with `v2`, so which build serves is visible on the objects.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use rekon_e2e::plugin_objects::{self, condition, config_map, wait_plugin_crd};
use rekon_e2e::registry::Registry;
use rekon_e2e::{Env, EnvOptions, Paths, apply_object, get, with_custom_section};
use serde_json::{Value, json};

const ANNOTATION: &str = "chaos.rekon.dev/version";
const WAIT: Duration = Duration::from_secs(60);

/// `rekon plugin push FILE REF` for a test plugin; the manifest digest it
/// prints.
fn push(paths: &Paths, file: &str, reference: &str) -> anyhow::Result<String> {
    plugin_objects::push(paths, &paths.test_plugins.join(file), reference, None)
}

/// The Plugin object `rekon plugin manifest` prints for test plugin `file`
/// at `reference`.
fn manifest(paths: &Paths, file: &str, reference: &str) -> anyhow::Result<Value> {
    manifest_file(paths, &paths.test_plugins.join(file), reference, &[])
}

/// The Plugin object `rekon plugin manifest FILE --module REF ARGS...`
/// prints.
fn manifest_file(
    paths: &Paths,
    file: &std::path::Path,
    reference: &str,
    args: &[&str],
) -> anyhow::Result<Value> {
    let out = Command::new(&paths.rekon)
        .args(["plugin", "manifest"])
        .arg(file)
        .args(["--module", reference])
        .args(args)
        .output()
        .context("run rekon plugin manifest")?;
    if !out.status.success() {
        bail!(
            "rekon plugin manifest failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_yaml::from_slice(&out.stdout)?)
}

/// `rekon run --plugin-objects` with no plugin files, caching fetched and
/// compiled modules in `cache`.
fn options(cache: &std::path::Path) -> EnvOptions {
    EnvOptions {
        plugins: Vec::new(),
        extra_args: vec![
            "--plugin-objects".to_owned(),
            "--cache-dir".to_owned(),
            cache.display().to_string(),
        ],
        ..EnvOptions::default()
    }
}

fn plugin(env: &Env) -> Option<Value> {
    plugin_named(env, "chaos")
}

async fn wait_serving(env: &mut Env, digest: &str) -> anyhow::Result<Value> {
    let what = format!("Plugin chaos to serve {digest}");
    let last = std::cell::RefCell::new(Value::Null);
    env.wait_for(&what, WAIT, |env| {
        let obj = plugin(env)?;
        *last.borrow_mut() = obj.clone();
        let ready = condition(&obj, "Ready")?;
        let degraded = condition(&obj, "Degraded")?;
        (ready.0 == "True" && degraded.0 == "False" && obj["status"]["digest"] == digest)
            .then_some(obj)
    })
    .await
    .with_context(|| format!("the Plugin was last:\n{:#}", last.borrow()))
}

async fn wait_degraded(env: &mut Env, reason: &str) -> anyhow::Result<(Value, String)> {
    let what = format!("Plugin chaos to be Degraded with reason {reason}");
    env.wait_for(&what, WAIT, |env| {
        let obj = plugin(env)?;
        let (status, why, message) = condition(&obj, "Degraded")?;
        (status == "True" && why == reason).then_some((obj, message))
    })
    .await
}

fn annotation(env: &Env, name: &str) -> Option<String> {
    get(env.main(), "v1", "configmaps", Some("default"), name)?["metadata"]["annotations"]
        [ANNOTATION]
        .as_str()
        .map(str::to_owned)
}

async fn wait_annotated(env: &mut Env, names: &[String], mark: &str) -> anyhow::Result<()> {
    let what = format!("{} ConfigMaps annotated {mark}", names.len());
    env.wait_for(&what, WAIT, |env| {
        names
            .iter()
            .all(|n| annotation(env, n).as_deref() == Some(mark))
            .then_some(())
    })
    .await
}

/// A registry holding chaos v1 and v2, and `rekon run --plugin-objects`
/// with the Plugin CRD installed.
struct Setup {
    paths: Paths,
    registry: Registry,
    v1: String,
    v2: String,
    d1: String,
    d2: String,
    cache: tempfile::TempDir,
    env: Env,
}

async fn setup() -> anyhow::Result<Setup> {
    let paths = Paths::discover()?;
    let registry = Registry::start()?;
    let v1 = format!("{}/rekon/chaos:1", registry.host());
    let v2 = format!("{}/rekon/chaos:2", registry.host());
    let d1 = push(&paths, "chaos-v1.wasm", &v1)?;
    let d2 = push(&paths, "chaos-v2.wasm", &v2)?;
    assert_ne!(d1, d2);
    let cache = tempfile::tempdir()?;
    let mut env = Env::start(options(cache.path())).await?;
    wait_plugin_crd(&mut env, WAIT).await?;
    Ok(Setup {
        paths,
        registry,
        v1,
        v2,
        d1,
        d2,
        cache,
        env,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_object_serves_swaps_live_and_rolls_back() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let Setup {
            paths,
            registry: _registry,
            v1,
            v2,
            d1,
            d2,
            cache: _cache,
            mut env,
        } = setup().await?;
        apply_object(env.main(), manifest(&paths, "chaos-v1.wasm", &v1)?)?;
        let obj = wait_serving(&mut env, &d1).await?;
        assert_eq!(obj["status"]["version"], "1.0.0");
        // The only replica serves what the object says.
        wait_consistent(&mut env, "True", "AllReplicasServing", &d1, 1).await?;
        assert_eq!(
            condition(&obj, "Fetched").map(|c| c.0).as_deref(),
            Some("True")
        );

        let first: Vec<String> = (0..5).map(|i| format!("before-{i}")).collect();
        for name in &first {
            config_map(&env, name)?;
        }
        wait_annotated(&mut env, &first, "v1").await?;

        // Swap: the edit, then ConfigMaps created while the new version
        // comes in. None is lost: all end up reconciled by v2.
        apply_object(
            env.main(),
            json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
                   "metadata": {"name": "chaos"}, "spec": {"module": v2}}),
        )?;
        let during: Vec<String> = (0..20).map(|i| format!("during-{i}")).collect();
        for name in &during {
            config_map(&env, name)?;
        }
        let obj = wait_serving(&mut env, &d2).await?;
        assert_eq!(obj["status"]["version"], "2.0.0");
        let all: Vec<String> = first.iter().chain(&during).cloned().collect();
        wait_annotated(&mut env, &all, "v2").await?;

        // Rollback is the same edit back.
        apply_object(
            env.main(),
            json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
                   "metadata": {"name": "chaos"}, "spec": {"module": v1}}),
        )?;
        wait_serving(&mut env, &d1).await?;
        wait_annotated(&mut env, &all, "v1").await?;
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

/// `rekon run --plugin-objects` without `--plugins` (as deploy/base runs
/// it): no plugin directory to invent; the host starts, installs the Plugin
/// CRD and serves a Plugin object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_a_plugin_directory_serves_plugin_objects() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let paths = Paths::discover()?;
        let registry = Registry::start()?;
        let v1 = format!("{}/rekon/chaos:1", registry.host());
        let d1 = push(&paths, "chaos-v1.wasm", &v1)?;
        let cache = tempfile::tempdir()?;
        let mut env = Env::start(EnvOptions {
            plugin_dir: false,
            ..options(cache.path())
        })
        .await?;
        wait_plugin_crd(&mut env, WAIT).await?;
        apply_object(env.main(), manifest(&paths, "chaos-v1.wasm", &v1)?)?;
        wait_serving(&mut env, &d1).await?;
        config_map(&env, "no-plugin-directory")?;
        wait_annotated(&mut env, &["no-plugin-directory".to_owned()], "v1").await?;
        let log = std::fs::read_to_string(env.rekon.log_path())?;
        assert!(
            log.contains("rekon running (no plugin directory)"),
            "the host was given a plugin directory:\n{log}"
        );
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_modules_and_grants_keep_the_serving_version() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let Setup {
            paths,
            mut registry,
            v1,
            v2,
            d1,
            cache,
            mut env,
            ..
        } = setup().await?;
        let mut good = manifest(&paths, "chaos-v1.wasm", &v1)?;
        good["spec"]["digest"] = json!(d1);
        apply_object(env.main(), good.clone())?;
        wait_serving(&mut env, &d1).await?;

        // A digest that does not match: refused before anything is compiled.
        let wrong = format!("sha256:{}", "0".repeat(64));
        let mut bad = good.clone();
        bad["spec"]["module"] = json!(v2);
        bad["spec"]["digest"] = json!(wrong);
        apply_object(env.main(), bad)?;
        let (obj, message) = wait_degraded(&mut env, "DigestMismatch").await?;
        assert!(message.contains(&wrong), "{message}");
        assert!(message.contains("keeps serving"), "{message}");
        assert_eq!(
            condition(&obj, "Ready").map(|c| c.0).as_deref(),
            Some("True")
        );
        assert_eq!(obj["status"]["digest"], json!(d1));
        config_map(&env, "while-mismatched")?;
        wait_annotated(&mut env, &["while-mismatched".to_owned()], "v1").await?;

        // A grant narrower than what the module declares: refused, naming it.
        let mut narrow = good.clone();
        narrow["spec"]["module"] = json!(v2);
        narrow["spec"]["digest"] = Value::Null;
        narrow["spec"]["permissions"][0]["verbs"] = json!(["get"]);
        apply_object(env.main(), narrow)?;
        let (_, message) = wait_degraded(&mut env, "PermissionsExceedGrant").await?;
        assert!(message.contains("patch on ConfigMap"), "{message}");

        // The registry stops: a new module cannot be fetched; v1 serves on.
        registry.stop();
        let v3 = format!("{}/rekon/chaos:3", registry.host());
        let mut unreachable = good.clone();
        unreachable["spec"]["module"] = json!(v3);
        unreachable["spec"]["digest"] = Value::Null;
        apply_object(env.main(), unreachable)?;
        let (obj, _) = wait_degraded(&mut env, "RegistryUnreachable").await?;
        assert_eq!(
            condition(&obj, "Fetched").map(|c| (c.0, c.1)),
            Some(("False".to_owned(), "RegistryUnreachable".to_owned()))
        );
        config_map(&env, "while-unreachable")?;
        wait_annotated(&mut env, &["while-unreachable".to_owned()], "v1").await?;

        // Back to the pinned v1, then a restart with the registry still
        // down: served from the host's cache, neither pulled nor compiled.
        apply_object(env.main(), good.clone())?;
        wait_serving(&mut env, &d1).await?;
        env.rekon.stop();
        env.rekon = env.spawn_replica(&options(cache.path()))?;
        let log = env
            .wait_for("the restarted host to load chaos", WAIT, |env| {
                let log = std::fs::read_to_string(env.rekon.log_path()).ok()?;
                log.contains("loaded plugin").then_some(log)
            })
            .await?;
        // Not compiled again either: the runtime's artifact cache served it.
        assert!(log.contains("from_cache: true"), "compiled again:\n{log}");
        env.wait_for(
            "the Plugin's status to say the module came from the cache",
            WAIT,
            |env| {
                let fetched = condition(&plugin(env)?, "Fetched")?;
                fetched.2.contains("from the cache").then_some(())
            },
        )
        .await?;
        config_map(&env, "after-restart")?;
        wait_annotated(&mut env, &["after-restart".to_owned()], "v1").await?;

        // The same module by tag alone, and a restart with the registry
        // still down: the tag cannot be resolved, so the digest the object
        // last resolved to serves from the module cache, and the status
        // says so; nothing is lost meanwhile.
        let mut by_tag = good.clone();
        by_tag["spec"]["digest"] = Value::Null;
        apply_object(env.main(), by_tag)?;
        wait_degraded(&mut env, "RegistryUnreachable").await?;
        env.rekon.stop();
        env.rekon = env.spawn_replica(&options(cache.path()))?;
        let (obj, message) = env
            .wait_for(
                "the restarted host to serve the last resolved digest",
                WAIT,
                |env| {
                    let obj = plugin(env)?;
                    let (status, why, message) = condition(&obj, "Degraded")?;
                    (status == "True"
                        && why == "RegistryUnreachable"
                        && message.contains("serves from the cache meanwhile"))
                    .then_some((obj, message))
                },
            )
            .await?;
        assert!(message.contains(&d1), "{message}");
        assert_eq!(obj["status"]["digest"], json!(d1));
        assert_eq!(
            condition(&obj, "Ready").map(|c| c.0).as_deref(),
            Some("True")
        );
        assert_eq!(
            condition(&obj, "Fetched").map(|c| (c.0, c.1)),
            Some(("False".to_owned(), "RegistryUnreachable".to_owned()))
        );
        config_map(&env, "after-restart-by-tag")?;
        wait_annotated(&mut env, &["after-restart-by-tag".to_owned()], "v1").await?;

        // The registry returns: the tag resolves to the same digest and the
        // object is whole again, without a restart.
        registry.restart()?;
        wait_serving(&mut env, &d1).await?;
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_from_a_plugin_object_diverges_and_writes_nothing() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let Setup {
            paths,
            registry,
            v1,
            v2,
            d1,
            d2,
            cache: _cache,
            mut env,
        } = setup().await?;
        let mut obj = manifest(&paths, "chaos-v1.wasm", &v1)?;
        obj["spec"]["shadow"] = json!({"module": v2});
        apply_object(env.main(), obj)?;
        wait_serving(&mut env, &d1).await?;
        let names: Vec<String> = (0..5).map(|i| format!("shadowed-{i}")).collect();
        for name in &names {
            config_map(&env, name)?;
        }
        wait_annotated(&mut env, &names, "v1").await?;
        let obj = env
            .wait_for("shadow divergences in the Plugin's status", WAIT, |env| {
                let obj = plugin(env)?;
                (obj["status"]["shadow"]["divergences"].as_u64()? >= 5).then_some(obj)
            })
            .await?;
        assert_eq!(obj["status"]["shadow"]["digest"], json!(d2));
        // The last few divergences are in the status, with their diffs.
        let obj = env
            .wait_for("recent divergences with diffs", WAIT, |env| {
                let obj = plugin(env)?;
                let recent = obj["status"]["shadow"]["recent"].as_array()?;
                (!recent.is_empty()).then_some(obj)
            })
            .await?;
        let recent = obj["status"]["shadow"]["recent"].as_array().unwrap();
        assert!(recent.len() <= 3, "{recent:?}");
        let last = recent.last().unwrap();
        assert_eq!(last["kind"], "actions", "{last}");
        assert!(
            last["object"]
                .as_str()
                .unwrap()
                .starts_with("main/default/shadowed-"),
            "{last}"
        );
        let diff = last["diff"].as_str().unwrap();
        assert!(diff.contains("v1") && diff.contains("v2"), "{diff}");
        let count = |obj: &Value, what: &str| obj["status"]["shadow"][what].as_u64().unwrap_or(0);
        assert_eq!(
            count(&obj, "identical") + count(&obj, "divergences"),
            count(&obj, "reconciles"),
            "{obj}"
        );
        // The shadow wrote nothing: every ConfigMap still carries v1.
        for name in &names {
            assert_eq!(annotation(&env, name).as_deref(), Some("v1"), "{name}");
        }
        // Promotion is an edit of the Plugin, made by `rekon plugin promote`.
        let out = Command::new(&env.paths.rekon)
            .args([
                "plugin",
                "promote",
                "chaos",
                "--object",
                "--context",
                "main",
            ])
            .arg("--kubeconfig")
            .arg(&env.kubeconfig)
            .env_remove("KUBECONFIG")
            .output()?;
        assert!(
            out.status.success(),
            "rekon plugin promote --object failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let obj = wait_serving(&mut env, &d2).await?;
        assert_eq!(obj["spec"]["module"], json!(v2));
        assert!(obj["spec"].get("shadow").is_none(), "{obj}");
        wait_annotated(&mut env, &names, "v2").await?;

        // A new candidate is counted from zero: none of the earlier
        // candidate's divergences are its own. It is v2 rebuilt (another
        // digest, the same decisions as the serving v2: the host runs no
        // shadow whose digest is the serving one's).
        let rebuilt_file = tempfile::tempdir()?;
        let rebuilt_path = rebuilt_file.path().join("chaos-v2b.wasm");
        std::fs::write(
            &rebuilt_path,
            with_custom_section(
                &std::fs::read(paths.test_plugins.join("chaos-v2.wasm"))?,
                "rekon-e2e-rebuild",
                b"b",
            ),
        )?;
        let v2b = format!("{}/rekon/chaos:2b", registry.host());
        let d2b = plugin_objects::push(&paths, &rebuilt_path, &v2b, None)?;
        assert_ne!(d2b, d2);
        apply_object(
            env.main(),
            json!({"apiVersion": obj["apiVersion"], "kind": "Plugin",
                   "metadata": {"name": "chaos"},
                   "spec": {"shadow": {"module": v2b}}}),
        )?;
        env.wait_for("the new shadow candidate to load", WAIT, |env| {
            (plugin(env)?["status"]["shadow"]["digest"] == json!(d2b)).then_some(())
        })
        .await?;
        let more: Vec<String> = (0..3).map(|i| format!("same-{i}")).collect();
        for name in &more {
            config_map(&env, name)?;
        }
        wait_annotated(&mut env, &more, "v2").await?;
        let obj = env
            .wait_for("identical reconciles of the new candidate", WAIT, |env| {
                let obj = plugin(env)?;
                (count(&obj, "identical") >= 3).then_some(obj)
            })
            .await?;
        assert_eq!(count(&obj, "divergences"), 0, "{obj}");
        assert_eq!(count(&obj, "reconciles"), count(&obj, "identical"), "{obj}");
        assert!(obj["status"]["shadow"].get("recent").is_none(), "{obj}");
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

/// The seed test-fanout served from a Plugin object (pushed to the
/// registry, the grant `rekon plugin manifest` prints): its CRD is
/// installed, a Test fans a Job out to both clusters, and the Job in `sub`
/// completing finishes the Test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_fanout_from_a_plugin_object_fans_out_and_finishes() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let paths = Paths::discover()?;
        let registry = Registry::start()?;
        let module = format!("{}/rekon/test-fanout:1", registry.host());
        let file = paths.plugins.join("test_fanout.wasm");
        let digest = plugin_objects::push(&paths, &file, &module, None)?;
        let cache = tempfile::tempdir()?;
        let mut env = Env::start(options(cache.path())).await?;
        wait_plugin_crd(&mut env, WAIT).await?;
        let mut obj = manifest_file(&paths, &file, &module, &[])?;
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(name, "test-fanout");
        obj["spec"]["digest"] = json!(digest);
        apply_object(env.main(), obj)?;
        env.wait_for(
            "test-fanout ready, serving the pushed digest",
            WAIT,
            |env| {
                let obj = plugin_named(env, "test-fanout")?;
                (condition(&obj, "Ready")?.0 == "True" && obj["status"]["digest"] == json!(digest))
                    .then_some(())
            },
        )
        .await?;
        env.wait_for(
            "the Test CRD (installed for the Plugin object)",
            WAIT,
            |env| {
                env.main()
                    .list("job.lailin.xyz/v1", "tests", None, "")
                    .is_ok()
                    .then_some(())
            },
        )
        .await?;
        rekon_e2e::create_test(env.main(), "default", "from-an-object")?;
        let job = |c: &kube_sim::SimCluster| {
            get(c, "batch/v1", "jobs", Some("default"), "from-an-object")
        };
        env.wait_for("the Job in main and sub", WAIT, |env| {
            (job(env.main()).is_some() && job(env.sub()).is_some()).then_some(())
        })
        .await?;
        rekon_e2e::complete_job(env.sub(), "default", "from-an-object")?;
        env.wait_for("the Test finished by the Job in sub", WAIT, |env| {
            let test = get(
                env.main(),
                "job.lailin.xyz/v1",
                "tests",
                Some("default"),
                "from-an-object",
            )?;
            (test["status"]["phase"] == "finished" && test["status"]["finishedCluster"] == "sub")
                .then_some(())
        })
        .await?;
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

/// A Plugin object named `name` serving the seed nodepool from `module`
/// with `settings`, granting what the module declares.
fn nodepool_instance(
    paths: &Paths,
    module: &str,
    name: &str,
    settings: Value,
) -> anyhow::Result<Value> {
    let mut obj = manifest_file(
        paths,
        &paths.plugins.join("nodepool.wasm"),
        module,
        &["--name", name],
    )?;
    assert_eq!(obj["metadata"]["name"], name);
    // Edited in (settings the module refuses would fail `manifest`).
    obj["spec"]["settings"] = settings;
    Ok(obj)
}

fn plugin_named(env: &Env, name: &str) -> Option<Value> {
    get(env.main(), "rekon.dev/v1alpha1", "plugins", None, name)
}

fn handler(env: &Env, pool: &str) -> Option<String> {
    get(
        env.main(),
        "node.k8s.io/v1",
        "runtimeclasses",
        None,
        &format!("node-pool-{pool}"),
    )?["handler"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_instances_and_live_settings_changes() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let paths = Paths::discover()?;
        let registry = Registry::start()?;
        let module = format!("{}/rekon/nodepool:1", registry.host());
        plugin_objects::push(&paths, &paths.plugins.join("nodepool.wasm"), &module, None)?;
        let cache = tempfile::tempdir()?;
        let mut env = Env::start(options(cache.path())).await?;
        wait_plugin_crd(&mut env, WAIT).await?;

        // One module, two Plugin objects with different settings, each for
        // its own pools.
        apply_object(
            env.main(),
            nodepool_instance(&paths, &module, "gpu-pools", json!({"poolSelector": "tier=gpu", "defaultHandler": "kata"}))?,
        )?;
        apply_object(
            env.main(),
            nodepool_instance(&paths, &module, "cpu-pools", json!({"poolSelector": "tier=cpu"}))?,
        )?;
        for name in ["gpu-pools", "cpu-pools"] {
            env.wait_for(&format!("{name} ready"), WAIT, |env| {
                let obj = plugin_named(env, name)?;
                (condition(&obj, "Ready")?.0 == "True").then_some(())
            })
            .await?;
        }
        env.wait_for("the NodePool CRD (installed for the instances)", WAIT, |env| {
            env.main().list("nodes.lailin.xyz/v1", "nodepools", None, "").is_ok().then_some(())
        })
        .await?;
        for (pool, tier) in [("gpu", "gpu"), ("cpu", "cpu")] {
            apply_object(
                env.main(),
                json!({"apiVersion": "nodes.lailin.xyz/v1", "kind": "NodePool",
                       "metadata": {"name": pool, "labels": {"tier": tier}},
                       "spec": {"labels": {format!("pool.example.com/{pool}"): "yes"}}}),
            )?;
            apply_object(
                env.main(),
                json!({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": format!("{pool}-node"), "labels": {format!("node-role.kubernetes.io/{pool}"): ""}}}),
            )?;
        }
        env.wait_for("each instance converging its own pool", WAIT, |env| {
            (handler(env, "gpu")?.as_str() == "kata" && handler(env, "cpu")?.as_str() == "runc").then_some(())
        })
        .await?;
        // Field managers, finalizers and queues are the instance's.
        let finalizers = |pool: &str| {
            get(env.main(), "nodes.lailin.xyz/v1", "nodepools", None, pool)
                .map(|p| p["metadata"]["finalizers"].clone())
        };
        assert_eq!(finalizers("gpu"), Some(json!(["nodes.lailin.xyz/cleanup.gpu-pools"])));
        assert_eq!(finalizers("cpu"), Some(json!(["nodes.lailin.xyz/cleanup.cpu-pools"])));
        let rc = get(env.main(), "node.k8s.io/v1", "runtimeclasses", None, "node-pool-gpu").unwrap();
        let managers: Vec<String> = rc["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["manager"].as_str().map(str::to_owned))
            .collect();
        assert!(managers.iter().any(|m| m.contains("gpu-pools")), "{managers:?}");
        assert!(!managers.iter().any(|m| m.contains("cpu-pools")), "{managers:?}");

        // New settings: a live swap; every primary is requeued.
        let generation = plugin_named(&env, "gpu-pools").unwrap()["metadata"]["generation"].clone();
        apply_object(
            env.main(),
            nodepool_instance(&paths, &module, "gpu-pools", json!({"poolSelector": "tier=gpu", "defaultHandler": "runsc"}))?,
        )?;
        env.wait_for("the new default handler", WAIT, |env| {
            (handler(env, "gpu")?.as_str() == "runsc").then_some(())
        })
        .await?;
        assert_ne!(plugin_named(&env, "gpu-pools").unwrap()["metadata"]["generation"], generation);

        // Invalid settings: refused with the plugin's own message, the
        // serving version (with runsc) keeps serving.
        apply_object(
            env.main(),
            nodepool_instance(&paths, &module, "gpu-pools", json!({"poolSelector": "tier=gpu", "defaultHandler": "Not A Label"}))?,
        )?;
        let (obj, message) = env
            .wait_for("gpu-pools degraded by its settings", WAIT, |env| {
                let obj = plugin_named(env, "gpu-pools")?;
                let (status, reason, message) = condition(&obj, "Degraded")?;
                (status == "True" && reason == "InvalidSettings").then_some((obj, message))
            })
            .await?;
        assert!(message.contains("is not a DNS label"), "{message}");
        assert_eq!(condition(&obj, "Ready").unwrap().0, "True");
        apply_object(
            env.main(),
            json!({"apiVersion": "nodes.lailin.xyz/v1", "kind": "NodePool",
                   "metadata": {"name": "gpu2", "labels": {"tier": "gpu"}}, "spec": {}}),
        )?;
        env.wait_for("the serving settings still apply to new pools", WAIT, |env| {
            (handler(env, "gpu2")?.as_str() == "runsc").then_some(())
        })
        .await?;
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

/// `rekon run --plugin-objects --leader-elect` as replica `name`, with its
/// own cache and short lease timings (lease 4 s, retry 0.5 s).
fn replica(name: &str, cache: &std::path::Path) -> EnvOptions {
    let mut opts = options(cache);
    opts.extra_args.extend(
        [
            "--leader-elect",
            "--lease-namespace",
            "default",
            "--lease-duration",
            "4s",
            "--renew-deadline",
            "3s",
            "--retry-period",
            "500ms",
        ]
        .map(str::to_owned),
    );
    opts.replica = Some(name.to_owned());
    opts
}

/// The identities of the reports in the Lease `rekon-reports`.
fn report_identities(env: &Env) -> Vec<String> {
    get(
        env.main(),
        "coordination.k8s.io/v1",
        "leases",
        Some("default"),
        "rekon-reports",
    )
    .and_then(|l| l["metadata"]["annotations"].as_object().cloned())
    .unwrap_or_default()
    .iter()
    .filter(|(k, _)| k.starts_with("rekon.dev/report-"))
    .filter_map(|(_, v)| serde_json::from_str::<Value>(v.as_str()?).ok())
    .filter_map(|v| v["identity"].as_str().map(str::to_owned))
    .collect()
}

/// What `status.replicas` says `prefix`'s replica serves.
fn replica_digest(obj: &Value, prefix: &str) -> Option<String> {
    obj["status"]["replicas"].as_array()?.iter().find(|r| {
        r["identity"]
            .as_str()
            .is_some_and(|i| i.starts_with(prefix))
    })?["digest"]
        .as_str()
        .map(str::to_owned)
}

/// Waits for `Consistent` to be `status` with `reason`, the Plugin serving
/// `digest` (on the status writer) and `replicas` live replicas listed.
async fn wait_consistent(
    env: &mut Env,
    status: &str,
    reason: &str,
    digest: &str,
    replicas: usize,
) -> anyhow::Result<Value> {
    let what = format!("Consistent={status} ({reason}) at {digest} over {replicas} replicas");
    let last = std::cell::RefCell::new(Value::Null);
    env.wait_for(&what, WAIT, |env| {
        let obj = plugin(env)?;
        *last.borrow_mut() = obj.clone();
        let (s, why, _) = condition(&obj, "Consistent")?;
        (s == status
            && why == reason
            && obj["status"]["digest"] == digest
            && obj["status"]["replicas"].as_array().map(Vec::len) == Some(replicas))
        .then_some(obj)
    })
    .await
    .with_context(|| format!("the Plugin was last:\n{:#}", last.borrow()))
}

/// Two replicas converge on one digest and `Consistent` says so; one that
/// cannot fetch the next version (its reads of the pull Secret fail on the
/// API server, for it alone) keeps serving the old one, and `Consistent`
/// names it and why; once it can, it catches up and `Consistent` is true
/// again. The leader writes the status; the follower only reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_converge_and_a_lagging_one_is_named() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let paths = Paths::discover()?;
        let registry = Registry::start()?;
        let v1 = format!("{}/rekon/chaos:1", registry.host());
        let v2 = format!("{}/rekon/chaos:2", registry.host());
        let d1 = push(&paths, "chaos-v1.wasm", &v1)?;
        let d2 = push(&paths, "chaos-v2.wasm", &v2)?;
        let (cache_a, cache_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
        let mut env = Env::start(replica("replica-a", cache_a.path())).await?;
        wait_plugin_crd(&mut env, WAIT).await?;
        env.wait_for("replica-a leads", WAIT, |env| {
            get(
                env.main(),
                "coordination.k8s.io/v1",
                "leases",
                Some("default"),
                "rekon",
            )?["spec"]["holderIdentity"]
                .as_str()
                .filter(|h| h.starts_with("replica-a_"))
                .map(|_| ())
        })
        .await?;
        let mut b = env.spawn_replica(&replica("replica-b", cache_b.path()))?;

        apply_object(env.main(), manifest(&paths, "chaos-v1.wasm", &v1)?)?;
        let obj = wait_consistent(&mut env, "True", "AllReplicasServing", &d1, 2).await?;
        assert_eq!(replica_digest(&obj, "replica-a_").as_deref(), Some(&*d1));
        assert_eq!(replica_digest(&obj, "replica-b_").as_deref(), Some(&*d1));

        // v2 comes with a pull Secret; replica-b may not read it (403 from
        // the API server for its requests alone; 5xx would be retried by
        // the client itself).
        let mut auths = serde_json::Map::new();
        auths.insert(registry.host(), json!({"username": "u", "password": "p"}));
        let docker_config = json!({ "auths": auths });
        apply_object(
            env.main(),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                   "metadata": {"name": "pull", "namespace": "default"},
                   "stringData": {".dockerconfigjson": docker_config.to_string()}}),
        )?;
        env.main().fail_next(
            kube_sim::faults::FaultRule::new(403, u32::MAX)
                .path("/secrets/pull")
                .user_agent("(replica-b_"),
        );
        let mut edited = manifest(&paths, "chaos-v2.wasm", &v2)?;
        edited["spec"]["pullSecret"] = json!("pull");
        apply_object(env.main(), edited)?;
        wait_consistent(&mut env, "False", "ReplicasLag", &d2, 2).await?;
        let (obj, message) = env
            .wait_for("Consistent to say why replica-b lags", WAIT, |env| {
                let obj = plugin(env)?;
                let (_, _, message) = condition(&obj, "Consistent")?;
                message
                    .contains("PullSecretUnavailable")
                    .then_some((obj, message))
            })
            .await
            .with_context(|| {
                format!(
                    "replica-b's log:\n{}",
                    std::fs::read_to_string(b.log_path())
                        .unwrap_or_default()
                        .lines()
                        .filter(|l| !l.contains("rekon::lease::elector"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            })?;
        assert!(
            message.contains("1 of 2 live replicas")
                && message.contains("replica-b_")
                && !message.contains("replica-a_")
                && message.contains("PullSecretUnavailable")
                && message.contains(&d1),
            "{message}"
        );
        // It keeps serving v1 and says so; the leader serves v2.
        assert_eq!(replica_digest(&obj, "replica-b_").as_deref(), Some(&*d1));
        assert_eq!(replica_digest(&obj, "replica-a_").as_deref(), Some(&*d2));
        assert!(b.is_running());

        // The fault lifts: replica-b's next retry catches up.
        env.main().clear_faults();
        let obj = wait_consistent(&mut env, "True", "AllReplicasServing", &d2, 2).await?;
        assert_eq!(replica_digest(&obj, "replica-b_").as_deref(), Some(&*d2));

        // A replica that dies (SIGKILL: nothing removes its report) stops
        // counting once its report has not changed for its lease duration,
        // and its report is removed after three.
        b.stop();
        wait_consistent(&mut env, "True", "AllReplicasServing", &d2, 1).await?;
        env.wait_for("the dead replica's report removed", WAIT, |env| {
            (report_identities(env).len() == 1).then_some(())
        })
        .await?;
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

/// Writes to ConfigMaps `rekon` sent to kube-sim since `since`.
fn config_map_writes(env: &Env, since: std::time::SystemTime) -> Vec<String> {
    env.main()
        .faults()
        .request_log()
        .into_iter()
        .filter(|r| r.at >= since && r.path.contains("/configmaps"))
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .map(|r| format!("{} {}", r.verb, r.path))
        .collect()
}

/// `spec.suspend` stops reconciling without unloading: the version stays
/// loaded (same digest, no reload), events keep arriving and are kept,
/// nothing is written; resuming reconciles what queued up, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_plugin_keeps_its_queue_writes_nothing_and_catches_up() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let Setup {
            paths,
            registry: _registry,
            v1,
            d1,
            cache: _cache,
            mut env,
            ..
        } = setup().await?;
        let mut obj = manifest(&paths, "chaos-v1.wasm", &v1)?;
        apply_object(env.main(), obj.clone())?;
        wait_serving(&mut env, &d1).await?;
        let before: Vec<String> = (0..5).map(|i| format!("before-{i}")).collect();
        for name in &before {
            config_map(&env, name)?;
        }
        wait_annotated(&mut env, &before, "v1").await?;

        obj["spec"]["suspend"] = json!(true);
        apply_object(env.main(), obj.clone())?;
        let suspended = env
            .wait_for("Ready=False (Suspended)", WAIT, |env| {
                let obj = plugin(env)?;
                let (s, why, _) = condition(&obj, "Ready")?;
                (s == "False" && why == "Suspended").then_some(obj)
            })
            .await?;
        let (_, _, message) = condition(&suspended, "Ready").expect("Ready");
        assert!(message.contains("stays loaded"), "{message}");
        assert_eq!(suspended["status"]["digest"], json!(d1));
        let since = std::time::SystemTime::now();
        // Events while suspended: new objects, and one object changed
        // three times (one queued key).
        let during: Vec<String> = (0..10).map(|i| format!("during-{i}")).collect();
        for name in &during {
            config_map(&env, name)?;
        }
        for round in 0..3 {
            apply_object(
                env.main(),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "before-0", "namespace": "default",
                                    "labels": {"round": round.to_string()}},
                       "data": {"mode": "ok"}}),
            )?;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(config_map_writes(&env, since), Vec::<String>::new());
        for name in &during {
            assert_eq!(
                annotation(&env, name),
                None,
                "{name} reconciled while suspended"
            );
        }
        let log = env.rekon.log_tail(400);
        assert!(
            log.contains("controller suspended") && !log.contains("controller stopped"),
            "the plugin must stay loaded:\n{log}"
        );

        obj["spec"]["suspend"] = json!(false);
        apply_object(env.main(), obj)?;
        wait_serving(&mut env, &d1).await?;
        wait_annotated(&mut env, &during, "v1").await?;
        let log = env.rekon.log_tail(400);
        assert!(log.contains("controller resumed"), "{log}");
        assert!(
            !log.contains("plugin replaced"),
            "resuming reloads nothing:\n{log}"
        );
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}

/// With `--shards`, every replica reports what it serves and the shards it
/// holds; the holder of shard 0 writes the status, and `Consistent` covers
/// every live replica, hence every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replicas_report_their_shards_and_converge() -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(300), async {
        let paths = Paths::discover()?;
        let registry = Registry::start()?;
        let v1 = format!("{}/rekon/chaos:1", registry.host());
        let d1 = push(&paths, "chaos-v1.wasm", &v1)?;
        let (cache_a, cache_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
        let sharded = |name: &str, cache: &std::path::Path| {
            let mut opts = replica(name, cache);
            let at = opts
                .extra_args
                .iter()
                .position(|a| a == "--leader-elect")
                .expect("--leader-elect");
            opts.extra_args[at] = "--shards".to_owned();
            opts.extra_args.insert(at + 1, "4".to_owned());
            opts
        };
        let mut env = Env::start(sharded("replica-a", cache_a.path())).await?;
        wait_plugin_crd(&mut env, WAIT).await?;
        let b = env.spawn_replica(&sharded("replica-b", cache_b.path()))?;
        apply_object(env.main(), manifest(&paths, "chaos-v1.wasm", &v1)?)?;
        let obj = env
            .wait_for(
                "both replicas to hold two shards each and serve v1",
                WAIT,
                |env| {
                    let obj = plugin(env)?;
                    let (s, _, _) = condition(&obj, "Consistent")?;
                    let replicas = obj["status"]["replicas"].as_array()?.clone();
                    let mut shards: Vec<u64> = replicas
                        .iter()
                        .flat_map(|r| r["shards"].as_array().cloned().unwrap_or_default())
                        .filter_map(|s| s.as_u64())
                        .collect();
                    shards.sort_unstable();
                    (s == "True"
                        && replicas.len() == 2
                        && shards == [0, 1, 2, 3]
                        && replicas
                            .iter()
                            .all(|r| r["shards"].as_array().map(Vec::len) == Some(2)))
                    .then_some(obj)
                },
            )
            .await?;
        assert_eq!(obj["status"]["digest"], json!(d1));
        assert_eq!(replica_digest(&obj, "replica-a_").as_deref(), Some(&*d1));
        assert_eq!(replica_digest(&obj, "replica-b_").as_deref(), Some(&*d1));
        // Every shard reconciles with v1.
        let names: Vec<String> = (0..8).map(|i| format!("sharded-{i}")).collect();
        for name in &names {
            config_map(&env, name)?;
        }
        wait_annotated(&mut env, &names, "v1").await?;

        // A replica that shuts down (SIGTERM) removes its report at once:
        // within the lease duration, it no longer counts.
        let stopped = std::time::Instant::now();
        let term = Command::new("kill")
            .args(["-TERM", &b.pid().to_string()])
            .status()?;
        assert!(term.success());
        env.wait_for("replica-b's report removed", WAIT, |env| {
            let ids = report_identities(env);
            (ids.len() == 1 && ids[0].starts_with("replica-a_")).then_some(())
        })
        .await?;
        assert!(
            stopped.elapsed() < Duration::from_secs(4),
            "removed on shutdown, not expired: {:?}",
            stopped.elapsed()
        );
        let obj = wait_consistent(&mut env, "True", "AllReplicasServing", &d1, 1).await?;
        assert_eq!(
            obj["status"]["replicas"][0]["shards"],
            json!([0, 1, 2, 3]),
            "the remaining replica took every shard"
        );
        anyhow::Ok(())
    })
    .await
    .context("timed out (likely deadlocked)")?
}
