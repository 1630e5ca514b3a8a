/*************************************************************************
 * Context create / destroy / abort on the user's communicator (DESIGN §10).
 *
 * Create is collective, grouped over the communicators this thread drives,
 * and runs as a sequence of short steps:
 *   arguments             local checks                         -> gather
 *   agree                 the gathered records agree           (pure)
 *   device communicators  ncclDevCommCreate (collective), each
 *                         rank's view of its links (topology.h)
 *                         and of CUDA IPC to its peers          -> gather
 *   choose path           the provider (nccl-window, cuda-ipc,
 *                         fallback), protocol policy            -> gather
 *   workspace             memory (cuda-ipc: and its handle)     -> gather
 *   map peers             window registration (collective) or
 *                         the peers' handles opened; zeroing
 *   ready                 every workspace is zero              -> gather
 * Each gather all-gathers every rank's record, its status included, over
 * the communicator itself (exchange.h: sealed records, so one that did not
 * arrive -- a failed copy, a gather NCCL deferred inside the caller's
 * ncclGroupStart -- is seen as such): after it every rank returns the same
 * error (the lowest failing rank's, naming its step), and no rank enters a
 * collective NCCL call that a failed peer will never reach. A local
 * failure before a gather is recorded and goes through it. Every failure
 * unwinds through one release that gives back, in reverse order, exactly
 * what was created. Destroy uses the same release; abort uses it without
 * waiting. cuda-ipc workspaces are given back through ipc_lifetime.h:
 * never while a peer may still write into them.
 ************************************************************************/
#include "context.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agreement.h"
#include "enums.h"
#include "error.h"
#include "exchange.h"
#include "ipc_lifetime.h"
#include "log.h"
#include "memory.h"
#include "device/nccl_compat.h"
#include "profiler_hook.h"
#include "testing.h"
#include "topology.h"

namespace nccl_dcp {

namespace {

// Restores the caller's current device when the scope ends.
struct DeviceGuard {
  int saved = -1;
  DeviceGuard() {
    if (cudaGetDevice(&saved) != cudaSuccess) saved = -1;
  }
  ~DeviceGuard() {
    if (saved >= 0) cudaSetDevice(saved);
  }
};

// ---------------------------------------------------------------------------
// The one release: undoes, in reverse order of creation, what ctx holds.
// Local (no step waits for a peer: NCCL 2.28-2.30 deregister a window and
// destroy a device communicator without a barrier, DESIGN §9). Returns the
// first failure and carries on.

void keepFirst(ncclResult_t* res, ncclResult_t r, const char* what) {
  if (r != ncclSuccess && *res == ncclSuccess)
    *res = fail(r, "%s failed while releasing a context: %s", what, ncclGetLastError(nullptr));
}

// A registered output's windows and bases table (every step local).
void releaseOutput(Context* ctx, RegisteredOutput* reg, FreeMode mode, ncclResult_t* res) {
  for (ncclWindow_t w : {reg->outWindow, reg->lseWindow})
    if (w != nullptr)
      keepFirst(res, settle(ctx->comm, ncclCommWindowDeregister(ctx->comm, w), "ncclCommWindowDeregister",
                            ctx->engine.cfg.timeoutMs),
                "ncclCommWindowDeregister of a registered output");
  freeMemory(MemoryKind::Device, ctx->cudaDev, reg->bases, mode);
  delete reg;
}

ncclResult_t releaseContext(Context* ctx, FreeMode mode) {
  ncclResult_t res = ncclSuccess;
  if (ctx->cudaDev >= 0) cudaSetDevice(ctx->cudaDev);
  for (RegisteredOutput* reg : ctx->outputs) releaseOutput(ctx, reg, mode, &res);
  ctx->outputs.clear();
  if (ctx->ownsWindow)
    keepFirst(&res,
              settle(ctx->comm, ncclCommWindowDeregister(ctx->comm, ctx->window), "ncclCommWindowDeregister",
                     ctx->engine.cfg.timeoutMs),
              "ncclCommWindowDeregister");
  for (int r = 0; r < ctx->nRanks && r < NCCL_DCP_MAX_RANKS; r++) {
    if (ctx->ipcMapped[r]) freeMemory(MemoryKind::IpcImport, ctx->cudaDev, ctx->lsa[r], mode);
    releaseUse(ctx->peerUse[r], ctx->cudaDev, mode);  // a peer thread's workspace (ipc_lifetime.h)
  }
  // cuda-ipc: freed with its last use, and only once peers in other
  // processes agreed they closed it; else as any memory of ours.
  if (ctx->exported) releaseUse(ctx->exported, ctx->cudaDev, mode);
  else freeMemory(ctx->ownedKind, ctx->cudaDev, ctx->ownedMemory, mode);
  freeFallbackBuffers(&ctx->fallback, ctx->cudaDev, mode);
  ctx->engine.release(mode);
  if (ctx->hasDevComm)
    keepFirst(&res,
              settle(ctx->comm, ncclDevCommDestroy(ctx->comm, &ctx->devComm), "ncclDevCommDestroy",
                     ctx->engine.cfg.timeoutMs),
              "ncclDevCommDestroy");
  delete ctx;
  return res;
}

// cuda-ipc: closes this context's mappings of its peers' workspaces (the
// other-process ones; a peer thread's is a pointer, its use given back with
// the context). True when every one closed.
bool closeImports(Context* ctx) {
  bool closed = true;
  if (ctx->cudaDev >= 0) cudaSetDevice(ctx->cudaDev);
  for (int r = 0; r < ctx->nRanks && r < NCCL_DCP_MAX_RANKS; r++) {
    if (!ctx->ipcMapped[r]) continue;
    if (cudaIpcCloseMemHandle(ctx->lsa[r]) != cudaSuccess) {
      cudaGetLastError();
      closed = false;
      WARN("rank %d: cudaIpcCloseMemHandle of rank %d's workspace failed", ctx->rank, r);
    }
    ctx->ipcMapped[r] = false;
    ctx->lsa[r] = nullptr;
  }
  return closed;
}

// ---------------------------------------------------------------------------
// Create: the communicators of one call, each with its record exchange and
// the context under construction.

struct Member {
  ncclComm_t comm = nullptr;
  int rank = 0, nRanks = 0, dev = -1;
  Exchange x;                     // the record all-gathers; its stream also zeroes the workspace
  Context* ctx = nullptr;
  RankRecord mine;
  std::vector<RankRecord> all;    // after a gather: every rank's record

  // Keeps this rank's first failure, tagged with its step (in test builds,
  // an injected one where the step succeeded).
  void record(CreateStep step, ncclResult_t r) {
    if (r == ncclSuccess) r = injectedFailure(step, rank);
    note(step, r);
    alterRecord(rank, step, &mine);
  }
  // The same, without the step's injected fault (a failure inside a step).
  void note(CreateStep step, ncclResult_t r) { recordFailure(&mine.status, r, step, lastError()); }
  bool failed() const { return mine.status.code != ncclSuccess; }
};

struct Creation {
  std::vector<Member> members;
  Config cfg = {};
  int ncclVersion = 0;
  bool mapped = false;  // the map-peers step ran: peers may hold mappings of our workspaces

