"""The C ABI of include/nccl_dcp.h, mirrored for ctypes: constants, the
versioned structs and the function signatures. Nothing else lives here.

The mirror is checked against the header by tests/test_abi.py (field names
and order, magic numbers, enum values), and the library checks every
struct's size/magic/version at run time, so a drifted copy fails loudly.
"""

import ctypes
from ctypes import POINTER, c_char, c_char_p, c_float, c_int, c_int64, c_size_t, c_uint, c_void_p

# nccl_dcp.h: version and limits.
NCCL_DCP_VERSION_CODE = 500  # NCCL_DCP_VERSION(0, 5, 0)
NCCL_DCP_MIN_VERSION_CODE = 100  # the oldest struct version the library accepts
NCCL_DCP_MAX_RANKS = 64
NCCL_DCP_CPUSET_CHARS = 128

# nccl.h
NCCL_CONFIG_UNDEF_INT = -(2**31)  # INT_MIN
NCCL_RESULT_NAMES = (
    "ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
    "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress",
)
NCCL_SUCCESS = 0
NCCL_INVALID_ARGUMENT = 4
NCCL_REMOTE_ERROR = 6

# C integer ranges: a Python int outside them would wrap silently in ctypes.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
SIZE_MAX = 2**64 - 1

# ncclDataType_t of the supported element types, by canonical name.
NCCL_DTYPES = {"bfloat16": 9, "float16": 6, "float32": 7}

# ncclDcpLseBase_t, ncclDcpProtocol_t, ncclDcpScatter_t, ncclDcpPath_t, ncclDcpLink_t, ncclDcpProvider_t
LSE_BASE_2 = 0
LSE_BASE_E = 1
PROTOCOLS = {"AUTO": 0, "LL": 1, "LL128": 2, "SIMPLE": 3}
SCATTERS = ("head", "token", "none")  # ncclDcpScatterHead = 0, Token = 1, None = 2
WIRES = ("native", "fp8")  # ncclDcpWireNative = 0, ncclDcpWireFp8E4m3 = 1
PATHS = ("fused", "fallback")
LINKS = ("unknown", "self", "nvlink", "pcie", "network")
PROVIDERS = ("auto", "nccl-window", "cuda-ipc", "fallback")  # auto: a request only (NCCL_DCP_PROVIDER)

CONFIG_MAGIC = 0xDC9C0F16
STRIDES_MAGIC = 0xDC95721D
TOPOLOGY_MAGIC = 0xDC970901
CALL_ARGS_MAGIC = 0xDC9CA115


class _Versioned(ctypes.Structure):
    """A struct with NCCL's size/magic/version header, filled as its
    ..._INITIALIZER macro would: header set, every other field at `unset`."""

    _magic = 0
    _unset = 0

    def __init__(self, **fields):
        super().__init__()
        self.size = ctypes.sizeof(self)
        self.magic = self._magic
        self.version = NCCL_DCP_VERSION_CODE
        for name, _ in self._fields_[3:]:
            if isinstance(getattr(self, name), int):
                setattr(self, name, self._unset)
        for name, value in fields.items():
            setattr(self, name, value)


_HEADER = [("size", c_size_t), ("magic", c_uint), ("version", c_uint)]


class Config(_Versioned):
    """ncclDcpConfig_t"""

    _magic = CONFIG_MAGIC
    _unset = NCCL_CONFIG_UNDEF_INT
    _fields_ = _HEADER + [
        ("headDim", c_int), ("localHeads", c_int), ("dtype", c_int), ("lseBase", c_int),
        ("maxBatch", c_int), ("protocol", c_int), ("timeoutMs", c_int),
        # appended in 0.3
        ("scatter", c_int), ("lseDtype", c_int),
        # appended in 0.4: reserved0 overlays 0.3's tail padding (never read)
        ("reserved0", c_int), ("wire", c_int),
    ]

    def __init__(self, **fields):
        super().__init__(**fields)
        if "reserved0" not in fields:
            self.reserved0 = 0  # as NCCL_DCP_CONFIG_INITIALIZER sets it


class Strides(_Versioned):
    """ncclDcpStrides_t: element strides, 0 = packed."""

    _magic = STRIDES_MAGIC
    _fields_ = _HEADER + [
        ("inRow", c_int64), ("inPeer", c_int64), ("inHead", c_int64),
        ("lseRow", c_int64), ("lsePeer", c_int64), ("lseHead", c_int64),
        ("outRow", c_int64), ("outHead", c_int64),
        ("outLseRow", c_int64), ("outLseHead", c_int64),
    ]


