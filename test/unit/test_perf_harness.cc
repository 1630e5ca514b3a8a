// The perf harness's host parts (perf/harness.h, perf/team.h): the options
// (nccl-tests' letters with nccl-tests' meanings, ours as long options;
// bad input refused before any GPU), sizes in bytes (-b -e -i) or rows (--min-rows ...), the batch sweep, rank placement, aggregation
// across ranks, the rows, the table and its footer, the floors' header,
// the JSON report (valid JSON, finite numbers, nccl-tests' fields), and the
// team of threads (x processes) that gathers every rank's figures.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "enums.h"
#include "harness.h"
#include "inputs.h"
#include "json.h"
#include "reference.h"
#include "team.h"
#include "test_util.h"

namespace nccl_dcp {
namespace perf {
namespace {

namespace json = nccl_dcp::plugin::json;

ParseResult parse(std::vector<const char*> argv, Args* a, std::string* err) {
  argv.insert(argv.begin(), "dcp_a2a_lse_reduce_perf");
  argv.push_back(nullptr);  // as main's argv
  return parseArgs((int)argv.size() - 1, const_cast<char**>(argv.data()), a, err);
}

TEST(PerfArgs, DefaultsAreNcclTestsAndTheDecodeSweep) {
  Args a;
  std::string err;
  ASSERT_EQ(parse({}, &a, &err), ParseResult::Ok) << err;
  EXPECT_EQ(a.minRows, 1);
  EXPECT_EQ(a.maxRows, 1024);
  EXPECT_EQ(a.headDim, 512);
  EXPECT_EQ(a.localHeads, 16);
  EXPECT_EQ(a.dtype, ncclBfloat16);
  EXPECT_EQ(a.virtualRanks, 0);
  EXPECT_EQ(a.baseline, kBaselineFull);
  EXPECT_EQ(a.floors, 1);
  // nccl-tests' defaults (src/common.cu): -n 20 -w 1 -m 1 -G 0 -c 1 -a 1 -C 0.
  EXPECT_EQ(a.iters, 20);
  EXPECT_EQ(a.warmup, 1);
  EXPECT_EQ(a.aggIters, 1);
  EXPECT_EQ(a.graphLaunches, 0);
  EXPECT_EQ(a.check, 1);
  EXPECT_EQ(a.aggregate, 1);
  EXPECT_EQ(a.cpuTime, 0);
  EXPECT_FALSE(a.minSize.bytes);  // no size option: 1..1024 rows
  EXPECT_EQ(a.factor, 2);
  EXPECT_EQ(a.timeoutS, -1);
  EXPECT_EQ(a.timeline, 0);
  EXPECT_EQ(a.scatter, ncclDcpScatterHead);  // --scatter head: 0.2's behaviour
  EXPECT_EQ(configOf(a).scatter, ncclDcpScatterHead);
  EXPECT_EQ(a.argv, std::vector<std::string>{"dcp_a2a_lse_reduce_perf"});
}

// --wire native|fp8 (any case): the config's wire; native by default.
TEST(PerfArgs, WireSetsTheConfig) {
  Args d;
  std::string err;
  ASSERT_EQ(parse({}, &d, &err), ParseResult::Ok) << err;
  EXPECT_EQ(d.wire, ncclDcpWireNative);
  EXPECT_EQ(configOf(d).wire, ncclDcpWireNative);
  for (const auto& [argv, wire] : std::vector<std::pair<std::vector<const char*>, int>>{
           {{"--wire", "fp8"}, ncclDcpWireFp8E4m3}, {{"--wire=FP8"}, ncclDcpWireFp8E4m3},
           {{"--wire", "native"}, ncclDcpWireNative}}) {
    Args a;
    ASSERT_EQ(parse(argv, &a, &err), ParseResult::Ok) << argv[0] << ": " << err;
    EXPECT_EQ(a.wire, wire) << argv[0];
    EXPECT_EQ(configOf(a).wire, wire) << argv[0];
  }
  for (const std::vector<const char*>& bad :
       std::vector<std::vector<const char*>>{{"--wire", "e4m3x"}, {"--wire", ""}, {"--wire", "2"}, {"--wire"}}) {
    Args a;
    err.clear();
    EXPECT_EQ(parse(bad, &a, &err), ParseResult::Error) << (bad.size() > 1 ? bad[1] : "(no value)");
    EXPECT_NE(err.find("--wire"), std::string::npos) << err;
  }
}

// --scatter head|token|none (any case): the config's mode, and the
// baselines of that mode.
TEST(PerfArgs, ScatterModeSetsTheConfig) {
  const std::vector<std::pair<std::vector<const char*>, int>> good = {
      {{"--scatter", "head"}, ncclDcpScatterHead},
      {{"--scatter", "token"}, ncclDcpScatterToken},
      {{"--scatter=none"}, ncclDcpScatterNone},
      {{"--scatter", "TOKEN"}, ncclDcpScatterToken},
      {{"--scatter", "None", "--virtual-ranks", "8"}, ncclDcpScatterNone},
  };
  for (const auto& [argv, mode] : good) {
    Args a;
    std::string err;
    ASSERT_EQ(parse(argv, &a, &err), ParseResult::Ok) << argv[1] << ": " << err;
    EXPECT_EQ(a.scatter, mode) << argv[1];
    EXPECT_EQ(configOf(a).scatter, mode) << argv[1];
  }
  Args last;  // the last one given wins, as for every option
  std::string err;
  ASSERT_EQ(parse({"--scatter", "none", "--scatter", "token"}, &last, &err), ParseResult::Ok) << err;
  EXPECT_EQ(last.scatter, ncclDcpScatterToken);
  for (const std::vector<const char*>& bad :
       std::vector<std::vector<const char*>>{{"--scatter", "diag"}, {"--scatter", ""}, {"--scatter", "1"},
                                             {"--scatter", "heads"}, {"--scatter"}}) {
    Args a;
    err.clear();
    EXPECT_EQ(parse(bad, &a, &err), ParseResult::Error) << (bad.size() > 1 ? bad[1] : "(no value)");
    EXPECT_NE(err.find("--scatter"), std::string::npos) << err;
    if (bad.size() > 1) EXPECT_NE(err.find("head, token or none"), std::string::npos) << err;
    else EXPECT_NE(err.find("needs a value"), std::string::npos) << err;
  }
  // Baseline 2 (HEAD + all-gather of the merged heads) only where it means
  // something: NONE with the full baseline.
  Args a;
  a.scatter = ncclDcpScatterNone;
  EXPECT_TRUE(hasBaseline2(a));
  a.baseline = kBaselineAllToAll;
  EXPECT_FALSE(hasBaseline2(a));
  a.baseline = kBaselineOff;
  EXPECT_FALSE(hasBaseline2(a));
  a.baseline = kBaselineFull;
  a.scatter = ncclDcpScatterToken;
  EXPECT_FALSE(hasBaseline2(a));
  // Its name says what it is: real ranks' ncclAllGather stages by itself;
  // loopback's copy writes straight into every output unless staged.
  Args staged;
  ASSERT_EQ(parse({"--virtual-ranks", "8", "--scatter", "none", "--staged-gather", "1"}, &staged, &err), ParseResult::Ok)
      << err;
  EXPECT_NE(std::string(baseline2Name(staged)).find("staged"), std::string::npos);
  staged.stagedGather = 0;
  EXPECT_NE(std::string(baseline2Name(staged)).find("loopback only"), std::string::npos);
  staged.virtualRanks = 0;
  EXPECT_STREQ(baseline2Name(staged), "HEAD + all-gather of the merged heads");
  // --registered-out 1 on NONE, loopback or one thread per rank.
  Args registered;
  ASSERT_EQ(parse({"--virtual-ranks", "8", "--scatter", "none", "--registered-out", "1"}, &registered, &err),
            ParseResult::Ok)
      << err;
  EXPECT_EQ(registered.registeredOut, 1);
  Args threads;
  ASSERT_EQ(parse({"-t", "2", "--scatter", "none", "--registered-out", "1"}, &threads, &err), ParseResult::Ok) << err;
  EXPECT_EQ(threads.registeredOut, 1);
  EXPECT_STREQ(baselineName(kBaselineFull), "a2a + combine");  // HEAD: the names of 0.2
  EXPECT_STREQ(baselineName(kBaselineAllToAll, ncclDcpScatterHead), "a2a alone");
  EXPECT_STREQ(baselineName(kBaselineFull, ncclDcpScatterToken), "token a2a + combine");
  EXPECT_STREQ(baselineName(kBaselineAllToAll, ncclDcpScatterToken), "token a2a alone");
  EXPECT_STREQ(baselineName(kBaselineFull, ncclDcpScatterNone), "all-gather + combine");
  EXPECT_STREQ(baselineName(kBaselineAllToAll, ncclDcpScatterNone), "all-gather alone");
  EXPECT_STREQ(baselineName(kBaselineOff, ncclDcpScatterNone), "none");
  EXPECT_STREQ(baselineName(kBaselineNativeWire, ncclDcpScatterToken), "fused, native wire");
}

// The second context a run's baselines call: NONE's baseline 2 in HEAD
// mode, -B 3's, both on the native wire (else the config's in every
// field), and none otherwise.
TEST(PerfArgs, SecondContextOfTheBaselines) {
  std::string err;
  ncclDcpConfig_t c2;
  Args head;
  EXPECT_FALSE(secondContextConfig(head, &c2));
  Args none;
  ASSERT_EQ(parse({"--scatter", "none", "--wire", "fp8"}, &none, &err), ParseResult::Ok) << err;
  ASSERT_TRUE(secondContextConfig(none, &c2));
  EXPECT_EQ(c2.scatter, ncclDcpScatterHead);
  EXPECT_EQ(c2.wire, ncclDcpWireNative) << "baseline 2 is checked against the native reference";
  Args wire;
  ASSERT_EQ(parse({"--scatter", "token", "--wire", "fp8", "-B", "3", "-P", "LL"}, &wire, &err), ParseResult::Ok)
      << err;
  ASSERT_TRUE(secondContextConfig(wire, &c2));
  ncclDcpConfig_t want = configOf(wire);
  want.wire = ncclDcpWireNative;
  for (auto field : {&ncclDcpConfig_t::headDim, &ncclDcpConfig_t::localHeads, &ncclDcpConfig_t::lseBase,
                     &ncclDcpConfig_t::maxBatch, &ncclDcpConfig_t::protocol, &ncclDcpConfig_t::timeoutMs,
                     &ncclDcpConfig_t::scatter, &ncclDcpConfig_t::wire})
    EXPECT_EQ(c2.*field, want.*field);
  EXPECT_EQ(c2.dtype, want.dtype);
  EXPECT_EQ(c2.lseDtype, want.lseDtype);
  EXPECT_FALSE(hasBaseline2(wire));
  wire.scatter = ncclDcpScatterNone;  // NONE with -B 3: no baseline 2, the native wire's context
  ASSERT_TRUE(secondContextConfig(wire, &c2));
  EXPECT_EQ(c2.scatter, ncclDcpScatterNone);
  EXPECT_EQ(c2.wire, ncclDcpWireNative);
}

// What each rank must receive per batch row, per mode (the floors' bytes),
// and the buffers' shapes: cp 2 and cp 8, Hl 16, D 512, bf16.
TEST(PerfScatter, BytesEachModeMoves) {
  const int64_t share = 16 * 512 * 2;  // Hl * D * elt: 16 KiB
  for (int cp : {2, 8}) {
    EXPECT_EQ(headsOf(ncclDcpScatterHead, cp, 16), 16);
    EXPECT_EQ(headsOf(ncclDcpScatterToken, cp, 16), cp * 16);
    EXPECT_EQ(headsOf(ncclDcpScatterNone, cp, 16), cp * 16);
    EXPECT_EQ(peerBytesPerRow(ncclDcpScatterHead, cp, 16, 512, 2), share);
    EXPECT_EQ(peerBytesPerRow(ncclDcpScatterToken, cp, 16, 512, 2), share);
    EXPECT_EQ(peerBytesPerRow(ncclDcpScatterNone, cp, 16, 512, 2), cp * share);
    // HEAD and TOKEN: (cp - 1) / cp of a row's B*H*D; NONE: (cp - 1) rows' worth.
    const int64_t row = cp * share;  // H * D * elt
    EXPECT_EQ(receiveBytesPerRow(ncclDcpScatterHead, cp, 16, 512, 2) * cp, (cp - 1) * row);
    EXPECT_EQ(receiveBytesPerRow(ncclDcpScatterToken, cp, 16, 512, 2) * cp, (cp - 1) * row);
    EXPECT_EQ(receiveBytesPerRow(ncclDcpScatterNone, cp, 16, 512, 2), (cp - 1) * row);
    // NONE in two phases: the peer's heads, then this rank's merged ones;
    // the other modes ignore the algorithm.
    EXPECT_EQ(peerBytesPerRow(ncclDcpScatterNone, cp, 16, 512, 2, true), 2 * share);
    EXPECT_EQ(receiveBytesPerRow(ncclDcpScatterNone, cp, 16, 512, 2, true) * cp, 2 * (cp - 1) * row);
    EXPECT_EQ(peerBytesPerRow(ncclDcpScatterHead, cp, 16, 512, 2, true), share);
  }
  EXPECT_EQ(receiveBytesPerRow(ncclDcpScatterNone, 1, 16, 512, 2), 0);  // one rank: nothing to receive
  // TOKEN's blocks and largest output: ceil(B / cp) rows.
  EXPECT_EQ(tokenBlockRows(8, 1), 1);
  EXPECT_EQ(tokenBlockRows(8, 8), 1);
  EXPECT_EQ(tokenBlockRows(8, 9), 2);
  EXPECT_EQ(tokenBlockRows(8, 1024), 128);
  EXPECT_EQ(tokenBlockRows(3, 64), 22);
  EXPECT_EQ(tokenBlockRows(8, 0), 0);
  EXPECT_EQ(maxOutRows(ncclDcpScatterToken, 3, 64), 22);
  EXPECT_EQ(maxOutRows(ncclDcpScatterHead, 3, 64), 64);
  EXPECT_EQ(maxOutRows(ncclDcpScatterNone, 3, 64), 64);
  // Loopback's ideal bytes: HEAD's are 0.2's formula; TOKEN moves the same
  // (even split); NONE's payload and outputs are cp times HEAD's.
  const double unit = 512 * 2 + 4, b = 64, cp = 8, hl = 16;
  const double head = cp * b * cp * hl * unit + 2 * cp * (cp - 1) * b * hl * unit + cp * b * hl * unit;
  EXPECT_DOUBLE_EQ(idealBytes(ncclDcpScatterHead, 8, 64, 16, 512, 2), head);
  EXPECT_DOUBLE_EQ(idealBytes(ncclDcpScatterToken, 8, 64, 16, 512, 2), head);
  EXPECT_DOUBLE_EQ(idealBytes(ncclDcpScatterNone, 8, 64, 16, 512, 2),
                   cp * b * cp * hl * unit + cp * (2 * cp * (cp - 1) * b * hl * unit + cp * b * hl * unit));
  // NONE in two phases: twice HEAD's payload (each phase's), NONE's outputs.
  EXPECT_DOUBLE_EQ(idealBytes(ncclDcpScatterNone, 8, 64, 16, 512, 2, true),
                   cp * b * cp * hl * unit + 2 * (2 * cp * (cp - 1) * b * hl * unit) + cp * b * cp * hl * unit);
  // fp8 on the wire: the payload's units are D e4m3 bytes + {lse, scale};
  // inputs and outputs keep the dtype.
  const double fp8Unit = 512 + 8;
  EXPECT_DOUBLE_EQ(idealBytes(ncclDcpScatterHead, 8, 64, 16, 512, 2, false, true),
                   cp * b * cp * hl * unit + 2 * cp * (cp - 1) * b * hl * fp8Unit + cp * b * hl * unit);
  EXPECT_EQ(peerBytesPerRow(ncclDcpScatterHead, 8, 16, 512, 1), 16 * 512);  // fp8: an element is a byte
}

TEST(PerfArgs, EveryShortOptionParses) {
  Args a;
  std::string err;
  ASSERT_EQ(parse({"-b", "8", "-e", "256", "-f", "4", "-g", "2", "-t", "4", "-n", "50", "-w", "3", "-c", "2", "-m",
                   "5", "-G", "0", "-a", "3", "-d", "half", "-T", "7", "-H", "4", "-P", "simple", "-L", "e", "-B",
                   "2", "-F", "0", "-J", "out.json"},
                  &a, &err),
            ParseResult::Ok)
      << err;
  EXPECT_TRUE(a.minSize.bytes);  // -b 8: bytes, as in nccl-tests
  EXPECT_EQ(a.minSize.value, 8);
  EXPECT_TRUE(a.maxSize.bytes);
  EXPECT_EQ(a.maxSize.value, 256);
  EXPECT_EQ(a.factor, 4);
  EXPECT_EQ(a.gpusPerThread, 2);
  EXPECT_EQ(a.threads, 4);
  EXPECT_EQ(a.iters, 50);
  EXPECT_EQ(a.warmup, 3);
  EXPECT_EQ(a.check, 2);
  EXPECT_EQ(a.aggIters, 5);
  EXPECT_EQ(a.graphLaunches, 0);
  EXPECT_EQ(a.aggregate, 3);
  EXPECT_EQ(a.dtype, ncclFloat16);
  EXPECT_EQ(a.timeoutS, 7);
  EXPECT_EQ(a.localHeads, 4);
  EXPECT_EQ(a.protocol, ncclDcpProtoSimple);
  EXPECT_EQ(a.lseBase, ncclDcpLseBaseE);
  EXPECT_EQ(a.baseline, kBaselineAllToAll);
  EXPECT_EQ(a.floors, 0);
  EXPECT_EQ(a.json, "out.json");
  EXPECT_EQ(a.argv.size(), 39u);  // as given (the program and 38 words), for the JSON
  EXPECT_EQ(a.argv[1], "-b");
  Args v;  // getopt's forms: value glued to the letter, letters with values in a row
  ASSERT_EQ(parse({"-i16K", "-dfloat", "-n", "3"}, &v, &err), ParseResult::Ok) << err;
  EXPECT_EQ(v.stepSize.value, 16384);
  EXPECT_TRUE(v.stepSize.bytes);
  EXPECT_EQ(v.dtype, ncclFloat32);
  EXPECT_EQ(v.iters, 3);
}

TEST(PerfArgs, EveryLongOptionParses) {
  Args a;
  std::string err;
  ASSERT_EQ(parse({"--nthreads", "2", "--ngpus=3", "--minbytes", "64K", "--maxbytes", "1048576", "--stepbytes", "32K",
                   "--stepfactor", "3", "--iters", "9", "--agg_iters", "4", "--warmup_iters", "2", "--check", "0",
                   "--datatype", "bfloat16", "--timeout", "0", "--cudagraph", "2", "--output_file", "r.json",
                   "--average", "2", "--local-heads", "8", "--head-dim", "128", "--protocol", "LL", "--lse-base", "2",
                   "--max-batch", "64", "--baseline", "0", "--floors", "0", "--provider", "cuda-ipc",
                   "--report_cputime", "1", "--parallel_init", "1"},
                  &a, &err),
            ParseResult::Ok)
      << err;
  EXPECT_EQ(a.threads, 2);
  EXPECT_EQ(a.gpusPerThread, 3);
  EXPECT_TRUE(a.minSize.bytes);
  EXPECT_EQ(a.minSize.value, 65536);
  EXPECT_TRUE(a.maxSize.bytes);  // --maxbytes: a plain number is bytes, as in nccl-tests
  EXPECT_EQ(a.maxSize.value, 1048576);
  EXPECT_EQ(a.stepSize.value, 32768);
  EXPECT_EQ(a.factor, 3);
  EXPECT_EQ(a.iters, 9);
  EXPECT_EQ(a.aggIters, 4);
  EXPECT_EQ(a.warmup, 2);
  EXPECT_EQ(a.check, 0);
  EXPECT_EQ(a.dtype, ncclBfloat16);
  EXPECT_EQ(a.timeoutS, 0);
  EXPECT_EQ(a.graphLaunches, 2);
  EXPECT_EQ(a.json, "r.json");
  EXPECT_EQ(a.aggregate, 2);
  EXPECT_EQ(a.localHeads, 8);
  EXPECT_EQ(a.headDim, 128);
  EXPECT_EQ(a.protocol, ncclDcpProtoLL);
  EXPECT_EQ(a.lseBase, ncclDcpLseBase2);
  EXPECT_EQ(a.maxBatch, 64);
  EXPECT_EQ(a.baseline, kBaselineOff);
  EXPECT_EQ(a.floors, 0);
  EXPECT_EQ(a.provider, "cuda-ipc");
  EXPECT_EQ(a.cpuTime, 1);
  EXPECT_EQ(a.parallelInit, 1);
  EXPECT_TRUE(a.factorGiven);
  Args v;
  ASSERT_EQ(parse({"--virtual-ranks", "8", "--min-rows", "2", "--max-rows", "64", "--step-rows", "16"}, &v, &err),
            ParseResult::Ok)
      << err;
  EXPECT_EQ(v.virtualRanks, 8);
  EXPECT_EQ(v.minRows, 2);
  EXPECT_EQ(v.maxRows, 64);
  EXPECT_EQ(v.step, 16);
  EXPECT_FALSE(v.maxSize.bytes);
  EXPECT_TRUE(stepsBy(v));  // -i / --step-rows without -f: added
  EXPECT_EQ(batchSweep(v), (std::vector<int64_t>{2, 18, 34, 50}));
  Args both;  // -f given wins over -i, as in nccl-tests
  ASSERT_EQ(parse({"--min-rows", "1", "--max-rows", "8", "--step-rows", "3", "-f", "2"}, &both, &err),
            ParseResult::Ok)
      << err;
  EXPECT_FALSE(stepsBy(both));
  EXPECT_EQ(batchSweep(both), (std::vector<int64_t>{1, 2, 4, 8}));
}

TEST(PerfArgs, HelpAndVersion) {
  std::string err;
  Args h;
  EXPECT_EQ(parse({"-h"}, &h, &err), ParseResult::Help);
  EXPECT_EQ(parse({"--help"}, &h, &err), ParseResult::Help);
  EXPECT_EQ(parse({"-n", "3", "--version"}, &h, &err), ParseResult::Version);
  const std::string v = versionText(20000, 22809);
  EXPECT_NE(v.find("nccl-dcp " + versionString(NCCL_DCP_VERSION_CODE)), std::string::npos) << v;
  EXPECT_NE(v.find("library loaded: 2.0.0"), std::string::npos) << v;
  EXPECT_NE(v.find("library loaded: 2.28.9"), std::string::npos) << v;
  EXPECT_NE(v.find("NCCL headers " + versionString(NCCL_VERSION_CODE)), std::string::npos) << v;
  EXPECT_NE(v.find("timeline"), std::string::npos) << v;
  EXPECT_EQ(versionString(22809), "2.28.9");
  EXPECT_EQ(versionString(21003), "2.10.3");
}

// Every refusal names the option; the binary exits 2 on any of them.
TEST(PerfArgs, ErrorsNameTheOption) {
  std::string err;
  const std::vector<std::pair<std::vector<const char*>, const char*>> bad = {
      {{"-x", "1"}, "-x"},
      {{"--foo"}, "--foo"},
      {{"--head-dim"}, "--head-dim"},  // no value
      {{"-b"}, "-b"},
      {{"-b", "abc"}, "-b"},
      {{"-b", "12Q"}, "-b"},
      {{"-b", "1.5"}, "-b"},  // bytes are whole
      {{"--min-rows", "1K"}, "--min-rows"},  // rows are a plain number
      {{"--step-rows", "0"}, "--step-rows"},
      {{"-b", "-4"}, "-b"},
      {{"-b", "0x10"}, "-b"},
      {{"--minbytes", "1e3"}, "--minbytes"},
      {{"-f", "1"}, "-f"},
      {{"-d", "int8"}, "-d"},
      {{"-P", "fast"}, "-P"},
      {{"--protocol", "fast"}, "--protocol"},
      {{"-L", "10"}, "-L"},
      {{"--virtual-ranks", "17"}, "--virtual-ranks"},
      {{"-a", "4"}, "-a"},
      {{"-g", "0"}, "-g"},
      {{"-m", "0"}, "-m"},
      {{"-G", "-1"}, "-G"},
      {{"-T", "x"}, "-T"},
      {{"-B", "4"}, "-B"},
      {{"-B", "3"}, "-B 3 times the fused call on the native wire beside the config's: it needs --wire fp8"},
      {{"-F", "2"}, "-F"},
      {{"-n", "5000000000"}, "-n"},
      {{"--provider", "nvshmem"}, "--provider"},
      {{"--scatter", "diag"}, "--scatter"},
      {{"--scatter"}, "--scatter"},  // no value
      {{"-b", "64", "-e", "8"}, "-b 64 B is larger than -e 8 B"},
      {{"--minbytes", "64K", "--maxbytes", "8K"}, "-b 65536 B"},
      {{"--min-rows", "64", "--max-rows", "8"}, "--min-rows 64 rows is larger than --max-rows 8 rows"},
      {{"-C", "2"}, "-C"},
      {{"extra"}, "extra"},
      {{"--virtual-ranks", "8", "-t", "2"}, "--virtual-ranks"},
      {{"--virtual-ranks", "4", "-g", "2"}, "-t and -g"},
      {{"--staged-gather", "1", "--scatter", "none"}, "--staged-gather 1 stages loopback NONE's"},
      {{"--staged-gather", "1", "--virtual-ranks", "8"}, "--scatter none"},
      {{"--staged-gather", "1", "--virtual-ranks", "8", "--scatter", "none", "-B", "0"}, "-B 1"},
      {{"--staged-gather", "2"}, "--staged-gather"},
      {{"--registered-out", "1"}, "--registered-out 1 registers the outputs NONE's phase 2"},
      {{"--registered-out", "2"}, "--registered-out"},
      // nccl-tests' options at a value other than their default (or with
      // no meaning here at all): refused, pointing at nccl-tests' meaning
      // and at our long option.
      {{"-D", "128"}, "--head-dim"},
      {{"-V", "8"}, "--virtual-ranks"},
      {{"-R", "1"}, "nccl-tests' --local_register"},
      {{"-o", "sum"}, "nccl-tests' --op"},
      {{"-N", "2"}, "nccl-tests' --run_cycles"},
      {{"-z", "1"}, "only its default, -z 0, is accepted"},
      {{"-y", "1"}, "nccl-tests' --stream_null"},
      {{"-u", "1"}, "--unalign"},
      // A step of 0 bytes with no -f (nccl-tests would loop for ever; it
      // used to fall back to -f 2 unsaid), as --step-rows 0 is.
      {{"-i", "0"}, "-i 0: a step of 0 bytes"},
      {{"--stepbytes", "0", "-b", "1K"}, "-i 0"},
      // A prefix of two long options, and a value for one that takes none.
      {{"--min", "5"}, "'--min' is ambiguous: it begins --minbytes, --min-rows"},
      {{"--help=1"}, "option --help takes no value"},
      {{"--vers=1"}, "option --version takes no value"},
  };
  for (const auto& [argv, what] : bad) {
    Args a;
    err.clear();
    EXPECT_EQ(parse(argv, &a, &err), ParseResult::Error) << argv[0];
    EXPECT_NE(err.find(what), std::string::npos) << argv[0] << ": " << err;
  }
}

// Everything that needs no GPU is refused before the binary touches one
// (main calls checkBeforeGpu before cudaGetDeviceCount; exit 2 there):
// sizes at the run's rank count, the config, the -J path. Each message
// names the option.
TEST(PerfArgs, BadInputIsRefusedBeforeAnyGpu) {
  const std::vector<std::pair<std::vector<const char*>, std::vector<const char*>>> bad = {
      {{"-e", "0"}, {"-e's 0 rows", "without -b / --min-rows the sweep starts at 1 row"}},
      {{"-b", "32M"}, {"-b is 2048 rows", "nccl-tests' -b/-e default, 32M, is not ours"}},  // 1 rank: 16 KiB a row
      {{"--min-rows", "4", "-e", "32K"}, {"--min-rows is 4 rows, more than -e's 2 rows"}},
      {{"--head-dim", "513"}, {"--head-dim 513: not a config the library takes", "multiple of 16 bytes"}},
      {{"--head-dim", "4"}, {"--head-dim 4: not a config the library takes"}},
      {{"--wire", "fp8", "--head-dim", "8"}, {"--head-dim 8 with --wire fp8", "headDim % 16 == 0"}},
      {{"-d", "fp32", "--wire", "fp8"}, {"-d fp32 with --wire fp8", "needs dtype bf16 or fp16"}},
      {{"--max-batch", "1", "-J", "/nonexistent/x.json"}, {"-J/--output_file", "/nonexistent/x.json"}},
  };
  for (const auto& [argv, what] : bad) {
    Args a;
    std::string err;
    ASSERT_EQ(parse(argv, &a, &err), ParseResult::Ok) << argv[0] << ": " << err;
    EXPECT_FALSE(checkBeforeGpu(&a, ranksBeforeGpu(a, 1), true, &err)) << argv[0];
    for (const char* w : what) EXPECT_NE(err.find(w), std::string::npos) << argv[0] << ": " << err;
  }
  // What runs: the defaults, nccl-tests' own sweep at 2 ranks, every
  // dtype at D 8 (16 bytes a row: fp32 and fp16 / bf16 at D 8 and 16).
  for (std::vector<const char*> argv : std::vector<std::vector<const char*>>{
           {}, {"-b", "8", "-e", "128M", "-g", "2"}, {"--head-dim", "8"}, {"--head-dim", "4", "-d", "fp32"},
           {"--wire", "fp8", "--head-dim", "16"}, {"--virtual-ranks", "8", "-b", "32M", "-e", "64M"}}) {
    Args a;
    std::string err;
    ASSERT_EQ(parse(argv, &a, &err), ParseResult::Ok) << err;
    EXPECT_TRUE(checkBeforeGpu(&a, ranksBeforeGpu(a, 1), true, &err)) << (argv.empty() ? "" : argv[0]) << ": " << err;
  }
  // Sizes become rows at the run's ranks (and the JSON is not probed
  // unless asked: process 0 alone probes it).
  Args v;
  std::string err;
  ASSERT_EQ(parse({"--virtual-ranks", "8", "-b", "32M", "-e", "64M", "-J", "/nonexistent/x.json"}, &v, &err),
            ParseResult::Ok);
  ASSERT_TRUE(checkBeforeGpu(&v, ranksBeforeGpu(v, 1), false, &err)) << err;
  EXPECT_EQ(v.minRows, 256);  // 32 MiB / (8 x 16 x 512 x 2 B)
  EXPECT_EQ(v.maxRows, 512);
}

TEST(PerfArgs, RanksAreKnownBeforeAnyGpu) {
  Args a;
  EXPECT_EQ(ranksBeforeGpu(a, 1), 1);
  a.threads = 2;
  a.gpusPerThread = 2;
  EXPECT_EQ(ranksBeforeGpu(a, 3), 12);  // mpirun -np 3, -t 2 -g 2
  a.threads = a.gpusPerThread = 1;
  a.virtualRanks = 8;
  EXPECT_EQ(ranksBeforeGpu(a, 1), 8);
}

// -J is probed as nccl-tests opens its file before the run: a path that
// cannot be written is refused; the probe leaves no file behind, and
// removes an earlier run's (a run that ends before writing its own leaves
// none), but not a FIFO or a link (/dev/stdout is one), nor a file it
// cannot write.
TEST(PerfArgs, OutputFileIsProbedWithoutLeavingATrace) {
  char dir[] = "/tmp/dcp_perf_json_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir, fresh = d + "/new.json", old = d + "/old.json", fifo = d + "/fifo",
                    link = d + "/link.json", target = d + "/target.json", locked = d + "/locked.json";
  std::string err;
  EXPECT_TRUE(probeOutputFile(fresh, &err)) << err;
  EXPECT_NE(access(fresh.c_str(), F_OK), 0) << "the probe left " << fresh;
  for (const std::string& path : {old, target, locked}) {
    FILE* f = fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("{}\n", f);
    fclose(f);
  }
  EXPECT_TRUE(probeOutputFile(old, &err)) << err;
  EXPECT_NE(access(old.c_str(), F_OK), 0) << "an earlier run's JSON is left at -J";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_TRUE(probeOutputFile(fifo, &err)) << err;
  EXPECT_TRUE(probeOutputFile(link, &err)) << err;
  EXPECT_EQ(access(fifo.c_str(), F_OK), 0) << "the FIFO was removed";
  EXPECT_EQ(access(link.c_str(), F_OK), 0) << "the link was removed";
  EXPECT_EQ(access(target.c_str(), F_OK), 0) << "the link's file was removed";
  if (geteuid() != 0) {  // root writes a file of mode 0444
    ASSERT_EQ(chmod(locked.c_str(), 0444), 0);
    EXPECT_FALSE(probeOutputFile(locked, &err));
    EXPECT_EQ(access(locked.c_str(), F_OK), 0) << "a file -J cannot write was removed";
  }
  EXPECT_FALSE(probeOutputFile(dir, &err));  // a directory
  EXPECT_NE(err.find("-J/--output_file"), std::string::npos) << err;
  EXPECT_FALSE(probeOutputFile(d + "/missing/x.json", &err));
  EXPECT_NE(err.find("No such file or directory"), std::string::npos) << err;
  for (const std::string& path : {fifo, link, target, locked}) unlink(path.c_str());
  rmdir(dir);
}

// -i 0 with -f: the factor wins (as in nccl-tests, which never adds -i then).
TEST(PerfArgs, StepOfZeroBytesRunsOnlyWithAFactor) {
  Args a;
  std::string err;
  ASSERT_EQ(parse({"-i", "0", "-f", "4"}, &a, &err), ParseResult::Ok) << err;
  EXPECT_FALSE(stepsBy(a));
  EXPECT_EQ(batchSweep(a), (std::vector<int64_t>{1, 4, 16, 64, 256, 1024}));
}

// What scripts written for nccl-tests pass at its defaults runs here
// unchanged: accepted, and nothing changes but -C and -p (recorded).
TEST(PerfArgs, NcclTestsDefaultsAreAccepted) {
  Args a, plain;
  std::string err;
  ASSERT_EQ(parse({"-z", "0", "-p", "1", "-y", "0", "-N", "1", "-r", "0", "-S", "0", "-u", "0", "-M", "0", "-I", "0",
                   "-K", "0", "-R", "0", "-x", "-1", "-D", "0", "-C", "0", "--blocking", "0", "--stream_null=0"},
                  &a, &err),
            ParseResult::Ok)
      << err;
  ASSERT_EQ(parse({}, &plain, &err), ParseResult::Ok) << err;
  EXPECT_EQ(a.parallelInit, 1);
  EXPECT_EQ(a.cpuTime, 0);
  EXPECT_EQ(a.iters, plain.iters);
  EXPECT_EQ(a.aggIters, plain.aggIters);
  EXPECT_EQ(a.graphLaunches, plain.graphLaunches);
  // nccl-tests' own sweep, in bytes: 8 B .. 128 MiB by 2 is 1 .. 4096 rows at 2 ranks (32 KiB a row).
  Args n;
  ASSERT_EQ(parse({"-b", "8", "-e", "128M", "-f", "2", "-g", "2"}, &n, &err), ParseResult::Ok) << err;
  ASSERT_TRUE(resolveSizes(&n, 2, &err)) << err;
  EXPECT_EQ(n.minRows, 1);
  EXPECT_EQ(n.maxRows, 4096);
  EXPECT_EQ(batchSweep(n).size(), 13u);
  const std::string note = sizeNote(n, 2);
  EXPECT_NE(note.find("-b 8 B = 1 rows (less than one row)"), std::string::npos) << note;
  EXPECT_NE(note.find("--min-rows / --max-rows"), std::string::npos) << note;
}

// -T is nccl-tests' timeout; the timeline is --timeline, refused at parsing
// by a build without it (it used to fail mid-run).
TEST(PerfArgs, TimelineOnlyWhereBuilt) {
  Args a;
  std::string err;
#ifdef NCCL_DCP_TIMELINE
  ASSERT_EQ(parse({"--timeline"}, &a, &err), ParseResult::Ok) << err;
  EXPECT_EQ(a.timeline, 1);
  EXPECT_NE(usage("p").find("this one: yes"), std::string::npos);
#else
  EXPECT_EQ(parse({"--timeline"}, &a, &err), ParseResult::Error);
  EXPECT_NE(err.find("-Dtimeline=true"), std::string::npos) << err;
  EXPECT_NE(usage("p").find("this one: no"), std::string::npos);
#endif
  Args t;
  ASSERT_EQ(parse({"-T", "1"}, &t, &err), ParseResult::Ok) << err;
  EXPECT_EQ(t.timeline, 0);
  EXPECT_EQ(t.timeoutS, 1);
}

TEST(PerfArgs, UsageDocumentsEveryOptionAndMpirun) {
  const std::string u = usage("p");
  for (const char* f : {"-b, --minbytes", "-e, --maxbytes", "-i, --stepbytes", "--min-rows, --max-rows, --step-rows",
                        "-f, --stepfactor", "-C, --report_cputime", "-p, --parallel_init",
                        "-g, --ngpus", "-t, --nthreads", "-n, --iters", "-w, --warmup_iters", "-m, --agg_iters",
                        "-G, --cudagraph", "-c, --check", "-a, --average", "-d, --datatype", "-T, --timeout",
                        "-J, --output_file", "-h, --help", "-H, --local-heads", "--head-dim", "-P, --protocol",
                        "-L, --lse-base", "--virtual-ranks", "--max-batch", "-B, --baseline", "-F, --floors",
                        "--timeline", "--provider", "--scatter", "--version"})
    EXPECT_NE(u.find(std::string("  ") + f), std::string::npos) << f;
  EXPECT_NE(u.find("3 no GPU"), std::string::npos);
  EXPECT_NE(u.find("mpirun -np"), std::string::npos);
  EXPECT_NE(u.find("alltoall_perf"), std::string::npos);  // what -B 2 is for
  EXPECT_NE(u.find("iteration time / (m x G)"), std::string::npos);  // how -m and -G map
  EXPECT_NE(u.find("the mean per call"), std::string::npos);  // nccl-tests' statistic
  EXPECT_NE(u.find("-z 0"), std::string::npos);  // the defaults accepted
  EXPECT_NE(u.find("K = 1024"), std::string::npos);  // sizes in bytes
}

TEST(PerfSizes, BytesAsNcclTests) {
  int64_t b = -1;
  const std::vector<std::pair<const char*, int64_t>> bytes = {
      {"64", 64},       {"4096B", 4096},   {"32K", 32768},        {"32k", 32768},      {"32KB", 32768},
      {"32KiB", 32768}, {"1.5M", 1572864}, {"32M", 33554432},     {"1G", 1073741824}, {"0", 0},
      {"0B", 0},        {"128M", 134217728}};
  for (const auto& [text, value] : bytes) {
    ASSERT_TRUE(parseBytes(text, &b)) << text;
    EXPECT_EQ(b, value) << text;
  }
  for (const char* text : {"", "K", "-1", "+1", "1.5", "1.5B", "0x20", "1e3", "32T", "32 K", " 32", "nan", "inf",
                           "32KK"})
    EXPECT_FALSE(parseBytes(text, &b)) << text;
}

// -b 32K -e 32M at 2 ranks, Hl 16, D 512, bf16 (32 KiB a row) is 1..1024 rows.
TEST(PerfSizes, BytesBecomeRowsOnceTheRanksAreKnown) {
  Args a;
  std::string err;
  ASSERT_EQ(parse({"-b", "32K", "-e", "32M", "-i", "64K"}, &a, &err), ParseResult::Ok) << err;
  EXPECT_EQ(bytesPerRow(a, 2), 32768);
  ASSERT_TRUE(resolveSizes(&a, 2, &err)) << err;
  EXPECT_EQ(a.minRows, 1);
  EXPECT_EQ(a.maxRows, 1024);
  EXPECT_EQ(a.step, 2);
  const std::string note = sizeNote(a, 2);
  EXPECT_NE(note.find("-b 32768 B = 1 rows"), std::string::npos) << note;
  EXPECT_NE(note.find("-e 33554432 B = 1024 rows"), std::string::npos) << note;
  // Rounded down, at least one row; fp32 rows weigh twice as much.
  Args f;
  ASSERT_EQ(parse({"-b", "1K", "-e", "100K", "-d", "fp32"}, &f, &err), ParseResult::Ok) << err;
  ASSERT_TRUE(resolveSizes(&f, 2, &err)) << err;
  EXPECT_EQ(f.minRows, 1);
  EXPECT_EQ(f.maxRows, 1);  // 100 KiB / 64 KiB
  // Rows stay rows, and no note.
  Args r;
  ASSERT_EQ(parse({"--min-rows", "4", "--max-rows", "8"}, &r, &err), ParseResult::Ok) << err;
  ASSERT_TRUE(resolveSizes(&r, 8, &err)) << err;
  EXPECT_EQ(r.minRows, 4);
  EXPECT_EQ(r.maxRows, 8);
  EXPECT_EQ(sizeNote(r, 8), "");
  // Mixed: --min-rows 64 but -e 32K is 1 row at 2 ranks: refused once known.
  Args m;
  ASSERT_EQ(parse({"--min-rows", "64", "-e", "32K"}, &m, &err), ParseResult::Ok) << err;
  EXPECT_FALSE(resolveSizes(&m, 2, &err));
  EXPECT_NE(err.find("--min-rows is 64 rows, more than -e's 1 rows"), std::string::npos) << err;
  Args big;
  ASSERT_EQ(parse({"-e", "1G", "-H", "1", "--head-dim", "1"}, &big, &err), ParseResult::Ok) << err;
  EXPECT_FALSE(resolveSizes(&big, 1, &err));
  EXPECT_NE(err.find("-e is"), std::string::npos) << err;
}

TEST(PerfProtocol, WhatEachBatchRan) {
  // AUTO on NVLink: LL128, SIMPLE for rounds of >= 128 rows.
  EXPECT_EQ(protocolsOfBatch(0, 256, ncclDcpProtoLL128, 128), "-");
  EXPECT_EQ(protocolsOfBatch(64, 256, ncclDcpProtoLL128, 128), "LL128");
  EXPECT_EQ(protocolsOfBatch(128, 256, ncclDcpProtoLL128, 128), "SIMPLE");
  EXPECT_EQ(protocolsOfBatch(1024, 256, ncclDcpProtoLL128, 128), "SIMPLE");  // 4 rounds of 256
  EXPECT_EQ(protocolsOfBatch(300, 256, ncclDcpProtoLL128, 128), "SIMPLE+LL128");  // 256 + 44
  EXPECT_EQ(protocolsOfBatch(1024, 256, ncclDcpProtoLL, 0), "LL");  // forced, or SIMPLE never
  EXPECT_EQ(protocolsOfBatch(5, 0, ncclDcpProtoSimple, 0), "SIMPLE");
  EXPECT_EQ(protocolsOfBatch(2, 256, ncclDcpProtoLL128, 8, 2), "LL");  // one GPU's LL tier
  EXPECT_EQ(protocolsOfBatch(3, 256, ncclDcpProtoLL128, 8, 2), "LL128");
  EXPECT_EQ(protocolsOfBatch(257, 256, ncclDcpProtoLL128, 8, 2), "SIMPLE+LL");  // 256 + 1
}

// Loopback labels a batch with its engine's own choice per round: the
// rounds' sizes are what the callable is asked.
TEST(PerfProtocol, EachRoundAsTheEngineRunsIt) {
  std::vector<int64_t> asked;
  auto engine = [&](int64_t roundRows) {
    asked.push_back(roundRows);
    return roundRows <= 2 ? (int)ncclDcpProtoLL : (int)ncclDcpProtoLL128;  // say, no SIMPLE region
  };
  EXPECT_EQ(protocolsOfBatch(0, 8, engine), "-");
  EXPECT_TRUE(asked.empty());
  EXPECT_EQ(protocolsOfBatch(2, 8, engine), "LL");
  EXPECT_EQ(protocolsOfBatch(16, 8, engine), "LL128");
  EXPECT_EQ(protocolsOfBatch(17, 8, engine), "LL128+LL");  // 8 + 8 + 1
  EXPECT_EQ(asked, (std::vector<int64_t>{2, 2, 8, 8, 8, 1}));
}

TEST(PerfSweep, FactorAndStep) {
  Args a;
  a.minRows = 1;
  a.maxRows = 1024;
  a.factor = 2;
  EXPECT_EQ(batchSweep(a), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}));
  a.factor = 3;
  a.maxRows = 100;
  EXPECT_EQ(batchSweep(a), (std::vector<int64_t>{1, 3, 9, 27, 81}));
  a.step = 25;
  EXPECT_EQ(batchSweep(a), (std::vector<int64_t>{1, 26, 51, 76}));
  a.step = 0;
  a.minRows = 0;
  a.maxRows = 2;
  EXPECT_EQ(batchSweep(a), (std::vector<int64_t>{0, 1}));  // -b 0 still advances; 3 > -e 2
  a.minRows = a.maxRows = 7;
  EXPECT_EQ(batchSweep(a), (std::vector<int64_t>{7}));
}

TEST(PerfSweep, CapacityAndConfigFollowTheFlags) {
  Args a;
  EXPECT_EQ(capacityOf(a), 1024);
  a.maxBatch = 64;
  EXPECT_EQ(capacityOf(a), 64);
  a.maxBatch = 0;
  a.maxRows = 0;
  EXPECT_EQ(capacityOf(a), 1);  // -e 0: still a workspace
  a.maxRows = NCCL_DCP_MAX_BATCH_CAPACITY * 4LL;
  EXPECT_EQ(capacityOf(a), NCCL_DCP_MAX_BATCH_CAPACITY);  // larger batches run in chunks
  a.headDim = 128;
  a.localHeads = 8;
  a.dtype = ncclFloat16;
  a.protocol = ncclDcpProtoLL;
  a.lseBase = ncclDcpLseBaseE;
  const ncclDcpConfig_t c = configOf(a);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.localHeads, 8);
  EXPECT_EQ(c.dtype, ncclFloat16);
  EXPECT_EQ(c.protocol, ncclDcpProtoLL);
  EXPECT_EQ(c.lseBase, ncclDcpLseBaseE);
  EXPECT_EQ(c.maxBatch, NCCL_DCP_MAX_BATCH_CAPACITY);
}

