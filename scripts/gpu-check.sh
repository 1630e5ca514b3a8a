#!/usr/bin/env bash
# On the GPU machine, in ONE command: configure, build, run every test suite
# (NCCL_DCP_REQUIRE_GPU=<GPUs here>: a missing GPU fails), the
# compute-sanitizer subset and the perf comparison; print a short summary.
# Logs go under $OUT when it is set (else build-gpu/logs).
#
#   scripts/gpu-check.sh [--plant-failure] [stage...]
#     default stages: build tests topology sanitize stress-short perf python plants
#     sanitize: compute-sanitizer memcheck, racecheck and synccheck on small
#       loopback calls of every path: HEAD (every protocol), TOKEN (host and
#       device counts, a graph replay), NONE in two phases, fp8 on the wire.
#     stress-short: dcp_stress briefly (STRESS_SHORT_CALLS, 20000 calls) on
#       every 0.4 path and protocol: HEAD, TOKEN, TOKEN with device counts,
#       NONE direct and in two phases (the run must say which), fp8 with
#       HEAD, with TOKEN on device counts and with NONE; at
#       loopback cp STRESS_SHORT_CPS (default "8 2").
#     check-filters: every GoogleTest filter this script runs names tests
#       of the built binaries (each pattern; no GPU needed); the sanitizer
#       stages check theirs before they run, and fail when one does not.
#     perf: the loopback cp 8 table per protocol (perf-<P>.json) and per
#       scatter mode (AUTO: perf-scatter-token.json, perf-scatter-none-direct.json,
#       perf-scatter-none-two_phase.json (NCCL_DCP_NONE_ALGO), and
#       perf-scatter-none-two_phase-staged.json (baseline 2 staged);
#       HEAD's is perf-AUTO.json), wire fp8 against the native wire in one
#       process (perf-wire-fp8.json, -B 3), and with
#       2+ GPUs every mode and both wires on the real ranks, one thread per
#       GPU (perf-scatter-<mode>-ranks.json, perf-wire-<wire>-ranks.json).
#     also: perf-cp (the loopback tables of HEAD, TOKEN, NONE and fp8 at
#       cp PERF_CPS, default "2 4 16": perf-cp<N>-<mode>.json; HEAD per
#       protocol to 128 rows too with PERF_CP_PROTOCOLS="LL128 SIMPLE":
#       perf-cp<N>-head-<P>.json; NONE per algorithm to 256 rows with
#       PERF_CP_NONE_ALGOS="direct two_phase": perf-cp<N>-none-<A>.json),
#       ncu (scripts/profile-ncu.sh: Nsight Compute on the loopback kernel,
#       NCU_CASES), nopdl reread (LL128 variants), timeline (-Dtimeline=true
#       build, perf --timeline), stress (PDL / LL128 re-read stress, HEAD, then each
#       scatter mode once: TOKEN, TOKEN with device counts, NONE direct and
#       in two phases; and HEAD with fp8 on the wire), soak,
#       sanitize-context, baseline (our all-to-all vs nccl-tests'
#       alltoall_perf), plugin (the profiler plugin in alltoall_perf),
#       nccl-latest (NCCL 2.30.7 from source, the suites against it).
#     plants: each planted break of test/plants/plants.py whose tests fit
#       this machine's GPUs must make them fail: PLANT_JOBS (cores / 2) at a
#       time, each plant in a fresh copy of the tree and the build that
#       rebuilds only what its tests run, PLANT_GPU_SLOTS (4) GPU tests at a
#       time, PLANT_TIMEOUT (300) s per test; tests that need more GPUs are
#       listed as skipped. baseline, plugin and nccl-latest need the
#       sources carried in .deps/ (scripts/build-nccl-tests.sh, scripts/build-nccl.sh).
#     --plant-failure: the tests stage adds one failing case to every test
#       binary (test_main.cc's --dcp_plant_failure), to show that a failing
#       case makes the whole run exit non-zero.
#   Under the device tool (30 minutes a session; a fresh machine's start
#   counted about 67 s on 2026-12-03), chain the stages over four calls,
#   each at once after the last (a machine goes back 30 s after a call),
#   each under `timeout -s TERM <the call's limit - 20>` so that a stage
#   cut short still records, packs and returns its logs (the device tool's
#   own limit kills the script before it can): `build tests topology`
#   (53 + 242 + 1 s on 2026-12-03, late), `sanitize stress-short python`
#   (252 s in all), `perf` (115 s on a warm machine), `plants` (278 s, each
#   plant rebuilding what its tests run): about 1130 s of device time with
#   the start. Then, with time left, `perf-cp` (88 s), `ncu timeline`.
#   COMMIT=<hash> in each (the copied tree has no .git of its own).
#   GPU_CHECK_TAR=FILE: the logs ($OUT) packed into one tar.gz at the end,
#     e.g. `OUT=/tmp/gc GPU_CHECK_TAR=$OUT/gpu-check.tgz scripts/gpu-check.sh`
#     under the device tool, whose $OUT brings back 8 files at most.
#   COMMIT=<hash>: the source commit the perf JSON records where the tree
#     has no .git (the device tool copies the working tree alone); 7-40
#     hex digits, -dirty allowed, else the script exits 2 at once.
#   TEST_SUITES="unit gpu": the tests stage runs only these meson suites
#     (default: every suite), without the minimum case counts per binary.
#   STRESS_CALLS (1000000), STRESS_MODE_CALLS (200000): calls per rank of
#     the stress stage's HEAD runs and of its run per scatter mode.
#   TIMELINE_WIRES ("native"): the wires of the timeline stage's loopback
#     runs, e.g. "native fp8".
#
# Exit status: 0 only when every stage run passed; non-zero otherwise (a
# failed stage, a failed or missing test case, no test run at all, a stage
# that did not finish: killed by TERM, INT or HUP -- a time limit --, or one
# that ended the script before it recorded its end). The summary, one line
# per stage result, is printed last whatever happened; a stage that did not
# finish is named there ("stage X did not finish").
#
# Adding a stage: a self-contained `if has <name>; then stage_begin <name>
# ... stage_end; fi` block that ends each result with `record <status>
# <what>` (status 0 = passed) and runs its long commands through `bgrun`
# (in the background, waited for: a signal reaches the trap at once and the
# command's process group is stopped with the script).
#
# GPU_CHECK_SELFTEST=1 (test/scripts/test_gpu_check.py, on a CPU): no GPU
# is queried and the selftest-* stages exist: selftest-pass, selftest-fail,
# selftest-sleep (SELFTEST_SLEEP seconds), selftest-exit (ends the script
# inside the stage), selftest-norecord (records nothing), selftest-filters
# (a filter naming a test that does not exist, checked against $BUILD).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"
: > "$LOGS/summary.txt"

plant=0
stage_args=()
for a in "$@"; do
  case $a in
    --plant-failure) plant=1 ;;
    -*) echo "unknown option $a (see the header of $0)"; exit 2 ;;
    *) stage_args+=("$a") ;;
  esac
done
# COMMIT goes into every perf JSON: a hash (7-40 hex digits, -dirty
# allowed) or nothing, never whatever a caller's script produced (a call
# once passed the first word of .git/HEAD, "ref:", into a run's tables).
if [ -n "${COMMIT:-}" ] && ! [[ $COMMIT =~ ^[0-9a-f]{7,40}(-dirty)?$ ]]; then
  echo "COMMIT='$COMMIT' is not a commit hash (7-40 hex digits, -dirty allowed)"
  exit 2
