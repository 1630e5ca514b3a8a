"""The ctypes mirror (nccl_dcp._abi) against include/nccl_dcp.h: struct
fields in order, magic numbers, enum values, limits. Reads the header of
this source tree; no library, no GPU."""

import ctypes
import os
import re

import pytest

from conftest import SOURCE_ROOT
from nccl_dcp import _abi

HEADER = os.path.join(SOURCE_ROOT, "include", "nccl_dcp.h")


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
        decl = decl.strip()
        if not decl:
            continue
        declarators = decl.split(None, 1)[1] if not decl.startswith("unsigned") else decl.split(None, 2)[2]
        names += [re.match(r"\s*(\w+)", d).group(1) for d in declarators.split(",")]
    return names


def define(header, name):
    return re.search(rf"#define {name}\s+\(?(\w+)", header).group(1)


@pytest.mark.parametrize("struct, typedef", [
    (_abi.Config, "ncclDcpConfig_t"), (_abi.Strides, "ncclDcpStrides_t"), (_abi.Topology, "ncclDcpTopology_t")])
def test_struct_fields_match_the_header(header, struct, typedef):
    assert [name for name, _ in struct._fields_] == struct_fields(header, typedef)


def test_struct_sizes():
    # size_t + 2 x unsigned + the fields, as the C compiler lays them out on x86-64.
    assert ctypes.sizeof(_abi.Config) == 48
    assert ctypes.sizeof(_abi.Strides) == 16 + 10 * 8
    assert ctypes.sizeof(_abi.Topology) == 16 + 6 * 4 + 64 * 4 + 64 * 4 + 64 * 16 + 4 + 128 + 64 * 4 + 64 * 4 + 64 * 128 + 4


def test_magics_and_limits(header):
    assert int(define(header, "NCCL_DCP_CONFIG_MAGIC").rstrip("u"), 16) == _abi.CONFIG_MAGIC
    assert int(define(header, "NCCL_DCP_STRIDES_MAGIC").rstrip("u"), 16) == _abi.STRIDES_MAGIC
    assert int(define(header, "NCCL_DCP_TOPOLOGY_MAGIC").rstrip("u"), 16) == _abi.TOPOLOGY_MAGIC
    assert int(define(header, "NCCL_DCP_MAX_RANKS")) == _abi.NCCL_DCP_MAX_RANKS
    major, minor, patch = (int(define(header, f"NCCL_DCP_{p}")) for p in ("MAJOR", "MINOR", "PATCH"))
    assert major * 10000 + minor * 100 + patch == _abi.NCCL_DCP_VERSION_CODE


def enum_values(header, prefix):
    return {name: int(value) for name, value in re.findall(rf"\b{prefix}(\w+) = (\d+)", header)}


def test_enums(header):
    assert enum_values(header, "ncclDcpLseBase") == {"2": _abi.LSE_BASE_2, "E": _abi.LSE_BASE_E}
    protocols = {k.upper(): v for k, v in enum_values(header, "ncclDcpProto").items()}
    assert protocols == _abi.PROTOCOLS
    paths = enum_values(header, "ncclDcpPath")
    assert [name.lower() for name, _ in sorted(paths.items(), key=lambda kv: kv[1])] == list(_abi.PATHS)
    links = enum_values(header, "ncclDcpLink")
    assert [name.lower() for name, _ in sorted(links.items(), key=lambda kv: kv[1])] == list(_abi.LINKS)


def test_config_starts_unset():
    cfg = _abi.Config()
    assert (cfg.size, cfg.magic, cfg.version) == (48, _abi.CONFIG_MAGIC, _abi.NCCL_DCP_VERSION_CODE)
    assert cfg.headDim == cfg.maxBatch == cfg.timeoutMs == _abi.NCCL_CONFIG_UNDEF_INT
