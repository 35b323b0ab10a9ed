#!/usr/bin/env python3
"""Bench (not a test): where a pooled reconcile's time goes in `rekon run`,
per plugin, as a table (issue 39).

    tests/bench/call_profile.py [--rekon BIN] [--kube-sim BIN] [--rounds N]
                                [--freq HZ] [--env K=V ...] [--no-perf] PLUGIN ...

e.g. `tests/bench/call_profile.py py rust-nodepool`, and the same with
`--env REKON_MEMORY_RESET=whole` to compare the host's memory reset modes.

PLUGIN is py, rust-nodepool, ts or rust-fanout (the ports in dist/sdk-plugins,
the seeds in dist/plugins), or LABEL=JOB:WASM (JOB nodepool or fanout) for
another build. Each runs on a fresh kube-sim as `peers.py` sets it up (nodepool:
--nodes/--pools, fanout: --tests), with `rekon run` given the one plugin and
its component compiled into the --cache-dir beforehand. After the first
convergence:

  nodepool  every pool's tier label changes --rounds times (a merge patch per
            pool, waiting for every Node to carry it each time);
  fanout    every Job in `sub` completes (once).

Printed per plugin, over those changes only (start-up and the first
convergence left out):

  calls     reconcile calls into the plugin (`rekon_wasm_call_duration_seconds`)
  call_ms   their mean wall time (the host metric: slot wait, instantiate, call,
            store drop; it grows with the machine's load and with how many calls
            share its cores)
  cpu_ms    process CPU (user + system) per call: the whole host, watch and
            writes included
  faults    the process's minor page faults per call
  rss_MiB   the host's RSS (VmRSS) after the changes, and its peak (VmHWM)

With perf (default; Linux `perf` must be installed, the run fails without
it), `perf record -g` is attached to the host after it is ready and the
samples are sorted by their stack into the entries below, as a share of
all samples and of those inside a call (`rekon::plugin::call::call`):

  instantiate: start functions   the components' core start functions (for
                                 componentize-py and componentize-js, their
                                 dynamic linker filling the function table with
                                 `ref.func`, in wasmtime's lazy funcref init)
  instantiate: other             pool slot, vmctx, imports, memory image
  call: guest code               the plugin's wasm (interpreter included)
  call: guest page faults        kernel time of faults raised by guest code
                                 (copy-on-write of the memory image, zero fill)
  call: host imports             rekon:plugin/host (cache reads, log, settings)
                                 and WASI
  call: lift/lower               the outcome and arguments across the boundary
  store drop: memory reset       the pool's reset of the freed memory slot
                                 (PAGEMAP_SCAN, memcpy, madvise)
  store drop: other              tables and the rest of the store
  outside the call               the host's other work (watch, queue, writes)

Needs what peers.py needs for its rekon rows (dist/, a kube-sim and a rekon
binary: default target/release, else target/debug), and `perf` for the
breakdown. The binaries need symbols (rekon's release profile keeps them);
`RUSTFLAGS="-C force-frame-pointers=yes"` gives whole host stacks (the
guest's compiled code always keeps frame pointers).
"""

import argparse
import collections
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import peers  # noqa: E402
from idle_clusters import binary  # noqa: E402
from ports import ROOT, KubeSim, fail, wasm_call_ms  # noqa: E402

PLUGINS = {
    "py": ("nodepool", "dist/sdk-plugins/nodepool_py.wasm"),
    "rust-nodepool": ("nodepool", "dist/plugins/nodepool.wasm"),
    "ts": ("fanout", "dist/sdk-plugins/test_fanout_ts.wasm"),
    "rust-fanout": ("fanout", "dist/plugins/test_fanout.wasm"),
}

ENTRIES = [
    "instantiate: start functions",
    "instantiate: other",
    "call: guest code",
    "call: guest page faults",
    "call: host imports",
    "call: lift/lower",
    "store drop: memory reset",
    "store drop: other",
    "call: other host",
]
OUTSIDE = "outside the call"


