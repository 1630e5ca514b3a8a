#!/usr/bin/env python3
"""Unit tests of scripts/check_plugin_report.py (the profiler plugin's report
against the alltoall_perf run it watched) on synthetic reports and
nccl-tests logs: a report that matches passes; every way it can differ, a
report that is no report, and a run that expects nothing fail.

Speaks TAP (meson's `protocol: 'tap'`). Run by hand:
python3 test/scripts/test_check_plugin_report.py
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import check_plugin_report  # noqa: E402
import tap  # noqa: E402

# alltoall_perf -b 32K -e 64K -f 2 -w 5 -n 20 -c 1 on float: per size
# 2 x (1 sync + 20 iters + 1 validation) = 44 calls, plus 5 warm-ups.
SIZES = (32768, 65536)
PER_SIZE = 49


def alltoall_perf_log(n_gpus, times=None, graph=0):
    """An alltoall_perf output of one process driving n_gpus GPUs."""
    lines = ["# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809",
             f"# nThread 1 nGpus {n_gpus} minBytes 32768 maxBytes 65536 step: 2(factor) warmup iters: 5 "
             f"iters: 20 agg iters: 1 validation: 1 graph: {graph}",
             "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"]
    for size in SIZES:
        us = (times or {}).get(size, 10.0)
        lines.append(f"{size:>12} {size // 4:>13}     float    none      -1 {us:>8.2f}    1.00    0.50       0 "
                     f"{us:>8.2f}    1.00    0.50       0")
    return "\n".join(lines) + "\n"


def comm(rank, n_ranks, calls=None, gpu_calls=None, loose=None, dcp=None, kernel_timing=True):
    """A report's communicator; calls: {bytes: all-to-alls} (default: as run)."""
    if calls is None:
        calls = {s: PER_SIZE for s in SIZES} if n_ranks > 1 else {}
    ops = []
    if calls:
        total = sum(calls.values())
        ops.append({"kind": "AlltoAll", "calls": total, "gpuCalls": total if gpu_calls is None else gpu_calls,
                    "sizes": [{"bytes": b, "calls": n} for b, n in sorted(calls.items())]})
    for kind, n in (loose or {}).items():
        ops.append({"kind": kind, "calls": n, "gpuCalls": 0, "sizes": []})
    return {"commHash": "0x%016x" % (0x1000 + rank), "rank": rank, "nRanks": n_ranks, "kernelTiming": kernel_timing,
            "ops": ops, "alltoall": {"estimate": "no calibration", "expectedSavingUs": None}, "dcp": dcp or []}


def report(comms, disabled=None, unmatched=None):
    return {"tool": "nccl-dcp profiler plugin", "format": 1, "disabled": disabled, "communicators": comms,
            "dcpUnmatched": unmatched or [], "dcpDropped": 0}


def dcp_context(calls):
    return {"context": "0x1", "rank": 0, "nRanks": 2, "cudaDev": 0, "rows": 4 * calls, "path": "fused",
            "nvlink": "yes", "op": {"kind": "DcpA2aLseReduce", "calls": calls}}


class Script(unittest.TestCase):
    def run_check(self, mode, files):
        """check_plugin_report.main on files {name: text or JSON object}, in
        their order: (exit status, printed text)."""
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for name, content in files:
                paths.append(os.path.join(d, name))
                with open(paths[-1], "w", encoding="utf-8") as f:
                    f.write(content if isinstance(content, str) else json.dumps(content))
            out = io.StringIO()
            rc = 0
            with contextlib.redirect_stdout(out):
                try:
                    check_plugin_report.main(["check_plugin_report.py", mode, *paths])
                except SystemExit as e:
                    rc = e.code
        return rc, out.getvalue()

    def counts(self, *reports, log=None):
        files = [(f"plugin-report-{i}.json", r) for i, r in enumerate(reports)]
        return self.run_check("counts", files + [("alltoall.log", log or alltoall_perf_log(2))])


