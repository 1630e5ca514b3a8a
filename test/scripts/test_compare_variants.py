#!/usr/bin/env python3
"""Unit tests of scripts/compare_variants.py (the table of a
scripts/perf-variants.sh run) on synthetic perf JSON: each variant's time
over the tree's is against the mean of the tree's first and last runs, a
wrong row fails the run after the table, and a run without the tree's
last sweep is refused, and a sweep it lacks is named; and scripts/perf-variants.sh refuses a log
directory that already holds a run's JSON and, stopped in a variant, puts
the variant's text back.

Speaks TAP (meson's `protocol: 'tap'`). Run by hand:
python3 test/scripts/test_compare_variants.py
"""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PERF_VARIANTS = os.path.join(HERE, "..", "..", "scripts", "perf-variants.sh")
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import compare_variants  # noqa: E402
import tap  # noqa: E402


def perf_json(medians, protocol="LL", wrong=None, ranks=2, base2=None):
    """dcp_a2a_lse_reduce_perf -J of {rows: median us} (and NONE's baseline 2's,
    {rows: median us}); each mean is 10% above its median."""
    wrong = wrong or {}
    doc = {"args": ["perf", "--virtual-ranks", str(ranks)], "n_ranks": ranks, "protocol": "AUTO",
           "scatter": "none" if base2 else "head", "wire": "native", "time_statistic": "mean",
           "results": [{"rows": n, "size": 32768 * n, "protocol": protocol,
                        "out_of_place": {"time": us * 1.1, "median_time": us, "nwrong": wrong.get(n, 0)}}
                       for n, us in medians.items()]}
    for r in doc["results"] if base2 else []:
        r["baseline2"] = {"time": base2[r["rows"]] * 1.1, "median_time": base2[r["rows"]], "nwrong": 0}
    return doc


