/*************************************************************************
 * Failure injection into create, for tests only. It exists only in the
 * test build of the library (libnccl_dcp_testing.a, compiled with
 * -DNCCL_DCP_TESTING=1, test/meson.build); the installed libnccl_dcp.so has
 * no trace of it, and in it injectedFailure() is an inline no-op.
 ************************************************************************/
#ifndef NCCL_DCP_TESTING_H_
#define NCCL_DCP_TESTING_H_

#include <nccl.h>

#include "agreement.h"

namespace nccl_dcp {

#ifdef NCCL_DCP_TESTING

// (Not a namespace "testing": it would hide GoogleTest's in the tests.)

// Where create fails: at `step` on rank `rank` of every communicator
// created (every rank when rank is -1), with `code`. At CreateStep::Agree
// (a pure step with no local failure) the rank's agreed record is altered
// instead, so the agreement fails naming that rank.
struct CreateFault {
  CreateStep step;
  int rank;
  ncclResult_t code;
};

// Arms f for every later create until disarmed with nullptr. Set it before
// the ranks' threads call create: they only read it.
void injectCreateFault(const CreateFault* f);

// Alters the agreed record of `rank` before it is gathered (nullptr: off):
// how a test makes an input that a process cannot change at run time (a
// build option) differ between ranks. Same threading rule.
void alterAgreementForTesting(int rank, void (*alter)(Agreement*));

// Alters the record of `rank` (every rank when -1) as it leaves `step`
// (nullptr: off): how a test makes a rank see what its machine cannot
// show, e.g. no symmetric memory, or no P2P to a peer. Same threading rule.
void alterRecordForTesting(int rank, CreateStep step, void (*alter)(RankRecord*));

// The fault armed for (step, rank), as a failure with its message; else ncclSuccess.
ncclResult_t injectedFailure(CreateStep step, int rank);
// Applies the armed record alterations of rank.
void alterAgreement(int rank, Agreement* a);
void alterRecord(int rank, CreateStep step, RankRecord* record);

#else

inline ncclResult_t injectedFailure(CreateStep, int) { return ncclSuccess; }
inline void alterAgreement(int, Agreement*) {}
inline void alterRecord(int, CreateStep, RankRecord*) {}

#endif  // NCCL_DCP_TESTING

}  // namespace nccl_dcp

#endif  // NCCL_DCP_TESTING_H_
