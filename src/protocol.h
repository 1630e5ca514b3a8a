/*************************************************************************
 * The one place that picks a wire protocol (DESIGN §4, §5).
 ************************************************************************/
#ifndef NCCL_DCP_PROTOCOL_H_
#define NCCL_DCP_PROTOCOL_H_

#include "env.h"
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
ProtocolPolicy chooseProtocols(ncclDcpProtocol_t requested, const LinkSummary& links, const Env& env);

Proto protocolForRound(const ProtocolPolicy& policy, int rows);

// Measured crossover of LL128 and SIMPLE (docs/perf.md, v6: loopback, 8
// ranks, D 512 bf16, Hl 16 -- SIMPLE wins from 32 rows), in rows per round.
// NCCL_DCP_SIMPLE_MIN_ROWS overrides (0: never switch).
constexpr int kDefaultSimpleMinRows = 32;

}  // namespace nccl_dcp

#endif  // NCCL_DCP_PROTOCOL_H_
