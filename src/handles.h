/*************************************************************************
 * The handles of the public API. An ncclDcpContext_t is a small handle of
 * its own, never freed and never reused, that names a Context while it
 * lives: every function taking a handle the library ever returned is
 * defined on it. A destroyed, aborted or repeated handle is refused with
 * ncclInvalidArgument, never dereferenced into freed memory.
 *
 * Threads: a call holds a use of its context for its duration (host-side
 * only: enqueueing); retiring a handle (destroy, abort) refuses new uses
 * and waits for the uses in progress to end, so an abort from a watchdog
 * thread never frees a context under a call being enqueued.
 ************************************************************************/
#ifndef NCCL_DCP_HANDLES_H_
#define NCCL_DCP_HANDLES_H_

#include "nccl_dcp.h"

namespace nccl_dcp {

struct Context;

// A new handle for a live context.
ncclDcpContext_t registerContext(Context* ctx);

// One use of a handle's context for the length of an API call: get() is
// nullptr (ncclInvalidArgument set, naming `what`) when the handle is not live.
class ContextUse {
 public:
  ContextUse(ncclDcpContext_t handle, const char* what);
  ~ContextUse();
  ContextUse(const ContextUse&) = delete;
  ContextUse& operator=(const ContextUse&) = delete;
  Context* get() const { return ctx_; }
  Context* operator->() const { return ctx_; }

 private:
  ncclDcpContext_t handle_;
  Context* ctx_;
};

// Retires n handles at once (NULL entries skipped): all are live and
// distinct, or none is retired (ncclInvalidArgument naming `what`[i]).
// Waits until no call uses them, then hands their contexts to out[i].
ncclResult_t retireContexts(int n, const ncclDcpContext_t* handles, const char* what, Context** out);

// The context of a live handle, with no use held (tests and tools only).
Context* contextOf(ncclDcpContext_t handle);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_HANDLES_H_