  // The exchange (a stream and a scratch buffer per communicator) and the
  // contexts' host state: the first resources. A local failure here is
  // recorded, not returned: the rank still takes part in the first gather,
  // which fails every rank alike (a rank that returned here would leave
  // its peers in ncclAllGather for ever). Only a rank that cannot take
  // part at all (no communicator rank, no device, no scratch) returns.
  ncclResult_t open(int n, const ncclComm_t* comms) {
    members.resize(n);
    for (int i = 0; i < n; i++) {
      Member& m = members[i];
      m.comm = comms[i];
      memset(&m.mine, 0, sizeof(m.mine));
      // A nonblocking communicator may still be initialising. The config
      // is read once the communicator answers: this wait takes
      // NCCL_DCP_TIMEOUT_MS, else the default. Past it no rank can go on
      // (the init is collective): return.
      const int waitMs = env().timeoutMs != kEnvUnset ? env().timeoutMs : kDefaultTimeoutMs;
      ncclResult_t ready = waitForComm(m.comm, "the communicator", waitMs);
      if (ready == ncclRemoteError) return ready;
      const std::string why = lastError();
      NCCLCHECK(ncclCommUserRank(m.comm, &m.rank));
      if (ready == ncclSuccess) ready = injectedAt(CreatePoint::WaitForComm, CreateStep::Arguments, m.rank);
      else restoreLastError(why.c_str());
      m.note(CreateStep::Arguments, ready);
      NCCLCHECK(ncclCommCount(m.comm, &m.nRanks));
      NCCLCHECK(ncclCommCuDevice(m.comm, &m.dev));
      m.mine.devComm.lsaSize = 1;  // no device communicator: an LSA team of one
      const char* cumem = getenv("NCCL_CUMEM_ENABLE");
      m.mine.devComm.cumemDisabled = cumem != nullptr && strcmp(cumem, "0") == 0;
      m.mine.ipc = {(int32_t)IpcBlock::NotTried, -1};
      m.all.resize(m.nRanks);
      m.ctx = new Context();
      m.ctx->comm = m.comm;
      m.ctx->rank = m.rank;
      m.ctx->nRanks = m.nRanks;
      m.ctx->cudaDev = m.dev;
      flushDeferredFrees(m.dev);
      m.note(CreateStep::Arguments, m.x.open(m.comm, m.rank, m.nRanks, m.dev, sizeof(RankRecord), "create's exchange"));
      if (!m.x.usable()) return fail((ncclResult_t)m.mine.status.code, "%s", m.mine.status.message);
    }
    return ncclSuccess;
  }

  // All-gathers every member's record through NCCL itself; then every rank
  // fails alike if any rank recorded a failure, or if any rank's record
  // did not arrive (exchange.h: its copy to the device failed, or the
  // all-gather is deferred by the caller's ncclGroupStart). `step`: the
  // step this gather ends (Count: the unwind's), named by `label`.
  ncclResult_t gather(CreateStep step, const char* label = nullptr) {
    char what[96];
    if (label) snprintf(what, sizeof(what), "%s", label);
    else snprintf(what, sizeof(what), "create step '%s'", createStepName(step));
    for (Member& m : members) {
      cudaSetDevice(m.dev);
      m.x.step = step;
      if (m.x.post(&m.mine) != ncclSuccess)
        WARN("rank %d: %s: its record could not be sent (%s): every rank will see it missing", m.rank, what,
             lastError());
    }
    NCCLCHECK(ncclGroupStart());
    ncclResult_t enqueued = ncclSuccess;
    for (Member& m : members)
      if (enqueued == ncclSuccess) enqueued = m.x.allGather();
    const ncclResult_t end = ncclGroupEnd();
    DCPCHECK(enqueued);
    for (Member& m : members) DCPCHECK(settle(m.comm, end, "the all-gather of create's records", cfg.timeoutMs));
    FirstError first;
    for (Member& m : members) {
      cudaSetDevice(m.dev);
      bool noneArrived = false;
      const ncclResult_t r = m.x.collect(m.all.data(), what, -1, &noneArrived);
      if (r == ncclSuccess) continue;
      first.keep(r);
      // Still queued in the caller's group: what it will send once NCCL
      // runs it tells the peers (those outside a group wait in it).
      if (noneArrived) {
        RankRecord failed = m.mine;
        memset(&failed.status, 0, sizeof(failed.status));
        recordFailure(&failed.status, r, step == CreateStep::Count ? CreateStep::Arguments : step, first.message());
        m.x.post(&failed, true);
      }
    }
    DCPCHECK(first.result());
    for (Member& m : members) DCPCHECK(firstFailure(m.all.data(), m.nRanks));
    return ncclSuccess;
  }

  // The unwind of a failed create: the contexts, once nothing of ours runs.
  void releaseContexts() {
    for (Member& m : members)
      if (m.x.usable()) {
        cudaSetDevice(m.dev);
        cudaStreamSynchronize(m.x.stream());  // a zeroing (no peer wait)
      }
    if (mapped) agreeOnRelease();
    for (Member& m : members) {
      if (m.ctx) releaseContext(m.ctx, FreeMode::Now);
      m.ctx = nullptr;
    }
  }

  // cuda-ipc with peers in other processes, after the map-peers step: each
  // rank closes what it mapped, the ranks agree on it (one more gather:
  // every rank got here from the same verdict), then the owners may free
  // (ipc_lifetime.h). A rank that could not close keeps the peers' memory.
  void agreeOnRelease() {
    bool any = false;
    for (Member& m : members) any = any || (m.ctx && m.ctx->exported && hasRemoteImporters(m.ctx->exported));
    if (!any) return;
    for (Member& m : members) {
      memset(&m.mine.status, 0, sizeof(m.mine.status));
      if (!closeImports(m.ctx))
        recordFailure(&m.mine.status, ncclUnhandledCudaError, CreateStep::MapPeers,
                      "cudaIpcCloseMemHandle of a peer's workspace failed");
    }
    if (gather(CreateStep::Count, "create's unwind (cuda-ipc workspaces closed)") != ncclSuccess) {
      WARN("%s", lastError());
      return;  // kept for the process's life (releaseUse says so)
    }
    for (Member& m : members)
      if (m.ctx->exported) remoteClosed(m.ctx->exported);
  }

