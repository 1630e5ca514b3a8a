/*************************************************************************
 * The perf binary's refusals of bad input, as a script sees them: the exit
 * status (2) and a message naming the option, before any GPU is touched.
 * Runs the binary itself (DCP_PERF_BINARY, set by test/meson.build, which
 * links this test after the binary so that building the test rebuilds
 * it), with CUDA_VISIBLE_DEVICES empty: on any machine, input refused only
 * after cudaGetDeviceCount exits 3 with "no CUDA GPU found" instead (with
 * GPUs visible it used to reach them: the config's errors exited 5, a bad
 * -J path failed after the whole sweep), and -J's file of an earlier run
 * removed before the GPU is looked for. The functions behind the checks
 * are unit-tested in test_perf_harness.cc.
 ************************************************************************/
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

// stdout and stderr together, no GPU visible: a check made after the
// binary looked for one cannot pass, with or without GPUs in the machine.
CommandResult runPerf(const std::string& args) {
  return runCommand(std::string("CUDA_VISIBLE_DEVICES= timeout 120 ") + DCP_PERF_BINARY + " " + args);
}

struct Refusal {
  const char* args;
  std::vector<const char*> says;  // in the message, each
};

// Each refused with exit 2 and its message, and never as far as the GPU
// (the binary's "no CUDA GPU found" on a machine without one) or the run
// (its table's header, on a machine with GPUs).
TEST(PerfBinaryArgs, BadInputExitsTwoBeforeAnyGpu) {
  const Refusal refusals[] = {
      // Sizes, at the rank count known before any GPU (1 rank here: 16 KiB a row).
      {"-e 0", {"-e's 0 rows"}},
      {"-b 32M", {"-b is 2048 rows", "32M, is not ours"}},
      {"--min-rows 4 -e 32K", {"--min-rows is 4 rows, more than -e's 2 rows"}},
      {"-t 2 -g 2 --min-rows 2 -e 64K", {"--min-rows is 2 rows, more than -e's 1 rows", "at 4 ranks"}},
      // The config, as the library resolves it.
      {"--head-dim 513", {"--head-dim 513", "not a config the library takes"}},
      {"--head-dim 4", {"--head-dim 4", "not a config the library takes"}},
      {"--wire fp8 --head-dim 8", {"--head-dim 8 with --wire fp8"}},
      // -B 3 (the fused call on the native wire) beside the native wire.
      {"-B 3", {"-B 3 times the fused call on the native wire", "--wire fp8"}},
      // -J: a path that cannot be written (nccl-tests opens its file first).
      {"-J /nonexistent/x.json", {"-J/--output_file", "/nonexistent/x.json"}},
      // -i 0 without -f (nccl-tests would loop for ever), as --step-rows 0.
      {"-i 0", {"-i 0: a step of 0 bytes"}},
      {"--step-rows 0", {"--step-rows"}},
      // The parser's own.
      {"--min 5", {"'--min' is ambiguous"}},
      {"--help=1", {"--help takes no value"}},
  };
  for (const Refusal& c : refusals) {
    const CommandResult r = runPerf(c.args);
    SCOPED_TRACE(std::string(c.args) + ":\n" + r.output);
    EXPECT_EQ(r.status, 2);
    for (const char* s : c.says) EXPECT_NE(r.output.find(s), std::string::npos) << s;
    EXPECT_EQ(r.output.find("no CUDA GPU found"), std::string::npos) << "refused only after looking for a GPU";
    EXPECT_EQ(r.output.find("# nThread"), std::string::npos) << "refused only after the run started";
  }
}

// -J's file of an earlier run is gone once the path is checked, before
// any GPU: a run that ends before writing its own (here no GPU, exit 3;
// on a GPU a failed call, exit 5) leaves none to be read as this run's.
TEST(PerfBinaryArgs, EarlierJsonIsRemovedBeforeAnyGpu) {
  char dir[] = "/tmp/dcp_perf_args_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string json = std::string(dir) + "/perf.json";
  FILE* f = fopen(json.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("{\"commit\": \"an earlier run\"}\n", f);
  fclose(f);
  const CommandResult r = runPerf("-b 16K -e 32K -J " + json);
  EXPECT_EQ(r.status, 3) << r.output;  // the arguments are good: only the GPU is missing
  EXPECT_NE(r.output.find("no CUDA GPU found"), std::string::npos) << r.output;
  EXPECT_NE(access(json.c_str(), F_OK), 0) << "the earlier run's JSON is still at -J";
  unlink(json.c_str());
  rmdir(dir);
}

// -h needs no GPU either, and says what differs from nccl-tests.
TEST(PerfBinaryArgs, HelpExitsZero) {
  const CommandResult r = runPerf("-h");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("USAGE:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nccl-tests' -b/-e 32M"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
