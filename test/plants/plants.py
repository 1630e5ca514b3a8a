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
  test/plants/plants.py run --build DIR [--gpus N] [--junit FILE] [--logs DIR]
                           [--jobs J] [--gpu-slots S] [--timeout T] [NAME...]
                                          each plant (or those named) with its tests
                                          for N GPUs (default 0); one line per result,
                                          'PLANT ok|FAIL|skip name: ...'; exit 1 on any FAIL.
                                          A test needing more than N GPUs is a
                                          'PLANT skip' line (and a skipped JUnit case),
                                          never dropped in silence. --jobs J > 1: J
                                          plants at a time, each in a fresh copy of the
                                          tree and of DIR (BUILD.plant-trees/K-NAME) that
                                          rebuilds only what its tests run (a header's
                                          includers; the kernel families its GPU tests
                                          name), ninja -j(cores / J) each, S GPU tests
                                          at a time (default 1); DIR is never planted.
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
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
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
    Plant("timeout_zero_gives_up_at_once", "src/fused_path.cc",
          "  a.timeoutNs = (uint64_t)e.cfg.timeoutMs * 1000000ull;\n",
          "  a.timeoutNs = e.cfg.timeoutMs ? (uint64_t)e.cfg.timeoutMs * 1000000ull : 1;\n",
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
          "c->timeoutMs = pick(cfg->timeoutMs, env.timeoutMs, kDefaultTimeoutMs);",
          "c->timeoutMs = pick(cfg->timeoutMs == 0 ? NCCL_CONFIG_UNDEF_INT : cfg->timeoutMs, env.timeoutMs,\n"
          "                    kDefaultTimeoutMs);",
          [("unit_validation", "ConfigTimeout.ZeroMeansForeverAndIsAccepted", 0),
           ("gpu_loopback", "Transports/LoopbackProto.TimeoutZeroWaitsForever/*", 1)],
          "config->timeoutMs = 0 read as unset: NCCL_DCP_TIMEOUT_MS or the built-in bound applies"),
    Plant("timeout_zero_launched_as_the_env_default", "src/fused_path.cc",
          "  a.timeoutNs = (uint64_t)e.cfg.timeoutMs * 1000000ull;\n",
          "  a.timeoutNs = (uint64_t)(e.cfg.timeoutMs ? e.cfg.timeoutMs\n"
          "                           : env().timeoutMs > 0 ? env().timeoutMs : kDefaultTimeoutMs) * 1000000ull;\n",
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
    Plant("variants_against_the_first_run_only", "scripts/compare_variants.py",
          "        tree = {n: (base[n][key] + again[n][key]) / 2 if n in again else base[n][key] for n in batches}\n",
          "        tree = {n: base[n][key] for n in batches}\n",
          [("unit_compare_variants", "Variants.test_ratio_is_against_the_trees_first_and_last_runs", 0)],
          "a variant is timed against the tree's first run alone, so the run's drift reads as the variant's"),
    Plant("variants_against_the_trees_baseline2", "scripts/compare_variants.py",
          "            rows = by_variant[v].get(i, (None, None, {}))[2]\n            cells.append(\" / \".join(f\"{rows[n][base2] / rows[n][fused]:.2f}\"",
          "            rows = by_variant[v].get(i, (None, None, {}))[2]\n            cells.append(\" / \".join(f\"{base[n][base2] / rows[n][fused]:.2f}\"",
          [("unit_compare_variants", "Variants.test_baseline2_sets_each_run_against_its_own", 0)],
          "each variant is set against the tree's baseline 2, not the one measured in its own run"),
    Plant("perf_tables_table_wrong_rows", "scripts/perf_tables.py",
          "    if wrong:\n", "    if wrong and False:\n",
          [("unit_perf_tables", "Tables.test_a_wrong_row_is_refused", 0)],
          "perf.md's tables are printed from a run with wrong rows"),
    Plant("perf_tables_baseline2_wrong_uncounted", "scripts/perf_json.py",
          ' + max(row["base2_wrong"], 0)', "",
          [("unit_perf_tables", "Tables.test_a_wrong_baseline2_is_refused", 0)],
          "a wrong baseline 2 (NONE's HEAD + all-gather) counts as 0 wrong: its table prints"),
    Plant("perf_tables_unchecked_as_checked", "scripts/perf_tables.py",
          "    if unchecked:  # not \"0 wrong\"\n", "    if False:\n",
          [("unit_perf_tables", "Tables.test_a_run_made_without_checking_says_not_checked", 0)],
          "a run made with -c 0 (nwrong null) tables like a checked one, as 0 wrong"),
    Plant("perf_tables_mixed_commits", "scripts/perf_tables.py",
          '    for key, what in (("commit", "commits"), ("device", "GPUs")):\n',
          '    for key, what in (("device", "GPUs"),):\n',
          [("unit_perf_tables", "Tables.test_files_of_different_commits_are_refused", 0)],
          "one table sets the times of two builds side by side (a file left from another run)"),
    Plant("perf_tables_trusts_file_names", "scripts/perf_tables.py",
          "        if meta[key] != want:\n", "        if False:\n",
          [("unit_perf_tables", "Tables.test_a_config_its_name_contradicts_is_refused", 0)],
          "a file whose config is not its name's (perf-wire-fp8.json run native) tables as that config"),
    Plant("perf_tables_mixes_gpus", "scripts/perf_tables.py",
          '    for key, what in (("commit", "commits"), ("device", "GPUs")):\n',
          '    for key, what in (("commit", "commits"),):\n',
          [("unit_perf_tables", "Tables.test_files_of_different_gpus_are_refused", 0)],
          "an H100's file tables beside an H200's under one heading"),
    Plant("perf_config_checked_only_on_the_gpu", "perf/options.cc",
          "  if (!checkConfig(*a, error)) return false;\n", "  // the config left to the GPU run\n",
          [("unit_perf_harness", "PerfArgs.BadInputIsRefusedBeforeAnyGpu", 0),
           ("unit_perf_binary_args", "PerfBinaryArgs.BadInputExitsTwoBeforeAnyGpu", 0)],
          "a head dim the library refuses reaches the GPU (exit 5 there, 3 without one) instead of exit 2"),
    Plant("perf_bad_input_reaches_the_gpu", "perf/dcp_a2a_lse_reduce_perf.cc",
          "  if (!checkBeforeGpu(&a, ranksBeforeGpu(a, g.processes), false, &error)) {\n",
          "  if (false && !checkBeforeGpu(&a, ranksBeforeGpu(a, g.processes), false, &error)) {\n",
          [("unit_perf_binary_args", "PerfBinaryArgs.BadInputExitsTwoBeforeAnyGpu", 0)],
          "bad sizes and configs are judged only after cudaGetDeviceCount: exit 3 without a GPU, not 2"),
    Plant("perf_json_path_tried_after_the_run", "perf/dcp_a2a_lse_reduce_perf.cc",
          "  int64_t badJson = printer && !a.json.empty() && !probeOutputFile(a.json, &error) ? 1 : 0;\n",
          "  int64_t badJson = 0;\n",
          [("unit_perf_binary_args", "PerfBinaryArgs.BadInputExitsTwoBeforeAnyGpu", 0)],
          "an unwritable -J path fails only after the whole sweep (exit 5), not before it with exit 2"),
    Plant("perf_json_earlier_file_kept", "perf/options.cc",
          "      if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || unlink(path.c_str()) == 0) return true;\n",
          "      if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || true) return true;\n",
          [("unit_perf_harness", "PerfArgs.OutputFileIsProbedWithoutLeavingATrace", 0),
           ("unit_perf_binary_args", "PerfBinaryArgs.EarlierJsonIsRemovedBeforeAnyGpu", 0)],
          "-J's file of an earlier run stays until the run writes its own: a run that ends first (no GPU, a "
          "failed call) leaves it to be read as this run's"),
    Plant("perf_step_of_zero_bytes_ignored", "perf/options.cc",
          "  if (a.stepSize.bytes && a.stepSize.value == 0 && !a.factorGiven) {\n", "  if (false) {\n",
          [("unit_perf_harness", "PerfArgs.ErrorsNameTheOption", 0),
           ("unit_perf_binary_args", "PerfBinaryArgs.BadInputExitsTwoBeforeAnyGpu", 0)],
          "-i 0 without -f silently sweeps by -f 2 (nccl-tests would loop for ever) instead of being refused"),
    Plant("perf_footer_two_avg_bus_bandwidth_lines", "perf/harness.cc",
          "\"Baseline avg busbw\", s.baseBusBw);", "\"Avg bus bandwidth\", s.baseBusBw);",
          [("unit_perf_harness", "PerfTable.FooterAsNcclTests", 0)],
          "the footer has a second 'Avg bus bandwidth' line (the baseline's): nccl-tests' scripts read two values"),
    Plant("perf_check_flips_a_low_bit", "perf/inputs.cc",
          "  for (size_t i = eltSize - 1; i < bytes; i += eltSize) data[i] ^= 0x80;",
          "  for (size_t i = 0; i < bytes; i += eltSize) data[i] ^= 0x80;",
          [("unit_perf_harness", "PerfInputs.FlippedInputsFlipTheOutputsExactly", 0)],
          "-c's sign flip flips bit 7 of the low byte instead of the sign: the checked outputs, 'flipped back', "
          "are not the reference's"),
    Plant("perf_check_inputs_not_flipped_on_the_gpu", "perf/kernels.cu",
          "  if (elements == 0) return cudaSuccess;\n  const unsigned blocks",
          "  if (eltSize) return cudaSuccess;\n  const unsigned blocks",
          [("multi_perf_binary", "LaunchesAndModes/PerfScatter.EveryModeAgainstItsReferenceAndBaselines/loopbackV4_head",
            1),
           ("multi_perf_binary", "LaunchesAndModes/PerfScatter.EveryModeAgainstItsReferenceAndBaselines/t1_token", 1)],
          "the checked calls read the timed calls' inputs, not flipped ones: a stale workspace would pass; here "
          "the host's flip back makes every checked element wrong"),
    Plant("gpu_check_takes_any_commit", "scripts/gpu-check.sh",
          "if [ -n \"${COMMIT:-}\" ] && ! [[ $COMMIT =~", "if false && ! [[ $COMMIT =~",
          [("unit_gpu_check", "GpuCheck.test_a_commit_that_is_not_a_hash_is_refused_before_any_stage", 0)],
          "gpu-check.sh records whatever COMMIT holds in the perf JSON"),
    Plant("variants_into_a_used_log_dir", "scripts/perf-variants.sh",
          'if compgen -G "$logs/*.json" > /dev/null; then', 'if false; then',
          [("unit_compare_variants", "Variants.test_a_run_into_a_log_dir_holding_another_runs_json_is_refused", 0)],
          "perf-variants.sh runs into a log directory holding another run's JSON (tabled together)"),
    Plant("variants_left_applied_when_stopped", "scripts/perf-variants.sh",
          "trap 'restore; exit 143' TERM", ": no trap for TERM",
          [("unit_compare_variants", "Variants.test_stopped_in_a_variant_it_puts_the_text_back", 0)],
          "perf-variants.sh stopped mid-variant leaves the variant's text in the tree"),
    Plant("patch_variant_loses_no_newline", "scripts/patch_variant.py",
          'side[-1] = side[-1].rstrip("\\n")', "side[-1] = side[-1]",
          [("unit_patch_variant", "PatchVariant.test_the_replacements_give_the_patched_files", 0)],
          "a patch's last line without a newline is timed with one"),
    Plant("ncu_stalls_counts_not_issued_twice", "scripts/ncu_stalls.py",
          'h.startswith("stall_") and "Not Issued" not in h]', 'h.startswith("stall_")]',
          [("unit_ncu_stalls", "NcuStalls.test_shares_and_windows_add_up", 0)],
          "ncu_stalls.py adds the not-issued samples to every stall reason's share (counted twice)"),
    Plant("calls_not_ordered_across_streams", "src/engine.cc",
          "  if (!hasLast) return ncclSuccess;\n", "  if (hasLast || !hasLast) return ncclSuccess;\n",
          [("gpu_streams", "Streamed.EagerCallsOnAnotherStreamWaitForThePreviousCall:"
                           "Streamed.CaptureOnASideStreamIsOrderedAfterTheEagerCall:"
                           "Streamed.EagerCallAfterAReplayWaitsForIt:Streamed.ReplaysOfTwoGraphsRunInLaunchOrder", 1)],
          "a call on another stream (or a graph's replay) is not ordered after the previous call on the context"),
    Plant("poisoned_line_call_leaves_outputs", "src/device/proto_lines.h",
          "        poisonOutGroup<Codec>(p, io, outRow<Mode>(p, start, rank, row), mergedOutHead<Mode>(p, rank, head), g);\n", "        (void)0;\n",
          [("gpu_streams", "Streamed.PoisonedContextWritesNanEagerAndReplayed", 1)],
          "a poisoned context's line-protocol call leaves its old outputs in place (stale, no error on replay)"),
    Plant("poisoned_simple_call_leaves_outputs", "src/device/proto_simple.h",
          "      else if (!ok) poisonUnits<Mode, Codec>(p, io, start, rank, first, count, warps, lane);\n",
          "      else if (!ok) (void)0;\n",
          [("gpu_streams", "Streamed.PoisonedContextWritesNanEagerAndReplayed", 1)],
          "a poisoned context's SIMPLE call leaves its old outputs in place"),
    Plant("fp8_encode_unscaled", "src/device/codec.h",
          "    const float inverse = scale.inverse;\n", "    const float inverse = 1.f;\n",
          [("gpu_fp8_wire", "Protocols/Fp8Wire.MatchesModelBitwise/*", 1)],
          "the fp8 wire's senders (every protocol, and the fallback's pack) encode without the unit's scale"),
    Plant("stale_destroy_accepted_as_noop", "src/handles.cc",
          "    if (liveEntry(handles[i]) == nullptr) return notLive(handles[i], entryName(what, i).c_str());\n",
          "    if (liveEntry(handles[i]) == nullptr) return ncclSuccess;\n",
          [("unit_validation", "PublicApi.DestroyGroupWithADuplicateDestroysNothing", 0),
           ("gpu_context", "OneRankContext.StaleAndRepeatedHandlesAreRefused", 1)],
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
          "  if (groupDepth > 0) return refuse(deferToGroup(ctx, buf, batch, plan, stream));\n", "",
          [("gpu_context", "OneRankContext.GroupedCallsOnBothPaths", 1)],
          "a call inside ncclDcpGroupStart/End is enqueued at once: the fallback's all-to-alls are not grouped"),
    Plant("grouped_poison_stops_the_group", "src/context.cc",
          "    else first.keep(contextEnqueue(g.ctx, g.buf, g.batch, g.plan, g.stream));\n",
          "    else DCPCHECK(contextEnqueue(g.ctx, g.buf, g.batch, g.plan, g.stream));\n",
          [("gpu_context", "OneRankContext.PoisonedContextInAGroupLeavesTheOthersEnqueued", 1)],
          "a poisoned context's call in a group returns its error before the group's later calls are enqueued: "
          "their peers wait for them until the timeout"),
    Plant("group_refusal_forgotten", "src/api.cc",
          "  if (r != ncclSuccess && groupDepth > 0 && groupRefusal == ncclSuccess) {\n",
          "  if (false) {\n",
          [("unit_validation", "PublicApi.CallRefusedInAGroupFailsItsEnd", 0),
           ("gpu_context", "OneRankContext.GroupedCallsOnBothPaths", 1)],
          "a call refused inside ncclDcpGroupStart/End leaves the group's end to enqueue the others: their peers "
          "wait for the refused one until the timeout"),
    Plant("batch_rounds_overflow_unchecked", "src/validate.cc",
          "  if (batch > INT_MAX - cfg.maxBatch)\n",
          "  if (false)\n",
          [("unit_validation", "CallFixture.BatchWhoseRoundsOverflowRejected", 0)],
          "a batch within maxBatch of INT_MAX is accepted: its rounds' row index overflows and the chunk loop "
          "never ends"),
    Plant("outputs_over_the_args_arrays", "src/validate.cc",
          '    if (overlaps(out, x)) return fail(ncclInvalidArgument, "out overlaps %s", a.name);\n',
          "",
          [("unit_validation", "CallFixture.OutputsOverTheArgsArraysRejected", 0)],
          "out may lie over args->seqLens: the kernels overwrite the lengths they are reading"),
    Plant("device_memory_as_host_counts", "src/validate.cc",
          "  if (a.error == cudaSuccess && a.type == cudaMemoryTypeDevice)\n",
          "  if (false)\n",
          [("unit_validation", "HostArrays.DeviceMemoryAsHostCountsRefused", 0)],
          "device memory passed as args->rowCounts is read by the host (a segmentation fault)"),
    Plant("device_arrays_of_another_gpu", "src/validate.cc",
          "      if (a.device == cudaDev) return ncclSuccess;\n",
          "      return ncclSuccess;\n",
          [("unit_validation", "DeviceArrays.HostMemoryRefusedNamingTheArgument", 0)],
          "seqLens on another GPU passes the call's check: without peer access the kernel faults"),
    # ---- issue 26's bug classes no plant covered, and issue 27's code.
    Plant("head_sent_to_the_wrong_rank", "src/device/modes.h",
          "  if (Mode::kScatter == Scatter::Head) return {dst, sh};\n",
          "  if (Mode::kScatter == Scatter::Head) return {p.nRanks - 1 - dst, sh};\n",
          [("gpu_loopback", "Transports/LoopbackMatrix.MatchesReference/LL128_bf16_base2", 1),
           ("gpu_loopback", "Transports/LoopbackMatrix.MatchesReference/SIMPLE_fp32_baseE", 1),
           ("gpu_scatter", "Modes/ScatterMatrix.MatchesReference/head_LL", 1),
           ("multi_ranks", "Cp/Ranks.EveryProtocolMatchesReference/cp2", 2)],
          "HEAD: rank dst is sent the heads of rank cp-1-dst (both fused kernels)"),
    Plant("chunk_boundary_row_dropped", "src/engine.h",
          "DCPCHECK(f(row0, std::min(maxBatch, batch - row0)));",
          "DCPCHECK(f(row0, std::min(maxBatch - 1, batch - row0)));",
          [("gpu_loopback", "Transports/LoopbackMatrix.MatchesReference/LL_bf16_base2", 1),
           ("gpu_scatter", "Modes/ScatterMatrix.MatchesReference/token_AUTO", 1),
           ("gpu_scatter", "ScatterGpu.BatchInvariance", 1),
           ("gpu_context", "OneRankContext.ForcedFallback", 1),
           ("multi_ranks", "Cp/Ranks.EveryProtocolMatchesReference/cp2", 2)],
          "each round of a chunked call covers one row less than maxBatch: the last row before each chunk "
          "boundary is never merged (both paths)"),
    Plant("rounds_read_inputs_at_row_zero", "src/engine.h",
          "{(const char*)b.partialOut + row0 * s.inRow * e,",
          "{(const char*)b.partialOut + 0 * row0 * s.inRow * e,",
          [("gpu_loopback", "Transports/LoopbackMatrix.MatchesReference/LL128_fp16_baseE", 1),
           ("gpu_scatter", "Modes/ScatterMatrix.MatchesReference/none_SIMPLE", 1),
           ("gpu_context", "OneRankContext.ForcedFallback", 1),
           ("multi_ranks", "Cp/Ranks.EveryProtocolMatchesReference/cp2", 2)],
          "every round of a chunked call reads its partials from row 0 of the input (the LSEs advance)"),
    Plant("out_row_stride_read_as_packed", "src/validate.cc",
          'DCPCHECK(resolveOne("outRow", in->outRow, p.outRow, e, true, &s.outRow));',
          'DCPCHECK(resolveOne("outRow", 0, p.outRow, e, true, &s.outRow));',
          [("unit_validation", "StrideValues.LargestStrideAccepted", 0),
           ("gpu_loopback", "Transports/LoopbackProto.StridedEqualsPackedBitwise/LL128", 1),
           ("gpu_scatter", "Modes/ScatterMatrix.MatchesReference/token_LL", 1),
           ("gpu_context", "OneRankContext.StridedViewsAndNullOutLseOnTheFusedPath", 1),
           ("multi_ranks", "Cp/Ranks.StridedViewsAndNullOutLse/cp2", 2)],
          "strides->outRow is ignored: out rows are written packed whatever the caller's row stride"),
    Plant("lse_base_e_weighed_as_base_2", "src/device/merge.h",
          "  return base == LseBase::Two ? exp2f(x) : expf(x);\n",
          "  return base == LseBase::Two ? exp2f(x) : exp2f(x);\n",
          [("unit_reference", "Types/ModeReference.HeadMatchesOracle/*:MergeWeights.BaseEOfScaledLsesEqualsBase2", 0),
           ("unit_oracle", "LibraryModel.NativeReferenceMatchesTheOracle", 0),
           ("gpu_loopback", "Transports/LoopbackMatrix.MatchesReference/LL128_bf16_baseE", 1),
           ("gpu_scatter", "Types/NoneTwoPhaseMatrix.MatchesReferenceAndOracle/SIMPLE_fp16_lse_bf16", 1)],
          "natural-log LSEs are weighed as base-2 ones (the kernels and the reference alike: the GPU tests "
          "see it through the fp64 oracle)"),
    Plant("merged_lse_always_base_2", "src/device/merge.h",
          "  return base == LseBase::Two ? log2f(x) : logf(x);\n",
          "  return base == LseBase::Two ? log2f(x) : log2f(x);\n",
          [("unit_reference", "Types/ModeReference.NoneMatchesOracle/*:MergeWeights.WeightsSumToOneAndLseMatchesOracle", 0),
           ("gpu_loopback", "Transports/LoopbackMatrix.MatchesReference/LL_fp32_baseE", 1)],
          "the merged LSE of a base-e context is m + log2(W): outLse wrong, out right"),
    Plant("nan_payload_multiplied_by_zero_weight", "src/device/merge.h",
          "  return weight != 0.f ? fmaf(weight, x, acc) : acc;\n",
          "  return fmaf(weight, x, acc);\n",
          [("unit_reference", "MergeWeights.AccumulateSkipsZeroWeightNan:"
                              "AllTypes/ReferenceExact.NanPayloadsBehindEmptySourcesDoNotLeak/*", 0),
           ("gpu_loopback", "Transports/LoopbackMatrix.SpecialLseValues/SIMPLE_bf16_base2", 1)],
          "the select is a multiply: 0 * NaN behind an empty source (-inf, NaN, +inf LSE) leaks NaN"),
    Plant("padding_rows_not_empty", "src/device/merge.h",
          "  if (b < queryStartLoc[0] || b >= queryStartLoc[numSeqs]) return true;\n",
          "  if (b < queryStartLoc[0] || b >= queryStartLoc[numSeqs]) return false;\n",
          [("unit_reference", "Types/ModeReference.PaddingRowsPastTheLastSequenceAreEmpty/*:"
                              "Types/ModeReference.RowsEmptyOnEveryRankGiveZeroAndMinusInf/*", 0),
           ("gpu_scatter", "Modes/ScatterMatrix.EmptyShards/head_LL128", 1)],
          "rows outside [queryStartLoc[0], queryStartLoc[numSeqs]) (padding) are merged as live rows"),
    Plant("bf16_lse_read_as_fp32", "src/device/merge.h",
          "  if (lseDtype == ncclBfloat16) return",
          "  if (lseDtype == ncclBfloat16 && false) return",
          [("unit_reference", "Types/ModeReference.*/*_lse_bf16:ModeReferenceLse.RoundedLseValuesAreTheWeights", 0),
           ("gpu_scatter", "Modes/ScatterMatrix.NarrowLseDtypes/token_LL128", 1)],
          "partial LSEs of dtype bf16 are read as fp32 (the config's lseDtype dropped)"),
    Plant("even_split_remainder_to_the_last_ranks", "src/validate.cc",
          "batch / nRanks + (p < batch % nRanks);",
          "batch / nRanks + (p >= nRanks - batch % nRanks);",
          [("unit_reference", "Types/ModeReference.TokenEvenSplitMatchesOracle/*:"
                              "Types/ModeReference.BatchBelowRanksMatchesOracle/*", 0),
           ("unit_validation", "CallArgs.NoArgsGiveTheModesShape", 0),
           ("gpu_scatter", "Modes/ScatterMatrix.MatchesReference/token_LL128", 1)],
          "TOKEN's even split gives the B mod cp extra rows to the last ranks, not the first (the reference "
          "shares the split: only the fp64 oracle sees it, on the CPU and beside the GPU comparisons)"),
    Plant("fallback_combine_drops_the_second_word", "src/device/combine.h",
          "    *(uint64_t*)(out + off + 8) = W::pack(acc[1]);\n",
          "    *(uint64_t*)(out + off + 8) = W::pack(acc[0]);\n",
          [("gpu_context", "OneRankContext.ForcedFallback", 1),
           ("gpu_scatter", "ScatterGpu.BatchInvariance", 1),
           ("multi_ranks", "Cp/Ranks.ForcedFallback/cp2", 2),
           ("multi_ranks", "Modes/ScatterRanks.FusedAndFallback/head", 2)],
          "the fallback's combine writes the merge of each 16-byte piece's first 8 bytes twice"),
    Plant("token_owner_off_by_one", "src/device/scatter.h",
          "    if (start[mid] <= globalRow) lo = mid;\n",
          "    if (start[mid] < globalRow) lo = mid;\n",
          [("gpu_scatter", "Transports/TokenSplit.HostCounts/LL128", 1),
           ("gpu_scatter", "Modes/ScatterMatrix.MatchesReference/token_LL", 1),
           ("multi_ranks", "Modes/ScatterRanks.FusedAndFallback/token", 2)],
          "TOKEN (LL, LL128): the first row of each rank's slice is sent to the rank before it"),
    Plant("token_out_row_off_by_one", "src/device/scatter.h",
          "? (int64_t)p.row0 + row - start[q] : row;",
          "? (int64_t)p.row0 + row - start[q] + 1 : row;",
          [("gpu_scatter", "Modes/ScatterMatrix.MatchesReference/token_SIMPLE", 1),
           ("gpu_scatter", "Transports/TokenSplit.HostCounts/LL", 1),
           ("gpu_scatter", "ScatterGpu.BatchInvariance", 1),
           ("multi_ranks", "Modes/ScatterRanks.FusedAndFallback/token", 2)],
          "TOKEN: each rank writes its slice one out row down (into the row past its share)"),
    Plant("device_counts_sum_unchecked", "src/device/scatter.h",
          "    ok = good && sum == p.shape.batch;\n",
          "    ok = good;\n",
          [("gpu_scatter", "Transports/TokenSplit.InvalidCounts/*", 1)],
          "TOKEN device counts that do not sum to the batch are used as a split, not refused"),
    Plant("refused_counts_leave_the_last_outputs", "src/device/scatter.h",
          "    if (!ok) scratch[threadIdx.x] = last ? min(last[threadIdx.x], p.shape.batch) : 0;\n",
          "    if (!ok) scratch[threadIdx.x] = 0;\n",
          [("gpu_scatter", "Transports/TokenSplit.RefusedReplayOverwritesThePreviousSliceWithNaN/*", 1)],
          "device counts that make no split write nothing: a replay leaves the previous step's outputs in out"),
    # No plant for loadSplit's cut of a refused call's split at its batch
    # (scatter.h): roundRowsOf cuts every rank's rows at the round, which
    # ends within the batch, so removing the first cut changes nothing (a
    # plant of it passed TokenSplit.RefusedSmallerCallStaysWithinItsBatch
    # on one H200, 2026-12-03: an equivalent change, not a weak test).
    Plant("token_flags_untagged", "src/device/proto_lines.h",
          "    const uint32_t flag = token ? taggedFlag(round.flag, splitTagOfBlock) : round.flag;\n",
          "    const uint32_t flag = round.flag;\n",
          [("multi_ranks", "TokenCountsRanks.CountsThatDifferBetweenRanksTimeOutOnEveryProtocol", 2)],
          "LL / LL128: TOKEN's flags carry no tag of the split: ranks whose counts differ take each other's units"),
    Plant("token_presence_not_sent", "src/device/proto_lines.h",
          "      sendPresence<Mode, Lines>(p, start, rank, slot, flag);\n",
          "      (void)0;\n",
          [("gpu_scatter", "Transports/TokenSplit.HostCounts/LL128", 1),
           ("multi_ranks", "Modes/ScatterRanks.FusedAndFallback/token", 2)],
          "TOKEN (LL, LL128): a rank with no row in the round is never sent its peers' presence marks: it "
          "waits until the timeout (on real ranks, or runs rounds ahead where the wait is skipped)"),
    Plant("python_flat_peer_stride_is_the_head_stride", "python/nccl_dcp/_validate.py",
          "(strides[0], hl * strides[1], strides[1]), (0, 1, 1)",
          "(strides[0], strides[1], strides[1]), (0, 1, 1)",
          [("pytest", "python/tests/test_validate.py::test_padded_rows_and_strided_outputs", 0),
           ("pytest", "python/tests/test_validate.py::test_packed_layout_passes_packed_strides", 0)],
          "the Python binding passes a [B, cp*Hl, D] partial_out's peer stride as one head, not Hl heads"),
    Plant("python_strides_passed_as_packed", "python/nccl_dcp/_validate.py",
          "        out[field] = stride\n",
          "        out[field] = 0\n",
          [("pytest", "python/tests/test_validate.py::test_transposed_attention_layout_is_passed_as_strides", 0),
           ("pytest", "python/tests/test_validate.py::test_padded_rows_and_strided_outputs", 0)],
          "the Python binding checks the tensors' strides but passes 0 (packed) for every one"),
    Plant("vllm_dropin_hands_on_unaligned_views", "python/nccl_dcp/vllm.py",
          "    cp_attn_out = _as_the_library_takes_it(cp_attn_out)\n",
          "    cp_attn_out = cp_attn_out.contiguous() if cp_attn_out.stride(-1) != 1 else cp_attn_out\n",
          [("pytest", "python/tests/test_dropins.py::"
                      "test_dropin[vllm/library_path/views_the_library_cannot_take_are_copied]", 0)],
          "the vLLM drop-in hands the library a view with 34-byte head strides or a misaligned pointer: "
          "refused (ValueError) where vLLM's own op takes any strides"),
    Plant("flashinfer_workspace_context_at_first_call", "python/nccl_dcp/flashinfer.py",
          "            self.context(base, device)  # collective now, as FlashInfer's creation: "
          "not at a captured first call\n",
          "            pass  # the context left to the first call\n",
          [("pytest", "python/tests/test_dropins.py::"
                      "test_dropin[flashinfer/library_path/workspace_makes_its_context]", 0)],
          "the FlashInfer drop-in's workspace makes no context: an engine's first call, captured in a CUDA graph "
          "as FlashInfer allows, would create it collectively inside the capture"),
    Plant("plugin_counts_one_call_per_size_record", "plugin/op_stats.cc",
          "  if (SizeEntry* e = entry(bytes)) add(e->calls, calls);\n",
          "  if (SizeEntry* e = entry(bytes)) add(e->calls, 1);\n",
          [("unit_plugin", "PluginTest.AllToAllsAreCountedExactlyBySize", 0)],
          "the profiler plugin counts the k all-to-alls of one group as one call of their size"),
    Plant("plugin_failed_init_returns_an_error", "plugin/plugin.cc",
          "ncclResult_t notProfiled() { return ncclSuccess; }\n",
          "ncclResult_t notProfiled() { return ncclInvalidArgument; }\n",
          [("unit_plugin", "PluginTest.AFailedInitIsAnUnprofiledCommunicatorNotAnError", 0)],
          "the profiler plugin's init fails a communicator it cannot profile: NCCL 2.30 then unloads the "
          "plugin there and again at that communicator's finalize"),
    Plant("plugin_unknown_datatype_counts_zero_bytes", "plugin/op_stats.cc",
          '                {"Unknown", 1}};  // ncclUint8 (above)\n',
          "                };\n",
          [("unit_plugin", "PluginTest.NcclsUnknownDatatypeIsUint8", 0)],
          "the profiler plugin counts NCCL's \"Unknown\" (ncclUint8 in 2.28-2.30) as 0 bytes: every "
          "uint8 all-to-all size in one bucket"),
    Plant("plugin_exit_report_unfolded", "plugin/registry.cc",
          "in.comms.push_back(p->finish(false));",
          "in.comms.push_back(p->snapshot());",
          [("unit_plugin", "PluginTest.AnExitWithLiveCommunicatorsReportsThemToo", 0)],
          "the profiler plugin's report at exit leaves out the GPU time of the live communicators' last plans"),
    Plant("plugin_disabled_reason_never_written", "plugin/registry.cc",
          "  writeDisabledReport();\n}\n",
          "}\n",
          [("unit_plugin", "PluginTest.TheReportSaysWhyThePluginTurnedOff", 0)],
          "the profiler plugin turns itself off without saying so in the report (\"disabled\" stays null, "
          "or no report at all)"),
    # ---- issue 26's classes still without a plant: flag waits, the round,
    # PDL ordering, streams and a poisoned context, abort.
    Plant("flag_wait_skipped_line", "src/device/proto_lines.h",
          "      if (waitingFor < 0) break;\n",
          "      if (waitingFor < 0 || true) break;\n",
          [("gpu_loopback", "Transports/LoopbackProto.LateRankFromHostMemory/LL", 1),
           ("gpu_loopback", "Transports/LoopbackProto.LateRankFromHostMemory/LL128", 1),
           ("multi_ranks", "Cp/Ranks.EveryProtocolMatchesReference/cp2", 2)],
          "LL, LL128: receivers poll their sources' lines once and merge what is there, flagged for the "
          "round or not (zeros, or another call's data)"),
    Plant("flag_wait_skipped_simple", "src/device/proto_simple.h",
          "      for (unsigned late; (late = simple::pollFlags(f, mine, flag)) != 0;)\n"
          "        if (!waiter.keepWaiting(s0 + __ffs(late) - 1)) return false;\n",
          "      if (unsigned late = simple::pollFlags(f, mine, flag))\n"
          "        if (!waiter.keepWaiting(s0 + __ffs(late) - 1)) return false;\n",
          [("gpu_loopback", "Transports/LoopbackProto.TenThousandRandomBatches/SIMPLE", 1),
           ("multi_ranks", "Cp/Ranks.EveryProtocolMatchesReference/cp2", 2)],
          "SIMPLE: a receiver checks its chunk's flags once and merges the chunk whether its sources "
          "signalled it or not"),
    Plant("round_never_advances", "src/device/round.h",
          "storeVolatile8(&ctrl->arrivals, (uint64_t)(info.round + 1) << 32);",
          "storeVolatile8(&ctrl->arrivals, (uint64_t)info.round << 32);",
          [("gpu_loopback", "Transports/LoopbackProto.TenThousandRandomBatches/LL128", 1),
           ("gpu_loopback", "Transports/LoopbackProto.RoundCounterWraps/SIMPLE", 1),
           ("gpu_loopback", "Transports/LoopbackProto.GraphReplaysInterleavedWithEagerCalls/LL", 1)],
          "the last block of a round resets the arrivals but never advances the round: every call, "
          "eager or replayed, runs round 0 in slot 0 with flag 1"),
    # No plant for the fused kernel's grid-dependency wait (kernel.h): its
    # launch is cooperative, and a cooperative launch never starts before
    # the grid ahead of it ends, PDL or not (perf/probes/pdl_overlap.cu on
    # one H200, 2026-12-03: 0 of 50 early starts with 1 or 66 blocks, where
    # a plain launch started 45 us early in 49 and 50 of 50). Removing the
    # wait changes nothing observable; it stays for a launch that is not.
    Plant("second_stream_refused", "src/engine.cc",
          "  } else if (s != lastStream || lastCaptured) {\n    CUDACHECK(cudaStreamWaitEvent(s, done, 0));\n",
          "  } else if (s != lastStream && !lastCaptured) {\n"
          "    return fail(ncclInvalidUsage, \"stream %p is not the stream of the previous call\", (void*)s);\n"
          "  } else if (lastCaptured) {\n    CUDACHECK(cudaStreamWaitEvent(s, done, 0));\n",
          [("gpu_streams", "Streamed.CallsAlternatingBetweenTwoStreams:"
                           "Streamed.EagerCallsOnAnotherStreamWaitForThePreviousCall", 1),
           ("gpu_streams", "OneRankStreams.AnyStreamAndBindStreamIsANoOp", 1)],
          "an eager call on another stream than the previous eager call's is refused (ncclInvalidUsage) "
          "instead of ordered after it"),
    Plant("poisoned_call_returns_success", "src/engine.h",
          "  if (poisoned == ncclSuccess) return res;\n",
          "  if (poisoned == ncclSuccess || true) return res;\n",
          [("gpu_streams", "Streamed.PoisonedContextWritesNanEagerAndReplayed", 1),
           ("gpu_loopback", "Transports/LoopbackProto.SilentRankTimesOut/LL128", 1)],
          "a call on a poisoned context writes NaN but returns ncclSuccess: the caller never hears of "
          "the earlier timeout"),
    Plant("abort_stop_never_sent", "src/engine.cc",
          "  if (statusWord && cudaMemcpyAsync(statusWord, &host->stopCode, sizeof(host->stopCode), "
          "cudaMemcpyHostToDevice,\n",
          "  if (statusWord && false && cudaMemcpyAsync(statusWord, &host->stopCode, sizeof(host->stopCode), "
          "cudaMemcpyHostToDevice,\n",
          [("gpu_create_unwind", "CreateUnwind.LoopbackAbortStopsWaitsAtOnce", 1),
           ("multi_create_agreement", "CreateRanks.AbortStopsAWaitingCallAtOnce", 2)],
          "abort never writes the stop word: waiting kernels run on to their timeout (loopback's abort "
          "fails its drain; a context's returns with the kernel still waiting)"),
    Plant("context_abort_sends_no_stop", "src/context.cc",
          "  if (!ctx->engine.stopAndDrain(statusWordOf(ctx), kAbortDrainMs)) {\n",
          "  if (!ctx->engine.stopAndDrain(nullptr, kAbortDrainMs)) {\n",
          [("multi_create_agreement", "CreateRanks.AbortStopsAWaitingCallAtOnce", 2)],
          "a context's abort passes no status word: its kernels are not stopped, abort returns after "
          "the drain bound with them still waiting"),
    Plant("none_never_runs_two_phases", "src/types.h",
          "  return c.noneAlgo == NoneAlgo::TwoPhase || (c.noneAlgo == NoneAlgo::Auto && nRanks > 2 && c.wire == Wire::Native);",
          "  return false;",
          [("unit_layout", "WorkspaceSize.NoneFollowsItsAlgorithm", 0),
           ("gpu_scatter", "Transports/NoneAlgorithms.DirectAndTwoPhaseMatchTheReferenceBitwiseAlike/LL128", 1),
           ("gpu_scatter", "Transports/NoneAlgorithms.TwoPhaseOnce/SIMPLE", 1),
           ("gpu_scatter", "Types/NoneTwoPhaseMatrix.MatchesReferenceAndOracle/LL128_fp32_lse_fp16", 1),
           ("multi_ranks", "NoneTwoPhaseRanks.EveryProtocolMatchesTheReference", 2)],
          "NONE ignores NCCL_DCP_NONE_ALGO and its cp rule: always direct (cp x HEAD's bytes)"),
    Plant("none_algo_not_agreed", "src/agreement.cc",
          "  a.noneAlgo = c.scatter == Scatter::None ? (int)c.noneAlgo : 0;  // only NONE reads it\n",
          "",
          [("unit_agreement", "Agreement.NoneAlgoIsAgreedForNoneOnly", 0)],
          "ranks running NONE with different NCCL_DCP_NONE_ALGO (different workspace layouts) are not refused"),
    Plant("none_relayed_heads_at_the_own_offset", "src/device/relay.h",
          "        const int outHead = src * p.shape.localHeads + head;\n",
          "        const int outHead = rank * p.shape.localHeads + head;\n",
          [("gpu_scatter", "Transports/NoneAlgorithms.DirectAndTwoPhaseMatchTheReferenceBitwiseAlike/LL", 1),
           ("gpu_scatter", "Transports/NoneAlgorithms.DirectAndTwoPhaseMatchTheReferenceBitwiseAlike/LL128", 1)],
          "NONE's phase 2 (LL, LL128) writes every peer's merged heads over this rank's own"),
    Plant("none_merged_heads_at_head_zero", "src/device/modes.h",
          "  return Mode::kRelays ? rank * p.shape.localHeads + head : head;",
          "  return head;",
          [("gpu_scatter", "Transports/NoneAlgorithms.DirectAndTwoPhaseMatchTheReferenceBitwiseAlike/SIMPLE", 1),
           ("gpu_scatter", "Transports/NoneAlgorithms.TwoPhaseSilentRankLeavesNanEverywhere/AUTO", 1)],
          "NONE in two phases writes each rank's own merge into heads 0..Hl-1 instead of rank * Hl + j"),
    Plant("none_simple_chunks_never_flagged", "src/device/proto_simple.h",
          "      if (ok && receiver == 0) SimpleRelay::flagForwarded(p, rank, slot, SimpleRelay::phase2Flag(p, flag), c, lane);",
          "      if (false) SimpleRelay::flagForwarded(p, rank, slot, SimpleRelay::phase2Flag(p, flag), c, lane);",
          [("gpu_scatter", "Transports/NoneAlgorithms.DirectAndTwoPhaseMatchTheReferenceBitwiseAlike/SIMPLE", 1),
           ("gpu_scatter", "Transports/NoneRegisteredOutputs.MatchTheReferenceAndTheStagedBits/SIMPLE", 1)],
          "NONE's phase 2 (SIMPLE): merged chunks are never flagged at the peers, whose gathers time out"),
    # ---- registered outputs (registered_output.h, relay.h): phase 2 into
    # the peers' outputs.
    Plant("none_direct_stores_into_the_own_out", "src/device/relay.h",
          "        store16(directOut(p, dst) + outAt, v);\n",
          "        store16(directOut(p, rank) + outAt, v);\n",
          [("gpu_scatter", "Transports/NoneRegisteredOutputs.MatchTheReferenceAndTheStagedBits/SIMPLE", 1),
           ("gpu_scatter", "Transports/NoneRegisteredOutputs.GraphReplays/SIMPLE", 1)],
          "with registered outputs each merged vector lands in the owner's own out, never in the peers'"),
    Plant("none_direct_still_copies_the_relay_half", "src/device/relay.h",
          "    if (ok && p.direct.tag != 0) return;  // the owners wrote it\n",
          "",
          [("gpu_scatter", "Transports/NoneRegisteredOutputs.MatchTheReferenceAndTheStagedBits/SIMPLE", 1),
           ("gpu_scatter", "Transports/NoneRegisteredOutputs.GraphReplays/SIMPLE", 1)],
          "with registered outputs phase 2 still copies its phase-2 half (stale) over what the owners wrote"),
    Plant("direct_tag_constant", "src/registered_output.cc",
          "  return h != 0 ? h : 1;\n",
          "  return 1;\n",
          [("unit_validation", "RegisteredOutputs.WhatRanksMustAgreeOnChangesTheTag", 0)],
          "ranks that pass other offsets or strides get the same phase-2 tag: their waits match and read "
          "what was never written"),
    Plant("direct_call_past_the_registration", "src/registered_output.cc",
          "  return r.bytes > 0 && at >= base && bytes <= r.bytes && at - base <= r.bytes - bytes;\n",
          "  return r.bytes > 0 && at >= base;\n",
          [("unit_validation", "RegisteredOutputs.ACallTakesTheDirectPathOnlyWhollyInside", 0),
           ("gpu_scatter", "Transports/NoneRegisteredOutputs.ACallOutsideTheRegistrationStages/SIMPLE", 1)],
          "a call whose outputs run past the registration takes the direct path (peers write past the window)"),
    Plant("registration_ignores_the_offsets", "src/registered_output.cc",
          "               a.outOffset != first.outOffset || a.lseOffset != first.lseOffset) {\n",
          "               false) {\n",
          [("unit_validation", "RegisteredOutputs.RecordsAgreeOnlyWhenEveryRankMatches", 0),
           ("multi_ranks", "NoneRegisteredRanks.RegistrationsNcclCannotMapAreRefusedOnEveryRank", 2)],
          "ranks whose outputs sit at different offsets of their allocations register anyway: NCCL's windows "
          "then address each peer at this rank's offset, over other memory"),
    Plant("direct_on_the_line_protocols", "src/registered_output.cc",
          "  if (call == nullptr || proto != Proto::Simple) return d;",
          "  if (call == nullptr) return d;",
          [("unit_validation", "RegisteredOutputs.RoundsOnSimpleCarryTheTagAndTheirRowsOffset", 0)],
          "LL / LL128 rounds carry the direct path's tag, which their flagged lines never honour"),
    Plant("loopback_direct_whatever_the_offsets", "src/loopback.cc",
          "    if (r > 0 && !same) return false;\n",
          "",
          [("gpu_scatter", "Transports/NoneRegisteredOutputs.ACallOutsideTheRegistrationStages/LL128", 1)],
          "loopback takes the direct path though a virtual rank's outputs sit at another offset of its registration"),
    # ---- issue 40: breaks in the headers the CPU reference shares with the
    # kernels (merge.h, codec.h), which the GPU comparisons with the
    # reference cannot see: caught through the fp64 oracle (test/common/oracle.h);
    # and scatter.h's addressing.
    Plant("negative_seq_lens_read_as_live", "src/device/merge.h",
          "  return seqLens[lo] <= 0;\n",
          "  return seqLens[lo] == 0;\n",
          [("unit_reference", "Types/ModeReference.EmptyShardsAreMinusInfinityWhateverTheyHold/*", 0),
           ("gpu_scatter", "Modes/ScatterMatrix.EmptyShards/token_LL128", 1),
           ("gpu_scatter", "Types/NoneTwoPhaseMatrix.MatchesReferenceAndOracle/LL_bf16_lse_fp32", 1)],
          "a sequence of negative local length is merged as live (only 0 reads as empty), in the kernels and "
          "the reference alike"),
    Plant("fp8_scale_rule_halved", "src/device/codec.h",
          "inverseFromAmax(float amax) { return kE4m3Max / scaledAmax(amax); }",
          "inverseFromAmax(float amax) { return 2 * kE4m3Max / scaledAmax(amax); }",
          [("unit_oracle", "LibraryModel.Fp8ReferenceFollowsTheOraclesModel", 0),
           ("gpu_fp8_wire", "Protocols/Fp8Wire.MatchesModelBitwise/LL128_bf16", 1),
           ("gpu_fp8_wire", "Types/Fp8WireMatrix.MatchesModelAndOracle/SIMPLE_fp16_lse_fp32", 1)],
          "the fp8 units are encoded at 896 / amax, decoded at amax / 448: the elements above amax / 2 saturate, "
          "the rest come back doubled (the model shares the rule: bitwise it agrees, the oracle's bound does not)"),
    Plant("fp8_own_share_narrowed_in_the_model", "src/reference.cc",
          "auto onWire = [&](int src) { return wire == Wire::Fp8E4m3 && src != r; };",
          "auto onWire = [&](int src) { return wire == Wire::Fp8E4m3; };",
          [("unit_oracle", "LibraryModel.Fp8ReferenceFollowsTheOraclesModel", 0),
           ("gpu_fp8_wire", "Protocols/Fp8Wire.EveryScatterMode/LL_bf16", 1)],
          "the CPU model narrows the merging rank's own share too (in every scatter mode), where the kernels "
          "keep it exact"),
    Plant("fallback_own_unit_from_the_wire", "src/device/combine.h",
          "        src = ownUnitOf<T>(p, own, row, head);\n",
          "        src = p.recvData + (s * unitsPerSource + unit) * p.headDim;\n",
          [("gpu_fp8_wire", "Protocols/Fp8Wire.MatchesModelBitwise/FALLBACK_bf16", 1),
           ("gpu_fp8_wire", "Protocols/Fp8Wire.EveryScatterMode/FALLBACK_fp16", 1)],
          "the fallback's combine reads the rank's own unit from its buffers, where every unit is e4m3: D bytes "
          "read as D native elements"),
    Plant("fallback_own_unit_of_rank_zero", "src/device/combine.h",
          "  const int peer = headMode ? p.rank : head / localHeads;\n",
          "  const int peer = head / localHeads;\n",
          [("gpu_fp8_wire", "Protocols/Fp8Wire.MatchesModelBitwise/FALLBACK_bf16", 1)],
          "HEAD's own unit read from peer 0's slice of the partials on every rank (head < localHeads there)"),
    Plant("fallback_own_unit_ignores_the_peer_stride", "src/device/combine.h",
          "  return own.data + (row * own.row + peer * own.peer + (head % localHeads) * own.head) * (int64_t)sizeof(T);\n",
          "  return own.data + (row * own.row + head * own.head) * (int64_t)sizeof(T);\n",
          [("gpu_fp8_wire", "Protocols/Fp8Wire.TokenAndNoneStridedUnevenEmptyShards/FALLBACK_bf16", 1)],
          "the own unit's offset taken as head * inHead, right only where the peers' slices are packed"),
    Plant("fallback_poisoned_sender_reads_as_empty", "src/engine.h",
          "constexpr int kPoisonedPayloadByte = 0xff, kPoisonedLseByte = 0x7f;",
          "constexpr int kPoisonedPayloadByte = 0xff, kPoisonedLseByte = 0xff;",
          [("unit_reference", "AllTypes/ReferenceExact.APoisonedSendersUnitsMergeToNaN/bf16", 0)],
          "a poisoned context's fallback call sends NaN LSE words, which the merge reads as empty shards: its "
          "peers merge without its units and never see NaN"),
    Plant("launch_takes_the_applications_pending_error", "src/kernels/launch_kernel.cuh",
          "  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);\n",
          "  cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);\n  return cudaGetLastError();\n",
          [("gpu_context", "OneRankContext.AnErrorTheApplicationLeftPendingIsNotTheCalls", 1)],
          "create's window kernels and the unfused kernels report cudaGetLastError: an error the application left "
          "pending fails create and the fallback's calls, and is consumed"),
    Plant("fallback_poisoned_lse_loses_to_a_large_one", "src/engine.h",
          "constexpr int kPoisonedPayloadByte = 0xff, kPoisonedLseByte = 0x7f;",
          "constexpr int kPoisonedPayloadByte = 0xff, kPoisonedLseByte = 0x3f;",
          [("unit_reference", "AllTypes/ReferenceExact.APoisonedSendersUnitsMergeToNaN/bf16", 0)],
          "a poisoned context's LSE words read 0.747: a row whose healthy LSEs are large weighs its units 0 and "
          "merges without them, finite"),
    Plant("fp8_infinity_in_amax", "src/device/codec.h",
          "NCCL_DCP_HD float amaxTerm(float x) { return finite(x) ? fabsf(x) : 0.f; }",
          "NCCL_DCP_HD float amaxTerm(float x) { return fabsf(x); }",
          [("unit_oracle", "LibraryModel.Fp8ReferenceFollowsTheOraclesModel", 0),
           ("gpu_fp8_wire", "Protocols/Fp8Wire.NonFiniteElementsAndEmptyRows/LL128_bf16", 1)],
          "an infinite element takes part in its unit's amax: the scale is inf and every other element of "
          "the unit arrives as 0 * inf = NaN"),
    Plant("empty_rows_judged_at_the_round_row", "src/device/scatter.h",
          "rowIsEmpty(seqLens, queryStartLoc, shape.numSeqs, row0 + row)) return -INFINITY;",
          "rowIsEmpty(seqLens, queryStartLoc, shape.numSeqs, row)) return -INFINITY;",
          [("gpu_scatter", "Modes/ScatterMatrix.EmptyShards/head_LL128", 1),
           ("gpu_scatter", "Types/NoneTwoPhaseMatrix.MatchesReferenceAndOracle/AUTO_bf16_lse_bf16", 1)],
          "a chunked call's rows past the first round are judged empty or not by the first round's rows"),
    Plant("token_slices_lose_their_last_row", "src/device/scatter.h",
          "hi = min(start[q + 1] - p.row0, p.rows);",
          "hi = min(start[q + 1] - p.row0 - 1, p.rows);",
          [("gpu_scatter", "Modes/ScatterMatrix.MatchesReference/token_LL128", 1),
           ("gpu_scatter", "Transports/TokenSplit.HostAndDeviceCountsOnce/SIMPLE", 1)],
          "TOKEN: the last row of every rank's slice in each round is never merged (left poisoned)"),
]


