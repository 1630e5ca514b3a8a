"""The GPU tests (gpu_torchrun.py) from pytest: one process per GPU through
torchrun (world size = the GPUs here). Skips with the reason without torch,
the library or a GPU; NCCL_DCP_REQUIRE_GPU=N (N >= 1) turns a missing GPU
into a failure, as in the C++ suites."""

import os
import subprocess
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))


def gpu_count(torch):
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_torchrun_suite(torch, lib, tmp_path):
    gpus = gpu_count(torch)
    required = int(os.environ.get("NCCL_DCP_REQUIRE_GPU") or 0)
    if gpus == 0:
        if required >= 1:
            pytest.fail(f"NCCL_DCP_REQUIRE_GPU={required}: needs a GPU, found 0")
        pytest.skip("needs a GPU, found 0")
    env = dict(os.environ, NCCL_DCP_LIB=lib.path,
               PYTHONPATH=os.pathsep.join([os.path.dirname(TESTS), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}",
           os.path.join(TESTS, "gpu_torchrun.py"), "--junit", str(tmp_path / "gpu.junit.xml")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    print(r.stdout)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
