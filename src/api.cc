/*************************************************************************
 * Entry points: clear the thread's last error, check every argument, then
 * hand over to the context.
 ************************************************************************/
#include "context.h"
#include "error.h"
#include "log.h"
#include "nccl_dcp.h"

using namespace nccl_dcp;

#define NCCL_DCP_API extern "C" __attribute__((visibility("default")))

NCCL_DCP_API ncclResult_t ncclDcpGetVersion(int* version) {
  clearLastError();
  if (version == nullptr) return fail(ncclInvalidArgument, "version is NULL");
  *version = NCCL_DCP_VERSION_CODE;
  return ncclSuccess;
}

NCCL_DCP_API ncclResult_t ncclDcpWorkspaceSize(const ncclDcpConfig_t* cfg, int nRanks, size_t* bytes) {
  clearLastError();
  if (bytes == nullptr) return fail(ncclInvalidArgument, "bytes is NULL");
  Config c;
  DCPCHECK(resolveConfig(cfg, env(), &c));
  DCPCHECK(checkRanks(nRanks));
  *bytes = workspaceBound(c, nRanks);
  return ncclSuccess;
}

NCCL_DCP_API ncclResult_t ncclDcpContextCreate(ncclComm_t comm, const ncclDcpConfig_t* cfg,
                                               ncclDcpContext_t* ctx) {
  clearLastError();
  if (comm == nullptr) return fail(ncclInvalidArgument, "comm is NULL");
  return createContexts(1, &comm, cfg, nullptr, ctx);
}

NCCL_DCP_API ncclResult_t ncclDcpContextCreateGroup(int nComms, const ncclComm_t* comms,
                                                    const ncclDcpConfig_t* cfg, ncclDcpContext_t* ctxs) {
  clearLastError();
  return createContexts(nComms, comms, cfg, nullptr, ctxs);
}

NCCL_DCP_API ncclResult_t ncclDcpContextCreateInWindow(ncclComm_t comm, ncclWindow_t win, size_t offset,
                                                       size_t bytes, const ncclDcpConfig_t* cfg,
                                                       ncclDcpContext_t* ctx) {
  clearLastError();
  if (comm == nullptr) return fail(ncclInvalidArgument, "comm is NULL");
  AppWindow w = {win, offset, bytes};  // checked in create's first step, with the peers told
  return createContexts(1, &comm, cfg, &w, ctx);
}

NCCL_DCP_API ncclResult_t ncclDcpContextDestroy(ncclDcpContext_t ctx) {
  clearLastError();
  if (ctx == nullptr) return ncclSuccess;
  return destroyContexts(1, &ctx);
}

NCCL_DCP_API ncclResult_t ncclDcpContextAbort(ncclDcpContext_t ctx) {
  clearLastError();
  if (ctx == nullptr) return ncclSuccess;
  return abortContext(ctx);
}

NCCL_DCP_API ncclResult_t ncclDcpContextDestroyGroup(int nCtxs, ncclDcpContext_t* ctxs) {
  clearLastError();
  if (nCtxs < 0) return fail(ncclInvalidArgument, "nCtxs %d is negative", nCtxs);
  if (nCtxs > 0 && ctxs == nullptr) return fail(ncclInvalidArgument, "ctxs is NULL");
  return destroyContexts(nCtxs, ctxs);
}

NCCL_DCP_API ncclResult_t ncclDcpA2aLseReduce(ncclDcpContext_t ctx, const void* partialOut,
                                              const float* partialLse, void* out, float* outLse, int batch,
                                              const ncclDcpStrides_t* stridesIn, cudaStream_t stream) {
  clearLastError();
  if (ctx == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  const CallBuffers buf = {partialOut, partialLse, out, outLse};
  Strides strides;
  DCPCHECK(ctx->engine.admit(&buf, 1, batch, stridesIn, stream, &strides));
  if (batch == 0) return ncclSuccess;
  return contextEnqueue(ctx, buf, batch, strides, stream);
}

NCCL_DCP_API ncclResult_t ncclDcpContextBindStream(ncclDcpContext_t ctx, cudaStream_t stream) {
  clearLastError();
  if (ctx == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  ctx->engine.bindStream(stream);
  return ncclSuccess;
}

NCCL_DCP_API ncclResult_t ncclDcpGetTopology(ncclDcpContext_t ctx, ncclDcpTopology_t* topo) {
  clearLastError();
  if (ctx == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  if (topo == nullptr) return fail(ncclInvalidArgument, "topo is NULL");
  if (topo->magic != NCCL_DCP_TOPOLOGY_MAGIC || topo->size != sizeof(ncclDcpTopology_t))
    return fail(ncclInvalidArgument,
                "topo->magic/size do not match: initialise it with NCCL_DCP_TOPOLOGY_INITIALIZER");
  *topo = ctx->topology;
  return ncclSuccess;
}

NCCL_DCP_API ncclResult_t ncclDcpGetAsyncError(ncclDcpContext_t ctx, ncclResult_t* asyncError) {
  clearLastError();
  if (ctx == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  if (asyncError == nullptr) return fail(ncclInvalidArgument, "asyncError is NULL");
  *asyncError = ctx->engine.asyncError();
  return ncclSuccess;
}

NCCL_DCP_API const char* ncclDcpGetLastError(void) { return lastError(); }
