#include "loopback.h"

#include <vector>

#include "error.h"

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
  DCPCHECK(lb->engine_.init(cfg, nRanks, 0, chooseProtocols(cfg.protocol, links, env())));
  const size_t bytes = (size_t)nRanks * lb->engine_.layout.totalBytes;
  CUDACHECK(cudaMalloc(&lb->workspace_, bytes));
  CUDACHECK(cudaMemset(lb->workspace_, 0, bytes));
  CUDACHECK(cudaDeviceSynchronize());
  *out = std::move(lb);
  return ncclSuccess;
}

Loopback::~Loopback() {
  if (workspace_) cudaFree(workspace_);
  engine_.release();
}

ncclResult_t Loopback::call(const CallBuffers* ranks, int batch, const ncclDcpStrides_t* stridesIn,
                            cudaStream_t stream) {
  DCPCHECK(engine_.asyncError());
  Strides strides;
  DCPCHECK(resolveStrides(stridesIn, engine_.cfg, engine_.nRanks, &strides));
  for (int r = 0; r < engine_.nRanks; r++) DCPCHECK(checkCall(engine_.cfg, engine_.nRanks, ranks[r], batch, strides));
  if (batch == 0) return ncclSuccess;
  Addressing addr = {};
  addr.loopback = true;
  addr.base = workspace_;
  addr.rankBytes = engine_.layout.totalBytes;
  return engine_.enqueue(ranks, batch, strides, addr, stream, silentRank_);
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
