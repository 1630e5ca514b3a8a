#include "test_util.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <sys/wait.h>

#include "reference.h"

namespace nccl_dcp {
namespace test {

bool parseRequiredGpus(const char* value, int* count, std::string* why) {
  *count = 0;
  if (value == nullptr || *value == '\0') return true;
  char* end = nullptr;
  errno = 0;
  const long n = strtol(value, &end, 10);
  if (errno != 0 || *end != '\0' || !isdigit((unsigned char)value[0]) || n > NCCL_DCP_MAX_RANKS) {
    *why = std::string("NCCL_DCP_REQUIRE_GPU=") + value + " is not a GPU count in [0, " +
           std::to_string(NCCL_DCP_MAX_RANKS) + "] (unset it, or set it to the GPUs this machine has)";
    return false;
  }
  *count = (int)n;
  return true;
}

GpuGate gateGpus(int needed, const char* requireEnv, cudaError_t countError, int count) {
  int required = 0;
  std::string why;
  if (!parseRequiredGpus(requireEnv, &required, &why)) return {GpuGate::Fail, why};
  std::string found;
  if (countError == cudaErrorNoDevice || countError == cudaErrorInsufficientDriver) {
    count = 0;  // no GPU, or no driver: nothing to run on
    found = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorString(countError) + ")";
  } else if (countError != cudaSuccess) {
    return {GpuGate::Fail, std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(countError) + ": " +
                               cudaGetErrorString(countError) + " (a broken driver or device, not a missing one)"};
  }
  if (count >= needed) return {GpuGate::Run, ""};
  const std::string need = "needs " + std::to_string(needed) + " GPU(s), found " + std::to_string(count) + found;
  if (required >= needed) return {GpuGate::Fail, "NCCL_DCP_REQUIRE_GPU=" + std::to_string(required) + ": " + need};
  return {GpuGate::Skip, need};
}

GpuGate gateGpus(int needed) {
  int n = 0;  // left unwritten when there is no driver
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();
  return gateGpus(needed, getenv("NCCL_DCP_REQUIRE_GPU"), e, n);
}

ncclDcpConfig_t makeConfig(int headDim, int localHeads, ncclDataType_t dtype, int lseBase, int maxBatch,
                           int protocol) {
  ncclDcpConfig_t c = NCCL_DCP_CONFIG_INITIALIZER;
  c.headDim = headDim;
  c.localHeads = localHeads;
  c.dtype = dtype;
  c.lseBase = lseBase;
  c.maxBatch = maxBatch;
  c.protocol = protocol;
  return c;
}

CallBuffers RankTensors::buffers() {
  return {partialOut.data(), lseData(), out.data(), outLse.empty() ? nullptr : outLse.data(),
          seqLens.empty() ? nullptr : seqLens.data(), queryStartLoc.empty() ? nullptr : queryStartLoc.data()};
}

Env forcedFallbackEnv() {
  Env e;
  e.forceFallback = true;
  return e;
}

Strides paddedStrides(const Config& cfg, int nRanks) {
  const int64_t D = cfg.headDim, Hl = cfg.localHeads, cp = nRanks;
  Strides s;
  s.inPeer = D;
  s.inHead = cp * D;
  s.inRow = Hl * cp * D + 8;
  s.lsePeer = 1;
  s.lseHead = cp;
  s.lseRow = Hl * cp + 3;
  const int64_t heads = headsPerRow(cfg, nRanks);
  s.outHead = D + 8;
  s.outRow = heads * (D + 8) + 16;
  s.outLseHead = 2;
  s.outLseRow = 2 * heads + 3;
  return s;
}

ncclDcpStrides_t apiStrides(const Strides& s) {
  ncclDcpStrides_t a = NCCL_DCP_STRIDES_INITIALIZER;
  a.inRow = s.inRow;
  a.inPeer = s.inPeer;
  a.inHead = s.inHead;
  a.lseRow = s.lseRow;
  a.lsePeer = s.lsePeer;
  a.lseHead = s.lseHead;
  a.outRow = s.outRow;
  a.outHead = s.outHead;
  a.outLseRow = s.outLseRow;
  a.outLseHead = s.outLseHead;
  return a;
}

namespace {

// Bytes of got's out and outLse that are no longer 0xff outside the
// elements visit(mark(row, head)) marks as written.
template <typename Visit>
size_t touchedOutsideOf(const Config& cfg, const Strides& s, const RankTensors& got, std::string* first,
                        Visit&& visit) {
  const int e = cfg.eltSize;
  std::vector<bool> written(got.out.size() / e, false), lseWritten(got.outLse.size(), false);
  visit([&](int64_t row, int64_t head) {
    for (int d = 0; d < cfg.headDim; d++) {
      const size_t i = (size_t)(row * s.outRow + head * s.outHead + d);
      if (i < written.size()) written[i] = true;
    }
    const size_t l = (size_t)(row * s.outLseRow + head * s.outLseHead);
    if (l < lseWritten.size()) lseWritten[l] = true;
  });
  size_t touched = 0;
  auto note = [&](const char* what, size_t i) {
    if (touched++ == 0 && first) *first = std::string(what) + " element " + std::to_string(i) + " outside the view";
  };
  for (size_t i = 0; i < written.size(); i++)
    for (int k = 0; k < e && !written[i]; k++)
      if (got.out[i * e + k] != 0xff) {
        note("out", i);
        break;
      }
  const uint8_t* lse = (const uint8_t*)got.outLse.data();
  for (size_t i = 0; i < lseWritten.size(); i++)
    for (int k = 0; k < 4 && !lseWritten[i]; k++)
      if (lse[i * 4 + k] != 0xff) {
        note("outLse", i);
        break;
      }
  return touched;
}

}  // namespace

size_t touchedPadding(const Config& cfg, int batch, const Strides& s, const RankTensors& got, std::string* first) {
  return touchedOutsideOf(cfg, s, got, first, [&](auto mark) {
    for (int b = 0; b < batch; b++)
      for (int j = 0; j < cfg.localHeads; j++) mark(b, j);
  });
}

size_t touchedOutside(const Config& cfg, int nRanks, int rank, const CallShape& shape, const Strides& s,
                      const RankTensors& got, std::string* first) {
  return touchedOutsideOf(cfg, s, got, first, [&](auto mark) {
    forEachOutput(shape, nRanks, rank, [&](int, int, int row, int head) { mark(row, head); });
  });
}

size_t viewElements(const Strides& s, int batch, int nRanks, int localHeads, int headDim, bool input) {
  if (batch == 0) return 0;
  int64_t last = headDim;
  if (input) last += (batch - 1) * s.inRow + (nRanks - 1) * s.inPeer + (localHeads - 1) * s.inHead;
  else last += (batch - 1) * s.outRow + (localHeads - 1) * s.outHead;
  return (size_t)last;
}

size_t lseViewElements(const Strides& s, int batch, int nRanks, int localHeads, bool input) {
  if (batch == 0) return 0;
  int64_t last = 1;
  if (input) last += (batch - 1) * s.lseRow + (nRanks - 1) * s.lsePeer + (localHeads - 1) * s.lseHead;
  else last += (batch - 1) * s.outLseRow + (localHeads - 1) * s.outLseHead;
  return (size_t)last;
}

std::vector<RankTensors> makeInputs(const Config& cfg, int nRanks, int batch, const Strides& s, LseMix mix,
                                    std::mt19937_64& rng) {
  std::uniform_real_distribution<float> value(-1.f, 1.f), lseDist(-8.f, 8.f), unit(0.f, 1.f);
  const float nan = std::nanf("");
  std::vector<RankTensors> ranks(nRanks);
  const size_t inElems = viewElements(s, batch, nRanks, cfg.localHeads, cfg.headDim, true);
  const size_t outElems = viewElements(s, batch, nRanks, cfg.localHeads, cfg.headDim, false);
  for (int r = 0; r < nRanks; r++) {
    RankTensors& t = ranks[r];
    t.partialOut.resize(inElems * cfg.eltSize);
    t.partialLse.resize(lseViewElements(s, batch, nRanks, cfg.localHeads, true));
    for (size_t i = 0; i < inElems; i++) storeElement(cfg.dtype, t.partialOut.data(), i, value(rng));
    for (float& l : t.partialLse) l = lseDist(rng);
    t.out.assign(outElems * cfg.eltSize, 0xff);
    t.outLse.resize(lseViewElements(s, batch, nRanks, cfg.localHeads, false));
    memset(t.outLse.data(), 0xff, t.outLse.size() * sizeof(float));
  }
  if (mix == LseMix::Normal) return ranks;
  // Overwrite some (row, head) columns across sources with special values.
  for (int b = 0; b < batch; b++) {
    for (int p = 0; p < nRanks; p++) {
      for (int j = 0; j < cfg.localHeads; j++) {
        const float pick = unit(rng);
        int dominant = (int)(unit(rng) * nRanks) % nRanks;
        for (int src = 0; src < nRanks; src++) {
          float& l = ranks[src].partialLse[b * s.lseRow + p * s.lsePeer + j * s.lseHead];
          if (mix == LseMix::Special) {
            const float u = unit(rng);
            if (pick < 0.1f) l = -INFINITY;  // every source empty
            else if (u < 0.15f) l = -INFINITY;
            else if (u < 0.25f) l = nan;
            else if (u < 0.3f) l = INFINITY;
          } else {
            if (pick < 0.3f) l = src == dominant ? 1e30f : -1e30f;
            else if (pick < 0.6f) l = src == dominant ? 60.f : -60.f;
            else if (pick < 0.8f) l = (unit(rng) < 0.5f) ? 1e30f : -1e30f;
          }
          // An empty source's payload may be garbage: NaN must not leak.
          if (std::isnan(l) || std::isinf(l)) {
            uint8_t* base = ranks[src].partialOut.data();
            for (int d = 0; d < cfg.headDim; d++)
              storeElement(cfg.dtype, base, b * s.inRow + p * s.inPeer + j * s.inHead + d, nan);
          }
        }
      }
    }
  }
  return ranks;
}

Mismatch compareOutputs(const Config& cfg, int nRanks, int batch, const Strides& s,
                        const std::vector<RankTensors>& got, const std::vector<RankTensors>& want,
                        const CallShape* shape) {
  std::vector<CallBuffers> g, w;
  for (int r = 0; r < nRanks; r++) {
    g.push_back(const_cast<RankTensors&>(got[r]).buffers());
    w.push_back(const_cast<RankTensors&>(want[r]).buffers());
  }
  Mismatch m;
  m.count = countMismatches(cfg, nRanks, batch, s, g.data(), w.data(), &m.first, shape);
  return m;
}

oracle::Problem oracleProblem(const Config& cfg, int nRanks, int batch, const Strides& s,
                              const std::vector<RankTensors>& in, const std::vector<int>& counts) {
  oracle::Problem p;
  p.cp = nRanks;
  p.batch = batch;
  p.localHeads = cfg.localHeads;
  p.headDim = cfg.headDim;
  p.dtype = cfg.dtype;
  p.lseDtype = cfg.lseDtype;
  p.base = cfg.lseBase == LseBase::Two ? oracle::Base::Two : oracle::Base::E;
  p.mode = cfg.scatter == Scatter::Head ? oracle::Mode::Head
           : cfg.scatter == Scatter::Token ? oracle::Mode::Token
                                           : oracle::Mode::None;
  p.wire = cfg.wire == Wire::Fp8E4m3 ? oracle::Wire::Fp8 : oracle::Wire::Native;
  p.layout = {s.inRow, s.inPeer, s.inHead, s.lseRow, s.lsePeer, s.lseHead, s.outRow, s.outHead, s.outLseRow,
              s.outLseHead};
  p.rowCounts = counts;
  p.numSeqs = in.empty() ? 0 : (int)in[0].seqLens.size();
  for (const RankTensors& t : in) {
    oracle::Rank r;
    r.partialOut = t.partialOut.data();
    r.partialLse = t.lseData();
    if (!t.seqLens.empty()) {
      r.seqLens = t.seqLens.data();
      r.queryStartLoc = t.queryStartLoc.data();
    }
    p.ranks.push_back(r);
  }
  return p;
}

Mismatch oracleMismatches(const oracle::Problem& p, const std::vector<RankTensors>& got, const std::vector<int>& ranks,
                          bool untouched) {
  std::vector<oracle::Output> outs(p.cp);
  for (int r = 0; r < p.cp; r++) {
    if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), r) == ranks.end()) continue;
    oracle::Output& o = outs[r];
    o.out = got[r].out.data();
    o.outElements = got[r].out.size() / dtypeSize(p.dtype);
    o.outLse = got[r].outLse.empty() ? nullptr : got[r].outLse.data();
    o.outLseElements = got[r].outLse.size();
  }
  oracle::CheckOptions options;
  options.untouched = untouched;
  const oracle::Report rep = oracle::check(p, outs, options);
  Mismatch m;
  m.count = rep.bad;
  if (rep.bad) m.first = rep.first;
  return m;
}