// mpirun -np 2 -t 2 -g 2 on one node: 8 ranks, process 1 takes GPUs 4..7.
TEST(PerfPlacement, ProcessesThreadsGpus) {
  Placement p;
  p.processes = 2;
  p.process = 1;
  p.localProcess = 1;
  p.threads = 2;
  p.gpusPerThread = 2;
  EXPECT_EQ(p.nRanks(), 8);
  EXPECT_EQ(p.rankOf(0, 0), 4);
  EXPECT_EQ(p.rankOf(1, 1), 7);
  EXPECT_EQ(p.deviceOf(0, 1), 5);
  EXPECT_EQ(p.deviceOf(1, 0), 6);
  p.localProcess = 0;  // the same process alone on its node: GPUs from 0
  EXPECT_EQ(p.deviceOf(1, 1), 3);
  EXPECT_EQ(p.rankOf(1, 1), 7);
  Placement one;  // one process, -t 1 -g 1
  EXPECT_EQ(one.nRanks(), 1);
  EXPECT_EQ(one.rankOf(0, 0), 0);
  EXPECT_EQ(one.deviceOf(0, 0), 0);
}

TEST(PerfAggregate, RankZeroAverageMinMax) {
  const std::vector<double> v = {4, 1, 7, 8};
  EXPECT_DOUBLE_EQ(aggregate(0, v), 4);
  EXPECT_DOUBLE_EQ(aggregate(1, v), 5);
  EXPECT_DOUBLE_EQ(aggregate(2, v), 1);
  EXPECT_DOUBLE_EQ(aggregate(3, v), 8);
  EXPECT_DOUBLE_EQ(aggregate(3, {}), 0);
}