def classify(stack):
    """The entry of one sample (`stack`: frames, leaf first)."""

    def has(*needles):
        return any(n in f for f in stack for n in needles)

    if not has("rekon::plugin::call::call"):
        return OUTSIDE
    if has("InstancePre<T>::instantiate", "Pre<_T>::instantiate"):
        return "instantiate: start functions" if has("module_start[") else "instantiate: other"
    if has("drop_in_place<wasmtime::runtime::store"):
        return "store drop: memory reset" if has("deallocate_memor") else "store drop: other"
    if has("rekon::plugin::sandbox", "wasmtime_wasi", "rekon::plugin::host_reads", "CaseReads",
           "controller::reads"):
        return "call: host imports"
    if has("exc_page_fault"):
        return "call: guest page faults"
    leaf = stack[0] if stack else ""
    if "wasm[" in leaf or ".cwasm" in leaf or "trampoline" in leaf:
        return "call: guest code"
    if has("::lift", "::lower", "typed::", "Lift", "Lower"):
        return "call: lift/lower"
    return "call: other host"


def breakdown(data):
    out = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"perf script: {out.stderr[-2000:]}")
    counts = collections.Counter()
    for sample in out.stdout.split("\n\n"):
        frames = [line.strip() for line in sample.strip().splitlines()]
        if frames:
            counts[classify(frames)] += 1
    return counts


