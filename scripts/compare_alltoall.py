#!/usr/bin/env python3
"""Our baseline's all-to-all beside NCCL's own alltoall_perf, size by size.

    compare_alltoall.py ALLTOALL_PERF_OUTPUT OUR_JSON [--tolerance 0.10]

ALLTOALL_PERF_OUTPUT is the text nccl-tests' alltoall_perf printed (its
out-of-place time is the 8th field from the end of a row: then come the
out-of-place algbw busbw #wrong and the in-place time algbw busbw #wrong).
OUR_JSON is what dcp_a2a_lse_reduce_perf -B 2 -J wrote (results[].baseline:
the ncclAlltoAll of the data and of the LSEs, no combine; older files'
rows[].baseUs too: scripts/perf_json.py). Sizes are matched by
bytes per rank. Prints one line per common size with the ratio ours / NCCL's
and exits 1 when a ratio is off by more than the tolerance (issue 9: the
baseline is honest when it is within 10% at every size), when no size is
common to both, or when the two ran on different NCCL libraries
(alltoall_perf's "nccl-library=" against the JSON's nccl_version: without
LD_LIBRARY_PATH a GPU machine's older system NCCL loads).
"""

import argparse
import sys

import perf_json


def alltoall_perf_times(path):
    """{bytes: out-of-place us} from alltoall_perf's table rows."""
    times = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 10 or line.lstrip().startswith("#") or not fields[0].isdigit():
                continue
            try:
                times[int(fields[0])] = float(fields[-8])
            except ValueError:
                continue
    return times


def alltoall_perf_nccl(path):
    """The NCCL library version code alltoall_perf ran on, or None."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            for word in line.split():
                if word.startswith("nccl-library="):
                    try:
                        return int(word.split("=", 1)[1])
                    except ValueError:
                        return None
    return None


def our_nccl(path):
    return perf_json.load(path)[0]["nccl_version"]


def our_times(path):
    """{bytes: (rows, us)} of the baseline's all-to-all alone."""
    meta, rows = perf_json.load(path)
    if meta["baseline"] != "a2a alone":
        sys.exit(f"{path}: baseline is '{meta['baseline']}', not 'a2a alone' (run the perf binary with -B 2)")
    return {r["bytes"]: (r["rows"], r["base_us"]) for r in rows if r["base_us"] > 0}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("alltoall_perf")
    p.add_argument("ours")
    p.add_argument("--tolerance", type=float, default=0.10)
    args = p.parse_args()
    nccl, ours = alltoall_perf_times(args.alltoall_perf), our_times(args.ours)
    theirs_lib, ours_lib = alltoall_perf_nccl(args.alltoall_perf), our_nccl(args.ours)
    if theirs_lib is not None and ours_lib is not None and theirs_lib != ours_lib:
        print(f"alltoall_perf ran on NCCL {theirs_lib}, ours on {ours_lib}: not comparable "
              f"(run alltoall_perf with LD_LIBRARY_PATH at the NCCL the perf binary links)")
        return 1
    common = sorted(set(nccl) & set(ours))
    if not common:
        print(f"no size in both: alltoall_perf has {sorted(nccl)}, ours {sorted(ours)}")
        return 1
    print(f"{'bytes':>12} {'rows':>6} {'alltoall_perf us':>17} {'ours (-B 2) us':>15} {'ours/NCCL':>10}")
    off = 0
    for b in common:
        rows, us = ours[b]
        ratio = us / nccl[b] if nccl[b] > 0 else float("inf")
        bad = abs(ratio - 1) > args.tolerance
        off += bad
        print(f"{b:>12} {rows:>6} {nccl[b]:>17.2f} {us:>15.2f} {ratio:>10.3f}{'  <- off by more than %d%%' % round(args.tolerance * 100) if bad else ''}")
    print(f"{len(common) - off} of {len(common)} sizes within {args.tolerance:.0%} of alltoall_perf")
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
