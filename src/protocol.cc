/*************************************************************************
 * AUTO policy (see protocol.h).
 ************************************************************************/
#include "protocol.h"

#include <algorithm>

#include "device/layout.h"
#include "log.h"

namespace nccl_dcp {

bool ll128Proven(const LinkSummary& links) { return links.oneGpu || (links.classified && links.allNvlink); }

// A forced protocol is used as is, but for LL128 over a link proven to be
// PCIe: 128-byte stores may arrive torn there, so LL carries it instead.
static ProtocolPolicy forced(ncclDcpProtocol_t requested, const LinkSummary& links) {
  ProtocolPolicy p = {(Proto)requested, false, 0};
  if (requested != ncclDcpProtoLL128 || !links.oneLsaTeam || ll128Proven(links)) return p;
  if (links.classified) {
    WARN("protocol LL128 forced (config->protocol or NCCL_DCP_PROTO), but a peer is reached over PCIe, where "
         "128-byte stores may arrive torn: LL is used instead");
    p.small = Proto::LL;
  } else {
    WARN("protocol LL128 forced (config->protocol or NCCL_DCP_PROTO), but NVLink is not proven between every pair "
         "of ranks (some link is unknown): LL128 relies on 128-byte stores arriving whole, which PCIe does not "
         "guarantee");
  }
  return p;
}

// Rows (at least one) of the round that merges `bytes` per virtual rank.
static long rowsOf(long bytes, long perRow, bool roundUp) {
  if (perRow <= 0) return 1;
  const long rows = roundUp ? (bytes + perRow - 1) / perRow : bytes / perRow;
  return rows > 1 ? rows : 1;
}

OneGpuTiers oneGpuTiers(int nRanks, long rowWireBytes, int wireElt, bool headShaped) {
  const long perRow = (long)nRanks * rowWireBytes;
  const long simpleMinRows = rowsOf(kOneGpuSimpleMinBytes, perRow, true);
  const int laneElements = nRanks * (int)(ll128::kLaneBytes / (wireElt > 0 ? wireElt : 1));
  // LL's rows end below SIMPLE's: floor(llMax / perRow) < ceil(simpleMin / perRow).
  static_assert(kOneGpuLlMaxBytes < kOneGpuSimpleMinBytes, "LL's tier must end below SIMPLE's");
  const bool ll = headShaped && laneElements >= kOneGpuLlMinLaneElements && perRow > 0 && perRow <= kOneGpuLlMaxBytes;
  return {ll ? (int)rowsOf(kOneGpuLlMaxBytes, perRow, false) : 0, (int)simpleMinRows};
}

ProtocolPolicy chooseProtocols(ncclDcpProtocol_t requested, const LinkSummary& links, int simpleMinRows,
                               OneGpuTiers oneGpu) {
  if (requested != ncclDcpProtoAuto) return forced(requested, links);
  ProtocolPolicy p;
  const bool nvlink = ll128Proven(links);
  p.small = nvlink ? Proto::LL128 : Proto::LL;
  p.simpleMinRows = simpleMinRows >= 0 ? simpleMinRows
                    : links.oneGpu  ? oneGpu.simpleMinRows
                    : nvlink        ? kLl128SimpleMinRows
                                    : kLlSimpleMinRows;
  p.simpleForLarge = p.simpleMinRows > 0;
  if (links.oneGpu) p.llMaxRows = p.simpleForLarge ? std::min(oneGpu.llMaxRows, p.simpleMinRows - 1) : oneGpu.llMaxRows;
  return p;
}

Proto protocolForRound(const ProtocolPolicy& policy, int rows) {
  if (rows <= policy.llMaxRows) return Proto::LL;
  return policy.simpleForLarge && rows >= policy.simpleMinRows ? Proto::Simple : policy.small;
}

}  // namespace nccl_dcp
