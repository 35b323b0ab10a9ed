#!/usr/bin/env python3
"""Bench (not a test): the Rust seeds against their TypeScript and Python
ports, for one or more builds of rekon side by side.

    tests/bench/ports.py [--kube-sim BIN] [--repeat N] LABEL=REKON [LABEL=REKON ...]

e.g. `tests/bench/ports.py before=/tmp/rekon-old after=target/release/rekon`.
Needs dist/plugins (make plugins) and dist/sdk-plugins (make sdk-plugins), a
kube-sim binary (default target/release/kube-sim, else target/debug/kube-sim;
CARGO_TARGET_DIR is honoured) and nothing else but python3's standard library.

Per plugin (rust-test-fanout, ts-test-fanout, rust-nodepool, py-nodepool) and
per rekon build, each on a fresh kube-sim (clusters main and sub), `rekon run`
with the one plugin in its directory and a --cache-dir:

  call_ms     mean duration of the host's reconcile calls into the plugin
              (`rekon_wasm_call_duration_seconds`: a fresh instance from the
              pool, the call, as in production) while it reconciles the
              primaries of its recorded cases (plugins/*/test*/cases), created
              five times over through kube-sim's API; `calls` is how many
  x_rust      call_ms over the Rust seed's
  cold_s      start to ready (/readyz 200) with an empty --cache-dir: compiles
  cold_MiB    RSS of that host 1 s after ready (what compiling left behind)
  ready_s     start to ready with the component in the cache (median of --runs)
  idle_MiB    RSS of the host (VmRSS) 1 s after ready; rows "(no plugin)"
              (empty plugin directory) and "(rust seeds)" (both Rust seeds,
              nothing in the clusters: issue 21's baseline)
  idle+MiB    idle RSS minus the "(no plugin)" host's: what loading the plugin
              adds
  busy+MiB    the same once the plugin has reconciled its primaries (the
              reconcile counter stopped moving for 1 s)
  reload_s    hot reload with the new version already compiled in the cache:
              from the end of writing the new file (the same component with
              a custom section added) over the watched one to the host
              logging "replaced plugin" (median of --runs)

With --replay also `rekon plugin replay` of the cases repeated --repeat times
(replay_ms: per reconcile, minus one pass, unpooled; replay_MiB: peak RSS).
"""

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]

PLUGINS = [
    # label, wasm, cases, family
    ("rust-test-fanout", "dist/plugins/test_fanout.wasm", "plugins/test-fanout-ts/test/cases", "fanout"),
    ("ts-test-fanout", "dist/sdk-plugins/test_fanout_ts.wasm", "plugins/test-fanout-ts/test/cases", "fanout"),
    ("rust-nodepool", "dist/plugins/nodepool.wasm", "plugins/nodepool-py/tests/cases", "nodepool"),
    ("py-nodepool", "dist/sdk-plugins/nodepool_py.wasm", "plugins/nodepool-py/tests/cases", "nodepool"),
]


def fail(msg):
    print(f"ports bench: {msg}", file=sys.stderr)
    sys.exit(1)


