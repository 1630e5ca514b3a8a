/*************************************************************************
 * Calls on any stream, as serving engines make them (PyTorch's capture
 * recipe, micro-batches on two streams), and a poisoned context that
 * cannot hide: on one GPU, through loopback (cp virtual ranks: the calls
 * share a workspace and a round counter, so two calls that overlap give
 * wrong results or time out) and through a one-rank NCCL context.
 *
 * How an ordering test bites: the earlier call is held back on its stream
 * by a host function that sleeps, and both calls write the same outputs.
 * Ordered, the later call's result is what remains; unordered, the later
 * call runs first and the held-back one overwrites it.
 ************************************************************************/
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "device_problem.h"
#include "loopback.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

constexpr int kCp = 8;
constexpr intptr_t kHoldMs = 300;

void CUDART_CB sleepMs(void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds((intptr_t)ms)); }

// Holds `stream` back for kHoldMs (the host function runs in stream order).
cudaError_t holdBack(cudaStream_t stream) { return cudaLaunchHostFunc(stream, sleepMs, (void*)kHoldMs); }

struct Streams {
  std::vector<cudaStream_t> s;
  explicit Streams(int n) : s(n, nullptr) {
    for (cudaStream_t& x : s) cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking);
  }
  ~Streams() {
    for (cudaStream_t x : s) cudaStreamDestroy(x);
  }
  cudaStream_t operator[](int i) const { return s[i]; }
};

// A captured graph of one call, instantiated.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

class Streamed : public testing::Test {
 protected:
  void SetUp() override {
    DCP_REQUIRE_GPUS(1);
    CUDA_ASSERT(cudaSetDevice(0));
  }
  std::unique_ptr<Loopback> loopback(int protocol, int cp = kCp, int timeoutMs = NCCL_CONFIG_UNDEF_INT) {
    ncclDcpConfig_t c = makeConfig(512, 4, ncclBfloat16, ncclDcpLseBase2, 16, protocol);
    c.timeoutMs = timeoutMs;
    std::unique_ptr<Loopback> lb;
    EXPECT_EQ(Loopback::create(&c, cp, &lb), ncclSuccess) << ncclDcpGetLastError();
    return lb;
  }
  static Config configOf(const Loopback& lb) { return lb.config(); }
  // x's inputs into y's outputs: the call that must come first.
  static std::vector<CallBuffers> inputsInto(const DeviceProblem& x, const DeviceProblem& y) {
    std::vector<CallBuffers> b = x.allBuffers();
    for (size_t r = 0; r < b.size(); r++) {
      b[r].out = y.buffers((int)r).out;
      b[r].outLse = y.buffers((int)r).outLse;
    }
    return b;
  }
  // Captures one call of lb on `stream` (a capture of its own).
  void capture(Loopback* lb, const std::vector<CallBuffers>& b, int batch, cudaStream_t stream, Graph* g) {
    CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const ncclResult_t r = lb->call(b.data(), batch, nullptr, stream);
    CUDA_ASSERT(cudaStreamEndCapture(stream, &g->graph));
    ASSERT_EQ(r, ncclSuccess) << ncclDcpGetLastError();
    CUDA_ASSERT(cudaGraphInstantiate(&g->exec, g->graph, 0));
  }
};

// Eager calls on two streams: the second waits for the first, held back.
TEST_F(Streamed, EagerCallsOnAnotherStreamWaitForThePreviousCall) {
  for (int proto : {ncclDcpProtoLL128, ncclDcpProtoSimple}) {
    SCOPED_TRACE(protocolName(proto));
    auto lb = loopback(proto);
    ASSERT_TRUE(lb);
    const Config cfg = configOf(*lb);
    DeviceProblem x(cfg, kCp, 9, LseMix::Normal, freshSeed()), y(cfg, kCp, 9, LseMix::Normal, freshSeed());
    Streams s(2);
    CUDA_ASSERT(holdBack(s[0]));
    DCP_ASSERT(lb->call(inputsInto(x, y).data(), 9, nullptr, s[0]));
    DCP_ASSERT(lb->call(y.allBuffers().data(), 9, nullptr, s[1]));
    CUDA_ASSERT(cudaDeviceSynchronize());
    const Mismatch m = y.checkAll();
    EXPECT_EQ(m.count, 0u) << "the later call ran first: " << m.first;
    EXPECT_EQ(lb->asyncError(), ncclSuccess);
  }
}