fi
selftest=${GPU_CHECK_SELFTEST:-0}
stages=${stage_args[*]:-build tests topology sanitize stress-short perf python plants}
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
  stage_records=$((stage_records + 1))
  echo "== ${summary[-1]}"
  echo "${summary[-1]}" >> "$LOGS/summary.txt"
}
# A result that is neither a pass nor a failure (a plant's test needing
# more GPUs than this machine has): shown, not counted.
note_skip() {
  summary+=("skip  $*")
  stage_records=$((stage_records + 1))
  echo "== ${summary[-1]}"
}
# The number N of "[  PASSED  ] N tests." in a GoogleTest log, 0 if none: a
# filter that matches no test passes with 0, which proves nothing.
gtest_passed() {
  local n
  n=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) tests\{0,1\}\..*/\1/p' "$1" | tail -1)
  echo "${n:-0}"
}

# ---- stages that cannot lie: each begins and ends; one begun and never
# ended (killed, or the script left it) is reported as not finished.
current_stage=""
stage_records=0
# $LOGS/summary.txt has every result as it comes and each stage's start
# and end: even a SIGKILL (no trap runs) leaves a started stage unended there.
stage_begin() {
  current_stage=$1
  stage_records=0
  stage_start=$SECONDS
  echo "==== stage $1"
  echo "stage $1 started" >> "$LOGS/summary.txt"
}
stage_end() {
  [ "$stage_records" -gt 0 ] || record 1 "stage '$current_stage' recorded no result"
  echo "==== stage $current_stage done ($((SECONDS - stage_start)) s)"
  echo "stage $current_stage finished" >> "$LOGS/summary.txt"
  current_stage=""
}
# Runs a command in the background in a process group of its own and waits
# for it: bash runs a trap only between commands, so a TERM arriving during
# a foreground command would wait for it; `wait` returns at once. The trap
# stops the group.
CHILD=""
bgrun() {
  setsid "$@" &
  CHILD=$!
  wait "$CHILD"
  local status=$?
  CHILD=""
  return "$status"
}
# Every process below this script, by ps's parent links (the subshell that
# lists them left out). A signal that lands while bgrun forks runs the trap
# before `CHILD=$!`, and the forked subshell, holding the handler it
# inherited, can outlive a TERM and start the command a level further down
# (seen on a loaded 2-core machine): the tree finds what the group misses.
descendants() {
  local self=$BASHPID  # the subshell running this (in the pipeline, BASHPID would be ps's or awk's own)
  ps -eo pid=,ppid= | awk -v root=$$ -v self="$self" '{ kids[$2] = kids[$2] " " $1 }
    END { n = split(kids[root], q, " "); for (i = 1; i <= n; i++) { if (q[i] == self) continue;
          m = split(kids[q[i]], c, " "); for (j = 1; j <= m; j++) q[++n] = c[j]; print q[i] } }'
}
# TERM to the command's group and to everything below the script, listed
# again each half second (a subshell that survived a TERM may have started
# its child since); KILL to what is left after five seconds.
stop_child() {
  local pids
  [ -z "$CHILD" ] || kill -TERM -- "-$CHILD" 2> /dev/null
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(descendants)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086  # a list of pids
    kill -TERM $pids 2> /dev/null
    sleep 0.5
  done
  pids=$(descendants)
  [ -z "$CHILD" ] || kill -KILL -- "-$CHILD" 2> /dev/null
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -KILL $pids 2> /dev/null
  CHILD=""
}
killed_by=""
on_signal() {
  killed_by=$1
  trap '' TERM INT HUP  # one report
  echo "== gpu-check.sh: $1 received${current_stage:+ in stage '$current_stage'}: stopping"
  stop_child
  exit "$2"
}
trap 'on_signal SIGTERM 143' TERM
trap 'on_signal SIGINT 130' INT
trap 'on_signal SIGHUP 129' HUP
# GPU_CHECK_TAR=<file>: every log of the run in one tar.gz at the end,
# whatever happened (the device tool brings back 8 files at most).
pack_logs() {
  [ -n "${GPU_CHECK_TAR:-}" ] || return 0
  tar czf "$GPU_CHECK_TAR" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" 2> /dev/null ||
    echo "== GPU_CHECK_TAR: could not write $GPU_CHECK_TAR"
}
finish() {
  local status=$?
  stop_child
  # A planted break left in the tree (the plants stage killed) goes.
  python3 test/plants/plants.py revert-all > /dev/null 2>&1
  if [ -n "$current_stage" ]; then
    record 1 "stage '$current_stage' did not finish${killed_by:+: killed by $killed_by}"
  elif [ -n "$killed_by" ]; then
    record 1 "gpu-check.sh killed by $killed_by between stages"
  fi
  [ "$status" -eq 0 ] || [ "$failures" -gt 0 ] || record "$status" "gpu-check.sh stopped early"
  echo
  echo "==== summary"
  printf '%s\n' "${summary[@]}"
  pack_logs
  if [ "$failures" -gt 0 ]; then
    local code=1  # a signal's own status (128 + n) when one ended the run
    [ "$status" -le 1 ] || code=$status
    echo "==== $failures failed: exit $code"
    exit "$code"
  fi
  echo "==== every stage passed"
  exit 0
}
trap finish EXIT

# Every GPU this process may use (CUDA_VISIBLE_DEVICES counts) must work:
# tests needing up to that many fail instead of skipping (multi-rank tests
# needing more still skip).
if [ "$selftest" = 1 ]; then
  export NCCL_DCP_REQUIRE_GPU=0
  echo "gpu-check.sh self-test (GPU_CHECK_SELFTEST=1): no GPU queried" > "$LOGS/env.txt"
else
  export NCCL_DCP_REQUIRE_GPU=$(scripts/visible-gpus.sh)
  [ "$NCCL_DCP_REQUIRE_GPU" -ge 1 ] || NCCL_DCP_REQUIRE_GPU=1
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nvcc --version | tail -1
    meson --version
    python3 -c 'import nvidia.nccl as m; print("pip NCCL at", m.__path__[0])' 2>&1
  } > "$LOGS/env.txt" 2>&1
fi
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared hosts
cat "$LOGS/env.txt"

