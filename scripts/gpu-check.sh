#!/usr/bin/env bash
# On the GPU machine, in ONE command: configure, build, run the GPU suite
# (NCCL_DCP_REQUIRE_GPU=<GPUs here>: a missing GPU fails), the compute-sanitizer
# subset and the perf comparison; print a short summary. Logs go under
# $OUT when it is set (else build-gpu/logs).
#
#   scripts/gpu-check.sh [stage...]   stages: build tests sanitize perf (default: all)
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

# Soak (issue 11): >= 10^6 calls per rank with random batches (many above
# maxBatch), graph replays between eager calls, every 1000th call checked
# against the CPU reference; 0 mismatches and no asynchronous error.
# Loopback at cp 8 (AUTO with SIMPLE for rounds of >= 12 rows, so LL128 and
# SIMPLE alternate in one context; then LL), then NCCL ranks on every GPU.
if has soak; then
  start=$SECONDS
  ninja -C "$BUILD" test/dcp_soak > "$LOGS/build-soak.log" 2>&1 || { tail -20 "$LOGS/build-soak.log"; note "soak: build FAILED"; }
  for run in "loopback:-V 8" "loopback-LL:-V 8 -P LL" "ranks:"; do
    name=${run%%:*}
    NCCL_DCP_SIMPLE_MIN_ROWS=12 timeout 300 "$BUILD/test/dcp_soak" ${run#*:} -n 1000000 > "$LOGS/soak-$name.log" 2>&1
    rc=$?
    note "soak $name: rc $rc; $(grep -E '^soak: (loopback|NCCL ranks) ' "$LOGS/soak-$name.log" | tail -1 | cut -c7-)"
    grep -E "^soak: (worker|call|setup)" "$LOGS/soak-$name.log" | head -5
  done
  note "soak took $((SECONDS - start)) s"
fi

# compute-sanitizer memcheck, racecheck and synccheck (issue 11) on the
# loopback subset and on the 1-rank NCCL context: create, calls (eager,
# graph, fallback), destroy, create in the application's window, and
# create's unwind from every step.
if has sanitize-context; then
  start=$SECONDS
  loopback_filter='Transports/LoopbackMatrix.SpecialLseValues/*bf16_base2:Transports/LoopbackProto.BitwiseDeterministic/*:Transports/LoopbackProto.StridedEqualsPackedBitwise/*:Transports/LoopbackProto.RoundCounterWraps/LL128'
  context_filter='OneRankContext.TopologyReport:OneRankContext.GraphCaptureReplays:OneRankContext.InsideTheApplicationsWindow:OneRankContext.ForcedFallback:OneRankContext.StreamIsBoundByTheFirstCall'
  unwind_filter='CreateUnwind.FusedPathEveryStep:CreateUnwind.BadArgumentsAreRefusedInTheFirstStep'
  for tool in memcheck racecheck synccheck; do
    for target in "gpu_loopback:$loopback_filter" "gpu_context:$context_filter" "gpu_create_unwind:$unwind_filter"; do
      bin=${target%%:*}
      # Sanitizer runs are slow: give the device-side waits room.
      NCCL_DCP_TIMEOUT_MS=120000 compute-sanitizer --tool $tool --error-exitcode 99 "$BUILD/test/$bin" \
        --gtest_filter="${target#*:}" > "$LOGS/sanitize-context-$tool-$bin.log" 2>&1
      rc=$?
      errs=$(grep -E "(ERROR|RACECHECK|SYNCCHECK) SUMMARY" "$LOGS/sanitize-context-$tool-$bin.log" | tail -1)
      passed=$(grep -E "^\[  PASSED  \]" "$LOGS/sanitize-context-$tool-$bin.log" | tail -1)
      note "compute-sanitizer $tool $bin: rc $rc; ${errs:-no summary}; ${passed:-gtest did not pass}"
    done
  done
  note "sanitize-context took $((SECONDS - start)) s"
fi

echo
echo "==== summary"
printf '%s\n' "${summary[@]}"
