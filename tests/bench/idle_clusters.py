#!/usr/bin/env python3
"""Bench (not a test): what an idle engaged cluster costs `rekon run`.

    tests/bench/idle_clusters.py [--rekon BIN] [--kube-sim BIN] [--tls]
                                 [--counts 0,25,50,100] [--plugin WASM]

Per count N: kube-sim serving `main` and N more clusters (nothing in them),
`rekon run` with a plugin that watches its primary kind and its children in
every cluster (default: the test-fanout seed, dist/plugins/test_fanout.wasm,
CRDs installed by --install-crds) and `--cluster cI=cI` for each, the
compiled plugin already in --cache-dir. Once /readyz answers 200 and 3 s
have passed: the host's RSS (VmRSS) and threads. The last column is the RSS
added per idle cluster against the N=0 row (issue 21's goal: at most 1 MiB).
Binaries default to target/release, else target/debug (CARGO_TARGET_DIR is
honoured).
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ports import ROOT, fail, free_port, http, rss_kib  # noqa: E402


def binary(name, given):
    if given:
        return pathlib.Path(given)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("release", "debug"):
        path = target / profile / name
        if path.is_file():
            return path
    fail(f"no {name} binary under {target}; build it or pass its path")


def wait_until(check, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.1)
    fail(f"timed out waiting for {what}")


def measure(rekon, sim, plugin, count, tls, work):
    """RSS (MiB) and threads of `rekon run` with `count` idle clusters; the
    compiled-plugin cache is shared by every run in `work`."""
    cache = work / "cache"
    work = pathlib.Path(tempfile.mkdtemp(dir=work, prefix=f"{count}-"))
    names = ["main"] + [f"c{i}" for i in range(1, count + 1)]
    kubeconfig = work / f"kubeconfig-{count}"
    sim_cmd = [sim, "--clusters", ",".join(names), "--kubeconfig", kubeconfig,
               "--port-base", str(free_port())]
    if tls:
        sim_cmd.append("--tls")
    sim_log = open(work / f"kube-sim-{count}.log", "wb")
    sim_proc = subprocess.Popen(sim_cmd, stdout=sim_log, stderr=subprocess.STDOUT)
    rekon_proc = None
    try:
        wait_until(lambda: kubeconfig.exists() and kubeconfig.stat().st_size > 0, "kube-sim's kubeconfig")
        time.sleep(0.5)
        plugins = work / f"plugins-{count}"
        plugins.mkdir()
        shutil.copy(plugin, plugins)
        probe = free_port()
        cmd = [rekon, "run", "--kubeconfig", kubeconfig, "--context", "main",
               "--plugins", plugins, "--cache-dir", cache, "--install-crds",
               "--probe-addr", f"127.0.0.1:{probe}", "--metrics-addr", f"127.0.0.1:{probe}"]
        for name in names[1:]:
            cmd += ["--cluster", f"{name}={name}"]
        rekon_log = open(work / f"rekon-{count}.log", "wb")
        rekon_proc = subprocess.Popen(cmd, stdout=rekon_log, stderr=subprocess.STDOUT)
        wait_until(lambda: http(f"http://127.0.0.1:{probe}/readyz")[0] == 200,
                   f"rekon ready with {count} idle clusters (see {work}/rekon-{count}.log)", timeout=120)
        time.sleep(3)
        if rekon_proc.poll() is not None:
            fail(f"rekon exited {rekon_proc.returncode}; see {work}/rekon-{count}.log")
        rss = rss_kib(rekon_proc.pid) / 1024
        threads = len(os.listdir(f"/proc/{rekon_proc.pid}/task"))
        return rss, threads
    finally:
        if rekon_proc is not None:
            rekon_proc.terminate()
            rekon_proc.wait(timeout=30)
        sim_proc.terminate()
        sim_proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rekon")
    ap.add_argument("--kube-sim")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--counts", default="0,25,50,100")
    ap.add_argument("--plugin", default=str(ROOT / "dist/plugins/test_fanout.wasm"))
    args = ap.parse_args()
    rekon = binary("rekon", args.rekon)
    sim = binary("kube-sim", args.kube_sim)
    plugin = pathlib.Path(args.plugin)
    if not plugin.is_file():
        fail(f"{plugin} is missing (make plugins)")
    counts = [int(c) for c in args.counts.split(",")]
    if counts[0] != 0:
        fail("the first count must be 0: the other rows are measured against it")
    with tempfile.TemporaryDirectory(prefix="rekon-idle-") as tmp:
        work = pathlib.Path(tmp)
        # Compile once into the cache, so every row maps the same code.
        measure(rekon, sim, plugin, 0, args.tls, work)
        print(f"idle clusters: {rekon} with {plugin.name}{' over TLS' if args.tls else ''}")
        print(f"{'clusters':>9} {'RSS MiB':>9} {'threads':>8} {'MiB per idle cluster':>21}")
        base = None
        for count in counts:
            rss, threads = measure(rekon, sim, plugin, count, args.tls, work)
            if base is None:
                base = rss
            per = f"{(rss - base) / count:.2f}" if count else "-"
            print(f"{count:>9} {rss:>9.1f} {threads:>8} {per:>21}")


if __name__ == "__main__":
    main()