// PyTorch's recipe: an eager call on one stream, a capture on another (no
// synchronisation between), the graph launched on a third: each replay
// runs after the eager call, which is held back.
TEST_F(Streamed, CaptureOnASideStreamIsOrderedAfterTheEagerCall) {
  auto lb = loopback(ncclDcpProtoAuto);
  ASSERT_TRUE(lb);
  const Config cfg = configOf(*lb);
  DeviceProblem x(cfg, kCp, 5, LseMix::Normal, freshSeed()), y(cfg, kCp, 5, LseMix::Normal, freshSeed());
  Streams s(3);
  CUDA_ASSERT(holdBack(s[0]));
  DCP_ASSERT(lb->call(inputsInto(x, y).data(), 5, nullptr, s[0]));
  Graph g;
  ASSERT_NO_FATAL_FAILURE(capture(lb.get(), y.allBuffers(), 5, s[1], &g));
  CUDA_ASSERT(cudaGraphLaunch(g.exec, s[2]));
  CUDA_ASSERT(cudaDeviceSynchronize());
  const Mismatch m = y.checkAll();
  EXPECT_EQ(m.count, 0u) << "the replay ran before the eager call: " << m.first;
  EXPECT_EQ(lb->asyncError(), ncclSuccess);
}

// A replay held back on its stream, then an eager call on another: the
// eager call waits for the replay (the graph records the order's event).
TEST_F(Streamed, EagerCallAfterAReplayWaitsForIt) {
  auto lb = loopback(ncclDcpProtoAuto);
  ASSERT_TRUE(lb);
  const Config cfg = configOf(*lb);
  DeviceProblem x(cfg, kCp, 5, LseMix::Normal, freshSeed()), y(cfg, kCp, 5, LseMix::Normal, freshSeed());
  Streams s(3);
  Graph g;
  ASSERT_NO_FATAL_FAILURE(capture(lb.get(), inputsInto(x, y), 5, s[0], &g));
  CUDA_ASSERT(holdBack(s[1]));
  CUDA_ASSERT(cudaGraphLaunch(g.exec, s[1]));
  DCP_ASSERT(lb->call(y.allBuffers().data(), 5, nullptr, s[2]));
  CUDA_ASSERT(cudaDeviceSynchronize());
  const Mismatch m = y.checkAll();
  EXPECT_EQ(m.count, 0u) << "the eager call ran before the replay: " << m.first;
}

// Two replays of two graphs launched on two streams, the first held back:
// the second graph's replay waits for it.
TEST_F(Streamed, ReplaysOfTwoGraphsRunInLaunchOrder) {
  auto lb = loopback(ncclDcpProtoLL128);
  ASSERT_TRUE(lb);
  const Config cfg = configOf(*lb);
  DeviceProblem x(cfg, kCp, 3, LseMix::Normal, freshSeed()), y(cfg, kCp, 3, LseMix::Normal, freshSeed());
  Streams s(2);
  Graph gx, gy;
  ASSERT_NO_FATAL_FAILURE(capture(lb.get(), inputsInto(x, y), 3, s[0], &gx));
  ASSERT_NO_FATAL_FAILURE(capture(lb.get(), y.allBuffers(), 3, s[1], &gy));
  CUDA_ASSERT(holdBack(s[0]));
  CUDA_ASSERT(cudaGraphLaunch(gx.exec, s[0]));
  CUDA_ASSERT(cudaGraphLaunch(gy.exec, s[1]));
  CUDA_ASSERT(cudaDeviceSynchronize());
  const Mismatch m = y.checkAll();
  EXPECT_EQ(m.count, 0u) << "the second graph ran first: " << m.first;
}

