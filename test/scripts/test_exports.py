#!/usr/bin/env python3
"""What libnccl_dcp.so exports: the C API of include/nccl_dcp.h and nothing
else (src/exports.map). Internal C++ symbols in the dynamic table are a
contract nobody signed, and they clash with another copy of the same
names in the process.

Speaks TAP (meson's `protocol: 'tap'`). Run by hand:
python3 test/scripts/test_exports.py <build>/libnccl_dcp.so
"""

import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tap  # noqa: E402

HEADER = os.path.join(HERE, "..", "..", "include", "nccl_dcp.h")
LIBRARY = sys.argv[1] if len(sys.argv) > 1 else ""


def exported(path):
    """Names of the defined symbols in the dynamic table of path."""
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def declared():
    """Functions declared in the public header."""
    with open(HEADER, encoding="utf-8") as f:
        return set(re.findall(r"^(?:ncclResult_t|const char\*)\s+(ncclDcp\w+)\(", f.read(), re.M))


class Exports(unittest.TestCase):
    def setUp(self):
        if not LIBRARY or not os.path.exists(LIBRARY):
            self.fail(f"no library to inspect: {LIBRARY!r} (pass the path of libnccl_dcp.so)")
        self.names = exported(LIBRARY)

    def test_only_the_c_api_is_exported(self):
        internal = sorted(n for n in self.names if not n.startswith("ncclDcp"))
        self.assertEqual(internal, [], f"{len(internal)} symbols beyond the C API, e.g. {internal[:5]}")

    def test_no_failure_injection_in_the_shipped_library(self):
        # src/testing.h's hooks live in the test build only, not even as local symbols.
        out = subprocess.run(["nm", "-C", LIBRARY], capture_output=True, text=True).stdout
        self.assertNotIn("injectCreateFault", out)
        self.assertNotIn("injectedFailure", out)

    def test_every_declared_function_is_exported(self):
        self.assertEqual(sorted(declared() - self.names), [])
        self.assertGreaterEqual(len(declared()), 15)


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
