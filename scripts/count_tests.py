#!/usr/bin/env python3
"""Counts GoogleTest cases in meson's testlog.junit.xml.

meson's own closing lines count test binaries, not test cases; CI needs a
plain count of cases (DESIGN §8). With `protocol: 'gtest'` meson merges each
binary's GoogleTest XML into testlog.junit.xml, one <testcase> per case:

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

Prints the failed cases, the skipped count, and last the line
`N passed, N failed`. Exits 1 when anything failed.
"""

import argparse
import json
import os
import sys
import xml.etree.ElementTree as et

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
    """{test name: meson result} from testlog.json (one JSON object a line)."""
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


def belongs_to(case, binary):
    """Whether a junit case came from the meson test named `binary`.

    GoogleTest suites are renamed '<project>.<binary>.<suite>'; a binary
    without XML is a case named '<binary>' in a suite named '<project>'."""
    return f".{binary}." in case.suite or (case.name == binary and "." not in case.suite)


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


def summary(text):
    """GoogleTest messages start with the file:line on a line of its own:
    keep it and the first line of the message proper."""
    lines = [l.strip() for l in (text or "").strip().splitlines() if l.strip()]
    return ": ".join(lines[:2])


def reason(text):
    """A skip's reason without its file:line."""
    lines = [l.strip() for l in (text or "").strip().splitlines() if l.strip()]
    return lines[-1] if lines else "no reason given"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="meson-logs/testlog.junit.xml")
    parser.add_argument("--meson-exit-code", type=int, default=0,
                        help="exit code of `meson test`; non-zero counts at least one failure")
    parser.add_argument("--testlog-json", default=None,
                        help="meson's testlog.json (default: next to the junit file)")
    args = parser.parse_args()

    try:
        cases = read_cases(args.junit)
    except (OSError, et.ParseError) as e:
        print(f"cannot read {args.junit}: {e}")
        print("0 passed, 1 failed")
        return 1

    json_path = args.testlog_json or os.path.join(os.path.dirname(args.junit), "testlog.json")
    if os.path.exists(json_path):
        for note in reconcile(cases, read_binary_results(json_path)):
            print(f"binary failed without a failed test case: {note}")
    elif args.testlog_json:
        print(f"warning: {json_path} not found: per-binary results not checked")

    failed = [c for c in cases if c.outcome == "failed"]
    skipped = [c for c in cases if c.outcome == "skipped"]
    passed = sum(1 for c in cases if c.outcome == "passed")
    n_failed = len(failed)
    if args.meson_exit_code != 0 and n_failed == 0:
        print(f"meson test exited with {args.meson_exit_code} but no test case failed: counting one failure")
        n_failed = 1

    for c in failed:
        print(f"FAILED {c.label()}: {summary(c.message)}")
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
    print(f"{passed} passed, {n_failed} failed")
    return 1 if n_failed else 0


if __name__ == "__main__":
    sys.exit(main())
