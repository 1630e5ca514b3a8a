/*************************************************************************
 * The perf harness's pure host part, nccl-tests style: the options
 * (options.cc), the size sweep, which GPU each rank uses, the aggregation
 * across ranks, the rows, the table (harness.cc) and the JSON report
 * (report.cc). No CUDA calls: unit-tested in CI. The sweep loop (sweep.h)
 * and the launch modes (mode.h) add the GPU hooks.
 ************************************************************************/
#ifndef NCCL_DCP_PERF_HARNESS_H_
#define NCCL_DCP_PERF_HARNESS_H_

#include <nccl.h>

#include "nccl_dcp.h"

#include <cstdint>
#include <functional>
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
constexpr int kBaselineNativeWire = 3;  // with --wire fp8: the fused call itself on the native wire
// What the baseline's exchange is, per scatter mode (--scatter): HEAD
// ncclAlltoAll of each peer's heads; TOKEN ncclAlltoAll of each peer's rows
// in token layout (blocks padded to ceil(B/cp) rows: equal sizes); NONE
// ncclAllGather of every partial. NONE has a second baseline in the same
// run: the HEAD call + ncclAllGather of the merged heads (baseline2).

// A size flag: bytes of one rank's partials (-b -e -i, nccl-tests'
// meaning: a plain number is bytes, K/M/G suffixes) or batch rows
// (--min-rows --max-rows --step-rows), turned into rows once the rank
// count is known (resolveSizes).
struct Size {
  int64_t value = 0;
  bool bytes = false;
};

// The flags, nccl-tests' letters with nccl-tests' meanings (the defaults
// of -b -e -i -f -d -T differ: docs/perf-binary.md), ours as long options
// (usage() lists them).
struct Args {
  // -b -e -i as given; the default sweep is 1..1024 rows (the decode range:
  // nccl-tests' own default, one size of 32 MiB, is a prefill's).
  Size minSize{1, false}, maxSize{1024, false}, stepSize{0, false};
  int64_t minRows = 1, maxRows = 1024;  // -b -e in rows (resolveSizes)
  double factor = 2;                    // -f
  bool factorGiven = false;             // -f on the command line: it wins over -i, as in nccl-tests
  int64_t step = 0;                     // -i in rows (used when > 0 and -f was not given)
  int gpusPerThread = 1;                // -g
  int threads = 1;                      // -t
  int iters = 20;                       // -n timed samples per size (the table reports their mean)
  int warmup = 1;                       // -w warm-up samples per size
  int aggIters = 1;                     // -m calls per sample (captured in one graph with -G >= 1)
  int graphLaunches = 0;                // -G launches of that graph per sample; 0 = eager calls
  int check = 1;                        // -c checked calls per size against the CPU reference
  int aggregate = 1;                    // -a 0 rank 0, 1 avg, 2 min, 3 max across ranks
  int cpuTime = 0;                      // -C 1: the time column is the host's time per call
  int parallelInit = 0;                 // -p: accepted (and recorded in the JSON), changes nothing
  int timeoutS = -1;                    // -T seconds -> NCCL_DCP_TIMEOUT_MS (-1: as the environment says)
  ncclDataType_t dtype = ncclBfloat16;  // -d
  int headDim = 512;                    // --head-dim
  int localHeads = 16;                  // --local-heads (-H)
  int protocol = 0;                     // --protocol (-P) AUTO|LL|LL128|SIMPLE
  int lseBase = 0;                      // --lse-base (-L) 2|e
  int virtualRanks = 0;                 // --virtual-ranks N loopback ranks on one GPU (0: real ranks)
  int maxBatch = 0;                     // --max-batch workspace rows (0: = -e); larger batches run in chunks
  int baseline = kBaselineFull;         // --baseline (-B) 0|1|2|3
  int scatter = ncclDcpScatterHead;     // --scatter head|token|none: the config's scatter mode
  int stagedGather = 0;                 // --staged-gather 1: loopback NONE's baseline 2 staged (options.cc)
  int registeredOut = 0;                // --registered-out 1: NONE's outputs registered (phase 2 direct)
  int wire = ncclDcpWireNative;         // --wire native|fp8: the config's wire (the baselines stay native)
  int floors = 1;                       // --floors (-F) 0 skips the floors
  int timeline = 0;                     // --timeline: the in-kernel timeline per size (-Dtimeline=true builds)
  std::string json;                     // -J file
  std::string provider;                 // --provider: NCCL_DCP_PROVIDER for this run ("" = as set)
  std::vector<std::string> argv;        // the command line as given (the JSON's "args")
};

