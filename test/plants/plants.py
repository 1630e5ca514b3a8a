#!/usr/bin/env python3
"""Planted breaks: each one breaks the library on purpose in one place, and
the tests listed with it must fail against it. A test that passes against
the break it exists to catch cannot fail, and is not trusted.

`run` applies them one at a time to the source tree, rebuilds the binaries
concerned, runs the listed tests (expecting them to fail), and reverts;
then it rebuilds those binaries from the real sources:
scripts/gpu-check.sh's `plants` stage runs every plant its GPUs allow,
.ci/run every plant whose tests need no GPU. By hand:

  test/plants/plants.py list [--gpus N]  one line per plant: name, then
                                          'binary filter' pairs runnable on N GPUs
  test/plants/plants.py run --build DIR [--gpus N] [--junit FILE] [--logs DIR] [NAME...]
                                          each plant (or those named) with its tests
                                          for N GPUs (default 0); one line per result,
                                          'PLANT ok|FAIL name: ...'; exit 1 on any FAIL
  test/plants/plants.py apply NAME        edits the source (a backup is kept)
  test/plants/plants.py revert NAME       restores it
  test/plants/plants.py revert-all        restores every file left planted (a run killed
                                          outright); exit 1 if one was
  test/plants/plants.py check             every plant still applies (exit 1 if not)

A listed test "fails as it must" only when its binary exits non-zero after
running at least one test case: a filter that matches nothing proves
nothing. A binary is a GoogleTest executable of the build (BUILD/test/NAME),
or one of the Python TAP tests (TAP_TESTS, filter = unittest names).

Each break is an exact text replacement: when the library changes under
it, `apply` says it no longer applies and the plant must be updated
(test/scripts/test_plants.py fails until it is).
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as et

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class Plant:
    def __init__(self, name, path, old, new, tests, why):
        self.name = name
        self.path = path    # relative to the repository root
        self.old = old      # text that must occur exactly once
        self.new = new
        self.tests = tests  # (binary, gtest filter, GPUs needed)
        self.why = why


PLANTS = [
    Plant("destroy_without_sync", "src/context.cc",
          "    const cudaError_t e = cudaDeviceSynchronize();\n", "    const cudaError_t e = cudaSuccess;\n",
          [("gpu_context", "OneRankContext.DestroyWaitsForCallsInFlight", 1)],
          "destroy releases the workspace while a call is still queued"),
    Plant("timeout_zero_gives_up_at_once", "src/engine.cc",
          "cfg.lseBase, (uint64_t)cfg.timeoutMs * 1000000ull, hostErrorDev,",
          "cfg.lseBase, cfg.timeoutMs ? (uint64_t)cfg.timeoutMs * 1000000ull : 1, hostErrorDev,",
          [("gpu_loopback", "Transports/LoopbackProto.TimeoutZeroWaitsForever/*", 1),
           ("multi_ranks", "Cp/Ranks.TimeoutZeroWaitsForALateRank/cp2", 2)],
          "timeoutMs = 0 read as a 1 ns bound instead of 'forever'"),
    Plant("pinned_error_record_leaks", "src/engine.cc",
          "  freeMemory(MemoryKind::PinnedHost, cudaDev, host, mode);\n", "",
          [("gpu_context", "OneRankContext.CyclesLeakNothing", 1)],
          "16 bytes of pinned host memory lost per context"),
    Plant("outlse_never_written", "src/fused_path.cc",
          "(char*)b.out, b.outLse, b.seqLens,", "(char*)b.out, nullptr, b.seqLens,",
          [("gpu_loopback", "Transports/LoopbackProto.TenThousandRandomBatches/LL128", 1),
           ("gpu_context", "OneRankContext.StridedViewsAndNullOutLseOnTheFusedPath", 1),
           ("multi_ranks", "Cp/Ranks.GraphReplaysOnRealRanks/cp2", 2)],
          "the fused path never writes outLse"),
    Plant("chunks_out_at_row_zero", "src/engine.h",
          "(char*)b.out + outRow0 * s.outRow * e,", "(char*)b.out + 0 * outRow0 * s.outRow * e,",
          [("gpu_loopback", "Transports/LoopbackProto.StridedEqualsPackedBitwise/LL128", 1),
           ("gpu_context", "OneRankContext.StridedViewsAndNullOutLseOnTheFusedPath", 1),
           ("gpu_context", "OneRankContext.ForcedFallback", 1),
           ("multi_ranks", "Cp/Ranks.StridedViewsAndNullOutLse/cp2", 2)],
          "every round of a chunked call (both paths: one round slicing) writes its output at row 0"),
    Plant("window_offset_ignored", "src/context.cc",
          "resolveLsaPointers(ctx->window, ctx->windowOffset,", "resolveLsaPointers(ctx->window, 0,",
          [("gpu_context", "OneRankContext.InsideTheApplicationsWindow", 1)],
          "the kernel addresses the application's window from its start, not at the offset given"),
    Plant("captured_calls_enqueue_nothing", "src/api.cc",
          "  if (batch == 0) return contextAsyncError(c.get());\n",
          "  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;\n"
          "  cudaStreamIsCapturing(stream, &capturing);\n"
          "  if (batch == 0 || capturing != cudaStreamCaptureStatusNone) return contextAsyncError(c.get());\n",
          [("gpu_context", "OneRankContext.GraphCaptureReplays", 1),
           ("multi_ranks", "Cp/Ranks.GraphReplaysOnRealRanks/cp2", 2)],
          "a call under stream capture records nothing: replays are empty graphs"),
    Plant("dtype_not_agreed", "src/agreement.cc",
          '    NCCL_DCP_FIELD("config->dtype", dtype),\n', "",
          [("unit_agreement", "Agreement.EveryInputMismatchNamesInputAndFirstDifferingRank", 0),
           ("multi_ranks", "Cp/Ranks.ConfigMismatchFailsEveryRankAlike/cp2", 2)],
          "ranks with different dtypes are not refused"),
    Plant("env_protocol_ignored", "src/validate.cc",
          "int proto = pick(cfg->protocol, env.protocol, ncclDcpProtoAuto);",
          "int proto = pick(cfg->protocol, kEnvUnset, ncclDcpProtoAuto);",
          [("gpu_env_at_create", "EnvironmentAtCreate.*", 0)],
          "NCCL_DCP_PROTO is parsed but never applied"),
    Plant("auto_never_switches_to_simple", "src/protocol.cc",
          "p.simpleForLarge = p.simpleMinRows > 0;", "p.simpleForLarge = false;",
          [("gpu_loopback", "LoopbackGpu.AutoSwitchesLargeRoundsToSimple", 1),
           ("unit_protocol", "ChooseProtocols.*", 0)],
          "NCCL_DCP_SIMPLE_MIN_ROWS has no effect"),
    Plant("finite_lse_accepted_for_empty_rows", "src/reference.cc",
          "const bool ok = std::isinf(w) ? g == w\n",
          "const bool ok = std::isinf(w) ? !std::isnan(g)\n",
          [("unit_reference", "AllTypes/CountMismatches.EmptyRowsNeedMinusInfinityExactly/*", 0)],
          "the comparison accepts any finite outLse where an empty row must give -inf"),
    Plant("timeout_zero_read_as_default", "src/validate.cc",
          "c.timeoutMs = pick(cfg->timeoutMs, env.timeoutMs, kDefaultTimeoutMs);",
          "c.timeoutMs = pick(cfg->timeoutMs == 0 ? NCCL_CONFIG_UNDEF_INT : cfg->timeoutMs, env.timeoutMs,\n"
          "                   kDefaultTimeoutMs);",
          [("unit_validation", "ConfigTimeout.ZeroMeansForeverAndIsAccepted", 0),
           ("gpu_loopback", "Transports/LoopbackProto.TimeoutZeroWaitsForever/*", 1)],
          "config->timeoutMs = 0 read as unset: NCCL_DCP_TIMEOUT_MS or the built-in bound applies"),
    Plant("timeout_zero_launched_as_the_env_default", "src/engine.cc",
          "cfg.lseBase, (uint64_t)cfg.timeoutMs * 1000000ull, hostErrorDev,",
          "cfg.lseBase,\n"
          "                    (uint64_t)(cfg.timeoutMs ? cfg.timeoutMs\n"
          "                               : env().timeoutMs > 0 ? env().timeoutMs : kDefaultTimeoutMs) * 1000000ull,\n"
          "                    hostErrorDev,",
          [("gpu_loopback", "Transports/LoopbackProto.TimeoutZeroWaitsForever/*", 1)],
          "the kernel bounds a timeoutMs = 0 wait by NCCL_DCP_TIMEOUT_MS (else the built-in default)"),
    Plant("overlap_seen_one_way", "src/validate.cc",
          "bool overlaps(Extent a, Extent b) { return a.lo < b.hi && b.lo < a.hi; }",
          "bool overlaps(Extent a, Extent b) { return a.lo <= b.lo && b.lo < a.hi; }",
          [("unit_validation", "CallFixture.*Overlapping*:CallFixture.OverlapCheckCoversStridedExtent", 0)],
          "an output that starts inside an input (rather than before it) is accepted"),
    Plant("same_gpu_check_ignores_the_host", "src/agreement.cc",
          "      if (all[p].view.links.hostHash == all[q].view.links.hostHash &&\n          strncmp(",
          "      if (strncmp(",
          [("unit_agreement", "Agreement.SameBusIdOnAnotherHostIsAnotherGpu", 0)],
          "ranks of two hosts whose GPUs have the same bus id are refused as sharing one GPU"),
    Plant("env_names_case_sensitive", "src/env.cc",
          "    if (strcasecmp(s, names[i]) == 0) {", "    if (std::string(s) == names[i]) {",
          [("unit_env", "EnvParse.DebugLevelsAreCaseInsensitive", 0)],
          "NCCL_DCP_DEBUG=info is refused (NCCL's levels are case-insensitive)"),
    Plant("log_file_ignored", "src/log.cc",
          "  const std::string& path = env().debugFile;\n", "  const std::string path;\n",
          [("unit_log", "LogFile.*", 0)],
          "NCCL_DCP_DEBUG_FILE is parsed but the log stays on stdout"),
    Plant("reference_weights_from_its_own_lse", "src/reference.cc",
          "weight[src] = partialLseOf(cfg, s, shape, ranks[src], b, h);",
          "weight[src] = partialLseOf(cfg, s, shape, ranks[r], b, h);",
          [("unit_reference", "AllTypes/ReferenceSweep.MatchesFp64Oracle/*", 0)],
          "the CPU reference weighs every source by the receiving rank's own LSE"),
    Plant("nan_lse_not_sanitized", "src/device/merge.h",
          "return (l != l || l == INFINITY) ? -INFINITY : l;", "return l == INFINITY ? -INFINITY : l;",
          [("unit_reference", "MergeWeights.*:AllTypes/ReferenceExact.NanPayloadsBehindEmptySourcesDoNotLeak/*", 0),
           ("gpu_loopback", "Transports/LoopbackMatrix.SpecialLseValues/LL128_bf16_base2", 1)],
          "a NaN LSE (an empty KV shard) is not read as -inf, in the kernels and the reference alike"),
    Plant("count_passes_a_run_of_skips", "scripts/count_tests.py",
          "    if passed + len(failed) == 0:\n", "    if passed + len(failed) + len(skipped) == 0:\n",
          [("unit_count_tests", "NothingRan.test_only_skips_fail", 0)],
          "CI counts a run in which every case skipped (no GPU, say) as a pass"),
    Plant("calls_not_ordered_across_streams", "src/engine.cc",
          "  if (!hasLast) return ncclSuccess;\n", "  if (hasLast || !hasLast) return ncclSuccess;\n",
          [("gpu_streams", "Streamed.EagerCallsOnAnotherStreamWaitForThePreviousCall:"
                           "Streamed.CaptureOnASideStreamIsOrderedAfterTheEagerCall:"
                           "Streamed.EagerCallAfterAReplayWaitsForIt:Streamed.ReplaysOfTwoGraphsRunInLaunchOrder", 1)],
          "a call on another stream (or a graph's replay) is not ordered after the previous call on the context"),
    Plant("poisoned_line_call_leaves_outputs", "src/device/a2a_lse_reduce.h",
          "      poisonGroup<T, Transport>(p, io, start, rank, row, head, g);\n", "      (void)0;\n",
          [("gpu_streams", "Streamed.PoisonedContextWritesNanEagerAndReplayed", 1)],
          "a poisoned context's line-protocol call leaves its old outputs in place (stale, no error on replay)"),
    Plant("poisoned_simple_call_leaves_outputs", "src/device/a2a_lse_reduce_simple.h",
          "    else poisonUnits<T>(p, io, start, rank, first, count, warps, lane);\n", "    else (void)0;\n",
          [("gpu_streams", "Streamed.PoisonedContextWritesNanEagerAndReplayed", 1)],
          "a poisoned context's SIMPLE call leaves its old outputs in place"),
    Plant("stale_destroy_accepted_as_noop", "src/handles.cc",
          "    if (liveEntry(handles[i]) == nullptr) return notLive(handles[i], what);\n",
          "    if (liveEntry(handles[i]) == nullptr) return ncclSuccess;\n",
          [("gpu_context", "OneRankContext.StaleAndRepeatedHandlesAreRefused", 1)],
          "a second destroy or abort of one handle is silently accepted"),
    Plant("provider_choice_ignores_cumem", "src/agreement.cc",
          "  } else if (noIpc.empty()) {\n", "  } else if (false) {\n",
          [("unit_agreement", "Provider.*", 0), ("gpu_no_cumem", "NoCumem.ContextLandsOnCudaIpcAndSaysSoOnce", 1)],
          "without NCCL's symmetric memory (NCCL_CUMEM_ENABLE=0) the context falls back instead of using cuda-ipc"),
    Plant("unknown_env_names_unwarned", "src/env.cc",
          "    if (!known) unknown.push_back(name);\n", "",
          [("unit_env", "EnvNames.MisspeltVariablesAreFound", 0)],
          "a misspelt NCCL_DCP_* variable is ignored without a word"),
    Plant("grouped_calls_enqueued_at_once", "src/api.cc",
          "  if (groupDepth > 0) return deferToGroup(ctx, buf, batch, plan, stream);\n", "",
          [("gpu_context", "OneRankContext.GroupedCallsOnBothPaths", 1)],
          "a call inside ncclDcpGroupStart/End is enqueued at once: the fallback's all-to-alls are not grouped"),
]


# Binaries that are Python TAP tests (test/meson.build), by their module in
# test/scripts; their filters are unittest names ("Class.test_x").
TAP_TESTS = {
    "unit_count_tests": "test_count_tests",
    "unit_plants": "test_plants",
    "unit_compare_alltoall": "test_compare_alltoall",
    "unit_check_plugin_report": "test_check_plugin_report",
    "unit_exports": "test_exports",
}
BACKUP = ".plant-orig"


def find(name):
    for p in PLANTS:
        if p.name == name:
            return p
    sys.exit(f"no plant named {name!r} (see: plants.py list)")


def source(plant):
    with open(os.path.join(ROOT, plant.path), encoding="utf-8") as f:
        return f.read()


def applies(plant):
    return source(plant).count(plant.old) == 1


def apply(plant):
    path = os.path.join(ROOT, plant.path)
    if os.path.exists(path + BACKUP):
        # Another plant's edit is still in place: its backup is the only
        # copy of the real file, and a second backup would overwrite it.
        print(f"plant {plant.name} not applied: {plant.path}{BACKUP} exists (a plant left in place): "
              "run plants.py revert-all first")
        return 2
    text = source(plant)
    if text.count(plant.old) != 1:
        print(f"plant {plant.name} no longer applies: {plant.path} does not hold its text exactly once")
        return 2
    shutil.copy(path, path + BACKUP)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(plant.old, plant.new))
    print(f"planted {plant.name} in {plant.path}: {plant.why}")
    return 0


def restore(path):
    os.replace(path + BACKUP, path)
    # Newer than anything built with the plant, so the build redoes it.
    os.utime(path)


def revert(plant):
    path = os.path.join(ROOT, plant.path)
    if not os.path.exists(path + BACKUP):
        print(f"plant {plant.name} is not applied")
        return 2
    restore(path)
    return 0


def revert_all():
    """Restores every plant's file that still has a backup; 1 if one had."""
    restored = 0
    for rel in sorted({p.path for p in PLANTS}):
        path = os.path.join(ROOT, rel)
        if os.path.exists(path + BACKUP):
            restore(path)
            print(f"restored {rel} (a plant was left in place)")
            restored += 1
    return 1 if restored else 0