class Counts(Script):
    def test_a_report_as_run_passes(self):
        rc, out = self.counts(report([comm(0, 2), comm(1, 2)]))
        self.assertEqual(rc, 0, out)
        self.assertIn("check_plugin_report: 2 communicators match the run", out)

    def test_one_report_per_process_is_each_checked(self):
        log = alltoall_perf_log(1)
        rc, out = self.counts(report([comm(0, 2)]), report([comm(1, 2)]), log=log)
        self.assertEqual(rc, 0, out)
        rc, out = self.counts(report([comm(0, 2)]), report([comm(1, 2, calls={32768: PER_SIZE})]), log=log)
        self.assertEqual(rc, 1, out)
        self.assertIn("65536 B: expected 49 all-to-alls, report has 0", out)

    def test_a_count_off_by_one_fails(self):
        rc, out = self.counts(report([comm(0, 2), comm(1, 2, calls={32768: PER_SIZE, 65536: PER_SIZE - 1})]))
        self.assertEqual(rc, 1, out)
        self.assertIn("MISMATCH comm 0x0000000000001001 rank 1/2", out)
        self.assertIn("65536 B: expected 49 all-to-alls, report has 48", out)

    def test_sends_outside_all_to_alls_fail(self):
        rc, out = self.counts(report([comm(0, 2), comm(1, 2, loose={"Send": 2})]))
        self.assertEqual(rc, 1, out)
        self.assertIn("send/recv tasks outside whole all-to-alls", out)

    def test_missing_gpu_time_fails_unless_kernel_timing_is_off(self):
        rc, out = self.counts(report([comm(0, 2, gpu_calls=0), comm(1, 2)]))
        self.assertEqual(rc, 1, out)
        self.assertIn("MISSING GPU time", out)
        rc, out = self.counts(report([comm(r, 2, gpu_calls=0, kernel_timing=False) for r in (0, 1)]))
        self.assertEqual(rc, 0, out)

    def test_a_disabled_plugin_fails(self):
        rc, out = self.counts(report([comm(0, 2), comm(1, 2)], disabled="init: injected init fault"))
        self.assertEqual(rc, 1, out)
        self.assertIn("turned itself off", out)

    def test_a_communicator_too_many_or_too_few_fails(self):
        rc, out = self.counts(report([comm(0, 2)]))
        self.assertEqual(rc, 1, out)
        self.assertIn("1 communicators in the report, alltoall_perf ran 2 ranks", out)

    def test_one_gpu_expects_nothing_and_fails(self):
        # 1-rank communicators get no profiler event: 0 expected, 0
        # reported would "match" whatever the plugin does.
        rc, out = self.counts(report([comm(0, 1)]), log=alltoall_perf_log(1))
        self.assertEqual(rc, 2, out)
        self.assertIn("nothing to check", out)

    def test_a_torn_or_foreign_report_is_unusable(self):
        for bad in ("", "{\"communicators\": [", "[]"):
            rc, out = self.counts(bad)
            self.assertEqual(rc, 2, f"{bad!r}: {out}")

    def test_a_log_without_header_or_a_graph_run_is_unusable(self):
        rc, out = self.counts(report([comm(0, 2), comm(1, 2)]), log="no header\n")
        self.assertEqual(rc, 2, out)
        self.assertIn("no nccl-tests header line", out)
        rc, out = self.counts(report([comm(0, 2), comm(1, 2)]), log=alltoall_perf_log(2, graph=1))
        self.assertEqual(rc, 2, out)
        self.assertIn("CUDA-graph", out)


class Dcp(Script):
    def test_a_report_with_nccl_dcp_calls_passes(self):
        rc, out = self.run_check("dcp", [("a.json", report([comm(0, 2, dcp=[dcp_context(3)])]))])
        self.assertEqual(rc, 0, out)
        self.assertIn("3 calls, 12 rows, path fused", out)

    def test_calls_only_unmatched_or_none_fail(self):
        rc, out = self.run_check("dcp", [("a.json", report([comm(0, 2)], unmatched=[dcp_context(2)]))])
        self.assertEqual(rc, 1, out)
        self.assertIn("unmatched nccl-dcp context 0x1 rank 0/2 dev 0: 2 calls", out)
        self.assertIn("no communicator carries nccl-dcp calls", out)


class Overhead(Script):
    def test_the_table_has_one_row_per_size(self):
        logs = [("base.log", alltoall_perf_log(2, {32768: 10.0, 65536: 20.0})),
                ("plugin.log", alltoall_perf_log(2, {32768: 10.5, 65536: 20.0}))]
        rc, out = self.run_check("overhead", logs)
        self.assertEqual(rc, 0, out)
        lines = out.splitlines()
        self.assertEqual(lines[0], "| bytes | no plugin (us) | plugin (us) | overhead |")
        self.assertEqual(lines[2:], ["| 32768 | 10.00 | 10.50 | +5.0% |", "| 65536 | 20.00 | 20.00 | +0.0% |"])


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
