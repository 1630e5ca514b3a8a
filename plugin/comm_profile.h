/*************************************************************************
 * What the plugin knows of one communicator, and the events that feed it.
 *
 * NCCL (2.28, hostStreamPlanTask) reports each kernel plan of a
 * communicator as, on one thread and in this order: Group start, a Coll or
 * P2p start per task (coll.parentGroup / p2p.parentGroup = the Group
 * handle), every task's stop, Group stop. Later, on the proxy thread, one
 * KernelCh start + KernelChStop state + stop per channel of each task, with
 * parentObj = the task's handle and GPU globaltimer stamps: that is where
 * GPU time comes from, long after the task events were stopped.
 *
 * So a plan lives in a GroupSlot of a fixed ring (kGroupSlots per
 * communicator): counted when its tasks start, classified when the Group
 * stops (a plan whose sends and receives form k all-to-alls is moved from
 * Send/Recv to AlltoAll), and its GPU span (first channel start to last
 * channel stop) folded in when the ring comes back to the slot, or at
 * finalize (or exit). Task and kernel handles carry the slot's generation,
 * so a kernel event of a plan whose slot was reused since is counted late
 * and dropped -- when it is an odd number of laps late (512..1023 plans of
 * the communicator after its own, ...). A slot has two task and two kernel
 * handles, handed out by generation parity, so an event two laps late
 * (1024..1535 plans after) names a handle handed out again for the plan
 * now in the slot, passes the check and is attributed to that plan. And a
 * kernel start that passes the check just as the launching thread reclaims
 * the slot (claimSlot) can widen the next plan's span. Both need the proxy
 * thread's kernel events a whole lap behind the launches, which also makes
 * one-lap-late events likely: a nonzero lateKernelEvents is the sign. A
 * generation per handle would need a handle per plan (an allocation per
 * event) or generation bits in the pointer NCCL keeps (not portable).
 ************************************************************************/
#ifndef NCCL_DCP_PLUGIN_COMM_PROFILE_H_
#define NCCL_DCP_PLUGIN_COMM_PROFILE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op_stats.h"

namespace nccl_dcp {
namespace plugin {

constexpr int kGroupSlots = 512;       // plans in flight per communicator (power of two)
constexpr int kMaxAllToAllRanks = 512;  // larger communicators: all-to-all detection off

// The fields of NCCL's event descriptor this plugin reads, version-neutral.
struct TaskEvent {
  bool isColl;          // Coll task; else P2p
  const char* func;
  const char* datatype;
  uint64_t count;
  int peer;             // P2p only
  int nChannels;
  void* parentGroup;
};

struct GroupSlot;

// Every handle this plugin returns points at one of these.
struct Handle {
  enum Kind : uint32_t { Group = 0x64637047, Task = 0x64637054, Kernel = 0x6463704b };  // "dcpG/T/K"
  Kind kind;
  GroupSlot* slot;
  std::atomic<uint64_t> gen{0};  // generation of the slot it was handed out for
};

struct CommIdentity {
  uint64_t commHash = 0;
  std::string name;
  int rank = 0, nRanks = 0, nNodes = 0;
  int cudaDev = -1;  // the device current at init (-1: not known)
};

// Anomalies the report lists: each is an event NCCL should not send, or
// one the plugin could not place.
struct CommCounters {
  uint64_t plans = 0;
  uint64_t mixedPlanGpuNs = 0, mixedPlans = 0;  // GPU time of plans of several kinds or sizes
  uint64_t tasksWithoutGroup = 0;  // task whose parentGroup is not a live plan of this communicator
  uint64_t lateKernelEvents = 0;   // kernel event of a plan whose slot was reused
  uint64_t unmatchedEvents = 0;    // stop or state of no started event, bad handle or descriptor
  uint64_t unknownDatatype = 0;    // a name datatypeBytes does not know (null included): counted with 0 bytes
};

struct CommSnapshot {
  CommIdentity id;
  bool kernelTiming = false;
  bool finalized = false;
  std::vector<OpSnapshot> ops;  // kinds with calls, in OpKind order
  CommCounters counters;
};

class CommProfile {
 public:
  // Null when memory is short (the caller then reports the communicator
  // unprofiled).
  static std::unique_ptr<CommProfile> create(const CommIdentity& id, bool kernelTiming);
  ~CommProfile();

