#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, and run the perf binary
# over every local GPU (real NCCL ranks when there are several, loopback
# with 8 virtual ranks when there is one), the baseline and the floors in
# the same run. Results: build-main/perf.txt, build-main/perf.json (+
# perf.png with matplotlib). Without a GPU it says so and exits with 3 at
# once, before installing or building anything. Only what it runs is
# built: the perf binary and the library (-Dtests=false).
#
#   scripts/main-job.sh [extra perf flags, e.g. -P LL128 --max-rows 256]
#   LAUNCH=mpi scripts/main-job.sh    one process per GPU (mpirun -np <GPUs>):
#                                     installs Open MPI if missing, builds with -Dmpi=enabled
# GPUs: every one CUDA_VISIBLE_DEVICES leaves visible.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build-main}
export PATH="/usr/local/cuda/bin:$PATH"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

launch=${LAUNCH:-threads}
case $launch in threads | mpi) ;; *) echo "LAUNCH=$launch: use threads or mpi"; exit 2 ;; esac

# The GPUs this job may use (the driver's, cut to CUDA_VISIBLE_DEVICES):
# none -> say so and stop before a build that could only end the same way.
gpus=$(scripts/visible-gpus.sh)
if [ "$gpus" -eq 0 ] && ! command -v nvidia-smi > /dev/null && compgen -G '/dev/nvidia[0-9]*' > /dev/null; then
  # A container with the devices but not the tool: let CUDA count them.
  gpus=$(compgen -G '/dev/nvidia[0-9]*' | wc -l)
  echo "== nvidia-smi not found; $gpus /dev/nvidia* device(s): the perf binary will say what CUDA sees"
fi
if [ "$gpus" -eq 0 ]; then
  if ! command -v nvidia-smi > /dev/null; then
    why="nvidia-smi is not installed (no NVIDIA driver)"
  elif [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    why="CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' leaves none of them visible"
  else
    why="nvidia-smi lists none"
  fi
  echo "main-job: no GPU on this machine: $why. The main job runs the perf binary on NVIDIA GPUs (sm_90:" \
    "H100 / H200); .ci/run runs the tests without one." >&2
  exit 3
fi

# Packages: the build's, and Open MPI (headers and mpirun) for LAUNCH=mpi.
# Another apt (unattended-upgrades, cloud-init) may hold the locks: wait,
# 300 s at most (DPkg::Lock::Timeout for dpkg's lock; retries for the lists
# and archives locks, which apt-get does not wait for).
apt_get() {
  local deadline=$((SECONDS + 300)) out rc
  while :; do
    rc=0
    out=$($sudo apt-get -o DPkg::Lock::Timeout=300 "$@" 2>&1) || rc=$?
    if [ "$rc" -eq 0 ] || ! grep -qE "Could not get lock|Unable to lock|Unable to acquire" <<< "$out" ||
      [ "$SECONDS" -ge "$deadline" ]; then
      break
    fi
    echo "== apt-get $1: another apt holds a lock; waiting ($((deadline - SECONDS)) s left)"
    sleep 5
  done
  [ "$rc" -eq 0 ] || printf '%s\n' "$out" >&2
  return "$rc"
}
missing=()
command -v meson >/dev/null || missing+=(meson ninja-build pkg-config libhwloc-dev libgtest-dev)
if [ "$launch" = mpi ]; then
  command -v mpirun >/dev/null || missing+=(openmpi-bin)
  dpkg-query -W -f='${Status}' libopenmpi-dev 2>/dev/null | grep -q "install ok installed" || missing+=(libopenmpi-dev)
fi
if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null; then
  echo "== installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# LAUNCH=mpi needs the perf binary built with MPI: required at configure
# (meson fails if it finds none), also in a build directory made without.
mpi=auto
[ "$launch" != mpi ] || mpi=enabled
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" --buildtype=release -Dtests=false -Dmpi=$mpi
elif [ "$mpi" = enabled ]; then
  meson configure "$BUILD" -Dmpi=enabled
fi
start=$SECONDS
ninja -C "$BUILD" perf/dcp_a2a_lse_reduce_perf
echo "== built $BUILD/perf/dcp_a2a_lse_reduce_perf in $((SECONDS - start)) s"

launcher=()
if [ "$gpus" -gt 1 ] && [ "$launch" = mpi ]; then
  command -v mpirun >/dev/null || { echo "LAUNCH=mpi: mpirun not found (openmpi-bin)"; exit 1; }
  launcher=(mpirun -np "$gpus" --bind-to none)
  [ "$(id -u)" -ne 0 ] || launcher+=(--allow-run-as-root)
  ranks=(-t 1 -g 1)             # one process per GPU, real ranks
elif [ "$gpus" -gt 1 ]; then
  ranks=(-t "$gpus" -g 1)       # one thread per GPU, real ranks
else
  ranks=(--virtual-ranks 8)     # one GPU (or none: the binary reports it)
fi
set +e
# The decode sweep, 1..1024 rows, each iteration a CUDA graph of 10 calls
# replayed once (as a decode step runs), nccl-tests' mean per call with the
# median beside it; the caller's flags after ours win.
"${launcher[@]}" "$BUILD/perf/dcp_a2a_lse_reduce_perf" "${ranks[@]}" -H 16 --head-dim 512 -d bf16 \
  --min-rows 1 --max-rows 1024 -f 2 -w 5 -m 10 -G 1 -c 1 -J "$BUILD/perf.json" "$@" | tee "$BUILD/perf.txt"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -eq 0 ] && python3 -c 'import matplotlib' 2>/dev/null; then
  python3 scripts/plot_perf.py -o "$BUILD/perf.png" "$BUILD/perf.json"
fi
exit "$rc"
