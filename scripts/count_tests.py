#!/usr/bin/env python3
"""Counts test cases in meson's testlog.junit.xml; fails on any failure,
on a run where no case ran, and on a binary that reported fewer cases than
it is expected to.

meson's own closing lines count test binaries, not test cases; CI needs a
plain count of cases (DESIGN §8). With `protocol: 'gtest'` (and 'tap') meson
merges each binary's cases into testlog.junit.xml, one <testcase> per case:

  - a <failure> or <error> child: failed
  - a <skipped> child, or status="notrun" (DISABLED_ tests): skipped
  - otherwise: passed

A binary that wrote no XML (it crashed, or failed to start) appears as a
single <testcase> named after the binary, with <failure> when meson saw a
non-zero exit. Two cases escape that: a binary that timed out gets a bare
<testcase> (meson 1.0 adds no child for a timeout), and a binary that exited
non-zero after writing its XML (a crash at exit) keeps its passing cases.
So the per-binary results in testlog.json, next to the XML, are read too:
a binary meson failed with no failed case counts one failure (its bare
entry, if any, moves from passed to failed). --meson-exit-code is the last
guard: non-zero with no failure counted counts one.

meson reads a gtest binary's XML from a fixed path in the build directory:
the caller must delete those files before `meson test` (scripts/gpu-check.sh
does), or a binary that crashed before writing its XML is credited with the
previous run's cases.

A run in which no case passed or failed (everything filtered out or
skipped) counts one failure. --expect FILE names, per binary, the fewest
cases it must report (any outcome: a skip is visible, a case that vanished
is not); a binary below its minimum, or listed but not run, counts one
failure each; so does one far ABOVE it (more than 10% and more than 5
cases: STALE_MARGIN), as a minimum that no longer keeps up with the tests
stops guarding the cases added since.

Names starting with `python_` in FILE are not meson tests: the JUnit files
of pytest and of the torchrun suite, checked with --as NAME (the whole
file's cases counted as that binary's; no testlog.json needed). The meson
check leaves them out.

Prints the failed cases, the skipped count, and last the line
`N passed, N failed`. Exits 1 when anything failed.
"""

import argparse
import json
import os
import sys
import xml.etree.ElementTree as et

# A minimum this far below the reported count is stale: more than 10% and
# more than 5 cases.
STALE_FRACTION, STALE_CASES = 0.10, 5
# Names of --expect entries that are JUnit files, not meson tests (--as).
JUNIT_PREFIX = "python_"

# meson's TestResult values that mean the binary failed.
FAILING_RESULTS = {"FAIL", "TIMEOUT", "ERROR", "INTERRUPT", "UNEXPECTEDPASS"}


class Case:
    def __init__(self, suite, name, outcome, message=""):
        self.suite = suite
        self.name = name
        self.outcome = outcome  # "passed", "failed" or "skipped"
        self.message = message

    def label(self):
        return f"{self.suite} :: {self.name}"


def read_cases(junit_path):
    root = et.parse(junit_path).getroot()
    cases = []
    for suite in root.iter("testsuite"):
        suite_name = suite.get("name", "")
        for case in suite.findall("testcase"):
            name = case.get("name", "")
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            skipped = case.find("skipped")
            if failure is not None:
                cases.append(Case(suite_name, name, "failed", failure.get("message") or failure.text or ""))
            elif skipped is not None or case.get("status") == "notrun":
                message = (skipped.get("message") or skipped.text or "") if skipped is not None else "disabled"
                cases.append(Case(suite_name, name, "skipped", message))
            else:
                cases.append(Case(suite_name, name, "passed"))
    return cases


