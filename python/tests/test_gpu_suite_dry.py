"""The GPU suite (gpu_torchrun.py) run on CPU, over two gloo ranks, with a
stand-in for nccl_dcp.Context built on the PyTorch reference: its cases,
inputs, comparisons and verdicts work, and they FAIL when the collective is
wrong (a stand-in that ignores the LSEs; for fp8 on the wire, one that loses
the unit scale, or does not narrow at all), so a green GPU run means
something. The engines' drop-ins (nccl_dcp.vllm, nccl_dcp.flashinfer) run
their library path here, on the same stand-in. The CUDA-only cases
(graphs, the library's own checks) are left to the GPU. The gloo ranks meet
on a FileStore (a file of a fresh temporary directory): no port to race
for."""

import os
import sys
import tempfile
import traceback

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

WORLD = 2


class ReferenceContext:
    """nccl_dcp.Context's call surface over reference.a2a_lse_reduce;
    `broken` merges with equal weights instead of the LSE weights."""

    broken = False

    # How the stand-in's fp8 wire narrows (wire="fp8"): "model" (e4m3 of
    # x / scale, scale = amax / 448 per unit, remote units only), "unscaled"
    # (the scale lost: e4m3 of x, saturating), "native" (not narrowed).
    fp8 = "model"

    def __init__(self, group, head_dim, local_heads, dtype, lse_base, max_batch=None, protocol=None, scatter="head",
                 lse_dtype=torch.float32, wire="native"):
        import torch.distributed as dist
        from nccl_dcp._validate import CallSpec, dtype_name
        self.group, self.base, self.protocol, self.wire = group, lse_base, protocol or "LL128", wire
        self.spec = CallSpec(cp=dist.get_world_size(group), local_heads=local_heads, head_dim=head_dim,
                             dtype=dtype_name(dtype), device=0, scatter=scatter, lse_dtype=dtype_name(lse_dtype),
                             rank=dist.get_rank(group))

    def __call__(self, partial_out, partial_lse, out=None, out_lse=None, return_lse=False, row_counts=None,
                 seq_lens=None, query_start_loc=None):
        from nccl_dcp import reference
        if partial_lse.dtype != torch.float32 and self.spec.lse_dtype == "float32":
            raise AssertionError(f"partial_lse is {partial_lse.dtype}: the suite passes another LSE dtype")
        lse = torch.zeros_like(partial_lse) if self.broken else partial_lse
        if self.wire == "fp8":
            partial_out = self.narrowed(partial_out)
        merged, merged_lse = reference.a2a_lse_reduce(partial_out, lse, self.spec.local_heads, self.base, self.group,
                                                      self.spec.scatter, row_counts, seq_lens, query_start_loc)
        out = merged if out is None else out.copy_(merged)
        if out_lse is None and not return_lse:
            return out
        out_lse = merged_lse if out_lse is None else out_lse.copy_(merged_lse)
        return out, out_lse

    def narrowed(self, partial_out):
        """What the peers receive of this rank's partials on the fp8 wire:
        every unit bound for another rank through e4m3 (its own share
        exact), as ReferenceContext.fp8 says."""
        if self.fp8 == "native":
            return partial_out
        cp, hl = self.spec.cp, self.spec.local_heads
        x = partial_out.reshape(partial_out.shape[0], cp, hl, partial_out.shape[-1]).float()
        finite = torch.isfinite(x)
        amax = torch.where(finite, x.abs(), torch.zeros_like(x)).amax(dim=-1, keepdim=True)
        scale = amax / 448 if self.fp8 == "model" else torch.ones_like(amax)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale
        q = torch.where(finite, q, torch.full_like(q, float("nan")))
        own = (torch.arange(cp) == self.spec.rank).view(1, cp, 1, 1)
        return torch.where(own, x, q).to(partial_out.dtype).reshape(partial_out.shape)

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


ADDS = ("add_matrix", "add_mla_shape", "add_protocols", "add_modes", "add_wire", "add_dropins")


