#!/usr/bin/env python3
"""Bench (not a test): one misbehaving plugin beside the seed NodePool
plugin, for one or more builds of rekon (and kube-sim) side by side.

    tests/bench/containment.py [--cases a,b] LABEL=REKON[,KUBE_SIM] ...

e.g. `tests/bench/containment.py before=/tmp/old/rekon,/tmp/old/kube-sim
after=target/debug/rekon,target/debug/kube-sim`. Needs dist/plugins/nodepool.wasm
(make plugins) and dist/test-plugins/chaos-v1.wasm with the modes `sleep`,
`big-N`, `deep-N` (make test-plugins), and python3's standard library.

Per build and per misbehaviour (a chaos mode, or `none`), on a fresh
kube-sim, `rekon run` with nodepool and chaos: the sample Nodes, eight
ConfigMaps in the mode, two seconds of it, then the sample NodePools:

  converge_s  from applying the NodePools to both pools' RuntimeClasses
              existing (nodepool's reconciles done beside the hostile one)
  peak_MiB    the host's peak RSS (VmHWM) over the whole run
  term_s      SIGTERM to exit (killed after 60 s: "killed")
  contained   the host's rekon_plugin_contained_total for chaos, by reason
"""

import argparse
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ports import Host, KubeSim, fail, http  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "deploy/samples"
CASES = ["none", "sleep", "loop", "oom", "panic", "flood-100000", "big-20480", "deep-1000"]


def kubectl(sim, *args, body=None):
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(sim.kubeconfig), "--context", "main", *args],
        input=body, capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


def peak_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def contained(host):
    _, text = http(f"http://127.0.0.1:{host.port}/metrics")
    found = {}
    for line in text.splitlines():
        if line.startswith("rekon_plugin_contained_total{") and 'plugin="chaos"' in line:
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            found[reason] = int(float(line.rsplit(" ", 1)[1]))
    return ",".join(f"{r}={n}" for r, n in sorted(found.items())) or "-"


def row(rekon, sim_bin, mode, work, cache):
    work.mkdir(parents=True)
    plugins = work / "plugins"
    plugins.mkdir()
    (plugins / "nodepool.wasm").write_bytes((ROOT / "dist/plugins/nodepool.wasm").read_bytes())
    (plugins / "chaos.wasm").write_bytes((ROOT / "dist/test-plugins/chaos-v1.wasm").read_bytes())
    sim = KubeSim(sim_bin, work)
    host = Host(rekon, sim, plugins, cache, work / "rekon.log")
    try:
        host.wait_ready()
        code, out = kubectl(sim, "apply", "-f", str(SAMPLES / "nodes.yaml"))
        if code:
            fail(out)
        if mode != "none":
            for i in range(8):
                cm = (f'{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"hostile-{i}",'
                      f'"namespace":"default"}},"data":{{"mode":"{mode}"}}}}')
                code, out = kubectl(sim, "apply", "-f", "-", body=cm)
                if code:
                    fail(out)
        time.sleep(2)
        started = time.perf_counter()
        code, out = kubectl(sim, "apply", "-f", str(SAMPLES / "nodepools.yaml"))
        while code:  # the CRD is installed once nodepool loads
            if time.perf_counter() - started > 60:
                fail(out)
            time.sleep(0.1)
            code, out = kubectl(sim, "apply", "-f", str(SAMPLES / "nodepools.yaml"))
        converge = None
        while time.perf_counter() - started < 120:
            code, _ = kubectl(sim, "get", "runtimeclass", "node-pool-gpu", "node-pool-batch")
            if code == 0:
                converge = time.perf_counter() - started
                break
            time.sleep(0.05)
        peak = peak_kib(host.proc.pid)
        reasons = contained(host)
    finally:
        term = time.perf_counter()
        host.proc.send_signal(signal.SIGTERM)
        try:
            host.proc.wait(60)
            took = f"{time.perf_counter() - term:.2f}"
        except subprocess.TimeoutExpired:
            host.proc.kill()
            host.proc.wait()
            took = "killed"
        host.log.close()
        sim.stop()
    conv = f"{converge:.2f}" if converge is not None else ">120"
    return conv, peak / 1024, took, reasons


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("builds", nargs="+", help="LABEL=REKON[,KUBE_SIM]")
    args = ap.parse_args()
    builds = []
    for b in args.builds:
        label, _, paths = b.partition("=")
        rekon, _, sim = paths.partition(",")
        builds.append((label, rekon, sim or str(ROOT / "target/debug/kube-sim")))
    print(f"| misbehaviour | build | converge_s | peak_MiB | term_s | contained |")
    print("|---|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="rekon-contain-bench-") as tmp:
        for mode in args.cases.split(","):
            for label, rekon, sim in builds:
                work = pathlib.Path(tmp) / f"{label}-{mode}"
                # One compiled cache per build: rows measure the run, not
                # the compile.
                cache = pathlib.Path(tmp) / f"{label}-cache"
                conv, peak, took, reasons = row(rekon, sim, mode, work, cache)
                print(f"| {mode} | {label} | {conv} | {peak:.0f} | {took} | {reasons} |", flush=True)


if __name__ == "__main__":
    main()
