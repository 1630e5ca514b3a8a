/*************************************************************************
 * Counts of the resources a process holds through the CUDA runtime and
 * NCCL calls nccl-dcp makes (device and pinned host memory, streams,
 * events, ncclMemAlloc memory, windows, device communicators), for leak
 * tests that see a single forgotten allocation of any size.
 *
 * A test binary that links live_resources.cc defines those functions
 * itself: the executable comes first in the dynamic linker's search order,
 * so libnccl_dcp.so's calls (and the test's own) land here, are counted,
 * and go on to the real function (dlsym(RTLD_NEXT)). NCCL's CUDA runtime
 * calls for itself are not seen (its runtime is linked statically), but
 * its own calls of the NCCL functions counted here would be: ncclDevCommCreate
 * and ncclDevCommDestroy register and deregister a resource window
 * through them when the requirements ask for one (barriers), which
 * nccl-dcp's never do (NCCL 2.28.9, 2.30), so the counts balance.
 ************************************************************************/
#ifndef NCCL_DCP_TEST_LIVE_RESOURCES_H_
#define NCCL_DCP_TEST_LIVE_RESOURCES_H_

#include <string>

namespace nccl_dcp {
namespace test {

struct LiveResources {
  long deviceAllocations;  // cudaMalloc - cudaFree
  long pinnedHost;         // cudaHostAlloc / cudaMallocHost - cudaFreeHost
  long streams, events;
  long ncclMemory;         // ncclMemAlloc - ncclMemFree
  long windows;            // ncclCommWindowRegister - ncclCommWindowDeregister
  long devComms;           // ncclDevCommCreate - ncclDevCommDestroy
  long calls;              // counted calls made, failed ones included
};

LiveResources liveResources();

// "" when both hold the same resources (calls aside), else what differs.
std::string resourceDifference(const LiveResources& before, const LiveResources& after);

}  // namespace test
}  // namespace nccl_dcp

#endif  // NCCL_DCP_TEST_LIVE_RESOURCES_H_