# The Python package's tests (python/tests, run by pytest as .ci/run does):
# binary "pytest", filter one pytest node id relative to the repository
# root ("python/tests/test_validate.py::test_x"). Run with the build's
# pytest venv (.ci/run's BUILD/pytest-venv) when there is one, else this
# interpreter, NCCL_DCP_LIB set to the build's library.
PYTEST = "pytest"

# What a test binary loads at run time rather than links (ninja builds only
# what it links): unit_plugin dlopen's the profiler plugin.
RUNTIME_TARGETS = {"unit_plugin": ["plugin/libnccl-profiler-dcp.so"]}

# Binaries that are Python TAP tests (test/meson.build), by their module in
# test/scripts; their filters are unittest names ("Class.test_x").
TAP_TESTS = {
    "unit_count_tests": "test_count_tests",
    "unit_plants": "test_plants",
    "unit_compare_alltoall": "test_compare_alltoall",
    "unit_compare_variants": "test_compare_variants",
    "unit_perf_tables": "test_perf_tables",
    "unit_patch_variant": "test_patch_variant",
    "unit_ncu_stalls": "test_ncu_stalls",
    "unit_sass_diff": "test_sass_diff",
    "unit_check_plugin_report": "test_check_plugin_report",
    "unit_exports": "test_exports",
    "unit_gpu_check": "test_gpu_check",
}
BACKUP = ".plant-orig"


