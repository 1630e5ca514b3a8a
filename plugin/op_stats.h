/*************************************************************************
 * Counters of one kind of operation: calls, bytes, a log2 byte-size
 * histogram, the exact sizes seen (the first kExactSizes distinct ones) and
 * GPU time. Updated from any thread with relaxed atomics, never a lock or an
 * allocation: an event costs a few fetch_adds. Read once, at report time.
 ************************************************************************/
#ifndef NCCL_DCP_PLUGIN_OP_STATS_H_
#define NCCL_DCP_PLUGIN_OP_STATS_H_

#include <atomic>
#include <cstdint>
#include <vector>

namespace nccl_dcp {
namespace plugin {

// What NCCL ran, as the report groups it. AlltoAll is any plan whose
// send/recv tasks form k whole all-to-alls (ncclAlltoAll reaches the
// profiler as such tasks in 2.28, indistinguishable from a user's grouped
// ncclSend/ncclRecv); Send/Recv are the p2p tasks that do not.
enum class OpKind : int {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AlltoAll,
  Gather,
  Scatter,
  Send,
  Recv,
  Other,
  DcpA2aLseReduce,  // nccl-dcp's fused call, recorded through the library hook
  Count
};
constexpr int kOpKinds = (int)OpKind::Count;

const char* opKindName(OpKind kind);
// NCCL's ncclFuncToString names; Other for anything else (or null).
OpKind opKindOf(const char* func);
// Bytes per element of NCCL's ncclDatatypeToString names (its "Unknown" is
// ncclUint8: 1); 0 for any other name, or null.
int datatypeBytes(const char* name);
// Histogram bucket: 0 for 0 bytes, else 1 + floor(log2(bytes)).
int log2Bucket(uint64_t bytes);

constexpr int kLog2Buckets = 49;  // up to 2^48 bytes
constexpr int kExactSizes = 64;

struct SizeSnapshot {
  uint64_t bytes, calls, gpuNs, gpuCalls;
};

struct OpSnapshot {
  OpKind kind;
  uint64_t calls = 0, bytes = 0;
  uint64_t gpuNs = 0, gpuCalls = 0;  // GPU time of the calls it covers
  uint64_t otherSizeCalls = 0;       // calls of sizes past the first kExactSizes
  std::vector<uint64_t> log2Calls;   // kLog2Buckets
  std::vector<SizeSnapshot> sizes;   // ascending bytes, calls > 0
};

class OpStats {
 public:
  // calls < 0 takes calls back (a plan reclassified as an all-to-all).
  void addCalls(uint64_t bytes, int64_t calls);
  // GPU time of one plan that ran `calls` calls of `bytes` each.
  void addGpu(uint64_t bytes, uint64_t ns, uint64_t calls);
  OpSnapshot snapshot(OpKind kind) const;

 private:
  struct SizeEntry {
    std::atomic<uint64_t> key{0};  // bytes + 1; 0 = free
    std::atomic<uint64_t> calls{0}, gpuNs{0}, gpuCalls{0};
  };
  // The entry of `bytes`, claimed if new; null when the table is full.
  SizeEntry* entry(uint64_t bytes);

  std::atomic<uint64_t> calls_{0}, bytes_{0}, gpuNs_{0}, gpuCalls_{0}, otherSizeCalls_{0};
  std::atomic<uint64_t> log2Calls_[kLog2Buckets] = {};
  SizeEntry sizes_[kExactSizes];
};

}  // namespace plugin
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PLUGIN_OP_STATS_H_
