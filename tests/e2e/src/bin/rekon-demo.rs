//! `rekon-demo` (`make demo`): the seed plugins on two embedded kube-sim
//! clusters, narrated.
//!
//! Starts clusters `main` and `sub`, writes their kubeconfig, runs
//! `rekon run --install-crds` on them with `dist/plugins`, applies
//! `deploy/samples` (a Test, three Nodes, two NodePools, one node in both
//! pools), prints every change as it happens until both scenarios
//! converged, marks the Job in `sub` complete to show the Test finishing,
//! then shows a live swap through a Plugin object: it starts a local OCI
//! registry (Debian's `docker-registry`), pushes the chaos test plugin v1
//! with `rekon plugin push`, applies the Plugin `rekon plugin manifest`
//! prints, lets it annotate a few ConfigMaps, pushes v2, edits the Plugin
//! and shows the same rekon process serving v2 (no restart). Then the
//! TypeScript and Python ports (`dist/sdk-plugins`, `make sdk-plugins`)
//! are pushed with `--precompile --sign` and applied as Plugin objects that
//! verify the signature: the host maps their precompiled layers instead of
//! compiling (their `Ready` message says `its code was precompiled`). They
//! are suspended: the Rust seeds serve the same kinds. Without
//! `docker-registry` (which `make demo` installs) the demo fails saying
//! what is missing. Then it keeps running (printing changes) with the kubectl
//! commands to play with. `--exit-after-converge` (or `DEMO_EXIT_AFTER_CONVERGE=1`) exits 0
//! instead, for tests; `--keep` (or `DEMO_KEEP=1`) leaves the work directory
//! (kubeconfig, plugins, `rekon.log`) behind. It builds nothing: `make demo` does.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kube_sim::Sim;
use rekon_e2e::registry::Registry;
use rekon_e2e::{
    Env, EnvOptions, Paths, apply_manifests, apply_object, complete_job, mark_nodes_ready, view,
};
use serde_json::{Value, json};

const CONVERGE_TIMEOUT: Duration = Duration::from_secs(90);

/// What was printed last, by object key.
struct Narrator {
    start: Instant,
    shown: BTreeMap<String, String>,
}

