#include "enums.h"

#include <strings.h>

namespace nccl_dcp {

namespace {

struct DtypeRow {
  ncclDataType_t dtype;
  const char* name;
  const char* alias;       // nccl-tests' name
  const char* otherAlias;  // or NULL
  int bytes;
  float roundingUnit;
};

const DtypeRow kDtypes[] = {
    {ncclBfloat16, "bf16", "bfloat16", nullptr, 2, 1.f / 128},
    {ncclFloat16, "fp16", "half", "float16", 2, 1.f / 1024},
    {ncclFloat32, "fp32", "float", "float32", 4, 1e-5f},
};

const DtypeRow* dtypeRow(ncclDataType_t dtype) {
  for (const DtypeRow& row : kDtypes)
    if (row.dtype == dtype) return &row;
  return nullptr;
}

// Indexed by ncclDcpProtocol_t (Proto uses the same values).
const char* const kProtocolNames[ncclDcpNumProtocols] = {"AUTO", "LL", "LL128", "SIMPLE"};

// Indexed by ncclDcpProvider_t.
const char* const kProviderNames[ncclDcpNumProviders] = {"auto", "nccl-window", "cuda-ipc", "fallback"};

// Indexed by ncclDcpScatter_t.
const char* const kScatterNames[ncclDcpNumScatters] = {"head", "token", "none"};
const char* const kWireNames[ncclDcpNumWires] = {"native", "fp8"};

// Indexed by NoneAlgo (types.h).
const char* const kNoneAlgoNames[] = {"auto", "direct", "two_phase"};

template <int N>
bool parseName(const char* const (&names)[N], const char* name, int* value) {
  for (int i = 0; i < N; i++)
    if (strcasecmp(name, names[i]) == 0) {
      *value = i;
      return true;
    }
  return false;
}

}  // namespace

const char* dtypeName(ncclDataType_t dtype) {
  const DtypeRow* row = dtypeRow(dtype);
  return row ? row->name : "unsupported";
}

const char* dtypeNcclTestsName(ncclDataType_t dtype) {
  const DtypeRow* row = dtypeRow(dtype);
  return row ? row->alias : "unsupported";
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
    if (strcasecmp(name, row.name) == 0 || strcasecmp(name, row.alias) == 0 ||
        (row.otherAlias && strcasecmp(name, row.otherAlias) == 0)) {
      *dtype = row.dtype;
      return true;
    }
  return false;
}

const char* protocolName(int protocol) {
  return protocol >= 0 && protocol < ncclDcpNumProtocols ? kProtocolNames[protocol] : "unknown";
}

bool parseProtocol(const char* name, int* protocol) { return parseName(kProtocolNames, name, protocol); }

const char* providerName(int provider) {
  return provider >= 0 && provider < ncclDcpNumProviders ? kProviderNames[provider] : "unknown";
}

bool parseProvider(const char* name, int* provider) { return parseName(kProviderNames, name, provider); }

const char* scatterName(int scatter) {
  return scatter >= 0 && scatter < ncclDcpNumScatters ? kScatterNames[scatter] : "unknown";
}

bool parseScatter(const char* name, int* scatter) { return parseName(kScatterNames, name, scatter); }

const char* noneAlgoName(int algo) { return algo >= 0 && algo < 3 ? kNoneAlgoNames[algo] : "unknown"; }

bool parseNoneAlgo(const char* name, int* algo) { return parseName(kNoneAlgoNames, name, algo); }

const char* wireName(int wire) { return wire >= 0 && wire < ncclDcpNumWires ? kWireNames[wire] : "unknown"; }

bool parseWire(const char* name, int* wire) { return parseName(kWireNames, name, wire); }

}  // namespace nccl_dcp