Mismatch withOracle(const Mismatch& reference, const Mismatch& oracle) {
  Mismatch m;
  m.count = reference.count + oracle.count;
  if (reference.count) m.first = "against the CPU reference: " + reference.first;
  if (oracle.count) m.first += std::string(reference.count ? "; " : "") + "against the fp64 oracle (" +
                               std::to_string(oracle.count) + "): " + oracle.first;
  return m;
}

ncclDcpConfig_t withScatter(ncclDcpConfig_t c, int scatter, ncclDataType_t lseDtype) {
  c.scatter = scatter;
  c.lseDtype = lseDtype;
  return c;
}

CallShape hostShape(const Config& cfg, int nRanks, int batch, const std::vector<int>& counts, int numSeqs) {
  CallShape shape;
  resolveCallArgs(nullptr, cfg, nRanks, batch, &shape);  // the even split
  if (!counts.empty()) {
    shape.split.start[0] = 0;
    for (int p = 0; p < nRanks; p++) shape.split.start[p + 1] = shape.split.start[p] + counts[p];
  }
  shape.numSeqs = numSeqs;
  return shape;
}

int outCapacityRows(const CallShape& shape, int rank, bool deviceCounts) {
  if (shape.scatter != Scatter::Token || deviceCounts) return shape.batch;
  return shape.split.start[rank + 1] - shape.split.start[rank];
}