class Variants(unittest.TestCase):
    def table(self, files, *args):
        with tempfile.TemporaryDirectory() as d:
            for name, doc in files.items():
                with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                    json.dump(doc, f)
            out, saved = io.StringIO(), sys.argv
            sys.argv = ["compare_variants.py", d, *args]
            code = 0
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                    compare_variants.main()
            except SystemExit as e:
                code = e.code
            finally:
                sys.argv = saved
            return code, out.getvalue()

    def test_ratio_is_against_the_trees_first_and_last_runs(self):
        code, out = self.table({"base-0.json": perf_json({1: 10.0, 2: 20.0}),
                                "apart-0.json": perf_json({1: 9.0, 2: 22.0}),
                                "base-again-0.json": perf_json({1: 8.0, 2: 20.0})})
        self.assertEqual(code, 0)
        row = [l for l in out.splitlines() if l.startswith("| cp 2 HEAD")][0]
        cells = [c.strip() for c in row.strip("|").split("|")]
        self.assertEqual(cells[1:], ["1/2", "LL ×2", "10.00 / 20.00", "9.00 / 22.00", "8.00 / 20.00",
                                     "1.00 / 1.10"])

    def test_mean_reads_the_mean(self):
        code, out = self.table({"base-0.json": perf_json({1: 10.0}), "v-0.json": perf_json({1: 5.0}),
                                "base-again-0.json": perf_json({1: 10.0})}, "--mean")
        self.assertEqual(code, 0)
        self.assertIn("| 11.00 | 5.50 | 11.00 | 0.50 |", out)

    def test_a_wrong_row_fails_the_run(self):
        code, out = self.table({"base-0.json": perf_json({1: 10.0}),
                                "v-0.json": perf_json({1: 5.0}, wrong={1: 3}),
                                "base-again-0.json": perf_json({1: 10.0})})
        self.assertEqual(code, 1)
        self.assertIn("0.50", out)  # the table is printed first

    def test_baseline2_sets_each_run_against_its_own(self):
        # NONE's sweeps with -B 1: the variant against what a user would
        # write instead, each run against the baseline 2 it measured itself.
        code, out = self.table({"base-0.json": perf_json({16: 40.0, 64: 120.0}, base2={16: 36.0, 64: 96.0}),
                                "direct-0.json": perf_json({16: 30.0, 64: 90.0}, base2={16: 36.0, 64: 99.0}),
                                "base-again-0.json": perf_json({16: 40.0, 64: 120.0}, base2={16: 36.0, 64: 96.0}),
                                "base-1.json": perf_json({16: 10.0}), "direct-1.json": perf_json({16: 9.0}),
                                "base-again-1.json": perf_json({16: 10.0})})
        self.assertEqual(code, 0)
        tables = out.split("\n\n")
        self.assertEqual(len(tables), 2, out)
        rows = [l for l in tables[1].splitlines() if l.startswith("| cp 2")]
        self.assertEqual(len(rows), 1, tables[1])  # the sweep without baseline 2 has no row
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        self.assertEqual(cells, ["cp 2 NONE", "16/64", "36.00 / 96.00", "0.90 / 0.80", "1.20 / 1.10", "0.90 / 0.80"])
        self.assertIn("direct: baseline 2 / it", tables[1])
        code, out = self.table({"base-0.json": perf_json({16: 40.0}, base2={16: 36.0}),
                                "base-again-0.json": perf_json({16: 40.0}, base2={16: 36.0})}, "--mean")
        self.assertIn("| 39.60 | 0.90 | 0.90 |", out)  # the means

    def test_without_baseline2_there_is_one_table(self):
        _, out = self.table({"base-0.json": perf_json({1: 10.0}), "base-again-0.json": perf_json({1: 10.0})})
        self.assertNotIn("baseline 2", out)

    def test_a_sweep_without_the_trees_last_run_is_named(self):
        # The call's time limit stopped base-again after its first sweep:
        # sweep 1's ratios have no drift control, and the output says so.
        code, out = self.table({"base-0.json": perf_json({1: 10.0}), "v-0.json": perf_json({1: 9.0}),
                                "base-again-0.json": perf_json({1: 10.0}),
                                "base-1.json": perf_json({1: 10.0, 2: 20.0}),
                                "v-1.json": perf_json({1: 9.0, 2: 18.0})})
        self.assertEqual(code, 0)
        self.assertIn("sweep 1 (cp 2 HEAD): no base-again at 1/2 rows", out)
        self.assertNotIn("sweep 0", out)

    def test_without_the_trees_last_run_it_refuses(self):
        code, _ = self.table({"base-0.json": perf_json({1: 10.0}), "v-0.json": perf_json({1: 5.0})})
        self.assertIn("base-again", str(code))

    def test_a_run_into_a_log_dir_holding_another_runs_json_is_refused(self):
        # Its variants would be tabled beside this run's (a machine's /tmp
        # kept a log directory of an earlier session once).
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "together-0.json"), "w", encoding="utf-8") as f:
                json.dump(perf_json({1: 10.0}), f)
            r = subprocess.run(["bash", PERF_VARIANTS, os.path.join(d, "no-build"), d, "--virtual-ranks 2"],
                               capture_output=True, text=True, check=False)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("already holds", r.stderr)
            self.assertEqual(sorted(os.listdir(d)), ["together-0.json"])  # nothing built, nothing written

    def test_stopped_in_a_variant_it_puts_the_text_back(self):
        # A GPU call's time limit stops it mid-variant: whatever the call
        # builds next must be the tree, not the variant.
        with tempfile.TemporaryDirectory() as d:
            tree, logs, build, bin_dir = (os.path.join(d, x) for x in ("tree.h", "logs", "build", "bin"))
            os.makedirs(os.path.join(build, "perf"))
            os.makedirs(bin_dir)
            with open(tree, "w", encoding="utf-8") as f:
                f.write("constexpr int kUnits = 4;\n")
            fakes = {os.path.join(bin_dir, "ninja"): "#!/bin/sh\nexit 0\n",
                     # the perf binary: its JSON, then a sweep long enough to be stopped in
                     os.path.join(build, "perf", "dcp_a2a_lse_reduce_perf"):
                         '#!/bin/sh\nwhile [ "$1" != -J ]; do shift; done\necho "{}" > "$2"\nsleep 1\n'}
            for path, text in fakes.items():
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                os.chmod(path, 0o755)
            env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
            run = subprocess.Popen(["bash", PERF_VARIANTS, build, logs, "--virtual-ranks 2", "two", tree,
                                    "kUnits = 4", "kUnits = 2"], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            deadline = time.time() + 20
            while not os.path.exists(os.path.join(logs, "two-0.json")) and time.time() < deadline:
                time.sleep(0.05)
            with open(tree, encoding="utf-8") as f:
                self.assertIn("kUnits = 2", f.read())  # stopped in the variant, not before it
            run.send_signal(signal.SIGTERM)
            out, err = run.communicate(timeout=20)
            self.assertEqual(run.returncode, 143, out + err)
            with open(tree, encoding="utf-8") as f:
                self.assertEqual(f.read(), "constexpr int kUnits = 4;\n")
            self.assertFalse([n for n in os.listdir(logs) if n.startswith(".saved")])
            self.assertFalse(os.path.exists(os.path.join(logs, "base-again-0.json")))  # it stopped


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
