// The validation matrix: every argument rule of the public entry points and
// of the pure checks behind them (src/validate.h). Each rejection asserts the
// exact ncclResult_t AND that ncclDcpGetLastError() names the offending
// argument, so a message that blames the wrong field fails too. No GPU is
// needed: checkCall never dereferences the buffers, so fake addresses and
// plain host buffers stand in for device memory.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "error.h"
#include "handles.h"
#include "loopback.h"
#include "memory.h"
#include "registered_output.h"
#include "test_util.h"
#include "validate.h"

namespace nccl_dcp {
namespace {

using test::makeConfig;

// Passes when `got` is `want` and the thread's last error contains `needle`.
::testing::AssertionResult Rejected(ncclResult_t got, ncclResult_t want, const std::string& needle) {
  const std::string msg = ncclDcpGetLastError();
  if (got != want)
    return ::testing::AssertionFailure() << "returned " << ncclGetErrorString(got) << " (" << got << "), want "
                                         << ncclGetErrorString(want) << " (" << want << "); last error: \""
                                         << msg << "\"";
  if (msg.find(needle) == std::string::npos)
    return ::testing::AssertionFailure() << "last error \"" << msg << "\" does not name \"" << needle << "\"";
  return ::testing::AssertionSuccess();
}

// The internal checks do not clear the last error (the entry points do), so
// clear it first: a message left by an earlier check must not satisfy the
// expectation of a later one.
#define EXPECT_REJECTED(call, code, needle)                              \
  do {                                                                   \
    ::nccl_dcp::clearLastError();                                        \
    EXPECT_TRUE(Rejected((call), (code), (needle))) << "call: " #call;  \
  } while (0)

#define EXPECT_ACCEPTED(call)                                                    \
  do {                                                                           \
    ::nccl_dcp::clearLastError();                                                \
    const ncclResult_t r_ = (call);                                              \
    EXPECT_EQ(r_, ncclSuccess) << #call << ": " << ncclDcpGetLastError();        \
  } while (0)

// D = 128 bf16 (256-byte rows), Hl = 4: valid; tests break one field.
ncclDcpConfig_t validConfig() { return makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2); }

ncclResult_t resolve(const ncclDcpConfig_t& cfg, const Env& env = Env{}) {
  Config c;
  return resolveConfig(&cfg, env, &c);
}

Config resolvedConfig(int headDim = 128, int localHeads = 4, ncclDataType_t dtype = ncclBfloat16) {
  const ncclDcpConfig_t in = makeConfig(headDim, localHeads, dtype, ncclDcpLseBase2);
  Config c{};
  EXPECT_EQ(resolveConfig(&in, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  return c;
}

ncclDcpStrides_t packedStridesIn() {
  ncclDcpStrides_t s = NCCL_DCP_STRIDES_INITIALIZER;
  return s;
}

// ---------------------------------------------------------------------------
// Public entry points that need no GPU.

TEST(PublicApi, WorkspaceSizeRejectsNullBytes) {
  const ncclDcpConfig_t cfg = validConfig();
  EXPECT_REJECTED(ncclDcpWorkspaceSize(&cfg, 2, nullptr), ncclInvalidArgument, "bytes");
}

TEST(PublicApi, WorkspaceSizeRejectsNullConfig) {
  size_t bytes = 0;
  EXPECT_REJECTED(ncclDcpWorkspaceSize(nullptr, 2, &bytes), ncclInvalidArgument, "config");
}

TEST(PublicApi, WorkspaceSizeRejectsBadRankCounts) {
  const ncclDcpConfig_t cfg = validConfig();
  size_t bytes = 0;
  for (int nRanks : {0, -1, -64, NCCL_DCP_MAX_RANKS + 1, 1 << 30}) {
    SCOPED_TRACE("nRanks " + std::to_string(nRanks));
    EXPECT_REJECTED(ncclDcpWorkspaceSize(&cfg, nRanks, &bytes), ncclInvalidArgument, "nRanks");
  }
}

TEST(PublicApi, WorkspaceSizePropagatesConfigErrors) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.headDim = 12;  // 24-byte bf16 rows
  size_t bytes = 0;
  EXPECT_REJECTED(ncclDcpWorkspaceSize(&cfg, 2, &bytes), ncclInvalidArgument, "config->headDim");
}

TEST(PublicApi, SuccessClearsTheLastError) {
  size_t bytes = 0;
  ASSERT_NE(ncclDcpWorkspaceSize(nullptr, 2, &bytes), ncclSuccess);
  ASSERT_STRNE(ncclDcpGetLastError(), "");
  const ncclDcpConfig_t cfg = validConfig();
  ASSERT_EQ(ncclDcpWorkspaceSize(&cfg, 2, &bytes), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_GT(bytes, 0u);
  EXPECT_STREQ(ncclDcpGetLastError(), "");

  ASSERT_NE(ncclDcpGetVersion(nullptr), ncclSuccess);
  int version = 0;
  ASSERT_EQ(ncclDcpGetVersion(&version), ncclSuccess);
  EXPECT_STREQ(ncclDcpGetLastError(), "");
}

TEST(PublicApi, GetVersionRejectsNull) {
  EXPECT_REJECTED(ncclDcpGetVersion(nullptr), ncclInvalidArgument, "version");
}

TEST(PublicApi, A2aLseReduceRejectsNullContext) {
  float lse[4] = {}, outLse[4] = {};
  alignas(16) uint16_t in[64] = {}, out[64] = {};
  EXPECT_REJECTED(ncclDcpA2aLseReduce(nullptr, in, lse, out, outLse, 1, nullptr, nullptr), ncclInvalidArgument,
                  "ctx");
}

// A call refused inside a group fails the group's end with nothing
// enqueued (NCCL's group error); the next group starts clean.
TEST(PublicApi, CallRefusedInAGroupFailsItsEnd) {
  float lse[4] = {}, outLse[4] = {};
  alignas(16) uint16_t in[64] = {}, out[64] = {};
  EXPECT_ACCEPTED(ncclDcpGroupStart());
  EXPECT_ACCEPTED(ncclDcpGroupStart());  // nested: the outermost end decides
  EXPECT_REJECTED(ncclDcpA2aLseReduce(nullptr, in, lse, out, outLse, 1, nullptr, nullptr), ncclInvalidArgument,
                  "ctx is NULL");
  EXPECT_ACCEPTED(ncclDcpGroupEnd());
  EXPECT_REJECTED(ncclDcpGroupEnd(), ncclInvalidArgument, "a call of this group was refused (ctx is NULL)");
  EXPECT_ACCEPTED(ncclDcpGroupStart());
  EXPECT_ACCEPTED(ncclDcpGroupEnd());
  EXPECT_REJECTED(ncclDcpGroupEnd(), ncclInvalidUsage, "without ncclDcpGroupStart");
}

// Outside a group a refusal leaves nothing for a later group.
TEST(PublicApi, CallRefusedOutsideAGroupLeavesTheNextGroupClean) {
  float lse[4] = {}, outLse[4] = {};
  alignas(16) uint16_t in[64] = {}, out[64] = {};
  EXPECT_REJECTED(ncclDcpA2aLseReduce(nullptr, in, lse, out, outLse, 1, nullptr, nullptr), ncclInvalidArgument,
                  "ctx");
  EXPECT_ACCEPTED(ncclDcpGroupStart());
  EXPECT_ACCEPTED(ncclDcpGroupEnd());
}

TEST(PublicApi, ContextCreateRejectsNullComm) {
  const ncclDcpConfig_t cfg = validConfig();
  ncclDcpContext_t ctx = nullptr;
  EXPECT_REJECTED(ncclDcpContextCreate(nullptr, &cfg, &ctx), ncclInvalidArgument, "comm");
  EXPECT_EQ(ctx, nullptr);
}

TEST(PublicApi, ContextCreateInWindowRejectsNullComm) {
  const ncclDcpConfig_t cfg = validConfig();
  ncclDcpContext_t ctx = nullptr;
  EXPECT_REJECTED(ncclDcpContextCreateInWindow(nullptr, (ncclWindow_t)0x1000, 0, 1 << 20, &cfg, &ctx),
                  ncclInvalidArgument, "comm");
}

// A NULL window (or output pointer) is refused in create's first step,
// after the peers are told (they would wait for this rank otherwise): that
// needs a real communicator, test/gpu/test_create_unwind.cc.

TEST(PublicApi, ContextCreateGroupRejectsBadArrays) {
  const ncclDcpConfig_t cfg = validConfig();
  ncclDcpContext_t ctxs[2] = {};
  // Fake communicators: every entry is checked for NULL before any is used.
  ncclComm_t comms[2] = {(ncclComm_t)0x1000, nullptr};
  EXPECT_REJECTED(ncclDcpContextCreateGroup(0, comms, &cfg, ctxs), ncclInvalidArgument, "nComms");
  EXPECT_REJECTED(ncclDcpContextCreateGroup(-1, comms, &cfg, ctxs), ncclInvalidArgument, "nComms");
  EXPECT_REJECTED(ncclDcpContextCreateGroup(2, nullptr, &cfg, ctxs), ncclInvalidArgument, "comms");
  EXPECT_REJECTED(ncclDcpContextCreateGroup(2, comms, &cfg, ctxs), ncclInvalidArgument, "comm 1");
}

TEST(PublicApi, DestroyGroupRejectsNegativeCount) {
  ncclDcpContext_t ctxs[1] = {nullptr};
  EXPECT_REJECTED(ncclDcpContextDestroyGroup(-1, ctxs), ncclInvalidArgument, "nCtxs");
}

TEST(PublicApi, DestroyGroupRejectsNullArray) {
  EXPECT_REJECTED(ncclDcpContextDestroyGroup(2, nullptr), ncclInvalidArgument, "ctxs");
}

TEST(PublicApi, DestroyOfNullContextIsANoOp) {
  EXPECT_ACCEPTED(ncclDcpContextDestroy(nullptr));
  EXPECT_STREQ(ncclDcpGetLastError(), "");
}

TEST(PublicApi, DestroyGroupSkipsNullEntries) {
  ncclDcpContext_t ctxs[3] = {nullptr, nullptr, nullptr};
  EXPECT_ACCEPTED(ncclDcpContextDestroyGroup(3, ctxs));
  EXPECT_ACCEPTED(ncclDcpContextDestroyGroup(0, nullptr));
}

// A repeated entry (or one that is not live) fails the whole group before
// anything is retired: every other context in it survives, live, and the
// array is left as it was, so the caller can fix it and call again. No
// GPU: the handles are checked before any context is touched (the fake
// contexts below are never dereferenced).
TEST(PublicApi, DestroyGroupWithADuplicateDestroysNothing) {
  int fakeA = 0, fakeB = 0;
  Context* a = reinterpret_cast<Context*>(&fakeA);
  Context* b = reinterpret_cast<Context*>(&fakeB);
  const ncclDcpContext_t ha = registerContext(a), hb = registerContext(b);
  ncclDcpContext_t ctxs[4] = {hb, ha, nullptr, ha};
  EXPECT_REJECTED(ncclDcpContextDestroyGroup(4, ctxs), ncclInvalidArgument, "entries 1 and 3 are the same context");
  EXPECT_EQ(contextOf(ha), a) << "the duplicated context was retired";
  EXPECT_EQ(contextOf(hb), b) << "the other context was retired";
  EXPECT_EQ(ctxs[0], hb);
  EXPECT_EQ(ctxs[1], ha);
  EXPECT_EQ(ctxs[3], ha);
  // The same with a handle that is not live behind a good one.
  ncclDcpContext_t stale[2] = {hb, (ncclDcpContext_t)&fakeA};
  EXPECT_REJECTED(ncclDcpContextDestroyGroup(2, stale), ncclInvalidArgument, "ctxs[1] 0x");
  EXPECT_EQ(contextOf(hb), b);
  // Retired here without a destroy (there is nothing to destroy).
  Context* out[2] = {};
  const ncclDcpContext_t both[2] = {ha, hb};
  ASSERT_EQ(retireContexts(2, both, "test", out), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(out[0], a);
  EXPECT_EQ(out[1], b);
}

// Each thread reads the message of its own last failed call: another
// thread's failure neither shows nor clears it.
TEST(PublicApi, LastErrorIsPerThread) {
  ASSERT_EQ(ncclDcpGetVersion(nullptr), ncclInvalidArgument);
  const std::string mine = ncclDcpGetLastError();
  ASSERT_NE(mine.find("version"), std::string::npos) << mine;
  std::string otherBefore, otherAfter;
  std::thread other([&] {
    otherBefore = ncclDcpGetLastError();
    size_t bytes = 0;
    ncclDcpWorkspaceSize(nullptr, 2, &bytes);
    otherAfter = ncclDcpGetLastError();
  });
  other.join();
  EXPECT_EQ(otherBefore, "") << "a new thread starts with no error";
  EXPECT_NE(otherAfter.find("config"), std::string::npos) << otherAfter;
  EXPECT_EQ(ncclDcpGetLastError(), mine) << "another thread's failure replaced this thread's message";
  // A success on another thread does not clear this thread's message either.
  std::thread([] {
    int v = 0;
    ncclDcpGetVersion(&v);
  }).join();
  EXPECT_EQ(ncclDcpGetLastError(), mine);
}

TEST(PublicApi, GetTopologyRejectsNullContext) {
  ncclDcpTopology_t topo = NCCL_DCP_TOPOLOGY_INITIALIZER;
  EXPECT_REJECTED(ncclDcpGetTopology(nullptr, &topo), ncclInvalidArgument, "ctx");
}

TEST(PublicApi, GetAsyncErrorRejectsNullContext) {
  ncclResult_t err = ncclSuccess;
  EXPECT_REJECTED(ncclDcpGetAsyncError(nullptr, &err), ncclInvalidArgument, "ctx");
}

TEST(PublicApi, BindStreamRejectsNullContext) {
  EXPECT_REJECTED(ncclDcpContextBindStream(nullptr, nullptr), ncclInvalidArgument, "ctx");
}

// ---------------------------------------------------------------------------
// resolveConfig: the versioned header.

TEST(ConfigHeader, NullConfigRejected) {
  Config c;
  EXPECT_REJECTED(resolveConfig(nullptr, Env{}, &c), ncclInvalidArgument, "config is NULL");
}

TEST(ConfigHeader, WrongMagicRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.magic = 0;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->magic");
  cfg.magic = NCCL_DCP_STRIDES_MAGIC;  // another struct's magic
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->magic");
}

TEST(ConfigHeader, UnknownVersionRejected) {
  ncclDcpConfig_t cfg = validConfig();
  for (unsigned v : {0u, 99u, (unsigned)NCCL_DCP_VERSION_CODE + 1, (unsigned)NCCL_DCP_VERSION(1, 0, 0)}) {
    SCOPED_TRACE("version " + std::to_string(v));
    cfg.version = v;
    EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->version");
  }
}

TEST(ConfigHeader, WrongSizeRejected) {
  ncclDcpConfig_t cfg = validConfig();
  for (size_t size : {size_t(0), sizeof(ncclDcpConfig_t) - 4, sizeof(ncclDcpConfig_t) + 8}) {
    SCOPED_TRACE("size " + std::to_string(size));
    cfg.size = size;
    EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->size");
  }
}

// ---------------------------------------------------------------------------
// resolveConfig: the operation's fields.

TEST(ConfigHeadDim, UnsetRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.headDim = NCCL_CONFIG_UNDEF_INT;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->headDim");
}

TEST(ConfigHeadDim, ZeroRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.headDim = 0;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->headDim");
}

TEST(ConfigHeadDim, NegativeRejected) {
  ncclDcpConfig_t cfg = validConfig();
  for (int d : {-1, -8, -128}) {
    cfg.headDim = d;
    EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->headDim");
  }
}

TEST(ConfigHeadDim, AboveMaximumRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.headDim = NCCL_DCP_MAX_HEAD_DIM + 8;  // rows still a 16-byte multiple
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->headDim");
  cfg.headDim = NCCL_DCP_MAX_HEAD_DIM;
  EXPECT_ACCEPTED(resolve(cfg));
}

struct RowBytesCase {
  ncclDataType_t dtype;
  int headDim;
};

class ConfigRowBytes : public ::testing::TestWithParam<RowBytesCase> {};

TEST_P(ConfigRowBytes, RowNotMultipleOf16BytesRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.dtype = GetParam().dtype;
  cfg.headDim = GetParam().headDim;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->headDim");
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("16 bytes"), std::string::npos) << ncclDcpGetLastError();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ConfigRowBytes,
                         ::testing::Values(RowBytesCase{ncclBfloat16, 12}, RowBytesCase{ncclBfloat16, 4},
                                           RowBytesCase{ncclFloat16, 4}, RowBytesCase{ncclFloat16, 1},
                                           RowBytesCase{ncclFloat32, 2}, RowBytesCase{ncclFloat32, 6}),
                         [](const ::testing::TestParamInfo<RowBytesCase>& info) {
                           return std::string(dtypeName(info.param.dtype)) + "_D" +
                                  std::to_string(info.param.headDim);
                         });

TEST(ConfigHeadDim, SmallestRowOfEachDtypeAccepted) {
  ncclDcpConfig_t cfg = validConfig();
  const RowBytesCase smallest[] = {{ncclBfloat16, 8}, {ncclFloat16, 8}, {ncclFloat32, 4}};
  for (const RowBytesCase& c : smallest) {
    cfg.dtype = c.dtype;
    cfg.headDim = c.headDim;
    EXPECT_ACCEPTED(resolve(cfg));
  }
}

TEST(ConfigLocalHeads, UnsetRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.localHeads = NCCL_CONFIG_UNDEF_INT;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->localHeads");
}

TEST(ConfigLocalHeads, ZeroAndNegativeRejected) {
  ncclDcpConfig_t cfg = validConfig();
  for (int h : {0, -1}) {
    cfg.localHeads = h;
    EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->localHeads");
  }
}

TEST(ConfigLocalHeads, AboveMaximumRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.localHeads = NCCL_DCP_MAX_LOCAL_HEADS + 1;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->localHeads");
  cfg.localHeads = NCCL_DCP_MAX_LOCAL_HEADS;
  EXPECT_ACCEPTED(resolve(cfg));
}

TEST(ConfigDtype, UnsetRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.dtype = (ncclDataType_t)NCCL_CONFIG_UNDEF_INT;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->dtype");
}

class ConfigUnsupportedDtype : public ::testing::TestWithParam<ncclDataType_t> {};

TEST_P(ConfigUnsupportedDtype, Rejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.dtype = GetParam();
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->dtype");
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("not supported"), std::string::npos) << ncclDcpGetLastError();
}

INSTANTIATE_TEST_SUITE_P(NcclTypes, ConfigUnsupportedDtype,
                         ::testing::Values(ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclFloat64,
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
                                           ncclFloat8e4m3, ncclFloat8e5m2,
#endif
                                           (ncclDataType_t)-1, (ncclDataType_t)1000),
                         [](const ::testing::TestParamInfo<ncclDataType_t>& info) {
                           const int v = (int)info.param;
                           return v < 0 ? "minus" + std::to_string(-v) : "type" + std::to_string(v);
                         });

TEST(ConfigLseBase, UnsetRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.lseBase = NCCL_CONFIG_UNDEF_INT;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->lseBase");
}

TEST(ConfigLseBase, OutOfEnumRejected) {
  ncclDcpConfig_t cfg = validConfig();
  for (int base : {(int)ncclDcpNumLseBases, -1, 10}) {
    cfg.lseBase = base;
    EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->lseBase");
  }
}

TEST(ConfigLseBase, BothBasesAccepted) {
  ncclDcpConfig_t cfg = validConfig();
  Config c{};
  cfg.lseBase = ncclDcpLseBase2;
  ASSERT_EQ(resolveConfig(&cfg, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.lseBase, LseBase::Two);
  cfg.lseBase = ncclDcpLseBaseE;
  ASSERT_EQ(resolveConfig(&cfg, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.lseBase, LseBase::E);
}

// ---------------------------------------------------------------------------
// resolveConfig: resources and policy.

TEST(ConfigMaxBatch, ZeroAndNegativeRejected) {
  ncclDcpConfig_t cfg = validConfig();
  for (int rows : {0, -1}) {
    cfg.maxBatch = rows;
    EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->maxBatch");
  }
}

TEST(ConfigMaxBatch, AboveCapacityLimitRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.maxBatch = NCCL_DCP_MAX_BATCH_CAPACITY + 1;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->maxBatch");
  cfg.maxBatch = NCCL_DCP_MAX_BATCH_CAPACITY;
  EXPECT_ACCEPTED(resolve(cfg));
}

TEST(ConfigProtocol, OutOfEnumRejected) {
  ncclDcpConfig_t cfg = validConfig();
  for (int proto : {-1, (int)ncclDcpNumProtocols, 100}) {
    cfg.protocol = proto;
    EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->protocol");
  }
}

TEST(ConfigProtocol, EveryProtocolAccepted) {
  ncclDcpConfig_t cfg = validConfig();
  for (int proto = 0; proto < ncclDcpNumProtocols; proto++) {
    cfg.protocol = proto;
    Config c{};
    ASSERT_EQ(resolveConfig(&cfg, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
    EXPECT_EQ(c.protocol, proto);
  }
}

TEST(ConfigTimeout, NegativeRejected) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.timeoutMs = -1;
  EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->timeoutMs");
}

TEST(ConfigTimeout, ZeroMeansForeverAndIsAccepted) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.timeoutMs = 0;
  Config c{};
  ASSERT_EQ(resolveConfig(&cfg, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.timeoutMs, 0);
}

TEST(ConfigDefaults, AppliedWhenFieldsAreUnset) {
  ncclDcpConfig_t cfg = NCCL_DCP_CONFIG_INITIALIZER;
  cfg.headDim = 512;
  cfg.localHeads = 16;
  cfg.dtype = ncclFloat16;
  cfg.lseBase = ncclDcpLseBaseE;
  Config c{};
  ASSERT_EQ(resolveConfig(&cfg, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.headDim, 512);
  EXPECT_EQ(c.localHeads, 16);
  EXPECT_EQ(c.dtype, ncclFloat16);
  EXPECT_EQ(c.eltSize, 2);
  EXPECT_EQ(c.lseBase, LseBase::E);
  EXPECT_EQ(c.maxBatch, 256);
  EXPECT_EQ(c.maxBatch, kDefaultMaxBatch);
  EXPECT_EQ(c.timeoutMs, 60000);
  EXPECT_EQ(c.timeoutMs, kDefaultTimeoutMs);
  EXPECT_EQ(c.protocol, ncclDcpProtoAuto);
}

TEST(ConfigDefaults, EnvironmentFillsUnsetFields) {
  ncclDcpConfig_t cfg = NCCL_DCP_CONFIG_INITIALIZER;
  cfg.headDim = 128;
  cfg.localHeads = 2;
  cfg.dtype = ncclFloat32;
  cfg.lseBase = ncclDcpLseBase2;
  Env env;
  env.maxBatch = 1000;
  env.timeoutMs = 0;
  env.protocol = ncclDcpProtoLL128;
  Config c{};
  ASSERT_EQ(resolveConfig(&cfg, env, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.maxBatch, 1000);
  EXPECT_EQ(c.timeoutMs, 0);
  EXPECT_EQ(c.protocol, ncclDcpProtoLL128);
  EXPECT_EQ(c.eltSize, 4);
}

TEST(ConfigDefaults, ConfigValuesWinOverTheEnvironment) {
  ncclDcpConfig_t cfg = makeConfig(64, 8, ncclBfloat16, ncclDcpLseBase2, /*maxBatch=*/32, ncclDcpProtoSimple);
  cfg.timeoutMs = 77;
  Env env;
  env.maxBatch = 1000;
  env.timeoutMs = 0;
  env.protocol = ncclDcpProtoLL;
  Config c{};
  ASSERT_EQ(resolveConfig(&cfg, env, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.maxBatch, 32);
  EXPECT_EQ(c.timeoutMs, 77);
  EXPECT_EQ(c.protocol, ncclDcpProtoSimple);
}

// ---------------------------------------------------------------------------
// checkRanks.

TEST(Ranks, OutOfRangeRejected) {
  for (int n : {0, -1, NCCL_DCP_MAX_RANKS + 1, 65, 1000}) {
    SCOPED_TRACE("nRanks " + std::to_string(n));
    EXPECT_REJECTED(checkRanks(n), ncclInvalidArgument, "nRanks");
  }
}

TEST(Ranks, FullRangeAccepted) {
  for (int n : {1, 2, 3, 8, NCCL_DCP_MAX_RANKS}) EXPECT_ACCEPTED(checkRanks(n));
}

// Loopback holds every group size NCCL_DCP_MAX_RANKS allows (cp 17 to 64
// run on one GPU too) and refuses more before touching the GPU.
TEST(Ranks, LoopbackRefusesMoreVirtualRanksThanItHolds) {
  const ncclDcpConfig_t cfg = validConfig();
  static_assert(kMaxLoopbackRanks == NCCL_DCP_MAX_RANKS, "loopback serves every group size");
  for (int n : {kMaxLoopbackRanks + 1, 2 * NCCL_DCP_MAX_RANKS}) {
    SCOPED_TRACE("nRanks " + std::to_string(n));
    std::unique_ptr<Loopback> lb;
    EXPECT_REJECTED(Loopback::create(&cfg, n, &lb), ncclInvalidArgument, std::to_string(kMaxLoopbackRanks));
    EXPECT_EQ(lb, nullptr);
  }
}

// A workspace that does not fit: the message says its size, the rounds
// that set it and the knob that shrinks it (and, on a GPU, what is free).
TEST(WorkspaceShortfall, NamesItsSizeRoundsAndKnob) {
  const std::string why = workspaceShortfall(((size_t)3 << 20) + 1, 7);
  EXPECT_EQ(why.rfind("4 MiB for rounds of maxBatch 7 rows", 0), 0u) << why;
  EXPECT_NE(why.find("a smaller config->maxBatch (NCCL_DCP_MAX_BATCH) needs less"), std::string::npos) << why;
}

// ---------------------------------------------------------------------------
// resolveStrides.

TEST(StridesHeader, NullMeansPacked) {
  const Config cfg = resolvedConfig(128, 4);
  Strides s{};
  EXPECT_ACCEPTED(resolveStrides(nullptr, cfg, 3, &s));
  EXPECT_EQ(s.inHead, 128);
  EXPECT_EQ(s.inPeer, 4 * 128);
  EXPECT_EQ(s.inRow, 3 * 4 * 128);
  EXPECT_EQ(s.lseHead, 1);
  EXPECT_EQ(s.lsePeer, 4);
  EXPECT_EQ(s.lseRow, 12);
  EXPECT_EQ(s.outHead, 128);
  EXPECT_EQ(s.outRow, 4 * 128);
  EXPECT_EQ(s.outLseHead, 1);
  EXPECT_EQ(s.outLseRow, 4);
}

TEST(StridesHeader, AllZeroStridesAreThePackedLayout) {
  const Config cfg = resolvedConfig(64, 3, ncclFloat32);
  const ncclDcpStrides_t in = packedStridesIn();
  Strides got{};
  EXPECT_ACCEPTED(resolveStrides(&in, cfg, 5, &got));
  const Strides want = packedStrides(cfg, 5);
  EXPECT_EQ(got.inRow, want.inRow);
  EXPECT_EQ(got.inPeer, want.inPeer);
  EXPECT_EQ(got.inHead, want.inHead);
  EXPECT_EQ(got.lseRow, want.lseRow);
  EXPECT_EQ(got.lsePeer, want.lsePeer);
  EXPECT_EQ(got.lseHead, want.lseHead);
  EXPECT_EQ(got.outRow, want.outRow);
  EXPECT_EQ(got.outHead, want.outHead);
  EXPECT_EQ(got.outLseRow, want.outLseRow);
  EXPECT_EQ(got.outLseHead, want.outLseHead);
}

TEST(StridesHeader, WrongMagicRejected) {
  const Config cfg = resolvedConfig();
  ncclDcpStrides_t in = packedStridesIn();
  in.magic = NCCL_DCP_CONFIG_MAGIC;
  Strides s;
  EXPECT_REJECTED(resolveStrides(&in, cfg, 2, &s), ncclInvalidArgument, "strides->magic");
}

TEST(StridesHeader, UnknownVersionRejected) {
  const Config cfg = resolvedConfig();
  ncclDcpStrides_t in = packedStridesIn();
  Strides s;
  for (unsigned v : {0u, (unsigned)NCCL_DCP_VERSION_CODE + 1}) {
    in.version = v;
    EXPECT_REJECTED(resolveStrides(&in, cfg, 2, &s), ncclInvalidArgument, "strides->version");
  }
}

TEST(StridesHeader, WrongSizeRejected) {
  const Config cfg = resolvedConfig();
  ncclDcpStrides_t in = packedStridesIn();
  in.size = sizeof(ncclDcpStrides_t) - sizeof(int64_t);
  Strides s;
  EXPECT_REJECTED(resolveStrides(&in, cfg, 2, &s), ncclInvalidArgument, "strides->size");
}

// Every stride field by name, for the per-field rules.
struct StrideField {
  const char* name;
  int64_t ncclDcpStrides_t::*field;
  bool payload;  // of partialOut / out: a multiple of 16 bytes
};

const StrideField kStrideFields[] = {
    {"inRow", &ncclDcpStrides_t::inRow, true},          {"inPeer", &ncclDcpStrides_t::inPeer, true},
    {"inHead", &ncclDcpStrides_t::inHead, true},        {"lseRow", &ncclDcpStrides_t::lseRow, false},
    {"lsePeer", &ncclDcpStrides_t::lsePeer, false},     {"lseHead", &ncclDcpStrides_t::lseHead, false},
    {"outRow", &ncclDcpStrides_t::outRow, true},        {"outHead", &ncclDcpStrides_t::outHead, true},
    {"outLseRow", &ncclDcpStrides_t::outLseRow, false}, {"outLseHead", &ncclDcpStrides_t::outLseHead, false},
};

std::string fieldName(const ::testing::TestParamInfo<StrideField>& info) { return info.param.name; }

class StrideEveryField : public ::testing::TestWithParam<StrideField> {};

TEST_P(StrideEveryField, NegativeRejected) {
  const Config cfg = resolvedConfig();
  ncclDcpStrides_t in = packedStridesIn();
  in.*GetParam().field = -16;
  Strides s;
  EXPECT_REJECTED(resolveStrides(&in, cfg, 2, &s), ncclInvalidArgument,
                  std::string("strides->") + GetParam().name);
}

TEST_P(StrideEveryField, Beyond2To40Rejected) {
  const Config cfg = resolvedConfig();
  ncclDcpStrides_t in = packedStridesIn();
  in.*GetParam().field = (int64_t(1) << 40) + 64;  // still a multiple of 16 bytes
  Strides s;
  EXPECT_REJECTED(resolveStrides(&in, cfg, 2, &s), ncclInvalidArgument,
                  std::string("strides->") + GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Fields, StrideEveryField, ::testing::ValuesIn(kStrideFields), fieldName);

class StridePayloadField : public ::testing::TestWithParam<StrideField> {};

TEST_P(StridePayloadField, NotMultipleOf16BytesRejected) {
  // bf16: 8 elements = 16 bytes; 8 * k + 4 elements is 8 bytes off.
  const Config cfg = resolvedConfig(128, 4, ncclBfloat16);
  ncclDcpStrides_t in = packedStridesIn();
  in.*GetParam().field = 4 * 128 + 4;
  Strides s;
  EXPECT_REJECTED(resolveStrides(&in, cfg, 2, &s), ncclInvalidArgument,
                  std::string("strides->") + GetParam().name);
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("16 bytes"), std::string::npos) << ncclDcpGetLastError();

  // fp32: 4 elements = 16 bytes; 2 elements are 8 bytes.
  const Config fp32 = resolvedConfig(128, 4, ncclFloat32);
  in.*GetParam().field = 4 * 128 + 2;
  EXPECT_REJECTED(resolveStrides(&in, fp32, 2, &s), ncclInvalidArgument,
                  std::string("strides->") + GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Fields, StridePayloadField,
                         ::testing::Values(kStrideFields[0], kStrideFields[1], kStrideFields[2], kStrideFields[6],
                                           kStrideFields[7]),
                         fieldName);

TEST(StrideValues, LseStridesNeedNoAlignment) {
  // LSEs are fp32 elements: any element stride is fine.
  const Config cfg = resolvedConfig(128, 4);
  ncclDcpStrides_t in = packedStridesIn();
  in.lseHead = 3;
  in.lsePeer = 13;
  in.lseRow = 61;
  in.outLseHead = 5;
  in.outLseRow = 23;
  Strides s{};
  EXPECT_ACCEPTED(resolveStrides(&in, cfg, 4, &s));
  EXPECT_EQ(s.lseHead, 3);
  EXPECT_EQ(s.lsePeer, 13);
  EXPECT_EQ(s.lseRow, 61);
  EXPECT_EQ(s.outLseHead, 5);
  EXPECT_EQ(s.outLseRow, 23);
  EXPECT_EQ(s.inHead, 128);  // unset payload strides stay packed
}

TEST(StrideValues, LargestStrideAccepted) {
  const Config cfg = resolvedConfig();
  ncclDcpStrides_t in = packedStridesIn();
  in.outRow = int64_t(1) << 40;
  Strides s{};
  EXPECT_ACCEPTED(resolveStrides(&in, cfg, 2, &s));
  EXPECT_EQ(s.outRow, int64_t(1) << 40);
}

TEST(StrideValues, TransposedInputViewAccepted) {
  // [B][Hl][cp][D], what attention kernels produce.
  const int cp = 4, Hl = 3, D = 64;
  const Config cfg = resolvedConfig(D, Hl);
  ncclDcpStrides_t in = packedStridesIn();
  in.inPeer = D;
  in.inHead = cp * D;
  in.inRow = Hl * cp * D;
  in.lsePeer = 1;
  in.lseHead = cp;
  in.lseRow = Hl * cp;
  Strides s{};
  EXPECT_ACCEPTED(resolveStrides(&in, cfg, cp, &s));
  EXPECT_EQ(s.inPeer, D);
  EXPECT_EQ(s.inHead, cp * D);

  const int batch = 5;
  std::vector<uint16_t> partialOut(batch * Hl * cp * D), out(batch * Hl * D);
  std::vector<float> partialLse(batch * Hl * cp), outLse(batch * Hl);
  const CallBuffers buf = {partialOut.data(), partialLse.data(), out.data(), outLse.data()};
  EXPECT_ACCEPTED(checkCall(cfg, cp, buf, batch, s));
}

// ---------------------------------------------------------------------------
// checkCall: pointers and alignment. Fake, suitably aligned addresses far
// apart: checkCall computes address ranges but never dereferences.

struct CallFixture : ::testing::Test {
  static constexpr int kRanks = 2;
  Config cfg = resolvedConfig(128, 4, ncclBfloat16);
  Strides strides = packedStrides(cfg, kRanks);
  CallBuffers buf = {(const void*)0x10000000, (const float*)0x20000000, (void*)0x30000000, (float*)0x40000000};
};

TEST_F(CallFixture, ValidPackedCallAccepted) { EXPECT_ACCEPTED(checkCall(cfg, kRanks, buf, 7, strides)); }

TEST_F(CallFixture, NegativeBatchRejected) {
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, -1, strides), ncclInvalidArgument, "batch");
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, INT32_MIN, strides), ncclInvalidArgument, "batch");
}

// The int32 arrays the kernels read (seqLens, queryStartLoc, device
// counts) must not lie under out or outLse, which the kernels write while
// they read them.
TEST_F(CallFixture, OutputsOverTheArgsArraysRejected) {
  const int batch = 7, numSeqs = 3;
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.numSeqs = numSeqs;
  args.seqLens = (const int*)0x50000000;
  args.queryStartLoc = (const int*)0x50001000;
  CallShape shape;
  ASSERT_EQ(resolveCallArgs(&args, cfg, kRanks, batch, &shape), ncclSuccess) << ncclDcpGetLastError();
  CallBuffers b = buf;
  b.seqLens = args.seqLens;
  b.queryStartLoc = args.queryStartLoc;
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, b, batch, strides, shape, batch));
  const uintptr_t outBytes = (uintptr_t)batch * cfg.localHeads * cfg.headDim * cfg.eltSize;
  b.seqLens = (const int*)((uintptr_t)buf.out + outBytes - 4);  // its first int: out's last bytes
  EXPECT_REJECTED(checkCall(cfg, kRanks, b, batch, strides, shape, batch), ncclInvalidArgument,
                  "out overlaps args->seqLens");
  b.seqLens = (const int*)((uintptr_t)buf.out + outBytes);  // just past out
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, b, batch, strides, shape, batch));
  b.seqLens = args.seqLens;
  b.queryStartLoc = (const int*)((uintptr_t)buf.outLse - 4 * numSeqs);  // its last int: outLse's first
  EXPECT_REJECTED(checkCall(cfg, kRanks, b, batch, strides, shape, batch), ncclInvalidArgument,
                  "outLse overlaps args->queryStartLoc");
}

// Its rounds of maxBatch rows are indexed in int: the last round's end
// must not overflow (it once wrapped negative and never ended).
TEST_F(CallFixture, BatchWhoseRoundsOverflowRejected) {
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, INT32_MAX, strides), ncclInvalidArgument, "batch 2147483647");
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, INT32_MAX - cfg.maxBatch + 1, strides), ncclInvalidArgument,
                  "INT_MAX - maxBatch");
  CallShape shape;
  EXPECT_REJECTED(resolveCallArgs(nullptr, cfg, kRanks, INT32_MAX, &shape), ncclInvalidArgument, "batch");
}