class CallArgs(_Versioned):
    """ncclDcpCallArgs_t: what a call adds (ncclDcpA2aLseReduceEx). Its
    fields default to NULL / 0 (NCCL_DCP_CALL_ARGS_INITIALIZER)."""

    _magic = CALL_ARGS_MAGIC
    _fields_ = _HEADER + [
        ("rowCounts", c_void_p), ("rowCountsDevice", c_void_p), ("seqLens", c_void_p), ("queryStartLoc", c_void_p),
        ("numSeqs", c_int),
    ]


class Topology(_Versioned):
    """ncclDcpTopology_t"""

    _magic = TOPOLOGY_MAGIC
    _fields_ = _HEADER + [
        ("nRanks", c_int), ("rank", c_int), ("lsaSize", c_int), ("path", c_int),
        ("protocol", c_int), ("classified", c_int),
        ("link", c_int * NCCL_DCP_MAX_RANKS),
        ("nvlinkGBps", c_float * NCCL_DCP_MAX_RANKS),
        ("busId", (c_char * 16) * NCCL_DCP_MAX_RANKS),
        ("source", c_int), ("sourceDetail", c_char * 128),
        ("pcie", c_int * NCCL_DCP_MAX_RANKS),
        ("numaNode", c_int * NCCL_DCP_MAX_RANKS),
        ("cpuset", (c_char * NCCL_DCP_CPUSET_CHARS) * NCCL_DCP_MAX_RANKS),
        ("simpleMinRows", c_int),
        ("provider", c_int), ("pathNote", c_char * 256),
    ]


# name: (restype, argtypes). ncclComm_t, ncclWindow_t, ncclDcpContext_t,
# cudaStream_t and device pointers travel as c_void_p. Every function
# nccl_dcp.h declares is here (tests/test_abi.py checks it).
_INT_P = POINTER(c_int)
FUNCTIONS = {
    "ncclDcpGetVersion": (c_int, [_INT_P]),
    "ncclDcpWorkspaceSize": (c_int, [POINTER(Config), c_int, POINTER(c_size_t)]),
    "ncclDcpContextCreate": (c_int, [c_void_p, POINTER(Config), POINTER(c_void_p)]),
    "ncclDcpContextCreateGroup": (c_int, [c_int, POINTER(c_void_p), POINTER(Config), POINTER(c_void_p)]),
    "ncclDcpContextCreateInWindow": (c_int, [c_void_p, c_void_p, c_size_t, c_size_t, POINTER(Config),
                                             POINTER(c_void_p)]),
    "ncclDcpContextDestroy": (c_int, [c_void_p]),
    "ncclDcpContextAbort": (c_int, [c_void_p]),
    "ncclDcpContextDestroyGroup": (c_int, [c_int, POINTER(c_void_p)]),
    "ncclDcpGroupStart": (c_int, []),
    "ncclDcpGroupEnd": (c_int, []),
    "ncclDcpA2aLseReduce": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int,
                                    POINTER(Strides), c_void_p]),
    "ncclDcpA2aLseReduceEx": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int,
                                      POINTER(Strides), POINTER(CallArgs), c_void_p]),
    "ncclDcpOutputRegister": (c_int, [c_void_p, c_void_p, c_size_t, c_void_p, c_size_t, POINTER(c_void_p)]),
    "ncclDcpOutputRegisterGroup": (c_int, [c_int, POINTER(c_void_p), POINTER(c_void_p), POINTER(c_size_t),
                                           POINTER(c_void_p), POINTER(c_size_t), POINTER(c_void_p)]),
    "ncclDcpOutputDeregister": (c_int, [c_void_p, c_void_p]),
    "ncclDcpContextBindStream": (c_int, [c_void_p, c_void_p]),
    "ncclDcpGetTopology": (c_int, [c_void_p, POINTER(Topology)]),
    "ncclDcpGetAsyncError": (c_int, [c_void_p, _INT_P]),
    "ncclDcpGetLastError": (c_char_p, []),
    # NCCL itself, reached through the library's own dependency: the NCCL
    # this library is bound to in this process.
    "ncclGetVersion": (c_int, [_INT_P]),
    "ncclCommCount": (c_int, [c_void_p, _INT_P]),
    "ncclCommUserRank": (c_int, [c_void_p, _INT_P]),
    "ncclCommCuDevice": (c_int, [c_void_p, _INT_P]),
}


def bind(cdll):
    """Sets restype/argtypes of every function on a loaded CDLL."""
    for name, (restype, argtypes) in FUNCTIONS.items():
        fn = getattr(cdll, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return cdll


def version_text(code):
    """"X.Y.Z" of an NCCL_DCP_VERSION_CODE."""
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def result_name(code):
    return NCCL_RESULT_NAMES[code] if 0 <= code < len(NCCL_RESULT_NAMES) else f"ncclResult {code}"
