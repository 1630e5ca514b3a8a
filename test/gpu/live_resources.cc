// Counting wrappers of the resource calls (see live_resources.h).
#include "live_resources.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <nccl_device.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace nccl_dcp {
namespace test {
namespace {

std::atomic<long> gDevice{0}, gPinned{0}, gStreams{0}, gEvents{0}, gNcclMemory{0}, gWindows{0}, gDevComms{0},
    gCalls{0};
std::atomic<long> gNoResource{0};  // calls seen that hold nothing (cudaGetDevice)

// The definition the wrapper hides: the next one in search order.
template <typename Fn>
Fn next(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    fprintf(stderr, "live_resources: no %s after the test binary's own: %s\n", name, dlerror());
    abort();
  }
  return reinterpret_cast<Fn>(f);
}

// Calls the real function, then moves counter by delta when it succeeded.
#define COUNTED(type, name, ok, counter, delta, params, args) \
  extern "C" type name params {                               \
    static const auto real = next<type(*) params>(#name);     \
    gCalls++;                                                 \
    const type r = real args;                                 \
    if (r == ok) counter += (delta);                          \
    return r;                                                 \
  }

}  // namespace

LiveResources liveResources() {
  return {gDevice.load(), gPinned.load(),  gStreams.load(), gEvents.load(),
          gNcclMemory.load(), gWindows.load(), gDevComms.load(), gCalls.load()};
}

std::string resourceDifference(const LiveResources& a, const LiveResources& b) {
  std::string d;
  auto field = [&](const char* name, long x, long y) {
    if (x != y) d += std::string(d.empty() ? "" : ", ") + name + " " + std::to_string(x) + " -> " + std::to_string(y);
  };
  field("device allocations", a.deviceAllocations, b.deviceAllocations);
  field("pinned host allocations", a.pinnedHost, b.pinnedHost);
  field("streams", a.streams, b.streams);
  field("events", a.events, b.events);
  field("ncclMemAlloc blocks", a.ncclMemory, b.ncclMemory);
  field("windows", a.windows, b.windows);
  field("device communicators", a.devComms, b.devComms);
  return d;
}

}  // namespace test
}  // namespace nccl_dcp

using nccl_dcp::test::gCalls;
using nccl_dcp::test::gDevComms;
using nccl_dcp::test::gDevice;
using nccl_dcp::test::gEvents;
using nccl_dcp::test::gNcclMemory;
using nccl_dcp::test::gNoResource;
using nccl_dcp::test::gPinned;
using nccl_dcp::test::gStreams;
using nccl_dcp::test::gWindows;
using nccl_dcp::test::next;

// Seen, holding nothing: the first call a context or loopback makes, which
// proves the wrappers interpose even where no driver lets it go further.
COUNTED(cudaError_t, cudaGetDevice, cudaSuccess, gNoResource, 0, (int* d), (d))
COUNTED(cudaError_t, cudaMalloc, cudaSuccess, gDevice, 1, (void** p, size_t n), (p, n))
COUNTED(cudaError_t, cudaFree, cudaSuccess, gDevice, p ? -1 : 0, (void* p), (p))
COUNTED(cudaError_t, cudaHostAlloc, cudaSuccess, gPinned, 1, (void** p, size_t n, unsigned int flags), (p, n, flags))
COUNTED(cudaError_t, cudaMallocHost, cudaSuccess, gPinned, 1, (void** p, size_t n), (p, n))
COUNTED(cudaError_t, cudaFreeHost, cudaSuccess, gPinned, p ? -1 : 0, (void* p), (p))
COUNTED(cudaError_t, cudaStreamCreate, cudaSuccess, gStreams, 1, (cudaStream_t* s), (s))
COUNTED(cudaError_t, cudaStreamCreateWithFlags, cudaSuccess, gStreams, 1, (cudaStream_t* s, unsigned int flags),
        (s, flags))
COUNTED(cudaError_t, cudaStreamCreateWithPriority, cudaSuccess, gStreams, 1,
        (cudaStream_t* s, unsigned int flags, int priority), (s, flags, priority))
COUNTED(cudaError_t, cudaStreamDestroy, cudaSuccess, gStreams, -1, (cudaStream_t s), (s))
COUNTED(cudaError_t, cudaEventCreate, cudaSuccess, gEvents, 1, (cudaEvent_t* e), (e))
COUNTED(cudaError_t, cudaEventCreateWithFlags, cudaSuccess, gEvents, 1, (cudaEvent_t* e, unsigned int flags),
        (e, flags))
COUNTED(cudaError_t, cudaEventDestroy, cudaSuccess, gEvents, -1, (cudaEvent_t e), (e))
COUNTED(ncclResult_t, ncclMemAlloc, ncclSuccess, gNcclMemory, 1, (void** p, size_t n), (p, n))
COUNTED(ncclResult_t, ncclMemFree, ncclSuccess, gNcclMemory, p ? -1 : 0, (void* p), (p))
COUNTED(ncclResult_t, ncclCommWindowRegister, ncclSuccess, gWindows, 1,
        (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int flags), (comm, buff, size, win, flags))
COUNTED(ncclResult_t, ncclCommWindowDeregister, ncclSuccess, gWindows, -1, (ncclComm_t comm, ncclWindow_t win),
        (comm, win))
COUNTED(ncclResult_t, ncclDevCommCreate, ncclSuccess, gDevComms, 1,
        (ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* devComm), (comm, reqs, devComm))
COUNTED(ncclResult_t, ncclDevCommDestroy, ncclSuccess, gDevComms, -1, (ncclComm_t comm, ncclDevComm_t const* devComm),
        (comm, devComm))
