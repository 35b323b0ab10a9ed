#!/usr/bin/env python3
"""Bench (not a test): rekon + the TypeScript and Python ports against the
operators their authors would otherwise write natively, with the Rust seeds
as a third row, side by side in one run.

    tests/bench/peers.py [--rekon BIN] [--kube-sim BIN] [--nodepool 1000x100,3000x300]
                         [--fanout 300,1000] [--only nodepool|fanout] [--ts-wasm LABEL=WASM ...]

Jobs, each on a fresh kube-sim with its objects created before the operator
starts (so every row starts from the same state):

  nodepool  N Nodes in P pools (Node i labelled node-role.kubernetes.io/pool-(i mod P));
            every NodePool sets two labels and a taint. Converged: no Node lacks
            its pool's `bench.rekon.dev/tier` label. Then every pool's tier
            changes (v1 -> v2, one merge patch per pool); converged again: no
            Node lacks the new value.
            Rows: kopf (tests/bench/peers/nodepool_kopf.py: official Python client,
            server-side apply, kopf's finalizer, a Node handler on a kopf index),
            rekon + plugins/nodepool-py, rekon + the Rust seed.
  fanout    T Tests in the main cluster. Converged: a Job per Test in `main` and
            in `sub` and every Test's status says `running`. Then every Job in
            `sub` is marked complete (a status patch each); converged again:
            every Test says `finished`.
            Rows: client-node (tests/bench/peers/fanout-client-node: informers,
            server-side apply), rekon + plugins/test-fanout-ts (and each
            --ts-wasm, e.g. another engine's build), rekon + the Rust seed.
            (@kubernetes/client-node 1.4 makes a new https.Agent for every
            request, so each request opens its own TLS connection: part of
            what that peer costs as its authors ship it. 2.x needs Node 22.)

kube-sim serves TLS for every row: client-node refuses to watch over plain
HTTP.

Columns (one process per row: the operator; kube-sim is not counted):

  start_s   operator start to the first convergence (includes its start-up;
            rekon's component is compiled into its --cache-dir beforehand,
            as `rekon plugin compile` or a previous run leaves it)
  change_s  first write of the change to the second convergence
  cpu_s     CPU seconds (user + system) of the operator process, start to
            the end of the row
  peak_MiB  peak RSS of the operator process (VmHWM)
  steady_MiB RSS 3 s after the second convergence (VmRSS)
  x_peer_*  start_s + change_s, and peak_MiB, over the native peer's (first row)
  call_ms   rekon rows: mean duration of the host's reconcile calls into the
            plugin (`rekon_wasm_call_duration_seconds`: a fresh instance, the
            call), over the whole row

Needs: kube-sim and rekon (default target/release, else target/debug;
CARGO_TARGET_DIR is honoured), dist/plugins and dist/sdk-plugins (make plugins
sdk-plugins), python3 with kopf and kubernetes (pip install -r
tests/bench/peers/requirements.txt), node/npm (the client-node peer's packages
are installed from its lock file on first use). Polling for convergence runs
every 0.2 s, so times are good to about that.
"""

import argparse
import base64
import concurrent.futures
import http.client
import json
import os
import pathlib
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.parse

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from idle_clusters import binary  # noqa: E402
from ports import ROOT, KubeSim, fail, free_port, wasm_call_ms  # noqa: E402

PEERS = ROOT / "tests/bench/peers"
CLK_TCK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.2
TIER = "bench.rekon.dev/tier"


