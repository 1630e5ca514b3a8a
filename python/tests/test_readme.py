#!/usr/bin/env python3
"""The README's first screen stays true: its status table gives every
feature one of the three verification levels (CPU, 1xH200, 2xH200) and a
page that exists; every relative link of the README and of docs/*.md
resolves (a file, and where it names one, a heading of it); the README fits
in 200 lines; its quick starts are at most 10 lines each; and the
documentation carries no note of a GPU run still to come (the table says
where each feature was verified instead).

Pure Python, no torch: `python3 -m pytest python/tests/test_readme.py`
(.ci/run runs it with the rest of python/tests).
"""

import os
import re
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
README = os.path.join(ROOT, "README.md")
LEVELS = {"CPU", "1×H200", "2×H200"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def section(text, title):
    """The lines of `## title` up to the next `## ` heading."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def table_rows(text, first_header):
    """The rows (lists of cells) of the markdown table whose header row
    starts with `| first_header |`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"| {first_header} |"):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    return []


def anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    return {anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", read(path), re.M)}


def broken_links(path):
    """Relative links of a markdown file that lead nowhere."""
    broken = []
    for target in LINK.findall(read(path)):
        if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
            continue
        file_part, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            broken.append(f"{target} (no {os.path.relpath(dest, ROOT)})")
        elif frag and dest.endswith(".md") and frag not in anchors(dest):
            broken.append(f"{target} (no heading #{frag} in {os.path.relpath(dest, ROOT)})")
    return broken


# Where a source takes an NCCL_DCP_* name from the environment: C / C++
# getenv and the library's and plugin's getters, Python's os.environ /
# os.getenv, a shell script's $NAME.
ENV_READ = {
    "c": re.compile(r'\b(?:getenv|get|envOr|envBool)\(\s*"(NCCL_DCP_[A-Z0-9_]+)"'),
    "py": re.compile(r"""os\.(?:environ(?:\.get\(|\[|\.setdefault\(|\.pop\()|getenv\()\s*["'](NCCL_DCP_[A-Z0-9_]+)"""),
    "sh": re.compile(r"\$\{?(NCCL_DCP_[A-Z0-9_]+)"),
}
ENV_KIND = {".c": "c", ".cc": "c", ".cu": "c", ".cuh": "c", ".h": "c", ".py": "py", ".sh": "sh"}
SOURCE_DIRS = ("src", "plugin", "perf", "python/nccl_dcp", "python/tests", "test", "scripts", "examples", ".ci")


def variables_read():
    """{name: [files]} of every NCCL_DCP_* variable the sources read."""
    found = {}
    for top in SOURCE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                kind = ENV_KIND.get(os.path.splitext(name)[1], "sh" if top == ".ci" else None)
                if kind is None:
                    continue
                path = os.path.join(dirpath, name)
                for var in ENV_READ[kind].findall(read(path)):
                    found.setdefault(var, []).append(os.path.relpath(path, ROOT))
    return found


def mentions(text, name):
    """`name` as a whole word: NCCL_DCP_DEBUG_FILE does not document NCCL_DCP_DEBUG."""
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


class EnvironmentPage(unittest.TestCase):
    """docs/environment.md lists every variable any source reads (the C++
    tests check the library's and the plugin's name tables; this one also
    sees the Python package, the tests and the scripts)."""

    def test_every_variable_read_is_documented(self):
        found = variables_read()
        # The scan itself: a variable of each kind of reader is seen.
        for known in ("NCCL_DCP_PROTO", "NCCL_DCP_PROFILE_FILE", "NCCL_DCP_LIB", "NCCL_DCP_REQUIRE_GPU"):
            self.assertIn(known, found)
        doc = read(os.path.join(ROOT, "docs", "environment.md"))
        missing = {n: f for n, f in found.items() if not mentions(doc, n)}
        self.assertEqual(missing, {}, "read but not in docs/environment.md")

    def test_whole_names_only(self):
        self.assertTrue(mentions("set `NCCL_DCP_DEBUG=INFO`", "NCCL_DCP_DEBUG"))
        self.assertFalse(mentions("NCCL_DCP_DEBUG_FILE only", "NCCL_DCP_DEBUG"))
        # (split so that this file does not read NCCL_DCP_X itself)
        self.assertEqual(ENV_READ["py"].findall('os.environ.get(' + '"NCCL_DCP_X")'), ["NCCL_DCP_X"])
        self.assertEqual(ENV_READ["c"].findall('getenv("NCCL_DCP_Y")'), ["NCCL_DCP_Y"])
        self.assertEqual(ENV_READ["sh"].findall('[ -n "${NCCL_DCP_Z:-}" ]'), ["NCCL_DCP_Z"])


class Readme(unittest.TestCase):
    def setUp(self):
        self.text = read(README)

    def test_every_feature_names_a_verification_level_and_a_page(self):
        rows = table_rows(section(self.text, "Status"), "feature")
        self.assertGreaterEqual(len(rows), 10, "the status table lost its rows")
        for feature, level, where in rows:
            self.assertIn(level, LEVELS, f"{feature}: '{level}' is not one of {sorted(LEVELS)}")
            self.assertTrue(LINK.search(where), f"{feature}: no page in '{where}'")
        self.assertTrue({r[1] for r in rows} <= LEVELS)

    def test_the_versions_table_names_what_was_verified(self):
        rows = {r[0]: r[1] for r in table_rows(section(self.text, "Status"), "what")}
        for what in ("GPUs", "CUDA", "NCCL", "PyTorch"):
            self.assertIn(what, rows)
        self.assertIn("13.0", rows["CUDA"])
        self.assertIn("2.11.0", rows["PyTorch"])

    def test_every_link_resolves(self):
        pages = [README] + [os.path.join(ROOT, "docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
                            if f.endswith(".md")]
        broken = {os.path.relpath(p, ROOT): broken_links(p) for p in pages}
        self.assertEqual({k: v for k, v in broken.items() if v}, {})

    def test_fits_on_a_few_screens(self):
        self.assertLessEqual(len(self.text.splitlines()), 200)

    def test_quick_starts_are_short(self):
        for title in ("Quick start: C", "Quick start: PyTorch"):
            body = section(self.text, title)
            blocks = re.findall(r"```\w*\n(.*?)```", body, re.S)
            self.assertTrue(blocks, title)
            self.assertLessEqual(sum(len(b.splitlines()) for b in blocks), 10, title)

    def test_speed_table_says_machine_and_date(self):
        speed = section(self.text, "Speed")
        self.assertIn("H200", speed)
        self.assertRegex(speed, r"\d{4}-\d{2}-\d{2}")
        self.assertIn("loopback", speed.lower())
        self.assertTrue(table_rows(speed, "batch rows"))

    def test_no_pending_gpu_notes(self):
        """'not yet run on a GPU' belongs in the status table, as a level."""
        pages = [README] + [os.path.join(ROOT, "docs", f) for f in ("install.md", "c-api.md", "pytorch.md",
                                                                    "engines.md", "perf-binary.md", "environment.md",
                                                                    "profiler-plugin.md")]
        for p in pages:
            text = read(p).lower()
            for note in ("not yet run on a gpu", "have not run on a gpu", "written without a gpu",
                         "until the two-phase kernels"):
                self.assertNotIn(note, text, os.path.relpath(p, ROOT))

    def test_the_licence_is_there(self):
        self.assertTrue(read(os.path.join(ROOT, "LICENSE")).startswith("BSD 3-Clause License"))
        self.assertIn("BSD-3-Clause", self.text)
