"""A malformed NCCL_DCP_* value is warned about through the library's
logger, as NCCL's own lines are: with its host:pid:tid prefix, into
NCCL_DCP_DEBUG_FILE when one is set, and not at all under
NCCL_DCP_DEBUG=NONE. The library reads its environment once per process,
so each case runs in a fresh interpreter, which loads the library alone
(no torch, so no other NCCL beside it). Needs the library (CPU only):
NCCL_DCP_LIB."""

import os
import subprocess
import sys

import pytest

LIB = os.environ.get("NCCL_DCP_LIB")
pytestmark = pytest.mark.skipif(not LIB, reason="set NCCL_DCP_LIB to the library to test")

# The first call that reads the environment: ncclDcpWorkspaceSize (its NULL
# config is refused after the environment is read).
READ_THE_ENVIRONMENT = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
size = ctypes.c_size_t(0)
lib.ncclDcpWorkspaceSize(None, 2, ctypes.byref(size))
"""


def run(**env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_DCP_")}
    full.update(env)
    r = subprocess.run([sys.executable, "-c", READ_THE_ENVIRONMENT, LIB], env=full, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout + r.stderr


def test_malformed_value_is_warned_with_the_loggers_prefix():
    out = run(NCCL_DCP_TIMEOUT_MS="soon")
    lines = [l for l in out.splitlines() if "NCCL_DCP_TIMEOUT_MS=soon ignored" in l]
    assert len(lines) == 1, out
    host, pid = lines[0].split(":")[:2]
    assert host and pid.isdigit() and " NCCL-DCP WARN " in lines[0], lines[0]


def test_malformed_value_goes_to_the_debug_file(tmp_path):
    path = tmp_path / "dcp.log"
    out = run(NCCL_DCP_TIMEOUT_MS="soon", NCCL_DCP_DEBUG_FILE=str(path))
    assert "NCCL_DCP_TIMEOUT_MS" not in out, out
    assert "NCCL_DCP_TIMEOUT_MS=soon ignored" in path.read_text()


def test_no_warning_under_debug_none():
    out = run(NCCL_DCP_TIMEOUT_MS="soon", NCCL_DCP_DEBUG="NONE")
    assert "NCCL_DCP_TIMEOUT_MS" not in out, out
