"""``rekon-py-build APP -o OUT.wasm [--wit DIR] [--world W]``: the component build.

Runs componentize-py against the rekon WIT on the app module ``APP`` (which
defines ``Guest = export_plugin(...)``), with the current directory and
this SDK on the module path. The world is ``plugin``, ``admission-plugin``
when the module also defines ``Admission`` at top level (``Admission =
export_admission(...)``), ``conversion-plugin`` when it defines
``Conversion`` (``Conversion = export_conversion(...)``), or
``admission-conversion-plugin`` with both; with ``Policies``
(``Policies = export_policies(...)``) too, ``policies-plugin``,
``admission-policies-plugin``, ``conversion-policies-plugin`` or
``api-plugin``; read from its source without
running it; ``--world`` says otherwise.
"""
from __future__ import annotations

import argparse
import ast
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


#: The world by (binds ``Admission``, binds ``Conversion``, binds ``Policies``).
WORLDS = {
    (False, False, False): "plugin",
    (True, False, False): "admission-plugin",
    (False, True, False): "conversion-plugin",
    (True, True, False): "admission-conversion-plugin",
    (False, False, True): "policies-plugin",
    (True, False, True): "admission-policies-plugin",
    (False, True, True): "conversion-policies-plugin",
    (True, True, True): "api-plugin",
}


def world_of(app: str) -> str:
    """The world of ``APP``'s module by the names it binds at top level (see the module)."""
    path = Path(*app.split(".")).with_suffix(".py")
    if not path.is_file():
        path = Path(*app.split("."), "__init__.py")
    if not path.is_file():
        sys.exit(f"rekon-py-build: no module {app} in {Path.cwd()} (looked for {path})")
    names: set[str] = set()

    def bound(body: list) -> None:
        # Top-level statements, through `try`/`if`/`with` (an app module may
        # guard its exports with `try: ... except ImportError`), not into
        # functions or classes.
        for node in body:
            if isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.ClassDef):
                names.add(node.name)
            for child in ("body", "orelse", "finalbody"):
                if isinstance(node, (ast.Try, ast.If, ast.With)) and hasattr(node, child):
                    bound(getattr(node, child))
            if isinstance(node, ast.Try):
                for h in node.handlers:
                    bound(h.body)

    bound(ast.parse(path.read_text(), str(path)).body)
    return WORLDS[("Admission" in names, "Conversion" in names, "Policies" in names)]


def main() -> None:
    p = argparse.ArgumentParser(prog="rekon-py-build")
    p.add_argument("app", help="the app module (defines Guest = export_plugin(...))")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--wit")
    p.add_argument("--world", choices=sorted(WORLDS.values()), help="default: from the app module's top-level names")
    args = p.parse_args()
    wit = find_wit(args.wit)
    world = args.world or world_of(args.app)
    sdk = Path(__file__).resolve().parent.parent
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    exe = shutil.which("componentize-py")
    if exe is None:
        sys.exit("rekon-py-build: componentize-py is not installed: pip install 'componentize-py==0.25.1'")
    cmd = [exe, "-d", str(wit), "-w", world, "componentize",
           "-p", ".", "-p", str(sdk), args.app, "-o", args.out]
    done = subprocess.run(cmd)
    if done.returncode != 0:
        sys.exit(f"rekon-py-build: componentize-py failed ({done.returncode})")
    size = os.path.getsize(args.out) / 1048576
    print(f"rekon-py-build: {args.out} (world {world}, {size:.1f} MiB) in {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