TEST(PerfTable, BandwidthsSpeedupAndFloor) {
  Row r;
  r.rows = 16;
  r.bytes = 2000000;
  r.fusedUs = 10;
  r.baseUs = 25;
  r.peerWriteUs = 5;
  r.copyEngineUs = 4;
  fillBandwidths(&r, 8);
  EXPECT_DOUBLE_EQ(r.fusedAlgBw, 200.0);  // 2 MB in 10 us
  EXPECT_DOUBLE_EQ(r.fusedBusBw, 175.0);  // x 7/8, as nccl-tests' alltoall
  EXPECT_DOUBLE_EQ(r.baseAlgBw, 80.0);
  EXPECT_DOUBLE_EQ(r.speedup, 2.5);
  EXPECT_DOUBLE_EQ(r.floorUs, 4);  // the faster floor
  EXPECT_DOUBLE_EQ(r.xFloor, 2.5);
  r.copyEngineUs = 0;  // not measured: the other one
  fillBandwidths(&r, 1);
  EXPECT_DOUBLE_EQ(r.fusedBusBw, r.fusedAlgBw);
  EXPECT_DOUBLE_EQ(r.floorUs, 5);
  r.peerWriteUs = 0;
  fillBandwidths(&r, 2);
  EXPECT_DOUBLE_EQ(r.xFloor, 0);
}

