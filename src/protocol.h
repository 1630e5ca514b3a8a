/*************************************************************************
 * The one place that picks a wire protocol (DESIGN §4, §5).
 ************************************************************************/
#ifndef NCCL_DCP_PROTOCOL_H_
#define NCCL_DCP_PROTOCOL_H_

#include "device/layout.h"
#include "nccl_dcp.h"

namespace nccl_dcp {

// What the topology proved about the paths between the ranks.
struct LinkSummary {
  bool oneLsaTeam;   // every rank reachable by load/store (NCCL's LSA team)
  bool classified;   // links classified by the topology model (DESIGN §5)
  bool allNvlink;    // ... and every peer is NVLink (direct or NVSwitch)
  bool oneGpu;       // loopback: all ranks on one GPU
};

struct ProtocolPolicy {
  Proto small;          // protocol of rounds below simpleMinRows
  bool simpleForLarge;  // AUTO: rounds of >= simpleMinRows rows use SIMPLE
  int simpleMinRows;
};

// Until the topology model lands, AUTO trusts LL128 inside one LSA team
// (NCCL only forms one over NVLink-connected, P2P-capable GPUs) and on one GPU.
// Every input is agreed by the ranks (the requested protocol and
// simpleMinRows are fields of the resolved Config; the links are summarised
// from every rank's view), so every rank picks the same policy.
ProtocolPolicy chooseProtocols(ncclDcpProtocol_t requested, const LinkSummary& links, int simpleMinRows);

Proto protocolForRound(const ProtocolPolicy& policy, int rows);

// Measured crossover of LL128 and SIMPLE (docs/perf.md), in rows per round.
constexpr int kDefaultSimpleMinRows = 0;  // 0: AUTO never switches to SIMPLE

}  // namespace nccl_dcp

#endif  // NCCL_DCP_PROTOCOL_H_
