#include "test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "reference.h"

namespace nccl_dcp {
namespace test {

int requiredGpus() {
  const char* s = getenv("NCCL_DCP_REQUIRE_GPU");
  return s ? atoi(s) : 0;
}

int gpuCount(std::string* reason) {
  int n = 0;  // left unwritten when there is no driver
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (reason) *reason = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
    cudaGetLastError();
    return 0;
  }
  return n;
}

ncclDcpConfig_t makeConfig(int headDim, int localHeads, ncclDataType_t dtype, int lseBase, int maxBatch,
                           int protocol) {
  ncclDcpConfig_t c = NCCL_DCP_CONFIG_INITIALIZER;
  c.headDim = headDim;
  c.localHeads = localHeads;
  c.dtype = dtype;
  c.lseBase = lseBase;
  c.maxBatch = maxBatch;
  c.protocol = protocol;
  return c;
}

CallBuffers RankTensors::buffers() {
  return {partialOut.data(), partialLse.data(), out.data(), outLse.empty() ? nullptr : outLse.data()};
}

size_t viewElements(const Strides& s, int batch, int nRanks, int localHeads, int headDim, bool input) {
  if (batch == 0) return 0;
  int64_t last = headDim;
  if (input) last += (batch - 1) * s.inRow + (nRanks - 1) * s.inPeer + (localHeads - 1) * s.inHead;
  else last += (batch - 1) * s.outRow + (localHeads - 1) * s.outHead;
  return (size_t)last;
}

size_t lseViewElements(const Strides& s, int batch, int nRanks, int localHeads, bool input) {
  if (batch == 0) return 0;
  int64_t last = 1;
  if (input) last += (batch - 1) * s.lseRow + (nRanks - 1) * s.lsePeer + (localHeads - 1) * s.lseHead;
  else last += (batch - 1) * s.outLseRow + (localHeads - 1) * s.outLseHead;
  return (size_t)last;
}

std::vector<RankTensors> makeInputs(const Config& cfg, int nRanks, int batch, const Strides& s, LseMix mix,
                                    std::mt19937_64& rng) {
  std::uniform_real_distribution<float> value(-1.f, 1.f), lseDist(-8.f, 8.f), unit(0.f, 1.f);
  const float nan = std::nanf("");
  std::vector<RankTensors> ranks(nRanks);
  const size_t inElems = viewElements(s, batch, nRanks, cfg.localHeads, cfg.headDim, true);
  const size_t outElems = viewElements(s, batch, nRanks, cfg.localHeads, cfg.headDim, false);
  for (int r = 0; r < nRanks; r++) {
    RankTensors& t = ranks[r];
    t.partialOut.resize(inElems * cfg.eltSize);
    t.partialLse.resize(lseViewElements(s, batch, nRanks, cfg.localHeads, true));
    for (size_t i = 0; i < inElems; i++) storeElement(cfg.dtype, t.partialOut.data(), i, value(rng));
    for (float& l : t.partialLse) l = lseDist(rng);
    t.out.assign(outElems * cfg.eltSize, 0xff);
    t.outLse.assign(lseViewElements(s, batch, nRanks, cfg.localHeads, false), nan);
  }
  if (mix == LseMix::Normal) return ranks;
  // Overwrite some (row, head) columns across sources with special values.
  for (int b = 0; b < batch; b++) {
    for (int p = 0; p < nRanks; p++) {
      for (int j = 0; j < cfg.localHeads; j++) {
        const float pick = unit(rng);
        int dominant = (int)(unit(rng) * nRanks) % nRanks;
        for (int src = 0; src < nRanks; src++) {
          float& l = ranks[src].partialLse[b * s.lseRow + p * s.lsePeer + j * s.lseHead];
          if (mix == LseMix::Special) {
            const float u = unit(rng);
            if (pick < 0.1f) l = -INFINITY;  // every source empty
            else if (u < 0.15f) l = -INFINITY;
            else if (u < 0.25f) l = nan;
            else if (u < 0.3f) l = INFINITY;
          } else {
            if (pick < 0.3f) l = src == dominant ? 1e30f : -1e30f;
            else if (pick < 0.6f) l = src == dominant ? 60.f : -60.f;
            else if (pick < 0.8f) l = (unit(rng) < 0.5f) ? 1e30f : -1e30f;
          }
          // An empty source's payload may be garbage: NaN must not leak.
          if (std::isnan(l) || std::isinf(l)) {
            uint8_t* base = ranks[src].partialOut.data();
            for (int d = 0; d < cfg.headDim; d++)
              storeElement(cfg.dtype, base, b * s.inRow + p * s.inPeer + j * s.inHead + d, nan);
          }
        }
      }
    }
  }
  return ranks;
}

Mismatch compareOutputs(const Config& cfg, int nRanks, int batch, const Strides& s,
                        const std::vector<RankTensors>& got, const std::vector<RankTensors>& want) {
  std::vector<CallBuffers> g, w;
  for (int r = 0; r < nRanks; r++) {
    g.push_back(const_cast<RankTensors&>(got[r]).buffers());
    w.push_back(const_cast<RankTensors&>(want[r]).buffers());
  }
  Mismatch m;
  m.count = countMismatches(cfg, nRanks, batch, s, g.data(), w.data(), &m.first);
  return m;
}

uint64_t freshSeed() {
  std::random_device rd;
  return ((uint64_t)rd() << 32) ^ rd();
}

DeviceBuffer::DeviceBuffer(size_t n) : bytes(n) {
  if (n && cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr) cudaFree(ptr);
}

}  // namespace test
}  // namespace nccl_dcp
