// The checks every rank runs over the gathered create records (agreement.h),
// without a GPU: a failure on any rank and a disagreement on any input are
// reported identically by every rank, naming the step or input and the rank.
#include <unistd.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agreement.h"
#include "error.h"
#include "test_util.h"
#include "validate.h"

namespace nccl_dcp {
namespace {

Config baseConfig() {
  const ncclDcpConfig_t c = test::makeConfig(512, 16, ncclBfloat16, ncclDcpLseBase2, 64, ncclDcpProtoAuto);
  Config cfg;
  EXPECT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << lastError();
  return cfg;
}

// nRanks healthy records of one config, each rank on its own GPU.
std::vector<RankRecord> records(int nRanks, const Config& cfg = baseConfig()) {
  std::vector<RankRecord> all(nRanks);
  for (int r = 0; r < nRanks; r++) {
    RankRecord& rec = all[r];
    memset(&rec, 0, sizeof(rec));
    rec.agreement = agreementOf(cfg, 22809, false, 0);
    snprintf(rec.view.busId, sizeof(rec.view.busId), "0000:%02x:00.0", (0x10 + r) & 0xff);
    rec.devComm = {1, nRanks, r, 1, 1, 0};
    rec.ipc = {(int32_t)IpcBlock::None, -1};
  }
  return all;
}

TEST(Agreement, HealthyRecordsAgree) {
  for (int n : {1, 2, 8, 64}) {
    std::vector<RankRecord> all = records(n);
    EXPECT_EQ(firstFailure(all.data(), n), ncclSuccess);
    EXPECT_EQ(checkAgreement(all.data(), n), ncclSuccess) << lastError();
    ncclDcpProvider_t p = ncclDcpProviderAuto;
    std::string note;
    EXPECT_EQ(chooseProvider(ncclDcpProviderAuto, all.data(), n, &p, &note), ncclSuccess);
    EXPECT_EQ(p, ncclDcpProviderNcclWindow);
  }
}

TEST(Agreement, EveryStepHasAName) {
  for (int s = 0; s < (int)CreateStep::Count; s++)
    EXPECT_STRNE(createStepName((CreateStep)s), "unknown") << s;
  EXPECT_STREQ(createStepName(CreateStep::Count), "unknown");
}

// The lowest failing rank wins, with its code, step and message, the same
// text whichever rank reads the records.
TEST(Agreement, FirstFailureNamesRankStepAndMessage) {
  std::vector<RankRecord> all = records(4);
  recordFailure(&all[2].status, ncclSystemError, CreateStep::Workspace, "ncclMemAlloc of 1 bytes failed");
  recordFailure(&all[3].status, ncclInvalidArgument, CreateStep::Arguments, "config->headDim is not set");
  EXPECT_EQ(firstFailure(all.data(), 4), ncclSystemError);
  const std::string msg = lastError();
  EXPECT_NE(msg.find("step 'workspace'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ncclMemAlloc of 1 bytes failed"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("headDim"), std::string::npos) << msg;
}

TEST(Agreement, FirstRecordedFailureSticks) {
  StepStatus s;
  memset(&s, 0, sizeof(s));
  recordFailure(&s, ncclSuccess, CreateStep::Arguments, "nothing");
  EXPECT_EQ(s.code, ncclSuccess);
  recordFailure(&s, ncclUnhandledCudaError, CreateStep::ChoosePath, "first");
  recordFailure(&s, ncclSystemError, CreateStep::Ready, "second");
  EXPECT_EQ(s.code, ncclUnhandledCudaError);
  EXPECT_EQ(s.step, (int32_t)CreateStep::ChoosePath);
  EXPECT_STREQ(s.message, "first");
}

TEST(Agreement, LongMessagesAreCutNotOverrun) {
  std::vector<RankRecord> all = records(2);
  const std::string longText(1000, 'x');
  recordFailure(&all[1].status, ncclSystemError, CreateStep::Ready, longText.c_str());
  EXPECT_EQ(all[1].status.message[sizeof(all[1].status.message) - 1], '\0');
  EXPECT_EQ(firstFailure(all.data(), 2), ncclSystemError);
}

// One case per agreed input: rank `rank` changes it; every rank must get
// ncclInvalidUsage naming the input (as the user sets it) and that rank.
struct InputCase {
  const char* named;            // what the message must name
  void (*change)(Agreement*);
};

const InputCase kInputs[] = {
    {"nccl-dcp version", [](Agreement* a) { a->libVersion++; }},
    {"NCCL version", [](Agreement* a) { a->ncclVersion++; }},
    {"config->headDim", [](Agreement* a) { a->headDim = 256; }},
    {"config->localHeads", [](Agreement* a) { a->localHeads = 8; }},
    {"config->dtype", [](Agreement* a) { a->dtype = ncclFloat16; }},
    {"config->lseBase", [](Agreement* a) { a->lseBase = 1; }},
    {"NCCL_DCP_MAX_BATCH", [](Agreement* a) { a->maxBatch = 32; }},
    {"NCCL_DCP_PROTO", [](Agreement* a) { a->protocol = ncclDcpProtoLL; }},
    {"NCCL_DCP_TIMEOUT_MS", [](Agreement* a) { a->timeoutMs = 1; }},
    {"NCCL_DCP_SIMPLE_MIN_ROWS", [](Agreement* a) { a->simpleMinRows = 32; }},
    {"NCCL_DCP_PDL", [](Agreement* a) { a->pdl = !a->pdl; }},
    {"NCCL_DCP_PROVIDER (or NCCL_DCP_FORCE_FALLBACK)", [](Agreement* a) { a->provider = ncclDcpProviderCudaIpc; }},
    {"ll128_reread", [](Agreement* a) { a->ll128Reread = !a->ll128Reread; }},
    {"window (own vs. application's)", [](Agreement* a) { a->inWindow = 1; }},
    {"window offset", [](Agreement* a) { a->windowOffset = 4096; }},
    {"config->scatter", [](Agreement* a) { a->scatter = ncclDcpScatterToken; }},
    {"config->lseDtype", [](Agreement* a) { a->lseDtype = ncclBfloat16; }},
    {"NCCL_DCP_NONE_ALGO", [](Agreement* a) { a->noneAlgo = (int)NoneAlgo::TwoPhase; }},
    {"config->wire", [](Agreement* a) { a->wire = ncclDcpWireFp8E4m3; }},
};

TEST(Agreement, EveryInputMismatchNamesInputAndFirstDifferingRank) {
  for (const InputCase& in : kInputs) {
    for (int rank : {1, 3}) {
      std::vector<RankRecord> all = records(4);
      in.change(&all[rank].agreement);
      if (rank == 1) in.change(&all[3].agreement);  // only the first differing rank is named
      EXPECT_EQ(checkAgreement(all.data(), 4), ncclInvalidUsage) << in.named;
      const std::string msg = lastError();
      EXPECT_NE(msg.find(in.named), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank " + std::to_string(rank)), std::string::npos) << msg;
      EXPECT_NE(msg.find("step 'agree'"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("rank " + std::to_string(rank == 1 ? 3 : 2)), std::string::npos) << msg;
    }
  }
}

// Each agreed input, from each of its sources, lands in the record.
TEST(Agreement, RecordCarriesEverySource) {
  const ncclDcpConfig_t c = test::makeConfig(128, 4, ncclFloat16, ncclDcpLseBaseE, NCCL_CONFIG_UNDEF_INT,
                                             NCCL_CONFIG_UNDEF_INT);
  Env e;
  e.maxBatch = 48;
  e.protocol = ncclDcpProtoAuto;
  e.timeoutMs = 700;
  e.simpleMinRows = 24;
  e.pdl = 0;
  e.forceFallback = true;
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, e, &cfg), ncclSuccess) << lastError();
  const Agreement a = agreementOf(cfg, 22809, true, 8192);
  EXPECT_EQ(a.maxBatch, 48);
  EXPECT_EQ(a.protocol, ncclDcpProtoAuto);
  EXPECT_EQ(a.timeoutMs, 700);
  EXPECT_EQ(a.simpleMinRows, 24);
  EXPECT_EQ(a.pdl, 0);
  EXPECT_EQ(a.provider, ncclDcpProviderFallback);
  EXPECT_EQ(a.ll128Reread, NCCL_DCP_LL128_REREAD);
  EXPECT_EQ(a.inWindow, 1);
  EXPECT_EQ(a.windowOffset, 8192u);
  EXPECT_EQ(a.ncclVersion, 22809);
  EXPECT_EQ(a.libVersion, NCCL_DCP_VERSION_CODE);
  // The 0.3 fields at their defaults.
  EXPECT_EQ(a.scatter, ncclDcpScatterHead);
  EXPECT_EQ(a.lseDtype, ncclFloat32);
  EXPECT_EQ(a.noneAlgo, 0);
}

// NCCL_DCP_NONE_ALGO shapes NONE's workspace: in the record for NONE (a
// rank forcing another algorithm is refused, named), ignored by the other
// modes (any value agrees).
TEST(Agreement, NoneAlgoIsAgreedForNoneOnly) {
  for (int scatter : {ncclDcpScatterHead, ncclDcpScatterToken, ncclDcpScatterNone}) {
    ncclDcpConfig_t c = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 16, ncclDcpProtoLL);
    c.scatter = scatter;
    Env direct, twoPhase;
    direct.noneAlgo = (int)NoneAlgo::Direct;
    twoPhase.noneAlgo = (int)NoneAlgo::TwoPhase;
    Config a, b;
    ASSERT_EQ(resolveConfig(&c, direct, &a), ncclSuccess) << lastError();
    ASSERT_EQ(resolveConfig(&c, twoPhase, &b), ncclSuccess) << lastError();
    std::vector<RankRecord> all = records(3, a);
    all[1].agreement = agreementOf(b, 22809, false, 0);
    if (scatter != ncclDcpScatterNone) {
      EXPECT_EQ(checkAgreement(all.data(), 3), ncclSuccess) << lastError();
      continue;
    }
    EXPECT_EQ(checkAgreement(all.data(), 3), ncclInvalidUsage);
    EXPECT_NE(std::string(lastError()).find("NCCL_DCP_NONE_ALGO"), std::string::npos) << lastError();
  }
}

// The 0.3 config fields (scatter, lseDtype) land in the record, and ranks
// that set them differently are refused at create, the field named; a
// rank that leaves one at its default disagrees with one that sets another
// value, and agrees with one that sets the default explicitly.
TEST(Agreement, ScatterAndLseDtypeComeFromTheConfigAndMustAgree) {
  const struct {
    int scatter;
    ncclDataType_t lseDtype;
  } settings[] = {{ncclDcpScatterHead, ncclFloat32},
                  {ncclDcpScatterToken, ncclBfloat16},
                  {ncclDcpScatterNone, ncclFloat16},
                  {ncclDcpScatterToken, ncclFloat32}};
  for (const auto& set : settings) {
    ncclDcpConfig_t c = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 16, ncclDcpProtoLL);
    c.scatter = set.scatter;
    c.lseDtype = set.lseDtype;
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << lastError();
    const Agreement a = agreementOf(cfg, 22809, false, 0);
    EXPECT_EQ(a.scatter, set.scatter);
    EXPECT_EQ(a.lseDtype, (int)set.lseDtype);

    // Every rank with these settings agrees.
    std::vector<RankRecord> all = records(3, cfg);
    EXPECT_EQ(checkAgreement(all.data(), 3), ncclSuccess) << lastError();

    // Rank 2 with the defaults (config fields unset).
    const ncclDcpConfig_t d = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 16, ncclDcpProtoLL);
    Config dflt;
    ASSERT_EQ(resolveConfig(&d, Env(), &dflt), ncclSuccess) << lastError();
    all[2].agreement = agreementOf(dflt, 22809, false, 0);
    const bool same = set.scatter == ncclDcpScatterHead && set.lseDtype == ncclFloat32;
    if (same) {
      EXPECT_EQ(checkAgreement(all.data(), 3), ncclSuccess) << lastError();
      continue;
    }
    EXPECT_EQ(checkAgreement(all.data(), 3), ncclInvalidUsage);
    const std::string msg = lastError();
    // The first differing field in kAgreedFields' order: scatter before lseDtype.
    const char* named = set.scatter != ncclDcpScatterHead ? "config->scatter" : "config->lseDtype";
    EXPECT_NE(msg.find(named), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
    if (set.scatter == ncclDcpScatterHead) {
      EXPECT_EQ(msg.find("config->scatter"), std::string::npos) << msg;
    }
  }
}

// Only lseDtype differs (both ranks TOKEN): lseDtype is named, with both values.
TEST(Agreement, LseDtypeAloneIsNamedWithBothValues) {
  ncclDcpConfig_t c = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 16, ncclDcpProtoLL);
  c.scatter = ncclDcpScatterToken;
  Config f32, bf16;
  ASSERT_EQ(resolveConfig(&c, Env(), &f32), ncclSuccess) << lastError();
  c.lseDtype = ncclBfloat16;
  ASSERT_EQ(resolveConfig(&c, Env(), &bf16), ncclSuccess) << lastError();
  std::vector<RankRecord> all = records(2, f32);
  all[1].agreement = agreementOf(bf16, 22809, false, 0);
  EXPECT_EQ(checkAgreement(all.data(), 2), ncclInvalidUsage);
  const std::string msg = lastError();
  EXPECT_NE(msg.find("config->lseDtype"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("config->scatter"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string((int)ncclFloat32) + " on rank 0 but " + std::to_string((int)ncclBfloat16) +
                     " on rank 1"),
            std::string::npos)
      << msg;
}

// NCCL_DCP_SIMPLE_MIN_ROWS only shapes AUTO: with an explicit protocol
// ranks that set it differently still agree.
TEST(Agreement, SimpleMinRowsOnlyMattersUnderAuto) {
  Env e;
  e.simpleMinRows = 24;
  const ncclDcpConfig_t c = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 16, ncclDcpProtoLL128);
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, e, &cfg), ncclSuccess);
  EXPECT_EQ(agreementOf(cfg, 0, false, 0).simpleMinRows, 0);
  Config dflt;
  ASSERT_EQ(resolveConfig(&c, Env(), &dflt), ncclSuccess);
  EXPECT_LT(dflt.simpleMinRows, 0);  // unset: the policy's default for the links
  EXPECT_TRUE(dflt.pdl);  // NCCL_DCP_PDL unset: on
}

