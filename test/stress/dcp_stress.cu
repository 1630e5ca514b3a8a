/*************************************************************************
 * dcp_stress: the fused call under a producer that rewrites its inputs.
 *
 * Per rank, a CUDA graph of G iterations, replayed until every rank made
 * -n calls:
 *
 *   producer  triggers its dependents at once (griddepcontrol.launch_dependents),
 *             waits -u ns, then copies input set (i % 2) into the live inputs
 *             (TOKEN with -C: and split (i % 2) into the live device counts)
 *   poison    the outputs (out and outLse)
 *   our call  launched with programmatic dependent launch: it must not read
 *             the live inputs (or counts) before the producer has finished
 *             writing them
 *   compare   outputs against the golden outputs of set (i % 2), bitwise;
 *             every differing 32-bit word is counted
 *
 * Every scatter mode (-S): HEAD's out holds the rank's Hl heads of every
 * row, TOKEN's every head of the rank's rows (the even split; with -C the
 * call's args->rowCountsDevice, an int32[cp] array per rank that the
 * producer rewrites: split 0 even, split 1 skewed, rank 0 owning no row),
 * NONE's every head of every row. Each rank's out has room for its most
 * rows over the two splits; the rows past its share must keep the poison.
 * The golden outputs come from one eager call per (set, split), checked
 * against the CPU reference (with the call's shape, and the poison past
 * each share) and the fp64 oracle (test/common/oracle.h) first. NONE's
 * line says which algorithm the workspace runs (two phases, or direct).
 * A wrong PDL ordering reads the other set's inputs or counts; a torn LL128
 * line (NVLink, without the Hopper re-read) merges stale data: both show as
 * mismatched words. Exit status 0 only with 0 mismatched words and no
 * asynchronous error.
 *
 *   dcp_stress -V <cp>      loopback: cp virtual ranks on GPU 0
 *   dcp_stress -r <ranks>   NCCL ranks, one per GPU, driven by this thread
 *   -b batch (4)  -n calls per rank (1000000)  -G calls per graph (100)
 *   -P AUTO|LL|LL128|SIMPLE  -D head dim (512)  -H local heads (16)
 *   -u producer delay in ns (2000)  -S head|token|none scatter mode (head)
 *   -C TOKEN's counts from the device, rewritten per call (cp >= 2)
 *   -W native|fp8 the wire (native), in every scatter mode; fp8's golden
 *      calls are checked against the fp8 CPU model and the oracle's fp8
 *   -s seed of the two input sets (0, the default: a fresh one; the run's
 *      line prints it, -s replays it)
 *   -h this help
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "context.h"
#include "enums.h"
#include "handles.h"
#include "loopback.h"
#include "nccl_dcp.h"
#include "oracle.h"
#include "reference.h"
#include "validate.h"

using namespace nccl_dcp;

namespace {

#define CHECK_CUDA(cmd)                                                                          \
  do {                                                                                           \
    cudaError_t e_ = (cmd);                                                                      \
    if (e_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "dcp_stress: %s:%d %s: %s\n", __FILE__, __LINE__, #cmd, cudaGetErrorString(e_)); \
      exit(2);                                                                                   \
    }                                                                                            \
  } while (0)
#define CHECK_DCP(cmd)                                                                           \
  do {                                                                                           \
    ncclResult_t r_ = (cmd);                                                                     \
    if (r_ != ncclSuccess) {                                                                     \
      fprintf(stderr, "dcp_stress: %s:%d %s: %s | %s\n", __FILE__, __LINE__, #cmd, ncclGetErrorString(r_), \
              ncclDcpGetLastError());                                                            \
      exit(2);                                                                                   \
    }                                                                                            \
  } while (0)

__global__ void produceInputs(const uint4* src, uint4* dst, size_t vectors, const float* srcLse, float* dstLse,
                              size_t lses, const int* srcCounts, int* dstCounts, int counts, uint64_t delayNs) {
  asm volatile("griddepcontrol.launch_dependents;");
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < delayNs);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < vectors; i += stride) dst[i] = src[i];
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < lses; i += stride) dstLse[i] = srcLse[i];
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)counts; i += stride)
    dstCounts[i] = srcCounts[i];
}

__global__ void countWrongWords(const uint32_t* got, const uint32_t* want, size_t words, unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
    mine += got[i] != want[i];
  if (mine) atomicAdd(wrong, mine);
}

const char* const kUsage =
    "usage: dcp_stress (-V cp | -r ranks) [options]\n"
    "  -V cp      loopback: cp virtual ranks on GPU 0\n"
    "  -r ranks   NCCL ranks, one per GPU, driven by this thread\n"
    "  -b batch (4)  -n calls per rank (1000000)  -G calls per graph (100)\n"
    "  -P AUTO|LL|LL128|SIMPLE (AUTO)  -D head dim (512)  -H local heads (16)\n"
    "  -u producer delay in ns (2000)  -S head|token|none scatter mode (head)\n"
    "  -C         TOKEN's counts from a device array the producer rewrites per call\n"
    "             (even, then skewed with rank 0 owning no row; cp >= 2)\n"
    "  -W native|fp8  the wire (native)\n"
    "  -s seed    of the input sets (0: a fresh one, printed; -s replays it)\n"
    "  -h         this help\n";

struct Args {
  int virtualRanks = 0, ranks = 0, batch = 4, graphCalls = 100, headDim = 512, localHeads = 16;
  long calls = 1000000;
  int protocol = ncclDcpProtoAuto, scatter = ncclDcpScatterHead, wire = ncclDcpWireNative;
  bool deviceCounts = false, help = false;
  uint64_t delayNs = 2000, seed = 0;
};

// The arguments, or what is wrong with them ("" when nothing).
std::string parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; i++) {
    const std::string f = argv[i];
    if (f == "-h") {
      a->help = true;
      continue;
    }
    if (f == "-C") {
      a->deviceCounts = true;
      continue;
    }
    if (i + 1 == argc) return "no value after " + f;
    const std::string v = argv[++i];
    if (f == "-V") a->virtualRanks = atoi(v.c_str());
    else if (f == "-r") a->ranks = atoi(v.c_str());
    else if (f == "-b") a->batch = atoi(v.c_str());
    else if (f == "-n") a->calls = atol(v.c_str());
    else if (f == "-G") a->graphCalls = atoi(v.c_str());
    else if (f == "-D") a->headDim = atoi(v.c_str());
    else if (f == "-H") a->localHeads = atoi(v.c_str());
    else if (f == "-u") a->delayNs = strtoull(v.c_str(), nullptr, 10);
    else if (f == "-s") a->seed = strtoull(v.c_str(), nullptr, 10);
    else if (f == "-P") {
      if (!parseProtocol(v.c_str(), &a->protocol)) return "-P " + v + ": AUTO, LL, LL128 or SIMPLE";
    } else if (f == "-S") {
      if (!parseScatter(v.c_str(), &a->scatter)) return "-S " + v + ": head, token or none";
    } else if (f == "-W") {
      if (!parseWire(v.c_str(), &a->wire)) return "-W " + v + ": native or fp8";
    } else return "unknown option " + f;
  }
  if (a->help) return "";
  if ((a->virtualRanks > 0) == (a->ranks > 0)) return "give one of -V cp and -r ranks, > 0";
  if (a->batch <= 0 || a->batch > 4096) return "-b must be 1..4096";
  if (a->calls <= 0 || a->graphCalls <= 0) return "-n and -G must be > 0";
  if (a->deviceCounts && a->scatter != ncclDcpScatterToken) return "-C needs -S token (only TOKEN takes counts)";
  if (a->deviceCounts && a->virtualRanks + a->ranks < 2) return "-C needs cp >= 2 (split 1 leaves rank 0 no row)";
  return "";
}

// True when every byte of [p, p + bytes) holds the outputs' poison (0xff).
bool poisoned(const void* p, size_t bytes) {
  const uint8_t* b = (const uint8_t*)p;
  return std::all_of(b, b + bytes, [](uint8_t x) { return x == 0xff; });
}

// TOKEN's two splits under -C: 0 the even one, 1 skewed: rank 0 owns no
// row, the last rank the larger half of the batch, the middle ranks the rest
// evenly (cp 2: the last rank owns every row).
std::vector<int> splitCounts(int split, int batch, int cp) {
  std::vector<int> n(cp, 0);
  if (split == 0) {
    RowSplit even;
    evenSplit(batch, cp, &even);
    for (int p = 0; p < cp; p++) n[p] = even.start[p + 1] - even.start[p];
    return n;
  }
  const int middle = cp - 2;
  n[cp - 1] = middle > 0 ? (batch + 1) / 2 : batch;
  const int rest = batch - n[cp - 1];
  for (int p = 1; p <= middle; p++) n[p] = rest / middle + (p - 1 < rest % middle);
  return n;
}

// One rank's device buffers (loopback: every virtual rank's, rank r at + r * size).
struct RankBuffers {
  int dev = 0;
  cudaStream_t stream = nullptr;
  char *set[2] = {}, *live = nullptr, *out = nullptr, *golden[2] = {};
  float *setLse[2] = {}, *liveLse = nullptr, *outLse = nullptr, *goldenLse[2] = {};
  int *setCounts[2] = {}, *liveCounts = nullptr;  // -C: split s, and the call's
  unsigned long long* wrong = nullptr;
  cudaGraphExec_t graph = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  const std::string bad = parse(argc, argv, &a);
  if (a.help && bad.empty()) {
    printf("%s", kUsage);
    return 0;
  }
  if (!bad.empty()) {
    fprintf(stderr, "dcp_stress: %s\n%s", bad.c_str(), kUsage);
    return 1;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < (a.ranks > 0 ? a.ranks : 1)) {
    fprintf(stderr, "dcp_stress: needs %d GPU(s), found %d\n", a.ranks > 0 ? a.ranks : 1, gpus);
    return 3;
  }
  const bool loopback = a.virtualRanks > 0;
  const int cp = loopback ? a.virtualRanks : a.ranks, nBuffers = loopback ? 1 : a.ranks, perBuffer = loopback ? cp : 1;
  ncclDcpConfig_t c = NCCL_DCP_CONFIG_INITIALIZER;
  c.headDim = a.headDim;
  c.localHeads = a.localHeads;
  c.dtype = ncclBfloat16;
  c.lseBase = ncclDcpLseBase2;
  c.maxBatch = a.batch;
  c.protocol = a.protocol;
  c.scatter = a.scatter;
  c.wire = a.wire;
  Config cfg;
  CHECK_DCP(resolveConfig(&c, Env(), &cfg));
  const Strides packed = packedStrides(cfg, cp);

  // The call's shape per set s (-C: split s's host form, for the reference);
  // every rank's out holds its most rows over both, at the mode's heads.
  std::vector<int> counts[2];
  CallShape shape[2];
  int outRows = 0;
  for (int s = 0; s < 2; s++) {
    ncclDcpCallArgs_t hostArgs = NCCL_DCP_CALL_ARGS_INITIALIZER;
    if (a.deviceCounts) {
      counts[s] = splitCounts(s, a.batch, cp);
      hostArgs.rowCounts = counts[s].data();
    }
    CHECK_DCP(resolveCallArgs(&hostArgs, cfg, cp, a.batch, &shape[s]));
    for (int r = 0; r < cp; r++) outRows = std::max(outRows, outRowsOf(shape[s], r));
  }
  const size_t inBytes = (size_t)a.batch * cp * cfg.localHeads * cfg.headDim * cfg.eltSize;
  const size_t lseCount = (size_t)a.batch * cp * cfg.localHeads;
  const size_t outRowBytes = (size_t)shape[0].heads * cfg.headDim * cfg.eltSize, outBytes = outRows * outRowBytes;
  const size_t outLseCount = (size_t)outRows * shape[0].heads;

  // Two input sets of every rank on the host, and their reference outputs.
  std::vector<uint8_t> hostIn[2], refOut[2];
  std::vector<float> hostLse[2], refLse[2];
  const uint64_t seed = a.seed != 0 ? a.seed : std::random_device{}() | 1;
  std::mt19937_64 rng(seed);
  printf("dcp_stress: input seed %llu (-s %llu replays it)\n", (unsigned long long)seed, (unsigned long long)seed);
  std::uniform_real_distribution<float> value(-1.f, 1.f), lse(-6.f, 6.f);
  for (int s = 0; s < 2; s++) {
    hostIn[s].resize(cp * inBytes);
    hostLse[s].resize(cp * lseCount);
    for (size_t i = 0; i < hostIn[s].size() / cfg.eltSize; i++) storeElement(cfg.dtype, hostIn[s].data(), i, value(rng));
    for (float& x : hostLse[s]) x = lse(rng);
    refOut[s].resize(cp * outBytes);
    refLse[s].resize(cp * outLseCount);
    std::vector<CallBuffers> ranks(cp);
    for (int r = 0; r < cp; r++)
      ranks[r] = {hostIn[s].data() + r * inBytes, hostLse[s].data() + r * lseCount, refOut[s].data() + r * outBytes,
                  refLse[s].data() + r * outLseCount};
    referenceA2aLseReduce(cfg, cp, a.batch, packed, ranks.data(), &shape[s], cfg.wire);
  }

  // The collective: a loopback object, or one context per GPU.
  std::unique_ptr<Loopback> lb;
  std::vector<ncclComm_t> comms(nBuffers);
  std::vector<ncclDcpContext_t> ctxs(nBuffers);
  if (loopback) {
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_DCP(Loopback::create(&c, cp, &lb));
  } else {
    std::vector<int> devs(nBuffers);
    for (int r = 0; r < nBuffers; r++) devs[r] = r;
    if (ncclCommInitAll(comms.data(), nBuffers, devs.data()) != ncclSuccess) {
      fprintf(stderr, "dcp_stress: ncclCommInitAll failed\n");
      return 2;
    }
    CHECK_DCP(ncclDcpContextCreateGroup(nBuffers, comms.data(), &c, ctxs.data()));
  }

  std::vector<RankBuffers> rb(nBuffers);
  for (int i = 0; i < nBuffers; i++) {
    RankBuffers& b = rb[i];
    b.dev = loopback ? 0 : i;
    CHECK_CUDA(cudaSetDevice(b.dev));
    CHECK_CUDA(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    for (int s = 0; s < 2; s++) {
      CHECK_CUDA(cudaMalloc(&b.set[s], perBuffer * inBytes));
      CHECK_CUDA(cudaMalloc(&b.setLse[s], perBuffer * lseCount * 4));
      CHECK_CUDA(cudaMalloc(&b.golden[s], perBuffer * outBytes));
      CHECK_CUDA(cudaMalloc(&b.goldenLse[s], perBuffer * outLseCount * 4));
      CHECK_CUDA(cudaMemcpy(b.set[s], hostIn[s].data() + i * inBytes, perBuffer * inBytes, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(b.setLse[s], hostLse[s].data() + i * lseCount, perBuffer * lseCount * 4,
                            cudaMemcpyHostToDevice));
    }
    CHECK_CUDA(cudaMalloc(&b.live, perBuffer * inBytes));
    CHECK_CUDA(cudaMalloc(&b.liveLse, perBuffer * lseCount * 4));
    CHECK_CUDA(cudaMalloc(&b.out, perBuffer * outBytes));
    CHECK_CUDA(cudaMalloc(&b.outLse, perBuffer * outLseCount * 4));
    if (a.deviceCounts) {  // loopback: one array for every virtual rank
      for (int s = 0; s < 2; s++) {
        CHECK_CUDA(cudaMalloc(&b.setCounts[s], cp * sizeof(int)));
        CHECK_CUDA(cudaMemcpy(b.setCounts[s], counts[s].data(), cp * sizeof(int), cudaMemcpyHostToDevice));
      }
      CHECK_CUDA(cudaMalloc(&b.liveCounts, cp * sizeof(int)));
    }
    CHECK_CUDA(cudaMalloc(&b.wrong, sizeof(unsigned long long)));
    CHECK_CUDA(cudaMemset(b.wrong, 0, sizeof(unsigned long long)));
  }

  // One call on every rank's stream (the ranks of one thread need no group
  // on the fused path: kernel launches only).
  auto call = [&](int i) {
    RankBuffers& b = rb[i];
    CHECK_CUDA(cudaSetDevice(b.dev));
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.rowCountsDevice = b.liveCounts;
    const ncclDcpCallArgs_t* extra = a.deviceCounts ? &args : nullptr;
    if (loopback) {
      std::vector<CallBuffers> bufs(cp);
      for (int r = 0; r < cp; r++)
        bufs[r] = {b.live + r * inBytes, b.liveLse + r * lseCount, b.out + r * outBytes, b.outLse + r * outLseCount};
      CHECK_DCP(lb->call(bufs.data(), a.batch, nullptr, b.stream, extra));
    } else {
      CHECK_DCP(
          ncclDcpA2aLseReduceEx(ctxs[i], b.live, b.liveLse, b.out, b.outLse, a.batch, nullptr, extra, b.stream));
    }
  };
  auto poison = [&](int i) {
    RankBuffers& b = rb[i];
    CHECK_CUDA(cudaMemsetAsync(b.out, 0xff, perBuffer * outBytes, b.stream));
    CHECK_CUDA(cudaMemsetAsync(b.outLse, 0xff, perBuffer * outLseCount * 4, b.stream));
  };
  auto produce = [&](int i, int s, uint64_t delayNs) {
    RankBuffers& b = rb[i];
    produceInputs<<<264, 256, 0, b.stream>>>((const uint4*)b.set[s], (uint4*)b.live, perBuffer * inBytes / 16,
                                            b.setLse[s], b.liveLse, perBuffer * lseCount, b.setCounts[s],
                                            b.liveCounts, a.deviceCounts ? cp : 0, delayNs);
    CHECK_CUDA(cudaGetLastError());
  };

  // Golden outputs: one eager call per set (and split), checked against the
  // reference.
  for (int s = 0; s < 2; s++) {
    for (int i = 0; i < nBuffers; i++) {
      produce(i, s, 0);
      poison(i);
      call(i);
    }
    std::vector<uint8_t> got(cp * outBytes);
    std::vector<float> gotLse(cp * outLseCount);
    for (int i = 0; i < nBuffers; i++) {
      RankBuffers& b = rb[i];
      CHECK_CUDA(cudaSetDevice(b.dev));
      CHECK_CUDA(cudaStreamSynchronize(b.stream));
      CHECK_CUDA(cudaMemcpy(got.data() + i * outBytes, b.out, perBuffer * outBytes, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(gotLse.data() + i * outLseCount, b.outLse, perBuffer * outLseCount * 4,
                            cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(b.golden[s], b.out, perBuffer * outBytes, cudaMemcpyDeviceToDevice));
      CHECK_CUDA(cudaMemcpy(b.goldenLse[s], b.outLse, perBuffer * outLseCount * 4, cudaMemcpyDeviceToDevice));
    }
    std::vector<CallBuffers> gotBufs(cp), wantBufs(cp);
    for (int r = 0; r < cp; r++) {
      gotBufs[r] = {nullptr, nullptr, got.data() + r * outBytes, gotLse.data() + r * outLseCount};
      wantBufs[r] = {nullptr, nullptr, refOut[s].data() + r * outBytes, refLse[s].data() + r * outLseCount};
    }
    std::string first;
    const size_t wrongElements =
        countMismatches(cfg, cp, a.batch, packed, gotBufs.data(), wantBufs.data(), &first, &shape[s]);
    if (wrongElements) {
      fprintf(stderr, "dcp_stress: golden call of set %d differs from the CPU reference in %zu elements: %s\n", s,
              wrongElements, first.c_str());
      return 4;
    }
    // And against the fp64 oracle (test/common/oracle.h), which shares no
    // code with the library: a break in merge.h or codec.h, which the
    // reference includes too, shows there and not above.
    oracle::Problem op;
    op.cp = cp;
    op.batch = a.batch;
    op.localHeads = cfg.localHeads;
    op.headDim = cfg.headDim;
    op.dtype = cfg.dtype;
    op.lseDtype = ncclFloat32;
    op.base = oracle::Base::Two;  // c.lseBase above
    op.mode = a.scatter == ncclDcpScatterHead ? oracle::Mode::Head
              : a.scatter == ncclDcpScatterToken ? oracle::Mode::Token
                                                 : oracle::Mode::None;
    op.wire = a.wire == ncclDcpWireFp8E4m3 ? oracle::Wire::Fp8 : oracle::Wire::Native;
    op.layout = {packed.inRow, packed.inPeer, packed.inHead, packed.lseRow, packed.lsePeer, packed.lseHead,
                 packed.outRow, packed.outHead, packed.outLseRow, packed.outLseHead};
    op.rowCounts = counts[s];  // -C: split s; else empty: the even split
    std::vector<oracle::Output> outs(cp);
    for (int r = 0; r < cp; r++) {
      op.ranks.push_back({hostIn[s].data() + r * inBytes, hostLse[s].data() + r * lseCount});
      outs[r] = {got.data() + r * outBytes, gotLse.data() + r * outLseCount, outBytes / cfg.eltSize, outLseCount};
    }
    const oracle::Report rep = oracle::check(op, outs);
    if (rep.bad) {
      fprintf(stderr, "dcp_stress: golden call of set %d differs from the fp64 oracle in %zu elements: %s\n", s, rep.bad,
              rep.first.c_str());
      return 4;
    }
    for (int r = 0; r < cp; r++) {  // TOKEN: the rows past the rank's share hold the poison
      const size_t rows = outRowsOf(shape[s], r);
      if (!poisoned(got.data() + r * outBytes + rows * outRowBytes, (outRows - rows) * outRowBytes) ||
          !poisoned(gotLse.data() + r * outLseCount + rows * shape[s].heads, (outRows - rows) * shape[s].heads * 4)) {
        fprintf(stderr, "dcp_stress: golden call of set %d wrote rank %d's out or outLse past its %zu rows\n", s, r,
                rows);
        return 4;
      }
    }
  }

  // The graph of every rank: G x [poison, produce, call, compare]: the
  // producer kernel right before the call, so that under PDL the call may
  // start while the producer still writes (a memset between them would
  // order them fully).
  for (int i = 0; i < nBuffers; i++) {
    RankBuffers& b = rb[i];
    CHECK_CUDA(cudaSetDevice(b.dev));
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < a.graphCalls; k++) {
      const int s = k % 2;
      poison(i);
      produce(i, s, a.delayNs);
      call(i);
      countWrongWords<<<132, 256, 0, b.stream>>>((const uint32_t*)b.out, (const uint32_t*)b.golden[s],
                                                 perBuffer * outBytes / 4, b.wrong);
      countWrongWords<<<132, 256, 0, b.stream>>>((const uint32_t*)b.outLse, (const uint32_t*)b.goldenLse[s],
                                                 perBuffer * outLseCount, b.wrong);
    }
    CHECK_CUDA(cudaStreamEndCapture(b.stream, &g));
    CHECK_CUDA(cudaGraphInstantiate(&b.graph, g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  }

  const long replays = (a.calls + a.graphCalls - 1) / a.graphCalls;
  const auto t0 = std::chrono::steady_clock::now();
  for (long rep = 0; rep < replays; rep++) {
    for (int i = 0; i < nBuffers; i++) {
      CHECK_CUDA(cudaSetDevice(rb[i].dev));
      CHECK_CUDA(cudaGraphLaunch(rb[i].graph, rb[i].stream));
    }
    if (rep % 256 == 255 || rep == replays - 1)
      for (int i = 0; i < nBuffers; i++) {
        CHECK_CUDA(cudaSetDevice(rb[i].dev));
        CHECK_CUDA(cudaStreamSynchronize(rb[i].stream));
      }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  unsigned long long wrong = 0;
  ncclResult_t async = ncclSuccess;
  for (int i = 0; i < nBuffers; i++) {
    unsigned long long w = 0;
    CHECK_CUDA(cudaSetDevice(rb[i].dev));
    CHECK_CUDA(cudaMemcpy(&w, rb[i].wrong, sizeof(w), cudaMemcpyDeviceToHost));
    wrong += w;
    ncclResult_t e = ncclSuccess;
    if (loopback) e = lb->asyncError();
    else CHECK_DCP(ncclDcpGetAsyncError(ctxs[i], &e));
    if (e != ncclSuccess) async = e;
  }
  // NONE's algorithm as the workspace was laid out (NCCL_DCP_NONE_ALGO):
  // a run meant for two phases must show it (scripts/gpu-check.sh checks).
  const WorkspaceLayout& layout = loopback ? lb->engine().layout : contextOf(ctxs[0])->engine.layout;
  const char* noneAlgo = a.scatter != ncclDcpScatterNone ? "" : layout.small.relayBytes ? " (two phases)" : " (direct)";
  printf("dcp_stress: %s cp %d %s scatter %s%s%s wire %s batch %d D %d Hl %d: %ld calls per rank in %.1f s, "
         "producer delay %llu ns, seed %llu: %llu mismatched words, async error %s\n",
         loopback ? "loopback" : "NCCL ranks", cp, protocolName(a.protocol), scatterName(a.scatter), noneAlgo,
         a.deviceCounts ? " (device counts)" : "", wireName(a.wire), a.batch, cfg.headDim, cfg.localHeads, replays * a.graphCalls,
         seconds, (unsigned long long)a.delayNs, (unsigned long long)seed, wrong, async == ncclSuccess ? "none" : ncclGetErrorString(async));
  for (int i = 0; i < nBuffers; i++) {
    cudaSetDevice(rb[i].dev);
    cudaGraphExecDestroy(rb[i].graph);
  }
  if (!loopback) {
    CHECK_DCP(ncclDcpContextDestroyGroup(nBuffers, ctxs.data()));
    for (ncclComm_t comm : comms) ncclCommDestroy(comm);
  }
  return wrong == 0 && async == ncclSuccess ? 0 : 4;
}
