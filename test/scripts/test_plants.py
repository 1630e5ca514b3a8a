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
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "plants"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import gtest_filters  # noqa: E402
import plants  # noqa: E402
import tap  # noqa: E402

# The build directory (test/meson.build passes it): the GoogleTest binaries
# whose tests the plants' filters must name. None when run by hand without.
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DCP_BUILD_DIR")


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


class PlantFilters(unittest.TestCase):
    """Every pattern of every plant's GoogleTest filter names a test of its
    binary as built (`--gtest_list_tests`, no GPU needed): a renamed test
    would otherwise leave a pattern that runs nothing, and a plant whose
    other patterns still fail would look caught by a test that is gone.
    The TAP filters name unittest cases of their module."""

    def setUp(self):
        if not BUILD:
            self.skipTest("no build directory given (test/meson.build passes it)")

    def test_every_gtest_pattern_names_a_built_test(self):
        listed = {}
        bad = []
        for p in plants.PLANTS:
            for binary, flt, _ in p.tests:
                if binary in plants.TAP_TESTS or binary == plants.PYTEST:
                    continue
                if binary not in listed:
                    path = os.path.join(BUILD, "test", binary)
                    self.assertTrue(os.access(path, os.X_OK), f"plant {p.name}: {path} is not built")
                    listed[binary] = gtest_filters.list_tests(path)
                for pattern in gtest_filters.unmatched(flt, listed[binary]):
                    bad.append(f"plant {p.name}: {binary} '{pattern}' names no test")
        self.assertFalse(bad, "\n".join(bad))
        self.assertGreater(len(listed), 5)

    def test_every_tap_filter_names_a_case(self):
        for p in plants.PLANTS:
            for binary, flt, _ in p.tests:
                if binary not in plants.TAP_TESTS:
                    continue
                module = __import__(plants.TAP_TESTS[binary])
                names = {t.id().split(".", 1)[1] for t in _cases(unittest.defaultTestLoader.loadTestsFromModule(module))}
                for name in flt.split(":"):
                    self.assertIn(name, names, f"plant {p.name}: {binary} {name}")

    def test_the_matcher(self):
        names = ["A.b", "A.c", "P/S.t/x", "P/S.t/y"]
        self.assertEqual(gtest_filters.unmatched("A.b:A.gone", names), ["A.gone"])
        self.assertEqual(gtest_filters.unmatched("P/S.t/*:A.?", names), [])
        self.assertEqual(gtest_filters.selected("A.*-A.c", names), ["A.b"])
        self.assertEqual(gtest_filters.unmatched("A.*-A.*", names), ["A.*-A.*"], "a filter that selects nothing")
        self.assertEqual(gtest_filters.parse_list("A.\n  b\n  c  # GetParam() = 3\nP/S.\n  t/x\n"),
                         ["A.b", "A.c", "P/S.t/x"])


