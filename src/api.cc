/*************************************************************************
 * Entry points: clear the thread's last error, check every argument and
 * handle (handles.h), then hand over to the context.
 ************************************************************************/
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "context.h"
#include "env.h"
#include "error.h"
#include "log.h"
#include "nccl_dcp.h"
#include "handles.h"
#include "validate.h"

using namespace nccl_dcp;

#define NCCL_DCP_API extern "C" __attribute__((visibility("default")))

namespace {

// The VERSION line and a WARN for misspelt NCCL_DCP_* variables, once per
// process, at the first create (as NCCL prints its version).
void logVersion() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& name : unknownVariables(environ))
      WARN("%s is set but nothing of nccl-dcp reads it (misspelt? docs/environment.md lists the NCCL_DCP_* "
           "variables)", name.c_str());
    int nccl = 0;
    if (ncclGetVersion(&nccl) != ncclSuccess) nccl = 0;
    NCCL_DCP_LOG(LogLevel::Version, "nccl-dcp version %d.%d.%d (NCCL headers %d.%d.%d, library %d.%d.%d)",
                 NCCL_DCP_MAJOR, NCCL_DCP_MINOR, NCCL_DCP_PATCH, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, nccl / 10000,
                 nccl / 100 % 100, nccl % 100);
  });
}

// createContexts for nComms communicators, handles for what it made.
ncclResult_t createHandles(int nComms, const ncclComm_t* comms, const ncclDcpConfig_t* cfg, const AppWindow* windows,
                           ncclDcpContext_t* out) {
  logVersion();
  std::vector<Context*> made(nComms > 0 ? nComms : 0, nullptr);
  DCPCHECK(createContexts(nComms, comms, cfg, windows, out ? made.data() : nullptr));
  for (int i = 0; i < nComms; i++) out[i] = made[i]->handle = registerContext(made[i]);
  return ncclSuccess;
}

// ncclDcpGroupStart/End of this thread: the depth, the calls made inside,
// enqueued by the outermost ncclDcpGroupEnd, and the first call refused
// inside, which fails that end with nothing enqueued (as NCCL's group
// error fails ncclGroupEnd): the group's other calls would otherwise run
// without it, and their peers wait for a call that never comes.
struct PendingCall {
  ncclDcpContext_t handle;
  CallBuffers buf;
  int batch;
  CallPlan plan;
  cudaStream_t stream;
};
thread_local int groupDepth = 0;
thread_local std::vector<PendingCall> pendingCalls;
thread_local ncclResult_t groupRefusal = ncclSuccess;
thread_local std::string groupRefusalMessage;

// A call's refusal, returned as is; inside a group also kept (the first)
// for its ncclDcpGroupEnd.
ncclResult_t refuse(ncclResult_t r) {
  if (r != ncclSuccess && groupDepth > 0 && groupRefusal == ncclSuccess) {
    groupRefusal = r;
    groupRefusalMessage = lastError();
  }
  return r;
}
#define REFUSE_IF(call)                                    \
  do {                                                     \
    const ncclResult_t refused_ = (call);                  \
    if (refused_ != ncclSuccess) return refuse(refused_);  \
  } while (0)

ncclResult_t deferToGroup(ncclDcpContext_t ctx, const CallBuffers& buf, int batch, const CallPlan& plan,
                          cudaStream_t stream) {
  for (const PendingCall& p : pendingCalls)
    if (p.handle == ctx)
      return fail(ncclInvalidUsage, "ctx %p already has a call in this ncclDcpGroupStart/End: one call per "
                                    "context per group (end the group, or start another)",
                  (void*)ctx);
  pendingCalls.push_back({ctx, buf, batch, plan, stream});
  return ncclSuccess;
}

}  // namespace

NCCL_DCP_API ncclResult_t ncclDcpGroupStart(void) {
  clearLastError();
  groupDepth++;
  return ncclSuccess;
}