TEST(Agreement, TwoRanksOnOneGpuAreRefused) {
  std::vector<RankRecord> all = records(3);
  memcpy(all[2].view.busId, all[0].view.busId, sizeof(all[0].view.busId));
  EXPECT_EQ(checkAgreement(all.data(), 3), ncclInvalidUsage);
  const std::string msg = lastError();
  EXPECT_NE(msg.find("ranks 0 and 2 use the same GPU"), std::string::npos) << msg;
}

// Bus ids repeat from host to host: ranks of several hosts may share one.
TEST(Agreement, SameBusIdOnAnotherHostIsAnotherGpu) {
  std::vector<RankRecord> all = records(4);
  all[2].view.links.hostHash = all[3].view.links.hostHash = 7;
  memcpy(all[2].view.busId, all[0].view.busId, sizeof(all[0].view.busId));
  EXPECT_EQ(checkAgreement(all.data(), 4), ncclSuccess) << lastError();
  memcpy(all[3].view.busId, all[2].view.busId, sizeof(all[0].view.busId));
  EXPECT_EQ(checkAgreement(all.data(), 4), ncclInvalidUsage) << "two ranks of host 7 on one GPU";
}

// One rank whose LSA team is not every rank: no rank takes NCCL's window.
TEST(Agreement, OneIncapableRankMeansNoWindow) {
  std::vector<RankRecord> all = records(4);
  all[3].devComm.capable = 0;
  for (RankRecord& rec : all) rec.ipc = {(int32_t)IpcBlock::OtherHost, 3};
  ncclDcpProvider_t p = ncclDcpProviderAuto;
  std::string note;
  EXPECT_EQ(chooseProvider(ncclDcpProviderAuto, all.data(), 4, &p, &note), ncclSuccess);
  EXPECT_EQ(p, ncclDcpProviderFallback);
}

