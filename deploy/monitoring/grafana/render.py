#!/usr/bin/env python3
"""Render rekon's dashboard panels from a real run as one PNG (no Grafana).

The monitoring e2e test evaluates every panel's queries against its real
Prometheus and, with REKON_DASHBOARD_SNAPSHOT=FILE, writes their series
over the run as JSON. This script plots that file in the dashboard's
layout (rows and panels in order, the panels' units and legends):

    REKON_DASHBOARD_SNAPSHOT=/tmp/snapshot.json \\
      cargo test -p rekon-e2e --test monitoring alerts_fire -- --nocapture
    python3 deploy/monitoring/grafana/render.py /tmp/snapshot.json \\
      deploy/monitoring/grafana/dashboard.png

Needs matplotlib (`pip install matplotlib`).
"""

import json
import math
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DASHBOARD = Path(__file__).with_name("rekon-dashboard.json")
UNITS = {"ops": "per second", "s": "seconds", "short": ""}


def legend(template, metric):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), template)


def main(snapshot_path, out_path):
    snapshot = json.loads(Path(snapshot_path).read_text())
    dashboard = json.loads(DASHBOARD.read_text())
    units = {p["title"]: p.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
             for p in dashboard["panels"] if p["type"] != "row"}
    panels = snapshot["panels"]
    cols = 2
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(14, 2.6 * rows), squeeze=False)
    start = min((float(v[0]) for p in panels for t in p["targets"]
                 for r in t["result"] for v in r["values"]), default=0.0)
    for ax, panel in zip(axes.flat, panels):
        ax.set_title(panel["title"], fontsize=10, loc="left")
        ax.set_ylabel(UNITS.get(units.get(panel["title"], "short"), ""), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        shown = 0
        for target in panel["targets"]:
            for series in target["result"]:
                xs = [float(t) - start for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, linewidth=1.2, label=legend(target["legend"], series["metric"]))
                shown += 1
        if shown:
            ax.legend(fontsize=6, loc="upper left", ncol=2, frameon=False)
        else:
            ax.text(0.5, 0.5, "no data in this run", ha="center", va="center",
                    transform=ax.transAxes, fontsize=8, color="grey")
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("seconds into the run", fontsize=8)
    fig.suptitle("rekon dashboard, rendered from the monitoring e2e test's Prometheus", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(out_path, dpi=80)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: render.py SNAPSHOT.json OUT.png")
    main(sys.argv[1], sys.argv[2])
