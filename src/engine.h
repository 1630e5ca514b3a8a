/*************************************************************************
 * What the NCCL context and loopback share: the resolved config, the
 * protocol policy and workspace layout, the host-mapped error record, the
 * order of calls across streams and the checks every call passes before
 * anything is enqueued. A call is enqueued on one of two paths, each in a
 * file of its own and both slicing it into the same rounds (forEachRound):
 *   fused_path.cc     one kernel per round over the peers' workspaces
 *   fallback_path.cc  pack, ncclAlltoAll / ncclAllGather, combine per round
 ************************************************************************/
#ifndef NCCL_DCP_ENGINE_H_
#define NCCL_DCP_ENGINE_H_

#include <algorithm>
#include <atomic>
#include <string>

#include "error.h"
#include "launch.h"
#include "memory.h"
#include "protocol.h"
#include "registered_output.h"
#include "validate.h"

namespace nccl_dcp {

// The order of one context's calls, whatever stream each comes on (as NCCL
// orders a communicator's operations). Calls share the workspace and its
// device-side round counter, so no two may overlap:
//  - eager, on another stream than the last call (or after one captured in
//    a graph): the stream waits for `done`, the last call's event;
//  - the first call captured in a graph: an external event-wait node on
//    `done`, so each replay runs after whatever call came last (an eager
//    call or a replay), in the order the host launched them;
//  - later calls of the same capture: ordered inside the graph (stream
//    order, or `captureJoin` recorded where the last call's stream stands
//    when a call comes on another stream);
//  - every call ends by recording `done` (in a graph: an event-record node
//    added as a leaf, so replays record it too while no call of the graph
//    waits on it: consecutive captured calls keep kernel-to-kernel edges).
// What stays the caller's: calls of one context made from several threads
// at once, and a graph launched while another thread makes calls on it.
struct CallOrder {
  cudaEvent_t done = nullptr;
  cudaEvent_t captureJoin = nullptr;
  cudaStream_t lastStream = nullptr;
  bool hasLast = false;
  bool lastCaptured = false;
  unsigned long long captureId = 0;  // the capture of the last captured call

  // The state of `stream` for one call (a capture, or none).
  struct Call {
    bool capturing;
    unsigned long long captureId;
  };
  ncclResult_t before(cudaStream_t stream, Call* call);
  ncclResult_t after(cudaStream_t stream, const Call& call);
};

// A call as admitted: its strides resolved and its shape (the scatter
// mode's addressing and the call's additions, resolveCallArgs).
struct CallPlan {
  Strides strides;
  CallShape shape;
};

// Pinned host memory the device writes and the host reads without
// synchronising (mapped).
struct HostShared {
  AsyncErrorRecord error;  // the first device-side failure (ncclDcpGetAsyncError)
  uint32_t stopCode;       // source of the copy that stops the kernels' waits (abort)
};

// A round's region of the workspace, and so its kernel: the small
// protocol's, SIMPLE's for large rounds, LL's for one GPU's smallest
// (WorkspaceLayout; protocolForRound picks).
enum RoundTier { kTierSmall, kTierLarge, kTierTiny, kRoundTiers };

struct Engine {
  Config cfg;
  int nRanks = 0;
  int rank = 0;  // NCCL path only
  ProtocolPolicy policy;
  WorkspaceLayout layout;
  HostShared* host = nullptr;                // host view (mapped, pinned)
  int* lastSplit = nullptr;  // device int[kMaxRanks + 1]: TOKEN's last valid device-count split (RowSplit)
  AsyncErrorRecord* hostErrorDev = nullptr;  // device view of host->error
  int cudaDev = -1;                          // the device of the error record
  bool pdl = true;
  int simpleSendWarps = 0;  // SIMPLE's writing warps (NCCL_DCP_SIMPLE_SEND_WARPS, read at init; 0: the kernel's)
  // The fused kernels of this context, from its config at init (the
  // dispatch table, kernel_table.h): [loopback][tier], the kernel of each
  // region's protocol.
  FusedLauncher kernels[2][kRoundTiers] = {};
  CallOrder order;  // calls on any stream, in the order they were made

  // Layout and kernels for the policy; allocates the error record and the
  // order's events on the current device.
  ncclResult_t init(const Config& config, int ranks, int myRank, const ProtocolPolicy& p);
  void release(FreeMode mode);

  // ncclSuccess, or the error recorded in the error record: a device-side
  // wait that timed out, or (fallback) NCCL's asynchronous error (message
  // set; a WARN the first time only).
  ncclResult_t asyncError() const;
  ncclResult_t describeAsyncError(const volatile AsyncErrorRecord* e) const;
  mutable std::atomic<bool> asyncErrorWarned{false};
  // Records an error found on the host (the first one sticks).
  void poison(ncclResult_t code, int peer);