TEST(PerfTable, MakeRowAggregatesEveryFigureTheSameWay) {
  Args a;
  a.aggregate = 3;  // max over ranks
  Samples s;
  s.fusedUs = {10, 12};
  s.baseUs = {30, 20};
  s.peerWriteUs = {3, 6};
  s.copyEngineUs = {5, 4};
  s.fusedMedianUs = {9, 11};
  s.fusedCpuUs = {2, 3};
  s.baseMedianUs = {28, 19};
  s.fusedWrong = 0;
  s.baseWrong = 2;
  const Row r = makeRow(a, 32, 1 << 20, 2, s, 0);
  EXPECT_DOUBLE_EQ(r.fusedMedianUs, 11);
  EXPECT_DOUBLE_EQ(r.fusedCpuUs, 3);
  EXPECT_DOUBLE_EQ(r.baseMedianUs, 28);
  EXPECT_EQ(r.rows, 32);
  EXPECT_EQ(r.bytes, 1 << 20);
  EXPECT_DOUBLE_EQ(r.fusedUs, 12);
  EXPECT_DOUBLE_EQ(r.baseUs, 30);
  EXPECT_DOUBLE_EQ(r.peerWriteUs, 6);
  EXPECT_DOUBLE_EQ(r.copyEngineUs, 5);
  EXPECT_DOUBLE_EQ(r.xFloor, 12.0 / 5);
  EXPECT_DOUBLE_EQ(r.speedup, 2.5);
  EXPECT_EQ(r.fusedWrong, 0);
  EXPECT_EQ(r.baseWrong, 2);
  a.aggregate = 1;
  EXPECT_DOUBLE_EQ(makeRow(a, 32, 1 << 20, 2, s, 0).fusedUs, 11);
}

