#include "comm_profile.h"

#include <string.h>

#include <new>

namespace nccl_dcp {
namespace plugin {

namespace {

constexpr std::memory_order relaxed = std::memory_order_relaxed;

void atomicMin(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, relaxed)) {
  }
}

void atomicMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, relaxed)) {
  }
}

}  // namespace

std::unique_ptr<CommProfile> CommProfile::create(const CommIdentity& id, bool kernelTiming) {
  std::unique_ptr<CommProfile> p(new (std::nothrow) CommProfile());
  if (!p) return nullptr;
  p->id_ = id;
  p->kernelTiming_ = kernelTiming;
  p->slots_.reset(new (std::nothrow) GroupSlot[kGroupSlots]);
  if (!p->slots_) return nullptr;
  const bool detect = id.nRanks >= 1 && id.nRanks <= kMaxAllToAllRanks;
  if (detect) {
    p->peerCounts_.reset(new (std::nothrow) uint16_t[(size_t)kGroupSlots * 2 * id.nRanks]());
    if (!p->peerCounts_) return nullptr;
  }
  for (int i = 0; i < kGroupSlots; i++) {
    GroupSlot& s = p->slots_[i];
    s.profile = p.get();
    s.group.kind = Handle::Group;
    for (int j = 0; j < 2; j++) {
      s.task[j].kind = Handle::Task;
      s.kernel[j].kind = Handle::Kernel;
      s.task[j].slot = s.kernel[j].slot = &s;
    }
    s.group.slot = &s;
    if (detect) {
      s.sendCount = &p->peerCounts_[(size_t)i * 2 * id.nRanks];
      s.recvCount = s.sendCount + id.nRanks;
    }
  }
  return p;
}

CommProfile::~CommProfile() { magic_ = 0; }

GroupSlot* CommProfile::slotOf(void* handle, Handle::Kind kind) {
  if (handle == nullptr) return nullptr;
  Handle* h = static_cast<Handle*>(handle);
  if (h->kind != kind || h->slot == nullptr || h->slot->profile != this) return nullptr;
  return h->slot;
}

// The next slot of the ring; the plan that held it last gives its GPU time
// up first. Lock-free: one fetch_add hands each slot out once per lap.
GroupSlot* CommProfile::claimSlot() {
  GroupSlot& s = slots_[cursor_.fetch_add(1, relaxed) % kGroupSlots];
  foldGpu(s);
  const uint64_t g = s.gen.load(relaxed) + 1;
  s.open = true;
  s.nSend = s.nRecv = s.nOther = 0;
  s.p2pBytes = 0;
  s.sameKind = s.sameBytes = true;
  s.kind = OpKind::Other;
  s.bytes = 0;
  s.peersInRange = true;
  if (s.sendCount) memset(s.sendCount, 0, 2 * sizeof(uint16_t) * id_.nRanks);
  s.gpuStart.store(UINT64_MAX, relaxed);
  s.gpuStop.store(0, relaxed);
  s.channels.store(0, relaxed);
  s.group.gen.store(g, relaxed);
  s.task[g & 1].gen.store(g, relaxed);
  s.kernel[g & 1].gen.store(g, relaxed);
  s.gen.store(g, std::memory_order_release);
  return &s;
}

void* CommProfile::startGroup() {
  plans_.fetch_add(1, relaxed);
  return &claimSlot()->group;
}

// Bytes of one call as the report sizes it: count elements, times nRanks
// for a collective all-to-all (its count is per peer; an all-to-all of
// send/recv tasks is sized the same way when classified).
uint64_t CommProfile::callBytes(OpKind kind, const char* datatype, uint64_t count) {
  const int elt = datatypeBytes(datatype);
  if (elt == 0) unknownDatatype_.fetch_add(1, relaxed);
  const uint64_t bytes = count * (uint64_t)elt;
  return kind == OpKind::AlltoAll ? bytes * (uint64_t)id_.nRanks : bytes;
}

void* CommProfile::startTask(const TaskEvent& e) {
  const OpKind kind = opKindOf(e.func);
  const uint64_t bytes = callBytes(kind, e.datatype, e.count);
  ops_[(int)kind].addCalls(bytes, 1);

  GroupSlot* s = slotOf(e.parentGroup, Handle::Group);
  if (s == nullptr || !s->open) {
    tasksWithoutGroup_.fetch_add(1, relaxed);
    return nullptr;
  }
  const bool first = s->nSend + s->nRecv + s->nOther == 0;
  if (first) {
    s->kind = kind;
    s->bytes = bytes;
  } else {
    s->sameKind = s->sameKind && kind == s->kind;
    s->sameBytes = s->sameBytes && bytes == s->bytes;
  }
  if (!e.isColl && (kind == OpKind::Send || kind == OpKind::Recv)) {
    const bool inRange = e.peer >= 0 && e.peer < id_.nRanks;
    s->peersInRange = s->peersInRange && inRange;
    uint16_t* counts = kind == OpKind::Send ? s->sendCount : s->recvCount;
    if (counts && inRange && counts[e.peer] < UINT16_MAX) counts[e.peer]++;
    (kind == OpKind::Send ? s->nSend : s->nRecv)++;
    s->p2pBytes = bytes;
  } else {
    s->nOther++;
  }
  const uint64_t g = s->gen.load(relaxed);
  return &s->task[g & 1];
}