def find(name):
    for p in PLANTS:
        if p.name == name:
            return p
    sys.exit(f"no plant named {name!r} (see: plants.py list)")


def _root(root):
    # ROOT read at call time: test_plants.py points it at a scratch copy.
    return root or ROOT


def source(plant, root=None):
    with open(os.path.join(_root(root), plant.path), encoding="utf-8") as f:
        return f.read()


def applies(plant, root=None):
    return source(plant, root).count(plant.old) == 1


def apply(plant, root=None):
    path = os.path.join(_root(root), plant.path)
    if os.path.exists(path + BACKUP):
        # Another plant's edit is still in place: its backup is the only
        # copy of the real file, and a second backup would overwrite it.
        print(f"plant {plant.name} not applied: {plant.path}{BACKUP} exists (a plant left in place): "
              "run plants.py revert-all first", flush=True)
        return 2
    text = source(plant, root)
    if text.count(plant.old) != 1:
        print(f"plant {plant.name} no longer applies: {plant.path} does not hold its text exactly once", flush=True)
        return 2
    shutil.copy(path, path + BACKUP)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(plant.old, plant.new))
    print(f"planted {plant.name} in {plant.path}{'' if root is None else ' (' + root + ')'}: {plant.why}", flush=True)
    return 0


def touch_cuda_sources(root=None):
    """Marks src/*.cu out of date. nvcc's objects carry no header
    dependencies in every meson (1.0.1 writes no depfile for them: `ninja
    -t deps` shows 0), so a plant in a header the kernels include
    (src/device/*.h) would not reach them, and a GPU test would pass
    against a plant that is not there; nor would the revert."""
    for dirpath, _, files in os.walk(os.path.join(_root(root), "src")):
        for f in files:
            if f.endswith(".cu"):
                os.utime(os.path.join(dirpath, f))


