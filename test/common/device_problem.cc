#include "device_problem.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "reference.h"

namespace nccl_dcp {
namespace test {

namespace {

// Makes `device` current for a scope (-1: leaves the current one).
struct OnDevice {
  int saved = -1;
  explicit OnDevice(int device) {
    if (device < 0) return;
    cudaGetDevice(&saved);
    cudaSetDevice(device);
  }
  ~OnDevice() {
    if (saved >= 0) cudaSetDevice(saved);
  }
};

void toDevice(DeviceBuffer* d, const void* src, size_t bytes) {
  if (d->bytes != bytes) *d = DeviceBuffer(bytes);
  if (bytes) cudaMemcpy(d->ptr, src, bytes, cudaMemcpyHostToDevice);
}

// Counts that make a split of batch rows.
bool validCounts(const std::vector<int>& counts, int batch) {
  long long sum = 0;
  for (int n : counts) {
    if (n < 0) return false;
    sum += n;
  }
  return sum == batch;
}

}  // namespace

DeviceProblem::DeviceProblem(const Config& cfg, int nRanks, int batch, LseMix mix, uint64_t seed,
                             const std::vector<int>& devices)
    : DeviceProblem(cfg, nRanks, batch, mix, seed, CallSpec(), devices, 0) {}

DeviceProblem::DeviceProblem(const Config& cfg, int nRanks, int batch, LseMix mix, uint64_t seed,
                             const CallSpec& spec, const std::vector<int>& devices, int slackRows,
                             const Strides* strides)
    : cfg_(cfg),
      nRanks_(nRanks),
      batch_(batch),
      strides_(strides ? *strides : packedStrides(cfg, nRanks)),
      spec_(spec),
      slackRows_(slackRows),
      devices_(devices),
      counts_(spec.rowCounts) {
  dev_.resize(nRanks);
  draw(mix, seed);
  upload(false);
  for (int r = 0; r < nRanks; r++) {
    OnDevice on(deviceOf(r));
    DeviceRank& d = dev_[r];
    d.out = DeviceBuffer(host_[r].out.size());
    d.outLse = DeviceBuffer(host_[r].outLse.size() * sizeof(float));
    if (d.out.bytes) cudaMemset(d.out.ptr, 0xff, d.out.bytes);
    if (d.outLse.bytes) cudaMemset(d.outLse.ptr, 0xff, d.outLse.bytes);
    if (spec_.deviceCounts) {
      d.counts = DeviceBuffer(nRanks * sizeof(int));
      std::vector<int> c = counts_;
      if (c.empty()) {  // the even split, as counts
        for (int p = 0; p < nRanks; p++) c.push_back(shape_.split.start[p + 1] - shape_.split.start[p]);
      }
      cudaMemcpy(d.counts.ptr, c.data(), nRanks * sizeof(int), cudaMemcpyHostToDevice);
    }
    cudaDeviceSynchronize();
  }
  referenceAndArgs();
}

int DeviceProblem::deviceOf(int rank) const { return devices_.empty() ? -1 : devices_[rank]; }

void DeviceProblem::draw(LseMix mix, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const CallShape even = hostShape(cfg_, nRanks_, batch_, counts_, 0);
  std::vector<int> outRows(nRanks_);
  for (int r = 0; r < nRanks_; r++) outRows[r] = outCapacityRows(even, r, spec_.deviceCounts);
  int numSeqs = 0;
  host_ = makeCallInputs(cfg_, nRanks_, batch_, strides_, mix, rng, spec_, outRows, slackRows_, &numSeqs);
  shape_ = hostShape(cfg_, nRanks_, batch_, counts_, numSeqs);
}

void DeviceProblem::upload(bool toStaging) {
  for (int r = 0; r < nRanks_; r++) {
    OnDevice on(deviceOf(r));
    const RankTensors& t = host_[r];
    DeviceRank& d = dev_[r];
    toDevice(toStaging ? &d.stagedOut : &d.partialOut, t.partialOut.data(), t.partialOut.size());
    toDevice(toStaging ? &d.stagedLse : &d.partialLse, t.lseData(), t.lseBytes());
    toDevice(&d.seqLens, t.seqLens.data(), t.seqLens.size() * sizeof(int));
    toDevice(&d.queryStartLoc, t.queryStartLoc.data(), t.queryStartLoc.size() * sizeof(int));
  }
}

void DeviceProblem::referenceAndArgs() {
  want_ = host_;
  std::vector<CallBuffers> ref;
  for (RankTensors& t : want_) ref.push_back(t.buffers());
  referenceA2aLseReduce(cfg_, nRanks_, batch_, strides_, ref.data(), &shape_, cfg_.wire);  // fp8: the model's
  hasArgs_ = !counts_.empty() || spec_.deviceCounts || shape_.numSeqs > 0;
  const ncclDcpCallArgs_t none = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args_.assign(nRanks_, none);
  for (int r = 0; r < nRanks_; r++) {
    ncclDcpCallArgs_t& a = args_[r];
    if (spec_.deviceCounts) a.rowCountsDevice = dev_[r].counts.as<int>();
    else if (!counts_.empty()) a.rowCounts = counts_.data();
    if (shape_.numSeqs > 0) {
      a.seqLens = dev_[r].seqLens.as<int>();
      a.queryStartLoc = dev_[r].queryStartLoc.as<int>();
      a.numSeqs = shape_.numSeqs;
    }
  }
}

CallBuffers DeviceProblem::buffers(int r) const {
  const DeviceRank& d = dev_[r];
  CallBuffers b = {d.partialOut.ptr, d.partialLse.ptr, d.out.ptr, d.outLse.bytes ? d.outLse.as<float>() : nullptr};
  if (shape_.numSeqs > 0) {
    b.seqLens = d.seqLens.as<int>();
    b.queryStartLoc = d.queryStartLoc.as<int>();
  }
  return b;
}

std::vector<CallBuffers> DeviceProblem::allBuffers() const {
  std::vector<CallBuffers> b;
  for (int r = 0; r < nRanks_; r++) b.push_back(buffers(r));
  return b;
}

const ncclDcpCallArgs_t* DeviceProblem::args(int rank) const { return hasArgs_ ? &args_[rank] : nullptr; }

void DeviceProblem::setCounts(const std::vector<int>& counts) {
  for (int r = 0; r < nRanks_; r++) {
    OnDevice on(deviceOf(r));
    if (dev_[r].counts.bytes) cudaMemcpy(dev_[r].counts.ptr, counts.data(), nRanks_ * sizeof(int), cudaMemcpyHostToDevice);
  }
  if (!validCounts(counts, batch_)) return;
  counts_ = counts;
  shape_ = hostShape(cfg_, nRanks_, batch_, counts_, shape_.numSeqs);
  referenceAndArgs();
}

void DeviceProblem::refill(LseMix mix, uint64_t seed, bool toStaging) {
  draw(mix, seed);
  upload(toStaging);
  for (int r = 0; r < nRanks_; r++) {
    OnDevice on(deviceOf(r));
    cudaDeviceSynchronize();
  }
  referenceAndArgs();
}

void DeviceProblem::stageInputs(int r, cudaStream_t stream) {
  DeviceRank& d = dev_[r];
  if (d.stagedOut.bytes)
    cudaMemcpyAsync(d.partialOut.ptr, d.stagedOut.ptr, d.stagedOut.bytes, cudaMemcpyDeviceToDevice, stream);
  if (d.stagedLse.bytes)
    cudaMemcpyAsync(d.partialLse.ptr, d.stagedLse.ptr, d.stagedLse.bytes, cudaMemcpyDeviceToDevice, stream);
}

void DeviceProblem::poison(int r, cudaStream_t stream) {
  DeviceRank& d = dev_[r];
  if (d.out.bytes) cudaMemsetAsync(d.out.ptr, 0xff, d.out.bytes, stream);
  if (d.outLse.bytes) cudaMemsetAsync(d.outLse.ptr, 0xff, d.outLse.bytes, stream);
}

// got starts as a copy of the model's answer (check, outputs): it is
// poisoned first, so that a copy that fails (a faulted kernel's sticky
// error) leaves NaN where the model has values, never the model's answer.
void DeviceProblem::download(int r, RankTensors* got) const {
  const DeviceRank& d = dev_[r];
  std::fill(got->out.begin(), got->out.end(), (uint8_t)0xff);
  memset(got->outLse.data(), 0xff, got->outLse.size() * sizeof(float));
  auto copy = [r](void* to, const void* from, size_t bytes, const char* what) {
    if (bytes == 0) return;
    const cudaError_t e = cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) ADD_FAILURE() << "rank " << r << ": copying " << what << " back: " << cudaGetErrorString(e);
  };
  copy(got->out.data(), d.out.ptr, d.out.bytes, "out");
  copy(got->outLse.data(), d.outLse.ptr, d.outLse.bytes, "outLse");
}

RankTensors DeviceProblem::outputs(int r) const {
  RankTensors got = want_[r];
  download(r, &got);
  return got;
}

namespace {

// Mismatches of the values, else bytes written outside the call's elements.
Mismatch withOutside(Mismatch m, const Config& cfg, int nRanks, const CallShape& shape, const Strides& s,
                     const std::vector<RankTensors>& got, const std::vector<int>& ranks) {
  if (m.count) return m;
  for (int r : ranks) {
    std::string first;
    const size_t touched = touchedOutside(cfg, nRanks, r, shape, s, got[r], &first);
    if (touched) return {touched, "rank " + std::to_string(r) + ": " + first + " written (no longer 0xff)"};
  }
  return m;
}

}  // namespace

Mismatch DeviceProblem::check(int r) const {
  std::vector<RankTensors> got = want_;  // the other ranks compare equal
  download(r, &got[r]);
  const Mismatch reference = withOutside(compareOutputs(cfg_, nRanks_, batch_, strides_, got, want_, &shape_), cfg_,
                                         nRanks_, shape_, strides_, got, {r});
  return withOracle(reference, oracleMismatches(oracleView(), got, {r}));
}

Mismatch DeviceProblem::checkAll() const {
  std::vector<RankTensors> got = want_;
  std::vector<int> all;
  for (int r = 0; r < nRanks_; r++) {
    OnDevice on(deviceOf(r));
    download(r, &got[r]);
    all.push_back(r);
  }
  const Mismatch reference = withOutside(compareOutputs(cfg_, nRanks_, batch_, strides_, got, want_, &shape_), cfg_,
                                         nRanks_, shape_, strides_, got, all);
  return withOracle(reference, oracleMismatches(oracleView(), got, all));
}

oracle::Problem DeviceProblem::oracleView() const { return oracleProblem(cfg_, nRanks_, batch_, strides_, host_, counts_); }

}  // namespace test
}  // namespace nccl_dcp