TEST(PerfTable, RowsLineUpWithTheHeaderInEveryLayout) {
  Row r;
  r.rows = 1024;
  r.bytes = 134217728;
  r.fusedUs = 2059.0;
  r.fusedWrong = 0;
  r.baseUs = 856.28;
  r.baseWrong = -1;
  r.idealUs = 738.0;
  r.peerWriteUs = 1000;
  r.protocol = "LL128+SIMPLE";
  r.fusedMedianUs = 2001.5;
  r.fusedCpuUs = 3.25;
  fillBandwidths(&r, 8);
  for (int base = 0; base < 2; base++)
    for (int ideal = 0; ideal < 2; ideal++)
      for (int floor = 0; floor < 2; floor++) {
        Args a;
        a.baseline = base ? kBaselineFull : kBaselineOff;
        const Columns c = columnsOf(a, ideal, floor);
        Args cpuArgs = a;  // -C 1: the host's time in the time column, the bandwidths as before
        cpuArgs.cpuTime = 1;
        const std::string cpuLine = formatRow(r, columnsOf(cpuArgs, ideal, floor));
        EXPECT_EQ(cpuLine.find("2059.00"), std::string::npos) << cpuLine;
        EXPECT_NE(cpuLine.find("      3.25   2001.50"), std::string::npos) << cpuLine;
        EXPECT_EQ(cpuLine.size(), formatRow(r, c).size());
        const std::string h = tableHeader(a, 8, c), line = formatRow(r, c);
        const std::string lastHeader = h.substr(h.rfind('\n', h.size() - 2) + 1);
        const std::string names = h.substr(h.rfind('\n', h.rfind('\n', h.size() - 2) - 1) + 1);
        EXPECT_EQ(line.size(), lastHeader.size()) << "\n" << h << line;
        EXPECT_NE(line.find("   2059.00   2001.50"), std::string::npos) << line;  // mean, then median
        EXPECT_NE(names.find("median"), std::string::npos) << names;
        EXPECT_EQ(names.find("xIdeal") != std::string::npos, (bool)ideal) << names;
        EXPECT_EQ(names.find("xFloor") != std::string::npos, (bool)floor) << names;
        EXPECT_EQ(line.find(" - ") != std::string::npos, !base) << line;
        EXPECT_EQ(line.substr(line.size() - 13), "LL128+SIMPLE\n") << line;  // last column
        EXPECT_NE(names.find("protocol"), std::string::npos) << names;
        if (base) {
          EXPECT_NE(line.find("N/A"), std::string::npos) << line;  // baseline not checked
          EXPECT_NE(line.find("0.42"), std::string::npos) << line;  // speedup
        }
        if (ideal) {
          EXPECT_NE(line.find("2.79"), std::string::npos) << line;
        }
        if (floor) {
          EXPECT_NE(line.find("2.06"), std::string::npos) << line;
        }
      }
}