# ---- the GoogleTest filters of the sanitizer stages, "binary:filter" each.
# Sanitizers are slow (budget: the sanitize stage within ~150 s on an
# H200): small calls, each path once.
SANITIZE_TARGETS=(
  # HEAD: every protocol (BitwiseDeterministic and SpecialLseValues); the
  # strided test covers every dtype and base: LL128 only here.
  "gpu_loopback:Transports/LoopbackMatrix.SpecialLseValues/*bf16_base2:Transports/LoopbackProto.BitwiseDeterministic/LL:Transports/LoopbackProto.BitwiseDeterministic/LL128:Transports/LoopbackProto.BitwiseDeterministic/SIMPLE:Transports/LoopbackProto.StridedEqualsPackedBitwise/LL128:Transports/LoopbackProto.RoundCounterWraps/LL128"
  # TOKEN with host and device counts (a graph replay with new counts),
  # NONE in two phases (padded strides, special LSEs, empty shards).
  "gpu_scatter:Transports/TokenSplit.HostAndDeviceCountsOnce/LL128:Transports/TokenSplit.HostAndDeviceCountsOnce/SIMPLE:Transports/NoneAlgorithms.TwoPhaseOnce/LL:Transports/NoneAlgorithms.TwoPhaseOnce/LL128:Transports/NoneAlgorithms.TwoPhaseOnce/SIMPLE"
  # fp8 on the wire, each protocol (and the native wire beside it).
  "gpu_fp8_wire:Protocols/Fp8Wire.SmallCall/LL_bf16:Protocols/Fp8Wire.SmallCall/LL128_bf16:Protocols/Fp8Wire.SmallCall/SIMPLE_fp16"
)
# sanitize-context: the loopback HEAD subset, the 1-rank NCCL context
# (create, calls, graph, fallback, in-window create), any stream, create's unwind.
SANITIZE_CONTEXT_TARGETS=(
  "${SANITIZE_TARGETS[0]}"
  "gpu_context:OneRankContext.TopologyReport:OneRankContext.GraphCaptureReplays:OneRankContext.InsideTheApplicationsWindow:OneRankContext.ForcedFallback"
  "gpu_streams:OneRankStreams.AnyStreamAndBindStreamIsANoOp"
  "gpu_create_unwind:CreateUnwind.FusedPathEveryStep:CreateUnwind.BadArgumentsAreRefusedInTheFirstStep"
)
# Each pattern of "binary:filter" names a test of $BUILD's binary; records
# a failure naming the pattern otherwise. Returns non-zero then.
check_filters() {  # check_filters <stage> binary:filter...
  local stage=$1 target out rc=0
  shift
  for target in "$@"; do
    out=$(python3 scripts/gtest_filters.py "$BUILD/test/${target%%:*}" "${target#*:}" 2>&1) || {
      record 1 "$stage: ${target%%:*}'s filter names tests that do not exist: $out"
      rc=1
    }
  done
  return "$rc"
}

PERF=$BUILD/perf/dcp_a2a_lse_reduce_perf
PERF_SHAPE=(-H 16 --head-dim 512 -d bf16 --min-rows 1 --max-rows 1024 -f 2 -w 5 -m 10 -G 1 -c 1)
PERF_ARGS=(--virtual-ranks 8 "${PERF_SHAPE[@]}")  # loopback: cp 8 on one GPU

# With 2 GPUs required, the perf binary's MPI launch must be tested too
# (test/multi/test_perf_binary.cc fails its mpi2 cases without it): MPI is
# required at configure.
mpi=auto
[ "$NCCL_DCP_REQUIRE_GPU" -lt 2 ] || mpi=enabled
if has build; then
  stage_begin build
  start=$SECONDS
  status=0
  if [ ! -f "$BUILD/build.ninja" ]; then
    bgrun meson setup "$BUILD" --buildtype=release -Dmpi=$mpi -Dcommit="${COMMIT:-}" > "$LOGS/configure.log" 2>&1 ||
      { status=$?; cat "$LOGS/configure.log"; }
  elif [ "$mpi" = enabled ] || [ -n "${COMMIT:-}" ]; then  # an earlier run's build directory: ninja reconfigures
    meson configure "$BUILD" -Dmpi=$mpi ${COMMIT:+-Dcommit="$COMMIT"} > "$LOGS/configure.log" 2>&1 ||
      { status=$?; cat "$LOGS/configure.log"; }
  fi
  grep -E "^Message: NCCL" "$LOGS/configure.log" 2>/dev/null
  if [ "$status" -eq 0 ]; then
    bgrun ninja -C "$BUILD" > "$LOGS/build.log" 2>&1 || { status=$?; tail -40 "$LOGS/build.log"; }
  fi
  record "$status" "build ($((SECONDS - start)) s)"
  stage_end
  [ "$status" -eq 0 ] || exit 1  # nothing else can run
fi

if has tests; then
  stage_begin tests
  start=$SECONDS
  # meson reads each gtest binary's XML from the build directory: one left by
  # an earlier run would stand in for a binary that crashed before writing.
  find "$BUILD" -maxdepth 1 -name '*.xml' -delete
  rm -f "$BUILD"/meson-logs/testlog.*
  test_args=()
  [ "$plant" -eq 0 ] || test_args=(--test-args=--dcp_plant_failure)
  suites=()
  for suite in ${TEST_SUITES:-}; do suites+=(--suite "$suite"); done  # default: every suite
  bgrun meson test -C "$BUILD" --num-processes 1 --print-errorlogs --timeout-multiplier 1 "${suites[@]}" \
    "${test_args[@]}" > "$LOGS/tests.log" 2>&1
  meson_status=$?
  cp "$BUILD/meson-logs/testlog.junit.xml" "$LOGS/testlog.junit.xml" 2>/dev/null
  expect=(--expect test/expected_cases.txt)
  [ -z "${TEST_SUITES:-}" ] || expect=()  # some suites only: their binaries' minimums are not checked
  python3 scripts/count_tests.py "$BUILD/meson-logs/testlog.junit.xml" --meson-exit-code "$meson_status" \
    "${expect[@]}" > "$LOGS/count.txt" 2>&1
  status=$?
  [ "$status" -ne 0 ] || [ "$meson_status" -eq 0 ] || status=$meson_status
  grep -E "^(FAILED|note:)" "$LOGS/count.txt" | head -30
  record "$status" "tests (NCCL_DCP_REQUIRE_GPU=$NCCL_DCP_REQUIRE_GPU$([ "$plant" -eq 0 ] || echo ", planted failure")):" \
    "$(tail -1 "$LOGS/count.txt") (meson status $meson_status, $((SECONDS - start)) s)"
  stage_end
fi

# The topology report (DESIGN §5) beside what the driver says: the model's
# dump of every GPU, thread pinning, and the report logged at create.
if has topology; then
  stage_begin topology
  {
    echo "## nvidia-smi topo -m"; nvidia-smi topo -m
    echo "## nvidia-smi nvlink -s"; nvidia-smi nvlink -s
    echo "## unit_topology: ThisMachine, Pinning"
    "$BUILD/test/unit_topology" --gtest_filter='ThisMachine.*:Pinning.*'
    echo "## at create, NCCL_DCP_DEBUG=INFO (first context; ranks' lines may interleave)"
    if [ "$NCCL_DCP_REQUIRE_GPU" -ge 2 ]; then
      NCCL_DCP_DEBUG=INFO "$BUILD/test/multi_ranks" --gtest_filter='Cp/Ranks.ShapesThatFillNoWholeLine/cp2'
    else
      NCCL_DCP_DEBUG=INFO "$BUILD/test/gpu_context" --gtest_filter='OneRankContext.TopologyReport'
    fi | grep -E "NCCL-DCP INFO (nccl-dcp topology|  )" | head -n 12
  } > "$LOGS/topology.txt" 2>&1
  # Passed when the model printed this machine's report and a context logged one.
  grep -q "^this machine: " "$LOGS/topology.txt" && grep -q "NCCL-DCP INFO nccl-dcp topology" "$LOGS/topology.txt"
  record $? "topology (full output in topology.txt)"
  grep -E "^# |this machine|pinned|NCCL-DCP INFO" "$LOGS/topology.txt" | head -40
  stage_end