TEST_F(CallFixture, NullBuffersAcceptedForEmptyBatch) {
  const CallBuffers none = {nullptr, nullptr, nullptr, nullptr};
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, none, 0, strides));
}

TEST_F(CallFixture, NullPartialOutRejected) {
  buf.partialOut = nullptr;
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 1, strides), ncclInvalidArgument, "partialOut");
}

TEST_F(CallFixture, NullPartialLseRejected) {
  buf.partialLse = nullptr;
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 1, strides), ncclInvalidArgument, "partialLse");
}

TEST_F(CallFixture, NullOutRejected) {
  buf.out = nullptr;
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 1, strides), ncclInvalidArgument, "out is NULL");
}

TEST_F(CallFixture, NullOutLseAccepted) {
  buf.outLse = nullptr;
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, buf, 3, strides));
}

TEST_F(CallFixture, MisalignedPartialOutRejected) {
  buf.partialOut = (const void*)(0x10000000 + 8);
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 1, strides), ncclInvalidArgument, "partialOut");
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("aligned"), std::string::npos) << ncclDcpGetLastError();
}

TEST_F(CallFixture, MisalignedOutRejected) {
  buf.out = (void*)(0x30000000 + 8);
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 1, strides), ncclInvalidArgument, "out ");
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("aligned"), std::string::npos) << ncclDcpGetLastError();
}

