/*************************************************************************
 * NVML loaded at run time (see nvml.h): dlopen once, look each function up
 * by its versioned name, never dlclose (other threads may still hold it).
 ************************************************************************/
#include "nvml.h"

#include <dlfcn.h>

#include <mutex>

namespace nccl_dcp {

namespace {

struct Loaded {
  NvmlApi api = {};
  bool ok = false;
  std::string why;
};

template <typename Fn>
bool lookUp(void* lib, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return *fn != nullptr;
}

void load(Loaded* l) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    l->why = std::string("libnvidia-ml.so.1 not loaded: ") + (err ? err : "dlopen failed");
    return;
  }
  NvmlApi& a = l->api;
  struct Required {
    const char* name;
    bool found;
  } required[] = {
      {"nvmlInit_v2", lookUp(lib, "nvmlInit_v2", &a.init)},
      {"nvmlShutdown", lookUp(lib, "nvmlShutdown", &a.shutdown)},
      {"nvmlErrorString", lookUp(lib, "nvmlErrorString", &a.errorString)},
      {"nvmlDeviceGetCount_v2", lookUp(lib, "nvmlDeviceGetCount_v2", &a.deviceGetCount)},
      {"nvmlDeviceGetHandleByIndex_v2", lookUp(lib, "nvmlDeviceGetHandleByIndex_v2", &a.deviceGetHandleByIndex)},
      {"nvmlDeviceGetPciInfo_v3", lookUp(lib, "nvmlDeviceGetPciInfo_v3", &a.deviceGetPciInfo)},
      {"nvmlDeviceGetNvLinkState", lookUp(lib, "nvmlDeviceGetNvLinkState", &a.deviceGetNvLinkState)},
      {"nvmlDeviceGetNvLinkRemotePciInfo_v2",
       lookUp(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &a.deviceGetNvLinkRemotePciInfo)},
  };
  for (const Required& r : required) {
    if (!r.found) {
      l->why = std::string("libnvidia-ml.so.1 has no ") + r.name + " (driver too old)";
      return;
    }
  }
  lookUp(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &a.deviceGetNvLinkRemoteDeviceType);
  lookUp(lib, "nvmlDeviceGetNvLinkVersion", &a.deviceGetNvLinkVersion);
  lookUp(lib, "nvmlDeviceGetFieldValues", &a.deviceGetFieldValues);
  l->ok = true;
}

}  // namespace

const NvmlApi* systemNvml(std::string* why) {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, load, &loaded);
  if (!loaded.ok) {
    if (why) *why = loaded.why;
    return nullptr;
  }
  return &loaded.api;
}

std::string nvmlErrorName(const NvmlApi& api, nvml::Return r) {
  const char* s = api.errorString ? api.errorString(r) : nullptr;
  return s ? s : "NVML error " + std::to_string(r);
}

}  // namespace nccl_dcp
