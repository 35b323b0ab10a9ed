//! What an operator looks at: the alerts (`deploy/monitoring/rules/`), the
//! PrometheusRule and the Grafana dashboard, checked with `promtool` and
//! against a real Prometheus scraping a running host.
//!
//! - `promtool check rules` and `promtool test rules` (series that fire
//!   each alert, series that must not); every alert has both kinds of
//!   evaluation and a runbook section in deploy/README.md.
//! - The PrometheusRule holds exactly the rules file's groups
//!   (`REKON_REGENERATE=1 cargo test -p rekon-e2e --test monitoring`
//!   rewrites it), the dashboard ConfigMap exactly the dashboard's JSON
//!   (`kubectl kustomize deploy/monitored`).
//! - A running host on kube-sim (the seed plugins at work, leader election
//!   and recording on, a shadow version of nodepool, metrics secured as
//!   deploy/base runs them: HTTPS, each scrape's token reviewed), scraped
//!   every second by Debian's `prometheus` with a ServiceAccount token
//!   bound to the shipped `rekon-metrics-reader` ClusterRole (a token
//!   without it gets 403, none 401), with the rules loaded (a copy whose `for:` durations are
//!   cut to 2 s, so nothing waits minutes; the windows are unchanged): a
//!   plugin file that fails to load fires `RekonPluginLoadFailed`, `sub`
//!   stalled with kube-sim's fault API fires `RekonClusterUnreachable`
//!   (for `sub` only), and it resolves when `sub` answers again.
//!   `promtool check metrics` passes on the host's `/metrics` (converted
//!   from OpenMetrics to the text format promtool reads); every metric
//!   an alert or a dashboard panel reads is declared there with the type
//!   the query expects (except [`KNOWN_GAPS`], which must still be absent);
//!   every panel's queries run, and return data unless the run does not
//!   exercise them. `REKON_DASHBOARD_SNAPSHOT=FILE` also writes each
//!   panel's series over the run as JSON, which
//!   `deploy/monitoring/grafana/render.py` turns into the README's picture.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rekon_e2e::prometheus::{Prometheus, family_of, metric_names, openmetrics_to_text, promtool};
use rekon_e2e::{
    Env, EnvOptions, Paths, apply_manifests, create_test, https_get, with_custom_section,
};
use serde_json::{Value, json};

const TEST_TIMEOUT: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(40);

/// Metrics the alerts or the dashboard read that the host does not export
/// yet, and why. The test fails when one of them appears (then remove it
/// here) and for any other metric that is missing.
const KNOWN_GAPS: &[(&str, &str)] = &[];

/// Dashboard panels whose series this run may not produce (reconcile
/// errors happen only by chance, no OCI fetch): their queries must run,
/// but may be empty.
const PANELS_WITHOUT_DATA_HERE: &[&str] = &["Reconcile errors per second", "Plugin fetches"];

/// Series that appear only at their first event, which this run does not
/// cause, or not reliably (the exposition has no `# TYPE` for a family
/// without series): a terminal error, a trap or timeout in the sandbox, an
/// outcome refused at a bound, a full shadow queue, a recording dropped, a fetch from an OCI registry
/// (this run has no Plugin objects), a watch failing for RBAC or a
/// missing CRD (here only when a watch starts before `--install-crds` has
/// installed its CRD). When such a family is absent, its registration in
/// `host/src/telemetry/metrics/` is checked instead.
const ONLY_AFTER_A_RARE_EVENT: &[&str] = &[
    "controller_runtime_terminal_reconcile_errors_total",
    "rekon_wasm_call_failures_total",
    "rekon_plugin_contained_total",
    "rekon_shadow_dropped_total",
    "rekon_record_dropped_total",
    "rekon_plugin_fetch_total",
    "rekon_watch_failed",
    // Admission webhooks: this run serves none (tests/e2e/tests/admission*.rs do).
    "controller_runtime_webhook_requests_total",
    "controller_runtime_webhook_latency_seconds_bucket",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root is two levels above tests/e2e")
        .to_path_buf()
}

fn rules_dir() -> PathBuf {
    root().join("deploy/monitoring/rules")
}

