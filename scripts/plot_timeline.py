#!/usr/bin/env python3
"""Plots a throughput timeline written by `waverunner timeline` (docs/chaos.md).

    plot_timeline.py IN.csv OUT.png [--title T] [--mark T_MS:LABEL ...]

IN.csv has a header `t_ms,ops` and one row per 100 ms bucket: operations completed in
[t_ms, t_ms + 100). The plot shows throughput in thousands of operations per second, with a
vertical line and a label at every --mark (e.g. `10000:leader halted`).
"""

import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("png")
    p.add_argument("--title", default="")
    p.add_argument("--mark", action="append", default=[], help="T_MS:LABEL")
    a = p.parse_args()

    ts, ops = [], []
    with open(a.csv, newline="") as f:
        r = csv.DictReader(f)
        if r.fieldnames != ["t_ms", "ops"]:
            print(f"{a.csv}: expected the header t_ms,ops, got {r.fieldnames}", file=sys.stderr)
            return 1
        for row in r:
            ts.append(int(row["t_ms"]) / 1000.0)
            ops.append(int(row["ops"]))
    if not ts:
        print(f"{a.csv}: no rows", file=sys.stderr)
        return 1
    bucket_s = (ts[1] - ts[0]) if len(ts) > 1 else 0.1
    kops = [n / bucket_s / 1000.0 for n in ops]

    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=120)
    ax.step(ts, kops, where="post", color="#1f5fa8", linewidth=1.2)
    ax.fill_between(ts, kops, step="post", alpha=0.15, color="#1f5fa8")
    top = max(kops) if max(kops) > 0 else 1.0
    for i, m in enumerate(a.mark):
        t_ms, _, label = m.partition(":")
        t = int(float(t_ms)) / 1000.0
        ax.axvline(t, color="#c0392b", linestyle="--", linewidth=1)
        ax.text(t, top * (1.02 - 0.1 * (i % 2)), " " + label, color="#c0392b",
                fontsize=8, va="top")
    ax.set_xlim(0, ts[-1] + bucket_s)
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput (kops/s, per 100 ms)")
    if a.title:
        ax.set_title(a.title, fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
