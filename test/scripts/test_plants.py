#!/usr/bin/env python3
"""Checks of the planted breaks (test/plants/plants.py) that need no GPU:
how a run is judged, that a plant left in place is never backed up over,
each still applies to the library as it is (a stale one fails, naming
it: a plant that no longer applies proves nothing, so update its text),
each names tests of binaries the build makes. Whether the tests fail
against them is `plants.py run`'s (.ci/run: the plants whose tests need no
GPU; gpu-check.sh's `plants` stage: all). Speaks TAP. Run by hand:
python3 test/scripts/test_plants.py
"""

import contextlib
import io
import os
import re
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "plants"))
sys.path.insert(0, HERE)
import plants  # noqa: E402
import tap  # noqa: E402


def built_binaries():
    with open(os.path.join(plants.ROOT, "test", "meson.build"), encoding="utf-8") as f:
        return set(re.findall(r"'((?:unit|gpu|multi)_\w+)'", f.read()))


class PlantList(unittest.TestCase):
    def test_names_are_unique(self):
        names = [p.name for p in plants.PLANTS]
        self.assertEqual(len(names), len(set(names)))

    def test_every_plant_changes_its_text_and_names_tests(self):
        for p in plants.PLANTS:
            self.assertNotEqual(p.old, p.new, p.name)
            self.assertTrue(p.tests, p.name)

    def test_every_named_binary_is_built(self):
        built = built_binaries()
        for p in plants.PLANTS:
            for binary, _, _ in p.tests:
                if binary == plants.PYTEST:
                    continue
                self.assertIn(binary, built, f"plant {p.name}")

    def test_pytest_filters_name_one_existing_test_each(self):
        # A pytest filter is one node id: its file exists and defines the test.
        for p in plants.PLANTS:
            for binary, flt, _ in p.tests:
                if binary != plants.PYTEST:
                    continue
                path, _, name = flt.partition("::")
                self.assertTrue(name and "::" not in name, f"plant {p.name}: {flt} is not FILE::TEST")
                with open(os.path.join(plants.ROOT, path), encoding="utf-8") as f:
                    self.assertRegex(f.read(), rf"(?m)^def {re.escape(name.split('[')[0])}\(", f"plant {p.name}")

    def test_python_binaries_are_known_tap_tests(self):
        # A Python test not in TAP_TESTS would be run as BUILD/test/NAME.
        with open(os.path.join(plants.ROOT, "test", "meson.build"), encoding="utf-8") as f:
            tap = set(re.findall(r"test\('(\w+)', python3, args: \[?files\('scripts/(\w+)\.py'\)", f.read()))
        self.assertEqual(set(plants.TAP_TESTS.items()), tap)


class CudaRebuild(unittest.TestCase):
    """A plant in a header reaches the kernels: nvcc's objects have no
    header dependencies in ninja, so the run marks src/*.cu out of date
    (only when a GPU test of the plant runs)."""

    def test_header_plants_with_gpu_tests_rebuild_the_kernels(self):
        header = plants.Plant("h", "src/device/x.h", "a", "b", [("unit_x", "A.b", 0), ("gpu_x", "A.b", 1)], "")
        self.assertTrue(plants.needs_cuda_rebuild(header, 1))
        self.assertFalse(plants.needs_cuda_rebuild(header, 0), "no GPU test runs: the kernels are not needed")
        source = plants.Plant("c", "src/x.cc", "a", "b", [("gpu_x", "A.b", 1)], "")
        self.assertFalse(plants.needs_cuda_rebuild(source, 1))


