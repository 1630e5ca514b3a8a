/*************************************************************************
 * pdl_overlap: does a launch with programmatic stream serialization start
 * before its primary grid ends, when the primary triggers at once?
 *
 *   primary    one block of 32 threads: griddepcontrol.launch_dependents,
 *              then spins -u ns, then writes a marker (and its time)
 *   secondary  launched with cudaLaunchAttributeProgrammaticStreamSerialization,
 *              with or without cudaLaunchAttributeCooperative, 1 or half
 *              the SMs' blocks of 512 threads; block 0 reads the marker
 *              WITHOUT griddepcontrol.wait and records its start time
 *
 * A secondary that saw no marker started early (overlap). The fused kernel
 * is a cooperative launch: if it never overlaps, its grid-dependency wait
 * guards nothing that a test can observe (test/plants: pdl_wait_dropped).
 * Prints one line per (launch, grid): early starts out of the trials, and
 * the median of (secondary start - marker time) in us.
 *
 *   ninja -C BUILD perf/pdl_overlap && BUILD/perf/pdl_overlap [delay ns (50000)]
 ************************************************************************/
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#define CHECK(cmd)                                                                                    \
  do {                                                                                                \
    cudaError_t e_ = (cmd);                                                                           \
    if (e_ != cudaSuccess) {                                                                          \
      fprintf(stderr, "pdl_overlap: %s:%d %s: %s\n", __FILE__, __LINE__, #cmd, cudaGetErrorString(e_)); \
      exit(2);                                                                                        \
    }                                                                                                 \
  } while (0)

__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void primary(volatile int* marker, volatile uint64_t* markedAt, uint64_t delayNs) {
  asm volatile("griddepcontrol.launch_dependents;");
  const uint64_t t0 = now();
  while (now() - t0 < delayNs) {
  }
  if (threadIdx.x == 0) {
    *markedAt = now();
    __threadfence();
    *marker = 1;
  }
}

__global__ void __launch_bounds__(512, 1) secondary(volatile int* marker, int* seen, uint64_t* startedAt) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *startedAt = now();
    *seen = *marker;
  }
}

int main(int argc, char** argv) {
  const uint64_t delayNs = argc > 1 ? strtoull(argv[1], nullptr, 10) : 50000;
  const int trials = 50;
  int sms;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int* marker;
  uint64_t* times;  // [0] marked, [1] started
  int* seen;
  CHECK(cudaMalloc(&marker, sizeof(int)));
  CHECK(cudaMalloc(&seen, sizeof(int)));
  CHECK(cudaMalloc(&times, 2 * sizeof(uint64_t)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  printf("pdl_overlap: primary spins %llu ns after its trigger; %d trials per line\n", (unsigned long long)delayNs,
         trials);
  for (int coop = 0; coop < 2; coop++) {
    for (int grid : {1, sms / 2}) {
      int early = 0;
      std::vector<double> lagUs;
      for (int t = 0; t < trials; t++) {
        CHECK(cudaMemsetAsync(marker, 0, sizeof(int), s));
        CHECK(cudaMemsetAsync(seen, 0xff, sizeof(int), s));
        primary<<<1, 32, 0, s>>>(marker, times, delayNs);
        CHECK(cudaGetLastError());
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(grid);
        cfg.blockDim = dim3(512);
        cfg.stream = s;
        cudaLaunchAttribute attrs[2];
        attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[0].val.programmaticStreamSerializationAllowed = 1;
        attrs[1].id = cudaLaunchAttributeCooperative;
        attrs[1].val.cooperative = 1;
        cfg.attrs = attrs;
        cfg.numAttrs = coop ? 2 : 1;
        CHECK(cudaLaunchKernelEx(&cfg, secondary, (volatile int*)marker, seen, times + 1));
        CHECK(cudaStreamSynchronize(s));
        int saw;
        uint64_t at[2];
        CHECK(cudaMemcpy(&saw, seen, sizeof(int), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(at, times, sizeof(at), cudaMemcpyDeviceToHost));
        early += saw == 0;
        lagUs.push_back(((double)(int64_t)(at[1] - at[0])) / 1000.0);
      }
      std::sort(lagUs.begin(), lagUs.end());
      printf("%-11s grid %3d: %2d of %d started before the marker; start - marker median %+.2f us\n",
             coop ? "cooperative" : "plain", grid, early, trials, lagUs[trials / 2]);
    }
  }
  return 0;
}