TEST_F(CallFixture, MisalignedPartialLseRejected) {
  buf.partialLse = (const float*)(0x20000000 + 2);
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 1, strides), ncclInvalidArgument, "partialLse");
}

TEST_F(CallFixture, MisalignedOutLseRejected) {
  buf.outLse = (float*)(0x40000000 + 2);
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 1, strides), ncclInvalidArgument, "outLse");
}

TEST_F(CallFixture, FourByteAlignedLsesAccepted) {
  buf.partialLse = (const float*)(0x20000000 + 4);
  buf.outLse = (float*)(0x40000000 + 12);
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, buf, 2, strides));
}

// ---------------------------------------------------------------------------
// checkCall: outputs must give every element its own address.

TEST_F(CallFixture, OverlappingOutHeadsRejected) {
  strides.outHead = cfg.headDim - 8;  // still 16-byte multiple, but heads overlap
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 2, strides), ncclInvalidArgument, "strides->outHead");
}

TEST_F(CallFixture, OverlappingOutRowsRejected) {
  strides.outRow = 2 * cfg.headDim;  // row b + 1 starts on head 2 of row b
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 2, strides), ncclInvalidArgument, "strides->outRow");
}

TEST_F(CallFixture, OverlapNeedsTwoOfADimension) {
  // With one row (or one head) the stride of that dimension is never used.
  strides.outRow = 8;
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, buf, 1, strides));
}

TEST_F(CallFixture, PaddedAndHeadMajorOutputAccepted) {
  strides.outHead = cfg.headDim + 8;
  strides.outRow = cfg.localHeads * strides.outHead + 64;
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, buf, 9, strides));
  // [Hl][B][D]: heads outermost.
  strides.outRow = cfg.headDim;
  strides.outHead = 9 * cfg.headDim;
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, buf, 9, strides));
}

