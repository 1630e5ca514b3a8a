#!/usr/bin/env bash
# On the GPU machine, in ONE command: configure, build, run every test suite
# (NCCL_DCP_REQUIRE_GPU=<GPUs here>: a missing GPU fails), the
# compute-sanitizer subset and the perf comparison; print a short summary.
# Logs go under $OUT when it is set (else build-gpu/logs).
#
#   scripts/gpu-check.sh [--plant-failure] [stage...]
#     stages: build tests sanitize perf (default: all four); also nopdl
#       noreread, and plants (each planted break of test/plants/plants.py
#       must make its tests fail)
#     --plant-failure: the tests stage adds one failing case to every test
#       binary (test_main.cc's --dcp_plant_failure), to show that a failing
#       case makes the whole run exit non-zero.
#
# Exit status: 0 only when every stage run passed; 1 otherwise (a failed
# stage, a failed or missing test case, no test run at all). The summary,
# one line per stage result, is printed last whatever happened.
#
# Adding a stage: a self-contained `if has <name>; then ... fi` block that
# ends each result with `record <status> <what>` (status 0 = passed).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"

plant=0
stage_args=()
for a in "$@"; do
  case $a in
    --plant-failure) plant=1 ;;
    -*) echo "unknown option $a (see the header of $0)"; exit 2 ;;
    *) stage_args+=("$a") ;;
  esac
done
stages=${stage_args[*]:-build tests sanitize perf}
asked=" "  # every stage name a block asked about: the ones this script knows
has() {
  asked+="$1 "
  [[ " $stages " == *" $1 "* ]]
}

# ---- results: one summary line per result; any failure fails the run.
summary=()
failures=0
record() {  # record <status> <what...>
  local status=$1
  shift
  if [ "$status" -eq 0 ]; then
    summary+=("ok    $*")
  else
    summary+=("FAIL  $* (status $status)")
    failures=$((failures + 1))
  fi
  echo "== ${summary[-1]}"
}
planted=""  # the plant applied right now (plants stage), reverted on any exit
finish() {
  local status=$?
  [ -z "$planted" ] || python3 test/plants/plants.py revert "$planted"
  [ "$status" -eq 0 ] || [ "$failures" -gt 0 ] || record "$status" "gpu-check.sh stopped early"
  echo
  echo "==== summary"
  printf '%s\n' "${summary[@]}"
  if [ "$failures" -gt 0 ]; then
    echo "==== $failures failed: exit 1"
    exit 1
  fi
  echo "==== every stage passed"
  exit 0
}
trap finish EXIT

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

PERF=$BUILD/perf/dcp_a2a_lse_reduce_perf
PERF_ARGS=(-V 8 -H 16 -D 512 -d bf16 -b 1 -e 1024 -f 2 -G 10 -c 1)

if has build; then
  start=$SECONDS
  status=0
  if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" --buildtype=release > "$LOGS/configure.log" 2>&1 || { status=$?; cat "$LOGS/configure.log"; }
  fi
  grep -E "^Message: NCCL" "$LOGS/configure.log" 2>/dev/null
  if [ "$status" -eq 0 ]; then
    ninja -C "$BUILD" > "$LOGS/build.log" 2>&1 || { status=$?; tail -40 "$LOGS/build.log"; }
  fi
  record "$status" "build ($((SECONDS - start)) s)"
  [ "$status" -eq 0 ] || exit 1  # nothing else can run
fi

if has tests; then
  start=$SECONDS
  # meson reads each gtest binary's XML from the build directory: one left by
  # an earlier run would stand in for a binary that crashed before writing.
  find "$BUILD" -maxdepth 1 -name '*.xml' -delete
  rm -f "$BUILD"/meson-logs/testlog.*
  test_args=()
  [ "$plant" -eq 0 ] || test_args=(--test-args=--dcp_plant_failure)
  meson test -C "$BUILD" --num-processes 1 --print-errorlogs --timeout-multiplier 1 "${test_args[@]}" \
    > "$LOGS/tests.log" 2>&1
  meson_status=$?
  cp "$BUILD/meson-logs/testlog.junit.xml" "$LOGS/testlog.junit.xml" 2>/dev/null
  python3 scripts/count_tests.py "$BUILD/meson-logs/testlog.junit.xml" --meson-exit-code "$meson_status" \
    --expect test/expected_cases.txt > "$LOGS/count.txt" 2>&1
  status=$?
  [ "$status" -ne 0 ] || [ "$meson_status" -eq 0 ] || status=$meson_status
  grep -E "^(FAILED|note:)" "$LOGS/count.txt" | head -30
  record "$status" "tests (NCCL_DCP_REQUIRE_GPU=$NCCL_DCP_REQUIRE_GPU$([ "$plant" -eq 0 ] || echo ", planted failure")):" \
    "$(tail -1 "$LOGS/count.txt") (meson status $meson_status, $((SECONDS - start)) s)"
fi

