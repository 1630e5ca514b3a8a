"""pytest setup: the package from this source tree, and the library and
torch as fixtures that skip with a reason when they are not available.

NCCL_DCP_LIB names the library to test; when it is set, a library that
does not load is a failure, not a skip (CI sets it to its build)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def lib():
    from nccl_dcp import library
    try:
        return library()
    except OSError as e:
        if os.environ.get("NCCL_DCP_LIB"):
            pytest.fail(f"NCCL_DCP_LIB={os.environ['NCCL_DCP_LIB']} does not load: {e}")
        pytest.skip(f"libnccl_dcp.so not found (set NCCL_DCP_LIB): {e}")


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch", reason="torch is not installed")


@pytest.fixture(scope="session")
def fastcall(tmp_path_factory):
    """nccl_dcp._fastcall: the package's own when built (pip install, or
    setup.py build_ext --inplace), else compiled here from _fastcall.c;
    skips without a C compiler or Python.h."""
    from nccl_dcp import _devbuild, context
    if context._fastcall is not None:
        return context._fastcall
    why = _devbuild.missing_toolchain()
    if why:
        pytest.skip(f"{why}: nccl_dcp._fastcall not built")
    return _devbuild.build_fastcall(str(tmp_path_factory.mktemp("fastcall")))
