// The profiler plugin (plugin/), driven as NCCL drives it: the built
// libnccl-profiler-dcp.so is dlopen'ed and its ncclProfiler_v5/_v6 called
// with synthetic event sequences shaped like NCCL 2.28's (per kernel plan:
// Group start, task starts, task stops, Group stop; later KernelCh events
// whose parent is a task), well-formed and malformed; each test reads the
// JSON report back and checks the counts. Also: the exported symbols, the
// library hook, calibration estimates, no allocation on the event path,
// and the failure path that turns the plugin off.
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "calibration.h"
#include "context.h"
#include "dcp_hook.h"
#include "json.h"
#include "nccl_profiler_abi.h"
#include "profiler_hook.h"
#include "registry.h"
#include "report_file.h"

#ifndef DCP_PLUGIN_PATH
#error "DCP_PLUGIN_PATH: the built libnccl-profiler-dcp.so (test/meson.build)"
#endif

// ---------------------------------------------------------------------------
// Allocation counter: the executable's malloc, calloc and realloc interpose
// the C library's for every library in the process (the dynamic linker
// looks in the executable first), the plugin's operator new included
// (libstdc++'s calls malloc), so an event that allocates shows. Also a
// shortage on demand: while gFailAllocationsFrom is set, a malloc of that
// many bytes or more returns null.
extern "C" {
void* __libc_malloc(size_t n);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t n);
}
namespace {
std::atomic<bool> gCountAllocations{false};
std::atomic<long> gAllocations{0};
std::atomic<size_t> gFailAllocationsFrom{0};  // 0: none fails
bool failAllocation(size_t n) {
  const size_t from = gFailAllocationsFrom.load(std::memory_order_relaxed);
  return from != 0 && n >= from;
}
void countAllocation() {
  if (gCountAllocations.load(std::memory_order_relaxed)) gAllocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace
extern "C" {
void* malloc(size_t n) {
  countAllocation();
  return failAllocation(n) ? nullptr : __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  countAllocation();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  countAllocation();
  return __libc_realloc(p, n);
}
}  // extern "C"

namespace nccl_dcp {
namespace plugin {
namespace {

// ---------------------------------------------------------------------------
// The plugin as NCCL sees it.

struct Plugin {
  void* lib = nullptr;
  ncclProfiler_v5_t* v5 = nullptr;
  ncclProfiler_v6_t* v6 = nullptr;
  const ncclDcpProfilerHook_v1_t* hook = nullptr;
  std::string error;
};

const Plugin& plugin() {
  static Plugin p = [] {
    Plugin q;
    q.lib = dlopen(DCP_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);  // as NCCL opens it
    if (q.lib == nullptr) {
      q.error = dlerror();
      return q;
    }
    q.v5 = (ncclProfiler_v5_t*)dlsym(q.lib, "ncclProfiler_v5");
    q.v6 = (ncclProfiler_v6_t*)dlsym(q.lib, "ncclProfiler_v6");
    q.hook = (const ncclDcpProfilerHook_v1_t*)dlsym(q.lib, NCCL_DCP_PROFILER_HOOK_SYMBOL);
    return q;
  }();
  return p;
}

// NCCL's logger, captured.
std::mutex gLogMutex;
std::vector<std::string> gLog;
void captureLog(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(gLogMutex);
  gLog.push_back(std::string(level == NCCL_LOG_WARN ? "WARN " : "INFO ") + msg);
}
int logLinesWith(const std::string& needle) {
  std::lock_guard<std::mutex> lock(gLogMutex);
  int n = 0;
  for (const std::string& l : gLog) n += l.find(needle) != std::string::npos;
  return n;
}

uint64_t freshHash() {
  static std::atomic<uint64_t> next{0x5eed000000000001ull};
  return next.fetch_add(0x101);
}

std::string hashString(uint64_t h) {
  char buf[32];
  snprintf(buf, sizeof(buf), "0x%016llx", (unsigned long long)h);
  return buf;
}

// One communicator, its events shaped as NCCL 2.28 emits them.
class FakeComm {
 public:
  FakeComm(int rank, int nRanks, int nNodes = 1, const char* name = "test")
      : hash(freshHash()), rank_(rank), nRanks_(nRanks) {
    initResult = plugin().v5->init(&ctx, hash, &mask, name, nNodes, nRanks, rank, captureLog);
  }
  ~FakeComm() {
    if (ctx != nullptr && !finalized_) finalize();
  }

  ncclResult_t finalize() {
    finalized_ = true;
    return plugin().v5->finalize(ctx);
  }

  void* start(const ncclProfilerEventDescr_v5_t& d) {
    ncclProfilerEventDescr_v5_t copy = d;
    void* h = nullptr;
    EXPECT_EQ(plugin().v5->startEvent(ctx, &h, &copy), ncclSuccess);
    return h;
  }
  void stop(void* h) { EXPECT_EQ(plugin().v5->stopEvent(h), ncclSuccess); }

  void* startGroup() {
    ncclProfilerEventDescr_v5_t d = {};
    d.type = ncclProfileGroup;
    return start(d);
  }
  void* startP2p(void* group, const char* func, int peer, size_t count, const char* dtype = "ncclFloat32",
                 int nChannels = 1) {
    ncclProfilerEventDescr_v5_t d = {};
    d.type = ncclProfileP2p;
    d.rank = rank_;
    d.p2p.func = func;
    d.p2p.datatype = dtype;
    d.p2p.count = count;
    d.p2p.peer = peer;
    d.p2p.nChannels = (uint8_t)nChannels;
    d.p2p.parentGroup = group;
    return start(d);
  }
  void* startColl(void* group, const char* func, size_t count, const char* dtype, int nChannels = 1) {
    ncclProfilerEventDescr_v5_t d = {};
    d.type = ncclProfileColl;
    d.rank = rank_;
    d.coll.func = func;
    d.coll.datatype = dtype;
    d.coll.count = count;
    d.coll.nChannels = (uint8_t)nChannels;
    d.coll.parentGroup = group;
    return start(d);
  }

  // One plan of one collective, as NCCL reaches the profiler.
  void collectivePlan(const char* func, size_t count, const char* dtype) {
    void* g = startGroup();
    stop(startColl(g, func, count, dtype));
    stop(g);
  }

  // One plan of k all-to-alls of `count` elements per peer, as ncclAlltoAll
  // reaches the profiler: a Send and a Recv task per peer (none to self
  // in place). Returns the task handles.
  std::vector<void*> allToAllPlan(size_t count, int k = 1, bool inPlace = false, const char* dtype = "ncclFloat32") {
    void* g = startGroup();
    std::vector<void*> tasks;
    for (int i = 0; i < k; i++)
      for (int p = 0; p < nRanks_; p++) {
        if (inPlace && p == rank_) continue;
        tasks.push_back(startP2p(g, "Send", p, count, dtype));
        tasks.push_back(startP2p(g, "Recv", p, count, dtype));
      }
    for (void* t : tasks) stop(t);
    stop(g);
    return tasks;
  }

  // One channel of a task's kernel: start, KernelChStop state, stop.
  void kernel(void* task, uint64_t startNs, uint64_t stopNs) {
    ncclProfilerEventDescr_v5_t d = {};
    d.type = ncclProfileKernelCh;
    d.parentObj = task;
    d.kernelCh.pTimer = startNs;
    void* h = start(d);
    ncclProfilerEventStateArgs_v5_t a = {};
    a.kernelCh.pTimer = stopNs;
    EXPECT_EQ(plugin().v5->recordEventState(h, ncclProfilerKernelChStop, &a), ncclSuccess);
    stop(h);
  }

  uint64_t hash;
  void* ctx = nullptr;
  int mask = 0;
  ncclResult_t initResult;

 private:
  int rank_, nRanks_;
  bool finalized_ = false;
};

// ---------------------------------------------------------------------------
// The report.

std::string reportFile() { return ::testing::TempDir() + "dcp-plugin-report-" + std::to_string(getpid()) + ".json"; }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

json::Value readJson(const std::string& path) {
  json::Value v;
  std::string why;
  EXPECT_TRUE(json::parse(slurp(path), &v, &why)) << path << ": " << why;
  return v;
}

json::Value readReport() { return readJson(reportFile()); }

const json::Value* commIn(const json::Value& report, uint64_t hash) {
  const json::Value* comms = report.find("communicators");
  if (comms == nullptr) return nullptr;
  for (const json::Value& c : comms->array)
    if (const json::Value* h = c.find("commHash"); h && h->string == hashString(hash)) return &c;
  return nullptr;
}

int commsWithHash(const json::Value& report, uint64_t hash) {
  int n = 0;
  for (const json::Value& c : report.find("communicators")->array) n += c.find("commHash")->string == hashString(hash);
  return n;
}

const json::Value* opIn(const json::Value& comm, const char* kind) {
  for (const json::Value& op : comm.find("ops")->array)
    if (op.find("kind")->string == kind) return &op;
  return nullptr;
}

double number(const json::Value* v, const char* key) {
  const json::Value* f = v ? v->find(key) : nullptr;
  return f && f->isNumber() ? f->number : -1;
}

uint64_t opCalls(const json::Value& comm, const char* kind) {
  const json::Value* op = opIn(comm, kind);
  return op ? (uint64_t)number(op, "calls") : 0;
}

// Calls of one exact size of a kind (0 if absent).
uint64_t sizeCalls(const json::Value& comm, const char* kind, uint64_t bytes) {
  const json::Value* op = opIn(comm, kind);
  if (op == nullptr) return 0;
  for (const json::Value& z : op->find("sizes")->array)
    if ((uint64_t)number(&z, "bytes") == bytes) return (uint64_t)number(&z, "calls");
  return 0;
}

double anomaly(const json::Value& comm, const char* key) { return number(comm.find("anomalies"), key); }

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(plugin().lib) << DCP_PLUGIN_PATH << ": " << plugin().error;
    ASSERT_TRUE(plugin().v5 && plugin().v6 && plugin().hook);
    const std::string pattern = ::testing::TempDir() + "dcp-plugin-report-%p.json";
    setenv("NCCL_DCP_PROFILE_FILE", pattern.c_str(), 1);
    unsetenv("NCCL_DCP_PROFILE_CALIBRATION");
    unsetenv("NCCL_DCP_PROFILE_KERNEL");
    unsetenv("NCCL_DCP_PROFILE_INJECT_FAULT");
  }
};

// ---------------------------------------------------------------------------
// The library as NCCL finds it.

TEST_F(PluginTest, ExportsV5AndV6AndTheHookOnly) {
  for (const char* old : {"ncclProfiler_v1", "ncclProfiler_v2", "ncclProfiler_v3", "ncclProfiler_v4"})
    EXPECT_EQ(dlsym(plugin().lib, old), nullptr) << old << ": an NCCL that knows only older ABIs must refuse us";
  const ncclProfiler_v5_t& v5 = *plugin().v5;
  const ncclProfiler_v6_t& v6 = *plugin().v6;
  EXPECT_STREQ(v5.name, "nccl-dcp");
  EXPECT_STREQ(v6.name, "nccl-dcp");
  EXPECT_TRUE(v5.init && v5.startEvent && v5.stopEvent && v5.recordEventState && v5.finalize);
  EXPECT_TRUE(v6.init && v6.startEvent && v6.stopEvent && v6.recordEventState && v6.finalize);
  EXPECT_TRUE(plugin().hook->recordCall);
  // NCCL_PROFILER_PLUGIN=dcp makes NCCL open libnccl-profiler-dcp.so; the
  // library finds the loaded plugin by that SONAME.
  void* bySoname = dlopen(NCCL_DCP_PROFILER_HOOK_SONAME, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_EQ(bySoname, plugin().lib);
  if (bySoname) dlclose(bySoname);
}

TEST_F(PluginTest, InitAsksForPlansTasksAndKernelTimes) {
  FakeComm c(0, 2);
  ASSERT_EQ(c.initResult, ncclSuccess);
  ASSERT_NE(c.ctx, nullptr);
  EXPECT_EQ(c.mask, ncclProfileGroup | ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh);
  setenv("NCCL_DCP_PROFILE_KERNEL", "0", 1);
  FakeComm noKernel(0, 2);
  EXPECT_EQ(noKernel.mask, ncclProfileGroup | ncclProfileColl | ncclProfileP2p);
  void* ctx6 = nullptr;
  int mask6 = 0;
  unsetenv("NCCL_DCP_PROFILE_KERNEL");
  ASSERT_EQ(plugin().v6->init(&ctx6, freshHash(), &mask6, "v6", 1, 2, 1, captureLog), ncclSuccess);
  EXPECT_EQ(mask6, ncclProfileGroup | ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh | ncclProfileCeColl);
  EXPECT_EQ(plugin().v6->finalize(ctx6), ncclSuccess);
}

TEST_F(PluginTest, TheKernelSwitchTakesTheUsualBooleanSpellings) {
  const int plans = ncclProfileGroup | ncclProfileColl | ncclProfileP2p;
  for (const char* off : {"0", "false", "FALSE", "no", "No", "off", "OFF"}) {
    setenv("NCCL_DCP_PROFILE_KERNEL", off, 1);
    FakeComm c(0, 2);
    EXPECT_EQ(c.mask, plans) << "NCCL_DCP_PROFILE_KERNEL=" << off;
  }
  for (const char* on : {"1", "true", "True", "yes", "YES", "on", "On", ""}) {
    setenv("NCCL_DCP_PROFILE_KERNEL", on, 1);
    FakeComm c(0, 2);
    EXPECT_EQ(c.mask, plans | ncclProfileKernelCh) << "NCCL_DCP_PROFILE_KERNEL=" << on;
  }
  // Anything else: refused with one warning naming the variable; the default (on) stays.
  for (int i = 0; i < 2; i++) {
    setenv("NCCL_DCP_PROFILE_KERNEL", "disable", 1);
    FakeComm c(0, 2);
    EXPECT_EQ(c.mask, plans | ncclProfileKernelCh);
  }
  EXPECT_EQ(logLinesWith("WARN NCCL-DCP profiler: NCCL_DCP_PROFILE_KERNEL=\"disable\" is not a boolean"), 1);
}

// ---------------------------------------------------------------------------
// Counting.

TEST_F(PluginTest, AllToAllsAreCountedExactlyBySize) {
  FakeComm c(1, 4);
  for (int i = 0; i < 7; i++) c.allToAllPlan(256);                  // 4 ranks x 256 floats = 4 KiB
  for (int i = 0; i < 5; i++) c.allToAllPlan(256, 1, /*inPlace=*/true);  // NCCL drops the self pair
  for (int i = 0; i < 3; i++) c.allToAllPlan(1024, 1, false, "ncclBfloat16");  // 8 KiB
  c.allToAllPlan(64, /*k=*/4);                                       // 4 all-to-alls in one group
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(opCalls(*comm, "AlltoAll"), 19u);
  EXPECT_EQ(sizeCalls(*comm, "AlltoAll", 4096), 12u);
  EXPECT_EQ(sizeCalls(*comm, "AlltoAll", 8192), 3u);
  EXPECT_EQ(sizeCalls(*comm, "AlltoAll", 1024), 4u);
  EXPECT_EQ(opCalls(*comm, "Send"), 0u) << "sends of whole all-to-alls are not also counted as sends";
  EXPECT_EQ(opCalls(*comm, "Recv"), 0u);
  EXPECT_EQ(number(comm, "plans"), 16);
  const json::Value* a2a = comm->find("alltoall");
  EXPECT_EQ(number(a2a, "calls"), 19);
  EXPECT_EQ(a2a->find("sizes")->array.size(), 3u);
  EXPECT_GE(logLinesWith("NCCL-DCP profiler:   AlltoAll"), 1) << "the table goes to NCCL's log";
}

TEST_F(PluginTest, SendRecvThatFormNoAllToAllStaySendRecv) {
  FakeComm c(0, 4);
  void* g = c.startGroup();  // a ring step: send right, receive from left
  std::vector<void*> t = {c.startP2p(g, "Send", 1, 100), c.startP2p(g, "Recv", 3, 100)};
  for (void* h : t) c.stop(h);
  c.stop(g);
  g = c.startGroup();  // every peer, but two sizes
  t.clear();
  for (int p = 0; p < 4; p++) {
    t.push_back(c.startP2p(g, "Send", p, p == 2 ? 8 : 16));
    t.push_back(c.startP2p(g, "Recv", p, 16));
  }
  for (void* h : t) c.stop(h);
  c.stop(g);
  g = c.startGroup();  // every peer but one twice
  t.clear();
  for (int p : {0, 1, 1, 2, 3}) {
    t.push_back(c.startP2p(g, "Send", p, 16));
    t.push_back(c.startP2p(g, "Recv", p, 16));
  }
  for (void* h : t) c.stop(h);
  c.stop(g);
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(opCalls(*comm, "AlltoAll"), 0u);
  EXPECT_EQ(opCalls(*comm, "Send"), 1u + 4u + 5u);
  EXPECT_EQ(opCalls(*comm, "Recv"), 1u + 4u + 5u);
  EXPECT_EQ(sizeCalls(*comm, "Send", 400), 1u);
  EXPECT_EQ(sizeCalls(*comm, "Send", 32), 1u);
  EXPECT_EQ(comm->find("alltoall")->find("estimate")->string, "no all-to-all seen");
}

TEST_F(PluginTest, CollectivesGetSizesAndALog2Histogram) {
  FakeComm c(0, 2);
  for (size_t count : {1, 1000, 1024, 1025, 4096}) c.collectivePlan("AllReduce", count, "ncclFloat16");
  c.collectivePlan("AllGather", 3, "ncclInt8");
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(opCalls(*comm, "AllReduce"), 5u);
  EXPECT_EQ(opCalls(*comm, "AllGather"), 1u);
  const json::Value* ar = opIn(*comm, "AllReduce");
  EXPECT_EQ(number(ar, "bytes"), 2 * (1 + 1000 + 1024 + 1025 + 4096));
  EXPECT_EQ(sizeCalls(*comm, "AllReduce", 2048), 1u);
  // Bytes 2, 2000, 2048, 2050, 8192 fall in [2,4), [1024,2048), [2048,4096) twice, [8192,16384).
  std::vector<std::pair<double, double>> hist;
  for (const json::Value& b : ar->find("histogram")->array) hist.push_back({number(&b, "minBytes"), number(&b, "calls")});
  const std::vector<std::pair<double, double>> want = {{2, 1}, {1024, 1}, {2048, 2}, {8192, 1}};
  EXPECT_EQ(hist, want);
}

// NCCL 2.28.9 to 2.30.7's ncclDatatypeToString has no case for ncclUint8
// and names it "Unknown" (every other type has its name): one byte, not an
// unknown type counted as 0 bytes (every size in one bucket).
TEST_F(PluginTest, NcclsUnknownDatatypeIsUint8) {
  FakeComm c(1, 4);
  for (int i = 0; i < 3; i++) c.allToAllPlan(256, 1, false, "Unknown");  // 4 ranks x 256 B
  c.allToAllPlan(1000, 1, false, "Unknown");
  c.collectivePlan("AllGather", 3, "Unknown");
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(sizeCalls(*comm, "AlltoAll", 1024), 3u);
  EXPECT_EQ(sizeCalls(*comm, "AlltoAll", 4000), 1u);
  EXPECT_EQ(number(opIn(*comm, "AllGather"), "bytes"), 3);
  EXPECT_EQ(anomaly(*comm, "unknownDatatype"), 0);

  void* ctx = nullptr;  // a copy-engine all-to-all (v6) of ncclUint8
  int mask = 0;
  const uint64_t hash = freshHash();
  ASSERT_EQ(plugin().v6->init(&ctx, hash, &mask, "ce-u8", 1, 4, 0, captureLog), ncclSuccess);
  ncclProfilerEventDescr_v6_t d = {};
  d.type = ncclProfileCeColl;
  d.ceColl.func = "AlltoAll";
  d.ceColl.datatype = "Unknown";
  d.ceColl.count = 100;
  void* h = nullptr;
  ASSERT_EQ(plugin().v6->startEvent(ctx, &h, &d), ncclSuccess);
  ASSERT_EQ(plugin().v6->finalize(ctx), ncclSuccess);
  const json::Value ceReport = readReport();
  const json::Value* ce = commIn(ceReport, hash);
  ASSERT_NE(ce, nullptr);
  EXPECT_EQ(sizeCalls(*ce, "AlltoAll", 400), 1u);
  EXPECT_EQ(anomaly(*ce, "unknownDatatype"), 0);
}

// ---------------------------------------------------------------------------
// GPU time.

TEST_F(PluginTest, GpuTimeIsThePlanSpanOverItsChannels) {
  FakeComm c(0, 2);
  for (int i = 0; i < 3; i++) {
    std::vector<void*> tasks = c.allToAllPlan(512);  // 2 ranks x 512 floats = 4 KiB
    // Channels overlap: the plan runs from the first start to the last stop.
    const uint64_t t0 = 1000000 * (i + 1);
    c.kernel(tasks[0], t0 + 100, t0 + 5000);
    c.kernel(tasks[1], t0, t0 + 4000);
    c.kernel(tasks[2], t0 + 200, t0 + 8000);  // 8 us
  }
  void* g = c.startGroup();  // a plan of two kinds: its time is "mixed"
  void* a = c.startColl(g, "AllReduce", 4, "ncclFloat32");
  void* b = c.startP2p(g, "Send", 1, 4);
  c.stop(a);
  c.stop(b);
  c.stop(g);
  c.kernel(a, 10, 2010);
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  const json::Value& row = comm->find("alltoall")->find("sizes")->array.at(0);
  EXPECT_EQ(number(&row, "bytes"), 4096);
  EXPECT_DOUBLE_EQ(number(&row, "gpuUsPerCall"), 8.0);
  EXPECT_EQ(number(opIn(*comm, "AlltoAll"), "gpuCalls"), 3);
  EXPECT_EQ(anomaly(*comm, "mixedPlans"), 1);
  EXPECT_DOUBLE_EQ(anomaly(*comm, "mixedPlanGpuUs"), 2.0);
}

TEST_F(PluginTest, KernelEventsOfAReusedSlotAreDropped) {
  FakeComm c(0, 2);
  std::vector<void*> old = c.allToAllPlan(16);
  for (int i = 0; i < kGroupSlots; i++) c.allToAllPlan(16);  // the ring comes back to the first slot
  c.kernel(old[0], 100, 200);
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(anomaly(*comm, "lateKernelEvents"), 1);
  EXPECT_EQ(number(opIn(*comm, "AlltoAll"), "gpuCalls"), 0);
  EXPECT_EQ(opCalls(*comm, "AlltoAll"), (uint64_t)kGroupSlots + 1);
}

// The counter itself: C allocations made in another library count.
TEST(PluginAllocationCounter, SeesMallocCallocReallocAndNew) {
  // Through pointers, so that the compiler cannot pair and drop them.
  void* (*volatile m)(size_t) = malloc;
  void* (*volatile c)(size_t, size_t) = calloc;
  void* (*volatile r)(void*, size_t) = realloc;
  gAllocations = 0;
  gCountAllocations = true;
  void* a = m(24);
  void* b = c(3, 8);
  a = r(a, 4096);
  char* d = strdup("in libc");  // libc's own call to malloc
  std::string* e = new std::string(100, 'x');  // libstdc++'s operator new
  gCountAllocations = false;
  free(a);
  free(b);
  free(d);
  delete e;
  EXPECT_GE(gAllocations.load(), 6);
}

TEST_F(PluginTest, EventsAllocateNothing) {
  FakeComm c(0, 8);
  std::vector<void*> warm = c.allToAllPlan(8);  // first touches (size tables) happen here
  c.kernel(warm[0], 1, 2);
  std::vector<void*> tasks;
  tasks.reserve(16);  // the test's own bookkeeping stays out of the count
  gAllocations = 0;
  gCountAllocations = true;
  for (int i = 0; i < 1000; i++) {
    tasks.clear();
    void* g = c.startGroup();
    for (int p = 0; p < 8; p++) {
      tasks.push_back(c.startP2p(g, "Send", p, 8));
      tasks.push_back(c.startP2p(g, "Recv", p, 8));
    }
    for (void* t : tasks) c.stop(t);
    c.stop(g);
    c.kernel(tasks[3], 10 * i, 10 * i + 5);
  }
  gCountAllocations = false;
  EXPECT_EQ(gAllocations.load(), 0) << "allocations on the event path";
}

// A job that creates many communicators: each finalize renders its own
// communicator only (it used to render every one finished before: 3000
// communicators, 13 ms per ncclCommDestroy) and writes its own bytes only
// (it used to rewrite the whole file: quadratic I/O), and the file holds
// every finished one as soon as it finishes. Through the plugin's core
// linked into this binary: a registry of its own, beside the dlopen'ed
// library's (whose writes are not counted here: a counter per copy).
TEST_F(PluginTest, EachFinalizeRendersOnlyItsOwnCommunicator) {
  const std::string pattern = ::testing::TempDir() + "dcp-plugin-many-%p.json";
  setenv("NCCL_DCP_PROFILE_FILE", pattern.c_str(), 1);
  unlink(reportPath(pattern).c_str());
  Registry& reg = Registry::instance();
  reg.setLogger(captureLog);
  CommIdentity id;
  id.name = "many";
  id.nRanks = 2;
  id.nNodes = 1;
  std::vector<CommProfile*> live;
  for (int i = 0; i < 8; i++) {
    id.commHash = freshHash();
    live.push_back(reg.addComm(id, true));
  }
  const uint64_t bytes0 = bytesWritten(), files0 = filesReplaced();
  uint64_t largestWrite = 0;
  for (int i = 0; i < 300; i++) {
    id.commHash = freshHash();
    CommProfile* p = reg.addComm(id, true);
    ASSERT_NE(p, nullptr);
    const uint64_t before = commsRendered(), wrote = bytesWritten();
    ASSERT_TRUE(reg.finalizeComm(p));
    ASSERT_EQ(commsRendered() - before, 1u) << "finalize " << i << " rendered other communicators";
    if (i > 0) largestWrite = std::max(largestWrite, bytesWritten() - wrote);
    if (i % 100 != 99) continue;
    const json::Value report = readJson(reportPath(pattern));
    EXPECT_EQ(report.find("communicators")->array.size(), (size_t)i + 1) << "every finished one, no live one";
    EXPECT_NE(commIn(report, id.commHash), nullptr);
  }
  // Linear: the bytes written over 300 finalizes are the file's once, plus
  // a tail per finalize, not 300 copies of a growing file (~150 files' worth).
  struct stat st;
  ASSERT_EQ(stat(reportPath(pattern).c_str(), &st), 0);
  const uint64_t total = bytesWritten() - bytes0, fileBytes = (uint64_t)st.st_size;
  EXPECT_LE(total, 2 * fileBytes) << "the report's I/O grows faster than the report";
  EXPECT_LE(largestWrite, 4 * fileBytes / 300 + 256) << "a finalize wrote more than its own communicator";
  EXPECT_EQ(filesReplaced() - files0, 1u) << "only the first report is written whole";
  for (CommProfile* p : live) EXPECT_TRUE(reg.finalizeComm(p));
  unlink(reportPath(pattern).c_str());
}

// ---------------------------------------------------------------------------
// Malformed sequences: never a crash, never a count that is not there.

// init never fails (AFailedInitIsAnUnprofiledCommunicatorNotAnError); the
// other entry points ignore nulls.
TEST_F(PluginTest, NullsAreRefusedOrIgnored) {
  int mask = 0;
  void* ctx = (void*)0x1;
  EXPECT_EQ(plugin().v5->init(nullptr, 1, &mask, "x", 1, 2, 0, captureLog), ncclSuccess);
  EXPECT_EQ(plugin().v5->init(&ctx, 1, nullptr, "x", 1, 2, 0, captureLog), ncclSuccess);
  EXPECT_EQ(ctx, nullptr);

  FakeComm c(0, 2, 1, nullptr);  // NCCL may pass no name
  ASSERT_NE(c.ctx, nullptr);
  ncclProfilerEventDescr_v5_t d = {};
  d.type = ncclProfileGroup;
  void* h = (void*)0x1;
  EXPECT_EQ(plugin().v5->startEvent(nullptr, &h, &d), ncclSuccess);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(plugin().v5->startEvent(c.ctx, nullptr, &d), ncclSuccess);
  h = (void*)0x1;
  EXPECT_EQ(plugin().v5->startEvent(c.ctx, &h, nullptr), ncclSuccess);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(plugin().v5->stopEvent(nullptr), ncclSuccess);
  EXPECT_EQ(plugin().v5->recordEventState(nullptr, ncclProfilerKernelChStop, nullptr), ncclSuccess);
  EXPECT_EQ(plugin().v5->finalize(nullptr), ncclSuccess);

  void* g = c.startGroup();
  void* t = c.startP2p(g, nullptr, 0, 4, nullptr);  // no func, no datatype
  c.stop(t);
  c.stop(g);
  void* k = c.start([&] {
    ncclProfilerEventDescr_v5_t kd = {};
    kd.type = ncclProfileKernelCh;
    kd.parentObj = t;
    return kd;
  }());
  EXPECT_EQ(plugin().v5->recordEventState(k, ncclProfilerKernelChStop, nullptr), ncclSuccess);
  c.stop(k);
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->find("name")->string, "");
  EXPECT_EQ(opCalls(*comm, "Other"), 1u);
  EXPECT_EQ(number(opIn(*comm, "Other"), "bytes"), 0);
  EXPECT_EQ(anomaly(*comm, "unknownDatatype"), 1);
  EXPECT_EQ(anomaly(*comm, "unmatchedEvents"), 1) << "the KernelChStop without arguments";
}

// NCCL 2.30 unloads the plugin when init returns an error and again at the
// communicator's finalize (src/plugin/profiler.cc): one failed init would
// drop its reference count twice. So a communicator the plugin cannot
// profile gets ncclSuccess, no context and the process-wide activation
// mask untouched; NCCL then hands its events a null context, and the
// plugin stays on for the others.
TEST_F(PluginTest, AFailedInitIsAnUnprofiledCommunicatorNotAnError) {
  const int otherComms = ncclProfileGroup | ncclProfileP2p;  // what the other communicators asked for
  struct Bad {
    int nRanks, rank;
    size_t failFrom;  // a shortage: no memory for the profile
  };
  for (const Bad& b : {Bad{0, 0, 0}, Bad{2, 2, 0}, Bad{2, -1, 0}, Bad{-3, 0, 0}, Bad{2, 0, 16 << 10}}) {
    for (int v = 5; v <= 6; v++) {
      void* ctx = (void*)0x1;
      int mask = otherComms;
      gFailAllocationsFrom = b.failFrom;
      const auto init = v == 5 ? plugin().v5->init : plugin().v6->init;
      const ncclResult_t r = init(&ctx, freshHash(), &mask, "bad", 1, b.nRanks, b.rank, captureLog);
      gFailAllocationsFrom = 0;
      EXPECT_EQ(r, ncclSuccess) << "v" << v << " rank " << b.rank << " of " << b.nRanks
                                << (b.failFrom ? ", no memory" : "");
      EXPECT_EQ(ctx, nullptr);
      EXPECT_EQ(mask, otherComms) << "one communicator's failure changed the process's mask";
      // What NCCL then does with a null context: events, and no finalize.
      ncclProfilerEventDescr_v5_t d5 = {};
      ncclProfilerEventDescr_v6_t d6 = {};
      for (uint64_t type : {(uint64_t)ncclProfileGroup, (uint64_t)ncclProfileP2p, (uint64_t)ncclProfileKernelCh,
                            (uint64_t)ncclProfileCeColl}) {
        void* h = (void*)0x1;
        d5.type = d6.type = type;
        EXPECT_EQ(v == 5 ? plugin().v5->startEvent(ctx, &h, &d5) : plugin().v6->startEvent(ctx, &h, &d6), ncclSuccess);
        EXPECT_EQ(h, nullptr);
        EXPECT_EQ(plugin().v5->stopEvent(h), ncclSuccess);
        EXPECT_EQ(plugin().v5->recordEventState(h, ncclProfilerKernelChStop, nullptr), ncclSuccess);
      }
      EXPECT_EQ(plugin().v5->finalize(ctx), ncclSuccess);
    }
  }
  EXPECT_GE(logLinesWith("WARN NCCL-DCP profiler: init: rank 2 of nranks 2 is no communicator; not profiled"), 1);
  EXPECT_GE(logLinesWith("WARN NCCL-DCP profiler: init: out of memory for communicator"), 1);
  EXPECT_EQ(logLinesWith("disabled after an internal failure"), 0) << "the plugin stays on";
  FakeComm after(0, 2);
  EXPECT_EQ(after.initResult, ncclSuccess);
  EXPECT_NE(after.ctx, nullptr);
}

TEST_F(PluginTest, UnknownTypesAndStatesGetNoHandle) {
  FakeComm c(0, 2);
  for (uint64_t type : {(uint64_t)ncclProfileGroupApi, (uint64_t)ncclProfileCollApi, (uint64_t)ncclProfileP2pApi,
                        (uint64_t)ncclProfileKernelLaunch, (uint64_t)ncclProfileProxyOp, (uint64_t)ncclProfileProxyCtrl,
                        (uint64_t)ncclProfileCeColl, uint64_t(1) << 40, uint64_t(0), ~uint64_t(0)}) {
    ncclProfilerEventDescr_v5_t d = {};
    d.type = type;
    EXPECT_EQ(c.start(d), nullptr) << "type " << type;
  }
  void* g = c.startGroup();
  ncclProfilerEventStateArgs_v5_t a = {};
  EXPECT_EQ(plugin().v5->recordEventState(g, (ncclProfilerEventState_t)21, &a), ncclSuccess);
  EXPECT_EQ(plugin().v5->recordEventState(g, ncclProfilerKernelChStop, &a), ncclSuccess);  // not a kernel handle
  c.stop(g);
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  EXPECT_TRUE(comm->find("ops")->array.empty());
  EXPECT_EQ(number(comm, "plans"), 1);
}

TEST_F(PluginTest, StopsWithoutStartsAndStrayParentsAreCountedNotFollowed) {
  FakeComm a(0, 2), b(1, 2);
  void* g = a.startGroup();
  a.stop(g);
  a.stop(g);  // stopped twice: the second stop has no started event
  void* orphan = a.startP2p(nullptr, "Send", 1, 4);            // no parent plan
  void* stray = a.startP2p(g, "Send", 1, 4);                   // parent plan already stopped
  void* foreign = b.startP2p(a.startGroup(), "Recv", 0, 4);  // parent plan of another communicator
  EXPECT_EQ(orphan, nullptr);
  EXPECT_EQ(stray, nullptr);
  EXPECT_EQ(foreign, nullptr);
  ncclProfilerEventDescr_v5_t kd = {};
  kd.type = ncclProfileKernelCh;
  kd.parentObj = g;  // a plan handle where a task handle belongs
  EXPECT_EQ(a.start(kd), nullptr);
  kd.parentObj = nullptr;
  EXPECT_EQ(a.start(kd), nullptr);
  ASSERT_EQ(a.finalize(), ncclSuccess);
  ASSERT_EQ(b.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* ca = commIn(report, a.hash);
  const json::Value* cb = commIn(report, b.hash);
  ASSERT_TRUE(ca && cb);
  EXPECT_EQ(anomaly(*ca, "unmatchedEvents"), 1 + 2);
  EXPECT_EQ(anomaly(*ca, "tasksWithoutGroup"), 2);
  EXPECT_EQ(anomaly(*cb, "tasksWithoutGroup"), 1);
  EXPECT_EQ(opCalls(*ca, "Send"), 2u) << "tasks are counted even without their plan";
  EXPECT_EQ(opCalls(*cb, "Recv"), 1u);
}

TEST_F(PluginTest, BadPeersNeverMakeAnAllToAll) {
  FakeComm c(0, 2);
  void* g = c.startGroup();
  std::vector<void*> t;
  for (int p : {-1, 2}) {  // outside [0, nRanks)
    t.push_back(c.startP2p(g, "Send", p, 4));
    t.push_back(c.startP2p(g, "Recv", p, 4));
  }
  for (void* h : t) c.stop(h);
  c.stop(g);
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(opCalls(*comm, "AlltoAll"), 0u);
  EXPECT_EQ(opCalls(*comm, "Send"), 2u);
}

TEST_F(PluginTest, TwoCommunicatorsInterleaved) {
  FakeComm a(0, 2), b(1, 2);
  for (int i = 0; i < 10; i++) {
    // Both plans open at once, tasks alternating, stopped in the other order.
    void* ga = a.startGroup();
    void* gb = b.startGroup();
    std::vector<void*> ta, tb;
    for (int p = 0; p < 2; p++) {
      ta.push_back(a.startP2p(ga, "Send", p, 32));
      tb.push_back(b.startP2p(gb, "Send", p, 64));
      ta.push_back(a.startP2p(ga, "Recv", p, 32));
      tb.push_back(b.startP2p(gb, "Recv", p, 64));
    }
    for (void* h : tb) b.stop(h);
    b.stop(gb);
    for (void* h : ta) a.stop(h);
    a.stop(ga);
    b.kernel(tb[0], 0, 3000);
    a.kernel(ta[0], 0, 1000);
  }
  ASSERT_EQ(b.finalize(), ncclSuccess);
  ASSERT_EQ(a.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* ca = commIn(report, a.hash);
  const json::Value* cb = commIn(report, b.hash);
  ASSERT_TRUE(ca && cb);
  EXPECT_EQ(sizeCalls(*ca, "AlltoAll", 256), 10u);
  EXPECT_EQ(sizeCalls(*cb, "AlltoAll", 512), 10u);
  EXPECT_EQ(sizeCalls(*ca, "AlltoAll", 512), 0u);
  EXPECT_DOUBLE_EQ(number(&ca->find("alltoall")->find("sizes")->array.at(0), "gpuUsPerCall"), 1.0);
  EXPECT_DOUBLE_EQ(number(&cb->find("alltoall")->find("sizes")->array.at(0), "gpuUsPerCall"), 3.0);
  EXPECT_EQ(number(ca, "rank"), 0);
  EXPECT_EQ(number(cb, "rank"), 1);
}

TEST_F(PluginTest, FinalizeTwiceIsRefusedAndReportsOnce) {
  FakeComm c(0, 2);
  c.allToAllPlan(4);
  void* ctx = c.ctx;
  ASSERT_EQ(c.finalize(), ncclSuccess);
  EXPECT_EQ(plugin().v5->finalize(ctx), ncclInvalidArgument);
  EXPECT_GE(logLinesWith("finalized twice"), 1);
  const json::Value report = readReport();
  EXPECT_EQ(commsWithHash(report, c.hash), 1);
  EXPECT_TRUE(commIn(report, c.hash)->find("finalized")->boolean);
}

TEST_F(PluginTest, V6CountsCopyEngineAndKernelCollectives) {
  void* ctx = nullptr;
  int mask = 0;
  const uint64_t hash = freshHash();
  ASSERT_EQ(plugin().v6->init(&ctx, hash, &mask, "ce", 1, 4, 0, captureLog), ncclSuccess);
  ncclProfilerEventDescr_v6_t d = {};
  d.type = ncclProfileCeColl;
  d.ceColl.func = "AlltoAll";
  d.ceColl.datatype = "ncclBfloat16";
  d.ceColl.count = 100;  // per peer, as ncclAlltoAll's count
  void* h = (void*)0x1;
  ASSERT_EQ(plugin().v6->startEvent(ctx, &h, &d), ncclSuccess);
  EXPECT_EQ(h, nullptr);
  // The v5 events through the v6 descriptor: one kernel all-to-all of 3 floats per peer.
  ncclProfilerEventDescr_v6_t gd = {};
  gd.type = ncclProfileGroup;
  void* g = nullptr;
  ASSERT_EQ(plugin().v6->startEvent(ctx, &g, &gd), ncclSuccess);
  std::vector<void*> tasks;
  for (int p = 0; p < 4; p++)
    for (const char* func : {"Send", "Recv"}) {
      ncclProfilerEventDescr_v6_t td = {};
      td.type = ncclProfileP2p;
      td.p2p.func = func;
      td.p2p.datatype = "ncclFloat32";
      td.p2p.count = 3;
      td.p2p.peer = p;
      td.p2p.parentGroup = g;
      tasks.emplace_back();
      ASSERT_EQ(plugin().v6->startEvent(ctx, &tasks.back(), &td), ncclSuccess);
    }
  for (void* t : tasks) ASSERT_EQ(plugin().v6->stopEvent(t), ncclSuccess);
  ASSERT_EQ(plugin().v6->stopEvent(g), ncclSuccess);
  ASSERT_EQ(plugin().v6->finalize(ctx), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, hash);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(sizeCalls(*comm, "AlltoAll", 4 * 100 * 2), 1u);
  EXPECT_EQ(sizeCalls(*comm, "AlltoAll", 4 * 3 * 4), 1u);
  EXPECT_EQ(opCalls(*comm, "AlltoAll"), 2u);
}

// ---------------------------------------------------------------------------
// nccl-dcp's calls, through the hook.

TEST_F(PluginTest, LibraryCallsJoinTheirCommunicator) {
  // The device the plugin saw at init (-1 without a driver): the link
  // between a library context and its communicator is (device, rank, size),
  // here a size no other test uses.
  FakeComm probe(0, 7);
  ASSERT_EQ(probe.finalize(), ncclSuccess);
  const int dev = (int)number(commIn(readReport(), probe.hash), "cudaDev");
  FakeComm c(5, 7);
  ncclDcpProfilerCall_v1_t call = {};
  call.size = sizeof(call);
  call.context = &call;
  call.comm = &c;
  call.rank = 5;
  call.nRanks = 7;
  call.cudaDev = dev;
  call.headDim = 512;
  call.localHeads = 16;
  call.eltSize = 2;
  call.nvlink = ncclDcpHookNvlinkYes;
  for (int rows : {1, 1, 8}) {
    call.rows = rows;
    call.bytes = (uint64_t)rows * 7 * 16 * 512 * 2;
    plugin().hook->recordCall(&call);
  }
  ncclDcpProfilerCall_v1_t stray = call;  // a context of a communicator the plugin never saw
  stray.context = &stray;
  stray.nRanks = 3;
  plugin().hook->recordCall(&stray);
  plugin().hook->recordCall(nullptr);
  ncclDcpProfilerCall_v1_t tooSmall = call;
  tooSmall.size = 8;
  plugin().hook->recordCall(&tooSmall);
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  const json::Value& dcp = comm->find("dcp")->array.at(0);
  EXPECT_EQ(number(&dcp, "rows"), 10);
  EXPECT_EQ(number(dcp.find("op"), "calls"), 3);
  EXPECT_EQ(dcp.find("op")->find("kind")->string, "DcpA2aLseReduce");
  EXPECT_EQ(comm->find("nvlinkDomain")->find("verdict")->string, "yes");
  EXPECT_EQ(comm->find("nvlinkDomain")->find("source")->string, "nccl-dcp context topology");
  bool strayListed = false;
  for (const json::Value& u : report.find("dcpUnmatched")->array) strayListed |= number(&u, "nRanks") == 3;
  EXPECT_TRUE(strayListed);
}

// The library's side (src/profiler_hook.cc) against the loaded plugin: a
// context as contextEnqueue sees it, without a GPU.
TEST_F(PluginTest, TheLibraryFindsTheLoadedPluginAndRecordsItsCalls) {
  FakeComm probe(0, 6);
  ASSERT_EQ(probe.finalize(), ncclSuccess);
  const int dev = (int)number(commIn(readReport(), probe.hash), "cudaDev");
  FakeComm c(3, 6);
  nccl_dcp::Context ctx;
  ctx.comm = (ncclComm_t)&c;
  ctx.rank = 3;
  ctx.nRanks = 6;
  ctx.cudaDev = dev;
  ctx.engine.cfg.headDim = 128;
  ctx.engine.cfg.localHeads = 4;
  ctx.engine.cfg.eltSize = 2;
  ctx.engine.cfg.maxBatch = 16;
  ctx.path = ncclDcpPathFused;
  ctx.topology.nRanks = 6;
  ctx.topology.classified = 1;
  for (int r = 0; r < 6; r++) ctx.topology.link[r] = r == 3 ? ncclDcpLinkSelf : ncclDcpLinkNvlink;
  ctx.topology.link[5] = ncclDcpLinkPcie;  // one peer off NVLink: not one domain
  nccl_dcp::profilerRecordCall(&ctx, 20);
  nccl_dcp::profilerRecordCall(&ctx, 4);
  EXPECT_EQ(ctx.stats.calls, 2u);
  EXPECT_EQ(ctx.stats.rows, 24u);
  EXPECT_EQ(ctx.stats.rounds, 2u + 1u);
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  const json::Value* comm = commIn(report, c.hash);
  ASSERT_NE(comm, nullptr);
  ASSERT_EQ(comm->find("dcp")->array.size(), 1u) << "the call reached the plugin's registry";
  const json::Value& d = comm->find("dcp")->array[0];
  EXPECT_EQ(number(&d, "rows"), 24);
  EXPECT_EQ(number(d.find("op"), "calls"), 2);
  EXPECT_EQ(number(d.find("op"), "bytes"), 24.0 * 6 * 4 * 128 * 2);
  EXPECT_EQ(d.find("path")->string, "fused");
  EXPECT_EQ(d.find("nvlink")->string, "no");
  EXPECT_EQ(comm->find("nvlinkDomain")->find("verdict")->string, "no");
}

// nNodes alone settles nothing: several nodes can be one NVLink domain
// (multi-node NVLink), one node can be none (PCIe). It used to say "no"
// for any nNodes > 1, over the library's own verdict too.
TEST_F(PluginTest, NvlinkDomainFromWhatThePluginKnows) {
  FakeComm one(0, 2, 1), two(0, 2, 2);
  one.allToAllPlan(4);
  two.allToAllPlan(4);
  ASSERT_EQ(one.finalize(), ncclSuccess);
  ASSERT_EQ(two.finalize(), ncclSuccess);
  const json::Value report = readReport();
  EXPECT_EQ(commIn(report, one.hash)->find("nvlinkDomain")->find("verdict")->string, "unknown");
  const json::Value* domain = commIn(report, two.hash)->find("nvlinkDomain");
  EXPECT_EQ(domain->find("verdict")->string, "unknown");
  EXPECT_NE(domain->find("source")->string.find("ranks span 2 nodes"), std::string::npos);
}

TEST_F(PluginTest, TheLibrarysVerdictHoldsAcrossNodes) {
  static int nRanks = 100;  // a size no other test (nor a repeat) uses: see LibraryCallsJoinTheirCommunicator
  nRanks++;
  FakeComm probe(0, nRanks);
  ASSERT_EQ(probe.finalize(), ncclSuccess);
  const int dev = (int)number(commIn(readReport(), probe.hash), "cudaDev");
  FakeComm c(4, nRanks, /*nNodes=*/3);
  ncclDcpProfilerCall_v1_t call = {};
  static char contexts[1000];  // one per run: the plugin keys a context by its address
  call.size = sizeof(call);
  call.context = &contexts[nRanks % 1000];
  call.comm = &c;
  call.rank = 4;
  call.nRanks = nRanks;
  call.cudaDev = dev;
  call.rows = 1;
  call.nvlink = ncclDcpHookNvlinkYes;  // multi-node NVLink, as the library's topology saw it
  plugin().hook->recordCall(&call);
  c.allToAllPlan(4);
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value after = readReport();
  const json::Value* domain = commIn(after, c.hash)->find("nvlinkDomain");
  EXPECT_EQ(domain->find("verdict")->string, "yes");
  EXPECT_EQ(domain->find("source")->string, "nccl-dcp context topology");
}

// ---------------------------------------------------------------------------
// Calibration: the fused path's expected time and the saving.

std::string perfJson(int nRanks, const std::string& rows) {
  return "{\"tool\": \"dcp_a2a_lse_reduce_perf\", \"mode\": \"ranks\", \"device\": \"NVIDIA H200\", \"nRanks\": " +
         std::to_string(nRanks) + ", \"dtype\": \"bf16\", \"headDim\": 512, \"localHeads\": 16, \"protocol\": \"AUTO\", "
         "\"rows\": [" + rows + "]}";
}

const char* kRows =
    "{\"rows\": 1, \"bytes\": 1000, \"fusedUs\": 5, \"baseUs\": 9},"
    "{\"rows\": 2, \"bytes\": 3000, \"fusedUs\": 7, \"baseUs\": 19}";

TEST(PluginCalibration, InterpolatesInsideAndRefusesOutside) {
  const Calibration c = parseCalibration(perfJson(2, kRows), "mem");
  ASSERT_TRUE(c.usable()) << c.error;
  EXPECT_EQ(c.nRanks, 2);
  EXPECT_EQ(c.headDim, 512);
  double fused = 0, base = 0;
  ASSERT_TRUE(c.at(1000, &fused, &base));
  EXPECT_EQ(fused, 5);
  EXPECT_EQ(base, 9);
  ASSERT_TRUE(c.at(2000, &fused, &base));
  EXPECT_DOUBLE_EQ(fused, 6);
  EXPECT_DOUBLE_EQ(base, 14);
  ASSERT_TRUE(c.at(3000, &fused, &base));
  EXPECT_EQ(fused, 7);
  EXPECT_FALSE(c.at(999, &fused, &base));
  EXPECT_FALSE(c.at(3001, &fused, &base));
}

// What the perf binary writes today: nccl-tests' results[] (the fused call
// is out_of_place, the baseline beside it), the shape in snake_case.
TEST(PluginCalibration, ReadsNcclTestsResults) {
  const std::string doc =
      "{\"version\": 3, \"nccl_version\": 22809, \"results\": ["
      "{\"size\": 3000, \"rows\": 2, \"out_of_place\": {\"time\": 7, \"nwrong\": 0}, \"baseline\": {\"time\": 19}},"
      "{\"size\": 1000, \"rows\": 1, \"out_of_place\": {\"time\": 5, \"nwrong\": 0}, \"baseline\": {\"time\": 9}}],"
      "\"tool\": \"dcp_a2a_lse_reduce_perf\", \"mode\": \"ranks\", \"n_ranks\": 2, \"dtype\": \"bf16\", "
      "\"head_dim\": 512, \"local_heads\": 16, \"protocol\": \"AUTO\"}";
  const Calibration c = parseCalibration(doc, "mem");
  ASSERT_TRUE(c.usable()) << c.error;
  EXPECT_EQ(c.nRanks, 2);
  EXPECT_EQ(c.headDim, 512);
  EXPECT_EQ(c.localHeads, 16);
  double fused = 0, base = 0;
  ASSERT_TRUE(c.at(2000, &fused, &base));
  EXPECT_DOUBLE_EQ(fused, 6);
  EXPECT_DOUBLE_EQ(base, 14);
  const std::string noBaseline =
      "{\"results\": [{\"size\": 1000, \"out_of_place\": {\"time\": 5}, \"baseline\": null}], \"n_ranks\": 2}";
  EXPECT_NE(parseCalibration(noBaseline, "f").error.find("results[0] lacks a positive size, out_of_place.time or "
                                                         "baseline.time (-B 0 run?)"),
            std::string::npos);
}

TEST(PluginCalibration, BadTablesSayWhy) {
  EXPECT_NE(parseCalibration("{\"rows\": [", "f").error.find("not JSON"), std::string::npos);
  EXPECT_NE(parseCalibration("{}", "f").error.find("rows[]"), std::string::npos);
  EXPECT_NE(parseCalibration(perfJson(2, ""), "f").error.find("empty"), std::string::npos);
  EXPECT_NE(parseCalibration(perfJson(2, "{\"bytes\": 1, \"fusedUs\": 2, \"baseUs\": 0}"), "f").error.find("rows[0]"),
            std::string::npos)
      << "a -B 0 table has no baseline to save against";
  EXPECT_NE(parseCalibration(perfJson(0, kRows), "f").error.find("nRanks"), std::string::npos);
  EXPECT_NE(loadCalibration("/nonexistent/perf.json").error.find("cannot open"), std::string::npos);
}

// In a child, with an alarm: what would block a plain reader (a FIFO
// waits for a writer, /dev/zero never ends) is refused at once.
void expectRefusedAtOnce(const std::string& path, const char* why) {
  alarm(10);
  exit(loadCalibration(path).error.find(why) != std::string::npos ? 0 : 1);
}

std::string freshFifo(const char* name) {
  const std::string path = ::testing::TempDir() + name + std::to_string(getpid());
  unlink(path.c_str());
  EXPECT_EQ(mkfifo(path.c_str(), 0600), 0) << path;
  return path;
}

TEST(PluginCalibration, OnlyASmallRegularFileIsRead) {
  const std::string fifo = freshFifo("dcp-calibration-fifo-");
  EXPECT_EXIT(expectRefusedAtOnce(fifo, "not a regular file"), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(expectRefusedAtOnce("/dev/zero", "not a regular file"), ::testing::ExitedWithCode(0), "");
  unlink(fifo.c_str());
  const std::string dir = ::testing::TempDir();
  EXPECT_NE(loadCalibration(dir).error.find("not a regular file"), std::string::npos);
  const std::string good = dir + "dcp-calibration-good.json";
  std::ofstream(good) << perfJson(2, kRows);
  EXPECT_TRUE(loadCalibration(good).usable()) << loadCalibration(good).error;
  const std::string link = dir + "dcp-calibration-link.json";
  unlink(link.c_str());
  ASSERT_EQ(symlink(good.c_str(), link.c_str()), 0);
  EXPECT_NE(loadCalibration(link).error.find("symbolic link"), std::string::npos);
  const std::string big = dir + "dcp-calibration-big.json";
  std::ofstream(big) << std::string(kMaxCalibrationBytes, ' ') << perfJson(2, kRows);
  EXPECT_NE(loadCalibration(big).error.find("larger than 1024 KiB"), std::string::npos);
}

void finalizeWithCalibration(const std::string& path) {
  alarm(10);
  setenv("NCCL_DCP_PROFILE_CALIBRATION", path.c_str(), 1);
  FakeComm c(0, 2);
  c.allToAllPlan(125);
  if (c.finalize() != ncclSuccess) exit(1);
  const json::Value report = readReport();
  const json::Value* calib = report.find("calibration");
  exit(calib && calib->find("error")->string.find("not a regular file") != std::string::npos ? 0 : 2);
}

TEST_F(PluginTest, AFifoAsCalibrationDoesNotHoldUpFinalize) {
  const std::string fifo = freshFifo("dcp-calibration-fifo-");
  EXPECT_EXIT(finalizeWithCalibration(fifo), ::testing::ExitedWithCode(0), "");
  unlink(fifo.c_str());
}

TEST_F(PluginTest, TheReportHoldsNoNumberJsonCannot) {
  const std::string calib = ::testing::TempDir() + "dcp-plugin-calibration-huge.json";
  std::ofstream(calib) << perfJson(2, "{\"rows\": 1, \"bytes\": 1000, \"fusedUs\": 1, \"baseUs\": 1.5e308}");
  setenv("NCCL_DCP_PROFILE_CALIBRATION", calib.c_str(), 1);
  FakeComm c(0, 2);
  for (int i = 0; i < 4; i++) c.allToAllPlan(125);  // 1000 B
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();  // fails on inf or nan
  const json::Value* a2a = commIn(report, c.hash)->find("alltoall");
  EXPECT_EQ(a2a->find("estimate")->string, "ok");
  EXPECT_EQ(a2a->find("expectedSavingUs")->type, json::Value::Null) << "4 x 1.5e308 us is no finite number";
  EXPECT_DOUBLE_EQ(number(&a2a->find("sizes")->array.at(0), "savingUsPerCall"), 1.5e308);

  std::ofstream(calib) << perfJson(2, "{\"rows\": 1, \"bytes\": 1000, \"fusedUs\": 1, \"baseUs\": 1e999}");
  FakeComm d(0, 2);
  d.allToAllPlan(125);
  ASSERT_EQ(d.finalize(), ncclSuccess);
  const json::Value after = readReport();
  EXPECT_NE(after.find("calibration")->find("error")->string.find("number out of range"), std::string::npos);
  EXPECT_EQ(commIn(after, d.hash)->find("alltoall")->find("expectedSavingUs")->type, json::Value::Null);
}

TEST_F(PluginTest, ReportEstimatesTheSavingPerSize) {
  const std::string calib = ::testing::TempDir() + "dcp-plugin-calibration.json";
  std::ofstream(calib) << perfJson(2, kRows);
  setenv("NCCL_DCP_PROFILE_CALIBRATION", calib.c_str(), 1);
  FakeComm c(0, 2);
  for (int i = 0; i < 4; i++) c.allToAllPlan(125);  // 2 x 125 floats = 1000 B: base 9, fused 5
  for (int i = 0; i < 2; i++) c.allToAllPlan(250);  // 2000 B: base 14, fused 6
  c.allToAllPlan(1000);                             // 8000 B: outside the table
  ASSERT_EQ(c.finalize(), ncclSuccess);
  const json::Value report = readReport();
  EXPECT_EQ(number(report.find("calibration"), "nRanks"), 2);
  const json::Value* a2a = commIn(report, c.hash)->find("alltoall");
  EXPECT_EQ(a2a->find("estimate")->string, "ok");
  EXPECT_TRUE(a2a->find("assumesNvlink")->boolean) << "one node, NVLink not verified";
  EXPECT_DOUBLE_EQ(number(a2a, "expectedSavingUs"), 4 * 4.0 + 2 * 8.0);
  const std::vector<json::Value>& sizes = a2a->find("sizes")->array;
  ASSERT_EQ(sizes.size(), 3u);
  EXPECT_DOUBLE_EQ(number(&sizes[1], "fusedUs"), 6.0);
  EXPECT_EQ(sizes[2].find("fusedUs")->type, json::Value::Null);
  EXPECT_GE(logLinesWith("expected saving with the fused path: 32.0 us"), 1);

  FakeComm four(0, 4);  // the table measured 2 ranks
  four.allToAllPlan(125);
  ASSERT_EQ(four.finalize(), ncclSuccess);
  EXPECT_EQ(commIn(readReport(), four.hash)->find("alltoall")->find("estimate")->string,
            "calibration measured 2 ranks, the communicator has 4");

  std::ofstream(calib) << "garbage";
  FakeComm bad(0, 2);
  bad.allToAllPlan(125);
  ASSERT_EQ(bad.finalize(), ncclSuccess);
  const json::Value after = readReport();
  EXPECT_NE(after.find("calibration")->find("error")->string.find("not JSON"), std::string::npos);
  EXPECT_NE(commIn(after, bad.hash)->find("alltoall")->find("estimate")->string.find("unusable"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Files, environment, failures.

TEST_F(PluginTest, ReportFileExpandsHostAndPid) {
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(expandPath("a-%p.json"), "a-" + pid + ".json");
  EXPECT_EQ(expandPath("%x%"), "%x%");
  EXPECT_EQ(expandPath("100%%-%%p"), "100%-%p") << "%% is a '%', as in NCCL_DEBUG_FILE";
  EXPECT_EQ(expandPath("%h").find('.'), std::string::npos);
  EXPECT_FALSE(expandPath("%h").empty());
  // Without %p the pid goes in anyway, before the extension: ranks never share a file.
  EXPECT_EQ(reportPath("/logs/dcp-%p.json"), "/logs/dcp-" + pid + ".json");
  EXPECT_EQ(reportPath("/logs/dcp.json"), "/logs/dcp." + pid + ".json");
  EXPECT_EQ(reportPath("/logs/dcp-%h.json"), "/logs/dcp-" + shortHostName() + "." + pid + ".json");
  EXPECT_EQ(reportPath("/logs.d/dcp"), "/logs.d/dcp." + pid);
  EXPECT_EQ(reportPath("/logs/.dcp"), "/logs/.dcp." + pid);
  EXPECT_EQ(reportPath("dcp-%%p.json"), "dcp-%p." + pid + ".json");
}

// 8 ranks given one name without %p used to leave one report (the others
// overwritten); each process now writes its own.
TEST_F(PluginTest, ProcessesGivenOneNameWriteOneReportEach) {
  const std::string dir = ::testing::TempDir();
  const std::string shared = dir + "dcp-shared-report-" + std::to_string(getpid()) + ".json";
  setenv("NCCL_DCP_PROFILE_FILE", shared.c_str(), 1);
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; r++) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      FakeComm c(r, 4);
      c.allToAllPlan(8);
      _exit(c.finalize() == ncclSuccess ? 0 : 1);
    }
    ranks.push_back(pid);
  }
  for (pid_t pid : ranks) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const std::string own = shared.substr(0, shared.size() - 5) + "." + std::to_string(pid) + ".json";
    const json::Value report = readJson(own);
    EXPECT_EQ(number(&report, "pid"), pid) << own;
    unlink(own.c_str());
  }
  EXPECT_NE(access(shared.c_str(), F_OK), 0) << shared << ": a report without the pid";
  unlink(shared.c_str());
}

// A process that exits without destroying a communicator: the report at
// exit adds it, marked not finalized, after the finished ones.
// Its last plans' GPU time is in it too: folded at exit as at finalize
// (it used to be read unfolded, and a plan's time is folded only when the
// ring comes back to its slot).
TEST_F(PluginTest, AnExitWithLiveCommunicatorsReportsThemToo) {
  FakeComm done(0, 2), live(1, 2);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    done.allToAllPlan(8);
    const std::vector<void*> tasks = live.allToAllPlan(8);
    live.kernel(tasks[0], 1000, 4000);  // 3 us
    live.kernel(tasks[1], 1500, 3500);
    exit(done.finalize() == ncclSuccess ? 0 : 1);  // the plugin's destructor writes at exit
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string path = ::testing::TempDir() + "dcp-plugin-report-" + std::to_string(pid) + ".json";
  const json::Value report = readJson(path);
  ASSERT_TRUE(commIn(report, done.hash) && commIn(report, live.hash));
  EXPECT_TRUE(commIn(report, done.hash)->find("finalized")->boolean);
  EXPECT_FALSE(commIn(report, live.hash)->find("finalized")->boolean);
  EXPECT_EQ(opCalls(*commIn(report, live.hash), "AlltoAll"), 1u);
  const json::Value* a2a = opIn(*commIn(report, live.hash), "AlltoAll");
  EXPECT_EQ(number(a2a, "gpuCalls"), 1) << "the live communicator's last plan's GPU time";
  EXPECT_DOUBLE_EQ(number(a2a, "gpuUs"), 3.0);
  unlink(path.c_str());
}

// A link planted where a writer puts its temporary file or at the report
// itself, or a FIFO there: nothing is written through it, nothing but a
// regular file is replaced.
TEST_F(PluginTest, TheReportFollowsNoLinkAndReplacesNoSpecialFile) {
  const std::string path = reportFile();
  const std::string victim = ::testing::TempDir() + "dcp-plugin-victim-" + std::to_string(getpid());
  std::ofstream(victim) << "precious";
  const std::string tmpLink = path + ".tmp";
  unlink(tmpLink.c_str());
  ASSERT_EQ(symlink(victim.c_str(), tmpLink.c_str()), 0);
  const mode_t umaskBefore = umask(027);
  FakeComm a(0, 2);
  EXPECT_EQ(a.finalize(), ncclSuccess);
  umask(umaskBefore);
  unlink(tmpLink.c_str());
  EXPECT_EQ(slurp(victim), "precious");
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0644u) << "0644 whatever the umask";
  EXPECT_NE(commIn(readReport(), a.hash), nullptr);

  unlink(path.c_str());
  ASSERT_EQ(symlink(victim.c_str(), path.c_str()), 0);
  for (int i = 0; i < 2; i++) {
    FakeComm b(0, 2);
    EXPECT_EQ(b.finalize(), ncclSuccess);
  }
  EXPECT_EQ(slurp(victim), "precious");
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link is not replaced either";
  EXPECT_EQ(logLinesWith("WARN NCCL-DCP profiler: cannot write NCCL_DCP_PROFILE_FILE " + path + ": a symbolic link"),
            1);

  unlink(path.c_str());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  FakeComm c(0, 2);
  EXPECT_EQ(c.finalize(), ncclSuccess);
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  unlink(path.c_str());
  unlink(victim.c_str());
}

// Threads finalizing communicators at once: every read of the report made
// between finalizes is one whole report (each finalize leaves it whole,
// however the finalizes of the threads interleave), and the last one
// written holds every communicator. A read made while a finalize rewrites
// the report's end in place may see it half-written (the price of linear
// I/O, registry.cc writeJson); readers during a job retry.
TEST_F(PluginTest, ThreadsFinalizingAtOnceLeaveAWholeReport) {
  FakeComm(0, 2).finalize();  // the file exists before the first read
  std::atomic<bool> done{false};
  int reads = 0, torn = 0;
  std::shared_mutex finalizing;  // shared by the writers' finalizes, exclusive for a read
  std::thread reader([&] {
    for (; !done.load(); reads++) {
      std::unique_lock<std::shared_mutex> between(finalizing);
      json::Value v;
      std::string why;
      torn += !json::parse(slurp(reportFile()), &v, &why);
    }
  });
  std::mutex hashesMutex;
  std::vector<uint64_t> hashes;
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; t++)
    writers.emplace_back([&, t] {
      for (int i = 0; i < 100; i++) {
        FakeComm c(t, 4);
        c.allToAllPlan(8);
        {
          std::shared_lock<std::shared_mutex> during(finalizing);
          EXPECT_EQ(c.finalize(), ncclSuccess);
        }
        std::lock_guard<std::mutex> lock(hashesMutex);
        hashes.push_back(c.hash);
      }
    });
  for (std::thread& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  const json::Value report = readReport();
  int missing = 0;
  for (uint64_t h : hashes) missing += commIn(report, h) == nullptr;
  EXPECT_EQ(missing, 0) << "the newest report is written last";
}

TEST_F(PluginTest, AnUnwritableReportWarnsOnceAndTheJobGoesOn) {
  setenv("NCCL_DCP_PROFILE_FILE", "/nonexistent-dir/report.json", 1);
  for (int i = 0; i < 2; i++) {
    FakeComm c(0, 2);
    c.allToAllPlan(4);
    EXPECT_EQ(c.finalize(), ncclSuccess);
  }
  EXPECT_EQ(logLinesWith("WARN NCCL-DCP profiler: cannot write NCCL_DCP_PROFILE_FILE /nonexistent-dir"), 1);
  FakeComm after(0, 2);
  EXPECT_NE(after.ctx, nullptr) << "a report that cannot be written does not turn the plugin off";
}

// In a child process (the switch is process-wide): an internal failure
// warns once, and NCCL's later calls find the plugin off but harmless.
void expectFailureTurnsThePluginOff(const char* fault) {
  setenv("NCCL_DCP_PROFILE_INJECT_FAULT", fault, 1);
  FakeComm first(0, 2);
  if (std::string(fault) == "report") {
    first.allToAllPlan(4);
    if (first.finalize() != ncclSuccess) exit(10);
  }
  unsetenv("NCCL_DCP_PROFILE_INJECT_FAULT");
  FakeComm later(0, 2);
  if (first.initResult != ncclSuccess || later.initResult != ncclSuccess) exit(11);
  if (later.ctx != nullptr || later.mask != 0) exit(12);  // off: no context, no events asked for
  ncclProfilerEventDescr_v5_t d = {};
  d.type = ncclProfileGroup;
  void* h = (void*)0x1;
  if (plugin().v5->startEvent(later.ctx, &h, &d) != ncclSuccess || h != nullptr) exit(13);
  if (logLinesWith("WARN NCCL-DCP profiler: disabled after an internal failure") != 1) exit(14);
  if (logLinesWith(std::string("injected ") + fault + " fault") != 1) exit(15);
  exit(0);
}

TEST_F(PluginTest, AFailureInInitTurnsThePluginOffWithOneWarning) {
  EXPECT_EXIT(expectFailureTurnsThePluginOff("init"), ::testing::ExitedWithCode(0), "");
}

TEST_F(PluginTest, AFailureInTheReportTurnsThePluginOffWithOneWarning) {
  EXPECT_EXIT(expectFailureTurnsThePluginOff("report"), ::testing::ExitedWithCode(0), "");
}

// Once off, the plugin writes nothing at finalize or exit; the reason goes
// into the report when it turns off ("disabled"), where
// scripts/check_plugin_report.py looks. It used to be never written: a job
// whose first init failed left no report at all. The child ends with
// _exit: no exit handler runs, the report is there already.
TEST_F(PluginTest, TheReportSaysWhyThePluginTurnedOff) {
  for (const char* fault : {"init", "report"}) {
    FakeComm before(0, 2);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      before.allToAllPlan(8);
      if (before.finalize() != ncclSuccess) _exit(1);
      setenv("NCCL_DCP_PROFILE_INJECT_FAULT", fault, 1);
      FakeComm failing(1, 2);
      if (std::string(fault) == "report") {
        failing.allToAllPlan(8);
        if (failing.finalize() != ncclSuccess) _exit(2);
      }
      unsetenv("NCCL_DCP_PROFILE_INJECT_FAULT");
      FakeComm later(0, 2);  // off: finalizes nothing
      later.finalize();
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << fault;
    const std::string path = ::testing::TempDir() + "dcp-plugin-report-" + std::to_string(pid) + ".json";
    const json::Value report = readJson(path);
    const json::Value* disabled = report.find("disabled");
    ASSERT_NE(disabled, nullptr) << fault;
    EXPECT_EQ(disabled->type, json::Value::String) << fault;
    EXPECT_NE(disabled->string.find(std::string(fault) == "init" ? "init: injected init fault" :
                                                                     "finalize: injected report fault"),
              std::string::npos)
        << fault << ": " << disabled->string;
    EXPECT_NE(commIn(report, before.hash), nullptr) << fault << ": the communicators finished before stay";
    unlink(path.c_str());
    before.finalize();
  }
}

TEST(PluginEnv, EveryVariableIsDocumentedInTheReadme) {  // the variables' page, docs/environment.md
  std::ifstream in(std::string(DCP_SOURCE_ROOT) + "/docs/environment.md");
  ASSERT_TRUE(in) << DCP_SOURCE_ROOT << "/docs/environment.md";
  std::stringstream text;
  text << in.rdbuf();
  for (const char* name : pluginEnvNames())
    EXPECT_NE(text.str().find(std::string("`") + name + "`"), std::string::npos)
        << name << " is not in docs/environment.md";
}

// ---------------------------------------------------------------------------
// The JSON reader the report tests rely on.

TEST(PluginJson, ReadsWhatTheReportWritesAndRejectsTheRest) {
  json::Value v;
  std::string why;
  ASSERT_TRUE(json::parse("{\"a\": [1, 2.5, -3e2], \"b\": {\"c\": null, \"d\": true}, \"e\": \"x\\\"y\\n\"}", &v, &why))
      << why;
  EXPECT_EQ(v.find("a")->array.at(2).number, -300);
  EXPECT_EQ(v.find("b")->find("c")->type, json::Value::Null);
  EXPECT_EQ(v.find("e")->string, "x\"y\n");
  EXPECT_EQ(json::quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "tru", "\"open", "{} {}", "[\"\x01\"]"})
    EXPECT_FALSE(json::parse(bad, &v, &why)) << bad;
  EXPECT_FALSE(json::parse(std::string(1000, '['), &v, &why)) << "depth is bounded";
}

TEST(PluginJson, NumbersAreJsonNumbersAndFinite) {
  json::Value v;
  std::string why;
  for (const auto& [text, want] : std::vector<std::pair<const char*, double>>{
           {"0", 0}, {"-0", 0}, {"12", 12}, {"-1.5", -1.5}, {"1e3", 1000}, {"1E+3", 1000}, {"25e-1", 2.5}}) {
    ASSERT_TRUE(json::parse(text, &v, &why)) << text << ": " << why;
    EXPECT_EQ(v.number, want) << text;
  }
  for (const char* bad : {"1e999", "-1e999", "inf", "-inf", "nan", "-nan", "0x10", "+1", "1.", ".5", "-", "1e", "01"})
    EXPECT_FALSE(json::parse(bad, &v, &why)) << bad << " read as " << v.number;
  EXPECT_EQ(json::number(INFINITY), "null");
  EXPECT_EQ(json::number(-INFINITY), "null");
  EXPECT_EQ(json::number(NAN), "null");
  EXPECT_EQ(json::number(8.0), "8");
  EXPECT_EQ(json::number(0.1), "0.1");
  for (double x : {1.5e308, -2.5e-300, 1234567.891, 1.0 / 3}) {
    ASSERT_TRUE(json::parse(json::number(x), &v, &why)) << json::number(x);
    EXPECT_EQ(v.number, x) << "read back exactly";
  }
}

}  // namespace
}  // namespace plugin
}  // namespace nccl_dcp
