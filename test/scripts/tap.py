"""Runs a module's unittest cases printing TAP (meson's `protocol: 'tap'`),
so each case is counted like a GoogleTest case."""

import sys
import unittest


class TapResult(unittest.TestResult):
    """Prints one TAP line per case as it ends."""

    def __init__(self):
        super().__init__()
        self.number = 0
        self.sub_failed = set()  # tests with a failed subTest: no addFailure comes for them

    def line(self, ok, test, directive=""):
        self.number += 1
        print(f"{'ok' if ok else 'not ok'} {self.number} - {test.id().split('.', 1)[1]}{directive}")

    def diagnose(self, test, err):
        for text in self._exc_info_to_string(err, test).splitlines():
            print(f"# {text}")

    def addSuccess(self, test):
        super().addSuccess(test)
        self.line(True, test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.line(False, test)
        self.diagnose(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self.line(False, test)
        self.diagnose(test, err)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.sub_failed.add(test.id())
            self.diagnose(subtest, err)

    def stopTest(self, test):
        super().stopTest(test)
        if test.id() in self.sub_failed:
            self.line(False, test)

    def addSkip(self, test, why):
        super().addSkip(test, why)
        self.line(True, test, f" # SKIP {why}")


def run_module(name):
    """Runs every case of module `name`; the exit status for sys.exit."""
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[name])
    print(f"1..{suite.countTestCases()}")
    result = TapResult()
    suite.run(result)
    return 0 if result.wasSuccessful() else 1