TEST(PerfTable, HeaderNamesTheBaselineAndTheSettings) {
  Args a;
  a.aggIters = 7;
  a.graphLaunches = 3;
  const std::string h = tableHeader(a, 2, Columns());
  EXPECT_NE(h.find("a2a + combine"), std::string::npos);
  // nccl-tests' settings line, sizes in bytes: 1..1024 rows of 32 KiB.
  EXPECT_NE(h.find("# nThread 1 nGpus 1 minBytes 32768 maxBytes 33554432 step: 2(factor) warmup iters: 1 iters: 20 "
                   "agg iters: 7 validation: 1 graph: 3"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("time: the mean per call over 20 iterations, each timed by CUDA events (nccl-tests: the host's "
                   "clock over all of them)"),
            std::string::npos)
      << h;
  a.cpuTime = 1;
  const std::string cpu = tableHeader(a, 2, columnsOf(a, false, false));
  EXPECT_NE(cpu.find("  cputime    median"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("host's time to issue one call (-C 1)"), std::string::npos) << cpu;
  a.cpuTime = 0;
  a.baseline = kBaselineAllToAll;
  EXPECT_NE(tableHeader(a, 2, Columns()).find("a2a alone"), std::string::npos);
  EXPECT_NE(h.find("scatter head"), std::string::npos) << h;
  a.baseline = kBaselineFull;
  a.scatter = ncclDcpScatterToken;
  const std::string t = tableHeader(a, 2, columnsOf(a, false, false));
  EXPECT_NE(t.find("scatter token"), std::string::npos) << t;
  EXPECT_NE(t.find("baseline token a2a + combine"), std::string::npos) << t;
  EXPECT_EQ(t.find("baseline 2"), std::string::npos) << t;
  a.scatter = ncclDcpScatterNone;
  const std::string n = tableHeader(a, 2, columnsOf(a, false, false));
  EXPECT_NE(n.find("scatter none"), std::string::npos) << n;
  EXPECT_NE(n.find("baseline all-gather + combine"), std::string::npos) << n;
  EXPECT_NE(n.find(std::string("baseline 2 ") + baseline2Name(a)), std::string::npos) << n;
}

// NONE's second baseline: three more columns (time, #wrong, speed-up
// against it) that line up with the header, in every layout.
TEST(PerfTable, BaselineTwoColumnsLineUp) {
  Row r;
  r.rows = 64;
  r.bytes = 64 * 32768;
  r.fusedUs = 10;
  r.fusedWrong = 0;
  r.baseUs = 30;
  r.baseWrong = 0;
  r.base2Us = 25;
  r.base2Wrong = 7;
  r.protocol = "LL128";
  fillBandwidths(&r, 2);
  EXPECT_DOUBLE_EQ(r.speedup2, 2.5);
  for (int ideal = 0; ideal < 2; ideal++)
    for (int floor = 0; floor < 2; floor++) {
      Args a;
      a.scatter = ncclDcpScatterNone;
      const Columns c = columnsOf(a, ideal, floor);
      ASSERT_TRUE(c.baseline2);
      const std::string h = tableHeader(a, 2, c), line = formatRow(r, c);
      const std::string lastHeader = h.substr(h.rfind('\n', h.size() - 2) + 1);
      EXPECT_EQ(line.size(), lastHeader.size()) << "\n" << h << line;
      EXPECT_NE(line.find("   25.00       7     2.50"), std::string::npos) << line;
      EXPECT_NE(h.find("baseline 2 (HEAD + all-gather)"), std::string::npos) << h;
    }
  std::vector<Row> rows = {r};
  const std::string f = tableFooter(rows, true, "HEAD + all-gather");
  EXPECT_NE(f.find("# Out of bounds values : 7 FAILED"), std::string::npos) << f;  // baseline 2's wrong count too
  EXPECT_NE(f.find("2.5 (geometric mean, against baseline 2"), std::string::npos) << f;
  EXPECT_EQ(tableFooter(rows, true).find("baseline 2"), std::string::npos);
  Samples s;  // makeRow aggregates baseline 2 as the rest
  s.fusedUs = {10, 20};
  s.base2Us = {30, 50};
  s.base2Wrong = 0;
  Args a;
  const Row m = makeRow(a, 1, 32768, 2, s, 0);
  EXPECT_DOUBLE_EQ(m.base2Us, 40);
  EXPECT_EQ(m.base2Wrong, 0);
  EXPECT_DOUBLE_EQ(m.speedup2, 40.0 / 15);
}

// nccl-tests' closing lines (scripts grep "Avg bus bandwidth" and take the
// 6th field: one line, the fused call's; the baseline's is labelled apart).
TEST(PerfTable, FooterAsNcclTests) {
  std::vector<Row> rows(3);
  for (int i = 0; i < 3; i++) {
    rows[i].rows = 1 << i;
    rows[i].bytes = 1000000 << i;
    rows[i].fusedUs = 10;
    rows[i].baseUs = 40;
    rows[i].fusedWrong = 0;
    rows[i].baseWrong = 0;
    fillBandwidths(&rows[i], 2);  // fused busbw 50, 100, 200
  }
  std::string f = tableFooter(rows, true);
  EXPECT_NE(f.find("# Out of bounds values : 0 OK\n"), std::string::npos) << f;
  EXPECT_NE(f.find("# Avg bus bandwidth    : 116.667 \n"), std::string::npos) << f;
  EXPECT_NE(f.find("# Baseline avg busbw   : 29.1667\n"), std::string::npos) << f;
  std::string lower = f;
  for (char& ch : lower) ch = (char)tolower((unsigned char)ch);
  EXPECT_EQ(lower.find("bus bandwidth"), lower.rfind("bus bandwidth")) << "grep -i 'Avg bus bandwidth': one line\n" << f;
  EXPECT_NE(f.find("# Speed-up             : 4 (geometric mean)"), std::string::npos) << f;
  EXPECT_NE(f.find("# Collective test concluded: dcp_a2a_lse_reduce_perf\n"), std::string::npos) << f;
  rows[1].fusedWrong = 3;
  f = tableFooter(rows, false);
  EXPECT_NE(f.find("# Out of bounds values : 3 FAILED\n"), std::string::npos) << f;
  EXPECT_EQ(f.find("baseline"), std::string::npos) << f;
}

TEST(PerfFloors, HeaderShowsEachFloorOrWhyNot) {
  Floors f;
  f.why = "-F 0";
  EXPECT_EQ(floorHeader(f, {}, 2), "# floors: not measured (-F 0)\n");
  f.measured = true;
  f.where = "into the peers' NCCL windows";
  f.sms = 132;
  f.roundTripUs = 1.5;
  f.roundTrip = "between ranks r and r^1";
  std::vector<Row> rows(2);
  rows[0].rows = 1;
  rows[0].bytes = 32768;
  rows[0].peerWriteUs = 2.5;
  rows[0].copyEngineUs = 6;
  rows[1].rows = 1024;
  rows[1].bytes = 33554432;
  rows[1].peerWriteUs = 100;  // 335.5 GB/s algbw, x 1/2 busbw at 2 ranks
  rows[1].copyEngineUs = 200;
  const std::string h = floorHeader(f, rows, 2);
  EXPECT_NE(h.find("(a) peer-write kernel, 132 SMs"), std::string::npos) << h;
  EXPECT_NE(h.find("2.50 us at 1 rows (32768 B)"), std::string::npos) << h;
  EXPECT_NE(h.find("167.8 GB/s busbw at 1024 rows"), std::string::npos) << h;
  EXPECT_NE(h.find("(b) copy engine"), std::string::npos) << h;
  EXPECT_NE(h.find("83.9 GB/s"), std::string::npos) << h;
  EXPECT_NE(h.find("(c) flag round trip between ranks r and r^1: 1.50 us"), std::string::npos) << h;
  EXPECT_EQ(h.find("local copies"), std::string::npos) << h;
  f.local = true;
  f.roundTripUs = -1;
  const std::string local = floorHeader(f, rows, 1);
  EXPECT_NE(local.find("local copies"), std::string::npos) << local;
  EXPECT_NE(local.find("round trip between ranks r and r^1: not measured"), std::string::npos) << local;
}

// Every number of a parsed document is finite (json::parse already refuses
// nan, inf and 1e999); the keys of each object are unique.
void expectClean(const json::Value& v, const std::string& where) {
  if (v.type == json::Value::Number) {
    EXPECT_TRUE(std::isfinite(v.number)) << where;
  }
  std::set<std::string> keys;
  for (const auto& [k, member] : v.object) {
    EXPECT_TRUE(keys.insert(k).second) << where << ": " << k << " twice";
    expectClean(member, where + "." + k);
  }
  for (size_t i = 0; i < v.array.size(); i++) expectClean(v.array[i], where + "[" + std::to_string(i) + "]");
}

const json::Value& at(const json::Value& v, const char* key) {
  static const json::Value none;
  const json::Value* m = v.find(key);
  EXPECT_NE(m, nullptr) << key;
  return m ? *m : none;
}

struct JsonCase {
  Args a;
  RunInfo run;
  Floors f;
  std::vector<Row> rows;
};

JsonCase jsonCase() {
  JsonCase c;
  std::string err;
  EXPECT_EQ(parse({"--min-rows", "1", "--max-rows", "4", "-P", "LL128", "-B", "2", "-J", "out \"x\".json"}, &c.a, &err),
            ParseResult::Ok);
  c.rows.resize(3);
  for (int i = 0; i < 3; i++) {
    c.rows[i].rows = 1 << i;
    c.rows[i].bytes = 32768 << i;
    c.rows[i].fusedUs = 1.5 * (i + 1);
    c.rows[i].fusedMedianUs = 1.25 * (i + 1);
    c.rows[i].fusedCpuUs = 0.5;
    c.rows[i].peerWriteUs = 0.25 * (i + 1);
    c.rows[i].copyEngineUs = 2;
    c.rows[i].fusedWrong = 0;
    c.rows[i].protocol = "LL128";
    fillBandwidths(&c.rows[i], 2);
  }
  c.run.mode = "ranks";
  c.run.device = "NVIDIA \"H200\"\n";
  c.run.nRanks = 2;
  c.run.placement.processes = 2;
  c.run.ncclVersion = 22809;
  c.run.dcpVersion = 200;
  c.run.host = "node\t1";
  c.run.startTime = "2026-01-02 03:04:05";
  c.run.endTime = "2026-01-02 03:04:06";
  c.run.env = {"NCCL_DEBUG=INFO", "CUDA_VISIBLE_DEVICES=0,1"};
  c.run.provider = "nccl-window";
  DeviceInfo d;
  d.rank = 1;
  d.pid = 42;
  d.device = 1;
  snprintf(d.hostname, sizeof(d.hostname), "node1");
  snprintf(d.busId, sizeof(d.busId), "0000:19:00.0");
  snprintf(d.name, sizeof(d.name), "NVIDIA H200");
  c.run.devices = {DeviceInfo(), d};
  c.f.measured = true;
  c.f.roundTripUs = 1.25;
  c.f.where = "into the peers' NCCL windows";
  return c;
}

TEST(PerfJson, IsValidJsonWithNcclTestsFieldsAndOurs) {
  const JsonCase c = jsonCase();
  const std::string j = jsonReport(c.a, c.run, c.f, c.rows);
  json::Value doc;
  std::string err;
  ASSERT_TRUE(json::parse(j, &doc, &err)) << err << "\n" << j;
  expectClean(doc, "$");
  // nccl-tests' -J fields (src/util.cu), in its order.
  const char* const ncclTests[] = {"version", "start_time", "args", "env", "nccl_version", "config", "results",
                                   "out_of_bounds", "average_bus_bandwidth"};
  size_t prev = 0;
  for (const char* k : ncclTests) {
    size_t pos = 0;
    while (pos < doc.object.size() && doc.object[pos].first != k) pos++;
    ASSERT_LT(pos, doc.object.size()) << k;
    EXPECT_GE(pos, prev) << k;
    prev = pos;
  }
  EXPECT_EQ(doc.object.back().first, "end_time");
  EXPECT_EQ(at(doc, "version").number, 3);
  EXPECT_EQ(at(doc, "start_time").string, "2026-01-02 03:04:05");
  EXPECT_EQ(at(doc, "end_time").string, "2026-01-02 03:04:06");
  ASSERT_EQ(at(doc, "args").array.size(), c.a.argv.size());
  EXPECT_EQ(at(doc, "args").array.back().string, "out \"x\".json");
  EXPECT_EQ(at(doc, "env").array.size(), 2u);
  EXPECT_EQ(at(doc, "nccl_version").number, 22809);
  const json::Value& cfg = at(doc, "config");
  EXPECT_EQ(at(cfg, "nthreads").number, 1);
  EXPECT_EQ(at(cfg, "ngpus").number, 1);
  EXPECT_EQ(at(cfg, "minimum_bytes").number, 32768);  // 1 row at 2 ranks, Hl 16, D 512, bf16
  EXPECT_EQ(at(cfg, "maximum_bytes").number, 4 * 32768);
  EXPECT_EQ(at(cfg, "step_factor").number, 2);
  EXPECT_EQ(at(cfg, "iterations").number, 20);
  EXPECT_EQ(at(cfg, "aggregated_iterations").number, 1);
  EXPECT_EQ(at(cfg, "graph").number, 0);
  EXPECT_EQ(at(cfg, "warmup_iters").number, 1);
  EXPECT_FALSE(at(cfg, "report_cputime").boolean);
  EXPECT_EQ(at(cfg, "validation").number, 1);
  const json::Value& devs = at(cfg, "devices");
  ASSERT_EQ(devs.array.size(), 2u);
  EXPECT_EQ(at(devs.array[1], "rank").number, 1);
  EXPECT_EQ(at(devs.array[1], "pid").number, 42);
  EXPECT_EQ(at(devs.array[1], "hostname").string, "node1");
  EXPECT_EQ(at(devs.array[1], "device_hex").string, "0000:19:00.0");
  EXPECT_EQ(at(devs.array[1], "device_info").string, "NVIDIA H200");
  const json::Value& results = at(doc, "results");
  ASSERT_EQ(results.array.size(), 3u);
  const json::Value& r2 = results.array[2];
  EXPECT_EQ(at(r2, "size").number, 4 * 32768);
  EXPECT_EQ(at(r2, "count").number, 2 * 32768);
  EXPECT_EQ(at(r2, "type").string, "bfloat16");
  EXPECT_EQ(at(r2, "rows").number, 4);
  EXPECT_EQ(at(r2, "protocol").string, "LL128");
  EXPECT_EQ(at(at(r2, "out_of_place"), "time").number, 4.5);  // the mean, nccl-tests' statistic
  EXPECT_EQ(at(at(r2, "out_of_place"), "median_time").number, 3.75);
  EXPECT_EQ(at(at(r2, "out_of_place"), "cpu_time").number, 0.5);
  EXPECT_EQ(at(at(r2, "out_of_place"), "nwrong").number, 0);
  EXPECT_EQ(at(r2, "peer_write_time").number, 0.75);
  EXPECT_EQ(at(r2, "floor_time").number, 0.75);
  EXPECT_EQ(at(r2, "x_floor").number, 6);
  EXPECT_EQ(at(r2, "in_place").type, json::Value::Null);
  EXPECT_EQ(at(at(r2, "baseline"), "nwrong").type, json::Value::Null);  // not checked
  EXPECT_EQ(at(at(doc, "out_of_bounds"), "count").number, 0);
  EXPECT_TRUE(at(at(doc, "out_of_bounds"), "okay").boolean);
  EXPECT_GT(at(at(doc, "average_bus_bandwidth"), "bandwidth").number, 0);
  // nccl-tests' errors list (NCCL's last error), after the bandwidth: empty.
  EXPECT_EQ(at(doc, "errors").type, json::Value::Array);
  EXPECT_TRUE(at(doc, "errors").array.empty());
  size_t bw = 0, errs = 0;
  for (size_t i = 0; i < doc.object.size(); i++) {
    if (doc.object[i].first == "average_bus_bandwidth") bw = i;
    if (doc.object[i].first == "errors") errs = i;
  }
  EXPECT_EQ(errs, bw + 1);
  // Ours, in nccl-tests' style: snake_case, no figure twice.
  EXPECT_EQ(at(doc, "protocol").string, "LL128");
  EXPECT_EQ(at(doc, "provider").string, "nccl-window");
  EXPECT_EQ(at(doc, "n_ranks").number, 2);
  EXPECT_EQ(at(doc, "processes").number, 2);
  EXPECT_EQ(at(doc, "nccl_version_string").string, "2.28.9");
  EXPECT_EQ(at(doc, "nccl_dcp_version_string").string, "0.2.0");
  // The source commit: git describe's (hex, maybe -dirty), -Dcommit's or "unknown".
  EXPECT_FALSE(at(doc, "commit").string.empty());
  EXPECT_EQ(at(doc, "nccl_headers_version_string").string, versionString(NCCL_VERSION_CODE));
  EXPECT_EQ(at(doc, "host").string, "node\t1");
  EXPECT_EQ(at(doc, "device").string, "NVIDIA \"H200\"\n");
  EXPECT_EQ(at(doc, "baseline").string, "a2a alone");
  EXPECT_EQ(at(doc, "time_statistic").string, "mean");
  EXPECT_EQ(at(doc, "head_dim").number, 512);
  EXPECT_EQ(at(doc, "local_heads").number, 16);
  EXPECT_EQ(at(doc, "bytes_per_row").number, 32768);
  EXPECT_EQ(at(at(doc, "floors"), "round_trip_time").number, 1.25);
  EXPECT_TRUE(at(at(doc, "floors"), "measured").boolean);
  EXPECT_EQ(at(r2, "rows").number, 4);
  EXPECT_EQ(at(r2, "protocol").string, "LL128");
  // Every key of the file is snake_case (lower case, digits, '_'), as nccl-tests' are.
  std::vector<const json::Value*> todo = {&doc};
  while (!todo.empty()) {
    const json::Value* v = todo.back();
    todo.pop_back();
    for (const auto& [k, member] : v->object) {
      for (char ch : k) EXPECT_TRUE(islower((unsigned char)ch) || isdigit((unsigned char)ch) || ch == '_') << k;
      todo.push_back(&member);
    }
    for (const json::Value& item : v->array) todo.push_back(&item);
  }
  // No top-level rows[] any more (its figures are in results[]), and the
  // duplicates of nccl-tests' config are gone.
  for (const char* gone : {"rows", "iters", "warmup", "threads", "ncclVersion", "nRanks"})
    EXPECT_EQ(doc.find(gone), nullptr) << gone;
  // What scripts and the other tests grep for: one result per line.
  size_t lines = 0;
  for (size_t p = j.find("\"out_of_place\": {\"time\""); p != std::string::npos;
       p = j.find("\"out_of_place\": {\"time\"", p + 1))
    lines++;
  EXPECT_EQ(lines, 3u);
  // The scatter mode; no baseline 2 outside NONE.
  EXPECT_EQ(at(doc, "scatter").string, "head");
  EXPECT_EQ(at(doc, "baseline2").type, json::Value::Null);
  EXPECT_EQ(at(r2, "baseline2").type, json::Value::Null);
}

// NONE: the mode, both baselines' names, and baseline 2's figures per size.
TEST(PerfJson, ScatterModeAndBaselineTwo) {
  for (int mode : {ncclDcpScatterHead, ncclDcpScatterToken, ncclDcpScatterNone}) {
    JsonCase c = jsonCase();
    c.a.scatter = mode;
    c.a.baseline = kBaselineFull;
    for (Row& r : c.rows) {
      r.base2Us = mode == ncclDcpScatterNone ? 2 * r.fusedUs : 0;
      r.base2Wrong = mode == ncclDcpScatterNone ? 0 : -1;
      fillBandwidths(&r, 2);
    }
    const std::string j = jsonReport(c.a, c.run, c.f, c.rows);
    json::Value doc;
    std::string err;
    ASSERT_TRUE(json::parse(j, &doc, &err)) << err << "\n" << j;
    expectClean(doc, "$");
    EXPECT_EQ(at(doc, "scatter").string, scatterName(mode));
    EXPECT_EQ(at(doc, "baseline").string, baselineName(kBaselineFull, mode));
    const json::Value& r2 = at(doc, "results").array[2];
    if (mode != ncclDcpScatterNone) {
      EXPECT_EQ(at(doc, "baseline2").type, json::Value::Null);
      EXPECT_EQ(at(r2, "baseline2").type, json::Value::Null);
      continue;
    }
    EXPECT_EQ(at(doc, "baseline2").string, baseline2Name(c.a));
    EXPECT_EQ(at(at(r2, "baseline2"), "time").number, 9);  // 2 x the fused 4.5 us
    EXPECT_EQ(at(at(r2, "baseline2"), "nwrong").number, 0);
    EXPECT_GT(at(at(r2, "baseline2"), "alg_bw").number, 0);
    EXPECT_EQ(at(r2, "speedup2").number, 2);
    EXPECT_EQ(at(doc, "speedup2_geomean").number, 2);
  }
}

// A NaN or an infinity (a time of 0 divided, a floor that never ran) is
// null: the file stays JSON.
TEST(PerfJson, NonFiniteNumbersAreNull) {
  JsonCase c = jsonCase();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  c.rows[0].fusedUs = nan;
  c.rows[0].speedup = inf;
  c.rows[1].baseAlgBw = -inf;
  c.f.roundTripUs = nan;
  c.run.copyGBps = inf;
  const std::string j = jsonReport(c.a, c.run, c.f, c.rows);
  json::Value doc;
  std::string err;
  ASSERT_TRUE(json::parse(j, &doc, &err)) << err << "\n" << j;
  expectClean(doc, "$");
  const json::Value& results = at(doc, "results");
  EXPECT_EQ(at(results.array[0], "speedup").type, json::Value::Null);
  EXPECT_EQ(at(at(results.array[1], "baseline"), "alg_bw").type, json::Value::Null);
  EXPECT_EQ(at(at(doc, "floors"), "round_trip_time").type, json::Value::Null);
  EXPECT_EQ(at(doc, "copy_bandwidth").type, json::Value::Null);
  EXPECT_EQ(at(at(at(doc, "results").array[0], "out_of_place"), "time").type, json::Value::Null);
  for (const char* word : {": nan", ": inf", ": -inf", ": NaN", ": Infinity"})
    EXPECT_EQ(j.find(word), std::string::npos) << word;
}

TEST(PerfJson, EnvironmentKeepsWhatShapesARun) {
  const char* env[] = {"HOME=/root", "NCCL_DEBUG=INFO", "AWS_SECRET_ACCESS_KEY=x", "CUDA_VISIBLE_DEVICES=0",
                       "NCCL_DCP_PROVIDER=auto", "OMPI_COMM_WORLD_SIZE=2", "LD_LIBRARY_PATH=/x", "LD_LIBRARY_PATHX=y",
                       "PATH=/bin", "HF_TOKEN=t", nullptr};
  EXPECT_EQ(relevantEnvironment(const_cast<char**>(env)),
            (std::vector<std::string>{"CUDA_VISIBLE_DEVICES=0", "LD_LIBRARY_PATH=/x", "NCCL_DCP_PROVIDER=auto",
                                      "NCCL_DEBUG=INFO", "OMPI_COMM_WORLD_SIZE=2"}));
  EXPECT_TRUE(relevantEnvironment(nullptr).empty());
  EXPECT_EQ(nowString().size(), 19u);  // "2026-01-02 03:04:05"
}

// Three threads of one process: every figure comes back in rank order on
// every thread, and the sums and maxima agree.
TEST(PerfTeam, ThreadsGatherInRankOrder) {
  const int n = 3;
  Team team(ProcessGroup{}, n);
  std::vector<std::vector<double>> got(n);
  std::vector<int64_t> sums(n), maxima(n);
  std::vector<int> ids(n);
  std::vector<std::thread> threads;
  for (int t = 0; t < n; t++)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; round++) {  // reuse of the shared buffers
        got[t] = team.allGather(t, std::vector<double>{10.0 * t + round, 10.0 * t + round + 0.5});
        sums[t] = team.sum(t, t + 1);
        maxima[t] = team.max(t, 7 * t);
        int id = t == 0 ? 42 + round : -1;
        team.broadcast(t, &id, sizeof(id));
        ids[t] = id - round;
        team.barrier(t);
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < n; t++) {
    EXPECT_EQ(got[t], (std::vector<double>{49, 49.5, 59, 59.5, 69, 69.5})) << t;
    EXPECT_EQ(sums[t], 6) << t;
    EXPECT_EQ(maxima[t], 14) << t;
    EXPECT_EQ(ids[t], 42) << t;
  }
  EXPECT_TRUE(team.leader(0));
  EXPECT_FALSE(team.leader(1));
}

TEST(PerfTeam, OneProcessWithoutALauncher) {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"})
    unsetenv(v);
  ProcessGroup g;
  g.processes = 7;
  std::string err;
  EXPECT_TRUE(startProcesses(nullptr, nullptr, &g, &err)) << err;
  EXPECT_EQ(g.processes, 1);
  EXPECT_EQ(g.process, 0);
  stopProcesses();
  if (!builtWithMpi()) {  // mpirun -np 2 of a binary without MPI: refused, not run twice
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    EXPECT_FALSE(startProcesses(nullptr, nullptr, &g, &err));
    EXPECT_NE(err.find("-Dmpi"), std::string::npos) << err;
    unsetenv("OMPI_COMM_WORLD_SIZE");
  }
}

// ---- -c's check (perf/inputs.h): every rank's outputs counted on a thread
// of its own against the reference of the mode.

// Every rank's outputs of a `rows`-row call as the reference computes them
// from the perf inputs (with every sign flipped when `negatedInputs`), in
// the layout countWrong takes.
std::vector<Inputs::RankOutputs> referenceOutputs(const Inputs& in, int rows, Wire wire = Wire::Native,
                                                  bool negatedInputs = false) {
  const Config& cfg = in.config();
  const int n = in.nRanks();
  CallShape shape;
  EXPECT_EQ(resolveCallArgs(nullptr, cfg, n, rows, &shape), ncclSuccess);
  std::vector<Inputs::RankOutputs> outs(n);
  std::vector<CallBuffers> bufs(n);
  std::vector<std::vector<uint8_t>> partials(n);
  for (int r = 0; r < n; r++) {
    const size_t units = (size_t)outRowsOf(shape, r) * shape.heads;
    outs[r] = {r, std::vector<uint8_t>(units * cfg.headDim * cfg.eltSize), std::vector<float>(units)};
    partials[r] = in.partialOut(r);
    if (negatedInputs) flipSignBits(partials[r].data(), partials[r].size(), cfg.eltSize);
    bufs[r] = {partials[r].data(), const_cast<float*>(in.partialLse(r).data()), outs[r].out.data(),
               outs[r].outLse.data()};
  }
  referenceA2aLseReduce(cfg, n, rows, packedStrides(cfg, n), bufs.data(), &shape, wire);
  return outs;
}

// fp8 on the wire with NONE: each rank's own share stays exact, so each
// rank has a reference of its own (one shared by all counted millions of
// elements wrong on every rank but the last).
TEST(PerfInputs, NoneOnTheFp8WireHasAReferencePerRank) {
  ncclDcpConfig_t c = test::withScatter(test::makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2), ncclDcpScatterNone);
  c.wire = ncclDcpWireFp8E4m3;
  Inputs in(test::resolved(c), 4, 9);
  const std::vector<Inputs::RankOutputs> outs = referenceOutputs(in, 9, Wire::Fp8E4m3);
  ASSERT_NE(outs[0].out, outs[3].out) << "the ranks' fp8 outputs are alike: the test shows nothing";
  EXPECT_EQ(in.countWrong(9, outs, Wire::Fp8E4m3), 0);
  EXPECT_EQ(in.countWrong(9, referenceOutputs(in, 9)), 0);  // the native wire: one reference
}

