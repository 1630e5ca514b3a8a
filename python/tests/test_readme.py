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