TEST(PublicApi, AbortOfNullContextIsANoOp) {
  EXPECT_EQ(ncclDcpContextAbort(nullptr), ncclSuccess);
  EXPECT_STREQ(ncclDcpGetLastError(), "");
}

// ---- The provider of the workspace (chooseProvider): the same verdict
// and note from the same records, whatever rank reads them.

// Records of n ranks on one host whose NCCL has no symmetric memory.
std::vector<RankRecord> noWindow(int n, bool cumemDisabled) {
  std::vector<RankRecord> all = records(n);
  for (RankRecord& rec : all) rec.devComm = {0, 1, 0, 0, 1, cumemDisabled ? 1 : 0};
  return all;
}

std::string chosen(ncclDcpProvider_t want, const std::vector<RankRecord>& all, ncclDcpProvider_t* got,
                   ncclResult_t expect = ncclSuccess) {
  std::string note = "stale";
  EXPECT_EQ(chooseProvider(want, all.data(), (int)all.size(), got, &note), expect) << lastError();
  return expect == ncclSuccess ? note : std::string(lastError());
}

TEST(Provider, NcclWindowWhenEveryRankHasSymmetricMemory) {
  ncclDcpProvider_t p = ncclDcpProviderAuto;
  EXPECT_EQ(chosen(ncclDcpProviderAuto, records(4), &p), "");
  EXPECT_EQ(p, ncclDcpProviderNcclWindow);
  EXPECT_EQ(chosen(ncclDcpProviderNcclWindow, records(4), &p), "");
  EXPECT_EQ(p, ncclDcpProviderNcclWindow);
}