// -c's checked calls read the inputs with every sign flipped, every other
// call (perf/sweep.cc): in every mode, on both wires and for every element
// type each carries, the outputs of flipped inputs flipped back are the
// reference's (equal numbers: a sum that cancels exactly is +0 either
// way), the LSEs bit for bit; left unflipped they are wrong, so a checked
// call that read the data of the call before it would count.
TEST(PerfInputs, FlippedInputsFlipTheOutputsExactly) {
  for (int scatter : {(int)ncclDcpScatterHead, (int)ncclDcpScatterToken, (int)ncclDcpScatterNone})
    for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16, ncclFloat32})
      for (Wire wire : {Wire::Native, Wire::Fp8E4m3}) {
        if (wire == Wire::Fp8E4m3 && dtype == ncclFloat32) continue;  // fp8 carries 16-bit types alone
        SCOPED_TRACE(std::string(scatterName(scatter)) + " dtype " + std::to_string((int)dtype) +
                     (wire == Wire::Native ? " native" : " fp8"));
        ncclDcpConfig_t c = test::withScatter(test::makeConfig(64, 2, dtype, ncclDcpLseBase2), scatter);
        if (wire == Wire::Fp8E4m3) c.wire = ncclDcpWireFp8E4m3;
        Inputs in(test::resolved(c), 4, 9);
        const std::vector<Inputs::RankOutputs> want = referenceOutputs(in, 9, wire);
        std::vector<Inputs::RankOutputs> got = referenceOutputs(in, 9, wire, true);
        EXPECT_GT(in.countWrong(9, got, wire), 0) << "the outputs do not depend on the inputs' signs";
        for (Inputs::RankOutputs& o : got) flipSignBits(o.out.data(), o.out.size(), in.config().eltSize);
        EXPECT_EQ(in.countWrong(9, got, wire), 0);
        for (size_t r = 0; r < got.size(); r++) {
          EXPECT_EQ(got[r].outLse, want[r].outLse) << "rank " << r;
          size_t differ = 0;
          for (size_t i = 0; i < want[r].out.size() / in.config().eltSize; i++)
            differ += loadElement(dtype, got[r].out.data(), i) != loadElement(dtype, want[r].out.data(), i);
          EXPECT_EQ(differ, 0u) << "rank " << r;
        }
      }
}