  // Everything ncclDcpA2aLseReduceEx checks before enqueuing, for the
  // nBuffers ranks one launch serves (loopback: every virtual rank r,
  // buffers[r]; NCCL: this rank): the strides, the call's args (may be
  // NULL) and every rank's buffers. Any stream is fine.
  ncclResult_t admit(const CallBuffers* buffers, int nBuffers, int batch, const ncclDcpStrides_t* strides,
                     const ncclDcpCallArgs_t* args, CallPlan* plan) const;

  // The host side of an admitted call of batch > 0 rows on `stream`: ordered
  // after the previous call (CallOrder), then enqueue() -- or, on a poisoned
  // context, NaN written into every output row the call owns and its async
  // error returned. The second form takes what a poisoned call enqueues
  // instead (the fallback's still joins the exchange its peers wait in).
  template <typename F>
  ncclResult_t run(const CallBuffers* buffers, int nBuffers, int batch, const CallPlan& plan, cudaStream_t stream,
                   F&& enqueue) {
    return run(stream, enqueue, [&] { return enqueuePoison(buffers, nBuffers, batch, plan, stream); });
  }
  template <typename F, typename P>
  ncclResult_t run(cudaStream_t stream, F&& enqueue, P&& enqueuePoisoned);

  // Whether this poisoned engine's fallback calls still join their peers'
  // exchanges: its error is its own call's (device counts its kernels
  // refused) and `comm` has none since (the record keeps the first error
  // only, so it is asked). Else there is no exchange to join.
  bool exchangesWhilePoisoned(ncclComm_t comm) const {
    const volatile AsyncErrorRecord* e = host ? &host->error : nullptr;
    ncclResult_t commError = ncclSuccess;
    return e != nullptr && e->code == ncclInvalidArgument && ncclCommGetAsyncError(comm, &commError) == ncclSuccess &&
           (commError == ncclSuccess || commError == ncclInProgress);
  }

  // The region (and kernel) of a round of `rows` rows, by the policy, and
  // the protocol that kernel runs.
  RoundTier tierOfRound(int rows) const;
  Proto protocolOfRound(int rows) const;
  const Region& regionOf(RoundTier tier) const {
    return tier == kTierTiny ? layout.tiny : tier == kTierLarge ? layout.large : layout.small;
  }

  // Fused path (fused_path.cc): rounds of at most cfg.maxBatch rows.
  // `direct`: NONE's phase 2 into the registered outputs of the call
  // (registered_output.h), or NULL.
  ncclResult_t enqueueFused(const CallBuffers* buffers, int batch, const CallPlan& plan, const Addressing& addr,
                            cudaStream_t stream, int silentRank = -1, const DirectCall* direct = nullptr) const;

  // NaN into every output element of `batch` rows that each of nBuffers
  // ranks owns (buffers[i] is rank i's, or with one buffer this engine's rank).
  ncclResult_t enqueuePoison(const CallBuffers* buffers, int nBuffers, int batch, const CallPlan& plan,
                             cudaStream_t stream) const;