NCCL_DCP_API ncclResult_t ncclDcpGroupEnd(void) {
  clearLastError();
  if (groupDepth == 0) return fail(ncclInvalidUsage, "ncclDcpGroupEnd without ncclDcpGroupStart");
  if (--groupDepth > 0) return ncclSuccess;
  std::vector<PendingCall> pending;
  pending.swap(pendingCalls);
  const ncclResult_t refused = groupRefusal;
  std::string why;
  why.swap(groupRefusalMessage);
  groupRefusal = ncclSuccess;
  if (refused != ncclSuccess)
    return fail(refused, "a call of this group was refused (%s): ncclDcpGroupEnd enqueued none of the group's %zu "
                         "other calls",
                why.c_str(), pending.size());
  std::vector<std::unique_ptr<ContextUse>> uses;
  std::vector<GroupedCall> calls;
  for (const PendingCall& p : pending) {
    uses.emplace_back(new ContextUse(p.handle, "a grouped call's ctx"));
    if (uses.back()->get() == nullptr) return ncclInvalidArgument;  // destroyed since: nothing enqueued
    calls.push_back({uses.back()->get(), p.buf, p.batch, p.plan, p.stream});
  }
  return contextEnqueueGroup(calls);
}

NCCL_DCP_API ncclResult_t ncclDcpGetVersion(int* version) {
  clearLastError();
  if (version == nullptr) return fail(ncclInvalidArgument, "version is NULL");
  *version = NCCL_DCP_VERSION_CODE;
  return ncclSuccess;
}

NCCL_DCP_API ncclResult_t ncclDcpWorkspaceSize(const ncclDcpConfig_t* cfg, int nRanks, size_t* bytes) {
  clearLastError();
  if (bytes == nullptr) return fail(ncclInvalidArgument, "bytes is NULL");
  logEnvWarnings();  // this call may be the process's first read of them
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
  if (ctx) *ctx = nullptr;
  return createHandles(1, &comm, cfg, nullptr, ctx);
}

NCCL_DCP_API ncclResult_t ncclDcpContextCreateGroup(int nComms, const ncclComm_t* comms,
                                                    const ncclDcpConfig_t* cfg, ncclDcpContext_t* ctxs) {
  clearLastError();
  if (ctxs)
    for (int i = 0; i < nComms; i++) ctxs[i] = nullptr;
  return createHandles(nComms, comms, cfg, nullptr, ctxs);
}

NCCL_DCP_API ncclResult_t ncclDcpContextCreateInWindow(ncclComm_t comm, ncclWindow_t win, size_t offset,
                                                       size_t bytes, const ncclDcpConfig_t* cfg,
                                                       ncclDcpContext_t* ctx) {
  clearLastError();
  if (comm == nullptr) return fail(ncclInvalidArgument, "comm is NULL");
  if (ctx) *ctx = nullptr;
  AppWindow w = {win, offset, bytes};  // checked in create's first step, with the peers told
  return createHandles(1, &comm, cfg, &w, ctx);
}

NCCL_DCP_API ncclResult_t ncclDcpContextDestroy(ncclDcpContext_t ctx) {
  clearLastError();
  if (ctx == nullptr) return ncclSuccess;
  Context* c;
  DCPCHECK(retireContexts(1, &ctx, "ctx", &c));
  return destroyContexts(1, &c);
}

NCCL_DCP_API ncclResult_t ncclDcpContextAbort(ncclDcpContext_t ctx) {
  clearLastError();
  if (ctx == nullptr) return ncclSuccess;
  {
    // The stop first: another thread's call may hold ctx inside a launch
    // that waits for room behind the stuck kernels, and retiring ctx
    // waits for that call.
    ContextUse use(ctx, "ctx");
    if (use.get() == nullptr) return ncclInvalidArgument;
    signalAbort(use.get());
  }
  Context* c;
  DCPCHECK(retireContexts(1, &ctx, "ctx", &c));
  return abortContext(c);
}

NCCL_DCP_API ncclResult_t ncclDcpContextDestroyGroup(int nCtxs, ncclDcpContext_t* ctxs) {
  clearLastError();
  if (nCtxs < 0) return fail(ncclInvalidArgument, "nCtxs %d is negative", nCtxs);
  if (nCtxs > 0 && ctxs == nullptr) return fail(ncclInvalidArgument, "ctxs is NULL");
  std::vector<Context*> contexts(nCtxs);
  DCPCHECK(retireContexts(nCtxs, ctxs, "ctxs[i]", contexts.data()));
  for (int i = 0; i < nCtxs; i++) ctxs[i] = nullptr;
  return destroyContexts(nCtxs, contexts.data());
}

