#!/usr/bin/env python3
"""Unit tests of scripts/patch_variant.py (a patch as perf-variants.sh's
replacements) on patches made by `git diff` of a scratch tree: applied as
perf-variants.sh applies them, the replacements give the patched files,
reversed they give the originals back, and a patch that does not fit the
tree is refused before any build.

Speaks TAP (meson's `protocol: 'tap'`). Run by hand:
python3 test/scripts/test_patch_variant.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "patch_variant.py")
sys.path.insert(0, HERE)
import tap  # noqa: E402

FUNCTIONS = "".join(f"int f{i}() {{\n  return {i};\n}}\n\n" for i in range(8))
BEFORE = {
    "src/a.h": FUNCTIONS,
    "src/b.h": "// b\n-- not a header\nconst int k = 4;\n",
}
# Three hunks over two files: a change, a pure insertion (its old text is
# context alone), a removed line that reads like a file header, and a last
# line without a newline.
AFTER = {
    "src/a.h": FUNCTIONS.replace("return 0;", "return 10;").replace("  return 7;\n", "  return 7;\n  // seven\n"),
    "src/b.h": "// b\nconst int k = 5;",
}


def write(root, files):
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w", encoding="utf-8") as f:
            f.write(text)


def read(root, files):
    out = {}
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            out[path] = f.read()
    return out


def diff(before, after):
    """`git diff --no-index` of two scratch trees, paths a/ and b/ from the root."""
    with tempfile.TemporaryDirectory() as d:
        write(os.path.join(d, "old"), before)
        write(os.path.join(d, "new"), after)
        out = []
        for path in before:
            r = subprocess.run(["git", "diff", "--no-index", "-U2", f"old/{path}", f"new/{path}"], cwd=d,
                               capture_output=True, text=True, check=False)
            out.append(r.stdout.replace(f"a/old/{path}", f"a/{path}").replace(f"b/new/{path}", f"b/{path}"))
        return "".join(out)


class PatchVariant(unittest.TestCase):
    def setUp(self):
        if shutil.which("git") is None:
            self.skipTest("git is needed to make the patches")
        self.tree = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tree)
        self.patch = os.path.join(self.tree, "change.patch")
        with open(self.patch, "w", encoding="utf-8") as f:
            f.write(diff(BEFORE, AFTER))

    def variant(self, *args):
        r = subprocess.run([sys.executable, SCRIPT, "v", self.patch, *args], cwd=self.tree, capture_output=True,
                           check=False)
        return r.returncode, r.stdout.decode(), r.stderr.decode()

    def replace(self, out):
        """What perf-variants.sh does with the arguments: each OLD, once, by NEW."""
        args = out.split("\0")[:-1]
        self.assertEqual(len(args) % 4, 0)
        for i in range(0, len(args), 4):
            name, path, old, new = args[i:i + 4]
            self.assertEqual(name, "v")
            text = read(self.tree, [path])[path]
            self.assertEqual(text.count(old), 1, f"{path}: {old!r}")
            write(self.tree, {path: text.replace(old, new)})
        return len(args) // 4

    def test_the_replacements_give_the_patched_files(self):
        write(self.tree, BEFORE)
        code, out, err = self.variant()
        self.assertEqual(code, 0, err)
        self.assertEqual(self.replace(out), 3)
        self.assertEqual(read(self.tree, AFTER), AFTER)

    def test_reversed_they_give_the_originals_back(self):
        write(self.tree, AFTER)
        code, out, err = self.variant("--reverse")
        self.assertEqual(code, 0, err)
        self.replace(out)
        self.assertEqual(read(self.tree, BEFORE), BEFORE)

    def test_a_patch_that_does_not_fit_is_refused(self):
        write(self.tree, AFTER)  # already patched: the old text is not there
        code, out, err = self.variant()
        self.assertNotEqual(code, 0)
        self.assertEqual(out, "")
        self.assertIn("src/a.h", err)


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
