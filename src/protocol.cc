/*************************************************************************
 * AUTO policy (see protocol.h).
 ************************************************************************/
#include "protocol.h"

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

int oneGpuSimpleMinRows(int nRanks, long rowBytes) {
  const long perRow = (long)nRanks * rowBytes;
  const long rows = perRow > 0 ? (kOneGpuSimpleMinBytes + perRow - 1) / perRow : 1;
  return rows > 1 ? (int)rows : 1;
}

ProtocolPolicy chooseProtocols(ncclDcpProtocol_t requested, const LinkSummary& links, int simpleMinRows,
                               int oneGpuMinRows) {
  if (requested != ncclDcpProtoAuto) return forced(requested, links);
  ProtocolPolicy p;
  const bool nvlink = ll128Proven(links);
  p.small = nvlink ? Proto::LL128 : Proto::LL;
  p.simpleMinRows = simpleMinRows >= 0 ? simpleMinRows
                    : links.oneGpu  ? oneGpuMinRows
                    : nvlink        ? kLl128SimpleMinRows
                                    : kLlSimpleMinRows;
  p.simpleForLarge = p.simpleMinRows > 0;
  return p;
}

Proto protocolForRound(const ProtocolPolicy& policy, int rows) {
  return policy.simpleForLarge && rows >= policy.simpleMinRows ? Proto::Simple : policy.small;
}

}  // namespace nccl_dcp