int addEmptyShards(const Config& cfg, int nRanks, int batch, const Strides& s, std::vector<RankTensors>* ranks,
                   std::mt19937_64& rng) {
  auto draw = [&](int n) { return (int)(rng() % (uint64_t)n); };
  // Shared query start offsets: padding rows at both ends (when the batch
  // has room), then sequences of 0..several rows.
  const int lead = batch >= 4 ? 1 + draw(2) : 0, tail = batch >= 4 ? 1 + draw(2) : 0;
  std::vector<int> qsl = {lead};
  while (qsl.back() < batch - tail) {
    const int len = draw(5) == 0 ? 0 : 1 + draw(std::max(1, batch / 6));
    qsl.push_back(std::min(qsl.back() + len, batch - tail));
  }
  if (qsl.size() == 1) qsl.push_back(qsl.back());  // one sequence of no rows
  const int numSeqs = (int)qsl.size() - 1;
  const int emptyEverywhere = draw(numSeqs);
  for (int r = 0; r < nRanks; r++) {
    RankTensors& t = (*ranks)[r];
    t.queryStartLoc = qsl;
    t.seqLens.resize(numSeqs);
    // Empty local lengths are 0 or negative (the library reads <= 0 as
    // empty, DESIGN §14): both kinds, on some ranks and on every rank.
    for (int i = 0; i < numSeqs; i++)
      t.seqLens[i] = i == emptyEverywhere || draw(3) == 0 ? (draw(2) == 0 ? 0 : -1 - draw(1000)) : 1 + draw(1000);
  }
  // Garbage wherever a row is empty on a rank.
  const float garbage[] = {std::nanf(""), INFINITY, -INFINITY, 1e30f, -1e30f, 7.f};
  for (int r = 0; r < nRanks; r++) {
    RankTensors& t = (*ranks)[r];
    for (int b = 0; b < batch; b++) {
      oracle::Problem rows;  // the oracle's rule, not the library's (merge.h)
      rows.numSeqs = numSeqs;
      rows.ranks.push_back({nullptr, nullptr, t.seqLens.data(), t.queryStartLoc.data()});
      if (!oracle::rowIsEmpty(rows, 0, b)) continue;
      for (int p = 0; p < nRanks; p++)
        for (int j = 0; j < cfg.localHeads; j++) {
          t.partialLse[b * s.lseRow + p * s.lsePeer + j * s.lseHead] = garbage[draw(6)];
          for (int d = 0; d < cfg.headDim; d++)
            storeElement(cfg.dtype, t.partialOut.data(), b * s.inRow + p * s.inPeer + j * s.inHead + d,
                         d % 3 == 0 ? std::nanf("") : 1e30f);
        }
    }
  }
  return numSeqs;
}

