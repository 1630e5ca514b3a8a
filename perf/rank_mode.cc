/*************************************************************************
 * Real-rank hooks: this thread's GPUs (-g) as NCCL ranks of one
 * communicator spanning every thread (-t) of every MPI process. Baseline,
 * per scatter mode: the exchange of the data and of the LSEs (one group) +
 * the combine kernel, inputs already in the exchange's send layout (the
 * pack is not timed): HEAD ncclAlltoAll of each peer's heads; TOKEN
 * ncclAlltoAll of each peer's rows in token layout, blocks padded to
 * ceil(B/cp) rows (equal sizes), then the combine of the rank's rows; NONE
 * ncclAllGather of every partial, then the combine of every row. NONE's
 * baseline 2: the HEAD call (a second context, HEAD mode, same
 * communicator) + ncclAllGather of the merged heads (rank-major). Floors: the
 * peers' addresses in an NCCL window registered for them (LSA pointers of
 * the device API), so the same code serves threads and processes.
 ************************************************************************/
#include <unistd.h>

#include <cstdio>

#include "baseline_kernels.h"
#include "enums.h"
#include "launch.h"
#include "mode.h"
#include "topology.h"

namespace nccl_dcp {
namespace perf {

namespace {

constexpr size_t kFlagBytes = 4096;  // the window's flag lines, after the data

// One rank this thread drives.
struct Rank {
  int rank = 0, dev = 0;
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  ncclDcpContext_t ctx = nullptr;
  // The second context (secondContextConfig): NONE's baseline 2 in HEAD
  // mode, -B 3 on the native wire; else null.
  ncclDcpContext_t ctx2 = nullptr;
  ncclDcpTopology_t topo = NCCL_DCP_TOPOLOGY_INITIALIZER;
  char *in = nullptr, *inPeerMajor = nullptr, *out = nullptr, *outBase = nullptr, *recv = nullptr;
  size_t inBytes = 0, inPeerMajorBytes = 0;
  float *lse = nullptr, *lsePeerMajor = nullptr, *outLse = nullptr, *outLseBase = nullptr, *recvLse = nullptr;
  char *outHead = nullptr, *gather = nullptr;  // baseline 2 (ncclMemAlloc)
  float *outLseHead = nullptr, *gatherLse = nullptr;
  size_t outBytes = 0, outLseBytes = 0;
  ncclDcpOutput_t outReg = nullptr;  // --registered-out: out and outLse (ncclMemAlloc), registered on ctx
  // floors
  void* window = nullptr;  // ncclMemAlloc
  ncclWindow_t win = nullptr;
  char* floorSrc = nullptr;
  FloorRig rig;
};

class RankMode : public Mode {
 public:
  RankMode(const Args& a, const Placement& p, int thread, Team& team, Inputs& inputs)
      : Mode(inputs.config()), a_(a), place_(p), inputs_(inputs), maxRows_(std::max<int64_t>(a.maxRows, 1)) {
    for (int g = 0; g < p.gpusPerThread; g++) {
      ranks_.emplace_back();
      ranks_.back().rank = p.rankOf(thread, g);
      ranks_.back().dev = p.deviceOf(thread, g);
    }
    NCCL_OR_DIE(pinThreadToGpu(ranks_[0].dev, &pinning_));  // before NCCL starts its own threads
    initComms(thread, team);
    for (Rank& r : ranks_) allocTensors(r);
    if (a.registeredOut) registerOutputs();
    if (a.floors && floorsReachable()) initFloors();
    team.barrier(thread);  // every rank's flags are zero before any partner writes
  }

