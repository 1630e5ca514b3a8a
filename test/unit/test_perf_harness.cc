// The perf harness's host parts (perf/harness.h): nccl-tests flags, the
// batch sweep, the table and the JSON report.
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
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
}

TEST(PerfArgs, EveryFlagParses) {
  Args a;
  std::string err;
  ASSERT_EQ(parse({"-b", "8", "-e", "256", "-f", "4", "-g", "2", "-t", "4", "-n", "50", "-w", "3", "-c", "2", "-G",
                   "0", "-a", "3", "-d", "fp16", "-D", "128", "-H", "4", "-P", "simple", "-L", "e", "-V", "8", "-m",
                   "64", "-B", "0", "-J", "out.json"},
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
  EXPECT_EQ(a.virtualRanks, 8);
  EXPECT_EQ(a.maxBatch, 64);
  EXPECT_EQ(a.baseline, 0);
  EXPECT_EQ(a.json, "out.json");
}

TEST(PerfArgs, HelpAndErrorsNameTheFlag) {
  Args a;
  std::string err;
  EXPECT_EQ(parse({"-h"}, &a, &err), ParseResult::Help);
  EXPECT_EQ(parse({"--help"}, &a, &err), ParseResult::Help);
  const std::vector<std::pair<std::vector<const char*>, const char*>> bad = {
      {{"-x", "1"}, "-x"},        {{"-b"}, "-b"},           {{"-b", "abc"}, "-b"},     {{"-f", "1"}, "-f"},
      {{"-d", "int8"}, "-d"},     {{"-P", "fast"}, "-P"},   {{"-L", "10"}, "-L"},      {{"-V", "17"}, "-V"},
      {{"-a", "4"}, "-a"},        {{"-g", "0"}, "-g"},      {{"-b", "64", "-e", "8"}, "-b"}, {{"extra"}, "extra"}};
  for (const auto& [argv, flag] : bad) {
    err.clear();
    EXPECT_EQ(parse(argv, &a, &err), ParseResult::Error) << argv[0];
    EXPECT_NE(err.find(flag), std::string::npos) << err;
  }
}

TEST(PerfArgs, UsageDocumentsEveryFlag) {
  const std::string u = usage("p");
  for (const char* f : {"-b", "-e", "-f", "-i", "-g", "-t", "-n", "-w", "-c", "-G", "-a", "-d", "-D", "-H", "-P", "-L",
                        "-V", "-m", "-B", "-J", "-h"})
    EXPECT_NE(u.find(std::string("  ") + f + " "), std::string::npos) << f;
  EXPECT_NE(u.find("3 no GPU"), std::string::npos);
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

TEST(PerfTable, BandwidthsAndSpeedup) {
  Row r;
  r.rows = 16;
  r.bytes = 2000000;
  r.fusedUs = 10;
  r.baseUs = 25;
  fillBandwidths(&r, 8);
  EXPECT_DOUBLE_EQ(r.fusedAlgBw, 200.0);  // 2 MB in 10 us
  EXPECT_DOUBLE_EQ(r.fusedBusBw, 175.0);  // x 7/8, as nccl-tests' alltoall
  EXPECT_DOUBLE_EQ(r.baseAlgBw, 80.0);
  EXPECT_DOUBLE_EQ(r.speedup, 2.5);
  fillBandwidths(&r, 1);
  EXPECT_DOUBLE_EQ(r.fusedBusBw, r.fusedAlgBw);
}

TEST(PerfTable, RowsLineUpWithTheHeader) {
  Args a;
  Row r;
  r.rows = 1024;
  r.bytes = 134217728;
  r.fusedUs = 2059.0;
  r.fusedWrong = 0;
  r.baseUs = 856.28;
  r.baseWrong = -1;
  r.idealUs = 738.0;
  fillBandwidths(&r, 8);
  const std::string h = tableHeader(a, true), line = formatRow(r, true, true);
  const std::string lastHeader = h.substr(h.rfind('\n', h.size() - 2) + 1);
  EXPECT_EQ(line.size(), lastHeader.size()) << "\n" << h << line;
  EXPECT_NE(line.find("2059.00"), std::string::npos) << line;
  EXPECT_NE(line.find("N/A"), std::string::npos) << line;  // baseline not checked
  EXPECT_NE(line.find("0.42"), std::string::npos) << line;  // speedup
  EXPECT_NE(line.find("2.79"), std::string::npos) << line;  // x ideal
  const std::string noBase = formatRow(r, false, false);
  EXPECT_NE(noBase.find(" - "), std::string::npos) << noBase;
}

TEST(PerfJson, CarriesEveryRow) {
  Args a;
  a.protocol = ncclDcpProtoLL128;
  std::vector<Row> rows(3);
  for (int i = 0; i < 3; i++) {
    rows[i].rows = 1 << i;
    rows[i].fusedUs = 1.5 * (i + 1);
  }
  const std::string j = jsonReport(a, "loopback", "NVIDIA H200", 8, 4200, rows);
  EXPECT_NE(j.find("\"protocol\": \"LL128\""), std::string::npos);
  EXPECT_NE(j.find("\"nRanks\": 8"), std::string::npos);
  EXPECT_NE(j.find("\"rows\": 4,"), std::string::npos);
  EXPECT_NE(j.find("\"fusedUs\": 4.5"), std::string::npos);
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(j[j.size() - 2], '}');
}

}  // namespace
}  // namespace perf
}  // namespace nccl_dcp
