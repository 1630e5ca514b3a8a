/*************************************************************************
 * The perf binary end to end (issue 9): dcp_a2a_lse_reduce_perf
 * --min-rows 1 --max-rows 64 -m 10 -G 1 -B 1 -c 1 for every protocol, in each launch mode the
 * machine has GPUs for: one rank (-t 1, so the 1-GPU machine runs it too),
 * one thread per GPU (-t 2), one thread driving two GPUs (-g 2), one
 * process per GPU (mpirun -np 2, when built with MPI: it skips without, or
 * fails where NCCL_DCP_REQUIRE_GPU requires 2 GPUs), and loopback (--virtual-ranks 4).
 * Then each scatter mode (--scatter head|token|none, AUTO) with its own
 * baselines, checked (-c 1) against the reference of that mode: loopback at
 * 4 and 3 virtual ranks (3: uneven splits, and ranks of no rows at 1 and 2
 * rows), one rank, two threads, two MPI processes, two threads on the
 * fallback path.
 * A run fails on a non-zero exit, a missing row, a table printed by more
 * than one process, or any #wrong (fused, baseline, NONE's baseline 2), or
 * a check that did not run. DCP_PERF_BINARY names the binary (set by meson
 * test).
 ************************************************************************/
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

struct Launch {
  const char* name;
  int gpus;
  const char* flags;
  bool mpi;  // mpirun -np <gpus>
};

void PrintTo(const Launch& l, std::ostream* os) { *os << l.name; }

const Launch kLaunches[] = {
    {"t1", 1, "-t 1", false}, {"t2", 2, "-t 2", false}, {"g2", 2, "-g 2", false},
    {"mpi2", 2, "-t 1", true}, {"loopbackV4", 1, "--virtual-ranks 4", false},
    // The cuda-ipc provider: processes open each other's workspaces with
    // cudaIpcOpenMemHandle, threads reach them by peer access.
    {"mpi2ipc", 2, "-t 1 --provider cuda-ipc", true}, {"t2ipc", 2, "-t 2 --provider cuda-ipc", false},
};
const char* const kProtocols[] = {"AUTO", "LL", "LL128", "SIMPLE"};
constexpr int kSizes = 7;  // --min-rows 1 --max-rows 64 -f 2
// A graph of 10 calls replayed once per iteration, as a decode step runs
// (nccl-tests' defaults, -m 1 -G 0, time single eager calls).
constexpr const char* kSweep = " --min-rows 1 --max-rows 64 -m 10 -G 1 -B 1 -c 1 ";

// The wrong-element count of every results[] entry's timing `key`
// (out_of_place: the fused call; baseline; baseline2), in file order: -1
// where the count is null (not checked) or the timing itself is null (not
// run). Each timing is one {...} on one line of the report.
std::vector<long long> wrongCounts(const std::string& json, const std::string& key) {
  std::vector<long long> v;
  const size_t from = json.find("\"results\": ["), to = json.find("\"out_of_bounds\"");
  if (from == std::string::npos || to == std::string::npos || to < from) return v;
  const std::string results = json.substr(from, to - from);
  const std::regex re("\"" + key + "\": (null|\\{[^}]*\"nwrong\": (null|-?[0-9]+)[^}]*\\})");
  for (std::sregex_iterator it(results.begin(), results.end(), re), end; it != end; ++it) {
    const std::string n = (*it)[2];
    v.push_back(n.empty() || n == "null" ? -1 : std::stoll(n));
  }
  return v;
}

// The table's data lines: a row count first.
int tableRows(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  int n = 0;
  const std::regex row("^ +[0-9]+ +[0-9]+ +[0-9.]+ .*");
  while (std::getline(in, line)) n += std::regex_match(line, row);
  return n;
}

