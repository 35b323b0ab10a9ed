//! Helpers shared by the kube-sim integration tests.
#![allow(dead_code)]

pub mod hooks;

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_sim::Sim;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Fails the test if `fut` does not finish within `secs`.
pub async fn within<T>(secs: u64, what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} timed out: likely deadlocked"))
}

/// Fails the test unless python3 with the official client (`kubernetes`
/// on PyPI, installed by `.ci/run`) is there: a test that needs it must
/// not pass without running.
pub async fn require_python_client() {
    let probe = tokio::process::Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output()
        .await;
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "python3 cannot import the official client (`python3 -m pip install kubernetes`, as .ci/run does): {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            panic!("python3 is not installed ({e}); it runs the official Python client tests")
        }
    }
}

/// A kube client for the context `cluster` of the sim's kubeconfig.
pub async fn client(sim: &Sim, cluster: &str) -> kube::Client {
    let kc = Kubeconfig::read_from(sim.kubeconfig_path()).expect("kubeconfig parses");
    let opts = KubeConfigOptions {
        context: Some(cluster.to_string()),
        ..Default::default()
    };
    let cfg = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .expect("kubeconfig is usable");
    kube::Client::try_from(cfg).expect("client builds")
}

/// A raw HTTP/1.1 response.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Newline-delimited JSON lines (watch events).
    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.text()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("watch line is JSON"))
            .collect()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request on a fresh connection and reads the whole response
/// (the server ends watches by `timeoutSeconds`).
pub async fn raw(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Raw {
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.expect("writes");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("reads");
    parse_response(&buf)
}

fn parse_response(buf: &[u8]) -> Raw {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response has a header block");
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &buf[split + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Raw {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(pos) = b.windows(2).position(|w| w == b"\r\n") {
        let size_str = String::from_utf8_lossy(&b[..pos]);
        let size = usize::from_str_radix(size_str.split(';').next().unwrap_or("0").trim(), 16)
            .expect("chunk size");
        b = &b[pos + 2..];
        if size == 0 || b.len() < size {
            break;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[(size + 2).min(b.len())..];
    }
    out
}

/// A JSON request; returns status and parsed body.
pub async fn req(
    url: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let text = body.map(|b| b.to_string());
    let r = raw(
        url,
        method,
        path,
        &[
            ("Content-Type", content_type),
            ("Accept", "application/json"),
        ],
        text.as_deref(),
    )
    .await;
    let v = if r.body.is_empty() {
        serde_json::Value::Null
    } else {
        r.json()
    };
    (r.status, v)
}
