"""Finds and loads libnccl_dcp.so, checks which NCCL it is bound to, and
turns the library's result codes into Python exceptions.

Search order (the first that exists wins):
  1. $NCCL_DCP_LIB: a path to libnccl_dcp.so (a build tree's, or an install's);
  2. the copy bundled into this package by `pip install ./python`;
  3. pkg-config's libdir of nccl-dcp (a `meson install`);
  4. the dynamic loader's own search ("libnccl_dcp.so").

A library whose version (ncclDcpGetVersion) is not this package's
major.minor (nccl_dcp.__version__) is refused with the reason: the ctypes
mirror of the structs (_abi.py) belongs to one version of nccl_dcp.h.
NCCL_DCP_LIB's library raises LibraryVersionError then; a copy found by
the search is skipped for the next (the reasons listed if none loads).

The library is loaded on first use, after PyTorch when PyTorch is
installed: torch loads its libnccl.so.2 first, and the library's own
dependency on libnccl.so.2 then resolves to that same NCCL (one NCCL in
the process, so PyTorch's ncclComm_t is valid here). Without PyTorch,
libnccl.so.2 and libcudart of the nvidia-* wheels of this environment are
loaded first when they are installed (the bundled library's RUNPATH is
only $ORIGIN), else the dynamic loader's search finds them.
"""

import ctypes
import glob
import importlib
import os
import re
import shutil
import subprocess
import threading

from . import _abi

LIB_NAME = "libnccl_dcp.so"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class NcclDcpError(RuntimeError):
    """A call into nccl-dcp failed; `result` is the ncclResult_t."""

    def __init__(self, result, message):
        super().__init__(message)
        self.result = result


class NcclDcpArgumentError(NcclDcpError, ValueError):
    """The library refused an argument (ncclInvalidArgument)."""


class NcclVersionError(RuntimeError):
    """libnccl_dcp.so and the NCCL of this process (PyTorch's) do not match."""


class LibraryVersionError(OSError):
    """libnccl_dcp.so is another nccl-dcp version than this package."""


def check_library_version(path, code):
    """Raises LibraryVersionError unless the library's version code has this
    package's major.minor (the patch level may differ)."""
    want = _abi.NCCL_DCP_VERSION_CODE
    if code // 100 != want // 100:
        raise LibraryVersionError(
            f"{path} is nccl-dcp {_abi.version_text(code)} (version code {code}), but this Python package is "
            f"nccl_dcp {_abi.version_text(want)}: they must share major.minor (the structs of nccl_dcp.h differ). "
            f"Build the library from the same source tree (meson, or pip install ./python)")


def _candidates():
    env = os.environ.get("NCCL_DCP_LIB")
    if env:
        # An explicit choice: no silent fallback to another copy.
        return [env]
    found = [os.path.join(_PACKAGE_DIR, "lib", LIB_NAME)]
    libdir = _pkg_config_libdir()
    if libdir:
        found.append(os.path.join(libdir, LIB_NAME))
    found.append(LIB_NAME)
    return found


