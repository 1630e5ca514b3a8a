#!/usr/bin/env python3
"""Checks GoogleTest filters against the tests a binary has: every positive
pattern of a filter must name at least one test. A filter 'A:B:C' whose B
names a test that no longer exists still runs A and C and passes, so a
renamed or deleted test would silently drop out of a sanitizer stage or a
planted break's list; this finds it. Listing needs no GPU
(`BINARY --gtest_list_tests`).

  scripts/gtest_filters.py BINARY FILTER...   exit 1 (one line per pattern)
                                              when a pattern names no test

Filters follow GoogleTest: 'POSITIVE[-NEGATIVE]', patterns separated by
':', '*' any string, '?' one character; a test is named 'Suite.Test'
(parameterised: 'Prefix/Suite.Test/Param').
"""

import re
import subprocess
import sys


def list_tests(binary):
    """The full names of a GoogleTest binary's tests (none skipped or run)."""
    out = subprocess.run([binary, "--gtest_list_tests"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=120, check=True).stdout
    return parse_list(out)


def parse_list(out):
    """Names from --gtest_list_tests output: 'Suite.' lines, then indented
    test lines (a '# GetParam() = ...' comment after the name)."""
    names, suite = [], None
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            suite = line.split("#", 1)[0].strip()
            if not suite.endswith("."):
                suite = None  # a line of output that is not a suite (a warning)
            continue
        if suite:
            names.append(suite + line.split("#", 1)[0].strip())
    return names


def _regex(pattern):
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern) + r"\Z")


def split(flt):
    """(positive patterns, negative patterns) of a filter."""
    positive, _, negative = flt.partition("-")
    pos = [p for p in positive.split(":") if p] or ["*"]
    neg = [p for p in negative.split(":") if p]
    return pos, neg


def selected(flt, names):
    """The names the filter runs."""
    pos, neg = split(flt)
    pos_re, neg_re = [_regex(p) for p in pos], [_regex(p) for p in neg]
    return [n for n in names if any(r.match(n) for r in pos_re) and not any(r.match(n) for r in neg_re)]


def unmatched(flt, names):
    """The positive patterns of a filter that name no test (a filter that
    selects nothing at all counts as its whole self)."""
    pos, _ = split(flt)
    missing = [p for p in pos if not any(_regex(p).match(n) for n in names)]
    if not missing and not selected(flt, names):
        missing = [flt]
    return missing


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    binary, filters = argv[0], argv[1:]
    try:
        names = list_tests(binary)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"{binary}: cannot list its tests: {e}")
        return 1
    bad = 0
    for flt in filters:
        for p in unmatched(flt, names):
            print(f"{binary}: filter pattern '{p}' names no test (of {len(names)}); it would silently run nothing")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