fi

# The sanitizers on every path (SANITIZE_TARGETS), each filter checked
# against the binaries first (a pattern naming no test fails the stage).
sanitize() {  # sanitize <stage> <log prefix> <report API errors: all|explicit|no> binary:filter...
  local stage=$1 prefix=$2 api=$3 tool target bin log status errs passed
  shift 3
  check_filters "$stage" "$@" || return 0
  for tool in memcheck racecheck synccheck; do
    for target in "$@"; do
      bin=${target%%:*}
      log=$LOGS/$prefix-$tool-$bin.log
      # Slow under the tools: the device-side waits get room.
      NCCL_DCP_TIMEOUT_MS=120000 bgrun compute-sanitizer --tool $tool --report-api-errors "$api" --error-exitcode 99 \
        "$BUILD/test/$bin" --gtest_filter="${target#*:}" > "$log" 2>&1
      status=$?
      errs=$(grep -E "(ERROR|RACECHECK|SYNCCHECK) SUMMARY" "$log" | tail -1)
      passed=$(grep -E "^\[  PASSED  \]" "$log" | tail -1)
      if [ "$status" -eq 0 ] && [ "$(gtest_passed "$log")" -lt 1 ]; then
        status=1 passed="no test passed: the filter matches none"
      fi
      record "$status" "compute-sanitizer $tool $bin: ${errs:-no summary}; ${passed:-gtest did not pass}"
    done
  done
}

if has sanitize; then
  stage_begin sanitize
  sanitize sanitize sanitize explicit "${SANITIZE_TARGETS[@]}"
  stage_end
fi

# Every filter this script runs, against the binaries of $BUILD (no GPU).
if has check-filters; then
  stage_begin check-filters
  check_filters check-filters "${SANITIZE_TARGETS[@]}" "${SANITIZE_CONTEXT_TARGETS[@]}" &&
    record 0 "check-filters: every pattern of $(( ${#SANITIZE_TARGETS[@]} + ${#SANITIZE_CONTEXT_TARGETS[@]} )) filters names a test"
  stage_end
fi

# A short stress of every 0.4 path (the full one is `stress`): loopback
# cp 8, every protocol x HEAD, TOKEN, TOKEN with device counts, NONE direct
# and in two phases (its line must say so: the workspace's layout), fp8.
if has stress-short; then
  stage_begin stress-short
  if bgrun ninja -C "$BUILD" test/dcp_stress > "$LOGS/build-stress-short.log" 2>&1; then
    # cp 8 and cp 2: the line protocols give receivers warps of their own
    # only where receives are no fewer than sends (cp 2-4 at small rows).
    for cp in ${STRESS_SHORT_CPS:-8 2}; do
      for P in LL LL128 SIMPLE; do
        for mode in "head:" "token:-S token" "token-counts:-S token -C" "none-direct:-S none" "none-two_phase:-S none" \
          "wire-fp8:-W fp8" "wire-fp8-token-counts:-W fp8 -S token -C" "wire-fp8-none:-W fp8 -S none"; do
          name=${mode%%:*} algo="" want=""
          case $name in none-direct) algo=direct want="(direct)" ;; none-two_phase) algo=two_phase want="(two phases)" ;; esac
          log=$LOGS/stress-short-cp$cp-$name-$P.log
          # shellcheck disable=SC2086  # the mode's flags are words
          bgrun env ${algo:+NCCL_DCP_NONE_ALGO=$algo} timeout 120 "$BUILD/test/dcp_stress" -V "$cp" -P "$P" -b 4 \
            -n "${STRESS_SHORT_CALLS:-20000}" ${mode#*:} > "$log" 2>&1
          status=$?
          line=$(grep "^dcp_stress: " "$log" | tail -1)
          if [ "$status" -eq 0 ] && [ -n "$want" ] && [[ "$line" != *"$want"* ]]; then
            status=1 line="NCCL_DCP_NONE_ALGO=$algo but the run says otherwise: $line"
          fi
          record "$status" "stress-short $name $P: ${line:-$(tail -1 "$log")}"
        done
      done
    done
  else
    record 1 "stress-short: test/dcp_stress does not build"
  fi
  stage_end
fi

if has perf; then
  stage_begin perf
  start=$SECONDS
  for P in ${PERF_PROTOS:-LL128 LL SIMPLE AUTO}; do
    bgrun "$PERF" "${PERF_ARGS[@]}" -P "$P" -J "$LOGS/perf-$P.json" > "$LOGS/perf-$P.txt" 2>&1
    record $? "perf $P (table in perf-$P.txt)"
    tail -14 "$LOGS/perf-$P.txt"
  done
  # Each scatter mode beside its baselines (docs/perf.md, the current tables):
  # loopback cp 8 (HEAD's table is perf-AUTO's), then with 2+ GPUs every
  # mode on the real ranks, one thread per GPU.
  # NONE once per algorithm (NCCL_DCP_NONE_ALGO; docs/perf-history.md 0.4), and
  # two phases once more against baseline 2 staged as NCCL stages
  # unregistered buffers (--staged-gather 1; loopback's default writes
  # straight into every output), and once with its outputs registered
  # (--registered-out 1: phase 2 into the peers' outputs directly).
  for run in token none:direct none:two_phase none:two_phase:staged none:two_phase:staged:registered; do
    mode=${run%%:*} name=${run//:/-} algo="" staged=0 registered=0
    for word in ${run//:/ }; do
      case $word in
        direct | two_phase) algo=$word ;;
        staged) staged=1 ;;
        registered) registered=1 ;;
      esac
    done
    bgrun env ${algo:+NCCL_DCP_NONE_ALGO=$algo} "$PERF" "${PERF_ARGS[@]}" -P AUTO --scatter "$mode" \
      --staged-gather $staged --registered-out $registered -J "$LOGS/perf-scatter-$name.json" \
      > "$LOGS/perf-scatter-$name.txt" 2>&1
    record $? "perf scatter $name, loopback cp 8 AUTO (table in perf-scatter-$name.txt)"
    tail -14 "$LOGS/perf-scatter-$name.txt"
  done
  # fp8 on the wire (docs/perf.md) against the native wire timed in the
  # same process (-B 3: its baseline), not perf-AUTO.json's of another.
  bgrun "$PERF" "${PERF_ARGS[@]}" -P AUTO --wire fp8 -B 3 -J "$LOGS/perf-wire-fp8.json" > "$LOGS/perf-wire-fp8.txt" 2>&1
  record $? "perf wire fp8, loopback cp 8 AUTO (table in perf-wire-fp8.txt)"
  tail -14 "$LOGS/perf-wire-fp8.txt"
  if [ "$NCCL_DCP_REQUIRE_GPU" -ge 2 ]; then
    for wire in native fp8; do  # fp8 against the native wire in its own process too (-B 3)
      bgrun "$PERF" -t "$NCCL_DCP_REQUIRE_GPU" "${PERF_SHAPE[@]}" -P AUTO --wire $wire $([ $wire = native ] || echo -B 3) \
        -J "$LOGS/perf-wire-$wire-ranks.json" > "$LOGS/perf-wire-$wire-ranks.txt" 2>&1
      record $? "perf wire $wire, $NCCL_DCP_REQUIRE_GPU ranks AUTO (table in perf-wire-$wire-ranks.txt)"
      tail -14 "$LOGS/perf-wire-$wire-ranks.txt"
    done
    for mode in head token none; do
      bgrun "$PERF" -t "$NCCL_DCP_REQUIRE_GPU" "${PERF_SHAPE[@]}" -P AUTO --scatter $mode \
        -J "$LOGS/perf-scatter-$mode-ranks.json" > "$LOGS/perf-scatter-$mode-ranks.txt" 2>&1
      record $? "perf scatter $mode, $NCCL_DCP_REQUIRE_GPU ranks AUTO (table in perf-scatter-$mode-ranks.txt)"
      tail -14 "$LOGS/perf-scatter-$mode-ranks.txt"
    done
  fi
  echo "== perf took $((SECONDS - start)) s"
  stage_end