  // The exchange, on every exit.
  void close() {
    for (Member& m : members) m.x.close();
  }
};

// ---- 1. Arguments: everything a rank can check alone.

ncclResult_t checkCommonArguments(const ncclDcpConfig_t* cfgIn, Context* const* out, Creation* c) {
  if (out == nullptr) return fail(ncclInvalidArgument, "the output (ctx / ctxs) is NULL");
  DCPCHECK(resolveConfig(cfgIn, env(), &c->cfg));
  NCCLCHECK(ncclGetVersion(&c->ncclVersion));
  return checkNcclVersion(c->ncclVersion, NCCL_VERSION_CODE);
}

ncclResult_t checkMemberArguments(const Config& cfg, const Member& m, const AppWindow* w) {
  DCPCHECK(checkRanks(m.nRanks));
  if (w == nullptr) return ncclSuccess;
  if (w->window == nullptr) return fail(ncclInvalidArgument, "win is NULL");
  if (w->offset % NCCL_WIN_REQUIRED_ALIGNMENT != 0)
    return fail(ncclInvalidArgument, "offset %zu is not a multiple of %d", w->offset, NCCL_WIN_REQUIRED_ALIGNMENT);
  if (w->bytes > SIZE_MAX - w->offset)
    return fail(ncclInvalidArgument, "offset %zu + bytes %zu overflows", w->offset, w->bytes);
  const size_t need = workspaceBound(cfg, m.nRanks);
  if (w->bytes < need)
    return fail(ncclInvalidArgument, "bytes %zu is less than ncclDcpWorkspaceSize() = %zu", w->bytes, need);
  return ncclSuccess;
}

// This rank's GPU and host (its view of its links comes once the peers'
// GPUs are known: stepDeviceCommunicators).
ncclResult_t fillRankView(int dev, RankView* view) {
  CUDACHECK(cudaDeviceGetPCIBusId(view->busId, sizeof(view->busId), dev));
  view->links = LinkView{thisHostHash(), 0, 0};
  return ncclSuccess;
}

ncclResult_t stepArguments(Creation* c, const ncclDcpConfig_t* cfgIn, const AppWindow* windows,
                           Context* const* out) {
  const ncclResult_t common = checkCommonArguments(cfgIn, out, c);
  const std::string commonMessage = lastError();
  for (size_t i = 0; i < c->members.size(); i++) {
    Member& m = c->members[i];
    const AppWindow* w = windows ? &windows[i] : nullptr;
    if (common != ncclSuccess)
      recordFailure(&m.mine.status, common, CreateStep::Arguments, commonMessage.c_str());
    else
      m.record(CreateStep::Arguments, checkMemberArguments(c->cfg, m, w));
    m.record(CreateStep::Arguments, fillRankView(m.dev, &m.mine.view));
    m.mine.agreement = agreementOf(c->cfg, c->ncclVersion, w != nullptr, w ? w->offset : 0);
    alterAgreement(m.rank, &m.mine.agreement);
  }
  return c->gather(CreateStep::Arguments);
}

// ---- 2. Agree: the same scan of the same records on every rank.

ncclResult_t stepAgree(Creation* c) {
  for (Member& m : c->members) DCPCHECK(checkAgreement(m.all.data(), m.nRanks));
  return ncclSuccess;
}

// ---- 3. Device communicators. A rank without one (no symmetric memory
// support) is not an error: the ranks then agree on the fallback path.

void createDevComms(Creation* c) {
  std::vector<ncclResult_t> rc(c->members.size(), ncclInternalError);
  ncclDevCommRequirements reqs = devCommRequirements();
  if (ncclGroupStart() != ncclSuccess) return;
  for (size_t i = 0; i < c->members.size(); i++) {
    Member& m = c->members[i];
    rc[i] = ncclDevCommCreate(m.comm, &reqs, &m.ctx->devComm);
  }
  const ncclResult_t end = ncclGroupEnd();
  for (size_t i = 0; i < c->members.size(); i++) {
    Member& m = c->members[i];
    m.mine.devComm.tried = 1;
    if (rc[i] == ncclSuccess && end == ncclInProgress)
      rc[i] = waitForComm(m.comm, "ncclDevCommCreate", c->cfg.timeoutMs);
    if (rc[i] != ncclSuccess || (end != ncclSuccess && end != ncclInProgress)) {
      INFO("rank %d: ncclDevCommCreate failed (%s: %s): no symmetric memory support (e.g. NCCL_CUMEM_ENABLE=0 "
           "or no P2P)",
           m.rank, ncclGetErrorString(rc[i] != ncclSuccess ? rc[i] : end), ncclGetLastError(m.comm));
      continue;
    }
    m.ctx->hasDevComm = true;
    const ncclDevComm& dc = m.ctx->devComm;
    DevCommOutcome& d = m.mine.devComm;
    d.capable = dc.lsaSize == m.nRanks;
    d.lsaSize = dc.lsaSize;
    d.lsaRank = dc.lsaRank;
    d.created = 1;
    if (dc.lsaSize != m.nRanks)
      INFO("rank %d: LSA team has %d of %d ranks (ranks span nodes or are not node-contiguous)", m.rank, dc.lsaSize,
           m.nRanks);
  }
}

// The first rank on another host than this one; -1 when all share it.
int firstOnAnotherHost(const Member& m) {
  for (int r = 0; r < m.nRanks; r++)
    if (m.all[r].view.links.hostHash != m.mine.view.links.hostHash) return r;
  return -1;
}

// Each rank classifies its peers from its own GPU (DESIGN §5): the part of
// the report the topology model fills, and the view the ranks agree on.
// The team it classifies: NCCL's LSA team, else every rank when all share
// one host (what cuda-ipc could map), else itself.
void describeLinks(Member* m) {
  ncclDcpTopology_t& t = m->ctx->topology;
  const DevCommOutcome& d = m->mine.devComm;
  t.nRanks = m->nRanks;
  t.rank = m->rank;
  int first = m->rank;
  t.lsaSize = 1;
  if (d.created) {
    first = m->rank - d.lsaRank;
    t.lsaSize = d.lsaSize;
  } else if (firstOnAnotherHost(*m) < 0) {
    first = 0;
    t.lsaSize = m->nRanks;
  }
  for (int r = 0; r < m->nRanks && r < NCCL_DCP_MAX_RANKS; r++)
    memcpy(t.busId[r], m->all[r].view.busId, sizeof(t.busId[r]));
  std::string why;
  describePeers(systemTopology(&why), why.c_str(), first, &t);
  m->mine.view.links = linkViewOf(t, m->mine.view.links.hostHash);
}

// Whether this rank can map every peer's memory with CUDA IPC: one host,
// and P2P from its GPU to every peer's (each rank checks its direction,
// so the records hold both). A peer's GPU this process cannot see
// (CUDA_VISIBLE_DEVICES) is accepted when the topology proves NVLink.
IpcOutcome ipcOutcome(const Member& m) {
  const ncclDcpTopology_t& t = m.ctx->topology;
  if (const int other = firstOnAnotherHost(m); other >= 0) return {(int32_t)IpcBlock::OtherHost, other};
  for (int r = 0; r < m.nRanks; r++) {
    if (r == m.rank) continue;
    int peerDev = -1, canAccess = 0;
    if (cudaDeviceGetByPCIBusId(&peerDev, m.all[r].view.busId) != cudaSuccess) {
      cudaGetLastError();
      if (t.link[r] != ncclDcpLinkNvlink) return {(int32_t)IpcBlock::NotVisible, r};
      continue;
    }
    const cudaError_t e = cudaDeviceCanAccessPeer(&canAccess, m.dev, peerDev);
    if (e != cudaSuccess) cudaGetLastError();  // only ours: the application's pending error stays
    if (e != cudaSuccess || !canAccess) return {(int32_t)IpcBlock::NoP2p, r};
  }
  return {(int32_t)IpcBlock::None, -1};
}

ncclResult_t stepDeviceCommunicators(Creation* c, const AppWindow* windows) {
  const ncclDcpProvider_t want = c->cfg.provider;
  if (want == ncclDcpProviderAuto || want == ncclDcpProviderNcclWindow) createDevComms(c);
  // The application's window is NCCL's: nothing for cuda-ipc to map.
  const bool ipcWanted = (want == ncclDcpProviderAuto || want == ncclDcpProviderCudaIpc) && windows == nullptr;
  for (Member& m : c->members) {
    describeLinks(&m);
    if (ipcWanted) m.mine.ipc = ipcOutcome(m);
    m.record(CreateStep::DeviceCommunicators, ncclSuccess);
  }
  return c->gather(CreateStep::DeviceCommunicators);
}

// ---- 4. Choose the path and the protocol policy from every rank's record.

// Ranks reachable by load/store on the chosen provider.
int lsaSizeOf(const Member& m, ncclDcpProvider_t provider) {
  if (provider == ncclDcpProviderCudaIpc) return m.nRanks;
  return m.mine.devComm.created ? m.mine.devComm.lsaSize : 1;
}

ncclResult_t choosePath(const Config& cfg, const Member& m) {
  Context* ctx = m.ctx;
  ncclDcpTopology_t& t = ctx->topology;
  std::string note;
  DCPCHECK(chooseProvider(cfg.provider, m.all.data(), m.nRanks, &ctx->provider, &note));
  const bool fused = ctx->provider != ncclDcpProviderFallback;
  ctx->path = fused ? ncclDcpPathFused : ncclDcpPathFallback;
  t.provider = ctx->provider;
  t.lsaSize = lsaSizeOf(m, ctx->provider);
  snprintf(t.pathNote, sizeof(t.pathNote), "%s", note.c_str());
  // Never silent: one WARN per context, from rank 0, at the default level.
  if (!note.empty() && m.rank == 0) WARN("%s", note.c_str());
  if (!note.empty() && m.rank != 0) INFO("rank %d: %s", m.rank, note.c_str());
  std::vector<LinkView> views(m.nRanks);
  for (int r = 0; r < m.nRanks; r++) views[r] = m.all[r].view.links;
  const LinkSummary links = agreeOnLinks(views.data(), fused, &t);
  CUDACHECK(cudaSetDevice(m.dev));
  DCPCHECK(ctx->engine.init(cfg, m.nRanks, m.rank, chooseProtocols(cfg.protocol, links, cfg.simpleMinRows)));
  t.path = ctx->path;
  t.protocol = (int)ctx->engine.policy.small;
  t.simpleMinRows = ctx->engine.policy.simpleForLarge ? ctx->engine.policy.simpleMinRows : 0;
  logTopology(t);
  return ncclSuccess;
}

ncclResult_t stepChoosePath(Creation* c) {
  for (Member& m : c->members) m.record(CreateStep::ChoosePath, choosePath(c->cfg, m));
  return c->gather(CreateStep::ChoosePath);
}

// ---- 5. Workspace: memory first, agreed before any rank registers it.

// cuda-ipc: plain device memory (IPC handles need cudaMalloc, DESIGN §12)
// and the handle the peers open.
ncclResult_t allocIpcWorkspace(Member& m, size_t bytes) {
  Context* ctx = m.ctx;
  static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(m.mine.ipcExport.handle), "handle fits the record");
  ctx->ownedKind = MemoryKind::Device;
  const cudaError_t e = cudaMalloc(&ctx->ownedMemory, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    ctx->ownedMemory = nullptr;
    return fail(ncclSystemError, "cudaMalloc of a %zu-byte workspace failed: %s: %s", bytes, cudaGetErrorString(e),
                workspaceShortfall(bytes, ctx->engine.cfg.maxBatch).c_str());
  }
  // From here its lifetime is the exported workspace's (ipc_lifetime.h).
  ctx->exported = exportWorkspace(ctx->ownedMemory, bytes, m.dev, m.rank);
  cudaIpcMemHandle_t handle;
  CUDACHECK(cudaIpcGetMemHandle(&handle, ctx->ownedMemory));
  memcpy(m.mine.ipcExport.handle, &handle, sizeof(handle));
  m.mine.ipcExport.address = (uint64_t)(uintptr_t)ctx->ownedMemory;
  m.mine.ipcExport.process = processIdentity();
  return ncclSuccess;
}

ncclResult_t allocWorkspace(Member& m, const AppWindow* w) {
  Context* ctx = m.ctx;
  CUDACHECK(cudaSetDevice(m.dev));
  if (ctx->path == ncclDcpPathFallback) return allocFallbackBuffers(ctx->engine.cfg, m.nRanks, &ctx->fallback);
  if (w) {
    ctx->window = w->window;
    ctx->windowOffset = w->offset;
    return ncclSuccess;
  }
  const size_t bytes = ctx->engine.layout.totalBytes;
  if (ctx->provider == ncclDcpProviderCudaIpc) return allocIpcWorkspace(m, bytes);
  if (ncclMemAlloc(&ctx->ownedMemory, bytes) != ncclSuccess)
    return fail(ncclSystemError, "ncclMemAlloc of a %zu-byte workspace failed: %s: %s", bytes,
                ncclGetLastError(m.comm), workspaceShortfall(bytes, ctx->engine.cfg.maxBatch).c_str());
  return ncclSuccess;
}

// One symmetric window of registerWindowGroup: the caller fills the request,
// the group sets rc (ncclSuccess with *window set, else *window null).
struct WindowRequest {
  ncclComm_t comm;
  void* base;
  size_t bytes;
  ncclWindow_t* window;
  int timeoutMs;
  ncclResult_t rc = ncclInternalError;
};

// Every request's window in one NCCL group, then each communicator settled.
// Collective: every rank reaches it, or none; one thread may drive them all.
void registerWindowGroup(std::vector<WindowRequest>& reqs) {
  const ncclResult_t start = ncclGroupStart();
  for (WindowRequest& q : reqs)
    q.rc = start != ncclSuccess ? start : ncclCommWindowRegister(q.comm, q.base, q.bytes, q.window, NCCL_WIN_DEFAULT);
  const ncclResult_t end = start == ncclSuccess ? ncclGroupEnd() : start;
  for (WindowRequest& q : reqs) {
    if (q.rc == ncclSuccess && end == ncclInProgress)
      q.rc = waitForComm(q.comm, "ncclCommWindowRegister", q.timeoutMs);
    else if (q.rc == ncclSuccess)
      q.rc = end;
    if (q.rc == ncclSuccess && *q.window == nullptr) q.rc = ncclSystemError;
    if (q.rc != ncclSuccess) *q.window = nullptr;
  }
}

// The workspaces of nccl-window contexts in memory of our own. Collective
// (the gather before it).
void registerWindows(Creation* c) {
  std::vector<Member*> owners;
  std::vector<WindowRequest> reqs;
  for (Member& m : c->members) {
    Context* ctx = m.ctx;
    if (!ctx->ownedMemory || ctx->provider != ncclDcpProviderNcclWindow) continue;
    owners.push_back(&m);
    reqs.push_back({ctx->comm, ctx->ownedMemory, ctx->engine.layout.totalBytes, &ctx->window, ctx->engine.cfg.timeoutMs});
  }
  if (reqs.empty()) return;
  registerWindowGroup(reqs);
  for (size_t i = 0; i < reqs.size(); i++) {
    Context* ctx = owners[i]->ctx;
    if (reqs[i].rc == ncclSuccess) {
      ctx->ownsWindow = true;
      continue;
    }
    owners[i]->record(CreateStep::MapPeers, fail(reqs[i].rc, "ncclCommWindowRegister of %zu bytes failed: %s",
                                                 ctx->engine.layout.totalBytes, ncclGetLastError(ctx->comm)));
  }
}

// Threads of one process share the address space: a peer's workspace is
// reached by peer access (enabled once per device pair, process-wide).
ncclResult_t enablePeerAccess(int dev, const char* peerBusId) {
  int peerDev = -1;
  CUDACHECK(cudaDeviceGetByPCIBusId(&peerDev, peerBusId));
  if (peerDev == dev) return ncclSuccess;
  const cudaError_t e = cudaDeviceEnablePeerAccess(peerDev, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
  else CUDACHECK(e);
  return ncclSuccess;
}

// cuda-ipc: every rank's workspace as this rank addresses it.
ncclResult_t openPeers(const Member& m) {
  Context* ctx = m.ctx;
  CUDACHECK(cudaSetDevice(m.dev));
  for (int r = 0; r < m.nRanks; r++) {
    const IpcExport& e = m.all[r].ipcExport;
    ctx->exports[r] = e;
    if (r == m.rank) {
      ctx->lsa[r] = (char*)ctx->ownedMemory;
    } else if (e.process == processIdentity()) {
      DCPCHECK(enablePeerAccess(m.dev, m.all[r].view.busId));
      // A use of it for as long as this context lives: its owner's destroy
      // or abort never frees it under this context's kernels.
      ctx->peerUse[r] = useExportedWorkspace((const void*)(uintptr_t)e.address);
      if (ctx->peerUse[r] == nullptr)
        return fail(ncclInternalError, "rank %d's workspace %#llx is not known to this process", r,
                    (unsigned long long)e.address);
      ctx->lsa[r] = (char*)(uintptr_t)e.address;
    } else {
      cudaIpcMemHandle_t handle;
      memcpy(&handle, e.handle, sizeof(handle));
      void* p = nullptr;
      const cudaError_t err = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
      if (err != cudaSuccess) {
        cudaGetLastError();
        return fail(ncclUnhandledCudaError, "cudaIpcOpenMemHandle of rank %d's workspace (GPU %.16s) failed: %s",
                    r, m.all[r].view.busId, cudaGetErrorString(err));
      }
      ctx->lsa[r] = (char*)p;
      ctx->ipcMapped[r] = true;
    }
  }
  return ncclSuccess;
}

ncclResult_t zeroWorkspace(const Member& m) {
  Context* ctx = m.ctx;
  CUDACHECK(cudaSetDevice(m.dev));
  if (ctx->provider == ncclDcpProviderCudaIpc) {
    CUDACHECK(cudaMemsetAsync(ctx->ownedMemory, 0, ctx->engine.layout.totalBytes, m.x.stream()));
    return ncclSuccess;
  }
  DCPCHECK(launchZeroWindow(ctx->window, ctx->windowOffset, ctx->engine.layout.totalBytes, m.x.stream()));
  return resolveLsaPointers(ctx->window, ctx->windowOffset, ctx->nRanks, ctx->lsa, m.x.stream());
}

ncclResult_t stepWorkspace(Creation* c, const AppWindow* windows) {
  for (size_t i = 0; i < c->members.size(); i++)
    c->members[i].record(CreateStep::Workspace, allocWorkspace(c->members[i], windows ? &windows[i] : nullptr));
  return c->gather(CreateStep::Workspace);
}

// ---- 6. Map peers: NCCL's window registration (collective: every rank
// reaches it, or none) or the peers' IPC handles, then the zeroing.

ncclResult_t stepMapPeers(Creation* c) {
  // From here a peer in another process may map a cuda-ipc workspace of
  // ours: freed only once they agreed they closed it (destroy, unwind).
  c->mapped = true;
  for (Member& m : c->members) {
    if (m.ctx->exported == nullptr) continue;
    for (int r = 0; r < m.nRanks; r++)
      if (m.all[r].ipcExport.process != processIdentity()) {
        markRemoteImporters(m.ctx->exported);
        break;
      }
  }
  registerWindows(c);
  for (Member& m : c->members) {
    if (m.failed()) continue;
    ncclResult_t r = ncclSuccess;
    if (m.ctx->provider == ncclDcpProviderCudaIpc) r = openPeers(m);
    if (r == ncclSuccess && m.ctx->path == ncclDcpPathFused) r = zeroWorkspace(m);
    m.record(CreateStep::MapPeers, r);
  }
  return ncclSuccess;  // agreed by the ready step's gather
}

// ---- 7. Ready: every rank's workspace is zero before any peer's first
// call can write into it.

ncclResult_t stepReady(Creation* c) {
  for (Member& m : c->members) {
    if (m.failed()) continue;
    cudaSetDevice(m.dev);
    const cudaError_t e = cudaStreamSynchronize(m.x.stream());
    m.record(CreateStep::Ready, e == cudaSuccess ? ncclSuccess
                                                 : fail(ncclUnhandledCudaError, "zeroing the workspace failed: %s",
                                                        cudaGetErrorString(e)));
  }
  return c->gather(CreateStep::Ready);
}

void handOver(Creation* c, Context** out) {
  const Config& cfg = c->cfg;
  for (size_t i = 0; i < c->members.size(); i++) {
    Context* ctx = c->members[i].ctx;
    const bool fused = ctx->path == ncclDcpPathFused;
    INFO("rank %d/%d: context ready: %s path (%s), protocol %s%s, workspace %zu bytes, D %d, Hl %d, %s, maxBatch %d",
         ctx->rank, ctx->nRanks, fused ? "fused" : "fallback", providerName(ctx->provider),
         protocolName((int)ctx->engine.policy.small),
         ctx->engine.policy.simpleForLarge ? " (+SIMPLE for large rounds)" : "",
         fused ? ctx->engine.layout.totalBytes : 0, cfg.headDim, cfg.localHeads, dtypeName(cfg.dtype), cfg.maxBatch);
    out[i] = ctx;
    c->members[i].ctx = nullptr;
  }
}

ncclResult_t checkCommunicators(int nComms, const ncclComm_t* comms) {
  // Without a communicator there is nobody to tell: refused here, alone.
  if (nComms < 1) return fail(ncclInvalidArgument, "nComms %d is not positive", nComms);
  if (comms == nullptr) return fail(ncclInvalidArgument, "comms is NULL");
  for (int i = 0; i < nComms; i++)
    if (comms[i] == nullptr) return fail(ncclInvalidArgument, "comm %d is NULL", i);
  return ncclSuccess;
}

// ---- Abort: the context's waits stop, its kernels leave (bounded). Only
// our own memory has a host-known address: kernels in an application's
// window stop at their own timeout.
uint32_t* statusWordOf(Context* ctx) {
  if (ctx->path != ncclDcpPathFused || ctx->ownedMemory == nullptr) return nullptr;
  return (uint32_t*)((char*)ctx->ownedMemory + offsetof(Control, status));
}

}  // namespace

ncclResult_t createContexts(int nComms, const ncclComm_t* comms, const ncclDcpConfig_t* cfg,
                            const AppWindow* appWindows, Context** out) {
  DCPCHECK(checkCommunicators(nComms, comms));
  if (out)
    for (int i = 0; i < nComms; i++) out[i] = nullptr;
  ncclResult_t res = ncclSuccess;
  DeviceGuard guard;
  Creation c;
  DCPCHECKGOTO(c.open(nComms, comms), res, fail);
  DCPCHECKGOTO(stepArguments(&c, cfg, appWindows, out), res, fail);
  DCPCHECKGOTO(stepAgree(&c), res, fail);
  DCPCHECKGOTO(stepDeviceCommunicators(&c, appWindows), res, fail);
  DCPCHECKGOTO(stepChoosePath(&c), res, fail);
  DCPCHECKGOTO(stepWorkspace(&c, appWindows), res, fail);
  DCPCHECKGOTO(stepMapPeers(&c), res, fail);
  DCPCHECKGOTO(stepReady(&c), res, fail);
  handOver(&c, out);
exit:
  c.close();
  return res;
fail : {
  const std::string message = lastError();
  c.releaseContexts();
  restoreLastError(message.c_str());
  goto exit;
}
}

namespace {

// One context's exchange, opened and posted, for gatherRecords.
struct PostedGather {
  Context* ctx;
  Exchange* x;
  void* records;  // nRanks records, collected
};

// The all-gathers of posted exchanges, one per context, in one NCCL group
// (one thread may drive every rank), then each collected into its records,
// bounded by its context's timeoutMs. results[i], messages[i]: gather i's
// outcome and, on a failure, its message. `gather` and `collected` name
// them in messages. Returns the enqueue's failure, if any (then every
// result).
ncclResult_t gatherRecords(const std::vector<PostedGather>& gathers, const char* gather, const char* collected,
                           std::vector<ncclResult_t>* results, std::vector<std::string>* messages) {
  const ncclResult_t start = ncclGroupStart();
  ncclResult_t enqueued = ncclSuccess;
  for (const PostedGather& g : gathers)
    if (start == ncclSuccess && enqueued == ncclSuccess) enqueued = g.x->allGather();
  const ncclResult_t end = start == ncclSuccess ? ncclGroupEnd() : start;
  results->assign(gathers.size(), enqueued);
  messages->assign(gathers.size(), enqueued != ncclSuccess ? lastError() : "");
  for (size_t i = 0; i < gathers.size() && enqueued == ncclSuccess; i++) {
    Context* ctx = gathers[i].ctx;
    cudaSetDevice(ctx->cudaDev);
    ncclResult_t r = settle(ctx->comm, end, gather, ctx->engine.cfg.timeoutMs);
    bool noneArrived = false;
    const int timeoutMs = ctx->engine.cfg.timeoutMs > 0 ? ctx->engine.cfg.timeoutMs : -1;
    if (r == ncclSuccess) r = gathers[i].x->collect(gathers[i].records, collected, timeoutMs, &noneArrived);
    (*results)[i] = r;
    if (r != ncclSuccess) (*messages)[i] = lastError();
  }
  return enqueued;
}

// Destroy's agreement for cuda-ipc contexts whose ranks span processes
// (exchange.h, ipc_lifetime.h): each closes its mappings of its peers'
// workspaces, says so in one all-gather per context (grouped: one thread
// may drive several), and each owner frees its own workspace only when
// every peer did, for this very context. Bounded by the context's
// timeoutMs (0: for ever): a peer that aborted instead, or died, leaves
// the workspace allocated for the process's life (a WARN) and an
// all-gather on the communicator that no peer may join.
ncclResult_t agreeOnDestroy(const std::vector<Context*>& ctxs, const std::vector<bool>& idle) {
  struct Side {
    Context* ctx;
    Exchange x;
    ReleaseRecord mine;
    std::vector<ReleaseRecord> all;
  };
  std::vector<std::unique_ptr<Side>> sides;
  FirstError first;
  for (size_t i = 0; i < ctxs.size(); i++) {
    Context* ctx = ctxs[i];
    std::unique_ptr<Side> s(new Side{ctx, {}, {}, std::vector<ReleaseRecord>(ctx->nRanks)});
    const bool closed = closeImports(ctx) && idle[i];
    s->mine = {closed ? 1 : 0, 0, ctx->exports[ctx->rank].address, ctx->exports[ctx->rank].process};
    const ncclResult_t opened =
        s->x.open(ctx->comm, ctx->rank, ctx->nRanks, ctx->cudaDev, sizeof(ReleaseRecord), "destroy's exchange");
    if (!s->x.usable()) {  // its peers time out: they keep their memory, so does it
      first.keep(opened);
      continue;
    }
    if (opened != ncclSuccess) WARN("rank %d: %s (the exchange goes on without it)", ctx->rank, lastError());
    // A failed copy shows in every rank's collect: its record is missing.
    if (s->x.post(&s->mine) != ncclSuccess) WARN("rank %d: destroy: %s", ctx->rank, lastError());
    sides.push_back(std::move(s));
  }
  std::vector<PostedGather> gathers;
  for (auto& s : sides) gathers.push_back({s->ctx, &s->x, s->all.data()});
  std::vector<ncclResult_t> results;
  std::vector<std::string> messages;
  first.keep(gatherRecords(gathers, "destroy's all-gather", "destroy of a cuda-ipc context", &results, &messages));
  for (size_t i = 0; i < sides.size(); i++) {
    Context* ctx = sides[i]->ctx;
    const ncclResult_t r = results[i];
    std::string why;
    if (r == ncclSuccess && everyPeerClosed(sides[i]->all.data(), ctx->exports, ctx->nRanks, &why)) {
      remoteClosed(ctx->exported);
      continue;
    }
    if (r == ncclSuccess) {
      WARN("rank %d: destroy: %s: its workspace is not freed", ctx->rank, why.c_str());
      continue;
    }
    first.keep(fail(r, "%s; its cuda-ipc workspace stays allocated for the process's life%s", messages[i].c_str(),
                    r == ncclRemoteError ? ", and the communicator holds an all-gather no peer may join: abort it "
                                           "(ncclCommAbort)"
                                         : ""));
  }
  return first.result();
}

}  // namespace

ncclResult_t destroyContexts(int n, Context* const* ctxs) {
  DeviceGuard guard;
  ncclResult_t res = ncclSuccess;
  std::vector<Context*> remote;
  std::vector<bool> idle;
  for (int i = 0; i < n; i++) {
    if (ctxs[i] == nullptr) continue;
    flushDeferredFrees(ctxs[i]->cudaDev);
    // Calls in flight still use the workspace. The whole device, not the
    // bound stream: the application may have destroyed that one already.
    cudaSetDevice(ctxs[i]->cudaDev);
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess && res == ncclSuccess)
      res = fail(ncclUnhandledCudaError, "cudaDeviceSynchronize before destroying a context failed: %s",
                 cudaGetErrorString(e));
    if (ctxs[i]->exported && hasRemoteImporters(ctxs[i]->exported)) {
      remote.push_back(ctxs[i]);
      idle.push_back(e == cudaSuccess);  // else its kernels may still write into peers' memory
    }
  }
  if (!remote.empty()) {
    const ncclResult_t r = agreeOnDestroy(remote, idle);
    if (res == ncclSuccess) res = r;
  }
  for (int i = 0; i < n; i++) {
    if (ctxs[i] == nullptr) continue;
    const ncclResult_t r = releaseContext(ctxs[i], FreeMode::Now);
    if (res == ncclSuccess) res = r;
  }
  return res;
}

