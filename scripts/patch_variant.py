#!/usr/bin/env python3
"""A unified diff (`git diff`) as scripts/perf-variants.sh's replacements,
so that a change kept as a patch in docs/data/sweeps/ is timed as a
variant without retyping it (the device machine's tree has no .git).

    scripts/patch_variant.py NAME PATCH [--reverse] > args
    mapfile -d '' -t v < args
    scripts/perf-variants.sh BUILD LOGDIR SWEEPS "${v[@]}"

Prints NAME FILE OLD NEW for every hunk, NUL after each: OLD is the hunk's
context and removed lines, NEW its context and added lines, FILE the path
after `b/`. --reverse swaps OLD and NEW (the tree holds the patch, the
variant undoes it). Every OLD must occur exactly once in its file (paths
from the current directory), as perf-variants.sh requires: a patch that
does not fit this tree is refused here, before any build. New and deleted
files are refused (no text to replace).
"""

import argparse
import re
import sys


def hunks(text):
    """[(file, old, new)] of a unified diff, one per hunk. A hunk's lines are
    counted by its header, so a removed "-- x" or added "++ x" line is not
    taken for the next file's header."""
    out, path, lines = [], None, text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("--- ") and line[4:].rstrip("\n") == "/dev/null":
            sys.exit("patch_variant.py: a new file has no text to replace")
        if line.startswith("+++ "):
            target = line[4:].rstrip("\n")
            if target == "/dev/null":
                sys.exit("patch_variant.py: a deleted file has no text to replace")
            path = target[2:] if target.startswith("b/") else target
        m = re.match(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", line)
        if not m:
            continue
        left = [int(m.group(1) or 1), int(m.group(2) or 1)]  # old, new lines still to come
        old, new, last = [], [], " "
        while left != [0, 0] or (i < len(lines) and lines[i].startswith("\\")):
            line = lines[i]
            i += 1
            if line.startswith("\\"):  # "\ No newline at end of file": the line before has none
                for side in ([old] if last == "-" else [new] if last == "+" else [old, new]):
                    side[-1] = side[-1].rstrip("\n")
                continue
            last = line[0]
            if last != "+":
                old.append(line[1:])
                left[0] -= 1
            if last != "-":
                new.append(line[1:])
                left[1] -= 1
        out.append((path, "".join(old), "".join(new)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="the variant's name (its logs: NAME-<sweep>.json)")
    ap.add_argument("patch", help="a unified diff, paths a/ and b/ from the tree's root")
    ap.add_argument("--reverse", action="store_true", help="undo the patch: the tree already holds it")
    a = ap.parse_args()
    with open(a.patch, encoding="utf-8") as f:
        found = hunks(f.read())
    if not found:
        sys.exit(f"{a.patch}: no hunk")
    args = []
    for path, old, new in found:
        if a.reverse:
            old, new = new, old
        with open(path, encoding="utf-8") as f:
            count = f.read().count(old) if old else 0
        if count != 1:
            sys.exit(f"{a.patch}: a hunk's text occurs {count} times in {path} (want 1)")
        args += [a.name, path, old, new]
    sys.stdout.write("".join(arg + "\0" for arg in args))


if __name__ == "__main__":
    main()
