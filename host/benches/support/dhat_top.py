#!/usr/bin/env python3
"""Largest allocation sites of a dhat heap profile (`--features dhat-heap`).

    python3 host/benches/support/dhat_top.py dhat-heap-rekon-wasm-1000.json [N] [gb|eb|tb]

Sorts program points by bytes live at the global peak (`gb`, default), at
the end (`eb`) or allocated in total (`tb`), and names each by its first
frames outside the allocator, std and alloc.
"""
import json
import sys

SKIP = ("alloc::", "core::", "std::", "dhat::", "<alloc::", "<core::", "hashbrown::", "<hashbrown::",
        "__rust", "<std::", "<dhat::", "[root]", "<T as alloc", "<T as core", "<[T]")


# Source paths of the standard library and the allocator's helpers.
STD_PATHS = ("src/raw_vec", "alloc/src", "btree/", "collections/", "src/vec/", "src/raw/mod.rs",
             "src/string.rs", "src/boxed.rs", "src/sync.rs", "src/rc.rs", "src/slice.rs",
             "src/str.rs", "src/fmt.rs", "src/borrow.rs", "src/clone.rs", "src/map.rs", "src/set.rs")


def site(frames, ftbl, depth=4):
    names = []
    for f in frames:
        text = ftbl[f]
        # "0x...: function (file:line:col)"
        fn = text.split(": ", 1)[-1]
        where = fn.rsplit(" (", 1)[-1]
        if fn.startswith(SKIP) or where.startswith(STD_PATHS):
            continue
        names.append(fn if len(fn) < 160 else fn[:157] + "...")
        if len(names) == depth:
            break
    return names


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    key = sys.argv[3] if len(sys.argv) > 3 else "gb"
    data = json.load(open(path))
    pps = data["pps"]
    ftbl = data["ftbl"]
    total = sum(p.get(key, 0) for p in pps)
    print(f"{path}: {total / 2**20:.1f} MiB by {key} over {len(pps)} sites")
    # Group by the first meaningful frame so one site is not split by callers.
    groups = {}
    for p in pps:
        names = site(p["fs"], ftbl, depth=3)
        label = " <- ".join(names) or "?"
        g = groups.setdefault(label, [0, 0])
        g[0] += p.get(key, 0)
        g[1] += p.get(key + "k", 0) if key != "tb" else p.get("tbk", 0)
    for label, (b, blocks) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:n]:
        print(f"{b / 2**20:8.2f} MiB {blocks:>9} blocks  {label}")


if __name__ == "__main__":
    main()