void signalAbort(Context* ctx) {
  DeviceGuard guard;
  if (cudaSetDevice(ctx->cudaDev) != cudaSuccess) {
    cudaGetLastError();
    return;  // abortContext sends it again, and drains
  }
  ctx->engine.stop(statusWordOf(ctx));
}

ncclResult_t abortContext(Context* ctx) {
  DeviceGuard guard;
  cudaSetDevice(ctx->cudaDev);
  if (!ctx->engine.stopAndDrain(statusWordOf(ctx), kAbortDrainMs)) {
    WARN("rank %d: abort: the context's work did not finish within %d ms (an NCCL all-to-all, a kernel in an "
         "application's window, or work queued behind either); its device memory and window registration are "
         "left in place for ncclCommAbort and the process exit",
         ctx->rank, kAbortDrainMs);
    delete ctx;  // host state only: the error record, too, may still be written
    return ncclSuccess;
  }
  // cudaFree and cudaFreeHost would wait for every kernel on the device,
  // NCCL's stuck ones included: the memory goes at the next create/destroy.
  return releaseContext(ctx, FreeMode::Deferred);
}

namespace {

// The fallback path waits inside NCCL: its failures are the communicator's,
// recorded in the engine's error record like a timed-out wait.
void noteCommError(Context* ctx) {
  ncclResult_t commError = ncclSuccess;
  if (ctx->path == ncclDcpPathFallback && ncclCommGetAsyncError(ctx->comm, &commError) == ncclSuccess &&
      commError != ncclSuccess && commError != ncclInProgress)
    ctx->engine.poison(commError, -1);
}

}  // namespace