  // False for a pointer that is no profile (a context NCCL never got from init).
  bool valid() const { return magic_ == kMagic; }
  const CommIdentity& id() const { return id_; }
  bool kernelTiming() const { return kernelTiming_; }

  // Event entry points. Each returns the handle to give NCCL (null: none).
  void* startGroup();
  void* startTask(const TaskEvent& e);
  void* startKernel(void* parentTask, uint64_t gpuStartNs);
  void recordKernelStop(Handle* kernel, uint64_t gpuStopNs);
  void stopGroup(Handle* group);
  // A CE collective (v6): counted, no GPU time.
  void countCall(const char* func, const char* datatype, uint64_t count);
  void noteUnmatched() { unmatchedEvents_.fetch_add(1, std::memory_order_relaxed); }

  // Folds the GPU time of every plan still in its slot, then reads
  // everything: at finalize (NCCL is done with the communicator) and at a
  // process exit that finds it live (finalized = false; a plan whose
  // channels are still running gives the span seen so far). Each plan is
  // folded once (foldGpu), whoever gets there first.
  CommSnapshot finish(bool finalized);
  // Reads without folding.
  CommSnapshot snapshot() const;

  // Validated view of a handle of this profile; null if it is not one.
  GroupSlot* slotOf(void* handle, Handle::Kind kind);

 private:
  static constexpr uint64_t kMagic = 0x6e63636c64637050ull;  // "ncclDcpP"
  CommProfile() = default;
  GroupSlot* claimSlot();
  void foldGpu(GroupSlot& s);
  bool allToAllCount(const GroupSlot& s, uint32_t* perPeer) const;
  uint64_t callBytes(OpKind kind, const char* datatype, uint64_t count);

  uint64_t magic_ = kMagic;
  CommIdentity id_;
  bool kernelTiming_ = false;
  OpStats ops_[kOpKinds];
  std::unique_ptr<GroupSlot[]> slots_;
  std::unique_ptr<uint16_t[]> peerCounts_;  // per slot: sends then receives per peer
  std::atomic<uint64_t> cursor_{0};
  std::atomic<uint64_t> plans_{0}, mixedPlanGpuNs_{0}, mixedPlans_{0}, tasksWithoutGroup_{0},
      lateKernelEvents_{0}, unmatchedEvents_{0}, unknownDatatype_{0};
};

// One plan in flight. The fields above `gpu*` are written by the thread
// that runs the plan's Group start..stop (NCCL: one thread), the GPU
// stamps by the proxy thread.
struct GroupSlot {
  CommProfile* profile = nullptr;
  Handle group, task[2], kernel[2];  // task/kernel: by generation parity
  std::atomic<uint64_t> gen{0};

  bool open = false;  // between Group start and stop
  uint32_t nSend = 0, nRecv = 0, nOther = 0;
  uint64_t p2pBytes = 0;
  bool sameKind = true;         // every task of the first task's kind
  bool sameBytes = true;        // ... and byte size
  OpKind kind = OpKind::Other;  // of the first task
  uint64_t bytes = 0;
  bool peersInRange = true;
  uint16_t* sendCount = nullptr;  // [nRanks] or null (detection off)
  uint16_t* recvCount = nullptr;

  // Published at Group stop for the GPU fold: what the plan ran.
  std::atomic<bool> classified{false};
  OpKind attrKind = OpKind::Other;
  uint64_t attrBytes = 0, attrCalls = 0;
  bool attrMixed = false;

  std::atomic<uint64_t> gpuStart{UINT64_MAX}, gpuStop{0};
  std::atomic<uint32_t> channels{0};
};

}  // namespace plugin
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PLUGIN_COMM_PROFILE_H_
