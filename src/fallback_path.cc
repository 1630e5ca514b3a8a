/*************************************************************************
 * The fallback path, for ranks that are not all in one LSA team (they span
 * nodes) or under NCCL_DCP_FORCE_FALLBACK: per round, a pack kernel into
 * the send layout, NCCL's exchange of the partials and of their LSEs (fp32:
 * the pack converts them and applies the empty-shard arrays), and the
 * combine kernel into the call's outputs. HEAD exchanges with ncclAlltoAll
 * (each rank receives its heads); TOKEN and NONE with ncclAllGather (each
 * rank receives everything and merges its rows, or all of them): TOKEN's
 * device counts are unknown to the host, so no exact-size send exists.
 * Wire fp8: the pack encodes every unit into D bytes (device/combine.h,
 * the codec of the fused path), NCCL moves them as ncclUint8 -- half a
 * bf16 unit's bytes -- beside 8-byte LSE words, and the combine decodes
 * them, reading the rank's own units native from its partials.
 ************************************************************************/
#include "engine.h"

namespace nccl_dcp {

ncclResult_t allocFallbackBuffers(const Config& c, int nRanks, FallbackBuffers* b) {
  // Units sent: every (peer, row, local head); received: HEAD one row of
  // Hl per peer, the gather every peer's rows of H heads.
  const size_t sendUnits = (size_t)nRanks * c.maxBatch * c.localHeads;
  const size_t recvUnits = (size_t)nRanks * c.maxBatch * headsPerRow(c, nRanks);
  const size_t unitBytes = fallbackUnitBytesOf(c.wire, c.headDim, c.eltSize);
  CUDACHECK(cudaMalloc(&b->sendData, sendUnits * unitBytes));
  CUDACHECK(cudaMalloc(&b->recvData, recvUnits * unitBytes));
  CUDACHECK(cudaMalloc(&b->sendLse, sendUnits * lseWordBytesOf(c.wire)));
  CUDACHECK(cudaMalloc(&b->recvLse, recvUnits * lseWordBytesOf(c.wire)));
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
  if (poisoned) {
    const size_t units = (size_t)engine->nRanks * rows * c.localHeads;  // HEAD's and the gather's alike
    const size_t unitBytes = fallbackUnitBytesOf(c.wire, c.headDim, c.eltSize);
    CUDACHECK(cudaMemsetAsync(fb->sendData, kPoisonedPayloadByte, units * unitBytes, stream));
    CUDACHECK(cudaMemsetAsync(fb->sendLse, kPoisonedLseByte, units * lseWordBytesOf(c.wire), stream));
    return ncclSuccess;
  }
  const CallBuffers b = buffersAtRow(*buf, plan->strides, c, row0);
  return launchPack(makePackParams(c, engine->nRanks, engine->rank, plan->shape, row0, rows, b, fb->sendData,
                                   fb->sendLse, plan->strides),
                    stream);
}

// Inside the caller's ncclGroupStart/End: enqueued by its ncclGroupEnd.
// The units cross as the dtype's elements or fp8's bytes (ncclUint8), the
// LSE words as fp32 pairs (fp8's {lse, scale}) or fp32s.
ncclResult_t FallbackRound::exchange() const {
  const Config& c = engine->cfg;
  const size_t elements = c.headDim;  // a unit's, of unitType
  const ncclDataType_t unitType = c.wire == Wire::Fp8E4m3 ? ncclUint8 : c.dtype;
  const size_t lseFloats = lseWordBytesOf(c.wire) / sizeof(float);
  if (plan->shape.scatter == Scatter::Head) {
    const size_t units = (size_t)rows * c.localHeads;  // per peer
    NCCLCHECK(ncclAlltoAll(fb->sendData, fb->recvData, units * elements, unitType, comm, stream));
    NCCLCHECK(ncclAlltoAll(fb->sendLse, fb->recvLse, units * lseFloats, ncclFloat32, comm, stream));
    return ncclSuccess;
  }
  const size_t units = (size_t)rows * engine->nRanks * c.localHeads;  // per rank
  NCCLCHECK(ncclAllGather(fb->sendData, fb->recvData, units * elements, unitType, comm, stream));
  NCCLCHECK(ncclAllGather(fb->sendLse, fb->recvLse, units * lseFloats, ncclFloat32, comm, stream));
  return ncclSuccess;
}

ncclResult_t FallbackRound::combine() const {
  if (poisoned) return ncclSuccess;  // its outputs are NaN-filled once for the call
  const Config& c = engine->cfg;
  const CallBuffers b = buffersAtRow(*buf, plan->strides, c, row0);
  const Strides& s = plan->strides;
  const OwnPartials own = {(const char*)b.partialOut, s.inRow, s.inPeer, s.inHead};
  return launchCombine(makeCombineParams(c, engine->nRanks, plan->shape, engine->rank, row0, rows, fb->recvData,
                                         fb->recvLse, (char*)b.out, b.outLse, s, engine->hostErrorDev),
                       stream, own);
}

ncclResult_t enqueueFallback(const Engine& engine, const FallbackBuffers& fb, ncclComm_t comm, const CallBuffers& buf,
                             int batch, const CallPlan& plan, cudaStream_t stream, bool poisoned) {
  if (poisoned) {
    DCPCHECK(engine.enqueuePoison(&buf, 1, batch, plan, stream));
    if (!engine.exchangesWhilePoisoned(comm)) return ncclSuccess;  // the communicator failed: no exchange to join
  }
  return forEachRound(batch, engine.cfg.maxBatch, [&](int row0, int rows) {
    const FallbackRound round = {&engine, &fb, comm, &buf, &plan, stream, row0, rows, poisoned};
    DCPCHECK(round.pack());
    NCCLCHECK(ncclGroupStart());
    const ncclResult_t exchanged = round.exchange();
    const ncclResult_t end = ncclGroupEnd();
    DCPCHECK(exchanged);
    // Nonblocking communicators: the all-to-all is on the stream once NCCL is done with it.
    DCPCHECK(settle(comm, end, "the fallback's exchange", engine.cfg.timeoutMs));
    return round.combine();
  });
}

}  // namespace nccl_dcp