enum class ParseResult { Ok, Help, Version, Error };

// Parses argv (getopt_long: nccl-tests' letters plus our long options).
// On Error, *error says why, naming the option.
ParseResult parseArgs(int argc, char** argv, Args* args, std::string* error);
std::string usage(const char* program);
// --version: this binary's nccl-dcp and NCCL, built against and loaded.
std::string versionText(int dcpLoaded, int ncclLoaded);
// "2.28.9" from NCCL_VERSION_CODE-style 22809 (nccl-dcp uses the same code).
std::string versionString(int code);

// A size in bytes as nccl-tests' -b / -e / -i take it: a plain integer is
// bytes; a B, K, M or G suffix (K = 1024, as nccl-tests; "KB", "KiB" too)
// multiplies it: "4096", "32K", "1.5M", "1G".
bool parseBytes(const char* text, int64_t* bytes);
// Bytes of one row of one rank's partials: ranks * Hl * D * element size.
int64_t bytesPerRow(const Args& a, int nRanks);
// Sizes given in bytes become rows (rounded down; at least 1 row for a
// non-zero size: sizeNote says so); false with *error when the sweep is
// then empty or too large.
bool resolveSizes(Args* a, int nRanks, std::string* error);
// Header line saying how the byte sizes became rows, and which were less
// than one row ("" when no size was in bytes).
std::string sizeNote(const Args& a, int nRanks);

// ---- What is checked before any GPU is touched (main, before
// cudaGetDeviceCount; nccl-tests likewise parses and opens its -J file
// first): a refusal there names the option and exits 2, on a machine
// with or without GPUs.
// The ranks of the run, known without a GPU: --virtual-ranks, else
// processes (MPI) x -t x -g.
int ranksBeforeGpu(const Args& a, int processes);
// The context config the flags describe (configOf) as the library
// resolves it (resolveConfig, default environment): false with *error
// naming the options behind the field the library refused, and its rule.
bool checkConfig(const Args& a, std::string* error);
// -J: the file can be created or written (a file the probe created is
// removed again, and so is an existing plain file: a run that ends before
// writing its JSON leaves none). false with *error naming -J, the path
// and why.
bool probeOutputFile(const std::string& path, std::string* error);
// resolveSizes at nRanks ranks, then checkConfig (the workspace's rows
// follow -e), then, with probeJson (process 0 only), probeOutputFile.
bool checkBeforeGpu(Args* a, int nRanks, bool probeJson, std::string* error);

// The batch sizes of the sweep: -b to -e by factor -f, or by step -i when
// -i was given and -f was not (nccl-tests: a factor > 1 wins).
std::vector<int64_t> batchSweep(const Args& a);
// True when the sweep adds -i's rows (else it multiplies by -f).
bool stepsBy(const Args& a);

// ---- The scatter modes' bytes (even split), for the floors, the ideal
// time and the buffers. Units are (row, head) pairs of D elements.
// Heads of an output row: Hl (HEAD), cp * Hl (TOKEN, NONE).
int headsOf(int scatter, int nRanks, int localHeads);
// Rows of the largest output (TOKEN's first rank: ceil(rows / cp)), and the
// rows of one TOKEN all-to-all block (the same: blocks padded to equal size).
int64_t maxOutRows(int scatter, int nRanks, int64_t rows);
int64_t tokenBlockRows(int nRanks, int64_t rows);
// Bytes of one batch row that one rank must send to each peer (and receive
// from each; eltSize: an element's bytes on the wire, 1 for fp8) in the
// algorithm the context runs: HEAD and TOKEN Hl * D * elt
// (TOKEN: a row's H heads to its one owner, 1/cp of the rows per peer);
// NONE direct cp * Hl * D * elt (every head to every peer, one hop), NONE
// in two phases (twoPhase: noneRelays, src/types.h) 2 * Hl * D * elt (the
// peer's heads, then this rank's merged ones).
int64_t peerBytesPerRow(int scatter, int nRanks, int localHeads, int headDim, int eltSize, bool twoPhase = false);
// What each rank must receive per batch row: (cp - 1) * peerBytesPerRow:
// (cp-1)/cp of B*H*D (HEAD, TOKEN), (cp-1) * B*H*D (NONE direct),
// 2 (cp-1)/cp of it (NONE in two phases).
int64_t receiveBytesPerRow(int scatter, int nRanks, int localHeads, int headDim, int eltSize,
                           bool twoPhase = false);