ncclResult_t contextAsyncError(Context* ctx) {
  noteCommError(ctx);
  return ctx->engine.asyncError();
}

namespace {

// Why calls of ctx cannot write its peers' outputs directly (NULL: they can).
const char* whyOutputsStage(const Context* ctx) {
  if (ctx->path == ncclDcpPathFallback) return "the fallback path exchanges through NCCL's own buffers";
  if (!noneRelays(ctx->engine.cfg, ctx->nRanks)) return "only NONE in two phases writes its peers' outputs";
  if (ctx->provider != ncclDcpProviderNcclWindow) return "the cuda-ipc provider does not map outputs yet";
  return nullptr;
}

// This rank's record, and why it is not ok.
OutputRecord outputRecordOf(int rank, const RegisteredOutput& reg, std::string* why) {
  OutputRecord rec = {1, reg.outLse.bytes > 0, reg.out.bytes, reg.outLse.bytes, 0, 0};
  const OutputRange* ranges[2] = {&reg.out, &reg.outLse};
  uint64_t* offsets[2] = {&rec.outOffset, &rec.lseOffset};
  for (int k = 0; k < 2 && rec.ok; k++) {
    if (ranges[k]->bytes == 0) continue;
    const char* name = k == 0 ? "out" : "outLse";
    size_t at = 0;
    std::string driver;
    if (!allocationOffset(ranges[k]->base, &at, &driver)) {
      rec.ok = 0;
      *why = "rank " + std::to_string(rank) + ": " + name + ": " + driver;
    } else if (at % NCCL_WIN_REQUIRED_ALIGNMENT != 0) {
      rec.ok = 0;
      *why = "rank " + std::to_string(rank) + ": " + name + " is " + std::to_string(at) +
             " bytes into its allocation: an NCCL window starts at a multiple of " +
             std::to_string(NCCL_WIN_REQUIRED_ALIGNMENT);
    }
    *offsets[k] = at;
  }
  return rec;
}

// The records of every context that maps its peers' outputs, all-gathered
// (one NCCL group: one thread may drive every rank) and checked: every
// rank refuses together, so none is left in a window registration its
// peers never join. A rank whose own ranges fail says why.
ncclResult_t agreeOnOutputs(int n, Context* const* ctxs, RegisteredOutput* const* regs) {
  struct Side {
    Context* ctx;
    Exchange x;
    OutputRecord mine;
    std::string why;
    std::vector<OutputRecord> all;
  };
  std::vector<std::unique_ptr<Side>> sides;
  FirstError first;
  for (int i = 0; i < n; i++) {
    if (!regs[i]->direct) continue;
    Context* ctx = ctxs[i];
    std::unique_ptr<Side> s(new Side{ctx, {}, {}, "", std::vector<OutputRecord>(ctx->nRanks)});
    s->mine = outputRecordOf(ctx->rank, *regs[i], &s->why);
    const ncclResult_t opened = s->x.open(ctx->comm, ctx->rank, ctx->nRanks, ctx->cudaDev, sizeof(OutputRecord),
                                          "registration's exchange");
    if (!s->x.usable()) {  // its peers time out in theirs
      first.keep(opened);
      continue;
    }
    if (s->x.post(&s->mine) != ncclSuccess) WARN("rank %d: registration: %s", ctx->rank, lastError());
    sides.push_back(std::move(s));
  }
  std::vector<PostedGather> gathers;
  for (auto& s : sides) gathers.push_back({s->ctx, &s->x, s->all.data()});
  std::vector<ncclResult_t> results;
  std::vector<std::string> messages;
  first.keep(gatherRecords(gathers, "the registration's all-gather", "an output registration", &results, &messages));
  for (size_t i = 0; i < sides.size(); i++) {
    const Side& s = *sides[i];
    std::string why;
    if (results[i] != ncclSuccess) first.keep(fail(results[i], "%s", messages[i].c_str()));
    else if (!s.mine.ok) first.keep(fail(ncclInvalidArgument, "%s", s.why.c_str()));
    else if (!outputRecordsAgree(s.all.data(), s.ctx->nRanks, s.ctx->rank, &why))
      first.keep(fail(ncclInvalidArgument, "%s", why.c_str()));
  }
  return first.result();
}

// Every context's out and outLse that map their peers' as symmetric
// windows, in one NCCL group (collective; one thread may drive every
// rank). Returns the first failure, NCCL's message with it.
ncclResult_t registerOutputWindows(int n, Context* const* ctxs, RegisteredOutput* const* regs) {
  std::vector<WindowRequest> reqs;
  std::vector<std::pair<int, const char*>> whose;  // (context, "out" or "outLse") of each request
  for (int i = 0; i < n; i++) {
    if (!regs[i]->direct) continue;
    RegisteredOutput* reg = regs[i];
    const struct {
      const OutputRange* range;
      ncclWindow_t* window;
      const char* name;
    } halves[] = {{&reg->out, &reg->outWindow, "out"}, {&reg->outLse, &reg->lseWindow, "outLse"}};
    for (const auto& h : halves) {
      if (h.range->bytes == 0) continue;
      reqs.push_back({ctxs[i]->comm, h.range->base, h.range->bytes, h.window, ctxs[i]->engine.cfg.timeoutMs});
      whose.emplace_back(i, h.name);
    }
  }
  registerWindowGroup(reqs);
  FirstError first;
  for (size_t j = 0; j < reqs.size(); j++)
    if (reqs[j].rc != ncclSuccess)
      first.keep(fail(reqs[j].rc,
                      "rank %d: ncclCommWindowRegister of %s (%zu bytes at %p) failed: %s (NCCL maps ncclMemAlloc "
                      "memory for its peers)",
                      ctxs[whose[j].first]->rank, whose[j].second, reqs[j].bytes, reqs[j].base,
                      ncclGetLastError(reqs[j].comm)));
  return first.result();
}

// Every rank's out and outLse as this rank addresses them, into a device
// table the kernels read (DirectOutputs).
ncclResult_t resolveOutputBases(Context* ctx, RegisteredOutput* reg) {
  char* out[NCCL_DCP_MAX_RANKS] = {};
  char* lse[NCCL_DCP_MAX_RANKS] = {};
  cudaStream_t s;
  CUDACHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclResult_t r = resolveLsaPointers(reg->outWindow, 0, ctx->nRanks, out, s);
  if (r == ncclSuccess && reg->lseWindow) r = resolveLsaPointers(reg->lseWindow, 0, ctx->nRanks, lse, s);
  cudaStreamDestroy(s);
  DCPCHECK(r);
  PeerOutput table[NCCL_DCP_MAX_RANKS];
  for (int q = 0; q < ctx->nRanks; q++) table[q] = {out[q], (float*)lse[q]};
  const size_t bytes = sizeof(PeerOutput) * ctx->nRanks;
  CUDACHECK(cudaMalloc(&reg->bases, bytes));
  CUDACHECK(cudaMemcpy(reg->bases, table, bytes, cudaMemcpyHostToDevice));
  return ncclSuccess;
}

// The registration a call's outputs lie in, as its DirectCall (NULL: it
// stages). The newest registration that holds them wins.
const DirectCall* directCallIn(const Context* ctx, const CallBuffers& buf, int batch, const CallPlan& plan,
                               DirectCall* call) {
  for (auto it = ctx->outputs.rbegin(); it != ctx->outputs.rend(); ++it)
    if (directCallOf(ctx->engine.cfg, ctx->nRanks, **it, buf, batch, plan.strides, call)) return call;
  return nullptr;
}

}  // namespace