def read_binary_results(json_path):
    """{meson test name: meson result} from testlog.json (one JSON object a
    line). meson names a test '<project>:<suite> / <binary>'."""
    results = {}
    with open(json_path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "name" in entry and "result" in entry:
                results[entry["name"]] = entry["result"]
    return results


def short_name(test_name):
    """The binary's own name in a meson test name: 'nccl-dcp:unit / unit_env'
    (meson 1.0) or 'unit - nccl-dcp:unit_env' (meson 1.12) -> 'unit_env'."""
    return test_name.rsplit(" / ", 1)[-1].rsplit(":", 1)[-1]


def belongs_to(case, test_name):
    """Whether a junit case came from the meson test named `test_name`.

    meson renames a GoogleTest suite '<project>.<test name>.<suite>', files
    the cases of a TAP test under '<project>.<test name>', and records a
    binary without cases as a case named '<test name>'."""
    return (f".{test_name}." in case.suite or case.suite.endswith(f".{test_name}")
            or case.name == test_name)


def reconcile(cases, binary_results):
    """Counts a failure for every binary meson failed but whose cases do not
    show one. Returns the labels of those binaries."""
    extra = []
    for binary, result in sorted(binary_results.items()):
        if result not in FAILING_RESULTS:
            continue
        mine = [c for c in cases if belongs_to(c, binary)]
        if any(c.outcome == "failed" for c in mine):
            continue
        bare = [c for c in mine if c.name == binary]
        if bare:
            bare[0].outcome = "failed"
            bare[0].message = f"meson result {result}"
        else:
            cases.append(Case(binary, "(binary)", "failed", f"meson result {result} with no failed test case"))
        extra.append(f"{binary}: meson result {result}")
    return extra


def testlog_json_of(junit_path):
    """meson writes <log>.junit.xml and <log>.json side by side (testlog, or
    testlog-<setup or wrapper>)."""
    if junit_path.endswith(".junit.xml"):
        return junit_path[: -len(".junit.xml")] + ".json"
    return os.path.join(os.path.dirname(junit_path), "testlog.json")


def read_expectations(path):
    """{binary: fewest cases} from lines 'binary minimum', '#' comments."""
    expected = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) != 2 or not words[1].isdigit():
                raise ValueError(f"{path}:{number}: expected 'binary minimum-case-count', got {line.strip()!r}")
            if words[0] in expected:
                raise ValueError(f"{path}:{number}: {words[0]} listed twice")
            expected[words[0]] = int(words[1])
    return expected


def stale(reported, minimum):
    """The minimum trails the reported count by a wide margin."""
    return reported - minimum > STALE_CASES and reported > minimum * (1 + STALE_FRACTION)


def check_count(binary, reported, minimum):
    """The problem of one binary's count against its minimum, or None."""
    if reported < minimum:
        return f"{binary}: {reported} cases reported, at least {minimum} expected"
    if stale(reported, minimum):
        return (f"{binary}: {reported} cases reported, its minimum {minimum} is stale (more than "
                f"{STALE_FRACTION:.0%} and {STALE_CASES} cases below): raise it in test/expected_cases.txt")
    return None


def check_expectations(cases, binary_results, expected):
    """Messages for every listed binary that reported fewer cases than its
    minimum (or far more), or did not run, and notes for binaries run but
    not listed. The python_ entries are --as's."""
    problems, notes = [], []
    by_short = {short_name(name): name for name in binary_results}
    for binary, minimum in sorted(expected.items()):
        if binary.startswith(JUNIT_PREFIX):
            continue
        if binary not in by_short:
            problems.append(f"{binary}: did not run (expected at least {minimum} cases)")
            continue
        # A bare entry (the binary wrote no XML) is not one of its cases.
        reported = sum(1 for c in cases if belongs_to(c, by_short[binary]) and c.name != by_short[binary])
        problem = check_count(binary, reported, minimum)
        if problem:
            problems.append(problem)
    for binary in sorted(by_short):
        if binary not in expected:
            notes.append(f"{binary}: no minimum case count listed")
    return problems, notes


def summary(text):
    """GoogleTest messages start with the file:line on a line of its own:
    keep it and the first line of the message proper (after a bare
    'Failed', which FAIL() writes)."""
    lines = [l.strip() for l in (text or "").strip().splitlines() if l.strip()]
    if len(lines) > 2 and lines[1] == "Failed":
        del lines[1]
    return ": ".join(lines[:2])


def reason(text):
    """A skip's reason without its file:line."""
    lines = [l.strip() for l in (text or "").strip().splitlines() if l.strip()]
    return lines[-1] if lines else "no reason given"


