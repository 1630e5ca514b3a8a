"""Not the build backend: pip builds this package with meson-python
(pyproject.toml, meson.build). Kept for one developer command, which
scripts/gpu-check.sh runs to use the package from the source tree
(PYTHONPATH=python) with its C helper:

    python3 setup.py build_ext --inplace     # builds nccl_dcp/_fastcall*.so next to the sources

Needs a C compiler and Python.h; no setuptools.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    if "build_ext" not in argv or "--inplace" not in argv:
        sys.exit(__doc__ + "\nOnly `setup.py build_ext --inplace` is supported; to install: pip install ./python")
    sys.path.insert(0, HERE)
    from nccl_dcp import _devbuild
    why = _devbuild.missing_toolchain()
    if why:
        sys.exit(f"setup.py build_ext: {why}: nccl_dcp._fastcall not built (nccl_dcp uses its ctypes path)")
    _devbuild.build_fastcall(os.path.join(HERE, "nccl_dcp"))
    print("built nccl_dcp/_fastcall in place")


if __name__ == "__main__":
    main(sys.argv[1:])