# ---- a job's plant rebuilds what its tests run, not every kernel.
#
# In a job's fresh copy of the tree (run --jobs J > 1) a planted header keeps
# its old modification time, so neither ninja's depfiles (nvcc's too from
# meson 1.x: checked with 1.9, a header rewritten with its old time rebuilds
# nothing, a touched .cu only itself) nor a missing one (nvcc under meson
# 1.0.1) rebuild what includes it; what must see the plant is touched
# instead: every host source that includes the header (cheap), and of the
# fused kernel families (src/kernels/fused_<protocol>_<wire>_<peers>.cu, one
# translation unit each, about 13 s of a core apiece) only those the
# plant's GPU tests run. run() works the list out once per plant, over the
# tree given (its copies hold the same includes). A family left out holds
# the real code: a test that needed it passes, and the plant is reported
# FAIL -- never caught by mistake. The copy is thrown away after the plant,
# so nothing half-planted outlives it.

INCLUDE_DIRS = ("src", "include", "test/common", "perf", "plugin")
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
SOURCE_SUFFIXES = (".cc", ".cu", ".cpp", ".c")
FUSED_FAMILY = re.compile(r"^src/kernels/fused_(ll128|ll|simple)_(native|fp8)_(lsa|loopback)\.cu$")
_PROTOCOL = re.compile(r"(?<![A-Za-z0-9])(LL128|LL|SIMPLE)(?![A-Za-z0-9])")


