#!/usr/bin/env bash
# On the GPU machine, in ONE command: configure, build, run the GPU suite
# (NCCL_DCP_REQUIRE_GPU=<GPUs here>: a missing GPU fails), the compute-sanitizer
# subset and the perf comparison; print a short summary. Logs go under
# $OUT when it is set (else build-gpu/logs).
#
#   scripts/gpu-check.sh [stage...]   stages: build tests sanitize perf (default: all)
#                                     also: nopdl noreread nccl-latest
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"
stages=${*:-build tests sanitize perf}  # also: nopdl noreread
summary=()
note() { summary+=("$*"); echo "== $*"; }
has() { [[ " $stages " == *" $1 "* ]]; }

# Every GPU this machine has must be usable: tests needing up to that many
# fail instead of skipping (multi-rank tests needing more still skip).
export NCCL_DCP_REQUIRE_GPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$NCCL_DCP_REQUIRE_GPU" -ge 1 ] || NCCL_DCP_REQUIRE_GPU=1
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared hosts

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
  meson --version
  python3 -c 'import nvidia.nccl as m; print("pip NCCL at", m.__path__[0])' 2>&1
} > "$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"

if has build; then
  start=$SECONDS
  if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" --buildtype=release > "$LOGS/configure.log" 2>&1 || { cat "$LOGS/configure.log"; note "configure FAILED"; printf '%s\n' "${summary[@]}"; exit 1; }
  fi
  grep -E "^Message: NCCL" "$LOGS/configure.log" 2>/dev/null
  if ninja -C "$BUILD" > "$LOGS/build.log" 2>&1; then
    note "build ok ($((SECONDS - start)) s)"
  else
    tail -40 "$LOGS/build.log"; note "build FAILED"; printf '%s\n' "${summary[@]}"; exit 1
  fi
fi

if has tests; then
  start=$SECONDS
  meson test -C "$BUILD" --suite unit --suite gpu --suite multi --num-processes 1 --print-errorlogs \
    --timeout-multiplier 1 > "$LOGS/tests.log" 2>&1
  rc=$?
  cp "$BUILD/meson-logs/testlog.junit.xml" "$LOGS/testlog.junit.xml" 2>/dev/null
  line=$(python3 scripts/count_tests.py "$BUILD/meson-logs/testlog.junit.xml" --meson-exit-code $rc 2>/dev/null | tail -1)
  note "tests (unit+gpu+multi, NCCL_DCP_REQUIRE_GPU=$NCCL_DCP_REQUIRE_GPU): ${line:-no count} (meson rc $rc, $((SECONDS - start)) s)"
  grep -E "^\s*[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR)" "$LOGS/tests.log" | head -20
fi

if has sanitize; then
  start=$SECONDS
  # Sanitizer runs are slow: give the device-side waits room.
  export NCCL_DCP_TIMEOUT_MS=120000
  filter='Transports/LoopbackMatrix.SpecialLseValues/*bf16_base2:Transports/LoopbackProto.BitwiseDeterministic/*:Transports/LoopbackProto.StridedEqualsPackedBitwise/*:Transports/LoopbackProto.RoundCounterWraps/LL128'
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 99 "$BUILD/test/gpu_loopback" --gtest_filter="$filter" \
      > "$LOGS/sanitize-$tool.log" 2>&1
    rc=$?
    errs=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$LOGS/sanitize-$tool.log" | tail -1)
    passed=$(grep -E "^\[  PASSED  \]" "$LOGS/sanitize-$tool.log" | tail -1)
    note "compute-sanitizer $tool: rc $rc; ${errs:-no summary}; ${passed:-gtest did not pass}"
  done
  unset NCCL_DCP_TIMEOUT_MS
  note "sanitize took $((SECONDS - start)) s"
fi

if has perf && [ -x "$BUILD/perf/dcp_a2a_lse_reduce_perf" ]; then
  start=$SECONDS
  for P in ${PERF_PROTOS:-LL128 LL SIMPLE AUTO}; do
    "$BUILD/perf/dcp_a2a_lse_reduce_perf" -V 8 -H 16 -D 512 -d bf16 -b 1 -e 1024 -f 2 -G 10 -c 1 -P $P \
      -J "$LOGS/perf-$P.json" > "$LOGS/perf-$P.txt" 2>&1
    note "perf $P: rc $? (table in perf-$P.txt)"
    tail -14 "$LOGS/perf-$P.txt"
  done
  note "perf took $((SECONDS - start)) s"
fi

# LL128 without programmatic dependent launch, to weigh PDL (same build).
if has nopdl && [ -x "$BUILD/perf/dcp_a2a_lse_reduce_perf" ]; then
  NCCL_DCP_PDL=0 "$BUILD/perf/dcp_a2a_lse_reduce_perf" -V 8 -H 16 -D 512 -d bf16 -b 1 -e 1024 -f 2 -G 10 -c 1 -P LL128 \
    -J "$LOGS/perf-LL128-nopdl.json" > "$LOGS/perf-LL128-nopdl.txt" 2>&1
  note "perf LL128 with NCCL_DCP_PDL=0: rc $?"
  tail -11 "$LOGS/perf-LL128-nopdl.txt"
fi

# LL128 without the Hopper re-read (DESIGN §4): same sweep, its own build.
if has noreread; then
  meson setup build-noreread --buildtype=release -Dll128_reread=false > "$LOGS/configure-noreread.log" 2>&1 &&
    ninja -C build-noreread perf/dcp_a2a_lse_reduce_perf > "$LOGS/build-noreread.log" 2>&1 &&
    build-noreread/perf/dcp_a2a_lse_reduce_perf -V 8 -H 16 -D 512 -d bf16 -b 1 -e 1024 -f 2 -G 10 -c 1 -P LL128 \
      -J "$LOGS/perf-LL128-noreread.json" > "$LOGS/perf-LL128-noreread.txt" 2>&1
  note "perf LL128 without re-read: rc $?"
  tail -11 "$LOGS/perf-LL128-noreread.txt"
fi

# The suite and the perf sweep again, against the newest NCCL whose source
# travels here (.deps/nccl: 2.30.7; the wheels are too large): NCCL built
# for sm_90 first (timed), then this script on its own build directory with
# NCCL_HOME at that NCCL. Logs under $LOGS/nccl-latest.
if has nccl-latest; then
  if nccl_home=$(scripts/build-nccl.sh .deps/nccl 2> "$LOGS/nccl-latest-build.txt"); then
    note "$(sed -n 's/^== \(NCCL .* built in .*\)/\1/p' "$LOGS/nccl-latest-build.txt")"
    NCCL_HOME=$nccl_home BUILD=build-gpu-nccl-latest OUT=$LOGS/nccl-latest "$ROOT/scripts/gpu-check.sh" build tests perf \
      2>&1 | tee "$LOGS/nccl-latest.txt"
    while read -r line; do note "nccl-latest: $line"; done < <(sed -n '/^==== summary/,$p' "$LOGS/nccl-latest.txt" | tail -n +2)
  else
    cat "$LOGS/nccl-latest-build.txt"; note "nccl-latest: NCCL build FAILED (nccl-latest-build.txt)"
  fi
fi

echo
echo "==== summary"
printf '%s\n' "${summary[@]}"
