#!/usr/bin/env python3
"""docs/perf.md's current one-GPU tables, from the JSON of one run of
`scripts/gpu-check.sh perf perf-cp` (a docs/data/loopback-<version>-<commit>/
directory), so that the tables are regenerated, not retyped:

    scripts/perf_tables.py DIR            cp 8: every mode, then fp8 against native
    scripts/perf_tables.py DIR --cp 2 4 16   the other rank counts

"vs" columns are the other's time / ours (above 1 we are faster); xIdeal
is ours / the ideal; fp8 / native is fp8's time / the native wire's: the
fp8 file's own baseline where it was run with -B 3 (both timed in one
process, and said above the table), else native HEAD's file of the same cp
(another process: a ratio within 2% is a tie). A row a file does not have
prints as "-".

Refused: a file with a wrong element (fused call or either baseline),
files of different commits or GPUs (the GPU is printed first), a file
whose config is not the one its name says (perf-wire-fp8.json not fp8,
...). A file run with -c 0 is tabled, with a line saying its rows were
not checked.
"""
import argparse
import os
import re
import sys

import perf_json


def expected_config(name):
    """The config that a file's name (scripts/gpu-check.sh's perf and
    perf-cp stages) says it was run with: perf-scatter-none-two_phase-staged
    is NONE, two phases, baseline 2 staged (-registered: its outputs
    registered); perf-cp4-fp8 4 ranks, fp8 on the wire. What a name leaves
    out is the default: HEAD, native, not staged, not registered."""
    want = {"scatter": "head", "wire": "native", "staged_gather": False, "registered_out": False}
    for word in name.split("-")[1:]:
        if word in ("scatter", "wire"):
            continue
        if word in ("head", "token", "none"):
            want["scatter"] = word
        elif word in ("native", "fp8"):
            want["wire"] = word
        elif word in ("direct", "two_phase"):
            want["none_algo"] = word
        elif word == "staged":
            want["staged_gather"] = True
        elif word == "registered":
            want["registered_out"] = True
        elif word in ("AUTO", "LL", "LL128", "SIMPLE"):
            want["protocol"] = word
        elif re.fullmatch(r"cp\d+", word):
            want["n_ranks"] = int(word[2:])
        else:
            sys.exit(f"{name}.json: '{word}' in its name says no config perf_tables.py knows")
    return want


def table(directory, name):
    path = os.path.join(directory, name + ".json")
    if not os.path.exists(path):
        sys.exit(f"{path}: missing")
    meta, rows = perf_json.load(path)
    wrong = sum(perf_json.wrong_count(r) for r in rows)
    if wrong:
        sys.exit(f"{path}: {wrong} wrong rows")
    # A file renamed or copied over from another run would table as the
    # name's config.
    for key, want in expected_config(name).items():
        if meta[key] != want:
            sys.exit(f"{path}: {key} {meta[key]!r} in the file, its name says {want!r}")
    unchecked = sum(r["unchecked"] for r in rows)
    if unchecked:  # not "0 wrong"
        print(f"{path}: not checked (-c 0): {unchecked} of {len(rows)} rows\n")
    return meta, {r["rows"]: r for r in rows}


def tables(directory, names):
    """table() of each name, {name: (meta, rows)}: files of different
    commits or GPUs are refused (a table would set one build's or card's
    times beside another's); the GPU is printed above the tables, so that
    no table is headed with another card's name."""
    loaded = {name: table(directory, name) for name in names}
    for key, what in (("commit", "commits"), ("device", "GPUs")):
        seen = {}
        for name, (meta, _) in loaded.items():
            seen.setdefault(meta[key], []).append(name + ".json")
        if len(seen) > 1:
            sys.exit(f"{directory}: files of different {what}: " +
                     "; ".join(f"{v or 'none recorded'}: {', '.join(n)}" for v, n in seen.items()))
    device = next(iter(loaded.values()))[0]["device"]
    print(f"GPU: {device or 'none recorded'}\n")
    return loaded


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(num, den):
    return num / den if num and den else None


def markdown(header, lines):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if h.endswith("protocol") else "---:" for h in header) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