// Two calls captured in one graph across two streams (fork and join):
// ordered inside the graph, replayed many times on fresh outputs.
TEST_F(Streamed, TwoCallsOfOneCaptureOnTwoStreams) {
  auto lb = loopback(ncclDcpProtoAuto);
  ASSERT_TRUE(lb);
  const Config cfg = configOf(*lb);
  DeviceProblem x(cfg, kCp, 20, LseMix::Normal, freshSeed()), y(cfg, kCp, 7, LseMix::Special, freshSeed());
  Streams s(2);
  cudaEvent_t fork, join;
  CUDA_ASSERT(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_ASSERT(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  Graph g;
  CUDA_ASSERT(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeThreadLocal));
  ncclResult_t r = lb->call(x.allBuffers().data(), 20, nullptr, s[0]);
  cudaEventRecord(fork, s[0]);
  cudaStreamWaitEvent(s[1], fork, 0);
  if (r == ncclSuccess) r = lb->call(y.allBuffers().data(), 7, nullptr, s[1]);
  cudaEventRecord(join, s[1]);
  cudaStreamWaitEvent(s[0], join, 0);
  CUDA_ASSERT(cudaStreamEndCapture(s[0], &g.graph));
  ASSERT_EQ(r, ncclSuccess) << ncclDcpGetLastError();
  CUDA_ASSERT(cudaGraphInstantiate(&g.exec, g.graph, 0));
  for (int i = 0; i < 5; i++) {
    for (int rank = 0; rank < kCp; rank++) {
      x.poison(rank, s[0]);
      y.poison(rank, s[0]);
    }
    CUDA_ASSERT(cudaGraphLaunch(g.exec, s[0]));
    CUDA_ASSERT(cudaStreamSynchronize(s[0]));
    const Mismatch mx = x.checkAll(), my = y.checkAll();
    EXPECT_EQ(mx.count, 0u) << mx.first;
    EXPECT_EQ(my.count, 0u) << my.first;
  }
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
}

// Calls alternating between two streams, no synchronisation, each on its
// own fresh data: all correct.
TEST_F(Streamed, CallsAlternatingBetweenTwoStreams) {
  auto lb = loopback(ncclDcpProtoAuto);
  ASSERT_TRUE(lb);
  const Config cfg = configOf(*lb);
  Streams s(2);
  std::vector<std::unique_ptr<DeviceProblem>> problems;
  for (int i = 0; i < 12; i++) {
    problems.emplace_back(new DeviceProblem(cfg, kCp, 1 + 7 * i % 40, LseMix::Special, freshSeed()));
    if (i % 3 == 0) CUDA_ASSERT(cudaLaunchHostFunc(s[i % 2], sleepMs, (void*)(intptr_t)20));
    DCP_ASSERT(lb->call(problems.back()->allBuffers().data(), problems.back()->batch(), nullptr, s[i % 2]));
  }
  CUDA_ASSERT(cudaDeviceSynchronize());
  for (size_t i = 0; i < problems.size(); i++) {
    const Mismatch m = problems[i]->checkAll();
    EXPECT_EQ(m.count, 0u) << "call " << i << ": " << m.first;
  }
  EXPECT_EQ(lb->asyncError(), ncclSuccess);
}

// Dual-batch overlap: two contexts, two streams, their calls in flight at
// once (each context orders only its own calls).
TEST_F(Streamed, TwoContextsOnTwoStreamsInFlightAtOnce) {
  auto a = loopback(ncclDcpProtoAuto, 4), b = loopback(ncclDcpProtoAuto, 4);
  ASSERT_TRUE(a && b);
  const Config cfg = configOf(*a);
  Streams s(2);
  std::vector<std::unique_ptr<DeviceProblem>> pa, pb;
  for (int i = 0; i < 8; i++) {
    pa.emplace_back(new DeviceProblem(cfg, 4, 3 + i, LseMix::Normal, freshSeed()));
    pb.emplace_back(new DeviceProblem(cfg, 4, 30 - i, LseMix::Normal, freshSeed()));
    DCP_ASSERT(a->call(pa.back()->allBuffers().data(), pa.back()->batch(), nullptr, s[0]));
    DCP_ASSERT(b->call(pb.back()->allBuffers().data(), pb.back()->batch(), nullptr, s[1]));
  }
  CUDA_ASSERT(cudaDeviceSynchronize());
  for (int i = 0; i < 8; i++) {
    EXPECT_EQ(pa[i]->checkAll().count, 0u) << "context a, call " << i;
    EXPECT_EQ(pb[i]->checkAll().count, 0u) << "context b, call " << i;
  }
}

// The outputs of rank r of p (packed layout) as floats: bf16 widened.
std::vector<float> outputsOf(const DeviceProblem& p, const Config& cfg, int rank, std::vector<float>* lse) {
  const size_t n = (size_t)p.batch() * cfg.localHeads * cfg.headDim;
  std::vector<uint16_t> raw(n);
  std::vector<float> out(n);
  cudaMemcpy(raw.data(), p.buffers(rank).out, n * 2, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; i++) {
    const uint32_t bits = (uint32_t)raw[i] << 16;
    memcpy(&out[i], &bits, 4);
  }
  lse->resize((size_t)p.batch() * cfg.localHeads);
  cudaMemcpy(lse->data(), p.buffers(rank).outLse, lse->size() * 4, cudaMemcpyDeviceToHost);
  return out;
}

// Counts the output elements and LSEs of rank r that are not NaN.
size_t notNan(const DeviceProblem& p, const Config& cfg, int rank) {
  std::vector<float> lse;
  const std::vector<float> out = outputsOf(p, cfg, rank, &lse);
  size_t n = 0;
  for (float v : out) n += !std::isnan(v);
  for (float v : lse) n += !std::isnan(v);
  return n;
}

// Outputs of every rank of p set to 0 (finite: a stale output would stay 0).
void zeroOutputs(const DeviceProblem& p, const Config& cfg, int nRanks) {
  for (int r = 0; r < nRanks; r++) {
    cudaMemset(p.buffers(r).out, 0, (size_t)p.batch() * cfg.localHeads * cfg.headDim * 2);
    cudaMemset(p.buffers(r).outLse, 0, (size_t)p.batch() * cfg.localHeads * 4);
  }
}

// Once a wait timed out, every later call -- replayed from a graph captured
// before, or eager -- writes NaN into every output it owns, at once,
// instead of leaving stale data; the eager call returns the async error.
TEST_F(Streamed, PoisonedContextWritesNanEagerAndReplayed) {
  for (int proto : {ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple}) {
    SCOPED_TRACE(protocolName(proto));
    const int cp = 4;
    auto lb = loopback(proto, cp, 200);
    ASSERT_TRUE(lb);
    const Config cfg = configOf(*lb);
    DeviceProblem p(cfg, cp, 6, LseMix::Normal, freshSeed());
    Streams s(1);
    Graph g;
    ASSERT_NO_FATAL_FAILURE(capture(lb.get(), p.allBuffers(), 6, s[0], &g));
    CUDA_ASSERT(cudaGraphLaunch(g.exec, s[0]));  // healthy: correct
    CUDA_ASSERT(cudaStreamSynchronize(s[0]));
    EXPECT_EQ(p.checkAll().count, 0u);
    lb->setSilentRank(2);
    DCP_ASSERT(lb->call(p.allBuffers().data(), 6, nullptr, s[0]));  // times out on the device
    CUDA_ASSERT(cudaStreamSynchronize(s[0]));
    ASSERT_EQ(lb->asyncError(), ncclRemoteError);
    for (int r = 0; r < cp; r++) {
      if (r == 2) continue;  // the silent rank writes nothing
      EXPECT_EQ(notNan(p, cfg, r), 0u) << "rank " << r << ": the call that timed out left outputs";
    }
    lb->setSilentRank(-1);
    zeroOutputs(p, cfg, cp);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; i++) CUDA_ASSERT(cudaGraphLaunch(g.exec, s[0]));
    CUDA_ASSERT(cudaStreamSynchronize(s[0]));
    EXPECT_LT(secondsSince(t0), 0.1) << "a poisoned replay waited on peers";
    for (int r = 0; r < cp; r++) EXPECT_EQ(notNan(p, cfg, r), 0u) << "rank " << r << ": a replay left stale outputs";
    zeroOutputs(p, cfg, cp);
    EXPECT_EQ(lb->call(p.allBuffers().data(), 6, nullptr, s[0]), ncclRemoteError);
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("poisoned"), std::string::npos) << ncclDcpGetLastError();
    CUDA_ASSERT(cudaStreamSynchronize(s[0]));
    for (int r = 0; r < cp; r++) EXPECT_EQ(notNan(p, cfg, r), 0u) << "rank " << r << ": the eager call left stale outputs";
  }
}

