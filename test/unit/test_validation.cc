// The validation matrix: every argument rule of the public entry points and
// of the pure checks behind them (src/validate.h). Each rejection asserts the
// exact ncclResult_t AND that ncclDcpGetLastError() names the offending
// argument, so a message that blames the wrong field fails too. No GPU is
// needed: checkCall never dereferences the buffers, so fake addresses and
// plain host buffers stand in for device memory.
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "error.h"
#include "loopback.h"
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

}  // namespace
}  // namespace nccl_dcp
