/*************************************************************************
 * The fallback path, for ranks that are not all in one LSA team (they span
 * nodes) or under NCCL_DCP_FORCE_FALLBACK: per round, a pack kernel into
 * ncclAlltoAll's send layout, NCCL's all-to-all of the partials and of
 * their LSEs, and the combine kernel into the call's outputs.
 ************************************************************************/
#include "engine.h"

namespace nccl_dcp {

ncclResult_t allocFallbackBuffers(const Config& c, int nRanks, FallbackBuffers* b) {
  const size_t units = (size_t)nRanks * c.maxBatch * c.localHeads;
  CUDACHECK(cudaMalloc(&b->sendData, units * c.headDim * c.eltSize));
  CUDACHECK(cudaMalloc(&b->recvData, units * c.headDim * c.eltSize));
  CUDACHECK(cudaMalloc(&b->sendLse, units * sizeof(float)));
  CUDACHECK(cudaMalloc(&b->recvLse, units * sizeof(float)));
  return ncclSuccess;
}

void freeFallbackBuffers(FallbackBuffers* b, int dev, FreeMode mode) {
  freeMemory(MemoryKind::Device, dev, b->recvLse, mode);
  freeMemory(MemoryKind::Device, dev, b->sendLse, mode);
  freeMemory(MemoryKind::Device, dev, b->recvData, mode);
  freeMemory(MemoryKind::Device, dev, b->sendData, mode);
  *b = FallbackBuffers();
}

ncclResult_t FallbackRound::pack() const {
  const Config& c = engine->cfg;
  const CallBuffers b = buffersAtRow(*buf, *strides, c.eltSize, row0);
  return launchPack(packLaunch(c, engine->nRanks, rows, (const char*)b.partialOut, b.partialLse, fb->sendData,
                               fb->sendLse, *strides),
                    stream);
}

// Inside the caller's ncclGroupStart/End: enqueued by its ncclGroupEnd.
ncclResult_t FallbackRound::exchange() const {
  const Config& c = engine->cfg;
  const size_t units = (size_t)rows * c.localHeads;
  NCCLCHECK(ncclAlltoAll(fb->sendData, fb->recvData, units * c.headDim, c.dtype, comm, stream));
  NCCLCHECK(ncclAlltoAll(fb->sendLse, fb->recvLse, units, ncclFloat32, comm, stream));
  return ncclSuccess;
}

ncclResult_t FallbackRound::combine() const {
  const Config& c = engine->cfg;
  const CallBuffers b = buffersAtRow(*buf, *strides, c.eltSize, row0);
  return launchCombine(
      combineLaunch(c, engine->nRanks, rows, fb->recvData, fb->recvLse, (char*)b.out, b.outLse, *strides), stream);
}

ncclResult_t enqueueFallback(const Engine& engine, const FallbackBuffers& fb, ncclComm_t comm, const CallBuffers& buf,
                             int batch, const Strides& s, cudaStream_t stream) {
  return forEachRound(batch, engine.cfg.maxBatch, [&](int row0, int rows) {
    const FallbackRound round = {&engine, &fb, comm, &buf, &s, stream, row0, rows};
    DCPCHECK(round.pack());
    NCCLCHECK(ncclGroupStart());
    const ncclResult_t exchanged = round.exchange();
    const ncclResult_t end = ncclGroupEnd();
    DCPCHECK(exchanged);
    // Nonblocking communicators: the all-to-all is on the stream once NCCL is done with it.
    DCPCHECK(settle(comm, end, "the fallback's ncclAlltoAll"));
    return round.combine();
  });
}

}  // namespace nccl_dcp
