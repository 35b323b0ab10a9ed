"""``rekon-py-build APP -o OUT.wasm [--wit DIR]``: the component build.

Runs componentize-py against the rekon WIT (world ``plugin``) on the app
module ``APP`` (which defines ``Guest = export_plugin(...)``), with the
current directory and this SDK on the module path.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def find_wit(explicit: str | None) -> Path:
    """The WIT: ``--wit``, or the one shipped in the package (a link to the repository's ``wit/``)."""
    candidates = [Path(explicit)] if explicit else [Path(__file__).parent / "wit"]
    for c in candidates:
        if (c / "world.wit").is_file():
            return c
    sys.exit(f"rekon-py-build: no WIT found (looked in {', '.join(map(str, candidates))}); pass --wit DIR (the rekon repository's wit/)")


def main() -> None:
    p = argparse.ArgumentParser(prog="rekon-py-build")
    p.add_argument("app", help="the app module (defines Guest = export_plugin(...))")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--wit")
    args = p.parse_args()
    wit = find_wit(args.wit)
    sdk = Path(__file__).resolve().parent.parent
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    exe = shutil.which("componentize-py")
    if exe is None:
        sys.exit("rekon-py-build: componentize-py is not installed: pip install 'componentize-py==0.25.1'")
    cmd = [exe, "-d", str(wit), "-w", "plugin", "componentize",
           "-p", ".", "-p", str(sdk), args.app, "-o", args.out]
    done = subprocess.run(cmd)
    if done.returncode != 0:
        sys.exit(f"rekon-py-build: componentize-py failed ({done.returncode})")
    size = os.path.getsize(args.out) / 1048576
    print(f"rekon-py-build: {args.out} ({size:.1f} MiB) in {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
