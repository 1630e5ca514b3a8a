/*************************************************************************
 * Shared test helpers: GPU presence (skip, or fail under
 * NCCL_DCP_REQUIRE_GPU=N), checked CUDA/NCCL calls, seeds, fresh random
 * inputs, poisoned outputs, comparison against the CPU reference.
 ************************************************************************/
#ifndef NCCL_DCP_TEST_UTIL_H_
#define NCCL_DCP_TEST_UTIL_H_

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "loopback.h"
#include "nccl_dcp.h"
#include "oracle.h"
#include "validate.h"

namespace nccl_dcp {
namespace test {

// Whether a test that needs some GPUs runs, skips or fails.
struct GpuGate {
  enum Verdict { Run, Skip, Fail } verdict;
  std::string message;  // why it skips or fails
};

// The decision of DCP_REQUIRE_GPUS, from its inputs (unit-tested):
//  - requireEnv: NCCL_DCP_REQUIRE_GPU's value (NULL or "" = 0); anything but
//    a GPU count in [0, NCCL_DCP_MAX_RANKS] fails the test;
//  - countError / count: what cudaGetDeviceCount returned. No driver or no
//    GPU (cudaErrorInsufficientDriver, cudaErrorNoDevice) is 0 GPUs; any
//    other error fails the test (a broken driver must not read as a skip).
// Fewer GPUs than needed skip, or fail when NCCL_DCP_REQUIRE_GPU >= needed.
GpuGate gateGpus(int needed, const char* requireEnv, cudaError_t countError, int count);

// gateGpus on this process's environment and devices.
GpuGate gateGpus(int needed);

// NCCL_DCP_REQUIRE_GPU parsed strictly: false (with why) when it is not a
// GPU count in [0, NCCL_DCP_MAX_RANKS]. NULL or "" is 0.
bool parseRequiredGpus(const char* value, int* count, std::string* why);

}  // namespace test
}  // namespace nccl_dcp

// Runs the rest of the test only with at least n usable GPUs: skips
// otherwise, or fails (see gateGpus).
#define DCP_REQUIRE_GPUS(n)                                                            \
  do {                                                                                 \
    const ::nccl_dcp::test::GpuGate gate_ = ::nccl_dcp::test::gateGpus(n);             \
    if (gate_.verdict == ::nccl_dcp::test::GpuGate::Fail) GTEST_FAIL() << gate_.message; \
    if (gate_.verdict == ::nccl_dcp::test::GpuGate::Skip) GTEST_SKIP() << gate_.message; \
  } while (0)

#define CUDA_ASSERT(cmd)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (cmd);                                                                \
    ASSERT_EQ(e_, cudaSuccess) << #cmd << ": " << cudaGetErrorString(e_);                 \
  } while (0)

#define DCP_ASSERT(cmd)                                                                    \
  do {                                                                                     \
    ncclResult_t r_ = (cmd);                                                               \
    ASSERT_EQ(r_, ncclSuccess) << #cmd << ": " << ncclDcpGetLastError();                  \
  } while (0)

// An NCCL call (not ours): its error string and NCCL's last error.
#define NCCL_TEST_ASSERT(cmd)                                                              \
  do {                                                                                     \
    ncclResult_t r_ = (cmd);                                                               \
    ASSERT_EQ(r_, ncclSuccess) << #cmd << ": " << ncclGetErrorString(r_) << " "           \
                               << ncclGetLastError(nullptr);                               \
  } while (0)

namespace nccl_dcp {
namespace test {

// Device memory a create/destroy (or abort) cycle may leave behind without
// a leak: the driver's and NCCL's caches.
constexpr long long kMemorySlack = 2ll << 20;

// Free memory of the current device, after everything queued on it is done.
size_t freeDeviceMemory();

double secondsSince(std::chrono::steady_clock::time_point t0);

// A shell command run to its end: its exit status (-1: it did not exit, or
// popen failed) and its stdout and stderr together.
struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult runCommand(const std::string& cmd);

// One thread per rank, as processes would run the ranks. run() calls
// body(rank) on each and returns once all are back; what rank threads
// report with addFailure() reaches gtest then, from the calling thread. A
// rank thread not back within hangSeconds is stuck (in a collective no
// peer will join): the process says which test and ends, as it cannot
// join that thread.
class RankThreads {
 public:
  explicit RankThreads(double hangSeconds) : hangSeconds_(hangSeconds) {}
  void run(int nRanks, const std::function<void(int)>& body);
  void addFailure(int rank, const std::string& what);