def _cases(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _cases(t)
        else:
            yield t


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


class FocusedRebuild(unittest.TestCase):
    """In a job's copy a header plant rebuilds what its tests run: the
    sources that include the header, and of the fused kernel families
    only those its GPU tests name (a family left out would make a test
    pass, and the plant FAIL: never a false catch)."""

    def test_kernel_families_read_from_the_test_name(self):
        fam = plants.kernel_families
        self.assertEqual(fam("gpu_loopback", "Transports/LoopbackMatrix.MatchesReference/LL128_bf16_baseE"),
                         ({"ll128"}, {"native"}))
        self.assertEqual(fam("gpu_scatter", "Modes/ScatterMatrix.MatchesReference/head_LL"), ({"ll"}, {"native"}))
        self.assertEqual(fam("gpu_scatter", "A/B.C/SIMPLE_fp16:A/B.C/LL_fp32"), ({"simple", "ll"}, {"native"}))
        self.assertEqual(fam("gpu_fp8_wire", "Protocols/Fp8Wire.MatchesModelBitwise/*"),
                         ({"ll", "ll128", "simple"}, {"native", "fp8"}), "no protocol named: all; fp8 with native")
        self.assertEqual(fam("gpu_scatter", "Types/NoneTwoPhaseMatrix.X/AUTO_bf16_lse_bf16")[0],
                         {"ll", "ll128", "simple"}, "AUTO may pick any protocol")
        self.assertEqual(fam("gpu_context", "OneRankContext.ALLGather")[0], {"ll", "ll128", "simple"},
                         "LL inside a word is no protocol")

    def test_sources_including_follow_includes_through_headers(self):
        found = plants.sources_including("src/device/merge.h")
        self.assertIn("src/reference.cc", found)
        self.assertIn("src/kernels/fused_ll_native_lsa.cu", found, "through kernels/fused.cuh and device/kernel.h")
        self.assertNotIn("src/env.cc", found)

    def test_only_the_families_the_gpu_tests_run(self):
        plant = plants.Plant("p", "src/device/merge.h", "a", "b",
                             [("unit_reference", "A.b", 0),
                              ("gpu_loopback", "Transports/LoopbackMatrix.MatchesReference/LL128_bf16_baseE", 1),
                              ("multi_ranks", "Cp/Ranks.X/cp2", 2)], "")
        kernels = {r for r in plants.focused_sources(plant, 1) if r.startswith("src/kernels/fused_")}
        self.assertEqual(kernels, {"src/kernels/fused_ll128_native_loopback.cu",
                                   "src/kernels/fused_ll128_native_lsa.cu"})
        self.assertIn("src/reference.cc", plants.focused_sources(plant, 1))
        self.assertFalse([r for r in plants.focused_sources(plant, 0) if r.endswith(".cu")],
                         "no GPU test runs: no CUDA source is rebuilt")
        everything = plants.focused_sources(plant, 2)
        self.assertEqual(len([r for r in everything if r.startswith("src/kernels/fused_")]), 6,
                         "a test naming no protocol runs every protocol's (native) families")

    def test_apply_focused_keeps_the_headers_time_and_touches_its_includers(self):
        plant = plants.find("nan_lse_not_sanitized")
        with tempfile.TemporaryDirectory() as root:
            for top in ("src", "include", "test", "perf", "plugin"):
                shutil.copytree(os.path.join(plants.ROOT, top), os.path.join(root, top),
                                ignore=shutil.ignore_patterns("*.plant-orig"))
            for dirpath, _, files in os.walk(root):
                for f in files:
                    os.utime(os.path.join(dirpath, f), (1000, 1000))
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(plants.apply_focused(plant, root, plants.focused_sources(plant, 1, root)), 0)
            header = os.path.join(root, plant.path)
            self.assertIn(plant.new, open(header, encoding="utf-8").read())
            self.assertEqual(os.stat(header).st_mtime, 1000, "the planted header looks unchanged to ninja")
            touched = {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
                       if not f.endswith(plants.BACKUP) and os.stat(os.path.join(d, f)).st_mtime > 1000}
            self.assertEqual(touched, set(plants.focused_sources(plant, 1, root)))
            self.assertIn("src/kernels/fused_ll128_native_loopback.cu", touched)
            self.assertNotIn("src/kernels/fused_simple_native_loopback.cu", touched)


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


class Skipped(unittest.TestCase):
    """A listed test needing more GPUs than the run has is shown and
    written to the JUnit file as skipped, never dropped in silence."""

    def test_tests_needing_more_gpus_are_listed_with_why(self):
        p = plants.Plant("p", "src/x.cc", "a", "b", [("unit_x", "A.b", 0), ("gpu_x", "G.h", 1), ("multi_x", "M.n", 2)], "")
        skipped = plants.skipped_tests([p], 1)
        self.assertEqual([(r["binary"], r["filter"]) for r in skipped], [("multi_x", "M.n")])
        self.assertIn("needs 2 GPU(s), this run has 1", skipped[0]["what"])
        self.assertEqual(len(plants.skipped_tests([p], 0)), 2)

    def test_junit_marks_them_skipped(self):
        p = plants.Plant("p", "src/x.cc", "a", "b", [("multi_x", "M.n", 2)], "")
        results = plants.skipped_tests([p], 1) + [{"plant": "p", "binary": "unit_x", "filter": "A.b", "ok": True,
                                                   "what": "failed as it must", "seconds": 1.0}]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "plants.junit.xml")
            plants.write_junit(path, results, "plants")
            text = open(path, encoding="utf-8").read()
        self.assertIn("<skipped", text)
        self.assertIn('skipped="1"', text)
        self.assertNotIn("<failure", text)


