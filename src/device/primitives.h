/*************************************************************************
 * Small inline primitives of the protocols: the exact memory operations
 * each line format relies on, and the bounded wait. And the interfaces the
 * protocols implement. Protocols are types, as in NCCL's primitives.h: the
 * kernel (kernel.h) is written once against a Protocol class, the
 * algorithm (modes.h, relay.h) once against the protocols' drivers, so
 * every protocol's moves inline into one kernel body with no runtime
 * dispatch.
 *
 * A protocol (LineProtocol<LlLines>, LineProtocol<Ll128Lines>,
 * SimpleProtocol) provides:
 *
 *   kThreads                    threads of a block
 *   blocksWanted(args, coResident)
 *                               host: blocks per rank a round wants, given
 *                               the co-resident blocks a rank can have (the
 *                               launcher caps them at that)
 *   run<Mode, Codec>(p, rank, localBlock)
 *                               one block's part of one round: starts the
 *                               round (round.h), sends every unit the mode
 *                               has this rank send (push: into the peers'
 *                               workspaces), merges every unit it owns in
 *                               source order with the codec's
 *                               accumulation, NaN where a wait gave up,
 *                               forwards and relays merged pieces when the
 *                               mode relays (relay.h), ends the round
 *
 * The line protocols share one driver (proto_lines.h) over a Lines class
 * per line format (proto_ll.h, proto_ll128.h), all static __device__ and
 * warp-collective (`lane` is the caller's lane; r the protocol's Region,
 * layout.h; g a group of a unit, the unit a (row, head) of one source):
 *
 *   Line                        what one lane polls of one group
 *   Batch                       one lane's payload of kSendBatch groups as
 *                               the codec encodes it: word(j, k), lseWord(lse)
 *   dataWord(r, g, lane, k)     the head's data word (0..Dw) the lane holds
 *                               as its k-th word (k = 0, 1) of group g, or -1
 *   loadBatch(r, src, g0, lane, batch)
 *                               send: loads groups [g0, g0 + kSendBatch) of
 *                               the input at src, before any store
 *   sealBatch(r, src, lane, batch)
 *                               a scaled codec's unit scale from group 0's
 *                               batch (nothing for native): apart from the
 *                               loads, so that the round read overlaps them
 *   storeBatch(r, batch, g0, lse, unit, flag, lane)
 *                               send: stores them into the destination's
 *                               unit, the LSE word in payload word 0, the
 *                               round's flag with the data
 *   storeGroup(r, a, b, g, lseWord, unit, flag, lane)
 *                               the same for one group from the lane's
 *                               words a, b (dataWord's k = 0, 1): what
 *                               storeBatch stores each group with, and the
 *                               relay forwards a merged group with
 *   pollLoad(r, unit, g, lane, line)
 *                               receive: one volatile load of group g
 *   pollReady(r, g, lane, line, flag)
 *                               the lane's part of group g carries the
 *                               round's flag (the warp polls until all do)
 *   fetch(r, unit, g, lane, line)
 *                               the data once every flag is seen: nothing
 *                               (LL: the polled data is the data) or a
 *                               re-read (LL128 on Hopper)
 *   lseWordOf(line)             the unit's LSE word (lane 0)
 *   word(line, k)               the lane's k-th data word (see dataWord)
 *   release(r, unit, g, lane)   resets the group's flags: the warp is its
 *                               only reader
 *
 * SIMPLE signals a chunk of units from one source, not a group of lines;
 * its primitives (proto_simple.h, namespace simple: copyShare /
 * encodeShare, publishProgress / awaitProgress, pollFlags) and its driver
 * sit in its file. Line formats are in layout.h, shared with the host.
 ************************************************************************/
#ifndef NCCL_DCP_DEVICE_PRIMITIVES_H_
#define NCCL_DCP_DEVICE_PRIMITIVES_H_

#include <stdint.h>

#include "layout.h"
#include "types.h"