 private:
  const double hangSeconds_;
  std::mutex mutex_;
  std::vector<std::string> failures_;
};

// The fixture of the one-GPU context tests: a one-rank communicator on
// device 0 and a non-blocking stream; TearDown also drops any environment
// a test set with setEnvForTesting.
class OneRankComm : public testing::Test {
 protected:
  void SetUp() override {
    DCP_REQUIRE_GPUS(1);
    CUDA_ASSERT(cudaSetDevice(0));
    int dev = 0;
    NCCL_TEST_ASSERT(ncclCommInitAll(&comm_, 1, &dev));
    CUDA_ASSERT(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
    setEnvForTesting(nullptr);
  }

  // The application's side of a window: `bytes` of ncclMemAlloc memory
  // registered on comm_. Call as ASSERT_NO_FATAL_FAILURE(openAppWindow(...)).
  void openAppWindow(size_t bytes, void** pool, ncclWindow_t* win) {
    NCCL_TEST_ASSERT(ncclMemAlloc(pool, bytes));
    NCCL_TEST_ASSERT(ncclCommWindowRegister(comm_, *pool, bytes, win, NCCL_WIN_DEFAULT));
  }
  // Gives the window and its memory back, as the application would.
  void closeAppWindow(void* pool, ncclWindow_t win) {
    NCCL_TEST_ASSERT(ncclCommWindowDeregister(comm_, win));
    NCCL_TEST_ASSERT(ncclMemFree(pool));
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace test
}  // namespace nccl_dcp

namespace nccl_dcp {
namespace test {

ncclDcpConfig_t makeConfig(int headDim, int localHeads, ncclDataType_t dtype, int lseBase, int maxBatch = 64,
                           int protocol = ncclDcpProtoAuto);

// Host tensors of one rank, laid out by the strides it is called with.
struct RankTensors {
  std::vector<uint8_t> partialOut;  // dtype elements
  std::vector<float> partialLse;    // the LSE values (fp32)
  // lseDtype bf16 / fp16: partialLse as the call takes it (rounded); empty
  // for fp32 (partialLse is then what the call takes).
  std::vector<uint8_t> narrowLse;
  std::vector<uint8_t> out;
  std::vector<float> outLse;
  // The rank's empty-shard arrays (host; empty: none).
  std::vector<int> seqLens, queryStartLoc;
  CallBuffers buffers();  // host pointers
  // partialLse as the call takes it: its bytes and their size.
  const void* lseData() const { return narrowLse.empty() ? (const void*)partialLse.data() : narrowLse.data(); }
  size_t lseBytes() const { return narrowLse.empty() ? partialLse.size() * sizeof(float) : narrowLse.size(); }
};

// A strided layout of every tensor, as attention kernels and serving
// engines hand them over: the transposed input [B][Hl][cp][D] with padded
// rows, a transposed LSE, padded output heads and rows, a spaced outLse.
// Valid for every dtype (paddings are 16-byte multiples) and scatter mode
// (out rows hold the mode's heads).
Strides paddedStrides(const Config& cfg, int nRanks);
// The same strides as the public struct.
ncclDcpStrides_t apiStrides(const Strides& s);

// Bytes of got's out and outLse outside the elements a call of `batch`
// rows writes (the padding of strided views, rows past the batch) that are
// no longer 0xff: a call must leave them poisoned. Describes the first.
size_t touchedPadding(const Config& cfg, int batch, const Strides& s, const RankTensors& got,
                      std::string* first = nullptr);

// touchedPadding for a call of any scatter mode: bytes of rank's out and
// outLse (of any size) outside the elements shape's mode gives it
// (forEachOutput) that are no longer 0xff.
size_t touchedOutside(const Config& cfg, int nRanks, int rank, const CallShape& shape, const Strides& s,
                      const RankTensors& got, std::string* first = nullptr);

// Elements a strided view needs: 1 + sum (count - 1) * stride + inner - 1.
// Outputs: `localHeads` is the heads of an out row (Hl, or cp * Hl).
size_t viewElements(const Strides& s, int batch, int nRanks, int localHeads, int headDim, bool input);
size_t lseViewElements(const Strides& s, int batch, int nRanks, int localHeads, bool input);

// Kinds of LSE values drawn for the inputs.
enum class LseMix {
  Normal,    // uniform in [-8, 8]
  Special,   // with -inf, NaN, +inf, all-empty rows, NaN payloads behind -inf
  HugeSpread,  // +-1e30 and a dominant source
};

// Fresh random inputs for every rank (values in [-1, 1], never all zero);
// outputs poisoned with 0xff bytes (NaN in every dtype).
std::vector<RankTensors> makeInputs(const Config& cfg, int nRanks, int batch, const Strides& strides,
                                    LseMix mix, std::mt19937_64& rng);

// Counts outputs (over every rank, every written element) that differ from
// the reference beyond one unit of rounding of dtype; describes the first.
// shape: the call's in host form (NULL: cfg's mode, the even split).
struct Mismatch {
  size_t count = 0;
  std::string first;
};
Mismatch compareOutputs(const Config& cfg, int nRanks, int batch, const Strides& strides,
                        const std::vector<RankTensors>& got, const std::vector<RankTensors>& want,
                        const CallShape* shape = nullptr);

// ---- The fp64 oracle (oracle.h, which shares no code with src/) on a
// call's host tensors, beside the comparison with the CPU reference.

// The call as the oracle reads it: the inputs of `in` as the call takes
// them (partialOut, the LSEs in cfg.lseDtype, the empty-shard arrays),
// cfg's mode, base, dtypes and wire, and TOKEN's counts as the TEST gave
// them (empty: the even split) -- never a split the library resolved. The
// problem points into `in`: keep it alive.
oracle::Problem oracleProblem(const Config& cfg, int nRanks, int batch, const Strides& s,
                              const std::vector<RankTensors>& in, const std::vector<int>& counts = {});
// Elements of got (every rank, or those of `ranks`) the oracle rejects,
// plus bytes written outside each rank's elements (untouched: they must
// still be 0xff); describes the first few.
Mismatch oracleMismatches(const oracle::Problem& p, const std::vector<RankTensors>& got,
                          const std::vector<int>& ranks = {}, bool untouched = true);
// One verdict of the reference's and the oracle's: counts added, each
// one's first mismatch named.
Mismatch withOracle(const Mismatch& reference, const Mismatch& oracle);

// ---- Calls of issue 27: scatter modes (cfg.scatter), LSE dtypes
// (cfg.lseDtype), TOKEN splits, empty shards.

// The config of makeConfig in a scatter mode and an LSE dtype.
ncclDcpConfig_t withScatter(ncclDcpConfig_t c, int scatter, ncclDataType_t lseDtype = ncclFloat32);

// What a call asks beyond its buffers, in host form.
struct CallSpec {
  // TOKEN: rows of each rank (sum = batch); empty: the even split.
  std::vector<int> rowCounts;
  // TOKEN: the counts go through args->rowCountsDevice (a device array the
  // test may rewrite between graph replays), not args->rowCounts.
  bool deviceCounts = false;
  // Draw empty-shard arrays (addEmptyShards) and pass them.
  bool emptyShards = false;
  // Applied to the fresh inputs (fp32 LSEs) before the empty shards are
  // drawn and the LSEs narrowed to cfg.lseDtype (e.g. to plant a row).
  std::function<void(std::vector<RankTensors>&, const Strides&)> edit;
};

// The shape of a call in host form (the reference's): cfg's mode, counts'
// split (empty: the even one), numSeqs sequences (0: no empty shards).
// Counts must be valid.
CallShape hostShape(const Config& cfg, int nRanks, int batch, const std::vector<int>& counts, int numSeqs);

// Rows of out rank r's buffers hold: the batch (HEAD, NONE, and TOKEN with
// device counts, which may give any rank every row), else its share.
int outCapacityRows(const CallShape& shape, int rank, bool deviceCounts);

// Empty-shard arrays for every rank (numSeqs sequences, returned; the same
// on every rank): query start offsets shared by the ranks, with rows of
// padding before the first sequence and after the last (empty on every
// rank), sequences of 0 rows; local lengths drawn per rank, empty (0 or
// negative) for some sequences on some ranks and for one sequence on
// every rank. Every empty
// row's LSEs become NaN, +-inf or +-1e30 and its payload NaN: garbage the
// call must ignore. Needs batch >= 1.
int addEmptyShards(const Config& cfg, int nRanks, int batch, const Strides& s, std::vector<RankTensors>* ranks,
                   std::mt19937_64& rng);

// Narrows every rank's partialLse to cfg.lseDtype (narrowLse; partialLse
// keeps the rounded values). fp32: nothing.
void narrowLses(const Config& cfg, std::vector<RankTensors>* ranks);

// Fresh inputs for a call (makeInputs, then spec's edit, empty shards and
// cfg.lseDtype); rank r's out and outLse sized for outRows[r] rows of the
// mode's heads plus slackRows (which the call must leave poisoned), all
// 0xff. *numSeqs: the empty shards' sequences (0: none).
std::vector<RankTensors> makeCallInputs(const Config& cfg, int nRanks, int batch, const Strides& s, LseMix mix,
                                        std::mt19937_64& rng, const CallSpec& spec, const std::vector<int>& outRows,
                                        int slackRows, int* numSeqs);

// The library's environment (env()) replaced for one scope; not for
// concurrent library calls that start or end inside it.
struct ScopedEnv {
  explicit ScopedEnv(const Env& e) : env(e) { setEnvForTesting(&env); }
  ~ScopedEnv() { setEnvForTesting(nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  Env env;
};

// An environment with NCCL_DCP_FORCE_FALLBACK=1.
Env forcedFallbackEnv();

// Seeds of random test data. Each test draws from one base seed: the
// --gtest_random_seed given, else a fresh one per test; freshSeed() returns
// the next seed of the running test's sequence, so one flag replays every
// draw of a test. A failing test prints its base seed (test_main.cc).
uint64_t freshSeed();
// The running test's base seed, 0 when it drew none.
uint32_t testBaseSeed();

// A device allocation freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~DeviceBuffer();
  template <typename T>
  T* as() const { return (T*)ptr; }
};

// n bytes of managed memory that the driver keeps in host memory and the
// GPU reads over PCIe (preferred location: host; accessed by the current
// device). A virtual rank whose partials live there sends well after the
// others: the late peer of a race test on one GPU. ptr is null on failure.
DeviceBuffer hostResidentBuffer(size_t n);

// One rank's tensors on its GPU, sized for t.
struct RankBuffers {
  DeviceBuffer in, lse, out, outLse;

  explicit RankBuffers(const RankTensors& t)
      : in(t.partialOut.size()), lse(t.lseBytes()), out(t.out.size()), outLse(t.outLse.size() * 4) {}

  // Inputs uploaded, outputs poisoned (0xff; queued on stream).
  cudaError_t upload(const RankTensors& t, cudaStream_t stream);
  cudaError_t poison(cudaStream_t stream);
  // The outputs into t (synchronises stream).
  cudaError_t download(RankTensors* t, cudaStream_t stream);
};

// The config resolved as a create would (a failure fails the test).
Config resolved(const ncclDcpConfig_t& c);
// A loopback of nRanks virtual ranks on the current GPU (NULL and a test
// failure when create fails).
std::unique_ptr<Loopback> makeLoopback(const ncclDcpConfig_t& c, int nRanks);

}  // namespace test
}  // namespace nccl_dcp

#endif  // NCCL_DCP_TEST_UTIL_H_
