#!/usr/bin/env python3
"""Bench (not a test): how a host gets its plugins' code on a cold node
(issue 39), per plugin, side by side:

    tests/bench/cold_start.py [--rekon BIN] [--kube-sim BIN] [--runs N]
                              [--plugin LABEL ...] [--mode PATH ...]

Per plugin (the Rust seeds and their TypeScript and Python ports; `make
plugins sdk-plugins`) and per path, `rekon run` on a fresh kube-sim with the
one plugin in its --plugins directory:

  compiled     empty --cache-dir: the host compiles (what a new node, a new
               pod or a new version did before precompiled code)
  cached       the compiled-plugin cache filled by an earlier start
  bounded      empty --cache-dir, `--compile-memory-limit` (--bound MiB):
               the compile in a child process, outside the host's peak
  precompiled  empty --cache-dir, `NAME.cwasm` (`rekon plugin compile
               --precompiled`) and its cosign blob signature beside the
               module, the key given with --signature-key

With --memory-limit MIB the host runs in a memory cgroup of that limit (as a
Pod's limit: cgroup v2 `memory.max`, or v1 `memory.limit_in_bytes`; needs
root) and the last column says whether it held: `held` (ready, and still
running 2 s later) or `OOM-killed`.

Columns: ready_s (start to /readyz 200, median of --runs), peak_MiB (the
host's VmHWM once ready: its peak RSS, compiling included), path (what the
host's `rekon_plugin_code_load_duration_seconds` counted: compiled, cached
or precompiled) and code_ms (the time it says it took). Needs python3's
`cryptography` (the blob signatures, as the e2e tests' cosign side).
"""

import argparse
import base64
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ports  # noqa: E402  (the kube-sim and host helpers)

ROOT = ports.ROOT

PLUGINS = [
    ("rust-test-fanout", "dist/plugins/test_fanout.wasm"),
    ("ts-test-fanout", "dist/sdk-plugins/test_fanout_ts.wasm"),
    ("rust-nodepool", "dist/plugins/nodepool.wasm"),
    ("py-nodepool", "dist/sdk-plugins/nodepool_py.wasm"),
]


MODES = ("compiled", "bounded", "cached", "precompiled")


def sign_blob(key_pem, path):
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = load_pem_private_key(key_pem, password=None)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        sig = key.sign(path.read_bytes(), ec.ECDSA(hashes.SHA256()))
    else:
        sig = key.sign(path.read_bytes())
    pathlib.Path(str(path) + ".sig").write_text(base64.b64encode(sig).decode() + "\n")


def peak_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    ports.fail(f"no VmHWM for {pid}")


def code_path(port):
    """(path, ms) from the host's code-load histogram."""
    _, text = ports.http(f"http://127.0.0.1:{port}/metrics")
    for line in text.splitlines():
        if line.startswith("rekon_plugin_code_load_duration_seconds_sum{"):
            path = line.split('path="', 1)[1].split('"', 1)[0]
            return path, float(line.rsplit(" ", 1)[1]) * 1e3
    return "?", float("nan")


class Cgroup:
    """A memory cgroup with a limit (v2 if mounted so, else v1's memory
    controller), removed by close()."""

    def __init__(self, mib):
        root = pathlib.Path("/sys/fs/cgroup")
        name = f"rekon-cold-start-{os.getpid()}"
        if (root / "cgroup.controllers").exists():
            self.dir, limit = root / name, "memory.max"
        else:
            self.dir, limit = root / "memory" / name, "memory.limit_in_bytes"
        self.dir.mkdir()
        (self.dir / limit).write_text(str(mib << 20))
        self.peak_file = self.dir / ("memory.peak" if limit == "memory.max"
                                     else "memory.max_usage_in_bytes")

    def peak_mib(self):
        """The cgroup's peak charge (what the limit is checked against:
        anonymous memory and the page cache first touched from inside)."""
        try:
            return int(self.peak_file.read_text().split()[0]) / (1 << 20)
        except (OSError, ValueError, IndexError):
            return float("nan")

    def enter(self):
        (self.dir / "cgroup.procs").write_text(str(os.getpid()))

    def close(self):
        try:
            self.dir.rmdir()
        except OSError:
            pass


class Host(ports.Host):
    def __init__(self, rekon, sim, plugins, cache, log, extra, cgroup=None):
        self.port = ports.free_port()
        self.log_path = log
        self.log = open(log, "wb")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [rekon, "run", "--kubeconfig", sim.kubeconfig, "--context", "main",
             "--cluster", "sub=sub", "--plugins", plugins, "--cache-dir", cache,
             "--install-crds", "--log-format", "json",
             "--metrics-addr", f"127.0.0.1:{self.port}", "--probe-addr", f"127.0.0.1:{self.port}"]
            + extra,
            stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=cgroup.enter if cgroup else None)


