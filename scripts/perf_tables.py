#!/usr/bin/env python3
"""docs/perf.md's current one-GPU tables, from the JSON of one run of
`scripts/gpu-check.sh perf perf-cp` (a docs/data/loopback-<version>-<commit>/
directory), so that the tables are regenerated, not retyped:

    scripts/perf_tables.py DIR            cp 8: every mode, then fp8 against native
    scripts/perf_tables.py DIR --cp 2 4 16   the other rank counts

"vs" columns are the other's time / ours (above 1 we are faster); xIdeal
is ours / the ideal; fp8 / native is fp8's time / native HEAD's of the same
cp. A row a file does not have prints as "-".
"""
import argparse
import os
import sys

import perf_json


def table(directory, name):
    path = os.path.join(directory, name + ".json")
    if not os.path.exists(path):
        sys.exit(f"{path}: missing")
    meta, rows = perf_json.load(path)
    wrong = sum(perf_json.wrong_count(r) for r in rows)
    if wrong:
        sys.exit(f"{path}: {wrong} wrong rows")
    return meta, {r["rows"]: r for r in rows}


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(num, den):
    return num / den if num and den else None


def markdown(header, lines):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if h.endswith("protocol") else "---:" for h in header) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def head_token_cells(h, t):
    """HEAD's time, against its baseline and its ideal; TOKEN's time and against its baseline."""
    return [fmt(h["fused_us"]), fmt(ratio(h["base_us"], h["fused_us"])), fmt(ratio(h["fused_us"], h["ideal_us"])),
            fmt(t and t["fused_us"]), fmt(t and ratio(t["base_us"], t["fused_us"]))]


def cp8(d):
    _, head = table(d, "perf-AUTO")
    _, token = table(d, "perf-scatter-token")
    _, direct = table(d, "perf-scatter-none-direct")
    _, two = table(d, "perf-scatter-none-two_phase")
    _, staged = table(d, "perf-scatter-none-two_phase-staged")
    _, fp8 = table(d, "perf-wire-fp8")
    lines, wire = [], []
    for n in sorted(head):
        h, t, nd, n2, ns, f = (x.get(n) for x in (head, token, direct, two, staged, fp8))
        lines.append([str(n), *head_token_cells(h, t), fmt(nd and nd["fused_us"], 1), fmt(n2 and n2["fused_us"], 1),
                      fmt(nd and n2 and ratio(nd["fused_us"], n2["fused_us"])),
                      fmt(n2 and ratio(n2["base2_us"], n2["fused_us"])),
                      fmt(ns and ratio(ns["base2_us"], ns["fused_us"])), h["protocol"]])
        if f:
            wire.append([str(n), fmt(h["fused_us"]), fmt(f["fused_us"]), fmt(ratio(f["fused_us"], h["fused_us"])),
                         h["protocol"], f["protocol"]])
    print(markdown(["rows", "HEAD µs", "HEAD vs baseline", "HEAD xIdeal", "TOKEN µs", "TOKEN vs baseline",
                    "NONE direct µs", "NONE two phases µs", "two phases vs direct",
                    "vs HEAD + all-gather, direct copy", "vs HEAD + all-gather, staged", "HEAD's protocol"], lines))
    print()
    print(markdown(["rows", "native µs", "fp8 µs", "fp8 / native", "native's protocol", "fp8's protocol"], wire))


def other_cp(d, cp):
    _, head = table(d, f"perf-cp{cp}-head")
    _, token = table(d, f"perf-cp{cp}-token")
    none_meta, none = table(d, f"perf-cp{cp}-none")
    _, fp8 = table(d, f"perf-cp{cp}-fp8")
    print(f"**cp {cp}** (NONE: {none_meta['none_algo']}; baseline 2 of NONE: "
          f"{none_meta.get('baseline2')})\n")
    lines = []
    for n in sorted(head):
        h, t, o, f = (x.get(n) for x in (head, token, none, fp8))
        lines.append([str(n), *head_token_cells(h, t),
                      fmt(o and o["fused_us"]), fmt(o and ratio(o["base2_us"], o["fused_us"])),
                      fmt(f and f["fused_us"]), fmt(f and ratio(f["fused_us"], h["fused_us"])),
                      h["protocol"], f["protocol"] if f else "-"])
    print(markdown(["rows", "HEAD µs", "HEAD vs baseline", "HEAD xIdeal", "TOKEN µs", "TOKEN vs baseline",
                    "NONE µs", "NONE vs HEAD + all-gather", "fp8 µs", "fp8 / native", "HEAD's protocol",
                    "fp8's protocol"], lines))
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory")
    ap.add_argument("--cp", type=int, nargs="+", help="the other rank counts' tables (perf-cp<N>-*.json)")
    a = ap.parse_args()
    if a.cp:
        for cp in a.cp:
            other_cp(a.directory, cp)
    else:
        cp8(a.directory)


if __name__ == "__main__":
    main()
