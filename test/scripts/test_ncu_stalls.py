#!/usr/bin/env python3
"""Unit tests of scripts/ncu_stalls.py (where a kernel's warps stall, from
ncu's per-instruction page) on a small page written here in ncu's layout:
the stall shares and the windows add up to the samples, the hottest
instruction leads, gzip'd pages read the same, and a file that is not such
a page is refused.

Speaks TAP (meson's `protocol: 'tap'`). Run by hand:
python3 test/scripts/test_ncu_stalls.py
"""

import csv
import gzip
import io
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "ncu_stalls.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import ncu_stalls  # noqa: E402
import tap  # noqa: E402

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
          "Instructions Executed", "stall_long_sb", "stall_sleep", "stall_wait", "stall_long_sb (Not Issued)"]
# (source, long_sb, sleep, wait): 100 samples, 60 long_sb, 30 sleep, 10 wait.
CODE = [("LDG.E.128.CONSTANT R4, desc[UR4][R2.64]", 0, 0, 2), ("FMUL R5, R4, R6", 50, 0, 0),
        ("NANOSLEEP 0x20", 0, 30, 0), ("ATOMS.OR R5, [R3], RZ", 10, 0, 4), ("EXIT", 0, 0, 4)]


def page_text():
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(["Kernel Name", "fusedKernel<SimpleProtocol>"])
    w.writerow(HEADER)
    for i, (src, lsb, sleep, wait) in enumerate(CODE):
        total = lsb + sleep + wait
        w.writerow([hex(0x1000 + 16 * i), "      " + src, total, total, "1,024", lsb, sleep, wait, lsb])
    return out.getvalue()


class NcuStalls(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.page = os.path.join(self.dir.name, "page.csv")
        with open(self.page, "w", newline="") as f:
            f.write(page_text())

    def tearDown(self):
        self.dir.cleanup()

    def run_script(self, *args):
        r = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
        return r.returncode, r.stdout, r.stderr

    def test_shares_and_windows_add_up(self):
        kernel, header, rows = ncu_stalls.read_page(self.page)
        self.assertEqual(kernel, "fusedKernel<SimpleProtocol>")
        total, shares = ncu_stalls.stall_shares(header, rows)
        self.assertEqual(total, 100)
        self.assertEqual(shares, [(0.6, "long_sb"), (0.3, "sleep"), (0.1, "wait")])  # not-issued columns left out
        found = ncu_stalls.windows(header, rows, 2, 0.0)
        self.assertEqual([(f, round(s, 2)) for f, s, _ in found], [(0, 0.52), (2, 0.44), (4, 0.04)])
        self.assertEqual(found[1][2], ["ATOMS.OR", "NANOSLEEP"])
        self.assertEqual([f for f, _, _ in ncu_stalls.windows(header, rows, 2, 0.1)], [0, 2])

    def test_the_hottest_instruction_leads(self):
        code, out, err = self.run_script(self.page, "--top", "2", "--window", "2")
        self.assertEqual(code, 0, err)
        top = [line for line in out.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
        self.assertEqual(len(top), 2)
        self.assertIn("`FMUL R5, R4, R6`", top[0])
        self.assertIn("long_sb 50.0%", top[0])
        self.assertIn("| long_sb | 60.0% |", out)

    def test_a_gzipped_page_reads_the_same(self):
        with gzip.open(self.page + ".gz", "wt", newline="") as f:
            f.write(page_text())
        self.assertEqual(self.run_script(self.page + ".gz"), self.run_script(self.page))

    def test_a_file_that_is_not_the_page_is_refused(self):
        with open(self.page, "w") as f:
            f.write('"Kernel Name","k"\n"Address","Source"\n"0x0","EXIT"\n')
        code, out, err = self.run_script(self.page)
        self.assertEqual(code, 2)
        self.assertEqual(out, "")
        self.assertIn("not ncu's per-instruction page", err)


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