fi

# The loopback tables at other rank counts (issues 39 and 41: cp 2, 4 and
# 16): HEAD, TOKEN, NONE (its default algorithm) and fp8, AUTO, each
# beside its baselines; fp8 against the native wire in its own process (-B 3).
# Not a default stage (about 4 minutes): chain it after perf.
if has perf-cp; then
  stage_begin perf-cp
  start=$SECONDS
  # One table: its name, what the summary line calls it, then the command.
  cp_table() {
    local name=$1 what=$2
    shift 2
    bgrun "$@" -J "$LOGS/$name.json" > "$LOGS/$name.txt" 2>&1
    record $? "perf loopback cp $cp $what (table in $name.txt)"
  }
  # The first GPU's memory in MiB (unread: taken as an H200's).
  gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
  token_cp16_rows=512
  [ "${gpu_mib:-143771}" -ge 102400 ] 2>/dev/null || token_cp16_rows=256
  for cp in ${PERF_CPS:-2 4 16}; do
    for run in head token none fp8; do
      flags=(--scatter "$run")
      [ "$run" != fp8 ] || flags=(--wire fp8 -B 3)
      # NONE's baseline receives every partial on every rank: cp^2 x the
      # inputs (cp 16 at 1024 rows: 69 GB), so its sweep stops at 256 rows
      # there; TOKEN's loopback workspace did not fit one H200 at cp 16 and
      # 1024 rows (out of memory, 2026-12-03): 512, and 256 on a card of
      # less than 100 GiB (an H100's 80 GB ran out at 512, 2026-12-05).
      [ "$run" != none ] || [ "$cp" -lt 16 ] || flags+=(--max-rows 256)
      [ "$run" != token ] || [ "$cp" -lt 16 ] || flags+=(--max-rows "$token_cp16_rows")
      cp_table "perf-cp$cp-$run" "$run" "$PERF" --virtual-ranks "$cp" "${PERF_SHAPE[@]}" -P AUTO "${flags[@]}"
    done
    # AUTO's one-GPU crossover to SIMPLE at this cp: HEAD per protocol,
    # where the crossover can lie (PERF_CP_PROTOCOLS="LL128 SIMPLE").
    for proto in ${PERF_CP_PROTOCOLS:-}; do
      cp_table "perf-cp$cp-head-$proto" "head $proto" "$PERF" --virtual-ranks "$cp" "${PERF_SHAPE[@]}" -P "$proto" \
        --max-rows 128
    done
    # NONE's `auto` (direct at 2 ranks, two phases from 3) against each
    # algorithm (PERF_CP_NONE_ALGOS="direct two_phase"), to 256 rows.
    for algo in ${PERF_CP_NONE_ALGOS:-}; do
      cp_table "perf-cp$cp-none-$algo" "none $algo" env NCCL_DCP_NONE_ALGO="$algo" "$PERF" --virtual-ranks "$cp" \
        "${PERF_SHAPE[@]}" -P AUTO --scatter none --max-rows 256
    done
  done
  echo "== perf-cp took $((SECONDS - start)) s"
  stage_end
fi

# Nsight Compute on the loopback fused kernel (issues 39 and 41: SM
# throughput, issue slots, registers, spills), scripts/profile-ncu.sh's
# cases or NCU_CASES ("P:wire:scatter:rows ..."); details under ncu/.
if has ncu; then
  stage_begin ncu
  # shellcheck disable=SC2086  # the cases are words
  bgrun scripts/profile-ncu.sh "$PERF" "$LOGS/ncu" ${NCU_CASES:-} > "$LOGS/ncu.log" 2>&1
  record $? "ncu on the loopback kernel (figures in ncu.log, details in ncu/)"
  cat "$LOGS/ncu.log"
  stage_end
fi

# LL128 without programmatic dependent launch, to weigh PDL (same build).
if has nopdl; then
  stage_begin nopdl
  NCCL_DCP_PDL=0 bgrun "$PERF" "${PERF_ARGS[@]}" -P LL128 -J "$LOGS/perf-LL128-nopdl.json" \
    > "$LOGS/perf-LL128-nopdl.txt" 2>&1
  record $? "perf LL128 with NCCL_DCP_PDL=0"
  tail -11 "$LOGS/perf-LL128-nopdl.txt"
  stage_end
fi

# LL128 with the Hopper re-read (DESIGN §4; off by default): same sweep, its own build.
if has reread; then
  stage_begin reread
  { [ -f build-reread/build.ninja ] ||
      bgrun meson setup build-reread --buildtype=release -Dll128_reread=true > "$LOGS/configure-reread.log" 2>&1; } &&
    bgrun ninja -C build-reread perf/dcp_a2a_lse_reduce_perf > "$LOGS/build-reread.log" 2>&1 &&
    bgrun build-reread/perf/dcp_a2a_lse_reduce_perf "${PERF_ARGS[@]}" -P LL128 \
      -J "$LOGS/perf-LL128-reread.json" > "$LOGS/perf-LL128-reread.txt" 2>&1
  record $? "perf LL128 with the re-read"
  tail -11 "$LOGS/perf-LL128-reread.txt"
  stage_end
fi

# The in-kernel timeline (DESIGN §7): a -Dtimeline=true build of the perf
# binary, --timeline on loopback LL, LL128 and SIMPLE (each a tier of AUTO
# on one GPU; per wire of
# TIMELINE_WIRES, default "native"; "native fp8" adds
# timeline-loopback-<P>-fp8.txt) and on the real ranks.
if has timeline; then
  stage_begin timeline
  { [ -f build-timeline/build.ninja ] ||
      bgrun meson setup build-timeline --buildtype=release -Dtimeline=true -Dtests=false \
        > "$LOGS/configure-timeline.log" 2>&1; } &&
    bgrun ninja -C build-timeline perf/dcp_a2a_lse_reduce_perf > "$LOGS/build-timeline.log" 2>&1
  status=$?
  if [ "$status" -eq 0 ]; then
    for wire in ${TIMELINE_WIRES:-native}; do
      suffix=${wire/native/}
      for P in LL LL128 SIMPLE; do
        bgrun build-timeline/perf/dcp_a2a_lse_reduce_perf --virtual-ranks 8 -H 16 --head-dim 512 -d bf16 --min-rows 1 --max-rows 1024 -f 32 \
          -w 5 -m 10 -G 1 -c 0 -B 0 -F 0 --timeline -P $P --wire "$wire" > "$LOGS/timeline-loopback-$P${suffix:+-$suffix}.txt" 2>&1 ||
          status=$?
      done
    done
    bgrun build-timeline/perf/dcp_a2a_lse_reduce_perf -g "$NCCL_DCP_REQUIRE_GPU" -H 16 --head-dim 512 -d bf16 --min-rows 1 --max-rows 1024 \
      -f 32 -w 5 -m 10 -G 1 -c 0 -B 0 -F 0 --timeline > "$LOGS/timeline-ranks.txt" 2>&1 || status=$?
  fi
  record "$status" "timeline (timeline-*.txt)"
  grep -h "timeline rows" "$LOGS"/timeline-*.txt
  stage_end
