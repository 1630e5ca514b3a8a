#!/usr/bin/env python3
"""SASS instructions per kernel of a CUDA object or cubin, and, for the
kernels whose mangled name contains PATTERN, per source file and line
(nvdisasm's line info; build with -lineinfo, as meson.build does). What a
change does to a kernel's size, measured here without a GPU in seconds
(docs/perf-history.md, "The split lands, and a smaller fp8 kernel"):

  scripts/sass_size.py build/libnccl_dcp.so.*.p/src_kernels_fused_ll128_fp8_loopback.cu.o
  scripts/sass_size.py kernel.cubin 'Codec.*WireE1' 25      (the 25 largest lines)

An object holds a fatbin; its cubin is extracted with cuobjdump first.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

from ptxas_table import demangle


def cubins(path, out):
    """The sm_XX cubins of an object, extracted into `out` (or the cubin itself)."""
    if path.endswith(".cubin"):
        return [path]
    subprocess.run(["cuobjdump", "-xelf", "all", os.path.abspath(path)], cwd=out, check=True, capture_output=True)
    return [os.path.join(out, f) for f in sorted(os.listdir(out)) if f.endswith(".cubin")]


def scan(cubin):
    """{kernel: Counter((file, line) -> instructions)} from nvdisasm."""
    text = subprocess.run(["nvdisasm", "--print-line-info", "-c", cubin], capture_output=True, text=True,
                          check=True).stdout
    kernels, cur, loc = {}, None, None
    for line in text.splitlines():
        m = re.match(r"//-+ \.text\.(\S+)", line)
        if m:
            cur = kernels.setdefault(m.group(1), collections.Counter())
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            loc = (os.path.basename(m.group(1)), int(m.group(2)))
        elif cur is not None and re.match(r"\s+/\*[0-9a-f]{4,}\*/", line):
            cur[loc] += 1
    return kernels


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    pattern = sys.argv[2] if len(sys.argv) > 2 else None
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    with tempfile.TemporaryDirectory(prefix="sass_size.") as tmp:
        kernels = {k: v for cubin in cubins(sys.argv[1], tmp) for k, v in scan(cubin).items()}
    names = sorted(kernels)
    for name, readable in zip(names, demangle(names)):
        lines = kernels[name]
        print(f"{sum(lines.values()):7d}  {readable}")
        if pattern and re.search(pattern, name):
            files = collections.Counter()
            for (f, _), n in lines.items():
                files[f] += n
            print("         by file: " + ", ".join(f"{f} {n}" for f, n in files.most_common()))
            for (f, ln), n in lines.most_common(top):
                print(f"         {n:6d}  {f}:{ln}")


if __name__ == "__main__":
    main()
