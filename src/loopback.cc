/*************************************************************************
 * Loopback: the fused path with cp virtual ranks on one GPU (loopback.h).
 ************************************************************************/
#include "loopback.h"

#include <string>

#include "error.h"
#include "memory.h"

namespace nccl_dcp {

ncclResult_t Loopback::create(const ncclDcpConfig_t* cfgIn, int nRanks, std::unique_ptr<Loopback>* out) {
  Config cfg;
  DCPCHECK(resolveConfig(cfgIn, env(), &cfg));
  DCPCHECK(checkRanks(nRanks));
  if (nRanks > kMaxLoopbackRanks)
    return fail(ncclInvalidArgument, "nRanks %d exceeds the %d virtual ranks loopback supports",
                nRanks, kMaxLoopbackRanks);
  LinkSummary links = {true, false, false, true};
  std::unique_ptr<Loopback> lb(new Loopback());
  const int wireElt = wireElementBytes(cfg.wire, cfg.eltSize);
  const bool headShaped = workspaceHeadsPerRow(cfg, nRanks) == cfg.localHeads;  // HEAD, NONE in two phases
  const OneGpuTiers tiers =
      oneGpuTiers(nRanks, (long)cfg.localHeads * cfg.headDim * wireElt, wireElt, headShaped);
  DCPCHECK(lb->engine_.init(cfg, nRanks, 0, chooseProtocols(cfg.protocol, links, cfg.simpleMinRows, tiers)));
  const size_t bytes = (size_t)nRanks * lb->engine_.layout.totalBytes;
  const cudaError_t e = cudaMalloc(&lb->workspace_, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // our own failure, reported here
    lb->workspace_ = nullptr;
    return fail(ncclUnhandledCudaError,
                "loopback: cudaMalloc of %d virtual ranks' workspaces (%zu bytes) failed: %s (%s): %s", nRanks,
                bytes, cudaGetErrorString(e), cudaGetErrorName(e), workspaceShortfall(bytes, cfg.maxBatch).c_str());
  }
  CUDACHECK(cudaMemset(lb->workspace_, 0, bytes));
  CUDACHECK(cudaDeviceSynchronize());
  *out = std::move(lb);
  return ncclSuccess;
}

Loopback::~Loopback() {
  if (aborted_) return;  // freed by abort, or left to a kernel that never drained
  freeMemory(MemoryKind::Device, engine_.cudaDev, workspace_, FreeMode::Now);
  engine_.release(FreeMode::Now);
}

ncclResult_t Loopback::call(const CallBuffers* ranks, int batch, const ncclDcpStrides_t* stridesIn,
                            cudaStream_t stream, const ncclDcpCallArgs_t* args) {
  if (aborted_) return fail(ncclInvalidUsage, "the loopback was aborted");
  CallPlan plan;
  DCPCHECK(engine_.admit(ranks, engine_.nRanks, batch, stridesIn, args, &plan));
  if (batch == 0) return engine_.asyncError();
  Addressing addr = {};
  addr.loopback = true;
  addr.base = workspace_;
  addr.rankBytes = engine_.layout.totalBytes;
  DirectCall direct;
  const DirectCall* d = takesDirectPath(ranks, batch, plan.strides, &direct) ? &direct : nullptr;
  return engine_.run(ranks, engine_.nRanks, batch, plan, stream,
                     [&] { return engine_.enqueueFused(ranks, batch, plan, addr, stream, silentRank_, d); });
}

ncclResult_t Loopback::registerOutputs(const CallBuffers* ranks, size_t outBytes, size_t lseBytes) {
  if (ranks == nullptr) return fail(ncclInvalidArgument, "ranks is NULL");
  std::vector<RegisteredOutput> regs(engine_.nRanks);
  const uint32_t serial = ++registrations_;
  for (int r = 0; r < engine_.nRanks; r++) {
    const std::string rank = "virtual rank " + std::to_string(r) + ": ";
    DCPCHECK(checkOutputRanges(ranks[r].out, outBytes, ranks[r].outLse, lseBytes, rank.c_str()));
    regs[r].out = {(char*)ranks[r].out, outBytes};
    regs[r].outLse = {(char*)ranks[r].outLse, lseBytes};
    regs[r].direct = true;  // one GPU addresses every virtual rank's outputs
    regs[r].serial = serial;
  }
  outputs_ = std::move(regs);
  return ncclSuccess;
}

// Every virtual rank's outputs inside its registration at the same offsets:
// what real ranks promise (trusted there, checked here).
bool Loopback::takesDirectPath(const CallBuffers* ranks, int batch, const Strides& s, DirectCall* call) const {
  if (outputs_.empty()) return false;
  for (int r = 0; r < engine_.nRanks; r++) {
    DirectCall c;
    if (!directCallOf(engine_.cfg, engine_.nRanks, outputs_[r], ranks[r], batch, s, &c)) return false;
    const bool same = c.outOffset == call->outOffset && c.lseOffset == call->lseOffset &&
                      c.withLse == call->withLse && c.serial == call->serial;
    if (r > 0 && !same) return false;
    *call = c;
  }
  call->bases = nullptr;  // the kernel reaches the peers' outputs through their RankIo
  return true;
}

ncclResult_t Loopback::abort(int drainMs) {
  if (aborted_) return ncclSuccess;
  aborted_ = true;
  // Every virtual rank's waits share virtual rank 0's status word (device/peers.h).
  const bool drained = engine_.stopAndDrain(&((Control*)workspace_)->status, drainMs);
  if (!drained)
    return fail(ncclSystemError, "loopback abort: the last call did not drain within %d ms; the workspace stays allocated",
                drainMs);
  freeMemory(MemoryKind::Device, engine_.cudaDev, workspace_, FreeMode::Now);
  engine_.release(FreeMode::Now);
  workspace_ = nullptr;
  return ncclSuccess;
}

ncclResult_t Loopback::setRound(uint32_t round) {
  CUDACHECK(cudaDeviceSynchronize());
  for (int r = 0; r < engine_.nRanks; r++) {
    Control* c = (Control*)(workspace_ + r * engine_.layout.totalBytes);
    CUDACHECK(cudaMemcpy(&c->round, &round, sizeof(round), cudaMemcpyHostToDevice));
  }
  return ncclSuccess;
}

ncclResult_t Loopback::getRound(int rank, uint32_t* round) {
  if (rank < 0 || rank >= engine_.nRanks) return fail(ncclInvalidArgument, "rank %d is out of range", rank);
  Control* c = (Control*)(workspace_ + rank * engine_.layout.totalBytes);
  CUDACHECK(cudaMemcpy(round, &c->round, sizeof(*round), cudaMemcpyDeviceToHost));
  return ncclSuccess;
}

}  // namespace nccl_dcp