fn yaml(path: &Path) -> anyhow::Result<serde_yaml::Value> {
    let text =
        fs::read_to_string(path).with_context(|| format!("failed to read {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("failed to parse {}", path.display()))
}

/// Every rule of the rules file: (alert name, expression, the whole rule).
fn alert_rules() -> anyhow::Result<Vec<(String, String, serde_yaml::Value)>> {
    let rules = yaml(&rules_dir().join("rekon.rules.yaml"))?;
    let mut out = Vec::new();
    for group in rules["groups"].as_sequence().context("no groups")? {
        for rule in group["rules"]
            .as_sequence()
            .context("a group without rules")?
        {
            let name = rule["alert"]
                .as_str()
                .context("a rule without an alert name")?;
            let expr = rule["expr"].as_str().context("a rule without expr")?;
            out.push((name.to_owned(), expr.to_owned(), rule.clone()));
        }
    }
    Ok(out)
}

fn dashboard() -> anyhow::Result<Value> {
    let path = root().join("deploy/monitoring/grafana/rekon-dashboard.json");
    let text = fs::read_to_string(&path)?;
    serde_json::from_str(&text).with_context(|| format!("failed to parse {}", path.display()))
}

/// Each panel with queries: (title, [(legend, expression)]).
fn panels(dashboard: &Value) -> Vec<(String, Vec<(String, String)>)> {
    dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] != "row")
        .map(|p| {
            let targets = p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    (
                        t["legendFormat"].as_str().unwrap_or_default().to_owned(),
                        t["expr"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            (p["title"].as_str().unwrap_or_default().to_owned(), targets)
        })
        .collect()
}

/// A panel's query as Prometheus runs it: every plugin and cluster, a
/// rate window covering several 1 s scrapes.
fn concrete(expr: &str) -> String {
    expr.replace("$plugin", ".*")
        .replace("$cluster", ".*")
        .replace("$__rate_interval", "10s")
}

#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() -> anyhow::Result<()> {
    let dir = rules_dir();
    let checked = promtool(&["check", "rules", "rekon.rules.yaml"], &dir, None)?;
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "rekon.rules.test.yaml"], &dir, None)?;
    assert!(tested.contains("SUCCESS"), "{tested}");

    // Every alert is evaluated at least once where it must fire and once
    // where it must not.
    let tests = yaml(&dir.join("rekon.rules.test.yaml"))?;
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for test in tests["tests"].as_sequence().context("no tests")? {
        for eval in test["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = eval["alertname"].as_str().unwrap_or_default().to_owned();
            let expected = eval["exp_alerts"].as_sequence().map_or(0, Vec::len);
            if expected > 0 {
                fires.insert(name);
            } else {
                quiet.insert(name);
            }
        }
    }
    for (name, _, _) in alert_rules()? {
        assert!(fires.contains(&name), "no rule test where {name} fires");
        assert!(
            quiet.contains(&name),
            "no rule test where {name} stays quiet"
        );
    }
    Ok(())
}

#[test]
fn every_alert_names_its_object_and_has_a_runbook_section() -> anyhow::Result<()> {
    let readme = fs::read_to_string(root().join("deploy/README.md"))?;
    let rules = alert_rules()?;
    assert!(rules.len() >= 15, "only {} alerts", rules.len());
    for (name, _, rule) in rules {
        let annotations = &rule["annotations"];
        for key in ["summary", "description", "runbook_url"] {
            assert!(
                annotations[key].as_str().is_some_and(|s| !s.is_empty()),
                "{name} has no {key}"
            );
        }
        assert!(
            annotations["description"]
                .as_str()
                .is_some_and(|d| d.contains("{{ $labels.")),
            "{name}'s description names no object (no label in it)"
        );
        assert!(
            rule["labels"]["severity"].as_str().is_some(),
            "{name} has no severity"
        );
        let url = format!(
            "https://github.com/rekon-dev/rekon/blob/main/deploy/README.md#{}",
            name.to_lowercase()
        );
        assert_eq!(
            annotations["runbook_url"].as_str(),
            Some(url.as_str()),
            "{name}"
        );
        assert!(
            readme.contains(&format!("\n### {name}\n")),
            "deploy/README.md has no runbook section `### {name}`"
        );
    }
    Ok(())
}