// ---- One NCCL rank: the same rules through the public API.

class OneRankStreams : public OneRankComm {};

TEST_F(OneRankStreams, AnyStreamAndBindStreamIsANoOp) {
  const ncclDcpConfig_t c = makeConfig(64, 2, ncclBfloat16, ncclDcpLseBase2);
  ncclDcpContext_t ctx = nullptr;
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx));
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
  Streams s(3);
  std::vector<std::unique_ptr<DeviceProblem>> problems;
  for (int i = 0; i < 6; i++) {
    problems.emplace_back(new DeviceProblem(cfg, 1, 1 + i, LseMix::Normal, freshSeed()));
    const CallBuffers b = problems.back()->buffers(0);
    cudaStream_t stream = i < 5 ? s[i % 3] : nullptr;  // the legacy default stream too
    DCP_ASSERT(ncclDcpA2aLseReduce(ctx, b.partialOut, (const float*)b.partialLse, b.out, b.outLse, 1 + i, nullptr, stream));
  }
  DCP_ASSERT(ncclDcpContextBindStream(ctx, s[0]));
  CUDA_ASSERT(cudaDeviceSynchronize());
  for (auto& p : problems) EXPECT_EQ(p->checkAll().count, 0u);
  DCP_ASSERT(ncclDcpContextDestroy(ctx));
}

