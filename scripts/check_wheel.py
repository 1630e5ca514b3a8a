#!/usr/bin/env python3
"""Checks an installed nccl_dcp wheel from the outside, as a user gets it
(run it with the environment's python, from a directory that is not the
source tree, without NCCL_DCP_LIB):

    python check_wheel.py [--torch-nccl MAJOR.MINOR]

- the package is the installed one, with its C helper and its own
  libnccl_dcp.so (RUNPATH without a path of the build machine), the
  licence in its metadata, a manylinux tag when the wheel was repaired;
- torch.ops.nccl_dcp.* exist right after `import nccl_dcp`;
- the library loads (no GPU needed), is this package's version and was
  built against the NCCL minor that PyTorch loads;
- the drop-ins import, and the CPU reference merges.

Prints one line per check; exits 1 at the first that fails.
"""

import importlib.metadata
import os
import subprocess
import sys


def ok(what):
    print(f"ok   {what}")


def fail(what):
    print(f"FAIL {what}")
    sys.exit(1)


def main():
    if os.environ.get("NCCL_DCP_LIB"):
        fail("NCCL_DCP_LIB is set: the check is of the wheel's own library")
    import torch

    import nccl_dcp
    from nccl_dcp import context
    package = os.path.dirname(nccl_dcp.__file__)
    if "site-packages" not in package and "dist-packages" not in package:
        fail(f"nccl_dcp comes from {package}, not an installed package")
    ok(f"nccl_dcp {nccl_dcp.__version__} from {package}")
    if not (hasattr(torch.ops.nccl_dcp, "a2a_lse_reduce") and hasattr(torch.ops.nccl_dcp, "a2a_lse_reduce_out")):
        fail("torch.ops.nccl_dcp.* not registered at import")
    ok("torch.ops.nccl_dcp.a2a_lse_reduce and a2a_lse_reduce_out registered at import")
    if context._fastcall is None:
        fail("the wheel has no C helper (nccl_dcp._fastcall)")
    ok("C helper nccl_dcp._fastcall")
    meta = importlib.metadata.metadata("nccl-dcp")
    if meta.get("License-Expression") != "BSD-3-Clause" or "LICENSE" not in (meta.get_all("License-File") or []):
        fail(f"licence metadata: {meta.get('License-Expression')!r}, files {meta.get_all('License-File')}")
    ok("License-Expression: BSD-3-Clause, License-File: LICENSE")
    wheel = importlib.metadata.distribution("nccl-dcp").read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    ok(f"wheel tag {', '.join(tags)}")

    lib = nccl_dcp.library()
    if os.path.dirname(os.path.realpath(lib.path)) != os.path.realpath(os.path.join(package, "lib")):
        fail(f"the library loaded is {lib.path}, not the wheel's")
    dynamic = subprocess.run(["readelf", "-d", lib.path], capture_output=True, text=True).stdout
    paths = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "PATH" in line and "[" in line]
    if any(not p.startswith("$ORIGIN") for entry in paths for p in entry.split(":")):
        fail(f"the bundled library's RUNPATH names the build machine: {paths}")
    ok(f"library {lib.path}: nccl-dcp {lib.version}, RUNPATH {paths}")
    torch_nccl = tuple(torch.cuda.nccl.version())
    if lib.built_nccl_version is None or lib.built_nccl_version[:2] != torch_nccl[:2]:
        fail(f"built against NCCL {lib.built_nccl_version}, PyTorch loads {torch_nccl}")
    ok(f"built against NCCL {'.'.join(map(str, lib.built_nccl_version))}, PyTorch's is "
       f"{'.'.join(map(str, torch_nccl))}")

    import nccl_dcp.flashinfer  # noqa: F401
    import nccl_dcp.vllm  # noqa: F401
    from nccl_dcp import reference
    out, lse = reference.merge(torch.tensor([[[[1.0]]], [[[3.0]]]]), torch.tensor([[[0.0]], [[0.0]]]), "e")
    if abs(out.item() - 2.0) > 1e-6:
        fail(f"reference merge gave {out.item()}")
    ok("drop-ins import; the CPU reference merges")


if __name__ == "__main__":
    main()