class Api:
    """A small keep-alive JSON client for one kube-sim cluster (one
    connection per thread)."""

    def __init__(self, sim, cluster):
        url = urllib.parse.urlparse(sim.server(cluster))
        self.host, self.port = url.hostname, url.port
        ca = sim.server(cluster, "certificate-authority-data")
        self.tls = ssl.create_default_context(cadata=base64.b64decode(ca).decode()) if ca else None
        self.local = threading.local()

    def connect(self):
        if self.tls is None:
            return http.client.HTTPConnection(self.host, self.port, timeout=30)
        return http.client.HTTPSConnection(self.host, self.port, timeout=30, context=self.tls)

    def request(self, method, path, body=None, ctype="application/json", ok=(200, 201)):
        for attempt in range(3):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = self.connect()
            try:
                data = None if body is None else json.dumps(body).encode()
                conn.request(method, path, data, {"Content-Type": ctype} if data is not None else {})
                r = conn.getresponse()
                text = r.read()
            except (ConnectionError, http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
                continue
            if r.status not in ok:
                fail(f"{method} {path}: {r.status} {text[:300]!r}")
            return json.loads(text) if text else None
        return None

    def items(self, path):
        return self.request("GET", path)["items"]


def parallel(fn, args, workers=8):
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(fn, args):
            pass


class Proc:
    """The operator under measurement."""

    def __init__(self, cmd, log, env=None, cwd=None):
        self.log_path = log
        self.log = open(log, "wb")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=cwd)

    def check(self):
        if self.proc.poll() is not None:
            fail(f"{self.proc.args[0]} exited {self.proc.returncode}; see {self.log_path}")

    def cpu_s(self):
        fields = pathlib.Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def mem_mib(self, key):
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
        fail(f"no {key} for {self.proc.pid}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def wait_for(proc, check, what, timeout):
    deadline = time.perf_counter() + timeout
    while True:
        proc.check()
        if check():
            return time.perf_counter()
        if time.perf_counter() > deadline:
            fail(f"not converged after {timeout}s: {what}; see {proc.log_path}")
        time.sleep(POLL_S)


def install_crd(api, path):
    crd = json.loads(pathlib.Path(path).read_text())
    crd.pop("status", None)
    api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(201, 409))
    for _ in range(100):
        got = api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}")
        if any(c["type"] == "Established" and c["status"] == "True" for c in got.get("status", {}).get("conditions", [])):
            return
        time.sleep(0.05)
    fail(f"CRD {crd['metadata']['name']} not established")


# --- the nodepool job -------------------------------------------------------

NODEPOOLS = "/apis/nodes.lailin.xyz/v1/nodepools"


