#include "reference.h"

#include <vector>

namespace nccl_dcp {

namespace {

template <typename T>
void referenceTyped(const Config& cfg, int nRanks, int batch, const Strides& s, const CallBuffers* ranks) {
  const int Hl = cfg.localHeads, D = cfg.headDim;
  std::vector<float> weight(nRanks);
  for (int r = 0; r < nRanks; r++) {
    T* out = (T*)ranks[r].out;
    for (int b = 0; b < batch; b++) {
      for (int j = 0; j < Hl; j++) {
        for (int src = 0; src < nRanks; src++)
          weight[src] = ranks[src].partialLse[b * s.lseRow + r * s.lsePeer + j * s.lseHead];
        const float merged = mergeWeights(weight.data(), nRanks, cfg.lseBase, weight.data());
        if (ranks[r].outLse) ranks[r].outLse[b * s.outLseRow + j * s.outLseHead] = merged;
        for (int d = 0; d < D; d++) {
          float acc = 0.f;
          for (int src = 0; src < nRanks; src++) {
            const T* in = (const T*)ranks[src].partialOut;
            acc = mergeAccumulate(acc, weight[src],
                                  Element<T>::toFloat(in[b * s.inRow + r * s.inPeer + j * s.inHead + d]));
          }
          out[b * s.outRow + j * s.outHead + d] = Element<T>::fromFloat(acc);
        }
      }
    }
  }
}

}  // namespace

void referenceA2aLseReduce(const Config& cfg, int nRanks, int batch, const Strides& s,
                           const CallBuffers* ranks) {
  switch (cfg.dtype) {
    case ncclBfloat16: return referenceTyped<__nv_bfloat16>(cfg, nRanks, batch, s, ranks);
    case ncclFloat16: return referenceTyped<__half>(cfg, nRanks, batch, s, ranks);
    default: return referenceTyped<float>(cfg, nRanks, batch, s, ranks);
  }
}

float loadElement(ncclDataType_t dtype, const void* base, int64_t i) {
  switch (dtype) {
    case ncclBfloat16: return Element<__nv_bfloat16>::toFloat(((const __nv_bfloat16*)base)[i]);
    case ncclFloat16: return Element<__half>::toFloat(((const __half*)base)[i]);
    default: return ((const float*)base)[i];
  }
}

void storeElement(ncclDataType_t dtype, void* base, int64_t i, float v) {
  switch (dtype) {
    case ncclBfloat16: ((__nv_bfloat16*)base)[i] = Element<__nv_bfloat16>::fromFloat(v); break;
    case ncclFloat16: ((__half*)base)[i] = Element<__half>::fromFloat(v); break;
    default: ((float*)base)[i] = v; break;
  }
}

}  // namespace nccl_dcp
