/*************************************************************************
 * Loopback hooks (--virtual-ranks N): N virtual ranks on one GPU, the production kernel
 * in one cooperative launch. The baseline is the unfused path without NCCL
 * (which cannot put several ranks on one GPU): one copy kernel doing every
 * virtual rank's exchange + one combine kernel for every rank. The
 * exchange is the mode's (--scatter): HEAD the all-to-all of each peer's
 * heads (the pack kernel writing straight into the receive buffers), TOKEN
 * the all-to-all of each peer's rows in token layout (blocks of ceil(B/cp)
 * rows), NONE the all-gather of every partial; NONE's baseline 2 is the
 * HEAD call (a second loopback in HEAD mode) + the all-gather of its merged
 * heads, as copies: one copy straight into every rank's output (which real
 * ranks cannot do with unregistered buffers), or with --staged-gather 1 two,
 * through a staging buffer, as NCCL's all-gather moves unregistered
 * buffers (into the peer's staging FIFO, then out of it). -B 3's baseline
 * is the fused call on the native wire (a second loopback). The floors are
 * local copies of the mode's traffic, and the ideal time is the bytes the
 * op must move at the measured copy bandwidth.
 ************************************************************************/
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "baseline_kernels.h"
#include "enums.h"
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
  // NONE's baseline 2: the HEAD call's outputs, and the all-gather of them
  // ([cp][B][Hl] on every rank).
  char *outHead, *gather, *stage;  // stage: --staged-gather's copy of gather's layout
  float *outLseHead, *gatherLse, *stageLse;
  size_t outHeadBytes, outLseHeadBytes;
};

// The exchange of TOKEN's (all-to-all of the rows in token layout, blocks
// of ceil(B/cp) rows) or NONE's (all-gather of every partial) baseline: each
// virtual rank's partials and LSEs into every rank's receive buffer
// [src][block rows][H].
Exchange partialsExchange(const Config& cfg, int cp, int rows, const LoopbackTensors& t) {
  CallShape shape;
  NCCL_OR_DIE(resolveCallArgs(nullptr, cfg, cp, rows, &shape));
  const bool token = cfg.scatter == Scatter::Token;
  const int64_t blockRows = token ? tokenBlockRows(cp, rows) : rows;
  Exchange x = {};
  x.ranks = cp;
  x.planes = 2;
  const int64_t rowBytes[2] = {(int64_t)shape.heads * cfg.headDim * cfg.eltSize, (int64_t)shape.heads * 4};
  const char* src[2] = {t.in, (const char*)t.lse};
  char* dst[2] = {t.recv, (char*)t.recvLse};
  const int64_t srcRank[2] = {(int64_t)t.inBytes, (int64_t)t.lseBytes};
  for (int k = 0; k < 2; k++) {
    ExchangePlane& p = x.plane[k];
    p.src = src[k];
    p.dst = dst[k];
    p.srcRank = srcRank[k];
    p.dstSlot = blockRows * rowBytes[k];
    p.dstRank = cp * p.dstSlot;
    for (int d = 0; d < cp; d++) {
      p.srcOff[d] = token ? shape.split.start[d] * rowBytes[k] : 0;
      p.bytes[d] = (token ? shape.split.start[d + 1] - shape.split.start[d] : rows) * rowBytes[k];
    }
  }
  return x;
}

// NONE's baseline 2 after the HEAD call: every rank's merged heads and
// their LSEs to every rank, [src][rows][Hl] (rank-major: no transpose),
// into t.gather, or into t.stage (the same layout) when toStage.
Exchange mergedHeadsGather(const Config& cfg, int cp, int rows, const LoopbackTensors& t, bool toStage) {
  Exchange x = {};
  x.ranks = cp;
  x.planes = 2;
  const int64_t bytes[2] = {(int64_t)rows * cfg.localHeads * cfg.headDim * cfg.eltSize, (int64_t)rows * cfg.localHeads * 4};
  const char* src[2] = {t.outHead, (const char*)t.outLseHead};
  char* dst[2] = {toStage ? t.stage : t.gather, toStage ? (char*)t.stageLse : (char*)t.gatherLse};
  const int64_t srcRank[2] = {(int64_t)t.outHeadBytes, (int64_t)t.outLseHeadBytes};
  for (int k = 0; k < 2; k++) {
    ExchangePlane& p = x.plane[k];
    p.src = src[k];
    p.dst = dst[k];
    p.srcRank = srcRank[k];
    p.dstSlot = bytes[k];
    p.dstRank = cp * bytes[k];
    for (int d = 0; d < cp; d++) p.bytes[d] = bytes[k];
  }
  return x;
}