void narrowLses(const Config& cfg, std::vector<RankTensors>* ranks) {
  if (cfg.lseDtype == ncclFloat32) return;
  for (RankTensors& t : *ranks) {
    t.narrowLse.assign(t.partialLse.size() * 2, 0);
    for (size_t i = 0; i < t.partialLse.size(); i++) {
      storeElement(cfg.lseDtype, t.narrowLse.data(), i, t.partialLse[i]);
      t.partialLse[i] = loadElement(cfg.lseDtype, t.narrowLse.data(), i);
    }
  }
}

std::vector<RankTensors> makeCallInputs(const Config& cfg, int nRanks, int batch, const Strides& s, LseMix mix,
                                        std::mt19937_64& rng, const CallSpec& spec, const std::vector<int>& outRows,
                                        int slackRows, int* numSeqs) {
  std::vector<RankTensors> ranks = makeInputs(cfg, nRanks, batch, s, mix, rng);
  if (spec.edit) spec.edit(ranks, s);
  *numSeqs = spec.emptyShards && batch > 0 ? addEmptyShards(cfg, nRanks, batch, s, &ranks, rng) : 0;
  narrowLses(cfg, &ranks);
  const int heads = headsPerRow(cfg, nRanks);
  for (int r = 0; r < nRanks; r++) {
    const int rows = outRows[r] + slackRows;
    ranks[r].out.assign(viewElements(s, rows, nRanks, heads, cfg.headDim, false) * cfg.eltSize, 0xff);
    ranks[r].outLse.assign(lseViewElements(s, rows, nRanks, heads, false), 0.f);
    memset(ranks[r].outLse.data(), 0xff, ranks[r].outLse.size() * sizeof(float));
  }
  return ranks;
}