// Loopback's ideal bytes of a batch (every virtual rank): the inputs read,
// the payload written into and read out of the peers' workspaces (both
// phases of NONE's two), the outputs written; each unit D * elt + 4 (its
// LSE), a payload unit with fp8 on the wire D + 8 (e4m3, {lse, scale}).
double idealBytes(int scatter, int nRanks, int64_t rows, int localHeads, int headDim, int eltSize,
                  bool twoPhase = false, bool fp8Wire = false);

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

// One call's time on one rank, from -n timed samples of -m calls (x -G
// graph launches) each, timed by CUDA events: the mean per call (nccl-tests'
// quantity; it times all -n samples with the host's clock), and the
// samples' median beside it (robust to a stray slow sample); and the host's
// time per call to issue them (nccl-tests' -C cputime).
struct Timing {
  double meanUs = 0, medianUs = 0, cpuUs = 0;
};

// Every rank's measurements of one size, in rank order (empty: not
// measured), and the wrong-element counts summed over the ranks (-1: not
// checked). The *Us vectors are the means; *MedianUs and *CpuUs beside them.
struct Samples {
  std::vector<double> fusedUs, baseUs, base2Us, peerWriteUs, copyEngineUs;
  std::vector<double> fusedMedianUs, baseMedianUs, base2MedianUs;
  std::vector<double> fusedCpuUs, baseCpuUs, base2CpuUs;
  int64_t fusedWrong = -1, baseWrong = -1, base2Wrong = -1;
};

// One line of the table. Times in microseconds (the mean per call, as
// nccl-tests; *MedianUs the samples' median, *CpuUs the host's time per
// call); bandwidths in GB/s, from the mean.
struct Row {
  int64_t rows = 0;
  std::string protocol;  // what the fused call ran: "LL128", "LL128+SIMPLE" (chunks), "fallback", "-"
  int64_t bytes = 0;  // partial outputs each rank holds: rows * cp * Hl * D * elt
  double fusedUs = 0, fusedAlgBw = 0, fusedBusBw = 0;
  double fusedMedianUs = 0, fusedCpuUs = 0;
  int64_t fusedWrong = -1;  // -1: not checked
  double baseUs = 0, baseAlgBw = 0, baseBusBw = 0;
  double baseMedianUs = 0, baseCpuUs = 0;
  int64_t baseWrong = -1;
  double speedup = 0;       // baseUs / fusedUs
  double base2Us = 0;       // NONE's second baseline (HEAD + all-gather of the merged heads); 0: not run
  double base2MedianUs = 0, base2CpuUs = 0;
  int64_t base2Wrong = -1;
  double speedup2 = 0;      // base2Us / fusedUs
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
  bool baseline2 = false;  // NONE's HEAD + all-gather
  bool ideal = false;    // loopback's xIdeal
  bool floor = false;    // xFloor
  bool cpuTime = false;  // -C 1: the time columns show the host's time per call
};
Columns columnsOf(const Args& a, bool loopback, bool floorsMeasured);

// The run's settings (nccl-tests' line) and the column names; under -C 1
// the time columns are "cputime", the host's time per call, as nccl-tests.
std::string tableHeader(const Args& a, int nRanks, const Columns& c);
std::string formatRow(const Row& r, const Columns& c);
// The figures nccl-tests closes its table with, and ours.
struct Summary {
  int64_t wrong = 0;   // fused + baseline wrong values of every checked size
  double busBw = 0;    // fused: average over the sizes that were timed
  double baseBusBw = 0;
  double speedup = 0;  // geometric mean over the sizes with both times
  double speedup2 = 0;  // the same against baseline 2
  int sizes = 0, baseSizes = 0;
};
Summary summarize(const std::vector<Row>& rows);
// After the table, as nccl-tests closes it: the wrong values and one "Avg
// bus bandwidth" line (the fused call's); then ours: "Baseline avg busbw"
// and the speed-up.
std::string tableFooter(const std::vector<Row>& rows, bool baseline, const char* baseline2 = nullptr);