  ~RankMode() override {
    NCCL_OR_DIE(ncclGroupStart());  // collective: every GPU of this thread at once
    for (Rank& r : ranks_)
      if (r.win) NCCL_OR_DIE(ncclCommWindowDeregister(r.comm, r.win));
    NCCL_OR_DIE(ncclGroupEnd());
    std::vector<ncclDcpContext_t> ctxs, seconds;
    for (Rank& r : ranks_) {
      if (r.outReg) NCCL_OR_DIE(ncclDcpOutputDeregister(r.ctx, r.outReg));
      ctxs.push_back(r.ctx);
      if (r.ctx2) seconds.push_back(r.ctx2);
    }
    if (!seconds.empty()) NCCL_OR_DIE(ncclDcpContextDestroyGroup((int)seconds.size(), seconds.data()));
    NCCL_OR_DIE(ncclDcpContextDestroyGroup((int)ctxs.size(), ctxs.data()));
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      for (void* q : {(void*)r.in, (void*)r.lse, (void*)r.outBase, (void*)r.outLseBase, (void*)r.floorSrc,
                      (void*)r.rig.state})
        CUDA_OR_DIE(cudaFree(q));
      for (void* q : {(void*)r.out, (void*)r.outLse}) {
        if (r.outReg) NCCL_OR_DIE(ncclMemFree(q));
        else CUDA_OR_DIE(cudaFree(q));
      }
      for (void* q : {(void*)r.inPeerMajor, (void*)r.lsePeerMajor, (void*)r.recv, (void*)r.recvLse})
        if (q) NCCL_OR_DIE(ncclMemFree(q));
      for (void* q : {(void*)r.outHead, (void*)r.outLseHead, (void*)r.gather, (void*)r.gatherLse})
        if (q) NCCL_OR_DIE(ncclMemFree(q));
      if (r.window) NCCL_OR_DIE(ncclMemFree(r.window));
      CUDA_OR_DIE(cudaStreamDestroy(r.stream));
    }
    NCCL_OR_DIE(ncclGroupStart());
    for (Rank& r : ranks_) NCCL_OR_DIE(ncclCommFinalize(r.comm));
    NCCL_OR_DIE(ncclGroupEnd());
    for (Rank& r : ranks_) NCCL_OR_DIE(ncclCommDestroy(r.comm));
  }

  int nRanks() const override { return place_.nRanks(); }

  std::string title() const override {
    cudaDeviceProp prop;
    CUDA_OR_DIE(cudaGetDeviceProperties(&prop, ranks_[0].dev));
    char s[1024];
    snprintf(s, sizeof(s), "# nccl-dcp %d  NCCL %d  %d rank(s): %d process(es) x %d thread(s) x %d GPU(s), %s%s",
             NCCL_DCP_VERSION_CODE, ncclVersion(), place_.nRanks(), place_.processes, place_.threads,
             place_.gpusPerThread, prop.name,
             a_.registeredOut ? "\n# outputs registered: NONE's phase 2 into the peers' directly" : "");
    return s;
  }

  std::vector<std::string> rankLines() const override {
    char host[64] = "?";
    gethostname(host, sizeof(host) - 1);
    std::vector<std::string> lines;
    for (const Rank& r : ranks_) {
      char s[1024];
      snprintf(s, sizeof(s),
               "#  rank %d  pid %d on %s  GPU %d  %s  path %s (%s)  protocol %s  LSA team %d of %d", r.rank,
               (int)getpid(), host, r.dev, r.topo.busId[r.rank], r.topo.path == ncclDcpPathFused ? "fused" : "fallback",
               providerName(r.topo.provider), protocolName(r.topo.protocol), r.topo.lsaSize, r.topo.nRanks);
      lines.push_back(s);
      if (r.topo.pathNote[0]) lines.push_back(std::string("#  rank ") + std::to_string(r.rank) + ": " + r.topo.pathNote);
      appendTopologyLines(r.topo, pinning_, &lines);
    }
    return lines;
  }

  RunInfo runInfo() const override {
    cudaDeviceProp prop;
    CUDA_OR_DIE(cudaGetDeviceProperties(&prop, ranks_[0].dev));
    RunInfo r;
    r.mode = "ranks";
    r.device = prop.name;
    r.nRanks = nRanks();
    r.placement = place_;
    r.ncclVersion = ncclVersion();
    r.provider = providerName(ranks_[0].topo.provider);
    if (cfg_.scatter == Scatter::None) r.noneAlgo = noneRelays(cfg_, nRanks()) ? "two_phase" : "direct";
    return r;
  }