impl Narrator {
    /// The key of a snapshot line: its words up to the first `k=v` one.
    fn key(line: &str) -> String {
        line.split_whitespace()
            .take_while(|w| !w.contains('='))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn say(&self, text: &str) {
        println!("[{:>5.1}s] {text}", self.start.elapsed().as_secs_f64());
    }

    /// Prints what changed since the last call.
    fn update(&mut self, env: &Env) {
        let now: BTreeMap<String, String> = view::snapshot(env.main(), env.sub())
            .into_iter()
            .map(|l| (Self::key(&l), l))
            .collect();
        for (k, line) in &now {
            match self.shown.get(k) {
                None => self.say(&format!("+ {line}")),
                Some(old) if old != line => self.say(&format!("~ {line}")),
                Some(_) => {}
            }
        }
        for (k, line) in &self.shown {
            if !now.contains_key(k) {
                self.say(&format!("- {line}"));
            }
        }
        self.shown = now;
    }

    /// Narrates until `done` holds.
    async fn until(
        &mut self,
        env: &mut Env,
        what: &str,
        done: impl Fn(&Env) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            self.update(env);
            if done(env) {
                self.say(&format!("✓ {what}"));
                return Ok(());
            }
            if !env.rekon.is_running() {
                anyhow::bail!("rekon exited; its log:\n{}", env.rekon.log_tail(40));
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "timed out waiting for: {what}; rekon log:\n{}",
                    env.rekon.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn jobs_everywhere(env: &Env) -> bool {
    [env.main(), env.sub()]
        .iter()
        .all(|c| c.get("batch/v1", "jobs", Some("default"), "hello").is_ok())
}

fn test_phase(env: &Env) -> Option<String> {
    let t = env
        .main()
        .get("job.lailin.xyz/v1", "tests", Some("default"), "hello")
        .ok()?;
    t.pointer("/status/phase")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn pools_converged(env: &Env) -> bool {
    let main = env.main();
    let ready = |pool: &str| {
        main.get("nodes.lailin.xyz/v1", "nodepools", None, pool)
            .ok()
            .and_then(|p| {
                p.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .cloned()
            })
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
    };
    let label = |node: &str, key: &str| {
        main.get("v1", "nodes", None, node)
            .ok()
            .and_then(|n| {
                n.pointer("/metadata/labels")
                    .and_then(|l| l.get(key))
                    .cloned()
            })
            .is_some()
    };
    ready("gpu")
        && ready("batch")
        && label("node-c", "node-pool.lailin.xyz/gpu")
        && label("node-c", "node-pool.lailin.xyz/batch")
        && main
            .get("node.k8s.io/v1", "runtimeclasses", None, "node-pool-gpu")
            .is_ok()
        && main
            .get("node.k8s.io/v1", "runtimeclasses", None, "node-pool-batch")
            .is_ok()
}

fn apply_samples(env: &Env, narrator: &Narrator) -> anyhow::Result<()> {
    for file in ["nodes.yaml", "nodepools.yaml", "test.yaml"] {
        let path = env.paths.samples.join(file);
        let path_text = path.display().to_string();
        // The way a person would: kubectl. kube-sim is faithful enough for
        // it; should kubectl be missing, apply in process instead.
        match env.kubectl("main", &["apply", "-f", &path_text]) {
            Ok(out) => narrator.say(&format!(
                "kubectl apply -f deploy/samples/{file}: {}",
                out.trim().replace('\n', "; ")
            )),
            Err(e) => {
                narrator.say(&format!("({e}; applying in process instead)"));
                let yaml = std::fs::read_to_string(&path)
                    .with_context(|| format!("failed to read {path_text}"))?;
                let applied = apply_manifests(env.main(), &yaml)?;
                narrator.say(&format!("applied {}", applied.join(", ")));
            }
        }
    }
    Ok(())
}

/// `rekon plugin manifest FILE --module REF`: the Plugin object it printed
/// (the component's declared permissions as the grant).
fn manifest(env: &Env, file: &std::path::Path, reference: &str) -> anyhow::Result<Value> {
    let out = std::process::Command::new(&env.paths.rekon)
        .args(["plugin", "manifest"])
        .arg(file)
        .args(["--module", reference])
        .output()
        .context("run rekon plugin manifest")?;
    anyhow::ensure!(
        out.status.success(),
        "rekon plugin manifest failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_yaml::from_slice(&out.stdout)?)
}

/// `rekon plugin push FILE REF`; the manifest digest it printed.
fn push(env: &Env, file: &std::path::Path, reference: &str) -> anyhow::Result<String> {
    push_with(env, file, reference, &[])
}

/// `rekon plugin push FILE REF EXTRA...`; the manifest digest it printed.
fn push_with(
    env: &Env,
    file: &std::path::Path,
    reference: &str,
    extra: &[&str],
) -> anyhow::Result<String> {
    let out = std::process::Command::new(&env.paths.rekon)
        .args(["plugin", "push"])
        .arg(file)
        .arg(reference)
        .args(extra)
        .output()
        .context("run rekon plugin push")?;
    anyhow::ensure!(
        out.status.success(),
        "rekon plugin push failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .map(str::to_owned)
        .with_context(|| format!("no digest in rekon plugin push's output: {stdout}"))
}

fn plugin_serves(env: &Env, digest: &str) -> bool {
    env.main()
        .get("rekon.dev/v1alpha1", "plugins", None, "chaos")
        .ok()
        .is_some_and(|p| {
            p["status"]["digest"] == digest
                && p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
}

fn annotated(env: &Env, names: &[&str], version: &str) -> bool {
    names.iter().all(|n| {
        env.main()
            .get("v1", "configmaps", Some("default"), n)
            .ok()
            .is_some_and(|c| c["metadata"]["annotations"]["chaos.rekon.dev/version"] == version)
    })
}

/// The live swap through a Plugin object: registry, push v1, Plugin,
/// converge, push v2, edit, swap. The registry, kept running while the
/// demo does.
async fn plugin_object_swap(env: &mut Env, narrator: &mut Narrator) -> anyhow::Result<Registry> {
    let v1_file = env.paths.test_plugins.join("chaos-v1.wasm");
    let v2_file = env.paths.test_plugins.join("chaos-v2.wasm");
    if !v1_file.is_file() || !v2_file.is_file() {
        anyhow::bail!(
            "the live swap through a Plugin object needs {} and {} (`make demo` builds them with `make chaos-plugins`)",
            v1_file.display(),
            v2_file.display()
        );
    }
    let registry = Registry::start().context(
        "the live swap through a Plugin object needs a local OCI registry: Debian's `docker-registry` \
         (`make demo` installs it; or point REKON_DOCKER_REGISTRY at its binary)",
    )?;
    let pid = env.rekon.pid();
    narrator.say(&format!(
        "— a plugin from a registry: docker-registry serves on {} (plain HTTP on loopback)",
        registry.host()
    ));
    let v1 = format!("{}/demo/chaos:1", registry.host());
    let v2 = format!("{}/demo/chaos:2", registry.host());
    let d1 = push(env, &v1_file, &v1)?;
    narrator.say(&format!("rekon plugin push chaos-v1.wasm {v1}: {d1}"));
    apply_object(env.main(), manifest(env, &v1_file, &v1)?)?;
    narrator.say("applied the Plugin chaos that `rekon plugin manifest chaos-v1.wasm --module …` printed (its declared permissions as the grant)");
    narrator
        .until(env, &format!("Plugin chaos: Ready, serving {d1}"), |env| {
            plugin_serves(env, &d1)
        })
        .await?;
    let names = ["demo-a", "demo-b", "demo-c"];
    for name in names {
        apply_object(
            env.main(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "default"}, "data": {"mode": "ok"}}),
        )?;
    }
    narrator
        .until(
            env,
            "chaos v1 annotated ConfigMaps demo-a, demo-b, demo-c (chaos.rekon.dev/version=v1)",
            |env| annotated(env, &names, "v1"),
        )
        .await?;
    let d2 = push(env, &v2_file, &v2)?;
    narrator.say(&format!("rekon plugin push chaos-v2.wasm {v2}: {d2}"));
    let edited = Instant::now();
    apply_object(
        env.main(),
        json!({"apiVersion": "rekon.dev/v1alpha1", "kind": "Plugin",
               "metadata": {"name": "chaos"}, "spec": {"module": v2}}),
    )?;
    narrator.say(&format!("edited the Plugin: spec.module = {v2}"));
    narrator
        .until(env, &format!("Plugin chaos: Ready, serving {d2}"), |env| {
            plugin_serves(env, &d2)
        })
        .await?;
    narrator
        .until(
            env,
            "chaos v2 re-annotated every ConfigMap (chaos.rekon.dev/version=v2)",
            |env| annotated(env, &names, "v2"),
        )
        .await?;
    anyhow::ensure!(
        env.rekon.is_running() && env.rekon.pid() == pid,
        "rekon restarted during the swap"
    );
    narrator.say(&format!(
        "✓ Plugin chaos swapped live from v1 to v2 in {} ms (edit to every ConfigMap re-annotated), same rekon process (pid {pid}), no restart",
        edited.elapsed().as_millis()
    ));
    if let Ok(out) = env.kubectl("main", &["get", "plugins", "-o", "wide"]) {
        for line in out.lines() {
            narrator.say(&format!("  {line}"));
        }
    }
    Ok(registry)
}

/// The `Ready` condition of Plugin `name`: reason and message.
fn ready(env: &Env, name: &str) -> Option<(String, String)> {
    let plugin = env
        .main()
        .get("rekon.dev/v1alpha1", "plugins", None, name)
        .ok()?;
    let ready = plugin["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    Some((
        ready["reason"].as_str()?.to_owned(),
        ready["message"].as_str()?.to_owned(),
    ))
}

/// The TypeScript and Python ports from precompiled artifacts: each pushed
/// with `--precompile --sign`, applied as a suspended Plugin object that
/// verifies the signature (the Rust seeds serve the same kinds), and loaded
/// by mapping its precompiled layer instead of compiling.
async fn ports_from_precompiled(
    env: &mut Env,
    narrator: &mut Narrator,
    registry: &Registry,
) -> anyhow::Result<()> {
    let sdk_plugins = env.paths.root.join("dist/sdk-plugins");
    let ports = [
        ("test-fanout-ts", "TypeScript", "test_fanout_ts.wasm"),
        ("nodepool-py", "Python", "nodepool_py.wasm"),
    ];
    for (_, _, file) in ports {
        anyhow::ensure!(
            sdk_plugins.join(file).is_file(),
            "the ports from precompiled artifacts need {} (`make demo` builds it with `make sdk-plugins`)",
            sdk_plugins.join(file).display()
        );
    }
    narrator.say(
        "— the TypeScript and Python ports from precompiled artifacts: pushed with --precompile --sign, verified, mapped instead of compiled",
    );
    let keys = tempfile::tempdir()?;
    let key = keys.path().join("demo");
    let out = std::process::Command::new(&env.paths.rekon)
        .args(["plugin", "keygen", "--out"])
        .arg(&key)
        .output()
        .context("run rekon plugin keygen")?;
    anyhow::ensure!(
        out.status.success(),
        "rekon plugin keygen failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let private = key.with_extension("key").display().to_string();
    let public = std::fs::read_to_string(key.with_extension("pub"))?;
    for (name, language, file) in ports {
        let file = sdk_plugins.join(file);
        let reference = format!("{}/demo/{name}:1", registry.host());
        let pushed = Instant::now();
        let digest = push_with(
            env,
            &file,
            &reference,
            &["--precompile", "--sign", &private],
        )?;
        narrator.say(&format!(
            "rekon plugin push --precompile --sign {} {reference}: {digest} ({} s: the push compiled it once)",
            file.file_name().unwrap_or_default().to_string_lossy(),
            pushed.elapsed().as_secs()
        ));
        let mut plugin = manifest(env, &file, &reference)?;
        plugin["metadata"]["name"] = json!(name);
        plugin["spec"]["suspend"] = json!(true);
        plugin["spec"]["verification"] = json!({"keys": [{"pem": public}]});
        apply_object(env.main(), plugin)?;
        narrator.say(&format!(
            "applied the Plugin {name} ({language} port; spec.verification with the public key, spec.suspend: the Rust seed serves its kind)"
        ));
        // Mapped, not compiled: from its precompiled layer, or from this
        // host's own cache when the very same component already serves here
        // (`make seed-scenarios-ports` runs the demo with the ports as the
        // seeds: their code was compiled at the host's start).
        let mapped = ["its code was precompiled in", "its code was cached in"];
        narrator
            .until(
                env,
                &format!("Plugin {name}: loaded without compiling"),
                |env| {
                    ready(env, name).is_some_and(|(reason, message)| {
                        reason == "Suspended" && mapped.iter().any(|m| message.contains(m))
                    })
                },
            )
            .await?;
        if let Some((_, message)) = ready(env, name) {
            // "… serves; its code was precompiled in N ms …".
            let how = message
                .split("; ")
                .find_map(|part| {
                    let at = mapped.iter().find_map(|m| part.find(m))?;
                    let ms = part[at..].find(" ms")?;
                    Some(&part[at..at + ms + 3])
                })
                .unwrap_or(&message);
            narrator.say(&format!("  {name}: {how}"));
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let exit_after_converge = std::env::args().any(|a| a == "--exit-after-converge")
        || std::env::var("DEMO_EXIT_AFTER_CONVERGE").is_ok_and(|v| !v.is_empty() && v != "0");
    let paths = Paths::discover()?;
    let sim = Sim::start(&["main", "sub"])
        .await
        .context("failed to start the kube-sim clusters")?;
    let work = tempfile::Builder::new().prefix("rekon-demo-").tempdir()?;
    let cache = work.path().join("cache");
    let opts = EnvOptions {
        log_filter: "info".into(),
        serve_ops: true,
        // Plugin objects beside the plugin directory (the live swap below).
        extra_args: vec![
            "--plugin-objects".to_owned(),
            "--cache-dir".to_owned(),
            cache.display().to_string(),
        ],
        ..EnvOptions::default()
    };
    let mut env = Env::start_in(paths, sim, work, opts)?;
    let keep = std::env::args().any(|a| a == "--keep")
        || std::env::var("DEMO_KEEP").is_ok_and(|v| !v.is_empty() && v != "0");
    if keep {
        env.keep_work_dir();
    }
    let mut narrator = Narrator {
        start: Instant::now(),
        shown: BTreeMap::new(),
    };
    let kubeconfig = env.kubeconfig.display().to_string();
    println!("rekon demo — two embedded kube-sim clusters, the seed plugins, narrated");
    println!(
        "  cluster main: {}   cluster sub: {}",
        env.main().url(),
        env.sub().url()
    );
    println!("  kubeconfig:   {kubeconfig}  (contexts main, sub)");
    println!(
        "  plugins:      {}  (drop a new build here: hot reload)",
        env.plugin_dir.display()
    );
    println!("  rekon log:    {}", env.rekon.log_path().display());
    if let Some(addr) = env.ops_addr {
        println!("  metrics:      http://{addr}/metrics   probes: http://{addr}/readyz");
    }
    println!(
        "  running:      rekon run --kubeconfig {kubeconfig} --context main --cluster sub=sub --plugins {} --install-crds --plugin-objects --cache-dir {}",
        env.plugin_dir.display(),
        cache.display()
    );
    println!();

    env.wait_for_crds(CONVERGE_TIMEOUT).await?;
    narrator.say(
        "rekon installed the CRDs tests.job.lailin.xyz, nodepools.nodes.lailin.xyz and plugins.rekon.dev in main",
    );
    apply_samples(&env, &narrator)?;
    mark_nodes_ready(env.main())?;
    narrator.say("nodes marked Ready (kube-sim runs no kubelet)");

    narrator
        .until(
            &mut env,
            "test-fanout: Job default/hello runs in main and sub",
            jobs_everywhere,
        )
        .await?;
    narrator
        .until(
            &mut env,
            "nodepool: both pools Ready, node-c in both, RuntimeClasses in place",
            pools_converged,
        )
        .await?;

    narrator.say("marking Job default/hello Complete in sub (kube-sim runs no job controller)");
    complete_job(env.sub(), "default", "hello")?;
    narrator
        .until(
            &mut env,
            "Test default/hello finished (its Job completed in sub)",
            |env| test_phase(env).as_deref() == Some("finished"),
        )
        .await?;

    // Stopped (dropped) when the demo ends.
    let registry = plugin_object_swap(&mut env, &mut narrator).await?;
    ports_from_precompiled(&mut env, &mut narrator, &registry).await?;

    println!();
    println!("Both scenarios converged. Try (while the demo runs):");
    let k = format!("kubectl --kubeconfig {kubeconfig}");
    println!("  {k} --context main get nodepools,tests -A");
    println!("  {k} --context main get nodes --show-labels");
    println!("  {k} --context sub get jobs -A");
    println!(
        "  {k} --context main patch nodepool gpu --type merge -p '{{\"spec\":{{\"labels\":{{\"accelerator\":\"h100\"}}}}}}'"
    );
    println!(
        "  {k} --context main label node node-a node-role.kubernetes.io/gpu-   # node-a leaves pool gpu"
    );
    println!("  {k} --context main delete nodepool batch");
    println!(
        "  {k} --context main apply -f - <<< '{{\"apiVersion\":\"job.lailin.xyz/v1\",\"kind\":\"Test\",\"metadata\":{{\"name\":\"again\",\"namespace\":\"default\"}},\"spec\":{{\"image\":\"busybox\"}}}}'"
    );
    println!(
        "  cp target/wasm32-wasip2/wasm/nodepool.wasm {}/   # hot reload a new build",
        env.plugin_dir.display()
    );
    println!("  {k} --context main get plugins -o wide");
    println!(
        "  {k} --context main patch plugin chaos --type merge -p '{{\"spec\":{{\"suspend\":true}}}}'   # stays loaded, reconciles nothing"
    );
    println!();

    if exit_after_converge {
        println!("exiting after convergence (--exit-after-converge)");
        return Ok(());
    }
    println!("Watching for changes; Ctrl-C to stop.");
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => break,
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                narrator.update(&env);
                if !env.rekon.is_running() {
                    anyhow::bail!("rekon exited; its log:\n{}", env.rekon.log_tail(40));
                }
            }
        }
    }
    println!("stopping");
    Ok(())
}
