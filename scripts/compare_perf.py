#!/usr/bin/env python3
"""Side-by-side table of scripts/compare-version.sh's perf runs: per table
and batch, the fused time of this build and of the old one (us), their
ratio (new / old: < 1 is faster), and each build's speed-up over the
baseline of its own run. Reads either JSON spelling of the perf binary
(camelCase rows, or nccl-tests-style names)."""
import json
import os
import sys


def rows(path):
    with open(path) as f:
        d = json.load(f)
    out = {}
    for r in d.get("rows") or d.get("results") or []:
        n = r.get("rows", r.get("batch_rows"))
        t = r.get("fusedUs", r.get("time_us", r.get("fused_us")))
        b = r.get("baseUs", r.get("baseline_us", r.get("base_us")))
        if n is not None and t is not None:
            out[int(n)] = (float(t), float(b) if b else None)
    return out


def main():
    logs, tables = sys.argv[1], sys.argv[2:]
    for t in tables:
        proto, scatter, *rest = t.split(":")
        algo = rest[0] if rest else ""
        wire = rest[1] if len(rest) > 1 else ""
        name = f"{proto}-{scatter}" + (f"-{algo}" if algo else "") + (f"-{wire}" if wire else "")
        try:
            new, old = rows(os.path.join(logs, f"perf-new-{name}.json")), rows(os.path.join(logs, f"perf-old-{name}.json"))
        except (OSError, ValueError) as e:
            print(f"\n{name}: no table ({e})")
            continue
        print(f"\n{name} (loopback cp 8, Hl 16, D 512, bf16)\n")
        print("| rows | new us | old us | new / old | new vs baseline | old vs baseline |")
        print("|---:|---:|---:|---:|---:|---:|")
        for n in sorted(set(new) & set(old)):
            (tn, bn), (to, bo) = new[n], old[n]
            sn = f"{bn / tn:.2f}" if bn else "-"
            so = f"{bo / to:.2f}" if bo else "-"
            print(f"| {n} | {tn:.2f} | {to:.2f} | {tn / to:.3f} | {sn} | {so} |")


if __name__ == "__main__":
    main()