def nodepool_setup(api, nodes, pools):
    install_crd(api, ROOT / "plugins/nodepool-py/crd.json")

    def pool(p):
        name = f"pool-{p:03}"
        api.request("POST", NODEPOOLS, {
            "apiVersion": "nodes.lailin.xyz/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"labels": {TIER: "v1", "bench.rekon.dev/pool": name},
                     "taints": [{"key": "bench.rekon.dev/dedicated", "value": name, "effect": "NoSchedule"}]}})

    def node(i):
        api.request("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"node-{i:05}", "labels": {f"node-role.kubernetes.io/pool-{i % pools:03}": ""}}})

    parallel(pool, range(pools))
    parallel(node, range(nodes))


def nodes_lacking(api, tier):
    sel = urllib.parse.quote(f"{TIER}!={tier}")
    return len(api.items(f"/api/v1/nodes?labelSelector={sel}"))


def nodepool_change(api, pools):
    def change(p):
        api.request("PATCH", f"{NODEPOOLS}/pool-{p:03}", {"spec": {"labels": {TIER: "v2"}}},
                    ctype="application/merge-patch+json")

    parallel(change, range(pools))


# --- the fanout job ---------------------------------------------------------

TESTS = "/apis/job.lailin.xyz/v1/namespaces/bench/tests"
JOBS = "/apis/batch/v1/namespaces/bench/jobs"


def fanout_setup(main, tests):
    install_crd(main, ROOT / "plugins/test-fanout-ts/crd.json")
    main.request("POST", "/api/v1/namespaces",
                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}, ok=(201, 409))

    def test(i):
        main.request("POST", TESTS, {"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                                     "metadata": {"name": f"t-{i:05}"}, "spec": {"image": "busybox"}})

    parallel(test, range(tests))


def phases(main):
    out = {}
    for t in main.items(TESTS):
        phase = (t.get("status") or {}).get("phase")
        out[phase] = out.get(phase, 0) + 1
    return out


def fanout_running(main, sub, tests):
    return (len(main.items(JOBS)) == tests and len(sub.items(JOBS)) == tests
            and phases(main).get("running", 0) == tests)


def fanout_complete(sub):
    patch = {"status": {"succeeded": 1, "startTime": "2025-01-01T00:00:00Z",
                        "completionTime": "2025-01-01T00:00:10Z",
                        "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                                       {"type": "Complete", "status": "True"}]}}
    names = [j["metadata"]["name"] for j in sub.items(JOBS)]
    parallel(lambda n: sub.request("PATCH", f"{JOBS}/{n}/status", patch,
                                   ctype="application/merge-patch+json"), names)


# --- operators --------------------------------------------------------------


def rekon_cmd(rekon, sim, wasm, work, clusters):
    plugins, cache = work / "plugins", work / "cache"
    plugins.mkdir()
    shutil.copy(wasm, plugins / pathlib.Path(wasm).name)
    # Compiled before the row starts: what a cached start costs.
    out = subprocess.run([rekon, "plugin", "compile", "--cache-dir", cache, plugins / pathlib.Path(wasm).name],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"rekon plugin compile {wasm}: {out.stderr[-2000:]}")
    port = free_port()
    cmd = [rekon, "run", "--kubeconfig", sim.kubeconfig, "--context", "main", "--plugins", plugins,
           "--cache-dir", cache, "--install-crds", "--log-format", "json",
           "--metrics-addr", f"127.0.0.1:{port}", "--probe-addr", f"127.0.0.1:{port}"]
    for c in clusters:
        cmd += ["--cluster", f"{c}={c}"]
    return cmd, None, None, port


def kopf_cmd(sim):
    try:
        import kopf  # noqa: F401
        import kubernetes  # noqa: F401
    except ImportError as e:
        fail(f"{e}: pip install -r {PEERS / 'requirements.txt'}")
    env = dict(os.environ, KUBECONFIG=str(sim.kubeconfig))
    cmd = [sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces", "--quiet",
           PEERS / "nodepool_kopf.py"]
    return cmd, env, None, None


def client_node_cmd(sim):
    d = PEERS / "fanout-client-node"
    if shutil.which("node") is None or shutil.which("npm") is None:
        fail("node and npm are needed for the client-node peer")
    if not (d / "node_modules/@kubernetes/client-node").is_dir():
        out = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=d, capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"npm ci in {d}: {out.stderr[-2000:]}")
    return ["node", d / "operator.mjs", sim.kubeconfig, "main", "sub"], None, d, None


def measure(label, cmd_env_cwd, work, converge1, change, converge2, timeout):
    cmd, env, cwd, metrics = cmd_env_cwd
    proc = Proc(cmd, work / f"{label.replace(' ', '_').replace('/', '_')}.log", env=env, cwd=cwd)
    try:
        t1 = wait_for(proc, converge1, f"{label}: first convergence", timeout)
        started = time.perf_counter()
        change()
        t2 = wait_for(proc, converge2, f"{label}: convergence after the change", timeout)
        time.sleep(3)
        proc.check()
        row = {"start_s": t1 - proc.started, "change_s": t2 - started, "cpu_s": proc.cpu_s(),
               "peak_MiB": proc.mem_mib("VmHWM"), "steady_MiB": proc.mem_mib("VmRSS")}
        if metrics is not None:
            row["call_ms"], _ = wasm_call_ms(types.SimpleNamespace(port=metrics))
        return row
    finally:
        proc.stop()


COLUMNS = ["start_s", "change_s", "cpu_s", "peak_MiB", "steady_MiB"]


def print_table(title, rows):
    print(f"\n{title}")
    width = max(len(r[0]) for r in rows) + 2
    print(" " * width + "".join(f"{c:>12}" for c in COLUMNS)
          + f"{'x_peer_time':>13}{'x_peer_peak':>13}{'call_ms':>10}")
    peer = rows[0][1]
    for label, row in rows:
        total, peer_total = row["start_s"] + row["change_s"], peer["start_s"] + peer["change_s"]
        cells = "".join(f"{row[c]:>12.2f}" for c in COLUMNS)
        call = f"{row['call_ms']:>10.3f}" if row.get("call_ms") is not None else f"{'-':>10}"
        print(f"{label:<{width}}{cells}{total / peer_total:>13.2f}{row['peak_MiB'] / peer['peak_MiB']:>13.2f}{call}")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rekon")
    ap.add_argument("--kube-sim")
    ap.add_argument("--nodepool", default="1000x100,3000x300", help="NODESxPOOLS,...")
    ap.add_argument("--fanout", default="300,1000", help="TESTS,...")
    ap.add_argument("--only", choices=["nodepool", "fanout"])
    ap.add_argument("--ts-wasm", action="append", default=[],
                    help="LABEL=WASM: another build of the TypeScript port as an extra fanout row")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    os.chdir(ROOT)
    rekon, kube_sim = (binary(name, given).resolve() for name, given in
                       (("rekon", args.rekon), ("kube-sim", args.kube_sim)))
    wasm = {k: ROOT / v for k, v in {
        "py": "dist/sdk-plugins/nodepool_py.wasm", "rust-np": "dist/plugins/nodepool.wasm",
        "ts": "dist/sdk-plugins/test_fanout_ts.wasm", "rust-fo": "dist/plugins/test_fanout.wasm"}.items()}
    for p in wasm.values():
        if not p.is_file():
            fail(f"{p} missing (make plugins sdk-plugins)")
    extra_ts = [x.split("=", 1) for x in args.ts_wasm]
    print(f"rekon {rekon}, kube-sim {kube_sim}")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="rekon-peers-"))

    def fresh(name):
        work = tmp / name
        work.mkdir()
        # TLS: @kubernetes/client-node refuses to watch over plain HTTP.
        return work, KubeSim(kube_sim, work, tls=True)

    if args.only in (None, "nodepool"):
        for size in args.nodepool.split(","):
            nodes, pools = map(int, size.split("x"))
            rows = []
            for label, make in [
                ("kopf", lambda sim, work: kopf_cmd(sim)),
                ("rekon + nodepool-py", lambda sim, work: rekon_cmd(rekon, sim, wasm["py"], work, [])),
                ("rekon + nodepool (Rust)", lambda sim, work: rekon_cmd(rekon, sim, wasm["rust-np"], work, [])),
            ]:
                work, sim = fresh(f"nodepool-{size}-{len(rows)}")
                try:
                    api = Api(sim, "main")
                    nodepool_setup(api, nodes, pools)
                    row = measure(label, make(sim, work), work,
                                  lambda: nodes_lacking(api, "v1") == 0,
                                  lambda: nodepool_change(api, pools),
                                  lambda: nodes_lacking(api, "v2") == 0, args.timeout)
                finally:
                    sim.stop()
                rows.append((label, row))
            print_table(f"nodepool: {nodes} nodes, {pools} pools, then a label change on every pool", rows)

    if args.only in (None, "fanout"):
        for size in args.fanout.split(","):
            tests = int(size)
            rows = []
            makers = [("client-node", lambda sim, work: client_node_cmd(sim)),
                      ("rekon + test-fanout-ts", lambda sim, work: rekon_cmd(rekon, sim, wasm["ts"], work, ["sub"]))]
            for label, path in extra_ts:
                makers.append((f"rekon + test-fanout-ts ({label})",
                               lambda sim, work, path=path: rekon_cmd(rekon, sim, pathlib.Path(path).resolve(), work, ["sub"])))
            makers.append(("rekon + test-fanout (Rust)",
                           lambda sim, work: rekon_cmd(rekon, sim, wasm["rust-fo"], work, ["sub"])))
            for label, make in makers:
                work, sim = fresh(f"fanout-{size}-{len(rows)}")
                try:
                    main_api, sub_api = Api(sim, "main"), Api(sim, "sub")
                    fanout_setup(main_api, tests)
                    row = measure(label, make(sim, work), work,
                                  lambda: fanout_running(main_api, sub_api, tests),
                                  lambda: fanout_complete(sub_api),
                                  lambda: phases(main_api).get("finished", 0) == tests, args.timeout)
                finally:
                    sim.stop()
                rows.append((label, row))
            print_table(f"fanout: {tests} Tests over clusters main and sub, then every Job in sub completes", rows)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