// Runs the binary in launch l with `flags` (kSweep and
// a JSON report added) and checks what every run must show; the report's
// text comes back in *report. Skips (GTEST_SKIP in the caller's body) where
// the machine lacks the GPUs or the MPI launch.
void runPerf(const Launch& l, const std::string& flags, std::string* output, std::string* report, bool* skipped) {
  *skipped = true;
  const char* binary = getenv("DCP_PERF_BINARY");
  ASSERT_NE(binary, nullptr) << "DCP_PERF_BINARY is not set (run through meson test)";
  // What the MPI launch lacks here, if anything. Where the GPUs it needs are
  // required (NCCL_DCP_REQUIRE_GPU), it is required too: a skip would leave
  // the MPI path untested on the GPU machine.
  std::string noMpi;
  if (l.mpi) {
    const char* built = getenv("DCP_PERF_MPI");
    if (!built || std::string(built) != "1")
      noMpi = "the perf binary was built without MPI (meson -Dmpi=enabled, with libopenmpi-dev)";
    else if (system("command -v mpirun >/dev/null 2>&1") != 0)
      noMpi = "mpirun is not on PATH (openmpi-bin)";
    int required = 0;
    std::string why;
    if (!noMpi.empty() && parseRequiredGpus(getenv("NCCL_DCP_REQUIRE_GPU"), &required, &why) && required >= l.gpus)
      FAIL() << "NCCL_DCP_REQUIRE_GPU=" << required << " requires the MPI launch (mpirun -np " << l.gpus << "), but "
             << noMpi;
  }
  DCP_REQUIRE_GPUS(l.gpus);
  if (!noMpi.empty()) GTEST_SKIP() << noMpi;
  *skipped = false;
  std::string launcher = "timeout 900 ";
  if (l.mpi) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);  // containers run as root
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    launcher += "mpirun -np " + std::to_string(l.gpus) + " --bind-to none ";
  }
  char json[] = "/tmp/dcp_perf_binary_XXXXXX";
  const int fd = mkstemp(json);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string cmd = launcher + binary + " " + l.flags + kSweep + flags + " -J " + json;
  const CommandResult r = runCommand(cmd);
  std::ifstream f(json);
  report->assign((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  unlink(json);
  *output = cmd + "\n" + r.output;
  SCOPED_TRACE(*output);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(tableRows(r.output), kSizes);
  size_t titles = 0;  // only one process prints the table
  for (size_t at = r.output.find("# nccl-dcp "); at != std::string::npos; at = r.output.find("# nccl-dcp ", at + 1))
    titles++;
  EXPECT_EQ(titles, 1u);
  // Every size checked (-1: not checked) and right, fused and baseline.
  for (const char* key : {"out_of_place", "baseline"}) {
    const std::vector<long long> wrong = wrongCounts(*report, key);
    EXPECT_EQ(wrong.size(), (size_t)kSizes) << key;
    for (long long w : wrong) EXPECT_EQ(w, 0) << key;
  }
}

// A (launch, protocol or mode) case's name: "<launch>_<value>".
std::string launchAndValueName(const testing::TestParamInfo<std::tuple<Launch, const char*>>& i) {
  return std::string(std::get<0>(i.param).name) + "_" + std::get<1>(i.param);
}

class PerfBinary : public testing::TestWithParam<std::tuple<Launch, const char*>> {};

TEST_P(PerfBinary, RunsEverySizeWithoutWrongResults) {
  const Launch& l = std::get<0>(GetParam());
  std::string output, report;
  bool skipped = true;
  runPerf(l, std::string("-P ") + std::get<1>(GetParam()), &output, &report, &skipped);
}

INSTANTIATE_TEST_SUITE_P(LaunchesAndProtocols, PerfBinary,
                         testing::Combine(testing::ValuesIn(kLaunches), testing::ValuesIn(kProtocols)),
                         launchAndValueName);

// --scatter: each mode's fused call and baselines, checked against that
// mode's reference. NONE has baseline 2 (the HEAD call + an all-gather of
// the merged heads), checked too.
const Launch kScatterLaunches[] = {
    {"loopbackV4", 1, "--virtual-ranks 4", false}, {"loopbackV3", 1, "--virtual-ranks 3", false},
    {"t1", 1, "-t 1", false}, {"t2", 2, "-t 2", false}, {"mpi2", 2, "-t 1", true},
    {"t2fallback", 2, "-t 2 --provider fallback", false},
};
const char* const kScatterModes[] = {"head", "token", "none"};

class PerfScatter : public testing::TestWithParam<std::tuple<Launch, const char*>> {};

TEST_P(PerfScatter, EveryModeAgainstItsReferenceAndBaselines) {
  const Launch& l = std::get<0>(GetParam());
  const std::string mode = std::get<1>(GetParam());
  std::string output, report;
  bool skipped = true;
  runPerf(l, "-P AUTO --scatter " + mode, &output, &report, &skipped);
  if (skipped || HasFatalFailure()) return;
  SCOPED_TRACE(output);
  EXPECT_NE(output.find("scatter " + mode), std::string::npos);  // the table's header names the mode
  EXPECT_NE(report.find("\"scatter\": \"" + mode + "\""), std::string::npos);
  const std::vector<long long> base2 = wrongCounts(report, "baseline2");
  EXPECT_EQ(base2.size(), (size_t)kSizes);
  for (long long w : base2) EXPECT_EQ(w, mode == "none" ? 0 : -1) << "baseline2";  // NONE: run and checked
  EXPECT_EQ(output.find("baseline 2") != std::string::npos, mode == "none");
}

INSTANTIATE_TEST_SUITE_P(LaunchesAndModes, PerfScatter,
                         testing::Combine(testing::ValuesIn(kScatterLaunches), testing::ValuesIn(kScatterModes)),
                         launchAndValueName);

// -B 3: fp8 on the wire against the same call on the native wire, both
// timed in one process (no second process's clocks and placement in the
// ratio) and each checked against its wire's reference (runPerf: every
// baseline count 0).
const Launch kWireLaunches[] = {
    {"loopbackV4", 1, "--virtual-ranks 4", false}, {"t1", 1, "-t 1", false}, {"t2", 2, "-t 2", false},
    {"t2fallback", 2, "-t 2 --provider fallback", false},
};

class PerfWireBaseline : public testing::TestWithParam<std::tuple<Launch, const char*>> {};

TEST_P(PerfWireBaseline, Fp8AgainstTheNativeWireInOneProcess) {
  const Launch& l = std::get<0>(GetParam());
  std::string output, report;
  bool skipped = true;
  runPerf(l, std::string("-P AUTO --wire fp8 -B 3 --scatter ") + std::get<1>(GetParam()), &output, &report, &skipped);
  if (skipped || HasFatalFailure()) return;
  SCOPED_TRACE(output);
  EXPECT_NE(output.find("baseline (fused, native wire)"), std::string::npos);
  EXPECT_NE(report.find("\"baseline\": \"fused, native wire\""), std::string::npos);
  EXPECT_NE(report.find("\"wire\": \"fp8\""), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(LaunchesAndModes, PerfWireBaseline,
                         testing::Combine(testing::ValuesIn(kWireLaunches), testing::ValuesIn(kScatterModes)),
                         launchAndValueName);

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