#[test]
fn prometheus_rule_and_dashboard_config_map_match_their_sources() -> anyhow::Result<()> {
    let rules = yaml(&rules_dir().join("rekon.rules.yaml"))?;
    let path = root().join("deploy/monitoring/prometheus-operator/prometheusrule.yaml");
    let expected = serde_yaml::to_string(&json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "rekon", "labels": {"app.kubernetes.io/name": "rekon"}},
        "spec": {"groups": rules["groups"]},
    }))?;
    let expected = format!(
        "# Generated from ../rules/rekon.rules.yaml (edit that file, then run\n\
         # `REKON_REGENERATE=1 cargo test -p rekon-e2e --test monitoring`).\n{expected}"
    );
    if std::env::var_os("REKON_REGENERATE").is_some() {
        fs::write(&path, &expected)?;
    }
    let actual = fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "{} differs from ../rules/rekon.rules.yaml: run `REKON_REGENERATE=1 cargo test -p rekon-e2e --test monitoring`",
        path.display()
    );

    // The overlay renders, with the rule and the dashboard ConfigMap.
    let out = std::process::Command::new("kubectl")
        .args(["kustomize"])
        .arg(root().join("deploy/monitored"))
        .output()
        .context("failed to run kubectl (needed for `kubectl kustomize`)")?;
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/monitored failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<serde_yaml::Value> =
        serde_yaml::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
            .map(serde::Deserialize::deserialize)
            .collect::<Result<_, _>>()?;
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .with_context(|| format!("deploy/monitored renders no {kind}"))
    };
    let rule = find("PrometheusRule")?;
    assert_eq!(rule["metadata"]["namespace"], "rekon-system");
    assert_eq!(rule["spec"]["groups"], rules["groups"]);
    let monitor = find("ServiceMonitor")?;
    let service = find("Service")?;
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"], service["spec"]["ports"][0]["name"],
        "the ServiceMonitor scrapes the metrics Service's port"
    );
    let config_map = find("ConfigMap")?;
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    let embedded: Value = serde_json::from_str(
        config_map["data"]["rekon-dashboard.json"]
            .as_str()
            .context("the ConfigMap holds no rekon-dashboard.json")?,
    )?;
    let dashboard = dashboard()?;
    assert_eq!(embedded, dashboard);

    // A dashboard Grafana 10/11 imports: uid, schema, a Prometheus data
    // source variable every query uses, unique panel ids, no empty query.
    assert_eq!(dashboard["uid"], "rekon-overview");
    assert!(dashboard["schemaVersion"].as_u64() >= Some(36));
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().context("no panels")? {
        assert!(
            ids.insert(panel["id"].as_u64()),
            "panel id repeated: {panel}"
        );
        for target in panel["targets"].as_array().into_iter().flatten() {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{panel}");
            assert!(!target["expr"].as_str().unwrap_or_default().is_empty());
        }
    }
    Ok(())
}

/// The rules with every `for:` cut to 2 s (windows unchanged), so the test
/// sees alerts fire in seconds instead of minutes.
fn rules_with_short_for(dir: &Path) -> anyhow::Result<PathBuf> {
    let mut rules = yaml(&rules_dir().join("rekon.rules.yaml"))?;
    for group in rules["groups"].as_sequence_mut().context("no groups")? {
        for rule in group["rules"].as_sequence_mut().context("no rules")? {
            if let Some(map) = rule.as_mapping_mut()
                && map.contains_key("for")
            {
                map.insert("for".into(), "2s".into());
            }
        }
    }
    let path = dir.join("rekon.rules.short-for.yaml");
    fs::write(&path, serde_yaml::to_string(&rules)?)?;
    Ok(path)
}

