/*************************************************************************
 * How long a cuda-ipc workspace lives (DESIGN §12, issue 34). A rank's
 * workspace is cudaMalloc memory its peers write into: threads of this
 * process through its raw pointer (peer access), other processes through
 * a cudaIpcOpenMemHandle mapping. It must outlive every such use:
 *  - a peer thread's context that addresses it holds a use, given back
 *    when that context is destroyed or aborted (its kernels done): the
 *    memory is freed with the last use, never under a late peer's kernel,
 *    and never handed back to the allocator (the next create's cudaMalloc)
 *    while one may still write into it;
 *  - peers in other processes cannot be counted: freeing first is
 *    undefined by CUDA's IPC rules, so the owner frees only after the
 *    peers agreed, through the communicator, that they closed their
 *    mappings (destroy, create's unwind: context.cc). Without that
 *    agreement (an abort, a failed agreement) the workspace stays
 *    allocated for the process's life, with one WARN line: a bounded leak
 *    of one workspace per such context.
 * The frees go through freeMemory (memory.h): now when the last use is
 * given back by a destroy or create's unwind -- unless the owner aborted
 * and the use is given back from another device, whose thread must not
 * wait on the owner's GPU (it may hold NCCL kernels stuck on a dead peer)
 * -- else (abort) deferred to the owner's device's next create or destroy.
 * Host logic only: unit-tested without a GPU through the freer seam.
 ************************************************************************/
#ifndef NCCL_DCP_IPC_LIFETIME_H_
#define NCCL_DCP_IPC_LIFETIME_H_

#include <stddef.h>

#include "memory.h"

namespace nccl_dcp {

struct ExportedWorkspace;

// Registers `ptr` (bytes, device dev), exported by rank `rank`'s context:
// one use, the owner's.
ExportedWorkspace* exportWorkspace(void* ptr, size_t bytes, int dev, int rank);

// One more use of the workspace of another context of this process at
// `ptr` (a peer thread that will address it); nullptr when none is known.
ExportedWorkspace* useExportedWorkspace(const void* ptr);

// Peers in other processes may map it: it is freed only once they agreed
// that they closed their mappings (remoteClosed).
void markRemoteImporters(ExportedWorkspace* w);
bool hasRemoteImporters(const ExportedWorkspace* w);
void remoteClosed(ExportedWorkspace* w);

// Gives back one use (its context's kernels are done). With the last one
// the workspace is freed (see the top) -- or, when remote importers never
// agreed, kept for the process's life with a WARN. `releasingDev`: the
// device of the context giving it back; `mode`: Now (destroy, unwind) or
// Deferred (abort).
void releaseUse(ExportedWorkspace* w, int releasingDev, FreeMode mode);

// Tests: frees go to `freer` instead of freeMemory (nullptr: back to it).
using WorkspaceFreer = void (*)(int dev, void* ptr, FreeMode mode);
void setWorkspaceFreerForTesting(WorkspaceFreer freer);
// Workspaces kept for the process's life, and their bytes.
size_t workspacesKeptForProcessLife(size_t* bytes);
// Workspaces registered and not yet freed or kept (tests: 0 between tests).
size_t liveExportedWorkspaces();

}  // namespace nccl_dcp

#endif  // NCCL_DCP_IPC_LIFETIME_H_
