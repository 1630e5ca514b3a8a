#!/usr/bin/env python3
"""Checks the profiler plugin's report against the nccl-tests run it watched.

  check_plugin_report.py counts REPORT.json [REPORT.json ...] ALLTOALL_PERF.log
      Every communicator of each report (one per process) must report
      exactly the all-to-alls alltoall_perf ran: per size swept, 2 x (1 sync
      + iters x agg + validation) (out-of-place and in-place), plus the
      warm-up calls of the sizes it warms up (minBytes doubling to maxBytes,
      as nccl-tests does). A 1-rank communicator reports none: NCCL runs a
      1-rank collective as a copy, without profiler events; so a run where
      no communicator has 2 ranks checks nothing, and fails (status 2).
  check_plugin_report.py dcp REPORT.json [REPORT.json ...]
      Some communicator carries nccl-dcp calls (the library hook reached
      the plugin).
  check_plugin_report.py overhead BASE.log PLUGIN.log [NOKERNEL.log]
      A markdown table of alltoall_perf's out-of-place time per size
      without and with the plugin (docs/perf.md).

Exit status: 0 match, 1 mismatch, 2 unusable input.
"""
import json
import re
import sys

HEADER = re.compile(
    r"# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+)\((factor|bytes)\) "
    r"warmup iters: (\d+) iters: (\d+) agg iters: (\d+) validation: (\d+) graph: (\d+)")
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\w+)\s+(\S+)\s+(-?\d+)\s+([\d.]+)\s")
TYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2,
              "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}


def fail(msg, code=1):
    print("check_plugin_report: " + msg)
    sys.exit(code)


def read_nccl_tests(path):
    """The header's parameters and the rows (size, count, type, time) of an alltoall_perf log."""
    header, rows = None, []
    with open(path) as f:
        for line in f:
            m = HEADER.search(line)
            if m:
                keys = ["nThread", "nGpus", "minBytes", "maxBytes", "step", "stepKind", "warmup", "iters", "agg",
                        "validation", "graph"]
                header = dict(zip(keys, [int(g) if g.isdigit() else g for g in m.groups()]))
                continue
            m = ROW.match(line)
            if m and header:
                rows.append({"size": int(m.group(1)), "count": int(m.group(2)), "type": m.group(3),
                             "us": float(m.group(6))})
    if header is None:
        fail(path + ": no nccl-tests header line (# nThread ... graph: N)", 2)
    if not rows:
        fail(path + ": no result rows", 2)
    return header, rows


