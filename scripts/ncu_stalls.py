#!/usr/bin/env python3
"""Where a kernel's warps stall, from the per-instruction page that
scripts/profile-ncu.sh writes (ncu --page source --csv --print-source sass;
plain or gzip'd).

  scripts/ncu_stalls.py ncu-SIMPLE-fp8-head-1024-sass.csv[.gz] [--top N] [--window W]

Prints, as markdown: the share of warp-state samples per stall reason; the
N instructions with the most samples (their two largest reasons); and the
code in windows of W instructions holding 1% of the samples or more, each
named by the memory, conversion and synchronisation instructions in it --
the landmarks by which a window is matched to the source (a spin loop:
NANOSLEEP and ATOMS; fp8's encode: F2FP...E4M3.F32.PACK; its decode:
F2FP...UNPACK). The matching is the reader's: SASS has no source lines
without -lineinfo.
"""
import argparse
import csv
import gzip
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
LANDMARK = re.compile(r"\b(F2FP\S*|LDG\S*|STG\S*|LDS\S*|STS\S*|ATOMS\S*|ATOMG\S*|RED\S*|NANOSLEEP|MEMBAR\S*|"
                      r"ERRBAR|BAR\S*|REDUX\S*|SHFL\S*|MUFU\S*)")


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_page(path):
    """(kernel name, header, rows) of one kernel's source page."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 3 or rows[0][:1] != ["Kernel Name"] or SAMPLES not in rows[1]:
        raise ValueError(f"{path}: not ncu's per-instruction page (Kernel Name, then a header with '{SAMPLES}')")
    return rows[0][1], rows[1], rows[2:]


def sample_counts(header, rows):
    """Each instruction's warp-state samples, in page order."""
    col = header.index(SAMPLES)
    return [number(r[col]) for r in rows]


def stall_columns(header):
    """The stall reasons' columns of every sample (not the not-issued ones)."""
    return [h for h in header if h.startswith("stall_") and "Not Issued" not in h]


def stall_shares(header, rows):
    """Stall reason -> share of every sample, largest first."""
    col = {h: i for i, h in enumerate(header)}
    total = sum(sample_counts(header, rows))
    sums = {h[len("stall_"):]: sum(number(r[col[h]]) for r in rows) for h in stall_columns(header)}
    return total, sorted(((v / total if total else 0.0, k) for k, v in sums.items()), reverse=True)


def windows(header, rows, width, least):
    """(first, share, landmarks) of each window of `width` instructions with
    at least `least` of the samples."""
    source = header.index("Source")
    samples = sample_counts(header, rows)
    total = sum(samples) or 1.0
    found = []
    for first in range(0, len(rows), width):
        share = sum(samples[first:first + width]) / total
        if share < least:
            continue
        marks = sorted({m.group(1) for r in rows[first:first + width] for m in [LANDMARK.search(r[source])] if m})
        found.append((first, share, marks))
    return found


def hottest(header, rows, count):
    """(index, share, executed, instruction, its two largest stalls) of the
    `count` instructions with the most samples."""
    col = {h: i for i, h in enumerate(header)}
    reasons = stall_columns(header)
    samples = sample_counts(header, rows)
    total = sum(samples) or 1.0
    out = []
    for i in sorted(range(len(rows)), key=lambda i: -samples[i])[:count]:
        r = rows[i]
        big = sorted(((number(r[col[h]]), h[len("stall_"):]) for h in reasons), reverse=True)[:2]
        why = ", ".join(f"{k} {100 * v / total:.1f}%" for v, k in big if v > 0)
        out.append((i, samples[i] / total, r[col["Instructions Executed"]], r[col["Source"]].strip(), why))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("page")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--window", type=int, default=60)
    args = ap.parse_args(argv)
    try:
        kernel, header, rows = read_page(args.page)
    except (OSError, ValueError) as e:
        print(f"ncu_stalls: {e}", file=sys.stderr)
        return 2
    total, shares = stall_shares(header, rows)
    print(f"{kernel}\n\n{len(rows)} instructions, {total:.0f} warp-state samples\n")
    print("| stall | share |\n|---|---:|")
    for share, reason in shares:
        if share >= 0.005:
            print(f"| {reason} | {100 * share:.1f}% |")
    print("\n| # | samples | executed | instruction | largest stalls |\n|---:|---:|---:|---|---|")
    for i, share, executed, instruction, why in hottest(header, rows, args.top):
        print(f"| {i} | {100 * share:.2f}% | {executed} | `{instruction}` | {why} |")
    print("\n| instructions | samples | landmarks |\n|---|---:|---|")
    for first, share, marks in windows(header, rows, args.window, 0.01):
        print(f"| {first}-{first + args.window - 1} | {100 * share:.1f}% | {' '.join(marks)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