TEST(Provider, CumemDisabledLandsOnCudaIpcAndSaysWhy) {
  ncclDcpProvider_t p = ncclDcpProviderAuto;
  const std::string note = chosen(ncclDcpProviderAuto, noWindow(2, true), &p);
  EXPECT_EQ(p, ncclDcpProviderCudaIpc);
  EXPECT_NE(note.find("NCCL_CUMEM_ENABLE=0"), std::string::npos) << note;
  EXPECT_NE(note.find("cuda-ipc"), std::string::npos) << note;
  // Without the variable the cause is NCCL's failed device communicator.
  const std::string other = chosen(ncclDcpProviderAuto, noWindow(2, false), &p);
  EXPECT_EQ(p, ncclDcpProviderCudaIpc);
  EXPECT_NE(other.find("ncclDevCommCreate failed"), std::string::npos) << other;
}

TEST(Provider, OneRankWithoutNvlinkSymmetryIsEnough) {
  // Rank 2 alone lacks NCCL's window: no rank takes it.
  std::vector<RankRecord> all = records(4);
  all[2].devComm = {0, 1, 0, 0, 1, 1};
  ncclDcpProvider_t p = ncclDcpProviderAuto;
  const std::string note = chosen(ncclDcpProviderAuto, all, &p);
  EXPECT_EQ(p, ncclDcpProviderCudaIpc);
  EXPECT_NE(note.find("rank 2"), std::string::npos) << note;
}