class Trees(unittest.TestCase):
    """A parallel job's copy: the sources and the build directory with
    their times, build.ninja's absolute paths pointed at the copy, other
    build directories, the jobs' own directory and the build's logs and
    venvs left out."""

    def test_prepare_tree(self):
        with tempfile.TemporaryDirectory() as d:
            root = os.path.join(d, "repo")
            for rel, text in (("src/a.cc", "int a;"), ("build/build.ninja", f"command = x {root} {root}/build/p.so "
                              f"-DX=\"{root}/test/data\" {root}-other -I{root}/.deps/nccl/include\n"),
                              ("build/meson-private/coredata.dat", ""),
                              ("build/logs/big.log", "x"), ("build/pytest-venv/bin/python", ""),
                              ("build2/meson-private/coredata.dat", ""), (".git/HEAD", "")):
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                    f.write(text)
            os.utime(os.path.join(root, "src/a.cc"), (1000, 1000))
            trees = os.path.join(root, "build.plant-trees")
            os.makedirs(trees)
            tree = os.path.join(trees, "0")
            tree_build = plants.prepare_tree(root, os.path.join(root, "build"), tree, trees)
            self.assertEqual(tree_build, os.path.join(tree, "build"))
            self.assertEqual(os.stat(os.path.join(tree, "src/a.cc")).st_mtime, 1000)
            ninja = open(os.path.join(tree_build, "build.ninja"), encoding="utf-8").read()
            self.assertIn(f"x {tree} {tree}/build/p.so -DX=\"{tree}/test/data\" {root}-other -I{root}/.deps/nccl/include",
                          ninja)
            for gone in ("build/logs", "build/pytest-venv", "build2", ".git", "build.plant-trees"):
                self.assertFalse(os.path.exists(os.path.join(tree, gone)), gone)
            self.assertTrue(os.path.exists(os.path.join(tree_build, "meson-private/coredata.dat")))


class ParallelRun(unittest.TestCase):
    """`run --jobs 2` on the build (the GPU stage's way, here with two
    plants in src/device/merge.h whose tests need no GPU): each plant in a
    fresh copy of its own, both caught, the tree and build given left
    untouched. The copies keep the header's time, so the library's
    includers are rebuilt because they were touched (one left out: its
    test passes, the plant FAILs), and no CUDA source is (no test runs a
    kernel)."""

    def setUp(self):
        if not BUILD:
            self.skipTest("no build directory given (test/meson.build passes it)")

    def test_two_jobs_catch_two_header_plants_in_copies(self):
        names = ["nan_lse_not_sanitized", "lse_base_e_weighed_as_base_2"]
        before = {n: plants.source(plants.find(n)) for n in names}
        with tempfile.TemporaryDirectory() as d:
            logs = os.path.join(d, "logs")
            r = subprocess.run([sys.executable, os.path.join(plants.ROOT, "test", "plants", "plants.py"), "run",
                                "--build", os.path.abspath(BUILD), "--gpus", "0", "--jobs", "2", "--trees",
                                os.path.join(d, "trees"), "--logs", logs, *names],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertFalse(os.path.exists(os.path.join(d, "trees")), "the jobs' copies were not removed")
            built = "".join(open(os.path.join(logs, f), encoding="utf-8").read() for f in os.listdir(logs))
        for n in names:
            self.assertIn(f"PLANT ok {n}: ", r.stdout)
            self.assertIn(f"planted {n} in ", r.stdout)
            self.assertEqual(plants.source(plants.find(n)), before[n], "the tree given was planted")
        self.assertIn("plants: 2 jobs, each plant in a fresh copy of the tree", r.stdout)
        self.assertRegex(r.stdout, r"plants: (\d+) of \1 planted breaks caught")
        self.assertIn("src_reference.cc.o", built)
        self.assertNotIn("Compiling Cuda", built)

    def test_a_stopped_run_judges_nothing_it_killed(self):
        """SIGINT while a job builds: the killed build is no catch."""
        with tempfile.TemporaryDirectory() as d:
            proc = subprocess.Popen([sys.executable, "-u", os.path.join(plants.ROOT, "test", "plants", "plants.py"),
                                     "run", "--build", os.path.abspath(BUILD), "--gpus", "0", "--jobs", "2",
                                     "--trees", os.path.join(d, "trees"), "--logs", os.path.join(d, "logs"),
                                     "nan_lse_not_sanitized", "lse_base_e_weighed_as_base_2"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            out = []
            for line in proc.stdout:
                out.append(line)
                if line.startswith("planted "):
                    proc.send_signal(2)
                    break
            out += proc.stdout.readlines()
            rc = proc.wait(timeout=120)
            text = "".join(out)
            self.assertEqual(rc, 1, text)
            self.assertIn("plants run interrupted", text)
            self.assertNotIn("PLANT ok", text)
            self.assertFalse(os.path.exists(os.path.join(d, "trees")), "the jobs' copies were not removed")
        self.assertEqual(plants.applies(plants.find("nan_lse_not_sanitized")), True, "the tree given was planted")


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
