#!/usr/bin/env python3
"""Bench (not a test): rekon's admission webhook against Kubewarden's
policy-server and kopf, on the same policy and the same AdmissionReviews.

    tests/bench/admission_peers.py --case nodepool|widgets \
        --policy-server BIN --policy WASM [--rekon BIN] [--kube-sim BIN] \
        [--duration S] [--concurrency 1,16] [--languages rust,python]

`--case nodepool` (the issue's peer): the NodePool validation.
- rekon: `rekon run --webhook-addr` against kube-sim serving the nodepool
  seed (dist/plugins/nodepool.wasm, `make plugins`) and its Python port
  (dist/sdk-plugins/nodepool_py.wasm, `make sdk-plugins`), `POST
  /validate/nodepool`. Its `validate` also checks the cache (no other pool
  selects the same nodes), which the peers do not: rekon does more per
  review.
- Kubewarden: `policy-server` (built from its public source; see
  docs/plugins/admission.md, "Compared with Kubewarden's policy-server and kopf") serving tests/bench/peers/kubewarden-nodepool
  (the same rules written with Kubewarden's Rust SDK from crates.io;
  `cargo build --release --target wasm32-wasip1` in that directory),
  annotated here with the metadata `kwctl annotate` writes.
- kopf: tests/bench/peers/nodepool_kopf_validate.py, a `@kopf.on.validate`
  handler on kopf's own HTTPS webhook server (`pip install -r
  tests/bench/peers/requirements.txt`), `kopf run --standalone` against the
  same kube-sim.

`--case widgets`: a widget's `spec.size` is at most 10: rekon serving the
widgets test plugin in Rust, TypeScript and Python
(dist/test-plugins/widgets.wasm, dist/sdk-plugins/widgets_{ts,py}.wasm),
Kubewarden serving tests/bench/peers/kubewarden-widgets; no kopf peer.

All over HTTPS on loopback, with kept-alive connections as the API server
keeps them, driven by `wrk` (Debian's package) with one connection per
concurrent client; two reviews per case, an allowed one and a denied one
(UPDATEs). Per server and concurrency: reviews/s, p50/p99 latency (wrk's),
and the server's RSS (VmHWM: peak, which includes compiling the policy at
start; VmRSS after the run, split into anonymous memory and mapped files
such as the binary's own code; for kopf, the Python process). Before the
timed run each server gets a warm-up of the same length's tenth, and the
verdict of each review is checked once (allowed / denied with the rule's
words) so that a server answering errors fast cannot win.
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
from ports import KubeSim, fail, free_port, leb  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]

def widget(size):
    return {"apiVersion": "widgets.rekon.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default", "uid": "0f0e"},
            "spec": {"size": size}}


def pool(labels, taints):
    return {"apiVersion": "nodes.lailin.xyz/v1", "kind": "NodePool",
            "metadata": {"name": "gpu", "uid": "0f0e"},
            "spec": {"labels": labels, "taints": taints, "handler": "runc"}}


# Per case: the resource, rekon's plugins per language (file, route name),
# the two reviews' objects (allowed, denied), and a word of the denial each
# server must give.
CASES = {
    "widgets": {
        "gvr": ("widgets.rekon.dev", "v1", "Widget", "widgets"), "namespace": "default",
        "plugin": "widgets",
        "rekon": {"rust": "dist/test-plugins/widgets.wasm",
                  "typescript": "dist/sdk-plugins/widgets_ts.wasm",
                  "python": "dist/sdk-plugins/widgets_py.wasm"},
        "allowed": (widget(5), widget(1)), "denied": (widget(20), widget(1)),
        "denial": "at most 10", "kopf": None,
    },
    "nodepool": {
        "gvr": ("nodes.lailin.xyz", "v1", "NodePool", "nodepools"), "namespace": None,
        "plugin": "nodepool",
        "rekon": {"rust": "dist/plugins/nodepool.wasm",
                  "python": "dist/sdk-plugins/nodepool_py.wasm"},
        "allowed": (pool({"example.com/team": "ml", "example.com/accelerator": "a100"},
                         [{"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}]),
                    pool({"example.com/team": "ml"}, [])),
        "denied": (pool({"example.com/team": "ml", "node-role.kubernetes.io/cpu": ""},
                        [{"key": "example.com/gpu", "value": "true", "effect": "Sometimes"}]),
                   pool({"example.com/team": "ml"}, [])),
        "denial": "Sometimes", "kopf": "tests/bench/peers/nodepool_kopf_validate.py",
    },
}


def metadata(case):
    group, version, _, plural = case["gvr"]
    # What `kwctl annotate` embeds (custom section `io.kubewarden.metadata`):
    # policy-server refuses a waPC policy without a protocol version.
    return {
        "protocolVersion": "v1",
        "rules": [{"apiGroups": [group], "apiVersions": [version],
                   "resources": [plural], "operations": ["CREATE", "UPDATE"]}],
        "mutating": False,
        "backgroundAudit": False,
        "executionMode": "kubewarden-wapc",
    }


def annotated(case, wasm, out):
    name = b"io.kubewarden.metadata"
    content = leb(len(name)) + name + json.dumps(metadata(case)).encode()
    out.write_bytes(wasm.read_bytes() + b"\x00" + leb(len(content)) + content)
    return out


def review(case, verdict):
    group, version, kind, plural = case["gvr"]
    obj, old = case[verdict]
    request = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": plural},
        "name": obj["metadata"]["name"], "operation": "UPDATE",
        "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
    }
    if case["namespace"]:
        request["namespace"] = case["namespace"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def post(url, body):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
        return json.loads(r.read())


def check(case, name, url):
    allowed = post(url, review(case, "allowed"))["response"]
    denied = post(url, review(case, "denied"))["response"]
    if allowed.get("allowed") is not True:
        fail(f"{name}: the allowed review was not allowed: {allowed}")
    message = (denied.get("status") or {}).get("message", "")
    if denied.get("allowed") is not False or case["denial"] not in message:
        fail(f"{name}: the denied review was not denied with the rule's words: {denied}")


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


def wait_serving(case, name, proc, url, log):
    deadline = time.time() + 600
    while True:
        if proc.poll() is not None:
            fail(f"{name} exited {proc.returncode}; see {log}")
        try:
            check(case, name, url)
            return
        except SystemExit:
            raise
        except Exception:  # noqa: BLE001 - still starting, or the plugin still loading
            pass
        if time.time() > deadline:
            fail(f"{name} not serving; see {log}")
        time.sleep(0.2)


def start_rekon(case, rekon, sim, wasm, work, tag):
    plugins = work / f"rekon-plugins-{tag}"
    plugins.mkdir()
    target = plugins / f"{case['plugin']}.wasm"
    shutil.copy(ROOT / wasm, target)
    cache = work / f"rekon-cache-{tag}"
    # Into the compiled-plugin cache `rekon run` maps, as `make` does for a
    # shipped plugin: a JavaScript or Python component is not compiled at load.
    subprocess.run([rekon, "plugin", "compile", target, "--cache-dir", cache],
                   check=True, capture_output=True)
    port, ops = free_port(), free_port()
    log_path = work / f"rekon-{tag}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [rekon, "run", "--kubeconfig", sim.kubeconfig, "--context", "main",
         "--plugins", plugins, "--cache-dir", cache, "--install-crds",
         "--webhook-addr", f"127.0.0.1:{port}", "--webhook-cert-dir", work / f"rekon-certs-{tag}",
         "--metrics-addr", f"127.0.0.1:{ops}", "--probe-addr", f"127.0.0.1:{ops}"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}/validate/{case['plugin']}"
    wait_serving(case, f"rekon ({tag})", proc, url, log_path)
    return proc, url


def self_signed(work, name):
    key, cert = work / f"{name}.key", work / f"{name}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return key, cert


def start_policy_server(case, binary, policy, work):
    key, cert = self_signed(work, "ps")
    module = annotated(case, policy, work / "policy-annotated.wasm")
    policies = work / "policies.yml"
    policies.write_text(f"{case['plugin']}:\n  module: file://{module}\n  allowedToMutate: false\n")
    port, probe = free_port(), free_port()
    log_path = work / "policy-server.log"
    log = open(log_path, "wb")
    env = dict(os.environ, KUBECONFIG=str(work / "no-kubeconfig"))
    proc = subprocess.Popen(
        [binary, "--policies", policies, "--policies-download-dir", work / "ps-download",
         "--sigstore-cache-dir", work / "ps-sigstore",
         "--port", str(port), "--readiness-probe-port", str(probe),
         "--cert-file", cert, "--key-file", key, "--ignore-kubernetes-connection-failure",
         "--log-level", "warn"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"https://127.0.0.1:{port}/validate/{case['plugin']}"
    wait_serving(case, "policy-server", proc, url, log_path)
    return proc, url


def start_kopf(case, sim, work):
    if shutil.which("kopf") is None:
        fail("kopf is missing (pip install -r tests/bench/peers/requirements.txt)")
    key, cert = self_signed(work, "kopf")
    port = free_port()
    log_path = work / "kopf.log"
    log = open(log_path, "wb")
    env = dict(os.environ, KUBECONFIG=str(sim.kubeconfig), KOPF_WEBHOOK_PORT=str(port),
               KOPF_CERT=str(cert), KOPF_KEY=str(key))
    proc = subprocess.Popen(
        ["kopf", "run", "--standalone", "--all-namespaces",
         str(ROOT / case["kopf"])],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"https://127.0.0.1:{port}/{case['plugin']}"
    wait_serving(case, "kopf", proc, url, log_path)
    return proc, url


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(case, name, pid, url, args, work):
    rows = []
    bodies = {}
    for verdict in ("allowed", "denied"):
        bodies[verdict] = work / f"review-{verdict}.json"
        bodies[verdict].write_text(json.dumps(review(case, verdict)))
    for concurrency in args.concurrency:
        for verdict in ("allowed", "denied"):
            wrk(url, bodies[verdict], concurrency, max(1, args.duration // 10), work)
            rps, p50, p99 = wrk(url, bodies[verdict], concurrency, args.duration, work)
            rows.append((name, verdict, concurrency, rps, p50, p99))
    return rows, status_kib(pid, "VmHWM"), (status_kib(pid, "VmRSS"), status_kib(pid, "RssAnon"),
                                            status_kib(pid, "RssFile"))


LANGUAGE = {"rust": "Rust", "typescript": "TypeScript", "python": "Python"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=sorted(CASES), default="nodepool")
    ap.add_argument("--policy-server", required=True, help="Kubewarden's policy-server binary")
    ap.add_argument("--policy", required=True, help="the case's Kubewarden policy, built for wasm32-wasip1")
    ap.add_argument("--rekon", default=str(ROOT / "target/release/rekon"))
    ap.add_argument("--kube-sim", default=str(ROOT / "target/release/kube-sim"))
    ap.add_argument("--duration", type=int, default=10, help="seconds per timed run")
    ap.add_argument("--concurrency", default="1,16",
                    type=lambda s: [int(c) for c in s.split(",")])
    ap.add_argument("--languages", default=None,
                    help="rekon's plugins to run, comma-separated (default: every language of the case)")
    args = ap.parse_args()
    case = CASES[args.case]
    languages = args.languages.split(",") if args.languages else list(case["rekon"])
    for lang in languages:
        if lang not in case["rekon"]:
            fail(f"--case {args.case} has no {lang} plugin (it has {', '.join(case['rekon'])})")
    for what in [args.policy_server, args.policy, args.rekon, args.kube_sim] + \
            [ROOT / case["rekon"][lang] for lang in languages]:
        if not pathlib.Path(what).is_file():
            fail(f"{what} is missing")
    if shutil.which("wrk") is None:
        fail("wrk is missing (apt-get install wrk)")
    work = pathlib.Path(tempfile.mkdtemp(prefix="admission-peers-"))
    table = []
    sim = KubeSim(args.kube_sim, work)
    try:
        for lang in languages:
            proc, url = start_rekon(case, args.rekon, sim, case["rekon"][lang], work, lang)
            try:
                table.append(measure(case, f"rekon ({LANGUAGE[lang]} plugin)", proc.pid, url, args, work))
            finally:
                stop(proc)
        if case["kopf"]:
            # After rekon, which installed the CRD kopf watches.
            proc, url = start_kopf(case, sim, work)
            try:
                table.append(measure(case, "kopf (validating handler)", proc.pid, url, args, work))
            finally:
                stop(proc)
    finally:
        sim.stop()
    proc, url = start_policy_server(case, args.policy_server, pathlib.Path(args.policy), work)
    try:
        table.append(measure(case, "Kubewarden policy-server", proc.pid, url, args, work))
    finally:
        stop(proc)
    print(f"\nadmission peers, case {args.case} ({args.duration} s per row, wrk over HTTPS, "
          "kept-alive connections)")
    print("| server | review | concurrency | reviews/s | p50 ms | p99 ms | peak RSS MiB | RSS after MiB (anon + file) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for rows, hwm, (rss, anon, file) in table:
        for name, verdict, concurrency, rps, p50, p99 in rows:
            print(f"| {name} | {verdict} | {concurrency} | {rps:,.0f} | {p50:.2f} | {p99:.2f} "
                  f"| {hwm / 1024:.0f} | {rss / 1024:.0f} ({anon / 1024:.0f} + {file / 1024:.0f}) |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