TEST_F(CallFixture, SelfOverlappingOutLseRejected) {
  strides.outLseRow = 2;  // 4 heads per row need 4
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 2, strides), ncclInvalidArgument, "strides->outLseRow");
}

TEST_F(CallFixture, SelfOverlappingOutLseIgnoredWithoutOutLse) {
  strides.outLseRow = 2;
  buf.outLse = nullptr;
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, buf, 2, strides));
}

// ---------------------------------------------------------------------------
// checkCall: outputs must not overlap inputs (or each other).

TEST_F(CallFixture, OutOverlappingPartialOutRejected) {
  buf.out = (void*)((uintptr_t)buf.partialOut + 256);
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 2, strides), ncclInvalidArgument, "out overlaps partialOut");
}

TEST_F(CallFixture, OutOverlappingPartialLseRejected) {
  buf.partialLse = (const float*)((uintptr_t)buf.out + 16);
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 2, strides), ncclInvalidArgument, "out overlaps partialLse");
}

TEST_F(CallFixture, OutLseOverlappingPartialOutRejected) {
  buf.outLse = (float*)((uintptr_t)buf.partialOut + 1024);
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 2, strides), ncclInvalidArgument, "outLse overlaps partialOut");
}

TEST_F(CallFixture, OutLseOverlappingPartialLseRejected) {
  buf.outLse = (float*)((const float*)buf.partialLse + 4);
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 2, strides), ncclInvalidArgument, "outLse overlaps partialLse");
}

TEST_F(CallFixture, OutLseOverlappingOutRejected) {
  buf.outLse = (float*)((uintptr_t)buf.out + 2 * 4 * 128 * 2 - 4);  // the last 4 bytes of out
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 2, strides), ncclInvalidArgument, "outLse overlaps out");
}

TEST_F(CallFixture, AdjacentBuffersAccepted) {
  // Back to back, sharing no byte: real host buffers carved from one block.
  const int batch = 3, D = cfg.headDim, Hl = cfg.localHeads;
  const size_t inBytes = size_t(batch) * kRanks * Hl * D * 2, lseBytes = size_t(batch) * kRanks * Hl * 4;
  const size_t outBytes = size_t(batch) * Hl * D * 2, outLseBytes = size_t(batch) * Hl * 4;
  std::vector<uint64_t> block((inBytes + outBytes + lseBytes + outLseBytes) / 8 + 2);
  char* base = (char*)block.data();
  const CallBuffers adjacent = {base, (const float*)(base + inBytes + outBytes), base + inBytes,
                                (float*)(base + inBytes + outBytes + lseBytes)};
  EXPECT_ACCEPTED(checkCall(cfg, kRanks, adjacent, batch, strides));
}

TEST_F(CallFixture, OverlapCheckCoversStridedExtent) {
  // A padded input row makes partialOut reach further than packed.
  strides.inRow = 2 * kRanks * cfg.localHeads * cfg.headDim;
  const uintptr_t packedEnd = (uintptr_t)buf.partialOut + 2 * kRanks * 4 * 128 * 2;
  buf.out = (void*)(packedEnd + 1024);  // beyond the packed extent, inside row 1 of the padded one
  EXPECT_REJECTED(checkCall(cfg, kRanks, buf, 2, strides), ncclInvalidArgument, "out overlaps partialOut");
}

// BUG (src/validate.cc, extentOf / checkNoSelfOverlap): the 2^40 stride cap
// is meant to keep the extent arithmetic from overflowing, but it multiplies
// (count - 1) * stride in int64_t with count = batch, which is not capped:
// batch = 2^23 + 1 rows of outRow = 2^40 elements (2^41 bytes) need 2^64
// bytes, overflow (undefined behaviour) and wrap, so row 2^23 lands on
// row 0 and the view is accepted. No buffer can have such an extent: the
// check should reject any view whose byte extent does not fit the address
// space (overflow-checked multiplications, or a cap on the extent).
TEST_F(CallFixture, ViewLargerThanTheAddressSpaceRejected) {
  // Buffers far apart, so that only the wrapped out view is in question.
  buf = {(const void*)0x10000000, (const float*)0x100000000000, (void*)0x200000000000, nullptr};
  strides.outRow = int64_t(1) << 40;
  const int batch = (1 << 23) + 1;
  clearLastError();
  EXPECT_EQ(checkCall(cfg, kRanks, buf, batch, strides), ncclInvalidArgument)
      << "a view of " << batch << " rows " << (int64_t(1) << 41) << " bytes apart was accepted";
  const std::string msg = ncclDcpGetLastError();
  EXPECT_TRUE(msg.find("outRow") != std::string::npos || msg.find("batch") != std::string::npos)
      << "last error \"" << msg << "\" names neither strides->outRow nor batch";
}


// ---------------------------------------------------------------------------
// resolveConfig: the 0.3 fields, scatter and lseDtype.

ncclDcpConfig_t modeConfigIn(int scatter, ncclDataType_t lseDtype = (ncclDataType_t)NCCL_CONFIG_UNDEF_INT) {
  ncclDcpConfig_t c = validConfig();
  c.scatter = scatter;
  c.lseDtype = lseDtype;
  return c;
}

// Hl = 4, D = 128 bf16, in the given mode and LSE dtype.
Config modeConfig(int scatter, ncclDataType_t lseDtype = ncclFloat32) {
  const ncclDcpConfig_t in = modeConfigIn(scatter, lseDtype);
  Config c{};
  EXPECT_EQ(resolveConfig(&in, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  return c;
}

const int kModes[] = {ncclDcpScatterHead, ncclDcpScatterToken, ncclDcpScatterNone};

TEST(ConfigScatter, UnsetIsHeadWithFp32Lses) {
  const ncclDcpConfig_t in = validConfig();  // the initializer leaves both unset
  ASSERT_EQ(in.scatter, NCCL_CONFIG_UNDEF_INT);
  ASSERT_EQ((int)in.lseDtype, NCCL_CONFIG_UNDEF_INT);
  Config c{};
  c.scatter = Scatter::None;
  c.lseDtype = ncclFloat16;
  ASSERT_EQ(resolveConfig(&in, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.scatter, Scatter::Head);
  EXPECT_EQ(c.lseDtype, ncclFloat32);
  EXPECT_EQ(c.lseEltSize, 4);
}

TEST(ConfigScatter, EveryModeAccepted) {
  for (int m : kModes) {
    SCOPED_TRACE(std::string("scatter ") + scatterName(m));
    const Config c = modeConfig(m);
    EXPECT_EQ((int)c.scatter, m);
    EXPECT_EQ(headsPerRow(c, 4), m == ncclDcpScatterHead ? 4 : 16);
    EXPECT_EQ(headsPerRow(c, 1), 4);
  }
}

TEST(ConfigScatter, OutOfEnumRejected) {
  for (int bad : {-1, (int)ncclDcpNumScatters, 7, INT32_MAX}) {
    SCOPED_TRACE("scatter " + std::to_string(bad));
    EXPECT_REJECTED(resolve(modeConfigIn(bad)), ncclInvalidArgument, "config->scatter " + std::to_string(bad));
  }
}

TEST(ConfigLseDtype, EverySupportedDtypeAccepted) {
  const struct {
    ncclDataType_t dtype;
    int bytes;
  } ok[] = {{ncclFloat32, 4}, {ncclBfloat16, 2}, {ncclFloat16, 2}};
  for (const auto& t : ok)
    for (int m : kModes) {
      SCOPED_TRACE(std::string(dtypeName(t.dtype)) + " " + scatterName(m));
      const Config c = modeConfig(m, t.dtype);
      EXPECT_EQ(c.lseDtype, t.dtype);
      EXPECT_EQ(c.lseEltSize, t.bytes);
      EXPECT_EQ(c.dtype, ncclBfloat16) << "lseDtype must not change the payload's dtype";
    }
}

TEST(ConfigLseDtype, UnsupportedRejected) {
  for (ncclDataType_t bad : {ncclInt8, ncclUint8, ncclInt32, ncclInt64, ncclFloat64, (ncclDataType_t)99,
                             (ncclDataType_t)-2}) {
    SCOPED_TRACE("lseDtype " + std::to_string((int)bad));
    EXPECT_REJECTED(resolve(modeConfigIn(ncclDcpScatterHead, bad)), ncclInvalidArgument,
                    "config->lseDtype " + std::to_string((int)bad));
  }
}

// A caller built against 0.2 passes a struct that ends before scatter and
// lseDtype (sizeof of 0.2's struct: padded to its size_t's alignment):
// whatever lies past its size is not read, the defaults apply.
TEST(ConfigSize, ZeroPointTwoSizedConfigTakesTheDefaults) {
  ncclDcpConfig_t cfg = modeConfigIn(ncclDcpScatterToken, ncclBfloat16);  // ignored: past the size
  cfg.size = (offsetof(ncclDcpConfig_t, scatter) + alignof(size_t) - 1) / alignof(size_t) * alignof(size_t);
  cfg.version = NCCL_DCP_VERSION(0, 2, 0);
  Config c{};
  clearLastError();
  ASSERT_EQ(resolveConfig(&cfg, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.scatter, Scatter::Head);
  EXPECT_EQ(c.lseDtype, ncclFloat32);
  EXPECT_EQ(c.lseEltSize, 4);
  EXPECT_EQ(c.headDim, 128);
  // Even values past the size that would be refused are not read.
  cfg.scatter = 99;
  cfg.lseDtype = (ncclDataType_t)99;
  EXPECT_ACCEPTED(resolveConfig(&cfg, Env{}, &c));
  EXPECT_EQ(c.scatter, Scatter::Head);
}

// The struct a 0.2 caller really has: nccl_dcp.h 0.2's ncclDcpConfig_t,
// whose sizeof (what its NCCL_DCP_CONFIG_INITIALIZER puts in size) is
// padded to the alignment of its size_t.
struct ConfigV02 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int headDim, localHeads;
  ncclDataType_t dtype;
  int lseBase, maxBatch, protocol, timeoutMs;
};
static_assert(offsetof(ConfigV02, timeoutMs) == offsetof(ncclDcpConfig_t, timeoutMs), "0.2's layout");
static_assert(offsetof(ConfigV02, timeoutMs) + sizeof(int) == offsetof(ncclDcpConfig_t, scatter), "appended");

// 0.2's sizeof(ncclDcpConfig_t), which its NCCL_DCP_CONFIG_INITIALIZER
// writes, is padded to 8 bytes (48, not offsetof(scatter) = 44): a check
// for 44 would refuse every 0.2 caller (it once did). The bytes past its
// last field (the padding, which overlays 0.3's scatter) must not be read.
TEST(ConfigSize, ConfigOfAZeroPointTwoCallerAccepted) {
  // 0.2's struct inside a larger block whose bytes past it hold garbage
  // (which 0.3's scatter and lseDtype would read as refused values).
  union {
    ConfigV02 v2;
    unsigned char bytes[sizeof(ncclDcpConfig_t) + 16];
  } block;
  memset(&block, 0x5a, sizeof(block));
  const ncclDcpConfig_t now = validConfig();
  block.v2 = {sizeof(ConfigV02), NCCL_DCP_CONFIG_MAGIC, NCCL_DCP_VERSION(0, 2, 0), now.headDim, now.localHeads,
              now.dtype, now.lseBase, now.maxBatch, now.protocol, now.timeoutMs};
  memset(block.bytes + offsetof(ConfigV02, timeoutMs) + sizeof(int), 0x5a,
         sizeof(block) - offsetof(ConfigV02, timeoutMs) - sizeof(int));  // the padding too
  Config c{};
  clearLastError();
  EXPECT_EQ(resolveConfig((const ncclDcpConfig_t*)&block, Env{}, &c), ncclSuccess)
      << "a 0.2 caller's config (size " << sizeof(ConfigV02) << ") refused: " << ncclDcpGetLastError();
  if (c.headDim == now.headDim) {
    EXPECT_EQ(c.scatter, Scatter::Head);
    EXPECT_EQ(c.lseDtype, ncclFloat32);
  }
}

TEST(ConfigSize, SizeOfNeitherVersionRejected) {
  const size_t v2 = offsetof(ncclDcpConfig_t, scatter);
  for (size_t size : {v2 - 4, v2 + 2, offsetof(ncclDcpConfig_t, lseDtype) + 2, offsetof(ncclDcpConfig_t, wire) + 2,
                      sizeof(ncclDcpConfig_t) - 2, sizeof(ncclDcpConfig_t) + 4, size_t(8)}) {
    SCOPED_TRACE("size " + std::to_string(size));
    ncclDcpConfig_t cfg = validConfig();
    cfg.size = size;
    EXPECT_REJECTED(resolve(cfg), ncclInvalidArgument, "config->size " + std::to_string(size));
  }
}

// A caller built against 0.3 passes a struct without wire (sizeof 56: its
// tail padding is where reserved0 now lies): accepted, native, whatever
// lies past its size.
TEST(ConfigSize, ZeroPointThreeSizedConfigTakesNativeWire) {
  ncclDcpConfig_t cfg = validConfig();
  cfg.size = (offsetof(ncclDcpConfig_t, reserved0) + alignof(size_t) - 1) / alignof(size_t) * alignof(size_t);
  EXPECT_EQ(cfg.size, 56u);
  cfg.reserved0 = 0x5a5a5a5a;  // 0.3's padding: garbage
  cfg.wire = 99;                // past the size: not read
  Config c{};
  clearLastError();
  ASSERT_EQ(resolveConfig(&cfg, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.wire, Wire::Native);
  cfg.wire = ncclDcpWireFp8E4m3;
  ASSERT_EQ(resolveConfig(&cfg, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.wire, Wire::Native);
  // The 0.2 size takes native too.
  cfg.size = 48;
  ASSERT_EQ(resolveConfig(&cfg, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.wire, Wire::Native);
}

// ---------------------------------------------------------------------------
// config->wire (issue 28): fp8 needs bf16 / fp16, headDim % 16 == 0.

ncclDcpConfig_t wireConfig(int wire, int headDim = 128, ncclDataType_t dtype = ncclBfloat16,
                           int scatter = ncclDcpScatterHead) {
  ncclDcpConfig_t c = makeConfig(headDim, 4, dtype, ncclDcpLseBase2);
  c.scatter = scatter;
  c.wire = wire;
  return c;
}

TEST(ConfigWire, DefaultIsNative) {
  Config c{};
  const ncclDcpConfig_t in = validConfig();
  EXPECT_EQ(in.wire, NCCL_CONFIG_UNDEF_INT);
  EXPECT_EQ(in.reserved0, 0);
  ASSERT_EQ(resolveConfig(&in, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_EQ(c.wire, Wire::Native);
}

TEST(ConfigWire, Fp8AcceptedForBf16AndFp16InHead) {
  for (ncclDataType_t dtype : {ncclBfloat16, ncclFloat16})
    for (int D : {16, 128, 512, 4096}) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " D " + std::to_string(D));
      const ncclDcpConfig_t in = wireConfig(ncclDcpWireFp8E4m3, D, dtype);
      Config c{};
      clearLastError();
      ASSERT_EQ(resolveConfig(&in, Env{}, &c), ncclSuccess) << ncclDcpGetLastError();
      EXPECT_EQ(c.wire, Wire::Fp8E4m3);
    }
  EXPECT_ACCEPTED(resolve(wireConfig(ncclDcpWireNative, 128, ncclFloat32, ncclDcpScatterToken)));
}

TEST(ConfigWire, OutOfEnumRejected) {
  for (int bad : {-1, 2, 99})
    EXPECT_REJECTED(resolve(wireConfig(bad)), ncclInvalidArgument, "config->wire " + std::to_string(bad));
}

TEST(ConfigWire, Fp8RefusalsNameTheWire) {
  EXPECT_REJECTED(resolve(wireConfig(ncclDcpWireFp8E4m3, 128, ncclFloat32)), ncclInvalidArgument,
                  "config->wire fp8 needs dtype bf16 or fp16, not fp32");
  EXPECT_REJECTED(resolve(wireConfig(ncclDcpWireFp8E4m3, 24)), ncclInvalidArgument,
                  "config->wire fp8 needs headDim % 16 == 0, not 24");
  EXPECT_REJECTED(resolve(wireConfig(ncclDcpWireFp8E4m3, 136, ncclFloat16)), ncclInvalidArgument,
                  "config->wire fp8 needs headDim % 16 == 0, not 136");
  // Every scatter mode takes fp8; NONE runs its direct algorithm, so an
  // explicit two_phase is refused by name (auto picks direct).
  EXPECT_ACCEPTED(resolve(wireConfig(ncclDcpWireFp8E4m3, 128, ncclBfloat16, ncclDcpScatterToken)));
  EXPECT_ACCEPTED(resolve(wireConfig(ncclDcpWireFp8E4m3, 128, ncclBfloat16, ncclDcpScatterNone)));
  Env twoPhase;
  twoPhase.noneAlgo = (int)NoneAlgo::TwoPhase;
  EXPECT_REJECTED(resolve(wireConfig(ncclDcpWireFp8E4m3, 128, ncclBfloat16, ncclDcpScatterNone), twoPhase),
                  ncclInvalidArgument, "NCCL_DCP_NONE_ALGO=two_phase");
  Env autoAlgo;
  autoAlgo.noneAlgo = (int)NoneAlgo::Auto;
  const ncclDcpConfig_t none8 = wireConfig(ncclDcpWireFp8E4m3, 128, ncclBfloat16, ncclDcpScatterNone);
  Config c;
  ASSERT_EQ(resolveConfig(&none8, autoAlgo, &c), ncclSuccess);
  EXPECT_FALSE(noneRelays(c, 8));
}

// The workspace follows the narrower units: about half at D 512.
TEST(ConfigWire, Fp8WorkspaceIsSmaller) {
  for (int proto : {(int)ncclDcpProtoLL, (int)ncclDcpProtoLL128, (int)ncclDcpProtoSimple, (int)ncclDcpProtoAuto}) {
    SCOPED_TRACE(protocolName(proto));
    ncclDcpConfig_t n = wireConfig(ncclDcpWireNative, 512), f = wireConfig(ncclDcpWireFp8E4m3, 512);
    n.protocol = f.protocol = proto;
    n.maxBatch = f.maxBatch = 256;
    size_t native = 0, fp8 = 0;
    EXPECT_ACCEPTED(ncclDcpWorkspaceSize(&n, 4, &native));
    EXPECT_ACCEPTED(ncclDcpWorkspaceSize(&f, 4, &fp8));
    EXPECT_LT(fp8, native * 6 / 10);
    EXPECT_GT(fp8, native * 4 / 10);
  }
}

// ---------------------------------------------------------------------------
// resolveCallArgs: the call's additions, and the mode's shape.

constexpr int kCp = 4;

CallShape shapeOf(const Config& cfg, const ncclDcpCallArgs_t* args, int batch, int nRanks = kCp) {
  CallShape s;
  memset(&s, 0xab, sizeof(s));  // nothing left from before
  clearLastError();
  EXPECT_EQ(resolveCallArgs(args, cfg, nRanks, batch, &s), ncclSuccess) << ncclDcpGetLastError();
  return s;
}

ncclResult_t resolveArgs(const Config& cfg, const ncclDcpCallArgs_t& args, int batch, int nRanks = kCp) {
  CallShape s;
  return resolveCallArgs(&args, cfg, nRanks, batch, &s);
}

// Rows per rank of a split.
std::vector<int> rowsOf(const RowSplit& split, int nRanks) {
  std::vector<int> n(nRanks);
  for (int p = 0; p < nRanks; p++) n[p] = split.start[p + 1] - split.start[p];
  return n;
}

TEST(CallArgs, NoArgsGiveTheModesShape) {
  for (int m : kModes)
    for (ncclDataType_t lse : {ncclFloat32, ncclBfloat16}) {
      SCOPED_TRACE(std::string(scatterName(m)) + " " + dtypeName(lse));
      const Config cfg = modeConfig(m, lse);
      const CallShape s = shapeOf(cfg, nullptr, 10);
      EXPECT_EQ((int)s.scatter, m);
      EXPECT_EQ(s.localHeads, 4);
      EXPECT_EQ(s.heads, m == ncclDcpScatterHead ? 4 : kCp * 4);
      EXPECT_EQ(s.batch, 10);
      EXPECT_EQ(s.lseDtype, (int)lse);
      EXPECT_EQ(s.numSeqs, 0);
      EXPECT_EQ(s.split.deviceCounts, nullptr);
      EXPECT_EQ(rowsOf(s.split, kCp), (std::vector<int>{3, 3, 2, 2}));
      EXPECT_EQ(s.split.start[0], 0);
    }
}

TEST(CallArgs, InitializerAloneIsNoArgs) {
  for (int m : kModes) {
    const Config cfg = modeConfig(m);
    const ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    const CallShape a = shapeOf(cfg, &args, 9), b = shapeOf(cfg, nullptr, 9);
    EXPECT_EQ(a.scatter, b.scatter);
    EXPECT_EQ(a.heads, b.heads);
    EXPECT_EQ(a.batch, b.batch);
    EXPECT_EQ(a.numSeqs, 0);
    EXPECT_EQ(a.split.deviceCounts, nullptr);
    EXPECT_EQ(rowsOf(a.split, kCp), rowsOf(b.split, kCp));
  }
}

TEST(CallArgs, WrongMagicRejected) {
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.magic = NCCL_DCP_CONFIG_MAGIC;
  EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterToken), args, 4), ncclInvalidArgument, "args->magic");
  args.magic = 0;
  EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterHead), args, 4), ncclInvalidArgument, "args->magic");
}