namespace {

// The seed sequence of the running test (gtest runs one test at a time).
struct SeedSequence {
  std::mutex mutex;
  std::string test;   // suite.name of the test it belongs to
  uint32_t base = 0;
  uint64_t draws = 0;
} gSeeds;

std::string runningTest() {
  const testing::TestInfo* t = testing::UnitTest::GetInstance()->current_test_info();
  return t ? std::string(t->test_suite_name()) + "." + t->name() : std::string();
}

uint64_t splitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t freshSeed() {
  std::lock_guard<std::mutex> lock(gSeeds.mutex);
  const std::string test = runningTest();
  if (gSeeds.base == 0 || test != gSeeds.test) {
    // gtest accepts seeds in [1, 99999]: a base drawn here can be passed back.
    const int32_t flag = GTEST_FLAG_GET(random_seed);
    gSeeds.test = test;
    gSeeds.base = flag > 0 ? (uint32_t)flag : std::random_device{}() % 99999u + 1u;
    gSeeds.draws = 0;
  }
  return splitMix64(((uint64_t)gSeeds.base << 32) + gSeeds.draws++);
}

uint32_t testBaseSeed() {
  std::lock_guard<std::mutex> lock(gSeeds.mutex);
  return gSeeds.base != 0 && runningTest() == gSeeds.test ? gSeeds.base : 0;
}

// A failed allocation leaves no error behind for the next CUDA check to find.
DeviceBuffer::DeviceBuffer(size_t n) : bytes(n) {
  if (n && cudaMalloc(&ptr, n) != cudaSuccess) {
    ptr = nullptr;
    cudaGetLastError();
  }
}

DeviceBuffer hostResidentBuffer(size_t n) {
  DeviceBuffer b;
  int dev = 0;
  if (n == 0 || cudaGetDevice(&dev) != cudaSuccess || cudaMallocManaged(&b.ptr, n) != cudaSuccess) {
    b.ptr = nullptr;
    cudaGetLastError();
    return b;
  }
  b.bytes = n;
  cudaMemLocation host = {}, gpu = {};
  host.type = cudaMemLocationTypeHost;
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = dev;
  if (cudaMemAdvise(b.ptr, n, cudaMemAdviseSetPreferredLocation, host) != cudaSuccess ||
      cudaMemAdvise(b.ptr, n, cudaMemAdviseSetAccessedBy, gpu) != cudaSuccess) {
    cudaGetLastError();
    return DeviceBuffer();  // b frees the allocation
  }
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr) cudaFree(ptr);
}

