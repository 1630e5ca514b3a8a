/*************************************************************************
 * The one place that picks a wire protocol (DESIGN §4, §5), from what
 * the ranks agreed about their links (topology.h). Peers outside the LSA
 * team take the fallback path (ncclAlltoAll + combine, chosen at create);
 * inside it:
 *   - every peer proven NVLink (or one GPU, loopback): LL128, SIMPLE for
 *     rounds of at least kLl128SimpleMinRows rows (one GPU: rounds of
 *     kOneGpuSimpleMinBytes per rank);
 *   - P2P over PCIe, or links not proven: LL, SIMPLE for rounds of at least
 *     kLlSimpleMinRows rows (LL128 needs 128-byte stores arriving whole,
 *     which NVLink gives and PCIe does not);
 *   - a protocol forced by the config or NCCL_DCP_PROTO is used as is,
 *     but LL128 forced over a link proven PCIe runs as LL (a WARN says
 *     so); LL128 forced where a link is unknown runs with a WARN.
 ************************************************************************/
#ifndef NCCL_DCP_PROTOCOL_H_
#define NCCL_DCP_PROTOCOL_H_

#include "device/types.h"
#include "nccl_dcp.h"

namespace nccl_dcp {

// What the ranks agreed about the paths between them (the same on every rank).
struct LinkSummary {
  bool oneLsaTeam;   // every rank reachable by load/store (NCCL's LSA team)
  bool classified;   // every rank knows its link to every peer (NVLink or PCIe)
  bool allNvlink;    // ... and every one is NVLink (direct or NVSwitch)
  bool oneGpu;       // loopback: all ranks on one GPU
};

struct ProtocolPolicy {
  Proto small;          // protocol of rounds below simpleMinRows
  bool simpleForLarge;  // AUTO: rounds of >= simpleMinRows rows use SIMPLE
  int simpleMinRows;
};

// AUTO's switch to SIMPLE, in rows per round (0: never), measured at the
// reference shape (bf16, D 512, Hl 16: 16 KiB per row and peer);
// NCCL_DCP_SIMPLE_MIN_ROWS overrides them. Set from the sweeps in docs/perf.md and
// docs/perf-history.md (v8: one GPU).
// NVLink (and one GPU): LL128 -> SIMPLE. v10, 2 x H200 (cp 2): LL128 is
// faster up to 64 rows (10.2 vs 11.3 us at 64), SIMPLE from 128 (with
// 4 KiB chunks and one send step per block there; docs/perf.md).
constexpr int kLl128SimpleMinRows = 128;
// One GPU (loopback): no link to cross, and SIMPLE's bulk copies win once
// a virtual rank merges about kOneGpuSimpleMinBytes a round (rows x cp
// sources x Hl x D x element), whatever cp (docs/perf-history.md "AUTO's
// one-GPU crossover per cp"; Hl 16, D 512, bf16: LL128 wins up to 8 / 4
// rows at cp 4 / 8, SIMPLE from 16 / 8; at cp 2 LL128 is 4% faster at 32
// rows and SIMPLE from 64; at cp 16 they tie at 1-2 rows, SIMPLE wins
// from 4).
constexpr long kOneGpuSimpleMinBytes = 1l << 20;
// That crossover at the reference shape and cp 8 (v8: 14.6 vs 17.9 us at
// 8 rows, 13.7 vs 10.1 at 4): the default where no shape is given.
constexpr int kOneGpuSimpleMinRows = 8;
// PCIe or unproven links: LL -> SIMPLE. Not measured (no PCIe machine here);
// an estimate: LL moves half the bytes per store, SIMPLE pays one flag round
// trip per chunk (~2 us over PCIe), so SIMPLE wins once a peer's share
// exceeds ~25 GB/s * 2 us = 50 KB, about 4 rows of 16 KiB.
constexpr int kLlSimpleMinRows = 4;

// AUTO's one-GPU crossover in rows for nRanks virtual ranks and rowBytes
// (Hl x D x element) per source and row: at least one.
int oneGpuSimpleMinRows(int nRanks, long rowBytes);

// Every input is agreed by the ranks (the requested protocol and
// simpleMinRows are fields of the resolved Config; the links are agreed from
// every rank's view), so every rank picks the same policy. simpleMinRows:
// NCCL_DCP_SIMPLE_MIN_ROWS, or negative for the measured default of the links
// (on one GPU: oneGpuMinRows, from oneGpuSimpleMinRows for the call's shape).
ProtocolPolicy chooseProtocols(ncclDcpProtocol_t requested, const LinkSummary& links, int simpleMinRows,
                               int oneGpuMinRows = kOneGpuSimpleMinRows);

Proto protocolForRound(const ProtocolPolicy& policy, int rows);

// LL128 is safe: every peer is proven NVLink, or all ranks share one GPU.
bool ll128Proven(const LinkSummary& links);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_PROTOCOL_H_
