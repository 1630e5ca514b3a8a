"""Builds the nccl_dcp wheel: the Python package plus libnccl_dcp.so, which
meson builds from the source tree around python/ (only the library target:
no tests, no perf binaries).

    pip install ./python                            # builds the library, bundles it
    NCCL_DCP_LIB=build/libnccl_dcp.so pip install ./python   # uses that library, bundles none

    cd python && python3 setup.py build_ext --inplace   # the C helper only, for PYTHONPATH=python

The library is loaded with ctypes; the optional C helper nccl_dcp._fastcall
(Context's eager hot path, see its source) is a CPython extension: with it
the wheel is tagged cpXY-cpXY-linux_x86_64, without it (no C compiler or
Python.h: the build goes on, nccl_dcp uses ctypes) py3-none-linux_x86_64
(py3-none-any without a bundled library). The wheel carries no absolute
RUNPATH: the bundled library's RUNPATH is $ORIGIN, and nccl_dcp loads NCCL
and the CUDA runtime before it (PyTorch's, or the nvidia-nccl /
nvidia-cuda-runtime wheels of the environment, else the system's): see
nccl_dcp/_library.py. The target machine needs libhwloc.so.15
(Debian/Ubuntu: libhwloc15).

Environment:
  NCCL_DCP_LIB=<path>    use an already built library instead: no library
                         is compiled or bundled (the C helper still is), and
                         the package finds the library through the same
                         variable at run time
  NCCL_HOME=<prefix>     the NCCL to compile against; default: the
                         nvidia.nccl package of the target environment
                         (PyTorch's NCCL; found also from an isolated
                         build), else meson's own search (the CUDA toolkit's)
  NCCL_DCP_SOURCE_ROOT   the source tree, when python/ was copied elsewhere

Build isolation (pip's default) needs PyPI for setuptools >= 70.1. Without
network, `pip install --no-build-isolation ./python` uses this
environment's setuptools, which must be >= 70.1 (bdist_wheel built in) or
come with the `wheel` package.
"""

import os
import re
import shutil
import struct
import subprocess
import sys

import setuptools
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _bdist_wheel_class():
    try:
        from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
        return bdist_wheel
    except ImportError:
        pass
    try:
        from wheel.bdist_wheel import bdist_wheel
        return bdist_wheel
    except ImportError:
        raise RuntimeError(
            f"building the nccl_dcp wheel needs setuptools >= 70.1 or the wheel package; this environment has "
            f"setuptools {setuptools.__version__} and no wheel (pip's --no-build-isolation uses them): "
            f"pip install -U 'setuptools>=70.1', or build without --no-build-isolation") from None


def source_root():
    root = os.environ.get("NCCL_DCP_SOURCE_ROOT") or os.path.dirname(HERE)
    if not os.path.exists(os.path.join(root, "meson.build")):
        raise RuntimeError(f"no meson.build in {root}: set NCCL_DCP_SOURCE_ROOT to the nccl-dcp source tree, "
                           f"or NCCL_DCP_LIB to a built libnccl_dcp.so")
    return root


_FIND_NCCL = "import nvidia.nccl as m; print(list(m.__path__)[0])"


def nccl_home():
    """NCCL_HOME, else the target environment's nvidia.nccl (PyTorch's NCCL):
    imported here, else from a child interpreter without pip's isolation
    (PYTHONPATH and PYTHONNOUSERSITE dropped), else None."""
    if os.environ.get("NCCL_HOME"):
        return os.environ["NCCL_HOME"]
    candidates = []
    try:
        import nvidia.nccl as m
        candidates.append(list(m.__path__)[0])
    except ImportError:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
        r = subprocess.run([sys.executable, "-c", _FIND_NCCL], capture_output=True, text=True, env=env)
        if r.returncode == 0:
            candidates.append(r.stdout.strip())
    for home in candidates:
        if os.path.exists(os.path.join(home, "include", "nccl.h")):
            return home
    return None


