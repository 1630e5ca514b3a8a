#!/usr/bin/env python3
"""The table of one scripts/perf-variants.sh run: per sweep and batch, the
tree's time ("base", first, and "base-again", last: their spread is the
run's drift), each variant's, and each variant's time over the tree's
(the mean of base and base-again; below 1 the variant is faster). Times
are medians of the replays unless --mean. Where a sweep measured NONE's
baseline 2 (HEAD + the all-gather, -B 1 --scatter none), a second table
sets each run against its own baseline 2, as perf.md's tables do
(baseline 2's time over the run's: above 1 the fused call is faster). A
sweep or variant with a wrong row fails (exit 1) after the tables: a
variant that computes something else is not a speed-up.

    scripts/compare_variants.py LOGDIR [--mean] [--names "cp 2 HEAD;cp 4 HEAD;..."]
"""
import argparse
import glob
import json
import os
import re
import sys

import perf_json


def sweep_label(meta, args):
    """cp N, then what the sweep changed from the defaults (protocol, scatter, wire)."""
    words = [f"cp {meta['n_ranks']}"]
    if meta["protocol"] and meta["protocol"] != "AUTO":
        words.append(meta["protocol"])
    words.append((meta["scatter"] or "head").upper())
    if meta["wire"] and meta["wire"] != "native":
        words.append(meta["wire"])
    if "--none-algo" in args:
        words.append(args[args.index("--none-algo") + 1])
    return " ".join(words)


def runs(logs):
    """{variant: {sweep index: (meta, args, rows by batch)}}, base and base-again included."""
    out = {}
    for path in glob.glob(os.path.join(logs, "*-*.json")):
        m = re.fullmatch(r"(.+)-(\d+)\.json", os.path.basename(path))
        if not m:
            continue
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
        meta, rows = perf_json.parse(report)
        out.setdefault(m.group(1), {})[int(m.group(2))] = (meta, report.get("args", []), {r["rows"]: r for r in rows})
    return out


def protocols(rows):
    """LL ×2, LL128: the protocols of consecutive batches, run-length."""
    spans = []
    for n in sorted(rows):
        p = rows[n]["protocol"]
        if spans and spans[-1][0] == p:
            spans[-1][1] += 1
        else:
            spans.append([p, 1])
    return ", ".join(p if k == 1 else f"{p} ×{k}" for p, k in spans)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs")
    ap.add_argument("--mean", action="store_true", help="the mean of the replays (nccl-tests' time)")
    ap.add_argument("--names", help="the sweeps' labels, ';' between (default: from each sweep's JSON)")
    a = ap.parse_args()
    by_variant = runs(a.logs)
    for needed in ("base", "base-again"):
        if needed not in by_variant:
            sys.exit(f"{a.logs}: no {needed}-*.json (perf-variants.sh runs the tree first and last)")
    variants = sorted(v for v in by_variant if v not in ("base", "base-again"))
    key = "fused_us" if a.mean else "fused_median_us"
    names = a.names.split(";") if a.names else None
    wrong, uncontrolled = [], []
    header = ["sweep", "rows", "protocols", "base", *variants, "base again",
              *[f"{v} / base" for v in variants]]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i < 3 else "---:" for i in range(len(header))) + "|")  # times right-aligned
    for i in sorted(by_variant["base"]):
        meta, args, base = by_variant["base"][i]
        rows_of = lambda v: by_variant[v].get(i, (None, None, {}))[2]  # variant v's rows of sweep i
        again = rows_of("base-again")
        label = names[i] if names and i < len(names) else sweep_label(meta, args)
        batches = sorted(base)
        tree = {n: (base[n][key] + again[n][key]) / 2 if n in again else base[n][key] for n in batches}
        missing = [n for n in batches if n not in again]
        if missing:  # a call cut short by its time limit: no drift control there
            uncontrolled.append(f"sweep {i} ({label}): no base-again at {'/'.join(map(str, missing))} rows: "
                                f"those ratios are against the first base run alone, with no drift control")
        cells = [label, "/".join(map(str, batches)), protocols(base)]
        times = lambda rows: " / ".join(f"{rows[n][key]:.2f}" if n in rows else "-" for n in batches)
        cells.append(times(base))
        for v in variants:
            cells.append(times(rows_of(v)))
        cells.append(times(again))
        for v in variants:
            rows = rows_of(v)
            cells.append(" / ".join(f"{rows[n][key] / tree[n]:.2f}" if n in rows else "-" for n in batches))
        print("| " + " | ".join(cells) + " |")
        for v in ("base", *variants, "base-again"):
            for n, r in rows_of(v).items():
                if perf_json.wrong_count(r):
                    wrong.append(f"{v} sweep {i} ({label}) at {n} rows: {perf_json.wrong_count(r)} wrong")
    if uncontrolled:
        print("\n" + "\n".join(uncontrolled))
    against_baseline2(by_variant, variants, names, a.mean)
    if wrong:
        print("\n".join(wrong), file=sys.stderr)
        sys.exit(1)


def against_baseline2(by_variant, variants, names, mean):
    """The sweeps that measured baseline 2: each run's baseline 2 over its fused time."""
    fused, base2 = ("fused_us", "base2_us") if mean else ("fused_median_us", "base2_median_us")
    columns = ["base", *variants, "base-again"]
    sweeps = [i for i in sorted(by_variant["base"]) if any(r[base2] > 0 for r in by_variant["base"][i][2].values())]
    if not sweeps:
        return
    header = ["sweep", "rows", "baseline 2 (base)", *[f"{v}: baseline 2 / it" for v in columns]]
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|")
    for i in sweeps:
        meta, args, base = by_variant["base"][i]
        label = names[i] if names and i < len(names) else sweep_label(meta, args)
        batches = sorted(base)
        cells = [label, "/".join(map(str, batches)), " / ".join(f"{base[n][base2]:.2f}" for n in batches)]
        for v in columns:
            rows = by_variant[v].get(i, (None, None, {}))[2]
            cells.append(" / ".join(f"{rows[n][base2] / rows[n][fused]:.2f}"
                                    if n in rows and rows[n][base2] > 0 and rows[n][fused] > 0 else "-"
                                    for n in batches))
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