  // Abort's device side: tells the kernels that read statusWord (the
  // workspace's Control::status; NULL when the host has no address for it)
  // to stop waiting, then waits at most drainMs for the last call to
  // finish. True when nothing of this engine runs any more. The stop is one
  // copy from pinned memory on a side stream: a copy engine moves it even
  // while a cooperative kernel fills the GPU; every wait of a launch gives up
  // at its next check of the word, and later launches do nothing.
  bool stopAndDrain(uint32_t* statusWord, int drainMs) const;
  // The stop alone, without waiting: abort sends it before it waits for
  // other threads' calls to leave the context (one may be blocked in a
  // launch behind the stuck kernels until they stop).
  void stop(uint32_t* statusWord) const;
};

// Waits until `stream` is idle and `event` (if any) complete, at most `ms`
// milliseconds. False if one is still busy (or cannot be queried).
bool waitIdle(cudaStream_t stream, cudaEvent_t event, int ms);

// Workspace bytes of a config for any protocol the policy may pick later.
size_t workspaceBound(const Config& cfg, int nRanks);

// The one round-slicing of a call: f(row0, rows) for rounds of at most
// maxBatch rows, in the same order on every rank. Each round is one launch
// (fused) or one pack/all-to-all/combine (fallback), so a workspace slot is
// reused only after every peer finished reading it (DESIGN §4).
template <typename F>
ncclResult_t forEachRound(int batch, int maxBatch, F&& f) {
  for (int row0 = 0; row0 < batch; row0 += maxBatch) DCPCHECK(f(row0, std::min(maxBatch, batch - row0)));
  return ncclSuccess;
}

template <typename F, typename P>
ncclResult_t Engine::run(cudaStream_t stream, F&& enqueue, P&& enqueuePoisoned) {
  CallOrder::Call call;
  DCPCHECK(order.before(stream, &call));
  const ncclResult_t poisoned = asyncError();
  const std::string message = poisoned == ncclSuccess ? "" : lastError();
  ncclResult_t res = poisoned == ncclSuccess ? enqueue() : enqueuePoisoned();
  const ncclResult_t ordered = order.after(stream, call);
  if (res == ncclSuccess) res = ordered;
  if (poisoned == ncclSuccess) return res;
  restoreLastError(message.c_str());  // the call's error is the context's
  return poisoned;
}

// One rank's buffers advanced to row row0 of the call: the inputs, and the
// outputs unless the mode is TOKEN (whose out rows are the rank's slice:
// the kernels place them). The empty-shard arrays stay the call's.
inline CallBuffers buffersAtRow(const CallBuffers& b, const Strides& s, const Config& c, int row0) {
  const int64_t e = c.eltSize, outRow0 = c.scatter == Scatter::Token ? 0 : row0;
  return {(const char*)b.partialOut + row0 * s.inRow * e,
          (const char*)b.partialLse + row0 * s.lseRow * c.lseEltSize,
          (char*)b.out + outRow0 * s.outRow * e,
          b.outLse ? b.outLse + outRow0 * s.outLseRow : nullptr,
          b.seqLens,
          b.queryStartLoc};
}

// A nonblocking communicator (ncclConfig_t.blocking = 0) answers
// ncclInProgress while NCCL finishes an operation in the background:
// waits the way NCCL documents (ncclCommGetAsyncError until it is not in
// progress) and returns what the operation came to. At most timeoutMs
// (0: for ever): past it ncclRemoteError, since an operation a peer never
// joined stays pending and only ncclCommAbort ends it. Blocking: a no-op.
// `query` is NCCL's, or a test's.
using CommStateQuery = ncclResult_t (*)(ncclComm_t, ncclResult_t*);
ncclResult_t waitForComm(ncclComm_t comm, const char* what, int timeoutMs,
                         CommStateQuery query = ncclCommGetAsyncError);
// What an NCCL call's result r comes to: a nonblocking communicator's
// ncclInProgress waited for (waitForComm's bound); a failure with its
// message set.
ncclResult_t settle(ncclComm_t comm, ncclResult_t r, const char* what, int timeoutMs);

// Fallback path (fallback_path.cc): buffers of maxBatch rows for
// ncclAlltoAll (HEAD) or ncclAllGather (TOKEN, NONE: every rank receives
// every partial, cp times the bytes HEAD moves: fallback speed is NCCL's).
struct FallbackBuffers {
  char* sendData = nullptr;
  char* recvData = nullptr;
  char* sendLse = nullptr;  // LSE words of the wire (lseWordBytesOf)
  char* recvLse = nullptr;
};

// One round of a fallback call, in its three phases: the all-to-alls of
// several communicators driven by one thread go in one ncclGroupStart/End
// between their packs and their combines (ncclDcpGroupEnd).
struct FallbackRound {
  const Engine* engine;
  const FallbackBuffers* fb;
  ncclComm_t comm;
  const CallBuffers* buf;  // the call's, at row 0
  const CallPlan* plan;
  cudaStream_t stream;
  int row0, rows;
  // A poisoned context's round still exchanges (its peers would wait in
  // NCCL for ever), sending the poisoned pattern and merging nothing.
  bool poisoned = false;

  ncclResult_t pack() const;      // strided partials -> send buffers
  ncclResult_t exchange() const;  // the two ncclAlltoAll / ncclAllGather (the caller groups them)
  ncclResult_t combine() const;   // recv buffers -> outputs
};

// What a poisoned context's fallback round sends in place of its partials:
// payload bytes 0xff (NaN in every dtype, and in e4m3) under LSE words of
// bytes 0x7f (3.39e38, fp8's scale too): finite, so the merge keeps it, and
// above any real LSE, so it is every merge's maximum: its units weigh 1
// (1/k from k such senders), every other source's exactly 0, and each
// peer's merge comes out NaN (its outLse ~3.4e38) whatever the healthy LSEs
// below 3.39e38 (every real one).
// 0x3f (0.747) lost to a healthy LSE above ~104 (base e), whose weight
// underflowed it to 0: the NaN left out, silently. A NaN or -inf LSE would
// not do either: the merge reads it as an empty shard.
constexpr int kPoisonedPayloadByte = 0xff, kPoisonedLseByte = 0x7f;

// On the current device.
ncclResult_t allocFallbackBuffers(const Config& cfg, int nRanks, FallbackBuffers* b);
void freeFallbackBuffers(FallbackBuffers* b, int dev, FreeMode mode);
// A poisoned call (`poisoned`): NaN into its outputs, and the exchange
// still made with the poisoned pattern unless its communicator failed.
ncclResult_t enqueueFallback(const Engine& engine, const FallbackBuffers& fb, ncclComm_t comm, const CallBuffers& buf,
                             int batch, const CallPlan& plan, cudaStream_t stream, bool poisoned = false);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_ENGINE_H_
