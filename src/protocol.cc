#include "protocol.h"

namespace nccl_dcp {

ProtocolPolicy chooseProtocols(ncclDcpProtocol_t requested, const LinkSummary& links, int simpleMinRows) {
  ProtocolPolicy p;
  p.simpleForLarge = false;
  p.simpleMinRows = 0;
  switch (requested) {
    case ncclDcpProtoLL: p.small = Proto::LL; return p;
    case ncclDcpProtoLL128: p.small = Proto::LL128; return p;
    case ncclDcpProtoSimple: p.small = Proto::Simple; return p;
    default: break;
  }
  const bool ll128Safe =
      links.oneGpu || (links.classified ? links.allNvlink : links.oneLsaTeam);
  p.small = ll128Safe ? Proto::LL128 : Proto::LL;
  p.simpleMinRows = simpleMinRows;
  p.simpleForLarge = p.simpleMinRows > 0;
  return p;
}

Proto protocolForRound(const ProtocolPolicy& policy, int rows) {
  return policy.simpleForLarge && rows >= policy.simpleMinRows ? Proto::Simple : policy.small;
}

}  // namespace nccl_dcp
