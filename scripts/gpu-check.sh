#!/usr/bin/env bash
# On the GPU machine, in ONE command: configure, build, run the GPU suite
# (NCCL_DCP_REQUIRE_GPU=<GPUs here>: a missing GPU fails), the compute-sanitizer
# subset and the perf comparison; print a short summary. Logs go under
# $OUT when it is set (else build-gpu/logs).
#
#   scripts/gpu-check.sh [stage...]   stages: build tests topology sanitize perf python (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"
stages=${*:-build tests topology sanitize perf python}  # also: nopdl noreread plugin baseline
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

if has topology; then
  # The topology report (DESIGN §5) beside what the driver says: the model's
  # dump of every GPU, thread pinning, and the report logged at create.
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
  note "topology: full output in topology.txt"
  grep -E "^# |this machine|pinned|NCCL-DCP INFO" "$LOGS/topology.txt" | head -40
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

# NCCL's own alltoall_perf (nccl-tests from .deps/nccl-tests) beside our
# baseline's all-to-all alone (-B 2), same bytes per rank, -G 10, every GPU
# here: the baseline is honest when it is within 10% at every size (issue 9).
if has baseline && [ -x "$BUILD/perf/dcp_a2a_lse_reduce_perf" ]; then
  g=$NCCL_DCP_REQUIRE_GPU
  row=$((g * 16 * 512 * 2))  # bytes per row per rank: cp x Hl x D x bf16
  if nt=$(scripts/build-nccl-tests.sh .deps/nccl-tests "$BUILD/nccl-tests" 2> "$LOGS/build-nccl-tests.log" | tail -1); then
    "$nt/alltoall_perf" -g "$g" -G 10 -d bfloat16 -b $row -e $((row * 1024)) -f 2 > "$LOGS/alltoall_perf.txt" 2>&1
    "$BUILD/perf/dcp_a2a_lse_reduce_perf" -g "$g" -H 16 -D 512 -d bf16 -b 1 -e 1024 -f 2 -G 10 -B 2 -F 0 \
      -J "$LOGS/perf-a2a-alone.json" > "$LOGS/perf-a2a-alone.txt" 2>&1
    python3 scripts/compare_alltoall.py "$LOGS/alltoall_perf.txt" "$LOGS/perf-a2a-alone.json" > "$LOGS/baseline.txt" 2>&1
    rc=$?
    note "baseline all-to-all vs alltoall_perf (-g $g): rc $rc ($(tail -1 "$LOGS/baseline.txt"))"
    cat "$LOGS/baseline.txt"
  else
    note "baseline: nccl-tests did not build (build-nccl-tests.log)"
  fi
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