def _direct_includes(rel, root):
    """The repository files `rel` names in an #include."""
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        names = _INCLUDE.findall(f.read())
    found = []
    for name in names:
        for base in (os.path.dirname(rel),) + INCLUDE_DIRS:
            candidate = os.path.normpath(os.path.join(base, name))
            if os.path.isfile(os.path.join(root, candidate)):
                found.append(candidate)
                break
    return found


def includes_of(rel, root=None, direct=None):
    """The repository files `rel` includes, directly or not (itself too).
    direct: a cache of _direct_includes shared between calls."""
    root = _root(root)
    direct = {} if direct is None else direct
    seen, todo = set(), [rel]
    while todo:
        cur = todo.pop()
        if cur not in seen:
            seen.add(cur)
            if cur not in direct:
                direct[cur] = _direct_includes(cur, root)
            todo += direct[cur]
    return seen


def sources_including(header, root=None):
    """Every compiled source of the tree whose includes reach `header`."""
    root = _root(root)
    found, direct = [], {}
    for top in ("src", "test", "perf", "plugin", "examples"):
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for f in files:
                if f.endswith(SOURCE_SUFFIXES):
                    rel = os.path.relpath(os.path.join(dirpath, f), root)
                    if header in includes_of(rel, root, direct):
                        found.append(rel)
    return sorted(found)


