/*************************************************************************
 * Context create / call / destroy on the user's communicator.
 *
 * create (collective, grouped over the communicators this thread drives):
 *   1. check the arguments and the runtime NCCL version
 *   2. all-gather what the ranks must agree on (config, NCCL version, bus
 *      id) over the communicator itself; any mismatch fails every rank the
 *      same way, before anything is allocated
 *   3. ncclDevCommCreate; the fused path needs every rank in its LSA team;
 *      the ranks agree on the path with a second all-gather
 *   4. fused: ncclMemAlloc + ncclCommWindowRegister (or the application's
 *      window), zero the workspace; fallback: ncclAlltoAll buffers
 *   5. a last all-gather: every rank's workspace is zero before any peer's
 *      first call can write into it
 ************************************************************************/
#include "context.h"

#include <string.h>

#include <string>
#include <vector>

#include "error.h"
#include "log.h"
#include "nccl_compat.h"

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

// What every rank must agree on.
struct Agreement {
  int32_t libVersion, ncclVersion;
  int32_t headDim, localHeads, dtype, lseBase, maxBatch, protocol, timeoutMs;
  int32_t forceFallback, inWindow;
  uint64_t windowOffset;
  char busId[16];
};

struct Field {
  const char* name;
  int64_t (*get)(const Agreement&);
};

const Field kAgreedFields[] = {
    {"nccl-dcp version", [](const Agreement& a) -> int64_t { return a.libVersion; }},
    {"NCCL version", [](const Agreement& a) -> int64_t { return a.ncclVersion; }},
    {"config->headDim", [](const Agreement& a) -> int64_t { return a.headDim; }},
    {"config->localHeads", [](const Agreement& a) -> int64_t { return a.localHeads; }},
    {"config->dtype", [](const Agreement& a) -> int64_t { return a.dtype; }},
    {"config->lseBase", [](const Agreement& a) -> int64_t { return a.lseBase; }},
    {"config->maxBatch", [](const Agreement& a) -> int64_t { return a.maxBatch; }},
    {"config->protocol", [](const Agreement& a) -> int64_t { return a.protocol; }},
    {"config->timeoutMs", [](const Agreement& a) -> int64_t { return a.timeoutMs; }},
    {"NCCL_DCP_FORCE_FALLBACK", [](const Agreement& a) -> int64_t { return a.forceFallback; }},
    {"window (own vs. application's)", [](const Agreement& a) -> int64_t { return a.inWindow; }},
    {"window offset", [](const Agreement& a) -> int64_t { return (int64_t)a.windowOffset; }},
};

// Same scan on every rank over the same gathered records: the same error.
ncclResult_t checkAgreement(const Agreement* all, int nRanks) {
  for (const Field& f : kAgreedFields)
    for (int r = 1; r < nRanks; r++)
      if (f.get(all[r]) != f.get(all[0]))
        return fail(ncclInvalidUsage,
                    "ranks disagree on %s: %lld on rank 0 but %lld on rank %d (every rank must "
                    "create the context with the same settings)",
                    f.name, (long long)f.get(all[0]), (long long)f.get(all[r]), r);
  for (int r = 0; r < nRanks; r++)
    for (int q = r + 1; q < nRanks; q++)
      if (strncmp(all[r].busId, all[q].busId, sizeof(all[r].busId)) == 0)
        return fail(ncclInvalidUsage, "ranks %d and %d use the same GPU %s", r, q, all[r].busId);
  return ncclSuccess;
}

// The communicators this thread drives during create, with a scratch
// stream and exchange buffers each.
struct Members {
  int n = 0;
  std::vector<ncclComm_t> comms;
  std::vector<int> ranks, nRanks, devs;
  std::vector<cudaStream_t> streams;
  std::vector<void*> scratch;  // device: nRanks * kScratchBytes
  static constexpr size_t kScratchBytes = 256;

