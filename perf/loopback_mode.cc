/*************************************************************************
 * Loopback hooks (--virtual-ranks N): N virtual ranks on one GPU, the production kernel
 * in one cooperative launch. The baseline is the unfused path without NCCL
 * (which cannot put several ranks on one GPU): one copy kernel doing every
 * virtual rank's all-to-all + one combine kernel for every rank. The floors
 * are local copies of the same all-to-all traffic, and the ideal time is
 * the bytes the op must move at the measured copy bandwidth.
 ************************************************************************/
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "baseline_kernels.h"
#include "launch.h"
#include "loopback.h"
#include "mode.h"
#include "topology.h"

namespace nccl_dcp {
namespace perf {

namespace {

// Every virtual rank's tensors in one allocation each, rank r at + r * the
// size of one rank's (the receive buffers: cp sources per rank).
struct LoopbackTensors {
  char *in, *out, *outBase, *recv;
  float *lse, *outLse, *outLseBase, *recvLse;
  size_t inBytes, lseBytes, outBytes, outLseBytes;  // one rank's, for the largest batch
};

// The loopback baseline. All-to-all: source c writes its block for every
// destination d into d's receive buffer [src][rows][Hl][D]; then, unless
// `allToAllOnly`, the combine of every rank. One launch each for all ranks.
void launchLoopbackBaseline(const Config& cfg, int cp, int rows, const LoopbackTensors& t, bool allToAllOnly,
                            cudaStream_t s) {
  const Strides packed = packedStrides(cfg, cp);
  const int64_t units = (int64_t)rows * cfg.localHeads, headBytes = (int64_t)cfg.headDim * cfg.eltSize;
  CallShape shape;
  NCCL_OR_DIE(resolveCallArgs(nullptr, cfg, cp, rows, &shape));
  const CallBuffers in = {t.in, t.lse, nullptr, nullptr};
  PackParams p = packLaunch(cfg, cp, shape, 0, rows, in, t.recv, t.recvLse, packed);
  p.peerUnits = cp * units;
  const PackCopies pc = {cp, (int64_t)t.inBytes, (int64_t)t.lseBytes, units * headBytes, units * 4};
  CUDA_OR_DIE(launchPackCopies(p, pc, s));
  if (allToAllOnly) return;
  const CombineParams m =
      combineLaunch(cfg, cp, shape, 0, 0, rows, t.recv, t.recvLse, t.outBase, t.outLseBase, packed, nullptr);
  const CombineCopies mc = {cp, cp * units * headBytes, cp * units * 4, (int64_t)t.outBytes, (int64_t)t.outLseBytes};
  CUDA_OR_DIE(launchCombineCopies(m, mc, s));
}

// Device-to-device copy bandwidth (read + write counted), median of 10.
double measureCopyGBps(cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  void *src, *dst;
  CUDA_OR_DIE(cudaMalloc(&src, bytes));
  CUDA_OR_DIE(cudaMalloc(&dst, bytes));
  CUDA_OR_DIE(cudaMemsetAsync(src, 1, bytes, stream));
  cudaEvent_t e0, e1;
  CUDA_OR_DIE(cudaEventCreate(&e0));
  CUDA_OR_DIE(cudaEventCreate(&e1));
  std::vector<double> gbps;
  for (int i = 0; i < 12; i++) {
    CUDA_OR_DIE(cudaEventRecord(e0, stream));
    CUDA_OR_DIE(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    CUDA_OR_DIE(cudaEventRecord(e1, stream));
    CUDA_OR_DIE(cudaEventSynchronize(e1));
    float ms;
    CUDA_OR_DIE(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) gbps.push_back(2.0 * bytes / (ms * 1e6));
  }
  CUDA_OR_DIE(cudaEventDestroy(e0));
  CUDA_OR_DIE(cudaEventDestroy(e1));
  CUDA_OR_DIE(cudaFree(src));
  CUDA_OR_DIE(cudaFree(dst));
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

class LoopbackMode : public Mode {
 public:
  LoopbackMode(const Args& a, Inputs& inputs, std::unique_ptr<Loopback> lb)
      : Mode(lb->config()), cp_(a.virtualRanks), inputs_(inputs), lb_(std::move(lb)) {
    CUDA_OR_DIE(cudaGetDevice(&dev_));
    CUDA_OR_DIE(cudaGetDeviceProperties(&prop_, dev_));
    cudaStream_t stream;
    CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    slots_.push_back({dev_, stream});
    copyGBps_ = measureCopyGBps(stream);
    allocTensors(std::max<int64_t>(a.maxRows, 1));
    allocFloors(std::max<int64_t>(a.maxRows, 1));
  }

  ~LoopbackMode() override {
    for (void* p : {(void*)t_.in, (void*)t_.lse, (void*)t_.out, (void*)t_.outLse, (void*)t_.outBase,
                    (void*)t_.outLseBase, (void*)t_.recv, (void*)t_.recvLse, (void*)floorSrc_, (void*)floorDst_,
                    (void*)flagLines_, (void*)rig_.state})
      cudaFree(p);
    cudaStreamDestroy(slots_[0].stream);
  }

  int nRanks() const override { return cp_; }

  std::string title() const override {
    char s[1024];
    snprintf(s, sizeof(s),
             "# nccl-dcp %d  NCCL %d  loopback: %d virtual ranks on %s; device-to-device copy %.0f GB/s (read + write)\n"
             "# baseline: one copy kernel doing every virtual rank's all-to-all + one combine kernel for all",
             NCCL_DCP_VERSION_CODE, ncclVersion(), cp_, prop_.name, copyGBps_);
    return s;
  }

  std::vector<std::string> rankLines() const override {
    char s[1024];
    snprintf(s, sizeof(s), "#  GPU %d  %s  ranks 0..%d (virtual)", dev_, prop_.name, cp_ - 1);
    std::vector<std::string> lines = {s};
    // The machine's view of this GPU (no communicator: the topology model alone).
    char busId[16] = "";
    CUDA_OR_DIE(cudaDeviceGetPCIBusId(busId, sizeof(busId), dev_));
    std::string why, pinning;
    const ncclDcpTopology_t t = reportForGpus(systemTopology(&why), why.c_str(), {busId}, 0);
    NCCL_OR_DIE(pinThreadToGpu(dev_, &pinning));
    appendTopologyLines(t, pinning, &lines);
    return lines;
  }

  RunInfo runInfo() const override {
    RunInfo r;
    r.mode = "loopback";
    r.provider = "loopback";
    r.device = prop_.name;
    r.nRanks = cp_;
    r.copyGBps = copyGBps_;
    r.ncclVersion = ncclVersion();
    return r;
  }

  std::vector<DeviceInfo> devices() const override {
    DeviceInfo d;  // rank 0 stands for the virtual ranks, all on this GPU
    d.pid = (int)getpid();
    d.device = dev_;
    gethostname(d.hostname, sizeof(d.hostname) - 1);
    CUDA_OR_DIE(cudaDeviceGetPCIBusId(d.busId, sizeof(d.busId), dev_));
    snprintf(d.name, sizeof(d.name), "%s", prop_.name);
    return {d};
  }

  std::string protocolOf(int64_t rows) const override {
    const ProtocolPolicy& p = lb_->engine().policy;
    return protocolsOfBatch(rows, cfg_.maxBatch, (int)p.small, p.simpleForLarge ? p.simpleMinRows : 0);
  }

  Floors floors() const override {
    Floors f;
    f.measured = true;
    f.local = true;
    f.where = "within the GPU (every virtual rank's all-to-all traffic, one copy)";
    f.sms = prop_.multiProcessorCount;
    f.roundTrip = "between two warps of one block (flags in local memory)";
    return f;
  }

  void prepare(int64_t) override {}

  void enqueue(Call c, int64_t rows) override {
    const cudaStream_t s = slots_[0].stream;
    switch (c) {
      case Call::Fused: NCCL_OR_DIE(lb_->call(calls_.data(), (int)rows, nullptr, s)); break;
      case Call::Baseline: launchLoopbackBaseline(cfg_, cp_, (int)rows, t_, false, s); break;
      case Call::BaselineAllToAll: launchLoopbackBaseline(cfg_, cp_, (int)rows, t_, true, s); break;
      default: enqueueFloor(rig_, c, rows, s);
    }
  }

  int64_t countWrong(Call c, int64_t rows) override {
    const bool base = c != Call::Fused;
    char* out = base ? t_.outBase : t_.out;
    float* outLse = base ? t_.outLseBase : t_.outLse;
    // Poisoned on the call's stream (a non-blocking stream does not wait
    // for the legacy default stream).
    CUDA_OR_DIE(cudaMemsetAsync(out, 0xff, cp_ * t_.outBytes, slots_[0].stream));
    CUDA_OR_DIE(cudaMemsetAsync(outLse, 0xff, cp_ * t_.outLseBytes, slots_[0].stream));
    enqueue(c, rows);
    syncSlots();
    std::vector<uint8_t> got(rows * cfg_.localHeads * cfg_.headDim * cfg_.eltSize);
    std::vector<float> gotLse(rows * cfg_.localHeads);
    int64_t wrong = 0;
    for (int r = 0; r < cp_; r++) {
      CUDA_OR_DIE(cudaMemcpy(got.data(), out + r * t_.outBytes, got.size(), cudaMemcpyDeviceToHost));
      CUDA_OR_DIE(cudaMemcpy(gotLse.data(), (char*)outLse + r * t_.outLseBytes, gotLse.size() * 4,
                             cudaMemcpyDeviceToHost));
      wrong += inputs_.countWrong(r, rows, got.data(), gotLse.data());
    }
    return wrong;
  }

  // Every rank's inputs read, the payload written into and read out of the
  // peers' workspaces, the outputs written: at the copy bandwidth.
  double idealUs(int64_t rows) const override {
    const double unit = (double)cfg_.headDim * cfg_.eltSize + 4, b = (double)rows, cp = cp_;
    const double bytes = cp * b * cp * cfg_.localHeads * unit + 2.0 * cp * (cp - 1) * b * cfg_.localHeads * unit +
                         cp * b * cfg_.localHeads * unit;
    return bytes / (copyGBps_ * 1e3);
  }

  bool roundTripTimedOut() override { return timedOut(rig_); }
  void checkAsyncErrors() override { NCCL_OR_DIE(lb_->asyncError()); }

 private:
  static int ncclVersion() {
    int v = 0;
    ncclGetVersion(&v);
    return v;
  }

  void allocTensors(int64_t maxRows) {
    const size_t units = (size_t)maxRows * cfg_.localHeads, headBytes = (size_t)cfg_.headDim * cfg_.eltSize;
    t_.inBytes = units * cp_ * headBytes;
    t_.lseBytes = units * cp_ * 4;
    t_.outBytes = units * headBytes;
    t_.outLseBytes = units * 4;
    CUDA_OR_DIE(cudaMalloc(&t_.in, cp_ * t_.inBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.lse, cp_ * t_.lseBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.out, cp_ * t_.outBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.outLse, cp_ * t_.outLseBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.outBase, cp_ * t_.outBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.outLseBase, cp_ * t_.outLseBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.recv, (size_t)cp_ * cp_ * t_.outBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.recvLse, (size_t)cp_ * cp_ * t_.outLseBytes));
    for (int r = 0; r < cp_; r++) {
      CUDA_OR_DIE(cudaMemcpy(t_.in + r * t_.inBytes, inputs_.partialOut(r).data(), t_.inBytes, cudaMemcpyHostToDevice));
      CUDA_OR_DIE(cudaMemcpy((char*)t_.lse + r * t_.lseBytes, inputs_.partialLse(r).data(), t_.lseBytes,
                             cudaMemcpyHostToDevice));
      calls_.push_back({t_.in + r * t_.inBytes, (float*)((char*)t_.lse + r * t_.lseBytes), t_.out + r * t_.outBytes,
                        (float*)((char*)t_.outLse + r * t_.outLseBytes)});
    }
  }

  // (a), (b): the all-to-all traffic of every virtual rank (cp (cp - 1)
  // blocks of a rank's share; one rank: its partials) as one local copy.
  void allocFloors(int64_t maxRows) {
    const int64_t share = (int64_t)cfg_.localHeads * cfg_.headDim * cfg_.eltSize;
    rig_.copies.bytesPerRow = cp_ > 1 ? (int64_t)cp_ * (cp_ - 1) * share : share;
    const size_t bytes = (size_t)(maxRows * rig_.copies.bytesPerRow);
    CUDA_OR_DIE(cudaMalloc(&floorSrc_, bytes));
    CUDA_OR_DIE(cudaMalloc(&floorDst_, bytes));
    CUDA_OR_DIE(cudaMemset(floorSrc_, 1, bytes));
    rig_.copies.src = {floorSrc_};
    rig_.copies.dst = {floorDst_};
    CUDA_OR_DIE(cudaMalloc(&flagLines_, 256));
    CUDA_OR_DIE(cudaMemset(flagLines_, 0, 256));
    rig_.flags = localFlagPlan(flagLines_);
    rig_.state = newRoundTripState();
  }

  int cp_, dev_ = 0;
  Inputs& inputs_;
  std::unique_ptr<Loopback> lb_;
  cudaDeviceProp prop_;
  double copyGBps_ = 0;
  LoopbackTensors t_ = {};
  std::vector<CallBuffers> calls_;
  char *floorSrc_ = nullptr, *floorDst_ = nullptr, *flagLines_ = nullptr;
  FloorRig rig_;
};

}  // namespace

std::unique_ptr<Mode> makeLoopbackMode(const Args& a, Inputs& inputs) {
  const ncclDcpConfig_t c = configOf(a);
  std::unique_ptr<Loopback> lb;
  NCCL_OR_DIE(Loopback::create(&c, a.virtualRanks, &lb));
  return std::unique_ptr<Mode>(new LoopbackMode(a, inputs, std::move(lb)));
}

}  // namespace perf
}  // namespace nccl_dcp
