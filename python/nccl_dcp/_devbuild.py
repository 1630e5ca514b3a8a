"""Builds nccl_dcp._fastcall from its source into a directory and loads it:
for the tests and bench_host_cost.py when the package has none (run from
the source tree, where `pip install` did not build it). Not used by the
package itself."""

import importlib.util
import os
import shutil
import subprocess
import sysconfig

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_fastcall.c")


def missing_toolchain():
    """None, or why _fastcall cannot be built here."""
    include = sysconfig.get_paths()["include"]
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"no Python.h in {include}"
    return None


def build_fastcall(directory):
    """Compiles _fastcall.c into directory (warnings are errors) and returns
    the loaded module, named nccl_dcp._fastcall."""
    include = sysconfig.get_paths()["include"]
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    path = os.path.join(directory, "_fastcall" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(cc + ["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-Wno-missing-field-initializers",
                         "-I" + include, SOURCE, "-o", path], check=True)
    spec = importlib.util.spec_from_file_location("nccl_dcp._fastcall", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
