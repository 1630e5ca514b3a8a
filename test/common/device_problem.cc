#include "device_problem.h"

#include <random>

#include "reference.h"

namespace nccl_dcp {
namespace test {

DeviceProblem::DeviceProblem(const Config& cfg, int nRanks, int batch, LseMix mix, uint64_t seed,
                             const std::vector<int>& devices)
    : cfg_(cfg), nRanks_(nRanks), batch_(batch), strides_(packedStrides(cfg, nRanks)) {
  std::mt19937_64 rng(seed);
  host_ = makeInputs(cfg, nRanks, batch, strides_, mix, rng);
  want_ = host_;
  std::vector<CallBuffers> ref;
  for (RankTensors& t : want_) ref.push_back(t.buffers());
  referenceA2aLseReduce(cfg, nRanks, batch, strides_, ref.data());
  int saved = 0;
  cudaGetDevice(&saved);
  for (int r = 0; r < nRanks; r++) {
    if (!devices.empty()) cudaSetDevice(devices[r]);
    const RankTensors& t = host_[r];
    DeviceRank d{DeviceBuffer(t.partialOut.size()), DeviceBuffer(t.partialLse.size() * sizeof(float)),
                 DeviceBuffer(t.out.size()), DeviceBuffer(t.outLse.size() * sizeof(float))};
    if (d.partialOut.bytes) cudaMemcpy(d.partialOut.ptr, t.partialOut.data(), d.partialOut.bytes, cudaMemcpyHostToDevice);
    if (d.partialLse.bytes) cudaMemcpy(d.partialLse.ptr, t.partialLse.data(), d.partialLse.bytes, cudaMemcpyHostToDevice);
    if (d.out.bytes) cudaMemset(d.out.ptr, 0xff, d.out.bytes);
    if (d.outLse.bytes) cudaMemset(d.outLse.ptr, 0xff, d.outLse.bytes);
    dev_.push_back(std::move(d));
  }
  cudaSetDevice(saved);
}

CallBuffers DeviceProblem::buffers(int r) const {
  const DeviceRank& d = dev_[r];
  return {d.partialOut.ptr, d.partialLse.as<float>(), d.out.ptr, d.outLse.as<float>()};
}

std::vector<CallBuffers> DeviceProblem::allBuffers() const {
  std::vector<CallBuffers> b;
  for (int r = 0; r < nRanks_; r++) b.push_back(buffers(r));
  return b;
}

void DeviceProblem::poison(int r, cudaStream_t stream) {
  DeviceRank& d = dev_[r];
  if (d.out.bytes) cudaMemsetAsync(d.out.ptr, 0xff, d.out.bytes, stream);
  if (d.outLse.bytes) cudaMemsetAsync(d.outLse.ptr, 0xff, d.outLse.bytes, stream);
}

void DeviceProblem::download(int r, RankTensors* got) const {
  const DeviceRank& d = dev_[r];
  if (d.out.bytes) cudaMemcpy(got->out.data(), d.out.ptr, d.out.bytes, cudaMemcpyDeviceToHost);
  if (d.outLse.bytes) cudaMemcpy(got->outLse.data(), d.outLse.ptr, d.outLse.bytes, cudaMemcpyDeviceToHost);
}

Mismatch DeviceProblem::check(int r) const {
  std::vector<RankTensors> got = want_;  // the other ranks compare equal
  download(r, &got[r]);
  return compareOutputs(cfg_, nRanks_, batch_, strides_, got, want_);
}

Mismatch DeviceProblem::checkAll() const {
  std::vector<RankTensors> got = want_;
  for (int r = 0; r < nRanks_; r++) download(r, &got[r]);
  return compareOutputs(cfg_, nRanks_, batch_, strides_, got, want_);
}

}  // namespace test
}  // namespace nccl_dcp