def run(cmd, env):
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def set_runpath_origin(path):
    """Rewrites the DT_RUNPATH / DT_RPATH string of an ELF64 little-endian
    shared library in place to "$ORIGIN" (NUL-padded to its old length), so
    the wheel carries no path of the build machine. No patchelf needed:
    the new string is never longer than the old one."""
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise RuntimeError(f"{path} is not an ELF64 little-endian file")
        phoff, = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        loads, dynamic = [], None
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
            if p_type == 1:  # PT_LOAD
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == 2:  # PT_DYNAMIC
                dynamic = (p_offset, p_filesz)
        if dynamic is None:
            raise RuntimeError(f"{path} has no dynamic section")
        entries = []
        for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
            tag, value = struct.unpack_from("<qQ", data, off)
            if tag == 0:
                break
            entries.append((tag, value))
        strtab = next(v for t, v in entries if t == 5)  # DT_STRTAB (a virtual address)
        strtab_off = next(off + strtab - vaddr for vaddr, off, size in loads if vaddr <= strtab < vaddr + size)
        changed = False
        for tag, value in entries:
            if tag in (15, 29):  # DT_RPATH, DT_RUNPATH
                start = strtab_off + value
                end = data.index(b"\0", start)
                new = b"$ORIGIN"
                if end - start < len(new):
                    new = b""
                data[start:end] = new + b"\0" * (end - start - len(new))
                changed = True
        if changed:
            f.seek(0)
            f.write(data)


def build_library(build_dir, dest):
    """meson setup + compile of the library; copies it into dest with its
    RUNPATH set to $ORIGIN, and records the NCCL it was compiled against."""
    env = dict(os.environ)
    if shutil.which("nvcc", path=env.get("PATH")) is None and os.path.exists("/usr/local/cuda/bin/nvcc"):
        env["PATH"] = "/usr/local/cuda/bin" + os.pathsep + env.get("PATH", "")
    if not os.path.exists(os.path.join(build_dir, "build.ninja")):
        cmd = ["meson", "setup", build_dir, source_root(), "--buildtype", "release", "-Dtests=false", "-Dperf=false"]
        home = nccl_home()
        if home:
            cmd.append(f"-Dnccl_home={home}")
        run(cmd, env)
    run(["meson", "compile", "-C", build_dir, "nccl_dcp"], env)
    os.makedirs(dest, exist_ok=True)
    lib = os.path.join(dest, "libnccl_dcp.so")
    shutil.copyfile(os.path.realpath(os.path.join(build_dir, "libnccl_dcp.so")), lib)
    os.chmod(lib, 0o755)
    set_runpath_origin(lib)
    # The .pc names the NCCL headers of THIS machine; the package reads the
    # version it was compiled against from nccl-version.txt instead.
    with open(os.path.join(build_dir, "meson-private", "nccl-dcp.pc"), encoding="utf-8") as f:
        cflags = next((line for line in f if line.startswith("Cflags:")), "")
    for include_dir in re.findall(r"-I(\S+)", cflags):
        try:
            with open(os.path.join(include_dir, "nccl.h"), encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        parts = [re.search(rf"^#define NCCL_{p}\s+(\d+)", text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            with open(os.path.join(dest, "nccl-version.txt"), "w", encoding="utf-8") as out:
                out.write(".".join(m.group(1) for m in parts) + "\n")
            break


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "nccl_dcp", "lib")
        if os.environ.get("NCCL_DCP_LIB"):
            print(f"NCCL_DCP_LIB={os.environ['NCCL_DCP_LIB']}: using that library, not building one", flush=True)
            shutil.rmtree(dest, ignore_errors=True)  # no stale copy from an earlier build
            return
        build_library(os.path.join(HERE, "build", "meson"), dest)


# The optional C helper of Context's eager call (nccl_dcp/_fastcall.c: why
# it exists is at its top). optional: without a C compiler or Python.h the
# build goes on without it and nccl_dcp uses its ctypes path instead.
FASTCALL = Extension("nccl_dcp._fastcall", ["nccl_dcp/_fastcall.c"], optional=True)


def platform_wheel():
    """bdist_wheel tagged for what the wheel carries, decided after the build:
    cpXY-cpXY-<platform> with the C helper (a CPython extension of this
    Python), else py3-none-<platform> with the bundled library only (loaded
    with ctypes: one wheel for every Python 3), else py3-none-any (pure
    Python: NCCL_DCP_LIB names an outside library)."""

    class PlatformWheel(_bdist_wheel_class()):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            python, abi, plat = super().get_tag()
            build_ext = self.get_finalized_command("build_ext")
            if os.path.exists(build_ext.get_ext_fullpath(FASTCALL.name)):
                return python, abi, plat
            return ("py3", "none", "any" if os.environ.get("NCCL_DCP_LIB") else plat)

    return PlatformWheel


if __name__ == "__main__":  # pip runs it so; the tests import set_runpath_origin
    cmdclass = {"build_py": BuildPyWithLibrary}
    try:
        cmdclass["bdist_wheel"] = platform_wheel()
    except RuntimeError:
        if "bdist_wheel" in sys.argv:
            raise
        # e.g. `python3 setup.py build_ext --inplace` (the C helper in the
        # source tree) with an older setuptools: no wheel is built.
    setup(cmdclass=cmdclass, ext_modules=[FASTCALL])
