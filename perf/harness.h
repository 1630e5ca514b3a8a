/*************************************************************************
 * The perf harness's pure host part, nccl-tests style: flags, the size
 * sweep, which GPU each rank uses, the aggregation across ranks, the rows,
 * the table and the JSON report. No CUDA calls: unit-tested in CI. The
 * sweep loop (sweep.h) and the launch modes (mode.h) add the GPU hooks.
 ************************************************************************/
#ifndef NCCL_DCP_PERF_HARNESS_H_
#define NCCL_DCP_PERF_HARNESS_H_

#include <nccl.h>

#include "nccl_dcp.h"

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
constexpr int kExitFailed = 5;  // a CUDA / NCCL / nccl-dcp / MPI call failed

// -B: what the baseline runs.
constexpr int kBaselineOff = 0;
constexpr int kBaselineFull = 1;      // ncclAlltoAll (data + LSE) + the combine kernel
constexpr int kBaselineAllToAll = 2;  // the same all-to-all alone (compare with alltoall_perf)

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
  int baseline = kBaselineFull;         // -B 0|1|2
  int floors = 1;                       // -F 0 skips the floors
  int timeline = 0;                     // -T 1: the in-kernel timeline per size (-Dtimeline=true builds)
  std::string json;                     // -J file
  std::string provider;                 // --provider: NCCL_DCP_PROVIDER for this run ("" = as set)
};

enum class ParseResult { Ok, Help, Error };

// Parses argv (nccl-tests flags plus ours). On Error, *error says why,
// naming the flag.
ParseResult parseArgs(int argc, char** argv, Args* args, std::string* error);
std::string usage(const char* program);

// The batch sizes of the sweep: -b to -e by factor -f, or by step -i.
std::vector<int64_t> batchSweep(const Args& a);

// Workspace rows: -m, else the largest batch of the sweep.
int capacityOf(const Args& a);
// The context config the flags describe.
ncclDcpConfig_t configOf(const Args& a);

// Where the ranks of a run sit: processes (MPI) x threads (-t) x GPUs per
// thread (-g), ranks numbered in that order.
struct Placement {
  int processes = 1, process = 0;
  int localProcess = 0;  // index of this process among those on its node
  int threads = 1, gpusPerThread = 1;
  int ranksPerProcess() const { return threads * gpusPerThread; }
  int nRanks() const { return processes * ranksPerProcess(); }
  int rankOf(int thread, int gpu) const { return process * ranksPerProcess() + thread * gpusPerThread + gpu; }
  // Each process takes the node's GPUs after those of the processes before
  // it on the node (as nccl-tests: local rank x GPUs per process + index).
  int deviceOf(int thread, int gpu) const {
    return localProcess * ranksPerProcess() + thread * gpusPerThread + gpu;
  }
};

// One value from every rank -> one figure, as -a says: 0 rank 0, 1 average,
// 2 minimum, 3 maximum. Empty: 0.
double aggregate(int how, const std::vector<double>& perRank);

// Every rank's measurements of one size, in rank order (empty: not
// measured), and the wrong-element counts summed over the ranks (-1: not
// checked).
struct Samples {
  std::vector<double> fusedUs, baseUs, peerWriteUs, copyEngineUs;
  int64_t fusedWrong = -1, baseWrong = -1;
};

// One line of the table. Times in microseconds; bandwidths in GB/s.
struct Row {
  int64_t rows = 0;
  int64_t bytes = 0;  // partial outputs each rank holds: rows * cp * Hl * D * elt
  double fusedUs = 0, fusedAlgBw = 0, fusedBusBw = 0;
  int64_t fusedWrong = -1;  // -1: not checked
  double baseUs = 0, baseAlgBw = 0, baseBusBw = 0;
  int64_t baseWrong = -1;
  double speedup = 0;
  double idealUs = 0;       // loopback: ideal time at the measured copy bandwidth (0: n/a)
  double peerWriteUs = 0;   // floor (a), same bytes (0: not measured)
  double copyEngineUs = 0;  // floor (b)
  double floorUs = 0;       // the faster of (a) and (b)
  double xFloor = 0;        // fusedUs / floorUs
};

// algbw = bytes / time; busbw = algbw * (n - 1) / n, as nccl-tests' alltoall;
// the speed-up and xFloor.
void fillBandwidths(Row* r, int nRanks);

// The row of one size, every figure aggregated the same way (written once
// for every launch mode).
Row makeRow(const Args& a, int64_t rows, int64_t bytes, int nRanks, const Samples& s, double idealUs);

// Which columns a table has.
struct Columns {
  bool baseline = true;  // else "-"
  bool ideal = false;    // loopback's xIdeal
  bool floor = false;    // xFloor
};
Columns columnsOf(const Args& a, bool loopback, bool floorsMeasured);

std::string tableHeader(const Args& a, const Columns& c);
std::string formatRow(const Row& r, const Columns& c);

// The floors measured in the same run, for the header and the JSON.
struct Floors {
  bool measured = false;
  std::string why;          // not measured: the reason
  std::string where;        // what (a) and (b) write into
  bool local = false;       // one rank / loopback: local copies, no link
  int sms = 0;              // (a) runs on every SM
  double roundTripUs = -1;  // (c); < 0: not measured
  std::string roundTrip;    // (c): between whom, or why it is missing
};
// Header lines: each floor at the first and the last size of the sweep.
std::string floorHeader(const Floors& f, const std::vector<Row>& rows, int nRanks);

// What the JSON names the run by.
struct RunInfo {
  std::string mode;     // "loopback" or "ranks"
  std::string device;   // GPU name
  int nRanks = 0;
  Placement placement;
  double copyGBps = 0;  // loopback: device-to-device copy bandwidth
  int ncclVersion = 0;
  std::string provider;  // the workspace provider the contexts chose (ranks), "loopback"
};
std::string jsonReport(const Args& a, const RunInfo& run, const Floors& floors, const std::vector<Row>& rows);

const char* dtypeFlag(ncclDataType_t d);
const char* protocolFlag(int p);
const char* baselineName(int baseline);

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_HARNESS_H_
