/*************************************************************************
 * The perf harness, nccl-tests style: flags, the size sweep, the table and
 * the JSON report. Pure host code (unit-tested in CI); the binary adds the
 * GPU hooks.
 ************************************************************************/
#ifndef NCCL_DCP_PERF_HARNESS_H_
#define NCCL_DCP_PERF_HARNESS_H_

#include <nccl.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nccl_dcp {
namespace perf {

// Exit codes of the perf binaries.
constexpr int kExitOk = 0;
constexpr int kExitBadArgs = 2;
constexpr int kExitNoGpu = 3;
constexpr int kExitWrong = 4;   // -c found wrong results
constexpr int kExitFailed = 5;  // a CUDA / NCCL / nccl-dcp call failed

struct Args {
  int64_t minRows = 1, maxRows = 1024;  // -b -e
  double factor = 2;                    // -f
  int64_t step = 0;                     // -i (overrides -f when > 0)
  int gpusPerThread = 1;                // -g
  int threads = 1;                      // -t
  int iters = 20;                       // -n timed graph launches per size
  int warmup = 5;                       // -w
  int check = 1;                        // -c passes against the CPU reference
  int graphCalls = 10;                  // -G calls per CUDA graph; 0 = eager launches
  int aggregate = 1;                    // -a 0 rank 0, 1 avg, 2 min, 3 max across ranks
  ncclDataType_t dtype = ncclBfloat16;  // -d
  int headDim = 512;                    // -D
  int localHeads = 16;                  // -H
  int protocol = 0;                     // -P AUTO|LL|LL128|SIMPLE
  int lseBase = 0;                      // -L 2|e
  int virtualRanks = 0;                 // -V N loopback ranks on one GPU (0: real ranks)
  int maxBatch = 0;                     // -m workspace rows (0: = -e)
  int baseline = 1;                     // -B 0 skips the baseline
  std::string json;                     // -J file
};

enum class ParseResult { Ok, Help, Error };

// Parses argv (nccl-tests flags plus ours). On Error, *error says why.
ParseResult parseArgs(int argc, char** argv, Args* args, std::string* error);
std::string usage(const char* program);

// The batch sizes of the sweep: -b to -e by factor -f, or by step -i.
std::vector<int64_t> batchSweep(const Args& a);

// One line of the table. Times in microseconds; bandwidths in GB/s.
struct Row {
  int64_t rows = 0;
  int64_t bytes = 0;  // partial outputs each rank holds: rows * cp * Hl * D * elt
  double fusedUs = 0, fusedAlgBw = 0, fusedBusBw = 0;
  int64_t fusedWrong = -1;  // -1: not checked
  double baseUs = 0, baseAlgBw = 0, baseBusBw = 0;
  int64_t baseWrong = -1;
  double speedup = 0;
  double idealUs = 0;  // loopback: ideal time at the measured copy bandwidth (0: n/a)
};

// algbw = bytes / time; busbw = algbw * (n - 1) / n, as nccl-tests' alltoall.
void fillBandwidths(Row* r, int nRanks);

std::string tableHeader(const Args& a, bool withIdeal);
std::string formatRow(const Row& r, bool withBaseline, bool withIdeal);
std::string jsonReport(const Args& a, const std::string& mode, const std::string& device, int nRanks,
                       double copyGBps, const std::vector<Row>& rows);

const char* dtypeFlag(ncclDataType_t d);
const char* protocolFlag(int p);

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_HARNESS_H_