// Sends and receives of one byte size forming whole all-to-alls: every peer
// but this rank gets exactly k sends and k receives; this rank k or 0 of
// each (NCCL drops an in-place send to self). *perPeer = k.
bool CommProfile::allToAllCount(const GroupSlot& s, uint32_t* perPeer) const {
  if (!s.sameBytes || s.nOther != 0 || s.nSend == 0 || s.nSend != s.nRecv || !s.peersInRange || !s.sendCount)
    return false;
  const int n = id_.nRanks, self = id_.rank;
  const uint32_t k = s.sendCount[n == 1 ? self : (self + 1) % n];
  if (k == 0) return false;
  for (int p = 0; p < n; p++) {
    const uint32_t sent = s.sendCount[p], received = s.recvCount[p];
    const bool ok = p == self ? sent == received && (sent == k || sent == 0) : sent == k && received == k;
    if (!ok) return false;
  }
  *perPeer = k;
  return true;
}

void CommProfile::stopGroup(Handle* group) {
  GroupSlot* s = slotOf(group, Handle::Group);
  if (s == nullptr || !s->open || group->gen.load(relaxed) != s->gen.load(relaxed)) {
    noteUnmatched();
    return;
  }
  s->open = false;
  const uint32_t nTasks = s->nSend + s->nRecv + s->nOther;
  uint32_t k = 0;
  if (allToAllCount(*s, &k)) {
    ops_[(int)OpKind::Send].addCalls(s->p2pBytes, -(int64_t)s->nSend);
    ops_[(int)OpKind::Recv].addCalls(s->p2pBytes, -(int64_t)s->nRecv);
    const uint64_t a2aBytes = s->p2pBytes * (uint64_t)id_.nRanks;
    ops_[(int)OpKind::AlltoAll].addCalls(a2aBytes, k);
    s->attrKind = OpKind::AlltoAll;
    s->attrBytes = a2aBytes;
    s->attrCalls = k;
    s->attrMixed = false;
  } else {
    s->attrKind = s->kind;
    s->attrBytes = s->bytes;
    s->attrCalls = nTasks;
    s->attrMixed = !(s->sameKind && s->sameBytes);
  }
  s->classified.store(nTasks > 0, std::memory_order_release);
}

void* CommProfile::startKernel(void* parentTask, uint64_t gpuStartNs) {
  GroupSlot* s = slotOf(parentTask, Handle::Task);
  if (s == nullptr) {
    noteUnmatched();
    return nullptr;
  }
  const uint64_t g = static_cast<Handle*>(parentTask)->gen.load(relaxed);
  if (g != s->gen.load(std::memory_order_acquire)) {
    lateKernelEvents_.fetch_add(1, relaxed);
    return nullptr;
  }
  atomicMin(s->gpuStart, gpuStartNs);
  s->channels.fetch_add(1, relaxed);
  return &s->kernel[g & 1];
}

void CommProfile::recordKernelStop(Handle* kernel, uint64_t gpuStopNs) {
  GroupSlot* s = slotOf(kernel, Handle::Kernel);
  if (s == nullptr) {
    noteUnmatched();
    return;
  }
  if (kernel->gen.load(relaxed) != s->gen.load(std::memory_order_acquire)) {
    lateKernelEvents_.fetch_add(1, relaxed);
    return;
  }
  atomicMax(s->gpuStop, gpuStopNs);
}

// Exactly once per plan: `classified` is taken by whoever folds.
void CommProfile::foldGpu(GroupSlot& s) {
  if (!s.classified.exchange(false, std::memory_order_acq_rel)) return;
  const uint64_t start = s.gpuStart.load(relaxed), stop = s.gpuStop.load(relaxed);
  if (s.channels.load(relaxed) == 0 || stop <= start || start == UINT64_MAX) return;
  const uint64_t ns = stop - start;
  if (s.attrMixed) {
    mixedPlanGpuNs_.fetch_add(ns, relaxed);
    mixedPlans_.fetch_add(1, relaxed);
  } else {
    ops_[(int)s.attrKind].addGpu(s.attrBytes, ns, s.attrCalls);
  }
}

void CommProfile::countCall(const char* func, const char* datatype, uint64_t count) {
  const OpKind kind = opKindOf(func);
  ops_[(int)kind].addCalls(callBytes(kind, datatype, count), 1);
}

CommSnapshot CommProfile::snapshot() const {
  CommSnapshot s;
  s.id = id_;
  s.kernelTiming = kernelTiming_;
  for (int k = 0; k < kOpKinds; k++) {
    OpSnapshot op = ops_[k].snapshot((OpKind)k);
    if (op.calls != 0) s.ops.push_back(std::move(op));
  }
  CommCounters& c = s.counters;
  c.plans = plans_.load(relaxed);
  c.mixedPlanGpuNs = mixedPlanGpuNs_.load(relaxed);
  c.mixedPlans = mixedPlans_.load(relaxed);
  c.tasksWithoutGroup = tasksWithoutGroup_.load(relaxed);
  c.lateKernelEvents = lateKernelEvents_.load(relaxed);
  c.unmatchedEvents = unmatchedEvents_.load(relaxed);
  c.unknownDatatype = unknownDatatype_.load(relaxed);
  return s;
}

CommSnapshot CommProfile::finish(bool finalized) {
  for (int i = 0; i < kGroupSlots; i++) foldGpu(slots_[i]);
  CommSnapshot s = snapshot();
  s.finalized = finalized;
  return s;
}

}  // namespace plugin
}  // namespace nccl_dcp
