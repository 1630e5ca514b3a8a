// The perf harness's host parts (perf/harness.h, perf/team.h): nccl-tests
// flags, the batch sweep, rank placement, aggregation across ranks, the
// rows, the table, the floors' header, the JSON report, and the team of
// threads (x processes) that gathers every rank's figures.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "team.h"
#include "test_util.h"

namespace nccl_dcp {
namespace perf {
namespace {

ParseResult parse(std::vector<const char*> argv, Args* a, std::string* err) {
  argv.insert(argv.begin(), "dcp_a2a_lse_reduce_perf");
  return parseArgs((int)argv.size(), const_cast<char**>(argv.data()), a, err);
}

TEST(PerfArgs, DefaultsAreTheDesignSweep) {
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
  EXPECT_EQ(a.graphCalls, 10);
}

TEST(PerfArgs, EveryFlagParses) {
  Args a;
  std::string err;
  ASSERT_EQ(parse({"-b", "8", "-e", "256", "-f", "4", "-g", "2", "-t", "4", "-n", "50", "-w", "3", "-c", "2", "-G",
                   "0", "-a", "3", "-d", "fp16", "-D", "128", "-H", "4", "-P", "simple", "-L", "e", "-m", "64", "-B",
                   "2", "-F", "0", "-J", "out.json"},
                  &a, &err),
            ParseResult::Ok)
      << err;
  EXPECT_EQ(a.minRows, 8);
  EXPECT_EQ(a.maxRows, 256);
  EXPECT_EQ(a.factor, 4);
  EXPECT_EQ(a.gpusPerThread, 2);
  EXPECT_EQ(a.threads, 4);
  EXPECT_EQ(a.iters, 50);
  EXPECT_EQ(a.warmup, 3);
  EXPECT_EQ(a.check, 2);
  EXPECT_EQ(a.graphCalls, 0);
  EXPECT_EQ(a.aggregate, 3);
  EXPECT_EQ(a.dtype, ncclFloat16);
  EXPECT_EQ(a.headDim, 128);
  EXPECT_EQ(a.localHeads, 4);
  EXPECT_EQ(a.protocol, ncclDcpProtoSimple);
  EXPECT_EQ(a.lseBase, ncclDcpLseBaseE);
  EXPECT_EQ(a.maxBatch, 64);
  EXPECT_EQ(a.baseline, kBaselineAllToAll);
  EXPECT_EQ(a.floors, 0);
  EXPECT_EQ(a.json, "out.json");
  Args v;
  ASSERT_EQ(parse({"-V", "8", "-i", "16"}, &v, &err), ParseResult::Ok) << err;
  EXPECT_EQ(v.virtualRanks, 8);
  EXPECT_EQ(v.step, 16);
}

TEST(PerfArgs, HelpAndErrorsNameTheFlag) {
  std::string err;
  Args h;
  EXPECT_EQ(parse({"-h"}, &h, &err), ParseResult::Help);
  EXPECT_EQ(parse({"--help"}, &h, &err), ParseResult::Help);
  const std::vector<std::pair<std::vector<const char*>, const char*>> bad = {
      {{"-x", "1"}, "-x"},        {{"-b"}, "-b"},          {{"-b", "abc"}, "-b"},      {{"-f", "1"}, "-f"},
      {{"-d", "int8"}, "-d"},     {{"-P", "fast"}, "-P"},  {{"-L", "10"}, "-L"},       {{"-V", "17"}, "-V"},
      {{"-a", "4"}, "-a"},        {{"-g", "0"}, "-g"},     {{"-B", "3"}, "-B"},        {{"-F", "2"}, "-F"},
      {{"-b", "64", "-e", "8"}, "-b"}, {{"extra"}, "extra"}, {{"-V", "8", "-t", "2"}, "-V"},
      {{"-V", "4", "-g", "2"}, "-t and -g"}};
  for (const auto& [argv, flag] : bad) {
    Args a;
    err.clear();
    EXPECT_EQ(parse(argv, &a, &err), ParseResult::Error) << argv[0];
    EXPECT_NE(err.find(flag), std::string::npos) << err;
  }
}

TEST(PerfArgs, UsageDocumentsEveryFlagAndMpirun) {
  const std::string u = usage("p");
  for (const char* f : {"-b", "-e", "-f", "-i", "-g", "-t", "-n", "-w", "-c", "-G", "-a", "-d", "-D", "-H", "-P", "-L",
                        "-V", "-m", "-B", "-F", "-J", "-h"})
    EXPECT_NE(u.find(std::string("  ") + f + " "), std::string::npos) << f;
  EXPECT_NE(u.find("3 no GPU"), std::string::npos);
  EXPECT_NE(u.find("mpirun -np"), std::string::npos);
  EXPECT_NE(u.find("alltoall_perf"), std::string::npos);  // what -B 2 is for
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
  s.fusedWrong = 0;
  s.baseWrong = 2;
  const Row r = makeRow(a, 32, 1 << 20, 2, s, 0);
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
  fillBandwidths(&r, 8);
  for (int base = 0; base < 2; base++)
    for (int ideal = 0; ideal < 2; ideal++)
      for (int floor = 0; floor < 2; floor++) {
        Args a;
        a.baseline = base ? kBaselineFull : kBaselineOff;
        const Columns c = columnsOf(a, ideal, floor);
        const std::string h = tableHeader(a, c), line = formatRow(r, c);
        const std::string lastHeader = h.substr(h.rfind('\n', h.size() - 2) + 1);
        const std::string names = h.substr(h.rfind('\n', h.rfind('\n', h.size() - 2) - 1) + 1);
        EXPECT_EQ(line.size(), lastHeader.size()) << "\n" << h << line;
        EXPECT_NE(line.find("2059.00"), std::string::npos) << line;
        EXPECT_EQ(names.find("xIdeal") != std::string::npos, (bool)ideal) << names;
        EXPECT_EQ(names.find("xFloor") != std::string::npos, (bool)floor) << names;
        EXPECT_EQ(line.find(" - ") != std::string::npos, !base) << line;
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

TEST(PerfTable, HeaderNamesTheBaseline) {
  Args a;
  EXPECT_NE(tableHeader(a, Columns()).find("a2a + combine"), std::string::npos);
  a.baseline = kBaselineAllToAll;
  EXPECT_NE(tableHeader(a, Columns()).find("a2a alone"), std::string::npos);
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

TEST(PerfJson, CarriesEveryRowAndTheFloors) {
  Args a;
  a.protocol = ncclDcpProtoLL128;
  a.baseline = kBaselineAllToAll;
  std::vector<Row> rows(3);
  for (int i = 0; i < 3; i++) {
    rows[i].rows = 1 << i;
    rows[i].fusedUs = 1.5 * (i + 1);
    rows[i].peerWriteUs = 0.25 * (i + 1);
    rows[i].copyEngineUs = 2;
    fillBandwidths(&rows[i], 2);
  }
  RunInfo run;
  run.mode = "ranks";
  run.device = "NVIDIA \"H200\"";
  run.nRanks = 2;
  run.placement.processes = 2;
  run.ncclVersion = 22809;
  Floors f;
  f.measured = true;
  f.roundTripUs = 1.25;
  f.where = "into the peers' NCCL windows";
  const std::string j = jsonReport(a, run, f, rows);
  for (const char* want : {"\"protocol\": \"LL128\"", "\"nRanks\": 2", "\"processes\": 2", "\"ncclVersion\": 22809",
                           "\"baseline\": \"a2a alone\"", "\"rows\": 4,", "\"fusedUs\": 4.5", "\"peerWriteUs\": 0.75",
                           "\"copyEngineUs\": 2", "\"floorUs\": 0.75", "\"xFloor\": 6", "\"roundTripUs\": 1.25",
                           "\"measured\": true", "\"device\": \"NVIDIA \\\"H200\\\"\""})
    EXPECT_NE(j.find(want), std::string::npos) << want << "\n" << j;
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(j[j.size() - 2], '}');
  int depth = 0;  // braces and brackets balance
  for (char ch : j) depth += (ch == '{' || ch == '[') - (ch == '}' || ch == ']');
  EXPECT_EQ(depth, 0);
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
                          " --gtest_color=no --gtest_also_run_disabled_tests --gtest_filter=PerfTeamMpi.DISABLED_* 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(status, 0) << cmd << "\n" << out;
  size_t passed = 0;
  for (size_t at = out.find("[  PASSED  ] 1 test"); at != std::string::npos; at = out.find("[  PASSED  ] 1 test", at + 1))
    passed++;
  EXPECT_EQ(passed, 2u) << out;  // both processes
}

}  // namespace
}  // namespace perf
}  // namespace nccl_dcp