async fn until<T>(
    what: &str,
    env: &Env,
    prom: &Prometheus,
    mut probe: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = probe()? {
            return Ok(v);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}\n--- alerts ---\n{:#}\n--- prometheus ---\n{}\n--- rekon ---\n{}",
            Value::Array(prom.alerts().unwrap_or_default()),
            prom.log_tail(),
            env.rekon.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until `alert` for the object `label` names is firing; how long it took.
async fn until_firing(
    env: &Env,
    prom: &Prometheus,
    alert: &str,
    label: (&str, &str),
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let what = format!("{alert} for {}={} to fire", label.0, label.1);
    until(&what, env, prom, || {
        let state = prom.alert_state(alert, &[label])?;
        Ok((state.as_deref() == Some("firing")).then_some(()))
    })
    .await?;
    Ok(started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_fire_on_a_running_host_and_every_metric_they_read_exists() {
    tokio::time::timeout(TEST_TIMEOUT, run())
        .await
        .expect("test timed out: likely deadlocked")
        .unwrap();
}

async fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let paths = Paths::discover()?;
    let broken = paths.test_plugins.join("chaos-broken-register.wasm");
    anyhow::ensure!(
        broken.is_file(),
        "{} is missing: run `make test-plugins` first",
        broken.display()
    );
    let work = tempfile::Builder::new()
        .prefix("rekon-monitoring-")
        .tempdir()?;
    let record = work.path().join("cases");
    let opts = EnvOptions {
        serve_ops: true,
        secure_metrics: true,
        log_filter: "info".into(),
        // Leader election and recording on, so their series exist; every
        // primary reconciled (and shadowed) every 2 s.
        extra_args: [
            "--probe-interval",
            "1",
            "--resync-period",
            "2",
            "--leader-elect",
            "--lease-namespace",
            "default",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain([
            "--record".to_owned(),
            record.display().to_string(),
            // Compiled plugins kept across runs (keyed by digest): the
            // debug host compiles a plugin in 5 to 10 s on a busy machine.
            "--cache-dir".to_owned(),
            std::env::temp_dir()
                .join("rekon-e2e-monitoring-compiled")
                .display()
                .to_string(),
        ])
        .collect(),
        ..EnvOptions::default()
    };
    let mut env = Env::start(opts).await?;
    env.wait_for_crds(WAIT).await?;
    let ops = env.ops_addr.context("ops served")?;
    // A shadow version of nodepool: the same build plus a custom section,
    // so identical answers from a different digest (the host ignores a
    // shadow with the serving version's digest).
    let shadow = with_custom_section(
        &fs::read(paths.plugins.join("nodepool.wasm"))?,
        "rekon-e2e-shadow",
        b"",
    );
    let staged = work.path().join("nodepool.shadow.wasm");
    fs::write(&staged, shadow)?;
    copy_atomically(&staged, &env.plugin_dir.join("nodepool.shadow.wasm"))?;
    let ca = env.metrics_ca.clone().context("metrics secured")?;
    let reader = service_account_token(&env, "prometheus", true)?;
    let stranger = service_account_token(&env, "stranger", false)?;
    let prom = Prometheus::start_with(
        &rules_with_short_for(work.path())?,
        ops,
        Some((&ca, &reader)),
    )
    .await?;
    let scraping = Instant::now();

    // Some work for the panels: a Test fanned out, the NodePool samples.
    create_test(env.main(), "default", "hello").map_err(|e| anyhow::anyhow!("{e:#}"))?;
    for file in ["nodes.yaml", "nodepools.yaml"] {
        apply_manifests(env.main(), &fs::read_to_string(paths.samples.join(file))?)?;
    }
    until("prometheus to scrape rekon", &env, &prom, || {
        Ok(prom.query(r#"up{job="rekon"} == 1"#)?.first().map(|_| ()))
    })
    .await?;
    until("a shadow reconcile of nodepool", &env, &prom, || {
        Ok(prom
            .query(r#"rekon_shadow_reconciles_total{plugin="nodepool",kind="identical"}"#)?
            .first()
            .map(|_| ()))
    })
    .await?;

    // A plugin file that fails to load (its register() errors).
    copy_atomically(&broken, &env.plugin_dir.join("chaos-broken-register.wasm"))?;
    let load_failed_after = until_firing(
        &env,
        &prom,
        "RekonPluginLoadFailed",
        ("plugin", "chaos-broken-register"),
    )
    .await?;

    // sub stops answering.
    env.sub().stall();
    let unreachable_after =
        until_firing(&env, &prom, "RekonClusterUnreachable", ("cluster", "sub")).await?;
    assert_eq!(
        prom.alert_state("RekonClusterUnreachable", &[("cluster", "main")])?,
        None,
        "main answers: no alert for it"
    );

    // sub answers again: the alert resolves.
    env.sub().resume();
    let t = Instant::now();
    until(
        "RekonClusterUnreachable for sub to resolve",
        &env,
        &prom,
        || {
            Ok(prom
                .alert_state("RekonClusterUnreachable", &[("cluster", "sub")])?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    let resolved_after = t.elapsed();
    // Its watches restarted after the outage.
    until("sub's watch restarts counted", &env, &prom, || {
        Ok(prom
            .query(r#"rekon_watch_restarts_total{cluster="sub"}"#)?
            .first()
            .map(|_| ()))
    })
    .await?;

    // Strangers are refused: a token without the reader role, and none.
    let (status, body) = https_get(ops, "/metrics", &ca, Some(&stranger))?;
    assert_eq!(status, 403, "a token without rekon-metrics-reader: {body}");
    let (status, _) = https_get(ops, "/metrics", &ca, None)?;
    assert_eq!(status, 401, "no token");
    let (status, _) = https_get(ops, "/metrics", &ca, Some("forged"))?;
    assert_eq!(status, 401, "a token nobody issued");

    // The exposition passes promtool's linter, and declares every metric
    // the alerts and the dashboard read.
    let (status, exposition) = https_get(ops, "/metrics", &ca, Some(&reader))?;
    anyhow::ensure!(
        status == 200,
        "the reader's scrape answered {status}: {exposition}"
    );
    let exposition = exposition.as_str();
    let lint = promtool(
        &["check", "metrics"],
        work.path(),
        Some(&openmetrics_to_text(exposition)),
    )?;
    let declared: BTreeMap<&str, &str> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    let dashboard = dashboard()?;
    let panels = panels(&dashboard);
    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, expr, _) in alert_rules()? {
        for metric in metric_names(&expr) {
            used.entry(metric)
                .or_default()
                .push(format!("alert {name}"));
        }
    }
    for (title, targets) in &panels {
        for (_, expr) in targets {
            for metric in metric_names(expr) {
                used.entry(metric)
                    .or_default()
                    .push(format!("panel {title}"));
            }
        }
    }
    // Every family is registered in one of the files of host/src/telemetry/metrics/.
    let mut registry = String::new();
    for entry in fs::read_dir(root().join("host/src/telemetry/metrics"))? {
        registry += &fs::read_to_string(entry?.path())?;
    }
    anyhow::ensure!(
        registry.contains("Registry"),
        "host/src/telemetry/metrics/ holds no registry"
    );
    let mut problems = Vec::new();
    for (metric, users) in &used {
        let (family, kind) = family_of(metric);
        let gap = KNOWN_GAPS.iter().find(|(m, _)| m == metric);
        let rare = ONLY_AFTER_A_RARE_EVENT.contains(&metric.as_str());
        match (declared.get(family.as_str()), gap) {
            (Some(declared), None) if *declared == kind => {}
            (None, None) if rare => {
                if !registry.contains(&format!("\"{family}\",")) {
                    problems.push(format!(
                        "{metric} (read by {users:?}) is not registered in host/src/telemetry/metrics/"
                    ));
                }
            }
            (Some(declared), None) => problems.push(format!(
                "{metric} is read as a {kind} by {users:?} but the host declares {family} a {declared}"
            )),
            (None, None) => problems.push(format!(
                "{metric} (read by {users:?}) is not in the host's /metrics"
            )),
            (Some(_), Some(_)) => problems.push(format!(
                "{metric} is exported now: remove it from KNOWN_GAPS"
            )),
            (None, Some(_)) if registry.contains(&format!("\"{family}\",")) => {
                problems.push(format!(
                    "{metric} is registered in host/src/telemetry/metrics/ now: remove it from KNOWN_GAPS"
                ));
            }
            (None, Some(_)) => {}
        }
    }
    for (metric, why) in KNOWN_GAPS {
        assert!(
            used.contains_key(*metric),
            "KNOWN_GAPS lists {metric}, which nothing reads ({why})"
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // Every panel's queries run; those this run exercises return data
    // (after three more scrapes: rate() needs two samples of a new series).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut table = Vec::new();
    for (title, targets) in &panels {
        let mut series = 0;
        for (_, expr) in targets {
            series += prom
                .query(&concrete(expr))
                .with_context(|| format!("panel {title}: query {expr}"))?
                .len();
        }
        assert!(
            series > 0 || PANELS_WITHOUT_DATA_HERE.contains(&title.as_str()),
            "panel {title} shows nothing although this run produces its series: {targets:?}"
        );
        table.push(format!("{title:<36} {series:>3} series"));
    }
    if let Some(file) = std::env::var_os("REKON_DASHBOARD_SNAPSHOT") {
        // For the picture only: 20 s more of work (a Test every 2 s), so
        // the panels have a shape.
        for i in 0..10 {
            create_test(env.main(), "default", &format!("more-{i}"))?;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        write_snapshot(&prom, &panels, scraping.elapsed(), Path::new(&file))?;
    }

    // rekon stops: its target fails; it was the only replica, so rekon is
    // down.
    env.rekon.stop();
    let replica_down_after =
        until_firing(&env, &prom, "RekonReplicaDown", ("job", "rekon")).await?;
    let down_after = until_firing(&env, &prom, "RekonDown", ("job", "rekon")).await?;

    println!(
        "monitoring: RekonPluginLoadFailed firing {load_failed_after:?} after the broken file was dropped in; \
         RekonClusterUnreachable firing {unreachable_after:?} after sub stalled (for: cut to 2s), resolved \
         {resolved_after:?} after it resumed; RekonReplicaDown firing {replica_down_after:?} and RekonDown \
         {down_after:?} after rekon stopped; {} metrics read by {} alerts and {} panels checked ({} known gaps); \
         promtool check metrics: {}; whole test {:?}\n{}",
        used.len(),
        alert_rules()?.len(),
        panels.len(),
        KNOWN_GAPS.len(),
        if lint.trim().is_empty() {
            "clean"
        } else {
            lint.trim()
        },
        started.elapsed(),
        table.join("\n")
    );
    Ok(())
}

/// A token of ServiceAccount `default/name`, bound to the shipped
/// `rekon-metrics-reader` ClusterRole (deploy/base/rbac.yaml, as
/// `rekon rbac` generates it) when `reader`.
fn service_account_token(env: &Env, name: &str, reader: bool) -> anyhow::Result<String> {
    let main = env.main();
    main.create(
        "v1",
        "serviceaccounts",
        Some("default"),
        json!({"metadata": {"name": name}}),
    )?;
    if reader {
        let rbac = fs::read_to_string(root().join("deploy/base/rbac.yaml"))?;
        let role = serde_yaml::Deserializer::from_str(&rbac)
            .map(serde::Deserialize::deserialize)
            .collect::<Result<Vec<serde_yaml::Value>, _>>()?
            .into_iter()
            .find(|d| d["metadata"]["name"] == "rekon-metrics-reader")
            .context("deploy/base/rbac.yaml holds no rekon-metrics-reader ClusterRole")?;
        main.create(
            "rbac.authorization.k8s.io/v1",
            "clusterroles",
            None,
            serde_json::to_value(&role)?,
        )?;
        main.create(
            "rbac.authorization.k8s.io/v1",
            "clusterrolebindings",
            None,
            json!({"metadata": {"name": format!("{name}-metrics-reader")},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rekon-metrics-reader"},
                   "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]}),
        )?;
    }
    Ok(main.service_account_token("default", name, Duration::from_secs(3600))?)
}

/// Writes `to` aside and renames it into place, so the host's plugin
/// directory watcher never reads half a file.
fn copy_atomically(from: &Path, to: &Path) -> anyhow::Result<()> {
    let name = to.file_name().context("a file name")?.to_string_lossy();
    let tmp = to.with_file_name(format!(".{name}.tmp"));
    fs::copy(from, &tmp).with_context(|| format!("failed to copy {}", from.display()))?;
    fs::rename(&tmp, to)?;
    Ok(())
}

/// Each panel's series over the run (range queries, 1 s steps) as JSON for
/// `deploy/monitoring/grafana/render.py`.
fn write_snapshot(
    prom: &Prometheus,
    panels: &[(String, Vec<(String, String)>)],
    range: Duration,
    file: &Path,
) -> anyhow::Result<()> {
    let mut out = Vec::new();
    for (title, targets) in panels {
        let mut shown = Vec::new();
        for (legend, expr) in targets {
            let result = prom.query_range(&concrete(expr), range, Duration::from_secs(1))?;
            shown.push(json!({"legend": legend, "expr": expr, "result": result}));
        }
        out.push(json!({"title": title, "targets": shown}));
    }
    fs::write(file, serde_json::to_string_pretty(&json!({"panels": out}))?)?;
    println!("dashboard snapshot written to {}", file.display());
    Ok(())
}
