/*************************************************************************
 * Shared test helpers: GPU presence (skip, or fail under
 * NCCL_DCP_REQUIRE_GPU=1), checked CUDA/NCCL calls, fresh random inputs,
 * poisoned outputs, comparison against the CPU reference.
 ************************************************************************/
#ifndef NCCL_DCP_TEST_UTIL_H_
#define NCCL_DCP_TEST_UTIL_H_

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "nccl_dcp.h"
#include "validate.h"

namespace nccl_dcp {
namespace test {

// NCCL_DCP_REQUIRE_GPU=N: the machine has N GPUs, so a test needing at
// most N that finds fewer fails instead of skipping (0 / unset: skip).
int requiredGpus();
// Usable CUDA devices; 0 (with the reason) when there is no driver or GPU.
int gpuCount(std::string* reason = nullptr);

}  // namespace test
}  // namespace nccl_dcp

// Skips the test unless at least n GPUs are usable; fails instead when
// NCCL_DCP_REQUIRE_GPU promises n or more.
#define DCP_REQUIRE_GPUS(n)                                                               \
  do {                                                                                    \
    std::string why_;                                                                     \
    const int have_ = ::nccl_dcp::test::gpuCount(&why_);                                  \
    if (have_ < (n)) {                                                                    \
      if (::nccl_dcp::test::requiredGpus() >= (n))                                        \
        GTEST_FAIL() << "NCCL_DCP_REQUIRE_GPU=" << ::nccl_dcp::test::requiredGpus()       \
                     << ": needs " << (n) << " GPU(s), found " << have_ << why_;          \
      GTEST_SKIP() << "needs " << (n) << " GPU(s), found " << have_ << why_;              \
    }                                                                                     \
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

namespace nccl_dcp {
namespace test {

ncclDcpConfig_t makeConfig(int headDim, int localHeads, ncclDataType_t dtype, int lseBase, int maxBatch = 64,
                           int protocol = ncclDcpProtoAuto);

// Host tensors of one rank, laid out by the strides it is called with.
struct RankTensors {
  std::vector<uint8_t> partialOut;  // dtype elements
  std::vector<float> partialLse;
  std::vector<uint8_t> out;
  std::vector<float> outLse;
  CallBuffers buffers();  // host pointers
};

// Elements a strided view needs: 1 + sum (count - 1) * stride + inner - 1.
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
struct Mismatch {
  size_t count = 0;
  std::string first;
};
Mismatch compareOutputs(const Config& cfg, int nRanks, int batch, const Strides& strides,
                        const std::vector<RankTensors>& got, const std::vector<RankTensors>& want);

// A seed from std::random_device: every run draws fresh data (print it on failure).
uint64_t freshSeed();

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

}  // namespace test
}  // namespace nccl_dcp

#endif  // NCCL_DCP_TEST_UTIL_H_