def run_measured(cmd, **kw):
    """Wall seconds and peak RSS (KiB) of a command that must succeed."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{err[-2000:]}")
    return wall, usage.ru_maxrss


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, body=None, method=None, timeout=2.0):
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, socket.timeout):
        return None, ""


def rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    fail(f"no VmRSS for {pid}")


def leb(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def variant(wasm_bytes, tag):
    """The same component with a custom section appended: another digest,
    the same code (custom sections are allowed anywhere in a component)."""
    name = b"rekon-bench"
    content = leb(len(name)) + name + tag.encode()
    return wasm_bytes + b"\x00" + leb(len(content)) + content


class KubeSim:
    def __init__(self, binary, work, tls=False):
        self.kubeconfig = work / "kubeconfig"
        self.log = open(work / "kube-sim.log", "wb")
        self.proc = subprocess.Popen(
            [binary, "--clusters", "main,sub", "--kubeconfig", self.kubeconfig] + (["--tls"] if tls else []),
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while not self.kubeconfig.exists() or self.server("main") is None:
            if time.time() > deadline or self.proc.poll() is not None:
                fail("kube-sim did not start")
            time.sleep(0.05)

    def server(self, cluster, field="server"):
        try:
            text = self.kubeconfig.read_text()
        except FileNotFoundError:
            return None
        # kube-sim's kubeconfig: `- name: X` then `cluster:` / `server: "URL"`
        # (and `certificate-authority-data: B64` with --tls).
        name = None
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("- name:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith(field + ":") and name == cluster:
                return line.split(":", 1)[1].strip().strip('"')
        return None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
        self.log.close()


class Host:
    """One `rekon run` against kube-sim."""

    def __init__(self, rekon, sim, plugins, cache, log):
        self.port = free_port()
        self.log_path = log
        self.log = open(log, "wb")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [rekon, "run", "--kubeconfig", sim.kubeconfig, "--context", "main",
             "--cluster", "sub=sub", "--plugins", plugins, "--cache-dir", cache,
             "--install-crds", "--log-format", "json",
             "--metrics-addr", f"127.0.0.1:{self.port}", "--probe-addr", f"127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=400):
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                fail(f"rekon run exited {self.proc.returncode}; see {self.log_path}")
            status, _ = http(f"http://127.0.0.1:{self.port}/readyz", timeout=0.5)
            if status == 200:
                return time.perf_counter() - self.started
            time.sleep(0.01)
        fail(f"rekon run not ready after {timeout}s; see {self.log_path}")

    def reconciles(self):
        _, text = http(f"http://127.0.0.1:{self.port}/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith("controller_runtime_reconcile_total"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def settle(self, timeout=60):
        """Waits until the reconcile counter has moved (CRDs are installed
        after ready: the first watches may still be retrying) and then not
        moved for a second."""
        first = self.reconciles()
        deadline = time.perf_counter() + timeout
        while self.reconciles() == first:
            if time.perf_counter() > deadline:
                fail(f"no reconcile within {timeout}s; see {self.log_path}")
            time.sleep(0.05)
        last, since = self.reconciles(), time.perf_counter()
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            time.sleep(0.2)
            now = self.reconciles()
            if now != last:
                last, since = now, time.perf_counter()
            elif time.perf_counter() - since >= 1.0:
                return last
        return last

    def rss(self):
        return rss_kib(self.proc.pid)

    def logged_since(self, offset, needle):
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return needle.encode() in f.read()

    def log_size(self):
        return os.path.getsize(self.log_path)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def primaries(cases_dir, family):
    """Objects to create so the plugin has work: the primaries (and, for
    nodepool, the Nodes) the recorded cases read, renamed per copy."""
    objects = {}
    for f in sorted(pathlib.Path(cases_dir).glob("*.json")):
        case = json.loads(f.read_text())
        for read in case.get("reads", []):
            res = read["resource"]
            result = read.get("result", {})
            found = [result.get("object")] if "object" in result else result.get("objects", [])
            for obj in found or []:
                if not obj:
                    continue
                if family == "fanout" and res["kind"] != "Test":
                    continue
                if family == "nodepool" and res["kind"] not in ("NodePool", "Node"):
                    continue
                meta = obj["metadata"]
                key = (res["kind"], meta.get("namespace"), meta["name"])
                clean = {k: v for k, v in obj.items() if k not in ("status",)}
                clean["metadata"] = {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}
                objects[key] = (res, clean)
    return list(objects.values())


def create_objects(sim, objects, copies=5):
    base = sim.server("main")
    for ns in sorted({o["metadata"].get("namespace") for _, o in objects} - {None}):
        for cluster in ("main", "sub"):
            http(f"{sim.server(cluster)}/api/v1/namespaces",
                 json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).encode(), "POST")
    for i in range(copies):
        for res, obj in objects:
            obj = json.loads(json.dumps(obj))
            if res["kind"] != "Node" or i == 0:
                if i:
                    obj["metadata"]["name"] += f"-{i}"
            else:
                continue
            group = f"/apis/{res['group']}/{res['version']}" if res["group"] else f"/api/{res['version']}"
            ns = obj["metadata"].get("namespace")
            path = f"{group}/namespaces/{ns}/{res['plural']}" if ns else f"{group}/{res['plural']}"
            status, text = http(base + path, json.dumps(obj).encode(), "POST")
            if status not in (200, 201, 409):
                fail(f"creating {res['kind']} {obj['metadata']['name']}: {status} {text[:300]}")


def replay_row(rekon, wasm, cases, repeat, work):
    n = len(list(pathlib.Path(cases).glob("*.json")))
    many = work / "many"
    if many.exists():
        shutil.rmtree(many)
    many.mkdir()
    for i in range(repeat):
        for f in pathlib.Path(cases).glob("*.json"):
            shutil.copy(f, many / f"{i}-{f.name}")
    one, _ = run_measured([rekon, "plugin", "replay", wasm, cases])
    all_, rss = run_measured([rekon, "plugin", "replay", wasm, many])
    return {"replay_ms": (all_ - one) / (n * (repeat - 1)) * 1e3, "replay_MiB": rss / 1024}


def wasm_call_ms(host, function="reconcile"):
    """Mean duration of the host's wasm calls of `function` so far
    (`rekon_wasm_call_duration_seconds`: instantiate + call, as in `run`)."""
    _, text = http(f"http://127.0.0.1:{host.port}/metrics")
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("rekon_wasm_call_duration_seconds_") and f'function="{function}"' in line:
            value = float(line.rsplit(" ", 1)[1])
            if line.startswith("rekon_wasm_call_duration_seconds_sum"):
                total += value
            elif line.startswith("rekon_wasm_call_duration_seconds_count"):
                count += value
    return (total / count * 1e3, int(count)) if count else (None, 0)


def host_row(rekon, sim, wasms, cases, family, work, runs, baseline_kib):
    """Cold start, cached starts, RSS idle and busy, calls, hot reload."""
    plugins, cache = work / "plugins", work / "cache"
    for d in (plugins, cache):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
    files = []
    for wasm in wasms:
        target = plugins / pathlib.Path(wasm).name
        shutil.copy(ROOT / wasm, target)
        files.append(target)
    row = {}
    host = Host(rekon, sim, plugins, cache, work / "cold.log")
    row["cold_s"] = host.wait_ready()
    time.sleep(1)
    row["cold_MiB"] = host.rss() / 1024
    host.stop()
    if not wasms:
        return row
    # The reload variant (another digest, the same code) is put into the
    # cache as the compiled original under the variant's digest: the cache
    # is keyed by the sha256 of the component's bytes, and compiling it
    # again would only cost the bench minutes. Each reload checks that
    # nothing was compiled.
    original = files[0].read_bytes()
    new_version = variant(original, "v2")
    digest = hashlib.sha256(original).hexdigest()
    compiled = [f for f in cache.iterdir() if f.name.startswith(digest)]
    if len(compiled) != 1:
        fail(f"expected one cached artifact for {digest} in {cache}, found {compiled}")
    suffix = compiled[0].name[len(digest):]
    shutil.copy(compiled[0], cache / (hashlib.sha256(new_version).hexdigest() + suffix))
    readies, reloads = [], []
    for run in range(runs):
        files[0].write_bytes(original)
        host = Host(rekon, sim, plugins, cache, work / f"run{run}.log")
        readies.append(host.wait_ready())
        if run == 0:
            time.sleep(1)
            row["idle+MiB"] = (host.rss() - baseline_kib) / 1024
            if cases:
                create_objects(sim, primaries(cases, family))
                host.settle()
                row["busy+MiB"] = (host.rss() - baseline_kib) / 1024
                row["call_ms"], row["calls"] = wasm_call_ms(host)
        offset = host.log_size()
        # Written in place, as `cp` does: the watcher sees the writes.
        with open(files[0], "wb") as f:
            f.write(new_version)
        written = time.perf_counter()
        deadline = written + 30
        while not host.logged_since(offset, "replaced plugin"):
            if time.perf_counter() > deadline:
                fail(f"no reload logged; see {host.log_path}")
            time.sleep(0.005)
        reloads.append(time.perf_counter() - written)
        if host.logged_since(offset, "compiled plugin"):
            fail(f"the reload compiled (the bench wants it cached); see {host.log_path}")
        host.stop()
    files[0].write_bytes(original)
    row["ready_s"] = statistics.median(readies)
    row["reload_s"] = statistics.median(reloads)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", help="LABEL=PATH of a rekon binary")
    ap.add_argument("--kube-sim")
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", help="comma-separated plugin labels")
    ap.add_argument("--replay", action="store_true",
                    help="also time `rekon plugin replay` (compiles twice per plugin: slow)")
    args = ap.parse_args()
    os.chdir(ROOT)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    kube_sim = args.kube_sim or next(
        (str(p) for p in (target / "release/kube-sim", target / "debug/kube-sim") if p.exists()), None)
    if not kube_sim:
        fail("no kube-sim binary (cargo build -p kube-sim)")
    builds = [b.split("=", 1) for b in args.builds]
    for _, path in builds:
        if not os.access(path, os.X_OK):
            fail(f"{path}: not an executable")
    for _, wasm, cases, _ in PLUGINS:
        if not (ROOT / wasm).exists():
            fail(f"{wasm} missing (make plugins sdk-plugins)")
    selected = [p for p in PLUGINS if not args.only or p[0] in args.only.split(",")]

    results = {}  # (plugin label, build label) -> row
    # Kept when the bench fails (its logs say why), removed otherwise.
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="rekon-ports-"))
    for blabel, rekon in builds:
        rekon = os.path.abspath(rekon)
        work = tmp / blabel
        work.mkdir()

        def fresh_sim(name):
            (work / name).mkdir()
            return KubeSim(kube_sim, work / name)

        # Each row on a fresh kube-sim: no row sees another row's objects.
        sim = fresh_sim("sim-empty")
        try:
            (work / "empty").mkdir()
            host = Host(rekon, sim, work / "empty", work / "empty", work / "empty.log")
            ready = host.wait_ready()
            time.sleep(1)
            baseline = host.rss()
            host.stop()
        finally:
            sim.stop()
        results[("(no plugin)", blabel)] = {"ready_s": ready, "idle_MiB": baseline / 1024}
        sim = fresh_sim("sim-seeds")
        try:
            seeds = host_row(rekon, sim, [p[1] for p in PLUGINS if p[0].startswith("rust-")], None,
                             None, work, args.runs, baseline)
        finally:
            sim.stop()
        results[("(rust seeds)", blabel)] = {**seeds, "idle_MiB": baseline / 1024 + seeds["idle+MiB"]}
        for label, wasm, cases, family in selected:
            print(f"[{blabel}] {label}…", file=sys.stderr, flush=True)
            row = replay_row(rekon, wasm, cases, args.repeat, work) if args.replay else {}
            sim = fresh_sim(f"sim-{label}")
            try:
                row.update(host_row(rekon, sim, [wasm], cases, family, work, args.runs, baseline))
            finally:
                sim.stop()
            results[(label, blabel)] = row
    shutil.rmtree(tmp)

    columns = [("size_MB", "{:.1f}"), ("call_ms", "{:.3f}"), ("x_rust", "{:.1f}"), ("calls", "{}"),
               ("cold_s", "{:.2f}"), ("cold_MiB", "{:.0f}"), ("ready_s", "{:.2f}"), ("idle_MiB", "{:.0f}"), ("idle+MiB", "{:.0f}"),
               ("busy+MiB", "{:.0f}"), ("reload_s", "{:.2f}")]
    if args.replay:
        columns[3:3] = [("replay_ms", "{:.3f}"), ("replay_MiB", "{:.0f}")]
    for (label, blabel), row in results.items():
        wasm = next((p[1] for p in PLUGINS if p[0] == label), None)
        if wasm:
            row["size_MB"] = os.path.getsize(ROOT / wasm) / 1e6
            family = next(p[3] for p in PLUGINS if p[0] == label)
            rust = results.get((next(p[0] for p in PLUGINS if p[3] == family), blabel))
            if rust and "call_ms" in row:
                row["x_rust"] = row["call_ms"] / rust["call_ms"]
    labels = list(dict.fromkeys(label for label, _ in results))
    blabels = [b for b, _ in builds]
    width = max(12, *(len(b) for b in blabels)) if len(blabels) > 1 else 10
    print()
    print("rekon ports bench (" + ", ".join(f"{b}={p}" for b, p in builds) + ")")
    print("values per cell: " + " / ".join(blabels))
    header = f"{'plugin':<18}" + "".join(f" {c:>{width + 6 * (len(blabels) - 1)}}" for c, _ in columns)
    print(header)
    for label in labels:
        cells = []
        for col, fmt in columns:
            vals = [results.get((label, b), {}).get(col) for b in blabels]
            cells.append(" / ".join("-" if v is None else fmt.format(v) for v in vals))
        print(f"{label:<18}" + "".join(f" {c:>{width + 6 * (len(blabels) - 1)}}" for c in cells))


if __name__ == "__main__":
    main()
