// Probe (GPU machine, one GPU): host time per eager ncclDcpA2aLseReduce
// beside the CUDA calls it is made of, to see where an eager call's
// microseconds go. Build (from the repository root, after the meson build):
//   nvcc -O2 -o host_cost scripts/probes/host_cost.cu -Iinclude -Ibuild-gpu \
//     -I<nccl>/include -Lbuild-gpu -lnccl_dcp -L<nccl>/lib -l:libnccl.so.2
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>

#include <chrono>
#include <functional>

#include "nccl_dcp.h"

__global__ void empty() {}

#define CHECK(x)                                                             \
  do {                                                                       \
    if ((x) != 0) {                                                          \
      printf("%s failed at line %d: %s\n", #x, __LINE__, ncclDcpGetLastError()); \
      return 1;                                                              \
    }                                                                        \
  } while (0)

// Microseconds of host time per call of f, over 20 loops of 1000 (the
// stream drained between loops, not timed); the median loop.
double usPerCall(cudaStream_t s, const std::function<void()>& f) {
  double best[20];
  for (int l = 0; l < 20; l++) {
    cudaStreamSynchronize(s);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; i++) f();
    best[l] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 1000;
  }
  cudaStreamSynchronize(s);
  for (int i = 0; i < 20; i++)
    for (int j = i + 1; j < 20; j++)
      if (best[j] < best[i]) std::swap(best[i], best[j]);
  return best[10];
}

int main() {
  cudaSetDevice(0);
  ncclComm_t comm;
  int dev = 0;
  CHECK(ncclCommInitAll(&comm, 1, &dev));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  ncclDcpConfig_t c = NCCL_DCP_CONFIG_INITIALIZER;
  c.headDim = 512;
  c.localHeads = 16;
  c.dtype = ncclBfloat16;
  c.lseBase = ncclDcpLseBaseE;
  ncclDcpContext_t ctx;
  CHECK(ncclDcpContextCreate(comm, &c, &ctx));
  const int batch = 32;
  void *in, *out;
  float *lse, *outLse;
  cudaMalloc(&in, batch * 16 * 512 * 2);
  cudaMalloc(&out, batch * 16 * 512 * 2);
  cudaMalloc(&lse, batch * 16 * 4);
  cudaMalloc(&outLse, batch * 16 * 4);
  cudaMemset(in, 0, batch * 16 * 512 * 2);
  cudaMemset(lse, 0, batch * 16 * 4);
  CHECK(ncclDcpA2aLseReduce(ctx, in, lse, out, outLse, batch, nullptr, s));
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeCooperative;
  attrs[0].val.cooperative = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(8);
  lc.blockDim = dim3(512);
  lc.stream = s;
  lc.attrs = attrs;
  printf("host us per call (median of 20 loops of 1000)\n");
  printf("  empty<<<8, 512>>>                       %6.2f\n", usPerCall(s, [&] { empty<<<8, 512, 0, s>>>(); }));
  lc.numAttrs = 0;
  printf("  cudaLaunchKernelEx, no attributes       %6.2f\n", usPerCall(s, [&] { cudaLaunchKernelEx(&lc, empty); }));
  lc.numAttrs = 1;
  printf("  cudaLaunchKernelEx, cooperative         %6.2f\n", usPerCall(s, [&] { cudaLaunchKernelEx(&lc, empty); }));
  lc.numAttrs = 2;
  printf("  cudaLaunchKernelEx, cooperative + PDL   %6.2f\n", usPerCall(s, [&] { cudaLaunchKernelEx(&lc, empty); }));
  printf("  cudaEventRecord                         %6.2f\n", usPerCall(s, [&] { cudaEventRecord(ev, s); }));
  cudaStreamCaptureStatus st;
  unsigned long long id;
  printf("  cudaStreamGetCaptureInfo                %6.2f\n",
         usPerCall(s, [&] { cudaStreamGetCaptureInfo(s, &st, &id); }));
  int d;
  printf("  cudaGetDevice + cudaSetDevice           %6.2f\n", usPerCall(s, [&] {
           cudaGetDevice(&d);
           cudaSetDevice(d);
         }));
  printf("  ncclDcpA2aLseReduce, batch 32, 1 rank   %6.2f\n",
         usPerCall(s, [&] { ncclDcpA2aLseReduce(ctx, in, lse, out, outLse, batch, nullptr, s); }));
  CHECK(ncclDcpContextDestroy(ctx));
  ncclCommDestroy(comm);
  return 0;
}
