#!/usr/bin/env python3
"""Plot dcp_a2a_lse_reduce_perf JSON (-J) files: latency vs batch, the fused
collective per protocol against the baseline measured in the same run.
Files of different scatter modes (--scatter) are one curve per mode, each
with its own baselines (a mode's baseline is its own exchange).

    scripts/plot_perf.py -o docs/perf-loopback.png perf-LL128.json perf-LL.json ...
    scripts/plot_perf.py -o docs/perf-scatter.png scatter-head.json scatter-token.json ...
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("json", nargs="+", help="files written by dcp_a2a_lse_reduce_perf -J")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--title", default=None)
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_perf.py needs matplotlib (pip install matplotlib)")

    fig, ax = plt.subplots(figsize=(8, 5))
    baseline_drawn = floor_drawn = False
    meta = None
    runs = []
    for path in args.json:
        with open(path) as f:
            runs.append(json.load(f))
    by_mode = len({run.get("scatter", "head") for run in runs}) > 1
    for run in runs:
        meta = meta or run
        rows = [r for r in run["rows"] if r["rows"] > 0]
        batch = [r["rows"] for r in rows]
        name = run.get("scatter", "head").upper() if by_mode else run["protocol"]
        line, = ax.plot(batch, [r["fusedUs"] for r in rows], marker="o", label="nccl-dcp " + name)
        if by_mode:  # each mode's baselines are its own exchanges
            if any(r["baseUs"] > 0 for r in rows):
                ax.plot(batch, [r["baseUs"] for r in rows], marker="s", color=line.get_color(), linestyle="--",
                        label="baseline: " + run.get("baseline", "?"))
            if run.get("baseline2") and any(r.get("base2Us", 0) > 0 for r in rows):
                ax.plot(batch, [r["base2Us"] for r in rows], marker="^", color=line.get_color(), linestyle=":",
                        label="baseline 2: " + run["baseline2"])
            continue
        # One baseline curve: every run measured it on the same data.
        if not baseline_drawn and any(r["baseUs"] > 0 for r in rows):
            ax.plot(batch, [r["baseUs"] for r in rows], marker="s", color="black", linestyle="--",
                    label="baseline: all-to-all + combine")
            baseline_drawn = True
        if any(r.get("idealUs", 0) > 0 for r in rows) and run["protocol"] in ("LL128", "AUTO"):
            ax.plot(batch, [r["idealUs"] for r in rows], color="grey", linestyle=":",
                    label="ideal bytes at copy bandwidth")
        # The floor measured in the same run (the faster of the peer-write
        # kernel and the copy engine), once.
        if not floor_drawn and any(r.get("floorUs", 0) > 0 for r in rows):
            ax.plot(batch, [r["floorUs"] for r in rows], color="grey", linestyle="-.",
                    label="floor: peer writes / copy engine, same bytes")
            floor_drawn = True
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (rows)")
    ax.set_ylabel("time per call (us, median)")
    title = args.title or "{} {} ranks, {} D={} Hl={} on {}".format(
        meta["mode"], meta["nRanks"], meta["dtype"], meta["headDim"], meta["localHeads"], meta["device"])
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print("wrote", args.output)


if __name__ == "__main__":
    main()
