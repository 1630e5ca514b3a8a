/*************************************************************************
 * The seam between libnccl_dcp and the profiler plugin (DESIGN §6): the
 * plugin exports ncclDcpProfilerHook_v1; the library, when it finds the
 * plugin loaded in its process (src/profiler_hook.cc), hands it one record
 * per ncclDcpA2aLseReduce call. Neither links the other: this header is the
 * whole contract. C ABI; the struct only grows, and `size` says how much of
 * it the caller filled.
 ************************************************************************/
#ifndef NCCL_DCP_PLUGIN_DCP_HOOK_H_
#define NCCL_DCP_PLUGIN_DCP_HOOK_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_DCP_PROFILER_HOOK_SYMBOL "ncclDcpProfilerHook_v1"
#define NCCL_DCP_PROFILER_HOOK_SONAME "libnccl-profiler-dcp.so"

/* Whether every rank of the context sits in one NVLink domain, as the
 * library's topology report says. */
typedef enum {
  ncclDcpHookNvlinkUnknown = -1,
  ncclDcpHookNvlinkNo = 0,
  ncclDcpHookNvlinkYes = 1
} ncclDcpHookNvlink_t;

typedef struct ncclDcpProfilerCall_v1 {
  size_t size;          /* sizeof(ncclDcpProfilerCall_v1_t) as the caller knows it */
  const void* context;  /* the ncclDcpContext_t: with comm, identifies the entry */
  const void* comm;     /* its ncclComm_t */
  int rank, nRanks, cudaDev;
  int headDim, localHeads, eltSize;
  int path;             /* ncclDcpPath_t */
  int protocol;         /* ncclDcpProtocol_t for small batches */
  int nvlink;           /* ncclDcpHookNvlink_t */
  int rows;             /* batch of this call */
  uint64_t bytes;       /* partial outputs this rank sends: rows * nRanks * localHeads * headDim * eltSize */
} ncclDcpProfilerCall_v1_t;

typedef struct ncclDcpProfilerHook_v1 {
  const char* name;
  /* Records one call. Lock-free, allocation-free; never fails the caller. */
  void (*recordCall)(const ncclDcpProfilerCall_v1_t* call);
} ncclDcpProfilerHook_v1_t;

#ifdef __cplusplus
}
#endif

#endif  /* NCCL_DCP_PLUGIN_DCP_HOOK_H_ */
