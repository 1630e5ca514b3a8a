"""The package as pip builds and imports it, on CPU: the ops registered at
import (no library loaded, no GPU), import without torch, the ops' schemas
(out= mutated, the functional op kept in graphs), and the build's files
agreeing with each other (versions, licence, every module in the wheel)."""

import os
import re
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(PYTHON_DIR)


def run_python(code):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("NCCL_DCP_LIB", None)  # nothing here may need the library
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")


def test_ops_are_registered_at_import_without_loading_the_library(torch):
    r = run_python("import nccl_dcp, torch\n"
                   "from nccl_dcp import _library\n"
                   "print(hasattr(torch.ops.nccl_dcp, 'a2a_lse_reduce'), hasattr(torch.ops.nccl_dcp, 'a2a_lse_reduce_out'),"
                   " _library._library is None)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "True"], r.stdout


def test_import_works_without_torch():
    r = run_python("import sys\nsys.modules['torch'] = None  # as if not installed\n"
                   "import nccl_dcp\nprint(nccl_dcp.__version__, nccl_dcp.Context.__name__)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0.5.0", "Context"], r.stdout


def test_out_op_declares_its_outputs_mutated_and_the_functional_op_none(torch):
    import nccl_dcp  # noqa: F401
    out_op = torch.ops.nccl_dcp.a2a_lse_reduce_out.default._schema
    written = {a.name for a in out_op.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert written == {"out", "out_lse"}, str(out_op)
    functional = torch.ops.nccl_dcp.a2a_lse_reduce.default._schema
    assert not any(a.alias_info is not None and a.alias_info.is_write for a in functional.arguments), str(functional)
    assert [r.type.kind() for r in functional.returns] == ["TensorType", "TensorType"]


def test_functional_op_is_never_dead_code(torch):
    import torch.fx.node

    import nccl_dcp  # noqa: F401
    if not hasattr(torch.fx.node, "has_side_effect"):
        pytest.skip(f"torch {torch.__version__} has no torch.fx.node.has_side_effect")
    assert torch.ops.nccl_dcp.a2a_lse_reduce.default in torch.fx.node._side_effectful_functions


def read(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as f:
        return f.read()


def test_versions_agree():
    import nccl_dcp
    v = nccl_dcp.__version__
    assert re.search(rf"^version = \"{re.escape(v)}\"$", read(PYTHON_DIR, "pyproject.toml"), re.M)
    assert re.search(rf"version: '{re.escape(v)}'", read(PYTHON_DIR, "meson.build"))
    assert re.search(rf"version: '{re.escape(v)}'", read(ROOT, "meson.build"))


def test_licence_is_bsd_3_clause_everywhere():
    text = read(ROOT, "LICENSE")
    assert text.startswith("BSD 3-Clause License") and "The nccl-dcp authors" in text
    assert os.path.realpath(os.path.join(PYTHON_DIR, "LICENSE")) == os.path.realpath(os.path.join(ROOT, "LICENSE"))
    pyproject = read(PYTHON_DIR, "pyproject.toml")
    assert 'license = "BSD-3-Clause"' in pyproject and 'license-files = ["LICENSE"]' in pyproject
    for build in (read(ROOT, "meson.build"), read(PYTHON_DIR, "meson.build")):
        assert "license: 'BSD-3-Clause'" in build


def test_every_module_goes_into_the_wheel():
    listed = set(re.findall(r"'nccl_dcp/(\w+\.py)'", read(PYTHON_DIR, "meson.build")))
    present = {f for f in os.listdir(os.path.join(PYTHON_DIR, "nccl_dcp")) if f.endswith(".py")}
    assert listed == present, f"python/meson.build's install_sources: missing {present - listed}, extra {listed - present}"


def test_subproject_is_the_source_tree():
    link = os.path.join(PYTHON_DIR, "subprojects", "nccl-dcp")
    assert os.path.realpath(link) == os.path.realpath(ROOT)