  ~Members() {
    for (int i = 0; i < n; i++) {
      cudaSetDevice(devs[i]);
      if (streams[i]) cudaStreamDestroy(streams[i]);
      if (scratch[i]) cudaFree(scratch[i]);
    }
  }

  ncclResult_t init(int count, const ncclComm_t* c) {
    comms.assign(c, c + count);
    ranks.resize(count);
    nRanks.resize(count);
    devs.resize(count);
    streams.assign(count, nullptr);
    scratch.assign(count, nullptr);
    for (int i = 0; i < count; i++) {
      NCCLCHECK(ncclCommUserRank(comms[i], &ranks[i]));
      NCCLCHECK(ncclCommCount(comms[i], &nRanks[i]));
      NCCLCHECK(ncclCommCuDevice(comms[i], &devs[i]));
      DCPCHECK(checkRanks(nRanks[i]));
      n = i + 1;
      CUDACHECK(cudaSetDevice(devs[i]));
      CUDACHECK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
      CUDACHECK(cudaMalloc(&scratch[i], (size_t)nRanks[i] * kScratchBytes));
    }
    return ncclSuccess;
  }

  ncclResult_t syncAll() {
    for (int i = 0; i < n; i++) {
      CUDACHECK(cudaSetDevice(devs[i]));
      CUDACHECK(cudaStreamSynchronize(streams[i]));
    }
    return ncclSuccess;
  }

  // All-gathers `bytes` (<= kScratchBytes) from each member's send through
  // NCCL itself; recv[i] receives nRanks[i] * bytes.
  ncclResult_t allGather(const void* const* send, void* const* recv, size_t bytes) {
    for (int i = 0; i < n; i++) {
      CUDACHECK(cudaSetDevice(devs[i]));
      char* mine = (char*)scratch[i] + (size_t)ranks[i] * bytes;
      CUDACHECK(cudaMemcpyAsync(mine, send[i], bytes, cudaMemcpyHostToDevice, streams[i]));
    }
    NCCLCHECK(ncclGroupStart());
    for (int i = 0; i < n; i++) {
      char* mine = (char*)scratch[i] + (size_t)ranks[i] * bytes;
      ncclResult_t r = ncclAllGather(mine, scratch[i], bytes, ncclUint8, comms[i], streams[i]);
      if (r != ncclSuccess) {
        ncclGroupEnd();
        NCCLCHECK(r);
      }
    }
    NCCLCHECK(ncclGroupEnd());
    for (int i = 0; i < n; i++) {
      CUDACHECK(cudaSetDevice(devs[i]));
      CUDACHECK(cudaMemcpyAsync(recv[i], scratch[i], (size_t)nRanks[i] * bytes, cudaMemcpyDeviceToHost,
                                streams[i]));
    }
    return syncAll();
  }
};

Agreement agreementOf(const Config& c, int ncclVersion, int dev, const AppWindow* w) {
  Agreement a;
  memset(&a, 0, sizeof(a));
  a.libVersion = NCCL_DCP_VERSION_CODE;
  a.ncclVersion = ncclVersion;
  a.headDim = c.headDim;
  a.localHeads = c.localHeads;
  a.dtype = c.dtype;
  a.lseBase = (int)c.lseBase;
  a.maxBatch = c.maxBatch;
  a.protocol = c.protocol;
  a.timeoutMs = c.timeoutMs;
  a.forceFallback = env().forceFallback;
  a.inWindow = w != nullptr;
  a.windowOffset = w ? w->offset : 0;
  cudaDeviceGetPCIBusId(a.busId, sizeof(a.busId), dev);
  return a;
}