size_t freeDeviceMemory() {
  cudaDeviceSynchronize();
  size_t freeBytes = 0, total = 0;
  cudaMemGetInfo(&freeBytes, &total);
  return freeBytes;
}

cudaError_t RankBuffers::upload(const RankTensors& t, cudaStream_t stream) {
  cudaError_t e = cudaMemcpyAsync(in.ptr, t.partialOut.data(), in.bytes, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess) e = cudaMemcpyAsync(lse.ptr, t.lseData(), lse.bytes, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  return e == cudaSuccess ? poison(stream) : e;
}

cudaError_t RankBuffers::poison(cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(out.ptr, 0xff, out.bytes, stream);
  if (e == cudaSuccess && outLse.bytes) e = cudaMemsetAsync(outLse.ptr, 0xff, outLse.bytes, stream);
  return e;
}

cudaError_t RankBuffers::download(RankTensors* t, cudaStream_t stream) {
  cudaError_t e = cudaMemcpyAsync(t->out.data(), out.ptr, out.bytes, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess && outLse.bytes)
    e = cudaMemcpyAsync(t->outLse.data(), outLse.ptr, outLse.bytes, cudaMemcpyDeviceToHost, stream);
  return e == cudaSuccess ? cudaStreamSynchronize(stream) : e;
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

CommandResult runCommand(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) r.output.append(buf, n);
  const int s = pclose(p);
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  return r;
}

void RankThreads::run(int nRanks, const std::function<void(int)>& body) {
  auto done = std::make_shared<std::atomic<int>>(0);
  std::vector<std::thread> threads;
  for (int r = 0; r < nRanks; r++)
    threads.emplace_back([&body, done, r] {
      body(r);
      done->fetch_add(1);
    });
  const auto t0 = std::chrono::steady_clock::now();
  while (done->load() < nRanks && secondsSince(t0) < hangSeconds_)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (done->load() < nRanks) {
    fprintf(stderr, "HANG: %d of %d rank threads still running after %.0f s in %s\n", nRanks - done->load(), nRanks,
            hangSeconds_, testing::UnitTest::GetInstance()->current_test_info()->name());
    fflush(stderr);
    std::_Exit(1);
  }
  for (std::thread& t : threads) t.join();
  std::lock_guard<std::mutex> l(mutex_);
  for (const std::string& f : failures_) ADD_FAILURE() << f;
  failures_.clear();
}

void RankThreads::addFailure(int rank, const std::string& what) {
  std::lock_guard<std::mutex> l(mutex_);
  failures_.push_back("rank " + std::to_string(rank) + ": " + what);
}

Config resolved(const ncclDcpConfig_t& c) {
  Config cfg;
  EXPECT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << ncclDcpGetLastError();
  return cfg;
}

std::unique_ptr<Loopback> makeLoopback(const ncclDcpConfig_t& c, int nRanks) {
  std::unique_ptr<Loopback> lb;
  EXPECT_EQ(Loopback::create(&c, nRanks, &lb), ncclSuccess) << ncclDcpGetLastError();
  return lb;
}

}  // namespace test
}  // namespace nccl_dcp