// 2.0 at element i of a bf16 output whose merges lie in [-1, 1]: wrong.
void spoil(Inputs::RankOutputs* o, size_t i) {
  const uint16_t two = 0x4000;
  memcpy(&o->out[i * 2], &two, 2);
}

Config perfConfig(int scatter) {
  return test::resolved(test::withScatter(test::makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2), scatter));
}

TEST(PerfInputs, EveryRanksWrongElementsAreCountedOnce) {
  for (int scatter : {(int)ncclDcpScatterHead, (int)ncclDcpScatterToken, (int)ncclDcpScatterNone}) {
    SCOPED_TRACE(scatterName(scatter));
    Inputs in(perfConfig(scatter), 4, 13);
    std::vector<Inputs::RankOutputs> outs = referenceOutputs(in, 11);
    EXPECT_EQ(in.countWrong(11, outs), 0);
    spoil(&outs[1], 0);
    spoil(&outs[3], outs[3].out.size() / 2 - 1);  // the last element
    outs[2].outLse[1] += 1.f;
    EXPECT_EQ(in.countWrong(11, outs), 3);
    // Another size: its own reference, not the last one.
    EXPECT_EQ(in.countWrong(5, referenceOutputs(in, 5)), 0);
  }
}

TEST(PerfInputs, ThreadsOfAProcessCheckTogether) {
  Inputs in(perfConfig(ncclDcpScatterHead), 4, 16);
  const std::vector<Inputs::RankOutputs> right = referenceOutputs(in, 16);
  std::vector<Inputs::RankOutputs> wrong = right;
  spoil(&wrong[0], 3);
  int64_t counts[4] = {-1, -1, -1, -1};
  std::vector<std::thread> threads;  // as rank mode's team threads: one rank each
  for (int t = 0; t < 4; t++)
    threads.emplace_back([&, t] { counts[t] = in.countWrong(16, {(t == 0 ? wrong : right)[t]}); });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counts[0], 1);
  EXPECT_EQ(counts[1] + counts[2] + counts[3], 0);
}

// NONE's baseline 2: rank-major [cp][B][Hl] heads, compared with [B][H].
TEST(PerfInputs, GatheredHeadsAreComparedInTheirOwnOrder) {
  const int n = 4, rows = 7, Hl = 2, D = 64;
  Inputs in(perfConfig(ncclDcpScatterNone), n, rows);
  const std::vector<Inputs::RankOutputs> outs = referenceOutputs(in, rows);
  std::vector<Inputs::RankOutputs> gathered(n);
  for (int r = 0; r < n; r++) {
    gathered[r] = {r, std::vector<uint8_t>(outs[r].out.size()), std::vector<float>(outs[r].outLse.size())};
    for (int s = 0; s < n; s++)
      for (int b = 0; b < rows; b++)
        for (int j = 0; j < Hl; j++) {
          const size_t from = (size_t)b * n * Hl + s * Hl + j, to = ((size_t)s * rows + b) * Hl + j;
          memcpy(&gathered[r].out[to * D * 2], &outs[r].out[from * D * 2], D * 2);
          gathered[r].outLse[to] = outs[r].outLse[from];
        }
  }
  EXPECT_EQ(in.countWrongGathered(rows, gathered), 0);
  EXPECT_GT(in.countWrongGathered(rows, outs), 0) << "the [B][H] order passed as gathered";
  spoil(&gathered[2], 5);
  EXPECT_EQ(in.countWrongGathered(rows, gathered), 1);
}

// Run by the test below under mpirun: 2 processes x 2 threads, the same
// gathers as one process of 3 threads (ranks ordered process by process).
TEST(PerfTeamMpi, DISABLED_TwoProcessesTwoThreads) {
  ProcessGroup g;
  std::string err;
  ASSERT_TRUE(startProcesses(nullptr, nullptr, &g, &err)) << err;
  ASSERT_EQ(g.processes, 2);
  Team team(g, 2);
  std::vector<std::vector<double>> got(2);
  std::vector<int64_t> sums(2);
  std::vector<int> ids(2);
  auto body = [&](int t) {
    got[t] = team.allGather(t, std::vector<double>{100.0 * g.process + t});
    sums[t] = team.sum(t, 1);
    ids[t] = team.leader(t) ? 4242 : 0;
    team.broadcast(t, &ids[t], sizeof(int));
    team.barrier(t);
  };
  std::thread other(body, 1);
  body(0);
  other.join();
  stopProcesses();
  for (int t = 0; t < 2; t++) {
    EXPECT_EQ(got[t], (std::vector<double>{0, 1, 100, 101})) << t;
    EXPECT_EQ(sums[t], 4) << t;
    EXPECT_EQ(ids[t], 4242) << t;
  }
}

TEST(PerfTeamMpi, ProcessesAndThreadsGatherInRankOrder) {
  if (!builtWithMpi()) GTEST_SKIP() << "built without MPI (meson -Dmpi: needs mpi.h and libmpi)";
  if (system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not on PATH";
  char self[4096] = {0};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  // Open MPI in a container: as root, and without cross-process memory attach.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  const std::string cmd = std::string("timeout 120 mpirun -np 2 --oversubscribe ") + self +
                          " --gtest_color=no --gtest_also_run_disabled_tests --gtest_filter=PerfTeamMpi.DISABLED_*";
  const test::CommandResult run = test::runCommand(cmd);
  const std::string& out = run.output;
  EXPECT_EQ(run.status, 0) << cmd << "\n" << out;
  size_t passed = 0;
  for (size_t at = out.find("[  PASSED  ] 1 test"); at != std::string::npos; at = out.find("[  PASSED  ] 1 test", at + 1))
    passed++;
  EXPECT_EQ(passed, 2u) << out;  // both processes
}

}  // namespace
}  // namespace perf
}  // namespace nccl_dcp