  std::vector<DeviceInfo> devices() const override {
    std::vector<DeviceInfo> out;
    for (const Rank& r : ranks_) {
      cudaDeviceProp prop;
      CUDA_OR_DIE(cudaGetDeviceProperties(&prop, r.dev));
      DeviceInfo d;
      d.rank = r.rank;
      d.pid = (int)getpid();
      d.device = r.dev;
      gethostname(d.hostname, sizeof(d.hostname) - 1);
      snprintf(d.busId, sizeof(d.busId), "%s", r.topo.busId[r.rank]);
      snprintf(d.name, sizeof(d.name), "%s", prop.name);
      out.push_back(d);
    }
    return out;
  }

  // The contexts agreed on one path and policy: rank 0's of this thread's.
  std::string protocolOf(int64_t rows) const override {
    const ncclDcpTopology_t& t = ranks_[0].topo;
    if (t.path != ncclDcpPathFused) return rows > 0 ? "fallback" : "-";
    return protocolsOfBatch(rows, cfg_.maxBatch, t.protocol, t.simpleMinRows);
  }

  Floors floors() const override { return floors_; }

  // The baseline's inputs in its exchange's send layout: HEAD peer-major
  // [cp][B][Hl] (the pack kernel), TOKEN each peer's rows [cp][ceil(B/cp)][H]
  // (padding rows unused), NONE the partials as they are [B][H].
  void prepare(int64_t rows) override {
    if (a_.baseline == kBaselineOff || a_.baseline == kBaselineNativeWire) return;
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      CallShape shape;
      NCCL_OR_DIE(resolveCallArgs(nullptr, cfg_, nRanks(), (int)rows, &shape));
      if (cfg_.scatter == Scatter::Head) {
        const CallBuffers in = {r.in, r.lse, nullptr, nullptr};
        const PackParams p = makePackParams(baselineConfig(cfg_), nRanks(), r.rank, shape, 0, (int)rows, in,
                                            r.inPeerMajor, r.lsePeerMajor, packedStrides(cfg_, nRanks()));
        NCCL_OR_DIE(launchPack(p, r.stream));
        continue;
      }
      const size_t rowBytes = (size_t)shape.heads * cfg_.headDim * cfg_.eltSize, rowLse = (size_t)shape.heads * 4;
      if (cfg_.scatter == Scatter::None) {
        CUDA_OR_DIE(cudaMemcpyAsync(r.inPeerMajor, r.in, rows * rowBytes, cudaMemcpyDeviceToDevice, r.stream));
        CUDA_OR_DIE(cudaMemcpyAsync(r.lsePeerMajor, r.lse, rows * rowLse, cudaMemcpyDeviceToDevice, r.stream));
        continue;
      }
      const int64_t block = tokenBlockRows(nRanks(), rows);
      for (int d = 0; d < nRanks(); d++) {
        const int64_t first = shape.split.start[d], n = shape.split.start[d + 1] - first;
        CUDA_OR_DIE(cudaMemcpyAsync(r.inPeerMajor + d * block * rowBytes, r.in + first * rowBytes, n * rowBytes,
                                    cudaMemcpyDeviceToDevice, r.stream));
        CUDA_OR_DIE(cudaMemcpyAsync((char*)r.lsePeerMajor + d * block * rowLse, (char*)r.lse + first * rowLse,
                                    n * rowLse, cudaMemcpyDeviceToDevice, r.stream));
      }
    }
    syncSlots();
  }