void fillTopology(ncclDcpContext_t ctx, const Agreement* all, int lsaSize, int lsaRank) {
  ncclDcpTopology_t& t = ctx->topology;
  t.nRanks = ctx->nRanks;
  t.rank = ctx->rank;
  t.lsaSize = lsaSize;
  t.path = ctx->path;
  t.protocol = (int)ctx->engine.policy.small;
  t.classified = 0;  // the hwloc model (DESIGN §5) is not built yet
  const int lsaFirst = ctx->rank - lsaRank;
  for (int r = 0; r < ctx->nRanks && r < NCCL_DCP_MAX_RANKS; r++) {
    const bool inTeam = r >= lsaFirst && r < lsaFirst + lsaSize;
    t.link[r] = r == ctx->rank ? ncclDcpLinkSelf : inTeam ? ncclDcpLinkUnknown : ncclDcpLinkNetwork;
    t.nvlinkGBps[r] = 0.f;
    memcpy(t.busId[r], all[r].busId, sizeof(t.busId[r]));
  }
}

ncclResult_t allocFallbackBuffers(ncclDcpContext_t ctx) {
  const Config& c = ctx->engine.cfg;
  const size_t units = (size_t)ctx->nRanks * c.maxBatch * c.localHeads;
  CUDACHECK(cudaMalloc(&ctx->sendData, units * c.headDim * c.eltSize));
  CUDACHECK(cudaMalloc(&ctx->recvData, units * c.headDim * c.eltSize));
  CUDACHECK(cudaMalloc(&ctx->sendLse, units * sizeof(float)));
  CUDACHECK(cudaMalloc(&ctx->recvLse, units * sizeof(float)));
  return ncclSuccess;
}

// Frees what one context holds locally (no collective step).
void releaseLocal(ncclDcpContext_t ctx) {
  if (ctx->cudaDev >= 0) cudaSetDevice(ctx->cudaDev);
  if (ctx->ownedMemory) ncclMemFree(ctx->ownedMemory);
  cudaFree(ctx->sendData);
  cudaFree(ctx->recvData);
  cudaFree(ctx->sendLse);
  cudaFree(ctx->recvLse);
  ctx->engine.release();
  delete ctx;
}

// The collective steps of destroy, grouped over the contexts given.
ncclResult_t releaseCollective(int n, ncclDcpContext_t* ctxs) {
  ncclResult_t result = ncclSuccess;
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < n; i++) {
    ncclDcpContext_t c = ctxs[i];
    if (c == nullptr) continue;
    if (c->ownedMemory && c->window) {
      ncclResult_t r = ncclCommWindowDeregister(c->comm, c->window);
      if (r != ncclSuccess) result = r;
    }
    if (c->hasDevComm) {
      ncclResult_t r = ncclDevCommDestroy(c->comm, &c->devComm);
      if (r != ncclSuccess) result = r;
    }
  }
  ncclResult_t r = ncclGroupEnd();
  if (result == ncclSuccess) result = r;
  if (result != ncclSuccess)
    return fail(result, "releasing the window / device communicator failed: %s", ncclGetLastError(nullptr));
  return ncclSuccess;
}

}  // namespace