def one(rekon, sim_bin, work, wasm, mode, key, bound=450, limit=None):
    plugins = work / "plugins"
    shutil.rmtree(plugins, ignore_errors=True)
    plugins.mkdir()
    target = plugins / wasm.name
    shutil.copy(wasm, target)
    cache = work / "cache"
    extra = []
    if mode != "cached":
        shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(exist_ok=True)
    if mode == "bounded":
        extra = ["--compile-memory-limit", str(bound)]
    if mode == "precompiled":
        shutil.copy(wasm.with_suffix(".cwasm"), target.with_suffix(".cwasm"))
        key_pem = key.with_suffix(".key").read_bytes()
        sign_blob(key_pem, target)
        sign_blob(key_pem, target.with_suffix(".cwasm"))
        extra = ["--signature-key", str(key.with_suffix(".pub"))]
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    sim = ports.KubeSim(sim_bin, run)
    cgroup = Cgroup(limit) if limit else None
    host = Host(rekon, sim, plugins, cache, run / "rekon.log", extra, cgroup)
    try:
        if cgroup:
            ready = wait_ready_or_exit(host)
            if ready is None:
                return float("nan"), 0, "-", float("nan"), "OOM-killed"
            time.sleep(2)
            if host.proc.poll() is not None:
                return ready, 0, "-", float("nan"), "OOM-killed"
            held = f"held (cgroup peak {cgroup.peak_mib():.0f} MiB)"
        else:
            ready, held = host.wait_ready(), "-"
        peak = peak_kib(host.proc.pid)
        path, ms = code_path(host.port)
    finally:
        host.stop()
        sim.stop()
        if cgroup:
            cgroup.close()
    return ready, peak, path, ms, held


def wait_ready_or_exit(host, timeout=400):
    """Seconds to ready, or None when the host died first (killed by the
    cgroup's limit)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if host.proc.poll() is not None:
            return None
        status, _ = ports.http(f"http://127.0.0.1:{host.port}/readyz", timeout=0.5)
        if status == 200:
            return time.perf_counter() - host.started
        time.sleep(0.01)
    ports.fail(f"rekon run not ready after {timeout}s; see {host.log_path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rekon", default=str(ROOT / "target/debug/rekon"))
    ap.add_argument("--kube-sim", default=str(ROOT / "target/debug/kube-sim"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bound", type=int, default=450, help="MiB for the bounded rows")
    ap.add_argument("--plugin", action="append", choices=[p[0] for p in PLUGINS],
                    help="only this plugin (repeatable; default: all)")
    ap.add_argument("--mode", action="append", choices=MODES,
                    help="only this path (repeatable; default: all)")
    ap.add_argument("--memory-limit", type=int, metavar="MIB",
                    help="run the host in a memory cgroup of this limit (root)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        key = work / "bench"
        subprocess.run([args.rekon, "plugin", "keygen", "--out", key], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        limit = args.memory_limit
        print("| plugin | path | ready_s | peak_MiB | loaded as | code_ms |"
              + (f" {limit} MiB limit |" if limit else ""))
        print("|---|---|---:|---:|---|---:|" + ("---|" if limit else ""))
        for label, rel in PLUGINS:
            if args.plugin and label not in args.plugin:
                continue
            src = ROOT / rel
            if not src.exists():
                ports.fail(f"{src} is missing: make plugins sdk-plugins")
            wasm = work / src.name
            shutil.copy(src, wasm)
            subprocess.run([args.rekon, "plugin", "compile", "--precompiled", "--cache-dir",
                            work / "precompile-cache", wasm], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for mode in args.mode or MODES:
                runs = []
                for _ in range(args.runs):
                    if mode == "cached":
                        one(args.rekon, args.kube_sim, work, wasm, "compiled", key)
                    runs.append(one(args.rekon, args.kube_sim, work, wasm, mode, key, args.bound,
                                    limit))
                ready = statistics.median(r[0] for r in runs)
                peak = max(r[1] for r in runs) / 1024
                path = ",".join(sorted({r[2] for r in runs}))
                ms = statistics.median(r[3] for r in runs)
                held = ",".join(sorted({r[4] for r in runs}))
                print(f"| {label} | {mode} | {ready:.2f} | {peak:.0f} | {path} | {ms:.0f} |"
                      + (f" {held} |" if limit else ""), flush=True)


if __name__ == "__main__":
    main()
