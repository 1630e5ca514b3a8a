/*************************************************************************
 * Giving memory back, now or later. cudaFree and cudaFreeHost wait for all
 * work on the device, and after a peer died that work may include NCCL
 * kernels stuck on it until the application calls ncclCommAbort. Abort
 * must not wait for them (DESIGN §10), so it defers its frees to the next
 * call on that GPU that blocks anyway (create, destroy). And what a failed
 * workspace allocation tells the user, and where a pointer sits in its
 * allocation.
 ************************************************************************/
#ifndef NCCL_DCP_MEMORY_H_
#define NCCL_DCP_MEMORY_H_

#include <stddef.h>

#include <string>

namespace nccl_dcp {

enum class MemoryKind {
  Device,      // cudaMalloc
  NcclMem,     // ncclMemAlloc
  PinnedHost,  // cudaHostAlloc
  IpcImport,   // a peer's memory opened with cudaIpcOpenMemHandle (closed, not freed)
};

enum class FreeMode {
  Now,       // create's unwind, destroy, loopback
  Deferred,  // abort: freed by the next flushDeferredFrees()
};

// Frees ptr (NULL is a no-op) of kind, allocated on device dev.
void freeMemory(MemoryKind kind, int dev, void* ptr, FreeMode mode);

// Frees what aborts deferred on device dev. Create and destroy call it for
// their devices (never for another: its GPU may still hold stuck kernels).
void flushDeferredFrees(int dev);

// Why a workspace of `bytes` did not fit, for its error message: its size,
// the rounds of maxBatch rows that set it, what the current GPU has free,
// and the knob that shrinks it.
std::string workspaceShortfall(size_t bytes, int maxBatch);

// How far p lies into the device allocation that holds it
// (cuMemGetAddressRange, through the runtime's driver entry point): what
// NCCL's windows key a peer's address on. False, with *why, where the
// driver cannot place p.
bool allocationOffset(const void* p, size_t* offset, std::string* why);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_MEMORY_H_
