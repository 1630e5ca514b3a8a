#include "ipc_lifetime.h"

#include <mutex>
#include <unordered_map>

#include "log.h"

namespace nccl_dcp {

struct ExportedWorkspace {
  void* ptr;
  size_t bytes;
  int dev, rank;
  int uses;
  bool remote = false;        // peers in other processes may map it
  bool remoteClosed = false;  // ... and they agreed they closed it
  bool ownerAborted = false;  // its device may hold kernels stuck on a dead peer
};

namespace {

std::mutex mutex;
std::unordered_map<const void*, ExportedWorkspace*> live;  // by address
size_t keptCount = 0, keptBytes = 0;
WorkspaceFreer freer = nullptr;

void freeWorkspace(int dev, void* ptr, FreeMode mode) {
  if (freer) return freer(dev, ptr, mode);
  freeMemory(MemoryKind::Device, dev, ptr, mode);
}

}  // namespace

ExportedWorkspace* exportWorkspace(void* ptr, size_t bytes, int dev, int rank) {
  ExportedWorkspace* w = new ExportedWorkspace{ptr, bytes, dev, rank, 1};
  std::lock_guard<std::mutex> lock(mutex);
  live[ptr] = w;
  return w;
}

ExportedWorkspace* useExportedWorkspace(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = live.find(ptr);
  if (it == live.end()) return nullptr;
  it->second->uses++;
  return it->second;
}

void markRemoteImporters(ExportedWorkspace* w) {
  std::lock_guard<std::mutex> lock(mutex);
  w->remote = true;
}

bool hasRemoteImporters(const ExportedWorkspace* w) {
  std::lock_guard<std::mutex> lock(mutex);
  return w->remote;
}

void remoteClosed(ExportedWorkspace* w) {
  std::lock_guard<std::mutex> lock(mutex);
  w->remoteClosed = true;
}

void releaseUse(ExportedWorkspace* w, int releasingDev, FreeMode mode) {
  if (w == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (mode == FreeMode::Deferred && releasingDev == w->dev) w->ownerAborted = true;
    if (--w->uses > 0) return;
    live.erase(w->ptr);
    if (w->remote && !w->remoteClosed) {
      keptCount++;
      keptBytes += w->bytes;
      WARN("rank %d: its cuda-ipc workspace %p (%zu bytes on GPU %d) stays allocated for the process's life: peers "
           "in other processes may still map it (its context was aborted, or destroy's agreement with them failed), "
           "and CUDA's IPC rules forbid freeing it first (%zu workspace(s), %zu bytes kept so far)",
           w->rank, w->ptr, w->bytes, w->dev, keptCount, keptBytes);
      delete w;
      return;
    }
  }
  const bool now = mode == FreeMode::Now && (releasingDev == w->dev || !w->ownerAborted);
  freeWorkspace(w->dev, w->ptr, now ? FreeMode::Now : FreeMode::Deferred);
  delete w;
}

void setWorkspaceFreerForTesting(WorkspaceFreer f) { freer = f; }

size_t workspacesKeptForProcessLife(size_t* bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  if (bytes) *bytes = keptBytes;
  return keptCount;
}

size_t liveExportedWorkspaces() {
  std::lock_guard<std::mutex> lock(mutex);
  return live.size();
}

}  // namespace nccl_dcp