// Two contexts on one communicator, two streams, in flight at once.
TEST_F(OneRankStreams, TwoContextsOnOneCommunicator) {
  const ncclDcpConfig_t c = makeConfig(128, 4, ncclBfloat16, ncclDcpLseBaseE, 8);
  ncclDcpContext_t ctx[2] = {};
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx[0]));
  DCP_ASSERT(ncclDcpContextCreate(comm_, &c, &ctx[1]));
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess);
  Streams s(2);
  std::vector<std::unique_ptr<DeviceProblem>> problems;
  for (int i = 0; i < 10; i++) {
    problems.emplace_back(new DeviceProblem(cfg, 1, 5 + 3 * i, LseMix::Special, freshSeed()));
    const CallBuffers b = problems.back()->buffers(0);
    DCP_ASSERT(ncclDcpA2aLseReduce(ctx[i % 2], b.partialOut, (const float*)b.partialLse, b.out, b.outLse, 5 + 3 * i, nullptr,
                                   s[i % 2]));
  }
  CUDA_ASSERT(cudaDeviceSynchronize());
  for (auto& p : problems) EXPECT_EQ(p->checkAll().count, 0u);
  DCP_ASSERT(ncclDcpContextDestroy(ctx[0]));
  DCP_ASSERT(ncclDcpContextDestroy(ctx[1]));
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