def stat(pid):
    """(minor faults, CPU seconds) of a process so far."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7]), (int(fields[11]) + int(fields[12])) / peers.CLK_TCK


def profile(label, job, wasm, args, rekon, kube_sim, tmp):
    work = tmp / label
    work.mkdir()
    sim = KubeSim(kube_sim, work)
    perf = None
    try:
        api = peers.Api(sim, "main")
        if job == "nodepool":
            peers.nodepool_setup(api, args.nodes, args.pools)
            clusters = []
        else:
            sub = peers.Api(sim, "sub")
            peers.fanout_setup(api, args.tests)
            clusters = ["sub"]
        cmd, _, _, port = peers.rekon_cmd(rekon, sim, wasm, work, clusters)
        env = dict(os.environ, **dict(e.split("=", 1) for e in args.env))
        proc = peers.Proc(cmd, work / "rekon.log", env=env)
        metrics = types.SimpleNamespace(port=port)
        try:
            if job == "nodepool":
                peers.wait_for(proc, lambda: peers.nodes_lacking(api, "v1") == 0, f"{label}: first", args.timeout)
            else:
                peers.wait_for(proc, lambda: peers.fanout_running(api, sub, args.tests), f"{label}: first", args.timeout)
            if not args.no_perf:
                perf = subprocess.Popen(
                    ["perf", "record", "-F", str(args.freq), "-g", "-o", work / "perf.data", "-p", str(proc.proc.pid)],
                    stdout=subprocess.DEVNULL, stderr=open(work / "perf.log", "wb"))
                time.sleep(0.5)
            faults0, cpu0 = stat(proc.proc.pid)
            calls0 = wasm_call_ms(metrics)
            if job == "nodepool":
                for r in range(args.rounds):
                    tier = f"v{r + 2}"
                    peers.parallel(lambda p, tier=tier: api.request(
                        "PATCH", f"{peers.NODEPOOLS}/pool-{p:03}", {"spec": {"labels": {peers.TIER: tier}}},
                        ctype="application/merge-patch+json"), range(args.pools))
                    peers.wait_for(proc, lambda tier=tier: peers.nodes_lacking(api, tier) == 0,
                                   f"{label}: round {r}", args.timeout)
            else:
                peers.fanout_complete(sub)
                peers.wait_for(proc, lambda: peers.phases(api).get("finished", 0) == args.tests,
                               f"{label}: finished", args.timeout)
            time.sleep(1)
            faults1, cpu1 = stat(proc.proc.pid)
            calls1 = wasm_call_ms(metrics)
            rss = (proc.mem_mib("VmRSS"), proc.mem_mib("VmHWM"))
            if perf is not None:
                perf.send_signal(signal.SIGINT)
                perf.wait(120)
                if perf.returncode not in (0, -signal.SIGINT):
                    fail(f"perf record exited {perf.returncode}; see {work / 'perf.log'}")
        finally:
            proc.stop()
    finally:
        if perf is not None and perf.poll() is None:
            perf.kill()
        sim.stop()
    calls = calls1[1] - calls0[1]
    if calls <= 0:
        fail(f"{label}: no reconcile call during the changes")
    call_ms = ((calls1[0] * calls1[1]) - (calls0[0] or 0) * calls0[1]) / calls
    row = {"calls": calls, "call_ms": call_ms, "cpu_ms": (cpu1 - cpu0) / calls * 1e3,
           "faults": (faults1 - faults0) / calls, "rss": rss}
    counts = breakdown(str(work / "perf.data")) if perf is not None else None
    return row, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plugins", nargs="+", help="py, rust-nodepool, ts, rust-fanout or LABEL=JOB:WASM")
    ap.add_argument("--rekon")
    ap.add_argument("--kube-sim")
    ap.add_argument("--nodes", type=int, default=300)
    ap.add_argument("--pools", type=int, default=30)
    ap.add_argument("--tests", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--freq", type=int, default=4000)
    ap.add_argument("--env", action="append", default=[], help="K=V for the host's environment")
    ap.add_argument("--no-perf", action="store_true", help="only the per-call figures")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    os.chdir(ROOT)
    if not args.no_perf and shutil.which("perf") is None:
        fail("perf is not installed (apt-get install linux-perf), or pass --no-perf")
    rekon, kube_sim = (binary(name, given).resolve() for name, given in
                       (("rekon", args.rekon), ("kube-sim", args.kube_sim)))
    chosen = []
    for p in args.plugins:
        if p in PLUGINS:
            job, wasm = PLUGINS[p]
            chosen.append((p, job, ROOT / wasm))
        elif "=" in p and ":" in p:
            label, rest = p.split("=", 1)
            job, wasm = rest.split(":", 1)
            if job not in ("nodepool", "fanout"):
                fail(f"{p}: JOB is nodepool or fanout")
            chosen.append((label, job, pathlib.Path(wasm).resolve()))
        else:
            fail(f"unknown plugin {p}")
    for _, _, wasm in chosen:
        if not wasm.is_file():
            fail(f"{wasm} missing (make plugins sdk-plugins)")
    print(f"rekon {rekon}; nodepool {args.nodes} nodes / {args.pools} pools x {args.rounds} rounds, "
          f"fanout {args.tests} Tests; {' '.join(args.env)}")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="rekon-call-profile-"))
    results = []
    for label, job, wasm in chosen:
        results.append((label, *profile(label, job, wasm, args, rekon, kube_sim, tmp)))
    width = max(len(r[0]) for r in results) + 2
    print()
    print(f"{'':<{width}}{'calls':>8}{'call_ms':>10}{'cpu_ms':>10}{'faults':>9}{'rss_MiB':>10}{'peak':>7}")
    for label, row, _ in results:
        print(f"{label:<{width}}{row['calls']:>8}{row['call_ms']:>10.3f}{row['cpu_ms']:>10.3f}{row['faults']:>9.0f}"
              f"{row['rss'][0]:>10.0f}{row['rss'][1]:>7.0f}")
    profiled = [(label, counts) for label, _, counts in results if counts]
    if profiled:
        print()
        print("share of the samples inside a call (in brackets: of all samples)")
        head = "".join(f"{label:>22}" for label, _ in profiled)
        print(f"{'entry':<32}{head}")
        for entry in ENTRIES + [OUTSIDE]:
            cells = ""
            for _, counts in profiled:
                total = sum(counts.values())
                inside = total - counts[OUTSIDE]
                share = counts[entry] / inside * 100 if entry != OUTSIDE and inside else None
                cells += f"{'' if share is None else f'{share:.1f}%':>13} ({counts[entry] / total * 100:4.1f}%)"
            print(f"{entry:<32}{cells}")
        print(f"{'samples':<32}" + "".join(f"{sum(c.values()):>22}" for _, c in profiled))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