  void enqueue(Call c, int64_t rows) override {
    switch (c) {
      case Call::Fused: return enqueueFused(rows);
      case Call::Baseline:
        if (a_.baseline == kBaselineNativeWire) return enqueueFused(rows, true);
        enqueueAllToAll(rows, true);
        return enqueueCombine(rows);
      case Call::BaselineAllToAll: return enqueueAllToAll(rows, false);
      case Call::Baseline2: return enqueueHeadThenGather(rows);
      default:
        for (Rank& r : ranks_) {
          CUDA_OR_DIE(cudaSetDevice(r.dev));
          enqueueFloor(r.rig, c, rows, r.stream);
        }
    }
  }

  int64_t countWrong(Call c, int64_t rows, bool negated) override {
    if (c == Call::Baseline2) return countWrongGathered(rows, negated);
    const bool base = c != Call::Fused;
    CallShape shape;
    NCCL_OR_DIE(resolveCallArgs(nullptr, cfg_, nRanks(), (int)rows, &shape));
    const size_t most = (size_t)maxOutRows((int)cfg_.scatter, nRanks(), rows) * shape.heads;
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      CUDA_OR_DIE(cudaMemsetAsync(base ? r.outBase : r.out, 0xff, most * cfg_.headDim * cfg_.eltSize, r.stream));
      CUDA_OR_DIE(cudaMemsetAsync(base ? r.outLseBase : r.outLse, 0xff, most * 4, r.stream));
    }
    enqueue(c, rows);
    syncSlots();
    std::vector<Inputs::RankOutputs> outs;
    for (Rank& r : ranks_) {
      // The rank's output rows in the mode: [B][Hl], TOKEN [n_r][H], NONE [B][H].
      const size_t units = (size_t)outRowsOf(shape, r.rank) * shape.heads;
      if (units == 0) continue;  // TOKEN: a rank of no rows (B < cp)
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      outs.push_back(download(r.rank, base ? r.outBase : r.out, units * cfg_.headDim * cfg_.eltSize,
                              base ? r.outLseBase : r.outLse, units, negated));
    }
    return inputs_.countWrong(rows, outs, base ? Wire::Native : cfg_.wire);
  }