def print_skips(skipped):
    reasons = {}
    for c in skipped:
        reasons[reason(c.message)] = reasons.get(reason(c.message), 0) + 1
    for why, count in sorted(reasons.items(), key=lambda item: -item[1]):
        print(f"  {count} skipped: {why}")
    if skipped:
        gpu = sum(1 for c in skipped if "GPU" in c.message)
        if gpu == len(skipped):
            why = " (need a GPU)"
        elif gpu:
            why = f" ({gpu} need a GPU, {len(skipped) - gpu} for other reasons)"
        else:
            why = ""
        print(f"{len(skipped)} skipped{why}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="meson-logs/testlog.junit.xml")
    parser.add_argument("--meson-exit-code", type=int, default=0,
                        help="exit code of `meson test`; non-zero counts at least one failure")
    parser.add_argument("--testlog-json", default=None,
                        help="meson's testlog.json (default: the .json beside the .junit.xml)")
    parser.add_argument("--expect", default=None, metavar="FILE",
                        help="lines 'binary minimum': the fewest cases each binary must report")
    parser.add_argument("--as", dest="as_binary", default=None, metavar="NAME",
                        help="every case of the file is binary NAME's (pytest, torchrun: python_* in --expect)")
    args = parser.parse_args(argv)
    if args.as_binary:
        return main_as(args)

    try:
        cases = read_cases(args.junit)
        expected = read_expectations(args.expect) if args.expect else None
    except (OSError, et.ParseError, ValueError) as e:
        print(f"cannot read the results: {e}")
        print("0 passed, 1 failed")
        return 1

    json_path = args.testlog_json or testlog_json_of(args.junit)
    binary_results = None
    if os.path.exists(json_path):
        binary_results = read_binary_results(json_path)
        for note in reconcile(cases, binary_results):
            print(f"binary failed without a failed test case: {note}")
    elif args.testlog_json or expected is not None:
        print(f"{json_path} not found: per-binary results not checked")

    problems = []
    if expected is not None:
        if binary_results is None:
            problems.append(f"--expect needs {json_path} (which binaries ran)")
        else:
            found, notes = check_expectations(cases, binary_results, expected)
            problems += found
            for n in notes:
                print(f"note: {n}")

    failed = [c for c in cases if c.outcome == "failed"]
    skipped = [c for c in cases if c.outcome == "skipped"]
    passed = sum(1 for c in cases if c.outcome == "passed")
    n_failed = len(failed) + len(problems)
    if passed + len(failed) == 0:
        problems.append("no test case ran (every case was filtered out or skipped)")
        n_failed += 1
    if args.meson_exit_code != 0 and n_failed == 0:
        print(f"meson test exited with {args.meson_exit_code} but no test case failed: counting one failure")
        n_failed = 1

    for c in failed:
        print(f"FAILED {c.label()}: {summary(c.message)}")
    for p in problems:
        print(f"FAILED {p}")
    print_skips(skipped)
    print(f"{passed} passed, {n_failed} failed")
    return 1 if n_failed else 0


def main_as(args):
    """--as NAME: one JUnit file (not meson's), its cases NAME's, checked
    against NAME's minimum (which must be listed)."""
    try:
        cases = read_cases(args.junit)
        expected = read_expectations(args.expect) if args.expect else {}
    except (OSError, et.ParseError, ValueError) as e:
        print(f"cannot read the results: {e}")
        print("0 passed, 1 failed")
        return 1
    problems = []
    if args.expect:
        if args.as_binary not in expected:
            problems.append(f"{args.as_binary}: no minimum case count listed in {args.expect}")
        else:
            problem = check_count(args.as_binary, len(cases), expected[args.as_binary])
            if problem:
                problems.append(problem)
    failed = [c for c in cases if c.outcome == "failed"]
    skipped = [c for c in cases if c.outcome == "skipped"]
    passed = sum(1 for c in cases if c.outcome == "passed")
    if not passed and not failed:
        problems.append("no test case ran (every case was filtered out or skipped)")
    for c in failed:
        print(f"FAILED {c.label()}: {summary(c.message)}")
    for p in problems:
        print(f"FAILED {p}")
    print_skips(skipped)
    n_failed = len(failed) + len(problems)
    print(f"{passed} passed, {n_failed} failed")
    return 1 if n_failed else 0


if __name__ == "__main__":
    sys.exit(main())
