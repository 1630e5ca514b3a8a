#include "op_stats.h"

#include <string.h>

#include <algorithm>

namespace nccl_dcp {
namespace plugin {

namespace {

constexpr std::memory_order relaxed = std::memory_order_relaxed;

const char* const kKindNames[kOpKinds] = {
    "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AlltoAll",
    "Gather",    "Scatter",   "Send",          "Recv",      "Other",  "DcpA2aLseReduce"};

// Two's complement: adding (uint64_t)-n subtracts n.
void add(std::atomic<uint64_t>& counter, int64_t delta) { counter.fetch_add((uint64_t)delta, relaxed); }

}  // namespace

const char* opKindName(OpKind kind) {
  const int k = (int)kind;
  return k >= 0 && k < kOpKinds ? kKindNames[k] : "Invalid";
}

OpKind opKindOf(const char* func) {
  if (func == nullptr) return OpKind::Other;
  for (int k = 0; k < (int)OpKind::Other; k++)
    if (strcmp(func, kKindNames[k]) == 0) return (OpKind)k;
  return OpKind::Other;
}

// NCCL 2.28.9 to 2.30.7's ncclDatatypeToString (src/collectives.cc) names
// every ncclDataType_t but ncclUint8 and returns "Unknown" for it; NCCL
// refuses any datatype past ncclNumTypes before a task exists, so in an
// event "Unknown" is ncclUint8: one byte. "ncclUint8" stays for an NCCL
// that names it.
int datatypeBytes(const char* name) {
  static const struct {
    const char* name;
    int bytes;
  } kTypes[] = {{"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclInt32", 4},      {"ncclUint32", 4},
                {"ncclInt64", 8},   {"ncclUint64", 8},   {"ncclFloat16", 2},    {"ncclFloat32", 4},
                {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
                {"Unknown", 1}};  // ncclUint8 (above)
  if (name == nullptr) return 0;
  for (const auto& t : kTypes)
    if (strcmp(name, t.name) == 0) return t.bytes;
  return 0;
}

int log2Bucket(uint64_t bytes) {
  const int b = bytes == 0 ? 0 : 64 - __builtin_clzll(bytes);
  return std::min(b, kLog2Buckets - 1);
}

OpStats::SizeEntry* OpStats::entry(uint64_t bytes) {
  const uint64_t key = bytes + 1;
  const unsigned start = (unsigned)((key * 0x9E3779B97F4A7C15ull) >> 58);  // 6 bits: kExactSizes == 64
  for (int i = 0; i < kExactSizes; i++) {
    SizeEntry& e = sizes_[(start + i) % kExactSizes];
    uint64_t seen = e.key.load(std::memory_order_acquire);
    if (seen == 0 && e.key.compare_exchange_strong(seen, key, std::memory_order_acq_rel)) return &e;
    if (seen == key) return &e;  // also when another thread claimed it first with this key
  }
  return nullptr;
}

void OpStats::addCalls(uint64_t bytes, int64_t calls) {
  add(calls_, calls);
  add(bytes_, (int64_t)bytes * calls);
  add(log2Calls_[log2Bucket(bytes)], calls);
  if (SizeEntry* e = entry(bytes)) add(e->calls, calls);
  else add(otherSizeCalls_, calls);
}

void OpStats::addGpu(uint64_t bytes, uint64_t ns, uint64_t calls) {
  gpuNs_.fetch_add(ns, relaxed);
  gpuCalls_.fetch_add(calls, relaxed);
  if (SizeEntry* e = entry(bytes)) {
    e->gpuNs.fetch_add(ns, relaxed);
    e->gpuCalls.fetch_add(calls, relaxed);
  }
}

OpSnapshot OpStats::snapshot(OpKind kind) const {
  OpSnapshot s;
  s.kind = kind;
  s.calls = calls_.load(relaxed);
  s.bytes = bytes_.load(relaxed);
  s.gpuNs = gpuNs_.load(relaxed);
  s.gpuCalls = gpuCalls_.load(relaxed);
  s.otherSizeCalls = otherSizeCalls_.load(relaxed);
  s.log2Calls.resize(kLog2Buckets);
  for (int b = 0; b < kLog2Buckets; b++) s.log2Calls[b] = log2Calls_[b].load(relaxed);
  for (const SizeEntry& e : sizes_) {
    const uint64_t key = e.key.load(std::memory_order_acquire);
    const uint64_t calls = e.calls.load(relaxed);
    if (key != 0 && calls != 0) s.sizes.push_back({key - 1, calls, e.gpuNs.load(relaxed), e.gpuCalls.load(relaxed)});
  }
  std::sort(s.sizes.begin(), s.sizes.end(),
            [](const SizeSnapshot& a, const SizeSnapshot& b) { return a.bytes < b.bytes; });
  return s;
}

}  // namespace plugin
}  // namespace nccl_dcp
