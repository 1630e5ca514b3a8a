#include "reference.h"

#include <cmath>
#include <sstream>
#include <thread>
#include <vector>

#include "device/codec.h"
#include "device/merge.h"

namespace nccl_dcp {

namespace {

CallShape shapeOrDefault(const Config& cfg, int nRanks, int batch, const CallShape* shape) {
  if (shape) return *shape;
  CallShape c;
  resolveCallArgs(nullptr, cfg, nRanks, batch, &c);  // cannot fail without args
  return c;
}

// Rank src's LSE of (row b, head h): -inf where the row is empty there.
float partialLseOf(const Config& cfg, const Strides& s, const CallShape& shape, const CallBuffers& src, int b, int h) {
  if (rowIsEmpty(src.seqLens, src.queryStartLoc, shape.numSeqs, b)) return -INFINITY;
  const int Hl = cfg.localHeads;
  return partialLseAt(src.partialLse, b * s.lseRow + (h / Hl) * s.lsePeer + (h % Hl) * s.lseHead, cfg.lseDtype);
}

// fn(r) for every rank r: each rank's outputs depend only on the inputs,
// so a call of kWorkPerThread output elements x ranks or more takes a
// thread per rank (the GPU tests' CPU side and the perf binary's -c spend
// most of their time in the reference and its comparison).
constexpr size_t kWorkPerThread = size_t(1) << 18;
template <typename F>
void forEachRank(int nRanks, size_t work, F&& fn) {
  if (nRanks == 1 || work < kWorkPerThread) {
    for (int r = 0; r < nRanks; r++) fn(r);
    return;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < nRanks; r++) threads.emplace_back([&fn, r] { fn(r); });
  for (std::thread& t : threads) t.join();
}

// A call's work: one rank's output elements x the ranks.
size_t workOf(const Config& cfg, int nRanks, const CallShape& shape) {
  return (size_t)shape.batch * shape.heads * cfg.headDim * nRanks;
}

template <typename T>
void referenceRank(const Config& cfg, int nRanks, const Strides& s, const CallBuffers* ranks,
                   const CallShape& shape, Wire wire, int r) {
  const int Hl = cfg.localHeads, D = cfg.headDim;
  std::vector<float> weight(nRanks), scale(nRanks);
  std::vector<float> unit((size_t)nRanks * D);  // each source's unit as the receiver reads it
  std::vector<uint8_t> wireUnit((size_t)nRanks * D);
  T* out = (T*)ranks[r].out;
  forEachOutput(shape, nRanks, r, [&](int b, int h, int row, int head) {
    for (int src = 0; src < nRanks; src++) weight[src] = partialLseOf(cfg, s, shape, ranks[src], b, h);
    const float merged = mergeWeights(weight.data(), nRanks, cfg.lseBase, weight.data());
    if (ranks[r].outLse) ranks[r].outLse[row * s.outLseRow + head * s.outLseHead] = merged;
    // Each remote source's unit as it crosses the link (codec.h): fp8's
    // e4m3 bytes and scale, or the elements themselves.
    auto onWire = [&](int src) { return wire == Wire::Fp8E4m3 && src != r; };
    for (int src = 0; src < nRanks; src++) {
      const T* in = (const T*)ranks[src].partialOut + b * s.inRow + (h / Hl) * s.inPeer + (h % Hl) * s.inHead;
      if (onWire(src)) scale[src] = fp8::encodeUnit(in, D, &wireUnit[(size_t)src * D]);
      else
        for (int d = 0; d < D; d++) unit[(size_t)src * D + d] = Element<T>::toFloat(in[d]);
    }
    for (int d = 0; d < D; d++) {
      float acc = 0.f;
      for (int src = 0; src < nRanks; src++)
        acc = onWire(src) ? mergeWireElement(acc, weight[src], scale[src], wireUnit[(size_t)src * D + d])
                          : mergeAccumulate(acc, weight[src], unit[(size_t)src * D + d]);
      out[row * s.outRow + head * s.outHead + d] = Element<T>::fromFloat(acc);
    }
  });
}

template <typename T>
void referenceTyped(const Config& cfg, int nRanks, const Strides& s, const CallBuffers* ranks,
                    const CallShape& shape, Wire wire) {
  forEachRank(nRanks, workOf(cfg, nRanks, shape), [&](int r) {
    if (ranks[r].out) referenceRank<T>(cfg, nRanks, s, ranks, shape, wire, r);  // null: not asked for
  });
}

// Rank r's mismatches: their count, the first described.
size_t countRankMismatches(const Config& cfg, int nRanks, const Strides& s, const CallBuffers& got,
                           const CallBuffers& want, const CallShape& c, int r, std::string* first) {
  size_t count = 0;
  const float eps = dtypeRoundingUnit(cfg.dtype);
  auto note = [&](const char* what, int b, int j, int d, float g, float w) {
    if (count++ == 0) {
      std::ostringstream o;
      o << "rank " << r << " " << what << "[" << b << "][" << j << "]";
      if (d >= 0) o << "[" << d << "]";
      o << " = " << g << ", want " << w;
      *first = o.str();
    }
  };
  forEachOutput(c, nRanks, r, [&](int, int, int row, int head) {
    for (int d = 0; d < cfg.headDim; d++) {
      const int64_t i = row * s.outRow + head * s.outHead + d;
      const float g = loadElement(cfg.dtype, got.out, i), w = loadElement(cfg.dtype, want.out, i);
      // A non-finite want (a NaN or an infinity in a source of weight)
      // needs the same: a NaN any NaN, an infinity itself.
      const bool ok = std::isnan(w)   ? std::isnan(g)
                      : std::isinf(w) ? g == w
                                      : std::isfinite(g) && std::fabs(g - w) <= 1e-5f + eps * std::fabs(w);
      if (!ok) note("out", row, head, d, g, w);
    }
    if (want.outLse) {
      const int64_t i = row * s.outLseRow + head * s.outLseHead;
      const float g = got.outLse[i], w = want.outLse[i];
      // An infinite want (-inf: an empty row) needs exactly that: the
      // relative bound below would accept any finite value.
      const bool ok = std::isinf(w) ? g == w
                                    : std::isfinite(g) && std::fabs(g - w) <= 1e-5f * (1.f + std::fabs(w));
      if (!ok) note("outLse", row, head, -1, g, w);
    }
  });
  return count;
}

}  // namespace

void referenceA2aLseReduce(const Config& cfg, int nRanks, int batch, const Strides& s, const CallBuffers* ranks,
                           const CallShape* shape, Wire wire) {
  const CallShape c = shapeOrDefault(cfg, nRanks, batch, shape);
  withHostElementType(cfg.dtype, [&](auto elt) { referenceTyped<decltype(elt)>(cfg, nRanks, s, ranks, c, wire); });
}

size_t countMismatches(const Config& cfg, int nRanks, int batch, const Strides& s, const CallBuffers* got,
                       const CallBuffers* want, std::string* first, const CallShape* shape) {
  const CallShape c = shapeOrDefault(cfg, nRanks, batch, shape);
  std::vector<size_t> counts(nRanks, 0);
  std::vector<std::string> firsts(nRanks);
  forEachRank(nRanks, workOf(cfg, nRanks, c), [&](int r) {
    if (got[r].out) counts[r] = countRankMismatches(cfg, nRanks, s, got[r], want[r], c, r, &firsts[r]);
  });
  size_t count = 0;
  for (int r = 0; r < nRanks; r++) {
    if (counts[r] && count == 0 && first) *first = firsts[r];
    count += counts[r];
  }
  return count;
}

float loadElement(ncclDataType_t dtype, const void* base, int64_t i) {
  return withHostElementType(dtype, [&](auto elt) {
    using T = decltype(elt);
    return Element<T>::toFloat(((const T*)base)[i]);
  });
}

void storeElement(ncclDataType_t dtype, void* base, int64_t i, float v) {
  withHostElementType(dtype, [&](auto elt) {
    using T = decltype(elt);
    ((T*)base)[i] = Element<T>::fromFloat(v);
  });
}

}  // namespace nccl_dcp