NCCL_DCP_API ncclResult_t ncclDcpA2aLseReduceEx(ncclDcpContext_t ctx, const void* partialOut, const void* partialLse,
                                                void* out, float* outLse, int batch,
                                                const ncclDcpStrides_t* stridesIn, const ncclDcpCallArgs_t* args,
                                                cudaStream_t stream) {
  clearLastError();
  if (ctx == nullptr) return refuse(fail(ncclInvalidArgument, "ctx is NULL"));
  ContextUse c(ctx, "ctx");
  if (c.get() == nullptr) return refuse(ncclInvalidArgument);
  CallBuffers buf = {partialOut, partialLse, out, outLse};
  // A bad args header is refused before its pointers are read (admit).
  if (args && args->magic == NCCL_DCP_CALL_ARGS_MAGIC && args->size == sizeof(ncclDcpCallArgs_t)) {
    buf.seqLens = args->seqLens;
    buf.queryStartLoc = args->queryStartLoc;
    REFUSE_IF(checkHostArrays(args, cudaPointerAnswer));  // before admit reads rowCounts
  }
  CallPlan plan;
  REFUSE_IF(c->engine.admit(&buf, 1, batch, stridesIn, args, &plan));
  if (batch == 0) return contextAsyncError(c.get());
  // The arrays the kernels read (not at batch 0), before anything is
  // enqueued or deferred to a group.
  REFUSE_IF(checkDeviceArrays(args, c->cudaDev, cudaPointerAnswer));
  if (groupDepth > 0) return refuse(deferToGroup(ctx, buf, batch, plan, stream));
  return contextEnqueue(c.get(), buf, batch, plan, stream);
}

NCCL_DCP_API ncclResult_t ncclDcpA2aLseReduce(ncclDcpContext_t ctx, const void* partialOut,
                                              const float* partialLse, void* out, float* outLse, int batch,
                                              const ncclDcpStrides_t* strides, cudaStream_t stream) {
  return ncclDcpA2aLseReduceEx(ctx, partialOut, partialLse, out, outLse, batch, strides, nullptr, stream);
}

