#!/usr/bin/env bash
# Builds NCCL from its public source tree at a release tag, for sm_90 only,
# and prints the nccl_home to build nccl-dcp against it. For the GPU
# machine: it has no network, and a release's wheel (~300 MB) does not fit
# in the tree sent there (64 MiB); the source (7 MB) does.
#
#   scripts/build-nccl.sh [SRC] [BUILD]
#     SRC    NCCL source tree: src/, makefiles/, Makefile (default .deps/nccl,
#            ignored by git; e.g. git archive v2.30.7-1 of github.com/NVIDIA/nccl)
#     BUILD  output directory (default build-nccl-VERSION)
#   NVCC_GENCODE  default -gencode=arch=compute_90,code=sm_90
#   CUDA_HOME     default /usr/local/cuda
#   ONLY_FUNCS    NCCL's own switch (src/device/generate.py): build the
#                 collective kernels of these functions only, e.g.
#                 "AllGather * *|SendRecv" (what nccl-dcp, its tests and its
#                 baseline call: ncclAllGather, ncclAlltoAll); unset builds
#                 all. Default BUILD then ends in -only, apart from a full one.
#   meson setup build-latest -Dnccl_home="$(scripts/build-nccl.sh | tail -1)"
#
# make's output goes to BUILD/make.log, the time taken to stderr; the last
# line of stdout is the nccl_home (BUILD: include/, lib/libnccl.so.2).
# make is incremental: a run cut short resumes, a finished build is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(realpath -m "${1:-.deps/nccl}")
[ -f "$SRC/makefiles/version.mk" ] && [ -f "$SRC/src/Makefile" ] ||
  { echo "NCCL source not found in $SRC (needs makefiles/version.mk and src/Makefile)" >&2; exit 2; }
version=$(awk '/^NCCL_(MAJOR|MINOR|PATCH) /{print $3}' "$SRC/makefiles/version.mk" | paste -sd.)
only=${ONLY_FUNCS:-}
BUILD=$(realpath -m "${2:-build-nccl-$version${only:+-only}}")
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
gencode=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}
mkdir -p "$BUILD"

# Each run's seconds are kept: a build stopped (SIGTERM, e.g. `timeout`) and
# resumed reports the total.
times="$BUILD/make-seconds.txt"
echo "== building NCCL $version from $SRC into $BUILD ($gencode, $(nproc) jobs${only:+, ONLY_FUNCS=$only})" >&2
start=$SECONDS
trap 'echo $((SECONDS - start)) >> "$times"; echo "NCCL build stopped after $((SECONDS - start)) s" >&2; exit 143' TERM INT
rc=0
extra=()
[ -z "$only" ] || extra=(ONLY_FUNCS="$only")
make -C "$SRC" -j"$(nproc)" src.build NVCC_GENCODE="$gencode" BUILDDIR="$BUILD" ${extra[@]+"${extra[@]}"} \
  >> "$BUILD/make.log" 2>&1 || rc=$?
trap - TERM INT
echo $((SECONDS - start)) >> "$times"
total=$(awk '{s += $1} END {print s}' "$times")
runs=$(wc -l < "$times")
if [ "$rc" -ne 0 ]; then
  tail -30 "$BUILD/make.log" >&2
  echo "NCCL $version build FAILED after $((SECONDS - start)) s (log: $BUILD/make.log)" >&2
  exit 1
fi
echo "== NCCL $version built in $total s ($runs make run(s), this one $((SECONDS - start)) s)" >&2
[ -f "$BUILD/lib/libnccl.so.2" ] && [ -f "$BUILD/include/nccl.h" ] ||
  { echo "make succeeded but $BUILD lacks include/nccl.h or lib/libnccl.so.2" >&2; exit 1; }
echo "$BUILD"