def kernel_families(binary, flt):
    """(protocols, wires) of the fused families a GPU test runs, read from
    its name: the protocols it names (LL, LL128, SIMPLE as a word of the
    filter) or all three; fp8 and native for gpu_fp8_wire or a filter
    naming fp8 (fp8 tests compare with native), else native. Both peer
    kinds: a test on one GPU may run loopback ranks or a real context."""
    protocols = {p.lower() for p in _PROTOCOL.findall(flt)} or {"ll", "ll128", "simple"}
    wires = {"native", "fp8"} if binary == "gpu_fp8_wire" or "fp8" in flt.lower() else {"native"}
    return protocols, wires


def focused_sources(plant, gpus, root=None):
    """What a plant in a header touches in a job's copy: the sources that
    include it, less the fused families none of its runnable GPU tests run
    (and no CUDA source at all when none of its tests runs a kernel)."""
    gpu_tests = [(binary, flt) for binary, flt, need in plant.tests if 0 < need <= gpus]
    wanted = set()
    for binary, flt in gpu_tests:
        protocols, wires = kernel_families(binary, flt)
        wanted |= {(p, w) for p in protocols for w in wires}
    keep = []
    for rel in sources_including(plant.path, root):
        family = FUSED_FAMILY.match(rel)
        if rel.endswith(".cu") and not gpu_tests:
            continue  # no kernel runs: CPU tests only
        if family is None or (family.group(1), family.group(2)) in wanted:
            keep.append(rel)
    return keep