NCCL_DCP_API ncclResult_t ncclDcpOutputRegister(ncclDcpContext_t ctx, void* out, size_t outBytes, float* outLse,
                                                size_t outLseBytes, ncclDcpOutput_t* handle) {
  clearLastError();
  if (ctx == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  if (handle == nullptr) return fail(ncclInvalidArgument, "handle is NULL");
  DCPCHECK(checkOutputRanges(out, outBytes, outLse, outLseBytes));
  ContextUse c(ctx, "ctx");
  if (c.get() == nullptr) return ncclInvalidArgument;
  Context* contexts[1] = {c.get()};
  const OutputRange outs[1] = {{(char*)out, outBytes}}, lses[1] = {{(char*)outLse, outLseBytes}};
  RegisteredOutput* reg = nullptr;
  DCPCHECK(registerOutputs(1, contexts, outs, lses, &reg));
  *handle = (ncclDcpOutput_t)reg;
  return ncclSuccess;
}

NCCL_DCP_API ncclResult_t ncclDcpOutputRegisterGroup(int nCtxs, const ncclDcpContext_t* ctxs, void* const* outs,
                                                     const size_t* outBytes, float* const* outLses,
                                                     const size_t* outLseBytes, ncclDcpOutput_t* handles) {
  clearLastError();
  if (nCtxs < 0) return fail(ncclInvalidArgument, "nCtxs %d is negative", nCtxs);
  if (nCtxs == 0) return ncclSuccess;
  if (ctxs == nullptr) return fail(ncclInvalidArgument, "ctxs is NULL");
  if (outs == nullptr || outBytes == nullptr) return fail(ncclInvalidArgument, "outs or outBytes is NULL");
  if ((outLses == nullptr) != (outLseBytes == nullptr))
    return fail(ncclInvalidArgument, "outLses and outLseBytes: both or neither");
  if (handles == nullptr) return fail(ncclInvalidArgument, "handles is NULL");
  std::vector<OutputRange> outRanges(nCtxs), lseRanges(nCtxs);
  for (int i = 0; i < nCtxs; i++) {
    if (ctxs[i] == nullptr) return fail(ncclInvalidArgument, "ctxs[%d] is NULL", i);
    for (int j = 0; j < i; j++)
      if (ctxs[j] == ctxs[i]) return fail(ncclInvalidArgument, "ctxs[%d] repeats ctxs[%d]", i, j);
    float* lse = outLses ? outLses[i] : nullptr;
    const size_t lseBytes = outLseBytes ? outLseBytes[i] : 0;
    const std::string entry = "entry " + std::to_string(i) + ": ";
    DCPCHECK(checkOutputRanges(outs[i], outBytes[i], lse, lseBytes, entry.c_str()));
    outRanges[i] = {(char*)outs[i], outBytes[i]};
    lseRanges[i] = {(char*)lse, lseBytes};
  }
  std::vector<std::unique_ptr<ContextUse>> uses;
  std::vector<Context*> contexts;
  for (int i = 0; i < nCtxs; i++) {
    uses.emplace_back(new ContextUse(ctxs[i], "ctxs[i]"));
    if (uses.back()->get() == nullptr) return ncclInvalidArgument;
    contexts.push_back(uses.back()->get());
  }
  std::vector<RegisteredOutput*> regs(nCtxs);
  DCPCHECK(registerOutputs(nCtxs, contexts.data(), outRanges.data(), lseRanges.data(), regs.data()));
  for (int i = 0; i < nCtxs; i++) handles[i] = (ncclDcpOutput_t)regs[i];
  return ncclSuccess;
}

NCCL_DCP_API ncclResult_t ncclDcpOutputDeregister(ncclDcpContext_t ctx, ncclDcpOutput_t handle) {
  clearLastError();
  if (ctx == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  if (handle == nullptr) return ncclSuccess;
  ContextUse c(ctx, "ctx");
  if (c.get() == nullptr) return ncclInvalidArgument;
  return deregisterOutput(c.get(), (RegisteredOutput*)handle);
}

NCCL_DCP_API ncclResult_t ncclDcpContextBindStream(ncclDcpContext_t ctx, cudaStream_t) {
  clearLastError();
  if (ctx == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  ContextUse c(ctx, "ctx");
  return c.get() ? ncclSuccess : ncclInvalidArgument;
}

NCCL_DCP_API ncclResult_t ncclDcpGetTopology(ncclDcpContext_t ctx, ncclDcpTopology_t* topo) {
  clearLastError();
  if (ctx == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  if (topo == nullptr) return fail(ncclInvalidArgument, "topo is NULL");
  // Append-only: a caller built against 0.1 passes the shorter struct.
  const size_t v1 = offsetof(ncclDcpTopology_t, provider);
  if (topo->magic != NCCL_DCP_TOPOLOGY_MAGIC || (topo->size != sizeof(ncclDcpTopology_t) && topo->size != v1))
    return fail(ncclInvalidArgument,
                "topo->magic/size do not match: initialise it with NCCL_DCP_TOPOLOGY_INITIALIZER");
  ContextUse c(ctx, "ctx");
  if (c.get() == nullptr) return ncclInvalidArgument;
  const size_t size = topo->size;
  memcpy(topo, &c->topology, size);
  topo->size = size;
  return ncclSuccess;
}

NCCL_DCP_API ncclResult_t ncclDcpGetAsyncError(ncclDcpContext_t ctx, ncclResult_t* asyncError) {
  clearLastError();
  if (ctx == nullptr) return fail(ncclInvalidArgument, "ctx is NULL");
  if (asyncError == nullptr) return fail(ncclInvalidArgument, "asyncError is NULL");
  ContextUse c(ctx, "ctx");
  if (c.get() == nullptr) return ncclInvalidArgument;
  *asyncError = contextAsyncError(c.get());
  return ncclSuccess;
}

NCCL_DCP_API const char* ncclDcpGetLastError(void) { return lastError(); }