ncclResult_t registerOutputs(int n, Context* const* ctxs, const OutputRange* outs, const OutputRange* outLses,
                             RegisteredOutput** handles) {
  DeviceGuard guard;
  std::vector<RegisteredOutput*> regs(n);
  for (int i = 0; i < n; i++) {
    regs[i] = new RegisteredOutput();
    regs[i]->out = outs[i];
    regs[i]->outLse = outLses[i];
    regs[i]->serial = ++ctxs[i]->registrations;
    const char* why = whyOutputsStage(ctxs[i]);
    regs[i]->direct = why == nullptr;
    if (why) INFO("rank %d: registered output [%p, +%zu): calls stage (%s)", ctxs[i]->rank, (void*)outs[i].base,
                  outs[i].bytes, why);
  }
  ncclResult_t r = agreeOnOutputs(n, ctxs, regs.data());
  if (r == ncclSuccess) r = registerOutputWindows(n, ctxs, regs.data());
  for (int i = 0; r == ncclSuccess && i < n; i++) {
    if (!regs[i]->direct) continue;
    r = cudaSetDevice(ctxs[i]->cudaDev) == cudaSuccess
            ? resolveOutputBases(ctxs[i], regs[i])
            : fail(ncclUnhandledCudaError, "cudaSetDevice(%d) failed", ctxs[i]->cudaDev);
    if (r == ncclSuccess)
      INFO("rank %d: registered output [%p, +%zu), outLse [%p, +%zu): NONE's phase 2 writes the peers' directly",
           ctxs[i]->rank, (void*)outs[i].base, outs[i].bytes, (void*)outLses[i].base, outLses[i].bytes);
  }
  if (r != ncclSuccess) {  // nothing registered: every window made is deregistered (local)
    const std::string message = lastError();
    ncclResult_t ignored = ncclSuccess;
    for (int i = 0; i < n; i++) {
      cudaSetDevice(ctxs[i]->cudaDev);
      releaseOutput(ctxs[i], regs[i], FreeMode::Now, &ignored);
    }
    restoreLastError(message.c_str());
    return r;
  }
  for (int i = 0; i < n; i++) {
    ctxs[i]->outputs.push_back(regs[i]);
    handles[i] = regs[i];
  }
  return ncclSuccess;
}