def worker(rank, store_path, broken, fp8, adds, verdicts):
    import types

    import torch.distributed as dist
    import gpu_torchrun as suite_module
    from nccl_dcp import _dropin

    store = dist.FileStore(store_path, WORLD)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD)
    try:
        ReferenceContext.broken = broken
        ReferenceContext.fp8 = fp8
        suite_module.DEVICE = "cpu"
        suite_module.nccl_dcp = types.SimpleNamespace(Context=ReferenceContext)
        _dropin.Context = ReferenceContext  # the drop-ins' library path, on the stand-in
        _dropin.uses_library = lambda tensor, group: True
        group = dist.group.WORLD
        suite = suite_module.Suite(group)
        for add in adds:
            getattr(suite_module, add)(suite, group)
        results = suite.run()
        if rank == 0:
            for name, bad, detail, _, _ in results:
                verdicts.put((name, bad, detail))  # a pipe write: delivered before the exit below
        dist.barrier()  # every rank is done with gloo
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)  # the parent sees the failure (its exit code)
    # Not gloo's teardown: destroy_process_group (or the interpreter's exit)
    # aborts now and then in its threads ("terminate called without an
    # active exception", SIGABRT: ~1 run in 20 here, after every verdict is
    # in). The verdicts are delivered; exit without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_suite(broken=False, fp8="model", adds=ADDS):
    """The suite's verdicts from rank 0 (the cases of `adds`), the ranks
    meeting on a FileStore in a fresh temporary directory."""
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        verdicts = mp.get_context("spawn").SimpleQueue()
        mp.start_processes(worker, args=(os.path.join(d, "store"), broken, fp8, adds, verdicts), nprocs=WORLD,
                           start_method="spawn")
        results = []
        while not verdicts.empty():
            results.append(verdicts.get())
        return results


def test_suite_passes_a_correct_collective():
    results = run_suite(broken=False)
    # 6 x (create + 9 calls + close), the MLA shape, 3 protocols; the modes: 3 x 2 LSE dtypes x (create + 6
    # calls + close), TOKEN's 4 host-count cases per LSE dtype; the fp8 wire: 2 dtypes x 3 protocols x
    # (create + 3 calls + close); the drop-ins: vLLM's 3 configurations x 3 batches, FlashInfer's 2 x (a
    # workspace + 3 batches), their close
    assert len(results) == 70 + 6 * 8 + 2 * 4 + 6 * 5 + 9 + 2 * 4 + 1
    failed = [r for r in results if r[1]]
    assert not failed, failed


def test_suite_fails_a_wrong_collective():
    results = run_suite(broken=True)
    calls = [r for r in results if r[0].startswith(("matrix/", "mla/", "protocol/", "modes/", "wire/", "dropin/"))
             and not r[0].endswith(("/create", "/close", "/create_workspace"))]
    passed = [r[0] for r in calls if not r[1]]
    # A batch of one row has no corner case and random LSEs: every call must catch the wrong weights.
    assert calls and not passed, passed


def wire_calls(results):
    """The fp8 calls' verdicts; an exception in one (a suite bug) is not a
    catch: it fails the test here."""
    calls = [r for r in results if r[0].startswith("wire/") and not r[0].endswith(("/create", "/close"))]
    crashed = [r for r in calls if r[2]]
    assert not crashed, crashed
    return calls


def test_fp8_bound_fails_a_lost_scale():
    """Partials x1000 past e4m3's 448: without the unit scale they saturate,
    far outside the per-element bound, in every call."""
    calls = wire_calls(run_suite(fp8="unscaled", adds=("add_wire",)))
    passed = [r[0] for r in calls if not r[1]]
    assert len(calls) == 18 and not passed, passed


def test_fp8_check_fails_a_wire_that_does_not_narrow():
    """With peers, some element must show e4m3's rounding: a native wire
    under config wire='fp8' fails (at world size 2 every call has peers)."""
    calls = wire_calls(run_suite(fp8="native", adds=("add_wire",)))
    passed = [r[0] for r in calls if not r[1]]
    assert len(calls) == 18 and not passed, passed


def expected_minimum(name):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "test", "expected_cases.txt"), encoding="utf-8") as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if len(words) == 2 and words[0] == name:
                return int(words[1])
    raise AssertionError(f"{name} is not in test/expected_cases.txt")


def test_torchrun_case_count_is_the_listed_one():
    """Every case gpu_torchrun.main registers (whatever the ranks: a case
    that cannot run skips), against test/expected_cases.txt's
    python_torchrun, which gpu-check.sh checks the GPU run's JUnit against:
    equal, so the minimum keeps up with the suite."""
    import types

    import gpu_torchrun as suite_module
    names = []
    stub = types.SimpleNamespace(cp=2, rank=0, case=lambda name, fn: names.append(name))
    suite_module.add_all(stub, None)
    assert len(names) == len(set(names)), "two cases share a name"
    assert len(names) == expected_minimum("python_torchrun")
