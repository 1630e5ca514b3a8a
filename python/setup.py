"""Builds the nccl_dcp wheel: the Python package plus libnccl_dcp.so, which
meson builds from the source tree around python/ (only the library target:
no tests, no perf binaries).

    pip install --no-build-isolation ./python      # in the environment that has torch

Environment:
  NCCL_DCP_LIB=<path>    use an already built library instead: nothing is
                         compiled or bundled, and the package finds the
                         library through the same variable at run time
  NCCL_HOME=<prefix>     the NCCL to compile against; default: the
                         nvidia.nccl package of this Python (PyTorch's NCCL)
                         when it is importable, else meson's own search
  NCCL_DCP_SOURCE_ROOT   the source tree, when python/ was copied elsewhere

--no-build-isolation matters twice: the build sees this environment's
nvidia.nccl (so the library is compiled against the NCCL PyTorch loads),
and pip fetches nothing (setuptools and wheel must be installed).
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def source_root():
    root = os.environ.get("NCCL_DCP_SOURCE_ROOT") or os.path.dirname(HERE)
    if not os.path.exists(os.path.join(root, "meson.build")):
        raise RuntimeError(f"no meson.build in {root}: set NCCL_DCP_SOURCE_ROOT to the nccl-dcp source tree, "
                           f"or NCCL_DCP_LIB to a built libnccl_dcp.so")
    return root


def nccl_home():
    if os.environ.get("NCCL_HOME"):
        return os.environ["NCCL_HOME"]
    try:
        import nvidia.nccl as m  # PyTorch's pip NCCL, when this Python has it
    except ImportError:
        return None
    home = list(m.__path__)[0]
    return home if os.path.exists(os.path.join(home, "include", "nccl.h")) else None


def run(cmd, env):
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def build_library(build_dir, dest):
    """meson setup + compile of the library; copies it and its nccl-dcp.pc
    (which names the NCCL it was compiled against) into dest."""
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
    shutil.copyfile(os.path.realpath(os.path.join(build_dir, "libnccl_dcp.so")), os.path.join(dest, "libnccl_dcp.so"))
    os.chmod(os.path.join(dest, "libnccl_dcp.so"), 0o755)
    shutil.copyfile(os.path.join(build_dir, "meson-private", "nccl-dcp.pc"), os.path.join(dest, "nccl-dcp.pc"))


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "nccl_dcp", "lib")
        if os.environ.get("NCCL_DCP_LIB"):
            print(f"NCCL_DCP_LIB={os.environ['NCCL_DCP_LIB']}: using that library, not building one", flush=True)
            shutil.rmtree(dest, ignore_errors=True)  # no stale copy from an earlier build
            return
        build_library(os.path.join(HERE, "build", "meson"), dest)


class BinaryDistribution(Distribution):
    """The wheel carries a compiled library: platform-specific."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