TEST(Provider, NoP2pBetweenTwoGpusFallsBackNamingThem) {
  std::vector<RankRecord> all = noWindow(4, true);
  all[1].ipc = {(int32_t)IpcBlock::NoP2p, 3};
  ncclDcpProvider_t p = ncclDcpProviderAuto;
  const std::string note = chosen(ncclDcpProviderAuto, all, &p);
  EXPECT_EQ(p, ncclDcpProviderFallback);
  EXPECT_NE(note.find("no P2P between GPU 0000:11:00.0 (rank 1) and GPU 0000:13:00.0 (rank 3)"), std::string::npos)
      << note;
  EXPECT_NE(note.find("fallback path"), std::string::npos) << note;
}

TEST(Provider, EveryIpcBlockHasItsCause) {
  const struct {
    IpcBlock block;
    const char* says;
  } cases[] = {{IpcBlock::OtherHost, "different hosts"},
               {IpcBlock::NotVisible, "CUDA_VISIBLE_DEVICES"},
               {IpcBlock::NotTried, "not tried"}};
  for (const auto& c : cases) {
    std::vector<RankRecord> all = noWindow(2, true);
    all[0].ipc = {(int32_t)c.block, 1};
    ncclDcpProvider_t p = ncclDcpProviderAuto;
    const std::string note = chosen(ncclDcpProviderAuto, all, &p);
    EXPECT_EQ(p, ncclDcpProviderFallback);
    EXPECT_NE(note.find(c.says), std::string::npos) << note;
  }
}