namespace nccl_dcp {

constexpr unsigned kFullMask = 0xffffffffu;

// Line protocols: groups whose input loads a sending warp issues before
// their stores, and sources whose loads a receiving warp keeps in flight.
constexpr int kSendBatch = 4;
constexpr int kSourceBatch = 8;

#if defined(__CUDACC__)

// 16 bytes per lane, one instruction: a warp moves 512 bytes. Volatile so
// polls are re-issued and stores leave in program order.
__device__ __forceinline__ void loadVolatile16(const void* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p));
}
__device__ __forceinline__ void storeVolatile16(void* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b));
}
__device__ __forceinline__ void loadVolatile16(const void* p, uint32_t& a, uint32_t& b, uint32_t& c,
                                               uint32_t& d) {
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
               : "l"(p));
}
__device__ __forceinline__ void storeVolatile16(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c),
               "r"(d));
}
__device__ __forceinline__ void storeVolatile8(void* p, uint64_t v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v));
}
__device__ __forceinline__ void storeVolatile4(void* p, uint32_t v) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v));
}
__device__ __forceinline__ uint32_t loadVolatile4(const void* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// SIMPLE's signal: a system-scope fence (fenceAcqRelSys) then this store
// form a release pattern; the receiver's acquire load orders its data
// loads after the flag.
__device__ __forceinline__ void storeRelaxedSys8(void* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t loadAcquire8(const void* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Inputs are read-only for the whole kernel: the non-coherent path.
// Volatile asm, so they are issued where written -- ahead of the round's
// atomic or a poll loop, to overlap it -- and not sunk next to their use.
__device__ __forceinline__ uint64_t loadInput8(const void* p) {
  uint64_t v;
  asm volatile("ld.global.nc.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 loadInput16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float loadInputF32(const float* p) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

// Bulk payload: plain 16-byte stores, ordered before a flag by a fence.
__device__ __forceinline__ void store16(void* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }
__device__ __forceinline__ uint4 loadVolatile16(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// SIMPLE's payload, read once its chunk's flags are acquired (by a lane
// of the group's first warp, then the group's barrier): the writers'
// release, that acquire and the barrier order even a weak load after the
// payload's stores (in practice, the acquire's CCTL.IVALL clears the SM's
// L1), so the strong system-scope ld.volatile is not needed.
// L1::no_allocate is only a hint, kept off L1 for reuse, not for safety.
// 3-5% faster at 16 rows, never slower than 1% (docs/perf-history.md,
// "SIMPLE's merge loads, weaker").
__device__ __forceinline__ uint4 loadPayload16(const void* p) {
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// Orders this thread's earlier stores, at system scope (peer GPUs), before
// its later ones.
__device__ __forceinline__ void fenceAcqRelSys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Programmatic dependent launch: no-ops when the launch did not ask for it.
__device__ __forceinline__ void waitForPrerequisiteGrid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allowDependentGrid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Bounded wait of one warp. Every poll loop calls keepWaiting() once per
// spin with the whole warp; every 1024 spins lane 0 checks whether another
// wait already failed (status word) and whether the deadline passed, and
// the verdict is broadcast so the warp leaves together. The first spin
// checks the deadline too (a clock read, no load): a bound shorter than
// 1024 polls shows at once instead of never.
struct Waiter {
  uint64_t deadlineNs;  // UINT64_MAX: wait forever
  uint32_t* status;     // device copy of the error code, shared by the waits of a launch
  AsyncErrorRecord* hostError;
  int rank;
  uint32_t round;
  uint32_t spins;
  bool failed;

  __device__ bool keepWaiting(int peer) {
    const bool first = ++spins == 1;
    if (!first && (spins & 1023u) != 0) return true;
    bool stop = false;
    if ((threadIdx.x & 31) == 0) {
      stop = !first && loadVolatile4(status) != 0;
      if (!stop && globalTimerNs() > deadlineNs) {
        stop = true;
        fail(peer, 6 /* ncclRemoteError: a peer did not take part */);
      }
    }
    stop = __shfl_sync(kFullMask, stop, 0);
    failed = failed || stop;
    return !stop;
  }

  __device__ void fail(int peer, uint32_t code) {
    if (atomicCAS(status, 0u, code) == 0u) {
      hostError->rank = rank;
      hostError->peer = peer;
      hostError->round = round;
      __threadfence_system();
      *(volatile uint32_t*)&hostError->code = code;
      __threadfence_system();
    }
  }
};

#endif  // __CUDACC__

}  // namespace nccl_dcp

#endif  // NCCL_DCP_DEVICE_PRIMITIVES_H_