if has sanitize; then
  start=$SECONDS
  # Sanitizer runs are slow: give the device-side waits room. The strided
  # test covers every dtype and base: LL128 only here.
  filter='Transports/LoopbackMatrix.SpecialLseValues/*bf16_base2:Transports/LoopbackProto.BitwiseDeterministic/*:Transports/LoopbackProto.StridedEqualsPackedBitwise/LL128:Transports/LoopbackProto.RoundCounterWraps/LL128'
  for tool in memcheck racecheck; do
    NCCL_DCP_TIMEOUT_MS=120000 compute-sanitizer --tool $tool --error-exitcode 99 "$BUILD/test/gpu_loopback" \
      --gtest_filter="$filter" > "$LOGS/sanitize-$tool.log" 2>&1
    status=$?
    errs=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$LOGS/sanitize-$tool.log" | tail -1)
    passed=$(grep -E "^\[  PASSED  \]" "$LOGS/sanitize-$tool.log" | tail -1)
    record "$status" "compute-sanitizer $tool: ${errs:-no summary}; ${passed:-gtest did not pass}"
  done
  echo "== sanitize took $((SECONDS - start)) s"
fi

if has perf; then
  start=$SECONDS
  for P in ${PERF_PROTOS:-LL128 LL SIMPLE AUTO}; do
    "$PERF" "${PERF_ARGS[@]}" -P "$P" -J "$LOGS/perf-$P.json" > "$LOGS/perf-$P.txt" 2>&1
    record $? "perf $P (table in perf-$P.txt)"
    tail -14 "$LOGS/perf-$P.txt"
  done
  echo "== perf took $((SECONDS - start)) s"
fi

# LL128 without programmatic dependent launch, to weigh PDL (same build).
if has nopdl; then
  NCCL_DCP_PDL=0 "$PERF" "${PERF_ARGS[@]}" -P LL128 -J "$LOGS/perf-LL128-nopdl.json" \
    > "$LOGS/perf-LL128-nopdl.txt" 2>&1
  record $? "perf LL128 with NCCL_DCP_PDL=0"
  tail -11 "$LOGS/perf-LL128-nopdl.txt"
fi

# LL128 without the Hopper re-read (DESIGN §4): same sweep, its own build.
if has noreread; then
  meson setup build-noreread --buildtype=release -Dll128_reread=false > "$LOGS/configure-noreread.log" 2>&1 &&
    ninja -C build-noreread perf/dcp_a2a_lse_reduce_perf > "$LOGS/build-noreread.log" 2>&1 &&
    build-noreread/perf/dcp_a2a_lse_reduce_perf "${PERF_ARGS[@]}" -P LL128 \
      -J "$LOGS/perf-LL128-noreread.json" > "$LOGS/perf-LL128-noreread.txt" 2>&1
  record $? "perf LL128 without re-read"
  tail -11 "$LOGS/perf-LL128-noreread.txt"
fi

# Planted breaks (test/plants/plants.py): each breaks the library in one
# place; the tests listed with it must fail against it. One at a time:
# apply, rebuild the binaries concerned, run, revert; the real library is
# rebuilt at the end. Only plants whose tests fit this machine's GPUs run.
if has plants; then
  start=$SECONDS
  while read -r -a plant; do  # name, then pairs of test binary and gtest filter
    name=${plant[0]}
    log=$LOGS/plant-$name.log
    planted=$name
    if ! python3 test/plants/plants.py apply "$name" > "$log" 2>&1; then
      record 1 "plant $name: $(tail -1 "$log")"
      planted=""
      continue
    fi
    for ((i = 1; i + 1 < ${#plant[@]}; i += 2)); do
      binary=${plant[i]} filter=${plant[i + 1]}
      if ! ninja -C "$BUILD" "test/$binary" >> "$log" 2>&1; then
        record 1 "plant $name: test/$binary does not build with the plant"
        continue
      fi
      timeout 600 "$BUILD/test/$binary" --gtest_filter="$filter" > "$log.$binary" 2>&1
      status=$?
      failed=$(grep -c '^\[  FAILED  \] .*(' "$log.$binary")
      if [ "$status" -ne 0 ]; then
        record 0 "plant $name: $binary $filter failed as it must (status $status, $failed failed)"
      else
        record 1 "plant $name: $binary $filter PASSED against the planted break"
      fi
    done
    python3 test/plants/plants.py revert "$name" >> "$log" 2>&1
    planted=""
  done < <(python3 test/plants/plants.py list --gpus "$NCCL_DCP_REQUIRE_GPU")
  ninja -C "$BUILD" > "$LOGS/plants-rebuild.log" 2>&1
  record $? "rebuild without plants ($((SECONDS - start)) s for the plants stage)"
fi

# A stage named on the command line that no block knows ran nothing.
for s in $stages; do
  [[ "$asked" == *" $s "* ]] || record 1 "unknown stage '$s' (known:$asked)"
done
[ "${#summary[@]}" -gt 0 ] || record 1 "no stage ran"