TEST(Provider, ForcedProviderThatIsNotAvailableFailsOnEveryRank) {
  ncclDcpProvider_t p = ncclDcpProviderAuto;
  std::string why = chosen(ncclDcpProviderNcclWindow, noWindow(2, true), &p, ncclInvalidUsage);
  EXPECT_NE(why.find("NCCL_DCP_PROVIDER=nccl-window is not available"), std::string::npos) << why;
  EXPECT_NE(why.find("NCCL_CUMEM_ENABLE=0"), std::string::npos) << why;
  std::vector<RankRecord> all = records(2);
  all[1].ipc = {(int32_t)IpcBlock::NoP2p, 0};
  why = chosen(ncclDcpProviderCudaIpc, all, &p, ncclInvalidUsage);
  EXPECT_NE(why.find("NCCL_DCP_PROVIDER=cuda-ipc is not available"), std::string::npos) << why;
}

TEST(Provider, ForcedCudaIpcAndForcedFallback) {
  ncclDcpProvider_t p = ncclDcpProviderAuto;
  EXPECT_EQ(chosen(ncclDcpProviderCudaIpc, records(2), &p), "");
  EXPECT_EQ(p, ncclDcpProviderCudaIpc);
  const std::string note = chosen(ncclDcpProviderFallback, records(2), &p);
  EXPECT_EQ(p, ncclDcpProviderFallback);
  EXPECT_NE(note.find("NCCL_DCP_PROVIDER=fallback"), std::string::npos) << note;
}

TEST(Provider, LsaTeamShorterThanTheRanksIsNamed) {
  std::vector<RankRecord> all = records(4);
  for (RankRecord& rec : all) rec.devComm = {0, 2, 0, 1, 1, 0};
  for (RankRecord& rec : all) rec.ipc = {(int32_t)IpcBlock::OtherHost, 2};
  ncclDcpProvider_t p = ncclDcpProviderAuto;
  const std::string note = chosen(ncclDcpProviderAuto, all, &p);
  EXPECT_EQ(p, ncclDcpProviderFallback);
  EXPECT_NE(note.find("LSA team of rank 0 holds 2 of 4"), std::string::npos) << note;
  EXPECT_NE(note.find("different hosts"), std::string::npos) << note;
}

TEST(Provider, ProcessIdentityIsStableAndNotThePid) {
  EXPECT_EQ(processIdentity(), processIdentity());
  EXPECT_NE(processIdentity(), (uint64_t)getpid());
}

// ---------------------------------------------------------------------------
// The exchange's seals (issue 34, items 5 and 6): a gather's slots as the
// all-gather leaves them, zeroed before it.

std::vector<RecordSeal> seals(int nRanks, uint32_t sequence) {
  std::vector<RecordSeal> s(nRanks);
  for (int r = 0; r < nRanks; r++) s[r] = {kRecordMagic, sequence, r};
  return s;
}

TEST(Seals, EveryRecordOfThisGatherArrived) {
  for (int n : {1, 2, 8, 64}) {
    bool none = true;
    EXPECT_EQ(checkArrivals("create step 'arguments'", seals(n, 3).data(), n, 3, 0, true, &none), ncclSuccess);
    EXPECT_FALSE(none);
  }
}

// Inside the caller's ncclGroupStart/End NCCL defers the all-gather: the
// records are read back before it runs, every slot still zero -- on one
// rank too, whose own record is sent from a slot of its own. Every rank
// says why, instead of reading zeros (or its own record) as the peers'.
TEST(Seals, NothingArrivedAsksAboutAGroup) {
  for (int n : {1, 2, 8}) {
    SCOPED_TRACE(n);
    std::vector<RecordSeal> zero(n);
    memset(zero.data(), 0, zero.size() * sizeof(RecordSeal));
    bool none = false;
    clearLastError();
    EXPECT_EQ(checkArrivals("create step 'arguments'", zero.data(), n, 1, n - 1, true, &none), ncclInvalidUsage);
    EXPECT_TRUE(none);
    const std::string msg = lastError();
    EXPECT_NE(msg.find("called inside ncclGroupStart/End?"), std::string::npos) << msg;
    EXPECT_NE(msg.find("create step 'arguments' failed on rank " + std::to_string(n - 1)), std::string::npos) << msg;
  }
}