class Judging(unittest.TestCase):
    """A listed test catches its plant only when it ran a case and failed."""

    def test_gtest_failure_catches(self):
        ok, what = plants.judge(False, 1, "[ RUN      ] A.b\n[  FAILED  ] A.b (3 ms)\n")
        self.assertTrue(ok, what)
        self.assertIn("1 ran, 1 failed", what)

    def test_gtest_pass_does_not(self):
        ok, what = plants.judge(False, 0, "[ RUN      ] A.b\n[       OK ] A.b (3 ms)\n")
        self.assertFalse(ok)
        self.assertIn("PASSED against the planted break", what)

    def test_gtest_filter_matching_nothing_does_not_even_when_the_binary_fails(self):
        for status in (0, 1, None):
            ok, what = plants.judge(False, status, "[==========] 0 tests from 0 test suites ran.\n")
            self.assertFalse(ok, status)
            self.assertIn("matched no test", what)

    def test_crash_inside_a_case_catches(self):
        self.assertTrue(plants.judge(False, 139, "[ RUN      ] A.b\n")[0])

    def test_unittest_failure_catches(self):
        out = "test_x (m.C.test_x) ... FAIL\n\nRan 1 test in 0.001s\n\nFAILED (failures=1)\n"
        self.assertTrue(plants.judge(True, 1, out)[0])

    def test_pytest_failure_catches(self):
        out = ("python/tests/test_v.py::test_a PASSED [ 50%]\n"
               "python/tests/test_v.py::test_b FAILED [100%]\n\n1 failed, 1 passed in 0.1s\n")
        ok, what = plants.judge(plants.PYTEST, 1, out)
        self.assertTrue(ok, what)
        self.assertIn("2 ran, 1 failed", what)

    def test_pytest_pass_and_nothing_collected_do_not(self):
        ok, what = plants.judge(plants.PYTEST, 0, "python/tests/test_v.py::test_a PASSED [100%]\n")
        self.assertFalse(ok)
        self.assertIn("PASSED against the planted break", what)
        ok, what = plants.judge(plants.PYTEST, 4, "ERROR: not found: python/tests/test_v.py::test_x\n")
        self.assertFalse(ok)
        self.assertIn("matched no test", what)
        # A skip (no torch, no GPU) proves nothing either.
        ok, what = plants.judge(plants.PYTEST, 0, "python/tests/test_v.py::test_a SKIPPED (no torch) [100%]\n")
        self.assertFalse(ok)
        self.assertIn("matched no test", what)

    def test_unittest_name_matching_nothing_does_not(self):
        out = ("test_y (unittest.loader._FailedTest.test_y) ... ERROR\n\nRan 1 test in 0.000s\n"
               "\nFAILED (errors=1)\n")
        ok, what = plants.judge(True, 1, out)
        self.assertFalse(ok)
        self.assertIn("matched no test", what)


@contextlib.contextmanager
def copied_root(plant):
    """plants.ROOT pointed at a scratch tree holding a copy of plant's file;
    yields the copy's path (plants' output swallowed)."""
    saved_root = plants.ROOT
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, os.path.dirname(plant.path)))
        path = os.path.join(root, plant.path)
        shutil.copy2(os.path.join(saved_root, plant.path), path)
        plants.ROOT = root
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                yield path
        finally:
            plants.ROOT = saved_root


class ApplyAndRevert(unittest.TestCase):
    """On a copy of one plant's file: apply changes it, revert restores it
    with a newer time than the planted build (or ninja keeps the plant)."""

    def test_round_trip(self):
        plant = plants.PLANTS[0]
        with copied_root(plant) as path:
            original = open(path, encoding="utf-8").read()
            os.utime(path, (1, 1))  # an old source file
            self.assertEqual(plants.apply(plant), 0)
            planted = open(path, encoding="utf-8").read()
            self.assertNotEqual(planted, original)
            self.assertIn(plant.new, planted)
            built = os.stat(path).st_mtime  # the planted build is at least this new
            self.assertEqual(plants.revert(plant), 0)
            self.assertEqual(plants.revert(plant), 2, "a second revert has nothing to restore")
            self.assertEqual(open(path, encoding="utf-8").read(), original)
            self.assertGreaterEqual(os.stat(path).st_mtime, built)
            self.assertGreater(os.stat(path).st_mtime, 1)


class Backups(unittest.TestCase):
    """A plant left in place (a run killed outright) is never backed up
    over: apply refuses, revert-all restores the real file."""

    def test_apply_refuses_and_revert_all_restores(self):
        plant = plants.PLANTS[0]
        with copied_root(plant) as path:
            original = open(path, encoding="utf-8").read()
            self.assertEqual(plants.apply(plant), 0)
            self.assertEqual(plants.apply(plant), 2, "a second apply would back up the planted file")
            self.assertEqual(plants.revert_all(), 1, "revert-all found nothing to restore")
            self.assertEqual(plants.revert_all(), 0)
            self.assertEqual(open(path, encoding="utf-8").read(), original)
            self.assertFalse(os.path.exists(path + plants.BACKUP))


class PlantsApply(unittest.TestCase):
    """One case per plant: its text is in its file exactly once. A plant
    that rotted is a failure, not a skip: CI must not stay green while the
    break it stood for goes unchecked."""


def _applies_case(plant):
    def case(self):
        if not plants.applies(plant):
            self.fail(f"plant {plant.name} no longer applies to {plant.path}: its text is not there exactly "
                      "once; update test/plants/plants.py")
    return case


for _plant in plants.PLANTS:
    setattr(PlantsApply, f"test_{_plant.name}", _applies_case(_plant))


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
