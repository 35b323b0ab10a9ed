//! A real Prometheus for the monitoring tests: Debian's `prometheus` and
//! `promtool` (package `prometheus`; `.ci/run` installs it), a scrape of
//! rekon's `/metrics` every second, rules loaded, and the HTTP API read
//! back (`/api/v1/query`, `/api/v1/query_range`, `/api/v1/alerts`).
//!
//! Nothing here skips: a missing binary is an error naming the package.

use std::collections::BTreeSet;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::Value;

/// The path of `name` (`prometheus`, `promtool`) on `PATH`.
///
/// # Errors
/// When it is not installed, saying which package provides it.
pub fn tool(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "{name} is missing: install Debian's `prometheus` package (`apt-get install --no-install-recommends prometheus`; .ci/run does)"
            )
        })
}

/// Runs `promtool ARGS..` (stdin from `input` when given) and returns its
/// combined output.
///
/// # Errors
/// When promtool is missing or exits with a failure (its output is in the message).
pub fn promtool(args: &[&str], cwd: &Path, input: Option<&str>) -> anyhow::Result<String> {
    use std::io::Write as _;
    let mut child = Command::new(tool("promtool")?)
        .args(args)
        .current_dir(cwd)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("failed to start promtool")?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .context("failed to write promtool's input")?;
    }
    let out = child.wait_with_output().context("failed to run promtool")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("promtool {} failed:\n{text}", args.join(" "));
    }
    Ok(text)
}

/// A running Prometheus, killed when dropped.
#[derive(Debug)]
pub struct Prometheus {
    child: Child,
    /// Where its web UI and API listen.
    pub addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port with a temporary data
    /// directory, scraping `target`'s `/metrics` every second (job `rekon`)
    /// and evaluating `rules` every second; returns once it is ready.
    ///
    /// # Errors
    /// When Prometheus is missing, does not start, or is not ready in 30 s.
    pub async fn start(rules: &Path, target: SocketAddr) -> anyhow::Result<Self> {
        Self::start_with(rules, target, None).await
    }

