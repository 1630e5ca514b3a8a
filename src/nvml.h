/*************************************************************************
 * The slice of NVML the topology reads (DESIGN §5), reached through one
 * table of function pointers so tests can stand in for the driver.
 *
 * NVML is loaded at run time with dlopen("libnvidia-ml.so.1"), never linked:
 * the library must load on machines without a driver. nvml.h is not on every
 * build machine either, so the few types used are declared here with NVML's
 * layout (static_asserts pin the sizes) and the functions are looked up by
 * their versioned names (nvmlInit_v2, nvmlDeviceGetPciInfo_v3, ...).
 ************************************************************************/
#ifndef NCCL_DCP_NVML_H_
#define NCCL_DCP_NVML_H_

#include <string>

namespace nccl_dcp {
namespace nvml {

using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;
constexpr Return kErrorNotSupported = 3;

struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t

// nvmlPciInfo_t
struct PciInfo {
  char busIdLegacy[16];
  unsigned int domain, bus, device;
  unsigned int pciDeviceId, pciSubSystemId;
  char busId[32];
};
static_assert(sizeof(PciInfo) == 68, "nvmlPciInfo_t layout");

// nvmlFieldValue_t
struct FieldValue {
  unsigned int fieldId;
  unsigned int scopeId;  // the link, for NVLink fields
  long long timestamp, latencyUsec;
  int valueType;  // nvmlValueType_t
  Return nvmlReturn;
  union {
    double dVal;
    int siVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    unsigned short usVal;
  } value;
};
static_assert(sizeof(FieldValue) == 40, "nvmlFieldValue_t layout");

constexpr int kFeatureEnabled = 1;  // nvmlEnableState_t
// nvmlIntNvLinkDeviceType_t
constexpr int kRemoteGpu = 0, kRemoteIbmNpu = 1, kRemoteSwitch = 2, kRemoteUnknown = 0xff;
// nvmlValueType_t
constexpr int kValueDouble = 0, kValueUInt = 1, kValueULong = 2, kValueULongLong = 3, kValueSLongLong = 4,
              kValueSInt = 5, kValueUShort = 6;
// Field ids (scopeId = link)
constexpr unsigned int kFieldNvlinkSpeedCommonMBps = 90;  // NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
constexpr unsigned int kFieldNvlinkSpeedMBps = 164;       // NVML_FI_DEV_NVLINK_GET_SPEED
constexpr unsigned int kFieldNvlinkState = 165;           // NVML_FI_DEV_NVLINK_GET_STATE
constexpr int kMaxLinks = 36;                             // NVML_NVLINK_MAX_LINKS (NVML 13)

}  // namespace nvml

// NVML functions, with NVML's C signatures (enums as int). The first group is
// required; the optional ones are null when the driver predates them.
struct NvmlApi {
  nvml::Return (*init)();                                        // nvmlInit_v2
  nvml::Return (*shutdown)();                                    // nvmlShutdown
  const char* (*errorString)(nvml::Return);                      // nvmlErrorString
  nvml::Return (*deviceGetCount)(unsigned int*);                 // nvmlDeviceGetCount_v2
  nvml::Return (*deviceGetHandleByIndex)(unsigned int, nvml::Device*);  // ..._v2
  nvml::Return (*deviceGetPciInfo)(nvml::Device, nvml::PciInfo*);       // ..._v3
  nvml::Return (*deviceGetNvLinkState)(nvml::Device, unsigned int link, int* isActive);
  nvml::Return (*deviceGetNvLinkRemotePciInfo)(nvml::Device, unsigned int link, nvml::PciInfo*);  // _v2
  // optional
  nvml::Return (*deviceGetNvLinkRemoteDeviceType)(nvml::Device, unsigned int link, int* type);
  nvml::Return (*deviceGetNvLinkVersion)(nvml::Device, unsigned int link, unsigned int* version);
  nvml::Return (*deviceGetFieldValues)(nvml::Device, int count, nvml::FieldValue* values);
};

// The process's NVML, loaded once (thread-safe); nullptr when
// libnvidia-ml.so.1 or one of the required functions is missing, with the
// reason in *why.
const NvmlApi* systemNvml(std::string* why);

// "Not Supported", "Unknown Error", ... (errorString may be absent in a stand-in).
std::string nvmlErrorName(const NvmlApi& api, nvml::Return r);

}  // namespace nccl_dcp

#endif  // NCCL_DCP_NVML_H_
