#!/usr/bin/env python3
"""Plot dcp_a2a_lse_reduce_perf JSON (-J) files: latency vs batch, the fused
collective per protocol against the baseline measured in the same run.
Files of different scatter modes (--scatter) are one curve per mode, each
with its own baselines (a mode's baseline is its own exchange). Reads
today's files (nccl-tests' results[]) and the older ones of docs/data
(rows[]) alike: scripts/perf_json.py.

    scripts/plot_perf.py -o docs/perf-loopback.png perf-LL128.json perf-LL.json ...
    scripts/plot_perf.py -o docs/perf-scatter.png scatter-head.json scatter-token.json ...
    scripts/plot_perf.py -o docs/perf-cp.png perf-cp2-head.json perf-cp16-head.json ...   (curves "cp N MODE")
"""
import argparse
import sys

import perf_json


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
    runs = [perf_json.load(path) for path in args.json]
    by_ranks = len({m["n_ranks"] for m, _ in runs}) > 1  # perf-cp's tables side by side
    by_mode = by_ranks or len({(m["scatter"], m["wire"]) for m, _ in runs}) > 1
    statistics = set()
    for run, all_rows in runs:
        meta = meta or run
        statistics.add(run["statistic"])
        rows = [r for r in all_rows if r["rows"] > 0]
        batch = [r["rows"] for r in rows]
        name = run["scatter"].upper() if by_mode else run["protocol"]
        if by_mode and run["wire"] != "native":
            name += " " + run["wire"]
        if by_ranks:
            name = "cp {} {}".format(run["n_ranks"], name)
        line, = ax.plot(batch, [r["fused_us"] for r in rows], marker="o", label="nccl-dcp " + name)
        if by_mode:  # each mode's baselines are its own exchanges
            if any(r["base_us"] > 0 for r in rows):
                ax.plot(batch, [r["base_us"] for r in rows], marker="s", color=line.get_color(), linestyle="--",
                        label="baseline: " + (run["baseline"] or "?"))
            if run["baseline2"] and any(r["base2_us"] > 0 for r in rows):
                ax.plot(batch, [r["base2_us"] for r in rows], marker="^", color=line.get_color(), linestyle=":",
                        label="baseline 2: " + run["baseline2"].split(" (")[0])
            continue
        # One baseline curve: every run measured it on the same data.
        if not baseline_drawn and any(r["base_us"] > 0 for r in rows):
            ax.plot(batch, [r["base_us"] for r in rows], marker="s", color="black", linestyle="--",
                    label="baseline: all-to-all + combine")
            baseline_drawn = True
        if any(r["ideal_us"] > 0 for r in rows) and run["protocol"] in ("LL128", "AUTO"):
            ax.plot(batch, [r["ideal_us"] for r in rows], color="grey", linestyle=":",
                    label="ideal bytes at copy bandwidth")
        # The floor measured in the same run (the faster of the peer-write
        # kernel and the copy engine), once.
        if not floor_drawn and any(r["floor_us"] > 0 for r in rows):
            ax.plot(batch, [r["floor_us"] for r in rows], color="grey", linestyle="-.",
                    label="floor: peer writes / copy engine, same bytes")
            floor_drawn = True
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (rows)")
    ax.set_ylabel("time per call (us, {})".format(" / ".join(sorted(statistics))))
    ranks = "cp " + ", ".join(str(n) for n in sorted({m["n_ranks"] for m, _ in runs}))
    title = args.title or "{} {}, {} D={} Hl={} on {}".format(
        meta["mode"], ranks, meta["dtype"], meta["head_dim"], meta["local_heads"], meta["device"])
    ax.set_title(title, fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print("wrote", args.output)


if __name__ == "__main__":
    main()