// One rank's copy to the device failed: its slot holds its previous
// gather's record (or zeros at the first). Every rank names that rank.
TEST(Seals, AMissingRecordNamesItsRank) {
  std::vector<RecordSeal> s = seals(4, 5);
  s[2].sequence = 4;  // the previous gather's
  bool none = true;
  clearLastError();
  EXPECT_EQ(checkArrivals("create step 'workspace'", s.data(), 4, 5, 0, true, &none), ncclSystemError);
  EXPECT_FALSE(none);
  std::string msg = lastError();
  EXPECT_NE(msg.find("create step 'workspace' failed on rank 2: its record did not arrive"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("called inside ncclGroupStart/End?"), std::string::npos) << msg;
  // A slot holding another rank's record, or no magic, is missing too; the
  // lowest such rank is named.
  s = seals(4, 5);
  s[3].rank = 1;
  s[1].magic = 0;
  clearLastError();
  EXPECT_EQ(checkArrivals("destroy of a cuda-ipc context", s.data(), 4, 5, 3, true, &none), ncclSystemError);
  msg = lastError();
  EXPECT_NE(msg.find("destroy of a cuda-ipc context failed on rank 1"), std::string::npos) << msg;
}

// A rank whose own copy failed finds its own slot empty too: on one rank
// nothing arrived, yet that is its failed copy, not a deferred all-gather.
TEST(Seals, NothingArrivedAfterAFailedOwnCopyNamesTheCopy) {
  std::vector<RecordSeal> zero(1);
  memset(zero.data(), 0, sizeof(RecordSeal));
  bool none = true;
  clearLastError();
  EXPECT_EQ(checkArrivals("create step 'arguments'", zero.data(), 1, 1, 0, false, &none), ncclSystemError);
  EXPECT_FALSE(none) << "a failed copy read as a queued all-gather (its scratch would be parked)";
  const std::string msg = lastError();
  EXPECT_NE(msg.find("create step 'arguments' failed on rank 0: its record did not arrive"), std::string::npos)
      << msg;
}

// Destroy's agreement on cuda-ipc across processes (issue 34, item 4): an
// owner frees only when every peer closed its mapping of this context.
std::vector<IpcExport> exportsOf(int n) {
  std::vector<IpcExport> e(n);
  for (int r = 0; r < n; r++) {
    memset(&e[r], 0, sizeof(e[r]));
    e[r].address = 0x7f0000000000ull + 0x100000ull * r;
    e[r].process = 1000 + r;
  }
  return e;
}
std::vector<ReleaseRecord> releases(const std::vector<IpcExport>& e) {
  std::vector<ReleaseRecord> all(e.size());
  for (size_t r = 0; r < e.size(); r++) all[r] = {1, 0, e[r].address, e[r].process};
  return all;
}

TEST(Release, EveryPeerClosedThisContext) {
  const std::vector<IpcExport> e = exportsOf(4);
  std::string why;
  EXPECT_TRUE(everyPeerClosed(releases(e).data(), e.data(), 4, &why)) << why;
}

TEST(Release, APeerThatCouldNotCloseKeepsTheMemory) {
  const std::vector<IpcExport> e = exportsOf(4);
  std::vector<ReleaseRecord> all = releases(e);
  all[3].closed = 0;
  std::string why;
  EXPECT_FALSE(everyPeerClosed(all.data(), e.data(), 4, &why));
  EXPECT_NE(why.find("rank 3 could not close"), std::string::npos) << why;
}

// Two contexts of one communicator destroyed in different orders on two
// ranks: their all-gathers pair up crosswise; the records say so.
TEST(Release, ARecordOfAnotherContextKeepsTheMemory) {
  const std::vector<IpcExport> mine = exportsOf(2);
  std::vector<ReleaseRecord> all = releases(mine);
  all[1].address += 0x40000;  // rank 1 destroys another context of its own
  std::string why;
  EXPECT_FALSE(everyPeerClosed(all.data(), mine.data(), 2, &why));
  EXPECT_NE(why.find("rank 1's record is of another context"), std::string::npos) << why;
}

}  // namespace
}  // namespace nccl_dcp