# The profiler plugin in NCCL's own alltoall_perf, unmodified (issue 15):
# the report must count exactly the all-to-alls run, per size swept
# (scripts/check_plugin_report.py); then alltoall_perf without the plugin,
# with it, and with NCCL_DCP_PROFILE_KERNEL=0 (overhead, docs/perf.md); then
# the perf binary with the plugin (the library hook puts its calls in the
# report). Needs the nccl-tests source in .deps/nccl-tests. Not a default
# stage: scripts/gpu-check.sh build plugin.
if has plugin; then
  start=$SECONDS
  plugin_so=$ROOT/$BUILD/plugin/libnccl-profiler-dcp.so
  g=$((NCCL_DCP_REQUIRE_GPU >= 2 ? 2 : 1))
  tests=$(scripts/build-nccl-tests.sh .deps/nccl-tests "$BUILD/nccl-tests" 2> "$LOGS/plugin-nccl-tests-build.log" | tail -1)
  if [ -x "$tests/alltoall_perf" ] && [ -f "$plugin_so" ]; then
    profile=(NCCL_PROFILER_PLUGIN="$plugin_so")
    report=(NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$LOGS/plugin-nccl-%p.log")
    if [ "$g" -ge 2 ]; then  # the fused path's times for the estimate, same rank count
      "$BUILD/perf/dcp_a2a_lse_reduce_perf" -g "$g" -H 16 -D 512 -d bf16 -b 1 -e 1024 -f 2 \
        -J "$LOGS/plugin-calibration.json" > "$LOGS/plugin-calibration.txt" 2>&1
      report+=(NCCL_DCP_PROFILE_CALIBRATION="$LOGS/plugin-calibration.json")
    fi
    rm -f "$LOGS"/plugin-report-*.json "$LOGS"/plugin-dcp-*.json
    env "${profile[@]}" "${report[@]}" NCCL_DCP_PROFILE_FILE="$LOGS/plugin-report-%p.json" \
      "$tests/alltoall_perf" -g "$g" -b 32K -e 32M -f 2 -w 5 -n 20 -c 1 > "$LOGS/plugin-alltoall.log" 2>&1
    rc=$?
    python3 scripts/check_plugin_report.py counts "$LOGS"/plugin-report-*.json "$LOGS/plugin-alltoall.log" \
      > "$LOGS/plugin-check.txt" 2>&1
    note "plugin: alltoall_perf -g $g rc $rc; report check rc $? ($(tail -1 "$LOGS/plugin-check.txt"))"
    cat "$LOGS/plugin-check.txt"
    grep -h "NCCL-DCP profiler: " "$LOGS"/plugin-nccl-*.log | grep -v "report written" | head -40
    for run in base plugin nokernel; do
      case $run in
        base) pre=() ;;
        plugin) pre=("${profile[@]}") ;;
        nokernel) pre=("${profile[@]}" NCCL_DCP_PROFILE_KERNEL=0) ;;
      esac
      env "${pre[@]}" "$tests/alltoall_perf" -g "$g" -b 1K -e 32M -f 4 -w 20 -n 100 -c 0 \
        > "$LOGS/plugin-overhead-$run.log" 2>&1
    done
    python3 scripts/check_plugin_report.py overhead "$LOGS"/plugin-overhead-{base,plugin,nokernel}.log \
      > "$LOGS/plugin-overhead.md" 2>&1
    note "plugin overhead (alltoall_perf -g $g, out-of-place us): rc $? (table in plugin-overhead.md)"
    cat "$LOGS/plugin-overhead.md"
    env "${profile[@]}" "${report[@]}" NCCL_DCP_PROFILE_FILE="$LOGS/plugin-dcp-%p.json" \
      "$BUILD/perf/dcp_a2a_lse_reduce_perf" -g "$g" -b 1 -e 16 -f 4 > "$LOGS/plugin-dcp.txt" 2>&1
    rc=$?
    python3 scripts/check_plugin_report.py dcp "$LOGS"/plugin-dcp-*.json > "$LOGS/plugin-dcp-check.txt" 2>&1
    note "plugin: nccl-dcp calls in the report: perf rc $rc, check rc $? ($(tail -1 "$LOGS/plugin-dcp-check.txt"))"
  else
    note "plugin: skipped (no .deps/nccl-tests build: see plugin-nccl-tests-build.log, or no $plugin_so)"
  fi
  note "plugin took $((SECONDS - start)) s"
# The PyTorch binding (python/) on torch's own communicator, one rank per
# GPU: the tests against PyTorch's all_to_all_single + merge, then the MLA
# decode example (checked against full attention, timed). Fails the script.
if has python; then
  start=$SECONDS
  torchrun=(env NCCL_DCP_LIB="$(cd "$BUILD" && pwd)/libnccl_dcp.so" PYTHONPATH="$ROOT/python"
    "${TORCH_PYTHON:-/opt/torch/.venv/bin/python}" -m torch.distributed.run --standalone
    --nproc-per-node "$NCCL_DCP_REQUIRE_GPU")
  "${torchrun[@]}" python/tests/gpu_torchrun.py --junit "$LOGS/python-gpu.junit.xml" > "$LOGS/python-gpu.log" 2>&1
  rc=$?
  line=$(grep -E "^[0-9]+ passed, [0-9]+ failed$" "$LOGS/python-gpu.log" | tail -1)
  note "python tests (torchrun, $NCCL_DCP_REQUIRE_GPU rank(s)): ${line:-no count} (rc $rc, $((SECONDS - start)) s)"
  grep -E "^ *FAIL" "$LOGS/python-gpu.log" | head -20
  "${torchrun[@]}" examples/torch_dcp_decode.py > "$LOGS/python-example.log" 2>&1
  erc=$?
  note "python example torch_dcp_decode.py: rc $erc (table in python-example.log)"
  tail -8 "$LOGS/python-example.log"
  if [ "$rc" -ne 0 ] || [ "$erc" -ne 0 ]; then
    tail -30 "$LOGS/python-gpu.log"; note "python FAILED"; printf '%s\n' "${summary[@]}"; exit 1
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