def apply_focused(plant, root, touched):
    """apply() in a job's copy, the header's time kept and `touched` (its
    focused_sources, paths relative to the tree) touched. A plant in a
    source file is plain apply."""
    if plant.path.endswith(SOURCE_SUFFIXES):
        return apply(plant, root)
    path = os.path.join(root, plant.path)
    before = os.stat(path)
    status = apply(plant, root)
    if status == 0:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        for rel in touched:
            os.utime(os.path.join(root, rel))
    return status


def needs_cuda_rebuild(plant, gpus):
    """A header planted for tests that run kernels (any needing a GPU)."""
    return plant.path.endswith(".h") and any(0 < need <= gpus for _, _, need in plant.tests)


def restore(path):
    os.replace(path + BACKUP, path)
    # Newer than anything built with the plant, so the build redoes it.
    os.utime(path)


def revert(plant, root=None):
    path = os.path.join(_root(root), plant.path)
    if not os.path.exists(path + BACKUP):
        print(f"plant {plant.name} is not applied")
        return 2
    restore(path)
    return 0


def revert_all(root=None):
    """Restores every plant's file that still has a backup; 1 if one had."""
    restored = 0
    for rel in sorted({p.path for p in PLANTS}):
        path = os.path.join(_root(root), rel)
        if os.path.exists(path + BACKUP):
            restore(path)
            print(f"restored {rel} (a plant was left in place)")
            restored += 1
    return 1 if restored else 0


# Child processes of a run (builds, tests), so that an interrupted run
# stops them instead of leaving them to finish.
_children = set()
_children_lock = threading.Lock()
# Set once a signal stops the run: nothing starts after it, and a test
# killed by the stop proves nothing.
_stopping = threading.Event()


def _run(cmd, timeout=None, **kwargs):
    """subprocess.run's returncode, the child registered while it runs;
    None when it timed out (it is killed then). Once the run is stopping
    nothing starts (as if killed): _kill_children has run or waits."""
    with _children_lock:
        if _stopping.is_set():
            return -signal.SIGKILL
        proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
        _children.add(proc)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return None
    except BaseException:  # interrupted (a signal): the child goes too
        _kill(proc)
        raise
    finally:
        with _children_lock:
            _children.discard(proc)


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the test and whatever it started
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _kill_children():
    with _children_lock:
        procs = list(_children)
    for proc in procs:
        _kill(proc)


