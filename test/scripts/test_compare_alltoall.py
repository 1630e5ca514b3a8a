#!/usr/bin/env python3
"""Unit tests of scripts/compare_alltoall.py (our baseline's all-to-all
beside nccl-tests' alltoall_perf) on synthetic outputs: it passes only when
both ran on the same NCCL library and every common size is within the
tolerance.

Speaks TAP (meson's `protocol: 'tap'`). Run by hand:
python3 test/scripts/test_compare_alltoall.py
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
import compare_alltoall  # noqa: E402
import tap  # noqa: E402


def alltoall_perf_text(library, times):
    """alltoall_perf's output: the version line and one row per {bytes: us}."""
    lines = [f"# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library={library}",
             "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"]
    for size, us in times.items():
        lines.append(f"{size:>12} {size // 2:>13}  bfloat16    none      -1 {us:>8.2f}    1.00    0.50       0 "
                     f"{us:>8.2f}    1.00    0.50    N/A")
    return "\n".join(lines) + "\n"


def perf_json(library, times):
    """dcp_a2a_lse_reduce_perf -B 2 -J: nccl-tests' results[] of {bytes: (rows, us)}, the baseline beside the
    fused call."""
    return {"nccl_version": library, "baseline": "a2a alone",
            "results": [{"size": b, "rows": r, "out_of_place": {"time": us / 2, "nwrong": 0},
                         "baseline": {"time": us, "nwrong": None}} for b, (r, us) in times.items()]}


def old_perf_json(library, times):
    """The same as the files of docs/data wrote it: a camelCase rows[] array."""
    return {"ncclVersion": library, "baseline": "a2a alone",
            "rows": [{"bytes": b, "rows": r, "baseUs": us} for b, (r, us) in times.items()]}


class Compare(unittest.TestCase):
    def run_compare(self, theirs_text, ours):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "alltoall_perf.txt"), os.path.join(d, "ours.json")
            with open(a, "w", encoding="utf-8") as f:
                f.write(theirs_text)
            with open(b, "w", encoding="utf-8") as f:
                json.dump(ours, f)
            out = io.StringIO()
            saved = sys.argv
            sys.argv = ["compare_alltoall.py", a, b]
            try:
                with contextlib.redirect_stdout(out):
                    rc = compare_alltoall.main()
            finally:
                sys.argv = saved
        return rc, out.getvalue()

    def test_same_library_within_tolerance_passes(self):
        rc, out = self.run_compare(alltoall_perf_text(22809, {32768: 8.0, 65536: 9.0}),
                                   perf_json(22809, {32768: (1, 8.4), 65536: (2, 8.5)}))
        self.assertEqual(rc, 0, out)
        self.assertIn("2 of 2 sizes within 10%", out)

    def test_older_files_are_read_too(self):
        rc, out = self.run_compare(alltoall_perf_text(22809, {32768: 8.0, 65536: 9.0}),
                                   old_perf_json(22809, {32768: (1, 8.4), 65536: (2, 12.0)}))
        self.assertEqual(rc, 1, out)
        self.assertIn("1 of 2 sizes within 10%", out)
        rc, out = self.run_compare(alltoall_perf_text(22803, {32768: 8.0}), old_perf_json(22809, {32768: (1, 8.0)}))
        self.assertIn("NCCL 22803, ours on 22809", out)

    def test_a_size_off_by_more_than_the_tolerance_fails(self):
        rc, out = self.run_compare(alltoall_perf_text(22809, {32768: 8.0, 65536: 9.0}),
                                   perf_json(22809, {32768: (1, 8.0), 65536: (2, 10.0)}))
        self.assertEqual(rc, 1, out)
        self.assertIn("off by more than 10%", out)

    def test_different_nccl_libraries_are_not_compared(self):
        rc, out = self.run_compare(alltoall_perf_text(22803, {32768: 8.0}), perf_json(22809, {32768: (1, 8.0)}))
        self.assertEqual(rc, 1, out)
        self.assertIn("NCCL 22803, ours on 22809", out)

    def test_no_common_size_fails(self):
        rc, out = self.run_compare(alltoall_perf_text(22809, {32768: 8.0}), perf_json(22809, {65536: (2, 8.0)}))
        self.assertEqual(rc, 1, out)
        self.assertIn("no size in both", out)


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