NATIVE_WIRE = "fused, native wire"  # -B 3's baseline (perf/harness.cc, baselineName)


def native_us(fp8_meta, f, h):
    """The native wire's time beside fp8's row f: f's own baseline when
    the fp8 file ran -B 3, else HEAD's row h (another process)."""
    return f["base_us"] if fp8_meta["baseline"] == NATIVE_WIRE else h["fused_us"]


def say_native_source(fp8_meta, name):
    if fp8_meta["baseline"] == NATIVE_WIRE:
        print(f"fp8 / native: both timed in one process ({name}.json, -B 3)\n")


def head_token_cells(h, t):
    """HEAD's time, against its baseline and its ideal; TOKEN's time and against its baseline."""
    return [fmt(h["fused_us"]), fmt(ratio(h["base_us"], h["fused_us"])), fmt(ratio(h["fused_us"], h["ideal_us"])),
            fmt(t and t["fused_us"]), fmt(t and ratio(t["base_us"], t["fused_us"]))]


CP8 = ["perf-AUTO", "perf-scatter-token", "perf-scatter-none-direct", "perf-scatter-none-two_phase",
       "perf-scatter-none-two_phase-staged", "perf-wire-fp8"]


def cp_names(cp):
    return [f"perf-cp{cp}-{run}" for run in ("head", "token", "none", "fp8")]


def cp8(loaded):
    head, token, direct, two, staged, fp8 = (loaded[name][1] for name in CP8)
    fp8_meta = loaded[CP8[-1]][0]
    lines, wire = [], []
    for n in sorted(head):
        h, t, nd, n2, ns, f = (x.get(n) for x in (head, token, direct, two, staged, fp8))
        lines.append([str(n), *head_token_cells(h, t), fmt(nd and nd["fused_us"], 1), fmt(n2 and n2["fused_us"], 1),
                      fmt(nd and n2 and ratio(nd["fused_us"], n2["fused_us"])),
                      fmt(n2 and ratio(n2["base2_us"], n2["fused_us"])),
                      fmt(ns and ratio(ns["base2_us"], ns["fused_us"])), h["protocol"]])
        if f:
            native = native_us(fp8_meta, f, h)
            wire.append([str(n), fmt(native), fmt(f["fused_us"]), fmt(ratio(f["fused_us"], native)),
                         h["protocol"], f["protocol"]])
    print(markdown(["rows", "HEAD µs", "HEAD vs baseline", "HEAD xIdeal", "TOKEN µs", "TOKEN vs baseline",
                    "NONE direct µs", "NONE two phases µs", "two phases vs direct",
                    "vs HEAD + all-gather, direct copy", "vs HEAD + all-gather, staged", "HEAD's protocol"], lines))
    print()
    say_native_source(fp8_meta, CP8[-1])
    print(markdown(["rows", "native µs", "fp8 µs", "fp8 / native", "native's protocol", "fp8's protocol"], wire))


def other_cp(loaded, cp):
    (_, head), (_, token), (none_meta, none), (fp8_meta, fp8) = (loaded[name] for name in cp_names(cp))
    print(f"**cp {cp}** (NONE: {none_meta['none_algo']}; baseline 2 of NONE: "
          f"{none_meta.get('baseline2')})\n")
    say_native_source(fp8_meta, cp_names(cp)[-1])
    lines = []
    for n in sorted(head):
        h, t, o, f = (x.get(n) for x in (head, token, none, fp8))
        lines.append([str(n), *head_token_cells(h, t),
                      fmt(o and o["fused_us"]), fmt(o and ratio(o["base2_us"], o["fused_us"])),
                      fmt(f and f["fused_us"]), fmt(f and ratio(f["fused_us"], native_us(fp8_meta, f, h))),
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
    # Every file checked before a table prints: one commit across them all.
    if a.cp:
        loaded = tables(a.directory, [name for cp in a.cp for name in cp_names(cp)])
        for cp in a.cp:
            other_cp(loaded, cp)
    else:
        cp8(tables(a.directory, CP8))


if __name__ == "__main__":
    main()