TEST(CallArgs, UnknownVersionRejected) {
  // The struct came in 0.3: no earlier version has it.
  for (unsigned v : {0u, (unsigned)NCCL_DCP_VERSION(0, 2, 0), (unsigned)NCCL_DCP_VERSION_CODE + 1,
                     (unsigned)NCCL_DCP_VERSION(1, 0, 0)}) {
    SCOPED_TRACE("version " + std::to_string(v));
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.version = v;
    EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterToken), args, 4), ncclInvalidArgument,
                    "args->version " + std::to_string(v));
  }
}

TEST(CallArgs, WrongSizeRejected) {
  for (size_t size : {size_t(0), sizeof(ncclDcpCallArgs_t) - 8, sizeof(ncclDcpCallArgs_t) + 8}) {
    SCOPED_TRACE("size " + std::to_string(size));
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.size = size;
    EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterToken), args, 4), ncclInvalidArgument, "args->size");
  }
}

TEST(CallArgs, CountsOutsideTokenRejectedNamingTheMode) {
  const int counts[kCp] = {1, 1, 1, 1};
  for (int m : {ncclDcpScatterHead, ncclDcpScatterNone}) {
    SCOPED_TRACE(scatterName(m));
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.rowCounts = counts;
    EXPECT_REJECTED(resolveArgs(modeConfig(m), args, 4), ncclInvalidArgument, "args->rowCounts is set");
    EXPECT_NE(std::string(ncclDcpGetLastError()).find(scatterName(m)), std::string::npos) << ncclDcpGetLastError();
    args.rowCounts = nullptr;
    args.rowCountsDevice = (const int*)0x10000;
    EXPECT_REJECTED(resolveArgs(modeConfig(m), args, 4), ncclInvalidArgument, "args->rowCountsDevice is set");
  }
}

TEST(CallArgs, BothCountFormsRejected) {
  const int counts[kCp] = {1, 1, 1, 1};
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.rowCounts = counts;
  args.rowCountsDevice = (const int*)0x10000;
  EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterToken), args, 4), ncclInvalidArgument,
                  "args->rowCounts and args->rowCountsDevice are both set");
}

TEST(CallArgs, NegativeCountNamesItsIndex) {
  const struct {
    std::vector<int> counts;
    int batch;
    const char* named;
  } cases[] = {
      {{3, -1, 2, 0}, 4, "args->rowCounts[1] = -1"},
      {{1, 1, 1, -2}, 1, "args->rowCounts[3] = -2"},
      {{-1, 5, 0, 0}, 4, "args->rowCounts[0] = -1"},  // sums to batch: refused all the same
      {{2, 0, INT32_MIN, 0}, 2, "args->rowCounts[2]"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.named);
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.rowCounts = c.counts.data();
    EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterToken), args, c.batch), ncclInvalidArgument, c.named);
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("negative"), std::string::npos) << ncclDcpGetLastError();
  }
}

TEST(CallArgs, CountsNotSummingToBatchRejected) {
  const struct {
    std::vector<int> counts;
    int batch;
    const char* sum;
  } cases[] = {
      {{1, 1, 1, 1}, 5, "sum to 4"},
      {{1, 1, 1, 1}, 3, "sum to 4"},
      {{0, 0, 0, 0}, 1, "sum to 0"},
      {{0, 0, 0, 1}, 0, "sum to 1"},
      // Would wrap to batch in 32 bits: 2^31 - 1 + 2^31 - 1 + 2 = 2^32.
      {{INT32_MAX, INT32_MAX, 2, 0}, 0, "sum to 4294967296"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.sum);
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.rowCounts = c.counts.data();
    EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterToken), args, c.batch), ncclInvalidArgument,
                    "args->rowCounts " + std::string(c.sum));
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("batch " + std::to_string(c.batch)), std::string::npos)
        << ncclDcpGetLastError();
  }
}

// Host counts are the split: zero-row ranks anywhere, all rows on one rank.
TEST(CallArgs, HostCountsAreTheSplit) {
  const std::vector<std::vector<int>> splits = {{0, 5, 0, 2}, {7, 0, 0, 0}, {0, 0, 0, 7}, {1, 2, 3, 1}, {2, 2, 2, 1}};
  for (const std::vector<int>& counts : splits) {
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.rowCounts = counts.data();
    const CallShape s = shapeOf(modeConfig(ncclDcpScatterToken), &args, 7);
    EXPECT_EQ(s.split.deviceCounts, nullptr);
    EXPECT_EQ(s.split.start[0], 0);
    EXPECT_EQ(rowsOf(s.split, kCp), counts);
    for (int r = 0; r < kCp; r++) EXPECT_EQ(outRowsOf(s, r), counts[r]) << "rank " << r;
  }
  // Zero rows, every count 0.
  const int zeros[kCp] = {0, 0, 0, 0};
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.rowCounts = zeros;
  const CallShape s = shapeOf(modeConfig(ncclDcpScatterToken), &args, 0);
  for (int r = 0; r < kCp; r++) EXPECT_EQ(outRowsOf(s, r), 0);
}

// The counts are read for the call's ranks only (cp of them), not more.
TEST(CallArgs, HostCountsReadForTheRanksOnly) {
  const int counts[3] = {0, 3, 1};  // no fourth entry: cp = 3
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.rowCounts = counts;
  const CallShape s = shapeOf(modeConfig(ncclDcpScatterToken), &args, 4, 3);
  EXPECT_EQ(rowsOf(s.split, 3), (std::vector<int>{0, 3, 1}));
  EXPECT_EQ(s.heads, 12);
}

TEST(CallArgs, DeviceCountsLeaveTheRowsToTheKernels) {
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.rowCountsDevice = (const int*)0x10000;
  const CallShape s = shapeOf(modeConfig(ncclDcpScatterToken), &args, 9);
  EXPECT_EQ(s.split.deviceCounts, (const int*)0x10000);
  for (int r = 0; r < kCp; r++) EXPECT_EQ(outRowsOf(s, r), -1) << "rank " << r;
  args.rowCountsDevice = (const int*)0x10002;
  EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterToken), args, 9), ncclInvalidArgument,
                  "args->rowCountsDevice");
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("aligned"), std::string::npos) << ncclDcpGetLastError();
}

