#!/usr/bin/env python3
"""Unit tests of scripts/perf_tables.py: docs/perf.md's current one-GPU
tables are exactly what it prints from the JSON directory perf.md names
(a table retyped or left behind by a new run fails), and a file with a
wrong row (baseline 2's included), files of different commits or GPUs
or a file whose config is not the one its name says are refused rather
than tabled; a section headed with one card names JSON measured on it;
a run made with -c 0 is tabled as "not checked", not as 0 wrong.

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
import perf_json  # noqa: E402
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
H100_CP8 = "## One H100, loopback cp 8"
H100_OTHER_CPS = "### One H100: cp 2, 4 and 16"


def sections_naming_json(perf_md):
    """(heading, its card, directory) of every perf.md section that names
    a docs/data/loopback-* directory: the card (H100, H200) of its own
    heading, else of the `##` heading it sits under."""
    found, parent, card, heading, text = [], None, None, None, []

    def close():
        m = re.search(r"JSON: `(docs/data/loopback-[^`/]+)/", "\n".join(text))
        if heading and m:
            found.append((heading, card, os.path.join(ROOT, m.group(1))))

    for line in perf_md.splitlines():
        if line.startswith("## ") or line.startswith("### "):
            close()
            heading, text = line, []
            named = re.search(r"\b(H100|H200)\b", line)
            if line.startswith("## "):
                parent = named.group(1) if named else None
            card = named.group(1) if named else parent
        else:
            text.append(line)
    close()
    return found


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

    def test_h100_tables_are_the_json(self):
        directory = section_dir(self.perf_md, H100_CP8)
        self.assertIsNotNone(directory, "perf.md's H100 section names no docs/data/loopback-* directory")
        self.assertPrintedInPerfMd(directory)

    def test_h100_other_rank_counts_are_the_json(self):
        directory = section_dir(self.perf_md, H100_OTHER_CPS)
        self.assertIsNotNone(directory, "perf.md's H100 cp 2, 4 and 16 section names no docs/data/loopback-* directory")
        self.assertPrintedInPerfMd(directory, "--cp", "2", "4", "16")

    def test_each_sections_card_is_its_jsons(self):
        """A section headed with one card names JSON measured on it (the
        first H100 run's tables could have been pasted under the H200's
        heading: nothing else would notice)."""
        found = sections_naming_json(self.perf_md)
        self.assertGreaterEqual(len(found), 3, found)
        for heading, card, directory in found:
            with self.subTest(heading):
                self.assertIsNotNone(card, f"{heading}: no card (H100, H200) in it or the section above")
                devices = {perf_json.load(os.path.join(directory, f))[0]["device"]
                           for f in os.listdir(directory) if f.endswith(".json")}
                self.assertEqual(len(devices), 1, devices)
                self.assertIn(card, devices.pop(), f"{heading} names {directory}")

    def test_files_of_different_gpus_are_refused(self):
        def edit(data):
            data["device"] = "NVIDIA H100 80GB HBM3"
        why = self.refused("perf-wire-fp8", edit)
        self.assertIn("GPUs", why)
        self.assertIn("NVIDIA H100 80GB HBM3: perf-wire-fp8.json", why)
        self.assertIn("perf-AUTO.json", why)

    @contextlib.contextmanager
    def copy_edited(self, directory, name, edit):
        """A copy of `directory` with edit(data) applied to name.json."""
        with tempfile.TemporaryDirectory() as d:
            for f in os.listdir(directory):
                shutil.copy(os.path.join(directory, f), d)
            path = os.path.join(d, name + ".json")
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            edit(data)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(data, f)
            yield d

    def refused(self, name, edit, *args):
        """perf_tables' message refusing the copy of self.dir with `edit` made to name.json."""
        with self.copy_edited(self.dir, name, edit) as d, self.assertRaises(SystemExit) as e:
            printed(d, *args)
        return str(e.exception.code)

    def refused_with(self, fused_wrong, base_wrong):
        def edit(data):
            row = data["results"][3]
            row["out_of_place"]["nwrong"] = fused_wrong
            row.setdefault("baseline", {"time": 1.0})["nwrong"] = base_wrong
        self.assertIn("wrong", self.refused("perf-AUTO", edit))

    def test_a_wrong_row_is_refused(self):
        self.refused_with(1, 0)

    def test_a_baseline_not_checked_hides_no_wrong_row(self):
        self.refused_with(1, None)  # "not measured" (-1) must not cancel a wrong element

    def test_a_wrong_baseline2_is_refused(self):
        def edit(data):
            data["results"][3]["baseline2"]["nwrong"] = 2
        why = self.refused("perf-scatter-none-two_phase", edit)
        self.assertIn("perf-scatter-none-two_phase.json", why)
        self.assertIn("wrong", why)

    def test_files_of_different_commits_are_refused(self):
        def edit(data):
            data["commit"] = "0123abc"
        for name, args in (("perf-wire-fp8", ()), ("perf-cp4-none", ("--cp", "2", "4"))):
            with self.subTest(name):
                why = self.refused(name, edit, *args)
                self.assertIn("commit", why)
                self.assertIn(f"0123abc: {name}.json", why)  # the odd one, and the others by name
                self.assertIn("perf-cp2-head.json" if args else "perf-AUTO.json", why)

    def test_a_config_its_name_contradicts_is_refused(self):
        for name, key, value in (("perf-wire-fp8", "wire", "native"), ("perf-AUTO", "wire", "fp8"),
                                 ("perf-AUTO", "protocol", "LL128"), ("perf-scatter-token", "scatter", "head"),
                                 ("perf-scatter-none-direct", "none_algo", "two_phase"),
                                 ("perf-scatter-none-two_phase", "none_algo", "direct"),
                                 ("perf-scatter-none-two_phase", "staged_gather", True),
                                 ("perf-scatter-none-two_phase-staged", "staged_gather", False),
                                 ("perf-cp16-token", "n_ranks", 8), ("perf-cp2-fp8", "wire", "native")):
            with self.subTest(f"{name} {key}"):
                why = self.refused(name, lambda data: data.update({key: value}),
                                   *(("--cp", name[7:].split("-")[0]) if name.startswith("perf-cp") else ()))
                self.assertIn(f"{name}.json", why)
                self.assertIn(key, why)

    def test_a_run_made_without_checking_says_not_checked(self):
        def edit(data):
            data["config"]["validation"] = 0  # -c 0: every nwrong null
            for row in data["results"]:
                for call in ("out_of_place", "baseline", "baseline2"):
                    if row.get(call):
                        row[call]["nwrong"] = None
        with self.copy_edited(self.dir, "perf-wire-fp8", edit) as d:
            out = printed(d)
        self.assertIn("perf-wire-fp8.json", out)
        self.assertIn("not checked", out)
        self.assertNotIn("perf-AUTO.json", out)  # the checked files say nothing
        with self.copy_edited(self.dir, "perf-AUTO", lambda data: None) as d:
            self.assertNotIn("not checked", printed(d))

    def test_fp8_run_with_b3_is_divided_by_its_own_baseline(self):
        """-B 3: the native wire's time is the fp8 file's baseline (one
        process), not HEAD's file's, and the table says so."""
        def edit(data):
            data["baseline"] = perf_tables.NATIVE_WIRE
            for row in data["results"]:
                row["baseline"] = {"time": 2 * row["out_of_place"]["time"], "nwrong": 0}
        for name, args in (("perf-wire-fp8", ()), ("perf-cp2-fp8", ("--cp", "2"))):
            with self.subTest(name), self.copy_edited(self.other_dir if args else self.dir, name, edit) as d:
                out = printed(d, *args)
                said = f"fp8 / native: both timed in one process ({name}.json, -B 3)"
                self.assertIn(said, out)
                after = out[out.index(said):].splitlines()  # the table below the line
                wire = [l.split(" | ") for l in after if l.startswith("| ") and l[2].isdigit()]
                self.assertGreater(len(wire), 5, out)
                col = -3  # fp8 / native, before the two protocols
                ratios = {cells[col] for cells in wire if cells[col] != "-"}
                self.assertEqual(ratios, {"0.50"}, out)

    def test_3d8eed4_passes_the_checks(self):
        out = printed(os.path.join(ROOT, "docs", "data", "loopback-0.5-3d8eed4"))
        self.assertIn("| 1024 |", out)
        self.assertNotIn("not checked", out)

if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