fi

# PDL ordering and the LL128 re-read (DESIGN §4) under a producer that
# triggers its dependents early and then rewrites the inputs: >= 10^6 calls
# per rank, 0 mismatched words, without (the default) and with the re-read;
# loopback at cp 8, and the real ranks when there are several GPUs. Then
# each scatter mode once (this build, fewer calls): TOKEN, TOKEN with the
# device counts the producer rewrites per call (DESIGN §14), NONE.
if has stress; then
  stage_begin stress
  start=$SECONDS
  [ -f build-reread/build.ninja ] ||
    bgrun meson setup build-reread --buildtype=release -Dll128_reread=true > "$LOGS/configure-reread.log" 2>&1
  for build in "$BUILD" build-reread; do
    bgrun ninja -C "$build" test/dcp_stress > "$LOGS/build-stress.log" 2>&1 ||
      { record 1 "stress: $build does not build"; continue; }
    runs=("nccl-window:-V 8")
    [ "$NCCL_DCP_REQUIRE_GPU" -lt 2 ] || runs+=("nccl-window:-r $NCCL_DCP_REQUIRE_GPU" "cuda-ipc:-r $NCCL_DCP_REQUIRE_GPU")
    for run in "${runs[@]}"; do
      NCCL_DCP_PROVIDER=${run%%:*} bgrun timeout 300 "$build/test/dcp_stress" ${run#*:} -P LL128 -b 4 \
        -n ${STRESS_CALLS:-1000000} > "$LOGS/stress.log" 2>&1
      record $? "stress ($build, ${run%%:*}) $(tail -1 "$LOGS/stress.log")"
    done
  done
  where=("loopback:-V 8")
  [ "$NCCL_DCP_REQUIRE_GPU" -lt 2 ] || where+=("ranks:-r $NCCL_DCP_REQUIRE_GPU")
  for mode in "token:-S token" "token-counts:-S token -C" "none:-S none" "none-two_phase:-S none" "wire-fp8:-W fp8"; do
    algo=""
    [ "${mode%%:*}" != none-two_phase ] || algo=two_phase
    for w in "${where[@]}"; do
      log=$LOGS/stress-${mode%%:*}-${w%%:*}.log
      bgrun env ${algo:+NCCL_DCP_NONE_ALGO=$algo} timeout 300 "$BUILD/test/dcp_stress" ${w#*:} ${mode#*:} -P LL128 -b 4 \
        -n ${STRESS_MODE_CALLS:-200000} > "$log" 2>&1
      status=$?
      if [ "$status" -eq 0 ] && [ -n "$algo" ] && ! grep -q "(two phases)" "$log"; then
        status=1  # NCCL_DCP_NONE_ALGO=two_phase, but the workspace runs direct
      fi
      record $status "stress ${mode%%:*} (${w%%:*}) $(tail -1 "$log")"
    done
  done
  echo "== stress took $((SECONDS - start)) s"
  stage_end
fi

# Soak (issue 11): >= 10^6 calls per rank with random batches (many above
# maxBatch), graph replays between eager calls, every 1000th call checked
# against the CPU reference; 0 mismatches and no asynchronous error.
# Loopback at cp 8 (AUTO with SIMPLE for rounds of >= 12 rows, so LL128 and
# SIMPLE alternate in one context; then LL), then NCCL ranks on every GPU.
if has soak; then
  stage_begin soak
  start=$SECONDS
  if bgrun ninja -C "$BUILD" test/dcp_soak > "$LOGS/build-soak.log" 2>&1; then
    for run in "loopback:-V 8" "loopback-LL:-V 8 -P LL" "ranks:"; do
      name=${run%%:*}
      NCCL_DCP_SIMPLE_MIN_ROWS=12 bgrun timeout 300 "$BUILD/test/dcp_soak" ${run#*:} -n 1000000 > "$LOGS/soak-$name.log" 2>&1
      record $? "soak $name: $(grep -E '^soak: (loopback|NCCL ranks) ' "$LOGS/soak-$name.log" | tail -1 | cut -c7-)"
      grep -E "^soak: (worker|call|setup)" "$LOGS/soak-$name.log" | head -5
    done
  else
    record 1 "soak: test/dcp_soak does not build"
  fi
  echo "== soak took $((SECONDS - start)) s"
  stage_end
fi

# compute-sanitizer on the loopback subset, the 1-rank NCCL context (create,
# calls, graph, fallback, in-window create), any stream, and create's unwind
# (SANITIZE_CONTEXT_TARGETS). NCCL's own initialisation probes (kernel images
# of other archs, cuMemCreate flags) fail by design: API errors are not
# reported; every memory access, race and sync error still is.
if has sanitize-context; then
  stage_begin sanitize-context
  sanitize sanitize-context sanitize-context no "${SANITIZE_CONTEXT_TARGETS[@]}"
  stage_end
fi

# The PyTorch binding (python/), with PyTorch's venv (TORCH_PYTHON, default
# /opt/torch/.venv/bin/python): its pytest suite (the CPU tests that need
# torch included; the GPU suite runs next, not through pytest), the torchrun
# tests on every GPU, again with NCCL_CUMEM_ENABLE=0 exported (vLLM's
# setting: the contexts must land on cuda-ipc from library 0.2 on), the two
# examples, and the host cost of one eager call (world size 1).
if has python; then
  stage_begin python
  start=$SECONDS
  torch_python=${TORCH_PYTHON:-/opt/torch/.venv/bin/python}
  py_env=(env NCCL_DCP_LIB="$ROOT/$BUILD/libnccl_dcp.so" PYTHONPATH="$ROOT/python")
  torchrun=("${py_env[@]}" "$torch_python" -m torch.distributed.run --standalone
    --nproc-per-node "$NCCL_DCP_REQUIRE_GPU")
  py_count='^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$'
  # The eager call's C helper, in place (the package falls back to ctypes without it).
  (cd python && "$torch_python" setup.py -q build_ext --inplace -b "$ROOT/$BUILD/py-ext" -t "$ROOT/$BUILD/py-ext-tmp") \
    > "$LOGS/python-ext.log" 2>&1
  # Not built is a failure: every eager call below would take the ctypes
  # fallback, and the host-cost line would measure that.
  helper=$("${py_env[@]}" "$torch_python" -c \
    'import nccl_dcp.context as c; print("built" if c._fastcall else "not built (ctypes fallback)")' 2>&1 | tail -1)
  record "$([ "$helper" = built ] && echo 0 || echo 1)" "python eager-call helper: $helper (python-ext.log)"
  # The CPU suite (about 150 s) runs beside the GPU runs below, on other
  # cores, and is waited for before the host-cost timing. A signal stops
  # it with the rest (stop_child stops every process below the script).
  pytest_pid=""
  if "$torch_python" -c 'import pytest' 2> /dev/null; then
    setsid "${py_env[@]}" "$torch_python" -m pytest python/tests -q -rs -p no:cacheprovider \
      --ignore=python/tests/test_gpu.py --junitxml="$LOGS/python-pytest.junit.xml" > "$LOGS/python-pytest.log" 2>&1 &
    pytest_pid=$!
  else
    record 1 "python pytest: pytest is not importable in $torch_python (install it there)"
  fi
  for cumem in default 0; do
    log=$LOGS/python-gpu${cumem/default/}.log
    junit=$LOGS/python-gpu${cumem/default/}.junit.xml
    run=("${torchrun[@]}")
    [ "$cumem" = default ] || run=(env NCCL_CUMEM_ENABLE=0 "${torchrun[@]}")
    rm -f "$junit"
    bgrun "${run[@]}" python/tests/gpu_torchrun.py --junit "$junit" > "$log" 2>&1
    status=$?
    line=$(grep -E "$py_count" "$log" | tail -1)
    record "$status" "python tests (torchrun, $NCCL_DCP_REQUIRE_GPU rank(s), NCCL_CUMEM_ENABLE=$cumem): ${line:-no count}"
    grep -E "^ *(FAIL|SKIP)|topology:" "$log" | head -20
    # As many cases as test/expected_cases.txt says (python_torchrun): a
    # suite that stopped early or lost cases still prints a count.
    counted=$(python3 scripts/count_tests.py "$junit" --as python_torchrun --expect test/expected_cases.txt 2>&1)
    record $? "python torchrun case count (NCCL_CUMEM_ENABLE=$cumem): $(grep -E '^FAILED' <<< "$counted" | head -3 | tr '\n' ' ')$(tail -1 <<< "$counted")"
  done
  bgrun "${torchrun[@]}" examples/torch_dcp_decode.py > "$LOGS/python-example.log" 2>&1
  record $? "python example torch_dcp_decode.py (table in python-example.log)"
  tail -8 "$LOGS/python-example.log"
  bgrun "${torchrun[@]}" examples/torch_dcp_engine.py > "$LOGS/python-engine.log" 2>&1
  record $? "python example torch_dcp_engine.py: $(grep -E '^check' "$LOGS/python-engine.log" | tail -1)"
  tail -6 "$LOGS/python-engine.log"
  if [ -n "$pytest_pid" ]; then
    wait "$pytest_pid"
    record $? "python pytest ($torch_python): $(tail -1 "$LOGS/python-pytest.log")"
  fi
  bgrun "${py_env[@]}" "$torch_python" -m torch.distributed.run --standalone --nproc-per-node 1 \
    python/bench_host_cost.py > "$LOGS/python-host-cost.log" 2>&1
  record $? "python host cost (python-host-cost.log): $(grep -E '^ratio' "$LOGS/python-host-cost.log" | tail -1)"
  grep -E " us  |^ratio" "$LOGS/python-host-cost.log"
  echo "== python stage took $((SECONDS - start)) s"
  stage_end
fi

# Our baseline's all-to-all alone (-B 2) against NCCL's own alltoall_perf
# (nccl-tests, built from .deps/nccl-tests) over the same bytes: within 10%.
if has baseline; then
  stage_begin baseline
  g=$NCCL_DCP_REQUIRE_GPU
  row=$((g * 16 * 512 * 2))  # bytes per row per rank: cp x Hl x D x bf16
  if nt=$(scripts/build-nccl-tests.sh .deps/nccl-tests "$BUILD/nccl-tests" 2> "$LOGS/build-nccl-tests.log" | tail -1); then
    # nccl-home/lib holds the NCCL we link: without it the loader finds the
    # machine's older system NCCL (compare_alltoall.py checks the versions).
    LD_LIBRARY_PATH="$nt/nccl-home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$nt/alltoall_perf" -g "$g" -G 10 -d bfloat16 -b $row -e $((row * 1024)) -f 2 > "$LOGS/alltoall_perf.txt" 2>&1
    "$PERF" -g "$g" -H 16 --head-dim 512 -d bf16 --min-rows 1 --max-rows 1024 -f 2 -w 5 -m 10 -G 1 -B 2 -F 0 \
      -J "$LOGS/perf-a2a-alone.json" > "$LOGS/perf-a2a-alone.txt" 2>&1
    python3 scripts/compare_alltoall.py "$LOGS/alltoall_perf.txt" "$LOGS/perf-a2a-alone.json" > "$LOGS/baseline.txt" 2>&1
    record $? "baseline all-to-all vs alltoall_perf (-g $g): $(tail -1 "$LOGS/baseline.txt")"
    cat "$LOGS/baseline.txt"
  else
    record 1 "baseline: nccl-tests did not build (build-nccl-tests.log)"
  fi
  stage_end
fi

# The profiler plugin in NCCL's own alltoall_perf, unmodified (issue 15):
# the report must count exactly the all-to-alls run, per size swept
# (scripts/check_plugin_report.py); then alltoall_perf without the plugin,
# with it, and with NCCL_DCP_PROFILE_KERNEL=0 (overhead, docs/perf.md); then
# the perf binary with the plugin (the library hook puts its calls in the
# report). Needs the nccl-tests source in .deps/nccl-tests. Not a default
# stage: scripts/gpu-check.sh build plugin.
if has plugin; then
  stage_begin plugin
  start=$SECONDS
  plugin_so=$ROOT/$BUILD/plugin/libnccl-profiler-dcp.so
  g=$((NCCL_DCP_REQUIRE_GPU >= 2 ? 2 : 1))
  tests=$(scripts/build-nccl-tests.sh .deps/nccl-tests "$BUILD/nccl-tests" 2> "$LOGS/plugin-nccl-tests-build.log" | tail -1)
  if [ -x "$tests/alltoall_perf" ] && [ -f "$plugin_so" ]; then
    # The NCCL we link, not the machine's older system one (see baseline).
    nccl_lib=(LD_LIBRARY_PATH="$tests/nccl-home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    profile=("${nccl_lib[@]}" NCCL_PROFILER_PLUGIN="$plugin_so")
    report=(NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$LOGS/plugin-nccl-%p.log")
    if [ "$g" -ge 2 ]; then  # the fused path's times for the estimate, same rank count
      "$BUILD/perf/dcp_a2a_lse_reduce_perf" -g "$g" -H 16 --head-dim 512 -d bf16 --min-rows 1 --max-rows 1024 -f 2 -w 5 -m 10 -G 1 \
        -J "$LOGS/plugin-calibration.json" > "$LOGS/plugin-calibration.txt" 2>&1
      report+=(NCCL_DCP_PROFILE_CALIBRATION="$LOGS/plugin-calibration.json")
    fi
    rm -f "$LOGS"/plugin-report-*.json "$LOGS"/plugin-dcp-*.json
    env "${profile[@]}" "${report[@]}" NCCL_DCP_PROFILE_FILE="$LOGS/plugin-report-%p.json" \
      "$tests/alltoall_perf" -g "$g" -b 32K -e 32M -f 2 -w 5 -n 20 -c 1 > "$LOGS/plugin-alltoall.log" 2>&1
    rc=$?
    python3 scripts/check_plugin_report.py counts "$LOGS"/plugin-report-*.json "$LOGS/plugin-alltoall.log" \
      > "$LOGS/plugin-check.txt" 2>&1
    check=$?
    record $((rc | check)) "plugin: alltoall_perf -g $g status $rc; report check: $(tail -1 "$LOGS/plugin-check.txt")"
    cat "$LOGS/plugin-check.txt"
    grep -h "NCCL-DCP profiler: " "$LOGS"/plugin-nccl-*.log | grep -v "report written" | head -40
    for run in base plugin nokernel; do
      case $run in
        base) pre=("${nccl_lib[@]}") ;;
        plugin) pre=("${profile[@]}") ;;
        nokernel) pre=("${profile[@]}" NCCL_DCP_PROFILE_KERNEL=0) ;;
      esac
      env "${pre[@]}" "$tests/alltoall_perf" -g "$g" -b 1K -e 32M -f 4 -w 20 -n 100 -c 0 \
        > "$LOGS/plugin-overhead-$run.log" 2>&1
    done
    python3 scripts/check_plugin_report.py overhead "$LOGS"/plugin-overhead-{base,plugin,nokernel}.log \
      > "$LOGS/plugin-overhead.md" 2>&1
    record $? "plugin overhead (alltoall_perf -g $g, out-of-place us; table in plugin-overhead.md)"
    cat "$LOGS/plugin-overhead.md"
    env "${profile[@]}" "${report[@]}" NCCL_DCP_PROFILE_FILE="$LOGS/plugin-dcp-%p.json" \
      "$BUILD/perf/dcp_a2a_lse_reduce_perf" -g "$g" --min-rows 1 --max-rows 16 -f 4 > "$LOGS/plugin-dcp.txt" 2>&1
    rc=$?
    python3 scripts/check_plugin_report.py dcp "$LOGS"/plugin-dcp-*.json > "$LOGS/plugin-dcp-check.txt" 2>&1
    check=$?
    record $((rc | check)) "plugin: nccl-dcp calls in the report: perf status $rc; $(tail -1 "$LOGS/plugin-dcp-check.txt")"
  else
    record 1 "plugin: no .deps/nccl-tests build (plugin-nccl-tests-build.log) or no $plugin_so"
  fi
  echo "== plugin took $((SECONDS - start)) s"
  stage_end
fi

# Every current NCCL (issue 16): NCCL 2.30.7 built from its source carried in
# .deps/nccl (scripts/build-nccl.sh, sm_90 only), then this script's build,
# tests and perf stages again against it, in a build directory of their own.
if has nccl-latest; then
  stage_begin nccl-latest
  # Only the collectives nccl-dcp and its suites call (ncclAllGather,
  # ncclAlltoAll = SendRecv): the full kernel set takes most of the build.
  if nccl_home=$(ONLY_FUNCS="AllGather * *|SendRecv" scripts/build-nccl.sh .deps/nccl \
      2> "$LOGS/nccl-latest-build.txt"); then
    record 0 "$(sed -n 's/^== \(NCCL .* built in .*\)/\1/p' "$LOGS/nccl-latest-build.txt")"
    NCCL_HOME=$nccl_home BUILD=build-gpu-nccl-latest OUT=$LOGS/nccl-latest bgrun "$ROOT/scripts/gpu-check.sh" build tests perf \
      > "$LOGS/nccl-latest.txt" 2>&1
    status=$?
    while read -r line; do summary+=("nccl-latest: $line"); done < <(sed -n '/^==== summary/,$p' "$LOGS/nccl-latest.txt" | tail -n +2)
    record "$status" "nccl-latest: the stages against NCCL 2.30.7 (nccl-latest.txt)"
  else
    tail -20 "$LOGS/nccl-latest-build.txt"
    record 1 "nccl-latest: NCCL build failed (nccl-latest-build.txt)"
  fi
  stage_end
fi

# Planted breaks (test/plants/plants.py run): each breaks the library in
# one place; the tests listed with it must fail against it (having run at
# least one case). PLANT_JOBS at a time (default: cores / 2, ninja -j2
# each: the plants that rebuild the most kernel families -- a device header
# planted, up to 15 CUDA files at about 13 s of a core each -- start first
# and end within the run's first half), each plant in a fresh copy of the
# tree and of $BUILD that rebuilds only the header's includers and the
# kernel families its GPU tests name ($BUILD itself is never planted),
# PLANT_GPU_SLOTS (4) GPU tests at a time on the GPUs, PLANT_TIMEOUT (300)
# s per test. Only plants whose tests fit this machine's GPUs run; the
# tests needing more are listed (skip).
if has plants; then
  stage_begin plants
  start=$SECONDS
  bgrun python3 test/plants/plants.py run --build "$BUILD" --gpus "$NCCL_DCP_REQUIRE_GPU" \
    --jobs "${PLANT_JOBS:-$(( $(nproc) > 3 ? $(nproc) / 2 : 2 ))}" --gpu-slots "${PLANT_GPU_SLOTS:-4}" --timeout "${PLANT_TIMEOUT:-300}" \
    --logs "$LOGS/plants" --junit "$LOGS/plants.junit.xml" > "$LOGS/plants.log" 2>&1
  status=$?
  while read -r verdict what; do
    case $verdict in
      ok) record 0 "plant $what" ;;
      skip) note_skip "plant $what" ;;
      *) record 1 "plant $what" ;;
    esac
  done < <(sed -n 's/^PLANT //p' "$LOGS/plants.log")
  record "$status" "$(tail -1 "$LOGS/plants.log") ($((SECONDS - start)) s; plants.log)"
  stage_end
