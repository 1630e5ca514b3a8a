/*************************************************************************
 * dcp_a2a_lse_reduce_perf: the fused collective against NCCL's path (an
 * all-to-all of the partials + a combine kernel) on the same data, in the
 * same run, nccl-tests style.
 *
 *   real ranks: threads (-t) x GPUs per thread (-g) NCCL ranks in this
 *               process; baseline = ncclAlltoAll (data + LSE) + combine
 *   loopback:   -V N virtual ranks on one GPU (one cooperative launch);
 *               baseline = one copy kernel doing every rank's all-to-all +
 *               one combine kernel for every rank, and the ideal time of
 *               the bytes moved at the device-to-device copy bandwidth
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "launch.h"
#include "loopback.h"
#include "nccl_dcp.h"
#include "reference.h"

using namespace nccl_dcp;
using namespace nccl_dcp::perf;

namespace {

struct Failure {
  int code;
};

#define CUDA_OR_DIE(cmd)                                                                                    \
  do {                                                                                                      \
    cudaError_t e_ = (cmd);                                                                                 \
    if (e_ != cudaSuccess) {                                                                                \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #cmd, cudaGetErrorString(e_));                  \
      throw Failure{kExitFailed};                                                                           \
    }                                                                                                       \
  } while (0)

#define NCCL_OR_DIE(cmd)                                                                                    \
  do {                                                                                                      \
    ncclResult_t r_ = (cmd);                                                                                \
    if (r_ != ncclSuccess) {                                                                                \
      fprintf(stderr, "%s:%d %s: %s | %s\n", __FILE__, __LINE__, #cmd, ncclGetErrorString(r_),              \
              ncclDcpGetLastError()[0] ? ncclDcpGetLastError() : ncclGetLastError(nullptr));               \
      throw Failure{kExitFailed};                                                                           \
    }                                                                                                       \
  } while (0)

// ---- timing: CUDA graphs of -G calls, events around each replay, median.

// One call of an operation on one rank: `grouped` runs inside an
// ncclGroupStart/End spanning the ranks this thread drives (NCCL needs that
// when one thread drives several GPUs), `after` once the group has ended.
using Enqueue = std::function<void(int rank, cudaStream_t)>;
struct Op {
  Enqueue grouped, after;
};

void enqueueAll(const Op& op, const std::vector<int>& devs, const std::vector<cudaStream_t>& streams,
                const std::vector<int>& ranks) {
  NCCL_OR_DIE(ncclGroupStart());
  for (size_t i = 0; i < streams.size(); i++) {
    CUDA_OR_DIE(cudaSetDevice(devs[i]));
    op.grouped(ranks[i], streams[i]);
  }
  NCCL_OR_DIE(ncclGroupEnd());
  if (op.after)
    for (size_t i = 0; i < streams.size(); i++) {
      CUDA_OR_DIE(cudaSetDevice(devs[i]));
      op.after(ranks[i], streams[i]);
    }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Times op on every rank's stream (all ranks launched each iteration, as a
// collective needs). Graphs are captured on every stream at once, the ranks'
// calls grouped, as nccl-tests does. Returns each rank's median us per call.
std::vector<double> timeRanks(const Args& a, const std::vector<int>& devs, const std::vector<cudaStream_t>& streams,
                              const std::vector<int>& ranks, const Op& op) {
  const int n = (int)streams.size();
  const int calls = std::max(a.graphCalls, 1);
  std::vector<cudaGraphExec_t> execs(n, nullptr);
  if (a.graphCalls > 0) {
    for (int i = 0; i < n; i++) {
      CUDA_OR_DIE(cudaSetDevice(devs[i]));
      CUDA_OR_DIE(cudaStreamBeginCapture(streams[i], cudaStreamCaptureModeThreadLocal));
    }
    for (int c = 0; c < a.graphCalls; c++) enqueueAll(op, devs, streams, ranks);
    for (int i = 0; i < n; i++) {
      CUDA_OR_DIE(cudaSetDevice(devs[i]));
      cudaGraph_t g;
      CUDA_OR_DIE(cudaStreamEndCapture(streams[i], &g));
      CUDA_OR_DIE(cudaGraphInstantiate(&execs[i], g, 0));
      CUDA_OR_DIE(cudaGraphDestroy(g));
    }
  }
  auto launchAll = [&]() {
    if (a.graphCalls == 0) return enqueueAll(op, devs, streams, ranks);
    for (int i = 0; i < n; i++) {
      CUDA_OR_DIE(cudaSetDevice(devs[i]));
      CUDA_OR_DIE(cudaGraphLaunch(execs[i], streams[i]));
    }
  };
  for (int w = 0; w < a.warmup; w++) launchAll();
  std::vector<cudaEvent_t> start(n), stop(n);
  for (int i = 0; i < n; i++) {
    CUDA_OR_DIE(cudaSetDevice(devs[i]));
    CUDA_OR_DIE(cudaEventCreate(&start[i]));
    CUDA_OR_DIE(cudaEventCreate(&stop[i]));
  }
  std::vector<std::vector<double>> samples(n);
  for (int it = 0; it < a.iters; it++) {
    for (int i = 0; i < n; i++) {
      CUDA_OR_DIE(cudaSetDevice(devs[i]));
      CUDA_OR_DIE(cudaEventRecord(start[i], streams[i]));
    }
    launchAll();
    for (int i = 0; i < n; i++) {
      CUDA_OR_DIE(cudaSetDevice(devs[i]));
      CUDA_OR_DIE(cudaEventRecord(stop[i], streams[i]));
    }
    for (int i = 0; i < n; i++) {
      CUDA_OR_DIE(cudaSetDevice(devs[i]));
      CUDA_OR_DIE(cudaEventSynchronize(stop[i]));
      float ms = 0;
      CUDA_OR_DIE(cudaEventElapsedTime(&ms, start[i], stop[i]));
      samples[i].push_back(ms * 1e3 / calls);
    }
  }
  std::vector<double> med(n);
  for (int i = 0; i < n; i++) {
    CUDA_OR_DIE(cudaSetDevice(devs[i]));
    med[i] = median(samples[i]);
    cudaEventDestroy(start[i]);
    cudaEventDestroy(stop[i]);
    if (execs[i]) cudaGraphExecDestroy(execs[i]);
  }
  return med;
}

double aggregate(const Args& a, const std::vector<double>& v) {
  if (v.empty()) return 0;
  switch (a.aggregate) {
    case 0: return v[0];
    case 2: return *std::min_element(v.begin(), v.end());
    case 3: return *std::max_element(v.begin(), v.end());
    default: {
      double s = 0;
      for (double x : v) s += x;
      return s / v.size();
    }
  }
}

// Device-to-device copy bandwidth (read + write counted), median of 10.
double measureCopyGBps() {
  const size_t bytes = size_t(1) << 30;
  void *src, *dst;
  CUDA_OR_DIE(cudaMalloc(&src, bytes));
  CUDA_OR_DIE(cudaMalloc(&dst, bytes));
  CUDA_OR_DIE(cudaMemset(src, 1, bytes));
  cudaEvent_t e0, e1;
  CUDA_OR_DIE(cudaEventCreate(&e0));
  CUDA_OR_DIE(cudaEventCreate(&e1));
  std::vector<double> gbps;
  for (int i = 0; i < 12; i++) {
    CUDA_OR_DIE(cudaEventRecord(e0));
    CUDA_OR_DIE(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
    CUDA_OR_DIE(cudaEventRecord(e1));
    CUDA_OR_DIE(cudaEventSynchronize(e1));
    float ms;
    CUDA_OR_DIE(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) gbps.push_back(2.0 * bytes / (ms * 1e6));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(src);
  cudaFree(dst);
  return median(gbps);
}

// ---- data

ncclDcpConfig_t configOf(const Args& a, int capacity) {
  ncclDcpConfig_t c = NCCL_DCP_CONFIG_INITIALIZER;
  c.headDim = a.headDim;
  c.localHeads = a.localHeads;
  c.dtype = a.dtype;
  c.lseBase = a.lseBase;
  c.maxBatch = capacity;
  c.protocol = a.protocol;
  return c;
}

// Random inputs of one rank for maxRows rows, packed [B][cp][Hl][D]: a
// random block tiled at a rank-dependent offset (never zeros), random LSEs.
struct HostInputs {
  std::vector<uint8_t> partialOut;
  std::vector<float> partialLse;
};

HostInputs makeHostInputs(const Config& cfg, int cp, int64_t rows, int rank) {
  HostInputs h;
  const size_t elems = (size_t)rows * cp * cfg.localHeads * cfg.headDim;
  static std::vector<uint8_t> block;
  const size_t blockElems = 1 << 22;
  if (block.empty()) {
    std::mt19937 rng(12345);
    std::uniform_real_distribution<float> v(-1.f, 1.f);
    block.resize(blockElems * 4);
    for (size_t i = 0; i < blockElems; i++) storeElement(cfg.dtype, block.data(), i, v(rng));
  }
  h.partialOut.resize(elems * cfg.eltSize);
  const size_t blockBytes = blockElems * cfg.eltSize, shift = (size_t)rank * 4096 * cfg.eltSize % blockBytes;
  for (size_t off = 0; off < h.partialOut.size(); off += blockBytes) {
    const size_t n = std::min(blockBytes, h.partialOut.size() - off);
    for (size_t k = 0; k < n; k += blockBytes - shift) {
      const size_t take = std::min(n - k, blockBytes - ((shift + k) % blockBytes));
      memcpy(&h.partialOut[off + k], &block[(shift + k) % blockBytes], take);
    }
  }
  std::mt19937 rng(777 + rank);
  std::uniform_real_distribution<float> l(-8.f, 8.f);
  h.partialLse.resize((size_t)rows * cp * cfg.localHeads);
  for (float& x : h.partialLse) x = l(rng);
  return h;
}

// Outputs of every rank compared with the reference: wrong element count
// (the tolerance of the tests, countMismatches in src/reference.h).
int64_t countWrong(const Config& cfg, int cp, int64_t rows, const std::vector<HostInputs>& in,
                   const std::vector<std::vector<uint8_t>>& out, const std::vector<std::vector<float>>& outLse) {
  const Strides s = packedStrides(cfg, cp);
  std::vector<std::vector<uint8_t>> refOut(cp, std::vector<uint8_t>(out[0].size()));
  std::vector<std::vector<float>> refLse(cp, std::vector<float>(outLse[0].size()));
  std::vector<CallBuffers> bufs(cp);
  for (int r = 0; r < cp; r++) bufs[r] = {in[r].partialOut.data(), in[r].partialLse.data(), refOut[r].data(), refLse[r].data()};
  referenceA2aLseReduce(cfg, cp, (int)rows, s, bufs.data());
  std::vector<CallBuffers> gotBufs(cp);
  for (int r = 0; r < cp; r++)
    gotBufs[r] = {nullptr, nullptr, const_cast<uint8_t*>(out[r].data()), const_cast<float*>(outLse[r].data())};
  return (int64_t)countMismatches(cfg, cp, (int)rows, s, gotBufs.data(), bufs.data(), nullptr);
}

// ---- loopback: -V N virtual ranks on one GPU

int runLoopback(const Args& a) {
  const int cp = a.virtualRanks;
  const int capacity = a.maxBatch > 0 ? a.maxBatch : (int)std::max<int64_t>(a.maxRows, 1);
  const ncclDcpConfig_t c = configOf(a, capacity);
  std::unique_ptr<Loopback> lb;
  NCCL_OR_DIE(Loopback::create(&c, cp, &lb));
  const Config& cfg = lb->config();
  const int64_t maxRows = std::max<int64_t>(a.maxRows, 1);
  const size_t headBytes = (size_t)cfg.headDim * cfg.eltSize;
  const size_t inBytes = maxRows * cp * cfg.localHeads * headBytes, lseBytes = maxRows * cp * cfg.localHeads * 4;
  const size_t outBytes = maxRows * cfg.localHeads * headBytes, outLseBytes = maxRows * cfg.localHeads * 4;

  cudaDeviceProp prop;
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, 0));
  const double copyGBps = measureCopyGBps();
  printf("# nccl-dcp %d  loopback: %d virtual ranks on %s; device-to-device copy %.0f GB/s (read + write)\n",
         NCCL_DCP_VERSION_CODE, cp, prop.name, copyGBps);
  printf("# baseline: one copy kernel doing every virtual rank's all-to-all + one combine kernel for all\n");

  // Every virtual rank's tensors in one allocation each, rank r at + r * size.
  char *in, *out, *outBase, *recv;
  float *lse, *outLse, *outLseBase, *recvLse;
  CUDA_OR_DIE(cudaMalloc(&in, cp * inBytes));
  CUDA_OR_DIE(cudaMalloc(&lse, cp * lseBytes));
  CUDA_OR_DIE(cudaMalloc(&out, cp * outBytes));
  CUDA_OR_DIE(cudaMalloc(&outLse, cp * outLseBytes));
  CUDA_OR_DIE(cudaMalloc(&outBase, cp * outBytes));
  CUDA_OR_DIE(cudaMalloc(&outLseBase, cp * outLseBytes));
  CUDA_OR_DIE(cudaMalloc(&recv, (size_t)cp * cp * outBytes));
  CUDA_OR_DIE(cudaMalloc(&recvLse, (size_t)cp * cp * outLseBytes));
  std::vector<HostInputs> host;
  for (int r = 0; r < cp; r++) {
    host.push_back(makeHostInputs(cfg, cp, maxRows, r));
    CUDA_OR_DIE(cudaMemcpy(in + r * inBytes, host[r].partialOut.data(), inBytes, cudaMemcpyHostToDevice));
    CUDA_OR_DIE(cudaMemcpy((char*)lse + r * lseBytes, host[r].partialLse.data(), lseBytes, cudaMemcpyHostToDevice));
  }
  std::vector<CallBuffers> bufs(cp);
  for (int r = 0; r < cp; r++)
    bufs[r] = {in + r * inBytes, (float*)((char*)lse + r * lseBytes), out + r * outBytes,
               (float*)((char*)outLse + r * outLseBytes)};
  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Strides packed = packedStrides(cfg, cp);

  auto fused = [&](int64_t rows) {
    return Op{[&, rows](int, cudaStream_t s) { NCCL_OR_DIE(lb->call(bufs.data(), (int)rows, nullptr, s)); }, nullptr};
  };
  auto baseline = [&](int64_t rows) {
    return Op{[&, rows](int, cudaStream_t s) {
      // The all-to-all: source c writes its block for every destination d
      // into d's receive buffer [src][rows][Hl][D].
      PackParams p = packLaunch(cfg, cp, (int)rows, in, lse, recv, recvLse, packed);
      p.peerUnits = cp * rows * cfg.localHeads;
      p.copies = cp;
      p.inCopyBytes = inBytes;
      p.lseCopyBytes = lseBytes;
      p.sendCopyBytes = rows * cfg.localHeads * headBytes;
      p.sendLseCopyBytes = rows * cfg.localHeads * 4;
      NCCL_OR_DIE(launchPack(p, s));
      CombineParams m = combineLaunch(cfg, cp, (int)rows, recv, recvLse, outBase, outLseBase, packed);
      m.copies = cp;
      m.recvCopyBytes = cp * rows * cfg.localHeads * headBytes;
      m.recvLseCopyBytes = cp * rows * cfg.localHeads * 4;
      m.outCopyBytes = outBytes;
      m.outLseCopyBytes = outLseBytes;
      NCCL_OR_DIE(launchCombine(m, s));
    }, nullptr};
  };
  auto check = [&](int64_t rows, char* o, float* ol, const Op& op) -> int64_t {
    // Poison on the stream the call runs on (a non-blocking stream does not
    // wait for the legacy default stream).
    CUDA_OR_DIE(cudaMemsetAsync(o, 0xff, cp * outBytes, stream));
    CUDA_OR_DIE(cudaMemsetAsync(ol, 0xff, cp * outLseBytes, stream));
    enqueueAll(op, {0}, {stream}, {0});
    CUDA_OR_DIE(cudaStreamSynchronize(stream));
    std::vector<std::vector<uint8_t>> got(cp, std::vector<uint8_t>(rows * cfg.localHeads * headBytes));
    std::vector<std::vector<float>> gotLse(cp, std::vector<float>(rows * cfg.localHeads));
    for (int r = 0; r < cp; r++) {
      CUDA_OR_DIE(cudaMemcpy(got[r].data(), o + r * outBytes, got[r].size(), cudaMemcpyDeviceToHost));
      CUDA_OR_DIE(cudaMemcpy(gotLse[r].data(), (char*)ol + r * outLseBytes, gotLse[r].size() * 4, cudaMemcpyDeviceToHost));
    }
    return countWrong(cfg, cp, rows, host, got, gotLse);
  };

  printf("%s", tableHeader(a, true).c_str());
  std::vector<Row> rows;
  bool anyWrong = false;
  for (int64_t b : batchSweep(a)) {
    Row r;
    r.rows = b;
    r.bytes = b * cp * cfg.localHeads * headBytes;
    r.fusedUs = timeRanks(a, {0}, {stream}, {0}, fused(b))[0];
    if (a.baseline) r.baseUs = timeRanks(a, {0}, {stream}, {0}, baseline(b))[0];
    if (a.check && b > 0) {
      r.fusedWrong = r.baseWrong = 0;
      for (int k = 0; k < a.check; k++) {
        r.fusedWrong += check(b, out, outLse, fused(b));
        if (a.baseline) r.baseWrong += check(b, outBase, outLseBase, baseline(b));
      }
      anyWrong = anyWrong || r.fusedWrong || r.baseWrong > 0;
    }
    // Ideal: inputs read, payload written to and read from the workspaces,
    // outputs written, at the measured copy bandwidth.
    const double unit = (double)headBytes + 4;
    const double idealBytes = cp * (double)b * cp * cfg.localHeads * unit + 2.0 * cp * (cp - 1) * b * cfg.localHeads * unit +
                              cp * (double)b * cfg.localHeads * unit;
    r.idealUs = idealBytes / (copyGBps * 1e3);
    fillBandwidths(&r, cp);
    printf("%s", formatRow(r, a.baseline, true).c_str());
    fflush(stdout);
    rows.push_back(r);
  }
  NCCL_OR_DIE(lb->asyncError());
  if (!a.json.empty()) {
    FILE* f = fopen(a.json.c_str(), "w");
    if (f) {
      fputs(jsonReport(a, "loopback", prop.name, cp, copyGBps, rows).c_str(), f);
      fclose(f);
    }
  }
  for (void* p : {(void*)in, (void*)lse, (void*)out, (void*)outLse, (void*)outBase, (void*)outLseBase, (void*)recv,
                  (void*)recvLse})
    cudaFree(p);
  cudaStreamDestroy(stream);
  return anyWrong ? kExitWrong : kExitOk;
}

// ---- real ranks: threads x GPUs per thread in this process

struct Barrier {
  std::mutex m;
  std::condition_variable cv;
  int n, waiting = 0, generation = 0;
  explicit Barrier(int count) : n(count) {}
  void wait() {
    std::unique_lock<std::mutex> l(m);
    const int gen = generation;
    if (++waiting == n) {
      waiting = 0;
      generation++;
      cv.notify_all();
    } else {
      cv.wait(l, [&] { return gen != generation; });
    }
  }
};

struct RankState {
  int rank, dev;
  ncclComm_t comm = nullptr;
  ncclDcpContext_t ctx = nullptr;
  cudaStream_t stream = nullptr;
  char *in = nullptr, *inPeerMajor = nullptr, *out = nullptr, *outBase = nullptr, *recv = nullptr;
  float *lse = nullptr, *lsePeerMajor = nullptr, *outLse = nullptr, *outLseBase = nullptr, *recvLse = nullptr;
};

int runRanks(const Args& a, int nDevices) {
  const int nRanks = a.threads * a.gpusPerThread;
  if (nRanks > nDevices) {
    fprintf(stderr, "nccl-dcp perf: -t %d x -g %d = %d ranks, but only %d GPU(s)\n", a.threads, a.gpusPerThread,
            nRanks, nDevices);
    return kExitBadArgs;
  }
  const int capacity = a.maxBatch > 0 ? a.maxBatch : (int)std::max<int64_t>(a.maxRows, 1);
  const ncclDcpConfig_t c = configOf(a, capacity);
  Config cfg;
  Env noEnv;
  NCCL_OR_DIE(resolveConfig(&c, noEnv, &cfg));
  const int64_t maxRows = std::max<int64_t>(a.maxRows, 1);
  const size_t headBytes = (size_t)cfg.headDim * cfg.eltSize;
  const size_t inBytes = maxRows * nRanks * cfg.localHeads * headBytes, lseBytes = maxRows * nRanks * cfg.localHeads * 4;
  const size_t outBytes = maxRows * cfg.localHeads * headBytes, outLseBytes = maxRows * cfg.localHeads * 4;

  ncclUniqueId id;
  NCCL_OR_DIE(ncclGetUniqueId(&id));
  std::vector<RankState> st(nRanks);
  std::vector<HostInputs> host(nRanks);
  for (int r = 0; r < nRanks; r++) {
    st[r].rank = r;
    st[r].dev = r;
    host[r] = makeHostInputs(cfg, nRanks, maxRows, r);
  }
  cudaDeviceProp prop;
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, 0));
  printf("# nccl-dcp %d  %d rank(s): %d thread(s) x %d GPU(s) on %s\n", NCCL_DCP_VERSION_CODE, nRanks, a.threads,
         a.gpusPerThread, prop.name);

  const std::vector<int64_t> sweep = batchSweep(a);
  std::vector<std::vector<double>> fusedUs(sweep.size(), std::vector<double>(nRanks)),
      baseUs(sweep.size(), std::vector<double>(nRanks));
  std::vector<int64_t> fusedWrong(sweep.size(), 0), baseWrong(sweep.size(), 0);
  Barrier barrier(a.threads);
  std::vector<int> failed(a.threads, 0);
  std::vector<std::string> topoLines(nRanks);

  auto worker = [&](int t) {
    try {
      std::vector<RankState*> mine;
      for (int g = 0; g < a.gpusPerThread; g++) mine.push_back(&st[t * a.gpusPerThread + g]);
      NCCL_OR_DIE(ncclGroupStart());
      for (RankState* s : mine) {
        CUDA_OR_DIE(cudaSetDevice(s->dev));
        NCCL_OR_DIE(ncclCommInitRank(&s->comm, nRanks, id, s->rank));
      }
      NCCL_OR_DIE(ncclGroupEnd());
      std::vector<ncclComm_t> comms;
      std::vector<ncclDcpContext_t> ctxs(mine.size());
      for (RankState* s : mine) comms.push_back(s->comm);
      NCCL_OR_DIE(ncclDcpContextCreateGroup((int)comms.size(), comms.data(), &c, ctxs.data()));
      for (size_t i = 0; i < mine.size(); i++) {
        RankState* s = mine[i];
        s->ctx = ctxs[i];
        CUDA_OR_DIE(cudaSetDevice(s->dev));
        CUDA_OR_DIE(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
        CUDA_OR_DIE(cudaMalloc(&s->in, inBytes));
        CUDA_OR_DIE(cudaMalloc(&s->inPeerMajor, inBytes));
        CUDA_OR_DIE(cudaMalloc(&s->lse, lseBytes));
        CUDA_OR_DIE(cudaMalloc(&s->lsePeerMajor, lseBytes));
        CUDA_OR_DIE(cudaMalloc(&s->out, outBytes));
        CUDA_OR_DIE(cudaMalloc(&s->outBase, outBytes));
        CUDA_OR_DIE(cudaMalloc(&s->outLse, outLseBytes));
        CUDA_OR_DIE(cudaMalloc(&s->outLseBase, outLseBytes));
        CUDA_OR_DIE(cudaMalloc(&s->recv, inBytes));
        CUDA_OR_DIE(cudaMalloc(&s->recvLse, lseBytes));
        CUDA_OR_DIE(cudaMemcpy(s->in, host[s->rank].partialOut.data(), inBytes, cudaMemcpyHostToDevice));
        CUDA_OR_DIE(cudaMemcpy(s->lse, host[s->rank].partialLse.data(), lseBytes, cudaMemcpyHostToDevice));
        ncclDcpTopology_t topo = NCCL_DCP_TOPOLOGY_INITIALIZER;
        NCCL_OR_DIE(ncclDcpGetTopology(s->ctx, &topo));
        char line[256];
        snprintf(line, sizeof(line), "#  rank %d  GPU %d  %s  path %s  protocol %s  LSA team %d of %d", s->rank, s->dev,
                 topo.busId[s->rank], topo.path == ncclDcpPathFused ? "fused" : "fallback",
                 protocolFlag(topo.protocol), topo.lsaSize, topo.nRanks);
        topoLines[s->rank] = line;
      }
      std::vector<int> devs, ranks;
      std::vector<cudaStream_t> streams;
      for (RankState* s : mine) {
        devs.push_back(s->dev);
        ranks.push_back(s->rank);
        streams.push_back(s->stream);
      }
      barrier.wait();
      if (t == 0) {
        for (const std::string& l : topoLines) printf("%s\n", l.c_str());
        printf("%s", tableHeader(a, false).c_str());
      }
      for (size_t k = 0; k < sweep.size(); k++) {
        const int64_t b = sweep[k];
        // The baseline gets its inputs peer-major, the layout ncclAlltoAll
        // sends from: no pack in its timed path.
        for (RankState* s : mine) {
          CUDA_OR_DIE(cudaSetDevice(s->dev));
          const PackParams p = packLaunch(cfg, nRanks, (int)b, s->in, s->lse, s->inPeerMajor, s->lsePeerMajor,
                                          packedStrides(cfg, nRanks));
          NCCL_OR_DIE(launchPack(p, s->stream));
          CUDA_OR_DIE(cudaStreamSynchronize(s->stream));
        }
        auto byRank = [&](int rank) { return &st[rank]; };
        Op fused;
        fused.grouped = [&](int rank, cudaStream_t strm) {
          RankState* s = byRank(rank);
          NCCL_OR_DIE(ncclDcpA2aLseReduce(s->ctx, s->in, s->lse, s->out, s->outLse, (int)b, nullptr, strm));
        };
        Op base;
        base.grouped = [&](int rank, cudaStream_t strm) {
          RankState* s = byRank(rank);
          const size_t units = (size_t)b * cfg.localHeads;
          NCCL_OR_DIE(ncclAlltoAll(s->inPeerMajor, s->recv, units * cfg.headDim, cfg.dtype, s->comm, strm));
          NCCL_OR_DIE(ncclAlltoAll(s->lsePeerMajor, s->recvLse, units, ncclFloat32, s->comm, strm));
        };
        base.after = [&](int rank, cudaStream_t strm) {
          RankState* s = byRank(rank);
          const CombineParams m = combineLaunch(cfg, nRanks, (int)b, s->recv, s->recvLse, s->outBase, s->outLseBase,
                                                packedStrides(cfg, nRanks));
          NCCL_OR_DIE(launchCombine(m, strm));
        };
        barrier.wait();
        std::vector<double> f = timeRanks(a, devs, streams, ranks, fused);
        barrier.wait();
        std::vector<double> bl;
        if (a.baseline) bl = timeRanks(a, devs, streams, ranks, base);
        for (size_t i = 0; i < mine.size(); i++) {
          fusedUs[k][mine[i]->rank] = f[i];
          if (a.baseline) baseUs[k][mine[i]->rank] = bl[i];
        }
        if (a.check && b > 0) {
          for (int pass = 0; pass < a.check; pass++) {
            for (int which = 0; which < 1 + a.baseline; which++) {
              for (RankState* s : mine) {
                CUDA_OR_DIE(cudaSetDevice(s->dev));
                CUDA_OR_DIE(cudaMemsetAsync(which ? s->outBase : s->out, 0xff, outBytes, s->stream));
                CUDA_OR_DIE(cudaMemsetAsync(which ? s->outLseBase : s->outLse, 0xff, outLseBytes, s->stream));
              }
              barrier.wait();
              enqueueAll(which ? base : fused, devs, streams, ranks);
              for (RankState* s : mine) {
                CUDA_OR_DIE(cudaSetDevice(s->dev));
                CUDA_OR_DIE(cudaStreamSynchronize(s->stream));
              }
              barrier.wait();
              if (t == 0) {
                std::vector<std::vector<uint8_t>> got(nRanks, std::vector<uint8_t>(b * cfg.localHeads * headBytes));
                std::vector<std::vector<float>> gotLse(nRanks, std::vector<float>(b * cfg.localHeads));
                for (int r = 0; r < nRanks; r++) {
                  CUDA_OR_DIE(cudaSetDevice(st[r].dev));
                  CUDA_OR_DIE(cudaMemcpy(got[r].data(), which ? st[r].outBase : st[r].out, got[r].size(), cudaMemcpyDeviceToHost));
                  CUDA_OR_DIE(cudaMemcpy(gotLse[r].data(), which ? st[r].outLseBase : st[r].outLse, gotLse[r].size() * 4,
                                         cudaMemcpyDeviceToHost));
                }
                (which ? baseWrong : fusedWrong)[k] += countWrong(cfg, nRanks, b, host, got, gotLse);
              }
              barrier.wait();
            }
          }
        }
        barrier.wait();
        if (t == 0) {
          Row r;
          r.rows = b;
          r.bytes = b * nRanks * cfg.localHeads * headBytes;
          r.fusedUs = aggregate(a, fusedUs[k]);
          r.baseUs = a.baseline ? aggregate(a, baseUs[k]) : 0;
          r.fusedWrong = a.check && b > 0 ? fusedWrong[k] : -1;
          r.baseWrong = a.check && b > 0 && a.baseline ? baseWrong[k] : -1;
          fillBandwidths(&r, nRanks);
          printf("%s", formatRow(r, a.baseline, false).c_str());
          fflush(stdout);
        }
      }
      for (RankState* s : mine) {
        ncclResult_t async = ncclSuccess;
        NCCL_OR_DIE(ncclDcpGetAsyncError(s->ctx, &async));
        NCCL_OR_DIE(async);
      }
      NCCL_OR_DIE(ncclDcpContextDestroyGroup((int)ctxs.size(), ctxs.data()));
      for (RankState* s : mine) {
        CUDA_OR_DIE(cudaSetDevice(s->dev));
        for (void* p : {(void*)s->in, (void*)s->inPeerMajor, (void*)s->lse, (void*)s->lsePeerMajor, (void*)s->out,
                        (void*)s->outBase, (void*)s->outLse, (void*)s->outLseBase, (void*)s->recv, (void*)s->recvLse})
          cudaFree(p);
        cudaStreamDestroy(s->stream);
        ncclCommDestroy(s->comm);
      }
    } catch (const Failure& f) {
      failed[t] = f.code;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < a.threads; t++) threads.emplace_back(worker, t);
  for (std::thread& th : threads) th.join();
  for (int f : failed)
    if (f) return f;

  std::vector<Row> rows;
  for (size_t k = 0; k < sweep.size(); k++) {
    Row r;
    r.rows = sweep[k];
    r.bytes = sweep[k] * nRanks * cfg.localHeads * headBytes;
    r.fusedUs = aggregate(a, fusedUs[k]);
    r.baseUs = a.baseline ? aggregate(a, baseUs[k]) : 0;
    r.fusedWrong = a.check && r.rows > 0 ? fusedWrong[k] : -1;
    r.baseWrong = a.check && r.rows > 0 && a.baseline ? baseWrong[k] : -1;
    fillBandwidths(&r, nRanks);
    rows.push_back(r);
  }
  if (!a.json.empty()) {
    if (FILE* f = fopen(a.json.c_str(), "w")) {
      fputs(jsonReport(a, "ranks", prop.name, nRanks, 0, rows).c_str(), f);
      fclose(f);
    }
  }
  for (const Row& r : rows)
    if (r.fusedWrong > 0 || r.baseWrong > 0) return kExitWrong;
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::string error;
  switch (parseArgs(argc, argv, &a, &error)) {
    case ParseResult::Help: printf("%s", usage(argv[0]).c_str()); return kExitOk;
    case ParseResult::Error:
      fprintf(stderr, "%s: %s\n%s", argv[0], error.c_str(), usage(argv[0]).c_str());
      return kExitBadArgs;
    case ParseResult::Ok: break;
  }
  int nDevices = 0;  // left unwritten without a driver
  cudaError_t e = cudaGetDeviceCount(&nDevices);
  if (e != cudaSuccess || nDevices == 0) {
    fprintf(stderr, "%s: no CUDA GPU found (cudaGetDeviceCount: %s); nothing to measure\n", argv[0],
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return kExitNoGpu;
  }
  try {
    return a.virtualRanks > 0 ? runLoopback(a) : runRanks(a, nDevices);
  } catch (const Failure& f) {
    return f.code;
  }
}