def _pkg_config_libdir():
    if shutil.which("pkg-config") is None:
        return None
    r = subprocess.run(["pkg-config", "--variable=libdir", "nccl-dcp"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _import_torch_first():
    try:
        import torch  # noqa: F401 -- loads PyTorch's libnccl.so.2 before ours
    except ImportError:
        _preload_nvidia_wheels()


def _preload_nvidia_wheels():
    """libnccl.so.2 and libcudart.so.* from the nvidia-* wheels of this
    environment, when installed (what PyTorch's own libraries use)."""
    for module, pattern in (("nvidia.nccl", "libnccl.so.2"), ("nvidia.cu13", "libcudart.so.*"),
                            ("nvidia.cuda_runtime", "libcudart.so.*")):
        try:
            paths = list(importlib.import_module(module).__path__)
        except ImportError:
            continue
        for path in sorted(glob.glob(os.path.join(paths[0], "lib", pattern))):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass


class Library:
    """The loaded libnccl_dcp.so with its functions bound."""

    def __init__(self, path):
        self.path = path
        cdll = ctypes.CDLL(path)
        version = ctypes.c_int(0)
        get_version = cdll.ncclDcpGetVersion  # first: a library of another version may lack newer functions
        get_version.restype, get_version.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]
        if get_version(ctypes.byref(version)) != 0:
            raise OSError(f"{path}: ncclDcpGetVersion failed")
        check_library_version(path, version.value)
        self.cdll = _abi.bind(cdll)
        self.version = version.value
        self.nccl_version = split_nccl_version(self._get_int(self.cdll.ncclGetVersion, "ncclGetVersion"))
        self.built_nccl_version = built_nccl_version(path)

    def check(self, result, what):
        """Raises the library's last error when result is not ncclSuccess."""
        if result == _abi.NCCL_SUCCESS:
            return
        message = (self.cdll.ncclDcpGetLastError() or b"").decode(errors="replace")
        text = f"{what} failed: {_abi.result_name(result)}: {message or '(no message)'}"
        cls = NcclDcpArgumentError if result == _abi.NCCL_INVALID_ARGUMENT else NcclDcpError
        raise cls(result, text)

    def _get_int(self, fn, what, *args):
        value = ctypes.c_int(0)
        self.check(fn(*args, ctypes.byref(value)), what)
        return value.value

    def comm_info(self, comm):
        """(rank, nRanks, CUDA device) of an ncclComm_t, from NCCL."""
        c = self.cdll
        return (self._get_int(c.ncclCommUserRank, "ncclCommUserRank", comm),
                self._get_int(c.ncclCommCount, "ncclCommCount", comm),
                self._get_int(c.ncclCommCuDevice, "ncclCommCuDevice", comm))


_lock = threading.Lock()
_library = None


def library():
    """The process-wide Library, loaded and checked on first use."""
    global _library
    with _lock:
        if _library is None:
            _import_torch_first()
            _library = _load()
        return _library


def _load():
    tried = []
    candidates = _candidates()
    for path in candidates:
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (not found)")
            continue
        try:
            lib = Library(path)
        except LibraryVersionError as e:
            if len(candidates) == 1:  # NCCL_DCP_LIB's choice: its own reason, not "cannot load"
                raise
            tried.append(f"{path} ({e})")
            continue
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        check_nccl_versions(lib.path, lib.built_nccl_version, lib.nccl_version, torch_nccl_version(),
                            loaded_nccl_paths())
        return lib
    raise OSError("cannot load libnccl_dcp.so; tried:\n  " + "\n  ".join(tried) +
                  "\nBuild it (meson setup build && ninja -C build) and set NCCL_DCP_LIB=<build>/libnccl_dcp.so, "
                  "or pip install ./python")


# ---- NCCL versions

def split_nccl_version(code):
    """(major, minor, patch) of an NCCL version code (NCCL_VERSION_CODE)."""
    if code >= 20900:  # NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z from 2.9 on
        return (code // 10000, code % 10000 // 100, code % 100)
    return (code // 1000, code % 1000 // 100, code % 100)


def _version_text(v):
    return ".".join(str(x) for x in v)


def built_nccl_version(lib_path):
    """The NCCL whose headers libnccl_dcp.so was compiled with, read from the
    nccl.h named by the nccl-dcp.pc that meson wrote next to it (build tree:
    meson-private/; install: pkgconfig/; this package: lib/). None when no
    .pc is found: the library then checks at context creation itself."""
    libdir = os.path.dirname(os.path.realpath(lib_path)) if os.sep in lib_path else None
    if libdir is None:
        return None
    recorded = os.path.join(libdir, "nccl-version.txt")  # written by setup.py into the wheel
    if os.path.exists(recorded):
        with open(recorded, encoding="utf-8") as f:
            parts = f.read().strip().split(".")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            return tuple(int(p) for p in parts)
    for pc in (os.path.join(libdir, "nccl-dcp.pc"), os.path.join(libdir, "meson-private", "nccl-dcp.pc"),
               os.path.join(libdir, "pkgconfig", "nccl-dcp.pc")):
        if os.path.exists(pc):
            return _nccl_version_from_pc(pc)
    return None


def _nccl_version_from_pc(pc_path):
    with open(pc_path, encoding="utf-8") as f:
        cflags = next((line for line in f if line.startswith("Cflags:")), "")
    for include_dir in re.findall(r"-I(\S+)", cflags):
        version = nccl_header_version(os.path.join(include_dir, "nccl.h"))
        if version:
            return version
    return None


def nccl_header_version(header_path):
    """(major, minor, patch) from an nccl.h, None if it is not one."""
    try:
        with open(header_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    parts = [re.search(rf"^#define NCCL_{p}\s+(\d+)", text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
    return tuple(int(m.group(1)) for m in parts) if all(parts) else None


def torch_nccl_version():
    """The NCCL PyTorch reports (torch.cuda.nccl.version()), if torch is loaded."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # a CPU-only build of torch has no NCCL
        return None
    return tuple(v) if isinstance(v, (tuple, list)) else split_nccl_version(int(v))


def loaded_nccl_paths():
    """Distinct libnccl.so* files mapped into this process (Linux)."""
    paths = set()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip()
                if os.path.basename(path).startswith("libnccl.so"):
                    paths.add(os.path.realpath(path))
    except OSError:
        pass
    return sorted(paths)


def rebuild_hint():
    """How to rebuild libnccl_dcp.so against the NCCL PyTorch uses."""
    try:
        import nvidia.nccl as m  # PyTorch's pip NCCL
        home = list(m.__path__)[0]
    except ImportError:
        home = "<prefix of the NCCL PyTorch loads>"
    return (f"rebuild nccl-dcp against that NCCL: NCCL_HOME={home} pip install ./python, "
            f"or meson setup build -Dnccl_home={home} && ninja -C build and NCCL_DCP_LIB=build/libnccl_dcp.so")


def check_nccl_versions(lib_path, built, runtime, torch_version, loaded_paths):
    """Raises NcclVersionError unless one NCCL is loaded, PyTorch's is that one,
    and the library was compiled against its major.minor (NCCL's device API
    is not binary-compatible across minor versions)."""
    if len(loaded_paths) > 1:
        raise NcclVersionError(
            "two NCCL libraries are loaded in this process: " + ", ".join(loaded_paths) +
            ". An ncclComm_t from one cannot be used by the other; import torch before nccl_dcp, or "
            + rebuild_hint())
    if torch_version is not None and tuple(torch_version) != tuple(runtime):
        raise NcclVersionError(
            f"PyTorch reports NCCL {_version_text(torch_version)} but {lib_path} is bound to NCCL "
            f"{_version_text(runtime)} ({', '.join(loaded_paths) or 'path unknown'}): PyTorch's communicator "
            f"would be used by another NCCL; " + rebuild_hint())
    if built is not None and tuple(built[:2]) != tuple(runtime[:2]):
        raise NcclVersionError(
            f"{lib_path} was built against NCCL {_version_text(built)} but this process loaded NCCL "
            f"{_version_text(runtime)} ({', '.join(loaded_paths) or 'path unknown'}"
            f"{', the one PyTorch uses' if torch_version is not None else ''}); " + rebuild_hint())