TEST(CallArgs, SeqLensWithoutQueryStartLocRejected) {
  for (int m : kModes) {
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.seqLens = (const int*)0x10000;
    args.numSeqs = 2;
    EXPECT_REJECTED(resolveArgs(modeConfig(m), args, 4), ncclInvalidArgument,
                    "args->seqLens is set without args->queryStartLoc");
  }
}

TEST(CallArgs, QueryStartLocWithoutSeqLensRejected) {
  for (int m : kModes) {
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.queryStartLoc = (const int*)0x10000;
    args.numSeqs = 2;
    EXPECT_REJECTED(resolveArgs(modeConfig(m), args, 4), ncclInvalidArgument,
                    "args->queryStartLoc is set without args->seqLens");
  }
}

TEST(CallArgs, NumSeqsOutOfRangeRejected) {
  for (int n : {0, -1, INT32_MIN, NCCL_DCP_MAX_BATCH_CAPACITY + 1, INT32_MAX}) {
    SCOPED_TRACE("numSeqs " + std::to_string(n));
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.seqLens = (const int*)0x10000;
    args.queryStartLoc = (const int*)0x20000;
    args.numSeqs = n;
    EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterNone), args, 4), ncclInvalidArgument,
                    "args->numSeqs " + std::to_string(n) + " is out of range");
  }
}

TEST(CallArgs, NumSeqsInRangeAcceptedInEveryMode) {
  for (int m : kModes)
    for (int n : {1, 3, NCCL_DCP_MAX_BATCH_CAPACITY}) {
      ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
      args.seqLens = (const int*)0x10000;
      args.queryStartLoc = (const int*)0x20000;
      args.numSeqs = n;
      EXPECT_EQ(shapeOf(modeConfig(m), &args, 4).numSeqs, n) << scatterName(m);
    }
}

TEST(CallArgs, NumSeqsWithoutArraysRejected) {
  for (int n : {3, -1}) {
    ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
    args.numSeqs = n;
    EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterHead), args, 4), ncclInvalidArgument,
                    "args->numSeqs " + std::to_string(n) + " is set without");
  }
}

TEST(CallArgs, MisalignedArraysRejected) {
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.seqLens = (const int*)0x10002;
  args.queryStartLoc = (const int*)0x20000;
  args.numSeqs = 1;
  EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterHead), args, 4), ncclInvalidArgument, "args->seqLens");
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("aligned"), std::string::npos) << ncclDcpGetLastError();
  args.seqLens = (const int*)0x10004;
  args.queryStartLoc = (const int*)0x20001;
  EXPECT_REJECTED(resolveArgs(modeConfig(ncclDcpScatterHead), args, 4), ncclInvalidArgument, "args->queryStartLoc");
  args.queryStartLoc = (const int*)0x20004;
  EXPECT_ACCEPTED(resolveArgs(modeConfig(ncclDcpScatterHead), args, 4));
}

// ---------------------------------------------------------------------------
// The even split: the first batch % cp ranks take one row more.

TEST(EvenSplit, RemainderGoesToTheFirstRanks) {
  const struct {
    int batch, cp;
    std::vector<int> rows;
  } cases[] = {
      {10, 4, {3, 3, 2, 2}}, {7, 4, {2, 2, 2, 1}}, {8, 4, {2, 2, 2, 2}}, {2, 4, {1, 1, 0, 0}},  // B < cp
      {1, 8, {1, 0, 0, 0, 0, 0, 0, 0}},                                                      // B = 1
      {0, 3, {0, 0, 0}},                                                                     // B = 0
      {5, 1, {5}},       {1, 1, {1}},       {65, 64, std::vector<int>(64, 1)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + " cp " + std::to_string(c.cp));
    RowSplit split;
    memset(&split, 0xab, sizeof(split));
    evenSplit(c.batch, c.cp, &split);
    EXPECT_EQ(split.deviceCounts, nullptr);
    EXPECT_EQ(split.start[0], 0);
    std::vector<int> want = c.rows;
    if (c.batch == 65) want[0] = 2;
    EXPECT_EQ(rowsOf(split, c.cp), want);
    // The same through resolveCallArgs and outRowsOf.
    const CallShape s = shapeOf(modeConfig(ncclDcpScatterToken), nullptr, c.batch, c.cp);
    for (int r = 0; r < c.cp; r++) EXPECT_EQ(outRowsOf(s, r), want[r]) << "rank " << r;
  }
}

TEST(EvenSplit, EveryBatchAndRankCount) {
  for (int cp : {1, 2, 3, 5, 8, 16, 64})
    for (int batch = 0; batch <= 3 * cp + 1; batch++) {
      RowSplit split;
      evenSplit(batch, cp, &split);
      ASSERT_EQ(split.start[0], 0);
      ASSERT_EQ(split.start[cp], batch) << batch << " rows over " << cp;
      for (int p = 0; p < cp; p++)
        ASSERT_EQ(split.start[p + 1] - split.start[p], batch / cp + (p < batch % cp ? 1 : 0))
            << "rank " << p << ", " << batch << " rows over " << cp;
    }
}

// ---------------------------------------------------------------------------
// outRowsOf: the rows of out on a rank, per mode.

TEST(OutRows, HeadAndNoneHoldTheBatchOnEveryRank) {
  for (int m : {ncclDcpScatterHead, ncclDcpScatterNone})
    for (int batch : {0, 1, 3, 10}) {
      const CallShape s = shapeOf(modeConfig(m), nullptr, batch);
      for (int r = 0; r < kCp; r++) EXPECT_EQ(outRowsOf(s, r), batch) << scatterName(m) << " rank " << r;
    }
}

TEST(OutRows, TokenHoldsItsShare) {
  const CallShape s = shapeOf(modeConfig(ncclDcpScatterToken), nullptr, 6);
  EXPECT_EQ(outRowsOf(s, 0), 2);
  EXPECT_EQ(outRowsOf(s, 1), 2);
  EXPECT_EQ(outRowsOf(s, 2), 1);
  EXPECT_EQ(outRowsOf(s, 3), 1);
}

// ---------------------------------------------------------------------------
// packedStrides: inputs are the same in every mode; out and outLse are the
// mode's [rows][heads].

TEST(PackedStrides, PerMode) {
  for (int cp : {1, 2, 8})
    for (int m : kModes) {
      SCOPED_TRACE(std::string(scatterName(m)) + " cp " + std::to_string(cp));
      const Config cfg = modeConfig(m, ncclBfloat16);
      const int64_t D = 128, Hl = 4, heads = m == ncclDcpScatterHead ? Hl : cp * Hl;
      const Strides s = packedStrides(cfg, cp);
      EXPECT_EQ(s.inHead, D);
      EXPECT_EQ(s.inPeer, Hl * D);
      EXPECT_EQ(s.inRow, cp * Hl * D);
      EXPECT_EQ(s.lseHead, 1);
      EXPECT_EQ(s.lsePeer, Hl);
      EXPECT_EQ(s.lseRow, cp * Hl);
      EXPECT_EQ(s.outHead, D);
      EXPECT_EQ(s.outRow, heads * D);
      EXPECT_EQ(s.outLseHead, 1);
      EXPECT_EQ(s.outLseRow, heads);
      // NULL strides and all-zero strides are the same packed layout.
      Strides r{};
      ASSERT_EQ(resolveStrides(nullptr, cfg, cp, &r), ncclSuccess);
      EXPECT_EQ(r.outRow, s.outRow);
      EXPECT_EQ(r.outLseRow, s.outLseRow);
      const ncclDcpStrides_t zero = packedStridesIn();
      ASSERT_EQ(resolveStrides(&zero, cfg, cp, &r), ncclSuccess) << ncclDcpGetLastError();
      EXPECT_EQ(r.outRow, s.outRow);
      EXPECT_EQ(r.outLseRow, s.outLseRow);
      EXPECT_EQ(r.lseRow, s.lseRow);
    }
}

// LSE strides count elements of lseDtype and need no 16-byte multiple.
TEST(PackedStrides, OddLseStridesAcceptedForEveryLseDtype) {
  for (ncclDataType_t lse : {ncclFloat32, ncclBfloat16, ncclFloat16}) {
    const Config cfg = modeConfig(ncclDcpScatterToken, lse);
    ncclDcpStrides_t in = packedStridesIn();
    in.lseRow = 2 * 4 + 1;
    in.lseHead = 1;
    in.lsePeer = 4 * 9;
    Strides s{};
    EXPECT_ACCEPTED(resolveStrides(&in, cfg, 2, &s));
    EXPECT_EQ(s.lseRow, 9);
  }
}

// ---------------------------------------------------------------------------
// checkCall per mode: out and outLse are the mode's rows x heads, and the
// overlap checks use that extent. Fake addresses: never dereferenced.

struct ModeCall {
  Config cfg;
  Strides strides;
  CallShape shape;
  int rank;
  CallBuffers buf;

  ModeCall(int scatter, int batch, const ncclDcpCallArgs_t* args = nullptr, int rank_ = 0,
           ncclDataType_t lse = ncclFloat32)
      : cfg(modeConfig(scatter, lse)), strides(packedStrides(cfg, kCp)), shape(shapeOf(cfg, args, batch)),
        rank(rank_) {
    buf = {(const void*)0x100000000, (const void*)0x200000000, (void*)0x300000000, (float*)0x400000000};
  }
  int outRows() const { return outRowsOf(shape, rank); }
  ncclResult_t check() const { return checkCall(cfg, kCp, buf, shape.batch, strides, shape, outRows()); }
  // Bytes of out (and outLse) a packed call writes on this rank.
  uintptr_t outBytes() const { return (uintptr_t)std::max(outRows(), 1) * shape.heads * cfg.headDim * 2; }
  uintptr_t outLseBytes() const { return (uintptr_t)std::max(outRows(), 1) * shape.heads * 4; }
};

// out (then outLse) right before partialOut (then partialLse): accepted
// when it ends where the input starts, refused 16 bytes later; so the
// extent checked is the mode's, neither more nor less.
void expectOutExtent(ModeCall call, const char* what) {
  SCOPED_TRACE(what);
  const uintptr_t in = (uintptr_t)call.buf.partialOut;
  call.buf.out = (void*)(in - call.outBytes());
  EXPECT_ACCEPTED(call.check());
  call.buf.out = (void*)(in - call.outBytes() + 16);
  EXPECT_REJECTED(call.check(), ncclInvalidArgument, "out overlaps partialOut");
  call.buf.out = (void*)0x300000000;

  const uintptr_t lse = (uintptr_t)call.buf.partialLse;
  call.buf.outLse = (float*)(lse - call.outLseBytes());
  EXPECT_ACCEPTED(call.check());
  call.buf.outLse = (float*)(lse - call.outLseBytes() + 4);
  EXPECT_REJECTED(call.check(), ncclInvalidArgument, "outLse overlaps partialLse");
}

TEST(ModeCheckCall, HeadOutIsBatchByLocalHeads) {
  ModeCall call(ncclDcpScatterHead, 6);
  EXPECT_EQ(call.outBytes(), 6u * 4 * 128 * 2);
  expectOutExtent(call, "HEAD");
}

TEST(ModeCheckCall, NoneOutIsBatchByAllHeads) {
  ModeCall call(ncclDcpScatterNone, 6);
  EXPECT_EQ(call.outBytes(), 6u * 16 * 128 * 2);
  expectOutExtent(call, "NONE");
  // HEAD's packed out row is too short for NONE's heads.
  call.strides.outRow = 4 * 128;
  EXPECT_REJECTED(call.check(), ncclInvalidArgument, "strides->outRow");
  call.strides = packedStrides(call.cfg, kCp);
  call.strides.outLseRow = 4;
  EXPECT_REJECTED(call.check(), ncclInvalidArgument, "strides->outLseRow");
}

TEST(ModeCheckCall, TokenOutIsItsRowsByAllHeads) {
  // Even split of 10 rows: 3, 3, 2, 2.
  for (int r = 0; r < kCp; r++) {
    ModeCall call(ncclDcpScatterToken, 10, nullptr, r);
    EXPECT_EQ(call.outRows(), r < 2 ? 3 : 2);
    expectOutExtent(call, ("TOKEN even, rank " + std::to_string(r)).c_str());
  }
  // Host counts.
  const int counts[kCp] = {1, 6, 0, 3};
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.rowCounts = counts;
  for (int r : {0, 1, 3}) {
    ModeCall call(ncclDcpScatterToken, 10, &args, r);
    EXPECT_EQ(call.outRows(), counts[r]);
    expectOutExtent(call, ("TOKEN counts, rank " + std::to_string(r)).c_str());
  }
  // Self-overlap over a TOKEN rank's rows: HEAD's packed row is too short.
  ModeCall call(ncclDcpScatterToken, 10, &args, 1);
  call.strides.outRow = 4 * 128;
  EXPECT_REJECTED(call.check(), ncclInvalidArgument, "strides->outRow");
}

