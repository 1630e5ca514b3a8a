#!/usr/bin/env python3
"""Unit tests of scripts/perf_tables.py: docs/perf.md's current one-GPU
tables are exactly what it prints from the JSON directory perf.md names
(a table retyped or left behind by a new run fails), and a file with a
wrong row is refused rather than tabled.

Speaks TAP (meson's `protocol: 'tap'`). Run by hand:
python3 test/scripts/test_perf_tables.py
"""

import contextlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)
import perf_tables  # noqa: E402
import tap  # noqa: E402


def printed(*args):
    out = io.StringIO()
    saved = sys.argv
    sys.argv = ["perf_tables.py", *args]
    try:
        with contextlib.redirect_stdout(out):
            perf_tables.main()
    finally:
        sys.argv = saved
    return out.getvalue()


def section_dir(perf_md, heading):
    """The JSON directory that perf.md's section `heading` names (cp 8's
    current section, or the other rank counts', which may be an earlier
    run's)."""
    m = re.search(re.escape(heading) + r".*?JSON: `(docs/data/loopback-[^`/]+)/", perf_md, re.S)
    return os.path.join(ROOT, m.group(1)) if m else None


CP8 = "## Current: one H200, loopback cp 8"
OTHER_CPS = "### Other rank counts: cp 2, 4 and 16"


class Tables(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(ROOT, "docs", "perf.md"), encoding="utf-8") as f:
            self.perf_md = f.read()
        self.dir = section_dir(self.perf_md, CP8)
        self.other_dir = section_dir(self.perf_md, OTHER_CPS)
        self.assertIsNotNone(self.dir, "perf.md's current section names no docs/data/loopback-* directory")
        self.assertIsNotNone(self.other_dir, "perf.md's other rank counts name no docs/data/loopback-* directory")

    def assertPrintedInPerfMd(self, directory, *args):
        lines = [l for l in printed(directory, *args).splitlines() if l.startswith(("|", "**cp"))]
        self.assertGreater(len(lines), 10)
        doc = set(self.perf_md.splitlines())
        missing = [l for l in lines if l not in doc]
        self.assertEqual(missing, [], f"perf.md differs from {directory}'s JSON (scripts/perf_tables.py)")

    def test_cp8_tables_are_the_json(self):
        self.assertPrintedInPerfMd(self.dir)

    def test_other_rank_counts_are_the_json(self):
        self.assertPrintedInPerfMd(self.other_dir, "--cp", "2", "4", "16")

    def refused_with(self, fused_wrong, base_wrong):
        with tempfile.TemporaryDirectory() as d:
            for name in os.listdir(self.dir):
                shutil.copy(os.path.join(self.dir, name), d)
            path = os.path.join(d, "perf-AUTO.json")
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            row = data["results"][3]
            row["out_of_place"]["nwrong"] = fused_wrong
            row.setdefault("baseline", {"time": 1.0})["nwrong"] = base_wrong
            with open(path, "w", encoding="utf-8") as f:
                json.dump(data, f)
            with self.assertRaises(SystemExit) as e:
                printed(d)
            self.assertIn("wrong", str(e.exception.code))

    def test_a_wrong_row_is_refused(self):
        self.refused_with(1, 0)

    def test_a_baseline_not_checked_hides_no_wrong_row(self):
        self.refused_with(1, None)  # "not measured" (-1) must not cancel a wrong element


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
