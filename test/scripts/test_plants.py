#!/usr/bin/env python3
"""Checks of the planted breaks (test/plants/plants.py) that need no GPU:
each still applies to the library as it is (a stale one fails, naming
it: a plant that no longer applies proves nothing, so update its text),
each names tests of binaries the build makes. Whether the tests fail against them is gpu-check.sh's `plants`
stage. Speaks TAP. Run by hand: python3 test/scripts/test_plants.py
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
                self.assertIn(binary, built, f"plant {p.name}")


class ApplyAndRevert(unittest.TestCase):
    """On a copy of one plant's file: apply changes it, revert restores it
    with a newer time than the planted build (or ninja keeps the plant)."""

    def test_round_trip(self):
        plant = plants.PLANTS[0]
        saved_root = plants.ROOT
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, os.path.dirname(plant.path)))
            path = os.path.join(root, plant.path)
            shutil.copy2(os.path.join(saved_root, plant.path), path)
            original = open(path, encoding="utf-8").read()
            os.utime(path, (1, 1))  # an old source file
            plants.ROOT = root
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    self.assertEqual(plants.apply(plant), 0)
                    planted = open(path, encoding="utf-8").read()
                    self.assertNotEqual(planted, original)
                    self.assertIn(plant.new, planted)
                    built = os.stat(path).st_mtime  # the planted build is at least this new
                    self.assertEqual(plants.revert(plant), 0)
                    self.assertEqual(plants.revert(plant), 2, "a second revert has nothing to restore")
            finally:
                plants.ROOT = saved_root
            self.assertEqual(open(path, encoding="utf-8").read(), original)
            self.assertGreaterEqual(os.stat(path).st_mtime, built)
            self.assertGreater(os.stat(path).st_mtime, 1)


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
