/*************************************************************************
 * dcp_soak: a long run of the collective, checked as it goes
 * (scripts/gpu-check.sh soak; not a meson test).
 *
 *   dcp_soak -V 8        loopback: 8 virtual ranks on GPU 0
 *   dcp_soak             NCCL ranks: one per GPU of the machine, a thread each
 *
 * Every rank makes the same sequence of calls (one seed): random batches in
 * [0, 2.5 maxBatch] (so many run as several rounds), eager calls
 * interleaved with replays of captured graphs of -g calls each; every -c-th
 * call (default 1000) is made on inputs whose CPU reference is known --
 * eagerly or as a graph replay -- and every rank's outputs are compared
 * with it. Passes with 0 mismatches and no asynchronous error. Exit status:
 * 0 pass, 1 fail, 2 usage, 3 no GPU.
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "context.h"
#include "device_problem.h"
#include "handles.h"
#include "loopback.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

struct Options {
  int virtualRanks = 0;  // 0: NCCL ranks, one per GPU
  long calls = 1000000;  // per rank
  int checkEvery = 1000;
  int graphCalls = 64;   // calls per captured graph
  int maxBatch = 16;
  int headDim = 128, localHeads = 4;
  ncclDataType_t dtype = ncclBfloat16;
  int protocol = ncclDcpProtoAuto;
  uint64_t seed = 0;     // 0: fresh
};

constexpr int kNoiseGraphs = 4;
constexpr int kCheckProblems = 4;

int usage(const char* program) {
  fprintf(stderr,
          "usage: %s [-V virtualRanks] [-n callsPerRank] [-c checkEvery] [-g callsPerGraph] [-b maxBatch]\n"
          "          [-D headDim] [-H localHeads] [-d bf16|fp16|fp32] [-P AUTO|LL|LL128|SIMPLE] [-s seed]\n",
          program);
  return 2;
}

bool parse(int argc, char** argv, Options* o) {
  int c;
  while ((c = getopt(argc, argv, "V:n:c:g:b:D:H:d:P:s:")) != -1) {
    switch (c) {
      case 'V': o->virtualRanks = atoi(optarg); break;
      case 'n': o->calls = atol(optarg); break;
      case 'c': o->checkEvery = atoi(optarg); break;
      case 'g': o->graphCalls = atoi(optarg); break;
      case 'b': o->maxBatch = atoi(optarg); break;
      case 'D': o->headDim = atoi(optarg); break;
      case 'H': o->localHeads = atoi(optarg); break;
      case 'd': if (!parseDtype(optarg, &o->dtype)) return false; break;
      case 'P': if (!parseProtocol(optarg, &o->protocol)) return false; break;
      case 's': o->seed = strtoull(optarg, nullptr, 0); break;
      default: return false;
    }
  }
  return o->calls > 0 && o->checkEvery > 1 && o->graphCalls > 0 && o->maxBatch > 0;
}

// What every rank shares: the config, the call schedule's seed, the
// captured graphs' batches, and the inputs (with references) of the noise
// and checked calls.
struct Plan {
  Options opt;
  ncclDcpConfig_t config;
  Config cfg;
  int nRanks;
  int maxRows;  // the largest batch drawn
  std::vector<int> noiseBatches[kNoiseGraphs];
  std::unique_ptr<DeviceProblem> noise;
  std::vector<std::unique_ptr<DeviceProblem>> checks;
};

int randomBatch(std::mt19937_64& rng, int maxRows) { return (int)(rng() % (uint64_t)(maxRows + 1)); }

// One thread's share: the ranks its launches serve (loopback: all of them;
// NCCL: its own), its device, and how it calls.
struct Worker {
  std::vector<int> served;
  int device = 0;
  std::function<ncclResult_t(const CallBuffers*, int, cudaStream_t)> call;
  std::function<ncclResult_t()> asyncError;
  // Results.
  long calls = 0, replays = 0, eager = 0, checked = 0;
  size_t mismatches = 0;
  std::string failure;
};

#define SOAK_CHECK(cmd, what)                                                                        \
  do {                                                                                               \
    if (!(cmd)) {                                                                                    \
      w->failure = std::string(what) + " (" + ncclDcpGetLastError() + ")";                           \
      return;                                                                                        \
    }                                                                                                \
  } while (0)

void runWorker(const Plan& plan, Worker* w) {
  cudaSetDevice(w->device);
  cudaStream_t stream;
  SOAK_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  auto buffersOf = [&](const DeviceProblem& p) {
    std::vector<CallBuffers> b;
    for (int r : w->served) b.push_back(p.buffers(r));
    return b;
  };
  const std::vector<CallBuffers> noise = buffersOf(*plan.noise);
  std::vector<std::vector<CallBuffers>> checks;
  for (const auto& p : plan.checks) checks.push_back(buffersOf(*p));

  // Eager first: a path that calls NCCL connects outside any capture.
  SOAK_CHECK(w->call(noise.data(), plan.maxRows, stream) == ncclSuccess, "warm-up call");
  SOAK_CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "warm-up sync");
  auto capture = [&](const std::vector<CallBuffers>& bufs, const std::vector<int>& batches, cudaGraphExec_t* exec) {
    cudaGraph_t graph;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return false;
    bool ok = true;
    for (int b : batches) ok = ok && w->call(bufs.data(), b, stream) == ncclSuccess;
    ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && ok;
    ok = ok && cudaGraphInstantiate(exec, graph, 0) == cudaSuccess;
    cudaGraphDestroy(graph);
    return ok;
  };
  cudaGraphExec_t noiseGraphs[kNoiseGraphs], checkGraphs[kCheckProblems];
  for (int g = 0; g < kNoiseGraphs; g++) SOAK_CHECK(capture(noise, plan.noiseBatches[g], &noiseGraphs[g]), "capture");
  for (int k = 0; k < kCheckProblems; k++)
    SOAK_CHECK(capture(checks[k], {plan.checks[k]->batch()}, &checkGraphs[k]), "capture");

  std::mt19937_64 rng(plan.opt.seed);  // the same schedule on every rank
  const long total = plan.opt.calls;
  const int G = plan.opt.graphCalls;
  while (w->calls < total) {
    const long epochEnd = std::min(w->calls + plan.opt.checkEvery, total);
    while (w->calls < epochEnd - 1) {
      if (rng() % 2 == 0 && epochEnd - 1 - w->calls >= G) {
        SOAK_CHECK(cudaGraphLaunch(noiseGraphs[rng() % kNoiseGraphs], stream) == cudaSuccess, "graph launch");
        w->calls += G;
        w->replays++;
      } else {
        SOAK_CHECK(w->call(noise.data(), randomBatch(rng, plan.maxRows), stream) == ncclSuccess, "eager call");
        w->calls++;
        w->eager++;
      }
    }
    const int k = (int)(rng() % kCheckProblems);
    const bool asReplay = rng() % 2 == 0;
    DeviceProblem& p = *plan.checks[k];
    for (int r : w->served) p.poison(r, stream);
    if (asReplay)
      SOAK_CHECK(cudaGraphLaunch(checkGraphs[k], stream) == cudaSuccess, "graph launch");
    else
      SOAK_CHECK(w->call(checks[k].data(), p.batch(), stream) == ncclSuccess, "checked call");
    w->calls++;
    SOAK_CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "sync");
    SOAK_CHECK(w->asyncError() == ncclSuccess, "asynchronous error");
    const Mismatch m = w->served.size() > 1 ? p.checkAll() : p.check(w->served[0]);
    if (m.count && w->mismatches == 0)
      fprintf(stderr, "soak: call %ld: %zu mismatches, first %s\n", w->calls, m.count, m.first.c_str());
    w->mismatches += m.count;
    w->checked++;
  }
  SOAK_CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "final sync");
  SOAK_CHECK(w->asyncError() == ncclSuccess, "asynchronous error at the end");
  for (cudaGraphExec_t e : noiseGraphs) cudaGraphExecDestroy(e);
  for (cudaGraphExec_t e : checkGraphs) cudaGraphExecDestroy(e);
  cudaStreamDestroy(stream);
}

// Inputs of every call kind, the noise graphs' batches, on `devices`
// (empty: the current GPU).
void preparePlan(Plan* plan, const std::vector<int>& devices) {
  std::mt19937_64 rng(plan->opt.seed ^ 0x5eed);
  plan->maxRows = plan->cfg.maxBatch * 5 / 2;
  for (auto& batches : plan->noiseBatches)
    for (int i = 0; i < plan->opt.graphCalls; i++) batches.push_back(randomBatch(rng, plan->maxRows));
  plan->noise.reset(new DeviceProblem(plan->cfg, plan->nRanks, plan->maxRows, LseMix::Normal, rng(), devices));
  for (int k = 0; k < kCheckProblems; k++) {
    const int batch = 1 + (int)(rng() % (uint64_t)plan->maxRows);
    plan->checks.emplace_back(
        new DeviceProblem(plan->cfg, plan->nRanks, batch, k % 2 ? LseMix::Special : LseMix::Normal, rng(), devices));
  }
}

bool report(const char* mode, const Plan& plan, const std::vector<Worker>& workers, double seconds) {
  bool pass = true;
  for (size_t i = 0; i < workers.size(); i++) {
    const Worker& w = workers[i];
    if (!w.failure.empty()) fprintf(stderr, "soak: worker %zu failed: %s\n", i, w.failure.c_str());
    pass = pass && w.failure.empty() && w.mismatches == 0 && w.calls == plan.opt.calls;
  }
  const Worker& w = workers[0];
  size_t mismatches = 0;
  for (const Worker& x : workers) mismatches += x.mismatches;
  printf("soak: %s cp %d, %s D %d Hl %d maxBatch %d batch 0..%d, protocol %s: %ld calls per rank (%ld eager, %ld graph "
         "replays of %d), %ld checked against the CPU reference, %zu mismatches, %s, %.1f s (%.2f us per call)\n",
         mode, plan.nRanks, dtypeName(plan.cfg.dtype), plan.cfg.headDim, plan.cfg.localHeads, plan.cfg.maxBatch,
         plan.maxRows, protocolName(plan.cfg.protocol), w.calls, w.eager, w.replays, plan.opt.graphCalls, w.checked,
         mismatches, pass ? "no asynchronous error" : "FAILED", seconds, seconds * 1e6 / std::max(w.calls, 1L));
  printf("soak: %s\n", pass ? "PASS" : "FAIL");
  return pass;
}

int runLoopback(Plan* plan) {
  std::unique_ptr<Loopback> lb;
  if (Loopback::create(&plan->config, plan->nRanks, &lb) != ncclSuccess) {
    fprintf(stderr, "soak: %s\n", ncclDcpGetLastError());
    return 1;
  }
  plan->cfg = lb->config();
  preparePlan(plan, {});
  std::vector<Worker> workers(1);
  for (int r = 0; r < plan->nRanks; r++) workers[0].served.push_back(r);
  workers[0].call = [&](const CallBuffers* b, int batch, cudaStream_t s) { return lb->call(b, batch, nullptr, s); };
  workers[0].asyncError = [&] { return lb->asyncError(); };
  const auto t0 = std::chrono::steady_clock::now();
  runWorker(*plan, &workers[0]);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report("loopback", *plan, workers, s) ? 0 : 1;
}

int runRanks(Plan* plan) {
  const int n = plan->nRanks;
  std::vector<int> devs(n);
  for (int r = 0; r < n; r++) devs[r] = r;
  std::vector<ncclComm_t> comms(n);
  std::vector<ncclDcpContext_t> ctxs(n, nullptr);
  if (ncclCommInitAll(comms.data(), n, devs.data()) != ncclSuccess ||
      ncclDcpContextCreateGroup(n, comms.data(), &plan->config, ctxs.data()) != ncclSuccess) {
    fprintf(stderr, "soak: setup failed: %s\n", ncclDcpGetLastError());
    return 1;
  }
  plan->cfg = contextOf(ctxs[0])->engine.cfg;
  preparePlan(plan, devs);
  std::vector<Worker> workers(n);
  for (int r = 0; r < n; r++) {
    Worker& w = workers[r];
    w.served = {r};
    w.device = r;
    ncclDcpContext_t ctx = ctxs[r];
    w.call = [ctx](const CallBuffers* b, int batch, cudaStream_t s) {
      return ncclDcpA2aLseReduce(ctx, b->partialOut, (const float*)b->partialLse, b->out, b->outLse, batch, nullptr, s);
    };
    w.asyncError = [ctx] {
      ncclResult_t e = ncclSuccess;
      ncclDcpGetAsyncError(ctx, &e);
      return e;
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) threads.emplace_back(runWorker, std::cref(*plan), &workers[r]);
  for (std::thread& t : threads) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool pass = report("NCCL ranks", *plan, workers, s);
  plan->noise.reset();
  plan->checks.clear();
  ncclDcpContextDestroyGroup(n, ctxs.data());
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  return pass ? 0 : 1;
}

int soakMain(int argc, char** argv) {
  Plan plan;
  if (!parse(argc, argv, &plan.opt)) return usage(argv[0]);
  if (plan.opt.seed == 0) plan.opt.seed = freshSeed();
  int gpus = 0;  // left unwritten without a driver
  const cudaError_t e = cudaGetDeviceCount(&gpus);
  if (e != cudaSuccess || gpus < 1) {
    printf("soak: no GPU (%s): nothing to run\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 3;
  }
  plan.config = makeConfig(plan.opt.headDim, plan.opt.localHeads, plan.opt.dtype, ncclDcpLseBase2, plan.opt.maxBatch,
                           plan.opt.protocol);
  plan.nRanks = plan.opt.virtualRanks > 0 ? plan.opt.virtualRanks : gpus;
  printf("soak: seed %llu\n", (unsigned long long)plan.opt.seed);
  fflush(stdout);
  cudaSetDevice(0);
  return plan.opt.virtualRanks > 0 ? runLoopback(&plan) : runRanks(&plan);
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp

int main(int argc, char** argv) { return nccl_dcp::test::soakMain(argc, argv); }
