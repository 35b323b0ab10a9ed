#!/usr/bin/env python3
"""Bench (not a test): rekon's admission webhook against Kubewarden's
policy-server, on the same policy and the same AdmissionReviews.

    tests/bench/admission_peers.py --policy-server BIN --policy WASM \
        [--rekon BIN] [--kube-sim BIN] [--duration S] [--concurrency 1,16]

- rekon: `rekon run --webhook-addr` against kube-sim with the widgets test
  plugin (dist/test-plugins/widgets.wasm, `make test-plugins`; its
  `validate`: a widget's `spec.size` is at most 10), `POST
  /validate/widgets`.
- Kubewarden: `policy-server` (built from its public source; not built
  here) serving tests/bench/peers/kubewarden-widgets (the same rule written
  with Kubewarden's Rust SDK; `cargo build --release --target wasm32-wasip1`
  in that directory), annotated here with the metadata `kwctl annotate`
  writes, `POST /validate/widgets`.

Both over HTTPS on loopback, with kept-alive connections as the API server
keeps them, driven by `wrk` (Debian's package) with one connection per
concurrent client; two reviews, an allowed one (size 5) and a denied one
(size 20), each an UPDATE (rekon's widgets reads its quota from the cache
only on CREATE; the Kubewarden policy has no quota). Per server and
concurrency: reviews/s, p50/p99 latency (wrk's), and the server's RSS
(VmHWM: peak, which for both includes compiling the policy at start;
VmRSS after the run, split into anonymous memory and mapped files such as
the binary's own code). Before the timed run each server gets
a warm-up of the same length's tenth, and the verdict of each review is
checked once (allowed / denied with the message) so that a server
answering errors fast cannot win.
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ports import KubeSim, fail, free_port, http, leb  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]

# What `kwctl annotate` embeds (custom section `io.kubewarden.metadata`):
# policy-server refuses a waPC policy without a protocol version.
METADATA = {
    "protocolVersion": "v1",
    "rules": [{"apiGroups": ["widgets.rekon.dev"], "apiVersions": ["v1"],
               "resources": ["widgets"], "operations": ["CREATE", "UPDATE"]}],
    "mutating": False,
    "backgroundAudit": False,
    "executionMode": "kubewarden-wapc",
}


def annotated(wasm, out):
    name = b"io.kubewarden.metadata"
    content = leb(len(name)) + name + json.dumps(METADATA).encode()
    out.write_bytes(wasm.read_bytes() + b"\x00" + leb(len(content)) + content)
    return out


def review(size):
    widget = lambda s: {"apiVersion": "widgets.rekon.dev/v1", "kind": "Widget",  # noqa: E731
                        "metadata": {"name": "w", "namespace": "default", "uid": "0f0e"},
                        "spec": {"size": s}}
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "widgets.rekon.dev", "version": "v1", "kind": "Widget"},
            "resource": {"group": "widgets.rekon.dev", "version": "v1", "resource": "widgets"},
            "requestKind": {"group": "widgets.rekon.dev", "version": "v1", "kind": "Widget"},
            "requestResource": {"group": "widgets.rekon.dev", "version": "v1", "resource": "widgets"},
            "name": "w", "namespace": "default", "operation": "UPDATE",
            "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
            "object": widget(size), "oldObject": widget(1),
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
        },
    }


def post(url, body):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
        return json.loads(r.read())


def check(name, url):
    allowed = post(url, review(5))["response"]
    denied = post(url, review(20))["response"]
    if allowed.get("allowed") is not True:
        fail(f"{name}: size 5 not allowed: {allowed}")
    message = (denied.get("status") or {}).get("message", "")
    if denied.get("allowed") is not False or "at most 10" not in message:
        fail(f"{name}: size 20 not denied with the rule's message: {denied}")


def status_kib(pid, field):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    fail(f"no {field} for {pid}")


def wrk(url, body_file, concurrency, seconds, work):
    script = work / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'local f = io.open("{body_file}", "rb")\n'
        'wrk.body = f:read("*a")\n'
        'f:close()\n')
    threads = min(concurrency, 2)
    out = subprocess.run(
        ["wrk", "-t", str(threads), "-c", str(concurrency), "-d", f"{seconds}s",
         "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        fail(f"{url}: {non2xx.group(1)} answers were not 200:\n{out}")
    if re.search(r"Socket errors:", out):
        fail(f"{url}: socket errors:\n{out}")

    def pct(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        return value * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    return rps, pct(50), pct(99)


def start_rekon(rekon, sim, work):
    plugins = work / "rekon-plugins"
    plugins.mkdir()
    shutil.copy(ROOT / "dist/test-plugins/widgets.wasm", plugins / "widgets.wasm")
    port, ops = free_port(), free_port()
    log = open(work / "rekon.log", "wb")
    proc = subprocess.Popen(
        [rekon, "run", "--kubeconfig", sim.kubeconfig, "--context", "main",
         "--plugins", plugins, "--cache-dir", work / "rekon-cache", "--install-crds",
         "--webhook-addr", f"127.0.0.1:{port}", "--webhook-cert-dir", work / "rekon-certs",
         "--metrics-addr", f"127.0.0.1:{ops}", "--probe-addr", f"127.0.0.1:{ops}"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}/validate/widgets"
    deadline = time.time() + 300
    while True:
        if proc.poll() is not None:
            fail(f"rekon exited {proc.returncode}; see {work / 'rekon.log'}")
        status, _ = http(f"http://127.0.0.1:{ops}/readyz", timeout=0.5)
        if status == 200:
            try:
                check("rekon", url)
                return proc, url
            except Exception:  # noqa: BLE001 - the plugin may still be loading
                pass
        if time.time() > deadline:
            fail(f"rekon not serving widgets; see {work / 'rekon.log'}")
        time.sleep(0.2)


def start_policy_server(binary, policy, work):
    key, cert = work / "ps.key", work / "ps.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    module = annotated(policy, work / "widgets-annotated.wasm")
    policies = work / "policies.yml"
    policies.write_text(f"widgets:\n  module: file://{module}\n  allowedToMutate: false\n")
    port, probe = free_port(), free_port()
    log = open(work / "policy-server.log", "wb")
    env = dict(os.environ, KUBECONFIG=str(work / "no-kubeconfig"))
    proc = subprocess.Popen(
        [binary, "--policies", policies, "--policies-download-dir", work / "ps-download",
         "--sigstore-cache-dir", work / "ps-sigstore",
         "--port", str(port), "--readiness-probe-port", str(probe),
         "--cert-file", cert, "--key-file", key, "--ignore-kubernetes-connection-failure",
         "--log-level", "warn"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"https://127.0.0.1:{port}/validate/widgets"
    deadline = time.time() + 300
    while True:
        if proc.poll() is not None:
            fail(f"policy-server exited {proc.returncode}; see {work / 'policy-server.log'}")
        try:
            check("policy-server", url)
            return proc, url
        except SystemExit:
            raise
        except Exception:  # noqa: BLE001 - still starting
            pass
        if time.time() > deadline:
            fail(f"policy-server not serving; see {work / 'policy-server.log'}")
        time.sleep(0.2)


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(name, pid, url, args, work):
    rows = []
    bodies = {}
    for size in (5, 20):
        bodies[size] = work / f"review-{size}.json"
        bodies[size].write_text(json.dumps(review(size)))
    for concurrency in args.concurrency:
        for size, verdict in ((5, "allowed"), (20, "denied")):
            wrk(url, bodies[size], concurrency, max(1, args.duration // 10), work)
            rps, p50, p99 = wrk(url, bodies[size], concurrency, args.duration, work)
            rows.append((name, verdict, concurrency, rps, p50, p99))
    return rows, status_kib(pid, "VmHWM"), (status_kib(pid, "VmRSS"), status_kib(pid, "RssAnon"),
                                            status_kib(pid, "RssFile"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy-server", required=True, help="Kubewarden's policy-server binary")
    ap.add_argument("--policy", required=True, help="kubewarden-widgets' wasm32-wasip1 build")
    ap.add_argument("--rekon", default=str(ROOT / "target/release/rekon"))
    ap.add_argument("--kube-sim", default=str(ROOT / "target/release/kube-sim"))
    ap.add_argument("--duration", type=int, default=10, help="seconds per timed run")
    ap.add_argument("--concurrency", default="1,16",
                    type=lambda s: [int(c) for c in s.split(",")])
    args = ap.parse_args()
    for what in (args.policy_server, args.policy, args.rekon, args.kube_sim,
                 ROOT / "dist/test-plugins/widgets.wasm"):
        if not pathlib.Path(what).is_file():
            fail(f"{what} is missing")
    if shutil.which("wrk") is None:
        fail("wrk is missing (apt-get install wrk)")
    work = pathlib.Path(tempfile.mkdtemp(prefix="admission-peers-"))
    table = []
    sim = KubeSim(args.kube_sim, work)
    try:
        proc, url = start_rekon(args.rekon, sim, work)
        try:
            rows, hwm, rss = measure("rekon (Rust plugin)", proc.pid, url, args, work)
            table.append((rows, hwm, rss))
        finally:
            stop(proc)
    finally:
        sim.stop()
    proc, url = start_policy_server(args.policy_server, pathlib.Path(args.policy), work)
    try:
        rows, hwm, rss = measure("Kubewarden policy-server", proc.pid, url, args, work)
        table.append((rows, hwm, rss))
    finally:
        stop(proc)
    print(f"\nadmission peers ({args.duration} s per row, wrk over HTTPS, kept-alive connections)")
    print("| server | review | concurrency | reviews/s | p50 ms | p99 ms | peak RSS MiB | RSS after MiB (anon + file) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for rows, hwm, (rss, anon, file) in table:
        for name, verdict, concurrency, rps, p50, p99 in rows:
            print(f"| {name} | {verdict} | {concurrency} | {rps:,.0f} | {p50:.2f} | {p99:.2f} "
                  f"| {hwm / 1024:.0f} | {rss / 1024:.0f} ({anon / 1024:.0f} + {file / 1024:.0f}) |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
