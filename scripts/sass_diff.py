#!/usr/bin/env python3
"""Whether two builds of a kernel family compile to the same kernels: for a
device-code change meant to change nothing (a function split up, a name),
checked without a GPU.

  scripts/sass_diff.py OLD NEW

OLD, NEW: the family's object from two builds
(build/libnccl_dcp.so.*.p/src_kernels_fused_<family>.cu.o) or cubins.
Per kernel of either:
  identical         the same instructions in the same order, encoded the
                    same (control words too);
  same instructions the same multiset once register numbers and operand
                    reuse flags are set aside (register allocation and
                    scheduling moved; RZ, PT, constants and branch
                    targets still count);
  differs           with the instructions only one side has.
Exits 0 when every kernel is in both and none differs, 1 otherwise.
cuobjdump: $CUOBJDUMP, else on PATH, else in $CUDA_HOME/bin.
"""
import collections
import os
import re
import shutil
import signal
import subprocess
import sys

from ptxas_table import canon, demangle


def cuobjdump():
    found = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not found:
        found = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump")
    if not os.access(found, os.X_OK):
        sys.exit("sass_diff.py: no cuobjdump (set CUOBJDUMP, or put it on PATH)")
    return found


class Kernel:
    """A kernel's listing: its instructions (without address, encoding or
    spacing) and its encodings (instruction and control words, in order)."""

    def __init__(self):
        self.instructions, self.encodings = [], []

    def __len__(self):
        return len(self.instructions)


def parse(text):
    """{(arch, kernel name): Kernel} of `cuobjdump -sass` output."""
    kernels, arch, cur = {}, "", None
    for line in text.splitlines():
        m = re.match(r"\s*code for (sm_\w+)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = kernels.setdefault((arch, m.group(1)), Kernel())
            continue
        if cur is None:
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;", line)
        if m:
            cur.instructions.append(" ".join(m.group(1).split()))
        cur.encodings += re.findall(r"/\* (0x[0-9a-f]{16}) \*/", line)
    return kernels


def abstract(instruction):
    """The instruction without register numbers (R7, UR4, P2, UP0) and
    reuse flags; RZ, URZ, PT and UPT stay what they are."""
    return re.sub(r"\b(U?R|U?P)\d+\b", r"\1#", instruction.replace(".reuse", ""))


def compare(old, new):
    """'identical' (instructions and encodings), 'same instructions' or
    'differs', and the abstracted instructions only old has and only new
    has (Counters: empty unless it differs)."""
    if old.instructions == new.instructions and old.encodings == new.encodings:
        return "identical", collections.Counter(), collections.Counter()
    a = collections.Counter(map(abstract, old.instructions))
    b = collections.Counter(map(abstract, new.instructions))
    if a == b:
        return "same instructions", collections.Counter(), collections.Counter()
    return "differs", a - b, b - a


def report(old, new, out=sys.stdout, most=6):
    """Prints a line per kernel (a differing one's instructions only one
    side has, `most` a side) and a summary; returns whether all match."""
    keys = sorted(set(old) | set(new))
    names = dict(zip(keys, (canon(d) for d in demangle([k for _, k in keys]))))
    counts = collections.Counter()
    for key in keys:
        if key not in old or key not in new:
            status, only = f"only in {'new' if key not in old else 'old'}", {}
        else:
            status, only_old, only_new = compare(old[key], new[key])
            only = {"-": only_old, "+": only_new} if only_old or only_new else {}
        counts[status] += 1
        out.write(f"{status:18} {key[0]} {names.get(key) or key[1]}")
        out.write(f" ({len(old[key])} -> {len(new[key])} instructions)\n" if only else "\n")
        for sign, c in only.items():
            for instruction, n in c.most_common(most):
                out.write(f"    {sign} {n:4d} x {instruction}\n")
            if len(c) > most:
                out.write(f"    {sign} ... {len(c) - most} more kinds\n")
    out.write(f"{len(keys)} kernels: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + "\n")
    return set(counts) <= {"identical", "same instructions"}


def sass(path):
    r = subprocess.run([cuobjdump(), "-sass", path], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sass_diff.py: cuobjdump -sass {path}: {r.stderr.strip()}")
    return parse(r.stdout)


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly
    if len(argv) != 3:
        sys.exit(__doc__)
    return 0 if report(sass(argv[1]), sass(argv[2])) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
