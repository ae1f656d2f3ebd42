#!/usr/bin/env python3
"""Draws `waverunner bench peers`' throughput as grouped bars (log scale).

usage: plot_peers.py CSV PNG

CSV columns: system, set_50, set_p16, closed_loop_50, one_writer_p50_us (empty = not measured).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    series = [
        ("set_50", "redis-benchmark SET, 50 clients"),
        ("set_p16", "SET, pipeline 16"),
        ("closed_loop_50", "50 closed-loop writers (reply = majority, but Redis async)"),
    ]
    names = [r["system"] for r in rows]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(rows) + 2.6))
    for k, (col, label) in enumerate(series):
        ys = [i + (k - 1) * width for i in range(len(rows))]
        xs = [float(r[col]) if r[col] else 0.0 for r in rows]
        bars = ax.barh(ys, xs, height=width, label=label)
        for b, x in zip(bars, xs):
            if x > 0:
                ax.text(x * 1.05, b.get_y() + b.get_height() / 2, f"{x / 1000:.1f} k",
                        va="center", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("writes per second (log scale)")
    ax.set_title("waverunner bench peers: 3 replicas in namespaces, 8-byte values")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