def run_test(build, binary, flt, log_path, timeout, root=None, venv_build=None, ninja_jobs=0, gpu=None):
    """Builds and runs one listed test against the applied plant. Returns
    (ok, what happened): ok when it ran at least one case and failed.
    root: the (planted) source tree, build: its build directory; gpu: a
    semaphore held while the test runs (one GPU shared by parallel jobs)."""
    root = _root(root)
    with open(log_path, "w", encoding="utf-8") as log:
        env = None
        if binary in TAP_TESTS:
            cmd = [sys.executable, "-m", "unittest", "-v"] + [f"{TAP_TESTS[binary]}.{f}" for f in flt.split(":")]
            cwd = os.path.join(root, "test", "scripts")
        elif binary == PYTEST:
            venv = os.path.join(venv_build or build, "pytest-venv", "bin", "python")
            python = venv if os.path.exists(venv) else sys.executable
            cmd = [python, "-m", "pytest", "-v", "-p", "no:cacheprovider", flt]
            cwd = root
            env = dict(os.environ, NCCL_DCP_LIB=os.path.join(build, "libnccl_dcp.so"))
        else:
            build_cmd = (["ninja", "-C", build] + ([f"-j{ninja_jobs}"] if ninja_jobs else []) + [f"test/{binary}"]
                         + RUNTIME_TARGETS.get(binary, []))
            log.write("$ " + " ".join(build_cmd) + "\n")
            log.flush()
            if _run(build_cmd, stdout=log, stderr=subprocess.STDOUT) != 0:
                return False, f"test/{binary} does not build with the plant (log {log_path})"
            cmd = [os.path.join(build, "test", binary), f"--gtest_filter={flt}"]
            cwd = None
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        with gpu if gpu is not None else contextlib.nullcontext():
            status = _run(cmd, timeout=timeout, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    with open(log_path, encoding="utf-8", errors="replace") as f:
        return judge(PYTEST if binary == PYTEST else binary in TAP_TESTS, status, f.read(), timeout)


def judge(tap, status, out, timeout=600):
    """(ok, what happened) of one listed test run against a plant: ok only
    when it ran at least one case and failed. status None: timed out.
    tap: True for a unittest run, PYTEST for a pytest one (-v), else a
    GoogleTest binary's output."""
    if tap == PYTEST:
        results = re.findall(r"^\S+::\S+ (PASSED|FAILED|ERROR)\b", out, re.M)
        ran = len(results)
        failed = sum(1 for r in results if r != "PASSED")
    elif tap:
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
    _stopping.set()
    raise Interrupted(f"signal {signum}")


def write_junit(path, results, suite_name):
    suites = et.Element("testsuites")
    suite = et.SubElement(suites, "testsuite", name=suite_name, tests=str(len(results)),
                          failures=str(sum(1 for r in results if not r["ok"] and not r.get("skipped"))),
                          skipped=str(sum(1 for r in results if r.get("skipped"))))
    for r in results:
        case = et.SubElement(suite, "testcase", classname=f"{suite_name}.{r['plant']}",
                             name=f"{r['binary']} {r['filter']}", time=f"{r['seconds']:.1f}")
        if r.get("skipped"):
            et.SubElement(case, "skipped", message=r["what"])
        elif not r["ok"]:
            et.SubElement(case, "failure", message=r["what"]).text = r["what"]
    et.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def skipped_tests(plants, gpus):
    """The listed tests that need more GPUs than the run has: never dropped
    in silence (they are shown, and skipped in the JUnit file)."""
    return [{"plant": p.name, "binary": b, "filter": f, "ok": False, "skipped": True, "seconds": 0.0,
             "what": f"needs {need} GPU(s), this run has {gpus}: not run here"}
            for p in plants for b, f, need in p.tests if need > gpus]


# ---- parallel runs: one copy of the source tree and of the build per job.

# Build-directory entries a job's copy does without (big, or per run).
BUILD_SKIP = ("logs", "pytest-venv*", "py-ext", "py-ext-tmp", "nccl-tests", "plants", "*.plant-trees")


def _is_build_dir(path):
    return os.path.isdir(os.path.join(path, "meson-private"))


def _copy_ignore(trees):
    def ignore(directory, names):
        skip = []
        for n in names:
            full = os.path.join(directory, n)
            if (n in (".git", ".deps", ".gl", "__pycache__") or n.endswith(BACKUP) or os.path.abspath(full) == trees
                    or (os.path.isdir(full) and _is_build_dir(full))):
                skip.append(n)
        return skip
    return ignore


def prepare_tree(root, build, tree, trees):
    """A copy of the source tree at `tree` (build directories, .git and
    .deps left out) with a copy of `build` at the same place inside it,
    modification times kept (ninja sees everything up to date), and the
    absolute paths of `root` in build.ninja pointed at the copy (the
    regeneration rule, the plugin's and the test data's paths), except
    those into .deps, which is not copied: a -Dnccl_home there (CI's newest
    NCCL) stays where it is, and so does every compile command that names
    it (a command changed is a command ninja runs again: every kernel)."""
    rel = os.path.relpath(build, root)
    shutil.copytree(root, tree, symlinks=True, ignore=_copy_ignore(trees), copy_function=shutil.copy2)
    shutil.copytree(build, os.path.join(tree, rel), symlinks=True, ignore=shutil.ignore_patterns(*BUILD_SKIP),
                    copy_function=shutil.copy2)
    ninja = os.path.join(tree, rel, "build.ninja")
    with open(ninja, encoding="utf-8") as f:
        text = f.read()
    stat = os.stat(ninja)
    text = re.sub(re.escape(root) + r"(?!/\.deps/)(?=[/\"' \n:,]|$)", lambda _: tree, text)
    with open(ninja, "w", encoding="utf-8") as f:
        f.write(text)
    # Newer than what it is made from (no regeneration), as the original was.
    os.utime(ninja, (stat.st_atime, max(stat.st_mtime, time.time())))
    return os.path.join(tree, rel)


def run(args):
    """Every plant (or those named) with its tests runnable on args.gpus:
    apply, build and run each test, revert (on any exit, signals included).
    --jobs N > 1: N workers take the plants in turn (those that rebuild the
    most kernels first), each plant in a fresh copy of the tree and the
    build, thrown away after it (apply_focused: only what its tests run is
    rebuilt); tests needing a GPU run --gpu-slots at a time. The build
    given is never planted then, so nothing is rebuilt after."""
    chosen = [find(n) for n in args.names] if args.names else PLANTS
    logs = os.path.abspath(args.logs or os.path.join(args.build, "meson-logs", "plants"))
    os.makedirs(logs, exist_ok=True)
    build = os.path.abspath(args.build)
    results = skipped_tests(chosen, args.gpus)
    for r in results:
        print(f"PLANT skip {r['plant']}: {r['binary']} {r['filter']}: {r['what']}", flush=True)
    runnable = [p for p in chosen if any(need <= args.gpus for _, _, need in p.tests)]
    lock = threading.Lock()
    jobs = max(1, min(args.jobs, len(runnable)))
    parallel = jobs > 1
    if parallel and os.path.relpath(build, ROOT).startswith(".."):
        print(f"plants: {build} is not inside {ROOT}: one job, in place", flush=True)
        parallel, jobs = False, 1
    gpu = threading.Semaphore(max(1, args.gpu_slots))
    touched = {}  # plant name -> focused_sources (parallel runs, header plants)
    ninja_jobs = max(1, (os.cpu_count() or 1) // jobs) if parallel else 0

    def run_plant(plant, root, tree_build):
        tests = [(b, f) for b, f, need in plant.tests if need <= args.gpus]
        needs = {(b, f): need for b, f, need in plant.tests}
        start = time.time()
        if root == ROOT:
            planted = apply(plant) == 0
            if planted and needs_cuda_rebuild(plant, args.gpus):
                touch_cuda_sources(root)
        else:  # a fresh copy of its own: only what the tests run is rebuilt
            planted = apply_focused(plant, root, touched.get(plant.name, [])) == 0
        try:
            for i, (binary, flt) in enumerate(tests):
                t0 = time.time()
                log = os.path.join(logs, f"plant-{plant.name}.{i}.{binary}.log")
                if planted:
                    ok, what = run_test(tree_build, binary, flt, log, args.timeout, root, venv_build=build,
                                        ninja_jobs=ninja_jobs, gpu=gpu if needs[(binary, flt)] > 0 else None)
                else:
                    ok, what = False, f"the plant does not apply to {plant.path}: update test/plants/plants.py"
                if _stopping.is_set():
                    ok, what = False, "the run was stopped: not judged"
                lines = [f"PLANT {'ok' if ok else 'FAIL'} {plant.name}: {binary} {flt}: {what}"]
                if not ok and planted:
                    with open(log, encoding="utf-8", errors="replace") as f:
                        lines += ["    " + line for line in f.read().splitlines()[-15:]]
                with lock:
                    results.append({"plant": plant.name, "binary": binary, "filter": flt, "ok": ok, "what": what,
                                    "seconds": time.time() - t0})
                    print("\n".join(lines), flush=True)
        finally:
            if planted:
                revert(plant, None if root == ROOT else root)
                if root == ROOT and needs_cuda_rebuild(plant, args.gpus):
                    touch_cuda_sources(root)
        with lock:
            print(f"  ({plant.name}: {time.time() - start:.0f} s)", flush=True)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _interrupt)
    trees = os.path.abspath(args.trees or build + ".plant-trees")
    workers = []
    t_start = time.time()
    try:
        if not parallel:
            for plant in runnable:
                run_plant(plant, ROOT, build)
        else:
            shutil.rmtree(trees, ignore_errors=True)
            os.makedirs(trees)
            print(f"plants: {jobs} jobs, each plant in a fresh copy of the tree and of {os.path.relpath(build, ROOT)} "
                  f"under {trees}, ninja -j{ninja_jobs} each, {max(1, args.gpu_slots)} GPU test(s) at a time",
                  flush=True)
            # What each header plant touches (the copies hold the same
            # includes), and those that rebuild the most kernels first.
            touched.update({p.name: focused_sources(p, args.gpus) for p in runnable
                            if not p.path.endswith(SOURCE_SUFFIXES)})

            def kernels_rebuilt(p):
                files = touched.get(p.name, [p.path])
                return sum(1 for rel in files if rel.endswith(".cu"))
            queue = sorted(runnable, key=lambda p: (-kernels_rebuilt(p), -len(p.tests)))
            failures = []

            def work(k):
                while True:
                    with lock:
                        if not queue or _stopping.is_set():
                            return
                        plant = queue.pop(0)
                    tree = os.path.join(trees, f"{k}-{plant.name}")
                    try:
                        run_plant(plant, tree, prepare_tree(ROOT, build, tree, trees))
                    except Exception as e:  # noqa: BLE001 -- a job's error is a failed plant, not a hang
                        with lock:
                            failures.append(f"{plant.name}: {type(e).__name__}: {e}")
                    finally:
                        shutil.rmtree(tree, ignore_errors=True)
            workers += [threading.Thread(target=work, args=(k,), daemon=True) for k in range(jobs)]
            for w in workers:
                w.start()
            while any(w.is_alive() for w in workers):
                for w in workers:
                    w.join(timeout=0.5)
            for f in failures:
                print(f"PLANT FAIL {f}", flush=True)
                results.append({"plant": f.split(":")[0], "binary": "-", "filter": "-", "ok": False, "what": f,
                                "seconds": 0.0})
    except Interrupted as e:
        _kill_children()
        # A job may be copying its tree (no child to kill): it finds the run
        # stopping, starts nothing, and removes its copy; then the trees go.
        deadline = time.time() + 120
        for w in workers:
            w.join(timeout=max(0.0, deadline - time.time()))
        print(f"plants run interrupted ({e}): the plant in place was reverted", flush=True)
        return 1
    finally:
        revert_all()
        if parallel and not args.keep_trees:
            shutil.rmtree(trees, ignore_errors=True)
        if args.junit:
            write_junit(args.junit, results, "plants")
    if not parallel:
        # The binaries built with plants (and the library they link) back to
        # the real sources. Only those: every other target still holds what
        # it was built from (ninja sees it out of date, as the reverted files
        # are newer, and redoes it at the next build), and a plant in a header
        # most files include (src/device/merge.h) would cost a full rebuild.
        targets = sorted({f"test/{b}" for p in runnable for b, _, need in p.tests
                          if need <= args.gpus and b not in TAP_TESTS and b != PYTEST})
        if targets:
            rebuilt = subprocess.run(["ninja", "-C", build] + targets, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
            if rebuilt.returncode != 0:
                print(rebuilt.stdout[-3000:])
                print(f"plants: the binaries without plants do not build (ninja -C {build} {' '.join(targets)})")
                return 1
    ran = [r for r in results if not r.get("skipped")]
    failed = sum(1 for r in ran if not r["ok"])
    skipped = len(results) - len(ran)
    print(f"plants: {len(ran) - failed} of {len(ran)} planted breaks caught"
          f"{f', {skipped} test(s) skipped (more GPUs needed)' if skipped else ''} in {time.time() - t_start:.0f} s")
    return 1 if failed or not ran else 0


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
        parser.add_argument("--jobs", type=int, default=1,
                            help="plants at a time, each in its own copy of the tree and the build (default 1: in place)")
        parser.add_argument("--gpu-slots", type=int, default=1, help="tests needing a GPU run this many at a time")
        parser.add_argument("--trees", help="where the jobs' copies go (default BUILD.plant-trees)")
        parser.add_argument("--keep-trees", action="store_true", help="leave the jobs' copies (their logs)")
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
