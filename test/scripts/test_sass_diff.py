#!/usr/bin/env python3
"""Unit tests of scripts/sass_diff.py (whether two builds compile to the
same kernels) on listings written here in cuobjdump's layout, read through
a stand-in cuobjdump: the same listing is identical, a register renamed
and two instructions swapped are the same instructions, RZ for a register
or another constant differs, a changed control word is not identical,
and a kernel on one side only fails the comparison.

Speaks TAP (meson's `protocol: 'tap'`). Run by hand:
python3 test/scripts/test_sass_diff.py
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "sass_diff.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import sass_diff  # noqa: E402
import tap  # noqa: E402

HEAD = "_ZN8nccl_dcp11fusedKernelINS_14SimpleProtocolENS_4ModeILNS_7ScatterE0ELb0EEENS_5CodecI13__nv_bfloat16LNS_4WireE0EEENS_13LoopbackPeersEEEvNS_11FusedParamsIT2_EE"
TOKEN = HEAD.replace("ScatterE0", "ScatterE1")
CODE = ["LDC R1, c[0x0][0x28]", "S2R R10, SR_TID.X", "VIADD R8, R20, 0xffffffff", "ISETP.NE.AND P2, PT, R117, R8, PT",
        "IADD3 R6, R5, -0x1, R3", "EXIT"]


def listing(kernels):
    """cuobjdump -sass text of {name: [(instruction, control word)]}."""
    out = ["", "Fatbin elf code:", "================", "arch = sm_90", "", "\tcode for sm_90", "\t.target\tsm_90"]
    for name, code in kernels.items():
        out += ["", f"\t\tFunction : {name}", '\t.headerflags\t@"EF_CUDA_SM90"']
        for i, (instruction, control) in enumerate(code):
            out.append(f"        /*{16 * i:04x}*/                   {instruction} ;{' ' * 20}/* 0x{i:016x} */")
            out.append(f"{' ' * 60}/* 0x{control:016x} */")
    return "\n".join(out) + "\n"


def plain(code):
    return [(instruction, 0x000FE20000000000) for instruction in code]


class SassDiff(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        # A stand-in cuobjdump: `cuobjdump -sass FILE` prints FILE.
        self.tool = os.path.join(self.dir.name, "cuobjdump")
        with open(self.tool, "w") as f:
            f.write('#!/bin/sh\n[ "$1" = -sass ] && exec cat "$2"\nexit 2\n')
        os.chmod(self.tool, 0o755)

    def tearDown(self):
        self.dir.cleanup()

    def run_script(self, old, new):
        paths = []
        for side, kernels in (("old", old), ("new", new)):
            paths.append(os.path.join(self.dir.name, f"{side}.o"))
            with open(paths[-1], "w") as f:
                f.write(listing(kernels))
        env = dict(os.environ, CUOBJDUMP=self.tool)
        r = subprocess.run([sys.executable, SCRIPT, *paths], capture_output=True, text=True, env=env)
        return r.returncode, r.stdout, r.stderr

    def test_the_same_listing_is_identical(self):
        kernels = {HEAD: plain(CODE), TOKEN: plain(CODE[:2] + CODE[4:])}
        code, out, err = self.run_script(kernels, kernels)
        self.assertEqual(code, 0, err)
        self.assertIn("identical          sm_90 SIMPLE/native/head/loopback/bf16", out)
        self.assertIn("identical          sm_90 SIMPLE/native/token/loopback/bf16", out)
        self.assertTrue(out.endswith("2 kernels: 2 identical\n"), out)

    def test_registers_renamed_and_instructions_swapped_are_the_same_instructions(self):
        moved = [CODE[0], CODE[1], "VIADD R20, R20, 0xffffffff", "IADD3 R6, R5, -0x1, R3",
                 "ISETP.NE.AND P2, PT, R117, R20, PT", CODE[5]]
        code, out, err = self.run_script({HEAD: plain(CODE)}, {HEAD: plain(moved)})
        self.assertEqual(code, 0, err)
        self.assertIn("same instructions  sm_90 SIMPLE/native/head/loopback/bf16", out)

    def test_a_constant_or_rz_for_a_register_differs(self):
        for changed in ("VIADD R8, R20, 0xfffffffe", "VIADD R8, RZ, 0xffffffff"):
            with self.subTest(changed=changed):
                code, out, _ = self.run_script({HEAD: plain(CODE)}, {HEAD: plain([changed if i == CODE[2] else i
                                                                                  for i in CODE])})
                self.assertEqual(code, 1)
                self.assertIn("differs            sm_90 SIMPLE/native/head/loopback/bf16 (6 -> 6 instructions)", out)
                self.assertIn("    -    1 x VIADD R#, R#, 0xffffffff", out)
                self.assertIn("    +    1 x " + sass_diff.abstract(changed), out)

    def test_a_changed_control_word_is_not_identical(self):
        stalled = plain(CODE)
        stalled[3] = (stalled[3][0], 0x000FC80000000000)
        code, out, err = self.run_script({HEAD: plain(CODE)}, {HEAD: stalled})
        self.assertEqual(code, 0, err)
        self.assertIn("same instructions  sm_90", out)

    def test_a_kernel_on_one_side_only_fails(self):
        code, out, _ = self.run_script({HEAD: plain(CODE)}, {HEAD: plain(CODE), TOKEN: plain(CODE)})
        self.assertEqual(code, 1)
        self.assertIn("only in new        sm_90 SIMPLE/native/token/loopback/bf16", out)
        self.assertTrue(out.endswith("2 kernels: 1 identical, 1 only in new\n"), out)

    def test_abstract_keeps_zero_and_true_registers(self):
        self.assertEqual(sass_diff.abstract("@!P3 IADD3 R7.reuse, UR4, -RZ, URZ"), "@!P# IADD3 R#, UR#, -RZ, URZ")
        self.assertEqual(sass_diff.abstract("PLOP3.LUT P0, PT, PT, UP1, UPT, 0x80"),
                         "PLOP3.LUT P#, PT, PT, UP#, UPT, 0x80")


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