ncclResult_t createContexts(int nComms, const ncclComm_t* comms, const ncclDcpConfig_t* cfgIn,
                            const AppWindow* appWindows, ncclDcpContext_t* out) {
  // 1. Arguments, before anything collective.
  if (out == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  if (nComms < 1) return fail(ncclInvalidArgument, "nComms %d is not positive", nComms);
  if (comms == nullptr) return fail(ncclInvalidArgument, "comms is NULL");
  for (int i = 0; i < nComms; i++) out[i] = nullptr;
  for (int i = 0; i < nComms; i++)
    if (comms[i] == nullptr) return fail(ncclInvalidArgument, "comm %d is NULL", i);
  Config cfg;
  DCPCHECK(resolveConfig(cfgIn, env(), &cfg));
  int ncclVersion = 0;
  NCCLCHECK(ncclGetVersion(&ncclVersion));
  DCPCHECK(checkNcclVersion(ncclVersion, NCCL_VERSION_CODE));

  DeviceGuard guard;
  Members m;
  DCPCHECK(m.init(nComms, comms));
  if (appWindows) {
    for (int i = 0; i < nComms; i++) {
      const AppWindow& w = appWindows[i];
      if (w.window == nullptr) return fail(ncclInvalidArgument, "win is NULL");
      if (w.offset % NCCL_WIN_REQUIRED_ALIGNMENT != 0)
        return fail(ncclInvalidArgument, "offset %zu is not a multiple of %d", w.offset,
                    NCCL_WIN_REQUIRED_ALIGNMENT);
      const size_t need = workspaceBound(cfg, m.nRanks[i]);
      if (w.bytes < need)
        return fail(ncclInvalidArgument, "bytes %zu is less than ncclDcpWorkspaceSize() = %zu", w.bytes, need);
    }
  }

  // 2. Agreement, through NCCL's own all-gather.
  std::vector<Agreement> mine(nComms);
  std::vector<std::vector<Agreement>> all(nComms);
  std::vector<const void*> send(nComms);
  std::vector<void*> recv(nComms);
  for (int i = 0; i < nComms; i++) {
    mine[i] = agreementOf(cfg, ncclVersion, m.devs[i], appWindows ? &appWindows[i] : nullptr);
    all[i].resize(m.nRanks[i]);
    send[i] = &mine[i];
    recv[i] = all[i].data();
  }
  static_assert(sizeof(Agreement) <= Members::kScratchBytes, "agreement record too large");
  DCPCHECK(m.allGather(send.data(), recv.data(), sizeof(Agreement)));
  for (int i = 0; i < nComms; i++) DCPCHECK(checkAgreement(all[i].data(), m.nRanks[i]));

  std::vector<ncclDcpContext_t> ctxs(nComms, nullptr);
  auto cleanup = [&](ncclResult_t r) {
    std::string msg = lastError();
    for (ncclDcpContext_t c : ctxs)
      if (c) releaseLocal(c);
    fail(r, "%s", msg.c_str());
    return r;
  };
  for (int i = 0; i < nComms; i++) {
    ctxs[i] = new ncclDcpContext();
    ctxs[i]->comm = m.comms[i];
    ctxs[i]->rank = m.ranks[i];
    ctxs[i]->nRanks = m.nRanks[i];
    ctxs[i]->cudaDev = m.devs[i];
  }

  // 3. Device communicator; the ranks agree on the path.
  std::vector<int32_t> capable(nComms, 0);
  std::vector<int> lsaSize(nComms, 1), lsaRank(nComms, 0);
  if (!env().forceFallback) {
    std::vector<ncclResult_t> rc(nComms, ncclSuccess);
    ncclDevCommRequirements reqs = devCommRequirements();
    NCCLCHECK(ncclGroupStart());
    for (int i = 0; i < nComms; i++) rc[i] = ncclDevCommCreate(m.comms[i], &reqs, &ctxs[i]->devComm);
    ncclResult_t end = ncclGroupEnd();
    for (int i = 0; i < nComms; i++) {
      if (rc[i] == ncclSuccess && end == ncclSuccess) {
        ctxs[i]->hasDevComm = true;
        lsaSize[i] = ctxs[i]->devComm.lsaSize;
        lsaRank[i] = ctxs[i]->devComm.lsaRank;
        capable[i] = lsaSize[i] == m.nRanks[i];
        if (!capable[i])
          INFO("rank %d: LSA team has %d of %d ranks (ranks span nodes or are not node-contiguous)",
               m.ranks[i], lsaSize[i], m.nRanks[i]);
      } else {
        INFO("rank %d: ncclDevCommCreate failed (%s: %s): no symmetric memory support (e.g. "
             "NCCL_CUMEM_ENABLE=0 or no P2P)",
             m.ranks[i], ncclGetErrorString(rc[i] != ncclSuccess ? rc[i] : end), ncclGetLastError(nullptr));
      }
    }
  }
  std::vector<std::vector<int32_t>> capableAll(nComms);
  for (int i = 0; i < nComms; i++) {
    capableAll[i].resize(m.nRanks[i]);
    send[i] = &capable[i];
    recv[i] = capableAll[i].data();
  }
  if (ncclResult_t r = m.allGather(send.data(), recv.data(), sizeof(int32_t))) return cleanup(r);

  for (int i = 0; i < nComms; i++) {
    ncclDcpContext_t c = ctxs[i];
    bool fused = true;
    for (int r = 0; r < c->nRanks; r++) fused = fused && capableAll[i][r];
    c->path = fused ? ncclDcpPathFused : ncclDcpPathFallback;
    if (!fused)
      INFO("rank %d: fallback path (ncclAlltoAll + combine): %s", c->rank,
           env().forceFallback ? "NCCL_DCP_FORCE_FALLBACK=1"
                               : "not every rank can reach every other through symmetric memory");
    LinkSummary links = {fused, false, false, false};
    CUDACHECK(cudaSetDevice(c->cudaDev));
    if (ncclResult_t r = c->engine.init(cfg, c->nRanks, c->rank, chooseProtocols(cfg.protocol, links, env())))
      return cleanup(r);
    fillTopology(c, all[i].data(), lsaSize[i], lsaRank[i]);
  }

  // 4. Resources of the chosen path.
  const bool fused = ctxs[0]->path == ncclDcpPathFused;
  if (fused) {
    for (int i = 0; i < nComms; i++) {
      ncclDcpContext_t c = ctxs[i];
      if (appWindows) {
        c->window = appWindows[i].window;
        c->windowOffset = appWindows[i].offset;
        continue;
      }
      CUDACHECK(cudaSetDevice(c->cudaDev));
      if (ncclMemAlloc(&c->ownedMemory, c->engine.layout.totalBytes) != ncclSuccess)
        return cleanup(fail(ncclSystemError, "ncclMemAlloc of %zu bytes failed: %s", c->engine.layout.totalBytes,
                            ncclGetLastError(nullptr)));
    }
    if (!appWindows) {
      NCCLCHECK(ncclGroupStart());
      for (int i = 0; i < nComms; i++)
        ncclCommWindowRegister(ctxs[i]->comm, ctxs[i]->ownedMemory, ctxs[i]->engine.layout.totalBytes,
                               &ctxs[i]->window, NCCL_WIN_DEFAULT);
      if (ncclGroupEnd() != ncclSuccess)
        return cleanup(fail(ncclSystemError, "ncclCommWindowRegister failed: %s", ncclGetLastError(nullptr)));
    }
    for (int i = 0; i < nComms; i++) {
      CUDACHECK(cudaSetDevice(m.devs[i]));
      if (ncclResult_t r = launchZeroWindow(ctxs[i]->window, ctxs[i]->windowOffset,
                                            ctxs[i]->engine.layout.totalBytes, m.streams[i]))
        return cleanup(r);
    }
  } else {
    for (int i = 0; i < nComms; i++) {
      CUDACHECK(cudaSetDevice(m.devs[i]));
      if (ncclResult_t r = allocFallbackBuffers(ctxs[i])) return cleanup(r);
    }
  }

  // 5. Every rank's workspace is zero before any first call.
  std::vector<int32_t> ready(nComms, 1), readyAll;
  for (int i = 0; i < nComms; i++) {
    CUDACHECK(cudaSetDevice(m.devs[i]));
    CUDACHECK(cudaStreamSynchronize(m.streams[i]));
  }
  std::vector<std::vector<int32_t>> readyRecv(nComms);
  for (int i = 0; i < nComms; i++) {
    readyRecv[i].resize(m.nRanks[i]);
    send[i] = &ready[i];
    recv[i] = readyRecv[i].data();
  }
  if (ncclResult_t r = m.allGather(send.data(), recv.data(), sizeof(int32_t))) return cleanup(r);

  for (int i = 0; i < nComms; i++) {
    out[i] = ctxs[i];
    INFO("rank %d/%d: context ready: %s path, protocol %s%s, workspace %zu bytes, D %d, Hl %d, %s, maxBatch %d",
         ctxs[i]->rank, ctxs[i]->nRanks, fused ? "fused" : "fallback",
         protocolName((int)ctxs[i]->engine.policy.small),
         ctxs[i]->engine.policy.simpleForLarge ? " (+SIMPLE for large rounds)" : "",
         fused ? ctxs[i]->engine.layout.totalBytes : 0, cfg.headDim, cfg.localHeads, dtypeName(cfg.dtype),
         cfg.maxBatch);
  }
  return ncclSuccess;
}

ncclResult_t destroyContexts(int n, ncclDcpContext_t* ctxs) {
  DeviceGuard guard;
  for (int i = 0; i < n; i++) {
    ncclDcpContext_t c = ctxs[i];
    if (c == nullptr) continue;
    CUDACHECK(cudaSetDevice(c->cudaDev));
    // Calls in flight still use the workspace. The whole device, not the
    // bound stream: the application may have destroyed that one already.
    CUDACHECK(cudaDeviceSynchronize());
  }
  ncclResult_t result = releaseCollective(n, ctxs);
  for (int i = 0; i < n; i++)
    if (ctxs[i]) {
      releaseLocal(ctxs[i]);
      ctxs[i] = nullptr;
    }
  return result;
}

static ncclResult_t enqueueFallback(ncclDcpContext_t ctx, const CallBuffers& buf, int batch, const Strides& s,
                                    cudaStream_t stream) {
  const Config& c = ctx->engine.cfg;
  for (int row0 = 0; row0 < batch; row0 += c.maxBatch) {
    const int rows = batch - row0 < c.maxBatch ? batch - row0 : c.maxBatch;
    const PackLaunch pack = packLaunch(c, ctx->nRanks, rows, (const char*)buf.partialOut + row0 * s.inRow * c.eltSize,
                                       buf.partialLse + row0 * s.lseRow, ctx->sendData, ctx->sendLse, s);
    DCPCHECK(launchPack(pack, stream));
    const size_t units = (size_t)rows * c.localHeads;
    NCCLCHECK(ncclGroupStart());
    ncclResult_t r1 = ncclAlltoAll(ctx->sendData, ctx->recvData, units * c.headDim, c.dtype, ctx->comm, stream);
    ncclResult_t r2 = ncclAlltoAll(ctx->sendLse, ctx->recvLse, units, ncclFloat32, ctx->comm, stream);
    NCCLCHECK(ncclGroupEnd());
    NCCLCHECK(r1);
    NCCLCHECK(r2);
    const CombineLaunch comb =
        combineLaunch(c, ctx->nRanks, rows, ctx->recvData, ctx->recvLse, (char*)buf.out + row0 * s.outRow * c.eltSize,
                      buf.outLse ? buf.outLse + row0 * s.outLseRow : nullptr, s);
    DCPCHECK(launchCombine(comb, stream));
  }
  return ncclSuccess;
}

ncclResult_t contextEnqueue(ncclDcpContext_t ctx, const CallBuffers& buf, int batch, const Strides& strides,
                            cudaStream_t stream) {
  DeviceGuard guard;
  CUDACHECK(cudaSetDevice(ctx->cudaDev));
  if (ctx->path == ncclDcpPathFallback) {
    DCPCHECK(enqueueFallback(ctx, buf, batch, strides, stream));
  } else {
    Addressing addr = {};
    addr.loopback = false;
    addr.window = ctx->window;
    addr.windowOffset = ctx->windowOffset;
    DCPCHECK(ctx->engine.enqueue(&buf, batch, strides, addr, stream));
  }
  ctx->stats.calls++;
  ctx->stats.rows += batch;
  ctx->stats.rounds += (batch + ctx->engine.cfg.maxBatch - 1) / ctx->engine.cfg.maxBatch;
  return ncclSuccess;
}

}  // namespace nccl_dcp
