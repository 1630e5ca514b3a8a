#!/usr/bin/env python3
"""scripts/gpu-check.sh cannot lie, shown on a CPU (GPU_CHECK_SELFTEST=1:
no GPU is queried, the selftest-* stages exist): a stage killed by TERM,
INT or HUP, or one the script leaves without recording its end, is named
in the summary as not finished and the exit status is non-zero; a stage
that records nothing fails; a sanitizer-style filter naming a test that no
longer exists fails loudly; the children of a killed stage are stopped;
and every filter the script runs names tests of the build (check-filters,
against the build directory test/meson.build passes). Speaks TAP. By hand:
python3 test/scripts/test_gpu_check.py [BUILD_DIR]
"""

import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tap  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "gpu-check.sh")
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DCP_BUILD_DIR")


def default_signals():
    """The script starts with TERM, INT and HUP at their defaults: bash
    cannot trap a signal ignored when it started (a run under nohup, as a
    CI job may be, ignores HUP), and the script's traps are the subject."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


class GpuCheck(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.TemporaryDirectory()
        self.env = dict(os.environ, GPU_CHECK_SELFTEST="1", OUT=self.out.name)
        if BUILD:
            self.env["BUILD"] = os.path.abspath(BUILD)

    def tearDown(self):
        self.out.cleanup()

    def run_script(self, *stages, env=None, timeout=120):
        r = subprocess.run([SCRIPT, *stages], env=dict(self.env, **(env or {})), preexec_fn=default_signals,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return r.returncode, r.stdout

    def start(self, *stages, sleep=317, settle=0.5):
        """The script running selftest-sleep (SELFTEST_SLEEP=sleep), once it
        has said so and `settle` seconds more (0: at once, bgrun may still
        be forking)."""
        proc = subprocess.Popen([SCRIPT, *stages], env=dict(self.env, SELFTEST_SLEEP=str(sleep)),
                                preexec_fn=default_signals, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("== selftest-sleep: sleeping"):
                break
        self.assertIsNone(proc.poll(), "".join(lines))
        time.sleep(settle)
        return proc, lines

    def assertNoSleeps(self, seconds, why):
        """No 'sleep <seconds>' left within 10 s (the trap signals them; a
        loaded machine takes a moment)."""
        deadline = time.time() + 10
        while self.sleeps(seconds) and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.sleeps(seconds), 0, why)

    def sleeps(self, seconds):
        """Processes 'sleep <seconds>' (the stage's child) still alive."""
        out = subprocess.run(["ps", "-eo", "args"], stdout=subprocess.PIPE, text=True).stdout
        return sum(1 for line in out.splitlines() if line.strip() == f"sleep {seconds}")

    def test_a_passing_stage_passes(self):
        status, out = self.run_script("selftest-pass")
        self.assertEqual(status, 0, out)
        self.assertIn("==== every stage passed", out)

    def test_the_logs_packed_into_one_file(self):
        with tempfile.TemporaryDirectory() as d:
            tar = os.path.join(d, "logs.tgz")
            status, out = self.run_script("selftest-pass", "selftest-fail", env={"GPU_CHECK_TAR": tar})
            self.assertEqual(status, 1, out)
            names = subprocess.run(["tar", "tzf", tar], stdout=subprocess.PIPE, text=True, check=True).stdout.split()
            base = os.path.basename(self.out.name)
            self.assertIn(f"{base}/summary.txt", names)
            with tarfile.open(tar) as t:
                summary = t.extractfile(f"{base}/summary.txt").read().decode()
            self.assertIn("stage selftest-fail finished", summary)

    def test_a_failing_stage_fails(self):
        status, out = self.run_script("selftest-pass", "selftest-fail")
        self.assertEqual(status, 1, out)
        self.assertIn("FAIL  selftest-fail", out)
        self.assertNotIn("every stage passed", out)

    def test_killed_in_a_stage_says_which_and_fails(self):
        for sig, name, code in ((signal.SIGTERM, "SIGTERM", 143), (signal.SIGINT, "SIGINT", 130),
                                (signal.SIGHUP, "SIGHUP", 129)):
            with self.subTest(name):
                sleep = f"{300 + code}.{os.getpid()}"  # one child per signal and run, found by its arguments
                proc, lines = self.start("selftest-pass", "selftest-sleep", sleep=sleep)
                t0 = time.time()
                proc.send_signal(sig)  # the script's process alone, as a time limit's TERM
                rest, _ = proc.communicate(timeout=60)
                out = "".join(lines) + rest
                self.assertLess(time.time() - t0, 20, "the trap waited for the stage's command")
                self.assertEqual(proc.returncode, code, out)
                self.assertIn(f"stage 'selftest-sleep' did not finish: killed by {name}", out)
                self.assertIn("ok    selftest-pass", out)
                self.assertNotIn("every stage passed", out)
                self.assertNoSleeps(sleep, "the killed stage's child is still running")
                summary = open(os.path.join(self.out.name, "summary.txt"), encoding="utf-8").read()
                self.assertIn("stage selftest-sleep started", summary)
                self.assertNotIn("stage selftest-sleep finished", summary)

    def test_a_signal_at_the_stages_start_leaves_no_child(self):
        """The signal lands while bgrun forks (before `CHILD=$!`): the trap
        finds the command by the process tree, not by CHILD."""
        sleep = f"461.{os.getpid()}"  # this run's child alone (another run may be sleeping beside it)
        for _ in range(10):
            proc, _ = self.start("selftest-sleep", sleep=sleep, settle=0)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
            self.assertNotEqual(proc.returncode, 0, out)
            self.assertNoSleeps(sleep, "the stage's child outlived the script")

    def test_a_stage_the_script_leaves_did_not_finish(self):
        status, out = self.run_script("selftest-pass", "selftest-exit")
        self.assertNotEqual(status, 0, out)
        self.assertIn("stage 'selftest-exit' did not finish", out)
        self.assertNotIn("every stage passed", out)

    def test_a_stage_that_records_nothing_fails(self):
        status, out = self.run_script("selftest-norecord")
        self.assertEqual(status, 1, out)
        self.assertIn("stage 'selftest-norecord' recorded no result", out)

    def test_a_commit_that_is_not_a_hash_is_refused_before_any_stage(self):
        status, out = self.run_script("selftest-pass", env={"COMMIT": "ref:"})
        self.assertEqual(status, 2, out)
        self.assertIn("COMMIT='ref:' is not a commit hash", out)
        self.assertNotIn("selftest-pass", out)
        for commit in ("ce162b8", "ce162b8-dirty", "0123456789abcdef0123456789abcdef01234567"):
            status, out = self.run_script("selftest-pass", env={"COMMIT": commit})
            self.assertEqual(status, 0, f"{commit}: {out}")

    def test_an_unknown_stage_fails(self):
        status, out = self.run_script("selftest-pass", "no-such-stage")
        self.assertEqual(status, 1, out)
        self.assertIn("unknown stage 'no-such-stage'", out)

    def test_a_filter_naming_a_missing_test_fails_loudly(self):
        if not BUILD:
            self.skipTest("no build directory given (test/meson.build passes it)")
        status, out = self.run_script("selftest-filters")
        self.assertEqual(status, 1, out)
        self.assertIn("'Gone.NoSuchTest' names no test", out)

    def test_every_filter_of_the_script_names_built_tests(self):
        if not BUILD:
            self.skipTest("no build directory given (test/meson.build passes it)")
        status, out = self.run_script("check-filters")
        self.assertEqual(status, 0, out)
        self.assertIn("every pattern of", out)


class SanitizerArguments(unittest.TestCase):
    """compute-sanitizer refuses an option value it does not know, prints
    its help and runs nothing: on 2026-12-03 `--report-api-errors yes`
    failed all nine sanitizer runs that way. CI has no compute-sanitizer,
    so the values are checked against what CUDA 13.0's accepts."""

    REPORT_API_ERRORS = {"all", "explicit", "no"}  # compute-sanitizer --help, CUDA 13.0

    def test_every_sanitize_call_reports_api_errors_by_a_known_value(self):
        with open(SCRIPT, encoding="utf-8") as f:
            calls = re.findall(r"^\s*sanitize (\S+) (\S+) (\S+) ", f.read(), re.M)
        self.assertGreaterEqual(len(calls), 2, "the sanitize and sanitize-context stages")
        for stage, _, api in calls:
            self.assertIn(api, self.REPORT_API_ERRORS, f"stage {stage}: --report-api-errors {api}")


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