def run_test(build, binary, flt, log_path, timeout):
    """Builds and runs one listed test against the applied plant. Returns
    (ok, what happened): ok when it ran at least one case and failed."""
    with open(log_path, "w", encoding="utf-8") as log:
        if binary in TAP_TESTS:
            cmd = [sys.executable, "-m", "unittest", "-v"] + [f"{TAP_TESTS[binary]}.{f}" for f in flt.split(":")]
            cwd = os.path.join(ROOT, "test", "scripts")
        else:
            build_cmd = ["ninja", "-C", build, f"test/{binary}"]
            log.write("$ " + " ".join(build_cmd) + "\n")
            log.flush()
            if subprocess.run(build_cmd, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                return False, f"test/{binary} does not build with the plant (log {log_path})"
            cmd = [os.path.join(build, "test", binary), f"--gtest_filter={flt}"]
            cwd = None
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        try:
            status = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            status = None
    with open(log_path, encoding="utf-8", errors="replace") as f:
        return judge(binary in TAP_TESTS, status, f.read(), timeout)


def judge(tap, status, out, timeout=600):
    """(ok, what happened) of one listed test run against a plant: ok only
    when it ran at least one case and failed. status None: timed out."""
    if tap:
        counts = re.findall(r"^Ran (\d+) tests?", out, re.M)
        # A name that matches no test is reported as one test that errs.
        ran = int(counts[-1]) if counts and "unittest.loader._FailedTest" not in out else 0
        failed = len(re.findall(r" \.\.\. (?:FAIL|ERROR)$", out, re.M))
    else:
        ran = len(re.findall(r"^\[ RUN      \] ", out, re.M))
        failed = len(re.findall(r"^\[  FAILED  \] .* \(\d+ ms\)$", out, re.M))
    if status is not None and status < 0:
        status = f"killed by signal {-status}"
    if ran == 0:
        return False, f"the filter matched no test (status {status}): it proves nothing"
    if status is None:
        return True, f"timed out after {timeout} s ({ran} ran, {failed} failed)"
    if status == 0:
        return False, f"PASSED against the planted break ({ran} ran)"
    return True, f"failed as it must (status {status}, {ran} ran, {failed} failed)"


class Interrupted(Exception):
    pass


def _interrupt(signum, _frame):
    raise Interrupted(f"signal {signum}")


def write_junit(path, results, suite_name):
    suites = et.Element("testsuites")
    suite = et.SubElement(suites, "testsuite", name=suite_name, tests=str(len(results)),
                          failures=str(sum(1 for r in results if not r["ok"])))
    for r in results:
        case = et.SubElement(suite, "testcase", classname=f"{suite_name}.{r['plant']}",
                             name=f"{r['binary']} {r['filter']}", time=f"{r['seconds']:.1f}")
        if not r["ok"]:
            et.SubElement(case, "failure", message=r["what"]).text = r["what"]
    et.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def run(args):
    """Every plant (or those named) with its tests runnable on args.gpus:
    apply, build and run each test, revert (on any exit, signals included)."""
    chosen = [find(n) for n in args.names] if args.names else PLANTS
    logs = args.logs or os.path.join(args.build, "meson-logs", "plants")
    os.makedirs(logs, exist_ok=True)
    build = os.path.abspath(args.build)
    results = []
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _interrupt)
    try:
        for plant in chosen:
            tests = [(b, f) for b, f, need in plant.tests if need <= args.gpus]
            if not tests:
                continue
            start = time.time()
            planted = apply(plant) == 0
            try:
                for binary, flt in tests:
                    t0 = time.time()
                    if planted:
                        log = os.path.join(logs, f"plant-{plant.name}.{binary}.log")
                        ok, what = run_test(build, binary, flt, log, args.timeout)
                    else:
                        ok, what = False, f"the plant does not apply to {plant.path}: update test/plants/plants.py"
                    results.append({"plant": plant.name, "binary": binary, "filter": flt, "ok": ok,
                                    "what": what, "seconds": time.time() - t0})
                    print(f"PLANT {'ok' if ok else 'FAIL'} {plant.name}: {binary} {flt}: {what}", flush=True)
                    if not ok and planted:
                        with open(log, encoding="utf-8", errors="replace") as f:
                            tail = f.read().splitlines()[-15:]
                        print("\n".join("    " + line for line in tail), flush=True)
            finally:
                if planted:
                    revert(plant)
            print(f"  ({plant.name}: {time.time() - start:.0f} s)", flush=True)
    except Interrupted as e:
        print(f"plants run interrupted ({e}): the plant in place was reverted", flush=True)
        return 1
    finally:
        revert_all()
        if args.junit:
            write_junit(args.junit, results, "plants")
    # The binaries built with plants (and the library they link) back to the
    # real sources. Only those: every other target still holds what it was
    # built from (ninja sees it out of date, as the reverted files are newer,
    # and redoes it at the next build), and a plant in a header most files
    # include (src/device/merge.h) would cost a full rebuild.
    targets = sorted({f"test/{b}" for p in chosen for b, _, need in p.tests
                      if need <= args.gpus and b not in TAP_TESTS})
    if targets:
        rebuilt = subprocess.run(["ninja", "-C", build] + targets, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        if rebuilt.returncode != 0:
            print(rebuilt.stdout[-3000:])
            print(f"plants: the binaries without plants do not build (ninja -C {build} {' '.join(targets)})")
            return 1
    failed = sum(1 for r in results if not r["ok"])
    print(f"plants: {len(results) - failed} of {len(results)} planted breaks caught")
    return 1 if failed or not results else 0


def main(argv):
    if len(argv) >= 1 and argv[0] == "list":
        gpus = int(argv[2]) if len(argv) == 3 and argv[1] == "--gpus" else 0
        for p in PLANTS:
            runnable = [f"{binary} {flt}" for binary, flt, need in p.tests if need <= gpus]
            if runnable:
                print(p.name, *runnable)
        return 0
    if len(argv) >= 1 and argv[0] == "run":
        parser = argparse.ArgumentParser(prog="plants.py run")
        parser.add_argument("--build", required=True, help="the meson build directory")
        parser.add_argument("--gpus", type=int, default=0, help="run the tests that need at most this many GPUs")
        parser.add_argument("--junit", help="write one JUnit case per plant and test here")
        parser.add_argument("--logs", help="per-test logs (default BUILD/meson-logs/plants)")
        parser.add_argument("--timeout", type=int, default=600, help="seconds per test run")
        parser.add_argument("names", nargs="*", help="only these plants")
        return run(parser.parse_args(argv[1:]))
    if len(argv) == 1 and argv[0] == "check":
        stale = [p.name for p in PLANTS if not applies(p)]
        for name in stale:
            print(f"plant {name} no longer applies")
        return 1 if stale else 0
    if len(argv) == 1 and argv[0] == "revert-all":
        return revert_all()
    if len(argv) == 2 and argv[0] == "apply":
        return apply(find(argv[1]))
    if len(argv) == 2 and argv[0] == "revert":
        return revert(find(argv[1]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
