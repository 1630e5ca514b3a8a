#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, and run the perf binary
# over every local GPU (real NCCL ranks when there are several, loopback
# with 8 virtual ranks when there is one), the baseline and the floors in
# the same run. Results: build-main/perf.txt, build-main/perf.json (+
# perf.png with matplotlib). Without a GPU the perf binary says so and
# exits with 3.
#
#   scripts/main-job.sh [extra perf flags, e.g. -P LL128 -e 256]
#   LAUNCH=mpi scripts/main-job.sh    one process per GPU (mpirun -np <GPUs>;
#                                     needs MPI at build time: libopenmpi-dev)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build-main}
export PATH="/usr/local/cuda/bin:$PATH"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

if command -v apt-get >/dev/null && ! command -v meson >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq meson ninja-build pkg-config libhwloc-dev libgtest-dev >/dev/null
fi
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dtests=false
ninja -C "$BUILD" perf/dcp_a2a_lse_reduce_perf

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
launcher=()
if [ "${gpus:-0}" -gt 1 ] && [ "${LAUNCH:-threads}" = mpi ]; then
  launcher=(mpirun -np "$gpus" --bind-to none)
  [ "$(id -u)" -ne 0 ] || launcher+=(--allow-run-as-root)
  ranks=(-t 1 -g 1)             # one process per GPU, real ranks
elif [ "${gpus:-0}" -gt 1 ]; then
  ranks=(-t "$gpus" -g 1)       # one thread per GPU, real ranks
else
  ranks=(-V 8)                  # one GPU (or none: the binary reports it)
fi
set +e
"${launcher[@]}" "$BUILD/perf/dcp_a2a_lse_reduce_perf" "${ranks[@]}" -H 16 -D 512 -d bf16 -b 1 -e 1024 -f 2 -G 10 -c 1 \
  -J "$BUILD/perf.json" "$@" | tee "$BUILD/perf.txt"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -eq 0 ] && python3 -c 'import matplotlib' 2>/dev/null; then
  python3 scripts/plot_perf.py -o "$BUILD/perf.png" "$BUILD/perf.json"
fi
exit "$rc"