// --staged-gather's second copy: each rank's staged blocks into its own
// output, the same (source, destination) pairs and layout as the first.
Exchange unstageGather(const Config& cfg, int cp, int rows, const LoopbackTensors& t) {
  Exchange x = mergedHeadsGather(cfg, cp, rows, t, false);
  const char* stage[2] = {t.stage, (const char*)t.stageLse};
  for (int k = 0; k < 2; k++) {
    ExchangePlane& p = x.plane[k];
    p.src = stage[k];
    p.srcRank = p.dstSlot;  // block (s -> d) staged at d * dstRank + s * dstSlot
    for (int d = 0; d < cp; d++) p.srcOff[d] = d * p.dstRank;
  }
  return x;
}

// The loopback baseline. HEAD's all-to-all: source c writes its block for
// every destination d into d's receive buffer [src][rows][Hl][D]; TOKEN's
// and NONE's exchange: partialsExchange. Then, unless `allToAllOnly`, the
// combine of every rank. One launch each for all ranks.
void launchLoopbackBaseline(const Config& fusedCfg, int cp, int rows, const LoopbackTensors& t, bool allToAllOnly,
                            cudaStream_t s) {
  const Config cfg = baselineConfig(fusedCfg);
  const Strides packed = packedStrides(cfg, cp);
  if (cfg.scatter != Scatter::Head) {
    CUDA_OR_DIE(launchExchange(partialsExchange(cfg, cp, rows, t), s));
    if (allToAllOnly) return;
    CallShape shape;
    NCCL_OR_DIE(resolveCallArgs(nullptr, cfg, cp, rows, &shape));
    const int blockRows = cfg.scatter == Scatter::Token ? (int)tokenBlockRows(cp, rows) : rows;
    const int64_t perSource = (int64_t)blockRows * shape.heads;
    const CombineParams m = makeCombineParams(cfg, cp, shape, 0, 0, blockRows, t.recv, t.recvLse, t.outBase,
                                              t.outLseBase, packed, nullptr);
    const CombineCopies mc = {cp, cp * perSource * cfg.headDim * cfg.eltSize, cp * perSource * 4,
                              (int64_t)t.outBytes, (int64_t)t.outLseBytes};
    CUDA_OR_DIE(launchCombineCopies(m, mc, s));
    return;
  }
  const int64_t units = (int64_t)rows * cfg.localHeads, headBytes = (int64_t)cfg.headDim * cfg.eltSize;
  CallShape shape;
  NCCL_OR_DIE(resolveCallArgs(nullptr, cfg, cp, rows, &shape));
  const CallBuffers in = {t.in, t.lse, nullptr, nullptr};
  PackParams p = makePackParams(cfg, cp, 0, shape, 0, rows, in, t.recv, t.recvLse, packed);
  p.peerUnits = cp * units;
  const PackCopies pc = {cp, (int64_t)t.inBytes, (int64_t)t.lseBytes, units * headBytes, units * 4};
  CUDA_OR_DIE(launchPackCopies(p, pc, s));
  if (allToAllOnly) return;
  const CombineParams m =
      makeCombineParams(cfg, cp, shape, 0, 0, rows, t.recv, t.recvLse, t.outBase, t.outLseBase, packed, nullptr);
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
  LoopbackMode(const Args& a, Inputs& inputs, std::unique_ptr<Loopback> lb, std::unique_ptr<Loopback> lb2)
      : Mode(lb->config()), cp_(a.virtualRanks), baseline_(a.baseline != kBaselineOff),
        nativeWireBaseline_(a.baseline == kBaselineNativeWire), baseline2_(hasBaseline2(a)),
        staged_(a.stagedGather != 0), registered_(a.registeredOut != 0), baseline2Name_(baseline2Name(a)),
        inputs_(inputs), lb_(std::move(lb)),
        lb2_(std::move(lb2)) {
    CUDA_OR_DIE(cudaGetDevice(&dev_));
    CUDA_OR_DIE(cudaGetDeviceProperties(&prop_, dev_));
    cudaStream_t stream;
    CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    slots_.push_back({dev_, stream});
    copyGBps_ = measureCopyGBps(stream);
    allocTensors(std::max<int64_t>(a.maxRows, 1));
    allocFloors(std::max<int64_t>(a.maxRows, 1));
    if (registered_) NCCL_OR_DIE(lb_->registerOutputs(calls_.data(), t_.outBytes, t_.outLseBytes));
  }

  ~LoopbackMode() override {
    for (void* p : {(void*)t_.in, (void*)t_.lse, (void*)t_.out, (void*)t_.outLse, (void*)t_.outBase,
                    (void*)t_.outLseBase, (void*)t_.recv, (void*)t_.recvLse, (void*)t_.outHead,
                    (void*)t_.outLseHead, (void*)t_.gather, (void*)t_.gatherLse, (void*)t_.stage, (void*)t_.stageLse,
                    (void*)floorSrc_, (void*)floorDst_,
                    (void*)flagLines_, (void*)rig_.state})
      cudaFree(p);
    cudaStreamDestroy(slots_[0].stream);
  }

  int nRanks() const override { return cp_; }

  std::string title() const override {
    const char* exchange = cfg_.scatter == Scatter::Head    ? "all-to-all"
                           : cfg_.scatter == Scatter::Token ? "all-to-all in token layout (blocks of ceil(B/cp) rows)"
                                                            : "all-gather of every partial";
    const std::string baseline = nativeWireBaseline_
                                     ? std::string("the fused call on the native wire (a second loopback)")
                                     : std::string("one copy kernel doing every virtual rank's ") + exchange +
                                           " + one combine kernel for all";
    char s[1024];
    snprintf(s, sizeof(s),
             "# nccl-dcp %d  NCCL %d  loopback: %d virtual ranks on %s; device-to-device copy %.0f GB/s (read + write)\n"
             "# scatter %s%s%s; baseline: %s%s%s",
             NCCL_DCP_VERSION_CODE, ncclVersion(), cp_, prop_.name, copyGBps_, scatterName((int)cfg_.scatter),
             cfg_.scatter != Scatter::None ? "" : noneRelays(cfg_, cp_) ? " (two phases)" : " (direct)",
             registered_ ? ", outputs registered (phase 2 into the peers' directly)" : "",
             baseline.c_str(), baseline2_ ? "\n# baseline 2: the HEAD call (a second loopback in HEAD mode) + " : "",
             baseline2_ ? baseline2Name_ : "");
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
    if (cfg_.scatter == Scatter::None) r.noneAlgo = noneRelays(cfg_, cp_) ? "two_phase" : "direct";
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
    // The engine's own choice per round: its tiers, with their fallbacks.
    return protocolsOfBatch(rows, cfg_.maxBatch,
                            [this](int64_t roundRows) { return (int)lb_->engine().protocolOfRound((int)roundRows); });
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
      case Call::Baseline:
        if (nativeWireBaseline_) {
          NCCL_OR_DIE(lb2_->call(calls2_.data(), (int)rows, nullptr, s));
        } else {
          launchLoopbackBaseline(cfg_, cp_, (int)rows, t_, false, s);
        }
        break;
      case Call::BaselineAllToAll: launchLoopbackBaseline(cfg_, cp_, (int)rows, t_, true, s); break;
      case Call::Baseline2:
        NCCL_OR_DIE(lb2_->call(calls2_.data(), (int)rows, nullptr, s));
        CUDA_OR_DIE(launchExchange(mergedHeadsGather(cfg_, cp_, (int)rows, t_, staged_), s));
        if (staged_) CUDA_OR_DIE(launchExchange(unstageGather(cfg_, cp_, (int)rows, t_), s));
        break;
      default: enqueueFloor(rig_, c, rows, s);
    }
  }

  int64_t countWrong(Call c, int64_t rows, bool negated) override {
    if (c == Call::Baseline2) return countWrongGathered(rows, negated);
    const bool base = c != Call::Fused;
    char* out = base ? t_.outBase : t_.out;
    float* outLse = base ? t_.outLseBase : t_.outLse;
    // Poisoned on the call's stream (a non-blocking stream does not wait
    // for the legacy default stream).
    CUDA_OR_DIE(cudaMemsetAsync(out, 0xff, cp_ * t_.outBytes, slots_[0].stream));
    CUDA_OR_DIE(cudaMemsetAsync(outLse, 0xff, cp_ * t_.outLseBytes, slots_[0].stream));
    enqueue(c, rows);
    syncSlots();
    CallShape shape;
    NCCL_OR_DIE(resolveCallArgs(nullptr, cfg_, cp_, (int)rows, &shape));
    std::vector<Inputs::RankOutputs> outs;
    for (int r = 0; r < cp_; r++) {
      // Rank r's output rows in the mode: [B][Hl], TOKEN [n_r][H], NONE [B][H].
      const size_t units = (size_t)outRowsOf(shape, r) * shape.heads;
      if (units == 0) continue;  // TOKEN: a rank of no rows (B < cp)
      outs.push_back(download(r, out + r * t_.outBytes, units * cfg_.headDim * cfg_.eltSize,
                              (const float*)((const char*)outLse + r * t_.outLseBytes), units, negated));
    }
    return inputs_.countWrong(rows, outs, base ? Wire::Native : cfg_.wire);
  }

  // Baseline 2: each rank's all-gathered merged heads [cp][B][Hl].
  int64_t countWrongGathered(int64_t rows, bool negated) {
    const size_t bytes = (size_t)cp_ * rows * cfg_.localHeads * cfg_.headDim * cfg_.eltSize;
    const size_t lseBytes = (size_t)cp_ * rows * cfg_.localHeads * 4;
    CUDA_OR_DIE(cudaMemsetAsync(t_.gather, 0xff, (size_t)cp_ * cp_ * t_.outHeadBytes, slots_[0].stream));
    CUDA_OR_DIE(cudaMemsetAsync(t_.gatherLse, 0xff, (size_t)cp_ * cp_ * t_.outLseHeadBytes, slots_[0].stream));
    enqueue(Call::Baseline2, rows);
    syncSlots();
    std::vector<Inputs::RankOutputs> gathered;
    for (int r = 0; r < cp_; r++) {
      gathered.push_back(download(r, t_.gather + (size_t)r * bytes, bytes,
                                  (const float*)((const char*)t_.gatherLse + (size_t)r * lseBytes), lseBytes / 4,
                                  negated));
    }
    return inputs_.countWrongGathered(rows, gathered);
  }

  void flipInputSigns() override {
    CUDA_OR_DIE(launchFlipSignBits(t_.in, cp_ * t_.inBytes, cfg_.eltSize, slots_[0].stream));
  }

  // Every rank's inputs read, the payload written into and read out of the
  // peers' workspaces, the outputs written: at the copy bandwidth.
  double idealUs(int64_t rows) const override {
    return idealBytes((int)cfg_.scatter, cp_, rows, cfg_.localHeads, cfg_.headDim, cfg_.eltSize,
                      noneRelays(cfg_, cp_), cfg_.wire == Wire::Fp8E4m3) /
           (copyGBps_ * 1e3);
  }

  bool roundTripTimedOut() override { return timedOut(rig_); }
  void checkAsyncErrors() override {
    NCCL_OR_DIE(lb_->asyncError());
    if (lb2_) NCCL_OR_DIE(lb2_->asyncError());
  }

 private:
  static int ncclVersion() {
    int v = 0;
    ncclGetVersion(&v);
    return v;
  }

  // Per rank, for the largest batch: the inputs [B][cp][Hl]; the outputs
  // in the mode ([B][Hl], TOKEN [ceil(B/cp)][H], NONE [B][H]); the
  // baseline's receive buffers (HEAD [cp][B][Hl], TOKEN [cp][ceil(B/cp)][H],
  // NONE [cp][B][H]); baseline 2's HEAD outputs and their all-gather.
  void allocTensors(int64_t maxRows) {
    const int scatter = (int)cfg_.scatter, heads = headsOf(scatter, cp_, cfg_.localHeads);
    const size_t units = (size_t)maxRows * cfg_.localHeads, headBytes = (size_t)cfg_.headDim * cfg_.eltSize;
    const size_t outUnits = (size_t)maxOutRows(scatter, cp_, maxRows) * heads;
    const size_t recvUnits = scatter == ncclDcpScatterHead    ? (size_t)cp_ * units
                             : scatter == ncclDcpScatterToken ? (size_t)cp_ * tokenBlockRows(cp_, maxRows) * heads
                                                              : (size_t)cp_ * maxRows * heads;
    t_.inBytes = units * cp_ * headBytes;
    t_.lseBytes = units * cp_ * 4;
    t_.outBytes = outUnits * headBytes;
    t_.outLseBytes = outUnits * 4;
    CUDA_OR_DIE(cudaMalloc(&t_.in, cp_ * t_.inBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.lse, cp_ * t_.lseBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.out, cp_ * t_.outBytes));
    CUDA_OR_DIE(cudaMalloc(&t_.outLse, cp_ * t_.outLseBytes));
    if (baseline_) {
      CUDA_OR_DIE(cudaMalloc(&t_.outBase, cp_ * t_.outBytes));
      CUDA_OR_DIE(cudaMalloc(&t_.outLseBase, cp_ * t_.outLseBytes));
    }
    if (baseline_ && !nativeWireBaseline_) {
      CUDA_OR_DIE(cudaMalloc(&t_.recv, (size_t)cp_ * recvUnits * headBytes));
      CUDA_OR_DIE(cudaMalloc(&t_.recvLse, (size_t)cp_ * recvUnits * 4));
    }
    if (baseline2_) {
      t_.outHeadBytes = units * headBytes;
      t_.outLseHeadBytes = units * 4;
      CUDA_OR_DIE(cudaMalloc(&t_.outHead, cp_ * t_.outHeadBytes));
      CUDA_OR_DIE(cudaMalloc(&t_.outLseHead, cp_ * t_.outLseHeadBytes));
      CUDA_OR_DIE(cudaMalloc(&t_.gather, (size_t)cp_ * cp_ * t_.outHeadBytes));
      CUDA_OR_DIE(cudaMalloc(&t_.gatherLse, (size_t)cp_ * cp_ * t_.outLseHeadBytes));
      if (staged_) {
        CUDA_OR_DIE(cudaMalloc(&t_.stage, (size_t)cp_ * cp_ * t_.outHeadBytes));
        CUDA_OR_DIE(cudaMalloc(&t_.stageLse, (size_t)cp_ * cp_ * t_.outLseHeadBytes));
      }
    }
    for (int r = 0; r < cp_; r++) {
      CUDA_OR_DIE(cudaMemcpy(t_.in + r * t_.inBytes, inputs_.partialOut(r).data(), t_.inBytes, cudaMemcpyHostToDevice));
      CUDA_OR_DIE(cudaMemcpy((char*)t_.lse + r * t_.lseBytes, inputs_.partialLse(r).data(), t_.lseBytes,
                             cudaMemcpyHostToDevice));
      calls_.push_back({t_.in + r * t_.inBytes, (float*)((char*)t_.lse + r * t_.lseBytes), t_.out + r * t_.outBytes,
                        (float*)((char*)t_.outLse + r * t_.outLseBytes)});
      if (lb2_) {  // the same inputs: into baseline 2's HEAD outputs, or -B 3's into the baseline's
        CallBuffers c2 = calls_.back();
        c2.out = baseline2_ ? t_.outHead + r * t_.outHeadBytes : t_.outBase + r * t_.outBytes;
        c2.outLse = baseline2_ ? (float*)((char*)t_.outLseHead + r * t_.outLseHeadBytes)
                               : (float*)((char*)t_.outLseBase + r * t_.outLseBytes);
        calls2_.push_back(c2);
      }
    }
  }

  // (a), (b): the mode's traffic of every virtual rank (cp (cp - 1) blocks
  // of what a rank sends a peer: peerBytesPerRow; one rank: that block) as
  // one local copy.
  void allocFloors(int64_t maxRows) {
    const int wireElt = wireElementBytes(cfg_.wire, cfg_.eltSize);  // the floor moves what the wire does
    const int64_t share =
        peerBytesPerRow((int)cfg_.scatter, cp_, cfg_.localHeads, cfg_.headDim, wireElt, noneRelays(cfg_, cp_));
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
  bool baseline_, nativeWireBaseline_, baseline2_, staged_, registered_;
  const char* baseline2Name_;
  Inputs& inputs_;
  std::unique_ptr<Loopback> lb_;
  // The same ranks' second loopback (secondContextConfig): NONE's baseline 2
  // in HEAD mode, -B 3 on the native wire; else null.
  std::unique_ptr<Loopback> lb2_;
  cudaDeviceProp prop_;
  double copyGBps_ = 0;
  LoopbackTensors t_ = {};
  std::vector<CallBuffers> calls_, calls2_;  // calls2_: lb2_'s
  char *floorSrc_ = nullptr, *floorDst_ = nullptr, *flagLines_ = nullptr;
  FloorRig rig_;
};

}  // namespace

std::unique_ptr<Mode> makeLoopbackMode(const Args& a, Inputs& inputs) {
  const ncclDcpConfig_t c = configOf(a);
  std::unique_ptr<Loopback> lb, lb2;
  NCCL_OR_DIE(Loopback::create(&c, a.virtualRanks, &lb));
  ncclDcpConfig_t c2;
  if (secondContextConfig(a, &c2)) NCCL_OR_DIE(Loopback::create(&c2, a.virtualRanks, &lb2));
  return std::unique_ptr<Mode>(new LoopbackMode(a, inputs, std::move(lb), std::move(lb2)));
}

}  // namespace perf
}  // namespace nccl_dcp
