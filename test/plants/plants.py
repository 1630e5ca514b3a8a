#!/usr/bin/env python3
"""Planted breaks: each one breaks the library on purpose in one place, and
the tests listed with it must fail against it. A test that passes against
the break it exists to catch cannot fail, and is not trusted.

scripts/gpu-check.sh's `plants` stage applies them one at a time to the
source tree, rebuilds the binaries concerned, runs the listed tests
(expecting them to fail), and reverts. By hand:

  test/plants/plants.py list [--gpus N]  one line per plant: name, then
                                          'binary filter' pairs runnable on N GPUs
  test/plants/plants.py apply NAME        edits the source (a backup is kept)
  test/plants/plants.py revert NAME       restores it
  test/plants/plants.py check             every plant still applies (exit 1 if not)

Each break is an exact text replacement: when the library changes under
it, `apply` says it no longer applies and the plant must be updated.
"""

import os
import shutil
import sys

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
          "l.timeoutNs = (uint64_t)cfg.timeoutMs * 1000000ull;",
          "l.timeoutNs = cfg.timeoutMs ? (uint64_t)cfg.timeoutMs * 1000000ull : 1;",
          [("gpu_loopback", "Transports/LoopbackProto.TimeoutZeroWaitsForever/*", 1),
           ("multi_ranks", "Cp/Ranks.TimeoutZeroWaitsForALateRank/cp2", 2)],
          "timeoutMs = 0 read as a 1 ns bound instead of 'forever'"),
    Plant("pinned_error_record_leaks", "src/engine.cc",
          "  freeMemory(MemoryKind::PinnedHost, cudaDev, host, mode);\n", "",
          [("gpu_context", "OneRankContext.CyclesLeakNothing", 1)],
          "16 bytes of pinned host memory lost per context"),
    Plant("outlse_never_written", "src/fused_path.cc",
          "l.io[i] = {(const char*)b.partialOut, b.partialLse, (char*)b.out, b.outLse};",
          "l.io[i] = {(const char*)b.partialOut, b.partialLse, (char*)b.out, nullptr};",
          [("gpu_loopback", "Transports/LoopbackProto.TenThousandRandomBatches/LL128", 1),
           ("gpu_context", "OneRankContext.StridedViewsAndNullOutLseOnTheFusedPath", 1),
           ("multi_ranks", "Cp/Ranks.GraphReplaysOnRealRanks/cp2", 2)],
          "the fused path never writes outLse"),
    Plant("chunks_out_at_row_zero", "src/engine.h",
          "(char*)b.out + row0 * s.outRow * e,", "(char*)b.out + 0 * row0 * s.outRow * e,",
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
          "  if (batch == 0) return ncclSuccess;\n",
          "  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;\n"
          "  cudaStreamIsCapturing(stream, &capturing);\n"
          "  if (batch == 0 || capturing != cudaStreamCaptureStatusNone) return ncclSuccess;\n",
          [("gpu_context", "OneRankContext.GraphCaptureReplays", 1),
           ("multi_ranks", "Cp/Ranks.GraphReplaysOnRealRanks/cp2", 2)],
          "a call under stream capture records nothing: replays are empty graphs"),
    Plant("dtype_not_agreed", "src/agreement.cc",
          '    NCCL_DCP_FIELD("config->dtype", dtype),\n', "",
          [("multi_ranks", "Cp/Ranks.ConfigMismatchFailsEveryRankAlike/cp2", 2)],
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
]


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
    text = source(plant)
    if text.count(plant.old) != 1:
        print(f"plant {plant.name} no longer applies: {plant.path} does not hold its text exactly once")
        return 2
    path = os.path.join(ROOT, plant.path)
    shutil.copy(path, path + ".plant-orig")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(plant.old, plant.new))
    print(f"planted {plant.name} in {plant.path}: {plant.why}")
    return 0


def revert(plant):
    path = os.path.join(ROOT, plant.path)
    if not os.path.exists(path + ".plant-orig"):
        print(f"plant {plant.name} is not applied")
        return 2
    os.replace(path + ".plant-orig", path)
    # Newer than anything built with the plant, so the build redoes it.
    os.utime(path)
    return 0


def main(argv):
    if len(argv) >= 1 and argv[0] == "list":
        gpus = int(argv[2]) if len(argv) == 3 and argv[1] == "--gpus" else 0
        for p in PLANTS:
            runnable = [f"{binary} {flt}" for binary, flt, need in p.tests if need <= gpus]
            if runnable:
                print(p.name, *runnable)
        return 0
    if len(argv) == 1 and argv[0] == "check":
        stale = [p.name for p in PLANTS if not applies(p)]
        for name in stale:
            print(f"plant {name} no longer applies")
        return 1 if stale else 0
    if len(argv) == 2 and argv[0] == "apply":
        return apply(find(argv[1]))
    if len(argv) == 2 and argv[0] == "revert":
        return revert(find(argv[1]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