// A rank the split gives no rows writes no out: NULL out and outLse are fine.
TEST(ModeCheckCall, TokenRankWithoutRowsMayPassNullOut) {
  const int counts[kCp] = {4, 0, 3, 0};
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.rowCounts = counts;
  for (int r : {1, 3}) {
    ModeCall call(ncclDcpScatterToken, 7, &args, r);
    ASSERT_EQ(call.outRows(), 0);
    call.buf.out = nullptr;
    call.buf.outLse = nullptr;
    EXPECT_ACCEPTED(call.check());
    // Outputs that would overlap inputs if they had rows: no rows, no overlap.
    call.buf.out = (void*)call.buf.partialOut;
    EXPECT_ACCEPTED(call.check());
  }
  // A rank with rows still needs out.
  ModeCall call(ncclDcpScatterToken, 7, &args, 2);
  call.buf.out = nullptr;
  EXPECT_REJECTED(call.check(), ncclInvalidArgument, "out is NULL");
  // B < cp, even split: ranks past the batch hold no rows.
  ModeCall few(ncclDcpScatterToken, 2, nullptr, 3);
  ASSERT_EQ(few.outRows(), 0);
  few.buf.out = nullptr;
  EXPECT_ACCEPTED(few.check());
  // HEAD and NONE hold every row on every rank: out is needed.
  for (int m : {ncclDcpScatterHead, ncclDcpScatterNone}) {
    ModeCall other(m, 2, nullptr, 3);
    other.buf.out = nullptr;
    EXPECT_REJECTED(other.check(), ncclInvalidArgument, "out is NULL");
  }
}

// Device counts: the host knows neither the rows nor whether there are
// any: out is required and its first row is checked.
TEST(ModeCheckCall, TokenWithDeviceCountsChecksTheFirstRow) {
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.rowCountsDevice = (const int*)0x10000;
  ModeCall call(ncclDcpScatterToken, 10, &args, 2);
  ASSERT_EQ(call.outRows(), -1);
  EXPECT_EQ(call.outBytes(), 16u * 128 * 2);
  expectOutExtent(call, "TOKEN device counts");
  call.buf.out = nullptr;
  EXPECT_REJECTED(call.check(), ncclInvalidArgument, "out is NULL");
}

// partialLse is aligned to its element: 2 bytes for bf16 and fp16, 4 for fp32.
TEST(ModeCheckCall, PartialLseAlignedToLseDtype) {
  for (ncclDataType_t lse : {ncclBfloat16, ncclFloat16}) {
    ModeCall call(ncclDcpScatterHead, 3, nullptr, 0, lse);
    call.buf.partialLse = (const void*)(0x200000000 + 2);
    EXPECT_ACCEPTED(call.check());
    call.buf.partialLse = (const void*)(0x200000000 + 1);
    EXPECT_REJECTED(call.check(), ncclInvalidArgument, "partialLse");
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("2-byte aligned"), std::string::npos) << ncclDcpGetLastError();
  }
  ModeCall call(ncclDcpScatterHead, 3, nullptr, 0, ncclFloat32);
  call.buf.partialLse = (const void*)(0x200000000 + 2);
  EXPECT_REJECTED(call.check(), ncclInvalidArgument, "partialLse");
  EXPECT_NE(std::string(ncclDcpGetLastError()).find("4-byte aligned"), std::string::npos) << ncclDcpGetLastError();
  call.buf.partialLse = (const void*)(0x200000000 + 4);
  EXPECT_ACCEPTED(call.check());
}

// partialLse's extent counts lseDtype elements: out placed right after a
// bf16 partialLse is clear of it, and overlaps an fp32 one.
TEST(ModeCheckCall, PartialLseExtentInLseDtypeElements) {
  for (int m : kModes) {
    SCOPED_TRACE(scatterName(m));
    const int batch = 8;
    const uintptr_t bf16Bytes = (uintptr_t)batch * kCp * 4 * 2;  // 256
    ModeCall half(m, batch, nullptr, 0, ncclBfloat16);
    half.buf.out = (void*)((uintptr_t)half.buf.partialLse + bf16Bytes);
    EXPECT_ACCEPTED(half.check());
    half.buf.out = (void*)((uintptr_t)half.buf.partialLse + bf16Bytes - 16);
    EXPECT_REJECTED(half.check(), ncclInvalidArgument, "out overlaps partialLse");
    ModeCall full(m, batch, nullptr, 0, ncclFloat32);
    full.buf.out = (void*)((uintptr_t)full.buf.partialLse + bf16Bytes);
    EXPECT_REJECTED(full.check(), ncclInvalidArgument, "out overlaps partialLse");
    full.buf.out = (void*)((uintptr_t)full.buf.partialLse + 2 * bf16Bytes);
    EXPECT_ACCEPTED(full.check());
  }
}

// The empty-shard arrays: a shape with sequences needs both.
TEST(ModeCheckCall, ShapeWithSequencesNeedsBothArrays) {
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.seqLens = (const int*)0x10000;
  args.queryStartLoc = (const int*)0x20000;
  args.numSeqs = 2;
  for (int m : kModes) {
    ModeCall call(m, 4, &args);
    call.buf.seqLens = (const int*)0x10000;
    call.buf.queryStartLoc = (const int*)0x20000;
    EXPECT_ACCEPTED(call.check());
    call.buf.queryStartLoc = nullptr;
    EXPECT_REJECTED(call.check(), ncclInvalidArgument, "queryStartLoc");
    call.buf.queryStartLoc = (const int*)0x20000;
    call.buf.seqLens = nullptr;
    EXPECT_REJECTED(call.check(), ncclInvalidArgument, "seqLens");
  }
}

// The 5-argument checkCall is rank 0 of the even split.
TEST(ModeCheckCall, WithoutArgsIsRankZeroOfTheEvenSplit) {
  const Config cfg = modeConfig(ncclDcpScatterToken);
  const Strides s = packedStrides(cfg, kCp);
  // 5 rows: rank 0 holds 2; out ending 2 rows before partialOut is clear.
  const uintptr_t in = 0x100000000, rowBytes = 16 * 128 * 2;
  CallBuffers buf = {(const void*)in, (const void*)0x200000000, (void*)(in - 2 * rowBytes), nullptr};
  EXPECT_ACCEPTED(checkCall(cfg, kCp, buf, 5, s));
  buf.out = (void*)(in - 2 * rowBytes + 16);
  EXPECT_REJECTED(checkCall(cfg, kCp, buf, 5, s), ncclInvalidArgument, "out overlaps partialOut");
}

// ---------------------------------------------------------------------------
// The arrays the kernels read on the GPU must be device (or managed)
// memory: checked at the call by cudaPointerGetAttributes, here through a
// query that answers what the test says (no driver on this machine).

// The answer per address: device 0's memory at 0x1xxxx, managed at
// 0x2xxxx, pinned host at 0x3xxxx, unregistered at 0x4xxxx, a runtime
// error at 0x5xxxx, device 1's memory at 0x6xxxx. The contexts here are
// device 0's.
constexpr int kDev = 0;
PointerAnswer fakeAnswer(const void* p) {
  switch ((uintptr_t)p >> 16) {
    case 1: return {cudaSuccess, cudaMemoryTypeDevice, 0};
    case 2: return {cudaSuccess, cudaMemoryTypeManaged, 0};
    case 3: return {cudaSuccess, cudaMemoryTypeHost};
    case 4: return {cudaSuccess, cudaMemoryTypeUnregistered};
    case 6: return {cudaSuccess, cudaMemoryTypeDevice, 1};
    default: return {cudaErrorInvalidValue, cudaMemoryTypeUnregistered};
  }
}
int gQueries = 0;
PointerAnswer countingAnswer(const void* p) {
  gQueries++;
  return fakeAnswer(p);
}

TEST(DeviceArrays, DeviceAndManagedMemoryAccepted) {
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  EXPECT_ACCEPTED(checkDeviceArrays(nullptr, kDev, fakeAnswer));
  EXPECT_ACCEPTED(checkDeviceArrays(&args, kDev, fakeAnswer));
  args.rowCountsDevice = (const int*)0x10000;
  args.seqLens = (const int*)0x20000;
  args.queryStartLoc = (const int*)0x10040;
  EXPECT_ACCEPTED(checkDeviceArrays(&args, kDev, fakeAnswer));
}

TEST(DeviceArrays, HostMemoryRefusedNamingTheArgument) {
  const struct {
    const char* name;
    const int* ncclDcpCallArgs_t::*field;
  } arrays[] = {{"args->rowCountsDevice", &ncclDcpCallArgs_t::rowCountsDevice},
                {"args->seqLens", &ncclDcpCallArgs_t::seqLens},
                {"args->queryStartLoc", &ncclDcpCallArgs_t::queryStartLoc}};
  const struct {
    uintptr_t address;
    const char* why;
  } bad[] = {{0x30000, "pinned host memory"},
             {0x40000, "is host memory"},
             {0x50000, "cudaPointerGetAttributes failed"},
             {0x60000, "is memory of device 1, not of the context's device 0"}};
  for (const auto& a : arrays)
    for (const auto& b : bad) {
      SCOPED_TRACE(std::string(a.name) + ": " + b.why);
      ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
      args.rowCountsDevice = (const int*)0x10000;
      args.seqLens = (const int*)0x10100;
      args.queryStartLoc = (const int*)0x10200;
      args.*a.field = (const int*)b.address;
      EXPECT_REJECTED(checkDeviceArrays(&args, kDev, fakeAnswer), ncclInvalidArgument, std::string(a.name) + " 0x");
      EXPECT_NE(std::string(ncclDcpGetLastError()).find(b.why), std::string::npos) << ncclDcpGetLastError();
    }
}

// The host reads args->rowCounts at the call: device memory there would
// fault the process, so it is refused naming the argument; host memory,
// pinned or not, managed memory and a pointer the runtime cannot place
// (read as host memory, as before the check) pass.
TEST(HostArrays, DeviceMemoryAsHostCountsRefused) {
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  EXPECT_ACCEPTED(checkHostArrays(nullptr, fakeAnswer));
  EXPECT_ACCEPTED(checkHostArrays(&args, fakeAnswer));
  for (uintptr_t host : {0x20000, 0x30000, 0x40000, 0x50000}) {
    args.rowCounts = (const int*)host;
    EXPECT_ACCEPTED(checkHostArrays(&args, fakeAnswer));
  }
  for (uintptr_t device : {0x10000, 0x60000}) {
    args.rowCounts = (const int*)device;
    EXPECT_REJECTED(checkHostArrays(&args, fakeAnswer), ncclInvalidArgument, "args->rowCounts 0x");
    EXPECT_NE(std::string(ncclDcpGetLastError()).find("args->rowCountsDevice"), std::string::npos)
        << ncclDcpGetLastError();
  }
  gQueries = 0;
  args.rowCounts = nullptr;
  args.seqLens = (const int*)0x10000;  // not the host's to read: not asked about here
  EXPECT_ACCEPTED(checkHostArrays(&args, countingAnswer));
  EXPECT_EQ(gQueries, 0);
}

// NULL arrays are not asked about (a call without them costs no query).
TEST(DeviceArrays, OnlyGivenArraysAreQueried) {
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  gQueries = 0;
  EXPECT_ACCEPTED(checkDeviceArrays(&args, kDev, countingAnswer));
  EXPECT_EQ(gQueries, 0);
  args.seqLens = (const int*)0x10000;
  args.queryStartLoc = (const int*)0x10100;
  EXPECT_ACCEPTED(checkDeviceArrays(&args, kDev, countingAnswer));
  EXPECT_EQ(gQueries, 2);
}

// Without a driver (this machine) the runtime cannot place any pointer:
// the production query refuses, it does not guess "device".
TEST(DeviceArrays, WithoutADriverNothingPassesAsDeviceMemory) {
  int onTheStack = 0;
  const PointerAnswer a = cudaPointerAnswer(&onTheStack);
  if (a.error == cudaSuccess) GTEST_SKIP() << "a CUDA driver answers here: the GPU test covers it";
  ncclDcpCallArgs_t args = NCCL_DCP_CALL_ARGS_INITIALIZER;
  args.seqLens = &onTheStack;
  args.queryStartLoc = &onTheStack;
  EXPECT_REJECTED(checkDeviceArrays(&args, kDev, cudaPointerAnswer), ncclInvalidArgument, "args->seqLens");
}

// ---------------------------------------------------------------------------
// ncclDcpWorkspaceSize per mode: TOKEN and NONE direct hold every head of
// a row (cp times HEAD's), HEAD its Hl; one rank is the same in every mode.
// (NONE in two phases: test_layout.cc's WorkspaceSize.NoneFollowsItsAlgorithm.)

size_t workspaceOf(int scatter, int nRanks, int protocol, ncclDataType_t lse = ncclFloat32) {
  ncclDcpConfig_t cfg = modeConfigIn(scatter, lse);
  cfg.protocol = protocol;
  cfg.maxBatch = 32;
  size_t bytes = 0;
  EXPECT_EQ(ncclDcpWorkspaceSize(&cfg, nRanks, &bytes), ncclSuccess) << ncclDcpGetLastError();
  return bytes;
}

TEST(WorkspaceSizePerMode, TokenAndNoneHoldMoreThanHead) {
  for (int proto : {ncclDcpProtoAuto, ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple})
    for (int cp : {2, 4, 8}) {
      SCOPED_TRACE("protocol " + std::to_string(proto) + " cp " + std::to_string(cp));
      const size_t head = workspaceOf(ncclDcpScatterHead, cp, proto);
      const size_t token = workspaceOf(ncclDcpScatterToken, cp, proto);
      Env direct;
      direct.noneAlgo = (int)NoneAlgo::Direct;
      test::ScopedEnv env(direct);
      const size_t none = workspaceOf(ncclDcpScatterNone, cp, proto);
      EXPECT_GT(token, head);
      EXPECT_GT(none, head);
      EXPECT_EQ(token, none) << "both hold every head of a row (NONE direct)";
    }
}

TEST(WorkspaceSizePerMode, OneRankIsTheSameInEveryMode) {
  for (int proto : {ncclDcpProtoAuto, ncclDcpProtoLL, ncclDcpProtoLL128, ncclDcpProtoSimple}) {
    const size_t head = workspaceOf(ncclDcpScatterHead, 1, proto);
    EXPECT_EQ(workspaceOf(ncclDcpScatterToken, 1, proto), head) << "protocol " << proto;
    EXPECT_EQ(workspaceOf(ncclDcpScatterNone, 1, proto), head) << "protocol " << proto;
  }
}

