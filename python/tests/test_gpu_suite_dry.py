"""The GPU suite (gpu_torchrun.py) run on CPU, over two gloo ranks, with a
stand-in for nccl_dcp.Context built on the PyTorch reference: its cases,
inputs, comparisons and verdicts work, and they FAIL when the collective is
wrong (a stand-in that ignores the LSEs), so a green GPU run means something.
The engines' drop-ins (nccl_dcp.vllm, nccl_dcp.flashinfer) run their
library path here, on the same stand-in. The CUDA-only cases (graphs, the
library's own checks) are left to the GPU."""

import os
import socket

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

WORLD = 2


class ReferenceContext:
    """nccl_dcp.Context's call surface over reference.a2a_lse_reduce;
    `broken` merges with equal weights instead of the LSE weights."""

    broken = False

    def __init__(self, group, head_dim, local_heads, dtype, lse_base, max_batch=None, protocol=None, scatter="head",
                 lse_dtype=torch.float32):
        import torch.distributed as dist
        from nccl_dcp._validate import CallSpec, dtype_name
        self.group, self.base, self.protocol = group, lse_base, protocol or "LL128"
        self.spec = CallSpec(cp=dist.get_world_size(group), local_heads=local_heads, head_dim=head_dim,
                             dtype=dtype_name(dtype), device=0, scatter=scatter, lse_dtype=dtype_name(lse_dtype),
                             rank=dist.get_rank(group))

    def __call__(self, partial_out, partial_lse, out=None, out_lse=None, return_lse=False, row_counts=None,
                 seq_lens=None, query_start_loc=None):
        from nccl_dcp import reference
        if partial_lse.dtype != torch.float32 and self.spec.lse_dtype == "float32":
            raise AssertionError(f"partial_lse is {partial_lse.dtype}: the suite passes another LSE dtype")
        lse = torch.zeros_like(partial_lse) if self.broken else partial_lse
        merged, merged_lse = reference.a2a_lse_reduce(partial_out, lse, self.spec.local_heads, self.base, self.group,
                                                      self.spec.scatter, row_counts, seq_lens, query_start_loc)
        out = merged if out is None else out.copy_(merged)
        if out_lse is None and not return_lse:
            return out
        out_lse = merged_lse if out_lse is None else out_lse.copy_(merged_lse)
        return out, out_lse

    def topology(self):
        import torch.distributed as dist
        return {"path": "fused", "protocol": self.protocol, "n_ranks": self.spec.cp,
                "rank": dist.get_rank(self.group)}

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def worker(rank, port, broken, verdicts):
    import types

    import torch.distributed as dist
    import gpu_torchrun as suite_module
    from nccl_dcp import _dropin

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        ReferenceContext.broken = broken
        suite_module.DEVICE = "cpu"
        suite_module.nccl_dcp = types.SimpleNamespace(Context=ReferenceContext)
        _dropin.Context = ReferenceContext  # the drop-ins' library path, on the stand-in
        _dropin.uses_library = lambda tensor, group: True
        group = dist.group.WORLD
        suite = suite_module.Suite(group)
        suite_module.add_matrix(suite, group)
        suite_module.add_mla_shape(suite, group)
        suite_module.add_protocols(suite, group)
        suite_module.add_modes(suite, group)
        suite_module.add_dropins(suite, group)
        results = suite.run()
        if rank == 0:
            for name, bad, detail, _, _ in results:
                verdicts.put((name, bad, detail))
        dist.barrier()  # no rank tears gloo down under another's last collective
    finally:
        dist.destroy_process_group()


def run_suite(broken, attempts=2):
    """The suite's verdicts from rank 0. A worker that dies (gloo's teardown
    or a port taken between the probe and the bind: seen once in ~10 runs
    on a loaded 2-core machine) is retried once on a new port; an exception
    raised in a worker (a suite bug) is not."""
    import warnings

    import torch.multiprocessing as mp
    for attempt in range(attempts):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        verdicts = mp.get_context("spawn").SimpleQueue()
        try:
            mp.start_processes(worker, args=(port, broken, verdicts), nprocs=WORLD, start_method="spawn")
        except mp.ProcessExitedException as e:
            if attempt + 1 == attempts:
                raise
            warnings.warn(f"a gloo worker died ({e}); retrying on a new port")
            continue
        results = []
        while not verdicts.empty():
            results.append(verdicts.get())
        return results


def test_suite_passes_a_correct_collective():
    results = run_suite(broken=False)
    # 6 x (create + 9 calls + close), the MLA shape, 3 protocols; the modes: 3 x 2 LSE dtypes x (create + 6
    # calls + close), TOKEN's 4 host-count cases per LSE dtype; the drop-ins: vLLM's 3 configurations x 3
    # batches, FlashInfer's 2 x (a workspace + 3 batches), their close
    assert len(results) == 70 + 6 * 8 + 2 * 4 + 9 + 2 * 4 + 1
    failed = [r for r in results if r[1]]
    assert not failed, failed


def test_suite_fails_a_wrong_collective():
    results = run_suite(broken=True)
    calls = [r for r in results if r[0].startswith(("matrix/", "mla/", "protocol/", "modes/", "dropin/"))
             and not r[0].endswith(("/create", "/close", "/create_workspace"))]
    passed = [r[0] for r in calls if not r[1]]
    # A batch of one row has no corner case and random LSEs: every call must catch the wrong weights.
    assert calls and not passed, passed
