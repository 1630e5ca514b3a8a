/*************************************************************************
 * The failure injection of testing.h: compiled into the test build of the
 * library only (test/meson.build), never into libnccl_dcp.so.
 ************************************************************************/
#include "testing.h"

#ifndef NCCL_DCP_TESTING
#error "testing.cc belongs to the test build of the library only (-DNCCL_DCP_TESTING=1)"
#endif

#include "error.h"

namespace nccl_dcp {

namespace {
// Written by the test's main thread before the ranks' threads create;
// only read while they do.
bool faultArmed = false;
CreateFault fault;
int alteredRank = -1;
void (*alteration)(Agreement*) = nullptr;
int recordRank = -1;
CreateStep recordStep = CreateStep::Count;
void (*recordAlteration)(RankRecord*) = nullptr;
}  // namespace

void alterRecordForTesting(int rank, CreateStep step, void (*alter)(RankRecord*)) {
  recordRank = rank;
  recordStep = step;
  recordAlteration = alter;
}

void alterRecord(int rank, CreateStep step, RankRecord* record) {
  if (recordAlteration && step == recordStep && (recordRank == -1 || recordRank == rank)) recordAlteration(record);
}

void injectCreateFault(const CreateFault* f) {
  faultArmed = f != nullptr;
  if (f) fault = *f;
}

void alterAgreementForTesting(int rank, void (*alter)(Agreement*)) {
  alteredRank = rank;
  alteration = alter;
}

const char* createPointName(CreatePoint p) {
  switch (p) {
    case CreatePoint::StepEnd: return "the step's end";
    case CreatePoint::WaitForComm: return "waitForComm";
    case CreatePoint::ExchangeStream: return "the exchange's stream";
    case CreatePoint::ExchangeScratch: return "the exchange's scratch";
    case CreatePoint::RecordToDevice: return "the record to the device";
    case CreatePoint::RecordsToHost: return "the records to the host";
  }
  return "unknown";
}

ncclResult_t injectedFailure(CreateStep step, int rank) {
  if (!faultArmed || fault.point != CreatePoint::StepEnd || fault.step != step ||
      (fault.rank != -1 && fault.rank != rank))
    return ncclSuccess;
  return fail(fault.code, "failure injected by the test at step '%s' on rank %d", createStepName(step), rank);
}

ncclResult_t injectedAt(CreatePoint point, CreateStep step, int rank) {
  const bool opening =
      point == CreatePoint::WaitForComm || point == CreatePoint::ExchangeStream || point == CreatePoint::ExchangeScratch;
  if (!faultArmed || fault.point != point || (!opening && fault.step != step) ||
      (fault.rank != -1 && fault.rank != rank))
    return ncclSuccess;
  return fail(fault.code, "failure injected by the test at %s (step '%s') on rank %d", createPointName(point),
              createStepName(opening ? CreateStep::Arguments : step), rank);
}

void alterAgreement(int rank, Agreement* a) {
  if (alteration && (alteredRank == -1 || alteredRank == rank)) alteration(a);
  // The Agree step cannot fail locally: its injected fault is a record that
  // disagrees with everyone else's.
  if (faultArmed && fault.point == CreatePoint::StepEnd && fault.step == CreateStep::Agree &&
      (fault.rank == -1 || fault.rank == rank))
    a->libVersion += 1;
}

}  // namespace nccl_dcp
