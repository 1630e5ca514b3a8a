#include "handles.h"

#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "error.h"

// The public handle: a serial number, so that no two handles are alike.
struct ncclDcpContext {
  uint64_t serial;
};

namespace nccl_dcp {

namespace {

struct Entry {
  Context* ctx = nullptr;  // nullptr once retired (the handle stays known)
  int uses = 0;            // API calls in progress on it
};

std::mutex mutex;
std::condition_variable idle;  // an entry's uses dropped to 0
std::unordered_map<ncclDcpContext_t, Entry> entries;
uint64_t serials = 0;

// Locked. The live entry of a handle, or nullptr.
Entry* liveEntry(ncclDcpContext_t handle) {
  auto it = entries.find(handle);
  return it == entries.end() || it->second.ctx == nullptr ? nullptr : &it->second;
}

ncclResult_t notLive(ncclDcpContext_t handle, const char* what) {
  const bool known = entries.count(handle) != 0;
  return fail(ncclInvalidArgument, "%s %p is not a live context: %s", what, (void*)handle,
              known ? "it was destroyed or aborted" : "no ncclDcpContextCreate* returned it");
}

}  // namespace

ncclDcpContext_t registerContext(Context* ctx) {
  std::lock_guard<std::mutex> lock(mutex);
  ncclDcpContext_t handle = new ncclDcpContext{++serials};
  entries[handle].ctx = ctx;
  return handle;
}

ContextUse::ContextUse(ncclDcpContext_t handle, const char* what) : handle_(handle), ctx_(nullptr) {
  std::lock_guard<std::mutex> lock(mutex);
  Entry* e = liveEntry(handle);
  if (e == nullptr) {
    notLive(handle, what);
    return;
  }
  e->uses++;
  ctx_ = e->ctx;
}

ContextUse::~ContextUse() {
  if (ctx_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex);
  Entry& e = entries[handle_];
  if (--e.uses == 0) idle.notify_all();
}

// Entry i of an array named "ctxs[i]" as "ctxs[3]" (a name without "[i]"
// as it is).
static std::string entryName(const char* what, int i) {
  std::string name = what;
  const size_t at = name.find("[i]");
  if (at != std::string::npos) name.replace(at, 3, "[" + std::to_string(i) + "]");
  return name;
}

ncclResult_t retireContexts(int n, const ncclDcpContext_t* handles, const char* what, Context** out) {
  std::unique_lock<std::mutex> lock(mutex);
  for (int i = 0; i < n; i++) {
    out[i] = nullptr;
    if (handles[i] == nullptr) continue;
    if (liveEntry(handles[i]) == nullptr) return notLive(handles[i], entryName(what, i).c_str());
    for (int j = 0; j < i; j++)
      if (handles[j] == handles[i])
        return fail(ncclInvalidArgument, "%s: entries %d and %d are the same context %p", what, j, i,
                    (void*)handles[i]);
  }
  std::vector<Entry*> retired;
  for (int i = 0; i < n; i++) {
    if (handles[i] == nullptr) continue;
    Entry* e = &entries[handles[i]];
    out[i] = e->ctx;
    e->ctx = nullptr;  // no new use from here on
    retired.push_back(e);
  }
  for (Entry* e : retired) idle.wait(lock, [e] { return e->uses == 0; });
  return ncclSuccess;
}

Context* contextOf(ncclDcpContext_t handle) {
  std::lock_guard<std::mutex> lock(mutex);
  Entry* e = liveEntry(handle);
  return e ? e->ctx : nullptr;
}

}  // namespace nccl_dcp