ncclResult_t deregisterOutput(Context* ctx, RegisteredOutput* reg) {
  auto it = std::find(ctx->outputs.begin(), ctx->outputs.end(), reg);
  if (it == ctx->outputs.end())
    return fail(ncclInvalidArgument, "handle %p is not registered on ctx (deregistered already, or another context's)",
                (void*)reg);
  DeviceGuard guard;
  CUDACHECK(cudaSetDevice(ctx->cudaDev));
  // Once this rank's last call is done no owner writes its outputs any more.
  if (ctx->engine.order.hasLast) CUDACHECK(cudaEventSynchronize(ctx->engine.order.done));
  ctx->outputs.erase(it);
  ncclResult_t res = ncclSuccess;
  releaseOutput(ctx, reg, FreeMode::Now, &res);
  return res;
}

ncclResult_t contextEnqueue(Context* ctx, const CallBuffers& buf, int batch, const CallPlan& plan,
                            cudaStream_t stream) {
  DeviceGuard guard;
  CUDACHECK(cudaSetDevice(ctx->cudaDev));
  noteCommError(ctx);  // run() reports it
  if (ctx->path == ncclDcpPathFallback) {
    const auto fallback = [&](bool poisoned) {
      return enqueueFallback(ctx->engine, ctx->fallback, ctx->comm, buf, batch, plan, stream, poisoned);
    };
    DCPCHECK(ctx->engine.run(stream, [&] { return fallback(false); }, [&] { return fallback(true); }));
  } else {
    DCPCHECK(ctx->engine.run(&buf, 1, batch, plan, stream, [&] {
      Addressing addr = {};
      addr.loopback = false;
      addr.lsa = ctx->lsa;
      DirectCall direct;
      const DirectCall* d = directCallIn(ctx, buf, batch, plan, &direct);
      if (d) ctx->stats.directCalls++;
      return ctx->engine.enqueueFused(&buf, batch, plan, addr, stream, -1, d);
    }));
  }
  profilerRecordCall(ctx, batch);
  return ncclSuccess;
}

