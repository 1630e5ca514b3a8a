/*************************************************************************
 * The whole use of nccl-dcp from a serving engine's point of view, one
 * process driving every local GPU:
 *   NCCL init -> context -> calls captured in a CUDA graph -> replay ->
 *   destroy, every result checked as we recommend.
 * Run: ./dcp_example   (uses every visible GPU; says "no GPU" and exits 3
 * without one)
 * Built by meson with the rest (build/examples/dcp_example), or against an
 * installed nccl-dcp (meson install), as .ci/run does:
 *   g++ -std=c++17 dcp_example.cc $(pkg-config --cflags --libs nccl-dcp) \
 *       -Wl,-rpath,$(pkg-config --variable=libdir nccl-dcp) -o dcp_example
 *   cmake -S examples -B build-example -DCMAKE_PREFIX_PATH=<prefix>   (CMakeLists.txt:
 *       find_package(nccl_dcp), target nccl_dcp::nccl_dcp); cmake --build build-example
 * Either brings NCCL's and the CUDA runtime's headers and libraries too.
 ************************************************************************/
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_dcp.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_CUDA(cmd)                                                               \
  do {                                                                                \
    cudaError_t e = (cmd);                                                            \
    if (e != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #cmd, cudaGetErrorString(e)); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

// nccl-dcp sets a message for every error it returns.
#define CHECK_DCP(cmd)                                                                \
  do {                                                                                \
    ncclResult_t r = (cmd);                                                           \
    if (r != ncclSuccess) {                                                           \
      fprintf(stderr, "%s:%d %s: %s: %s\n", __FILE__, __LINE__, #cmd, ncclGetErrorString(r), \
              ncclDcpGetLastError());                                                 \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

int main() {
  int nGpus = 0;
  if (cudaGetDeviceCount(&nGpus) != cudaSuccess || nGpus == 0) {
    fprintf(stderr, "dcp_example: no GPU\n");
    return 3;
  }
  // One DCP group over every local GPU: cp = nGpus ranks, each owning 16
  // of the H = 16 * cp heads of an MLA layer (head dim 512, bf16).
  const int cp = nGpus, localHeads = 16, headDim = 512, batch = 64;
  std::vector<int> devs(cp);
  for (int i = 0; i < cp; i++) devs[i] = i;
  std::vector<ncclComm_t> comms(cp);
  CHECK_DCP(ncclCommInitAll(comms.data(), cp, devs.data()));

  ncclDcpConfig_t cfg = NCCL_DCP_CONFIG_INITIALIZER;
  cfg.headDim = headDim;
  cfg.localHeads = localHeads;
  cfg.dtype = ncclBfloat16;
  cfg.lseBase = ncclDcpLseBase2;  // FlashMLA / FlashInfer LSEs
  cfg.maxBatch = 256;
  std::vector<ncclDcpContext_t> ctxs(cp);
  // One thread drives every GPU: the group variant groups NCCL's steps.
  CHECK_DCP(ncclDcpContextCreateGroup(cp, comms.data(), &cfg, ctxs.data()));

  const size_t inElems = (size_t)batch * cp * localHeads * headDim, outElems = (size_t)batch * localHeads * headDim;
  std::vector<void*> in(cp), out(cp);
  std::vector<float*> lse(cp), outLse(cp);
  std::vector<cudaStream_t> streams(cp);
  std::vector<cudaGraphExec_t> graphs(cp);
  std::vector<uint16_t> ones(inElems, 0x3f80);  // bf16 1.0: every source agrees, so out must be 1.0
  std::vector<float> lses((size_t)batch * cp * localHeads);
  for (size_t i = 0; i < lses.size(); i++) lses[i] = (float)(i % 7);
  for (int r = 0; r < cp; r++) {
    CHECK_CUDA(cudaSetDevice(r));
    CHECK_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc(&in[r], inElems * 2));
    CHECK_CUDA(cudaMalloc(&out[r], outElems * 2));
    CHECK_CUDA(cudaMalloc(&lse[r], lses.size() * 4));
    CHECK_CUDA(cudaMalloc(&outLse[r], (size_t)batch * localHeads * 4));
    CHECK_CUDA(cudaMemcpy(in[r], ones.data(), inElems * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(lse[r], lses.data(), lses.size() * 4, cudaMemcpyHostToDevice));
    // Capture one decode step's call (in a real engine: with the attention
    // kernel that produced the partials) and replay it.
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
    ncclResult_t res = ncclDcpA2aLseReduce(ctxs[r], in[r], lse[r], out[r], outLse[r], batch, nullptr, streams[r]);
    CHECK_CUDA(cudaStreamEndCapture(streams[r], &g));
    CHECK_DCP(res);
    CHECK_CUDA(cudaGraphInstantiate(&graphs[r], g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  }
  for (int step = 0; step < 100; step++)
    for (int r = 0; r < cp; r++) {
      CHECK_CUDA(cudaSetDevice(r));
      CHECK_CUDA(cudaGraphLaunch(graphs[r], streams[r]));
    }
  int wrong = 0;
  for (int r = 0; r < cp; r++) {
    CHECK_CUDA(cudaSetDevice(r));
    CHECK_CUDA(cudaStreamSynchronize(streams[r]));
    // A device-side wait that timed out (a peer never called) shows here.
    ncclResult_t async;
    CHECK_DCP(ncclDcpGetAsyncError(ctxs[r], &async));
    CHECK_DCP(async);
    std::vector<uint16_t> got(outElems);
    CHECK_CUDA(cudaMemcpy(got.data(), out[r], outElems * 2, cudaMemcpyDeviceToHost));
    for (uint16_t v : got) wrong += v != 0x3f80;
  }
  printf("dcp_example: %d rank(s), 100 graph replays of a %d-row call: %s\n", cp, batch, wrong ? "WRONG" : "ok");
  CHECK_DCP(ncclDcpContextDestroyGroup(cp, ctxs.data()));
  for (int r = 0; r < cp; r++) {
    CHECK_CUDA(cudaSetDevice(r));
    cudaGraphExecDestroy(graphs[r]);
    cudaFree(in[r]);
    cudaFree(out[r]);
    cudaFree(lse[r]);
    cudaFree(outLse[r]);
    cudaStreamDestroy(streams[r]);
    ncclCommDestroy(comms[r]);
  }
  return wrong ? 1 : 0;
}
