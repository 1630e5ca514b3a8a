#include "fallback_rounds.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine.h"

namespace nccl_dcp {
namespace test {

namespace {

// The exchange of one round as device copies: destination d receives from
// every source s its part [s][units][...] (HEAD: the units s packed for d;
// the gather: all of s's).
ncclResult_t exchangeByCopies(const Config& cfg, int cp, int rows, const std::vector<FallbackBuffers>& fb,
                              bool gather) {
  const size_t unitBytes = fallbackUnitBytesOf(cfg.wire, cfg.headDim, cfg.eltSize), lseBytes = lseWordBytesOf(cfg.wire);
  const size_t units = gather ? (size_t)rows * cp * cfg.localHeads : (size_t)rows * cfg.localHeads;
  for (int dst = 0; dst < cp; dst++)
    for (int src = 0; src < cp; src++) {
      const size_t from = gather ? 0 : dst * units;
      if (cudaMemcpyAsync(fb[dst].recvData + src * units * unitBytes, fb[src].sendData + from * unitBytes,
                          units * unitBytes, cudaMemcpyDeviceToDevice, nullptr) != cudaSuccess ||
          cudaMemcpyAsync(fb[dst].recvLse + src * units * lseBytes, fb[src].sendLse + from * lseBytes,
                          units * lseBytes, cudaMemcpyDeviceToDevice, nullptr) != cudaSuccess)
        return ncclUnhandledCudaError;
    }
  return ncclSuccess;
}

}  // namespace

void runFallbackRounds(const DeviceProblem& p, const ncclDcpCallArgs_t* args) {
  const Config& cfg = p.config();
  const int cp = (int)p.want().size(), batch = p.batch();
  CallPlan plan;
  plan.strides = p.strides();
  DCP_ASSERT(resolveCallArgs(args, cfg, cp, batch, &plan.shape));
  // What FallbackRound reads of an engine: the config, the ranks, the rank.
  std::vector<Engine> engines(cp);
  std::vector<FallbackBuffers> fb(cp);
  for (int r = 0; r < cp; r++) {
    engines[r].cfg = cfg;
    engines[r].nRanks = cp;
    engines[r].rank = r;
    DCP_ASSERT(allocFallbackBuffers(cfg, cp, &fb[r]));
  }
  const std::vector<CallBuffers> b = p.allBuffers();
  const ncclResult_t res = forEachRound(batch, cfg.maxBatch, [&](int row0, int rows) -> ncclResult_t {
    std::vector<FallbackRound> rounds;
    for (int r = 0; r < cp; r++) rounds.push_back({&engines[r], &fb[r], nullptr, &b[r], &plan, nullptr, row0, rows});
    for (const FallbackRound& round : rounds) DCPCHECK(round.pack());
    DCPCHECK(exchangeByCopies(cfg, cp, rows, fb, plan.shape.scatter != Scatter::Head));
    for (const FallbackRound& round : rounds) DCPCHECK(round.combine());
    return ncclSuccess;
  });
  const cudaError_t synced = cudaDeviceSynchronize();
  for (int r = 0; r < cp; r++) freeFallbackBuffers(&fb[r], -1, FreeMode::Now);
  DCP_ASSERT(res);
  CUDA_ASSERT(synced);
}

}  // namespace test
}  // namespace nccl_dcp