    /// Like [`Prometheus::start`], scraping `target` over HTTPS with a
    /// bearer token (`token`, trusting `ca` for `localhost`) when `secure`
    /// is `Some((ca, token))`: how a ServiceMonitor scrapes secured metrics.
    ///
    /// # Errors
    /// As [`Prometheus::start`].
    pub async fn start_with(
        rules: &Path,
        target: SocketAddr,
        secure: Option<(&Path, &str)>,
    ) -> anyhow::Result<Self> {
        let bin = tool("prometheus")?;
        let dir = tempfile::Builder::new().prefix("rekon-prom-").tempdir()?;
        let config = dir.path().join("prometheus.yml");
        let scheme = match secure {
            Some((ca, token)) => {
                let token_file = dir.path().join("token");
                fs::write(&token_file, token)?;
                format!(
                    "  scheme: https\n  authorization:\n    credentials_file: {}\n  tls_config:\n    ca_file: {}\n    server_name: localhost\n",
                    token_file.display(),
                    ca.display()
                )
            }
            None => String::new(),
        };
        fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n- {}\n\
                 scrape_configs:\n- job_name: rekon\n{scheme}  static_configs:\n  - targets: ['{target}']\n",
                rules.display()
            ),
        )?;
        let addr = crate::free_local_addr()?;
        let log = dir.path().join("prometheus.log");
        let log_file = fs::File::create(&log)?;
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .context("failed to start prometheus")?;
        let mut prom = Self {
            child,
            addr,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if crate::http_get(addr, "/-/ready").is_ok_and(|r| r.starts_with("HTTP/1.0 200")) {
                return Ok(prom);
            }
            if let Ok(Some(status)) = prom.child.try_wait() {
                bail!("prometheus exited ({status}); log:\n{}", prom.log_tail());
            }
            if Instant::now() >= deadline {
                bail!("prometheus not ready after 30 s; log:\n{}", prom.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last 40 lines of Prometheus' log.
    #[must_use]
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `GET path` on the API; the `data` of a `success` answer.
    ///
    /// # Errors
    /// When the request fails or Prometheus answers with an error.
    pub fn api(&self, path: &str) -> anyhow::Result<Value> {
        let response = crate::http_get(self.addr, path)
            .with_context(|| format!("failed to GET {path} from prometheus"))?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .with_context(|| format!("prometheus answered {path} without a body"))?;
        let value: Value = serde_json::from_str(body)
            .with_context(|| format!("prometheus answered {path} with no JSON: {body}"))?;
        if value["status"] != "success" {
            bail!("prometheus refused {path}: {value}");
        }
        Ok(value["data"].clone())
    }

    /// An instant query; the result vector.
    ///
    /// # Errors
    /// When the expression is invalid or the request fails.
    pub fn query(&self, expr: &str) -> anyhow::Result<Vec<Value>> {
        let data = self.api(&format!("/api/v1/query?query={}", url_encode(expr)))?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// A range query over the last `range` with `step`; the result matrix.
    ///
    /// # Errors
    /// When the expression is invalid or the request fails.
    pub fn query_range(
        &self,
        expr: &str,
        range: Duration,
        step: Duration,
    ) -> anyhow::Result<Vec<Value>> {
        let end = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        let start = end - range.as_secs_f64();
        let data = self.api(&format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={}",
            url_encode(expr),
            step.as_secs_f64()
        ))?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// Every pending or firing alert.
    ///
    /// # Errors
    /// When the request fails.
    pub fn alerts(&self) -> anyhow::Result<Vec<Value>> {
        Ok(self.api("/api/v1/alerts")?["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The state (`pending`, `firing`) of alert `name` whose labels include
    /// every `labels` pair, if it is active.
    ///
    /// # Errors
    /// When the request fails.
    pub fn alert_state(
        &self,
        name: &str,
        labels: &[(&str, &str)],
    ) -> anyhow::Result<Option<String>> {
        Ok(self
            .alerts()?
            .iter()
            .find(|a| {
                a["labels"]["alertname"] == name
                    && labels.iter().all(|(k, v)| a["labels"][*k] == *v)
            })
            .and_then(|a| a["state"].as_str().map(str::to_owned)))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter (everything but unreserved characters).
#[must_use]
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The OpenMetrics exposition `rekon` serves, in the Prometheus text
/// format 0.0.4 that `promtool check metrics` reads (promtool 2.x parses
/// nothing else). Prometheus does the same when it ingests OpenMetrics: a
/// counter family `x` is named `x_total` (its samples already are); `# EOF`
/// and `# UNIT` do not exist in the text format.
#[must_use]
pub fn openmetrics_to_text(exposition: &str) -> String {
    let counters: BTreeSet<&str> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(exposition.len());
    for line in exposition.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Prefixes of the metrics rekon exports (controller-runtime's names and
/// its own). Label names never start with these.
pub const METRIC_PREFIXES: &[&str] = &[
    "rekon_",
    "controller_runtime_",
    "workqueue_",
    "leader_election_",
];

/// The metric names a PromQL expression reads: every identifier starting
/// with one of [`METRIC_PREFIXES`].
#[must_use]
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.char_indices().peekable();
    let mut in_string = None;
    while let Some((i, c)) = chars.next() {
        if let Some(quote) = in_string {
            if c == quote {
                in_string = None;
            }
            continue;
        }
        if c == '"' || c == '\'' || c == '`' {
            in_string = Some(c);
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if d.is_ascii_alphanumeric() || d == '_' || d == ':' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let ident = &expr[i..end];
            if METRIC_PREFIXES.iter().any(|p| ident.starts_with(p)) {
                names.insert(ident.to_owned());
            }
        }
    }
    names
}

/// How a metric name used in a query appears in an OpenMetrics exposition:
/// the family and its `# TYPE`. `_total` reads a counter, `_bucket`,
/// `_sum` and `_count` a histogram, anything else a gauge.
#[must_use]
pub fn family_of(name: &str) -> (String, &'static str) {
    if let Some(family) = name.strip_suffix("_total") {
        return (family.to_owned(), "counter");
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(family) = name.strip_suffix(suffix) {
            return (family.to_owned(), "histogram");
        }
    }
    (name.to_owned(), "gauge")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_skip_functions_labels_and_strings() {
        let names = metric_names(
            r#"histogram_quantile(0.99, sum by (controller, le) (rate(controller_runtime_reconcile_time_seconds_bucket{controller=~"rekon_x"}[5m])))
               / on (instance) rekon_cluster_reachable unless workqueue_depth offset 5m"#,
        );
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            [
                "controller_runtime_reconcile_time_seconds_bucket",
                "rekon_cluster_reachable",
                "workqueue_depth"
            ]
        );
    }

    #[test]
    fn families_and_types() {
        assert_eq!(
            family_of("rekon_plugin_load_failures_total"),
            ("rekon_plugin_load_failures".to_owned(), "counter")
        );
        assert_eq!(
            family_of("controller_runtime_reconcile_time_seconds_bucket"),
            (
                "controller_runtime_reconcile_time_seconds".to_owned(),
                "histogram"
            )
        );
        assert_eq!(
            family_of("workqueue_depth"),
            ("workqueue_depth".to_owned(), "gauge")
        );
    }

    #[test]
    fn openmetrics_counters_get_their_text_format_names() {
        let om = "# HELP rekon_plugin_loads Loads.\n# TYPE rekon_plugin_loads counter\n\
                  rekon_plugin_loads_total{plugin=\"a\"} 1\n# HELP g A gauge.\n# TYPE g gauge\ng 2\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP rekon_plugin_loads_total Loads.\n# TYPE rekon_plugin_loads_total counter\n\
             rekon_plugin_loads_total{plugin=\"a\"} 1\n# HELP g A gauge.\n# TYPE g gauge\ng 2\n"
        );
    }

    #[test]
    fn url_encoding() {
        assert_eq!(
            url_encode(r#"a{b="c d"}[1m]"#),
            "a%7Bb%3D%22c%20d%22%7D%5B1m%5D"
        );
    }
}
