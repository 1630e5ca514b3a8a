#include "enums.h"

#include <strings.h>

namespace nccl_dcp {

namespace {

struct DtypeRow {
  ncclDataType_t dtype;
  const char* name;
  const char* alias;
  int bytes;
  float roundingUnit;
};

const DtypeRow kDtypes[] = {
    {ncclBfloat16, "bf16", "bfloat16", 2, 1.f / 128},
    {ncclFloat16, "fp16", "half", 2, 1.f / 1024},
    {ncclFloat32, "fp32", "float", 4, 1e-5f},
};

const DtypeRow* dtypeRow(ncclDataType_t dtype) {
  for (const DtypeRow& row : kDtypes)
    if (row.dtype == dtype) return &row;
  return nullptr;
}

// Indexed by ncclDcpProtocol_t (Proto uses the same values).
const char* const kProtocolNames[ncclDcpNumProtocols] = {"AUTO", "LL", "LL128", "SIMPLE"};

}  // namespace

const char* dtypeName(ncclDataType_t dtype) {
  const DtypeRow* row = dtypeRow(dtype);
  return row ? row->name : "unsupported";
}

int dtypeSize(ncclDataType_t dtype) {
  const DtypeRow* row = dtypeRow(dtype);
  return row ? row->bytes : 0;
}

float dtypeRoundingUnit(ncclDataType_t dtype) {
  const DtypeRow* row = dtypeRow(dtype);
  return row ? row->roundingUnit : 0.f;
}

bool parseDtype(const char* name, ncclDataType_t* dtype) {
  for (const DtypeRow& row : kDtypes)
    if (strcasecmp(name, row.name) == 0 || strcasecmp(name, row.alias) == 0) {
      *dtype = row.dtype;
      return true;
    }
  return false;
}

const char* protocolName(int protocol) {
  return protocol >= 0 && protocol < ncclDcpNumProtocols ? kProtocolNames[protocol] : "unknown";
}

bool parseProtocol(const char* name, int* protocol) {
  for (int p = 0; p < ncclDcpNumProtocols; p++)
    if (strcasecmp(name, kProtocolNames[p]) == 0) {
      *protocol = p;
      return true;
    }
  return false;
}

}  // namespace nccl_dcp
