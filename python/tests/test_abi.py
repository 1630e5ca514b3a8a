"""The ctypes mirror (nccl_dcp._abi) against include/nccl_dcp.h: struct
fields in order, magic numbers, enum values, limits, and a binding with the
right number of arguments for every function the header declares. Reads
the header of this source tree (NCCL_DCP_HEADER=<path> names another, e.g.
the installed one of the library under test); no library, no GPU."""

import ctypes
import os
import re

import pytest

from conftest import SOURCE_ROOT
from nccl_dcp import _abi

HEADER = os.environ.get("NCCL_DCP_HEADER") or os.path.join(SOURCE_ROOT, "include", "nccl_dcp.h")


@pytest.fixture(scope="module")
def header():
    if not os.path.exists(HEADER):
        pytest.skip(f"{HEADER} not found (tests run outside the source tree)")
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # comments out


def struct_fields(header, typedef):
    """Field names, in order, of `typedef struct X { ... } typedef;`."""
    body = re.search(r"typedef struct \w+ \{([^{}]*)\} " + typedef + ";", header).group(1)
    names = []
    for decl in body.split(";"):
        decl = re.sub(r"\bconst\s+", "", decl.strip())
        if not decl:
            continue
        declarators = decl.split(None, 1)[1] if not decl.startswith("unsigned") else decl.split(None, 2)[2]
        names += [re.match(r"[\s*]*(\w+)", d).group(1) for d in declarators.split(",")]
    return names


def define(header, name):
    return re.search(rf"#define {name}\s+\(?(\w+)", header).group(1)


@pytest.mark.parametrize("struct, typedef", [
    (_abi.Config, "ncclDcpConfig_t"), (_abi.Strides, "ncclDcpStrides_t"), (_abi.Topology, "ncclDcpTopology_t"),
    (_abi.CallArgs, "ncclDcpCallArgs_t")])
def test_struct_fields_match_the_header(header, struct, typedef):
    assert [name for name, _ in struct._fields_] == struct_fields(header, typedef)


def test_struct_sizes():
    # size_t + 2 x unsigned + the fields, as the C compiler lays them out on x86-64.
    assert ctypes.sizeof(_abi.Config) == 64  # 16 + 11 ints (0.3: scatter, lseDtype; then reserved0, wire) = 60, padded
    assert _abi.Config.scatter.offset == 44 and _abi.Config.lseDtype.offset == 48  # 0.2's size: offsetof(scatter)
    assert _abi.Config.reserved0.offset == 52 and _abi.Config.wire.offset == 56  # 0.3's size (56) ends before wire
    assert ctypes.sizeof(_abi.Strides) == 16 + 10 * 8
    assert ctypes.sizeof(_abi.CallArgs) == 16 + 4 * 8 + 8  # four pointers, numSeqs padded to 8
    assert [getattr(_abi.CallArgs, f).offset for f in ("rowCounts", "rowCountsDevice", "seqLens",
                                                       "queryStartLoc", "numSeqs")] == [16, 24, 32, 40, 48]
    topology = (16 + 6 * 4 + 64 * 4 + 64 * 4 + 64 * 16 + 4 + 128 + 64 * 4 + 64 * 4 + 64 * 128 + 4
                + 4 + 256)  # provider, pathNote
    assert ctypes.sizeof(_abi.Topology) == (topology + 7) // 8 * 8  # padded to size_t's alignment


def test_magics_and_limits(header):
    assert int(define(header, "NCCL_DCP_CONFIG_MAGIC").rstrip("u"), 16) == _abi.CONFIG_MAGIC
    assert int(define(header, "NCCL_DCP_STRIDES_MAGIC").rstrip("u"), 16) == _abi.STRIDES_MAGIC
    assert int(define(header, "NCCL_DCP_TOPOLOGY_MAGIC").rstrip("u"), 16) == _abi.TOPOLOGY_MAGIC
    assert int(define(header, "NCCL_DCP_CALL_ARGS_MAGIC").rstrip("u"), 16) == _abi.CALL_ARGS_MAGIC
    assert int(define(header, "NCCL_DCP_MAX_RANKS")) == _abi.NCCL_DCP_MAX_RANKS
    major, minor, patch = (int(define(header, f"NCCL_DCP_{p}")) for p in ("MAJOR", "MINOR", "PATCH"))
    assert major * 10000 + minor * 100 + patch == _abi.NCCL_DCP_VERSION_CODE


