// The protocol policy (src/protocol.h): which protocol a requested one and
// the proven links give, when AUTO adds SIMPLE for large rounds
// (NCCL_DCP_SIMPLE_MIN_ROWS), and which protocol each round then runs.
#include "engine.h"
#include "env.h"
#include "protocol.h"
#include "test_util.h"

namespace nccl_dcp {
namespace {

constexpr LinkSummary kOneGpu = {true, false, false, true};
constexpr LinkSummary kLsaTeamUnclassified = {true, false, false, false};
constexpr LinkSummary kAllNvlink = {true, true, true, false};
constexpr LinkSummary kPcieInTeam = {true, true, false, false};
constexpr LinkSummary kAcrossNodes = {false, false, false, false};
constexpr LinkSummary kEveryLinkSummary[] = {kOneGpu, kLsaTeamUnclassified, kAllNvlink, kPcieInTeam, kAcrossNodes};

// NCCL_DCP_SIMPLE_MIN_ROWS as the resolved config carries it (kEnvUnset:
// the measured default of the links).
int withSimpleMinRows(int rows) { return rows; }

TEST(ChooseProtocols, ExplicitProtocolIsKeptWhateverTheLinks) {
  const std::pair<ncclDcpProtocol_t, Proto> explicitOnes[] = {
      {ncclDcpProtoLL, Proto::LL}, {ncclDcpProtoLL128, Proto::LL128}, {ncclDcpProtoSimple, Proto::Simple}};
  for (auto [requested, proto] : explicitOnes)
    for (const LinkSummary& links : kEveryLinkSummary)
      for (int minRows : {kEnvUnset, 0, 1, 64}) {
        if (requested == ncclDcpProtoLL128 && links.oneLsaTeam && links.classified && !links.allNvlink &&
            !links.oneGpu)
          continue;  // LL128 over proven PCIe: the next test
        const ProtocolPolicy p = chooseProtocols(requested, links, withSimpleMinRows(minRows));
        EXPECT_EQ(p.small, proto) << protocolName(requested);
        EXPECT_FALSE(p.simpleForLarge) << protocolName(requested) << " with NCCL_DCP_SIMPLE_MIN_ROWS " << minRows;
        for (int rows : {1, 64, 1 << 20}) EXPECT_EQ(protocolForRound(p, rows), proto) << rows << " rows";
      }
}

// 128-byte stores may arrive torn over PCIe: LL128 forced there runs as
// LL, and the workspace bound covers that.
TEST(ChooseProtocols, Ll128ForcedOverPcieRunsAsLl) {
  EXPECT_EQ(chooseProtocols(ncclDcpProtoLL128, kPcieInTeam, kEnvUnset).small, Proto::LL);
  EXPECT_EQ(chooseProtocols(ncclDcpProtoLL128, kLsaTeamUnclassified, kEnvUnset).small, Proto::LL128) << "unknown";
  Config c = {};
  c.headDim = 512;
  c.localHeads = 16;
  c.eltSize = 2;
  c.maxBatch = 64;
  c.protocol = ncclDcpProtoLL128;
  const size_t ll = makeWorkspaceLayout(Proto::LL, false, 2, 16, 512, 2, 64).totalBytes;
  EXPECT_GE(workspaceBound(c, 2), ll);
}

TEST(ChooseProtocols, AutoTrustsLl128OnlyWhereItIsSafe) {
  const int e = kEnvUnset;
  EXPECT_EQ(chooseProtocols(ncclDcpProtoAuto, kOneGpu, e).small, Proto::LL128) << "one GPU (loopback)";
  EXPECT_EQ(chooseProtocols(ncclDcpProtoAuto, kAllNvlink, e).small, Proto::LL128) << "every peer NVLink";
  EXPECT_EQ(chooseProtocols(ncclDcpProtoAuto, kLsaTeamUnclassified, e).small, Proto::LL)
      << "one LSA team, links not classified: NVLink not proven";
  EXPECT_EQ(chooseProtocols(ncclDcpProtoAuto, kPcieInTeam, e).small, Proto::LL) << "a peer not on NVLink";
  EXPECT_EQ(chooseProtocols(ncclDcpProtoAuto, kAcrossNodes, e).small, Proto::LL) << "no LSA team";
}

TEST(ChooseProtocols, AutoSwitchesAtTheMeasuredCrossoverByDefault) {
  const struct {
    LinkSummary links;
    int rows;
    const char* why;
  } crossovers[] = {{kAllNvlink, 128, "docs/perf.md v10: on 2 x H200 LL128 wins up to 64 rows"},
                    {kOneGpu, 8, "docs/perf-history.md v8: in loopback SIMPLE wins from 8 rows"}};
  for (const auto& c : crossovers) {
    const ProtocolPolicy p = chooseProtocols(ncclDcpProtoAuto, c.links, kEnvUnset);
    EXPECT_TRUE(p.simpleForLarge);
    EXPECT_EQ(p.simpleMinRows, c.rows) << c.why;
    EXPECT_EQ(protocolForRound(p, c.rows - 1), Proto::LL128);
    EXPECT_EQ(protocolForRound(p, c.rows), Proto::Simple);
  }
  const ProtocolPolicy never = chooseProtocols(ncclDcpProtoAuto, kAllNvlink, withSimpleMinRows(0));
  EXPECT_FALSE(never.simpleForLarge) << "NCCL_DCP_SIMPLE_MIN_ROWS=0";
  EXPECT_EQ(protocolForRound(never, 1 << 20), Proto::LL128);
}

// One GPU: the tiers follow the bytes a virtual rank merges a round as they
// cross the workspace (e4m3: one byte an element), so they fall as cp
// grows; LL only where an LL128 lane would merge 32+ elements of a group
// (measured at cp 2 / 4 / 8 / 16, bf16 and e4m3: docs/perf.md "AUTO on one GPU").
TEST(ChooseProtocols, OneGpuTiersFollowTheWireBytesMerged) {
  const long bf16Row = 16 * 512 * 2, e4m3Row = 16 * 512;  // Hl 16, D 512
  const struct {
    int cp;
    long row;
    int elt, llMaxRows, simpleMinRows;
  } measured[] = {{2, bf16Row, 2, 0, 32},  // LL128 5% faster than LL at cp 2
                  {4, bf16Row, 2, 4, 16},  {8, bf16Row, 2, 2, 8},   {16, bf16Row, 2, 1, 4},
                  {2, e4m3Row, 1, 16, 64}, {4, e4m3Row, 1, 8, 32},  {8, e4m3Row, 1, 4, 16},
                  {16, e4m3Row, 1, 2, 8}};
  for (const auto& m : measured) {
    const OneGpuTiers t = oneGpuTiers(m.cp, m.row, m.elt, true);
    EXPECT_EQ(t.llMaxRows, m.llMaxRows) << "cp " << m.cp << ", " << m.elt << "-byte elements";
    EXPECT_EQ(t.simpleMinRows, m.simpleMinRows) << "cp " << m.cp << ", " << m.elt << "-byte elements";
  }
  EXPECT_EQ(oneGpuTiers(8, bf16Row, 2, true).simpleMinRows, kOneGpuSimpleMinRows) << "the v8 figure at cp 8";
  EXPECT_EQ(oneGpuTiers(8, bf16Row, 2, false).llMaxRows, 0) << "TOKEN, NONE direct: not HEAD-shaped";
  EXPECT_EQ(oneGpuTiers(4, 4 * 128 * 4, 4, true).llMaxRows, 0) << "fp32 at cp 4: an LL128 lane merges 16";
  EXPECT_EQ(oneGpuTiers(8, 4 * 128 * 4, 4, true).simpleMinRows, 64) << "Hl 4, D 128, fp32: 2 KiB a row";
  const OneGpuTiers huge = oneGpuTiers(16, 64 * 1024 * 2, 2, true);
  EXPECT_EQ(huge.simpleMinRows, 1) << "never below one row";
  EXPECT_EQ(huge.llMaxRows, 0);
}

TEST(ChooseProtocols, OneGpuRunsTheSmallestRoundsOverLl) {
  const ProtocolPolicy p = chooseProtocols(ncclDcpProtoAuto, kOneGpu, kEnvUnset, OneGpuTiers{2, 8});
  const Proto expected[] = {Proto::LL, Proto::LL, Proto::LL128, Proto::LL128, Proto::Simple, Proto::Simple};
  const int rows[] = {1, 2, 3, 7, 8, 1 << 20};
  for (int i = 0; i < 6; i++) EXPECT_EQ(protocolForRound(p, rows[i]), expected[i]) << rows[i] << " rows";
  const ProtocolPolicy forcedRows = chooseProtocols(ncclDcpProtoAuto, kOneGpu, withSimpleMinRows(3), OneGpuTiers{4, 16});
  EXPECT_EQ(forcedRows.simpleMinRows, 3) << "NCCL_DCP_SIMPLE_MIN_ROWS wins over the shape's crossover";
  EXPECT_EQ(forcedRows.llMaxRows, 2) << "LL stays below SIMPLE";
  EXPECT_EQ(protocolForRound(forcedRows, 3), Proto::Simple);
  EXPECT_EQ(chooseProtocols(ncclDcpProtoAuto, kOneGpu, withSimpleMinRows(0), OneGpuTiers{4, 16}).llMaxRows, 4)
      << "SIMPLE never: LL's tier as measured";
  const ProtocolPolicy nvlink = chooseProtocols(ncclDcpProtoAuto, kAllNvlink, kEnvUnset, OneGpuTiers{4, 2});
  EXPECT_EQ(nvlink.simpleMinRows, kLl128SimpleMinRows) << "only one GPU takes the shape's tiers";
  EXPECT_EQ(nvlink.llMaxRows, 0);
  EXPECT_EQ(chooseProtocols(ncclDcpProtoLL128, kOneGpu, kEnvUnset, OneGpuTiers{4, 16}).llMaxRows, 0)
      << "a forced protocol runs every round";
}

TEST(ChooseProtocols, AutoSwitchesRoundsOfSimpleMinRowsOrMoreToSimple) {
  for (const LinkSummary& links : kEveryLinkSummary) {
    const ProtocolPolicy p = chooseProtocols(ncclDcpProtoAuto, links, withSimpleMinRows(32));
    const Proto small = chooseProtocols(ncclDcpProtoAuto, links, kEnvUnset).small;
    EXPECT_TRUE(p.simpleForLarge);
    EXPECT_EQ(p.simpleMinRows, 32);
    EXPECT_EQ(p.small, small);
    EXPECT_EQ(protocolForRound(p, 1), small);
    EXPECT_EQ(protocolForRound(p, 31), small);
    EXPECT_EQ(protocolForRound(p, 32), Proto::Simple);
    EXPECT_EQ(protocolForRound(p, 1 << 20), Proto::Simple);
  }
}

TEST(ChooseProtocols, OneRowThresholdMakesEveryRoundSimple) {
  const ProtocolPolicy p = chooseProtocols(ncclDcpProtoAuto, kOneGpu, withSimpleMinRows(1));
  for (int rows : {1, 2, 256}) EXPECT_EQ(protocolForRound(p, rows), Proto::Simple) << rows << " rows";
}

}  // namespace
}  // namespace nccl_dcp
