#!/usr/bin/env bash
# Builds NCCL's own nccl-tests (public source, not part of this repository)
# against the NCCL this project links, for sm_90, on the GPU machine.
#
#   scripts/build-nccl-tests.sh [SRC] [BUILD]
#     SRC    nccl-tests source tree (default .deps/nccl-tests: carried to the
#            GPU machine, which has no network: scripts/gpu-check.sh baseline)
#     BUILD  output directory (default build-gpu/nccl-tests)
#   NCCL_HOME  NCCL with include/ and lib/libnccl.so.2 (default: the pip
#              package nvidia.nccl, as meson.build finds it)
# Prints the directory holding the binaries (alltoall_perf, ...) last.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(realpath "${1:-.deps/nccl-tests}")
BUILD=$(realpath -m "${2:-build-gpu/nccl-tests}")
[ -f "$SRC/src/common.cu" ] || { echo "nccl-tests source not found in $SRC" >&2; exit 2; }
if [ -z "${NCCL_HOME:-}" ]; then
  NCCL_HOME=$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])')
fi
# nccl-tests links -lnccl: give it a home whose lib/ has libnccl.so.
home="$BUILD/nccl-home"
mkdir -p "$home/lib"
ln -sfn "$NCCL_HOME/include" "$home/include"
ln -sfn "$NCCL_HOME/lib/libnccl.so.2" "$home/lib/libnccl.so"
ln -sfn "$NCCL_HOME/lib/libnccl.so.2" "$home/lib/libnccl.so.2"
make -s -j"$(nproc)" -C "$SRC/src" BUILDDIR="$BUILD" NCCL_HOME="$home" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" MPI="${MPI:-0}" >&2
echo "$BUILD"