fi

# ---- the self-test stages (GPU_CHECK_SELFTEST=1; test/scripts/test_gpu_check.py).
if [ "$selftest" = 1 ]; then
  if has selftest-pass; then
    stage_begin selftest-pass
    bgrun true
    record $? "selftest-pass"
    stage_end
  fi
  if has selftest-fail; then
    stage_begin selftest-fail
    bgrun false
    record $? "selftest-fail"
    stage_end
  fi
  if has selftest-sleep; then
    stage_begin selftest-sleep
    echo "== selftest-sleep: sleeping ${SELFTEST_SLEEP:-30} s"
    bgrun sleep "${SELFTEST_SLEEP:-30}"
    record $? "selftest-sleep"
    stage_end
  fi
  if has selftest-exit; then
    stage_begin selftest-exit
    exit 0  # the script ends inside the stage: it must not read as a pass
  fi
  if has selftest-norecord; then
    stage_begin selftest-norecord
    stage_end
  fi
  if has selftest-filters; then  # a filter naming a test that does not exist fails loudly
    stage_begin selftest-filters
    check_filters selftest-filters "unit_env:EnvParse.*:Gone.NoSuchTest" && record 0 "selftest-filters: accepted"
    stage_end
  fi
fi

# A stage named on the command line that no block knows ran nothing.
for s in $stages; do
  [[ "$asked" == *" $s "* ]] || record 1 "unknown stage '$s' (known:$asked)"
done
[ "${#summary[@]}" -gt 0 ] || record 1 "no stage ran"