  // Baseline 2: each rank's all-gathered merged heads [cp][B][Hl].
  int64_t countWrongGathered(int64_t rows, bool negated) {
    const size_t units = (size_t)nRanks() * rows * cfg_.localHeads;
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      CUDA_OR_DIE(cudaMemsetAsync(r.gather, 0xff, units * cfg_.headDim * cfg_.eltSize, r.stream));
      CUDA_OR_DIE(cudaMemsetAsync(r.gatherLse, 0xff, units * 4, r.stream));
    }
    enqueue(Call::Baseline2, rows);
    syncSlots();
    std::vector<Inputs::RankOutputs> gathered;
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      gathered.push_back(
          download(r.rank, r.gather, units * cfg_.headDim * cfg_.eltSize, r.gatherLse, units, negated));
    }
    return inputs_.countWrongGathered(rows, gathered);
  }

  // The inputs, and the baseline's copy of them prepare() made for this
  // size (its exchange's send layout: the same elements, moved).
  void flipInputSigns() override {
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      CUDA_OR_DIE(launchFlipSignBits(r.in, r.inBytes, cfg_.eltSize, r.stream));
      if (r.inPeerMajor) CUDA_OR_DIE(launchFlipSignBits(r.inPeerMajor, r.inPeerMajorBytes, cfg_.eltSize, r.stream));
    }
  }

  bool roundTripTimedOut() override {
    bool any = false;
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      any = any || (r.rig.state && timedOut(r.rig));
    }
    return any;
  }

  void checkAsyncErrors() override {
    for (Rank& r : ranks_) {
      ncclResult_t async = ncclSuccess;
      NCCL_OR_DIE(ncclDcpGetAsyncError(r.ctx, &async));
      NCCL_OR_DIE(async);
      if (r.ctx2) {
        NCCL_OR_DIE(ncclDcpGetAsyncError(r.ctx2, &async));
        NCCL_OR_DIE(async);
      }
    }
  }

 private:
  static int ncclVersion() {
    int v = 0;
    ncclGetVersion(&v);
    return v;
  }

  // One communicator over every rank of the run (the id from the leader),
  // then the contexts of this thread's GPUs.
  void initComms(int thread, Team& team) {
    ncclUniqueId id = {};
    if (team.leader(thread)) NCCL_OR_DIE(ncclGetUniqueId(&id));
    team.broadcast(thread, &id, sizeof(id));
    NCCL_OR_DIE(ncclGroupStart());
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      NCCL_OR_DIE(ncclCommInitRank(&r.comm, nRanks(), id, r.rank));
    }
    NCCL_OR_DIE(ncclGroupEnd());
    std::vector<ncclComm_t> comms;
    for (Rank& r : ranks_) comms.push_back(r.comm);
    std::vector<ncclDcpContext_t> ctxs(comms.size());
    const ncclDcpConfig_t c = configOf(a_);
    NCCL_OR_DIE(ncclDcpContextCreateGroup((int)comms.size(), comms.data(), &c, ctxs.data()));
    ncclDcpConfig_t c2;
    if (secondContextConfig(a_, &c2)) {  // on the same communicators
      std::vector<ncclDcpContext_t> seconds(comms.size());
      NCCL_OR_DIE(ncclDcpContextCreateGroup((int)comms.size(), comms.data(), &c2, seconds.data()));
      for (size_t i = 0; i < ranks_.size(); i++) ranks_[i].ctx2 = seconds[i];
    }
    for (size_t i = 0; i < ranks_.size(); i++) {
      ranks_[i].ctx = ctxs[i];
      NCCL_OR_DIE(ncclDcpGetTopology(ctxs[i], &ranks_[i].topo));
      CUDA_OR_DIE(cudaSetDevice(ranks_[i].dev));
      CUDA_OR_DIE(cudaStreamCreateWithFlags(&ranks_[i].stream, cudaStreamNonBlocking));
      slots_.push_back({ranks_[i].dev, ranks_[i].stream});
    }
  }

  // Per rank, for the largest batch: the inputs [B][cp][Hl]; the exchange's
  // send buffer (HEAD [cp][B][Hl], TOKEN [cp][ceil(B/cp)][H], NONE [B][H])
  // and receive buffer (HEAD [cp][B][Hl], TOKEN [cp][ceil(B/cp)][H], NONE
  // [cp][B][H]); the outputs in the mode; baseline 2's.
  void allocTensors(Rank& r) {
    const int scatter = (int)cfg_.scatter, heads = headsOf(scatter, nRanks(), cfg_.localHeads);
    const size_t units = (size_t)maxRows_ * cfg_.localHeads, headBytes = (size_t)cfg_.headDim * cfg_.eltSize;
    const size_t inUnits = units * nRanks();
    const size_t tokenUnits = (size_t)nRanks() * tokenBlockRows(nRanks(), maxRows_) * heads;
    const size_t sendUnits = scatter == ncclDcpScatterToken ? tokenUnits : inUnits;
    const size_t recvUnits = scatter == ncclDcpScatterHead    ? inUnits
                             : scatter == ncclDcpScatterToken ? tokenUnits
                                                              : (size_t)nRanks() * inUnits;
    const size_t outUnits = (size_t)maxOutRows(scatter, nRanks(), maxRows_) * heads;
    CUDA_OR_DIE(cudaSetDevice(r.dev));
    r.inBytes = inUnits * headBytes;
    r.inPeerMajorBytes = sendUnits * headBytes;
    CUDA_OR_DIE(cudaMalloc(&r.in, r.inBytes));
    CUDA_OR_DIE(cudaMalloc(&r.lse, inUnits * 4));
    // The baseline's exchange buffers from ncclMemAlloc, as nccl-tests
    // allocates them: NCCL then registers them in graph capture and moves
    // large messages without its staging copy (docs/perf.md, baseline).
    // Only a baseline that exchanges has them (-B 0 and -B 3 do not).
    if (a_.baseline == kBaselineFull || a_.baseline == kBaselineAllToAll) {
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.inPeerMajor, r.inPeerMajorBytes));
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.recv, recvUnits * headBytes));
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.lsePeerMajor, sendUnits * 4));
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.recvLse, recvUnits * 4));
    }
    r.outBytes = outUnits * headBytes;
    r.outLseBytes = outUnits * 4;
    if (a_.registeredOut) {  // registered below: NCCL maps ncclMemAlloc memory for the peers
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.out, outUnits * headBytes));
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.outLse, outUnits * 4));
    } else {
      CUDA_OR_DIE(cudaMalloc(&r.out, outUnits * headBytes));
      CUDA_OR_DIE(cudaMalloc(&r.outLse, outUnits * 4));
    }
    CUDA_OR_DIE(cudaMalloc(&r.outBase, outUnits * headBytes));
    CUDA_OR_DIE(cudaMalloc(&r.outLseBase, outUnits * 4));
    if (hasBaseline2(a_)) {  // the HEAD call's outputs are the all-gather's send buffers: ncclMemAlloc too
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.outHead, units * headBytes));
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.outLseHead, units * 4));
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.gather, nRanks() * units * headBytes));
      NCCL_OR_DIE(ncclMemAlloc((void**)&r.gatherLse, nRanks() * units * 4));
    }
    CUDA_OR_DIE(cudaMemcpy(r.in, inputs_.partialOut(r.rank).data(), r.inBytes, cudaMemcpyHostToDevice));
    CUDA_OR_DIE(cudaMemcpy(r.lse, inputs_.partialLse(r.rank).data(), inUnits * 4, cudaMemcpyHostToDevice));
  }

  // --registered-out: every rank's out and outLse of this thread, one group.
  void registerOutputs() {
    std::vector<ncclDcpContext_t> ctxs;
    std::vector<void*> outs;
    std::vector<float*> lses;
    std::vector<size_t> outBytes, lseBytes;
    for (Rank& r : ranks_) {
      ctxs.push_back(r.ctx);
      outs.push_back(r.out);
      lses.push_back(r.outLse);
      outBytes.push_back(r.outBytes);
      lseBytes.push_back(r.outLseBytes);
    }
    std::vector<ncclDcpOutput_t> handles(ranks_.size());
    NCCL_OR_DIE(ncclDcpOutputRegisterGroup((int)ctxs.size(), ctxs.data(), outs.data(), outBytes.data(), lses.data(),
                                           lseBytes.data(), handles.data()));
    for (size_t i = 0; i < ranks_.size(); i++) ranks_[i].outReg = handles[i];
  }

  // The fused call on every rank of this thread (one group); nativeWire:
  // -B 3's, the second context into the baseline's outputs.
  void enqueueFused(int64_t rows, bool nativeWire = false) {
    NCCL_OR_DIE(ncclGroupStart());
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      NCCL_OR_DIE(ncclDcpA2aLseReduce(nativeWire ? r.ctx2 : r.ctx, r.in, r.lse, nativeWire ? r.outBase : r.out,
                                      nativeWire ? r.outLseBase : r.outLse, (int)rows, nullptr, r.stream));
    }
    NCCL_OR_DIE(ncclGroupEnd());
  }

  // The baseline's exchange of the partials and, withLse, of their LSEs
  // (one group): HEAD and TOKEN ncclAlltoAll (TOKEN: blocks of ceil(B/cp)
  // rows of H heads), NONE ncclAllGather. -B 2 times the partials' alone:
  // for HEAD the bytes and the call nccl-tests' alltoall_perf times, so the
  // two can be compared.
  void enqueueAllToAll(int64_t rows, bool withLse) {
    const int heads = headsOf((int)cfg_.scatter, nRanks(), cfg_.localHeads);
    size_t units = (size_t)rows * cfg_.localHeads;                                        // HEAD: per peer
    if (cfg_.scatter == Scatter::Token) units = (size_t)tokenBlockRows(nRanks(), rows) * heads;  // per peer
    if (cfg_.scatter == Scatter::None) units = (size_t)rows * heads;                     // per rank
    NCCL_OR_DIE(ncclGroupStart());
    for (Rank& r : ranks_) {
      if (cfg_.scatter == Scatter::None) {
        NCCL_OR_DIE(ncclAllGather(r.inPeerMajor, r.recv, units * cfg_.headDim, cfg_.dtype, r.comm, r.stream));
        if (withLse) NCCL_OR_DIE(ncclAllGather(r.lsePeerMajor, r.recvLse, units, ncclFloat32, r.comm, r.stream));
        continue;
      }
      NCCL_OR_DIE(ncclAlltoAll(r.inPeerMajor, r.recv, units * cfg_.headDim, cfg_.dtype, r.comm, r.stream));
      if (withLse) NCCL_OR_DIE(ncclAlltoAll(r.lsePeerMajor, r.recvLse, units, ncclFloat32, r.comm, r.stream));
    }
    NCCL_OR_DIE(ncclGroupEnd());
  }

  // The combine of what the exchange delivered: HEAD the rank's heads of
  // every row, TOKEN its rows (the first n_r of each source's block: rows =
  // the block, row0 = the rank's first row), NONE every row.
  void enqueueCombine(int64_t rows) {
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      CallShape shape;
      NCCL_OR_DIE(resolveCallArgs(nullptr, cfg_, nRanks(), (int)rows, &shape));
      const bool token = cfg_.scatter == Scatter::Token;
      const int row0 = token ? shape.split.start[r.rank] : 0;
      const int block = token ? (int)tokenBlockRows(nRanks(), rows) : (int)rows;
      const CombineParams m = makeCombineParams(baselineConfig(cfg_), nRanks(), shape, r.rank, row0, block, r.recv,
                                                r.recvLse, r.outBase, r.outLseBase, packedStrides(cfg_, nRanks()),
                                                nullptr);
      NCCL_OR_DIE(launchCombine(m, r.stream));
    }
  }

  // NONE's baseline 2: the HEAD call, then ncclAllGather of its merged
  // heads and their LSEs (one group), rank-major [cp][B][Hl] on every rank.
  void enqueueHeadThenGather(int64_t rows) {
    const size_t units = (size_t)rows * cfg_.localHeads;
    NCCL_OR_DIE(ncclGroupStart());
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      NCCL_OR_DIE(ncclDcpA2aLseReduce(r.ctx2, r.in, r.lse, r.outHead, r.outLseHead, (int)rows, nullptr, r.stream));
    }
    NCCL_OR_DIE(ncclGroupEnd());
    NCCL_OR_DIE(ncclGroupStart());
    for (Rank& r : ranks_) {
      NCCL_OR_DIE(ncclAllGather(r.outHead, r.gather, units * cfg_.headDim, cfg_.dtype, r.comm, r.stream));
      NCCL_OR_DIE(ncclAllGather(r.outLseHead, r.gatherLse, units, ncclFloat32, r.comm, r.stream));
    }
    NCCL_OR_DIE(ncclGroupEnd());
  }

  // Peer pointers exist when every rank sits in one LSA team (the fused path).
  bool floorsReachable() {
    for (const Rank& r : ranks_)
      if (r.topo.path != ncclDcpPathFused || r.topo.lsaSize != r.topo.nRanks) {
        floors_.why = "the ranks are not all in one LSA team (fallback path): no peer pointers";
        return false;
      }
    if (nRanks() - 1 > kMaxFloorCopies) {
      floors_.why = "more ranks than the floor kernel's " + std::to_string(kMaxFloorCopies + 1);
      return false;
    }
    return true;
  }

  // A window per rank: nRanks slots of the largest share (rank p's copy
  // lands in slot `sender`), then the flag lines. Registered together (one
  // thread may drive several GPUs), then each rank's copies and flags.
  // perRow: what a rank sends each peer per batch row in the mode
  // (peerBytesPerRow: Hl * D * elt, NONE cp or 2 times that).
  void initFloors() {
    const int wireElt = wireElementBytes(cfg_.wire, cfg_.eltSize);  // the floors move what the wire does
    const int64_t perRow = peerBytesPerRow((int)cfg_.scatter, nRanks(), cfg_.localHeads, cfg_.headDim, wireElt,
                                           noneRelays(cfg_, nRanks()));
    const size_t slot = ((size_t)(maxRows_ * perRow) + 4095) / 4096 * 4096, winBytes = nRanks() * slot + kFlagBytes;
    for (Rank& r : ranks_) {
      CUDA_OR_DIE(cudaSetDevice(r.dev));
      NCCL_OR_DIE(ncclMemAlloc(&r.window, winBytes));
      CUDA_OR_DIE(cudaMemset((char*)r.window + nRanks() * slot, 0, kFlagBytes));
      CUDA_OR_DIE(cudaMalloc(&r.floorSrc, nRanks() * slot));
      CUDA_OR_DIE(cudaMemset(r.floorSrc, 1, nRanks() * slot));
    }
    NCCL_OR_DIE(ncclGroupStart());
    for (Rank& r : ranks_) NCCL_OR_DIE(ncclCommWindowRegister(r.comm, r.window, winBytes, &r.win, NCCL_WIN_DEFAULT));
    NCCL_OR_DIE(ncclGroupEnd());
    for (Rank& r : ranks_) planFloors(r, slot, perRow);
    describeFloors();
  }

  void planFloors(Rank& r, size_t slot, int64_t perRow) {
    CUDA_OR_DIE(cudaSetDevice(r.dev));
    std::vector<char*> peer;
    CUDA_OR_DIE(windowPeerPointers(r.win, nRanks(), &peer));
    r.rig.copies.bytesPerRow = perRow;
    for (int p = 0; p < nRanks(); p++)
      if (p != r.rank || nRanks() == 1) {
        r.rig.copies.src.push_back(r.floorSrc + p * slot);
        r.rig.copies.dst.push_back(peer[p] + r.rank * slot);
      }
    char* flags = (char*)r.window + nRanks() * slot;
    const int partner = r.rank ^ 1;
    if (partner < nRanks()) {
      r.rig.flags.sides = 1;
      r.rig.flags.initiator[0] = r.rank < partner;
      r.rig.flags.inbox[0] = (uint64_t*)flags;
      r.rig.flags.outbox[0] = (uint64_t*)(peer[partner] + nRanks() * slot);
    } else {
      r.rig.flags = localFlagPlan(flags);
    }
    r.rig.state = newRoundTripState();
  }

  void describeFloors() {
    cudaDeviceProp prop;
    CUDA_OR_DIE(cudaGetDeviceProperties(&prop, ranks_[0].dev));
    floors_.measured = true;
    floors_.sms = prop.multiProcessorCount;
    floors_.local = nRanks() == 1;
    floors_.where = floors_.local ? "into the rank's own NCCL window (one rank: a local copy)"
                                  : "into the peers' NCCL windows (LSA pointers)";
    floors_.roundTrip = floors_.local ? "between two warps of one block (one rank: local memory)"
                        : nRanks() % 2 ? "between ranks r and r^1 through their NCCL windows (the last rank: two local warps)"
                                       : "between ranks r and r^1 through their NCCL windows";
  }

  const Args a_;
  const Placement place_;
  Inputs& inputs_;
  const int64_t maxRows_;
  std::vector<Rank> ranks_;
  std::string pinning_;  // what pinThreadToGpu did with this thread
  Floors floors_;
};

}  // namespace

std::unique_ptr<Mode> makeRankMode(const Args& a, const Placement& p, int thread, Team& team, Inputs& inputs) {
  return std::unique_ptr<Mode>(new RankMode(a, p, thread, team, inputs));
}

}  // namespace perf
}  // namespace nccl_dcp