// The protocol(s) the fused call runs a batch of `rows` with: rounds of at
// most `capacity` rows, each run with protocolOfRound(its rows)
// (ncclDcpProtocol_t). "SIMPLE+LL128" where the last round's differs; "-"
// for 0 rows.
std::string protocolsOfBatch(int64_t rows, int capacity, const std::function<int(int64_t)>& protocolOfRound);
// The same from what the contexts report (ncclDcpTopology_t): a round is
// LL up to llMaxRows rows, SIMPLE from simpleMinRows rows (0: never), else
// `small` (AUTO resolved). Loopback asks its engine instead.
std::string protocolsOfBatch(int64_t rows, int capacity, int small, int simpleMinRows, int llMaxRows = 0);

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

// One rank's GPU, for the JSON's config.devices (nccl-tests' fields).
struct DeviceInfo {
  int rank = 0, pid = 0, device = 0;
  char hostname[64] = "";
  char busId[16] = "";  // "0000:00:00.0"
  char name[256] = "";  // cudaDeviceProp::name
};

// What the JSON names the run by.
struct RunInfo {
  std::string mode;     // "loopback" or "ranks"
  std::string device;   // GPU name
  int nRanks = 0;
  Placement placement;
  double copyGBps = 0;  // loopback: device-to-device copy bandwidth
  int ncclVersion = 0;
  std::string provider;  // the workspace provider the contexts chose (ranks), "loopback"
  std::string noneAlgo;  // scatter NONE: "direct" or "two_phase", as the contexts run it; else empty
  // Filled by the sweep for the JSON:
  int dcpVersion = 0;                // the loaded nccl-dcp (ncclDcpGetVersion)
  std::string host;                  // the leader's
  std::string startTime, endTime;    // local time, nccl-tests' format
  std::vector<std::string> env;      // relevantEnvironment()
  std::vector<DeviceInfo> devices;   // every rank, in rank order
};
// Valid JSON (numbers finite, else null), every key snake_case:
// nccl-tests' -J fields (version, start_time, args, env, nccl_version,
// config, results, out_of_bounds, average_bus_bandwidth, errors (always
// empty), end_time), each
// results[] entry nccl-tests' size/count/type/out_of_place{time, alg_bw,
// bus_bw, nwrong} (the fused call) with ours beside them (rows, protocol,
// median_time, cpu_time, baseline{...}, the floors' times), and the run's
// own fields (shape, versions, floors) at the top level. Fields that
// nccl-tests has are not repeated under another name.
// (Older files had a camelCase rows[] array instead; the readers,
// scripts/plot_perf.py and the plugin's calibration, still take it.)
std::string jsonReport(const Args& a, const RunInfo& run, const Floors& floors, const std::vector<Row>& rows);
// The variables that shape a run (NCCL_*, CUDA_*, NVIDIA_*, launchers'
// OMPI_* / PMIX_* / SLURM_* / UCX_*, LD_LIBRARY_PATH, LD_PRELOAD), sorted;
// the rest of the environment (tokens, paths) stays out of a results file.
std::vector<std::string> relevantEnvironment(char** envp);
// Now, local time, "%Y-%m-%d %H:%M:%S" (nccl-tests' start_time format).
std::string nowString();

// What the baseline (-B) runs in a scatter mode: "a2a + combine",
// "token a2a + combine", "all-gather + combine", "... alone", "fused,
// native wire", "none".
const char* baselineName(int baseline, int scatter = ncclDcpScatterHead);
// True when the run has NONE's second baseline: NONE with -B 1.
bool hasBaseline2(const Args& a);
// What that baseline is, in every header and the JSON. Loopback's
// all-gather is a copy kernel: written straight into every output (which
// real ranks cannot do with unregistered buffers) unless --staged-gather 1.
const char* baseline2Name(const Args& a);
// The config of the second context a run's baselines call on the same
// ranks, if any: the native wire (as every baseline), and for NONE's
// baseline 2 the HEAD mode.
bool secondContextConfig(const Args& a, ncclDcpConfig_t* config);

}  // namespace perf
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PERF_HARNESS_H_