def expected_alltoalls(header, rows, n_ranks):
    """bytes per rank -> all-to-all calls per rank, as nccl-tests 2.19 common.cu issues them."""
    if header["graph"] != 0:
        fail("graph: %d: CUDA-graph replays are not counted by this check; run without -G" % header["graph"], 2)
    if n_ranks == 1:
        return {}
    elt = TYPE_BYTES.get(rows[0]["type"])
    if elt is None:
        fail("unknown nccl-tests type " + rows[0]["type"], 2)
    per_size = 2 * (1 + header["iters"] * header["agg"] + header["validation"])
    want = {}
    for r in rows:
        if r["count"] > 0:  # NCCL drops empty collectives before any event
            want[r["size"]] = want.get(r["size"], 0) + per_size
    size = header["minBytes"]
    while size <= header["maxBytes"]:  # warm-up: every size doubling from minBytes (TimeTest)
        count = (size // elt // n_ranks) & ~(16 // elt - 1)  # AlltoAllGetCollByteCount
        if count > 0:
            key = count * elt * n_ranks
            want[key] = want.get(key, 0) + header["warmup"]
        size *= 2
    return want


def alltoall_sizes(comm):
    for op in comm["ops"]:
        if op["kind"] == "AlltoAll":
            return {s["bytes"]: s["calls"] for s in op["sizes"]}, op
    return {}, None


def read_report(path):
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: no readable JSON report (%s)" % (path, e), 2)
    if not isinstance(report, dict) or not isinstance(report.get("communicators"), list):
        fail(path + ": no communicators[]: not a report of the profiler plugin", 2)
    return report


def check_counts(report_paths, log_path):
    header, rows = read_nccl_tests(log_path)
    reports = [(p, read_report(p)) for p in report_paths]
    ranks_here = header["nThread"] * header["nGpus"]
    for path, report in reports:
        if report.get("disabled"):
            fail("%s: the plugin turned itself off: %s" % (path, report["disabled"]))
        if len(report["communicators"]) != ranks_here:
            fail("%s: %d communicators in the report, alltoall_perf ran %d ranks in each process" % (
                path, len(report["communicators"]), ranks_here))
    comms = [c for _, report in reports for c in report["communicators"]]
    # A check that expects nothing passes whatever the plugin counted (one
    # GPU: 1-rank communicators, no profiler event): refuse it.
    if sum(sum(expected_alltoalls(header, rows, c["nRanks"]).values()) for c in comms) == 0:
        fail("nothing to check: the run expects no all-to-all in any communicator (ranks %s); "
             "run alltoall_perf on 2 or more GPUs" % sorted({c["nRanks"] for c in comms}), 2)
    bad = 0
    for c in comms:
        want = expected_alltoalls(header, rows, c["nRanks"])
        got, op = alltoall_sizes(c)
        name = "comm %s rank %d/%d" % (c["commHash"], c["rank"], c["nRanks"])
        loose = {k["kind"]: k["calls"] for k in c["ops"] if k["kind"] in ("Send", "Recv")}
        if got != want or loose:
            bad += 1
            print("MISMATCH %s" % name)
            for size in sorted(set(want) | set(got)):
                if want.get(size, 0) != got.get(size, 0):
                    print("  %12d B: expected %d all-to-alls, report has %d" % (size, want.get(size, 0), got.get(size, 0)))
            if loose:
                print("  send/recv tasks outside whole all-to-alls: %s" % loose)
            continue
        calls = sum(got.values())
        timed = op["gpuCalls"] if op else 0
        print("ok %s: %d all-to-alls over %d sizes, as run; GPU time for %d of them%s" % (
            name, calls, len(got), timed, "" if c["kernelTiming"] else " (kernel timing off)"))
        if c["kernelTiming"] and calls and timed == 0:
            bad += 1
            print("MISSING GPU time: kernel timing on, no all-to-all timed")
        a2a = c["alltoall"]
        print("  estimate: %s%s" % (a2a["estimate"], "" if a2a["expectedSavingUs"] is None else
                                      ", expected saving %.1f us" % a2a["expectedSavingUs"]))
    if bad:
        fail("%d of %d communicators do not match the run" % (bad, len(comms)))
    print("check_plugin_report: %d communicators match the run" % len(comms))


def check_dcp(report_paths):
    reports = [read_report(p) for p in report_paths]
    found = 0
    for c in [c for r in reports for c in r["communicators"]]:
        for d in c.get("dcp", []):
            found += 1
            print("ok comm %s rank %d/%d: nccl-dcp context %s, %d calls, %d rows, path %s, nvlink %s" % (
                c["commHash"], c["rank"], c["nRanks"], d["context"], d["op"]["calls"], d["rows"], d["path"],
                d["nvlink"]))
    for d in [d for r in reports for d in r.get("dcpUnmatched", [])]:
        print("unmatched nccl-dcp context %s rank %d/%d dev %d: %d calls" % (
            d["context"], d["rank"], d["nRanks"], d["cudaDev"], d["op"]["calls"]))
    if found == 0:
        fail("no communicator carries nccl-dcp calls")


def overhead(base_log, plugin_log, nokernel_log=None):
    logs = [read_nccl_tests(p)[1] for p in [base_log, plugin_log] + ([nokernel_log] if nokernel_log else [])]
    sizes = [r["size"] for r in logs[0]]
    # out-of-place and in-place rows repeat per size; the first time column is out-of-place.
    times = [{r["size"]: r["us"] for r in rows} for rows in logs]
    head = "| bytes | no plugin (us) | plugin (us) | overhead |"
    rule = "|---:|---:|---:|---:|"
    if nokernel_log:
        head += " plugin, NCCL_DCP_PROFILE_KERNEL=0 (us) | overhead |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    for s in sizes:
        cells = ["%d" % s, "%.2f" % times[0][s]]
        for t in times[1:]:
            cells += ["%.2f" % t[s], "%+.1f%%" % (100.0 * (t[s] - times[0][s]) / times[0][s])]
        print("| " + " | ".join(cells) + " |")


def main(argv):
    if len(argv) >= 4 and argv[1] == "counts":
        check_counts(argv[2:-1], argv[-1])
    elif len(argv) >= 3 and argv[1] == "dcp":
        check_dcp(argv[2:])
    elif len(argv) in (4, 5) and argv[1] == "overhead":
        overhead(*argv[2:])
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
