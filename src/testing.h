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
// Where inside create a fault lands (issue 34, item 6): by default at the
// end of `step` (the step's own work); or at one of the local calls before
// a collective step, which take their failure branch as a real failure
// would (a fallback where there is one, then the failure through the
// next gather): the open points at create's start (`step` ignored), the
// gather points at the gather that ends `step`.
enum class CreatePoint : int32_t {
  StepEnd = 0,      // the step's own work succeeded; its record says it failed
  WaitForComm,      // open: the communicator's state (waitForComm)
  ExchangeStream,   // open: the exchange's stream (cudaStreamCreateWithFlags)
  ExchangeScratch,  // open: the exchange's scratch (cudaMalloc)
  RecordToDevice,   // a gather: this rank's record to the device (cudaMemcpyAsync)
  RecordsToHost,    // a gather: the gathered records back to the host (its first attempt)
};
const char* createPointName(CreatePoint p);

struct CreateFault {
  CreateStep step;
  int rank;
  ncclResult_t code;
  CreatePoint point = CreatePoint::StepEnd;
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

// The fault armed for (step, rank) at the step's end, as a failure with its
// message; else ncclSuccess.
ncclResult_t injectedFailure(CreateStep step, int rank);
// The fault armed at `point` (of `step`'s gather; any step for the open
// points) on `rank`; else ncclSuccess.
ncclResult_t injectedAt(CreatePoint point, CreateStep step, int rank);
// Applies the armed record alterations of rank.
void alterAgreement(int rank, Agreement* a);
void alterRecord(int rank, CreateStep step, RankRecord* record);

#else

enum class CreatePoint : int32_t { StepEnd = 0, WaitForComm, ExchangeStream, ExchangeScratch, RecordToDevice, RecordsToHost };
inline ncclResult_t injectedFailure(CreateStep, int) { return ncclSuccess; }
inline ncclResult_t injectedAt(CreatePoint, CreateStep, int) { return ncclSuccess; }
inline void alterAgreement(int, Agreement*) {}
inline void alterRecord(int, CreateStep, RankRecord*) {}

#endif  // NCCL_DCP_TESTING

}  // namespace nccl_dcp

#endif  // NCCL_DCP_TESTING_H_
