#!/usr/bin/env python3
"""Unit tests of scripts/count_tests.py (the CI's case count) on synthetic
meson logs: every way a run can fail must give a non-zero exit status.

Speaks TAP (meson's `protocol: 'tap'`), so each case is counted like a
GoogleTest case. Run by hand: python3 test/scripts/test_count_tests.py
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest
import xml.etree.ElementTree as et

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import count_tests  # noqa: E402
import tap  # noqa: E402

PROJECT = "nccl-dcp"


def meson_name(binary, suite="unit"):
    return f"{PROJECT}:{suite} / {binary}"


class Log:
    """A meson log directory: testlog.junit.xml and testlog.json, written
    the way meson 1.0 writes them."""

    def __init__(self):
        self.root = et.Element("testsuites")
        self.results = []  # testlog.json entries

    def gtest(self, binary, cases, result="OK"):
        """A GoogleTest binary; cases: {"Suite.Name": "passed"|"failed"|"skipped"|"disabled"}."""
        suites = {}
        for full, outcome in cases.items():
            suite_name, name = full.split(".", 1)
            if suite_name not in suites:
                suites[suite_name] = et.SubElement(self.root, "testsuite",
                                                   name=f"{PROJECT}.{meson_name(binary)}.{suite_name}")
            case = et.SubElement(suites[suite_name], "testcase", name=name, status="run")
            if outcome == "failed":
                et.SubElement(case, "failure", message="test.cc:12\nExpected equality")
            elif outcome == "skipped":
                et.SubElement(case, "skipped", message="test.cc:3\nneeds 1 GPU(s), found 0")
            elif outcome == "disabled":
                case.set("status", "notrun")
        self.results.append({"name": meson_name(binary), "result": result})
        return self

    def bare(self, binary, result, failure=True):
        """A binary that wrote no XML: one case named after it."""
        suite = self.root.find(f"testsuite[@name='{PROJECT}']")
        if suite is None:
            suite = et.SubElement(self.root, "testsuite", name=PROJECT)
        case = et.SubElement(suite, "testcase", name=meson_name(binary))
        if failure:
            et.SubElement(case, "failure")
        self.results.append({"name": meson_name(binary), "result": result})
        return self

    def tap(self, binary, outcomes):
        """A TAP test: its cases under '<project>.<test name>'."""
        suite = et.SubElement(self.root, "testsuite", name=f"{PROJECT}.{meson_name(binary)}")
        for i, outcome in enumerate(outcomes):
            case = et.SubElement(suite, "testcase", name=str(i + 1))
            if outcome == "failed":
                et.SubElement(case, "failure")
        ok = all(o != "failed" for o in outcomes)
        self.results.append({"name": meson_name(binary), "result": "OK" if ok else "FAIL"})
        return self

    def run(self, *args, expect=None, write_json=True, log_name="testlog"):
        """count_tests.main on this log: (exit status, printed lines)."""
        with tempfile.TemporaryDirectory() as d:
            junit = os.path.join(d, f"{log_name}.junit.xml")
            et.ElementTree(self.root).write(junit)
            if write_json:
                with open(os.path.join(d, f"{log_name}.json"), "w") as f:
                    for r in self.results:
                        f.write(json.dumps(r) + "\n")
            argv = [junit, *args]
            if expect is not None:
                path = os.path.join(d, "expected.txt")
                with open(path, "w") as f:
                    f.write(expect)
                argv += ["--expect", path]
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = count_tests.main(argv)
        return rc, out.getvalue().splitlines()


class Counting(unittest.TestCase):
    def test_all_passed(self):
        rc, lines = Log().gtest("unit_a", {"S.a": "passed", "S.b": "passed", "T.c": "passed"}).run()
        self.assertEqual(rc, 0)
        self.assertEqual(lines[-1], "3 passed, 0 failed")

    def test_a_failed_case_fails(self):
        rc, lines = Log().gtest("unit_a", {"S.a": "passed", "S.b": "failed"}, result="FAIL").run()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "1 passed, 1 failed")
        self.assertIn("FAILED nccl-dcp.nccl-dcp:unit / unit_a.S :: b: test.cc:12: Expected equality", lines)

    def test_skips_are_counted_with_their_reason(self):
        rc, lines = Log().gtest("unit_a", {"S.a": "passed", "S.b": "skipped", "S.c": "disabled"}).run()
        self.assertEqual(rc, 0)
        self.assertIn("  1 skipped: needs 1 GPU(s), found 0", lines)
        self.assertIn("2 skipped (1 need a GPU, 1 for other reasons)", lines)
        self.assertEqual(lines[-1], "1 passed, 0 failed")

    def test_tap_cases_are_counted(self):
        rc, lines = Log().gtest("unit_a", {"S.a": "passed"}).tap("unit_py", ["passed", "passed"]).run()
        self.assertEqual(rc, 0)
        self.assertEqual(lines[-1], "3 passed, 0 failed")


class NothingRan(unittest.TestCase):
    def test_no_case_at_all_fails(self):
        rc, lines = Log().run()
        self.assertEqual(rc, 1)
        self.assertIn("no test case ran", "\n".join(lines))
        self.assertEqual(lines[-1], "0 passed, 1 failed")

    def test_every_case_filtered_out_fails(self):
        # GTEST_FILTER='-*': the binary runs, writes an XML without cases.
        log = Log()
        log.results.append({"name": meson_name("unit_a"), "result": "OK"})
        rc, lines = log.run()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "0 passed, 1 failed")

    def test_only_skips_fail(self):
        rc, lines = Log().gtest("gpu_a", {"S.a": "skipped", "S.b": "skipped"}).run()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "0 passed, 1 failed")


class BinaryFailures(unittest.TestCase):
    def test_crash_before_xml_is_a_failure(self):
        rc, lines = Log().gtest("unit_a", {"S.a": "passed"}).bare("unit_b", "FAIL").run()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "1 passed, 1 failed")

    def test_timeout_without_failure_child_is_a_failure(self):
        # meson 1.0 writes a bare <testcase> with no child for a timeout.
        rc, lines = Log().gtest("unit_a", {"S.a": "passed"}).bare("unit_b", "TIMEOUT", failure=False).run()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "1 passed, 1 failed")
        self.assertIn("binary failed without a failed test case: nccl-dcp:unit / unit_b: meson result TIMEOUT", lines)

    def test_crash_at_exit_after_passing_cases_is_a_failure(self):
        rc, lines = Log().gtest("unit_a", {"S.a": "passed", "S.b": "passed"}, result="FAIL").run()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "2 passed, 1 failed")

    def test_failed_binary_with_failed_cases_is_not_counted_twice(self):
        rc, lines = Log().gtest("unit_a", {"S.a": "failed", "S.b": "passed"}, result="FAIL").run()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "1 passed, 1 failed")

    def test_failed_tap_case_is_not_counted_twice(self):
        rc, lines = Log().tap("unit_py", ["passed", "failed"]).run()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "1 passed, 1 failed")

    def test_results_are_read_from_the_log_beside_the_junit_file(self):
        # `meson test --setup x` writes testlog-x.junit.xml and testlog-x.json.
        rc, lines = Log().gtest("unit_a", {"S.a": "passed"}).bare("unit_b", "TIMEOUT", failure=False).run(
            log_name="testlog-x")
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "1 passed, 1 failed")

    def test_meson_exit_code_alone_is_a_failure(self):
        rc, lines = Log().gtest("unit_a", {"S.a": "passed"}).run("--meson-exit-code", "1")
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "1 passed, 1 failed")

    def test_unreadable_junit_is_a_failure(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = count_tests.main(["/nonexistent/testlog.junit.xml"])
        self.assertEqual(rc, 1)
        self.assertEqual(out.getvalue().splitlines()[-1], "0 passed, 1 failed")

    def test_malformed_junit_is_a_failure(self):
        with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
            f.write("<testsuites><testsuite name='x'>")  # truncated by a crash
        try:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = count_tests.main([f.name])
        finally:
            os.unlink(f.name)
        self.assertEqual(rc, 1)


class Expectations(unittest.TestCase):
    def log(self):
        return Log().gtest("unit_a", {"S.a": "passed", "S.b": "passed", "S.c": "skipped"}).gtest(
            "unit_ab", {"S.a": "passed"})

    def test_binaries_at_their_minimum_pass(self):
        rc, lines = self.log().run(expect="unit_a 3  # skipped cases count\nunit_ab 1\n")
        self.assertEqual(rc, 0, lines)
        self.assertEqual(lines[-1], "3 passed, 0 failed")

    def test_binary_below_its_minimum_fails(self):
        rc, lines = self.log().run(expect="unit_a 4\nunit_ab 1\n")
        self.assertEqual(rc, 1)
        self.assertIn("FAILED unit_a: 3 cases reported, at least 4 expected", lines)
        self.assertEqual(lines[-1], "3 passed, 1 failed")

    def test_listed_binary_that_did_not_run_fails(self):
        rc, lines = self.log().run(expect="unit_a 3\nunit_ab 1\ngpu_gone 10\n")
        self.assertEqual(rc, 1)
        self.assertIn("FAILED gpu_gone: did not run (expected at least 10 cases)", lines)

    def test_crashed_binary_entry_is_not_a_case(self):
        rc, lines = Log().gtest("unit_a", {"S.a": "passed"}).bare("unit_b", "FAIL").run(expect="unit_a 1\nunit_b 1\n")
        self.assertEqual(rc, 1)
        self.assertIn("FAILED unit_b: 0 cases reported, at least 1 expected", lines)

    def test_tap_cases_count_for_their_binary(self):
        rc, lines = self.log().tap("unit_py", ["passed"] * 3).run(expect="unit_a 3\nunit_ab 1\nunit_py 3\n")
        self.assertEqual(rc, 0, lines)

    def test_binary_far_above_its_minimum_fails(self):
        # 12 cases against a minimum of 5: more than 10% and more than 5 above.
        log = Log().gtest("unit_a", {f"S.c{i}": "passed" for i in range(12)})
        rc, lines = log.run(expect="unit_a 5\n")
        self.assertEqual(rc, 1)
        self.assertTrue(any("unit_a: 12 cases reported, its minimum 5 is stale" in l for l in lines), lines)

    def test_a_few_above_the_minimum_pass(self):
        # 5 above 100 (5%), and 5 above 6 (more than 10%, but only 5): both fine.
        for n, minimum in ((105, 100), (11, 6)):
            log = Log().gtest("unit_a", {f"S.c{i}": "passed" for i in range(n)})
            rc, lines = log.run(expect=f"unit_a {minimum}\n")
            self.assertEqual(rc, 0, (n, minimum, lines))
        # 112 above 100: 12% and 12 cases.
        rc, lines = Log().gtest("unit_a", {f"S.c{i}": "passed" for i in range(112)}).run(expect="unit_a 100\n")
        self.assertEqual(rc, 1, lines)

    def test_python_entries_are_not_meson_tests(self):
        rc, lines = self.log().run(expect="unit_a 3\nunit_ab 1\npython_torchrun 300\n")
        self.assertEqual(rc, 0, lines)

    def test_as_counts_a_junit_file_as_one_binary(self):
        log = Log().gtest("unit_a", {f"S.c{i}": "passed" for i in range(4)})
        rc, lines = log.run("--as", "python_x", expect="python_x 4\n", write_json=False)
        self.assertEqual(rc, 0, lines)
        rc, lines = log.run("--as", "python_x", expect="python_x 5\n", write_json=False)
        self.assertEqual(rc, 1)
        self.assertIn("FAILED python_x: 4 cases reported, at least 5 expected", lines)
        rc, lines = log.run("--as", "python_y", expect="python_x 4\n", write_json=False)
        self.assertEqual(rc, 1)
        self.assertTrue(any("python_y: no minimum case count listed" in l for l in lines), lines)
        rc, lines = Log().gtest("unit_a", {"S.a": "passed", "S.b": "failed"}).run("--as", "python_x",
                                                                              expect="python_x 2\n", write_json=False)
        self.assertEqual(rc, 1, lines)
        self.assertEqual(lines[-1], "1 passed, 1 failed")

    def test_as_with_only_skips_fails(self):
        log = Log().gtest("unit_a", {"S.a": "skipped", "S.b": "skipped"})
        rc, lines = log.run("--as", "python_x", expect="python_x 2\n", write_json=False)
        self.assertEqual(rc, 1, lines)
        self.assertIn("FAILED no test case ran (every case was filtered out or skipped)", lines)

    def test_unlisted_binary_is_noted(self):
        rc, lines = self.log().run(expect="unit_a 3\n")
        self.assertEqual(rc, 0)
        self.assertIn("note: unit_ab: no minimum case count listed", lines)

    def test_malformed_expectation_line_fails(self):
        for text in ("unit_a\n", "unit_a three\n", "unit_a 3 4\n", "unit_a 1\nunit_a 2\n"):
            rc, lines = self.log().run(expect=text)
            self.assertEqual(rc, 1, text)
            self.assertIn("cannot read the results", lines[0])

    def test_expectations_need_testlog_json(self):
        rc, lines = self.log().run(expect="unit_a 3\n", write_json=False)
        self.assertEqual(rc, 1)
        self.assertIn("--expect needs", "\n".join(lines))


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