namespace {

// The rounds of a group's fallback calls, every context's in the same NCCL
// groups. A poisoned context writes NaN over its outputs and, unless its
// communicator failed, still takes part in the exchange with the poisoned
// pattern (its peers would wait in NCCL for ever). The poisoned contexts'
// errors go to *poisoned; a failure to enqueue is returned.
ncclResult_t exchangeFallbackGroup(const std::vector<const GroupedCall*>& calls, FirstError* poisoned) {
  std::vector<std::pair<const GroupedCall*, bool>> sending;  // (call, poisoned)
  int rounds = 0;
  for (const GroupedCall* g : calls) {
    CUDACHECK(cudaSetDevice(g->ctx->cudaDev));
    const ncclResult_t e = contextAsyncError(g->ctx);
    if (e != ncclSuccess) {
      poisoned->keep(e);
      DCPCHECK(g->ctx->engine.enqueuePoison(&g->buf, 1, g->batch, g->plan, g->stream));
      if (!g->ctx->engine.exchangesWhilePoisoned(g->ctx->comm)) continue;
    }
    sending.push_back({g, e != ncclSuccess});
    rounds = std::max(rounds, (g->batch + g->ctx->engine.cfg.maxBatch - 1) / g->ctx->engine.cfg.maxBatch);
  }
  for (int r = 0; r < rounds; r++) {
    std::vector<FallbackRound> rs;
    for (const auto& [g, sick] : sending) {
      const int maxBatch = g->ctx->engine.cfg.maxBatch, row0 = r * maxBatch;
      if (row0 < g->batch)
        rs.push_back({&g->ctx->engine, &g->ctx->fallback, g->ctx->comm, &g->buf, &g->plan, g->stream, row0,
                      std::min(maxBatch, g->batch - row0), sick});
    }
    for (const FallbackRound& f : rs) {
      CUDACHECK(cudaSetDevice(f.engine->cudaDev));
      DCPCHECK(f.pack());
    }
    NCCLCHECK(ncclGroupStart());
    ncclResult_t exchanged = ncclSuccess;
    for (const FallbackRound& f : rs)
      if (exchanged == ncclSuccess) exchanged = f.exchange();
    const ncclResult_t end = ncclGroupEnd();
    DCPCHECK(exchanged);
    for (const FallbackRound& f : rs)
      DCPCHECK(settle(f.comm, end, "the fallback's exchange (grouped)", f.engine->cfg.timeoutMs));
    for (const FallbackRound& f : rs) {
      CUDACHECK(cudaSetDevice(f.engine->cudaDev));
      DCPCHECK(f.combine());
    }
  }
  return ncclSuccess;
}

// The fallback calls of a group, each ordered after its context's last call
// and before its next whatever fails in between: a call left unordered
// would let a later call on another stream reuse its buffers early.
ncclResult_t enqueueFallbackGroup(const std::vector<const GroupedCall*>& calls) {
  std::vector<CallOrder::Call> order(calls.size());
  FirstError first, poisoned;
  size_t ordered = 0;
  for (; ordered < calls.size(); ordered++) {
    const GroupedCall& g = *calls[ordered];
    ncclResult_t r = ncclSuccess;
    if (cudaSetDevice(g.ctx->cudaDev) != cudaSuccess) {
      cudaGetLastError();
      r = fail(ncclUnhandledCudaError, "cudaSetDevice(%d) failed", g.ctx->cudaDev);
    }
    if (r == ncclSuccess) r = g.ctx->engine.order.before(g.stream, &order[ordered]);
    if (r != ncclSuccess) {
      first.keep(r);
      break;
    }
  }
  const ncclResult_t enqueued = first.failed() ? ncclSuccess : exchangeFallbackGroup(calls, &poisoned);
  first.keep(enqueued);
  for (size_t i = 0; i < ordered; i++) {
    const GroupedCall& g = *calls[i];
    cudaSetDevice(g.ctx->cudaDev);
    first.keep(g.ctx->engine.order.after(g.stream, order[i]));
    if (!first.failed()) profilerRecordCall(g.ctx, g.batch);
  }
  if (!first.failed()) return poisoned.result();
  return first.result();
}

}  // namespace

// Every call is enqueued even after one fails (a poisoned context's call
// writes NaN and returns its error): a call left out would leave the
// group's calls on its peers' contexts waiting for it until their timeout.
// The first error is returned, with its message.
ncclResult_t contextEnqueueGroup(const std::vector<GroupedCall>& calls) {
  DeviceGuard guard;
  FirstError first;
  std::vector<const GroupedCall*> fallback;
  for (const GroupedCall& g : calls) {
    if (g.ctx->path == ncclDcpPathFallback) fallback.push_back(&g);
    else first.keep(contextEnqueue(g.ctx, g.buf, g.batch, g.plan, g.stream));
  }
  if (!fallback.empty()) first.keep(enqueueFallbackGroup(fallback));
  return first.result();
}

}  // namespace nccl_dcp