TEST(WorkspaceSizePerMode, RefusesABadScatterOrLseDtype) {
  size_t bytes = 0;
  const ncclDcpConfig_t badScatter = modeConfigIn(3);
  EXPECT_REJECTED(ncclDcpWorkspaceSize(&badScatter, 2, &bytes), ncclInvalidArgument, "config->scatter");
  const ncclDcpConfig_t badLse = modeConfigIn(ncclDcpScatterHead, ncclInt32);
  EXPECT_REJECTED(ncclDcpWorkspaceSize(&badLse, 2, &bytes), ncclInvalidArgument, "config->lseDtype");
}

// ---------------------------------------------------------------------------
// Registered outputs (registered_output.h): the arguments, which calls take
// the direct path, and the tag of their phase-2 flags.

TEST(RegisteredOutputs, RangesNameTheArgumentAtFault) {
  alignas(16) static char out[256];
  alignas(16) static float lse[16];
  EXPECT_REJECTED(checkOutputRanges(nullptr, 256, lse, 64), ncclInvalidArgument, "out is NULL");
  EXPECT_REJECTED(checkOutputRanges(out + 8, 128, lse, 64), ncclInvalidArgument, "16-byte aligned");
  EXPECT_REJECTED(checkOutputRanges(out, 0, lse, 64), ncclInvalidArgument, "outBytes is 0");
  EXPECT_REJECTED(checkOutputRanges(out, 256, lse, 0), ncclInvalidArgument, "both or neither");
  EXPECT_REJECTED(checkOutputRanges(out, 256, nullptr, 64), ncclInvalidArgument, "both or neither");
  EXPECT_REJECTED(checkOutputRanges(out, 256, (const float*)(out + 2), 4), ncclInvalidArgument, "4-byte aligned");
  EXPECT_REJECTED(checkOutputRanges(out, 256, (const float*)(out + 64), 16), ncclInvalidArgument, "overlap");
  EXPECT_REJECTED(checkOutputRanges(out, SIZE_MAX, lse, 64), ncclInvalidArgument, "wraps");
  EXPECT_REJECTED(checkOutputRanges(out, 256, lse, SIZE_MAX), ncclInvalidArgument, "wraps");
  EXPECT_ACCEPTED(checkOutputRanges(out, 256, lse, 64));
  EXPECT_ACCEPTED(checkOutputRanges(out, 256, nullptr, 0));
}

TEST(RegisteredOutputs, PublicEntryPointsCheckTheirArguments) {
  alignas(16) static char out[256];
  ncclDcpOutput_t h = nullptr;
  EXPECT_REJECTED(ncclDcpOutputRegister(nullptr, out, 256, nullptr, 0, &h), ncclInvalidArgument, "ctx");
  EXPECT_REJECTED(ncclDcpOutputDeregister(nullptr, h), ncclInvalidArgument, "ctx");
  // The group form checks every entry before it touches a context (these
  // two stand-ins are never dereferenced).
  const ncclDcpContext_t two[2] = {(ncclDcpContext_t)0x10, (ncclDcpContext_t)0x10};
  void* outs[2] = {out, out};
  const size_t bytes[2] = {256, 256};
  float* lses[2] = {nullptr, nullptr};
  ncclDcpOutput_t handles[2] = {};
  EXPECT_ACCEPTED(ncclDcpOutputRegisterGroup(0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr));
  EXPECT_REJECTED(ncclDcpOutputRegisterGroup(-1, two, outs, bytes, nullptr, nullptr, handles), ncclInvalidArgument,
                  "nCtxs -1");
  EXPECT_REJECTED(ncclDcpOutputRegisterGroup(2, nullptr, outs, bytes, nullptr, nullptr, handles), ncclInvalidArgument,
                  "ctxs is NULL");
  EXPECT_REJECTED(ncclDcpOutputRegisterGroup(2, two, outs, bytes, lses, nullptr, handles), ncclInvalidArgument,
                  "outLses and outLseBytes");
  EXPECT_REJECTED(ncclDcpOutputRegisterGroup(2, two, outs, bytes, nullptr, nullptr, nullptr), ncclInvalidArgument,
                  "handles is NULL");
  EXPECT_REJECTED(ncclDcpOutputRegisterGroup(2, two, outs, bytes, nullptr, nullptr, handles), ncclInvalidArgument,
                  "ctxs[1] repeats ctxs[0]");
  const ncclDcpContext_t one[1] = {nullptr};
  EXPECT_REJECTED(ncclDcpOutputRegisterGroup(1, one, outs, bytes, nullptr, nullptr, handles), ncclInvalidArgument,
                  "ctxs[0] is NULL");
  const size_t zero[1] = {0};
  const ncclDcpContext_t fake[1] = {(ncclDcpContext_t)0x10};
  EXPECT_REJECTED(ncclDcpOutputRegisterGroup(1, fake, outs, zero, nullptr, nullptr, handles), ncclInvalidArgument,
                  "entry 0: outBytes is 0");
  EXPECT_EQ(handles[0], nullptr) << "a refused group sets no handle";
}

// A NONE config of cp ranks in two phases (auto from 3 ranks), D 128 bf16, Hl 2.
struct NoneCall {
  Config cfg;
  int nRanks = 4;
  Strides s;
  NoneCall() {
    const ncclDcpConfig_t in = test::withScatter(makeConfig(128, 2, ncclBfloat16, ncclDcpLseBase2), ncclDcpScatterNone);
    EXPECT_EQ(resolveConfig(&in, Env{}, &cfg), ncclSuccess) << ncclDcpGetLastError();
    s = packedStrides(cfg, nRanks);
  }
  // Bytes of out and floats of outLse a packed call of `batch` rows writes.
  size_t outBytes(int batch) const { return (size_t)batch * nRanks * 2 * 128 * 2; }
  size_t lseFloats(int batch) const { return (size_t)batch * nRanks * 2; }
};

TEST(RegisteredOutputs, ACallTakesTheDirectPathOnlyWhollyInside) {
  const NoneCall n;
  ASSERT_TRUE(noneRelays(n.cfg, n.nRanks));
  const int batch = 5;
  std::vector<char> outMem(n.outBytes(batch) + 4096);
  std::vector<float> lseMem(n.lseFloats(batch) + 64);
  RegisteredOutput reg;
  reg.out = {outMem.data(), outMem.size()};
  reg.outLse = {(char*)lseMem.data(), lseMem.size() * sizeof(float)};
  reg.direct = true;
  reg.serial = 3;
  DirectCall d = {};
  CallBuffers b = {nullptr, nullptr, outMem.data() + 1024, lseMem.data() + 16};
  ASSERT_TRUE(directCallOf(n.cfg, n.nRanks, reg, b, batch, n.s, &d));
  EXPECT_EQ(d.outOffset, 1024);
  EXPECT_EQ(d.lseOffset, 16);
  EXPECT_EQ(d.serial, reg.serial);
  EXPECT_TRUE(d.withLse);
  // The last byte just inside, then one past the end.
  b.out = outMem.data() + 4096;
  EXPECT_TRUE(directCallOf(n.cfg, n.nRanks, reg, b, batch, n.s, &d));
  b.out = outMem.data() + 4096 + 16;
  EXPECT_FALSE(directCallOf(n.cfg, n.nRanks, reg, b, batch, n.s, &d)) << "out runs past the registration";
  b.out = outMem.data();
  b.outLse = lseMem.data() + 65;
  EXPECT_FALSE(directCallOf(n.cfg, n.nRanks, reg, b, batch, n.s, &d)) << "outLse runs past the registration";
  b.outLse = nullptr;
  ASSERT_TRUE(directCallOf(n.cfg, n.nRanks, reg, b, batch, n.s, &d)) << "no outLse: out alone decides";
  EXPECT_FALSE(d.withLse);
  b.outLse = lseMem.data();
  RegisteredOutput noLse = reg;
  noLse.outLse = {};
  EXPECT_FALSE(directCallOf(n.cfg, n.nRanks, noLse, b, batch, n.s, &d)) << "an outLse outside any registration";
  b.out = outMem.data() - 16;
  EXPECT_FALSE(directCallOf(n.cfg, n.nRanks, reg, b, batch, n.s, &d)) << "out starts before the registration";
  b.out = outMem.data();
  RegisteredOutput staged = reg;
  staged.direct = false;
  EXPECT_FALSE(directCallOf(n.cfg, n.nRanks, staged, b, batch, n.s, &d)) << "a registration that stages";
  EXPECT_FALSE(directCallOf(n.cfg, 2, reg, b, batch, packedStrides(n.cfg, 2), &d)) << "cp 2 runs NONE direct";
  Config head = n.cfg;
  head.scatter = Scatter::Head;
  EXPECT_FALSE(directCallOf(head, n.nRanks, reg, b, batch, n.s, &d)) << "HEAD has no phase 2";
}

// The registration's agreement (context.cc all-gathers these records): every
// rank's ranges at the same allocation offsets with the same sizes, or all
// refuse, naming the rank that differs.
TEST(RegisteredOutputs, RecordsAgreeOnlyWhenEveryRankMatches) {
  const OutputRecord good = {1, 1, 65536, 1024, 4096, 8192};
  std::vector<OutputRecord> all(4, good);
  std::string why;
  EXPECT_TRUE(outputRecordsAgree(all.data(), 4, 1, &why)) << why;
  struct Change {
    const char* what;
    void (*apply)(OutputRecord*);
    const char* needle;
  };
  const Change changes[] = {
      {"refused", [](OutputRecord* r) { r->ok = 0; }, "rank 2 refused its registration"},
      {"out offset", [](OutputRecord* r) { r->outOffset += 4096; }, "rank 2 registers out 65536 bytes at offset 8192"},
      {"outLse offset", [](OutputRecord* r) { r->lseOffset = 0; }, "rank 2 registers"},
      {"out size", [](OutputRecord* r) { r->outBytes /= 2; }, "every rank's must match"},
      {"outLse size", [](OutputRecord* r) { r->lseBytes += 4; }, "every rank's must match"},
      {"no outLse", [](OutputRecord* r) { r->hasLse = 0; }, "every rank's must match"},
  };
  for (const Change& c : changes) {
    std::vector<OutputRecord> differ = all;
    c.apply(&differ[2]);
    why.clear();
    EXPECT_FALSE(outputRecordsAgree(differ.data(), 4, 1, &why)) << c.what;
    EXPECT_NE(why.find(c.needle), std::string::npos) << c.what << ": " << why;
    EXPECT_NE(why.find("rank 1: registered outputs refused on every rank"), std::string::npos) << why;
  }
}

TEST(RegisteredOutputs, RoundsOnSimpleCarryTheTagAndTheirRowsOffset) {
  const NoneCall n;
  const DirectCall call = {nullptr, 4096, 32, true, 1};
  const DirectOutputs line = directOutputsOfRound(&call, n.cfg, n.s, 0, Proto::LL128);
  EXPECT_EQ(line.tag, 0u) << "the line protocols' relay stages";
  EXPECT_EQ(directOutputsOfRound(nullptr, n.cfg, n.s, 0, Proto::Simple).tag, 0u);
  const DirectOutputs r0 = directOutputsOfRound(&call, n.cfg, n.s, 0, Proto::Simple);
  const DirectOutputs r8 = directOutputsOfRound(&call, n.cfg, n.s, 8, Proto::Simple);
  EXPECT_NE(r0.tag, 0u);
  EXPECT_EQ(r0.tag, r8.tag) << "one tag per call: every round's agrees";
  EXPECT_EQ(r0.outOffset, 4096);
  EXPECT_EQ(r8.outOffset, 4096 + 8 * n.s.outRow * n.cfg.eltSize);
  EXPECT_EQ(r8.lseOffset, 32 + 8 * n.s.outLseRow);
  EXPECT_TRUE(r8.withLse);
}

// Ranks that pass other offsets, strides or outLse-or-not get other tags:
// their phase-2 waits never match each other's flags.
TEST(RegisteredOutputs, WhatRanksMustAgreeOnChangesTheTag) {
  const NoneCall n;
  const DirectCall call = {nullptr, 4096, 32, true, 1};
  const uint32_t tag = directTag(call, n.s);
  std::vector<uint32_t> others;
  DirectCall c = call;
  c.outOffset += 16;
  others.push_back(directTag(c, n.s));
  c = call;
  c.lseOffset += 1;
  others.push_back(directTag(c, n.s));
  c = call;
  c.withLse = false;
  others.push_back(directTag(c, n.s));
  c = call;
  c.serial = 2;  // the same offsets in another registration
  others.push_back(directTag(c, n.s));
  Strides s = n.s;
  s.outRow += 8;
  others.push_back(directTag(call, s));
  s = n.s;
  s.outLseHead += 1;
  others.push_back(directTag(call, s));
  for (size_t i = 0; i < others.size(); i++) {
    EXPECT_NE(others[i], tag) << "change " << i;
    EXPECT_NE(phase2FlagOf(flagForRound(7), others[i]), phase2FlagOf(flagForRound(7), tag)) << "change " << i;
  }
  // A direct flag never matches a staged one, whatever the round.
  for (uint32_t round : {0u, 7u, 65535u, 65536u * 3, 0xfffffffeu})
    EXPECT_NE(phase2FlagOf(flagForRound(round), tag), phase2FlagOf(flagForRound(round), 0)) << "round " << round;
  EXPECT_EQ(phase2FlagOf(flagForRound(7), 0), (uint64_t)flagForRound(7)) << "staged: today's flag";
}

}  // namespace
}  // namespace nccl_dcp