def enum_values(header, prefix):
    return {name: int(value) for name, value in re.findall(rf"\b{prefix}(\w+) = (\d+)", header)}


def test_enums(header):
    assert enum_values(header, "ncclDcpLseBase") == {"2": _abi.LSE_BASE_2, "E": _abi.LSE_BASE_E}
    protocols = {k.upper(): v for k, v in enum_values(header, "ncclDcpProto").items()}
    assert protocols == _abi.PROTOCOLS
    scatters = enum_values(header, "ncclDcpScatter")
    assert [name.lower() for name, _ in sorted(scatters.items(), key=lambda kv: kv[1])] == list(_abi.SCATTERS)
    paths = enum_values(header, "ncclDcpPath")
    assert [name.lower() for name, _ in sorted(paths.items(), key=lambda kv: kv[1])] == list(_abi.PATHS)
    links = enum_values(header, "ncclDcpLink")
    assert [name.lower() for name, _ in sorted(links.items(), key=lambda kv: kv[1])] == list(_abi.LINKS)
    # ncclDcpProviderNcclWindow -> "nccl-window", the name NCCL_DCP_PROVIDER takes
    providers = enum_values(header, "ncclDcpProvider")
    assert [re.sub(r"(?<!^)([A-Z])", r"-\1", name).lower()
            for name, _ in sorted(providers.items(), key=lambda kv: kv[1])] == list(_abi.PROVIDERS)


def declared_functions(header):
    """{name: number of parameters} of every function the header declares."""
    found = {}
    for name, params in re.findall(r"^\s*(?:ncclResult_t|const char\*)\s+(ncclDcp\w+)\s*\(([^)]*)\)\s*;",
                                   header, flags=re.M):
        params = params.strip()
        found[name] = 0 if params in ("", "void") else params.count(",") + 1
    return found


def test_every_declared_function_is_bound(header):
    declared = declared_functions(header)
    assert len(declared) >= 13, declared  # the parse found the API
    bound = {name: len(argtypes) for name, (_, argtypes) in _abi.FUNCTIONS.items() if name.startswith("ncclDcp")}
    assert bound == declared


def test_version_code_is_the_package_version():
    import nccl_dcp
    assert nccl_dcp.__version__ == _abi.version_text(_abi.NCCL_DCP_VERSION_CODE)
    pyproject = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")
    with open(pyproject, encoding="utf-8") as f:
        assert f'version = "{nccl_dcp.__version__}"' in f.read()


def test_config_starts_unset():
    cfg = _abi.Config()
    assert (cfg.size, cfg.magic, cfg.version) == (64, _abi.CONFIG_MAGIC, _abi.NCCL_DCP_VERSION_CODE)
    assert cfg.headDim == cfg.maxBatch == cfg.timeoutMs == _abi.NCCL_CONFIG_UNDEF_INT
    assert cfg.scatter == cfg.lseDtype == cfg.wire == _abi.NCCL_CONFIG_UNDEF_INT  # NCCL_DCP_CONFIG_INITIALIZER
    assert cfg.reserved0 == 0


def test_call_args_start_empty():
    """NCCL_DCP_CALL_ARGS_INITIALIZER: NULL pointers and numSeqs 0."""
    args = _abi.CallArgs()
    assert (args.size, args.magic, args.version) == (56, _abi.CALL_ARGS_MAGIC, _abi.NCCL_DCP_VERSION_CODE)
    assert args.rowCounts is args.rowCountsDevice is args.seqLens is args.queryStartLoc is None
    assert args.numSeqs == 0


def test_call_args_initializer_matches_the_header(header):
    body = re.search(r"#define NCCL_DCP_CALL_ARGS_INITIALIZER \{(.*?)\}", header, flags=re.S).group(1)
    values = [v.strip() for v in body.replace("\\", "").split(",") if v.strip()]
    assert values[3:] == ["NULL", "NULL", "NULL", "NULL", "0"]


def test_config_initializer_leaves_the_new_fields_unset(header):
    body = re.search(r"#define NCCL_DCP_CONFIG_INITIALIZER \{(.*?)\n\}", header, flags=re.S).group(1)
    values = [v.strip() for v in body.replace("\\", "").split(",") if v.strip()]
    assert len(values) == len(_abi.Config._fields_)
    assert values[-4:] == ["NCCL_CONFIG_UNDEF_INT", "(ncclDataType_t)NCCL_CONFIG_UNDEF_INT",  # scatter, lseDtype
                           "0", "NCCL_CONFIG_UNDEF_INT"]  # reserved0, wire
